//! The client library (Rust API) against `moonbridge` against a node-minecraft-protocol 1.7.10 backend, over
//! every transport, with coalescing on and off; and the library's own behaviours on live sockets.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::StreamExt;
use moonbridge_client::{ClientError, Connection, Options};
use moonbridge_proxy::config::Transport;
use serde_json::json;
use testbed::mc::{self as scenarios, send_login, Endpoints};
use testbed::Message;
use testbed::{login_success, node_backend, KeyType, Proxy, RawBackend, RawBehaviour, TestCert, STEP};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;
use tokio::time::timeout;

/// A proxy with tcp, ws and wss listeners in front of `backend`.
async fn all_transports(backend: SocketAddr, cert: &TestCert, extra: &str) -> Proxy {
    Proxy::start(&format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\
         [[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\n\
         [[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n{extra}",
        cert.cert.display(),
        cert.key.display()
    ))
    .await
}

/// The scenarios' endpoints for `proxy` (built by [`all_transports`]).
fn endpoints(proxy: &Proxy, cert: &TestCert) -> Endpoints {
    Endpoints {
        tcp: format!("tcp://127.0.0.1:{}", proxy.addr(Transport::Tcp).port()),
        ws: format!("ws://127.0.0.1:{}/mc", proxy.addr(Transport::Ws).port()),
        wss: format!("wss://localhost:{}/mc", proxy.addr(Transport::Wss).port()),
        ca: cert.ca.clone(),
        dead_port: std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port(),
    }
}

/// Runs `f` on a blocking thread (the client API blocks) with a time limit.
async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::time::timeout(Duration::from_secs(90), tokio::task::spawn_blocking(f)).await.expect("in time").unwrap()
}

/// The scenarios `client-cross.exe` also runs under Wine (`client_windows.rs`), here in-process on Linux.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transport_with_coalescing_on_and_off() {
    let cert = TestCert::generate("client-cross", KeyType::Ec).unwrap();
    let (_node, backend) = node_backend(json!({})).await;
    let proxy = all_transports(backend, &cert, "").await;
    let ep = endpoints(&proxy, &cert);
    for line in blocking(move || scenarios::every_transport(&ep)).await {
        eprintln!("{line}");
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn login_burst_over_wss_takes_few_large_reads() {
    let cert = TestCert::generate("client-burst", KeyType::Ec).unwrap();
    let (_node, backend) = node_backend(json!({})).await;
    let proxy = all_transports(backend, &cert, "").await;
    let ep = endpoints(&proxy, &cert);
    eprintln!("{}", blocking(move || scenarios::burst_in_few_reads(&ep)).await);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_errors_name_their_reason() {
    let cert = TestCert::generate("client-errors", KeyType::Ec).unwrap();
    let (_node, backend) = node_backend(json!({})).await;
    let proxy = all_transports(backend, &cert, "").await;
    let ep = endpoints(&proxy, &cert);
    eprintln!("{}", blocking(move || scenarios::connect_errors(&ep)).await);
    proxy.shutdown().await;
}

/// A proxy (ws listener) and a raw backend that completes logins; returns the ws URL.
async fn ws_proxy_raw(listener_extra: &str) -> (Proxy, RawBackend, String) {
    let backend = RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply: login_success("Steve") }).await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\n{listener_extra}\n\
         [[backend]]\nname = \"survival\"\naddress = \"{}\"\n",
        backend.addr
    ))
    .await;
    let url = format!("ws://127.0.0.1:{}/mc", proxy.addr(Transport::Ws).port());
    (proxy, backend, url)
}

/// Logs in with the case file's exact bytes (HS with the Forge marker + LS = 34 bytes).
fn login_and_wait(conn: &Connection) {
    send_login(conn, "Steve", true);
    let expected = login_success("Steve");
    let mut got = vec![0u8; expected.len()];
    let mut n = 0;
    while n < got.len() {
        n += conn.recv(&mut got[n..], Some(Duration::from_secs(20))).unwrap();
    }
    assert_eq!(got, expected);
}

