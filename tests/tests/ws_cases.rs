//! WebSocket listeners: the upgrade, carriage rules and close codes, keepalive through an idle-cutting
//! intermediary, the player's real address, forwarding to backends, and field cases C4 (from 203.0.113.7),
//! C13, C15, C17 and C19.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use moonbridge_protocol::forwarding::offline_uuid;
use moonbridge_protocol::packets::{Packet, PlayDisconnect, PluginMessage};
use moonbridge_protocol::ws as carriage;
use moonbridge_proxy::config::Transport;
use testbed::{
    backend_section, forwarded_fields, frames, hs_ls, login_backend, login_disconnect_reason, login_success,
    masked_frame, raw_http, raw_upgrade, read_close, read_server_frame, read_to_close, tcp_config, ws_close_code,
    ws_connect, ws_listener, ws_read_bytes, IdleCutter, Io, KeyType, Message, Proxy, RawBackend, RawBehaviour,
    TestCert, WebSocketStream, STEP,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

fn ws_url(proxy: &Proxy) -> (SocketAddr, String) {
    let addr = proxy.addr(Transport::Ws);
    (addr, format!("ws://127.0.0.1:{}/mc", addr.port()))
}

/// Opens a WebSocket, sends HS + LS as one message and waits for Login Success.
async fn ws_login(addr: SocketAddr, url: &str, headers: &[(&str, &str)]) -> WebSocketStream<Box<dyn Io>> {
    let (mut ws, _) = ws_connect(addr, url, headers, None).await.expect("upgrade accepted");
    ws.send(Message::Binary(hs_ls().into())).await.unwrap();
    let expected = login_success("Steve");
    let (got, _) = ws_read_bytes(&mut ws, expected.len(), STEP).await;
    assert_eq!(got, expected);
    ws
}

// ----------------------------------------------------------------------------------------------------------
// Upgrade
// ----------------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_statuses_and_subprotocol() {
    let backend = login_backend().await;
    let proxy = Proxy::start(&(ws_listener("") + &backend_section(backend.addr, ""))).await;
    let (addr, url) = ws_url(&proxy);

    let up = "Upgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
    let r = raw_http(addr, &format!("GET /other HTTP/1.1\r\nHost: x\r\n{up}Sec-WebSocket-Version: 13\r\n\r\n")).await;
    assert!(r.starts_with("HTTP/1.1 404 "), "{r}");
    let r = raw_http(addr, "GET /mc HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(r.starts_with("HTTP/1.1 426 "), "{r}");
    assert!(r.contains("Upgrade: websocket"), "{r}");
    let r = raw_http(addr, &format!("GET /mc HTTP/1.1\r\nHost: x\r\n{up}Sec-WebSocket-Version: 8\r\n\r\n")).await;
    assert!(r.starts_with("HTTP/1.1 426 ") && r.contains("Sec-WebSocket-Version: 13"), "{r}");
    let r = raw_http(addr, &format!("POST /mc HTTP/1.1\r\nHost: x\r\n{up}Sec-WebSocket-Version: 13\r\n\r\n")).await;
    assert!(r.starts_with("HTTP/1.1 405 "), "{r}");
    let r = raw_http(
        addr,
        "GET /mc HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Version: 13\r\n\r\n",
    )
    .await;
    assert!(r.starts_with("HTTP/1.1 400 "), "{r}");
    let huge = format!("GET /mc HTTP/1.1\r\nHost: x\r\nX-Pad: {}\r\n\r\n", "a".repeat(10_000));
    let r = raw_http(addr, &huge).await;
    assert!(r.starts_with("HTTP/1.1 431 "), "{r}");

    // The subprotocol is echoed when offered, absent otherwise.
    let (_ws, resp) = ws_connect(addr, &url, &[("Sec-WebSocket-Protocol", "moonbridge.v1")], None).await.unwrap();
    assert_eq!(resp.headers().get("sec-websocket-protocol").unwrap(), "moonbridge.v1");
    let (_ws, resp) = ws_connect(addr, &url, &[], None).await.unwrap();
    assert!(resp.headers().get("sec-websocket-protocol").is_none());
    // A query string does not change the path.
    let (_ws, _) = ws_connect(addr, &format!("{url}?token=1"), &[], None).await.unwrap();
    proxy.shutdown().await;
}

// ----------------------------------------------------------------------------------------------------------
// Raw frames (C15, C17)
// ----------------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c15_unmasked_client_frame_gets_close_1002() {
    let backend = login_backend().await;
    let proxy = Proxy::start(&(ws_listener("") + &backend_section(backend.addr, ""))).await;
    let mut s = raw_upgrade(proxy.addr(Transport::Ws)).await;
    s.write_all(&[0x82, 0x08, 0x07, 0x00, 0x05, 0x53, 0x74, 0x65, 0x76, 0x65]).await.unwrap();
    assert_eq!(read_close(&mut s).await, carriage::CLOSE_PROTOCOL_ERROR);
    let (_, closed) = read_to_close(&mut s, STEP).await;
    assert!(closed);
    assert_eq!(backend.accepted(), 0);
    proxy.shutdown().await;
}

