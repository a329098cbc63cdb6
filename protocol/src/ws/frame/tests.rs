//! Unit tests of `frame.rs`: byte-exact vectors and round trips.

#![allow(clippy::unwrap_used, clippy::indexing_slicing)]

use proptest::prelude::*;

use super::*;

const KEY: [u8; 4] = [0x37, 0xfa, 0x21, 0x3d];

/// A masked client frame with first byte `b0` (FIN, RSV and opcode as given).
fn client_frame(b0: u8, payload: &[u8], key: [u8; 4]) -> Vec<u8> {
    let mut f = super::client_frame(b0 & 0x0f, payload, key);
    f[0] = b0;
    f
}

fn events(bytes: &[u8], max: usize) -> Result<Vec<Event>, FrameFault> {
    let mut d = ServerDecoder::new(max);
    d.queue_slice(bytes);
    let mut out = Vec::new();
    while let Some(e) = d.try_next()? {
        out.push(e);
    }
    Ok(out)
}

fn data(b: &[u8]) -> Event {
    Event::Data(BytesMut::from(b))
}

#[test]
fn rfc_6455_section_5_7_masked_hello_as_binary() {
    // §5.7's masked "Hello" with the Binary opcode instead of Text.
    let bytes = [0x82, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58];
    assert_eq!(events(&bytes, 1 << 20).unwrap(), [data(b"Hello"), Event::MessageEnd]);
    // The same bytes as Text: the carriage refuses text (1003).
    let text = [0x81, 0x85, 0x37, 0xfa, 0x21, 0x3d, 0x7f, 0x9f, 0x4d, 0x51, 0x58];
    assert_eq!(events(&text, 1 << 20), Err(FrameFault::Text));
    assert_eq!(FrameFault::Text.close_code(), 1003);
}

#[test]
fn text_messages_when_accepted_are_whole_and_short() {
    let key = [1, 2, 3, 4];
    let mut dec = ServerDecoder::new(1 << 20);
    dec.accept_text(125);
    // "ack 5" as one Text frame, split before its last byte, then a Binary byte.
    let text = client_frame(0x81, b"ack 5", key);
    dec.queue_slice(&text[..text.len() - 1]);
    assert_eq!(dec.next_opcode(), Some(OP_TEXT));
    assert_eq!(dec.try_next(), Ok(None));
    dec.queue_slice(&text[text.len() - 1..]);
    dec.queue_slice(&client_frame(0x82, b"x", key));
    assert_eq!(dec.try_next(), Ok(Some(Event::Text(Bytes::from_static(b"ack 5")))));
    assert_eq!(dec.next_opcode(), Some(OP_BINARY));
    assert_eq!(dec.try_next(), Ok(Some(data(b"x"))));
    // Fragmented or over the accepted size: still refused (1003).
    let mut dec = ServerDecoder::new(1 << 20);
    dec.accept_text(10);
    dec.queue_slice(&client_frame(0x01, b"ack", key));
    assert_eq!(dec.try_next(), Err(FrameFault::Text));
    let mut dec = ServerDecoder::new(1 << 20);
    dec.accept_text(10);
    dec.queue_slice(&client_frame(0x81, b"ack 123456789", key));
    assert_eq!(dec.try_next(), Err(FrameFault::Text));
    // Not accepted at all (carriage v1): even an empty Text message is refused.
    let mut dec = ServerDecoder::new(1 << 20);
    dec.queue_slice(&client_frame(0x81, b"", key));
    assert_eq!(dec.try_next(), Err(FrameFault::Text));
}

#[test]
fn fragments_and_a_ping_between_them() {
    // §5.7: "Hel" + Ping("Hello") + "lo", fragmented Binary.
    let mut bytes = client_frame(0x02, b"Hel", KEY);
    bytes.extend(client_frame(0x89, b"Hello", KEY));
    bytes.extend(client_frame(0x80, b"lo", KEY));
    assert_eq!(
        events(&bytes, 1 << 20).unwrap(),
        [data(b"Hel"), Event::Ping(Bytes::from_static(b"Hello")), data(b"lo"), Event::MessageEnd]
    );
}

