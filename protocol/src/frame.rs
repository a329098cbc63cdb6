//! Protocol 5 framing: `VarInt length` + `body`, where `body` = `VarInt packet id` + packet fields.
//!
//! No compression exists in 1.7.10. The reference implementation reads the length with at most 3 bytes
//! (`MessageDeserializer2`), so a body is at most 2,097,151 bytes and a prefix that still has its continuation
//! bit set in its third byte is an error. A length of 0 cannot hold a packet id and is refused too.
//!
//! [`FrameDecoder`] is sans-IO, shaped like valence_protocol's decoder: the caller queues bytes it read and
//! asks for the next complete frame. The declared length is checked against the limit as soon as the prefix is
//! complete, before the decoder waits for (and so before the caller buffers) the body.

use bytes::{Buf, BufMut, BytesMut};

use crate::error::{EncodeError, FrameError};
use crate::varint::{decode_bounded, VarInt, VarIntDecodeError};

/// Largest frame body in bytes: the largest value of a 3-byte VarInt (`FF FF 7F`).
pub const MAX_FRAME_LEN: usize = 2_097_151;

/// Largest number of bytes in a frame length prefix.
pub const MAX_LENGTH_PREFIX: usize = 3;

/// One frame taken off the stream: its packet id and the fields after it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Frame {
    /// The packet id (the VarInt at the start of the body).
    pub id: i32,
    /// The packet fields after the id.
    pub body: BytesMut,
}

