//! WebSocket framing (RFC 6455 §5), server side, sans-IO: [`ServerDecoder`] turns the bytes a client sends into
//! [`Event`]s, and [`encode_header`] / [`close_frame`] build what the server sends.
//!
//! Built for the carriage, where a Binary message is only a piece of a byte stream: payload bytes are handed
//! out as they arrive, unmasked in place, never gathered into whole messages. The memory a connection holds is
//! therefore what the caller reads at once, whatever the message size; the message limit is still enforced
//! from each frame header, before its payload is read (RFC 6455 §10.4).
//!
//! Client frame layout (§5.2): `FIN RSV1-3 opcode(4)`, `MASK payload-len(7)`, an extended length of 2 or 8
//! bytes (network order) when the 7-bit length is 126 or 127, the 4-byte masking key, then the payload, each
//! byte XORed with `key[i % 4]`.

use bytes::{Bytes, BytesMut};

use super::{CLOSE_MESSAGE_TOO_BIG, CLOSE_PROTOCOL_ERROR, CLOSE_UNSUPPORTED_DATA};

/// Opcode of a continuation frame (§5.2).
pub const OP_CONTINUATION: u8 = 0x0;
/// Opcode of a Text frame.
pub const OP_TEXT: u8 = 0x1;
/// Opcode of a Binary frame.
pub const OP_BINARY: u8 = 0x2;
/// Opcode of a Close frame.
pub const OP_CLOSE: u8 = 0x8;
/// Opcode of a Ping frame.
pub const OP_PING: u8 = 0x9;
/// Opcode of a Pong frame.
pub const OP_PONG: u8 = 0xA;

/// Largest control frame payload, in bytes (§5.5).
pub const MAX_CONTROL_PAYLOAD: usize = 125;
/// Largest frame header a client sends: 2 bytes, an 8-byte length and a 4-byte masking key.
pub const MAX_CLIENT_HEADER: usize = 14;
/// Largest frame header a server sends (unmasked): 2 bytes and an 8-byte length.
pub const MAX_SERVER_HEADER: usize = 10;

/// What a client's Close frame said (§5.5.1, §7.4).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum CloseReceived {
    /// An empty Close (no status code; RFC 6455 reports this as 1005, which is never sent on the wire).
    NoCode,
    /// A Close with a status code that may appear on the wire, and its reason text.
    Code(u16, String),
}

impl CloseReceived {
    /// The code of the Close that answers this one: the same code when there was one, 1000 otherwise.
    pub fn reply_code(&self) -> u16 {
        match self {
            Self::NoCode => super::CLOSE_NORMAL,
            Self::Code(code, _) => *code,
        }
    }
}

/// One thing a client sent.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Event {
    /// Payload bytes of a Binary message, unmasked: a whole frame's or part of one (the rest follows).
    Data(BytesMut),
    /// The last frame of a Binary message ended (the message is complete).
    MessageEnd,
    /// A Ping with its payload (answer with a Pong carrying the same payload, §5.5.2).
    Ping(Bytes),
    /// A Pong (ignored by the carriage).
    Pong,
    /// A valid Close.
    Close(CloseReceived),
    /// A whole Text message, when the decoder accepts them ([`ServerDecoder::accept_text`]: carriage v2
    /// control messages).
    Text(Bytes),
}

