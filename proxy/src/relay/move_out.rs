//! The draining side of a move (docs/network.md, "Drain"; docs/carriage.md, "Moving to another instance"): the
//! player gets `move <ticket>`, then nothing more from this instance. The instance the player reconnects to
//! asks for the session with the ticket ([`Take`]); the relay reads the player's bytes up to the count the
//! client named, answers with the session's state, and ends once the player closes this connection with
//! 1000 `moved` (any other end is a lost link, parked for a resume as always). A `stay` from the player (the
//! other instance refused the move, even after it fetched the state: the backend turned the second login
//! away), a refused hand-over, the instance's shutdown or the wait's end before anyone asked puts the relay
//! back to work as if nothing happened (after a shutdown, the relay then sends the shutdown message).

use std::io;
use std::time::Duration;

use bytes::BytesMut;
use moonbridge_protocol::ws::v2::Control;
use tokio::sync::mpsc;
use tracing::info;

use super::v2::{Resumable, StretchEnd};
use super::ws::Pipe;
use super::RelayEnd;
use crate::labels::DrainMove;
use crate::move_state::{MoveAnswer, Take, CATCH_UP_TIMEOUT};
use crate::resume::PlayerStream;
use crate::wire::{Side, LINGER, RELAY_CHUNK};
use crate::ws_link::{PeerClose, Turn, WsLink};

/// How long the draining relay waits at each step of a move: for the other instance's request after `move`
/// (the client library opens its new connection within 10 s), then, once the state was handed over, for the
/// player's Close (the other instance answers within 8 s, the client waits 10 s for it): 12 seconds each.
/// Past the first, the player goes on here; past the second, the session ends here (the other instance may
/// hold the player).
pub(crate) const MOVE_WAIT: Duration = Duration::from_secs(12);

/// How a move ended for the draining relay.
pub(super) enum MoveEnd<L> {
    /// Not moved: the relay goes on (the player said `stay`, the hand-over was refused, the wait ended before
    /// anyone asked, or the instance stops before anyone asked: the relay then sends the shutdown message),
    /// with the highest `ack` the player sent meanwhile, to apply first.
    Stay(Option<u64>),
    /// The session is over here (moved, or ended while moving).
    Over(RelayEnd),
    /// The link was lost or taken over meanwhile: the v2 relay handles it as usual.
    Stretch(StretchEnd<L>),
}

/// The carriage v2 control messages the player sent while the relay waited for the move: the highest `ack`
/// (cumulative, applied when the relay goes on) and a `stay`.
#[derive(Default)]
struct Heard {
    ack: Option<u64>,
    stay: bool,
}

impl Heard {
    /// Notes `turn` when it is a control message; true when it was one.
    fn note(&mut self, turn: &Turn) -> bool {
        match turn {
            Turn::Ack(n) => self.ack = Some(self.ack.map_or(*n, |a| a.max(*n))),
            Turn::Stay => self.stay = true,
            _ => return false,
        }
        true
    }
}

/// What the draining relay's wait turned up.
enum Event {
    /// The other instance's request.
    Take(Take),
    /// The player's bytes (the read's result), or `None` for bytes already buffered.
    Read(Option<io::Result<usize>>),
    /// The session's shutdown signal, before the hand-over.
    Shutdown,
    /// The step's wait ended.
    Timeout,
}

impl Pipe<'_> {
    /// Leaves the player's claim of its name to the instance the session's state was handed to (this
    /// session's end then releases nothing).
    pub(super) fn leave_claim(&mut self) {
        if let Some(g) = self.backend.board().and_then(|b| b.registration()) {
            g.forget_claim();
        }
    }
}

