//! Arbitrary bytes as the start of a connection that may be a pre-1.7 server-list ping, and as a backend's
//! `FF` kick answer: detection and decoding never panic, and a detected ping never claims more bytes than given.
#![no_main]

use libfuzzer_sys::fuzz_target;
use moonbridge_protocol::legacy::{self, LegacyDetect};

fuzz_target!(|data: &[u8]| {
    for end in 0..=data.len().min(600) {
        if let Ok(LegacyDetect::Legacy { len, .. }) = legacy::detect(&data[..end]) {
            assert!(len <= end);
        }
    }
    if let Ok(Some((_, n))) = legacy::decode_kick(data) {
        assert!(n <= data.len());
    }
});
