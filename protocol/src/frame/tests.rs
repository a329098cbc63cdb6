//! Byte-exact vectors and properties of the frame codec ([`super`]).
use super::*;
use proptest::prelude::*;

#[test]
fn scan_ids_sees_every_first_body_byte_and_finish_frame_stops_at_the_boundary() {
    // Frames: [id 0x0d, 1 byte], [id 0x00 and 200 bytes: a two-byte prefix], [id 0x0d]; they end at 3, 206, 208.
    let mut stream = vec![0x02, 0x0d, 0x07, 0xc9, 0x01, 0x00];
    stream.extend_from_slice(&[0xaa; 200]);
    stream.extend_from_slice(&[0x01, 0x0d]);
    for split in 0..=stream.len() {
        let (a, b) = stream.split_at(split);
        let mut ids = Vec::new();
        let mut scanner = FrameScanner::new();
        let mut frames = scanner.scan_ids(a, |id| ids.push(id)).unwrap();
        frames += scanner.scan_ids(b, |id| ids.push(id)).unwrap();
        assert_eq!((frames, ids.as_slice()), (3, &[0x0d, 0x00, 0x0d][..]), "split at {split}");
        // Taking over after `a`: the rest of the frame under way, then whole frames.
        let mut scanner = FrameScanner::new();
        scanner.scan(a).unwrap();
        let rest = scanner.finish_frame(b).unwrap();
        let ends = [0, 3, 206, 208];
        let expected = ends.iter().find(|&&e| e >= split).unwrap() - split;
        assert_eq!(rest, expected, "split at {split}");
        assert!(scanner.at_boundary());
    }
}

#[test]
fn c2_lengths_up_to_21_bits_are_accepted() {
    // `FF FF 7F` = 2,097,151: accepted, the decoder waits for the body.
    let mut dec = FrameDecoder::new(MAX_FRAME_LEN);
    dec.queue_slice(&[0xff, 0xff, 0x7f, 0x00]);
    assert_eq!(dec.try_next_frame(), Ok(None));
    assert_eq!(dec.bytes_wanted(), Ok(2_097_151 - 1));
}

#[test]
fn c2_wider_lengths_are_refused_at_once() {
    for bad in [&[0x80, 0x80, 0x80, 0x01][..], &[0xff, 0xff, 0xff, 0xff, 0x0f], &[0xff; 64]] {
        let mut dec = FrameDecoder::new(MAX_FRAME_LEN);
        dec.queue_slice(bad);
        assert_eq!(dec.try_next_frame(), Err(FrameError::LengthPrefixTooLong), "{bad:02x?}");
        assert_eq!(dec.bytes_wanted(), Err(FrameError::LengthPrefixTooLong));
    }
    // Even the first three bytes alone are enough to refuse.
    let mut dec = FrameDecoder::new(MAX_FRAME_LEN);
    dec.queue_slice(&[0xff, 0xff, 0xff]);
    assert_eq!(dec.try_next_frame(), Err(FrameError::LengthPrefixTooLong));
    // Two continuation bytes are merely incomplete.
    let mut dec = FrameDecoder::new(MAX_FRAME_LEN);
    dec.queue_slice(&[0xff, 0xff]);
    assert_eq!(dec.try_next_frame(), Ok(None));
}

