//! Watching a player's Play stream before any switch, so a proxy can relay it untouched (no parse, no copy)
//! and call in its transfer layer only when a frame needs it.
//!
//! [`ClientboundWatch`] follows the backend's frames as the relay passes them on, batch by batch. Per frame it
//! reads the length prefix and the first [`HEAD_LEN`] body bytes (the packet id and, for a Plugin Message, the
//! channel and the start of its data) and then:
//! - **hands over** at a frame the transfer layer must act on: a Plugin Message (S3F) on the `BungeeCord`
//!   channel (a `Connect`, or a request the proxy answers: `PlayerCount`, `UUID`, …; none reaches the client),
//!   or a Play Disconnect (S40) when the backend has a fallback. The bytes from that frame on are the transfer
//!   layer's ([`Verdict::Handover`]).
//! - **records**, copying only these frames' bodies: the first Join Game (S01: the entity id the client knows
//!   itself by), the Forge handshake before it (`FML|HS`, `FML|MP` and `REGISTER` Plugin Messages, kept for a
//!   replay, at most [`fml::MAX_RECORD_BYTES`]), and what [`Leftovers`] tracks (S3B, S3E, S38, S2D, S2E).
//! - passes everything else on without looking further.
//!
//! A batch that ends inside a frame's head holds that head back ([`Verdict::Hold`], under [`MAX_HELD`] bytes),
//! so a frame is never half-sent before the watch knows what it is.
//!
//! The serverbound side ([`ServerboundFilter`]) needs where frames end (a switch that starts inside one passes
//! the rest of it on unparsed), how many Close Window (C0D) frames the client sent, and one rule: a Plugin
//! Message (C17) on the `BungeeCord` channel is dropped, as BungeeCord drops it (server plugins trust that
//! channel as the proxy's voice, so a client must not be able to speak on it).

use bytes::BytesMut;

use super::{fml, Direction, Leftovers, BUNGEE_CHANNEL};
use crate::codec::Reader;
use crate::error::FrameError;
use crate::frame::{read_length_prefix, MAX_LENGTH_PREFIX};
use crate::packets::{JoinGame, Packet, PlayDisconnect, PluginMessage};
use crate::varint::VarInt;

/// Body bytes at the start of a frame that tell what it is, or all of a shorter body: the packet id (1 byte in
/// protocol 5) and, for a Plugin Message, the channel's VarInt length, the channel (`BungeeCord`: 10 bytes),
/// the data's `i16` length and the subchannel as `writeUTF` writes it (`u16` length, `Connect`: 7 bytes); 23
/// bytes, and one to spare.
pub const HEAD_LEN: usize = 24;

/// A length prefix and a head: one more than the most bytes [`Verdict::Hold`] keeps back.
pub const MAX_HELD: usize = MAX_LENGTH_PREFIX + HEAD_LEN;

/// What a batch may do, after [`ClientboundWatch::scan`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Verdict {
    /// Every byte of the batch may go to the player.
    Pass,
    /// The batch ends inside the head of the frame starting at this offset: the bytes before it may go, the
    /// rest (under [`MAX_HELD`]) must start the next batch.
    Hold(usize),
    /// The frame starting at this offset starts a switch: the bytes before it may go, the rest belong to the
    /// transfer layer (so does the stream from here on).
    Handover(usize),
}

/// What the watch learned, for the transfer layer that takes over.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Watched {
    /// The player's entity id from the first Join Game, once it passed.
    pub client_entity: Option<i32>,
    /// The backend's Forge handshake frames before its Join Game, framed again (`None` when it was over
    /// [`fml::MAX_RECORD_BYTES`]).
    pub fml_record: Option<BytesMut>,
    /// The scoreboard objectives, teams, tab-list entries and open window the backend left on the client.
    pub leftovers: Leftovers,
}

