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
//! 3. [`status`] — server-list **status** exchanges, answered by the proxy with the backend's Status Response
//!    (cached for `[status] cache_seconds`), and **legacy pings**, relayed with their answer cached; the
//!    offline message when the backend is unreachable.
//! 4. **Relay** bytes both ways ([`crate::relay`]).
//!
//! The transport is behind [`Player`]; a stage works on a [`Session`] (the player, who it is, the proxy
//! state and the shutdown signal). [`serve`] runs the stages in order and logs the session's end.

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use bytes::BytesMut;
use tokio::time::timeout_at;
use tokio_util::sync::CancellationToken;

use crate::labels::LoginOutcome;
use crate::limits::HandshakeSlot;
use crate::metrics::StageGauge;
use crate::relay::{BackendSide, RelayReport, RelayStart};
use crate::state::{Live, ProxyState};
use crate::transport::{Carriage, Transport};
pub(crate) use crate::wire::PlayerGone;

mod arrive;
mod login;
mod online;
mod opening;
pub(crate) mod serve;
mod status;

/// The transport-specific half of a session: how bytes reach the player and how the relay runs.
pub(crate) trait Player: Send {
    /// Reads more stream bytes into `buf` (appending, at most about `RELAY_CHUNK`); `Ok(0)` at end of stream.
    async fn read_some(&mut self, buf: &mut BytesMut) -> io::Result<usize>;
    /// Sends stream bytes to the player as one write (or one WebSocket message).
    async fn send(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Ends the connection orderly after the last `send`.
    async fn finish(&mut self, how: Finish);
    /// Runs `work` (a wait on the backend or the session server) while watching the player: a WebSocket
    /// player is kept alive (Pings on schedule, Pongs to its Pings); bytes the player sends meanwhile are kept,
    /// bounded, and reach the backend first when the relay starts.
    ///
    /// # Errors
    /// [`PlayerGone`] when the player leaves (EOF, reset, Close, silence) or breaks the protocol; `work` is
    /// dropped then, so no backend is opened or kept for a player who is gone.
    async fn during<T>(&mut self, work: impl Future<Output = T>) -> Result<T, PlayerGone>;
    /// Relays until either side ends. The backend's first answer has already been sent to the player.
    async fn relay(&mut self, backend: BackendSide, relay: RelayStart<'_>) -> RelayReport;
    /// The player's client follows a draining instance's `move` (carriage v2 over WebSocket with
    /// [`moonbridge_protocol::ws::v2::MOVE_HEADER`]): docs/network.md, "Drain".
    fn can_move(&self) -> bool {
        false
    }

    /// A moved session's carriage v2 counts so far (stream bytes received from and sent to the player).
    fn continue_counts(&mut self, _received: u64, _sent: u64) {}

    /// How the player's stream is carried: [`Carriage::None`] over TCP.
    fn carriage(&self) -> Carriage {
        Carriage::None
    }

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
    /// The connection hit a limit before it logged in: the handshake deadline, or eviction from the
    /// handshake slots (1008).
    Policy,
    /// The backend could not be reached (1011).
    BackendUnavailable,
    /// A `moving` request was refused (4006): the client goes on with the draining instance.
    MoveRefused,
}

impl Finish {
    /// How to end a connection whose player left or broke the protocol during a wait.
    pub(crate) fn after(gone: &PlayerGone) -> Self {
        if matches!(gone, PlayerGone::Fault(_)) {
            Self::ProtocolError
        } else {
            Self::Normal
        }
    }
}

/// Who a connection is.
#[derive(Clone, Debug)]
pub(crate) struct ConnInfo {
    /// The player's real address (TCP peer, or the one a trusted proxy vouched for).
    pub(crate) client: SocketAddr,
    /// The listener's transport.
    pub(crate) transport: Transport,
    /// Its address opened connections faster than `[rate_limits]` allow: it is told so (a Login Disconnect
    /// for a login) once its handshake is read, and closed.
    pub(crate) rate_limited: bool,
    /// Accepted while this instance drained (docs/network.md, "Drain"): a login is told the restart message.
    pub(crate) draining: bool,
}

/// What every stage works with.
pub(crate) struct Session<'a, P> {
    pub(crate) player: &'a mut P,
    pub(crate) info: &'a ConnInfo,
    pub(crate) state: &'a Arc<ProxyState>,
    /// The configuration this session runs on (taken when it started; a reload affects later sessions).
    pub(crate) live: &'a Arc<Live>,
    pub(crate) shutdown: &'a CancellationToken,
    /// The connection's place in `moonbridge_sessions`.
    pub(crate) stage: &'a StageGauge,
}

/// The summary logged when a session ends.
pub(crate) struct Summary {
    pub(crate) player: Option<String>,
    pub(crate) backend: Option<String>,
    pub(crate) up: u64,
    pub(crate) down: u64,
    pub(crate) reason: String,
    /// For a login that failed: the `outcome` label of `moonbridge_logins_total` (counted when the session
    /// ends; a successful login is counted when play begins).
    pub(crate) outcome: Option<LoginOutcome>,
}

impl Summary {
    pub(crate) fn new(reason: impl Into<String>) -> Self {
        Self { player: None, backend: None, up: 0, down: 0, reason: reason.into(), outcome: None }
    }

    /// Takes the relay's end: the byte counts, the reason (a kick through `stop` first) and, after server
    /// switches, every backend the player was on, in order.
    pub(crate) fn relay_ended(&mut self, report: crate::relay::RelayReport, stop: &crate::players::Stop) {
        self.up = report.up;
        self.down = report.down;
        self.reason = match stop.kicked() {
            Some(reason) => format!("kicked: {reason}"),
            None => report.end.to_string(),
        };
        if let Some(visited) = report.visited {
            self.backend = Some(visited.join(","));
        }
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
