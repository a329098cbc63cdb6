//! Moving a player off a draining instance (docs/network.md, "Drain"): what the instance the player reconnects
//! to asks the draining one over an instance link, and the answer.
//!
//! 1. The draining instance's relay sends the player `move <ticket>` and registers the ticket ([`Take`] is what
//!    reaches the relay through it).
//! 2. The player's client reconnects to its URL and sends `moving <ticket> <received> <sent>`; the instance it
//!    reaches opens a link to the ticket's instance with [`Request::Move`] (its own counts).
//! 3. The draining relay checks the counts, reads the player's bytes up to `<sent>`, and answers with the
//!    session's state ([`MoveState`]; one `u32`-prefixed JSON answer of at most [`MAX_STATE_BYTES`], MAC'd as
//!    every link answer is). From then on it sends nothing to the player and ends once the player closes the
//!    old connection (or goes on, when the player says `stay`).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use moonbridge_protocol::packets::{Handshake, NextState};
use moonbridge_protocol::ws::v2::ResumeToken;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::sync::oneshot;

use super::link::{self, LinkError, Opened, Request, Secret};
use crate::backend::Identity;
use crate::labels::DrainMove;
use crate::transfer::MoveParts;

/// The most a move's state may take on the link, in bytes of JSON: 12 MiB (a Forge record of at most 2 MiB and
/// a partial frame of at most 2 MiB, each as hexadecimal, and the rest).
pub(crate) const MAX_STATE_BYTES: usize = 12 * 1024 * 1024;

/// A move's answer on the link: a `u32` length, at most [`MAX_STATE_BYTES`].
const STATE_ANSWER: link::AnswerSize = link::AnswerSize { width: 4, max: MAX_STATE_BYTES };

/// How long the instance the player reached takes at most, from the `moving` message to `moved` or close
/// 4006: the state fetched over the link (the player's last bytes reaching the draining instance included),
/// the backend's second login and its Join Game: 8 seconds, within the client library's 10-second wait for
/// the answer, so a client never gives up on a move that then succeeds.
pub(crate) const ARRIVAL_TIMEOUT: Duration = Duration::from_secs(8);

/// How long the draining relay waits for the player's bytes up to the count the client named: 5 seconds.
pub(crate) const CATCH_UP_TIMEOUT: Duration = Duration::from_secs(5);

/// A `moving` request as it reaches the draining relay (from the link server, through the ticket).
#[derive(Debug)]
pub(crate) struct Take {
    /// Bytes the client received from the draining instance, in all.
    pub(crate) received: u64,
    /// Bytes the client sent, in all.
    pub(crate) sent: u64,
    /// Where the relay answers.
    pub(crate) reply: oneshot::Sender<MoveAnswer>,
}

