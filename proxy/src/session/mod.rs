//! One player connection, from its first byte to its end, whatever the transport.
//!
//! Stages, one file each:
//! 1. [`opening`] — **handshake** (one deadline, `handshake_timeout_seconds`, and one `max_handshaking` slot): a
//!    legacy `0xFE` ping, or a handshake frame and — for login — the Login Start frame. Frames here are limited
//!    to the largest legal handshake and Login Start, so nothing bigger is ever buffered.
//! 2. [`login`] — **route** by the handshake hostname (Forge marker and one trailing dot stripped, lowercased),
//!    **online mode** only ([`online`]: Encryption Request/Response within `login_timeout_seconds`, AES-CFB8 on
//!    the player's stream, the session server's `hasJoined`; a failure is a Login Disconnect and no backend is
//!    contacted), then the **backend**: connect (`backend_connect_timeout_seconds`), send the handshake (with
//!    forwarding applied), Login Start and every byte that followed, in one write; wait for the backend's first
//!    answer (`login_timeout_seconds`). Failures become a Login Disconnect with a clear reason.
//! 3. [`status`] — server-list **status** exchanges and **legacy pings**, relayed to the backend or answered
//!    by the proxy when it is unreachable.
//! 4. **Relay** bytes both ways ([`crate::relay`]).
//!
//! The transport is behind [`Player`]; a stage works on a [`Session`] (the player, who it is, the proxy
//! state and the shutdown signal).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use tokio::net::TcpStream;
use tokio::time::timeout_at;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use crate::limits::HandshakeSlot;
use crate::relay::{RelayReport, RelayStart};
use crate::state::ProxyState;

mod login;
mod online;
mod opening;
mod status;

/// The transport-specific half of a session: how bytes reach the player and how the relay runs.
pub(crate) trait Player: Send {
    /// Reads more stream bytes into `buf` (appending, at most about `RELAY_CHUNK`); `Ok(0)` at end of stream.
    async fn read_some(&mut self, buf: &mut BytesMut) -> io::Result<usize>;
    /// Sends stream bytes to the player as one write (or one WebSocket message).
    async fn send(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Ends the connection orderly after the last `send`.
    async fn finish(&mut self, how: Finish);
    /// Relays until either side ends. The backend's first answer has already been sent to the player.
    async fn relay(&mut self, backend: TcpStream, relay: RelayStart<'_>) -> RelayReport;
    /// WebSocket messages received from and sent to the player, for WebSocket transports.
    fn message_counts(&self) -> Option<(u64, u64)> {
        None
    }
}

/// Why the proxy ends a connection (WebSocket close codes are chosen from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finish {
    /// Normal end (WebSocket 1000).
    Normal,
    /// Proxy shutdown (1001).
    Shutdown,
    /// The player broke the protocol (1002).
    ProtocolError,
    /// The backend could not be reached (1011).
    BackendUnavailable,
}

/// Who a connection is.
#[derive(Clone, Debug)]
pub(crate) struct ConnInfo {
    /// The player's real address (TCP peer, or the one a trusted proxy vouched for).
    pub(crate) client: SocketAddr,
}

/// What every stage works with.
pub(crate) struct Session<'a, P> {
    pub(crate) player: &'a mut P,
    pub(crate) info: &'a ConnInfo,
    pub(crate) state: &'a Arc<ProxyState>,
    pub(crate) shutdown: &'a CancellationToken,
}

/// The summary logged when a session ends.
struct Summary {
    player: Option<String>,
    backend: Option<String>,
    up: u64,
    down: u64,
    reason: String,
}

impl Summary {
    fn new(reason: impl Into<String>) -> Self {
        Self { player: None, backend: None, up: 0, down: 0, reason: reason.into() }
    }
}

/// What cut the handshake stage short.
#[derive(Debug, thiserror::Error)]
pub(crate) enum HandshakeCut {
    #[error("handshake not complete within {0}s")]
    Timeout(u64),
    #[error("evicted: too many connections in the handshake stage")]
    Evicted,
    #[error("proxy shutdown")]
    Shutdown,
}

