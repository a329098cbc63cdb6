//! What the switchboard's parts share: the session's context, where the relay stopped ([`Handed`]), how the
//! board ends, what one event writes, and framing helpers (protocol 5 frames: a VarInt length, a VarInt packet id, the body).

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use moonbridge_protocol::frame::{encode_wide_frame, Frame, MAX_WIDE_FRAME_LEN};
use moonbridge_protocol::packets::{
    chat_text, ChatMessage, JoinGame, KeepAlive, Packet, PlayDisconnect, PluginMessage,
};
use moonbridge_protocol::transfer::watch::Watched;
use moonbridge_protocol::transfer::{
    bungee_registration, carries_entity_ids, fml, starts_with_channel, Direction, EntityIdSwap, Leftovers,
    BUNGEE_CHANNEL,
};
use tokio::sync::mpsc;
use tokio::time::Instant;

use crate::backend::Identity;
use crate::metrics::Metrics;
use crate::players::{Command, Registration};
use crate::state::Live;

/// What a player reads after the backend's name when its connection was lost without a Play Disconnect (a
/// crash, a kill, a reset, a connection cut), and the failover sends them to the fallback.
pub(crate) const LOST: &str = "closed the connection unexpectedly";

/// Where the relay stopped, for the switchboard that goes on from there.
pub(crate) struct Handed {
    /// Clientbound bytes read from the backend and not delivered, from a frame start.
    pub(crate) rest: Vec<u8>,
    /// What the watch learned (the player's entity id, the Forge handshake, the leftovers).
    pub(crate) watched: Watched,
    /// Serverbound: body bytes of the frame under way at the backend, and whether they are dropped.
    pub(crate) tail: (usize, bool),
    /// The backend's connection was lost (why, as the player reads it after the backend's name): a failover.
    pub(crate) lost: Option<String>,
    /// A command from another session that asked for the switchboard.
    pub(crate) command: Option<Command>,
    /// The session's command channel.
    pub(crate) commands: Option<mpsc::Receiver<Command>>,
}

/// Largest read from a backend, in bytes.
pub(super) const READ_CHUNK: usize = 64 * 1024;

/// The `REGISTER` of the `BungeeCord` channel a backend gets after each login when `[transfer] targets` is set
/// (a whole serverbound frame), or nothing.
pub(crate) fn registration(live: &Live) -> BytesMut {
    let mut out = BytesMut::new();
    let mut fields = Vec::with_capacity(24);
    if !live.tunables.transfer.targets.is_empty() && bungee_registration().encode_fields(&mut fields).is_ok() {
        encode(&mut out, PluginMessage::SERVERBOUND_ID, &fields);
    }
    out
}

/// What every part of the switchboard reads: the configuration it runs on, the player, the metrics, the
/// player's place in this proxy's [`crate::players::PlayerTable`].
pub(super) struct Ctx {
    pub(super) live: Arc<Live>,
    pub(super) identity: Identity,
    pub(super) metrics: Arc<Metrics>,
    pub(super) registration: Option<Registration>,
    /// The player can move to another instance when this one drains (carriage v2 over WebSocket, a client
    /// that offered instance moves, offline mode).
    pub(super) movable: bool,
}

/// How the switchboard ended (the relay then ends as when a backend closes).
#[derive(Debug)]
pub(crate) enum End {
    /// The backend closed or failed, with no switch to wait for.
    BackendGone,
    /// The player was disconnected by the proxy (fallback failed, reset handshake) or the backend broke a rule.
    Closed(String),
}

/// The most bytes of the proxy's own frames (chat lines, Keep Alive, answers) that may wait behind a frame
/// passing in pieces, each way: 1 MiB.
pub(super) const MAX_WAITING_BYTES: usize = 1024 * 1024;

/// What one event of the switchboard produced, written before the next: to the player (taken by the relay),
/// the current backend and the backend being switched to.
///
/// A large frame nobody looks into passes as it arrives, in pieces (`limits.max_play_frame_bytes`, docs/modpacks.md);
/// while one is under way, what the switchboard itself makes for that side waits behind it, so it never lands
/// inside the frame.
#[derive(Default)]
pub(super) struct Outbox {
    pub(super) to_player: BytesMut,
    pub(super) to_backend: BytesMut,
    pub(super) to_target: BytesMut,
    /// Body bytes still to come of a clientbound frame passing through in pieces.
    pub(super) player_owed: usize,
    /// What the switchboard made for the player while `player_owed` > 0.
    player_waiting: BytesMut,
    /// What the switchboard made for the current backend while the player's frame under way
    /// (`PlayerEnd::tail`) is still being written to it.
    pub(super) backend_waiting: BytesMut,
}