/// Issue 33: a WebSocket that upgrades and then sends nothing is closed at the handshake deadline with 1008
/// Policy Violation (a limit, not a protocol error): over carriage v1, where the deadline cuts the Minecraft
/// handshake, and over carriage v2, where it cuts the wait for the first message (resume or not), just before
/// the deadline.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_handshake_deadline_closes_with_1008() {
    let backend = login_backend().await;
    let proxy = Proxy::start(
        &(ws_listener("") + &backend_section(backend.addr, "") + "[limits]\nhandshake_timeout_seconds = 1\n"),
    )
    .await;
    let addr = proxy.addr(Transport::Ws);
    let mut v1 = raw_upgrade(addr).await;
    let mut v2 = testbed::raw_upgrade_v2(addr, "/mc").await;
    for (name, s) in [("v1", &mut v1), ("v2", &mut v2)] {
        assert_eq!(read_close(s).await, carriage::CLOSE_POLICY_VIOLATION, "{name}");
        let (_, closed) = read_to_close(s, STEP).await;
        assert!(closed, "{name}");
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c17_over_large_messages_are_refused_before_buffering() {
    let backend = login_backend().await;
    let limit = 2_097_154usize; // the smallest allowed limit: one 2 MiB frame plus its prefix
    let proxy = Proxy::start(
        &(ws_listener("")
            + &backend_section(backend.addr, "")
            + &format!("[limits]\nmax_ws_message_bytes = {limit}\n")),
    )
    .await;
    let addr = proxy.addr(Transport::Ws);
    let mask = [0x11, 0x22, 0x33, 0x44];

    // A 20 MiB message: the proxy answers 1009 after seeing the frame header, while we are still sending.
    let mut s = raw_upgrade(addr).await;
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&(20u64 * 1024 * 1024).to_be_bytes());
    header.extend_from_slice(&mask);
    s.write_all(&header).await.unwrap();
    s.write_all(&vec![0u8; 64 * 1024]).await.unwrap();
    assert_eq!(read_close(&mut s).await, carriage::CLOSE_MESSAGE_TOO_BIG);

    // A header declaring 2^63 - 1 bytes.
    let mut s = raw_upgrade(addr).await;
    let mut f = vec![0x82, 0xff, 0x7f, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff];
    f.extend_from_slice(&mask);
    s.write_all(&f).await.unwrap();
    assert_eq!(read_close(&mut s).await, carriage::CLOSE_MESSAGE_TOO_BIG);

    // A message of exactly the limit is delivered, byte for byte.
    let mut s = raw_upgrade(addr).await;
    s.write_all(&masked_frame(0x2, &hs_ls(), mask)).await.unwrap();
    let (op, payload) = read_server_frame(&mut s).await;
    assert_eq!((op, payload), (0x2, login_success("Steve")));
    let big: Vec<u8> = (0..limit).map(|i| (i * 7 % 251) as u8).collect();
    s.write_all(&masked_frame(0x2, &big, mask)).await.unwrap();
    let got = backend.wait_received(0, hs_ls().len() + limit, Duration::from_secs(30)).await;
    assert_eq!(&got[hs_ls().len()..], &big[..]);
    // One byte more is refused.
    s.write_all(&masked_frame(0x2, &vec![0u8; limit + 1], mask)).await.unwrap_or(());
    assert_eq!(read_close(&mut s).await, carriage::CLOSE_MESSAGE_TOO_BIG);
    proxy.shutdown().await;
}

