//! Protocol 5 framing: `VarInt length` + `body`, where `body` = `VarInt packet id` + packet fields.
//!
//! No compression exists in 1.7.10. The reference implementation reads the length with at most 3 bytes
//! (`MessageDeserializer2`), so a body is at most 2,097,151 bytes and a prefix that still has its continuation
//! bit set in its third byte is an error. A length of 0 cannot hold a packet id and is refused too.
//!
//! GT New Horizons' Hodgepodge (`increasePacketSizeLimit`, `packetSizeLimit` = 256 MiB by default) reads and
//! writes prefixes of up to 5 bytes, on the server and the client alike. Every reader here therefore takes a
//! limit in bytes, and the prefix may be as wide as that limit needs ([`prefix_width`]: 3 bytes up to
//! [`MAX_FRAME_LEN`], so a vanilla limit keeps the vanilla rule, 5 bytes for 256 MiB), never wider.
//!
//! [`FrameDecoder`] is sans-IO, shaped like valence_protocol's decoder: the caller queues bytes it read and
//! asks for the next complete frame. The declared length is checked against the limit as soon as the prefix is
//! complete, before the decoder waits for (and so before the caller buffers) the body.

use bytes::{Buf, BufMut, BytesMut};

use crate::error::{EncodeError, FrameError};
use crate::varint::{decode_bounded, VarInt, VarIntDecodeError};

/// Largest frame body in vanilla 1.7.10, in bytes: the largest value of a 3-byte VarInt (`FF FF 7F`).
pub const MAX_FRAME_LEN: usize = 2_097_151;

/// Largest frame body any dialect can declare, in bytes: a Java `int` (a 5-byte prefix).
pub const MAX_WIDE_FRAME_LEN: usize = i32::MAX as usize;

/// Largest number of bytes in a frame length prefix of any dialect (a VarInt's most).
pub const MAX_LENGTH_PREFIX: usize = VarInt::MAX_SIZE;

/// Largest number of bytes in a vanilla frame length prefix.
pub const VANILLA_LENGTH_PREFIX: usize = 3;

/// How many bytes a length prefix may take under a limit of `max_frame_len` bytes: the VarInt width of the
/// limit, and never less than vanilla's 3 (a tight limit refuses a long frame as too large, not as a bad
/// prefix).
///
/// ```
/// use moonbridge_protocol::frame::prefix_width;
/// assert_eq!(prefix_width(64), 3);
/// assert_eq!(prefix_width(2_097_151), 3);
/// assert_eq!(prefix_width(2_097_152), 4);
/// assert_eq!(prefix_width(256 << 20), 5);
/// ```
pub const fn prefix_width(max_frame_len: usize) -> usize {
    let mut width = 1;
    let mut rest = max_frame_len >> 7;
    while rest > 0 && width < MAX_LENGTH_PREFIX {
        width += 1;
        rest >>= 7;
    }
    if width < VANILLA_LENGTH_PREFIX {
        VANILLA_LENGTH_PREFIX
    } else {
        width
    }
}

/// One frame taken off the stream: its packet id and the fields after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The packet id (the VarInt at the start of the body).
    pub id: i32,
    /// The packet fields after the id.
    pub body: BytesMut,
}

/// Reads a length prefix at the start of `buf` under a limit of `max_frame_len` bytes: `Ok(Some((length,
/// prefix bytes)))`, `Ok(None)` while incomplete.
///
/// # Errors
/// [`FrameError::LengthPrefixTooLong`] past [`prefix_width`]; [`FrameError::Empty`] for 0;
/// [`FrameError::TooLarge`] over the limit.
pub(crate) fn read_length_prefix(buf: &[u8], max_frame_len: usize) -> Result<Option<(usize, usize)>, FrameError> {
    match decode_bounded(buf, prefix_width(max_frame_len)) {
        Ok((0, _)) => Err(FrameError::Empty),
        // A 5-byte VarInt is at most 2^35 - 1: no truncation on 64-bit targets, and saturated elsewhere.
        Ok((len, n)) => {
            let len = usize::try_from(len).unwrap_or(usize::MAX);
            if len > max_frame_len {
                Err(FrameError::TooLarge { len, max: max_frame_len })
            } else {
                Ok(Some((len, n)))
            }
        }
        Err(VarIntDecodeError::Incomplete) => Ok(None),
        Err(VarIntDecodeError::TooLong) => Err(FrameError::LengthPrefixTooLong),
    }
}

