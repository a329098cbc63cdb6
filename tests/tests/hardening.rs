//! Hardening of the player side on live sockets: the closing handshake in every stage (case C36), keepalive
//! Pings while the login stage waits, a huge first WebSocket message refused from its first bytes, and players
//! leaving during the login (case C35).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::time::{Duration, Instant};

use moonbridge_protocol::ws as carriage;
use moonbridge_proxy::config::Transport;
use testbed::{
    backend_section, hs_ls, login_backend, login_success, masked_frame, raw_upgrade, read_server_frame, read_to_close,
    tcp_config, ws_listener, Proxy, RawBackend, RawBehaviour, STEP,
};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

const MASK: [u8; 4] = [0x0f, 0x1e, 0x2d, 0x3c];

/// Reads server frames until a Close; answers nothing. Returns the Close payload, and asserts the TCP
/// connection ends after it (the Close always comes before the TCP close).
async fn close_then_eof(s: &mut TcpStream) -> Vec<u8> {
    let payload = loop {
        let (op, payload) = read_server_frame(s).await;
        if op == 0x8 {
            break payload;
        }
    };
    let (rest, closed) = read_to_close(s, STEP).await;
    assert!(closed, "the TCP connection ends after the Close");
    assert!(rest.is_empty(), "nothing after the Close: {rest:02x?}");
    payload
}