// ----------------------------------------------------------------------------------------------------------
// Carriage and close codes
// ----------------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn each_backend_read_is_one_message_and_each_message_one_backend_write() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = listener.local_addr().unwrap();
    let proxy = Proxy::start(&(ws_listener("") + &backend_section(backend_addr, ""))).await;
    let (addr, url) = ws_url(&proxy);
    let backend = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; hs_ls().len()];
        s.read_exact(&mut buf).await.unwrap();
        // Login Success and three small frames in one write: one backend read batch.
        let mut batch = login_success("Steve");
        for i in 0..3u8 {
            batch.extend_from_slice(&[0x02, 0x00, i]);
        }
        s.write_all(&batch).await.unwrap();
        let mut got = vec![0u8; 9];
        s.read_exact(&mut got).await.unwrap();
        got
    });
    let (mut ws, _) = ws_connect(addr, &url, &[], None).await.unwrap();
    ws.send(Message::Binary(hs_ls().into())).await.unwrap();
    let (got, messages) = ws_read_bytes(&mut ws, login_success("Steve").len() + 9, STEP).await;
    assert_eq!(messages, 1, "one backend read batch = one WebSocket message");
    assert_eq!(&got[got.len() - 9..], &[0x02, 0x00, 0, 0x02, 0x00, 1, 0x02, 0x00, 2]);
    // Three frames in one client message arrive as one message at the proxy.
    let before = proxy.stats.stats().ws_messages_in;
    ws.send(Message::Binary(vec![0x02, 0x00, 7, 0x02, 0x00, 8, 0x02, 0x00, 9].into())).await.unwrap();
    let got = timeout(STEP, backend).await.unwrap().unwrap();
    assert_eq!(got, [0x02, 0x00, 7, 0x02, 0x00, 8, 0x02, 0x00, 9]);
    assert_eq!(proxy.stats.stats().ws_messages_in - before, 1);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_codes_follow_the_carriage_rules() {
    // Backend closes: 1000, then the TCP close.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = listener.local_addr().unwrap();
    let proxy = Proxy::start(&(ws_listener("") + &backend_section(backend_addr, ""))).await;
    let (addr, url) = ws_url(&proxy);
    let b = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; hs_ls().len()];
        s.read_exact(&mut buf).await.unwrap();
        s.write_all(&login_success("Steve")).await.unwrap();
        // then FIN
        listener
    });
    let mut ws = ws_login(addr, &url, &[]).await;
    let listener = timeout(STEP, b).await.unwrap().unwrap();
    assert_eq!(ws_close_code(&mut ws, STEP).await, Some(carriage::CLOSE_NORMAL));
    assert!(timeout(STEP, ws.next()).await.unwrap().is_none(), "TCP closed after the close frame");

    // Player closes: the backend sees FIN.
    let b = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; hs_ls().len()];
        s.read_exact(&mut buf).await.unwrap();
        s.write_all(&login_success("Steve")).await.unwrap();
        let mut rest = Vec::new();
        timeout(STEP, s.read_to_end(&mut rest)).await.expect("backend sees EOF").unwrap();
        rest
    });
    let mut ws = ws_login(addr, &url, &[]).await;
    ws.send(Message::Binary(vec![0x02, 0x00, 0x01].into())).await.unwrap();
    ws.close(None).await.unwrap();
    assert_eq!(timeout(STEP, b).await.unwrap().unwrap(), [0x02, 0x00, 0x01]);

    // A text message: 1003.
    let backend = login_backend().await;
    let proxy2 = Proxy::start(&(ws_listener("") + &backend_section(backend.addr, ""))).await;
    let (addr2, url2) = ws_url(&proxy2);
    let mut ws = ws_login(addr2, &url2, &[]).await;
    ws.send(Message::Text("hello".into())).await.unwrap();
    assert_eq!(ws_close_code(&mut ws, STEP).await, Some(carriage::CLOSE_UNSUPPORTED_DATA));
    backend.wait_closed(0, STEP).await;
    // A text message before the handshake: 1003 too.
    let (mut ws, _) = ws_connect(addr2, &url2, &[], None).await.unwrap();
    ws.send(Message::Text("hello".into())).await.unwrap();
    assert_eq!(ws_close_code(&mut ws, STEP).await, Some(carriage::CLOSE_UNSUPPORTED_DATA));

    // Shutdown: a Play Disconnect message, then 1001.
    let mut ws = ws_login(addr2, &url2, &[]).await;
    let stop = tokio::spawn(proxy2.shutdown());
    let msg = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
    let Message::Binary(b) = msg else { panic!("{msg:?}") };
    assert_eq!(frames(&b)[0].0, PlayDisconnect::ID);
    assert_eq!(ws_close_code(&mut ws, STEP).await, Some(carriage::CLOSE_GOING_AWAY));
    timeout(STEP, stop).await.unwrap().unwrap();
    proxy.shutdown().await;

    // Backend unreachable: a Login Disconnect message, then 1011 with a reason.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let proxy3 = Proxy::start(&(ws_listener("") + &backend_section(dead, ""))).await;
    let (addr3, url3) = ws_url(&proxy3);
    let (mut ws, _) = ws_connect(addr3, &url3, &[], None).await.unwrap();
    ws.send(Message::Binary(hs_ls().into())).await.unwrap();
    let msg = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
    let Message::Binary(b) = msg else { panic!("{msg:?}") };
    assert_eq!(login_disconnect_reason(&b).as_deref(), Some("Server survival is unreachable"));
    let msg = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap();
    let Message::Close(Some(f)) = msg else { panic!("{msg:?}") };
    assert_eq!(u16::from(f.code), carriage::CLOSE_INTERNAL_ERROR);
    assert!(!f.reason.is_empty());
    proxy3.shutdown().await;
}

