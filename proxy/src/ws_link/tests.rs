//! Unit tests of the link's events: each with real frames through an in-memory stream.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use moonbridge_protocol::ws::frame::{client_frame, OP_BINARY, OP_PING, OP_TEXT};
use moonbridge_protocol::ws::v2::Control;
use tokio::io::{AsyncReadExt, AsyncWriteExt, DuplexStream};

use super::{PeerClose, Turn, WsLink};
use crate::metrics::Metrics;

const MASK: [u8; 4] = [1, 2, 3, 4];

/// A carriage v2 link over an in-memory stream, with `input` already sent by the player, and the player's end.
async fn open_link(input: &[u8]) -> (WsLink<DuplexStream>, DuplexStream) {
    let (ours, mut player) = tokio::io::duplex(64 * 1024);
    let metrics = Arc::new(Metrics::new().unwrap());
    let mut link = WsLink::new(ours, &[], None, Duration::from_secs(5), 1 << 20, metrics.ws.clone());
    link.enable_v2();
    link.offer_moves(true);
    player.write_all(input).await.unwrap();
    assert_eq!(link.read().await.unwrap(), input.len());
    (link, player)
}

fn control(c: &Control) -> Vec<u8> {
    client_frame(OP_TEXT, c.encode().as_bytes(), MASK)
}

#[tokio::test]
async fn a_control_message_ends_the_turn_and_what_follows_stays_buffered() {
    let input = [
        client_frame(OP_BINARY, b"abc", MASK),
        control(&Control::Ack(0)),
        client_frame(OP_BINARY, b"def", MASK),
        control(&Control::Stay),
        client_frame(OP_BINARY, b"gh", MASK),
    ]
    .concat();
    let (mut link, _player) = open_link(&input).await;
    let mut data = BytesMut::new();
    assert!(matches!(link.decode(&mut data, 1024).await, Turn::Ack(0)));
    assert_eq!(&data[..], b"abc");
    assert!(link.decode_backlog(), "the rest is decoded before the socket is read again");
    assert!(matches!(link.decode(&mut data, 1024).await, Turn::Stay));
    assert_eq!(&data[..], b"abcdef");
    assert!(matches!(link.decode(&mut data, 1024).await, Turn::Continue));
    assert_eq!(&data[..], b"abcdefgh");
    assert_eq!(link.counts().0, 8);
}

#[tokio::test]
async fn a_close_is_answered_and_reported_with_its_code_and_a_moved_reason() {
    let mut body = 1000u16.to_be_bytes().to_vec();
    body.extend_from_slice(moonbridge_protocol::ws::v2::CLOSE_REASON_MOVED.as_bytes());
    let (mut link, mut player) = open_link(&client_frame(0x8, &body, MASK)).await;
    let turn = link.decode(&mut BytesMut::new(), 1024).await;
    assert!(matches!(turn, Turn::Closed(PeerClose { code: Some(1000), moved: true })), "{turn:?}");
    assert!(link.closed_both_ways(), "the Close was answered");
    let mut answer = [0u8; 4];
    player.read_exact(&mut answer).await.unwrap();
    assert_eq!(answer, [0x88, 2, 0x03, 0xe8], "Close 1000 back");
    assert!(link.write_frame(b"\x82\x00").await.is_err(), "nothing after a Close");
}

#[tokio::test]
async fn a_pong_that_cannot_be_written_is_a_lost_link_unless_the_player_broke_the_carriage() {
    // A Ping, then the player's end goes away: the Pong fails, the link is lost.
    let (mut link, player) = open_link(&client_frame(OP_PING, b"p", MASK)).await;
    drop(player);
    assert!(matches!(link.decode(&mut BytesMut::new(), 1024).await, Turn::Lost(_)));
    // A Ping, then an unmasked frame (a fault, RFC 6455 §5.1): the fault ends the session even though the
    // Pong cannot be written either.
    let unmasked = moonbridge_protocol::ws::frame::frame(OP_BINARY, b"x");
    let (mut link, player) = open_link(&[client_frame(OP_PING, b"p", MASK), unmasked].concat()).await;
    drop(player);
    assert!(matches!(link.decode(&mut BytesMut::new(), 1024).await, Turn::Fault(_)));
}

#[tokio::test]
async fn an_ack_before_the_relay_past_the_bytes_sent_earns_1002() {
    // Within what was sent (nothing yet): passed over, the stream bytes behind it read.
    let (mut link, _player) =
        open_link(&[control(&Control::Ack(0)), client_frame(OP_BINARY, b"hi", MASK)].concat()).await;
    let mut data = BytesMut::new();
    assert_eq!(link.read_stream(&mut data).await.unwrap(), 2);
    assert_eq!(&data[..], b"hi");
    let (mut link, mut player) = open_link(&control(&Control::Ack(5))).await;
    assert!(link.read_stream(&mut BytesMut::new()).await.is_err());
    link.close(1000, "").await;
    let mut answer = [0u8; 4];
    player.read_exact(&mut answer).await.unwrap();
    assert_eq!(answer[..4], [0x88, 0x19, 0x03, 0xea], "Close 1002 with its reason");
}