#[test]
fn wide_prefixes_under_a_wide_limit() {
    // Hodgepodge's 256 MiB: 4- and 5-byte prefixes are followed, a 6th byte is not, over the limit is refused.
    let limit = 256 << 20;
    let mut dec = FrameDecoder::new(limit);
    // 3 MiB (`80 80 C0 01`), waiting for the body.
    dec.queue_slice(&[0x80, 0x80, 0xc0, 0x01, 0x3f]);
    assert_eq!(dec.try_next_frame(), Ok(None));
    assert_eq!(dec.bytes_wanted(), Ok(3 * 1024 * 1024 - 1));
    let mut dec = FrameDecoder::new(limit);
    dec.queue_slice(&[0x80, 0x80, 0x80, 0x80, 0x01]);
    assert_eq!(dec.try_next_frame(), Ok(None), "exactly 256 MiB");
    let mut dec = FrameDecoder::new(limit);
    dec.queue_slice(&[0x81, 0x80, 0x80, 0x80, 0x01]);
    assert_eq!(dec.try_next_frame(), Err(FrameError::TooLarge { len: (256 << 20) + 1, max: limit }));
    let mut dec = FrameDecoder::new(limit);
    dec.queue_slice(&[0x80, 0x80, 0x80, 0x80, 0x80]);
    assert_eq!(dec.try_next_frame(), Err(FrameError::LengthPrefixTooLong));
    // The scanner follows a 20 MiB frame in pieces, holding nothing.
    let mut frame = Vec::new();
    encode_wide_frame(&mut frame, 0x26, &vec![7; 20 << 20], limit).unwrap();
    assert_eq!(&frame[..5], &[0x81, 0x80, 0x80, 0x0a, 0x26]);
    let mut s = FrameScanner::with_limit(limit);
    let mut frames = 0;
    for piece in frame.chunks(65_536) {
        frames += s.scan(piece).unwrap();
    }
    assert_eq!((frames, s.at_boundary()), (1, true));
    // Under the vanilla limit the same frame is a bad prefix, as before.
    assert_eq!(FrameScanner::new().scan(&frame[..8]), Err(FrameError::LengthPrefixTooLong));
    assert_eq!(encode_frame(&mut Vec::new(), 0x26, &vec![0; 3 << 20]), Err(EncodeError::FrameTooLarge((3 << 20) + 1)));
    // A limit between: 4 bytes at most.
    let mut s = FrameScanner::with_limit(4 << 20);
    assert_eq!(s.scan(&[0x80, 0x80, 0xc0, 0x01]), Ok(0));
    assert_eq!(FrameScanner::with_limit(4 << 20).scan(&[0x80, 0x80, 0x80, 0x80]), Err(FrameError::LengthPrefixTooLong));
    assert_eq!(
        FrameScanner::with_limit(4 << 20).scan(&[0x80, 0x80, 0x80, 0x03]),
        Err(FrameError::TooLarge { len: 6 << 20, max: 4 << 20 })
    );
}

#[test]
fn zero_length_and_limit() {
    let mut dec = FrameDecoder::new(16);
    dec.queue_slice(&[0x00]);
    assert_eq!(dec.try_next_frame(), Err(FrameError::Empty));

    let mut dec = FrameDecoder::new(16);
    dec.queue_slice(&[0x11]); // 17 > 16, refused before any body byte arrives
    assert_eq!(dec.try_next_frame(), Err(FrameError::TooLarge { len: 17, max: 16 }));
    dec.set_max_frame_len(17);
    assert_eq!(dec.try_next_frame(), Ok(None));
    // The limit never exceeds what a Java int declares.
    assert_eq!(FrameDecoder::new(usize::MAX).max_frame_len(), MAX_WIDE_FRAME_LEN);
}

#[test]
fn bad_packet_id() {
    let mut dec = FrameDecoder::new(16);
    dec.queue_slice(&[0x01, 0x80]);
    assert_eq!(dec.try_next_frame(), Err(FrameError::BadPacketId));
}

#[test]
fn merged_frames_and_leftover() {
    // HS + LS + the first 3 bytes of the next frame (case C9c).
    let hs = crate::tests::HS;
    let ls = crate::tests::LS;
    let mut dec = FrameDecoder::new(1024);
    let mut all = hs.to_vec();
    all.extend_from_slice(ls);
    all.extend_from_slice(&[0x05, 0x00, 0x01]);
    dec.queue_slice(&all);
    let f1 = dec.try_next_frame().unwrap().unwrap();
    assert_eq!(f1.id, 0);
    assert_eq!(f1.body.len(), hs.len() - 2);
    let f2 = dec.try_next_frame().unwrap().unwrap();
    assert_eq!(&f2.body[..], &ls[2..]);
    assert_eq!(dec.try_next_frame(), Ok(None));
    assert_eq!(dec.bytes_wanted(), Ok(3));
    assert_eq!(&dec.take_buffered()[..], &[0x05, 0x00, 0x01]);
    assert!(dec.buffered().is_empty());
}

