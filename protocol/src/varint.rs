//! VarInt and VarLong: the variable-length integers of the Minecraft protocol.
//!
//! Layout (protocol 5, same as every version since 1.7): little-endian groups of 7 bits, low group first;
//! bit 7 of each byte is set when another byte follows. A VarInt is at most 5 bytes and decodes to an `i32`
//! (negative numbers always take 5 bytes); a VarLong is at most 10 bytes and decodes to an `i64`.

use bytes::BufMut;

/// Why a VarInt or VarLong could not be decoded.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum VarIntDecodeError {
    /// The input ended before the last byte (one without bit 7) was seen. More input may complete it.
    #[error("incomplete VarInt")]
    Incomplete,
    /// More bytes carry the continuation bit than the type allows (5 for VarInt, 10 for VarLong, or a
    /// caller-given smaller bound such as the 3-byte frame length prefix). No more input can fix it.
    #[error("VarInt is too long")]
    TooLong,
}

/// A protocol VarInt (`i32`, 1 to 5 bytes on the wire).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VarInt(pub i32);

impl VarInt {
    /// Largest number of bytes a VarInt occupies.
    pub const MAX_SIZE: usize = 5;

    /// Decodes a VarInt from the start of `buf`, returning the value and the number of bytes it used.
    ///
    /// # Errors
    /// [`VarIntDecodeError::Incomplete`] when `buf` ends inside the VarInt, [`VarIntDecodeError::TooLong`]
    /// when the fifth byte still has its continuation bit set.
    pub fn decode_partial(buf: &[u8]) -> Result<(i32, usize), VarIntDecodeError> {
        decode_bounded(buf, Self::MAX_SIZE).map(|(v, n)| (v as u32 as i32, n))
    }

    /// Number of bytes [`VarInt::encode`] writes for this value (1 to 5).
    pub const fn written_size(self) -> usize {
        match self.0 as u32 {
            0..=0x7f => 1,
            0x80..=0x3fff => 2,
            0x4000..=0x1f_ffff => 3,
            0x20_0000..=0x0fff_ffff => 4,
            _ => 5,
        }
    }

    /// Appends the encoded VarInt to `out`.
    pub fn encode(self, out: &mut impl BufMut) {
        encode_groups(u64::from(self.0 as u32), out);
    }
}

/// A protocol VarLong (`i64`, 1 to 10 bytes on the wire).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct VarLong(pub i64);

impl VarLong {
    /// Largest number of bytes a VarLong occupies.
    pub const MAX_SIZE: usize = 10;

    /// Decodes a VarLong from the start of `buf`, returning the value and the number of bytes it used.
    ///
    /// # Errors
    /// As [`VarInt::decode_partial`], with a 10-byte bound.
    pub fn decode_partial(buf: &[u8]) -> Result<(i64, usize), VarIntDecodeError> {
        decode_bounded(buf, Self::MAX_SIZE).map(|(v, n)| (v as i64, n))
    }

    /// Number of bytes [`VarLong::encode`] writes for this value (1 to 10).
    pub const fn written_size(self) -> usize {
        let v = self.0 as u64;
        if v == 0 {
            return 1;
        }
        let bits = 64 - v.leading_zeros() as usize;
        bits.div_ceil(7)
    }

    /// Appends the encoded VarLong to `out`.
    pub fn encode(self, out: &mut impl BufMut) {
        encode_groups(self.0 as u64, out);
    }
}

/// Appends `v` as 7-bit groups, least significant first, the high bit set on every byte but the last (a
/// VarInt's `u32` or a VarLong's `u64`).
#[inline]
fn encode_groups(mut v: u64, out: &mut impl BufMut) {
    loop {
        if v & !0x7f == 0 {
            out.put_u8(v as u8);
            return;
        }
        out.put_u8((v as u8 & 0x7f) | 0x80);
        v >>= 7;
    }
}

