//! Arbitrary bytes as the opening of a connection: legacy-ping detection, then handshake and Login Start
//! decoding. Nothing may panic, and whatever decodes must re-encode to bytes that decode to the same value.
#![no_main]

use libfuzzer_sys::fuzz_target;
use moonbridge_protocol::handshake::HostField;
use moonbridge_protocol::legacy;
use moonbridge_protocol::packets::{Handshake, LoginStart, Packet, MAX_HANDSHAKE_FRAME_LEN};
use moonbridge_protocol::FrameDecoder;

fuzz_target!(|data: &[u8]| {
    let _ = legacy::detect(data);
    let _ = legacy::decode_kick(data);
    let mut dec = FrameDecoder::new(MAX_HANDSHAKE_FRAME_LEN);
    dec.queue_slice(data);
    let Ok(Some(frame)) = dec.try_next_frame() else { return };
    if let Ok(hs) = frame.decode::<Handshake>() {
        let host = HostField::parse(&hs.server_address);
        let _ = host.routing_key();
        assert_eq!(host.with_hostname(host.hostname), hs.server_address);
        let bytes = hs.to_frame_bytes().expect("a decoded handshake re-encodes");
        let mut again = FrameDecoder::new(MAX_HANDSHAKE_FRAME_LEN);
        again.queue_slice(&bytes);
        assert_eq!(again.try_next_frame().unwrap().unwrap().decode::<Handshake>().unwrap(), hs);
    }
    if let Ok(Some(frame)) = dec.try_next_frame() {
        if let Ok(login) = frame.decode::<LoginStart>() {
            assert!(login.to_frame_bytes().is_ok());
        }
    }
});
