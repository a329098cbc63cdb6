//! The length in front of a 1.7 Plugin Message's data, in the three forms the field writes.
//!
//! - **Short** (vanilla 1.7.10, `S3FPacketCustomPayload` / `C17PacketCustomPayload`): a big-endian `i16`, so at
//!   most 32,767 bytes.
//! - **VarShort** (Forge 1.7.10's patch of S3F, `ByteBufUtils.readVarShort` / `writeVarShort`): an unsigned
//!   big-endian short; when its high bit is set, its low 15 bits are the low bits of the length and one more
//!   byte carries bits 15–22. Forge writes at most 2,097,050 (`0x1FFF9A`) this way; the form holds up to
//!   `0x7FFFFE`. Up to 32,767 it is the same two bytes as the Short form.
//! - **Extended** (GT New Horizons' Hodgepodge, `PacketSerializationHelper.readExtendedVarShortOrInt`): the
//!   VarShort value `0x7FFFFF` (`FF FF FF`) is a marker, and an ordinary VarInt (at most 5 bytes, not negative)
//!   follows with the real length. Written for lengths the VarShort cannot hold.
//!
//! One reader takes all three (they never disagree: a vanilla Short over 32,767 would be negative, which vanilla
//! refuses), so a proxy reads Plugin Messages the same way whichever dialect wrote them, as BungeeCord
//! (`readArrayLegacy`), Velocity (`readByteArray17`) and Gate (`ReadBytes17`) do. The writer picks the shortest
//! form that holds the length.

use bytes::BufMut;

use crate::codec::Reader;
use crate::error::DecodeError;
use crate::varint::VarInt;

/// Largest length the Short form holds (and the largest data vanilla 1.7.10 accepts).
pub const MAX_SHORT: usize = 0x7fff;

/// Largest length Forge 1.7.10 writes as a VarShort (`0x1FFF9A` = 2,097,050: what fits a 2 MiB frame).
pub const MAX_FORGE_VAR_SHORT: usize = 0x1f_ff9a;

/// The VarShort value that announces the Extended form (`FF FF FF`).
pub const EXTENDED_MARKER: usize = 0x7f_ffff;

/// Which of the three forms a length was written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum LengthForm {
    /// Two bytes, at most 32,767.
    Short,
    /// Three bytes: high bit of the first short set, then the byte with bits 15–22.
    VarShort,
    /// The marker `FF FF FF`, then a VarInt.
    Extended,
}

/// A Plugin Message data length and the form it was (or will be) written in.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ArrayLength {
    /// The length in bytes.
    pub len: usize,
    /// How it is written.
    pub form: LengthForm,
}

impl ArrayLength {
    /// The shortest form for `len` bytes.
    pub fn for_len(len: usize) -> Self {
        let form = if len <= MAX_SHORT {
            LengthForm::Short
        } else if len < EXTENDED_MARKER {
            LengthForm::VarShort
        } else {
            LengthForm::Extended
        };
        Self { len, form }
    }

    /// Reads a length in any of the three forms.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] when the body ends inside the length; [`DecodeError::VarInt`] for a bad
    /// Extended VarInt; [`DecodeError::NegativeLength`] for a negative one.
    pub fn read(r: &mut Reader<'_>, field: &'static str) -> Result<Self, DecodeError> {
        let low = usize::from(r.u16(field)?);
        if low & 0x8000 == 0 {
            return Ok(Self { len: low, form: LengthForm::Short });
        }
        let high = usize::from(r.u8(field)?);
        let len = (low & 0x7fff) | (high << 15);
        if len != EXTENDED_MARKER {
            return Ok(Self { len, form: LengthForm::VarShort });
        }
        let len = usize::try_from(r.var_int(field)?).map_err(|_| DecodeError::NegativeLength(field))?;
        Ok(Self { len, form: LengthForm::Extended })
    }

    /// Bytes the length takes on the wire: 2, 3, or 3 and the VarInt's.
    pub fn written_size(&self) -> usize {
        match self.form {
            LengthForm::Short => 2,
            LengthForm::VarShort => 3,
            LengthForm::Extended => 3 + VarInt(i32::try_from(self.len).unwrap_or(i32::MAX)).written_size(),
        }
    }

    /// Appends the length in its form. A length that does not fit the form is written in the next one that
    /// holds it (Short → VarShort → Extended); an Extended length over `i32::MAX` is written as `i32::MAX`
    /// (no 1.7 frame can carry that much).
    pub fn encode(&self, out: &mut impl BufMut) {
        let form = match self.form {
            LengthForm::Short if self.len <= MAX_SHORT => LengthForm::Short,
            LengthForm::Short | LengthForm::VarShort if self.len < EXTENDED_MARKER => LengthForm::VarShort,
            _ => LengthForm::Extended,
        };
        let var_short = |out: &mut dyn BufMut, v: usize| {
            // v < 2^23: the low 15 bits with the high bit set, then bits 15–22.
            out.put_u16(((v & 0x7fff) | 0x8000) as u16);
            out.put_u8(((v >> 15) & 0xff) as u8);
        };
        match form {
            LengthForm::Short => out.put_u16(self.len as u16),
            LengthForm::VarShort => var_short(out, self.len),
            LengthForm::Extended => {
                var_short(out, EXTENDED_MARKER);
                VarInt(i32::try_from(self.len).unwrap_or(i32::MAX)).encode(out);
            }
        }
    }
}

