//! A freshly accepted connection: its transport setup (the PROXY header for `tcp`; TLS and the HTTP upgrade
//! for `wss` and `ws`) under the handshake deadline and slot, then the session.

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;

use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::opened::Opening;
use super::tcp::TcpSetupError;
use super::upgrade::{Carriages, Peer, UpgradeError};
use super::ws::{tls_handshake, websocket, WsSetup, WsSetupError};
use crate::config::WsSettings;
use crate::labels::{HandshakeFailure, RefusedReason};
use crate::limits::HandshakeSlot;
use crate::metrics::StageGauge;
use crate::rate::Bucket;
use crate::session::{self, within_handshake, ConnInfo, HandshakeCut, Player};
use crate::state::{Live, ProxyState};
use crate::tls::Tls;
use crate::transport::Transport;

/// How a bound listener accepts players.
pub(crate) enum Accept {
    Tcp { proxy_header: Option<Option<crate::trusted::TrustedProxies>> },
    Ws(WsSettings),
    Wss(WsSettings, Tls),
}

/// A freshly accepted connection: the transport setup (PROXY header, TLS, HTTP upgrade) runs under the same
/// handshake deadline and slot as the Minecraft handshake that follows.
pub(super) struct Conn {
    pub(super) state: Arc<ProxyState>,
    pub(super) slot: HandshakeSlot,
    pub(super) token: CancellationToken,
    pub(super) peer: SocketAddr,
    /// Its place in `moonbridge_sessions` (the handshake stage, to begin with).
    pub(super) stage: StageGauge,
    /// The configuration it runs on, from accept to end (a reload affects later connections).
    pub(super) live: Arc<Live>,
    /// The connection-rate limit was applied at accept (a WebSocket player connecting directly).
    pub(super) rate_checked: bool,
    /// Accepted while this instance drained (docs/network.md, "Drain"): a client that can move is sent on, any
    /// other login is told the restart message. A connection accepted before goes on as usual.
    pub(super) draining: bool,
}

/// A `ws`/`wss` connection: the balancer's PROXY header first when the listener asks for one (before TLS and
/// the upgrade). Returns the stream and who is at its other end.
async fn proxied(mut stream: TcpStream, peer: SocketAddr, ws: &WsSettings) -> Result<(TcpStream, Peer), SetupError> {
    if !ws.proxy_header {
        return Ok((stream, Peer { addr: peer, headers: true }));
    }
    let named = super::tcp::proxied_peer(&mut stream, peer, &ws.trusted).await?;
    Ok((stream, Peer { addr: named.unwrap_or(peer), headers: named.is_some() }))
}

