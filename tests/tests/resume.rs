//! Carriage v2 resume (`docs/carriage.md`): a player driven through the client library over `wss://` keeps
//! its session through cuts between it and the proxy (a CDN-like [`Cutter`]: reset, FIN, Close 1001,
//! silence), against a real node-minecraft-protocol 1.7.10 backend; refused resumes get their close codes and
//! leak no backend connection; v1 and resume-off proxies behave as before.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use moonbridge_client::{ClientError, Connection, Options};
use moonbridge_protocol::codec::Reader;
use moonbridge_protocol::packets::{KeepAlive, LoginSuccess, Packet, PluginMessage};
use moonbridge_proxy::config::Transport;
use serde_json::json;
use testbed::mc::{burst_payload, chat_frame, chat_message_text, send_login, FrameReader};
use testbed::{
    hs_ls, login_backend, node_backend, try_resume, v2_session, ws_offering, ws_proxy, CutKind, Cutter, KeyType,
    Message, Proxy, TestCert, STEP,
};
use tokio::time::timeout;

/// A proxy with one `wss` listener (keepalive every second) in front of `backend`; `limits` is appended to
/// a `[limits]` table.
async fn wss_proxy(backend: SocketAddr, cert: &TestCert, limits: &str) -> Proxy {
    Proxy::start(&format!(
        "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\npath = \"/mc\"\nping_interval_seconds = 1\n\
         tls_cert = \"{}\"\ntls_key = \"{}\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n[limits]\n{limits}\n",
        cert.cert.display(),
        cert.key.display()
    ))
    .await
}

type Ws = testbed::RawWs;

fn client_options(cert: &TestCert, compress: bool) -> Options {
    Options::from_json(Some(&json!({ "ca_file": cert.ca, "ping_interval_ms": 500, "compress": compress }).to_string()))
        .unwrap()
}

/// What the player reads next that matters: Keep Alives are answered on the way.
enum Seen {
    Plugin(String, Vec<u8>),
    Chat(String),
    Other,
}

fn next(conn: &Connection, r: &mut FrameReader<'_>) -> Seen {
    let f = r.next(Duration::from_secs(30));
    match f.id {
        0x00 => {
            let ka: KeepAlive = f.decode().unwrap();
            conn.send(&ka.to_frame_bytes().unwrap()).unwrap();
            conn.end_tick().unwrap();
            Seen::Other
        }
        0x02 => Seen::Chat(chat_message_text(&f).unwrap_or_default()),
        0x3f => {
            let p = PluginMessage::decode_fields(&mut Reader::new(&f.body)).unwrap();
            Seen::Plugin(p.channel, p.data)
        }
        _ => Seen::Other,
    }
}

/// Reads until the echo of `message` and every plugin message on `channel` in `payloads` (each the next one,
/// checked byte for byte); no other echo may come. The echo is a chat: it may overtake plugin messages the
/// proxy has not sent yet (docs/lanes.md), so it may come before them.
fn until_echo(conn: &Connection, r: &mut FrameReader<'_>, message: &str, channel: &str, payloads: &mut Vec<Vec<u8>>) {
    let mut echoed = false;
    while !echoed || !payloads.is_empty() {
        match next(conn, r) {
            Seen::Chat(text) => {
                assert!(!echoed, "one echo of {message}, got {text:?} too");
                assert_eq!(text, format!("echo:{message}"), "echoes arrive once each, in order");
                echoed = true;
            }
            Seen::Plugin(c, data) if c == channel => {
                assert!(!payloads.is_empty(), "an extra {channel} message");
                let want = payloads.remove(0);
                assert!(data == want, "{channel} message differs (len {} vs {})", data.len(), want.len());
            }
            _ => {}
        }
    }
}

/// Where the two cuts inside a large transfer fall, in bytes the proxy sent on the wire after the upgrade
/// (in the burst) and after the `big` request: 700 kB and 400 kB uncompressed. Compressed, `burst_payload`'s
/// pattern shrinks the 2.1 MB burst to about 7 kB and the 1 MB send to about 7 kB (`zstd -1` measured 6,671
/// and 6,461 bytes), so the cuts fall at 3 kB and 2 kB, inside them.
#[derive(Clone, Copy)]
struct CutOffsets {
    burst: u64,
    big: u64,
}

