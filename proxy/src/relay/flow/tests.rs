//! Unit tests of a relay direction ([`super::Flow`]).

use super::*;
use moonbridge_protocol::transfer::watch::MAX_HELD;
use moonbridge_protocol::transfer::Leftovers;
use moonbridge_protocol::MAX_FRAME_LEN;

#[test]
fn a_direction_counts_scans_and_ciphers_in_place() {
    let secret = [7u8; SHARED_SECRET_LEN];
    let shutdown = crate::players::Stop::child_of(&tokio_util::sync::CancellationToken::new());
    let metrics = crate::metrics::Metrics::new().unwrap().backend("b");
    let start = RelayStart {
        shutdown: &shutdown,
        follow: Follow::Frames(FrameScanner::new()),
        up: 10,
        down: 20,
        write_stall: Duration::from_secs(1),
        cipher: Some(Box::new(ClientCipher::new(&secret))),
        metrics: &metrics,
        resume: None,
        max_frame_len: moonbridge_protocol::MAX_FRAME_LEN,
        up_start: None,
        lanes: None,
    };
    let (mut up, mut down) = Flow::pair(start);
    // Clientbound: two whole frames, scanned as plaintext, then encrypted.
    let plain = [0x02, 0x00, 0x01, 0x01, 0x00];
    let mut batch = plain;
    down.process(&mut batch);
    assert_eq!(down.bytes, 25);
    assert!(down.at_frame_boundary());
    let mut player_side = ClientCipher::new(&secret);
    let mut seen = batch;
    player_side.decrypt.apply(&mut seen);
    assert_eq!(seen, plain, "the player decrypts what the relay encrypted");
    // Half a frame: not a boundary any more.
    let mut half = [0x05, 0x00];
    down.process(&mut half);
    assert!(!down.at_frame_boundary());
    // Serverbound: decrypted before counting.
    let mut sent = *b"hello";
    player_side.encrypt.apply(&mut sent);
    up.process(&mut sent);
    assert_eq!(&sent, b"hello");
    assert_eq!(up.bytes, 15);
}

fn frame(id: i32, fields: &[u8]) -> Vec<u8> {
    let mut out = bytes::BytesMut::new();
    moonbridge_protocol::frame::encode_frame(&mut out, id, fields).unwrap();
    out.to_vec()
}

#[tokio::test]
async fn the_watch_holds_frame_heads_back_and_hands_over_at_a_connect_in_tiny_reads() {
    use moonbridge_protocol::packets::PluginMessage;
    use moonbridge_protocol::transfer::BungeeRequest;
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let mut backend = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
    let (relay_end, _) = listener.accept().await.unwrap();
    // Join Game (entity 9), an objective, a chat line, then BungeeCord's Connect and what follows it.
    let mut join = 9i32.to_be_bytes().to_vec();
    join.extend_from_slice(&[0, 0, 1, 20, 7, b'd', b'e', b'f', b'a', b'u', b'l', b't']);
    let mut connect = Vec::new();
    let data = BungeeRequest::connect_payload("lobby").unwrap();
    PluginMessage { channel: "BungeeCord".into(), data }.encode_fields(&mut connect).unwrap();
    let before = [frame(0x01, &join), frame(0x3b, &[1, b'o', 1, b'O', 0]), frame(0x02, b"\x04\"hi\"")].concat();
    let after = [frame(0x3f, &connect), frame(0x00, &[0, 0, 0, 5])].concat();
    tokio::io::AsyncWriteExt::write_all(&mut backend, &[before.clone(), after.clone()].concat()).await.unwrap();

    let secret = [3u8; SHARED_SECRET_LEN];
    let shutdown = crate::players::Stop::child_of(&tokio_util::sync::CancellationToken::new());
    let metrics = crate::metrics::Metrics::new().unwrap().backend("b");
    // No ticket: the switchboard itself is tested on live sockets (`tests/tests/transfer.rs`).
    let watching = Watching::new(ClientboundWatch::new(false, MAX_FRAME_LEN), None, false, None);
    let start = RelayStart {
        shutdown: &shutdown,
        follow: Follow::Watch(Box::new(watching)),
        up: 0,
        down: 0,
        write_stall: Duration::from_secs(1),
        cipher: Some(Box::new(ClientCipher::new(&secret))),
        metrics: &metrics,
        resume: None,
        max_frame_len: moonbridge_protocol::MAX_FRAME_LEN,
        up_start: None,
        lanes: None,
    };
    let (mut up, mut down) = Flow::pair(start);
    // Serverbound: a Close Window (C0D), then the first bytes of a Chat Message, too few to tell what it is
    // (held for the next batch).
    let mut player = ClientCipher::new(&secret);
    let mut sent = [frame(0x0d, &[1]), vec![0x05, 0x01]].concat();
    player.encrypt.apply(&mut sent);
    assert_eq!(up.process(&mut sent), 3);
    assert_eq!(up.held, [0x05, 0x01]);
    let mut passed = Vec::new();
    while !down.handover_due() {
        tokio::time::timeout(Duration::from_secs(5), relay_end.readable()).await.unwrap().unwrap();
        // Reads of at most 5 bytes: every frame head is split at least once.
        if let Some(data) = read_batch(&relay_end, &mut down, 5, |d| d.to_vec()).unwrap() {
            assert!(!data.is_empty(), "no EOF before the handover");
            passed.extend_from_slice(&data);
        }
    }
    player.decrypt.apply(&mut passed);
    assert_eq!(passed, before, "everything before the Connect reached the player, encrypted once");
    assert_eq!(down.bytes, before.len() as u64, "the bytes not delivered are not counted");
    assert!(down.at_frame_boundary());
    let (ticket, handed) = down.take_handover(&mut up).unwrap();
    assert!(ticket.is_none());
    let Handed { rest, watched, tail, lost, .. } = handed;
    assert_eq!(lost, None);
    assert!(rest.len() <= 5 + MAX_HELD && after.starts_with(&rest), "the rest starts at the Connect");
    assert_eq!(rest.first(), after.first());
    assert_eq!(watched.client_entity, Some(9));
    let mut objective = Leftovers::default();
    objective.observe(moonbridge_protocol::transfer::Direction::Clientbound, 0x3b, &[1, b'o', 1, b'O', 0]);
    assert_eq!(watched.leftovers, objective);
    // No serverbound frame under way: the held head starts the player's next batch.
    assert_eq!(tail, (0, false));
    assert_eq!(up.held, [0x05, 0x01]);
    assert!(matches!(down.follow, Follow::Frames(_)) && matches!(up.follow, Follow::Nothing));
    drop(relay_end);
}