/// Why a client's frames are refused; each fault earns one close code ([`FrameFault::close_code`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameFault {
    /// A client frame without the mask bit (§5.1).
    #[error("unmasked frame")]
    Unmasked,
    /// RSV1–3 set without a negotiated extension (§5.2).
    #[error("reserved bits set")]
    ReservedBits,
    /// Opcode 3–7 or 0xB–0xF (§5.2).
    #[error("reserved opcode {0:#x}")]
    ReservedOpcode(u8),
    /// A 64-bit length with the most significant bit set, or a length not in its shortest form (§5.2).
    #[error("malformed payload length")]
    BadLength,
    /// A control frame that is fragmented or longer than 125 bytes (§5.5).
    #[error("bad control frame")]
    BadControlFrame,
    /// A continuation frame with no message to continue, or a new message before the last one ended (§5.4).
    #[error("bad fragmentation")]
    BadFragmentation,
    /// A Text message where none is accepted (carriage v1 carries Binary only), or one that is fragmented or
    /// longer than the accepted size (carriage v2).
    #[error("text message")]
    Text,
    /// A message longer than the limit, in bytes (known from a frame header).
    #[error("message over {limit} bytes")]
    MessageTooBig {
        /// The limit.
        limit: u64,
    },
    /// A Close payload of 1 byte, a status code that must not appear on the wire (0–999, 1004–1006, 1015,
    /// 1016–2999, 5000 and up), or a reason that is not UTF-8 (§5.5.1, §7.4).
    #[error("malformed Close frame: {0}")]
    BadClose(&'static str),
}

impl FrameFault {
    /// The close code this fault is answered with: 1009 for a message over the limit, 1003 for Text, 1002 for
    /// the rest.
    pub fn close_code(&self) -> u16 {
        match self {
            Self::MessageTooBig { .. } => CLOSE_MESSAGE_TOO_BIG,
            Self::Text => CLOSE_UNSUPPORTED_DATA,
            _ => CLOSE_PROTOCOL_ERROR,
        }
    }

    /// The short reason sent in the Close frame.
    pub fn close_reason(&self) -> &'static str {
        match self {
            Self::Unmasked => "unmasked frame",
            Self::MessageTooBig { .. } => "message too big",
            Self::Text => "text messages are not supported",
            Self::BadClose(_) => "malformed close frame",
            _ => "protocol error",
        }
    }
}

/// True for the status codes a Close may carry on the wire (§7.4.1, §7.4.2 and the IANA registry): 1000–1003,
/// 1007–1014 and 3000–4999. 1004 is reserved; 1005, 1006 and 1015 are for reporting only.
pub fn is_valid_close_code(code: u16) -> bool {
    matches!(code, 1000..=1003 | 1007..=1014 | 3000..=4999)
}

/// The frame currently being read.
#[derive(Clone, Copy, Debug)]
struct DataFrame {
    /// Payload bytes not yet handed out.
    remaining: u64,
    mask: [u8; 4],
    /// Payload bytes already handed out (the mask position).
    offset: usize,
    fin: bool,
}

/// Decodes what a WebSocket client sends, sans-IO: queue bytes with [`ServerDecoder::queue_slice`] (or read
/// into [`ServerDecoder::buffer_mut`]), then call [`ServerDecoder::try_next`] until it returns `Ok(None)`.
///
/// Bounded: a control frame is held until whole (at most [`MAX_CLIENT_HEADER`] + 125 bytes); data payloads
/// leave as they arrive. After an error the decoder is spent: the caller closes the connection.
#[derive(Debug)]
pub struct ServerDecoder {
    buf: BytesMut,
    frame: Option<DataFrame>,
    /// A Binary message is open (its last frame has not arrived).
    in_message: bool,
    /// Bytes of the open message so far (from the frame headers).
    message_len: u64,
    max_message: u64,
    /// Largest Text message accepted whole, in bytes; 0 refuses Text.
    max_text: usize,
}

impl ServerDecoder {
    /// A decoder that refuses messages longer than `max_message` bytes.
    pub fn new(max_message: usize) -> Self {
        Self {
            buf: BytesMut::new(),
            frame: None,
            in_message: false,
            message_len: 0,
            max_message: max_message as u64,
            max_text: 0,
        }
    }

    /// Accepts Text messages of one frame of at most `max` bytes (at most 125), returned whole as
    /// [`Event::Text`]; other Text messages stay [`FrameFault::Text`].
    pub fn accept_text(&mut self, max: usize) {
        self.max_text = max.min(MAX_CONTROL_PAYLOAD);
    }

