//! Protocol 5 login encryption: the server hash sent to the session server, and the AES-128-CFB8 stream
//! cipher both directions use once encryption is on (key = IV = the 16-byte shared secret).
//!
//! CFB8 runs one AES block operation per byte; encryption is inherently sequential. The AES itself is the
//! RustCrypto `aes` crate, which uses AES-NI (or ARMv8 AES) when the CPU has it. Both directions work in place
//! on the caller's buffer, so no allocation happens per frame.

use sha1::{Digest, Sha1};

/// Length of the shared secret (an AES-128 key), in bytes.
pub const SHARED_SECRET_LEN: usize = 16;

/// The Minecraft "server hash": SHA-1 over `server_id` (ASCII), the shared secret and the DER public key,
/// printed as a signed two's-complement hexadecimal number (Java's `new BigInteger(digest).toString(16)`).
pub fn server_hash(server_id: &str, shared_secret: &[u8], public_key_der: &[u8]) -> String {
    let digest: [u8; 20] = Sha1::new()
        .chain_update(server_id.as_bytes())
        .chain_update(shared_secret)
        .chain_update(public_key_der)
        .finalize()
        .into();
    signed_hex_digest(digest)
}

/// Formats a 20-byte digest as a signed hexadecimal number without leading zeros (`-` and the magnitude when
/// the top bit is set).
pub fn signed_hex_digest(mut digest: [u8; 20]) -> String {
    let negative = digest[0] & 0x80 != 0;
    if negative {
        // Two's complement: invert and add one.
        let mut carry = true;
        for b in digest.iter_mut().rev() {
            *b = !*b;
            if carry {
                let (v, c) = b.overflowing_add(1);
                *b = v;
                carry = c;
            }
        }
    }
    let hex: String = digest.iter().map(|b| format!("{b:02x}")).collect();
    let trimmed = hex.trim_start_matches('0');
    let magnitude = if trimmed.is_empty() { "0" } else { trimmed };
    if negative {
        format!("-{magnitude}")
    } else {
        magnitude.to_string()
    }
}

/// AES-128-CFB8 encryption of a stream, in place, keeping its state between calls.
///
/// The AES block function is the RustCrypto `aes` crate's (hardware AES when available). The CFB8 mode
/// around it is written out here instead of using the `cfb8` crate, which measured slower (figures and the
/// command in `docs/benchmarks.md`, "CFB8 throughput"): the CPU-feature dispatch happens once per call rather
/// than once per byte, the 16-byte register lives in a `u128` (the per-byte shift is one instruction), and
/// decryption, whose AES inputs are all known from the ciphertext, runs its AES operations in parallel
/// batches. The `cfb8` crate stays the reference the tests check this against.
pub struct Cfb8Encryptor {
    aes: aes::Aes128Enc,
    register: u128,
}

/// AES-128-CFB8 decryption of a stream, in place, keeping its state between calls (see [`Cfb8Encryptor`]).
pub struct Cfb8Decryptor {
    aes: aes::Aes128Enc,
    register: [u8; 16],
}

impl std::fmt::Debug for Cfb8Encryptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cfb8Encryptor")
    }
}

impl std::fmt::Debug for Cfb8Decryptor {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Cfb8Decryptor")
    }
}

/// Bytes decrypted per parallel AES batch.
const DECRYPT_BATCH: usize = 64;

impl Cfb8Encryptor {
    /// A stream keyed (and IV'd) with the shared secret, as protocol 5 does.
    pub fn new(shared_secret: &[u8; SHARED_SECRET_LEN]) -> Self {
        Self::with_iv(shared_secret, shared_secret)
    }

    /// A stream with a separate IV (for standard test vectors).
    pub fn with_iv(key: &[u8; 16], iv: &[u8; 16]) -> Self {
        use aes::cipher::KeyInit;
        Self { aes: aes::Aes128Enc::new(key.into()), register: u128::from_be_bytes(*iv) }
    }

    /// Encrypts `data` in place, continuing the stream.
    pub fn apply(&mut self, data: &mut [u8]) {
        use aes::cipher::BlockEncrypt;
        // One backend dispatch per call, not per byte: the closure runs with the selected AES implementation.
        self.aes.encrypt_with_backend(EncryptBytes { register: &mut self.register, data });
    }
}