/// Follows a clientbound Play stream (see the module documentation).
#[derive(Debug)]
pub struct ClientboundWatch {
    /// A Play Disconnect starts a switch (the backend has a fallback).
    fallback: bool,
    /// Body bytes of the current frame not seen yet.
    remaining: usize,
    /// The body of the current frame so far, when it is recorded.
    capture: Option<Vec<u8>>,
    watched: Watched,
    /// The caller's C0D count when the open window was seen.
    window_closes: u64,
}

impl ClientboundWatch {
    /// A watch at the start of a stream (the Login Success frame may come first: as a Play frame its id 0x02
    /// is a Chat Message, which the watch passes). `fallback`: a Play Disconnect hands over.
    pub fn new(fallback: bool) -> Self {
        Self {
            fallback,
            remaining: 0,
            capture: None,
            watched: Watched { fml_record: Some(BytesMut::new()), ..Watched::default() },
            window_closes: 0,
        }
    }

    /// True between two frames.
    pub fn at_boundary(&self) -> bool {
        self.remaining == 0
    }

    /// Follows the next batch. `closes`: the Close Window (C0D) frames the client has sent so far.
    ///
    /// # Errors
    /// [`FrameError::LengthPrefixTooLong`] or [`FrameError::Empty`]: the stream is not Minecraft frames, and the
    /// watch must not be used again.
    pub fn scan(&mut self, batch: &[u8], closes: u64) -> Result<Verdict, FrameError> {
        let mut at = 0;
        loop {
            if self.remaining > 0 {
                let piece = batch.get(at..).unwrap_or_default();
                let take = self.remaining.min(piece.len());
                if let Some(body) = &mut self.capture {
                    body.extend_from_slice(piece.get(..take).unwrap_or_default());
                }
                at += take;
                self.remaining -= take;
                if self.remaining > 0 {
                    return Ok(Verdict::Pass);
                }
                if let Some(body) = self.capture.take() {
                    self.record(&body, closes);
                }
            }
            let rest = batch.get(at..).unwrap_or_default();
            if rest.is_empty() {
                return Ok(Verdict::Pass);
            }
            let Some((len, prefix)) = read_length_prefix(rest)? else { return Ok(Verdict::Hold(at)) };
            if len == 0 {
                return Err(FrameError::Empty);
            }
            let Some(head) = rest.get(prefix..prefix + len.min(HEAD_LEN)) else { return Ok(Verdict::Hold(at)) };
            match self.classify(head) {
                Class::Handover => return Ok(Verdict::Handover(at)),
                Class::Record => self.capture = Some(Vec::with_capacity(len)),
                Class::Pass => {}
            }
            at += prefix;
            self.remaining = len;
        }
    }

    /// What the watch learned, with the client's C0D count now (a window the client closed since it opened is
    /// not left over).
    pub fn finish(mut self, closes: u64) -> Watched {
        if closes != self.window_closes {
            self.watched.leftovers.observe(Direction::Serverbound, Leftovers::SERVERBOUND_ID, &[]);
        }
        self.watched
    }

    /// What a frame is, from its head.
    fn classify(&self, head: &[u8]) -> Class {
        let Ok((id, n)) = VarInt::decode_partial(head) else { return Class::Pass };
        let joined = self.watched.client_entity.is_some();
        match id {
            PluginMessage::CLIENTBOUND_ID => {
                if is_bungee(head.get(n..).unwrap_or_default()) {
                    Class::Handover
                } else if joined {
                    Class::Pass
                } else {
                    // Before Join Game: the Forge handshake (which channel is checked on the whole frame).
                    Class::Record
                }
            }
            PlayDisconnect::ID if self.fallback => Class::Handover,
            JoinGame::ID if !joined => Class::Record,
            id if Leftovers::CLIENTBOUND_IDS.contains(&id) => Class::Record,
            _ => Class::Pass,
        }
    }