    /// The opcode of the next frame when its first byte is buffered and no frame is in progress.
    pub fn next_opcode(&self) -> Option<u8> {
        if self.frame.is_some() {
            return None;
        }
        self.buf.first().map(|b| b & 0x0f)
    }

    /// Appends a copy of `bytes` read from the client.
    pub fn queue_slice(&mut self, bytes: &[u8]) {
        self.buf.extend_from_slice(bytes);
    }

    /// The buffer to read client bytes into (append only).
    pub fn buffer_mut(&mut self) -> &mut BytesMut {
        &mut self.buf
    }

    /// Bytes queued and not yet decoded.
    pub fn buffered(&self) -> usize {
        self.buf.len()
    }

    /// True while a Binary message is open (its last frame has not arrived).
    pub fn in_message(&self) -> bool {
        self.in_message || self.frame.is_some()
    }

    /// The next event, `Ok(None)` when more bytes are needed.
    ///
    /// # Errors
    /// A [`FrameFault`] for a frame the client must not send; answer it with [`FrameFault::close_code`].
    pub fn try_next(&mut self) -> Result<Option<Event>, FrameFault> {
        loop {
            if let Some(f) = &mut self.frame {
                if f.remaining == 0 {
                    let fin = f.fin;
                    self.frame = None;
                    if fin {
                        self.in_message = false;
                        self.message_len = 0;
                        return Ok(Some(Event::MessageEnd));
                    }
                    continue;
                }
                if self.buf.is_empty() {
                    return Ok(None);
                }
                let n = usize::try_from(f.remaining).unwrap_or(usize::MAX).min(self.buf.len());
                let mut data = self.buf.split_to(n);
                unmask(&mut data, f.mask, f.offset);
                f.offset = f.offset.wrapping_add(n);
                f.remaining -= n as u64;
                return Ok(Some(Event::Data(data)));
            }
            let Some(header) = parse_header(&self.buf)? else { return Ok(None) };
            match header.opcode {
                OP_BINARY | OP_CONTINUATION => {
                    let continuation = header.opcode == OP_CONTINUATION;
                    if continuation != self.in_message {
                        return Err(FrameFault::BadFragmentation);
                    }
                    self.message_len = self.message_len.saturating_add(header.len);
                    if self.message_len > self.max_message {
                        return Err(FrameFault::MessageTooBig { limit: self.max_message });
                    }
                    let _ = self.buf.split_to(header.header_len);
                    self.in_message = true;
                    self.frame =
                        Some(DataFrame { remaining: header.len, mask: header.mask, offset: 0, fin: header.fin });
                }
                // A new data frame inside an unfinished message breaks fragmentation (§5.4) whatever its type.
                OP_TEXT if self.in_message => return Err(FrameFault::BadFragmentation),
                OP_TEXT if self.max_text == 0 || !header.fin || header.len > self.max_text as u64 => {
                    return Err(FrameFault::Text)
                }
                OP_CLOSE | OP_PING | OP_PONG | OP_TEXT => {
                    let len = header.len as usize; // at most 125, checked by parse_header
                    if self.buf.len() < header.header_len + len {
                        return Ok(None);
                    }
                    let _ = self.buf.split_to(header.header_len);
                    let mut payload = self.buf.split_to(len);
                    unmask(&mut payload, header.mask, 0);
                    return match header.opcode {
                        OP_PING => Ok(Some(Event::Ping(payload.freeze()))),
                        OP_PONG => Ok(Some(Event::Pong)),
                        OP_TEXT => Ok(Some(Event::Text(payload.freeze()))),
                        _ => parse_close(&payload).map(|c| Some(Event::Close(c))),
                    };
                }
                other => return Err(FrameFault::ReservedOpcode(other)),
            }
        }
    }
}

/// A parsed frame header.
struct Header {
    fin: bool,
    opcode: u8,
    mask: [u8; 4],
    len: u64,
    header_len: usize,
}