#[test]
fn byte_at_a_time_gives_the_same_stream() {
    let payload: Vec<u8> = (0..300u32).map(|i| (i * 7) as u8).collect();
    let bytes = client_frame(0x82, &payload, KEY);
    let mut d = ServerDecoder::new(1 << 20);
    let mut got = Vec::new();
    let mut ends = 0;
    for b in &bytes {
        d.queue_slice(&[*b]);
        while let Some(e) = d.try_next().unwrap() {
            match e {
                Event::Data(x) => got.extend_from_slice(&x),
                Event::MessageEnd => ends += 1,
                other => panic!("{other:?}"),
            }
        }
    }
    assert_eq!(got, payload);
    assert_eq!(ends, 1);
    assert!(!d.in_message());
}

#[test]
fn case_c36_close_codes() {
    // `88 82 00000000 0001`: code 1, must not be sent → 1002.
    assert_eq!(
        events(&[0x88, 0x82, 0, 0, 0, 0, 0x00, 0x01], 100),
        Err(FrameFault::BadClose("a status code that must not be sent"))
    );
    for code in [0u16, 1, 999, 1004, 1005, 1006, 1015, 1016, 2999, 5000, 65535] {
        let e = events(&client_frame(0x88, &code.to_be_bytes(), KEY), 100).unwrap_err();
        assert_eq!(e.close_code(), 1002, "code {code}");
    }
    for code in [1000u16, 1001, 1002, 1003, 1007, 1011, 1012, 1013, 1014, 3000, 4999] {
        let got = events(&client_frame(0x88, &code.to_be_bytes(), KEY), 100).unwrap();
        assert_eq!(got, [Event::Close(CloseReceived::Code(code, String::new()))], "code {code}");
        assert_eq!(CloseReceived::Code(code, String::new()).reply_code(), code);
    }
    // A 1-byte body → 1002; an empty body → answered with 1000, never 1005.
    assert_eq!(events(&client_frame(0x88, &[0x03], KEY), 100).unwrap_err().close_code(), 1002);
    let empty = events(&client_frame(0x88, &[], KEY), 100).unwrap();
    assert_eq!(empty, [Event::Close(CloseReceived::NoCode)]);
    assert_eq!(CloseReceived::NoCode.reply_code(), 1000);
    // A reason that is not UTF-8.
    assert!(matches!(events(&client_frame(0x88, &[0x03, 0xe8, 0xff], KEY), 100), Err(FrameFault::BadClose(_))));
    let ok = events(&client_frame(0x88, b"\x03\xe8bye", KEY), 100).unwrap();
    assert_eq!(ok, [Event::Close(CloseReceived::Code(1000, "bye".into()))]);
}

#[test]
fn the_limit_is_checked_from_the_header_before_the_payload() {
    // A header announcing 200 bytes with a 100-byte limit: refused with only the header queued.
    let header = &client_frame(0x82, &[0; 200], KEY)[..8];
    let e = events(header, 100).unwrap_err();
    assert_eq!(e, FrameFault::MessageTooBig { limit: 100 });
    assert_eq!(e.close_code(), 1009);
    // Fragments count together: 60 + 60 over a 100-byte limit.
    let mut two = client_frame(0x02, &[1; 60], KEY);
    two.extend(client_frame(0x80, &[2; 60], KEY));
    assert_eq!(events(&two, 100).unwrap_err(), FrameFault::MessageTooBig { limit: 100 });
    // A new message starts the count again.
    let mut msgs = client_frame(0x82, &[1; 60], KEY);
    msgs.extend(client_frame(0x82, &[2; 60], KEY));
    assert_eq!(events(&msgs, 100).unwrap().len(), 4);
    // A 64-bit length is refused from its header alone.
    let mut huge = vec![0x82, 0xff];
    huge.extend_from_slice(&(1u64 << 40).to_be_bytes());
    huge.extend_from_slice(&KEY);
    assert_eq!(events(&huge, 4 << 20).unwrap_err(), FrameFault::MessageTooBig { limit: 4 << 20 });
}