    /// Takes in a recorded frame (`body`: packet id and fields).
    fn record(&mut self, body: &[u8], closes: u64) {
        let Ok((id, n)) = VarInt::decode_partial(body) else { return };
        let fields = body.get(n..).unwrap_or_default();
        let watched = &mut self.watched;
        match id {
            JoinGame::ID if watched.client_entity.is_none() => {
                watched.client_entity = JoinGame::decode_body(&mut Reader::new(fields)).ok().map(|j| j.entity_id);
            }
            PluginMessage::CLIENTBOUND_ID if fml::is_handshake(fields) => {
                fml::record(&mut watched.fml_record, id, fields);
            }
            PluginMessage::CLIENTBOUND_ID => {}
            _ => {
                watched.leftovers.observe(Direction::Clientbound, id, fields);
                if id == 0x2d {
                    self.window_closes = closes;
                }
            }
        }
    }
}

/// Whether a Plugin Message's first fields (`fields`: after the packet id, possibly cut short) name the
/// `BungeeCord` channel (VarInt length 10, then `BungeeCord`).
fn is_bungee(fields: &[u8]) -> bool {
    let Some((&len, rest)) = fields.split_first() else { return false };
    usize::from(len) == BUNGEE_CHANNEL.len() && rest.get(..BUNGEE_CHANNEL.len()) == Some(BUNGEE_CHANNEL.as_bytes())
}

/// Body bytes at the start of a serverbound frame that tell whether it is dropped: the packet id and the
/// channel's VarInt length and name (`BungeeCord`).
const SERVERBOUND_HEAD: usize = 2 + BUNGEE_CHANNEL.len();

/// The most bytes [`ServerboundFilter::filter`] holds back: a length prefix and all but one byte of a head.
pub const MAX_HELD_SERVERBOUND: usize = MAX_LENGTH_PREFIX + SERVERBOUND_HEAD - 1;

/// What a batch became after [`ServerboundFilter::filter`]: `batch[..pass]` goes to the backend now,
/// `batch[pass..pass + held]` (the head of a frame, under [`MAX_HELD_SERVERBOUND`] bytes) must start the next
/// batch; the rest of the batch was dropped.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Filtered {
    /// Bytes to send now, from the start of the batch.
    pub pass: usize,
    /// Bytes after those to hold for the next batch.
    pub held: usize,
}

/// Follows a serverbound Play stream in place: drops Plugin Messages (C17) on the `BungeeCord` channel,
/// counts Close Window (C0D) frames, knows where frames end (see the module documentation).
#[derive(Clone, Debug, Default)]
pub struct ServerboundFilter {
    /// Body bytes of the current frame not seen yet.
    remaining: usize,
    /// The current frame is dropped.
    dropping: bool,
    closes: u64,
    dropped: u64,
}

impl ServerboundFilter {
    /// A filter at the start of a Play stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Close Window (C0D) frames seen so far.
    pub fn closes(&self) -> u64 {
        self.closes
    }

    /// `BungeeCord` frames dropped so far.
    pub fn dropped(&self) -> u64 {
        self.dropped
    }

    /// Body bytes of the frame under way still to come, and whether they are dropped: where a transfer layer
    /// that takes over the stream here goes on.
    pub fn under_way(&self) -> (usize, bool) {
        (self.remaining, self.dropping)
    }