/// Runs `work` under the handshake stage's rules: one deadline for the whole stage (transport setup and
/// Minecraft handshake together), eviction by a newer connection when `max_handshaking` is full, and
/// shutdown.
pub(crate) async fn within_handshake<T>(
    deadline: tokio::time::Instant,
    limit_seconds: u64,
    slot: &HandshakeSlot,
    shutdown: &CancellationToken,
    work: impl std::future::Future<Output = T>,
) -> Result<T, HandshakeCut> {
    tokio::select! {
        r = timeout_at(deadline, work) => r.map_err(|_| HandshakeCut::Timeout(limit_seconds)),
        () = slot.evicted() => Err(HandshakeCut::Evicted),
        () = shutdown.cancelled() => Err(HandshakeCut::Shutdown),
    }
}

/// Runs a whole session and logs its end. `deadline` ends the handshake stage (it started at accept, so the
/// transport setup before it counted too).
pub(crate) async fn serve<P: Player>(
    mut player: P,
    info: ConnInfo,
    state: Arc<ProxyState>,
    slot: HandshakeSlot,
    shutdown: CancellationToken,
    deadline: tokio::time::Instant,
) {
    let started = Instant::now();
    let summary = {
        let session = Session { player: &mut player, info: &info, state: &state, shutdown: &shutdown };
        run(session, slot, deadline).await
    };
    let secs = started.elapsed().as_secs_f64();
    let (messages_in, messages_out) = match player.message_counts() {
        Some((i, o)) => (i.to_string(), o.to_string()),
        None => ("-".to_string(), "-".to_string()),
    };
    info!(
        client = %info.client.ip(),
        player = summary.player.as_deref().unwrap_or("-"),
        backend = summary.backend.as_deref().unwrap_or("-"),
        bytes_up = summary.up,
        bytes_down = summary.down,
        ws_messages_in = %messages_in,
        ws_messages_out = %messages_out,
        duration_s = format_args!("{secs:.3}"),
        reason = %summary.reason,
        "session ended"
    );
}

async fn run<P: Player>(s: Session<'_, P>, slot: HandshakeSlot, deadline: tokio::time::Instant) -> Summary {
    let limit = s.state.limits.handshake_timeout_seconds;
    let opening = match within_handshake(deadline, limit, &slot, s.shutdown, opening::read(&mut *s.player)).await {
        Ok(Ok(o)) => o,
        Ok(Err(opening::OpeningError::Closed)) => return Summary::new("closed during handshake"),
        Ok(Err(e)) => {
            if let Some(suppressed) = s.state.bad_input_log.allow() {
                info!(client = %s.info.client.ip(), suppressed, "closing connection: {e}");
            }
            s.player.finish(Finish::ProtocolError).await;
            return Summary::new(format!("bad input: {e}"));
        }
        Err(cut) => {
            let finish = match cut {
                HandshakeCut::Timeout(_) => {
                    if let Some(suppressed) = s.state.bad_input_log.allow() {
                        debug!(client = %s.info.client.ip(), suppressed, "closing connection: {cut}");
                    }
                    Finish::ProtocolError
                }
                HandshakeCut::Evicted => Finish::ProtocolError,
                HandshakeCut::Shutdown => Finish::Shutdown,
            };
            s.player.finish(finish).await;
            return Summary::new(match cut {
                HandshakeCut::Timeout(_) => "handshake timeout".to_string(),
                other => other.to_string(),
            });
        }
    };
    match opening {
        opening::Opening::Legacy { ping, raw } => {
            drop(slot);
            Box::pin(status::legacy_ping(s, ping, raw, deadline)).await
        }
        opening::Opening::Status { handshake, rest } => {
            drop(slot);
            Box::pin(status::status(s, handshake, rest)).await
        }
        // Online mode keeps the handshake slot until the Encryption Response is in: an unauthenticated
        // connection counts against `max_handshaking` until then.
        opening::Opening::Login { handshake, login, login_raw, rest } => {
            login::login(s, login::LoginRequest { handshake, login, login_raw, rest }, slot).await
        }
    }
}
