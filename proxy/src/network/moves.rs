//! Moving a player off a draining instance (docs/network.md, "Drain"): the drain's pacing, and what the
//! instance the player reconnects to asks the draining one over an instance link, and the answer.
//!
//! 1. The draining instance's relay sends the player `move <ticket>` and registers the ticket ([`Take`] is what
//!    reaches the relay through it).
//! 2. The player's client reconnects to its URL and sends `moving <ticket> <received> <sent>`; the instance it
//!    reaches opens a link to the ticket's instance with [`Request::Move`] (its own counts).
//! 3. The draining relay checks the counts, reads the player's bytes up to `<sent>`, and answers with the
//!    session's state ([`crate::move_state::MoveState`]; one `u32`-prefixed JSON answer of at most [`MAX_STATE_BYTES`], MAC'd as
//!    every link answer is). From then on it sends nothing to the player and ends once the player closes the
//!    old connection (or goes on, when the player says `stay`).

use std::time::Duration;

use moonbridge_protocol::ws::v2::ResumeToken;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

use super::link::{self, LinkError, Opened, Request, Secret};
use crate::labels::DrainMove;
use crate::move_state::{MoveAnswer, Take, TicketTx, CATCH_UP_TIMEOUT, MAX_STATE_BYTES};

/// A move's answer on the link: a `u32` length, at most [`MAX_STATE_BYTES`].
const STATE_ANSWER: link::AnswerSize = link::AnswerSize { width: 4, max: MAX_STATE_BYTES };

/// How often a drain looks for players whose login ended after it began (they are moved, or shut, too): 50 ms.
const DRAIN_LOOK: Duration = Duration::from_millis(50);

/// The drain (on shutdown with live peers): asks every player here to move, `rate` per second, players who
/// finish their login meanwhile included, until no player is left and no login is under way, or `until`
/// (what is left then gets the shutdown message as before).
pub(crate) async fn drain(state: &crate::state::ProxyState, rate: u32, until: tokio::time::Instant) {
    use tokio::sync::mpsc::error::TrySendError;
    use tokio::time::Instant;
    let started = Instant::now();
    let mut queue = std::collections::VecDeque::new();
    let movable = take_new(state, &mut queue);
    tracing::info!(
        players = state.players.local_count(),
        movable,
        rate,
        "draining: moving players to the other instances of the network"
    );
    let every = Duration::from_secs(1) / rate.max(1);
    let (mut next, mut looked) = (started, started);
    while Instant::now() < until {
        if looked.elapsed() >= DRAIN_LOOK {
            take_new(state, &mut queue);
            looked = Instant::now();
        }
        match queue.pop_front() {
            Some(tx) => {
                match tx.try_send(crate::players::Command::Move) {
                    Ok(()) => {}
                    // A session that ended meanwhile takes no slot.
                    Err(TrySendError::Closed(_)) => continue,
                    // A session whose command queue is full: asked again after the others.
                    Err(TrySendError::Full(_)) => queue.push_back(tx),
                }
                next += every;
                tokio::time::sleep_until(next.min(until)).await;
            }
            // Done when no player is left and no connection accepted before the drain is in its handshake or
            // login (it may end in play here). Connections accepted since are not waited for: none of them
            // becomes a player here.
            None if state.players.local_count() == 0 && state.metrics.early_logging_in() == 0 => break,
            None => {
                tokio::time::sleep_until((Instant::now() + DRAIN_LOOK).min(until)).await;
                next = Instant::now();
            }
        }
    }
    let unasked = queue.iter().filter(|tx| !tx.is_closed()).count();
    for _ in 0..unasked {
        state.metrics.drain_move(DrainMove::Failed);
    }
    let left = state.players.local_count();
    tracing::info!(
        left,
        unasked,
        ms = started.elapsed().as_millis() as u64,
        "draining: {}",
        if left == 0 { "no player left here" } else { "the players left here get the shutdown message" }
    );
}

