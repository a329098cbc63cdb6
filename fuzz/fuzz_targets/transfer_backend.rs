//! What a backend sends that the server-transfer layer reads (`moonbridge_protocol::transfer`): BungeeCord
//! plugin payloads (`BungeeRequest::parse`: no panic, and a `Connect` re-encoded parses to the same request)
//! and a stream of Play packets through `Leftovers` (no panic; what `clear` writes is whole frames of the
//! removal packets only, once).
#![no_main]

use libfuzzer_sys::fuzz_target;
use moonbridge_protocol::frame::{FrameDecoder, MAX_FRAME_LEN};
use moonbridge_protocol::transfer::{BungeeRequest, Direction, Leftovers};

fuzz_target!(|data: &[u8]| {
    if let Ok(BungeeRequest::Connect { server }) = BungeeRequest::parse(data) {
        let again = BungeeRequest::connect_payload(&server).expect("a parsed name fits writeUTF");
        assert_eq!(BungeeRequest::parse(&again), Ok(BungeeRequest::Connect { server }));
    }
    // The same bytes as packets: a head byte (bit 7: serverbound; bits 0-6: packet id), a length byte, a body.
    let mut leftovers = Leftovers::default();
    let mut rest = data;
    while let [head, len, tail @ ..] = rest {
        let (body, after) = tail.split_at(usize::from(*len).min(tail.len()));
        let direction = if head & 0x80 == 0 { Direction::Clientbound } else { Direction::Serverbound };
        leftovers.observe(direction, i32::from(head & 0x7f), body);
        rest = after;
    }
    let mut out = Vec::new();
    leftovers.clear(&mut out).expect("tracked names fit their packets");
    assert!(leftovers.is_empty());
    let mut frames = FrameDecoder::new(MAX_FRAME_LEN);
    frames.queue_slice(&out);
    while let Some(f) = frames.try_next_frame().expect("whole frames") {
        assert!(Leftovers::CLIENTBOUND_IDS.contains(&f.id), "only removal packets, got {:#x}", f.id);
    }
    assert!(frames.buffered().is_empty());
});