/// Moves the player off this instance (see the module documentation).
pub(super) async fn move_out<S: PlayerStream>(
    link: &mut WsLink<S>,
    pipe: &mut Pipe<'_>,
    r: &mut Resumable<WsLink<S>>,
) -> MoveEnd<WsLink<S>> {
    let Some(board) = pipe.backend.board() else { return MoveEnd::Stay(None) };
    board.take_move_request();
    let player = board.player_name().to_string();
    let (tx, mut rx) = mpsc::channel::<Take>(1);
    let ticket = r.table.register_ticket(tx);
    let metrics = std::sync::Arc::clone(&r.metrics);
    if let Err(e) = link.send_control(&Control::Move { ticket: ticket.token }).await {
        metrics.drain_move(DrainMove::Failed);
        return MoveEnd::Stretch(StretchEnd::Lost(format!("write failed: {e}")));
    }
    info!(player = %player, "draining: the player was asked to move to another instance");
    let mut deadline = tokio::time::Instant::now() + MOVE_WAIT;
    let mut batch = BytesMut::new();
    let mut handed = false;
    let mut heard = Heard::default();
    let stall = pipe.up.stall;
    let shutdown = pipe.shutdown;
    loop {
        let event = if link.decode_backlog() {
            Event::Read(None)
        } else {
            tokio::select! {
                Some(take) = rx.recv(), if !handed => Event::Take(take),
                res = link.read() => Event::Read(Some(res)),
                // After the hand-over the other instance may hold the player: its answer is awaited still.
                () = shutdown.cancelled(), if !handed => Event::Shutdown,
                () = tokio::time::sleep_until(deadline) => Event::Timeout,
            }
        };
        match event {
            Event::Take(take) => {
                let answer = hand_over(link, pipe, &take, &mut heard).await;
                let state = matches!(answer, MoveAnswer::State(_));
                if let MoveAnswer::Refused { why } = &answer {
                    info!(player = %player, "draining: the move was refused here: {why}");
                    metrics.drain_move(DrainMove::Failed);
                    let _ = take.reply.send(answer);
                    return MoveEnd::Stay(heard.ack);
                }
                // Handed over only when the other instance got it (it may have given up waiting).
                handed = state && take.reply.send(answer).is_ok();
                if handed {
                    deadline = tokio::time::Instant::now() + MOVE_WAIT;
                    if let Some(board) = pipe.backend.board() {
                        board.handed_away(true);
                    }
                }
                continue;
            }
            Event::Shutdown => {
                info!(player = %player, "draining: the session ends (shutdown or kick) before the move; the player stays");
                metrics.drain_move(DrainMove::Failed);
                return MoveEnd::Stay(heard.ack);
            }
            Event::Timeout => {
                metrics.drain_move(DrainMove::Failed);
                if handed {
                    // The other instance may hold the player and the name's claim.
                    pipe.leave_claim();
                    let e = io::Error::new(io::ErrorKind::TimedOut, "moved, but the old connection was not closed");
                    return MoveEnd::Over(RelayEnd::Error(Side::Player, e));
                }
                info!(player = %player, "draining: no instance asked for the player within {}s; the player stays", MOVE_WAIT.as_secs());
                return MoveEnd::Stay(heard.ack);
            }
            Event::Read(Some(res)) => {
                if !matches!(res, Ok(n) if n > 0) {
                    link.ended();
                    let ended = (PeerClose::ENDED, "connection closed");
                    return left(handed, r, pipe, (&metrics, &player), ended).await;
                }
            }
            Event::Read(None) => {}
        }
        let turn = link.decode(&mut batch, RELAY_CHUNK).await;
        heard.note(&turn);
        // After a `stay`, what the client sent behind it goes on here too (it follows the `stay` on the wire,
        // and is decoded once the relay goes on).
        if !batch.is_empty() && (!handed || heard.stay) {
            // Bytes the player sent before it read `move`: they reach the backend as usual.
            if let Err(e) = pipe.up.process_owned(&mut batch) {
                metrics.drain_move(DrainMove::Failed);
                if handed {
                    pipe.leave_claim();
                }
                return MoveEnd::Over(RelayEnd::Error(Side::Player, e));
            }
            if let Err(e) = pipe.backend.write_all(&batch, stall).await {
                metrics.drain_move(DrainMove::Failed);
                if handed {
                    pipe.leave_claim();
                }
                return MoveEnd::Over(RelayEnd::Error(Side::Backend, e));
            }
        }
        batch.clear();
        // Also after the state was handed over: the other instance refused once the backend turned the
        // second login away, and the player goes on here.
        if heard.stay {
            if let Some(board) = pipe.backend.board() {
                board.handed_away(false);
            }
            if handed {
                info!(player = %player, "draining: the move was refused at the other instance after the hand-over; the player stays");
            } else {
                info!(player = %player, "draining: the client reached no instance that took the move (it said stay); the player stays");
            }
            metrics.drain_move(DrainMove::Failed);
            return MoveEnd::Stay(heard.ack);
        }
        match turn {
            // An `ack` is kept for when the relay goes on ([`Heard`]).
            Turn::Continue | Turn::Ack(_) | Turn::Stay => {}
            Turn::Closed(c) => return left(handed, r, pipe, (&metrics, &player), (c, "Close")).await,
            // A Pong that could not be written: the link is lost, not broken by the player.
            Turn::Lost(e) => {
                let how = format!("write failed ({e})");
                return left(handed, r, pipe, (&metrics, &player), (PeerClose::ENDED, &how)).await;
            }
            Turn::Fault(e) => {
                metrics.drain_move(DrainMove::Failed);
                if handed {
                    pipe.leave_claim();
                }
                return MoveEnd::Over(RelayEnd::Error(Side::Player, e));
            }
        }
    }
}

