//! A player moved between instances of a network (docs/network.md, "Drain"): what the draining instance's
//! switchboard hands over ([`MoveState`]), and the switchboard the receiving instance starts with, whose only
//! backend is the one it just logged the player in to again ([`Switchboard::arrived`]). From there the move
//! runs as a server switch does: a Forge client's handshake is reset and run again at the new connection's
//! first `FML|HS` message, and the new connection's Join Game becomes the two Respawns, with entity ids
//! rewritten from then on.

use bytes::BytesMut;
use moonbridge_protocol::frame::FrameDecoder;
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::Instant;

use super::backend::Link;
use super::board::{PlayerEnd, Switchboard};
use super::common::{registration, Ctx};
use super::forge::{Forge, ServerStep};
use super::keep_alive::OWN_KEEP_ALIVE_INTERVAL;
use super::switch::{Switch, SwitchStep, Trigger};
use crate::backend::Backend;
use crate::move_state::MoveState;
use crate::players::Command;

/// What [`Switchboard::arrived`] starts from.
pub(crate) struct Arrival {
    /// The backend connection, logged in (its Login Success read), and what came after the Login Success.
    pub(crate) stream: TcpStream,
    pub(crate) early: BytesMut,
    /// The session's state as the draining instance handed it over (the client's entity id, its Forge record,
    /// the frames that clear the old backend's leftovers, the serverbound bytes after the last whole frame).
    pub(crate) state: MoveState,
    pub(crate) commands: Option<mpsc::Receiver<Command>>,
}

/// Why a session cannot be handed to another instance now.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum NotMovable {
    /// A switch (or a Forge handshake's replay) is under way.
    #[error("a server switch is under way")]
    Switching,
    /// No backend serves the player.
    #[error("no backend serves the player")]
    NoBackend,
    /// No Join Game reached the client yet.
    #[error("the player has not joined yet")]
    NotJoined,
    /// A serverbound frame is half-written to the backend.
    #[error("a serverbound frame is half-written to the backend")]
    HalfWritten,
    /// Frames for the player wait to be sent.
    #[error("frames for the player are still pending")]
    Pending,
}

impl Switchboard {
    /// The drain asked this session to move (a [`Command::Move`]); true once, and only for a session that can
    /// move (the relay then sends `move`); the drain shuts the others instead.
    pub(crate) fn take_move_request(&mut self) -> bool {
        std::mem::take(&mut self.move_asked)
    }

    /// The session's state went to another instance (`away`), which may hold the player now: this switchboard
    /// makes no more switches (no fallback for the old backend's kick of the second login, no requested
    /// switch); or the player is back (`stay`, a resume here).
    pub(crate) fn handed_away(&mut self, away: bool) {
        self.handed_away = away;
    }

    /// Whether the drain asked this session to move (and it can).
    pub(crate) fn move_asked(&self) -> bool {
        self.move_asked
    }

    /// The player's name (for logs).
    pub(crate) fn player_name(&self) -> &str {
        &self.ctx.identity.name
    }

    /// The player's place in this proxy's player table.
    pub(crate) fn registration(&self) -> Option<&crate::players::Registration> {
        self.ctx.registration.as_ref()
    }

    /// Whether the session is at a point where it can be handed over: no switch under way, no replay, the
    /// player in play, the player's output delivered, and no serverbound frame half-written to the backend.
    pub(crate) fn movable_now(&self) -> Result<(), NotMovable> {
        if self.switch.is_some() || self.forge.replaying {
            return Err(NotMovable::Switching);
        }
        if self.current.is_none() || self.ended.is_some() {
            return Err(NotMovable::NoBackend);
        }
        if self.client_entity.is_none() {
            return Err(NotMovable::NotJoined);
        }
        if self.player.tail.0 > 0 {
            return Err(NotMovable::HalfWritten);
        }
        if !self.out.to_player.is_empty() || self.out.player_owed > 0 {
            return Err(NotMovable::Pending);
        }
        Ok(())
    }

    /// What the instance the player moves to needs: the session's [`MoveState`] (its counts and claim left to
    /// the relay).
    ///
    /// # Errors
    /// Why the session cannot be handed over now ([`Self::movable_now`]).
    pub(crate) fn move_state(&self) -> Result<MoveState, NotMovable> {
        self.movable_now()?;
        let (Some(current), Some(client_entity)) = (&self.current, self.client_entity) else {
            return Err(NotMovable::NoBackend);
        };
        let mut clear = BytesMut::new();
        // A copy: if the move is refused, the player stays with what this instance knows.
        let _ = self.leftovers.clone().clear(&mut clear);
        Ok(MoveState::new(
            &self.ctx.identity,
            current.backend.name.clone(),
            client_entity,
            self.forge.record.as_ref().map(|r| r.to_vec()),
            clear.to_vec(),
            self.player.up_buffered().to_vec(),
        ))
    }

    /// The switchboard of a player who moved here from a draining instance: no current backend, and a switch
    /// to `target` whose login is done (`a.stream`), waiting for its Join Game (and, for a Forge client, running
    /// the handshake again). The player first gets the frames that clear the old backend's leftovers.
    pub(super) fn arrived(ctx: Ctx, target: Backend, a: Arrival) -> Self {
        let started = Instant::now();
        let forge = ctx.identity.is_forge();
        let deadline = started
            + if forge {
                ctx.live.tunables.transfer.forge_handshake_timeout()
            } else {
                ctx.live.tunables.transfer.switch_timeout()
            };
        let Arrival { stream, early, state, commands } = a;
        let limit = ctx.live.tunables.limits.max_play_frame_bytes;
        let mut up = FrameDecoder::new(limit);
        up.queue_slice(&state.partial);
        let visited = vec![target.name.clone()];
        let mut board = Self::empty(
            ctx,
            PlayerEnd::starting_with(up),
            Forge { record: state.forge_record.map(|r| BytesMut::from(&r[..])), replaying: false },
            commands,
            visited,
        );
        board.client_entity = Some(state.client_entity);
        board.out.player().extend_from_slice(&state.clear);
        let registration = registration(&board.ctx.live);
        board.out.to_target.extend_from_slice(&registration);
        board.switch = Some(Switch {
            target: target.clone(),
            trigger: Trigger::Arrived,
            started,
            deadline,
            step: SwitchStep::Joining(Box::new(Link::new(target, stream, &early, limit))),
            reset_sent: false,
            delivered: ServerStep::None,
            held: BytesMut::new(),
            record: Some(BytesMut::new()),
        });
        board.keep_alive.own_at = started + OWN_KEEP_ALIVE_INTERVAL;
        let step = board.joining_frames();
        board.settle(step);
        board
    }
}
