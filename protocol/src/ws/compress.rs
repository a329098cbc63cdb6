//! Carriage v2 compression, subprotocol `moonbridge.v2.zstd` (docs/carriage.md, "Compression").
//!
//! Everything of carriage v2 holds; in addition every Binary message's payload, in each direction, is the next
//! piece of one zstd stream (RFC 8878) that lives as long as the WebSocket connection: the sender compresses
//! the message's stream bytes and flushes (`ZSTD_e_flush`), so the receiver can decode the whole message from
//! it and the earlier ones. The context is kept across messages, so a small tick compresses against the ticks
//! before it. Control messages (Text) are not compressed. Resume counts (`ack`, `resume`, `resumed`) are in
//! stream bytes, before compression; a resumed connection starts new streams.
//!
//! - **Window:** [`WINDOW_LOG`] (32 KiB). The receiver refuses a stream that asks for more
//!   (`ZSTD_d_windowLogMax`), so a peer cannot make it allocate a larger window.
//! - **Incompressible data** (1.7.10's deflated chunks, gzipped NBT) is not re-encoded: zstd stores any block
//!   that would not shrink as a Raw block (RFC 8878 §3.1.1.2.2), 3 bytes of header per block of up to 32 KiB,
//!   and its bytes still join the window.
//! - **Bombs:** [`Decompressor`] inflates in pieces of at most the caller's room and counts each message's
//!   output; past the limit it stops with [`CompressError::TooLarge`] (close 1009) having produced at most one
//!   piece beyond it, whatever the message's ratio.

use zstd_safe::{CCtx, CParameter, DCtx, DParameter, InBuffer, OutBuffer};

/// The subprotocol of carriage v2 with per-message zstd compression; offered ahead of `moonbridge.v2`.
pub const SUBPROTOCOL_V2_ZSTD: &str = "moonbridge.v2.zstd";

/// Base-2 logarithm of the zstd window both directions use: 15, a 32 KiB window (and 32 KiB blocks). Measured
/// per connection: about 305 KiB for a compressor and 223 KiB for a decompressor in use, against 953 and 607 KiB
/// with a 128 KiB window, for 4–11% more bytes on realistic traffic (docs/benchmarks.md, "Compression").
pub const WINDOW_LOG: u32 = 15;

/// The compression level both ends use unless configured (zstd level 1, its fastest regular level).
pub const DEFAULT_LEVEL: i32 = 1;

/// The piece of output one [`Decompressor::inflate`] step makes room for (64 KiB).
const PIECE: usize = 64 * 1024;

/// Why compressing or decompressing failed.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum CompressError {
    /// A message inflated past the receiver's message limit (close 1009).
    #[error("a compressed message inflates past {max} bytes")]
    TooLarge {
        /// The limit, in bytes of stream data per message.
        max: usize,
    },
    /// The zstd library refused the data or the parameters (its error name).
    #[error("zstd: {0}")]
    Zstd(&'static str),
    /// zstd could not allocate a context.
    #[error("zstd: cannot allocate a context")]
    NoMemory,
}

fn zstd_error(code: usize) -> CompressError {
    CompressError::Zstd(zstd_safe::get_error_name(code))
}

/// One direction's compressing end: a zstd compression context kept for the whole connection.
pub struct Compressor {
    ctx: CCtx<'static>,
}

impl std::fmt::Debug for Compressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Compressor").field("bytes", &self.ctx.sizeof()).finish()
    }
}

impl Compressor {
    /// A context at `level` (zstd levels: negative are faster, 1–19 stronger) with a [`WINDOW_LOG`] window and
    /// no checksum (the WebSocket carries the bytes intact).
    ///
    /// # Errors
    /// [`CompressError::NoMemory`], or [`CompressError::Zstd`] for a level zstd does not take.
    pub fn new(level: i32) -> Result<Self, CompressError> {
        let mut ctx = CCtx::try_create().ok_or(CompressError::NoMemory)?;
        for p in
            [CParameter::CompressionLevel(level), CParameter::WindowLog(WINDOW_LOG), CParameter::ChecksumFlag(false)]
        {
            ctx.set_parameter(p).map_err(zstd_error)?;
        }
        Ok(Self { ctx })
    }

    /// Appends the compressed form of one message's stream bytes to `out`, flushed: the receiver decodes all of
    /// `input` from what was appended (and the earlier messages). Empty input appends nothing.
    ///
    /// # Errors
    /// [`CompressError::Zstd`] when the library fails (the stream is then unusable: close the connection).
    pub fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CompressError> {
        if input.is_empty() {
            return Ok(());
        }
        out.reserve(zstd_safe::compress_bound(input.len()) + 16);
        let mut src = InBuffer::around(input);
        loop {
            let pos = out.len();
            let mut dst = OutBuffer::around_pos(out, pos);
            let left = self
                .ctx
                .compress_stream2(&mut dst, &mut src, zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_flush)
                .map_err(zstd_error)?;
            if left == 0 && src.pos() == input.len() {
                return Ok(());
            }
            out.reserve(left.max(256));
        }
    }

