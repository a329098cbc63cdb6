//! The raw player of the soak and the capacity run: an async task's connection to a proxy over tcp (Minecraft
//! frames as they are), ws or wss (tokio-tungstenite, over tokio-rustls for wss), offering a carriage
//! ([`carriage`]) or none, which can be read message by message, closed, or cut (a reset or a FIN).

pub mod carriage;

use std::net::SocketAddr;
use std::os::fd::{AsRawFd, RawFd};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use futures_util::{SinkExt, StreamExt};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;

use crate::peers::TransportArg;

/// A byte stream a WebSocket runs over (TCP, or TLS over TCP).
pub trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

/// How a player reaches its proxy.
#[derive(Clone)]
pub struct Reach {
    pub transport: TransportArg,
    /// The TLS connector (`wss` only).
    pub tls: Option<tokio_rustls::TlsConnector>,
    /// The subprotocol offered (none to a plain WebSocket bridge); the proxy must select it.
    pub offer: Option<&'static str>,
    /// Bytes one TCP read takes (tcp).
    pub read_chunk: usize,
}

/// A player's connection: plain TCP or a WebSocket (`ws` or `wss`, with the raw socket under it for cutting).
pub enum Link {
    Tcp(TcpStream, Vec<u8>),
    Ws(Box<tokio_tungstenite::WebSocketStream<Box<dyn Io>>>, RawFd),
}

/// What a player receives.
pub enum Incoming {
    /// Stream bytes (TCP) or a Binary message's payload.
    Data(bytes::Bytes),
    /// A WebSocket Close.
    Close(Option<CloseFrame>),
    /// The end of the stream (TCP FIN, or the WebSocket's stream without a Close).
    Ended,
    /// Anything else (Ping, Pong, Text): nothing to do.
    Other,
}

impl Link {
    /// Connects to `addr` as `reach` says (the WebSocket at `/mc` on `localhost`).
    pub async fn connect(addr: SocketAddr, reach: &Reach) -> anyhow::Result<Self> {
        use tokio_tungstenite::tungstenite::client::IntoClientRequest;
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        if reach.transport == TransportArg::Tcp {
            return Ok(Self::Tcp(tcp, vec![0; reach.read_chunk]));
        }
        let fd = tcp.as_raw_fd();
        let (io, scheme): (Box<dyn Io>, _) = if reach.transport == TransportArg::Wss {
            let tls = reach.tls.as_ref().context("wss needs a TLS connector")?;
            (Box::new(tls.connect(rustls::pki_types::ServerName::try_from("localhost")?, tcp).await?), "wss")
        } else {
            (Box::new(tcp), "ws")
        };
        let mut request = format!("{scheme}://localhost:{}/mc", addr.port()).into_client_request()?;
        if let Some(offer) = reach.offer {
            request.headers_mut().insert("Sec-WebSocket-Protocol", offer.parse()?);
        }
        let (ws, response) = tokio_tungstenite::client_async(request, io).await?;
        let selected = response.headers().get("Sec-WebSocket-Protocol").and_then(|v| v.to_str().ok());
        if selected != reach.offer {
            bail!("offered {:?}, the proxy selected {selected:?}", reach.offer);
        }
        Ok(Self::Ws(Box::new(ws), fd))
    }

    /// Sends stream bytes (TCP) or a Binary message.
    pub async fn send_binary(&mut self, b: Vec<u8>) -> anyhow::Result<()> {
        match self {
            Self::Tcp(s, _) => s.write_all(&b).await?,
            Self::Ws(ws, _) => ws.send(Message::Binary(b.into())).await?,
        }
        Ok(())
    }

    /// A Text message (carriage v2's `ack`); TCP players never send one.
    pub async fn send_text(&mut self, t: String) -> anyhow::Result<()> {
        if let Self::Ws(ws, _) = self {
            ws.send(Message::Text(t.into())).await?;
        }
        Ok(())
    }

    /// The next thing received (cancel-safe); an error (the `std::io::Error` or the tungstenite error) when
    /// the connection failed.
    pub async fn next(&mut self) -> anyhow::Result<Incoming> {
        match self {
            Self::Tcp(s, buf) => {
                let n = s.read(buf).await?;
                Ok(match n {
                    0 => Incoming::Ended,
                    n => Incoming::Data(bytes::Bytes::copy_from_slice(buf.get(..n).unwrap_or_default())),
                })
            }
            Self::Ws(ws, _) => Ok(match ws.next().await {
                Some(Ok(Message::Binary(b))) => Incoming::Data(b),
                Some(Ok(Message::Close(c))) => Incoming::Close(c),
                Some(Ok(_)) => Incoming::Other,
                Some(Err(e)) => return Err(e.into()),
                None => Incoming::Ended,
            }),
        }
    }

    /// Closes: a WebSocket Close (not waited for), or the TCP write side shut.
    pub async fn close(&mut self) {
        match self {
            Self::Tcp(s, _) => {
                let _ = s.shutdown().await;
            }
            Self::Ws(ws, _) => {
                let _ = ws.as_mut().close(None).await;
            }
        }
    }

    /// Closes and, on a WebSocket, waits (2 s at most each) for the Close to go and the proxy's to come.
    pub async fn close_and_drain(&mut self) {
        match self {
            Self::Ws(ws, _) => {
                let _ = tokio::time::timeout(
                    Duration::from_secs(2),
                    tokio_tungstenite::WebSocketStream::close(&mut **ws, None),
                )
                .await;
                let _ =
                    tokio::time::timeout(Duration::from_secs(2), async { while let Some(Ok(_)) = ws.next().await {} })
                        .await;
            }
            Self::Tcp(s, _) => {
                let _ = s.shutdown().await;
            }
        }
    }

    /// Cuts the TCP connection: a reset (linger 0, then close) or a FIN.
    pub fn cut(&mut self, reset: bool) {
        let fd = match self {
            Self::Ws(_, fd) => *fd,
            Self::Tcp(s, _) => s.as_raw_fd(),
        };
        // The fd belongs to this connection and stays open while `self` lives.
        let raw = BorrowedRaw(fd);
        let sock = socket2::SockRef::from(&raw);
        if reset {
            let _ = sock.set_linger(Some(Duration::ZERO));
            let _ = sock.shutdown(std::net::Shutdown::Both);
        } else {
            let _ = sock.shutdown(std::net::Shutdown::Write);
        }
    }
}

/// A raw fd for `SockRef` (borrowed; never closed here).
struct BorrowedRaw(RawFd);

impl std::os::fd::AsFd for BorrowedRaw {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // The fd is owned by a live connection for as long as this value is used.
        #[allow(unsafe_code)]
        // SAFETY: `Link::cut` only builds this from the fd of a connection it holds, and uses it at once.
        unsafe {
            std::os::fd::BorrowedFd::borrow_raw(self.0)
        }
    }
}

/// A TLS connector that trusts the CA certificates in the PEM file `ca`.
pub fn tls_connector(ca: &std::path::Path) -> anyhow::Result<tokio_rustls::TlsConnector> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca)? {
        roots.add(c?)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}