/// The two directions of a session that can be switched (no ticket, no cipher); `failover` when its backend
/// has a fallback.
fn switchable(shutdown: &crate::players::Stop, metrics: &BackendMetrics, failover: bool) -> (Flow, Flow) {
    let watching = Watching::new(ClientboundWatch::new(false, MAX_FRAME_LEN), None, failover, None);
    Flow::pair(RelayStart {
        shutdown,
        follow: Follow::Watch(Box::new(watching)),
        up: 0,
        down: 0,
        write_stall: Duration::from_secs(1),
        cipher: None,
        metrics,
        resume: None,
        max_frame_len: moonbridge_protocol::MAX_FRAME_LEN,
        up_start: None,
        lanes: None,
    })
}

#[test]
fn a_lost_backend_hands_over_only_between_two_frames_and_only_with_a_fallback() {
    let shutdown = crate::players::Stop::child_of(&tokio_util::sync::CancellationToken::new());
    let metrics = crate::metrics::Metrics::new().unwrap().backend("b");
    let flows = |failover| switchable(&shutdown, &metrics, failover);
    let (mut up, mut down) = flows(true);
    // Half of a chat frame reached the player: it cannot be completed by another server.
    let long = frame(0x02, &[&[40u8][..], &[b'a'; 40]].concat());
    let mut half = long[..30].to_vec();
    down.process(&mut half);
    assert!(!down.fail_over("closed the connection unexpectedly"));
    let (mut up2, mut down2) = flows(true);
    let mut whole = frame(0x02, b"\x04\"hi\"");
    down2.process(&mut whole);
    assert!(down2.fail_over("closed the connection unexpectedly"));
    let (_, handed) = down2.take_handover(&mut up2).unwrap();
    assert_eq!(handed.lost.as_deref(), Some("closed the connection unexpectedly"));
    let (_, mut down3) = flows(false);
    assert!(!down3.fail_over("x"), "no fallback, no failover");
    assert!(down.take_handover(&mut up).is_none());
}

