//! The watch and the serverbound filter ([`super`]) over real streams cut every way.
#![allow(clippy::unwrap_used, clippy::indexing_slicing)]
use super::*;
use crate::frame::encode_frame;
use crate::packets::ChatMessage;

fn frame(id: i32, fields: &[u8]) -> Vec<u8> {
    let mut out = BytesMut::new();
    encode_frame(&mut out, id, fields).unwrap();
    out.to_vec()
}

fn plugin(channel: &str, data: &[u8]) -> Vec<u8> {
    let mut fields = Vec::new();
    PluginMessage { channel: channel.into(), data: data.to_vec() }.encode_fields(&mut fields).unwrap();
    frame(PluginMessage::CLIENTBOUND_ID, &fields)
}

fn join_game(entity: i32) -> Vec<u8> {
    // S01: i32 entity id, u8 game mode, i8 dimension, u8 difficulty, u8 max players, String level type.
    let mut fields = entity.to_be_bytes().to_vec();
    fields.extend_from_slice(&[0, 0, 1, 20, 7]);
    fields.extend_from_slice(b"default");
    frame(0x01, &fields)
}

/// Feeds `stream` in pieces of `size` bytes as a relay would (held bytes start the next piece) and returns
/// the bytes passed and the handover offset in the stream, if any.
fn relay(watch: &mut ClientboundWatch, stream: &[u8], size: usize) -> (Vec<u8>, Option<usize>) {
    let mut passed = Vec::new();
    let mut held = Vec::new();
    for piece in stream.chunks(size) {
        let mut batch = std::mem::take(&mut held);
        batch.extend_from_slice(piece);
        match watch.scan(&batch, 0).unwrap() {
            Verdict::Pass => passed.extend_from_slice(&batch),
            Verdict::Hold(k) => {
                assert!(batch.len() - k < MAX_HELD, "held {} bytes", batch.len() - k);
                passed.extend_from_slice(&batch[..k]);
                held = batch[k..].to_vec();
            }
            Verdict::Handover(k) => {
                passed.extend_from_slice(&batch[..k]);
                return (passed.clone(), Some(passed.len()));
            }
        }
    }
    assert!(held.is_empty() || stream.is_empty());
    (passed, None)
}

#[test]
fn a_connect_hands_over_at_its_first_byte_whatever_the_batch_sizes() {
    let hello = plugin(fml::CHANNEL, &[fml::SERVER_HELLO, 2]);
    let before =
        [hello.clone(), join_game(42), ChatMessage { json: "\"hi\"".into() }.to_frame_bytes().unwrap().to_vec()]
            .concat();
    let connect = plugin(BUNGEE_CHANNEL, &super::super::BungeeRequest::connect_payload("b").unwrap());
    let stream = [before.clone(), connect, frame(0x00, &[0, 0, 0, 1])].concat();
    for size in 1..=stream.len() {
        let mut watch = ClientboundWatch::new(false, MAX_FRAME_LEN);
        let (passed, handover) = relay(&mut watch, &stream, size);
        assert_eq!(handover, Some(before.len()), "batch size {size}");
        assert_eq!(passed, before, "batch size {size}");
        let watched = watch.finish(0);
        assert_eq!(watched.client_entity, Some(42));
        assert_eq!(watched.fml_record.as_deref(), Some(&hello[..]), "the handshake before Join Game is recorded");
    }
}

#[test]
fn every_bungeecord_message_hands_over() {
    for data in [&b"\x00\x0aGetServers"[..], b"\x00\x0cConnectOther\x00\x01a\x00\x01b", b"", b"\x00\x07Conn"] {
        let stream = [join_game(7), plugin(BUNGEE_CHANNEL, data)].concat();
        for size in 1..=stream.len() {
            let mut watch = ClientboundWatch::new(false, MAX_FRAME_LEN);
            assert_eq!(relay(&mut watch, &stream, size).1, Some(join_game(7).len()), "batch size {size}");
        }
    }
}

/// Feeds `stream` through a filter in pieces of `size` bytes (held bytes start the next piece).
fn filtered(filter: &mut ServerboundFilter, stream: &[u8], size: usize) -> Vec<u8> {
    let mut passed = Vec::new();
    let mut held = Vec::new();
    for piece in stream.chunks(size) {
        let mut batch = std::mem::take(&mut held);
        batch.extend_from_slice(piece);
        let f = filter.filter(&mut batch).unwrap();
        assert!(f.held < MAX_HELD_SERVERBOUND + 1, "held {} bytes", f.held);
        passed.extend_from_slice(&batch[..f.pass]);
        held = batch[f.pass..f.pass + f.held].to_vec();
    }
    assert!(held.is_empty());
    passed
}

