//! A move's state (docs/network.md, "Drain"): what a draining instance hands to the instance its player
//! moves to, in one type from end to end. The draining switchboard fills it
//! ([`crate::transfer`]'s `Switchboard::move_state`), the instance link carries it as JSON (bytes as lower-case
//! hexadecimal; one `u32`-prefixed answer of at most [`MAX_STATE_BYTES`]), and the receiving instance's
//! switchboard starts from it (`Switchboard::arrived`). Also what travels between the link and the draining
//! relay: the request ([`Take`], through the ticket's [`TicketTx`]) and the answer ([`MoveAnswer`]).

use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use moonbridge_protocol::packets::{Handshake, NextState};
use tokio::sync::oneshot;

use crate::backend::Identity;

/// The most a move's state may take on the link, in bytes of JSON: 12 MiB (a Forge record of at most 2 MiB and
/// a partial frame of at most 2 MiB, each as hexadecimal, and the rest).
pub(crate) const MAX_STATE_BYTES: usize = 12 * 1024 * 1024;

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

/// Where a move ticket's `moving` request reaches its draining session (registered in the resume table under
/// the ticket).
pub(crate) type TicketTx = tokio::sync::mpsc::Sender<Take>;

/// The draining instance's answer to a move request.
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
    /// The current backend's Forge handshake record (`None` when it was too large or there is none).
    #[serde(with = "hex_opt")]
    pub(crate) forge_record: Option<Vec<u8>>,
    /// Whole clientbound frames that remove what the current backend left on the client (scoreboard, teams,
    /// tab list, an open window), for the player before anything of the new connection.
    #[serde(with = "hex")]
    pub(crate) clear: Vec<u8>,
    /// Serverbound bytes after the last whole frame the current backend got (the start of the next frame).
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
    /// The state of `identity`'s session on `backend`, with the switchboard's parts; the counts and the claim
    /// are the relay's to fill.
    pub(crate) fn new(
        identity: &Identity,
        backend: String,
        client_entity: i32,
        forge_record: Option<Vec<u8>>,
        clear: Vec<u8>,
        partial: Vec<u8>,
    ) -> Self {
        Self {
            backend,
            protocol_version: identity.handshake.protocol_version,
            server_address: identity.handshake.server_address.clone(),
            server_port: identity.handshake.server_port,
            login_start: identity.login_raw.to_vec(),
            name: identity.name.clone(),
            client: identity.client,
            client_entity,
            forge_record,
            clear,
            partial,
            sent: 0,
            received: 0,
            claim: None,
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
}
