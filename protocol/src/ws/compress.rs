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
//!   that would not shrink as a Raw block (RFC 8878 §3.1.1.2.2), 3 bytes of header per block of up to 8 KiB,
//!   and its bytes still join the window.
//! - **Quiet spells:** a sender may end its zstd frame at the end of a message (`ZSTD_e_end`); its next message
//!   starts a new frame, which refers to nothing before it. [`Contexts`] does so after a keepalive tick period
//!   without a message over [`STORED_MAX`] bytes, with a Binary message that carries the frame's end and no
//!   stream bytes (3 bytes: an empty last block, RFC 8878 §3.1.1.2), and frees the compression context; a
//!   receiver frees its decompression context when a frame ends with a message that carried no stream bytes
//!   (so a peer that ends a frame with every message, which zstd allows, does not make it rebuild a context per
//!   message). A receiver that never frees decodes the same bytes (a zstd stream may hold several frames,
//!   RFC 8878 §3), so peers without the rule interoperate.
//! - **Small messages while quiet:** a message of at most [`STORED_MAX`] stream bytes sent while the direction
//!   holds no compression context goes as a *stored frame* (RFC 8878 §3.1.1: a single-segment frame with one
//!   Raw block; [`STORED_OVERHEAD`] bytes more than the message), made without a context; only a larger message
//!   makes one, and only a larger message counts as activity for the quiet-spell rule. A receiver that holds no
//!   decompression context reads bytes that are exactly one stored frame without making one (anything else,
//!   two frames in one message included, makes one). So a player who only answers Keep Alive holds no zstd
//!   memory at either end when both ends keep this rule. Any zstd decoder reads a stored frame, so peers
//!   without the rule interoperate (and keep their one context).
//! - **Bombs:** [`Decompressor`] inflates in pieces of at most the caller's room and counts each message's
//!   output; past the limit it stops with [`CompressError::TooLarge`] (close 1009) having produced at most one
//!   piece beyond it, whatever the message's ratio.

use zstd_safe::{CCtx, CParameter, DCtx, DParameter, InBuffer, OutBuffer};

/// The subprotocol of carriage v2 with per-message zstd compression; offered ahead of `moonbridge.v2`.
pub const SUBPROTOCOL_V2_ZSTD: &str = "moonbridge.v2.zstd";

/// Base-2 logarithm of the zstd window both directions use: 15, a 32 KiB window. Measured per connection: about
/// 119 KiB for a compressor (with [`HASH_LOG`] and [`BLOCK_MAX`]) and 223 KiB for a decompressor in use. The
/// window was chosen before those two, with level 1's own table and block size: 305 and 223 KiB against 953
/// and 607 KiB with a 128 KiB window, for 4–11% more bytes on realistic traffic (docs/benchmarks.md,
/// "Compression").
pub const WINDOW_LOG: u32 = 15;

/// Base-2 logarithm of the sender's hash table (`ZSTD_c_hashLog`): 12, 4,096 entries of 4 bytes (16 KiB). zstd
/// level 1 would take 13 (32 KiB); a tick is a few KiB, so the smaller table finds nearly the same matches and
/// stays in cache. A sender-side choice: the stream format does not carry it.
pub const HASH_LOG: u32 = 12;

/// The largest block the sender makes (`ZSTD_c_maxBlockSize`), in bytes: 8 KiB. zstd sizes its per-block
/// buffers (sequences, literals, the output staging buffer) by the block size, which would otherwise be the
/// window (32 KiB). With [`HASH_LOG`] this makes a compressor about 119 KiB instead of 305 KiB and about 24%
/// faster per tick, for 3–5% more bytes (docs/benchmarks.md, "Smaller compression contexts"). A sender-side choice:
/// any decoder reads blocks up to the window size.
pub const BLOCK_MAX: usize = 8 * 1024;

/// The compression level both ends use unless configured (zstd level 1, its fastest regular level).
pub const DEFAULT_LEVEL: i32 = 1;