#[test]
fn serverbound_bungeecord_messages_are_dropped_whatever_the_batch_sizes() {
    let c17 = |channel: &str, data: &[u8]| {
        let mut fields = Vec::new();
        PluginMessage { channel: channel.into(), data: data.to_vec() }.encode_fields(&mut fields).unwrap();
        frame(PluginMessage::SERVERBOUND_ID, &fields)
    };
    let chat = frame(0x01, b"\x02hi");
    let close = frame(0x0d, &[3]);
    let keep = [chat.clone(), c17("BungeeCore", b"x"), close.clone(), c17("MC|Brand", b"fml")].concat();
    let stream = [
        chat.clone(),
        c17(BUNGEE_CHANNEL, b"\x00\x07Connect\x00\x01a"),
        c17("BungeeCore", b"x"),
        close.clone(),
        c17(BUNGEE_CHANNEL, &[7; 300]),
        c17("MC|Brand", b"fml"),
    ]
    .concat();
    for size in 1..=stream.len() {
        let mut filter = ServerboundFilter::new();
        assert_eq!(filtered(&mut filter, &stream, size), keep, "batch size {size}");
        assert_eq!((filter.closes(), filter.dropped()), (1, 2));
        assert_eq!(filter.under_way(), (0, false));
    }
    // A frame under way: 18 body bytes of the 300-byte one were seen (its head needs 16: a channel length may
    // take 5 bytes).
    let mut filter = ServerboundFilter::new();
    let big = c17(BUNGEE_CHANNEL, &[7; 300]);
    let mut part = big[..20].to_vec();
    assert_eq!(filter.filter(&mut part).unwrap(), Filtered { pass: 0, held: 0 });
    assert_eq!(filter.under_way(), (big.len() - 20, true));
    // The channel's length padded to 3 bytes (`8A 80 00`, which a 1.7.10 server reads as 10): dropped too, in
    // any batch sizes.
    let mut padded = vec![0x8a, 0x80, 0x00];
    padded.extend_from_slice(b"BungeeCord\x00\x05\x00\x07Connect");
    let sneaky = [chat.clone(), frame(PluginMessage::SERVERBOUND_ID, &padded), close.clone()].concat();
    for size in 1..=sneaky.len() {
        let mut filter = ServerboundFilter::new();
        assert_eq!(filtered(&mut filter, &sneaky, size), [chat.clone(), close.clone()].concat(), "batch size {size}");
        assert_eq!(filter.dropped(), 1);
    }
    let mut bad = [0x80, 0x80, 0x80, 0x01];
    assert_eq!(ServerboundFilter::new().filter(&mut bad), Err(FrameError::LengthPrefixTooLong));
}

#[test]
fn other_channels_and_a_disconnect_without_fallback_pass() {
    let stream = [
        join_game(7),
        plugin("BungeeCore", b"x"),
        plugin("FML|HS", &[fml::SERVER_HELLO]),
        plugin("B", b""),
        PlayDisconnect { reason_json: "\"bye\"".into() }.to_frame_bytes().unwrap().to_vec(),
    ]
    .concat();
    for size in 1..=stream.len() {
        let mut watch = ClientboundWatch::new(false, MAX_FRAME_LEN);
        assert_eq!(relay(&mut watch, &stream, size), (stream.clone(), None), "batch size {size}");
        // After Join Game nothing more is recorded.
        assert_eq!(watch.finish(0).fml_record.as_deref(), Some(&[][..]));
    }
    let disconnect = PlayDisconnect { reason_json: "\"bye\"".into() }.to_frame_bytes().unwrap().len();
    let mut watch = ClientboundWatch::new(true, MAX_FRAME_LEN);
    assert_eq!(relay(&mut watch, &stream, 64).1, Some(stream.len() - disconnect), "with a fallback, S40 hands over");
}

#[test]
fn leftovers_follow_the_stream_and_a_closed_window_is_not_left() {
    let open = frame(0x2d, &[3, 0, 1, b'c', 27, 1]);
    let objective = frame(0x3b, &[1, b'o', 1, b'O', 0]);
    let stream = [join_game(1), open, objective].concat();
    let mut watch = ClientboundWatch::new(false, MAX_FRAME_LEN);
    assert_eq!(watch.scan(&stream, 5).unwrap(), Verdict::Pass);
    let mut expected = Leftovers::default();
    expected.observe(Direction::Clientbound, 0x2d, &[3, 0, 1, b'c', 27, 1]);
    expected.observe(Direction::Clientbound, 0x3b, &[1, b'o', 1, b'O', 0]);
    let mut open_still = ClientboundWatch::new(false, MAX_FRAME_LEN);
    open_still.scan(&stream, 5).unwrap();
    assert_eq!(open_still.finish(5).leftovers, expected, "no C0D since the window opened");
    expected.observe(Direction::Serverbound, 0x0d, &[3]);
    assert_eq!(watch.finish(6).leftovers, expected, "the client closed it");
}