/// Parses a client frame header at the start of `buf`; `Ok(None)` when it is incomplete.
fn parse_header(buf: &[u8]) -> Result<Option<Header>, FrameFault> {
    let (Some(&b0), Some(&b1)) = (buf.first(), buf.get(1)) else { return Ok(None) };
    if b0 & 0x70 != 0 {
        return Err(FrameFault::ReservedBits);
    }
    let fin = b0 & 0x80 != 0;
    let opcode = b0 & 0x0f;
    if !matches!(opcode, OP_CONTINUATION | OP_TEXT | OP_BINARY | OP_CLOSE | OP_PING | OP_PONG) {
        return Err(FrameFault::ReservedOpcode(opcode));
    }
    if b1 & 0x80 == 0 {
        return Err(FrameFault::Unmasked);
    }
    let short = b1 & 0x7f;
    let control = opcode >= OP_CLOSE;
    if control && (!fin || short > 125) {
        return Err(FrameFault::BadControlFrame);
    }
    let (len, ext) = match short {
        126 => {
            let Some(b) = buf.get(2..4).and_then(|b| <[u8; 2]>::try_from(b).ok()) else { return Ok(None) };
            let len = u64::from(u16::from_be_bytes(b));
            if len < 126 {
                return Err(FrameFault::BadLength);
            }
            (len, 2)
        }
        127 => {
            let Some(b) = buf.get(2..10).and_then(|b| <[u8; 8]>::try_from(b).ok()) else { return Ok(None) };
            let len = u64::from_be_bytes(b);
            if len >> 63 != 0 || len <= u64::from(u16::MAX) {
                return Err(FrameFault::BadLength);
            }
            (len, 8)
        }
        n => (u64::from(n), 0),
    };
    let Some(mask) = buf.get(2 + ext..6 + ext).and_then(|k| <[u8; 4]>::try_from(k).ok()) else { return Ok(None) };
    Ok(Some(Header { fin, opcode, mask, len, header_len: 6 + ext }))
}

/// Parses an unmasked Close payload (§5.5.1).
fn parse_close(payload: &[u8]) -> Result<CloseReceived, FrameFault> {
    match payload {
        [] => Ok(CloseReceived::NoCode),
        [_] => Err(FrameFault::BadClose("a 1-byte body")),
        [hi, lo, reason @ ..] => {
            let code = u16::from_be_bytes([*hi, *lo]);
            if !is_valid_close_code(code) {
                return Err(FrameFault::BadClose("a status code that must not be sent"));
            }
            let reason = std::str::from_utf8(reason).map_err(|_| FrameFault::BadClose("a reason that is not UTF-8"))?;
            Ok(CloseReceived::Code(code, reason.to_owned()))
        }
    }
}

/// XORs `data` with the masking key, starting at mask position `offset` (§5.3). Works a word at a time.
pub fn unmask(data: &mut [u8], mask: [u8; 4], offset: usize) {
    let mut key = mask;
    key.rotate_left(offset % 4);
    let [k0, k1, k2, k3] = key;
    let word = u64::from_ne_bytes([k0, k1, k2, k3, k0, k1, k2, k3]);
    let mut chunks = data.chunks_exact_mut(8);
    for c in &mut chunks {
        if let Ok(b) = <[u8; 8]>::try_from(&*c) {
            c.copy_from_slice(&(u64::from_ne_bytes(b) ^ word).to_ne_bytes());
        }
    }
    for (b, k) in chunks.into_remainder().iter_mut().zip(key.iter().cycle()) {
        *b ^= k;
    }
}