#[test]
fn serverbound_bungeecord_messages_never_reach_the_backend_and_heads_are_held() {
    use moonbridge_protocol::packets::PluginMessage;
    let shutdown = crate::players::Stop::child_of(&tokio_util::sync::CancellationToken::new());
    let metrics = crate::metrics::Metrics::new().unwrap().backend("b");
    let (mut up, _down) = switchable(&shutdown, &metrics, false);
    let mut fields = Vec::new();
    PluginMessage { channel: "BungeeCord".into(), data: b"\x00\x03Msg".to_vec() }.encode_fields(&mut fields).unwrap();
    let forged = frame(0x17, &fields);
    let chat = frame(0x01, b"\x02hi");
    // The forged message's head split across two batches: held, then dropped whole.
    let mut first = BytesMut::from(&[chat.clone(), forged[..5].to_vec()].concat()[..]);
    up.process_owned(&mut first).unwrap();
    assert_eq!(&first[..], &chat[..]);
    let mut second = BytesMut::from(&[forged[5..].to_vec(), chat.clone()].concat()[..]);
    up.process_owned(&mut second).unwrap();
    assert_eq!(&second[..], &chat[..]);
    assert_eq!(up.bytes, 2 * chat.len() as u64, "dropped bytes are not counted as relayed");
}

#[test]
fn a_stream_that_stops_parsing_is_counted_and_a_serverbound_one_is_refused() {
    use moonbridge_protocol::packets::PluginMessage;
    let shutdown = crate::players::Stop::child_of(&tokio_util::sync::CancellationToken::new());
    let all = crate::metrics::Metrics::new().unwrap();
    let metrics = all.backend("b");
    let (mut up, mut down) = switchable(&shutdown, &metrics, false);
    // Serverbound: a chat line, then a prefix wider than the vanilla limit allows, then a forged BungeeCord
    // message: nothing from the bad prefix on reaches the backend, now or in any later batch.
    let chat = frame(0x01, b"\x02hi");
    let mut fields = Vec::new();
    PluginMessage { channel: "BungeeCord".into(), data: b"\x00\x03Msg".to_vec() }.encode_fields(&mut fields).unwrap();
    let forged = frame(0x17, &fields);
    let mut batch = BytesMut::from(&[chat.clone(), vec![0x80, 0x80, 0x80, 0x01], forged.clone()].concat()[..]);
    let e = up.process_owned(&mut batch).unwrap_err();
    assert_eq!(e.kind(), io::ErrorKind::InvalidData);
    assert!(batch.is_empty(), "not even the chat line before it: the batch is refused whole");
    let mut later = BytesMut::from(&forged[..]);
    assert!(up.process_owned(&mut later).is_err());
    assert!(later.is_empty());
    // Clientbound: relayed opaquely from the bad frame on, and no handover any more.
    let mut bad = [frame(0x02, b"\x04\"hi\""), vec![0x00], forged.clone()].concat();
    assert_eq!(down.process(&mut bad), bad.len());
    assert!(matches!(down.follow, Follow::Nothing));
    assert!(down.refusal().is_none() && !down.at_frame_boundary());
    let text = all.render();
    for series in [
        "moonbridge_unfollowed_streams_total{direction=\"to_backend\",reason=\"wide_prefix\"} 1",
        "moonbridge_unfollowed_streams_total{direction=\"to_player\",reason=\"empty\"} 1",
        "moonbridge_unfollowed_streams_total{direction=\"to_player\",reason=\"too_large\"} 0",
    ] {
        assert!(text.contains(series), "{series} in\n{text}");
    }
}

#[test]
fn a_serverbound_head_held_back_is_decrypted_once_in_online_mode() {
    let secret = [9u8; SHARED_SECRET_LEN];
    let shutdown = crate::players::Stop::child_of(&tokio_util::sync::CancellationToken::new());
    let metrics = crate::metrics::Metrics::new().unwrap().backend("b");
    let watching = Watching::new(ClientboundWatch::new(false, MAX_FRAME_LEN), None, false, None);
    let (mut up, _down) = Flow::pair(RelayStart {
        shutdown: &shutdown,
        follow: Follow::Watch(Box::new(watching)),
        up: 0,
        down: 0,
        write_stall: Duration::from_secs(1),
        cipher: Some(Box::new(ClientCipher::new(&secret))),
        metrics: &metrics,
        resume: None,
        max_frame_len: MAX_FRAME_LEN,
        up_start: None,
        lanes: None,
    });
    let mut player = ClientCipher::new(&secret);
    // A chat line whose first two bytes end one batch (held back) and whose rest starts the next.
    let chat = frame(0x01, b"\x05hello");
    let mut sent = chat.clone();
    player.encrypt.apply(&mut sent);
    let mut first = BytesMut::from(&sent[..2]);
    up.process_owned(&mut first).unwrap();
    assert!(first.is_empty() && up.held.len() == 2, "the head is held back");
    let mut second = BytesMut::from(&sent[2..]);
    up.process_owned(&mut second).unwrap();
    assert_eq!(&second[..], &chat[..], "the held head is not decrypted a second time");
}