#[test]
fn a_bad_length_prefix_is_an_error_and_a_short_head_is_held() {
    let mut watch = ClientboundWatch::new(false, MAX_FRAME_LEN);
    assert_eq!(watch.scan(&[0x80, 0x80, 0x80, 0x01], 0), Err(FrameError::LengthPrefixTooLong));
    let mut watch = ClientboundWatch::new(false, MAX_FRAME_LEN);
    assert_eq!(watch.scan(&[0x00], 0), Err(FrameError::Empty));
    let mut watch = ClientboundWatch::new(false, MAX_FRAME_LEN);
    // A 40-byte frame whose head is not all here yet: held from its first byte.
    assert_eq!(watch.scan(&[0x01, 0x00, 40, 0x3f, 10, b'B'], 0).unwrap(), Verdict::Hold(2));
    // The longest hold: a 5-byte length prefix (256 MiB) and all but the last byte of a head.
    let mut watch = ClientboundWatch::new(false, 256 << 20);
    let mut long = vec![0x80, 0x80, 0x80, 0x80, 0x01];
    long.extend_from_slice(&[0x3f; HEAD_LEN - 1]);
    assert_eq!(long.len(), MAX_HELD - 1);
    assert_eq!(watch.scan(&long, 0).unwrap(), Verdict::Hold(0));
    assert!(watch.at_boundary());
}

#[test]
fn wide_frames_pass_in_pieces_and_records_are_bounded() {
    use crate::frame::encode_wide_frame;
    let limit = 256 << 20;
    let wide = |id: i32, fields: &[u8]| {
        let mut out = Vec::new();
        encode_wide_frame(&mut out, id, fields, limit).unwrap();
        out
    };
    // A 3 MiB Forge handshake frame (4-byte prefix) drops the record; a 20 MiB chunk frame passes; then Join
    // Game with Hodgepodge's trailing dimension; the stream stays followed.
    let mut fml = vec![6, b'F', b'M', b'L', b'|', b'H', b'S'];
    crate::array_length::put_data(&mut fml, &vec![fml::MOD_ID_DATA; 3 << 20]);
    let stream = [wide(0x3f, &fml), wide(0x26, &vec![1; 20 << 20]), join_game(9)].concat();
    let mut watch = ClientboundWatch::new(false, limit);
    let mut passed = 0;
    for piece in stream.chunks(256 * 1024) {
        assert_eq!(watch.scan(piece, 0), Ok(Verdict::Pass));
        passed += piece.len();
    }
    assert_eq!(passed, stream.len());
    assert!(watch.at_boundary());
    let watched = watch.finish(0);
    assert_eq!((watched.client_entity, watched.fml_record), (Some(9), None));
    // The vanilla limit refuses the same stream at its first prefix.
    let mut vanilla = ClientboundWatch::new(false, MAX_FRAME_LEN);
    assert_eq!(vanilla.scan(&stream[..64], 0), Err(FrameError::LengthPrefixTooLong));
    // A Join Game over MAX_RECORDED_FRAME is not followed.
    let mut watch = ClientboundWatch::new(false, limit);
    assert_eq!(
        watch.scan(&wide(0x01, &vec![0; 3 << 20])[..64], 0),
        Err(FrameError::TooLarge { len: (3 << 20) + 1, max: MAX_RECORDED_FRAME })
    );
    // The serverbound filter: a 3 MiB frame passes in pieces, a forged BungeeCord message after it is dropped,
    // and a frame over the limit is an error.
    let mut bungee = vec![10];
    bungee.extend_from_slice(b"BungeeCord");
    crate::array_length::put_data(&mut bungee, b"\0\x07Connect");
    let up = [wide(0x17, &vec![2; 3 << 20]), wide(0x17, &bungee)].concat();
    let mut filter = ServerboundFilter::with_limit(limit);
    let mut kept = 0;
    for piece in up.chunks(100_000) {
        let mut piece = piece.to_vec();
        let f = filter.filter(&mut piece).unwrap();
        assert_eq!(f.held, 0);
        kept += f.pass;
    }
    assert_eq!((kept, filter.dropped()), (up.len() - wide(0x17, &bungee).len(), 1));
    let mut over = [0x81, 0x80, 0x80, 0x80, 0x01, 0x17];
    assert_eq!(
        ServerboundFilter::with_limit(limit).filter(&mut over),
        Err(FrameError::TooLarge { len: limit + 1, max: limit })
    );
}