/// Takes the players the drain has not seen yet: the movable ones join `queue` (how many is returned); the
/// others (TCP, carriage v1, a client that did not offer moves, online mode) get the shutdown message at once,
/// as without a network.
fn take_new(state: &crate::state::ProxyState, queue: &mut std::collections::VecDeque<PlayerCommands>) -> usize {
    let (movers, others) = state.players.drain_split();
    for stop in &others {
        stop.shut();
        state.metrics.drain_move(DrainMove::NotMovable);
    }
    let n = movers.len();
    queue.extend(movers);
    n
}

/// A player's command channel, as a drain holds it.
type PlayerCommands = tokio::sync::mpsc::Sender<crate::players::Command>;

/// Asks the instance at `peer` for the session of `ticket` (the player's `moving` request).
///
/// The caller bounds the wait (the arrival's [`ARRIVAL_TIMEOUT`]).
///
/// # Errors
/// [`LinkError`] when the link cannot be opened or answered.
pub(crate) async fn fetch(
    peer: &str,
    secret: &Secret,
    ticket: &ResumeToken,
    received: u64,
    sent: u64,
) -> Result<MoveAnswer, LinkError> {
    let mut stream = link::dial(peer).await?;
    let request = Request::Move { ticket: ticket.to_string(), received, sent };
    let opened = link::open(&mut stream, secret, &[], &request).await?;
    link::read_answer(&mut stream, secret, &opened, STATE_ANSWER).await
}

/// Answers a [`Request::Move`] on the draining instance: hands it to the session the ticket named (`session`:
/// its channel, or why there is none) and writes its answer.
///
/// # Errors
/// [`LinkError`] when the answer cannot be written.
pub(crate) async fn answer<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    secret: &Secret,
    opened: &Opened,
    session: Result<TicketTx, &'static str>,
    (received, sent): (u64, u64),
) -> Result<MoveAnswer, LinkError> {
    let refused = |why: &str| MoveAnswer::Refused { why: why.to_string() };
    let answer = match session {
        Err(why) => refused(why),
        Ok(tx) => {
            let (reply, rx) = oneshot::channel();
            if tx.send(Take { received, sent, reply }).await.is_err() {
                refused("the session ended")
            } else {
                match tokio::time::timeout(CATCH_UP_TIMEOUT + Duration::from_secs(1), rx).await {
                    Ok(Ok(a)) => a,
                    Ok(Err(_)) => refused("the session ended"),
                    Err(_) => refused("the session did not answer in time"),
                }
            }
        }
    };
    link::write_answer(stream, secret, opened, &answer, STATE_ANSWER).await?;
    Ok(answer)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn a_state_answer_is_checked_by_length_and_mac() {
        let secret = Secret::new(&[3u8; 32]);
        let (mut a, mut b) = tokio::io::duplex(1 << 20);
        let request = Request::Move { ticket: "x".into(), received: 1, sent: 2 };
        let (opened, accepted) =
            tokio::join!(link::open(&mut a, &secret, &[], &request), link::accept(&mut b, &secret, &[]));
        let (opened, (got, at_listener)) = (opened.unwrap(), accepted.unwrap());
        assert_eq!(got, request);
        let refused = MoveAnswer::Refused { why: "no".into() };
        link::write_answer(&mut b, &secret, &at_listener, &refused, STATE_ANSWER).await.unwrap();
        let answer: MoveAnswer = link::read_answer(&mut a, &secret, &opened, STATE_ANSWER).await.unwrap();
        assert!(matches!(answer, MoveAnswer::Refused { why } if why == "no"));
        // A length over the limit is refused before anything is buffered.
        use tokio::io::AsyncWriteExt;
        b.write_all(&((MAX_STATE_BYTES as u32) + 1).to_be_bytes()).await.unwrap();
        let over = link::read_answer::<MoveAnswer, _>(&mut a, &secret, &opened, STATE_ANSWER).await;
        assert!(matches!(over, Err(LinkError::TooLong(n)) if n == MAX_STATE_BYTES + 1), "{over:?}");
    }
}