/// The CFB8 encryption loop, run by the AES backend `aes` selected (see `BlockClosure`).
struct EncryptBytes<'a> {
    register: &'a mut u128,
    data: &'a mut [u8],
}

impl aes::cipher::BlockSizeUser for EncryptBytes<'_> {
    type BlockSize = aes::cipher::consts::U16;
}

impl aes::cipher::BlockClosure for EncryptBytes<'_> {
    #[inline(always)]
    fn call<B: aes::cipher::BlockBackend<BlockSize = Self::BlockSize>>(self, backend: &mut B) {
        let mut register = *self.register;
        for byte in self.data.iter_mut() {
            let mut block = aes::Block::from(register.to_be_bytes());
            backend.proc_block((&mut block).into());
            let [keystream, ..] = <[u8; 16]>::from(block);
            *byte ^= keystream;
            register = (register << 8) | u128::from(*byte);
        }
        *self.register = register;
    }
}

impl Cfb8Decryptor {
    /// A stream keyed (and IV'd) with the shared secret, as protocol 5 does.
    pub fn new(shared_secret: &[u8; SHARED_SECRET_LEN]) -> Self {
        Self::with_iv(shared_secret, shared_secret)
    }

    /// A stream with a separate IV (for standard test vectors).
    pub fn with_iv(key: &[u8; 16], iv: &[u8; 16]) -> Self {
        use aes::cipher::KeyInit;
        Self { aes: aes::Aes128Enc::new(key.into()), register: *iv }
    }

    /// Decrypts `data` in place, continuing the stream.
    pub fn apply(&mut self, data: &mut [u8]) {
        use aes::cipher::BlockEncrypt;
        self.aes.encrypt_with_backend(DecryptBytes { register: &mut self.register, data });
    }
}

/// The CFB8 decryption loop: every AES input is already known from the ciphertext, so each batch of
/// [`DECRYPT_BATCH`] bytes runs as parallel AES blocks.
struct DecryptBytes<'a> {
    register: &'a mut [u8; 16],
    data: &'a mut [u8],
}

impl aes::cipher::BlockSizeUser for DecryptBytes<'_> {
    type BlockSize = aes::cipher::consts::U16;
}

