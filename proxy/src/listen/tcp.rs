//! A player on plain TCP: the optional PROXY header in front (behind a load balancer) and the session's view of
//! the socket.

use std::future::Future;
use std::io;
use std::net::SocketAddr;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use crate::proxy_header::{read_header, read_header_exactly, ProxyHeaderError};
use crate::relay::{close_backend, BackendSide, RelayReport, RelayStart};
use crate::session::{Finish, Player};
use crate::trusted::TrustedProxies;
use crate::wire::{discard_until_eof, PlayerGone, EARLY_DATA_LIMIT, LINGER};

/// A player on a plain TCP connection.
pub(crate) struct TcpPlayer {
    stream: TcpStream,
    /// Bytes already read and not yet taken: after a PROXY header, or sent ahead during the login stage. Served
    /// before the socket; the relay sends them to the backend first.
    prefix: BytesMut,
}

/// Why a TCP connection was refused before its handshake.
#[derive(Debug, thiserror::Error)]
pub(crate) enum TcpSetupError {
    #[error("{0} is not in trusted_proxies and may not send a PROXY header")]
    Untrusted(std::net::IpAddr),
    #[error(transparent)]
    ProxyHeader(#[from] ProxyHeaderError),
}

/// Accepts a TCP player: with `proxy_header` (a `tcp` listener with `proxy_protocol`), reads the PROXY header
/// first (from any peer, or only from trusted ones) and takes the player's address from it. Returns the player
/// and that address.
pub(crate) async fn setup(
    mut stream: TcpStream,
    peer: SocketAddr,
    proxy_header: Option<&Option<TrustedProxies>>,
) -> Result<(TcpPlayer, SocketAddr), TcpSetupError> {
    let Some(trusted) = proxy_header else {
        return Ok((TcpPlayer { stream, prefix: BytesMut::new() }, peer));
    };
    if let Some(t) = trusted {
        if !t.contains(peer.ip()) {
            return Err(TcpSetupError::Untrusted(peer.ip().to_canonical()));
        }
    }
    let (addr, prefix) = read_header(&mut stream).await?;
    Ok((TcpPlayer { stream, prefix }, addr.unwrap_or(peer)))
}

/// A `ws`/`wss` listener with `proxy_protocol`: the PROXY header in front of TLS and the upgrade, accepted from a
/// peer in `trusted` only (`--check-config` requires the list there) and read exactly (the socket then starts with what
/// follows it). Returns the player's address it names (`None` for `LOCAL` or `UNKNOWN`: the balancer itself).
///
/// # Errors
/// [`TcpSetupError::Untrusted`] for a peer outside `trusted`; [`TcpSetupError::ProxyHeader`] for a bad header.
pub(crate) async fn proxied_peer(
    stream: &mut TcpStream,
    peer: SocketAddr,
    trusted: &TrustedProxies,
) -> Result<Option<SocketAddr>, TcpSetupError> {
    if !trusted.contains(peer.ip()) {
        return Err(TcpSetupError::Untrusted(peer.ip().to_canonical()));
    }
    Ok(read_header_exactly(stream).await?)
}

impl Player for TcpPlayer {
    async fn read_some(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len();
            buf.extend_from_slice(&self.prefix);
            self.prefix.advance(n);
            return Ok(n);
        }
        self.stream.read_buf(buf).await
    }

    async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes).await
    }

    async fn finish(&mut self, how: Finish) {
        let _ = self.stream.shutdown().await;
        if !matches!(how, Finish::ProtocolError | Finish::Policy) {
            // Lingering close: read until the player closes too (or briefly), so a reset cannot discard the
            // message just sent (nothing was sent to a player that broke the protocol or a limit).
            discard_until_eof(&self.stream, LINGER).await;
        }
    }

    async fn during<T>(&mut self, work: impl Future<Output = T>) -> Result<T, PlayerGone> {
        tokio::pin!(work);
        loop {
            let room = self.prefix.len() < EARLY_DATA_LIMIT;
            tokio::select! {
                biased;
                r = &mut work => return Ok(r),
                r = self.stream.readable(), if room => {
                    if let Err(e) = r {
                        return Err(PlayerGone::Left(e.to_string()));
                    }
                    self.prefix.reserve(EARLY_DATA_LIMIT - self.prefix.len());
                    match self.stream.try_read_buf(&mut self.prefix) {
                        Ok(0) => return Err(PlayerGone::Left("connection closed".into())),
                        Ok(_) => {}
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
                        Err(e) => return Err(PlayerGone::Left(e.to_string())),
                    }
                }
            }
        }
    }

    async fn relay(&mut self, mut backend: BackendSide, start: RelayStart<'_>) -> RelayReport {
        let early = self.prefix.split().to_vec();
        let mut report = crate::relay::tcp::run(&self.stream, &mut backend, start, early).await;
        report.visited = backend.visited().map(<[String]>::to_vec);
        // A lingering close, whatever ended the relay: FIN, then read (and drop) what the player still sends
        // for a moment, so closing with unread bytes does not turn into a reset that could discard the last
        // bytes sent to the player. The backend's close (when it did not end the stream itself) meanwhile.
        let player = async {
            let _ = socket2::SockRef::from(&self.stream).shutdown(std::net::Shutdown::Write);
            discard_until_eof(&self.stream, LINGER).await;
        };
        tokio::join!(Box::pin(close_backend(&mut backend, &report.end)), player);
        report
    }
}