/// Sans-IO frame decoder with an adjustable size limit.
///
/// ```
/// use moonbridge_protocol::frame::FrameDecoder;
/// let mut dec = FrameDecoder::new(64);
/// dec.queue_slice(&[0x07, 0x00, 0x05, b'S', b't']);
/// assert_eq!(dec.try_next_frame(), Ok(None)); // waiting for the rest of the body
/// dec.queue_slice(b"eve");
/// let frame = dec.try_next_frame().unwrap().unwrap();
/// assert_eq!(frame.id, 0);
/// ```
#[derive(Debug)]
pub struct FrameDecoder {
    buf: BytesMut,
    max_frame_len: usize,
}

impl FrameDecoder {
    /// A decoder that refuses bodies longer than `max_frame_len` bytes (clamped to [`MAX_WIDE_FRAME_LEN`]);
    /// its prefixes may be [`prefix_width`] bytes wide.
    pub fn new(max_frame_len: usize) -> Self {
        Self { buf: BytesMut::new(), max_frame_len: max_frame_len.min(MAX_WIDE_FRAME_LEN) }
    }

    /// Changes the limit for frames not yet returned (for example after the handshake stage).
    pub fn set_max_frame_len(&mut self, max_frame_len: usize) {
        self.max_frame_len = max_frame_len.min(MAX_WIDE_FRAME_LEN);
    }

    /// The current limit in bytes.
    pub fn max_frame_len(&self) -> usize {
        self.max_frame_len
    }

    /// Appends bytes read from the stream, taking ownership without copying when possible.
    pub fn queue_bytes(&mut self, bytes: BytesMut) {
        self.buf.unsplit(bytes);
    }

    /// Appends a copy of `bytes`.
    pub fn queue_slice(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// Bytes queued but not yet returned as frames.
    pub fn buffered(&self) -> &[u8] {
        &self.buf
    }

    /// Takes every queued byte not yet returned as a frame, leaving the decoder empty.
    pub fn take_buffered(&mut self) -> BytesMut {
        self.buf.split()
    }

    /// How many more bytes the next frame needs before [`Self::try_next_frame`] can return it: at least 1
    /// while the length prefix is incomplete, 0 when a frame is ready. Lets a reader size its next read so
    /// nothing past the frame is buffered.
    ///
    /// # Errors
    /// As [`Self::try_next_frame`] for a bad prefix.
    pub fn bytes_wanted(&self) -> Result<usize, FrameError> {
        match read_length_prefix(&self.buf, self.max_frame_len)? {
            None => Ok(1),
            Some((len, n)) => Ok((n + len).saturating_sub(self.buf.len())),
        }
    }

    /// Returns the next complete frame, `Ok(None)` when more bytes are needed.
    ///
    /// # Errors
    /// [`FrameError::LengthPrefixTooLong`], [`FrameError::Empty`] or [`FrameError::TooLarge`] as soon as the
    /// prefix shows it (without waiting for the body); [`FrameError::BadPacketId`] when the body does not start
    /// with a VarInt. After an error the stream cannot be resynchronised.
    pub fn try_next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let Some((len, n)) = read_length_prefix(&self.buf, self.max_frame_len)? else {
            return Ok(None);
        };
        if self.buf.len() < n + len {
            return Ok(None);
        }
        self.buf.advance(n);
        let mut body = self.buf.split_to(len);
        let (id, id_len) = VarInt::decode_partial(&body).map_err(|_| FrameError::BadPacketId)?;
        body.advance(id_len);
        Ok(Some(Frame { id, body }))
    }

    /// Takes the longest run of complete frames at the front for which `pass(packet_id, fields)` is true (`fields`:
    /// the body after the packet id), as they were
    /// queued (length prefixes included), without parsing further: a relay passes frames it need not look into
    /// with no copy per frame. Stops at the first frame that is incomplete or that `pass` refuses, which
    /// [`Self::try_next_frame`] then returns.
    ///
    /// # Errors
    /// As [`Self::try_next_frame`] for a frame of the run; the bytes before it are not taken then.
    pub fn take_passing(&mut self, pass: impl FnMut(i32, &[u8]) -> bool) -> Result<BytesMut, FrameError> {
        let at = passing_len(&self.buf, self.max_frame_len, pass)?;
        Ok(self.buf.split_to(at))
    }

    /// True when no byte is queued.
    pub fn is_empty(&self) -> bool {
        self.buf.is_empty()
    }
}

#[cfg(test)]
mod take_passing_tests {
    use super::*;