impl aes::cipher::BlockClosure for DecryptBytes<'_> {
    #[inline(always)]
    fn call<B: aes::cipher::BlockBackend<BlockSize = Self::BlockSize>>(self, backend: &mut B) {
        // window = the last 16 ciphertext bytes, then this batch's ciphertext; the AES input for byte i is
        // the i-th 16-byte window.
        let mut blocks = [aes::Block::default(); DECRYPT_BATCH];
        for chunk in self.data.chunks_mut(DECRYPT_BATCH) {
            let mut window = [0u8; 16 + DECRYPT_BATCH];
            let (head, tail) = window.split_at_mut(16);
            head.copy_from_slice(self.register);
            tail.iter_mut().zip(chunk.iter()).for_each(|(w, c)| *w = *c);
            let blocks = blocks.get_mut(..chunk.len()).unwrap_or_default();
            for (b, w) in blocks.iter_mut().zip(window.windows(16)) {
                b.copy_from_slice(w);
            }
            let (par, tail) = aes::cipher::inout::InOutBuf::from(&mut *blocks).into_chunks();
            for p in par {
                backend.proc_par_blocks(p);
            }
            backend.proc_tail_blocks(tail);
            for (byte, b) in chunk.iter_mut().zip(blocks.iter()) {
                let [keystream, ..] = <[u8; 16]>::from(*b);
                *byte ^= keystream;
            }
            if let Some(last) = window.get(chunk.len()..chunk.len() + 16) {
                self.register.copy_from_slice(last);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn sha1_hex(name: &str) -> String {
        signed_hex_digest(Sha1::digest(name.as_bytes()).into())
    }

    #[test]
    fn signed_digests_of_known_names() {
        // The reference vectors of the Minecraft hex digest (SHA-1 of the name alone).
        assert_eq!(sha1_hex("Notch"), "4ed1f46bbe04bc756bcb17c0c7ce3e4632f06a48");
        assert_eq!(sha1_hex("jeb_"), "-7c9d5b0044c130109a5d7b5fb5c317c02b4e28c1");
        assert_eq!(sha1_hex("simon"), "88e16a1019277b15d58faf0541e11910eb756f6");
    }

    #[test]
    fn digest_edge_cases() {
        assert_eq!(signed_hex_digest([0; 20]), "0");
        let mut one = [0u8; 20];
        one[19] = 1;
        assert_eq!(signed_hex_digest(one), "1");
        assert_eq!(signed_hex_digest([0xff; 20]), "-1");
        let mut min = [0u8; 20];
        min[0] = 0x80;
        assert_eq!(signed_hex_digest(min), format!("-8{}", "0".repeat(39)));
    }

    #[test]
    fn server_hash_concatenates_its_inputs() {
        let a = server_hash("", b"0123456789abcdef", b"key");
        let b = signed_hex_digest(Sha1::digest(b"0123456789abcdefkey").into());
        assert_eq!(a, b);
    }

    #[test]
    fn cfb8_matches_nist_sp800_38a() {
        // SP 800-38A F.3.7 CFB8-AES128.Encrypt; the standard IV is not the key, so build the ciphers directly.
        let key: [u8; 16] =
            [0x2b, 0x7e, 0x15, 0x16, 0x28, 0xae, 0xd2, 0xa6, 0xab, 0xf7, 0x15, 0x88, 0x09, 0xcf, 0x4f, 0x3c];
        let iv: [u8; 16] = [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15];
        let plain = [
            0x6b, 0xc1, 0xbe, 0xe2, 0x2e, 0x40, 0x9f, 0x96, 0xe9, 0x3d, 0x7e, 0x11, 0x73, 0x93, 0x17, 0x2a, 0xae, 0x2d,
        ];
        let cipher = [
            0x3b, 0x79, 0x42, 0x4c, 0x9c, 0x0d, 0xd4, 0x36, 0xba, 0xce, 0x9e, 0x0e, 0xd4, 0x58, 0x6a, 0x4f, 0x32, 0xb9,
        ];
        let mut enc = Cfb8Encryptor::with_iv(&key, &iv);
        let mut buf = plain;
        // Across two calls: the stream state carries over.
        enc.apply(&mut buf[..5]);
        enc.apply(&mut buf[5..]);
        assert_eq!(buf, cipher);
        let mut dec = Cfb8Decryptor::with_iv(&key, &iv);
        dec.apply(&mut buf[..11]);
        dec.apply(&mut buf[11..]);
        assert_eq!(buf, plain);
    }

    proptest::proptest! {
        /// The fast CFB8 agrees with the RustCrypto `cfb8` crate for any data split at any points.
        #[test]
        fn matches_the_cfb8_crate(
            key: [u8; 16],
            data in proptest::collection::vec(proptest::prelude::any::<u8>(), 0..600),
            cuts in proptest::collection::vec(0usize..600, 0..6),
        ) {
            use aes::cipher::{AsyncStreamCipher, KeyIvInit};
            let mut expected = data.clone();
            cfb8::Encryptor::<aes::Aes128>::new(&key.into(), &key.into()).encrypt(&mut expected);
            let mut points: Vec<usize> = cuts.into_iter().map(|c| c.min(data.len())).collect();
            points.push(0);
            points.push(data.len());
            points.sort_unstable();
            let mut ours = data.clone();
            let mut enc = Cfb8Encryptor::new(&key);
            for w in points.windows(2) {
                enc.apply(&mut ours[w[0]..w[1]]);
            }
            proptest::prop_assert_eq!(&ours, &expected);
            let mut dec = Cfb8Decryptor::new(&key);
            for w in points.windows(2) {
                dec.apply(&mut ours[w[0]..w[1]]);
            }
            proptest::prop_assert_eq!(ours, data);
        }
    }

    #[test]
    fn protocol_streams_round_trip() {
        let secret = *b"0123456789abcdef";
        let mut enc = Cfb8Encryptor::new(&secret);
        let mut dec = Cfb8Decryptor::new(&secret);
        let original: Vec<u8> = (0..10_000).map(|i| (i * 7) as u8).collect();
        let mut data = original.clone();
        for chunk in data.chunks_mut(333) {
            enc.apply(chunk);
        }
        assert_ne!(data, original);
        for chunk in data.chunks_mut(1000) {
            dec.apply(chunk);
        }
        assert_eq!(data, original);
    }
}
