//! Carriage v2 compression (`moonbridge.v2.zstd`, docs/carriage.md "Compression") on live sockets: what the
//! proxy selects, byte-exact streams both ways through compressed messages, the decompression bomb (close
//! 1009 for that player only), and data that is not zstd (1002). The resume cut test runs compressed too
//! (tests/tests/resume.rs).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use moonbridge_protocol::ws::compress::{Compressor, Decompressor, SUBPROTOCOL_V2_ZSTD};
use moonbridge_proxy::config::Transport;
use testbed::{hs_ls, login_backend, ws_offering, ws_proxy, Message, RawBackend, STEP};
use tokio::time::timeout;

type Ws = testbed::RawWs;

/// A raw `moonbridge.v2.zstd` player: its own zstd streams, as the client library keeps them.
struct Player {
    ws: Ws,
    deflate: Compressor,
    inflate: Decompressor,
    /// Stream bytes received (inflated).
    received: Vec<u8>,
}

impl Player {
    async fn connect(addr: SocketAddr) -> Self {
        let (ws, selected) = ws_offering(addr, "moonbridge.v2.zstd, moonbridge.v2, moonbridge.v1").await;
        assert_eq!(selected.as_deref(), Some(SUBPROTOCOL_V2_ZSTD));
        Self { ws, deflate: Compressor::new(1).unwrap(), inflate: Decompressor::new().unwrap(), received: Vec::new() }
    }

    /// Sends `data` as one compressed message; returns its size on the wire.
    async fn send(&mut self, data: &[u8]) -> usize {
        let mut wire = Vec::new();
        self.deflate.compress(data, &mut wire).unwrap();
        let n = wire.len();
        self.ws.send(Message::Binary(wire.into())).await.unwrap();
        n
    }

    /// Receives until `n` stream bytes have arrived (control messages skipped).
    async fn receive(&mut self, n: usize) {
        while self.received.len() < n {
            match timeout(STEP, self.ws.next()).await.expect("a message in time").unwrap().unwrap() {
                Message::Binary(b) => {
                    let mut out = Vec::new();
                    self.inflate.queue(&b);
                    while self.inflate.has_output() {
                        self.inflate.inflate(&mut out, 1 << 20, 1 << 24).unwrap();
                    }
                    self.inflate.end_message();
                    self.received.extend_from_slice(&out);
                }
                Message::Text(t) => assert!(t.starts_with("session ") || t.starts_with("ack "), "{t}"),
                other => panic!("unexpected {other:?}"),
            }
        }
    }

    /// Waits for the proxy's Close and returns its code.
    async fn close_code(&mut self) -> u16 {
        loop {
            match timeout(STEP, self.ws.next()).await.expect("a Close in time") {
                Some(Ok(Message::Close(Some(f)))) => return u16::from(f.code),
                Some(Ok(_)) => {}
                other => panic!("no Close: {other:?}"),
            }
        }
    }
}

/// The proxy selects the compressed carriage when offered (and only then), streams are byte-exact both ways
/// through compressed messages, and a repeated tick crosses the wire as a few bytes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compressed_streams_are_byte_exact_both_ways() {
    let backend = login_backend().await;
    let p = ws_proxy(backend.addr, "").await;
    let addr = p.addr(Transport::Ws);
    let mut player = Player::connect(addr).await;
    player.send(&hs_ls()).await;
    let login = testbed::login_success("Steve");
    player.receive(login.len()).await;
    assert_eq!(player.received, login);
    // Up: a 12 KB tick twice; the second is a back-reference to the first (inside the 32 KiB window).
    let mut x = 0x2545_F491_4F6C_DD1Du64;
    let tick: Vec<u8> = (0..12_000)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            (x % 16) as u8 // 4 bits of entropy per byte: compressible alone, and the repeat is a back-reference
        })
        .collect();
    let first = player.send(&tick).await;
    let second = player.send(&tick).await;
    assert!(second * 20 < first, "the repeated tick is {second} bytes on the wire, the first {first}");
    let got = backend.wait_received(0, hs_ls().len() + 2 * tick.len(), STEP).await;
    assert_eq!(&got[hs_ls().len()..], [tick.clone(), tick.clone()].concat(), "the backend gets the exact bytes");
    // Down: 1 MB from the backend arrives intact through compressed messages.
    let big: Vec<u8> = (0..1_000_000u32).map(|i| (i % 251) as u8 ^ (i >> 12) as u8).collect();
    backend.send(0, &big).await;
    player.receive(login.len() + big.len()).await;
    assert_eq!(&player.received[login.len()..], &big[..]);
    // Plain v2 and v1 offers still get what they asked for.
    let (_ws, selected) = ws_offering(addr, "moonbridge.v2, moonbridge.v1").await;
    assert_eq!(selected.as_deref(), Some("moonbridge.v2"));
    let (_ws, selected) = ws_offering(addr, "moonbridge.v1").await;
    assert_eq!(selected.as_deref(), Some("moonbridge.v1"));
    p.shutdown().await;
}