/// Outcome of reading a length prefix at the start of a buffer.
pub(crate) fn read_length_prefix(buf: &[u8]) -> Result<Option<(usize, usize)>, FrameError> {
    match decode_bounded(buf, MAX_LENGTH_PREFIX) {
        // A 3-byte VarInt is at most 2^21 - 1, so this cannot truncate.
        Ok((len, n)) => Ok(Some((len as usize, n))),
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
    /// A decoder that refuses bodies longer than `max_frame_len` bytes (clamped to [`MAX_FRAME_LEN`]).
    pub fn new(max_frame_len: usize) -> Self {
        Self { buf: BytesMut::new(), max_frame_len: max_frame_len.min(MAX_FRAME_LEN) }
    }

    /// Changes the limit for frames not yet returned (for example after the handshake stage).
    pub fn set_max_frame_len(&mut self, max_frame_len: usize) {
        self.max_frame_len = max_frame_len.min(MAX_FRAME_LEN);
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
        match read_length_prefix(&self.buf)? {
            None => Ok(1),
            Some((len, n)) => {
                self.check_len(len)?;
                Ok((n + len).saturating_sub(self.buf.len()))
            }
        }
    }

    fn check_len(&self, len: usize) -> Result<(), FrameError> {
        if len == 0 {
            Err(FrameError::Empty)
        } else if len > self.max_frame_len {
            Err(FrameError::TooLarge { len, max: self.max_frame_len })
        } else {
            Ok(())
        }
    }

    /// Returns the next complete frame, `Ok(None)` when more bytes are needed.
    ///
    /// # Errors
    /// [`FrameError::LengthPrefixTooLong`], [`FrameError::Empty`] or [`FrameError::TooLarge`] as soon as the
    /// prefix shows it (without waiting for the body); [`FrameError::BadPacketId`] when the body does not start
    /// with a VarInt. After an error the stream cannot be resynchronised.
    pub fn try_next_frame(&mut self) -> Result<Option<Frame>, FrameError> {
        let Some((len, n)) = read_length_prefix(&self.buf)? else {
            return Ok(None);
        };
        self.check_len(len)?;
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
        let Some((len, n)) = read_length_prefix(rest)? else { return Ok(at) };
        if len == 0 {
            return Err(FrameError::Empty);
        }
        if len > max_frame_len {
            return Err(FrameError::TooLarge { len, max: max_frame_len });
        }
        let Some(body) = rest.get(n..n + len) else { return Ok(at) };
        let (id, k) = VarInt::decode_partial(body).map_err(|_| FrameError::BadPacketId)?;
        if !pass(id, body.get(k..).unwrap_or_default()) {
            return Ok(at);
        }
        at += n + len;
    }
}

/// The packet id of the frame at the start of `buf`, without consuming it; `Ok(None)` until the length
/// prefix and the id are complete.
///
/// # Errors
/// [`FrameError`] for a bad length prefix or a packet id that does not fit the frame.
pub fn peek_packet_id(buf: &[u8]) -> Result<Option<i32>, FrameError> {
    let Some((len, n)) = read_length_prefix(buf)? else {
        return Ok(None);
    };
    if len == 0 {
        return Err(FrameError::Empty);
    }
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
/// [`EncodeError::FrameTooLarge`] when id plus fields exceed [`MAX_FRAME_LEN`].
pub fn encode_frame(out: &mut impl BufMut, id: i32, fields: &[u8]) -> Result<(), EncodeError> {
    let len = VarInt(id).written_size() + fields.len();
    if len > MAX_FRAME_LEN {
        return Err(EncodeError::FrameTooLarge(len));
    }
    // len <= 2^21 - 1 fits in i32.
    VarInt(len as i32).encode(out);
    VarInt(id).encode(out);
    out.put_slice(fields);
    Ok(())
}

/// Follows frame boundaries in a byte stream without buffering it: O(1) memory, one length prefix read per
/// frame. Used to count frames in relayed or sent bytes and to know when a stream is between two frames
/// (the only place a packet may be injected). Meaningless once the stream is encrypted.
#[derive(Clone, Debug, Default)]
pub struct FrameScanner {
    /// Body bytes of the current frame still to come.
    remaining: usize,
    /// Bytes of an unfinished length prefix.
    prefix: [u8; MAX_LENGTH_PREFIX],
    prefix_len: usize,
    /// The next byte is the first of a frame's body (its packet id's first byte).
    body_start: bool,
    frames: u64,
}

impl FrameScanner {
    /// A scanner at the start of a stream.
    pub fn new() -> Self {
        Self::default()
    }

    /// Frames completed so far.
    pub fn frames(&self) -> u64 {
        self.frames
    }

    /// True when every byte seen so far belongs to a complete frame.
    pub fn at_boundary(&self) -> bool {
        self.remaining == 0 && self.prefix_len == 0
    }

    /// Consumes the next bytes of the stream and returns how many frames they completed.
    ///
    /// # Errors
    /// [`FrameError::LengthPrefixTooLong`] or [`FrameError::Empty`]; the scanner is then stuck and further
    /// calls return the same error class.
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
            if self.prefix_len >= MAX_LENGTH_PREFIX {
                return Err(FrameError::LengthPrefixTooLong);
            }
            if let Some(slot) = self.prefix.get_mut(self.prefix_len) {
                *slot = byte;
            }
            self.prefix_len += 1;
            let prefix = self.prefix.get(..self.prefix_len).unwrap_or_default();
            if let Some((len, _)) = read_length_prefix(prefix)? {
                self.prefix_len = 0;
                if len == 0 {
                    return Err(FrameError::Empty);
                }
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
mod tests {
    use super::*;
    use proptest::prelude::*;

    #[test]
    fn scan_ids_sees_every_first_body_byte_and_finish_frame_stops_at_the_boundary() {
        // Frames: [id 0x0d, 1 byte], [id 0x00 and 200 bytes: a two-byte prefix], [id 0x0d]; they end at 3, 206, 208.
        let mut stream = vec![0x02, 0x0d, 0x07, 0xc9, 0x01, 0x00];
        stream.extend_from_slice(&[0xaa; 200]);
        stream.extend_from_slice(&[0x01, 0x0d]);
        for split in 0..=stream.len() {
            let (a, b) = stream.split_at(split);
            let mut ids = Vec::new();
            let mut scanner = FrameScanner::new();
            let mut frames = scanner.scan_ids(a, |id| ids.push(id)).unwrap();
            frames += scanner.scan_ids(b, |id| ids.push(id)).unwrap();
            assert_eq!((frames, ids.as_slice()), (3, &[0x0d, 0x00, 0x0d][..]), "split at {split}");
            // Taking over after `a`: the rest of the frame under way, then whole frames.
            let mut scanner = FrameScanner::new();
            scanner.scan(a).unwrap();
            let rest = scanner.finish_frame(b).unwrap();
            let ends = [0, 3, 206, 208];
            let expected = ends.iter().find(|&&e| e >= split).unwrap() - split;
            assert_eq!(rest, expected, "split at {split}");
            assert!(scanner.at_boundary());
        }
    }

    #[test]
    fn c2_lengths_up_to_21_bits_are_accepted() {
        // `FF FF 7F` = 2,097,151: accepted, the decoder waits for the body.
        let mut dec = FrameDecoder::new(MAX_FRAME_LEN);
        dec.queue_slice(&[0xff, 0xff, 0x7f, 0x00]);
        assert_eq!(dec.try_next_frame(), Ok(None));
        assert_eq!(dec.bytes_wanted(), Ok(2_097_151 - 1));
    }

    #[test]
    fn c2_wider_lengths_are_refused_at_once() {
        for bad in [&[0x80, 0x80, 0x80, 0x01][..], &[0xff, 0xff, 0xff, 0xff, 0x0f], &[0xff; 64]] {
            let mut dec = FrameDecoder::new(MAX_FRAME_LEN);
            dec.queue_slice(bad);
            assert_eq!(dec.try_next_frame(), Err(FrameError::LengthPrefixTooLong), "{bad:02x?}");
            assert_eq!(dec.bytes_wanted(), Err(FrameError::LengthPrefixTooLong));
        }
        // Even the first three bytes alone are enough to refuse.
        let mut dec = FrameDecoder::new(MAX_FRAME_LEN);
        dec.queue_slice(&[0xff, 0xff, 0xff]);
        assert_eq!(dec.try_next_frame(), Err(FrameError::LengthPrefixTooLong));
        // Two continuation bytes are merely incomplete.
        let mut dec = FrameDecoder::new(MAX_FRAME_LEN);
        dec.queue_slice(&[0xff, 0xff]);
        assert_eq!(dec.try_next_frame(), Ok(None));
    }

    #[test]
    fn zero_length_and_limit() {
        let mut dec = FrameDecoder::new(16);
        dec.queue_slice(&[0x00]);
        assert_eq!(dec.try_next_frame(), Err(FrameError::Empty));

        let mut dec = FrameDecoder::new(16);
        dec.queue_slice(&[0x11]); // 17 > 16, refused before any body byte arrives
        assert_eq!(dec.try_next_frame(), Err(FrameError::TooLarge { len: 17, max: 16 }));
        dec.set_max_frame_len(17);
        assert_eq!(dec.try_next_frame(), Ok(None));
        // The limit never exceeds the protocol maximum.
        assert_eq!(FrameDecoder::new(usize::MAX).max_frame_len(), MAX_FRAME_LEN);
    }

    #[test]
    fn bad_packet_id() {
        let mut dec = FrameDecoder::new(16);
        dec.queue_slice(&[0x01, 0x80]);
        assert_eq!(dec.try_next_frame(), Err(FrameError::BadPacketId));
    }

    #[test]
    fn merged_frames_and_leftover() {
        // HS + LS + the first 3 bytes of the next frame (case C9c).
        let hs = crate::tests::HS;
        let ls = crate::tests::LS;
        let mut dec = FrameDecoder::new(1024);
        let mut all = hs.to_vec();
        all.extend_from_slice(ls);
        all.extend_from_slice(&[0x05, 0x00, 0x01]);
        dec.queue_slice(&all);
        let f1 = dec.try_next_frame().unwrap().unwrap();
        assert_eq!(f1.id, 0);
        assert_eq!(f1.body.len(), hs.len() - 2);
        let f2 = dec.try_next_frame().unwrap().unwrap();
        assert_eq!(&f2.body[..], &ls[2..]);
        assert_eq!(dec.try_next_frame(), Ok(None));
        assert_eq!(dec.bytes_wanted(), Ok(3));
        assert_eq!(&dec.take_buffered()[..], &[0x05, 0x00, 0x01]);
        assert!(dec.buffered().is_empty());
    }

    #[test]
    fn encode_vectors() {
        let mut out = Vec::new();
        encode_frame(&mut out, 0x00, &[0x05, b'S', b't', b'e', b'v', b'e']).unwrap();
        assert_eq!(out, crate::tests::LS);
        assert_eq!(
            encode_frame(&mut Vec::new(), 0, &vec![0; MAX_FRAME_LEN]),
            Err(EncodeError::FrameTooLarge(MAX_FRAME_LEN + 1))
        );
        let mut out = Vec::new();
        encode_frame(&mut out, 0x3f, &vec![7; MAX_FRAME_LEN - 1]).unwrap();
        assert_eq!(&out[..4], &[0xff, 0xff, 0x7f, 0x3f]);
    }

    #[test]
    fn peek_id() {
        assert_eq!(peek_packet_id(&[]), Ok(None));
        assert_eq!(peek_packet_id(&[0x2c]), Ok(None));
        assert_eq!(peek_packet_id(&[0x2c, 0x02, 0x24]), Ok(Some(2)));
        assert_eq!(peek_packet_id(&[0x03, 0x80]), Ok(None));
        assert_eq!(peek_packet_id(&[0x01, 0x80]), Err(FrameError::BadPacketId));
        assert_eq!(peek_packet_id(&[0x00]), Err(FrameError::Empty));
        assert_eq!(peek_packet_id(&[0xff, 0xff, 0xff]), Err(FrameError::LengthPrefixTooLong));
    }

    #[test]
    fn scanner_counts_and_tracks_boundaries() {
        let mut s = FrameScanner::new();
        let mut stream = Vec::new();
        stream.extend_from_slice(crate::tests::HS);
        stream.extend_from_slice(crate::tests::LS);
        assert_eq!(s.scan(&stream[..1]).unwrap(), 0);
        assert!(!s.at_boundary());
        assert_eq!(s.scan(&stream[1..]).unwrap(), 2);
        assert!(s.at_boundary());
        assert_eq!(s.frames(), 2);
        assert_eq!(FrameScanner::new().scan(&[0x80, 0x80, 0x80]), Err(FrameError::LengthPrefixTooLong));
        assert_eq!(FrameScanner::new().scan(&[0x00]), Err(FrameError::Empty));
    }

    proptest! {
        #[test]
        fn frames_round_trip_under_any_split(
            packets in proptest::collection::vec((0i32..0x80, proptest::collection::vec(any::<u8>(), 0..300)), 1..8),
            cuts in proptest::collection::vec(any::<usize>(), 0..8),
        ) {
            let mut stream = Vec::new();
            for (id, body) in &packets {
                encode_frame(&mut stream, *id, body).unwrap();
            }
            let mut points: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
            points.push(0);
            points.push(stream.len());
            points.sort_unstable();
            let mut dec = FrameDecoder::new(MAX_FRAME_LEN);
            let mut scanner = FrameScanner::new();
            let mut got = Vec::new();
            for w in points.windows(2) {
                dec.queue_slice(&stream[w[0]..w[1]]);
                scanner.scan(&stream[w[0]..w[1]]).unwrap();
                while let Some(f) = dec.try_next_frame().unwrap() {
                    got.push((f.id, f.body.to_vec()));
                }
            }
            prop_assert_eq!(got, packets.clone());
            prop_assert_eq!(scanner.frames(), packets.len() as u64);
            prop_assert!(scanner.at_boundary());
            prop_assert!(dec.buffered().is_empty());
        }

        #[test]
        fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), max in 0usize..64) {
            let mut dec = FrameDecoder::new(max);
            dec.queue_slice(&bytes);
            while let Ok(Some(_)) = dec.try_next_frame() {}
            let _ = FrameScanner::new().scan(&bytes);
        }
    }
}