    #[test]
    fn a_run_of_passing_frames_is_taken_whole() {
        let mut dec = FrameDecoder::new(16);
        // Three frames (ids 1, 1, 5) and the start of a fourth.
        dec.queue_slice(&[2, 1, 9, 1, 1, 3, 5, 7, 7, 4, 1]);
        assert_eq!(&dec.take_passing(|id, _| id == 1).unwrap()[..], &[2, 1, 9, 1, 1]);
        assert_eq!(&dec.take_passing(|id, _| id == 1).unwrap()[..], &[] as &[u8]);
        assert_eq!(dec.try_next_frame().unwrap().map(|f| f.id), Some(5));
        assert_eq!(&dec.take_passing(|_, _| true).unwrap()[..], &[] as &[u8], "an incomplete frame stays");
        assert_eq!(dec.buffered(), &[4, 1]);
        let mut big = FrameDecoder::new(2);
        big.queue_slice(&[1, 1, 3, 0]);
        assert_eq!(big.take_passing(|_, _| true), Err(FrameError::TooLarge { len: 3, max: 2 }));
        assert_eq!(big.buffered().len(), 4, "nothing taken before the error");
        assert_eq!(passing_len(&[2, 1, 9, 1, 1, 3, 5, 7, 7], 16, |id, _| id == 1), Ok(5));
        assert_eq!(passing_len(&[1, 1, 0], 16, |_, _| true), Err(FrameError::Empty));
        // A run may end inside a frame that passes on its head: its rest is owed.
        let stream = [2, 1, 9, 6, 1, 7, 7, 7];
        assert_eq!(passing_run(&stream, 16, 2, |id, _| id == 1), Ok(Run { len: 8, owed: 2 }));
        assert_eq!(passing_run(&stream, 16, 2, |id, f| id == 1 && f.len() < 2), Ok(Run { len: 3, owed: 0 }));
        assert_eq!(passing_run(&stream[..4], 16, 2, |_, _| true), Ok(Run { len: 3, owed: 0 }), "too little head");
        assert_eq!(passing_run(&stream, 16, 2, |id, _| id == 5), Ok(Run { len: 0, owed: 0 }));
        // A whole frame refused stays whole.
        assert_eq!(passing_run(&[2, 5, 1, 2, 1, 0], 16, 2, |id, _| id == 1), Ok(Run { len: 0, owed: 0 }));
        assert_eq!(passing_run(&[0], 16, 2, |_, _| true), Err(FrameError::Empty));
    }
}

/// How many bytes at the start of `buf` are complete frames for which `pass(packet_id, fields)` is true: the run
/// [`FrameDecoder::take_passing`] takes, for bytes not queued in a decoder (a relay passes them straight on
/// and queues only the rest).
///
/// # Errors
/// As [`FrameDecoder::try_next_frame`] (with `max_frame_len` as its limit) for a frame of the run.
pub fn passing_len(
    buf: &[u8],
    max_frame_len: usize,
    mut pass: impl FnMut(i32, &[u8]) -> bool,
) -> Result<usize, FrameError> {
    let mut at = 0;
    loop {
        let rest = buf.get(at..).unwrap_or_default();
        let Some((len, n)) = read_length_prefix(rest, max_frame_len)? else { return Ok(at) };
        let Some(body) = rest.get(n..n + len) else { return Ok(at) };
        let (id, k) = VarInt::decode_partial(body).map_err(|_| FrameError::BadPacketId)?;
        if !pass(id, body.get(k..).unwrap_or_default()) {
            return Ok(at);
        }
        at += n + len;
    }
}

/// What [`passing_run`] found at the start of a buffer.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Run {
    /// Bytes from the start that may go on as they are.
    pub len: usize,
    /// Body bytes of the last frame of the run that are not in the buffer yet (0 when the run ends with a whole
    /// frame): they may go on as they arrive, before anything else.
    pub owed: usize,
}

/// The start of the frame at the start of a buffer, once its head is there ([`frame_head`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Head<'a> {
    /// The declared body length in bytes (packet id included).
    pub len: usize,
    /// Bytes of the length prefix.
    pub prefix: usize,
    /// The packet id.
    pub id: i32,
    /// The fields after the packet id, as far as they are in the buffer (at most the frame's).
    pub fields: &'a [u8],
}

impl Head<'_> {
    /// Bytes of the frame (prefix and body) in all.
    pub fn total(&self) -> usize {
        self.prefix + self.len
    }
}