/// The player's side of the cut test; returns the chat messages it sent, in order.
fn player_through_cuts(url: &str, options: Options, cutter: &Cutter, at: CutOffsets) -> (Vec<String>, u64) {
    let conn = Connection::connect(url, options).unwrap();
    let mut r = FrameReader::new(&conn);
    // Cut 1: a reset in the middle of the 2.1 MB login burst (`at.burst` wire bytes after the upgrade), ordered
    // before the login so a quick (compressed) burst cannot pass first.
    cutter.cut_after(CutKind::Reset, at.burst);
    send_login(&conn, "Resumer", false);
    let success: LoginSuccess = r.next(STEP).decode().expect("Login Success");
    assert_eq!(success.name, "Resumer");
    let mut burst: Vec<Vec<u8>> = (0..70).map(|n| burst_payload(n, 30_000)).collect();
    while !burst.is_empty() {
        if let Seen::Plugin(c, data) = next(&conn, &mut r) {
            if c == "MB|Burst" {
                assert!(data == burst.remove(0), "burst message {} differs", 70 - burst.len() - 1);
            }
        }
    }
    let mut sent = Vec::new();
    let schedule = [
        (5, CutKind::Fin),
        (10, CutKind::Close1001),
        (15, CutKind::Silent),
        (25, CutKind::Fin),
        (30, CutKind::Close1001),
        (35, CutKind::Silent),
        (40, CutKind::Reset),
        (45, CutKind::Close1001),
    ];
    for i in 0..50 {
        if let Some((_, kind)) = schedule.iter().find(|(at, _)| *at == i) {
            cutter.cut(*kind);
        }
        if i == 20 {
            // Cut 6: a reset while the backend sends 1 MB (after 400 kB of it).
            let message = "big 100 10000".to_string();
            cutter.cut_after(CutKind::Reset, at.big);
            conn.send(&chat_frame(&message)).unwrap();
            conn.end_tick().unwrap();
            let mut big: Vec<Vec<u8>> = (0..100).map(|k| burst_payload(1000 + k, 10_000)).collect();
            until_echo(&conn, &mut r, &message, "MB|Big", &mut big);
            sent.push(message);
        }
        // Three ticks of chat per step: some leave while the connection is down and must be replayed.
        let batch: Vec<String> = (0..3).map(|k| format!("m{i}.{k}")).collect();
        for m in &batch {
            conn.send(&chat_frame(m)).unwrap();
            conn.end_tick().unwrap();
        }
        for m in &batch {
            until_echo(&conn, &mut r, m, "-", &mut Vec::new());
        }
        sent.extend(batch);
        // Each cut is carried out before the next is ordered (a Close 1001 waits for frame boundaries).
        let ordered = 1 + schedule.iter().filter(|(at, _)| *at <= i).count() + usize::from(i >= 20);
        let deadline = std::time::Instant::now() + STEP;
        while cutter.cuts.load(std::sync::atomic::Ordering::SeqCst) < ordered {
            assert!(std::time::Instant::now() < deadline, "cut {ordered} not carried out");
            std::thread::yield_now();
        }
    }
    let resumes = conn.stats().resumes;
    conn.close();
    (sent, resumes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_cuts_during_play_over_wss_lose_nothing() {
    ten_cuts(false, CutOffsets { burst: 700_000, big: 400_000 }).await;
}

/// The same ten cuts with `moonbridge.v2.zstd`: each resumed connection starts new zstd streams both ways,
/// cuts fall inside compressed messages, and the transcripts still match byte for byte.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ten_cuts_in_a_compressed_session_lose_nothing() {
    ten_cuts(true, CutOffsets { burst: 3_000, big: 2_000 }).await;
}

async fn ten_cuts(compress: bool, at: CutOffsets) {
    let cert = TestCert::generate("resume-cuts", KeyType::Ec).unwrap();
    let (mut node, backend) = node_backend(json!({})).await;
    let proxy = wss_proxy(backend, &cert, "").await;
    let cutter = Arc::new(Cutter::start(proxy.addr(Transport::Wss), &cert).await);
    let url = format!("wss://localhost:{}/mc", cutter.addr.port());
    let options = client_options(&cert, compress);
    let c = Arc::clone(&cutter);
    let (sent, resumes) = timeout(
        Duration::from_secs(240),
        tokio::task::spawn_blocking(move || player_through_cuts(&url, options, &c, at)),
    )
    .await
    .expect("the session ends in time")
    .expect("the player's checks pass");
    assert_eq!(cutter.cuts.load(std::sync::atomic::Ordering::SeqCst), 10, "every cut was carried out");
    assert_eq!(resumes, 10, "the client resumed after each cut");
    assert_eq!(
        cutter.accepted.load(std::sync::atomic::Ordering::SeqCst),
        11,
        "one connection per resume, no fresh login"
    );
    // The burst (2.1 MB) and the big send (1 MB) crossed the wire compressed or not: the pattern of
    // burst_payload repeats every 64 KiB, well inside zstd's 128 KiB window.
    let wire = cutter.down_bytes.load(std::sync::atomic::Ordering::SeqCst);
    if compress {
        assert!(wire < 1_500_000, "compressed: {wire} bytes on the wire to the player");
    } else {
        assert!(wire > 3_100_000, "uncompressed: {wire} bytes on the wire to the player");
    }
    // The backend's transcript: every chat exactly once, in order (a lost, repeated or reordered byte would
    // also break node-minecraft-protocol's parsing: a client_error line).
    let lines = node.next_lines(1 + sent.len(), STEP).await;
    assert_eq!(lines[0]["event"], "login");
    let got: Vec<&str> = lines[1..].iter().map(|l| l["message"].as_str().unwrap_or("?")).collect();
    assert_eq!(got, sent.iter().map(String::as_str).collect::<Vec<_>>());
    assert!(lines.iter().all(|l| l["event"] != "client_error"), "{lines:?}");
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

#[tokio::test]
async fn refused_resumes_get_their_close_codes_and_leak_nothing() {
    let backend = login_backend().await;
    let proxy = ws_proxy(backend.addr, "").await;
    let addr = proxy.addr(Transport::Ws);
    let (ws, token, received) = v2_session(addr).await;
    let (instance, secret) = token.split_once('.').unwrap();
    // A forged secret on this instance: 4001. Another instance's token: 4002.
    let forged = format!("resume {instance}.{} 0 0", "0".repeat(32));
    assert_eq!(try_resume(addr, &forged).await, Err(Some(4001)));
    let other = if instance == "0000000000000000" { "1111111111111111" } else { "0000000000000000" };
    assert_eq!(try_resume(addr, &format!("resume {other}.{secret} {received} 18")).await, Err(Some(4002)));
    // A malformed request: 1002.
    assert_eq!(try_resume(addr, "resume nonsense").await, Err(Some(1002)));
    // The player's connection drops; a resume with a count past what the proxy sent: 4003, and the session ends
    // (its backend connection is closed).
    drop(ws);
    let beyond = format!("resume {token} {} 18", received + 5);
    assert_eq!(try_resume(addr, &beyond).await, Err(Some(4003)));
    backend.wait_closed(0, STEP).await;
    // The token is used up: 4004.
    assert_eq!(try_resume(addr, &format!("resume {token} {received} 18")).await, Err(Some(4004)));
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

#[tokio::test]
async fn a_resume_replays_what_the_player_missed_and_a_token_works_once() {
    let backend = login_backend().await;
    let proxy = ws_proxy(backend.addr, "").await;
    let addr = proxy.addr(Transport::Ws);
    let (ws, token, received) = v2_session(addr).await;
    drop(ws);
    // While the player is away the backend sends 200 kB: retained, then replayed after `resumed`.
    let filler: Vec<u8> = (0..200_000u32).map(|i| (i % 251) as u8).collect();
    backend.send(0, &filler).await;
    let (mut ws, _) = ws_offering(addr, "moonbridge.v2").await;
    let sent = hs_ls().len() as u64;
    ws.send(Message::Text(format!("resume {token} {received} {}", sent + 5).into())).await.unwrap();
    let answer = match timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap() {
        Message::Text(t) => t.to_string(),
        other => panic!("expected resumed, got {other:?}"),
    };
    let fields: Vec<&str> = answer.split(' ').collect();
    assert_eq!(fields[0], "resumed");
    assert_eq!(fields[1], sent.to_string(), "the proxy has every byte of the handshake and Login Start");
    assert_ne!(fields[2], token, "a new token for the next resume");
    // The 5 bytes the proxy lacked are sent again, then the 200 kB arrive, in order and once.
    ws.send(Message::Binary(vec![0x04, 0x00, 1, 2, 3].into())).await.unwrap();
    let (replayed, _) = testbed::ws_read_bytes(&mut ws, filler.len(), STEP).await;
    assert!(replayed == filler, "replayed bytes differ");
    let got = backend.wait_received(0, hs_ls().len() + 5, STEP).await;
    assert_eq!(&got[got.len() - 5..], &[0x04, 0x00, 1, 2, 3]);
    // The old token is spent.
    assert_eq!(try_resume(addr, &format!("resume {token} {received} {sent}")).await, Err(Some(4004)));
    drop(ws);
    proxy.shutdown().await;
}

#[tokio::test]
async fn the_window_passes_and_the_backend_connection_is_closed() {
    let backend = login_backend().await;
    let proxy = ws_proxy(backend.addr, "[limits]\nresume_window_seconds = 1\n").await;
    let addr = proxy.addr(Transport::Ws);
    let (mut ws, _) = ws_offering(addr, "moonbridge.v2").await;
    ws.send(Message::Binary(hs_ls().into())).await.unwrap();
    let token = loop {
        if let Message::Text(t) = timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap() {
            assert!(t.ends_with(" 1"), "{t}");
            break t.split(' ').nth(1).unwrap().to_string();
        }
    };
    drop(ws);
    let t0 = std::time::Instant::now();
    backend.wait_closed(0, STEP).await;
    let waited = t0.elapsed();
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_secs(5), "{waited:?}");
    assert_eq!(try_resume(addr, &format!("resume {token} 0 0")).await, Err(Some(4001)));
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_client_reports_a_refused_resume_and_a_passed_window() {
    let cert = TestCert::generate("resume-refused", KeyType::Ec).unwrap();
    let (_node, backend) = node_backend(json!({ "burstCount": 0 })).await;
    let proxy_a = wss_proxy(backend, &cert, "resume_window_seconds = 2").await;
    let proxy_b = wss_proxy(backend, &cert, "resume_window_seconds = 2").await;
    let cutter = Arc::new(Cutter::start(proxy_a.addr(Transport::Wss), &cert).await);
    let url = format!("wss://localhost:{}/mc", cutter.addr.port());
    // 1. The reconnect reaches another instance (or a restarted proxy): 4002, a clear error, no fresh login.
    let (options, c, u) = (client_options(&cert, true), Arc::clone(&cutter), url.clone());
    let b = proxy_b.addr(Transport::Wss);
    let e = tokio::task::spawn_blocking(move || ended_after_cut(&u, options, &c, Some(b))).await.unwrap();
    let text = e.to_string();
    assert!(matches!(e, ClientError::ResumeFailed { .. }), "{e:?}");
    assert!(text.contains("different proxy instance") && text.contains("4002"), "{text}");
    // 2. Nothing answers any more: the 2 s window passes.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    cutter.retarget(proxy_a.addr(Transport::Wss));
    let (options, c) = (client_options(&cert, true), Arc::clone(&cutter));
    let e = tokio::task::spawn_blocking(move || ended_after_cut(&url, options, &c, Some(dead))).await.unwrap();
    assert!(e.to_string().contains("not resumed within the proxy's 2 s window"), "{e}");
    // Neither proxy keeps anything: A closed both backend connections when its window passed.
    proxy_a.wait_connections(0, STEP).await;
    proxy_b.wait_connections(0, STEP).await;
    proxy_a.shutdown().await;
    proxy_b.shutdown().await;
}

/// Logs in through the cutter, makes later connections go to `then` and cuts: the error the connection ends
/// with (read through `recv`).
fn ended_after_cut(url: &str, options: Options, cutter: &Cutter, then: Option<SocketAddr>) -> ClientError {
    let conn = Connection::connect(url, options).unwrap();
    let mut r = FrameReader::new(&conn);
    send_login(&conn, "Refused", false);
    let _: LoginSuccess = r.next(STEP).decode().unwrap();
    // Join Game: play has begun, so the session is resumable.
    while r.next(STEP).id != 0x01 {}
    let mut buf = vec![0u8; 65536];
    // The `session` message arrives with the first play bytes; give it a moment through a bounded read.
    let _ = conn.recv(&mut buf, Some(Duration::from_millis(200)));
    if let Some(t) = then {
        cutter.retarget(t);
    }
    cutter.cut(CutKind::Reset);
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    loop {
        assert!(std::time::Instant::now() < deadline, "the connection did not end");
        match conn.recv(&mut buf, Some(Duration::from_secs(1))) {
            Ok(_) => {}
            Err(e) => return e,
        }
    }
}

#[tokio::test]
async fn v1_clients_and_a_proxy_with_resume_off_work_as_before() {
    let backend = login_backend().await;
    for (limits, offer, want) in [
        ("", "moonbridge.v1", Some("moonbridge.v1")),
        ("", "", None),
        ("[limits]\nresume_window_seconds = 0\n", "moonbridge.v2, moonbridge.v1", Some("moonbridge.v1")),
    ] {
        let proxy = ws_proxy(backend.addr, limits).await;
        let (mut ws, selected) = ws_offering(proxy.addr(Transport::Ws), offer).await;
        assert_eq!(selected.as_deref(), want);
        ws.send(Message::Binary(hs_ls().into())).await.unwrap();
        // Only Binary messages arrive (no control messages), and a Text message is still answered with 1003.
        let (bytes, _) = testbed::ws_read_bytes(&mut ws, 5, STEP).await;
        assert!(!bytes.is_empty());
        ws.send(Message::Text("ack 1".into())).await.unwrap();
        assert_eq!(testbed::ws_close_code(&mut ws, STEP).await, Some(1003));
        proxy.shutdown().await;
    }
}

/// Opens a v2 WebSocket, sends `resume …` and returns the socket with the `resumed` answer's fields.
async fn resume_on_new_link(addr: SocketAddr, token: &str, received: u64, sent: u64) -> (Ws, Vec<String>) {
    let (mut ws, _) = ws_offering(addr, "moonbridge.v2").await;
    ws.send(Message::Text(format!("resume {token} {received} {sent}").into())).await.unwrap();
    loop {
        match timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap() {
            Message::Text(t) => return (ws, t.split(' ').map(str::to_string).collect()),
            Message::Close(f) => panic!("refused: {f:?}"),
            _ => {}
        }
    }
}

#[tokio::test]
async fn a_drop_during_the_resume_exchange_can_be_resumed_again() {
    let backend = login_backend().await;
    let proxy = ws_proxy(backend.addr, "").await;
    let addr = proxy.addr(Transport::Ws);
    let (ws, token, received) = v2_session(addr).await;
    drop(ws);
    let sent = hs_ls().len() as u64;
    // The answer arrives, but the connection drops before the player shows it got the new token.
    let (ws, fields) = resume_on_new_link(addr, &token, received, sent).await;
    assert_eq!(fields[0], "resumed");
    drop(ws);
    // So the same token works once more.
    let (mut ws, fields) = resume_on_new_link(addr, &token, received, sent).await;
    assert_eq!(fields[0], "resumed");
    // Bytes on the new link show the player has the new token: the old one is spent from then on.
    ws.send(Message::Binary(vec![0x01, 0x00].into())).await.unwrap();
    backend.wait_received(0, hs_ls().len() + 2, STEP).await;
    assert_eq!(try_resume(addr, &format!("resume {token} {received} {sent}")).await, Err(Some(4004)));
    // The newest token still resumes the session.
    drop(ws);
    let (_ws, fields) = resume_on_new_link(addr, &fields[2], received, sent + 2).await;
    assert_eq!(fields[..2], ["resumed".to_string(), (sent + 2).to_string()]);
    proxy.shutdown().await;
}

#[tokio::test]
async fn on_shutdown_a_v2_player_gets_1012_and_does_not_resume() {
    let backend = login_backend().await;
    let proxy = ws_proxy(backend.addr, "").await;
    let (mut ws, _, _) = v2_session(proxy.addr(Transport::Ws)).await;
    let stopping = tokio::spawn(proxy.shutdown());
    assert_eq!(testbed::ws_close_code(&mut ws, STEP).await, Some(1012));
    stopping.await.unwrap();
}
