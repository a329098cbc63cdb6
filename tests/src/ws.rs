//! WebSocket and TLS client helpers: connect (with a TLS client trusting a test CA), read bytes and close
//! codes, raw HTTP requests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::timeout;
pub use tokio_tungstenite::tungstenite::Message;
pub use tokio_tungstenite::WebSocketStream;

use crate::{read_to_close, STEP};

/// A TLS client configuration that trusts exactly `ca` (a PEM file), offering `versions`.
pub fn tls_client_config(
    ca: &std::path::Path,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// Any byte stream a WebSocket client can run on.
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// Opens a WebSocket to `url` (`ws://127.0.0.1:port/path` or `wss://localhost:port/path`) over a TCP
/// connection to `addr`, with extra request headers. For `wss` the server is verified against `ca`.
pub async fn ws_connect(
    addr: SocketAddr,
    url: &str,
    headers: &[(&str, &str)],
    ca: Option<&std::path::Path>,
) -> Result<
    (WebSocketStream<Box<dyn Io>>, tokio_tungstenite::tungstenite::handshake::client::Response),
    tokio_tungstenite::tungstenite::Error,
> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = url.into_client_request()?;
    for (k, v) in headers {
        req.headers_mut().insert(
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    let tcp = TcpStream::connect(addr).await.map_err(tokio_tungstenite::tungstenite::Error::Io)?;
    tcp.set_nodelay(true).unwrap();
    let io: Box<dyn Io> = if url.starts_with("wss://") {
        let config =
            tls_client_config(ca.expect("wss needs a CA"), &[&rustls::version::TLS13, &rustls::version::TLS12]);
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(tokio_tungstenite::tungstenite::Error::Io)?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    tokio_tungstenite::client_async(req, io).await
}

/// Reads messages until a Close arrives (or the stream ends) and returns its code, answering Pings.
pub async fn ws_close_code<S: Io>(ws: &mut WebSocketStream<S>, within: Duration) -> Option<u16> {
    use futures_util::StreamExt;
    timeout(within, async {
        while let Some(m) = ws.next().await {
            match m {
                Ok(Message::Close(f)) => return f.map(|f| u16::from(f.code)),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    })
    .await
    .expect("close within the time limit")
}

/// Reads binary messages until `n` bytes arrived; returns them and how many messages carried them.
pub async fn ws_read_bytes<S: Io>(ws: &mut WebSocketStream<S>, n: usize, within: Duration) -> (Vec<u8>, usize) {
    use futures_util::StreamExt;
    let mut out = Vec::new();
    let mut messages = 0;
    timeout(within, async {
        while out.len() < n {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => {
                    messages += 1;
                    out.extend_from_slice(&b);
                }
                Some(Ok(Message::Close(f))) => panic!("closed while reading: {f:?}"),
                Some(Ok(_)) => {}
                Some(Err(e)) => panic!("read error: {e}"),
                None => panic!("stream ended after {} bytes", out.len()),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{n} bytes not received within {within:?}"));
    (out, messages)
}

/// Sends a raw HTTP request and returns the response head (up to the blank line) and whether the
/// connection was closed afterwards.
pub async fn raw_http(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let (got, _) = read_to_close(&mut s, STEP).await;
    String::from_utf8_lossy(&got).into_owned()
}
