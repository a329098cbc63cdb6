//! A switch in progress: why it started, where it is, and what it holds until the cutover.

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::BytesMut;
use tokio::time::Instant;

use super::backend::{Dialed, Link};
use super::forge::ServerStep;
use crate::backend::Backend;

/// Bytes of clientbound frames (other than Keep Alive and `FML|HS`) a new backend may send before its Join
/// Game; they are held and delivered after the world reset. More fails the switch.
pub(crate) const MAX_HELD_BYTES: usize = 1024 * 1024;

/// Longest backend name from a `Connect` that is shown in chat and logs, in characters.
pub(super) const MAX_SHOWN_NAME: usize = 64;

/// Fallbacks a session may take within [`FALLBACK_WINDOW`]; past that, a backend's disconnect reaches the
/// player (two backends that are each other's fallback and kick at once cannot bounce a player forever).
pub(crate) const MAX_FALLBACKS: usize = 3;
/// The window of [`MAX_FALLBACKS`].
pub(super) const FALLBACK_WINDOW: Duration = Duration::from_secs(60);

/// Switches a backend's `Connect` may start for one player within [`CONNECT_WINDOW`]: 10. Past it a `Connect` is
/// refused ("You are switching servers too often"): two backends that send a player to each other at once
/// cannot make the proxy dial backends and log at line rate.
pub(crate) const MAX_CONNECTS: usize = 10;
/// The window of [`MAX_CONNECTS`]: 10 seconds.
pub(super) const CONNECT_WINDOW: Duration = Duration::from_secs(10);

/// Why a switch started.
pub(super) enum Trigger {
    /// The old backend's BungeeCord `Connect` (to a backend of `transfer.targets`, at most [`MAX_CONNECTS`]
    /// within [`CONNECT_WINDOW`]), or with `operator` an operator's `send` (admin API: to any backend).
    Connect { operator: bool },
    /// Backend `from` disconnected the player: the frame as it came, and its reason as text.
    Fallback { from: String, disconnect: BytesMut, reason: String },
    /// Backend `from` closed or reset the connection without a Play Disconnect (failover); `why` as the
    /// player reads it after the name (`closed the connection unexpectedly`).
    Lost { from: String, why: String },
    /// The player moved here from a draining instance (docs/network.md, "Drain"): the target is the backend it
    /// was on there, logged in to again.
    Arrived,
}

impl Trigger {
    /// A switch the backend did not ask for (a fallback or a failover): any backend may be the target.
    pub(super) fn is_fallback(&self) -> bool {
        !matches!(self, Self::Connect { .. })
    }
}

/// Where a switch is.
pub(super) enum SwitchStep {
    /// Connecting and logging in.
    Dialing(Pin<Box<dyn Future<Output = Dialed> + Send>>),
    /// In Play, before its Join Game.
    Joining(Box<Link>),
}

/// A switch in progress.
pub(super) struct Switch {
    pub(super) target: Backend,
    pub(super) trigger: Trigger,
    pub(super) started: Instant,
    pub(super) deadline: Instant,
    pub(super) step: SwitchStep,
    /// A Forge HandshakeReset went to the client: it runs the new server's handshake now.
    pub(super) reset_sent: bool,
    /// How far the client got in the new server's handshake: the last of its messages delivered
    /// ([`ServerStep`]).
    pub(super) delivered: ServerStep,
    /// Frames the new backend sent before Join Game, framed again.
    pub(super) held: BytesMut,
    /// The new backend's Forge handshake messages, for a replay if a later switch fails.
    pub(super) record: Option<BytesMut>,
}