#[test]
fn malformed_frames() {
    assert_eq!(events(&[0x82, 0x05, 1, 2, 3, 4, 5], 100), Err(FrameFault::Unmasked));
    assert_eq!(events(&[0xc2, 0x80, 0, 0, 0, 0], 100), Err(FrameFault::ReservedBits));
    assert_eq!(events(&[0x83, 0x80, 0, 0, 0, 0], 100), Err(FrameFault::ReservedOpcode(3)));
    assert_eq!(events(&[0x8b, 0x80, 0, 0, 0, 0], 100), Err(FrameFault::ReservedOpcode(0xb)));
    // A fragmented Ping, a 126-byte Ping.
    assert_eq!(events(&[0x09, 0x80, 0, 0, 0, 0], 100), Err(FrameFault::BadControlFrame));
    assert_eq!(events(&[0x89, 0xfe, 0, 126], 1000), Err(FrameFault::BadControlFrame));
    // A continuation with nothing to continue; a new message inside a fragmented one.
    assert_eq!(events(&client_frame(0x80, b"x", KEY), 100), Err(FrameFault::BadFragmentation));
    let mut two = client_frame(0x02, b"x", KEY);
    two.extend(client_frame(0x82, b"y", KEY));
    assert_eq!(events(&two, 100).unwrap_err(), FrameFault::BadFragmentation);
    // A Text frame inside an unfinished Binary message is a fragmentation error (1002), not Text (1003).
    let mut text_inside = client_frame(0x02, b"x", KEY);
    text_inside.extend(client_frame(0x81, b"y", KEY));
    assert_eq!(events(&text_inside, 100).unwrap_err(), FrameFault::BadFragmentation);
    // Lengths not in their shortest form, and the 64-bit form with its top bit set.
    assert_eq!(events(&[0x82, 0xfe, 0x00, 0x05], 100), Err(FrameFault::BadLength));
    let mut long = vec![0x82, 0xff];
    long.extend_from_slice(&100u64.to_be_bytes());
    assert_eq!(events(&long, 1000), Err(FrameFault::BadLength));
    let mut top = vec![0x82, 0xff];
    top.extend_from_slice(&(1u64 << 63).to_be_bytes());
    assert_eq!(events(&top, usize::MAX), Err(FrameFault::BadLength));
}

#[test]
fn a_control_frame_waits_until_whole() {
    let ping = client_frame(0x89, b"abc", KEY);
    let mut d = ServerDecoder::new(100);
    d.queue_slice(&ping[..ping.len() - 1]);
    assert_eq!(d.try_next(), Ok(None));
    d.queue_slice(&ping[ping.len() - 1..]);
    assert_eq!(d.try_next(), Ok(Some(Event::Ping(Bytes::from_static(b"abc")))));
    assert_eq!(d.buffered(), 0);
}

#[test]
fn server_frames() {
    assert_eq!(frame(OP_BINARY, b"Hello"), [0x82, 0x05, b'H', b'e', b'l', b'l', b'o']);
    let (h, n) = encode_header(OP_BINARY, 256);
    assert_eq!(&h[..n], [0x82, 0x7e, 0x01, 0x00]);
    let (h, n) = encode_header(OP_BINARY, 65536);
    assert_eq!(&h[..n], [0x82, 0x7f, 0, 0, 0, 0, 0, 0x01, 0, 0]);
    let (h, n) = encode_header(OP_BINARY, 125);
    assert_eq!(&h[..n], [0x82, 125]);
    assert_eq!(frame(OP_PING, &[]), [0x89, 0x00]);
    assert_eq!(close_frame(1000, ""), [0x88, 0x02, 0x03, 0xe8]);
    assert_eq!(close_frame(1002, "protocol error")[..4], [0x88, 16, 0x03, 0xea]);
    // A long reason is cut at a character boundary to fit 125 bytes.
    let c = close_frame(1011, &"é".repeat(100));
    assert_eq!(c[1] as usize, 2 + 122);
    assert!(std::str::from_utf8(&c[4..]).is_ok());
}