/// Why a transport setup failed.
#[derive(Debug, thiserror::Error)]
enum SetupError {
    #[error(transparent)]
    Cut(#[from] HandshakeCut),
    #[error(transparent)]
    Tcp(#[from] TcpSetupError),
    #[error(transparent)]
    Ws(#[from] WsSetupError),
}

impl Conn {
    pub(super) async fn serve(self, stream: TcpStream, accept: &Accept) {
        let live = Arc::clone(&self.live);
        let deadline = Instant::now() + live.tunables.limits.handshake_timeout();
        let peer = self.peer;
        let metrics = Arc::clone(&self.state.metrics);
        let state = Arc::clone(&self.state);
        let v2 = live.tunables.limits.resume_window().is_some();
        let carriages =
            Carriages { v2, zstd: live.tunables.compression.enabled.then_some(live.tunables.compression.level) };
        // The same WebSocket setup for ws and wss, over TCP or over TLS.
        let (rate_checked, draining) = (self.rate_checked, self.draining);
        let s = |ws, secure, peer| WsSetup {
            ws,
            secure,
            peer,
            carriages,
            live: &live,
            state: &state,
            deadline,
            rate_checked,
            draining,
        };
        // Each transport's session future is boxed on its own, so a task holds only the state of its own
        // transport (a TLS session is several KiB larger than a TCP one).
        match accept {
            Accept::Tcp { proxy_header } => {
                let setup = async {
                    let (player, client) = super::tcp::setup(stream, peer, proxy_header.as_ref()).await?;
                    Ok(Opening::Session(player, client))
                };
                Box::pin(self.run(Transport::Tcp, deadline, setup)).await;
            }
            Accept::Ws(ws) => {
                let setup = async {
                    let (stream, peer) = proxied(stream, peer, ws).await?;
                    Ok(websocket(stream, s(ws, false, peer)).await?)
                };
                Box::pin(self.run(Transport::Ws, deadline, setup)).await;
            }
            Accept::Wss(ws, tls) => {
                let setup = async {
                    let (stream, peer) = proxied(stream, peer, ws).await?;
                    let stream = tls_handshake(stream, tls, &metrics).await?;
                    Ok(websocket(stream, s(ws, true, peer)).await?)
                };
                Box::pin(self.run(Transport::Wss, deadline, setup)).await;
            }
        }
    }

    /// The transport setup under the handshake deadline, then what it opened: the one place that dispatches
    /// an [`Opening`].
    async fn run<P: Player>(
        self,
        transport: Transport,
        deadline: Instant,
        setup: impl Future<Output = Result<Opening<P>, SetupError>>,
    ) {
        let limit = self.live.tunables.limits.handshake_timeout_seconds;
        let outcome = within_handshake(deadline, limit, &self.slot, &self.token, setup).await;
        let (player, client, moving) = match outcome.map_err(SetupError::from).and_then(|r| r) {
            Ok(Opening::Session(player, client)) => (player, client, None),
            Ok(Opening::Move(player, client, moving)) => (player, client, Some(moving)),
            Ok(Opening::Resumed) => return,
            Ok(Opening::Carried(carried)) => {
                // Out of the handshake (its slot freed), still counted in max_connections by this task.
                drop(self.slot);
                // Counted as in play while it carries the session (the owner counts the session itself too).
                self.stage.set(crate::metrics::Stage::Play);
                return carried.run().await;
            }
            // A health check, or a client a draining instance sent on (counted as a drain move).
            Err(SetupError::Ws(WsSetupError::Upgrade(UpgradeError::HealthCheck) | WsSetupError::SentOn)) => return,
            Err(reason) => {
                let metrics = &self.state.metrics;
                match &reason {
                    SetupError::Cut(HandshakeCut::Shutdown) => {}
                    SetupError::Cut(HandshakeCut::Timeout(_)) => metrics.handshake_failed(HandshakeFailure::Timeout),
                    SetupError::Cut(HandshakeCut::Evicted) => metrics.handshake_failed(HandshakeFailure::Evicted),
                    SetupError::Tcp(super::tcp::TcpSetupError::Untrusted(_)) => {
                        metrics.refused(RefusedReason::UntrustedProxyPeer)
                    }
                    // A balancer's health check that connects and closes: a closed connection, not a bad header.
                    SetupError::Tcp(super::tcp::TcpSetupError::ProxyHeader(
                        crate::proxy_header::ProxyHeaderError::Closed,
                    )) => metrics.handshake_failed(HandshakeFailure::Closed),
                    SetupError::Tcp(_) => metrics.handshake_failed(HandshakeFailure::BadProxyHeader),
                    SetupError::Ws(WsSetupError::Tls(_)) => metrics.handshake_failed(HandshakeFailure::Tls),
                    SetupError::Ws(WsSetupError::Upgrade(UpgradeError::Closed | UpgradeError::Io(_))) => {
                        metrics.handshake_failed(HandshakeFailure::Closed)
                    }
                    SetupError::Ws(WsSetupError::Upgrade(_)) => metrics.handshake_failed(HandshakeFailure::BadUpgrade),
                    SetupError::Ws(WsSetupError::BadRequest) => metrics.handshake_failed(HandshakeFailure::BadFrame),
                    SetupError::Ws(WsSetupError::Deadline) => metrics.handshake_failed(HandshakeFailure::Timeout),
                    SetupError::Ws(WsSetupError::RateLimited) => metrics.refused(RefusedReason::RateLimit),
                    // Returned before this match.
                    SetupError::Ws(WsSetupError::SentOn) => {}
                }
                if let Some(suppressed) = self.state.bad_input_log.allow() {
                    info!(client = %self.peer.ip(), suppressed, "connection closed before the handshake: {reason}");
                }
                return;
            }
        };
        let Self { state, slot, token, stage, live, rate_checked, draining, .. } = self;
        // A moving player's real address was limited with its request (listen/ws.rs).
        let rate_limited = !rate_checked
            && moving.is_none()
            && !state.rate.allow(&live.tunables.rate_limits, client.ip(), Bucket::Connection);
        let info = ConnInfo { client, transport, rate_limited, draining };
        let accepted = session::serve::Accepted { info, state, live, slot, shutdown: token, deadline, stage };
        session::serve::serve(player, accepted, moving).await;
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::{Config, Transport};
    use crate::metrics::Metrics;
    use tokio::net::TcpListener;

    /// A session's task is allocated at its largest state for its whole life, so rarely used states (online
    /// login, status, legacy ping, the AES key schedules) are boxed. This keeps an idle TCP session small: the
    /// bound is what `idle_rss` measures per session (about 6 KiB) minus the sockets' kernel-side share, plus
    /// about 300 bytes for operations (the stage gauge, a byte counter per relay direction, the login outcome,
    /// the session's configuration snapshot for live reload; the lanes' state): 5,816 bytes when this bound was last
    /// raised.
    #[tokio::test]
    async fn session_tasks_stay_small() {
        let settings = Config::default().settings().unwrap();
        let state = Arc::new(ProxyState::new(&settings, None, Arc::new(Metrics::new().unwrap())));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = listener.local_addr().unwrap();
        let stream = TcpStream::connect(peer).await.unwrap();
        let (slot, _) = state.handshaking.enter();
        let stage = state.metrics.stage(Transport::Tcp, false);
        let live = state.live();
        let conn = Conn {
            state: Arc::clone(&state),
            slot,
            token: CancellationToken::new(),
            peer,
            stage,
            live,
            rate_checked: false,
            draining: false,
        };
        let setup = async {
            let (player, client) = super::super::tcp::setup(stream, peer, None).await?;
            Ok(Opening::Session(player, client))
        };
        let tcp = conn.run(Transport::Tcp, Instant::now(), setup);
        let size = std::mem::size_of_val(&tcp);
        // 5,472 bytes before the transfer layer, 5,520 with it (the player's identity kept for later logins,
        // boxed; the switchboard boxed too); 5,552 once the relay follows wide dialects (a frame limit per
        // scanner, 5-byte prefixes, the unfollowed-stream counter per direction); 5,608 with the serverbound
        // filter's state carried from the bytes sent with Login Start into the relay; 5,816 with the lanes (their
        // queue boxed, its rare paths' futures boxed).
        assert!(size < 5 * 1024 + 768, "a TCP session task is {size} bytes");
    }
}
