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
use crate::frame::{read_length_prefix, MAX_FRAME_LEN, MAX_LENGTH_PREFIX, MAX_WIDE_FRAME_LEN};
use crate::packets::{JoinGame, Packet, PlayDisconnect, PluginMessage};
use crate::varint::VarInt;

/// Body bytes at the start of a frame that tell what it is, or all of a shorter body: the packet id (1 byte in
/// protocol 5) and, for a Plugin Message, the channel's VarInt length, the channel (`BungeeCord`: 10 bytes),
/// the data's length (2 bytes, or Forge's 3) and the subchannel as `writeUTF` writes it (`u16` length,
/// `Connect`: 7 bytes); 24 bytes. Only the channel decides.
pub const HEAD_LEN: usize = 24;

/// Longest frame the watch copies to learn from (Join Game, the Forge handshake, what [`Leftovers`] tracks),
/// in bytes: what a vanilla frame holds. Past it, a Join Game is refused as [`FrameError::TooLarge`] (no 1.7
/// server sends one), a Forge handshake frame drops the handshake record (as one over
/// [`fml::MAX_RECORD_BYTES`] does), and a leftover frame passes unrecorded.
pub const MAX_RECORDED_FRAME: usize = MAX_FRAME_LEN;

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
    /// Longest frame followed, in bytes.
    max_frame_len: usize,
}

impl ClientboundWatch {
    /// A watch at the start of a stream (the Login Success frame may come first: as a Play frame its id 0x02
    /// is a Chat Message, which the watch passes). `fallback`: a Play Disconnect hands over. Frames may be
    /// `max_frame_len` bytes long (prefixes as wide as [`crate::frame::prefix_width`] allows); whatever their
    /// size, the watch holds at most a frame head and the frames it records.
    pub fn new(fallback: bool, max_frame_len: usize) -> Self {
        Self {
            fallback,
            remaining: 0,
            capture: None,
            watched: Watched { fml_record: Some(BytesMut::new()), ..Watched::default() },
            window_closes: 0,
            max_frame_len: max_frame_len.min(MAX_WIDE_FRAME_LEN),
        }
    }

    /// The longest frame followed, in bytes.
    pub fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }

    /// True between two frames.
    pub fn at_boundary(&self) -> bool {
        self.remaining == 0
    }

    /// Bytes left of the frame under way (0 between two frames; a frame head held back is not under way).
    pub fn remaining(&self) -> usize {
        self.remaining
    }

    /// Follows the next batch. `closes`: the Close Window (C0D) frames the client has sent so far.
    ///
    /// # Errors
    /// [`FrameError::LengthPrefixTooLong`], [`FrameError::Empty`] or [`FrameError::TooLarge`] (over the limit,
    /// or a Join Game over [`MAX_RECORDED_FRAME`]): the stream cannot be followed, and the watch must not be
    /// used again.
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
            let Some((len, prefix)) = read_length_prefix(rest, self.max_frame_len)? else {
                return Ok(Verdict::Hold(at));
            };
            let Some(head) = rest.get(prefix..prefix + len.min(HEAD_LEN)) else { return Ok(Verdict::Hold(at)) };
            match self.classify(head) {
                Class::Handover => return Ok(Verdict::Handover(at)),
                Class::Record if len <= MAX_RECORDED_FRAME => self.capture = Some(Vec::with_capacity(len)),
                Class::Record => self.too_large_to_record(head, len)?,
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

    /// A frame the watch would record is over [`MAX_RECORDED_FRAME`]: see there.
    fn too_large_to_record(&mut self, head: &[u8], len: usize) -> Result<(), FrameError> {
        match VarInt::decode_partial(head) {
            Ok((JoinGame::ID, _)) => Err(FrameError::TooLarge { len, max: MAX_RECORDED_FRAME }),
            Ok((PluginMessage::CLIENTBOUND_ID, _)) => {
                self.watched.fml_record = None;
                Ok(())
            }
            _ => Ok(()),
        }
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
/// `BungeeCord` channel (VarInt length 10 in any of its forms, then `BungeeCord`).
fn is_bungee(fields: &[u8]) -> bool {
    super::starts_with_channel(fields, BUNGEE_CHANNEL)
}

/// Body bytes at the start of a serverbound frame that tell whether it is dropped: the packet id (1 byte in
/// protocol 5) and the channel's VarInt length (up to 5 bytes) and name (`BungeeCord`).
const SERVERBOUND_HEAD: usize = 1 + super::bungeecord::CHANNEL_HEAD;

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
#[derive(Clone, Debug)]
pub struct ServerboundFilter {
    /// Body bytes of the current frame not seen yet.
    remaining: usize,
    /// The current frame is dropped.
    dropping: bool,
    closes: u64,
    dropped: u64,
    /// Longest frame followed, in bytes.
    max_frame_len: usize,
}

impl Default for ServerboundFilter {
    fn default() -> Self {
        Self::new()
    }
}

impl ServerboundFilter {
    /// A filter at the start of a Play stream of vanilla frames (at most [`MAX_FRAME_LEN`] bytes).
    pub fn new() -> Self {
        Self::with_limit(MAX_FRAME_LEN)
    }

    /// A filter at the start of a Play stream whose frames may be `max_frame_len` bytes long; it holds at most a
    /// frame head whatever their size.
    pub fn with_limit(max_frame_len: usize) -> Self {
        Self {
            remaining: 0,
            dropping: false,
            closes: 0,
            dropped: 0,
            max_frame_len: max_frame_len.min(MAX_WIDE_FRAME_LEN),
        }
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
    /// [`FrameError::LengthPrefixTooLong`], [`FrameError::Empty`] or [`FrameError::TooLarge`]: the stream
    /// cannot be followed; the batch must not be sent, and the filter must not be used again.
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
            let Some((len, prefix)) = read_length_prefix(rest, self.max_frame_len)? else { return hold(batch) };
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

// A head holds a one-byte packet id, the channel's length in its longest form and `BungeeCord`.
const _: () = assert!(HEAD_LEN > 1 + super::bungeecord::CHANNEL_HEAD);

#[cfg(test)]
mod tests;