/// With `[compression] enabled = false` (or resume off) the proxy picks plain v2 (or v1) from the same offer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn compression_off_or_resume_off_selects_an_uncompressed_carriage() {
    let backend = login_backend().await;
    let all = "moonbridge.v2.zstd, moonbridge.v2, moonbridge.v1";
    let p = ws_proxy(backend.addr, "[compression]\nenabled = false\n").await;
    let (_ws, selected) = ws_offering(p.addr(Transport::Ws), all).await;
    assert_eq!(selected.as_deref(), Some("moonbridge.v2"));
    p.shutdown().await;
    let p = ws_proxy(backend.addr, "[limits]\nresume_window_seconds = 0\n").await;
    let (_ws, selected) = ws_offering(p.addr(Transport::Ws), all).await;
    assert_eq!(selected.as_deref(), Some("moonbridge.v1"));
    p.shutdown().await;
}

/// A decompression bomb: a message of about 32 kB (4 bytes per 8 KiB block of zeros) that inflates to 64 MiB. The proxy closes that
/// player with 1009 once the message passes `max_ws_message_bytes` (4 MiB here), having passed on at most that
/// much; a second player on the same proxy goes on undisturbed. Data that is not zstd gets 1002.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_decompression_bomb_closes_only_that_player_with_1009() {
    let backend =
        RawBackend::start(testbed::RawBehaviour::ReplyAfter { after: 1, reply: testbed::login_success("Steve") }).await;
    let p = ws_proxy(backend.addr, "[limits]\nmax_ws_message_bytes = 4194304\n").await;
    let addr = p.addr(Transport::Ws);
    let mut bomber = Player::connect(addr).await;
    let mut bystander = Player::connect(addr).await;
    for player in [&mut bomber, &mut bystander] {
        player.send(&hs_ls()).await;
        player.receive(1).await;
    }
    let wire = bomber.send(&vec![0u8; 64 << 20]).await;
    assert!(wire < 40_000, "the bomb is {wire} bytes on the wire (a ratio over 1,600)");
    assert_eq!(bomber.close_code().await, 1009);
    // The bomber's backend connection got at most one message's worth before the close.
    let bomber_backend = backend.wait_received(0, hs_ls().len(), STEP).await;
    assert!(bomber_backend.len() <= hs_ls().len() + (4 << 20), "{}", bomber_backend.len());
    let all: usize = backend.conns.lock().unwrap()[0].lock().unwrap().received.len();
    assert!(all <= hs_ls().len() + (4 << 20), "nothing past the limit reached the backend: {all}");
    // The bystander still works, both ways.
    bystander.send(b"\x03\x01\x01x").await;
    let got = backend.wait_received(1, hs_ls().len() + 4, STEP).await;
    assert_eq!(&got[hs_ls().len()..], b"\x03\x01\x01x");
    // Not zstd at all: 1002.
    let mut garbage = Player::connect(addr).await;
    garbage.ws.send(Message::Binary(b"this is not a zstd frame".to_vec().into())).await.unwrap();
    assert_eq!(garbage.close_code().await, 1002);
    timeout(Duration::from_secs(5), bystander.send(b"\x03\x01\x01y")).await.unwrap();
    let got = backend.wait_received(1, hs_ls().len() + 8, STEP).await;
    assert_eq!(&got[hs_ls().len() + 4..], b"\x03\x01\x01y");
    p.shutdown().await;
}