const THREE_FRAMES: [&[u8]; 3] = [&[0x02, 0x00, 0x01], &[0x02, 0x00, 0x02], &[0x02, 0x00, 0x03]];

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn three_frames_in_one_tick_are_one_message_and_three_without_coalescing() {
    let (proxy, backend, url) = ws_proxy_raw("").await;
    for (i, (coalesce, expected_messages)) in [("tick", 1u64), ("off", 3)].into_iter().enumerate() {
        let u = url.clone();
        let conn = blocking(move || {
            let c =
                Connection::connect(&u, Options::from_json(Some(&format!("{{\"coalesce\":\"{coalesce}\"}}"))).unwrap())
                    .unwrap();
            login_and_wait(&c);
            c
        })
        .await;
        let before = proxy.stats.stats().ws_messages_in;
        for f in THREE_FRAMES {
            conn.send(f).unwrap();
        }
        conn.end_tick().unwrap();
        let got = backend.wait_received(i, 34 + 9, STEP).await;
        assert_eq!(&got[got.len() - 9..], &THREE_FRAMES.concat()[..]);
        assert_eq!(proxy.stats.stats().ws_messages_in - before, expected_messages, "coalesce = {coalesce}");
        let s = conn.stats();
        assert_eq!(s.frames_out, 5, "{s:?}"); // handshake, Login Start, three frames
        blocking(move || conn.close()).await;
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn batches_leave_on_their_own_after_max_delay_or_at_max_batch_bytes() {
    let (proxy, backend, url) = ws_proxy_raw("").await;
    let u = url.clone();
    let conn = blocking(move || {
        let c =
            Connection::connect(&u, Options::from_json(Some(r#"{"max_delay_ms":40,"max_batch_bytes":1000}"#)).unwrap())
                .unwrap();
        login_and_wait(&c);
        c
    })
    .await;
    // No end_tick: the frame still leaves, after max_delay_ms.
    let sent = Instant::now();
    conn.send(&[0x02, 0x00, 0x07]).unwrap();
    backend.wait_received(0, 34 + 3, STEP).await;
    let waited = sent.elapsed();
    assert!(waited >= Duration::from_millis(35), "left after {waited:?}, before max_delay_ms");
    assert_eq!(conn.stats().delay_flushes, 1);
    // 3 sends of 400 bytes with a 1000-byte batch limit: the batch leaves at the third send, no end_tick.
    let before = proxy.stats.stats().ws_messages_in;
    let mut frame = vec![0x80, 0x03, 0x00];
    frame.extend(std::iter::repeat_n(0x5a, 397));
    assert_eq!(frame.len(), 400);
    for _ in 0..3 {
        conn.send(&frame).unwrap();
    }
    backend.wait_received(0, 34 + 3 + 1200, STEP).await;
    assert_eq!(conn.stats().size_flushes, 1);
    assert_eq!(proxy.stats.stats().ws_messages_in - before, 1);
    blocking(move || conn.close()).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_over_the_message_limit_is_split_not_refused() {
    let (proxy, backend, url) = ws_proxy_raw("").await;
    // 5 MiB in one tick: over every proxy's message limit (4 MiB by default). Uncompressed it leaves as 5
    // messages of at most 1 MiB (the carriage's cap for intermediaries); with moonbridge.v2.zstd as 6 of at most
    // 1 MiB less 8 KiB of stream bytes, which stay under 1 MiB even if nothing shrank.
    let big: Vec<u8> = (0..5 * 1024 * 1024).map(|i| (i % 253) as u8).collect();
    for (i, (compress, messages)) in [(false, 5), (true, 6)].into_iter().enumerate() {
        let url = url.clone();
        let options = format!(r#"{{"max_batch_bytes":16777216,"compress":{compress}}}"#);
        let conn = blocking(move || {
            let c = Connection::connect(&url, Options::from_json(Some(&options)).unwrap()).unwrap();
            login_and_wait(&c);
            c
        })
        .await;
        conn.send(&big).unwrap();
        conn.end_tick().unwrap();
        let got = backend.wait_received(i, 34 + big.len(), Duration::from_secs(30)).await;
        assert_eq!(&got[34..], &big[..]);
        // The login tick was one message.
        assert_eq!(conn.stats().messages_out, 1 + messages, "compress {compress}: {:?}", conn.stats());
        blocking(move || conn.close()).await;
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn send_never_blocks_and_pending_bytes_are_bounded() {
    // A backend that completes the login and then never reads again.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = listener.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 34];
        s.read_exact(&mut buf).await.unwrap();
        s.write_all(&login_success("Steve")).await.unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(s);
    });
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n[[backend]]\nname = \"b\"\naddress = \"{backend_addr}\"\n"
    ))
    .await;
    let url = format!("tcp://127.0.0.1:{}", proxy.addr(Transport::Tcp).port());
    let (err, slowest) = blocking(move || {
        let c = Connection::connect(
            &url,
            Options::from_json(Some(r#"{"max_pending_bytes":4194304,"max_batch_bytes":65536}"#)).unwrap(),
        )
        .unwrap();
        login_and_wait(&c);
        let chunk = vec![0u8; 65536];
        let mut slowest = Duration::ZERO;
        for _ in 0..100_000 {
            let t = Instant::now();
            let r = c.send(&chunk);
            slowest = slowest.max(t.elapsed());
            if let Err(e) = r {
                return (e, slowest);
            }
        }
        panic!("the send buffer never filled");
    })
    .await;
    assert!(matches!(err, ClientError::SendBufferFull { max: 4_194_304, .. }), "{err}");
    assert!(err.to_string().contains("send buffer full"), "{err}");
    assert!(slowest < Duration::from_millis(100), "a send blocked for {slowest:?}");
    hold.abort();
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn close_returns_promptly_when_the_server_stopped_reading() {
    // A WebSocket server that completes the upgrade and then never reads.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut req = Vec::new();
        let mut b = [0u8; 1];
        while !req.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).await.unwrap();
            req.push(b[0]);
        }
        let text = String::from_utf8(req).unwrap();
        let key = text.lines().find_map(|l| l.strip_prefix("Sec-WebSocket-Key: ")).unwrap().trim().to_string();
        let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
        s.write_all(
            format!(
                "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n\r\n"
            )
            .as_bytes(),
        )
        .await
        .unwrap();
        tokio::time::sleep(Duration::from_secs(60)).await;
        drop(s);
    });
    let took = blocking(move || {
        let c = Connection::connect(
            &format!("ws://{addr}/mc"),
            Options::from_json(Some(r#"{"subprotocol":false}"#)).unwrap(),
        )
        .unwrap();
        let chunk = vec![0u8; 256 * 1024];
        // Fill the socket buffers on both ends: the I/O thread ends up blocked writing.
        for _ in 0..40 {
            if c.send(&chunk).is_err() {
                break;
            }
            let _ = c.end_tick();
        }
        let t = Instant::now();
        c.close();
        t.elapsed()
    })
    .await;
    assert!(took < Duration::from_secs(5), "close took {took:?}");
    hold.abort();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pings_are_answered_while_the_game_thread_is_stalled() {
    // The proxy pings every second and drops a peer silent for 3 s; the game thread does not call the
    // library for 5 s, and the client's own keepalive is off, so only the I/O thread's Pongs keep it alive.
    let (proxy, backend, url) = ws_proxy_raw("ping_interval_seconds = 1").await;
    let conn = blocking(move || {
        let c = Connection::connect(&url, Options::from_json(Some(r#"{"ping_interval_ms":0}"#)).unwrap()).unwrap();
        login_and_wait(&c);
        c
    })
    .await;
    // Not a synchronisation sleep: the stall itself is the condition under test. It outlasts the proxy's
    // 3 s dead-peer limit, so the connection survives (asserted below) only if the I/O thread answered the Pings.
    tokio::time::sleep(Duration::from_secs(5)).await;
    conn.send(&[0x02, 0x00, 0x09]).unwrap();
    conn.end_tick().unwrap();
    let got = backend.wait_received(0, 34 + 3, STEP).await;
    assert_eq!(&got[34..], &[0x02, 0x00, 0x09]);
    assert_eq!(proxy.stats.stats().connections, 1);
    blocking(move || conn.close()).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_sends_its_own_keepalive_pings() {
    // The server side is a plain tokio-tungstenite server that records when each Ping arrives (and answers it,
    // as tungstenite does); the client is idle, so only its keepalive writes.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        let (s, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(s).await.unwrap();
        let start = Instant::now();
        let mut pings = Vec::new();
        while pings.len() < 4 {
            match timeout(STEP, ws.next()).await {
                Ok(Some(Ok(Message::Ping(_)))) => pings.push(start.elapsed()),
                Ok(Some(Ok(m))) => panic!("an idle client sent {m:?}"),
                other => panic!("no Ping: {other:?}"),
            }
        }
        pings
    });
    let conn = blocking(move || {
        Connection::connect(
            &format!("ws://{addr}/mc"),
            Options::from_json(Some(r#"{"ping_interval_ms":400,"subprotocol":false}"#)).unwrap(),
        )
        .unwrap()
    })
    .await;
    let pings = timeout(STEP, server).await.expect("four Pings in time").unwrap();
    // Idle: one Ping per 400 ms interval, checked every 200 ms, so consecutive Pings are 400 ms apart (a tick
    // of scheduling jitter allowed), never bunched and never an interval skipped.
    for pair in pings.windows(2) {
        let gap = pair[1] - pair[0];
        assert!(gap >= Duration::from_millis(300) && gap <= Duration::from_millis(700), "Pings at {pings:?}");
    }
    assert!(pings[0] <= Duration::from_millis(700), "first Ping at {:?}", pings[0]);
    assert!(conn.stats().pings_sent >= 4, "{:?}", conn.stats());
    blocking(move || conn.close()).await;
}