#[test]
fn unmask_at_every_offset_matches_the_bytewise_rule() {
    let key = [1, 2, 3, 4];
    let original: Vec<u8> = (0..37).collect();
    for offset in 0..8 {
        let mut a = original.clone();
        unmask(&mut a, key, offset);
        let b: Vec<u8> = original.iter().enumerate().map(|(i, x)| x ^ key[(offset + i) % 4]).collect();
        assert_eq!(a, b, "offset {offset}");
    }
}

proptest! {
    /// However the bytes of several messages (with Pings between) are split, the data is the same.
    #[test]
    fn any_split_gives_the_same_data(
        msgs in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 0..400), 1..6),
        cuts in proptest::collection::vec(1usize..64, 1..40),
        key in any::<[u8; 4]>(),
    ) {
        let mut wire = Vec::new();
        for (i, m) in msgs.iter().enumerate() {
            // Each message in two fragments, a Ping after the first.
            let half = m.len() / 2;
            wire.extend(client_frame(0x02, &m[..half], key));
            wire.extend(client_frame(0x89, &[i as u8], key));
            wire.extend(client_frame(0x80, &m[half..], key));
        }
        let mut d = ServerDecoder::new(1 << 20);
        let (mut got, mut pings, mut ends) = (Vec::new(), 0, 0);
        let mut rest = &wire[..];
        let mut c = cuts.iter().cycle();
        while !rest.is_empty() {
            let n = (*c.next().unwrap()).min(rest.len());
            d.queue_slice(&rest[..n]);
            rest = &rest[n..];
            while let Some(e) = d.try_next().unwrap() {
                match e {
                    Event::Data(x) => got.extend_from_slice(&x),
                    Event::Ping(_) => pings += 1,
                    Event::MessageEnd => ends += 1,
                    other => panic!("{other:?}"),
                }
            }
        }
        prop_assert_eq!(got, msgs.concat());
        prop_assert_eq!(pings, msgs.len());
        prop_assert_eq!(ends, msgs.len());
    }
}

#[test]
fn a_message_over_the_frame_cap_goes_as_continuation_frames() {
    use crate::ws::{MAX_SENT_FRAME_PAYLOAD, MAX_SENT_MESSAGE};
    // 65,535 bytes: one frame with the 16-bit length; one byte more: a second, final Continuation frame.
    let mut out = Vec::new();
    let at = encode_binary_message(&mut out, &[7; MAX_SENT_FRAME_PAYLOAD], MAX_SENT_FRAME_PAYLOAD);
    assert_eq!(&out[..4], &[0x82, 126, 0xff, 0xff]);
    assert_eq!(out.len(), 4 + 65_535);
    assert_eq!((at.len(), at.first()), (1, Some(&(4..65_539))));
    let mut out = Vec::new();
    let at = encode_binary_message(&mut out, &[7; MAX_SENT_FRAME_PAYLOAD + 1], MAX_SENT_FRAME_PAYLOAD);
    assert_eq!(&out[..4], &[0x02, 126, 0xff, 0xff], "Binary, no FIN");
    assert_eq!(&out[65_539..], &[0x80, 1, 7], "Continuation with FIN");
    assert_eq!(at, [4..65_539, 65_541..65_542]);
    // A whole 1 MiB message: 17 frames, none over the cap, the payload intact.
    let payload: Vec<u8> = (0..MAX_SENT_MESSAGE).map(|i| i as u8).collect();
    let mut out = Vec::new();
    let at = encode_binary_message(&mut out, &payload, MAX_SENT_FRAME_PAYLOAD);
    assert_eq!(at.len(), 17);
    let joined: Vec<u8> = at.iter().flat_map(|r| out[r.clone()].to_vec()).collect();
    assert_eq!(joined, payload);
    assert!(at.iter().all(|r| r.len() <= MAX_SENT_FRAME_PAYLOAD));
    // An empty payload is one empty final frame.
    let mut out = Vec::new();
    let at = encode_binary_message(&mut out, &[], MAX_SENT_FRAME_PAYLOAD);
    assert_eq!((at.len(), at.first()), (1, Some(&(2..2))));
    assert_eq!(out, [0x82, 0]);
}