/// The frame at the start of `buf` once its first `head` body bytes (or all of a shorter body) are there;
/// `Ok(None)` before.
///
/// # Errors
/// As [`FrameDecoder::try_next_frame`] (with `max_frame_len` as its limit).
pub fn frame_head(buf: &[u8], max_frame_len: usize, head: usize) -> Result<Option<Head<'_>>, FrameError> {
    let Some((len, prefix)) = read_length_prefix(buf, max_frame_len)? else { return Ok(None) };
    let body = buf.get(prefix..).unwrap_or_default();
    let body = body.get(..len.min(body.len())).unwrap_or_default();
    if body.len() < len.min(head) {
        return Ok(None);
    }
    let (id, k) = VarInt::decode_partial(body).map_err(|_| FrameError::BadPacketId)?;
    Ok(Some(Head { len, prefix, id, fields: body.get(k..).unwrap_or_default() }))
}

/// [`passing_len`], and then the start of one more frame that `pass` lets through on its first `head` body
/// bytes (or all of a shorter body): a relay passes a large frame nobody looks into as it arrives, never
/// holding it whole. `pass` sees the fields after the packet id as far as they came.
///
/// # Errors
/// As [`passing_len`].
pub fn passing_run(
    buf: &[u8],
    max_frame_len: usize,
    head: usize,
    mut pass: impl FnMut(i32, &[u8]) -> bool,
) -> Result<Run, FrameError> {
    let at = passing_len(buf, max_frame_len, &mut pass)?;
    let rest = buf.get(at..).unwrap_or_default();
    match frame_head(rest, max_frame_len, head)? {
        Some(h) if h.total() > rest.len() && pass(h.id, h.fields) => {
            Ok(Run { len: buf.len(), owed: h.total() - rest.len() })
        }
        // A whole frame `pass` refused, too little of a head to tell, or nothing more.
        _ => Ok(Run { len: at, owed: 0 }),
    }
}

/// The packet id of the frame at the start of `buf`, without consuming it; `Ok(None)` until the length
/// prefix and the id are complete. Any length a vanilla prefix can declare is accepted.
///
/// # Errors
/// [`FrameError`] for a bad length prefix or a packet id that does not fit the frame.
pub fn peek_packet_id(buf: &[u8]) -> Result<Option<i32>, FrameError> {
    let Some((len, n)) = read_length_prefix(buf, MAX_FRAME_LEN)? else {
        return Ok(None);
    };
    let body = buf.get(n..).unwrap_or_default();
    let body = body.get(..len.min(body.len())).unwrap_or_default();
    match VarInt::decode_partial(body) {
        Ok((id, _)) => Ok(Some(id)),
        Err(VarIntDecodeError::Incomplete) if body.len() < len => Ok(None),
        Err(_) => Err(FrameError::BadPacketId),
    }
}

/// Appends one frame: length prefix, packet id and `fields`.
///
/// # Errors
/// [`EncodeError::FrameTooLarge`] when id plus fields exceed [`MAX_FRAME_LEN`] (see [`encode_wide_frame`]).
pub fn encode_frame(out: &mut impl BufMut, id: i32, fields: &[u8]) -> Result<(), EncodeError> {
    encode_frame_within(out, id, fields, MAX_FRAME_LEN)
}

/// [`encode_frame`] for a dialect with wider prefixes: id plus fields up to `max_frame_len` bytes (at most
/// [`MAX_WIDE_FRAME_LEN`]), with a prefix of up to 5 bytes.
///
/// # Errors
/// [`EncodeError::FrameTooLarge`] over `max_frame_len`.
pub fn encode_wide_frame(
    out: &mut impl BufMut,
    id: i32,
    fields: &[u8],
    max_frame_len: usize,
) -> Result<(), EncodeError> {
    encode_frame_within(out, id, fields, max_frame_len.min(MAX_WIDE_FRAME_LEN))
}

fn encode_frame_within(out: &mut impl BufMut, id: i32, fields: &[u8], max: usize) -> Result<(), EncodeError> {
    let len = VarInt(id).written_size() + fields.len();
    let Some(prefix) = i32::try_from(len).ok().filter(|_| len <= max) else {
        return Err(EncodeError::FrameTooLarge(len));
    };
    VarInt(prefix).encode(out);
    VarInt(id).encode(out);
    out.put_slice(fields);
    Ok(())
}

/// Follows frame boundaries in a byte stream without buffering it: O(1) memory, one length prefix read per
/// frame, whatever the frame's size. Used to count frames in relayed or sent bytes and to know when a stream is
/// between two frames (the only place a packet may be injected). Meaningless once the stream is encrypted.
#[derive(Clone, Debug)]
pub struct FrameScanner {
    /// Body bytes of the current frame still to come.
    remaining: usize,
    /// Bytes of an unfinished length prefix.
    prefix: [u8; MAX_LENGTH_PREFIX],
    prefix_len: usize,
    /// The next byte is the first of a frame's body (its packet id's first byte).
    body_start: bool,
    frames: u64,
    /// Longest body followed, in bytes.
    max_frame_len: usize,
}