    /// The context's memory, in bytes (`ZSTD_sizeof_CCtx`).
    pub fn memory(&self) -> usize {
        self.ctx.sizeof()
    }
}

/// One direction's receiving end: a zstd decompression context kept for the whole connection, fed message by
/// message, sans-IO: [`Decompressor::queue`] the payload as it arrives, then [`Decompressor::inflate`] until
/// [`Decompressor::has_output`] is false, then [`Decompressor::end_message`].
pub struct Decompressor {
    ctx: DCtx<'static>,
    /// Compressed bytes queued and not yet consumed by zstd (at most what one `queue` call brought).
    pending: Vec<u8>,
    /// zstd filled the last output piece: it may hold more output without new input.
    full: bool,
    /// zstd took nothing from the queue last time: it needs the message's next bytes first.
    stalled: bool,
    /// Stream bytes produced for the current message.
    message: usize,
}

impl std::fmt::Debug for Decompressor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Decompressor").field("pending", &self.pending.len()).field("message", &self.message).finish()
    }
}

impl Decompressor {
    /// A context that refuses windows over [`WINDOW_LOG`].
    ///
    /// # Errors
    /// [`CompressError::NoMemory`] or [`CompressError::Zstd`].
    pub fn new() -> Result<Self, CompressError> {
        let mut ctx = DCtx::try_create().ok_or(CompressError::NoMemory)?;
        ctx.set_parameter(DParameter::WindowLogMax(WINDOW_LOG)).map_err(zstd_error)?;
        Ok(Self { ctx, pending: Vec::new(), full: false, stalled: false, message: 0 })
    }

    /// Queues compressed payload bytes of the current message.
    pub fn queue(&mut self, input: &[u8]) {
        self.pending.extend_from_slice(input);
        self.stalled = false;
    }

    /// True while queued bytes or zstd's own buffer may still give output without more input.
    pub fn has_output(&self) -> bool {
        (!self.pending.is_empty() && !self.stalled) || self.full
    }

    /// Inflates queued bytes into `out`, appending at most about `room` bytes (at least one 1-byte piece), and
    /// returns how many were appended.
    ///
    /// # Errors
    /// [`CompressError::TooLarge`] once the current message's output passes `max` bytes;
    /// [`CompressError::Zstd`] for data that is not a valid zstd stream (or asks for a larger window).
    pub fn inflate(&mut self, out: &mut Vec<u8>, room: usize, max: usize) -> Result<usize, CompressError> {
        let mut produced = 0;
        while self.has_output() && produced < room.max(1) {
            // zstd writes into the spare capacity (nothing is zero-filled first): at least `piece` bytes, at most
            // what the vector holds, so one call makes at most about one piece (plus the vector's slack).
            let piece = (room.max(1) - produced).min(PIECE);
            let start = out.len();
            out.reserve(piece);
            let (r, consumed) = {
                let mut dst = OutBuffer::around_pos(out, start);
                let mut src = InBuffer::around(&self.pending);
                let r = self.ctx.decompress_stream(&mut dst, &mut src);
                (r, src.pos())
            };
            if let Err(code) = r {
                out.truncate(start);
                return Err(zstd_error(code));
            }
            let n = out.len() - start;
            self.pending.drain(..consumed);
            self.full = out.len() == out.capacity();
            produced += n;
            self.message += n;
            if self.message > max {
                // Nothing past the limit is handed on.
                out.truncate(out.len() - (self.message - max).min(n));
                return Err(CompressError::TooLarge { max });
            }
            if n == 0 && consumed == 0 {
                // zstd needs more input than this message has queued so far.
                self.full = false;
                self.stalled = true;
            }
        }
        Ok(produced)
    }

    /// Ends the current message: the next bytes count towards a new message's limit.
    pub fn end_message(&mut self) {
        self.message = 0;
    }