/// Reads a Plugin Message's data: an [`ArrayLength`] in any form, then that many bytes.
///
/// # Errors
/// As [`ArrayLength::read`], and [`DecodeError::UnexpectedEnd`] when fewer bytes follow than declared.
pub fn read_data<'a>(r: &mut Reader<'a>, field: &'static str) -> Result<&'a [u8], DecodeError> {
    let len = ArrayLength::read(r, field)?;
    r.bytes(len.len, field)
}

/// Appends `data` with its length in the shortest form.
pub fn put_data(out: &mut impl BufMut, data: &[u8]) {
    ArrayLength::for_len(data.len()).encode(out);
    out.put_slice(data);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn written(len: usize) -> Vec<u8> {
        let mut out = Vec::new();
        ArrayLength::for_len(len).encode(&mut out);
        out
    }

    fn read(bytes: &[u8]) -> Result<ArrayLength, DecodeError> {
        let mut r = Reader::new(bytes);
        let l = ArrayLength::read(&mut r, "data")?;
        assert!(r.remaining().is_empty(), "{bytes:02x?} read whole");
        Ok(l)
    }

    #[test]
    fn every_boundary_byte_exact() {
        use LengthForm::*;
        // (length, bytes, form): the vanilla limit, the first VarShort, Forge's limit, the last VarShort, the
        // marker's own value and the first lengths past it, Hodgepodge's 256 MiB default.
        let vectors: &[(usize, &[u8], LengthForm)] = &[
            (0, &[0x00, 0x00], Short),
            (32_767, &[0x7f, 0xff], Short),
            (32_768, &[0x80, 0x00, 0x01], VarShort),
            (40 * 1024, &[0xa0, 0x00, 0x01], VarShort),
            (2_097_050, &[0xff, 0x9a, 0x3f], VarShort),
            (0x7f_fffe, &[0xff, 0xfe, 0xff], VarShort),
            (0x7f_ffff, &[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x03], Extended),
            (0x80_0000, &[0xff, 0xff, 0xff, 0x80, 0x80, 0x80, 0x04], Extended),
            (256 << 20, &[0xff, 0xff, 0xff, 0x80, 0x80, 0x80, 0x80, 0x01], Extended),
        ];
        for &(len, bytes, form) in vectors {
            assert_eq!(written(len), bytes, "length {len}");
            assert_eq!(read(bytes), Ok(ArrayLength { len, form }), "{bytes:02x?}");
            assert_eq!(ArrayLength::for_len(len).written_size(), bytes.len(), "length {len}");
        }
        assert_eq!(MAX_FORGE_VAR_SHORT, 2_097_050);
        // The Extended form may also carry a small length (Hodgepodge reads it; it is kept as written).
        let small = ArrayLength { len: 5, form: Extended };
        let mut out = Vec::new();
        small.encode(&mut out);
        assert_eq!(out, [0xff, 0xff, 0xff, 0x05]);
        assert_eq!(read(&out), Ok(small));
        // A form too small for its length is widened, never truncated.
        let mut out = Vec::new();
        ArrayLength { len: 40_000, form: Short }.encode(&mut out);
        assert_eq!(read(&out).unwrap().len, 40_000);
    }

    #[test]
    fn bad_lengths() {
        assert_eq!(read(&[0x7f]), Err(DecodeError::UnexpectedEnd("data")));
        assert_eq!(read(&[0x80, 0x00]), Err(DecodeError::UnexpectedEnd("data")));
        assert!(matches!(read(&[0xff, 0xff, 0xff]), Err(DecodeError::VarInt { .. })), "the VarInt is missing");
        assert_eq!(read(&[0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x0f]), Err(DecodeError::NegativeLength("data")));
        assert!(matches!(
            read(&[0xff, 0xff, 0xff, 0x80, 0x80, 0x80, 0x80, 0x80, 0x01]),
            Err(DecodeError::VarInt { .. })
        ));
        // Data shorter than declared.
        assert_eq!(
            read_data(&mut Reader::new(&[0x80, 0x00, 0x01, 1, 2]), "data"),
            Err(DecodeError::UnexpectedEnd("data"))
        );
        let mut out = Vec::new();
        put_data(&mut out, &[9; 40_000]);
        assert_eq!(read_data(&mut Reader::new(&out), "data").unwrap().len(), 40_000);
    }
}
