//! Unit tests of `compress.rs`: byte-exact vectors and round trips.

use super::*;

fn inflate_all(d: &mut Decompressor, payload: &[u8], max: usize) -> Result<Vec<u8>, CompressError> {
    let mut out = Vec::new();
    d.queue(payload);
    while d.has_output() {
        d.inflate(&mut out, 1000, max)?;
    }
    d.end_message();
    Ok(out.to_vec())
}

/// Messages decode one by one from the stream, byte for byte, and a repeated tick shrinks against the
/// earlier one (the context is kept).
#[test]
fn messages_round_trip_and_later_ticks_compress_against_earlier_ones() {
    let mut c = Compressor::new(DEFAULT_LEVEL).unwrap();
    let mut d = Decompressor::new().unwrap();
    let tick: Vec<u8> = (0..400u32).flat_map(|i| (i * 7919 % 251).to_be_bytes()).collect();
    let mut sizes = Vec::new();
    for _ in 0..3 {
        let mut wire = Vec::new();
        c.compress(&tick, &mut wire).unwrap();
        sizes.push(wire.len());
        assert_eq!(inflate_all(&mut d, &wire, 1 << 20).unwrap(), tick);
    }
    assert!(sizes[1] * 10 < sizes[0], "the second identical tick is a back-reference: {sizes:?}");
    let mut empty = Vec::new();
    c.compress(&[], &mut empty).unwrap();
    assert!(empty.is_empty());
}