#[test]
fn encode_vectors() {
    let mut out = Vec::new();
    encode_frame(&mut out, 0x00, &[0x05, b'S', b't', b'e', b'v', b'e']).unwrap();
    assert_eq!(out, crate::tests::LS);
    assert_eq!(
        encode_frame(&mut Vec::new(), 0, &vec![0; MAX_FRAME_LEN]),
        Err(EncodeError::FrameTooLarge(MAX_FRAME_LEN + 1))
    );
    let mut out = Vec::new();
    encode_frame(&mut out, 0x3f, &vec![7; MAX_FRAME_LEN - 1]).unwrap();
    assert_eq!(&out[..4], &[0xff, 0xff, 0x7f, 0x3f]);
}

#[test]
fn peek_id() {
    assert_eq!(peek_packet_id(&[]), Ok(None));
    assert_eq!(peek_packet_id(&[0x2c]), Ok(None));
    assert_eq!(peek_packet_id(&[0x2c, 0x02, 0x24]), Ok(Some(2)));
    assert_eq!(peek_packet_id(&[0x03, 0x80]), Ok(None));
    assert_eq!(peek_packet_id(&[0x01, 0x80]), Err(FrameError::BadPacketId));
    assert_eq!(peek_packet_id(&[0x00]), Err(FrameError::Empty));
    assert_eq!(peek_packet_id(&[0xff, 0xff, 0xff]), Err(FrameError::LengthPrefixTooLong));
}

#[test]
fn scanner_counts_and_tracks_boundaries() {
    let mut s = FrameScanner::new();
    let mut stream = Vec::new();
    stream.extend_from_slice(crate::tests::HS);
    stream.extend_from_slice(crate::tests::LS);
    assert_eq!(s.scan(&stream[..1]).unwrap(), 0);
    assert!(!s.at_boundary());
    assert_eq!(s.scan(&stream[1..]).unwrap(), 2);
    assert!(s.at_boundary());
    assert_eq!(s.frames(), 2);
    assert_eq!(FrameScanner::new().scan(&[0x80, 0x80, 0x80]), Err(FrameError::LengthPrefixTooLong));
    assert_eq!(FrameScanner::new().scan(&[0x00]), Err(FrameError::Empty));
}

proptest! {
    #[test]
    fn frames_round_trip_under_any_split(
        packets in proptest::collection::vec((0i32..0x80, proptest::collection::vec(any::<u8>(), 0..300)), 1..8),
        cuts in proptest::collection::vec(any::<usize>(), 0..8),
    ) {
        let mut stream = Vec::new();
        for (id, body) in &packets {
            encode_frame(&mut stream, *id, body).unwrap();
        }
        let mut points: Vec<usize> = cuts.iter().map(|c| c % (stream.len() + 1)).collect();
        points.push(0);
        points.push(stream.len());
        points.sort_unstable();
        let mut dec = FrameDecoder::new(MAX_FRAME_LEN);
        let mut scanner = FrameScanner::new();
        let mut got = Vec::new();
        for w in points.windows(2) {
            dec.queue_slice(&stream[w[0]..w[1]]);
            scanner.scan(&stream[w[0]..w[1]]).unwrap();
            while let Some(f) = dec.try_next_frame().unwrap() {
                got.push((f.id, f.body.to_vec()));
            }
        }
        prop_assert_eq!(got, packets.clone());
        prop_assert_eq!(scanner.frames(), packets.len() as u64);
        prop_assert!(scanner.at_boundary());
        prop_assert!(dec.buffered().is_empty());
    }

    #[test]
    fn decoder_never_panics(bytes in proptest::collection::vec(any::<u8>(), 0..64), max in 0usize..64) {
        let mut dec = FrameDecoder::new(max);
        dec.queue_slice(&bytes);
        while let Ok(Some(_)) = dec.try_next_frame() {}
        let _ = FrameScanner::new().scan(&bytes);
    }
}