/// The largest message, in stream bytes, that a direction without a compression context sends as a stored
/// frame instead of making a context: 255 (the frame's content size then takes one byte).
pub const STORED_MAX: usize = 255;
/// What a stored frame adds to its message: the magic number (4 bytes), the frame header descriptor (1), the
/// content size (1) and the block header (3).
pub const STORED_OVERHEAD: usize = 9;
/// zstd's frame magic number, little-endian (RFC 8878 §3.1.1).
const FRAME_MAGIC: [u8; 4] = 0xFD2F_B528u32.to_le_bytes();
/// The frame header descriptor of a stored frame: single segment, a 1-byte content size, no checksum, no
/// dictionary (RFC 8878 §3.1.1.1.1).
const STORED_DESCRIPTOR: u8 = 0x20;

/// Appends `input` (at most [`STORED_MAX`] bytes) to `out` as a stored frame.
fn stored_frame(input: &[u8], out: &mut Vec<u8>) {
    let n = input.len().min(STORED_MAX);
    out.reserve(STORED_OVERHEAD + n);
    out.extend_from_slice(&FRAME_MAGIC);
    out.push(STORED_DESCRIPTOR);
    out.push(n as u8);
    // Block header (RFC 8878 §3.1.1.2): Last_Block 1, Block_Type 0 (Raw), Block_Size n, 3 bytes little-endian.
    let header = 1u32 | ((n as u32) << 3);
    out.extend_from_slice(&header.to_le_bytes()[..3]);
    out.extend_from_slice(input.get(..n).unwrap_or_default());
}

/// What received bytes are, as far as a stored frame goes.
#[derive(Debug, PartialEq, Eq)]
enum Stored {
    /// They start like a stored frame; more bytes are needed to know it whole.
    Partial,
    /// A stored frame of this many bytes (header included) starts them.
    Frame(usize),
    /// Not a stored frame: a decompression context must read them.
    Other,
}

