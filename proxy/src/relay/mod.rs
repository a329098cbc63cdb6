//! The relay: bytes both ways between a player and a backend once the backend has answered the login.
//!
//! One policy for every transport, written once here and used by both loops:
//! - [`Flow`]: per direction, the byte count, the frame scanner that knows where clientbound frames end,
//!   and online mode's AES-CFB8 (decrypt what the player sends, encrypt what it receives), all in place on the
//!   batch in flight;
//! - [`crate::wire::within_stall`]: a side that accepts no byte for `limits.write_stall_timeout_seconds` while
//!   the proxy has data for it ends the relay (a peer that stopped reading cannot pin a session);
//! - [`inject_shutdown`]: on proxy shutdown the player first gets what the backend already sent, then, when
//!   the clientbound stream is plaintext and between two frames, a Play Disconnect with
//!   [`SHUTDOWN_REASON`];
//! - [`Follow`]: for a player who can be moved, the transfer watch ([`moonbridge_protocol::transfer::watch`]):
//!   a frame head a batch ends in is held for the next batch, the player's `BungeeCord` messages are dropped,
//!   and at the first frame the transfer layer must act on (or the loss of a backend with a fallback, or a
//!   command from another session) the loop's backend side becomes the switchboard ([`BackendSide`]), on the
//!   same sockets;
//! - [`RelayEnd`]: how a relay ended, for the session log.
//!
//! The loops: [`tcp`] (two socket pumps, one read and one write per batch, zero-copy through a per-thread
//! scratch buffer) and [`ws`] (WebSocket messages in, backend bytes out, and the other way; keepalive Pings;
//! close codes; the one loop for carriage v1 and v2, whose additions are [`v2`] and the session over links
//! [`ws_resume`]). Where a WebSocket message becomes stream bytes: [`crate::ws_link`].
//!
//! Files, bottom-up: [`flow`] (a direction's policy and the batch read), [`handover`] (the backend side: the
//! connection or the switchboard), this file (how a relay ends, the shutdown step), [`tcp`], [`resume`],
//! [`v2`], [`ws`], [`ws_resume`].

use std::io;
use std::time::Duration;

use moonbridge_protocol::packets::{chat_text, Packet, PlayDisconnect};

use crate::wire::{Side, LINGER};

mod flow;
mod handover;
pub(crate) mod lanes;
mod move_out;
pub(crate) mod tcp;
mod v2;
pub(crate) mod ws;
pub(crate) mod ws_resume;

pub(crate) use flow::{read_batch, ClientCipher, Flow, Follow, RelayStart, UpStart, Watching};
pub(crate) use handover::BackendSide;

/// After one side sent FIN, how long the other direction may still run before both sockets are closed.
pub(crate) const HALF_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a shutdown waits for pending bytes and the disconnect packet to reach the player.
pub(crate) const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// Shown to players when the proxy stops.
pub(crate) const SHUTDOWN_REASON: &str = "Proxy is restarting, please reconnect in a moment";

/// What the relay stage reports.
pub(crate) struct RelayReport {
    pub(crate) up: u64,
    pub(crate) down: u64,
    pub(crate) end: RelayEnd,
    /// Every backend the player was on, in order, when the switchboard took over (filled in by the caller).
    pub(crate) visited: Option<Vec<String>>,
}

/// Why a relay ended.
#[derive(Debug)]
pub(crate) enum RelayEnd {
    /// That side closed first (FIN, WebSocket Close), and the other finished in time.
    Closed(Side),
    /// That side closed first, and the other did not finish within [`HALF_CLOSE_TIMEOUT`].
    HalfCloseTimeout(Side),
    /// An I/O or protocol error on that side (a write stall is a `TimedOut` error on the side that stalled).
    Error(Side, io::Error),
    /// The proxy is shutting down.
    Shutdown,
    /// Carriage v2: the player's connection was lost and no resume came within the window (seconds).
    NotResumed { window: u64 },
    /// The player moved to another instance of the network (a drain).
    Moved,
}

/// Ends the backend connection once the relay is over. When the relay ended for the player's sake (its error
/// or write stall, a connection not resumed) or a shutdown, the backend has not ended its stream: a FIN, then
/// what it still sends is read and dropped for at most [`LINGER`], so it sees the end of its stream rather than
/// a reset of the bytes the proxy had not read yet. Otherwise (the backend closed or failed, the player closed
/// and the relay already passed that on, the player moved) nothing.
pub(crate) async fn close_backend(backend: &mut BackendSide, end: &RelayEnd) {
    if matches!(end, RelayEnd::Error(Side::Player, _) | RelayEnd::NotResumed { .. } | RelayEnd::Shutdown) {
        backend.shutdown_write();
        backend.linger(LINGER).await;
    }
}

impl std::fmt::Display for RelayEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Closed(s) => write!(f, "{s} closed"),
            Self::HalfCloseTimeout(s) => write!(f, "{s} closed; other side did not finish in time"),
            Self::Error(s, e) => write!(f, "{s} error: {e}"),
            Self::Shutdown => f.write_str("proxy shutdown"),
            Self::NotResumed { window } => write!(f, "player connection lost and not resumed within {window}s"),
            Self::Moved => f.write_str("moved to another instance"),
        }
    }
}

/// The Play Disconnect frame (protocol 5, packet 0x40 with a JSON chat reason) sent to players on shutdown
/// (`reason`: [`SHUTDOWN_REASON`], or a kick's).
pub(crate) fn shutdown_disconnect_frame(reason: &str) -> Vec<u8> {
    (PlayDisconnect { reason_json: chat_text(reason) }).to_frame_bytes().map(|b| b.to_vec()).unwrap_or_default()
}

/// Where the player's bytes go, for [`inject_shutdown`]: a TCP socket or a WebSocket.
pub(crate) trait PlayerSink {
    /// Writes what is still pending for the player (TCP relay) or nothing (WebSocket relay).
    async fn drain(&mut self, down: &mut Flow) -> io::Result<()>;
    /// Sends bytes to the player as one write or one message.
    async fn send(&mut self, bytes: Vec<u8>) -> io::Result<()>;
}

/// The shutdown step of every relay: within [`SHUTDOWN_FLUSH_TIMEOUT`], the player gets what the backend
/// already sent and then, at a frame boundary of a plaintext stream, the Play Disconnect (encrypted in online
/// mode) with the kick's reason or [`SHUTDOWN_REASON`]. The transport's own close (FIN, WebSocket Close 1001)
/// follows in the caller.
pub(crate) async fn inject_shutdown(sink: &mut impl PlayerSink, down: &mut Flow, stop: &crate::players::Stop) {
    let _ = tokio::time::timeout(SHUTDOWN_FLUSH_TIMEOUT, async {
        sink.drain(down).await?;
        if down.at_frame_boundary() {
            let mut disconnect = shutdown_disconnect_frame(stop.kicked().unwrap_or(SHUTDOWN_REASON));
            down.seal(&mut disconnect);
            sink.send(disconnect).await?;
        }
        io::Result::Ok(())
    })
    .await;
}
