//! Unit tests of `packets.rs`: byte-exact vectors and round trips.

use super::*;
use crate::frame::FrameDecoder;

fn one_frame(bytes: &[u8]) -> crate::frame::Frame {
    let mut dec = FrameDecoder::new(crate::frame::MAX_FRAME_LEN);
    dec.queue_slice(bytes);
    let f = dec.try_next_frame().unwrap().unwrap();
    assert!(dec.buffered().is_empty());
    f
}

#[test]
fn handshake_vector_with_forge_marker() {
    let f = one_frame(crate::tests::HS);
    let hs: Handshake = f.decode().unwrap();
    assert_eq!(
        hs,
        Handshake {
            protocol_version: 5,
            server_address: "mc.example.com\0FML\0".into(),
            server_port: 25565,
            next_state: NextState::Login,
        }
    );
    assert_eq!(&hs.to_frame_bytes().unwrap()[..], crate::tests::HS);
}

#[test]
fn handshake_rejects_bad_next_state_and_long_host() {
    let hs =
        Handshake { protocol_version: 5, server_address: "a".into(), server_port: 1, next_state: NextState::Status };
    let mut bytes = hs.to_frame_bytes().unwrap();
    let last = bytes.len() - 1;
    bytes[last] = 3;
    assert_eq!(one_frame(&bytes).decode::<Handshake>(), Err(DecodeError::InvalidNextState(3)));

    // 256 characters encode (a forwarded address may be long) but a client may not send them.
    let long = Handshake { server_address: "a".repeat(256), ..hs.clone() };
    let bytes = long.to_frame_bytes().unwrap();
    assert!(matches!(one_frame(&bytes).decode::<Handshake>(), Err(DecodeError::StringTooLong { .. })));
    let too_long = Handshake { server_address: "a".repeat(MAX_FORWARDED_HOST_CHARS + 1), ..hs };
    assert!(matches!(too_long.to_frame_bytes(), Err(EncodeError::StringTooLong { .. })));
}

#[test]
fn max_handshake_frame_fits_the_bound() {
    // 255 four-byte characters would be 510 UTF-16 units, so the largest legal host is 255 BMP
    // characters of three bytes each; the bound is conservative.
    let hs = Handshake {
        protocol_version: i32::MIN,
        server_address: "\u{ffff}".repeat(255),
        server_port: 65535,
        next_state: NextState::Login,
    };
    let bytes = hs.to_frame_bytes().unwrap();
    let f = one_frame(&bytes);
    assert!(f.body.len() < MAX_HANDSHAKE_FRAME_LEN);
    assert_eq!(f.decode::<Handshake>().unwrap(), hs);
}

#[test]
fn login_start_vector() {
    let f = one_frame(crate::tests::LS);
    assert_eq!(f.decode::<LoginStart>().unwrap(), LoginStart { name: "Steve".into() });
    assert!(f.body.len() < MAX_LOGIN_START_FRAME_LEN);
    assert_eq!(&LoginStart { name: "Steve".into() }.to_frame_bytes().unwrap()[..], crate::tests::LS);
    // Empty and over-long names.
    assert!(one_frame(&[0x02, 0x00, 0x00]).decode::<LoginStart>().is_err());
    let mut long = vec![0x13, 0x00, 0x11];
    long.extend_from_slice(b"abcdefghijklmnopq");
    assert!(matches!(one_frame(&long).decode::<LoginStart>(), Err(DecodeError::StringTooLong { .. })));
}

