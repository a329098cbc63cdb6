//! Arbitrary bytes as what a WebSocket client sends (RFC 6455 framing, server side), split at arbitrary points:
//! the decoder never panics, hands out no more payload than it was given, and the payload it hands out, fed to
//! the Minecraft frame decoder as the carriage does, never panics either. With an odd first byte the decoder
//! accepts carriage v2 control messages (short Text), which are parsed (and re-encoded when valid: the text
//! form round-trips).
#![no_main]

use libfuzzer_sys::fuzz_target;
use moonbridge_protocol::packets::MAX_HANDSHAKE_FRAME_LEN;
use moonbridge_protocol::ws::frame::{Event, ServerDecoder};
use moonbridge_protocol::FrameDecoder;

fuzz_target!(|data: &[u8]| {
    let Some((&split, rest)) = data.split_first() else { return };
    let mut ws = ServerDecoder::new(usize::from(split) * 97 + 1);
    if split % 2 == 1 {
        ws.accept_text(moonbridge_protocol::ws::v2::MAX_CONTROL_LEN);
    }
    let mut mc = FrameDecoder::new(MAX_HANDSHAKE_FRAME_LEN);
    let mut payload = 0usize;
    for chunk in rest.chunks(usize::from(split % 23) + 1) {
        ws.queue_slice(chunk);
        loop {
            match ws.try_next() {
                Ok(Some(Event::Data(d))) => {
                    payload += d.len();
                    mc.queue_slice(&d);
                    while let Ok(Some(_)) = mc.try_next_frame() {}
                }
                Ok(Some(Event::Close(c))) => {
                    assert!(moonbridge_protocol::ws::frame::is_valid_close_code(c.reply_code()));
                    return;
                }
                Ok(Some(Event::Text(t))) => {
                    assert!(t.len() <= moonbridge_protocol::ws::v2::MAX_CONTROL_LEN);
                    if let Ok(c) = moonbridge_protocol::ws::v2::Control::parse(&t) {
                        assert_eq!(moonbridge_protocol::ws::v2::Control::parse(c.encode().as_bytes()), Ok(c));
                    }
                }
                Ok(Some(_)) => {}
                Ok(None) => break,
                Err(f) => {
                    assert!(matches!(f.close_code(), 1002 | 1003 | 1009));
                    return;
                }
            }
        }
    }
    assert!(payload <= rest.len());
});
