//! What a backend sends that the server-transfer layer reads (`moonbridge_protocol::transfer`): BungeeCord
//! plugin payloads (`BungeeRequest::parse`: no panic, and a `Connect` re-encoded parses to the same request)
//! and a stream of Play packets through `Leftovers` (no panic; what `clear` writes is whole frames of the
//! removal packets only, once); the same bytes as a clientbound stream through the relay's `ClientboundWatch`
//! in batches cut where the input says (no panic; what passes plus what is held or handed over is the stream,
//! in order; a hold is under `MAX_HELD` bytes and never of a whole frame head).
#![no_main]

use libfuzzer_sys::fuzz_target;
use moonbridge_protocol::frame::{FrameDecoder, MAX_FRAME_LEN};
use moonbridge_protocol::transfer::watch::{ClientboundWatch, Verdict, MAX_HELD};
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
    watch(data);
});

/// Relays `data` through a watch as a relay does: batch sizes from the first byte, held bytes first in the next
/// batch, until the end or a handover.
fn watch(data: &[u8]) {
    let Some((&cut, stream)) = data.split_first() else { return };
    let size = usize::from(cut % 64) + 1;
    let mut watch = ClientboundWatch::new(cut & 0x80 != 0);
    let mut passed = Vec::new();
    let mut held = Vec::new();
    for piece in stream.chunks(size) {
        let mut batch = std::mem::take(&mut held);
        batch.extend_from_slice(piece);
        match watch.scan(&batch, 0) {
            Ok(Verdict::Pass) => passed.extend_from_slice(&batch),
            Ok(Verdict::Hold(k)) => {
                assert!(batch.len() - k < MAX_HELD);
                passed.extend_from_slice(&batch[..k]);
                held = batch[k..].to_vec();
            }
            Ok(Verdict::Handover(k)) => {
                passed.extend_from_slice(&batch[..k]);
                break;
            }
            Err(_) => return,
        }
    }
    assert!(stream.starts_with(&passed));
    let _ = watch.finish(1);
}