/// Decodes at most `max_bytes` bytes of a 7-bit group varint into a `u64`.
///
/// Bits beyond 32 (VarInt) or 64 (VarLong) are dropped the way the reference implementation drops them.
pub(crate) fn decode_bounded(buf: &[u8], max_bytes: usize) -> Result<(u64, usize), VarIntDecodeError> {
    let mut value: u64 = 0;
    for (i, &byte) in buf.iter().take(max_bytes).enumerate() {
        value |= u64::from(byte & 0x7f) << (7 * i);
        if byte & 0x80 == 0 {
            return Ok((value, i + 1));
        }
    }
    if buf.len() >= max_bytes {
        Err(VarIntDecodeError::TooLong)
    } else {
        Err(VarIntDecodeError::Incomplete)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use proptest::prelude::*;

    fn enc(v: i32) -> Vec<u8> {
        let mut out = Vec::new();
        VarInt(v).encode(&mut out);
        out
    }

    #[test]
    fn varint_vectors() {
        // Vectors from the protocol documentation's VarInt table.
        let cases: &[(i32, &[u8])] = &[
            (0, &[0x00]),
            (1, &[0x01]),
            (2, &[0x02]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (255, &[0xff, 0x01]),
            (25565, &[0xdd, 0xc7, 0x01]),
            (2_097_151, &[0xff, 0xff, 0x7f]),
            (2_147_483_647, &[0xff, 0xff, 0xff, 0xff, 0x07]),
            (-1, &[0xff, 0xff, 0xff, 0xff, 0x0f]),
            (-2_147_483_648, &[0x80, 0x80, 0x80, 0x80, 0x08]),
        ];
        for &(v, bytes) in cases {
            assert_eq!(enc(v), bytes, "encode {v}");
            assert_eq!(VarInt::decode_partial(bytes), Ok((v, bytes.len())), "decode {v}");
            assert_eq!(VarInt(v).written_size(), bytes.len(), "size {v}");
        }
    }

    #[test]
    fn varlong_vectors() {
        let cases: &[(i64, &[u8])] = &[
            (0, &[0x00]),
            (127, &[0x7f]),
            (128, &[0x80, 0x01]),
            (2_147_483_647, &[0xff, 0xff, 0xff, 0xff, 0x07]),
            (i64::MAX, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x7f]),
            (-1, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01]),
            (i64::MIN, &[0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
        ];
        for &(v, bytes) in cases {
            let mut out = Vec::new();
            VarLong(v).encode(&mut out);
            assert_eq!(out, bytes, "encode {v}");
            assert_eq!(VarLong::decode_partial(bytes), Ok((v, bytes.len())), "decode {v}");
            assert_eq!(VarLong(v).written_size(), bytes.len(), "size {v}");
        }
    }

    #[test]
    fn incomplete_and_too_long_are_distinct() {
        assert_eq!(VarInt::decode_partial(&[]), Err(VarIntDecodeError::Incomplete));
        assert_eq!(VarInt::decode_partial(&[0x80]), Err(VarIntDecodeError::Incomplete));
        assert_eq!(VarInt::decode_partial(&[0xff, 0xff, 0xff, 0xff]), Err(VarIntDecodeError::Incomplete));
        assert_eq!(VarInt::decode_partial(&[0xff; 5]), Err(VarIntDecodeError::TooLong));
        assert_eq!(VarInt::decode_partial(&[0xff; 6]), Err(VarIntDecodeError::TooLong));
        assert_eq!(VarLong::decode_partial(&[0xff; 9]), Err(VarIntDecodeError::Incomplete));
        assert_eq!(VarLong::decode_partial(&[0xff; 10]), Err(VarIntDecodeError::TooLong));
    }

    proptest! {
        #[test]
        fn varint_round_trip(v: i32, tail in proptest::collection::vec(any::<u8>(), 0..4)) {
            let mut bytes = enc(v);
            let n = bytes.len();
            prop_assert_eq!(n, VarInt(v).written_size());
            bytes.extend_from_slice(&tail);
            prop_assert_eq!(VarInt::decode_partial(&bytes), Ok((v, n)));
            // Every strict prefix is incomplete, never a wrong value.
            for cut in 0..n {
                prop_assert_eq!(VarInt::decode_partial(&bytes[..cut]), Err(VarIntDecodeError::Incomplete));
            }
        }

        #[test]
        fn varlong_round_trip(v: i64) {
            let mut bytes = Vec::new();
            VarLong(v).encode(&mut bytes);
            prop_assert_eq!(bytes.len(), VarLong(v).written_size());
            prop_assert_eq!(VarLong::decode_partial(&bytes), Ok((v, bytes.len())));
        }
    }
}
