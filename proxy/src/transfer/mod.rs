//! Server transfer: switching a connected player from one backend to another without a reconnect
//! (docs/servers.md). 1.7.10 has no transfer packet, so the client must believe it is still on one server.
//!
//! A session whose backend can send players on (`[transfer] targets`, or a `[transfer.fallback]` entry) keeps
//! the direct relay, which watches the backend's frames ([`moonbridge_protocol::transfer::watch`]: a length
//! prefix and a head per frame; the first Join Game, the Forge handshake and the leftovers recorded) and drops
//! the player's `BungeeCord` messages. At the first frame the transfer layer must act on, at the loss of a
//! backend that has a fallback, or at a command from another session, the relay hands over ([`Ticket`],
//! [`Handed`]): its backend side becomes the [`Switchboard`], which runs inside the relay on the backend
//! connections it owns, relaying frame by frame. So every transport (tcp, ws, wss, carriage v2 resume, online
//! mode's cipher) works unchanged on the player's side, a switched player holds the same two sockets, and a
//! player who never meets any of these never meets the switchboard.
//!
//! What the switchboard does, with the sources of each fact:
//! - **Triggers.** A clientbound Plugin Message (S3F) on channel `BungeeCord` with subchannel `Connect` and a
//!   backend name (BungeeCord's plugin messaging channel, as server plugins use it) starts a switch and is not
//!   relayed; the channel's other requests are answered ([`requests`]). A Play Disconnect (S40) from a backend
//!   with a `[transfer.fallback]` entry, or the end of its connection without one (a failover), starts a switch
//!   to the fallback instead of reaching the player.
//! - **Registration.** Each backend gets a `REGISTER` of the `BungeeCord` channel right after the login (when
//!   `targets` is set), as BungeeCord sends it: Bukkit-based servers let plugins send only on registered
//!   channels.
//! - **The switch.** The new backend is dialled and logged in ([`Identity::opening`]: the same handshake,
//!   Login Start and forwarding as the first login) while the old one keeps serving the player. Its Keep
//!   Alives are answered by the proxy until the cutover. With a Forge client (`\0FML\0` in the handshake), the
//!   first `FML|HS` message of the new backend is preceded by a HandshakeReset (`FML|HS` 0xFE,
//!   Forge 1.7.10 `FMLHandshakeMessage.HandshakeReset`), and the client's `FML|HS` answers go to the new
//!   backend, so the mod list and registry handshake run again; the deadline is then
//!   `forge_handshake_timeout_seconds` instead of `switch_timeout_seconds`.
//! - **The cutover**, at the new backend's Join Game (S01; a Forge server sends it once its handshake is
//!   complete, `NetworkDispatcher.completeServerSideConnection`): the client gets the removal of what the old
//!   server left ([`moonbridge_protocol::transfer::Leftovers`]: scoreboard objectives, teams, tab-list entries, an open window), then the two
//!   Respawns of [`moonbridge_protocol::transfer::world_reset`] instead of the Join Game, the old backend's connection is closed, and from then on every
//!   packet that carries the player's own entity id is rewritten both ways ([`moonbridge_protocol::transfer::EntityIdSwap`]).
//! - **Keep Alive.** After a switch, the client's answers (C00) reach the backend only for ids that backend
//!   sent (at most [`keep_alive::MAX_UNANSWERED_KEEP_ALIVES`] outstanding; more ends the session); while no backend serves
//!   the player (a fallback in progress) the proxy sends its own Keep Alives so the client's 30-second read
//!   timeout does not fire, and swallows their answers.
//! - **Failures.** The player stays on the old backend and is told why in chat. A Forge client whose handshake
//!   was reset gets the rest of the old backend's recorded handshake, from the message its state waits for, as
//!   long as it has not applied the new server's registry. When the old backend is gone (a fallback), or the
//!   client cannot be brought back, the player gets a Play Disconnect with the reason instead.
//!
//! The files, bottom-up: [`common`] (the context, the outbox, framing), [`forge`] (the Forge handshake's steps,
//! record and replay), [`keep_alive`] (whose Keep Alive an answer is), [`backend`] (a backend connection in
//! Play; dialling and logging in a new one), [`switch`] (a switch in progress), [`board`] (the switchboard,
//! frame by frame), [`frames`] (what it does to the frames it looks into), [`cutover`] (a switch's course: request, joining, cutover, failure), [`requests`] (the
//! `BungeeCord` channel's other requests and commands between sessions), and this file (whether a session can
//! be switched, what a relay hands over).

use std::sync::Arc;

use tokio::net::TcpStream;
use tracing::info;

use crate::backend::{Backend, Identity};
use crate::metrics::Metrics;
use crate::players::Registration;
use crate::state::Live;

mod backend;
mod board;
mod common;
mod cutover;
mod forge;
mod frames;
mod keep_alive;
mod moving;
mod pieces;
mod requests;
mod switch;

pub(crate) use backend::DialError;
pub(crate) use board::Switchboard;
use common::Ctx;
pub(crate) use common::{registration, Handed, LOST};
pub(crate) use moving::Arrival;
pub(crate) use switch::MAX_HELD_BYTES;

/// Logs `identity` in to `target` again (a player moved from another instance: its second login): the connection once its Login
/// Success was read, and what came after it; or why not, as the player would read it.
pub(crate) async fn log_in_again(
    target: Backend,
    identity: Identity,
    connect_timeout: std::time::Duration,
) -> Result<(TcpStream, bytes::BytesMut), backend::DialError> {
    backend::dial(target, identity, connect_timeout).await
}

/// Whether players on `backend` can be switched (their relay watches for the frames that start a switch).
pub(crate) fn applies(live: &Live, backend: &Backend) -> bool {
    !live.tunables.transfer.targets.is_empty() || live.tunables.transfer.fallback.contains_key(&backend.name)
}

/// Whether a Play Disconnect from `backend`, or the loss of its connection, starts a switch to its fallback.
pub(crate) fn has_fallback(live: &Live, backend: &Backend) -> bool {
    live.tunables.transfer.fallback.contains_key(&backend.name)
}

/// What a movable session's relay keeps for the switchboard it may start ([`Ticket::board`]).
pub(crate) struct Ticket {
    pub(crate) live: Arc<Live>,
    pub(crate) identity: Identity,
    pub(crate) metrics: Arc<Metrics>,
    /// The backend the player is on.
    pub(crate) backend: Backend,
    /// The player's place in this proxy's player table.
    pub(crate) registration: Option<Registration>,
    /// The player can move to another instance when this one drains.
    pub(crate) movable: bool,
}

impl Ticket {
    /// The switchboard that takes over the old backend's `stream` where the relay stopped.
    pub(crate) fn board(self, stream: TcpStream, handed: Handed) -> Box<Switchboard> {
        let Self { live, identity, metrics, backend, registration, movable } = self;
        metrics.transfer_handovers.inc();
        info!(player = %identity.name, backend = %backend.name, "transfer layer takes over the session");
        Box::new(Switchboard::new(Ctx { live, identity, metrics, registration, movable }, backend, stream, handed))
    }

    /// The switchboard of a player who moved here from a draining instance ([`Switchboard::arrived`]): the
    /// ticket's backend is the one `arrival.stream` is logged in to.
    pub(crate) fn arrived(self, arrival: Arrival) -> Box<Switchboard> {
        let Self { live, identity, metrics, backend, registration, movable } = self;
        info!(player = %identity.name, backend = %backend.name, "player moved here from a draining instance: joining its backend");
        Box::new(Switchboard::arrived(Ctx { live, identity, metrics, registration, movable }, backend, arrival))
    }
}