/// Random (incompressible) bytes grow by at most a few header bytes: zstd stores them as Raw blocks.
#[test]
fn incompressible_data_costs_only_block_headers() {
    let mut c = Compressor::new(DEFAULT_LEVEL).unwrap();
    let mut d = Decompressor::new().unwrap();
    let mut x = 0x9E37_79B9_7F4A_7C15u64;
    let noise: Vec<u8> = (0..200_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect();
    let mut wire = Vec::new();
    c.compress(&noise, &mut wire).unwrap();
    // Frame header (up to 6 bytes here) and 3 bytes per block of up to BLOCK_MAX bytes.
    let blocks = noise.len().div_ceil(BLOCK_MAX);
    assert!(wire.len() <= noise.len() + 6 + 3 * blocks, "{} for {}", wire.len(), noise.len());
    assert_eq!(inflate_all(&mut d, &wire, 1 << 20).unwrap(), noise);
}

/// The sender's context stays small after real use: zstd sized its buffers by [`BLOCK_MAX`] and its hash
/// table by [`HASH_LOG`], not by the window (about 305 KiB with level 1's own parameters).
#[test]
fn a_compressor_in_use_holds_about_119_kib() {
    let mut c = Compressor::new(DEFAULT_LEVEL).unwrap();
    let text: Vec<u8> = (0..300_000u32).flat_map(|i| format!("IC2:machine{} ", i % 977).into_bytes()).collect();
    let mut wire = Vec::new();
    for tick in text.chunks(4_700) {
        c.compress(tick, &mut wire).unwrap();
    }
    let kib = c.memory() / 1024;
    assert!((100..=128).contains(&kib), "compressor: {kib} KiB");
}

/// A message of about 32 kB (4 bytes per 8 KiB block of zeros) that inflates to 64 MiB stops at the limit with
/// little output made.
#[test]
fn a_decompression_bomb_stops_at_the_limit() {
    let mut c = Compressor::new(3).unwrap();
    let mut wire = Vec::new();
    c.compress(&vec![0u8; 64 << 20], &mut wire).unwrap();
    assert!(wire.len() < 40_000, "a ratio over 1,600: {}", wire.len());
    let mut d = Decompressor::new().unwrap();
    d.queue(&wire);
    let mut out = Vec::new();
    let max = 4 << 20;
    let mut made = 0;
    let err = loop {
        match d.inflate(&mut out, 256 * 1024, max) {
            Ok(n) => {
                made += n;
                out.clear(); // the relay passes each piece on
            }
            Err(e) => break e,
        }
    };
    assert_eq!(err, CompressError::TooLarge { max });
    assert_eq!(made + out.len(), max, "exactly the limit was handed on");
    assert!(out.len() <= 2 * PIECE, "at most about one piece held: {}", out.len());
}

/// A stream that asks for a window over 32 KiB is refused (the receiver never allocates it).
#[test]
fn a_larger_window_is_refused() {
    let mut big = CCtx::create();
    big.set_parameter(CParameter::WindowLog(24)).unwrap();
    big.set_parameter(CParameter::CompressionLevel(1)).unwrap();
    let data: Vec<u8> = (0..(1u32 << 21)).map(|i| (i % 253) as u8).collect();
    let mut wire = Vec::with_capacity(zstd_safe::compress_bound(data.len()));
    big.compress2(&mut wire, &data).unwrap();
    let mut d = Decompressor::new().unwrap();
    let e = inflate_all(&mut d, &wire, usize::MAX).unwrap_err();
    assert!(matches!(e, CompressError::Zstd(_)), "{e:?}");
}

/// A message split anywhere (as WebSocket frames and reads split it) decodes the same; a piece that ends
/// inside a block gives no output until the rest is queued, and the caller is not asked to call again.
#[test]
fn a_message_fed_in_pieces_decodes_the_same() {
    let mut c = Compressor::new(DEFAULT_LEVEL).unwrap();
    let data: Vec<u8> = (0..50_000u32).flat_map(|i| (i / 3).to_le_bytes()).collect();
    let mut wire = Vec::new();
    c.compress(&data, &mut wire).unwrap();
    let mut d = Decompressor::new().unwrap();
    let mut out = Vec::new();
    for piece in wire.chunks(7) {
        d.queue(piece);
        let mut calls = 0;
        while d.has_output() {
            d.inflate(&mut out, 4096, 1 << 20).unwrap();
            calls += 1;
            assert!(calls < 1000, "no progress");
        }
    }
    d.end_message();
    assert_eq!(&out[..], &data[..]);
}

/// Delivers one message to `rx` and returns its stream bytes; checks that `plain` (one context kept for
/// the whole stream, as a peer without the quiet-spell rules keeps it) reads the same.
fn deliver(rx: &mut Contexts, plain: &mut Decompressor, wire: &[u8]) -> Vec<u8> {
    rx.queue(wire).unwrap();
    let mut out = Vec::new();
    while rx.has_output() {
        rx.inflate(&mut out, 1 << 20, 1 << 20).unwrap();
    }
    rx.end_message();
    assert_eq!(inflate_all(plain, wire, 1 << 20).unwrap(), out, "a peer without the rule reads the same");
    out
}

/// The quiet-spell rule: a tick after a compressed message keeps the context; the next quiet tick ends the
/// frame (3 bytes, no stream bytes) and frees it; the receiver frees its own at that frame end, and the next
/// message is a new frame both ends decode from nothing. A receiver that keeps its context (a peer without
/// the rule) decodes the same bytes.
#[test]
fn a_quiet_direction_ends_its_frame_and_both_ends_free_their_contexts() {
    let mut tx = Contexts::new(DEFAULT_LEVEL);
    let mut rx = Contexts::new(DEFAULT_LEVEL);
    let mut plain = Decompressor::new().unwrap();
    let tick: Vec<u8> = (0..600u32).flat_map(|i| (i % 97).to_le_bytes()).collect();
    assert_eq!((tx.held(), tx.memory()), ((false, false), 0), "nothing before the first message");
    let mut wire = Vec::new();
    tx.compress(&tick, &mut wire).unwrap();
    assert_eq!(deliver(&mut rx, &mut plain, &wire), tick);
    assert_eq!(rx.held(), (false, true), "mid-frame: the receiver keeps its context");
    assert_eq!(tx.on_tick().unwrap(), None, "a message since the last tick");
    let end = tx.on_tick().unwrap().expect("a quiet tick ends the frame");
    assert_eq!(end.len(), 3, "an empty last block");
    assert_eq!(tx.held(), (false, false));
    assert_eq!(tx.on_tick().unwrap(), None, "nothing more to end");
    assert!(deliver(&mut rx, &mut plain, &end).is_empty(), "no stream bytes");
    assert_eq!((rx.held(), rx.memory()), ((false, false), 0), "the receiver freed its context");
    // The next message is a new frame: as large as the first (no back-reference), and decoded from nothing.
    let mut again = Vec::new();
    tx.compress(&tick, &mut again).unwrap();
    assert_eq!(again.len(), wire.len());
    assert_eq!(deliver(&mut rx, &mut plain, &again), tick);
}

/// A peer that ends a zstd frame with every message that carries bytes (allowed: a stream may hold many
/// frames) is decoded without the receiver freeing and rebuilding its context each time.
#[test]
fn frames_that_end_with_stream_bytes_keep_the_receivers_context() {
    let mut rx = Contexts::new(DEFAULT_LEVEL);
    let tick: Vec<u8> = (0..600u32).flat_map(|i| (i % 97).to_le_bytes()).collect();
    for _ in 0..3 {
        // One whole frame per message, as `ZSTD_compress` makes it.
        let mut buf = vec![0u8; 4096];
        let n = zstd_safe::compress(&mut buf[..], &tick, 1).unwrap();
        rx.queue(&buf[..n]).unwrap();
        let mut out = Vec::new();
        while rx.has_output() {
            rx.inflate(&mut out, 1 << 20, 1 << 20).unwrap();
        }
        assert!(!rx.end_message(), "a frame that ended with stream bytes is not a quiet spell");
        assert_eq!((out, rx.held()), (tick.clone(), (false, true)));
    }
    // The quiet-spell end (an empty frame's worth of nothing) after them frees it.
    let mut tx = Contexts::new(DEFAULT_LEVEL);
    let mut wire = Vec::new();
    tx.compress(&tick, &mut wire).unwrap();
    let end = tx.on_tick().and_then(|_| tx.on_tick()).unwrap().expect("the frame's end");
    let mut rx = Contexts::new(DEFAULT_LEVEL);
    for (message, freed) in [(wire, false), (end, true)] {
        rx.queue(&message).unwrap();
        let mut out = Vec::new();
        while rx.has_output() {
            rx.inflate(&mut out, 1 << 20, 1 << 20).unwrap();
        }
        assert_eq!(rx.end_message(), freed);
    }
    assert_eq!(rx.held(), (false, false));
}

/// A direction without a context sends a small message as a stored frame, which any zstd decoder reads
/// and a receiver without a context reads without making one; a larger message makes the contexts, and a
/// tick with only small messages since the last ends the frame and frees them again.
#[test]
fn small_messages_while_quiet_go_as_stored_frames_without_contexts() {
    let mut tx = Contexts::new(DEFAULT_LEVEL);
    let mut rx = Contexts::new(DEFAULT_LEVEL);
    let mut plain = Decompressor::new().unwrap();
    // A Keep Alive frame (length 5, id 0, an int).
    let keep_alive = [5u8, 0, 0, 0, 0x12, 0x34];
    let mut wire = Vec::new();
    tx.compress(&keep_alive, &mut wire).unwrap();
    assert_eq!(wire.len(), keep_alive.len() + STORED_OVERHEAD);
    assert_eq!(wire[..6], [0x28, 0xb5, 0x2f, 0xfd, 0x20, 6], "magic, descriptor, content size");
    assert_eq!(deliver(&mut rx, &mut plain, &wire), keep_alive);
    let biggest = vec![7u8; STORED_MAX];
    let mut wire = Vec::new();
    tx.compress(&biggest, &mut wire).unwrap();
    assert_eq!(wire.len(), STORED_MAX + STORED_OVERHEAD);
    assert_eq!(deliver(&mut rx, &mut plain, &wire), biggest);
    assert_eq!((tx.held(), rx.held(), tx.on_tick().unwrap()), ((false, false), (false, false), None));
    // One byte more makes both contexts.
    let tick: Vec<u8> = (0..600u32).flat_map(|i| (i % 97).to_le_bytes()).collect();
    let mut wire = Vec::new();
    tx.compress(&tick, &mut wire).unwrap();
    assert_eq!(deliver(&mut rx, &mut plain, &wire), tick);
    assert_eq!((tx.held(), rx.held()), ((true, false), (false, true)));
    assert_eq!(tx.on_tick().unwrap(), None, "a large message since the last tick");
    // Small messages while the context is held go through it, and do not keep it.
    let mut wire = Vec::new();
    tx.compress(&keep_alive, &mut wire).unwrap();
    assert_eq!(deliver(&mut rx, &mut plain, &wire), keep_alive);
    let end = tx.on_tick().unwrap().expect("only small messages since the last tick: the frame ends");
    assert!(deliver(&mut rx, &mut plain, &end).is_empty());
    assert_eq!((tx.held(), rx.held()), ((false, false), (false, false)));
    let mut wire = Vec::new();
    tx.compress(&keep_alive, &mut wire).unwrap();
    assert_eq!(wire.len(), keep_alive.len() + STORED_OVERHEAD, "stored again");
    assert_eq!(deliver(&mut rx, &mut plain, &wire), keep_alive);
    assert_eq!((tx.held(), rx.held()), ((false, false), (false, false)));
}

/// A stored frame split across pieces, and across messages, is read whole; two frames in one message, or
/// bytes that only begin like a stored frame, go to a context (which refuses garbage); a stored frame over
/// the message limit is refused.
#[test]
fn stored_frames_split_anywhere_and_look_alikes() {
    let mut frame = Vec::new();
    stored_frame(b"hello", &mut frame);
    let mut rx = Contexts::new(DEFAULT_LEVEL);
    let (last, head) = frame.split_last().unwrap();
    for b in head {
        rx.queue(&[*b]).unwrap();
        assert!(!rx.has_output());
    }
    assert!(!rx.end_message(), "a message that ended inside the frame");
    rx.queue(&[*last]).unwrap();
    let mut out = Vec::new();
    assert!(rx.has_output());
    assert_eq!(rx.inflate(&mut out, 1, 1 << 20), Ok(5));
    assert_eq!((out.as_slice(), rx.has_output(), rx.held()), (&b"hello"[..], false, (false, false)));

    let mut rx = Contexts::new(DEFAULT_LEVEL);
    rx.queue(&[frame.clone(), frame.clone()].concat()).unwrap();
    assert_eq!(rx.held(), (false, true), "two frames: a context reads them");
    let mut out = Vec::new();
    while rx.has_output() {
        rx.inflate(&mut out, 1 << 20, 1 << 20).unwrap();
    }
    assert_eq!(out, b"hellohello");

    let mut rx = Contexts::new(DEFAULT_LEVEL);
    rx.queue(&frame).unwrap();
    assert_eq!(rx.inflate(&mut Vec::new(), 1 << 20, 4), Err(CompressError::TooLarge { max: 4 }));

    // One message: a stored frame (5 bytes), then a compressed frame of 5 more: the limit counts all 10.
    let mut compressed = Vec::new();
    Compressor::new(DEFAULT_LEVEL).unwrap().compress(b"world", &mut compressed).unwrap();
    for (max, ok) in [(10, true), (9, false)] {
        let mut rx = Contexts::new(DEFAULT_LEVEL);
        rx.queue(&frame).unwrap();
        let mut out = Vec::new();
        assert_eq!(rx.inflate(&mut out, 1 << 20, max), Ok(5));
        rx.queue(&compressed).unwrap();
        let mut result = Ok(0);
        while rx.has_output() && result.is_ok() {
            result = rx.inflate(&mut out, 1 << 20, max);
        }
        assert_eq!(result.is_ok(), ok, "max {max}: {result:?}");
        rx.end_message();
    }

    // The magic and descriptor, then a block header of the reserved type.
    let bad = [&FRAME_MAGIC[..], &[STORED_DESCRIPTOR, 5, 0xff, 0xff, 0xff, 1, 2, 3, 4, 5]].concat();
    let mut rx = Contexts::new(DEFAULT_LEVEL);
    rx.queue(&bad).unwrap();
    assert_eq!(rx.held(), (false, true));
    let mut out = Vec::new();
    let mut refused = false;
    while rx.has_output() && !refused {
        refused = rx.inflate(&mut out, 1 << 20, 1 << 20).is_err();
    }
    assert!(refused && out.is_empty());
    assert_eq!(stored(&[0x28, 0xb5]), Stored::Partial);
    assert_eq!(stored(b"not zstd"), Stored::Other);
}

/// Garbage is an error, not a panic.
#[test]
fn garbage_is_an_error() {
    let mut d = Decompressor::new().unwrap();
    assert!(inflate_all(&mut d, b"definitely not zstd data", 1 << 20).is_err());
}