/// The end of the old connection during a move: the move is done when the state was handed over and the
/// client closed with 1000 `moved` (it took the other instance's `moved`); any other end is a lost link, as
/// always.
async fn left<S: PlayerStream>(
    handed: bool,
    r: &mut Resumable<WsLink<S>>,
    pipe: &mut Pipe<'_>,
    (metrics, player): (&crate::metrics::Metrics, &str),
    (close, how): (PeerClose, &str),
) -> MoveEnd<WsLink<S>> {
    if !(handed && close.moved) {
        metrics.drain_move(DrainMove::Failed);
        // After the hand-over the player may have moved: unless it resumes here, the session's end leaves
        // the name's claim to the other instance (crate::relay::ws_resume).
        r.handed_over = handed;
        return MoveEnd::Stretch(StretchEnd::Lost(format!("{how} while moving")));
    }
    pipe.leave_claim();
    metrics.drain_move(DrainMove::Moved);
    info!(player = %player, "draining: the player moved to another instance");
    // The old backend connection ends with a FIN, its last bytes (a kick for the second login) read and
    // dropped, so neither side sees a reset.
    pipe.backend.shutdown_write();
    pipe.backend.linger(LINGER).await;
    MoveEnd::Over(RelayEnd::Moved)
}

/// Answers the other instance's request: the counts must match, the player's bytes up to `take.sent`
/// reach the backend (at most [`CATCH_UP_TIMEOUT`]), then the switchboard's state.
async fn hand_over<S: PlayerStream>(
    link: &mut WsLink<S>,
    pipe: &mut Pipe<'_>,
    take: &Take,
    heard: &mut Heard,
) -> MoveAnswer {
    let refused = |why: String| MoveAnswer::Refused { why };
    let (_, sent) = link.counts();
    if take.received != sent {
        return refused(format!("the client received {} bytes, {sent} were sent", take.received));
    }
    let stall = pipe.up.stall;
    let caught_up = tokio::time::timeout(CATCH_UP_TIMEOUT, async {
        let mut batch = BytesMut::new();
        while link.counts().0 < take.sent {
            // What is buffered first: a read would wait for bytes that may never come.
            if !link.decode_backlog() {
                match link.read().await {
                    Ok(n) if n > 0 => {}
                    _ => return Err("the old connection ended".to_string()),
                }
            }
            let turn = link.decode(&mut batch, RELAY_CHUNK).await;
            pipe.up.process_owned(&mut batch).map_err(|e| format!("the player's stream cannot be followed: {e}"))?;
            pipe.backend.write_all(&batch, stall).await.map_err(|e| format!("backend write failed: {e}"))?;
            batch.clear();
            // A control message (the client's acks go on meanwhile) stops a turn, not the catch-up.
            if !matches!(turn, Turn::Continue) && !heard.note(&turn) {
                return Err("the old connection ended".to_string());
            }
        }
        Ok(())
    })
    .await;
    match caught_up {
        Ok(Ok(())) if link.counts().0 == take.sent => {}
        Ok(Ok(())) => return refused(format!("the client sent {} bytes, {} arrived", take.sent, link.counts().0)),
        Ok(Err(why)) => return refused(why),
        Err(_) => return refused("the client's last bytes did not arrive in time".into()),
    }
    let Some(board) = pipe.backend.board() else { return refused("no switchboard".into()) };
    board.flush().await;
    let claim = board.registration().and_then(crate::players::Registration::claim);
    match board.move_state() {
        Ok(mut state) => {
            let (received, sent) = link.counts();
            (state.sent, state.received, state.claim) = (sent, received, claim);
            MoveAnswer::State(Box::new(state))
        }
        Err(why) => refused(why.to_string()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn control_messages_while_moving_are_kept_and_do_not_end_the_catch_up() {
        let mut heard = Heard::default();
        // The catch-up goes on past a control message (the client's acks come among its bytes) ...
        assert!(heard.note(&Turn::Ack(10)));
        assert!(heard.note(&Turn::Ack(7)));
        assert!(heard.note(&Turn::Ack(12)));
        assert_eq!(heard.ack, Some(12), "the highest ack, applied when the relay goes on");
        assert!(!heard.stay);
        assert!(heard.note(&Turn::Stay));
        assert!(heard.stay);
        // ... and stops at anything else that is not plain data.
        assert!(!heard.note(&Turn::Continue));
        assert!(!heard.note(&Turn::Closed(PeerClose::ENDED)));
        assert!(!heard.note(&Turn::Lost(io::Error::other("x"))));
        assert!(!heard.note(&Turn::Fault(io::Error::other("x"))));
    }
}