#[test]
fn login_disconnect_vector() {
    let p = LoginDisconnect { reason_json: chat_text("Server survival is unreachable") };
    let bytes = p.to_frame_bytes().unwrap();
    let mut expected = vec![0x2b, 0x00, 0x29];
    expected.extend_from_slice(br#"{"text":"Server survival is unreachable"}"#);
    assert_eq!(&bytes[..], &expected[..]);
    assert_eq!(one_frame(&bytes).decode::<LoginDisconnect>().unwrap(), p);
}

#[test]
fn chat_text_escapes() {
    assert_eq!(chat_text("a\"b\\c\n"), r#"{"text":"a\"b\\c\n"}"#);
}

#[test]
fn login_success_and_status_vectors() {
    let p = LoginSuccess { uuid: "5627dd98-e6be-3c21-b8a8-e92344183641".into(), name: "Steve".into() };
    let bytes = p.to_frame_bytes().unwrap();
    assert_eq!(&bytes[..3], &[0x2c, 0x02, 0x24]);
    assert_eq!(one_frame(&bytes).decode::<LoginSuccess>().unwrap(), p);

    assert_eq!(&StatusRequest.to_frame_bytes().unwrap()[..], &[0x01, 0x00]);
    let ping = StatusPing { payload: 0x0102030405060708 };
    assert_eq!(&ping.to_frame_bytes().unwrap()[..], &[0x09, 0x01, 1, 2, 3, 4, 5, 6, 7, 8]);
    assert_eq!(&KeepAlive { id: 7 }.to_frame_bytes().unwrap()[..], &[0x05, 0x00, 0, 0, 0, 7]);
    let d = PlayDisconnect { reason_json: chat_text("bye") };
    assert_eq!(&d.to_frame_bytes().unwrap()[..3], &[0x10, 0x40, 0x0e]);
    // {"text":"hi"}: 13 bytes, so length 15, id 0x02, string length 13.
    let chat = ChatMessage { json: chat_text("hi") };
    let bytes = chat.to_frame_bytes().unwrap();
    assert_eq!(&bytes[..], b"\x0f\x02\x0d{\"text\":\"hi\"}");
    assert_eq!(one_frame(&bytes).decode::<ChatMessage>().unwrap(), chat);
}

#[test]
fn encryption_packets_use_i16_lengths() {
    let req =
        EncryptionRequest { server_id: String::new(), public_key: vec![0x30; 162], verify_token: vec![1, 2, 3, 4] };
    let bytes = req.to_frame_bytes().unwrap();
    // length, id 0x01, empty server id, i16 162, ..., i16 4, token
    assert_eq!(&bytes[..6], &[0xac, 0x01, 0x01, 0x00, 0x00, 0xa2]);
    assert_eq!(&bytes[bytes.len() - 6..], &[0x00, 0x04, 1, 2, 3, 4]);
    assert_eq!(one_frame(&bytes).decode::<EncryptionRequest>().unwrap(), req);
    let resp = EncryptionResponse { shared_secret: vec![9; 128], verify_token: vec![8; 128] };
    let bytes = resp.to_frame_bytes().unwrap();
    assert_eq!(&bytes[..5], &[0x85, 0x02, 0x01, 0x00, 0x80]);
    assert!(bytes.len() - 2 <= MAX_ENCRYPTION_RESPONSE_FRAME_LEN);
    assert_eq!(one_frame(&bytes).decode::<EncryptionResponse>().unwrap(), resp);
}

#[test]
fn plugin_message_uses_i16_length() {
    let p = PluginMessage { channel: "FML|HS".into(), data: vec![1, 2, 3] };
    let mut out = Vec::new();
    p.encode_fields(&mut out).unwrap();
    assert_eq!(out, [0x06, b'F', b'M', b'L', b'|', b'H', b'S', 0x00, 0x03, 1, 2, 3]);
    assert_eq!(PluginMessage::decode_fields(&mut Reader::new(&out)).unwrap(), p);
}

#[test]
fn join_game_and_respawn_vectors() {
    // Join Game: entity 257, survival, overworld, easy, 20 players, "default".
    let j = JoinGame {
        entity_id: 257,
        game_mode: 0,
        dimension: 0,
        difficulty: 1,
        max_players: 20,
        level_type: "default".into(),
        trailing_dimension: false,
    };
    let bytes = j.to_frame_bytes().unwrap();
    assert_eq!(&bytes[..], &[0x11, 0x01, 0, 0, 1, 1, 0, 0, 1, 20, 7, b'd', b'e', b'f', b'a', b'u', b'l', b't']);
    assert_eq!(one_frame(&bytes).decode::<JoinGame>().unwrap(), j);
    // The nether as a signed byte.
    let nether = JoinGame { dimension: -1, ..j.clone() };
    assert_eq!(nether.to_frame_bytes().unwrap()[7], 0xff);
    assert_eq!(one_frame(&nether.to_frame_bytes().unwrap()).decode::<JoinGame>().unwrap().dimension, -1);
    // Hodgepodge's trailing int: dimension 1000 (its byte is 1000 & 0xff = 0xe8), and a small one kept as sent.
    let gtnh = JoinGame { dimension: 1000, ..j.clone() };
    let bytes = gtnh.to_frame_bytes().unwrap();
    assert_eq!(
        &bytes[..],
        &[0x15, 0x01, 0, 0, 1, 1, 0, 0xe8, 1, 20, 7, b'd', b'e', b'f', b'a', b'u', b'l', b't', 0, 0, 0x03, 0xe8]
    );
    assert_eq!(one_frame(&bytes).decode::<JoinGame>().unwrap(), JoinGame { trailing_dimension: true, ..gtnh });
    let small = JoinGame { dimension: -1, trailing_dimension: true, ..j.clone() };
    let bytes = small.to_frame_bytes().unwrap();
    assert_eq!(&bytes[bytes.len() - 5..], &[b't', 0xff, 0xff, 0xff, 0xff]);
    assert_eq!(one_frame(&bytes).decode::<JoinGame>().unwrap(), small);
    // Fewer than 4 bytes after the level type are not a dimension: refused as trailing bytes.
    let mut short = j.to_frame_bytes().unwrap().to_vec();
    short[0] += 3;
    short.extend_from_slice(&[0, 0, 1]);
    assert_eq!(one_frame(&short).decode::<JoinGame>(), Err(DecodeError::TrailingBytes(3)));
    // Respawn to the nether, hard, creative, "flat".
    let r = Respawn { dimension: -1, difficulty: 3, game_mode: 1, level_type: "flat".into() };
    let bytes = r.to_frame_bytes().unwrap();
    assert_eq!(&bytes[..], &[0x0c, 0x07, 0xff, 0xff, 0xff, 0xff, 3, 1, 4, b'f', b'l', b'a', b't']);
    assert_eq!(one_frame(&bytes).decode::<Respawn>().unwrap(), r);
    // A level type over 16 characters is refused both ways.
    let long = Respawn { level_type: "x".repeat(17), ..r };
    assert!(long.to_frame_bytes().is_err());
}