/// The header of an unmasked server frame (FIN set) with `opcode` and a payload of `len` bytes: the bytes to
/// send before the payload (2, 4 or 10 of the returned array, as the second value says).
pub fn encode_header(opcode: u8, len: usize) -> ([u8; MAX_SERVER_HEADER], usize) {
    let b0 = 0x80 | (opcode & 0x0f);
    match (u8::try_from(len), u16::try_from(len)) {
        (Ok(short), _) if short < 126 => ([b0, short, 0, 0, 0, 0, 0, 0, 0, 0], 2),
        (_, Ok(medium)) => {
            let [a, b] = medium.to_be_bytes();
            ([b0, 126, a, b, 0, 0, 0, 0, 0, 0], 4)
        }
        _ => {
            let [a, b, c, d, e, f, g, h] = (len as u64).to_be_bytes();
            ([b0, 127, a, b, c, d, e, f, g, h], 10)
        }
    }
}

/// Appends `payload` as one unmasked Binary message (a server's, §5.1) of frames of at most `max_frame`
/// payload bytes each: a Binary frame, then Continuation frames, FIN on the last (§5.4); one frame when it fits.
/// Returns where each frame's payload sits in `out`, so a caller can keep them without a copy.
///
/// ```
/// use moonbridge_protocol::ws::frame::encode_binary_message;
/// let mut out = Vec::new();
/// let at = encode_binary_message(&mut out, b"abcde", 2);
/// assert_eq!(out, b"\x02\x02ab\x00\x02cd\x80\x01e");
/// assert_eq!(at, [2..4, 6..8, 10..11]);
/// ```
pub fn encode_binary_message(out: &mut Vec<u8>, payload: &[u8], max_frame: usize) -> Vec<std::ops::Range<usize>> {
    let max_frame = max_frame.max(1);
    let frames = payload.len().div_ceil(max_frame).max(1);
    out.reserve(payload.len() + frames * 4);
    let mut at = Vec::with_capacity(frames);
    let mut pieces = payload.chunks(max_frame).peekable();
    let mut opcode = OP_BINARY;
    loop {
        let piece = pieces.next().unwrap_or_default();
        let last = pieces.peek().is_none();
        let (mut h, n) = encode_header(opcode, piece.len());
        if !last {
            h[0] &= 0x7f;
        }
        out.extend_from_slice(h.get(..n).unwrap_or_default());
        at.push(out.len()..out.len() + piece.len());
        out.extend_from_slice(piece);
        opcode = OP_CONTINUATION;
        if last {
            return at;
        }
    }
}

/// A whole server Close frame with `code` and `reason` (the reason is cut to fit the 125-byte control payload, at
/// a character boundary).
pub fn close_frame(code: u16, reason: &str) -> Vec<u8> {
    let mut cut = reason.len().min(MAX_CONTROL_PAYLOAD - 2);
    while !reason.is_char_boundary(cut) {
        cut -= 1;
    }
    let reason = reason.get(..cut).unwrap_or_default();
    let (h, n) = encode_header(OP_CLOSE, 2 + reason.len());
    let mut out = Vec::with_capacity(n + 2 + reason.len());
    out.extend_from_slice(h.get(..n).unwrap_or_default());
    out.extend_from_slice(&code.to_be_bytes());
    out.extend_from_slice(reason.as_bytes());
    out
}

/// A whole client frame (FIN set) with `opcode` and `payload`, masked with `mask` (§5.3): what a client sends.
pub fn client_frame(opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    let (h, n) = encode_header(opcode, payload.len());
    let mut out = Vec::with_capacity(n + 4 + payload.len());
    out.extend_from_slice(h.get(..n).unwrap_or_default());
    if let Some(b1) = out.get_mut(1) {
        *b1 |= 0x80;
    }
    out.extend_from_slice(&mask);
    let start = out.len();
    out.extend_from_slice(payload);
    if let Some(p) = out.get_mut(start..) {
        unmask(p, mask, 0);
    }
    out
}

/// A whole server frame (FIN set, unmasked) with `opcode` and `payload`.
pub fn frame(opcode: u8, payload: &[u8]) -> Vec<u8> {
    let (h, n) = encode_header(opcode, payload.len());
    let mut out = Vec::with_capacity(n + payload.len());
    out.extend_from_slice(h.get(..n).unwrap_or_default());
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests;