/// Looks at the start of `bytes` for a stored frame as [`stored_frame`] makes it.
fn stored(bytes: &[u8]) -> Stored {
    let mut header = [0u8; STORED_OVERHEAD];
    let seen = bytes.len().min(STORED_OVERHEAD);
    for (h, b) in header.iter_mut().zip(bytes) {
        *h = *b;
    }
    let known = FRAME_MAGIC.iter().chain(&[STORED_DESCRIPTOR]);
    if header.iter().zip(known).take(seen).any(|(a, b)| a != b) {
        return Stored::Other;
    }
    if seen < STORED_OVERHEAD {
        return Stored::Partial;
    }
    let content = usize::from(header[5]);
    let block = u32::from_le_bytes([header[6], header[7], header[8], 0]);
    let (last, raw, size) = (block & 1 == 1, (block >> 1) & 3 == 0, (block >> 3) as usize);
    if last && raw && size == content {
        Stored::Frame(STORED_OVERHEAD + content)
    } else {
        Stored::Other
    }
}

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
    /// A context at `level` (zstd levels: negative are faster, 1–19 stronger) with a [`WINDOW_LOG`] window, a
    /// [`HASH_LOG`] hash table, blocks of at most [`BLOCK_MAX`] bytes and no checksum (the WebSocket carries the
    /// bytes intact). Levels from 3 on add a chain table of their own size (level 3: about 375 KiB in all).
    ///
    /// # Errors
    /// [`CompressError::NoMemory`], or [`CompressError::Zstd`] for a level zstd does not take.
    pub fn new(level: i32) -> Result<Self, CompressError> {
        let mut ctx = CCtx::try_create().ok_or(CompressError::NoMemory)?;
        for p in [
            CParameter::CompressionLevel(level),
            CParameter::WindowLog(WINDOW_LOG),
            CParameter::HashLog(HASH_LOG),
            CParameter::MaxBlockSize(BLOCK_MAX as u32),
            CParameter::ChecksumFlag(false),
        ] {
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

    /// Appends the end of the current zstd frame to `out` (an empty last block: 3 bytes when the frame has
    /// content, RFC 8878 §3.1.1.2); the next [`Compressor::compress`] starts a new frame that refers to nothing
    /// before it.
    ///
    /// # Errors
    /// [`CompressError::Zstd`] when the library fails.
    pub fn end_frame(&mut self, out: &mut Vec<u8>) -> Result<(), CompressError> {
        let mut src = InBuffer::around(&[]);
        loop {
            out.reserve(64);
            let pos = out.len();
            let mut dst = OutBuffer::around_pos(out, pos);
            let left = self
                .ctx
                .compress_stream2(&mut dst, &mut src, zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_end)
                .map_err(zstd_error)?;
            if left == 0 {
                return Ok(());
            }
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
    /// The last zstd call ended a frame and flushed it whole (`ZSTD_decompressStream` returned 0).
    frame_done: bool,
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
        Ok(Self { ctx, pending: Vec::new(), full: false, stalled: false, message: 0, frame_done: false })
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
            match r {
                Ok(hint) => self.frame_done = hint == 0,
                Err(code) => {
                    out.truncate(start);
                    return Err(zstd_error(code));
                }
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

    /// True when everything queued was inflated and the last zstd frame ended with it: the context holds no
    /// history the next message could refer to, so it can be freed.
    pub fn at_frame_end(&self) -> bool {
        self.frame_done && self.pending.is_empty() && !self.full
    }

    /// The context's memory, in bytes (`ZSTD_sizeof_DCtx`), plus the queue.
    pub fn memory(&self) -> usize {
        self.ctx.sizeof() + self.pending.capacity()
    }
}

/// Both directions of a `moonbridge.v2.zstd` connection, with the quiet-spell rule (module documentation):
/// each context is made on first use and freed when its direction goes quiet, so an idle connection holds
/// none of their memory (about 119 KiB compressing and 223 KiB decompressing while in use).
///
/// Receiving: [`Contexts::queue`] each piece of a message's payload, [`Contexts::inflate`] while
/// [`Contexts::has_output`], then [`Contexts::end_message`]. Sending: [`Contexts::compress`] each message;
/// at every keepalive tick, [`Contexts::on_tick`], and send what it returns as a Binary message.
#[derive(Debug)]
pub struct Contexts {
    level: i32,
    deflate: Option<Compressor>,
    inflate: Option<Decompressor>,
    /// A message larger than [`STORED_MAX`] was compressed since the last tick.
    sent_since_tick: bool,
    /// Received bytes of a stored frame not yet whole, while no decompression context is held (at most
    /// [`STORED_OVERHEAD`] + [`STORED_MAX`] bytes: past that, a context takes them).
    stash: Vec<u8>,
    /// Stream bytes the current message's stored frames gave, so the message limit counts them with what a
    /// context made in the same message gives.
    stored_in_message: usize,
}

impl Contexts {
    /// No context yet; compression at `level` once one is made.
    pub fn new(level: i32) -> Self {
        Self { level, deflate: None, inflate: None, sent_since_tick: false, stash: Vec::new(), stored_in_message: 0 }
    }

    /// Compresses one message's stream bytes into `out` (see [`Compressor::compress`]). Without a compression
    /// context, a message of at most [`STORED_MAX`] bytes goes as a stored frame and a larger one makes the
    /// context first (a new frame).
    ///
    /// # Errors
    /// [`CompressError::NoMemory`] or [`CompressError::Zstd`]: the stream cannot go on.
    pub fn compress(&mut self, input: &[u8], out: &mut Vec<u8>) -> Result<(), CompressError> {
        if input.is_empty() {
            // Nothing to send: no context is made for it.
            return Ok(());
        }
        let small = input.len() <= STORED_MAX;
        let deflate = match &mut self.deflate {
            Some(d) => d,
            None if small => {
                stored_frame(input, out);
                return Ok(());
            }
            None => self.deflate.insert(Compressor::new(self.level)?),
        };
        if !small {
            self.sent_since_tick = true;
        }
        deflate.compress(input, out)
    }

    /// At a keepalive tick: when a compression context is held and no message larger than [`STORED_MAX`] was
    /// compressed since the last tick, ends its frame and frees it, and returns the payload of the Binary
    /// message to send (the frame's end, no stream bytes); else `None`. So a direction is freed after one to two
    /// tick periods without a large message.
    ///
    /// # Errors
    /// [`CompressError::Zstd`] when the library fails (the stream cannot go on).
    pub fn on_tick(&mut self) -> Result<Option<Vec<u8>>, CompressError> {
        if std::mem::replace(&mut self.sent_since_tick, false) {
            return Ok(None);
        }
        let Some(mut deflate) = self.deflate.take() else { return Ok(None) };
        let mut end = Vec::new();
        deflate.end_frame(&mut end)?;
        Ok(Some(end))
    }

    /// Queues payload bytes of the current received message. Without a decompression context, a stored frame
    /// is kept aside and read without one; anything else makes the context first.
    ///
    /// # Errors
    /// [`CompressError::NoMemory`] or [`CompressError::Zstd`].
    pub fn queue(&mut self, input: &[u8]) -> Result<(), CompressError> {
        if let Some(i) = &mut self.inflate {
            i.queue(input);
            return Ok(());
        }
        // Kept aside only while it may be one stored frame (the usual large message is not copied first).
        let whole = if self.stash.is_empty() { stored(input) } else { Stored::Partial };
        let aside = match whole {
            Stored::Other => false,
            Stored::Frame(n) if input.len() > n => false,
            _ => {
                self.stash.extend_from_slice(input);
                match stored(&self.stash) {
                    Stored::Partial => true,
                    Stored::Frame(n) => self.stash.len() <= n,
                    Stored::Other => false,
                }
            }
        };
        if aside {
            return Ok(());
        }
        // Not a stored frame, or more than one frame: a context reads them, counting what this message's stored
        // frames gave towards its limit.
        let mut d = Decompressor::new()?;
        if self.stash.is_empty() {
            d.queue(input);
        } else {
            d.queue(&self.stash);
            self.stash = Vec::new();
        }
        d.message = self.stored_in_message;
        self.inflate = Some(d);
        Ok(())
    }

    /// The whole stored frame kept aside, when there is one.
    fn stored_ready(&self) -> bool {
        matches!(stored(&self.stash), Stored::Frame(n) if self.stash.len() == n)
    }

    /// See [`Decompressor::has_output`]; also true while a whole stored frame is kept aside.
    pub fn has_output(&self) -> bool {
        self.inflate.as_ref().is_some_and(Decompressor::has_output) || self.stored_ready()
    }

    /// See [`Decompressor::inflate`]; a stored frame kept aside is copied out whole (at most [`STORED_MAX`]
    /// bytes, whatever `room`). 0 when there is nothing.
    ///
    /// # Errors
    /// As [`Decompressor::inflate`]; the limit `max` counts every stream byte of the message, stored or not.
    pub fn inflate(&mut self, out: &mut Vec<u8>, room: usize, max: usize) -> Result<usize, CompressError> {
        if let Some(i) = &mut self.inflate {
            return i.inflate(out, room, max);
        }
        if !self.stored_ready() {
            return Ok(0);
        }
        let content = self.stash.get(STORED_OVERHEAD..).unwrap_or_default();
        let n = content.len();
        if self.stored_in_message + n > max {
            return Err(CompressError::TooLarge { max });
        }
        out.extend_from_slice(content);
        self.stored_in_message += n;
        self.stash.clear();
        Ok(n)
    }

    /// Ends the current received message; frees the decompression context when the sender's frame ended with
    /// it and it carried no stream bytes (the quiet-spell end, [`Contexts::on_tick`]). Returns true when it
    /// freed one.
    pub fn end_message(&mut self) -> bool {
        self.stored_in_message = 0;
        let Some(i) = &mut self.inflate else { return false };
        let empty = i.message == 0;
        i.end_message();
        if empty && i.at_frame_end() {
            self.inflate = None;
            return true;
        }
        false
    }

    /// Which contexts are held now: (compressing, decompressing).
    pub fn held(&self) -> (bool, bool) {
        (self.deflate.is_some(), self.inflate.is_some())
    }

    /// The memory of the contexts held, in bytes.
    pub fn memory(&self) -> usize {
        self.deflate.as_ref().map_or(0, Compressor::memory)
            + self.inflate.as_ref().map_or(0, Decompressor::memory)
            + self.stash.capacity()
    }
}

#[cfg(test)]
mod tests;