impl Default for FrameScanner {
    fn default() -> Self {
        Self::new()
    }
}

impl FrameScanner {
    /// A scanner at the start of a stream of vanilla frames (at most [`MAX_FRAME_LEN`] bytes).
    pub fn new() -> Self {
        Self::with_limit(MAX_FRAME_LEN)
    }

    /// A scanner at the start of a stream whose frames may be `max_frame_len` bytes long (prefixes as wide as
    /// [`prefix_width`] allows).
    pub fn with_limit(max_frame_len: usize) -> Self {
        Self {
            remaining: 0,
            prefix: [0; MAX_LENGTH_PREFIX],
            prefix_len: 0,
            body_start: false,
            frames: 0,
            max_frame_len: max_frame_len.min(MAX_WIDE_FRAME_LEN),
        }
    }

    /// Frames completed so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// True when every byte seen so far belongs to a complete frame.
    pub fn at_boundary(&self) -> bool {
        self.remaining == 0 && self.prefix_len == 0
    }

    /// Bytes left of the frame under way (0 at a boundary); `None` inside a length prefix.
    pub fn remaining(&self) -> Option<usize> {
        (self.prefix_len == 0).then_some(self.remaining)
    }

    /// The bytes of a length prefix not finished yet (empty outside one).
    pub fn prefix(&self) -> &[u8] {
        self.prefix.get(..self.prefix_len).unwrap_or_default()
    }

    /// Consumes the next bytes of the stream and returns how many frames they completed.
    ///
    /// # Errors
    /// [`FrameError::LengthPrefixTooLong`], [`FrameError::Empty`] or [`FrameError::TooLarge`]; the scanner is
    /// then stuck and further calls return an error.
    pub fn scan(&mut self, bytes: &[u8]) -> Result<u64, FrameError> {
        self.scan_ids(bytes, |_| {})
    }

    /// [`FrameScanner::scan`], calling `first_byte` with the first body byte of every frame: the packet id
    /// itself when it is below 0x80 (every packet id of protocol 5 is).
    ///
    /// # Errors
    /// As [`FrameScanner::scan`].
    pub fn scan_ids(&mut self, mut bytes: &[u8], mut first_byte: impl FnMut(u8)) -> Result<u64, FrameError> {
        let before = self.frames;
        loop {
            if self.remaining > 0 {
                if self.body_start {
                    let Some(&first) = bytes.first() else { return Ok(self.frames - before) };
                    first_byte(first);
                    self.body_start = false;
                }
                let take = self.remaining.min(bytes.len());
                self.remaining -= take;
                bytes = bytes.get(take..).unwrap_or_default();
                if self.remaining == 0 {
                    self.frames += 1;
                }
            }
            let Some((&byte, rest)) = bytes.split_first() else {
                return Ok(self.frames - before);
            };
            bytes = rest;
            if self.prefix_len >= prefix_width(self.max_frame_len) {
                return Err(FrameError::LengthPrefixTooLong);
            }
            if let Some(slot) = self.prefix.get_mut(self.prefix_len) {
                *slot = byte;
            }
            self.prefix_len += 1;
            let prefix = self.prefix.get(..self.prefix_len).unwrap_or_default();
            if let Some((len, _)) = read_length_prefix(prefix, self.max_frame_len)? {
                self.prefix_len = 0;
                self.remaining = len;
                self.body_start = true;
            }
        }
    }

    /// Consumes the bytes at the start of `bytes` that finish the frame under way, and returns how many: 0 at a
    /// boundary. A proxy that takes over a stream in the middle of a frame passes these on unparsed.
    ///
    /// # Errors
    /// As [`FrameScanner::scan`], for a length prefix that was under way.
    pub fn finish_frame(&mut self, bytes: &[u8]) -> Result<usize, FrameError> {
        let mut used = 0;
        while !self.at_boundary() {
            let Some(rest) = bytes.get(used..).filter(|r| !r.is_empty()) else { break };
            // Inside a body: the rest of it at once; inside a length prefix: one byte at a time.
            let step = if self.remaining > 0 { self.remaining.min(rest.len()) } else { 1 };
            self.scan(rest.get(..step).unwrap_or_default())?;
            used += step;
        }
        Ok(used)
    }
}

#[cfg(test)]
mod tests;