/// The draining instance's answer to [`Request::Move`].
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(tag = "answer", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum MoveAnswer {
    /// The session's state: the draining instance no longer serves the player.
    State(Box<MoveState>),
    /// The move cannot be made (why, for the logs): the player stays on the draining instance.
    Refused { why: String },
}

/// A moved session's state, as the link carries it (bytes as lower-case hexadecimal).
#[derive(Debug, serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
pub(crate) struct MoveState {
    /// The backend the player is on (a name in both instances' configuration).
    pub(crate) backend: String,
    /// The player's handshake as it sent it (protocol 5: version, address, port).
    pub(crate) protocol_version: i32,
    pub(crate) server_address: String,
    pub(crate) server_port: u16,
    /// The Login Start frame as the player sent it.
    #[serde(with = "hex")]
    pub(crate) login_start: Vec<u8>,
    pub(crate) name: String,
    /// The player's real address.
    pub(crate) client: SocketAddr,
    /// The entity id the client learned from its first Join Game.
    pub(crate) client_entity: i32,
    /// The current backend's Forge handshake record.
    #[serde(with = "hex_opt")]
    pub(crate) forge_record: Option<Vec<u8>>,
    /// Frames that clear what the current backend left on the client.
    #[serde(with = "hex")]
    pub(crate) clear: Vec<u8>,
    /// Serverbound bytes after the last whole frame.
    #[serde(with = "hex")]
    pub(crate) partial: Vec<u8>,
    /// Stream bytes sent to the player, in all (the client's `received`).
    pub(crate) sent: u64,
    /// Stream bytes received from the player, in all (the client's `sent`).
    pub(crate) received: u64,
    /// The login's claim of the name in Redis, which the receiving instance takes over.
    pub(crate) claim: Option<String>,
}

impl MoveState {
    /// The state of a session whose switchboard handed over `parts`, with its counts and claim.
    pub(crate) fn new(parts: MoveParts, sent: u64, received: u64, claim: Option<String>) -> Self {
        let MoveParts { identity, backend, client_entity, forge_record, clear, partial } = parts;
        Self {
            backend,
            protocol_version: identity.handshake.protocol_version,
            server_address: identity.handshake.server_address,
            server_port: identity.handshake.server_port,
            login_start: identity.login_raw.to_vec(),
            name: identity.name,
            client: identity.client,
            client_entity,
            forge_record,
            clear,
            partial,
            sent,
            received,
            claim,
        }
    }

    /// The player's identity, as the draining instance logged it in (offline mode: no profile).
    pub(crate) fn identity(&self) -> Identity {
        Identity {
            handshake: Handshake {
                protocol_version: self.protocol_version,
                server_address: self.server_address.clone(),
                server_port: self.server_port,
                next_state: NextState::Login,
            },
            login_raw: BytesMut::from(&self.login_start[..]),
            name: self.name.clone(),
            client: self.client,
            profile: None,
        }
    }
}

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
            // Done when no player is left and no connection is in its handshake or login (it may end in play
            // here).
            None if state.players.local_count() == 0 && state.metrics.logging_in() == 0 => break,
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

/// Where a move ticket's `moving` request reaches its draining session (registered in the resume table under
/// the ticket).
pub(crate) type TicketTx = tokio::sync::mpsc::Sender<Take>;

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

/// Bytes as lower-case hexadecimal in JSON.
mod hex {
    pub(super) fn serialize<S: serde::Serializer>(bytes: &[u8], s: S) -> Result<S::Ok, S::Error> {
        s.serialize_str(&encode(bytes))
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Vec<u8>, D::Error> {
        let text: &str = serde::Deserialize::deserialize(d)?;
        decode(text).ok_or_else(|| serde::de::Error::custom("not hexadecimal"))
    }

    pub(super) fn encode(bytes: &[u8]) -> String {
        use std::fmt::Write;
        let mut out = String::with_capacity(bytes.len() * 2);
        for b in bytes {
            let _ = write!(out, "{b:02x}");
        }
        out
    }

    pub(super) fn decode(text: &str) -> Option<Vec<u8>> {
        let digit = |c: u8| char::from(c).to_digit(16).and_then(|d| u8::try_from(d).ok());
        let bytes = text.as_bytes();
        if !bytes.len().is_multiple_of(2) {
            return None;
        }
        bytes.chunks_exact(2).map(|p| Some(digit(*p.first()?)? << 4 | digit(*p.get(1)?)?)).collect()
    }
}

/// An optional byte string as hexadecimal, or `null`.
mod hex_opt {
    pub(super) fn serialize<S: serde::Serializer>(bytes: &Option<Vec<u8>>, s: S) -> Result<S::Ok, S::Error> {
        match bytes {
            Some(b) => s.serialize_some(&super::hex::encode(b)),
            None => s.serialize_none(),
        }
    }

    pub(super) fn deserialize<'de, D: serde::Deserializer<'de>>(d: D) -> Result<Option<Vec<u8>>, D::Error> {
        let text: Option<&str> = serde::Deserialize::deserialize(d)?;
        text.map(|t| super::hex::decode(t).ok_or_else(|| serde::de::Error::custom("not hexadecimal"))).transpose()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state() -> MoveState {
        MoveState {
            backend: "survival".into(),
            protocol_version: 5,
            server_address: "play.example\0FML\0".into(),
            server_port: 25565,
            login_start: vec![6, 0, 4, b'A', b'l', b'e', b'x'],
            name: "Alex".into(),
            client: ([192, 0, 2, 7], 50_000).into(),
            client_entity: 321,
            forge_record: Some(vec![0, 0xff, 0x10]),
            clear: Vec::new(),
            partial: vec![9],
            sent: 1_000_000,
            received: 77,
            claim: Some("abc:1:2".into()),
        }
    }

    #[test]
    fn bytes_travel_as_hex_and_come_back() {
        let json = serde_json::to_string(&MoveAnswer::State(Box::new(state()))).unwrap();
        assert!(json.contains(r#""answer":"state""#), "{json}");
        assert!(json.contains(r#""login_start":"060004416c6578""#), "{json}");
        assert!(json.contains(r#""forge_record":"00ff10""#), "{json}");
        let MoveAnswer::State(back) = serde_json::from_str(&json).unwrap() else { panic!("not a state") };
        assert_eq!((back.forge_record, back.partial, back.sent), (Some(vec![0, 0xff, 0x10]), vec![9], 1_000_000));
        let identity = back_identity();
        assert!(identity.is_forge());
        assert_eq!(identity.login_raw.as_ref(), &[6, 0, 4, b'A', b'l', b'e', b'x']);
        let bad = json.replace("060004416c6578", "06000441zz");
        assert!(serde_json::from_str::<MoveAnswer>(&bad).is_err());
        assert_eq!(hex::decode("abc"), None);
    }

    fn back_identity() -> Identity {
        state().identity()
    }

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
