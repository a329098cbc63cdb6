//! Field-level readers and writers for protocol 5 packet bodies.
//!
//! Strings are a VarInt byte length followed by UTF-8; the reference client and server reject a byte length
//! over `4 * max_chars` before reading, then a decoded string of more than `max_chars` UTF-16 units. Integers
//! are big-endian. Protocol 5 byte arrays in login and plugin-message packets carry an **`i16`** length
//! (VarInt only from 1.8 on).

use bytes::BufMut;

use crate::error::{DecodeError, EncodeError};
use crate::varint::VarInt;

/// A cursor over a packet body. Every read checks bounds and names the field on error.
#[derive(Clone, Copy, Debug)]
pub struct Reader<'a> {
    buf: &'a [u8],
}

impl<'a> Reader<'a> {
    /// Starts reading `buf` from its first byte.
    pub fn new(buf: &'a [u8]) -> Self {
        Self { buf }
    }

    /// The bytes not read yet.
    pub fn remaining(&self) -> &'a [u8] {
        self.buf
    }

    /// Fails with [`DecodeError::TrailingBytes`] unless every byte has been read.
    ///
    /// # Errors
    /// When bytes remain.
    pub fn finish(&self) -> Result<(), DecodeError> {
        if self.buf.is_empty() {
            Ok(())
        } else {
            Err(DecodeError::TrailingBytes(self.buf.len()))
        }
    }

    /// Reads `n` raw bytes.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] when fewer than `n` bytes remain.
    pub fn bytes(&mut self, n: usize, field: &'static str) -> Result<&'a [u8], DecodeError> {
        if self.buf.len() < n {
            return Err(DecodeError::UnexpectedEnd(field));
        }
        let (head, tail) = self.buf.split_at(n);
        self.buf = tail;
        Ok(head)
    }

    fn array<const N: usize>(&mut self, field: &'static str) -> Result<[u8; N], DecodeError> {
        let mut out = [0u8; N];
        out.copy_from_slice(self.bytes(N, field)?);
        Ok(out)
    }

    /// Reads an unsigned byte.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`].
    pub fn u8(&mut self, field: &'static str) -> Result<u8, DecodeError> {
        Ok(u8::from_be_bytes(self.array(field)?))
    }

    /// Reads a big-endian `u16`.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`].
    pub fn u16(&mut self, field: &'static str) -> Result<u16, DecodeError> {
        Ok(u16::from_be_bytes(self.array(field)?))
    }

    /// Reads a big-endian `i16`.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`].
    pub fn i16(&mut self, field: &'static str) -> Result<i16, DecodeError> {
        Ok(i16::from_be_bytes(self.array(field)?))
    }

    /// Reads a big-endian `i32`.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`].
    pub fn i32(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        Ok(i32::from_be_bytes(self.array(field)?))
    }

    /// Reads a big-endian `i64`.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`].
    pub fn i64(&mut self, field: &'static str) -> Result<i64, DecodeError> {
        Ok(i64::from_be_bytes(self.array(field)?))
    }

    /// Reads a VarInt.
    ///
    /// # Errors
    /// [`DecodeError::VarInt`] when malformed or cut off.
    pub fn var_int(&mut self, field: &'static str) -> Result<i32, DecodeError> {
        let (v, n) = VarInt::decode_partial(self.buf).map_err(|source| DecodeError::VarInt { field, source })?;
        self.buf = self.buf.get(n..).unwrap_or_default();
        Ok(v)
    }

    /// Reads a protocol string of at most `max_chars` UTF-16 units (and so at most `4 * max_chars` bytes).
    ///
    /// # Errors
    /// [`DecodeError::StringTooLong`], [`DecodeError::NegativeLength`], [`DecodeError::InvalidText`] or
    /// [`DecodeError::UnexpectedEnd`].
    pub fn string(&mut self, max_chars: usize, field: &'static str) -> Result<&'a str, DecodeError> {
        let len = self.var_int(field)?;
        let len = usize::try_from(len).map_err(|_| DecodeError::NegativeLength(field))?;
        let max_bytes = max_chars.saturating_mul(4);
        if len > max_bytes {
            return Err(DecodeError::StringTooLong { field, len, max: max_bytes });
        }
        let raw = self.bytes(len, field)?;
        let s = std::str::from_utf8(raw).map_err(|_| DecodeError::InvalidText(field))?;
        let units = utf16_len(s);
        if units > max_chars {
            return Err(DecodeError::StringTooLong { field, len: units, max: max_chars });
        }
        Ok(s)
    }

    /// Reads a byte array with a big-endian `i16` length prefix (protocol 5 login and plugin messages).
    ///
    /// # Errors
    /// [`DecodeError::NegativeLength`] or [`DecodeError::UnexpectedEnd`].
    pub fn i16_bytes(&mut self, field: &'static str) -> Result<&'a [u8], DecodeError> {
        let len = self.i16(field)?;
        let len = usize::try_from(len).map_err(|_| DecodeError::NegativeLength(field))?;
        self.bytes(len, field)
    }
}

/// Length of `s` in UTF-16 code units, the unit Java's `String.length()` and the protocol's limits count.
pub fn utf16_len(s: &str) -> usize {
    s.chars().map(char::len_utf16).sum()
}

/// Appends a protocol string (VarInt byte length + UTF-8).
///
/// # Errors
/// [`EncodeError::StringTooLong`] when `s` has more than `max_chars` UTF-16 units.
pub fn put_string(out: &mut impl BufMut, s: &str, max_chars: usize, field: &'static str) -> Result<(), EncodeError> {
    let units = utf16_len(s);
    if units > max_chars {
        return Err(EncodeError::StringTooLong { field, len: units, max: max_chars });
    }
    // `s.len()` is at most 4 * 32767 here for every field in this crate, well inside i32.
    VarInt(i32::try_from(s.len()).unwrap_or(i32::MAX)).encode(out);
    out.put_slice(s.as_bytes());
    Ok(())
}

/// Appends a byte array with a big-endian `i16` length prefix.
///
/// # Errors
/// [`EncodeError::ArrayTooLong`] when `data` is over 32,767 bytes.
pub fn put_i16_bytes(out: &mut impl BufMut, data: &[u8], field: &'static str) -> Result<(), EncodeError> {
    let len = i16::try_from(data.len()).map_err(|_| EncodeError::ArrayTooLong { field, len: data.len() })?;
    out.put_i16(len);
    out.put_slice(data);
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn string_round_trip_and_limits() {
        let mut out = Vec::new();
        put_string(&mut out, "Steve", 16, "name").unwrap();
        assert_eq!(out, [0x05, b'S', b't', b'e', b'v', b'e']);
        let mut r = Reader::new(&out);
        assert_eq!(r.string(16, "name").unwrap(), "Steve");
        r.finish().unwrap();

        assert_eq!(
            put_string(&mut Vec::new(), "abcdefghijklmnopq", 16, "name"),
            Err(EncodeError::StringTooLong { field: "name", len: 17, max: 16 })
        );
        // Byte length over 4 * max is refused before reading the bytes.
        let r = Reader::new(&[0x41]).string(16, "name");
        assert_eq!(r, Err(DecodeError::StringTooLong { field: "name", len: 65, max: 64 }));
        // 17 characters within 64 bytes: refused on the character count.
        let mut raw = vec![17u8];
        raw.extend_from_slice(b"abcdefghijklmnopq");
        assert_eq!(
            Reader::new(&raw).string(16, "name"),
            Err(DecodeError::StringTooLong { field: "name", len: 17, max: 16 })
        );
        // Negative length.
        assert_eq!(
            Reader::new(&[0xff, 0xff, 0xff, 0xff, 0x0f]).string(16, "name"),
            Err(DecodeError::NegativeLength("name"))
        );
        // Invalid UTF-8.
        assert_eq!(Reader::new(&[0x01, 0xff]).string(16, "name"), Err(DecodeError::InvalidText("name")));
        // Truncated.
        assert_eq!(Reader::new(&[0x05, b'S']).string(16, "name"), Err(DecodeError::UnexpectedEnd("name")));
    }

    #[test]
    fn i16_arrays() {
        let mut out = Vec::new();
        put_i16_bytes(&mut out, &[1, 2, 3], "data").unwrap();
        assert_eq!(out, [0x00, 0x03, 1, 2, 3]);
        assert_eq!(Reader::new(&out).i16_bytes("data").unwrap(), &[1, 2, 3]);
        assert_eq!(Reader::new(&[0xff, 0xff]).i16_bytes("data"), Err(DecodeError::NegativeLength("data")));
        assert_eq!(
            put_i16_bytes(&mut Vec::new(), &[0; 32768], "data"),
            Err(EncodeError::ArrayTooLong { field: "data", len: 32768 })
        );
    }
}