    /// Filters the next batch in place (dropped frames are cut out, the bytes after them moved up).
    ///
    /// # Errors
    /// [`FrameError::LengthPrefixTooLong`] or [`FrameError::Empty`]: the stream is not Minecraft frames; the
    /// batch is left as it was, and the filter must not be used again.
    pub fn filter(&mut self, batch: &mut [u8]) -> Result<Filtered, FrameError> {
        let (mut at, mut out) = (0, 0);
        loop {
            if self.remaining > 0 {
                let take = self.remaining.min(batch.len() - at);
                if !self.dropping {
                    // Nothing moves until a frame was dropped in this batch.
                    if out != at {
                        batch.copy_within(at..at + take, out);
                    }
                    out += take;
                }
                at += take;
                self.remaining -= take;
                if self.remaining > 0 {
                    return Ok(Filtered { pass: out, held: 0 });
                }
                self.dropping = false;
            }
            let rest = batch.get(at..).unwrap_or_default();
            if rest.is_empty() {
                return Ok(Filtered { pass: out, held: 0 });
            }
            let hold = |batch: &mut [u8]| {
                let held = batch.len() - at;
                if out != at {
                    batch.copy_within(at.., out);
                }
                Ok(Filtered { pass: out, held })
            };
            let Some((len, prefix)) = read_length_prefix(rest)? else { return hold(batch) };
            if len == 0 {
                return Err(FrameError::Empty);
            }
            let Some(head) = rest.get(prefix..prefix + len.min(SERVERBOUND_HEAD)) else { return hold(batch) };
            match VarInt::decode_partial(head) {
                Ok((PluginMessage::SERVERBOUND_ID, n)) if is_bungee(head.get(n..).unwrap_or_default()) => {
                    self.dropping = true;
                    self.dropped += 1;
                }
                Ok((Leftovers::SERVERBOUND_ID, _)) => self.closes += 1,
                _ => {}
            }
            if !self.dropping {
                if out != at {
                    batch.copy_within(at..at + prefix, out);
                }
                out += prefix;
            }
            at += prefix;
            self.remaining = len;
        }
    }
}

/// What a frame head says about the frame.
enum Class {
    Pass,
    Record,
    Handover,
}