/// The Close bodies of case C36 and the code each must be answered with.
fn c36_closes() -> Vec<(&'static str, Vec<u8>, u16)> {
    vec![
        ("code 1", vec![0x00, 0x01], 1002),
        ("code 1005", 1005u16.to_be_bytes().to_vec(), 1002),
        ("code 999", 999u16.to_be_bytes().to_vec(), 1002),
        ("a 1-byte body", vec![0x03], 1002),
        ("code 1014", 1014u16.to_be_bytes().to_vec(), 1014),
        ("code 1000", 1000u16.to_be_bytes().to_vec(), 1000),
        ("code 1001 with a reason", [&1001u16.to_be_bytes()[..], b"bye"].concat(), 1001),
        ("no body", vec![], 1000),
    ]
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c36_every_close_is_answered_before_login_and_in_play() {
    let backend = login_backend().await;
    let proxy = Proxy::start(&(ws_listener("") + &backend_section(backend.addr, ""))).await;
    let addr = proxy.addr(Transport::Ws);
    // `88 82 00000000 0001`, exactly as the case file has it.
    let mut s = raw_upgrade(addr).await;
    s.write_all(&[0x88, 0x82, 0, 0, 0, 0, 0x00, 0x01]).await.unwrap();
    assert_eq!(close_then_eof(&mut s).await[..2], 1002u16.to_be_bytes());

    for (logins, (what, body, expected)) in c36_closes().into_iter().enumerate() {
        // Before login: right after the upgrade.
        let mut s = raw_upgrade(addr).await;
        s.write_all(&masked_frame(0x8, &body, MASK)).await.unwrap();
        let reply = close_then_eof(&mut s).await;
        assert!(reply.len() >= 2, "{what} before login: the Close carries a code, never 1005");
        assert_eq!(u16::from_be_bytes([reply[0], reply[1]]), expected, "{what} before login");

        // In play: logged in through the backend, then the Close; the backend connection is closed too.
        let mut s = raw_upgrade(addr).await;
        s.write_all(&masked_frame(0x2, &hs_ls(), MASK)).await.unwrap();
        let (op, payload) = read_server_frame(&mut s).await;
        assert_eq!((op, payload), (0x2, login_success("Steve")), "{what}: logged in");
        s.write_all(&masked_frame(0x8, &body, MASK)).await.unwrap();
        let reply = close_then_eof(&mut s).await;
        assert_eq!(u16::from_be_bytes([reply[0], reply[1]]), expected, "{what} in play");
        backend.wait_closed(logins, STEP).await;
    }
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_keep_a_player_alive_while_the_login_waits() {
    // A backend that accepts and never answers the login; a 1-second ping interval and a 10-second login
    // timeout. The player reads for 3.3 s: Pings arrive meanwhile (a CDN sees traffic).
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let proxy = Proxy::start(
        &(ws_listener("ping_interval_seconds = 1")
            + &backend_section(backend.addr, "")
            + "[limits]\nlogin_timeout_seconds = 10\n"),
    )
    .await;
    let mut s = raw_upgrade(proxy.addr(Transport::Ws)).await;
    s.write_all(&masked_frame(0x2, &hs_ls(), MASK)).await.unwrap();
    backend.wait_received(0, hs_ls().len(), STEP).await;
    let started = Instant::now();
    let mut pings = Vec::new();
    while started.elapsed() < Duration::from_millis(3300) {
        let (op, payload) = read_server_frame(&mut s).await;
        assert_eq!(op, 0x9, "only Pings while the login waits, got opcode {op:#x}");
        pings.push(started.elapsed());
        // Answer like a browser would; and send a Ping of our own, which must be answered with a Pong.
        s.write_all(&masked_frame(0xA, &payload, MASK)).await.unwrap();
    }
    assert!(pings.len() >= 2, "Pings at {pings:?}");
    // One Ping per interval: no gap much longer than the 1-second interval (the schedule ticks at half of it).
    let mut last = Duration::ZERO;
    for at in &pings {
        assert!(*at - last <= Duration::from_millis(1700), "a gap before the Ping at {at:?}: {pings:?}");
        last = *at;
    }
    s.write_all(&masked_frame(0x9, b"p1", MASK)).await.unwrap();
    let (op, payload) = read_server_frame(&mut s).await;
    assert_eq!((op, payload.as_slice()), (0xA, &b"p1"[..]), "a Ping during the login wait is answered");
    drop(s);
    // The player left: the backend connection is closed at once, not at the login timeout.
    backend.wait_closed(0, Duration::from_secs(2)).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_reach_a_player_before_its_handshake() {
    // Right after the upgrade, before any Minecraft byte: the keepalive runs in this stage too.
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let proxy = Proxy::start(
        &(ws_listener("ping_interval_seconds = 1")
            + &backend_section(backend.addr, "")
            + "[limits]\nhandshake_timeout_seconds = 10\n"),
    )
    .await;
    let mut s = raw_upgrade(proxy.addr(Transport::Ws)).await;
    let started = Instant::now();
    for _ in 0..2 {
        let (op, payload) = read_server_frame(&mut s).await;
        assert_eq!(op, 0x9, "a Ping while the handshake is awaited, got opcode {op:#x}");
        s.write_all(&masked_frame(0xA, &payload, MASK)).await.unwrap();
    }
    assert!(started.elapsed() < Duration::from_millis(3500), "two Pings took {:?}", started.elapsed());
    // The handshake still works after them.
    s.write_all(&masked_frame(0x2, &hs_ls(), MASK)).await.unwrap();
    backend.wait_received(0, hs_ls().len(), STEP).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_close_during_the_login_is_answered_and_no_backend_is_kept() {
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let proxy = Proxy::start(
        &(ws_listener("") + &backend_section(backend.addr, "") + "[limits]\nlogin_timeout_seconds = 30\n"),
    )
    .await;
    let addr = proxy.addr(Transport::Ws);
    // While the backend is asked: the Close is answered at once and the backend connection ends with it.
    let mut s = raw_upgrade(addr).await;
    s.write_all(&masked_frame(0x2, &hs_ls(), MASK)).await.unwrap();
    backend.wait_received(0, hs_ls().len(), STEP).await;
    s.write_all(&masked_frame(0x8, &1000u16.to_be_bytes(), MASK)).await.unwrap();
    let reply = close_then_eof(&mut s).await;
    assert_eq!(u16::from_be_bytes([reply[0], reply[1]]), 1000);
    backend.wait_closed(0, Duration::from_secs(2)).await;
    proxy.wait_connections(0, STEP).await;

    // Login Start and a Close in one write: the Close is answered, and the session ends without a backend.
    let mut s = raw_upgrade(addr).await;
    let mut both = masked_frame(0x2, &hs_ls(), MASK);
    both.extend(masked_frame(0x8, &1001u16.to_be_bytes(), MASK));
    s.write_all(&both).await.unwrap();
    let reply = close_then_eof(&mut s).await;
    assert_eq!(u16::from_be_bytes([reply[0], reply[1]]), 1001);
    proxy.wait_connections(0, STEP).await;
    assert_eq!(backend.accepted(), 1, "no backend connection for a player that already left");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_fault_is_answered_while_the_player_keeps_sending() {
    // An unmasked frame, then 1 MiB more pushed at once: the 1002 Close must still arrive (the proxy drains
    // what follows instead of resetting the connection over it).
    let backend = login_backend().await;
    let proxy = Proxy::start(&(ws_listener("") + &backend_section(backend.addr, ""))).await;
    let s = raw_upgrade(proxy.addr(Transport::Ws)).await;
    let (mut r, mut w) = s.into_split();
    let push = tokio::spawn(async move {
        let _ = w.write_all(&[0x82, 0x05, 1, 2, 3, 4, 5]).await;
        for _ in 0..256 {
            if w.write_all(&[0x55u8; 4096]).await.is_err() {
                break;
            }
        }
        w
    });
    let mut head = [0u8; 4];
    tokio::time::timeout(STEP, tokio::io::AsyncReadExt::read_exact(&mut r, &mut head)).await.unwrap().unwrap();
    assert_eq!(head[0], 0x88, "the first frame is a Close: {head:02x?}");
    assert!((2..=125).contains(&head[1]), "an unmasked Close with a code: {head:02x?}");
    assert_eq!(u16::from_be_bytes([head[2], head[3]]), carriage::CLOSE_PROTOCOL_ERROR);
    drop(tokio::time::timeout(STEP, push).await.unwrap().unwrap());
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_huge_first_message_is_refused_from_its_first_bytes() {
    let backend = login_backend().await;
    let proxy = Proxy::start(&(ws_listener("") + &backend_section(backend.addr, ""))).await;
    let addr = proxy.addr(Transport::Ws);
    // A Binary message declared as 4,000,000 bytes (under max_ws_message_bytes), starting with a handshake
    // frame that declares 1 MiB: refused as soon as the length prefix is read, while the rest is unsent.
    let mut s = raw_upgrade(addr).await;
    let mut header = vec![0x82, 0x80 | 127];
    header.extend_from_slice(&4_000_000u64.to_be_bytes());
    header.extend_from_slice(&[0, 0, 0, 0]); // a zero mask: the payload is sent as is
    s.write_all(&header).await.unwrap();
    s.write_all(&[0x80, 0x80, 0x40]).await.unwrap(); // VarInt 1,048,576
    s.write_all(&[0u8; 4096]).await.unwrap();
    let reply = close_then_eof(&mut s).await;
    assert_eq!(u16::from_be_bytes([reply[0], reply[1]]), carriage::CLOSE_PROTOCOL_ERROR);
    assert_eq!(backend.accepted(), 0);

    // A player meanwhile logs in as usual.
    let mut p = raw_upgrade(addr).await;
    p.write_all(&masked_frame(0x2, &hs_ls(), MASK)).await.unwrap();
    assert_eq!(read_server_frame(&mut p).await, (0x2, login_success("Steve")));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c35_a_player_leaving_during_the_login_closes_the_backend() {
    for transport in [Transport::Tcp, Transport::Ws] {
        for how in ["fin", "reset"] {
            let backend = RawBackend::start(RawBehaviour::Silent).await;
            let config = match transport {
                Transport::Tcp => tcp_config(backend.addr, "[limits]\nlogin_timeout_seconds = 30\n"),
                _ => ws_listener("") + &backend_section(backend.addr, "") + "[limits]\nlogin_timeout_seconds = 30\n",
            };
            let proxy = Proxy::start(&config).await;
            let mut s = match transport {
                Transport::Tcp => TcpStream::connect(proxy.addr(Transport::Tcp)).await.unwrap(),
                _ => raw_upgrade(proxy.addr(Transport::Ws)).await,
            };
            let hello = match transport {
                Transport::Tcp => hs_ls(),
                _ => masked_frame(0x2, &hs_ls(), MASK),
            };
            s.write_all(&hello).await.unwrap();
            backend.wait_received(0, hs_ls().len(), STEP).await;
            let left = Instant::now();
            match how {
                "fin" => s.shutdown().await.unwrap(),
                _ => {
                    // Linger 0 then close: a reset (dropping blocks no thread with a zero linger).
                    #[allow(deprecated)]
                    s.set_linger(Some(Duration::ZERO)).unwrap();
                    drop(s);
                }
            }
            backend.wait_closed(0, Duration::from_secs(1)).await;
            assert!(
                left.elapsed() < Duration::from_secs(1),
                "{transport:?} {how}: backend closed after {:?}",
                left.elapsed()
            );
            proxy.wait_connections(0, STEP).await;
            proxy.shutdown().await;
        }
    }
}