impl Outbox {
    /// Where a frame the switchboard makes for the player goes: behind a frame passing in pieces, if one is
    /// under way.
    pub(super) fn player(&mut self) -> &mut BytesMut {
        if self.player_owed > 0 {
            &mut self.player_waiting
        } else {
            &mut self.to_player
        }
    }

    /// `n` more bytes of the frame passing in pieces went to the player; once it is whole, what waited follows.
    pub(super) fn player_passed(&mut self, n: usize) {
        self.player_owed = self.player_owed.saturating_sub(n);
        if self.player_owed == 0 && !self.player_waiting.is_empty() {
            let waiting = self.player_waiting.split();
            self.to_player.unsplit(waiting);
        }
    }

    /// More than [`MAX_WAITING_BYTES`] wait behind a frame passing in pieces, either way (a peer that stalls in
    /// the middle of a frame while commands from other sessions keep coming): the session ends.
    pub(super) fn waiting_over(&self) -> bool {
        self.player_waiting.len() > MAX_WAITING_BYTES || self.backend_waiting.len() > MAX_WAITING_BYTES
    }

    /// Queues a chat line for the player.
    pub(super) fn chat(&mut self, text: &str) {
        let _ = (ChatMessage { json: chat_text(text) }).encode_frame(self.player());
    }

    /// Queues a Play Disconnect with `text` for the player.
    pub(super) fn disconnect(&mut self, text: &str) {
        let _ = (PlayDisconnect { reason_json: chat_text(text) }).encode_frame(self.player());
    }
}

/// Appends a frame, with a prefix as wide as it needs (any frame the switchboard decoded fits:
/// `limits.max_play_frame_bytes` is at most what a 5-byte prefix declares).
pub(super) fn encode(out: &mut BytesMut, id: i32, body: &[u8]) {
    let _ = encode_wide_frame(out, id, body, MAX_WIDE_FRAME_LEN);
}

/// Appends `frame`, with its entity ids through `swap` when it carries any.
pub(super) fn put_frame(
    out: &mut BytesMut,
    swap: Option<EntityIdSwap>,
    direction: Direction,
    frame: Frame,
    body: &mut Vec<u8>,
) {
    if let Some(swap) = swap.filter(|s| !s.is_identity() && carries_entity_ids(direction, frame.id)) {
        body.clear();
        body.extend_from_slice(&frame.body);
        if swap.rewrite(direction, frame.id, body).is_ok() {
            encode(out, frame.id, body);
            return;
        }
    }
    encode(out, frame.id, &frame.body);
}

/// The plain text of a JSON chat component (its `text` and `extra` parts), for logs and chat lines.
pub(super) fn chat_plain(json: &str) -> String {
    fn walk(v: &serde_json::Value, out: &mut String) {
        match v {
            serde_json::Value::String(s) => out.push_str(s),
            serde_json::Value::Object(o) => {
                if let Some(t) = o.get("text") {
                    walk(t, out);
                }
                if let Some(serde_json::Value::Array(extra)) = o.get("extra") {
                    extra.iter().for_each(|e| walk(e, out));
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|e| walk(e, out)),
            _ => {}
        }
    }
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(v) => {
            let mut out = String::new();
            walk(&v, &mut out);
            out
        }
        Err(_) => json.to_string(),
    }
}

/// Whether the switchboard looks into a frame with packet id `id` and `fields` going `direction` (otherwise
/// it passes as it came): before the client joined, every clientbound frame; then Keep Alive, Join Game, Play
/// Disconnect, what the leftovers track, the Plugin Messages it acts on (`BungeeCord` both ways; Forge's `FML`
/// entity messages once the ids differ; every serverbound one while a Forge handshake is routed or replayed:
/// `forge`), and, once the player's entity id differs from the server's (`swapped`), the packets that carry
/// entity ids.
pub(super) fn inspected(
    direction: Direction,
    id: i32,
    fields: &[u8],
    joined: bool,
    swapped: bool,
    forge: bool,
) -> bool {
    let plugin = |channel| starts_with_channel(fields, channel);
    let always = match direction {
        Direction::Clientbound => match id {
            PluginMessage::CLIENTBOUND_ID => {
                !joined || plugin(BUNGEE_CHANNEL) || (swapped && plugin(fml::RUNTIME_CHANNEL))
            }
            _ => {
                !joined
                    || matches!(id, JoinGame::ID | PlayDisconnect::ID | KeepAlive::ID)
                    || Leftovers::CLIENTBOUND_IDS.contains(&id)
            }
        },
        Direction::Serverbound => match id {
            PluginMessage::SERVERBOUND_ID => forge || plugin(BUNGEE_CHANNEL),
            _ => matches!(id, KeepAlive::ID | Leftovers::SERVERBOUND_ID),
        },
    };
    always || (swapped && id != PluginMessage::CLIENTBOUND_ID && carries_entity_ids(direction, id))
}

