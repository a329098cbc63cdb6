//! Arbitrary bytes as the payloads of `moonbridge.v2.zstd` messages (docs/carriage.md, "Compression"), split
//! into messages and pieces at arbitrary points, through the receiving end both MoonBridge ends use (stored
//! frames read without a context, anything else through one): it never panics, never hands out more than the
//! message limit per message, and stops (with an error) instead of looping.
#![no_main]

use libfuzzer_sys::fuzz_target;
use moonbridge_protocol::ws::compress::{Contexts, DEFAULT_LEVEL};

fuzz_target!(|data: &[u8]| {
    let Some((&shape, rest)) = data.split_first() else { return };
    let mut d = Contexts::new(DEFAULT_LEVEL);
    let max = usize::from(shape) * 1024 + 1;
    let mut out = Vec::new();
    for message in rest.chunks(usize::from(shape % 61) * 13 + 1) {
        let mut produced = 0usize;
        for piece in message.chunks(usize::from(shape % 7) + 1) {
            if d.queue(piece).is_err() {
                return;
            }
            let mut calls = 0;
            while d.has_output() {
                out.clear();
                match d.inflate(&mut out, 4096, max) {
                    Ok(n) => produced += n,
                    Err(_) => return,
                }
                assert!(produced <= max, "{produced} > {max}");
                calls += 1;
                assert!(calls < 100_000, "no progress");
            }
        }
        d.end_message();
    }
});