    /// The context's memory, in bytes (`ZSTD_sizeof_DCtx`), plus the queue.
    pub fn memory(&self) -> usize {
        self.ctx.sizeof() + self.pending.capacity()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn inflate_all(d: &mut Decompressor, payload: &[u8], max: usize) -> Result<Vec<u8>, CompressError> {
        let mut out = Vec::new();
        d.queue(payload);
        while d.has_output() {
            d.inflate(&mut out, 1000, max)?;
        }
        d.end_message();
        Ok(out.to_vec())
    }

    /// Messages decode one by one from the stream, byte for byte, and a repeated tick shrinks against the
    /// earlier one (the context is kept).
    #[test]
    fn messages_round_trip_and_later_ticks_compress_against_earlier_ones() {
        let mut c = Compressor::new(DEFAULT_LEVEL).unwrap();
        let mut d = Decompressor::new().unwrap();
        let tick: Vec<u8> = (0..400u32).flat_map(|i| (i * 7919 % 251).to_be_bytes()).collect();
        let mut sizes = Vec::new();
        for _ in 0..3 {
            let mut wire = Vec::new();
            c.compress(&tick, &mut wire).unwrap();
            sizes.push(wire.len());
            assert_eq!(inflate_all(&mut d, &wire, 1 << 20).unwrap(), tick);
        }
        assert!(sizes[1] * 10 < sizes[0], "the second identical tick is a back-reference: {sizes:?}");
        let mut empty = Vec::new();
        c.compress(&[], &mut empty).unwrap();
        assert!(empty.is_empty());
    }

    /// Random (incompressible) bytes grow by at most a few header bytes: zstd stores them as Raw blocks.
    #[test]
    fn incompressible_data_costs_only_block_headers() {
        let mut c = Compressor::new(DEFAULT_LEVEL).unwrap();
        let mut d = Decompressor::new().unwrap();
        let mut x = 0x9E37_79B9_7F4A_7C15u64;
        let noise: Vec<u8> = (0..200_000)
            .map(|_| {
                x ^= x << 13;
                x ^= x >> 7;
                x ^= x << 17;
                x as u8
            })
            .collect();
        let mut wire = Vec::new();
        c.compress(&noise, &mut wire).unwrap();
        // Frame header (up to 6 bytes here) and 3 bytes per block of up to 32 KiB.
        let blocks = noise.len().div_ceil(1 << WINDOW_LOG);
        assert!(wire.len() <= noise.len() + 6 + 3 * blocks, "{} for {}", wire.len(), noise.len());
        assert_eq!(inflate_all(&mut d, &wire, 1 << 20).unwrap(), noise);
    }

    /// A message of about 8 kB that inflates to 64 MiB stops at the limit with little output made.
    #[test]
    fn a_decompression_bomb_stops_at_the_limit() {
        let mut c = Compressor::new(3).unwrap();
        let mut wire = Vec::new();
        c.compress(&vec![0u8; 64 << 20], &mut wire).unwrap();
        assert!(wire.len() < 16_384, "{}", wire.len());
        let mut d = Decompressor::new().unwrap();
        d.queue(&wire);
        let mut out = Vec::new();
        let max = 4 << 20;
        let mut made = 0;
        let err = loop {
            match d.inflate(&mut out, 256 * 1024, max) {
                Ok(n) => {
                    made += n;
                    out.clear(); // the relay passes each piece on
                }
                Err(e) => break e,
            }
        };
        assert_eq!(err, CompressError::TooLarge { max });
        assert_eq!(made + out.len(), max, "exactly the limit was handed on");
        assert!(out.len() <= 2 * PIECE, "at most about one piece held: {}", out.len());
    }

    /// A stream that asks for a window over 32 KiB is refused (the receiver never allocates it).
    #[test]
    fn a_larger_window_is_refused() {
        let mut big = CCtx::create();
        big.set_parameter(CParameter::WindowLog(24)).unwrap();
        big.set_parameter(CParameter::CompressionLevel(1)).unwrap();
        let data: Vec<u8> = (0..(1u32 << 21)).map(|i| (i % 253) as u8).collect();
        let mut wire = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
        big.compress2(&mut wire, &data).unwrap();
        let mut d = Decompressor::new().unwrap();
        let e = inflate_all(&mut d, &wire, usize::MAX).unwrap_err();
        assert!(matches!(e, CompressError::Zstd(_)), "{e:?}");
    }

    /// A message split anywhere (as WebSocket frames and reads split it) decodes the same; a piece that ends
    /// inside a block gives no output until the rest is queued, and the caller is not asked to call again.
    #[test]
    fn a_message_fed_in_pieces_decodes_the_same() {
        let mut c = Compressor::new(DEFAULT_LEVEL).unwrap();
        let data: Vec<u8> = (0..50_000u32).flat_map(|i| (i / 3).to_le_bytes()).collect();
        let mut wire = Vec::new();
        c.compress(&data, &mut wire).unwrap();
        let mut d = Decompressor::new().unwrap();
        let mut out = Vec::new();
        for piece in wire.chunks(7) {
            d.queue(piece);
            let mut calls = 0;
            while d.has_output() {
                d.inflate(&mut out, 4096, 1 << 20).unwrap();
                calls += 1;
                assert!(calls < 1000, "no progress");
            }
        }
        d.end_message();
        assert_eq!(&out[..], &data[..]);
    }

    /// Garbage is an error, not a panic.
    #[test]
    fn garbage_is_an_error() {
        let mut d = Decompressor::new().unwrap();
        assert!(inflate_all(&mut d, b"definitely not zstd data", 1 << 20).is_err());
    }
}
