//! Feeds arbitrary bytes, split at arbitrary points, to the frame decoder and the frame scanner: neither may
//! panic, every frame returned must respect the limit, and both must agree on the frames seen.
#![no_main]

use libfuzzer_sys::fuzz_target;
use moonbridge_protocol::{FrameDecoder, FrameScanner};

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let max = 1 + usize::from(split) * 64;
    let mut dec = FrameDecoder::new(max);
    let mut scanner = FrameScanner::new();
    let mut decoded = 0u64;
    let mut scan_ok = true;
    for chunk in rest.chunks(usize::from(split % 17) + 1) {
        dec.queue_slice(chunk);
        scan_ok &= scanner.scan(chunk).is_ok();
        loop {
            match dec.try_next_frame() {
                Ok(Some(f)) => {
                    assert!(f.body.len() < max);
                    decoded += 1;
                }
                Ok(None) => break,
                Err(_) => return,
            }
        }
    }
    if scan_ok {
        assert_eq!(scanner.frames(), decoded);
    }
});