/// Three messages in one write: a small one, one that inflates to just under a relay batch (256 KiB) so the
/// proxy's decode turn stops at its limit right after it, and a small one behind. All reach the backend at once:
/// the proxy decodes again when a turn stopped at its limit instead of waiting for the player's next bytes (up
/// to a 30 s keepalive).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn frames_behind_a_large_inflation_are_not_held_back() {
    let backend = login_backend().await;
    let p = ws_proxy(backend.addr, "").await;
    let mut player = Player::connect(p.addr(Transport::Ws)).await;
    player.send(&hs_ls()).await;
    player.receive(1).await;
    let messages: [Vec<u8>; 3] = [b"\x03\x01\x01a".to_vec(), vec![7u8; 256 * 1024 - 2], b"\x03\x01\x01z".to_vec()];
    for m in &messages {
        let mut wire = Vec::new();
        player.deflate.compress(m, &mut wire).unwrap();
        player.ws.feed(Message::Binary(wire.into())).await.unwrap();
    }
    player.ws.flush().await.unwrap();
    let want = hs_ls().len() + messages.iter().map(Vec::len).sum::<usize>();
    let got = backend.wait_received(0, want, Duration::from_secs(5)).await;
    assert_eq!(got.len(), want);
    assert_eq!(&got[want - 4..], b"\x03\x01\x01z");
    p.shutdown().await;
}

/// Reads messages until a Binary one arrives; returns its payload (control messages skipped).
async fn next_binary(ws: &mut Ws) -> Vec<u8> {
    loop {
        match timeout(STEP, ws.next()).await.expect("a message in time").unwrap().unwrap() {
            Message::Binary(b) => return b.to_vec(),
            Message::Text(_) | Message::Ping(_) | Message::Pong(_) => {}
            other => panic!("unexpected {other:?}"),
        }
    }
}

/// The quiet-spell rule (docs/carriage.md, "Quiet spells", "Small messages while quiet") against a raw player
/// that keeps one context per direction, as a peer without the rule does: a small message while the proxy
/// holds no context comes as a stored frame; after a large one and a quiet keepalive tick the proxy ends its
/// zstd frame with a 3-byte message of no stream bytes, and what it sends next (a new frame) decodes with the
/// same context; a player that ends its own frame has its next message (a new frame) decoded byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_quiet_direction_ends_its_zstd_frame_and_the_next_message_starts_a_new_one() {
    let backend = login_backend().await;
    let p = ws_proxy(backend.addr, "").await;
    let mut player = Player::connect(p.addr(Transport::Ws)).await;
    player.send(&hs_ls()).await;
    let login = testbed::login_success("Steve");
    // Login Success is under 256 bytes: a stored frame (9 bytes more), made without a context.
    let first = next_binary(&mut player.ws).await;
    assert_eq!((first.len(), &first[..4]), (login.len() + 9, &[0x28, 0xb5, 0x2f, 0xfd][..]));
    let mut out = Vec::new();
    player.inflate.queue(&first);
    while player.inflate.has_output() {
        player.inflate.inflate(&mut out, 1 << 20, 1 << 24).unwrap();
    }
    player.inflate.end_message();
    assert_eq!(out, login);
    player.received = out;
    // A large message makes the proxy's context.
    let big: Vec<u8> = (0..5000u32).flat_map(|i| (i % 53).to_le_bytes()).collect();
    backend.send(0, &big).await;
    player.receive(login.len() + big.len()).await;

    // Quiet: within two v2 keepalive ticks (2 s each) the proxy's frame end arrives, with no stream bytes.
    let end = next_binary(&mut player.ws).await;
    assert_eq!(end.len(), 3, "an empty last block: {end:?}");
    let mut out = Vec::new();
    player.inflate.queue(&end);
    while player.inflate.has_output() {
        player.inflate.inflate(&mut out, 1 << 20, 1 << 24).unwrap();
    }
    player.inflate.end_message();
    assert!(out.is_empty() && player.inflate.at_frame_end(), "the frame ended, nothing inflated");

    // The proxy's next message is a new frame, decoded by the same context.
    let later: Vec<u8> = (0..5000u32).flat_map(|i| (i % 61).to_le_bytes()).collect();
    backend.send(0, &later).await;
    let before = player.received.len();
    player.receive(before + later.len()).await;
    assert_eq!(&player.received[before..], &later[..]);

    // The player ends its frame, then sends a new one: the backend gets every byte once, in order.
    let mut fin = Vec::new();
    player.deflate.end_frame(&mut fin).unwrap();
    player.ws.send(Message::Binary(fin.into())).await.unwrap();
    let tick: Vec<u8> = (0..3000u32).flat_map(|i| (i % 13).to_be_bytes()).collect();
    player.send(&tick).await;
    let got = backend.wait_received(0, hs_ls().len() + tick.len(), STEP).await;
    assert_eq!(&got[hs_ls().len()..], &tick[..]);
    p.shutdown().await;
}