/// Bytes queued for the current backend past which the switchboard handles no more of its frames until they
/// are written: 64 KiB. Every answer the proxy makes (at most 32,767 bytes each) waits on the backend reading
/// the ones before: a flood of requests costs no more memory than this.
pub(crate) const MAX_QUEUED_ANSWERS: usize = 64 * 1024;

/// How long a `PlayerList` answer is reused for the same server: 1 second (a flood of requests builds the
/// sorted list once, not once each).
pub(crate) const PLAYER_LIST_FRESH: Duration = Duration::from_secs(1);

/// The proxy's answers to one session's backend.
#[derive(Debug, Default)]
pub(crate) struct Answers {
    /// The current backend's frames wait until what is queued for it is written ([`MAX_QUEUED_ANSWERS`]).
    pub(super) paused: bool,
    /// The `PlayerList` answers made within [`PLAYER_LIST_FRESH`]: for which server (a backend's name or
    /// `ALL`, so at most one per backend and one more), when, the payload.
    lists: Vec<(String, Instant, Vec<u8>)>,
}

impl Answers {
    /// Whether more than [`MAX_QUEUED_ANSWERS`] wait for the current backend: to be written, or behind a frame
    /// of the player's under way (those go once that frame is whole).
    pub(super) fn over(&self, out: &Outbox) -> bool {
        out.to_backend.len() + out.backend_waiting.len() > MAX_QUEUED_ANSWERS
    }

    /// The `PlayerList` answer for `server`, when one was made within [`PLAYER_LIST_FRESH`].
    pub(super) fn list_for(&self, server: &str) -> Option<&[u8]> {
        let fresh = |made: &Instant| made.elapsed() < PLAYER_LIST_FRESH;
        self.lists.iter().find(|(s, made, _)| s == server && fresh(made)).map(|(_, _, payload)| payload.as_slice())
    }

    /// Keeps `payload`, the `PlayerList` answer for `server` made now (dropping those no longer fresh).
    pub(super) fn keep_list(&mut self, server: String, payload: Vec<u8>) {
        self.lists.retain(|(s, made, _)| *s != server && made.elapsed() < PLAYER_LIST_FRESH);
        self.lists.push((server, Instant::now(), payload));
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use moonbridge_protocol::packets::PluginMessage;
    use moonbridge_protocol::transfer::{fml, is_channel, BUNGEE_CHANNEL};

    #[test]
    fn chat_plain_reads_text_and_extra() {
        assert_eq!(chat_plain(r#"{"text":"Bye","extra":[{"text":" now"},"!"]}"#), "Bye now!");
        assert_eq!(chat_plain(r#""plain""#), "plain");
        assert_eq!(chat_plain("not json"), "not json");
    }

    #[test]
    fn channels_are_matched_exactly() {
        let mut body = Vec::new();
        PluginMessage { channel: "BungeeCord".into(), data: vec![0, 1] }.encode_fields(&mut body).unwrap();
        assert!(is_channel(&body, BUNGEE_CHANNEL));
        assert!(!is_channel(&body, fml::CHANNEL));
        assert!(!is_channel(&[0xff], BUNGEE_CHANNEL));
    }

    #[test]
    fn frames_pass_through_the_swap_only_when_they_carry_ids() {
        let swap = Some(EntityIdSwap::new(7, 300));
        let mut out = BytesMut::new();
        // S12 Entity Velocity: i32 entity id, then three i16.
        let frame = Frame { id: 0x12, body: BytesMut::from(&[0, 0, 1, 44, 0, 1, 0, 2, 0, 3][..]) };
        put_frame(&mut out, swap, Direction::Clientbound, frame, &mut Vec::new());
        assert_eq!(&out[..], &[11, 0x12, 0, 0, 0, 7, 0, 1, 0, 2, 0, 3]);
        out.clear();
        // S02 Chat carries none: unchanged.
        let frame = Frame { id: 0x02, body: BytesMut::from(&[2, b'{', b'}'][..]) };
        put_frame(&mut out, swap, Direction::Clientbound, frame, &mut Vec::new());
        assert_eq!(&out[..], &[4, 0x02, 2, b'{', b'}']);
    }
}