// ----------------------------------------------------------------------------------------------------------
// Keepalive (C13, C19)
// ----------------------------------------------------------------------------------------------------------

/// Polls the WebSocket (which answers Pings) for `d`, counting Pings; fails on anything but Pings.
async fn idle_reading<S: Io>(ws: &mut WebSocketStream<S>, d: Duration) -> usize {
    let mut pings = 0;
    let _ = timeout(d, async {
        while let Some(m) = ws.next().await {
            match m {
                Ok(Message::Ping(_)) => pings += 1,
                other => panic!("unexpected during the stall: {other:?}"),
            }
        }
        panic!("connection ended during the stall");
    })
    .await;
    pings
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c19_pings_keep_a_session_alive_through_an_idle_cutting_intermediary() {
    // Scaled down from the case: interval 1 s, the intermediary cuts after 3 s idle, a 10 s stall.
    let backend = login_backend().await;
    let proxy = Proxy::start(&(ws_listener("ping_interval_seconds = 1") + &backend_section(backend.addr, ""))).await;
    let cutter = IdleCutter::start(proxy.addr(Transport::Ws), Duration::from_secs(3)).await;
    let url = format!("ws://127.0.0.1:{}/mc", cutter.addr.port());
    let mut ws = ws_login(cutter.addr, &url, &[]).await;
    let pings = idle_reading(&mut ws, Duration::from_secs(10)).await;
    assert!((8..=11).contains(&pings), "one ping per second of silence, got {pings}");
    assert_eq!(cutter.cuts.load(std::sync::atomic::Ordering::SeqCst), 0);
    // Still alive end to end.
    ws.send(Message::Binary(vec![0x02, 0x00, 0x05].into())).await.unwrap();
    let got = backend.wait_received(0, hs_ls().len() + 3, STEP).await;
    assert_eq!(&got[hs_ls().len()..], &[0x02, 0x00, 0x05]);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c19_without_pings_the_intermediary_cuts_the_session() {
    let backend = login_backend().await;
    let proxy = Proxy::start(&(ws_listener("ping_interval_seconds = 0") + &backend_section(backend.addr, ""))).await;
    let cutter = IdleCutter::start(proxy.addr(Transport::Ws), Duration::from_secs(3)).await;
    let url = format!("ws://127.0.0.1:{}/mc", cutter.addr.port());
    let mut ws = ws_login(cutter.addr, &url, &[]).await;
    let started = Instant::now();
    let end = timeout(Duration::from_secs(10), ws.next()).await.expect("cut within 10 s");
    assert!(!matches!(end, Some(Ok(Message::Binary(_)))), "{end:?}");
    assert!(started.elapsed() >= Duration::from_millis(2500), "cut by the intermediary's idle timer");
    assert_eq!(cutter.cuts.load(std::sync::atomic::Ordering::SeqCst), 1);
    // The proxy notices and releases the backend.
    backend.wait_closed(0, STEP).await;
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c13_long_modded_login_survives_a_silent_backend() {
    // The backend answers the login, sends several MB of FML|HS plugin messages, then goes silent for 10 s
    // (scaled from 60 s, with a 1 s ping interval and a 3 s idle cut); the proxy's own login deadline (2 s)
    // must not apply once the backend has answered.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = listener.local_addr().unwrap();
    let proxy = Proxy::start(
        &(ws_listener("ping_interval_seconds = 1")
            + &backend_section(backend_addr, "")
            + "[limits]\nlogin_timeout_seconds = 2\n"),
    )
    .await;
    let mut burst = login_success("Steve");
    for i in 0..200u32 {
        let p = PluginMessage { channel: "FML|HS".into(), data: vec![(i % 256) as u8; 16_000] };
        let mut body = Vec::new();
        p.encode_fields(&mut body).unwrap();
        moonbridge_protocol::frame::encode_frame(&mut burst, PluginMessage::CLIENTBOUND_ID, &body).unwrap();
    }
    let total = burst.len();
    let backend = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; hs_ls().len()];
        s.read_exact(&mut buf).await.unwrap();
        s.write_all(&burst).await.unwrap();
        tokio::time::sleep(Duration::from_secs(10)).await; // the silence under test
        s.write_all(&[0x02, 0x00, 0x42]).await.unwrap();
        let mut ack = [0u8; 3];
        s.read_exact(&mut ack).await.unwrap();
        ack
    });
    let cutter = IdleCutter::start(proxy.addr(Transport::Ws), Duration::from_secs(3)).await;
    let url = format!("ws://127.0.0.1:{}/mc", cutter.addr.port());
    let (mut ws, _) = ws_connect(cutter.addr, &url, &[], None).await.unwrap();
    ws.send(Message::Binary(hs_ls().into())).await.unwrap();
    let (got, _) = ws_read_bytes(&mut ws, total, STEP).await;
    assert_eq!(got.len(), total);
    assert_eq!(frames(&got).len(), 201);
    // The client "processes" for 10 s while pings keep flowing.
    let mut pings = 0;
    let last = timeout(Duration::from_secs(15), async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Ping(_))) => pings += 1,
                Some(Ok(Message::Binary(b))) => return b,
                other => panic!("{other:?}"),
            }
        }
    })
    .await
    .expect("the backend's next packet arrives");
    assert_eq!(&last[..], &[0x02, 0x00, 0x42]);
    assert!(pings >= 7, "pings during the silence: {pings}");
    ws.send(Message::Binary(vec![0x02, 0x00, 0x43].into())).await.unwrap();
    assert_eq!(timeout(STEP, backend).await.unwrap().unwrap(), [0x02, 0x00, 0x43]);
    assert_eq!(cutter.cuts.load(std::sync::atomic::Ordering::SeqCst), 0);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_peer_silent_for_three_intervals_is_dropped_and_its_backend_released() {
    let backend = login_backend().await;
    let proxy = Proxy::start(&(ws_listener("ping_interval_seconds = 1") + &backend_section(backend.addr, ""))).await;
    let (addr, url) = ws_url(&proxy);
    let ws = ws_login(addr, &url, &[]).await;
    // Never read again: no Pong, nothing at all.
    let started = Instant::now();
    backend.wait_closed(0, Duration::from_secs(10)).await;
    let took = started.elapsed();
    assert!(took >= Duration::from_millis(2500) && took < Duration::from_secs(6), "dropped after {took:?}");
    proxy.wait_connections(0, STEP).await;
    drop(ws);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_ping_gets_an_immediate_pong() {
    let backend = login_backend().await;
    let proxy = Proxy::start(&(ws_listener("") + &backend_section(backend.addr, ""))).await;
    let (addr, url) = ws_url(&proxy);
    // Before the handshake and during the relay.
    let (mut ws, _) = ws_connect(addr, &url, &[], None).await.unwrap();
    for payload in [&b"early"[..], b"abc"] {
        if payload == b"abc" {
            ws.send(Message::Binary(hs_ls().into())).await.unwrap();
            let (got, _) = ws_read_bytes(&mut ws, login_success("Steve").len(), STEP).await;
            assert_eq!(got, login_success("Steve"));
        }
        let sent = Instant::now();
        ws.send(Message::Ping(payload.to_vec().into())).await.unwrap();
        let m = timeout(Duration::from_secs(2), ws.next()).await.expect("pong in time").unwrap().unwrap();
        assert_eq!(m, Message::Pong(payload.to_vec().into()));
        assert!(sent.elapsed() < Duration::from_millis(500));
    }
    proxy.shutdown().await;
}

// ----------------------------------------------------------------------------------------------------------
// Real IP and forwarding (C4 from 203.0.113.7)
// ----------------------------------------------------------------------------------------------------------

async fn bungee_proxy(listener_extra: &str) -> (Proxy, RawBackend) {
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let proxy = Proxy::start(
        &(ws_listener(listener_extra)
            + &backend_section(backend.addr, "forwarding = \"bungeecord\"")
            + "[auth]\nmode = \"offline\"\n[limits]\nlogin_timeout_seconds = 60\n"),
    )
    .await;
    (proxy, backend)
}

async fn ws_send_login(proxy: &Proxy, headers: &[(&str, &str)]) -> WebSocketStream<Box<dyn Io>> {
    let (addr, url) = ws_url(proxy);
    let (mut ws, _) = ws_connect(addr, &url, headers, None).await.unwrap();
    ws.send(Message::Binary(hs_ls().into())).await.unwrap();
    ws
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c4_from_203_0_113_7_through_a_trusted_cdn() {
    let (proxy, backend) =
        bungee_proxy("trusted_proxies = [\"127.0.0.1/32\"]\nreal_ip_header = \"CF-Connecting-IP\"").await;
    let _ws = ws_send_login(&proxy, &[("CF-Connecting-IP", "203.0.113.7")]).await;
    let fields = forwarded_fields(&backend.wait_frames(0, 2, STEP).await);
    assert_eq!(fields.len(), 4, "{fields:?}");
    assert_eq!(fields[0], "mc.example.com");
    assert_eq!(fields[1], "203.0.113.7");
    assert_eq!(fields[2], offline_uuid("Steve").simple().to_string());
    let props: serde_json::Value = serde_json::from_str(&fields[3]).unwrap();
    assert_eq!(props[0]["name"], "forgeClient");
    assert_eq!(props[1]["value"], "\u{1}FML\u{1}");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn spoofed_headers_from_untrusted_peers_are_ignored() {
    let (proxy, backend) = bungee_proxy("trusted_proxies = [\"10.0.0.0/8\"]").await;
    let _ws = ws_send_login(&proxy, &[("CF-Connecting-IP", "203.0.113.7"), ("X-Forwarded-For", "203.0.113.7")]).await;
    let fields = forwarded_fields(&backend.wait_frames(0, 2, STEP).await);
    assert_eq!(fields[1], "127.0.0.1", "the TCP peer, not the spoofed header");
    proxy.shutdown().await;

    // No trusted proxies at all: same.
    let (proxy, backend) = bungee_proxy("").await;
    let _ws = ws_send_login(&proxy, &[("CF-Connecting-IP", "203.0.113.7")]).await;
    assert_eq!(forwarded_fields(&backend.wait_frames(0, 2, STEP).await)[1], "127.0.0.1");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn x_forwarded_for_uses_the_rightmost_untrusted_hop() {
    let (proxy, backend) =
        bungee_proxy("trusted_proxies = [\"127.0.0.1/32\"]\nreal_ip_header = \"X-Forwarded-For\"").await;
    let _ws = ws_send_login(&proxy, &[("X-Forwarded-For", "6.6.6.6, 203.0.113.7")]).await;
    assert_eq!(forwarded_fields(&backend.wait_frames(0, 2, STEP).await)[1], "203.0.113.7");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_protocol_forwarding_sends_a_v2_header_first() {
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let proxy = Proxy::start(
        &(ws_listener("trusted_proxies = [\"127.0.0.1\"]")
            + &backend_section(backend.addr, "forwarding = \"proxy-protocol\"")
            + "[limits]\nlogin_timeout_seconds = 60\n"),
    )
    .await;
    let _ws = ws_send_login(&proxy, &[("CF-Connecting-IP", "203.0.113.7")]).await;
    let got = backend.wait_received(0, 28 + hs_ls().len(), STEP).await;
    let header = match ppp::HeaderResult::parse(&got) {
        ppp::HeaderResult::V2(Ok(h)) => h,
        other => panic!("{other:?}"),
    };
    let ppp::v2::Addresses::IPv4(a) = header.addresses else { panic!("{:?}", header.addresses) };
    assert_eq!(a.source_address.to_string(), "203.0.113.7");
    assert_eq!(&got[header.len()..], &hs_ls()[..], "then the unchanged handshake and Login Start");
    proxy.shutdown().await;

    // Through an untrusted peer the header names the TCP peer, not the claimed address.
    let proxy = Proxy::start(
        &(ws_listener("trusted_proxies = [\"10.0.0.0/8\"]")
            + &backend_section(backend.addr, "forwarding = \"proxy-protocol\"")
            + "[limits]\nlogin_timeout_seconds = 60\n"),
    )
    .await;
    let _ws = ws_send_login(&proxy, &[("CF-Connecting-IP", "203.0.113.7")]).await;
    let got = backend.wait_received(1, 28 + hs_ls().len(), STEP).await;
    let ppp::HeaderResult::V2(Ok(header)) = ppp::HeaderResult::parse(&got) else { panic!("no PROXY v2 header") };
    let ppp::v2::Addresses::IPv4(a) = header.addresses else { panic!("{:?}", header.addresses) };
    assert_eq!(a.source_address.to_string(), "127.0.0.1");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tcp_listener_with_proxy_protocol_reads_v1_and_v2_headers() {
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let proxy = Proxy::start(&tcp_config(
        backend.addr,
        "forwarding = \"bungeecord\"\n[auth]\nmode = \"offline\"\n[limits]\nlogin_timeout_seconds = 60\n",
    ))
    .await;
    // tcp_config has no proxy_protocol; start a second proxy with it.
    proxy.shutdown().await;
    let config = format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\nproxy_protocol = true\n\
         [[backend]]\nname = \"survival\"\naddress = \"{}\"\nforwarding = \"bungeecord\"\n\
         [auth]\nmode = \"offline\"\n[limits]\nlogin_timeout_seconds = 60\n",
        backend.addr
    );
    let proxy = Proxy::start(&config).await;
    let addr = proxy.addr(Transport::Tcp);

    let mut v1 = TcpStream::connect(addr).await.unwrap();
    v1.write_all(&[b"PROXY TCP4 203.0.113.7 192.0.2.1 4711 25565\r\n".as_slice(), &hs_ls()].concat()).await.unwrap();
    assert_eq!(forwarded_fields(&backend.wait_frames(0, 2, STEP).await)[1], "203.0.113.7");

    let client: SocketAddr = "198.51.100.23:4711".parse().unwrap();
    let dest: SocketAddr = "192.0.2.1:25565".parse().unwrap();
    let v2 = ppp::v2::Builder::with_addresses(
        ppp::v2::Version::Two | ppp::v2::Command::Proxy,
        ppp::v2::Protocol::Stream,
        (client, dest),
    )
    .build()
    .unwrap();
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[&v2[..], &hs_ls()].concat()).await.unwrap();
    assert_eq!(forwarded_fields(&backend.wait_frames(1, 2, STEP).await)[1], "198.51.100.23");

    // Without a header the connection is refused.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&hs_ls()).await.unwrap();
    let (got, closed) = read_to_close(&mut s, STEP).await;
    assert!(closed && got.is_empty());
    assert_eq!(backend.accepted(), 2);
    drop(v1);
    proxy.shutdown().await;

    // With trusted_proxies, other peers may not send a header at all.
    let config = config.replace("proxy_protocol = true", "proxy_protocol = true\ntrusted_proxies = [\"10.0.0.0/8\"]");
    let proxy = Proxy::start(&config).await;
    let mut s = TcpStream::connect(proxy.addr(Transport::Tcp)).await.unwrap();
    s.write_all(&[b"PROXY TCP4 203.0.113.7 192.0.2.1 4711 25565\r\n".as_slice(), &hs_ls()].concat()).await.unwrap();
    let (_, closed) = read_to_close(&mut s, STEP).await;
    assert!(closed);
    assert_eq!(backend.accepted(), 2);
    proxy.shutdown().await;
}

// ----------------------------------------------------------------------------------------------------------
// Handshake stage over TLS
// ----------------------------------------------------------------------------------------------------------

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn slow_tls_and_http_clients_fall_under_the_handshake_deadline_and_cap() {
    let cert = TestCert::generate("slowloris", KeyType::Ec).unwrap();
    let backend = login_backend().await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n{}\
         [limits]\nhandshake_timeout_seconds = 2\nmax_handshaking = 5\n",
        cert.cert.display(),
        cert.key.display(),
        backend_section(backend.addr, "")
    ))
    .await;
    let addr = proxy.addr(Transport::Wss);
    // Ten connections that never start TLS, and ten that finish TLS but never send the HTTP request.
    let mut idle = Vec::new();
    for _ in 0..10 {
        idle.push(Box::new(TcpStream::connect(addr).await.unwrap()) as Box<dyn Io>);
    }
    let config = testbed::tls_client_config(&cert.ca, &[&rustls::version::TLS13]);
    for _ in 0..10 {
        let tcp = TcpStream::connect(addr).await.unwrap();
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        // An error means this one was evicted while handshaking, which is also fine.
        if let Ok(tls) = tokio_rustls::TlsConnector::from(std::sync::Arc::clone(&config)).connect(name, tcp).await {
            idle.push(Box::new(tls));
        }
    }
    assert!(proxy.stats.stats().handshaking <= 5, "{:?}", proxy.stats.stats());
    // A real player meanwhile logs in at once.
    let started = Instant::now();
    let url = format!("wss://localhost:{}/mc", addr.port());
    let (mut ws, _) = ws_connect(addr, &url, &[], Some(&cert.ca)).await.unwrap();
    ws.send(Message::Binary(hs_ls().into())).await.unwrap();
    let (got, _) = ws_read_bytes(&mut ws, login_success("Steve").len(), STEP).await;
    assert_eq!(got, login_success("Steve"));
    assert!(started.elapsed() < Duration::from_secs(2));
    // Every idle connection is closed by the deadline.
    for mut s in idle {
        let mut b = [0u8; 64];
        let r = timeout(Duration::from_secs(5), async {
            loop {
                match s.read(&mut b).await {
                    Ok(0) | Err(_) => return,
                    Ok(_) => {}
                }
            }
        })
        .await;
        assert!(r.is_ok(), "slow client not cut");
    }
    proxy.wait_connections(1, STEP).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wss_handshake_carries_the_minecraft_session() {
    let cert = TestCert::generate("wss-min", KeyType::Rsa).unwrap();
    let backend = login_backend().await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n{}",
        cert.cert.display(),
        cert.key.display(),
        backend_section(backend.addr, "")
    ))
    .await;
    let addr = proxy.addr(Transport::Wss);
    let url = format!("wss://localhost:{}/mc", addr.port());
    let (mut ws, resp) =
        ws_connect(addr, &url, &[("Sec-WebSocket-Protocol", "moonbridge.v1")], Some(&cert.ca)).await.unwrap();
    assert_eq!(resp.headers().get("sec-websocket-protocol").unwrap(), "moonbridge.v1");
    ws.send(Message::Binary(hs_ls().into())).await.unwrap();
    let (got, _) = ws_read_bytes(&mut ws, login_success("Steve").len(), STEP).await;
    assert_eq!(got, login_success("Steve"));
    assert_eq!(backend.wait_received(0, hs_ls().len(), STEP).await, hs_ls());
    proxy.shutdown().await;
}
