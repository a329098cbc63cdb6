//! What a backend sends that the server-transfer layer reads (`moonbridge_protocol::transfer`): BungeeCord
//! plugin payloads (`BungeeRequest::parse`: no panic, and a `Connect` re-encoded parses to the same request)
//! and a stream of Play packets through `Leftovers` (no panic; what `clear` writes is whole frames of the
//! removal packets only, once); the same bytes as a clientbound stream through the relay's `ClientboundWatch`
//! in batches cut where the input says (no panic; what passes plus what is held or handed over is the stream,
//! in order; a hold is under `MAX_HELD` bytes and never of a whole frame head); and as a serverbound stream
//! through the relay's `ServerboundFilter` in the same batches (no panic; a hold is under
//! `MAX_HELD_SERVERBOUND` bytes; what passes is the stream's frames with the `BungeeCord` Plugin Messages left
//! out, in order, as a frame decoder reads them).
#![no_main]

use libfuzzer_sys::fuzz_target;
use moonbridge_protocol::frame::{FrameDecoder, MAX_FRAME_LEN};
use moonbridge_protocol::transfer::watch::{ClientboundWatch, ServerboundFilter, Verdict, MAX_HELD, MAX_HELD_SERVERBOUND};
use moonbridge_protocol::transfer::{is_channel, BungeeRequest, Direction, Leftovers, BUNGEE_CHANNEL};

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
    filter(data);
});

/// The frame limit a run uses: vanilla's 2 MiB, or GT New Horizons' 256 MiB when bit 6 of the first byte is set.
fn limit_of(cut: u8) -> usize {
    if cut & 0x40 != 0 {
        256 << 20
    } else {
        MAX_FRAME_LEN
    }
}

/// Filters `data` as the relay filters a player's stream, in batches cut as [`watch`] cuts them, and checks it
/// against a frame decoder's reading of the same stream.
fn filter(data: &[u8]) {
    let Some((&cut, stream)) = data.split_first() else { return };
    let size = usize::from(cut % 64) + 1;
    // Vanilla's limit, or GT New Horizons' (5-byte prefixes): the reference decoder uses the same.
    let limit = limit_of(cut);
    let mut filter = ServerboundFilter::with_limit(limit);
    let mut passed = Vec::new();
    let mut held = Vec::new();
    for piece in stream.chunks(size) {
        let mut batch = std::mem::take(&mut held);
        batch.extend_from_slice(piece);
        let Ok(f) = filter.filter(&mut batch) else { return };
        assert!(f.held < MAX_HELD_SERVERBOUND + 1, "held {} bytes", f.held);
        passed.extend_from_slice(&batch[..f.pass]);
        held = batch[f.pass..f.pass + f.held].to_vec();
    }
    // The reference: whole frames, the `BungeeCord` Plugin Messages (C17) left out.
    let mut frames = FrameDecoder::new(limit);
    frames.queue_slice(stream);
    let mut expected = Vec::new();
    let mut taken = 0;
    // A bad packet id is the decoder's error, not the filter's (it reads only lengths and heads).
    let mut clean = true;
    loop {
        let f = match frames.try_next_frame() {
            Ok(Some(f)) => f,
            Ok(None) => break,
            Err(_) => {
                clean = false;
                break;
            }
        };
        let whole = stream.len() - taken - frames.buffered().len();
        let raw = &stream[taken..taken + whole];
        taken += whole;
        if !(f.id == 0x17 && is_channel(&f.body, BUNGEE_CHANNEL)) {
            expected.extend_from_slice(raw);
        }
    }
    if clean && frames.buffered().is_empty() && held.is_empty() && filter.under_way() == (0, false) {
        assert_eq!(passed, expected);
    } else {
        assert!(!clean || passed.starts_with(&expected) || expected.starts_with(&passed));
    }
}

/// Relays `data` through a watch as a relay does: batch sizes from the first byte, held bytes first in the next
/// batch, until the end or a handover.
fn watch(data: &[u8]) {
    let Some((&cut, stream)) = data.split_first() else { return };
    let size = usize::from(cut % 64) + 1;
    let mut watch = ClientboundWatch::new(cut & 0x80 != 0, limit_of(cut));
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
