//! Arbitrary bytes as the frame after an Encryption Request (protocol 5 Encryption Response: two byte arrays
//! with 2-byte lengths): decoding never panics, and what decodes re-encodes to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use moonbridge_protocol::packets::{EncryptionResponse, Packet, MAX_ENCRYPTION_RESPONSE_FRAME_LEN};
use moonbridge_protocol::FrameDecoder;

fuzz_target!(|data: &[u8]| {
    let mut dec = FrameDecoder::new(MAX_ENCRYPTION_RESPONSE_FRAME_LEN);
    dec.queue_slice(data);
    let Ok(Some(frame)) = dec.try_next_frame() else { return };
    if let Ok(r) = frame.decode::<EncryptionResponse>() {
        let bytes = r.to_frame_bytes().expect("a decoded response re-encodes");
        let mut again = FrameDecoder::new(MAX_ENCRYPTION_RESPONSE_FRAME_LEN);
        again.queue_slice(&bytes);
        assert_eq!(again.try_next_frame().unwrap().unwrap().decode::<EncryptionResponse>().unwrap(), r);
    }
});
