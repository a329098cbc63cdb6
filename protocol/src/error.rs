//! Error types of the protocol crate.

use crate::varint::VarIntDecodeError;

/// Why a frame could not be taken off a byte stream (see [`crate::frame`]).
///
/// Every variant is final for the stream: the framing is lost, so the connection must be closed.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FrameError {
    /// The length prefix did not end within the bytes the reader's limit allows ([`crate::frame::prefix_width`]:
    /// 3 for a vanilla limit, so the declared length is over 2,097,151 bytes; cases such as `80 80 80 01` or an
    /// endless run of `FF`).
    #[error("frame length prefix is wider than the frame limit allows")]
    LengthPrefixTooLong,
    /// The length prefix declared 0 bytes; every frame holds at least a packet id.
    #[error("frame of length 0")]
    Empty,
    /// The declared length is over the decoder's current limit.
    #[error("frame of {len} bytes is over the limit of {max} bytes")]
    TooLarge {
        /// The declared body length in bytes.
        len: usize,
        /// The limit in force, in bytes.
        max: usize,
    },
    /// The packet id at the start of the body is not a valid VarInt within the frame.
    #[error("frame has no valid packet id")]
    BadPacketId,
}

/// Why a packet body could not be decoded. Final for that packet.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    /// The body ended while reading the named field.
    #[error("packet ended inside field `{0}`")]
    UnexpectedEnd(&'static str),
    /// A VarInt field was malformed.
    #[error("bad VarInt in field `{field}`: {source}")]
    VarInt {
        /// The field being read.
        field: &'static str,
        /// What was wrong with it.
        source: VarIntDecodeError,
    },
    /// A string's declared byte length or character count is over the field's maximum.
    #[error("string field `{field}` is too long ({len} > {max})")]
    StringTooLong {
        /// The field being read.
        field: &'static str,
        /// The length seen (bytes for the prefix check, UTF-16 units for the character check).
        len: usize,
        /// The maximum allowed.
        max: usize,
    },
    /// A string's length prefix was negative.
    #[error("string field `{0}` has a negative length")]
    NegativeLength(&'static str),
    /// A string field was not valid UTF-8 (or UTF-16 in legacy packets).
    #[error("string field `{0}` is not valid text")]
    InvalidText(&'static str),
    /// The packet id is not the one this packet type has.
    #[error("unexpected packet id 0x{got:02x} (expected 0x{expected:02x})")]
    UnexpectedPacketId {
        /// Expected id.
        expected: i32,
        /// Id found in the frame.
        got: i32,
    },
    /// Bytes were left over after the last field.
    #[error("{0} unexpected bytes after the last field")]
    TrailingBytes(usize),
    /// The handshake's next state was neither 1 (status) nor 2 (login).
    #[error("handshake next state {0} is neither 1 (status) nor 2 (login)")]
    InvalidNextState(i32),
    /// A field had a value outside its allowed set (the message says which).
    #[error("invalid value in field `{field}`: {reason}")]
    InvalidValue {
        /// The field being read.
        field: &'static str,
        /// What is wrong.
        reason: &'static str,
    },
}

/// Why a packet could not be encoded.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EncodeError {
    /// The encoded frame body would exceed the frame limit ([`crate::frame::MAX_FRAME_LEN`] for vanilla).
    #[error("packet of {0} bytes is over the frame limit")]
    FrameTooLarge(usize),
    /// A string is longer than the field allows.
    #[error("string field `{field}` is too long ({len} > {max})")]
    StringTooLong {
        /// The field being written.
        field: &'static str,
        /// Its length in UTF-16 units.
        len: usize,
        /// The maximum allowed.
        max: usize,
    },
    /// A byte array is longer than its `i16` length prefix can express (32,767).
    #[error("byte array field `{field}` is too long ({len} > 32767)")]
    ArrayTooLong {
        /// The field being written.
        field: &'static str,
        /// Its length in bytes.
        len: usize,
    },
}