// A head holds a one-byte packet id, the channel's one-byte length and `BungeeCord`.
const _: () = assert!(HEAD_LEN > 2 + BUNGEE_CHANNEL.len());

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used, clippy::indexing_slicing)]
    use super::*;
    use crate::frame::encode_frame;
    use crate::packets::ChatMessage;

    fn frame(id: i32, fields: &[u8]) -> Vec<u8> {
        let mut out = BytesMut::new();
        encode_frame(&mut out, id, fields).unwrap();
        out.to_vec()
    }

    fn plugin(channel: &str, data: &[u8]) -> Vec<u8> {
        let mut fields = Vec::new();
        PluginMessage { channel: channel.into(), data: data.to_vec() }.encode_fields(&mut fields).unwrap();
        frame(PluginMessage::CLIENTBOUND_ID, &fields)
    }

    fn join_game(entity: i32) -> Vec<u8> {
        // S01: i32 entity id, u8 game mode, i8 dimension, u8 difficulty, u8 max players, String level type.
        let mut fields = entity.to_be_bytes().to_vec();
        fields.extend_from_slice(&[0, 0, 1, 20, 7]);
        fields.extend_from_slice(b"default");
        frame(0x01, &fields)
    }

    /// Feeds `stream` in pieces of `size` bytes as a relay would (held bytes start the next piece) and returns
    /// the bytes passed and the handover offset in the stream, if any.
    fn relay(watch: &mut ClientboundWatch, stream: &[u8], size: usize) -> (Vec<u8>, Option<usize>) {
        let mut passed = Vec::new();
        let mut held = Vec::new();
        for piece in stream.chunks(size) {
            let mut batch = std::mem::take(&mut held);
            batch.extend_from_slice(piece);
            match watch.scan(&batch, 0).unwrap() {
                Verdict::Pass => passed.extend_from_slice(&batch),
                Verdict::Hold(k) => {
                    assert!(batch.len() - k < MAX_HELD, "held {} bytes", batch.len() - k);
                    passed.extend_from_slice(&batch[..k]);
                    held = batch[k..].to_vec();
                }
                Verdict::Handover(k) => {
                    passed.extend_from_slice(&batch[..k]);
                    return (passed.clone(), Some(passed.len()));
                }
            }
        }
        assert!(held.is_empty() || stream.is_empty());
        (passed, None)
    }

    #[test]
    fn a_connect_hands_over_at_its_first_byte_whatever_the_batch_sizes() {
        let hello = plugin(fml::CHANNEL, &[fml::SERVER_HELLO, 2]);
        let before =
            [hello.clone(), join_game(42), ChatMessage { json: "\"hi\"".into() }.to_frame_bytes().unwrap().to_vec()]
                .concat();
        let connect = plugin(BUNGEE_CHANNEL, &super::super::BungeeRequest::connect_payload("b").unwrap());
        let stream = [before.clone(), connect, frame(0x00, &[0, 0, 0, 1])].concat();
        for size in 1..=stream.len() {
            let mut watch = ClientboundWatch::new(false);
            let (passed, handover) = relay(&mut watch, &stream, size);
            assert_eq!(handover, Some(before.len()), "batch size {size}");
            assert_eq!(passed, before, "batch size {size}");
            let watched = watch.finish(0);
            assert_eq!(watched.client_entity, Some(42));
            assert_eq!(watched.fml_record.as_deref(), Some(&hello[..]), "the handshake before Join Game is recorded");
        }
    }

    #[test]
    fn every_bungeecord_message_hands_over() {
        for data in [&b"\x00\x0aGetServers"[..], b"\x00\x0cConnectOther\x00\x01a\x00\x01b", b"", b"\x00\x07Conn"] {
            let stream = [join_game(7), plugin(BUNGEE_CHANNEL, data)].concat();
            for size in 1..=stream.len() {
                let mut watch = ClientboundWatch::new(false);
                assert_eq!(relay(&mut watch, &stream, size).1, Some(join_game(7).len()), "batch size {size}");
            }
        }
    }

    /// Feeds `stream` through a filter in pieces of `size` bytes (held bytes start the next piece).
    fn filtered(filter: &mut ServerboundFilter, stream: &[u8], size: usize) -> Vec<u8> {
        let mut passed = Vec::new();
        let mut held = Vec::new();
        for piece in stream.chunks(size) {
            let mut batch = std::mem::take(&mut held);
            batch.extend_from_slice(piece);
            let f = filter.filter(&mut batch).unwrap();
            assert!(f.held < MAX_HELD_SERVERBOUND + 1, "held {} bytes", f.held);
            passed.extend_from_slice(&batch[..f.pass]);
            held = batch[f.pass..f.pass + f.held].to_vec();
        }
        assert!(held.is_empty());
        passed
    }

    #[test]
    fn serverbound_bungeecord_messages_are_dropped_whatever_the_batch_sizes() {
        let c17 = |channel: &str, data: &[u8]| {
            let mut fields = Vec::new();
            PluginMessage { channel: channel.into(), data: data.to_vec() }.encode_fields(&mut fields).unwrap();
            frame(PluginMessage::SERVERBOUND_ID, &fields)
        };
        let chat = frame(0x01, b"\x02hi");
        let close = frame(0x0d, &[3]);
        let keep = [chat.clone(), c17("BungeeCore", b"x"), close.clone(), c17("MC|Brand", b"fml")].concat();
        let stream = [
            chat.clone(),
            c17(BUNGEE_CHANNEL, b"\x00\x07Connect\x00\x01a"),
            c17("BungeeCore", b"x"),
            close.clone(),
            c17(BUNGEE_CHANNEL, &[7; 300]),
            c17("MC|Brand", b"fml"),
        ]
        .concat();
        for size in 1..=stream.len() {
            let mut filter = ServerboundFilter::new();
            assert_eq!(filtered(&mut filter, &stream, size), keep, "batch size {size}");
            assert_eq!((filter.closes(), filter.dropped()), (1, 2));
            assert_eq!(filter.under_way(), (0, false));
        }
        // A frame under way: 2 bytes of the 300-byte one were seen.
        let mut filter = ServerboundFilter::new();
        let big = c17(BUNGEE_CHANNEL, &[7; 300]);
        let mut part = big[..16].to_vec();
        assert_eq!(filter.filter(&mut part).unwrap(), Filtered { pass: 0, held: 0 });
        assert_eq!(filter.under_way(), (big.len() - 16, true));
        let mut bad = [0x80, 0x80, 0x80, 0x01];
        assert_eq!(ServerboundFilter::new().filter(&mut bad), Err(FrameError::LengthPrefixTooLong));
    }

    #[test]
    fn other_channels_and_a_disconnect_without_fallback_pass() {
        let stream = [
            join_game(7),
            plugin("BungeeCore", b"x"),
            plugin("FML|HS", &[fml::SERVER_HELLO]),
            plugin("B", b""),
            PlayDisconnect { reason_json: "\"bye\"".into() }.to_frame_bytes().unwrap().to_vec(),
        ]
        .concat();
        for size in 1..=stream.len() {
            let mut watch = ClientboundWatch::new(false);
            assert_eq!(relay(&mut watch, &stream, size), (stream.clone(), None), "batch size {size}");
            // After Join Game nothing more is recorded.
            assert_eq!(watch.finish(0).fml_record.as_deref(), Some(&[][..]));
        }
        let disconnect = PlayDisconnect { reason_json: "\"bye\"".into() }.to_frame_bytes().unwrap().len();
        let mut watch = ClientboundWatch::new(true);
        assert_eq!(
            relay(&mut watch, &stream, 64).1,
            Some(stream.len() - disconnect),
            "with a fallback, S40 hands over"
        );
    }

    #[test]
    fn leftovers_follow_the_stream_and_a_closed_window_is_not_left() {
        let open = frame(0x2d, &[3, 0, 1, b'c', 27, 1]);
        let objective = frame(0x3b, &[1, b'o', 1, b'O', 0]);
        let stream = [join_game(1), open, objective].concat();
        let mut watch = ClientboundWatch::new(false);
        assert_eq!(watch.scan(&stream, 5).unwrap(), Verdict::Pass);
        let mut expected = Leftovers::default();
        expected.observe(Direction::Clientbound, 0x2d, &[3, 0, 1, b'c', 27, 1]);
        expected.observe(Direction::Clientbound, 0x3b, &[1, b'o', 1, b'O', 0]);
        let mut open_still = ClientboundWatch::new(false);
        open_still.scan(&stream, 5).unwrap();
        assert_eq!(open_still.finish(5).leftovers, expected, "no C0D since the window opened");
        expected.observe(Direction::Serverbound, 0x0d, &[3]);
        assert_eq!(watch.finish(6).leftovers, expected, "the client closed it");
    }

    #[test]
    fn a_bad_length_prefix_is_an_error_and_a_short_head_is_held() {
        let mut watch = ClientboundWatch::new(false);
        assert_eq!(watch.scan(&[0x80, 0x80, 0x80, 0x01], 0), Err(FrameError::LengthPrefixTooLong));
        let mut watch = ClientboundWatch::new(false);
        assert_eq!(watch.scan(&[0x00], 0), Err(FrameError::Empty));
        let mut watch = ClientboundWatch::new(false);
        // A 40-byte frame whose head is not all here yet: held from its first byte.
        assert_eq!(watch.scan(&[0x01, 0x00, 40, 0x3f, 10, b'B'], 0).unwrap(), Verdict::Hold(2));
        // The longest hold: a 3-byte length prefix and all but the last byte of a head.
        let mut watch = ClientboundWatch::new(false);
        let mut long = vec![0x80, 0x80, 0x01];
        long.extend_from_slice(&[0x3f; HEAD_LEN - 1]);
        assert_eq!(long.len(), MAX_HELD - 1);
        assert_eq!(watch.scan(&long, 0).unwrap(), Verdict::Hold(0));
        assert!(watch.at_boundary());
    }
}