/// The client library keeps the same rule: after a large first tick it goes quiet and ends its zstd frame (the
/// proxy counts a message from the player that carries no bytes), and it reads the proxy's frame end after a
/// large message (a message that carries no bytes); then both directions start new frames byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_library_ends_its_zstd_frame_when_quiet() {
    let backend = login_backend().await;
    let p = ws_proxy(backend.addr, "[metrics]\nbind = \"127.0.0.1:0\"\n").await;
    let url = format!("ws://{}/mc", p.addr(Transport::Ws));
    // The first tick: the login and 900 more bytes, over the 255 bytes a stored frame takes.
    let first_tick = [hs_ls(), vec![7u8; 900]].concat();
    let tick = first_tick.clone();
    let conn = tokio::task::spawn_blocking(move || {
        let conn = moonbridge_client::Connection::connect(&url, moonbridge_client::Options::default()).unwrap();
        conn.send(&tick).unwrap();
        conn.end_tick().unwrap();
        conn
    })
    .await
    .unwrap();
    backend.wait_received(0, first_tick.len(), STEP).await;
    let big: Vec<u8> = (0..5000u32).flat_map(|i| (i % 31).to_le_bytes()).collect();
    backend.send(0, &big).await;
    let from_player = "moonbridge_ws_messages_total{direction=\"from_player\"}";
    let deadline = std::time::Instant::now() + STEP;
    // One message with the first tick, then one with the client's frame end.
    while p.metric(from_player).await != Some(2.0) {
        assert!(
            std::time::Instant::now() < deadline,
            "no frame end from the client: {:?}",
            p.metric(from_player).await
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let login = [testbed::login_success("Steve"), big].concat();
    let (conn, stats) = tokio::task::spawn_blocking(move || {
        let deadline = std::time::Instant::now() + STEP;
        // The login (a stored frame), the large message, then the proxy's frame end (a message with no bytes).
        while conn.stats().messages_in < 3 {
            assert!(std::time::Instant::now() < deadline, "no frame end from the proxy: {:?}", conn.stats());
            std::thread::sleep(Duration::from_millis(50));
        }
        let stats = conn.stats();
        conn.send(&[7u8; 900]).unwrap();
        conn.end_tick().unwrap();
        (conn, stats)
    })
    .await
    .unwrap();
    assert_eq!(stats.bytes_in, login.len() as u64, "the frame end carries no bytes");
    let got = backend.wait_received(0, first_tick.len() + 900, STEP).await;
    assert_eq!(&got[first_tick.len()..], &[7u8; 900][..]);
    let later: Vec<u8> = (0..4000u32).flat_map(|i| (i % 29).to_le_bytes()).collect();
    backend.send(0, &later).await;
    let expected = [login.clone(), later].concat();
    let received = tokio::task::spawn_blocking(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 16];
        while got.len() < expected.len() {
            let n = conn.recv(&mut buf, Some(STEP)).unwrap();
            assert!(n > 0, "bytes in time");
            got.extend_from_slice(&buf[..n]);
        }
        conn.close();
        (got, expected)
    })
    .await
    .unwrap();
    assert_eq!(received.0, received.1);
    p.shutdown().await;
}
