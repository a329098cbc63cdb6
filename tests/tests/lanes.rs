//! Lanes on a shaped path (docs/lanes.md): a backend floods view loads while chat and Keep Alive go on; players
//! reach it through a 4 Mbit/s, 20 ms-each-way link built by the test ([`ShapedPath`]: a network namespace and a
//! user-space link between two TUN devices). Measured for each chat: from the backend's write (its enqueue, as
//! a server's Netty `writeAndFlush`) to the player's read.
//!
//! - a client-library player (carriage v2, paced) through moonbridge: chat p99 under 3 × RTT + one tick, no
//!   Keep Alive later than 1 s, the path still carries the bulk;
//! - the same behind an nginx WebSocket edge (its buffers in the path);
//! - for the table: a TCP player through HAProxy to the backend (what players have without MoonBridge) and
//!   a TCP player through moonbridge (lanes and the kernel bound, no window).
//!
//! Every run checks a lane-aware transcript: the player got every byte, and within each lane in the backend's
//! order. The backend is a small peer of this file (a 1.7.10 server that answers the login and writes what the
//! schedule says); no real server sends this schedule on demand.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use moonbridge_client::{Connection, Options};
use moonbridge_protocol::FrameDecoder;
use testbed::mc::flood::{end_marker, frame, Kind, Schedule, CHAT, CHAT_EVERY, KEEP_ALIVE, LOAD_EVERY, PLUGIN, TICK};
use testbed::network::Haproxy;
use testbed::nginx::Nginx;
use testbed::shaped::{in_namespace, Shape, ShapedPath};
use testbed::{login_handshake, login_start, login_success, Proxy};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

/// The path: 4 Mbit/s and 20 ms each way, a 64 KiB bottleneck queue.
const SHAPE: Shape = Shape { rate: 4_000_000, delay: Duration::from_millis(20), queue_bytes: 64 * 1024 };
const RTT: Duration = Duration::from_millis(40);
const LOADS: u32 = 2;

/// What the backend wrote: each chat's and Keep Alive's time, and each lane's bytes in order.
#[derive(Default)]
struct Written {
    chats: Vec<Instant>,
    keep_alives: Vec<Instant>,
    urgent: Vec<u8>,
    bulk: Vec<u8>,
    /// When each Chat Message from the player (C01) arrived.
    player_chats: Vec<Instant>,
}

/// A backend that answers one login and then writes the schedule through a queue of its own (its writer task
/// writes as the socket takes it), recording each frame's enqueue time.
async fn flood_backend() -> (SocketAddr, Arc<Mutex<Written>>, tokio::sync::oneshot::Sender<()>) {
    let (done, done_rx) = tokio::sync::oneshot::channel::<()>();
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let written = Arc::new(Mutex::new(Written::default()));
    let w = Arc::clone(&written);
    tokio::spawn(async move {
        // The first connection that brings a handshake and a Login Start (a balancer's own probe brings none).
        let mut buf = vec![0; 4096];
        let s = loop {
            let (mut s, _) = listener.accept().await.unwrap();
            let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
            let mut frames = 0;
            while frames < 2 {
                match s.read(&mut buf).await {
                    Ok(n) if n > 0 => dec.queue_slice(&buf[..n]),
                    _ => break,
                }
                while dec.try_next_frame().unwrap().is_some() {
                    frames += 1;
                }
            }
            if frames >= 2 {
                break s;
            }
        };
        let (mut rd, mut wr) = s.into_split();
        // Whatever the player sends afterwards is read and dropped.
        // What the player sends afterwards: its Chat Messages' arrival times are recorded.
        let heard = Arc::clone(&w);
        tokio::spawn(async move {
            let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
            while let Ok(n @ 1..) = rd.read(&mut buf).await {
                dec.queue_slice(&buf[..n]);
                while let Ok(Some(f)) = dec.try_next_frame() {
                    if f.id == 0x01 {
                        heard.lock().unwrap().player_chats.push(Instant::now());
                    }
                }
            }
        });
        let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
        let writer = tokio::spawn(async move {
            while let Some(f) = rx.recv().await {
                if wr.write_all(&f).await.is_err() {
                    return;
                }
            }
        });
        tx.send(login_success("Flood")).unwrap();
        let mut schedule = Schedule::new(LOADS);
        let start = tokio::time::Instant::now();
        let mut ticks = tokio::time::interval(TICK);
        while start.elapsed() < schedule.length() {
            ticks.tick().await;
            let out = schedule.tick(start.elapsed());
            let mut w = w.lock().unwrap();
            for (kind, f) in out {
                match kind {
                    Kind::Chunk => w.bulk.extend_from_slice(&f),
                    Kind::Chat | Kind::KeepAlive => {
                        let times = if kind == Kind::Chat { &mut w.chats } else { &mut w.keep_alives };
                        times.push(Instant::now());
                        w.urgent.extend_from_slice(&f);
                    }
                }
                tx.send(f).unwrap();
            }
        }
        let m = end_marker();
        w.lock().unwrap().bulk.extend_from_slice(&m);
        tx.send(m).unwrap();
        // The connection stays open until the test is done with it (a server does not hang up after a flood).
        let _ = done_rx.await;
        drop(tx);
        let _ = writer.await;
    });
    (addr, written, done)
}

/// What a player read: each chat's and Keep Alive's time, each lane's bytes, when bulk bytes came.
#[derive(Default)]
struct Read {
    chats: Vec<Instant>,
    keep_alives: Vec<Instant>,
    urgent: Vec<u8>,
    bulk: Vec<u8>,
    first_bulk: Option<Instant>,
    last_bulk: Option<Instant>,
    /// What the backend wrote, to find the first byte that differs as it happens.
    written: Option<Arc<Mutex<Written>>>,
    /// When it sent each of its own Chat Messages (`Way::WsV1`).
    sent_chats: Vec<Instant>,
}

impl Read {
    /// Takes stream bytes; true once the marker arrived. The first frame is Login Success (Login state).
    fn take(&mut self, dec: &mut FrameDecoder, bytes: &[u8], login_done: &mut bool) -> bool {
        dec.queue_slice(bytes);
        let now = Instant::now();
        loop {
            let f = match dec.try_next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => break,
                Err(e) => panic!(
                    "the stream broke ({e:?}) after {} urgent and {} bulk bytes; next: {:02x?}",
                    self.urgent.len(),
                    self.bulk.len(),
                    &dec.buffered()[..dec.buffered().len().min(24)]
                ),
            };
            if !*login_done {
                *login_done = true;
                continue;
            }
            let whole = frame(f.id as u8, &f.body);
            match f.id as u8 {
                CHAT => {
                    self.chats.push(now);
                    self.urgent.extend_from_slice(&whole);
                }
                KEEP_ALIVE => {
                    self.keep_alives.push(now);
                    self.urgent.extend_from_slice(&whole);
                }
                id => {
                    if let Some(w) = &self.written {
                        let w = w.lock().unwrap();
                        let at = self.bulk.len();
                        let want = w.bulk.get(at..at + whole.len()).unwrap_or_default();
                        if want != whole.as_slice() {
                            let first = want.iter().zip(&whole).position(|(a, b)| a != b);
                            panic!(
                                "bulk differs at {at} (frame id {id:#x}, {} bytes, first differing byte {first:?}); \
                                 expected {:02x?}, got {:02x?}",
                                whole.len(),
                                &want[..want.len().min(16)],
                                &whole[..whole.len().min(16)]
                            );
                        }
                    }
                    self.first_bulk.get_or_insert(now);
                    self.last_bulk = Some(now);
                    self.bulk.extend_from_slice(&whole);
                    if id == PLUGIN {
                        return true;
                    }
                }
            }
        }
        false
    }
}

/// How a player reaches the backend in one run.
#[derive(Clone, Copy, Debug)]
enum Way {
    /// The client library over `ws://` (carriage v2, paced).
    Library,
    /// A plain TCP socket.
    Tcp,
    /// A plain WebSocket (carriage v1) that also sends a Chat Message every 500 ms.
    WsV1,
}

/// Runs one player through `to` (inside the shaped path's namespace) for the whole schedule.
async fn run_player(path: &ShapedPath, way: Way, to: SocketAddr, written: Arc<Mutex<Written>>) -> Read {
    let within = LOAD_EVERY * LOADS + Duration::from_secs(40);
    let hello = [login_handshake("mc.example.com"), login_start("Flood")].concat();
    let thread = in_namespace(path.namespace(), move || {
        let mut read = Read { written: Some(written), ..Read::default() };
        let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
        let mut login_done = false;
        let deadline = Instant::now() + within;
        match way {
            Way::Library => {
                let url = format!("ws://{to}/mc");
                let conn = Connection::connect(&url, Options::from_json(Some("{}")).unwrap()).unwrap();
                conn.send(&hello).unwrap();
                conn.end_tick().unwrap();
                let mut buf = vec![0; 1 << 20];
                while Instant::now() < deadline {
                    let n = conn.recv(&mut buf, Some(Duration::from_secs(1))).unwrap();
                    if read.take(&mut dec, &buf[..n], &mut login_done) {
                        break;
                    }
                }
                conn.close();
            }
            Way::WsV1 => {
                use tokio_tungstenite::tungstenite::{self, Message};
                let s = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
                s.set_read_timeout(Some(Duration::from_millis(100))).unwrap();
                let (mut ws, _) = tungstenite::client(format!("ws://{to}/mc"), s).unwrap();
                ws.send(Message::Binary(hello.into())).unwrap();
                let mut next_chat = Instant::now() + CHAT_EVERY;
                while Instant::now() < deadline {
                    if Instant::now() >= next_chat {
                        let text = b"hi";
                        ws.send(Message::Binary([&[4u8, 0x01, 2][..], text].concat().into())).unwrap();
                        read.sent_chats.push(Instant::now());
                        next_chat += CHAT_EVERY;
                    }
                    match ws.read() {
                        Ok(Message::Binary(b)) if read.take(&mut dec, &b, &mut login_done) => break,
                        Ok(Message::Close(c)) => panic!("closed: {c:?}"),
                        Ok(_) => {}
                        Err(tungstenite::Error::Io(e))
                            if matches!(e.kind(), std::io::ErrorKind::WouldBlock | std::io::ErrorKind::TimedOut) => {}
                        Err(e) => panic!("read: {e}"),
                    }
                }
            }
            Way::Tcp => {
                use std::io::{Read as _, Write as _};
                let mut s = std::net::TcpStream::connect_timeout(&to, Duration::from_secs(5)).unwrap();
                s.set_read_timeout(Some(Duration::from_secs(1))).unwrap();
                s.write_all(&hello).unwrap();
                let mut buf = vec![0; 1 << 16];
                while Instant::now() < deadline {
                    match s.read(&mut buf) {
                        Ok(0) => break,
                        Ok(n) if read.take(&mut dec, &buf[..n], &mut login_done) => break,
                        Ok(_) => {}
                        Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => {}
                        Err(e) if e.kind() == std::io::ErrorKind::TimedOut => {}
                        Err(e) => panic!("read: {e}"),
                    }
                }
            }
        }
        read
    });
    tokio::task::spawn_blocking(move || thread.join().unwrap()).await.unwrap()
}

/// One run's figures.
struct Figures {
    chat_p50: Duration,
    chat_p99: Duration,
    chat_max: Duration,
    keep_alive_max: Duration,
    /// Bulk bytes per second from the first bulk byte to the last.
    goodput: f64,
}

/// Checks the transcript (every byte, each lane in order) and measures.
fn measure(what: &str, written: &Written, read: &Read) -> Figures {
    assert_eq!(read.urgent.len(), written.urgent.len(), "{what}: every urgent byte arrives");
    assert!(read.urgent == written.urgent, "{what}: the urgent lane arrives in the backend's order");
    assert_eq!(read.bulk.len(), written.bulk.len(), "{what}: every bulk byte arrives");
    assert!(read.bulk == written.bulk, "{what}: the bulk lane arrives in the backend's order");
    let delays = |w: &[Instant], r: &[Instant]| -> Vec<Duration> {
        let mut d: Vec<Duration> = w.iter().zip(r).map(|(w, r)| r.saturating_duration_since(*w)).collect();
        d.sort();
        d
    };
    let chats = delays(&written.chats, &read.chats);
    let keep_alives = delays(&written.keep_alives, &read.keep_alives);
    let pct = |d: &[Duration], p: f64| d[((d.len() as f64 * p).ceil() as usize).clamp(1, d.len()) - 1];
    let span = read.last_bulk.unwrap().duration_since(read.first_bulk.unwrap()).as_secs_f64();
    Figures {
        chat_p50: pct(&chats, 0.50),
        chat_p99: pct(&chats, 0.99),
        chat_max: *chats.last().unwrap(),
        keep_alive_max: *keep_alives.last().unwrap(),
        goodput: read.bulk.len() as f64 / span,
    }
}

fn row(what: &str, f: &Figures) {
    println!(
        "| {what} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
        f.chat_p50.as_secs_f64() * 1e3,
        f.chat_p99.as_secs_f64() * 1e3,
        f.chat_max.as_secs_f64() * 1e3,
        f.keep_alive_max.as_secs_f64() * 1e3,
        f.goodput / 1e3
    );
}

/// The admin token of every proxy here (`[metrics] admin_token_file`).
const TOKEN: &str = "lanes-test-token-0123456789abcdef0123456789abcdef";

fn proxy_config(ws: SocketAddr, tcp: SocketAddr, backend: SocketAddr, token: &std::path::Path) -> String {
    format!(
        "[[listener]]\ntransport = \"ws\"\nbind = \"{ws}\"\n\n[[listener]]\ntransport = \"tcp\"\nbind = \"{tcp}\"\n\n\
         [[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n\n[metrics]\nbind = \"127.0.0.1:0\"\n\
         admin_token_file = {:?}\n",
        token.display().to_string()
    )
}

/// `moonbridge ctl --json delivery` (`GET /admin/delivery`) until `Flood`'s row shows a measured window
/// (within 20 s): the figures while its view load is under way.
async fn delivery_figures(metrics: SocketAddr, token: &std::path::Path) -> serde_json::Value {
    let url = format!("http://{metrics}");
    let args =
        ["ctl", "--json", "--url", &url, "--token-file", &token.display().to_string(), "delivery"].map(String::from);
    tokio::time::timeout(Duration::from_secs(20), async {
        loop {
            let args = args.clone();
            let ctl = move || std::process::Command::new(testbed::moonbridge_bin()).args(args).output();
            let out = tokio::task::spawn_blocking(ctl).await.unwrap().unwrap();
            if let Ok(v) = serde_json::from_slice::<serde_json::Value>(&out.stdout) {
                let row = v.as_array().and_then(|p| p.iter().find(|r| r["name"] == "Flood")).cloned();
                // Once the window has found the path (the rate climbs from the first window's over a few round trips).
                let found = |r: &serde_json::Value| {
                    r["bulk_bytes"].as_u64() > Some(0) && r["rate_bytes_per_second"].as_u64() > Some(300_000)
                };
                if let Some(row) = row.filter(found) {
                    return row;
                }
            }
            tokio::time::sleep(Duration::from_millis(200)).await;
        }
    })
    .await
    .expect("the delivery figures show the player's queue and window")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn chat_and_keep_alive_overtake_view_loads_on_a_slow_path() {
    let path = match ShapedPath::new(SHAPE) {
        Ok(p) => p,
        Err(e) => panic!("the shaped path needs CAP_NET_ADMIN and /dev/net/tun (CI runs as root): {e}"),
    };
    let outside = IpAddr::V4(path.outside_ip);
    let dir = testbed::TestDir::new("moonbridge-lanes").unwrap();
    let token = dir.path().join("admin.token");
    std::fs::write(&token, TOKEN).unwrap();
    std::fs::set_permissions(&token, std::os::unix::fs::PermissionsExt::from_mode(0o600)).unwrap();
    let bound = |ip: IpAddr| SocketAddr::new(ip, 0);
    println!("| player | chat p50 ms | chat p99 ms | chat max ms | Keep Alive max ms | bulk kB/s |");
    println!("|---|---|---|---|---|---|");
    let goal = RTT * 3 + TICK;

    // The client library (v2, paced) straight to moonbridge.
    let (backend, written, done) = flood_backend().await;
    let proxy = Proxy::start(&proxy_config(bound(outside), bound(outside), backend, &token)).await;
    let player =
        run_player(&path, Way::Library, proxy.addr(moonbridge_proxy::config::Transport::Ws), Arc::clone(&written));
    let (read, figures) = tokio::join!(player, delivery_figures(proxy.metrics.unwrap(), &token));
    let direct = measure("client library", &written.lock().unwrap(), &read);
    row("client library (v2) → moonbridge", &direct);
    drop(done);
    let urgent_delay = proxy.metric("moonbridge_urgent_delay_seconds_count").await.unwrap_or(0.0);
    proxy.shutdown().await;

    // The same behind nginx.
    let (backend, written, done) = flood_backend().await;
    let loopback = IpAddr::V4(std::net::Ipv4Addr::LOCALHOST);
    let proxy = Proxy::start(&proxy_config(bound(loopback), bound(loopback), backend, &token)).await;
    let nginx = Nginx::start_on(outside, &[proxy.addr(moonbridge_proxy::config::Transport::Ws)]).await;
    let read = run_player(&path, Way::Library, nginx.front, Arc::clone(&written)).await;
    let edge = measure("client library behind nginx", &written.lock().unwrap(), &read);
    row("client library (v2) → nginx → moonbridge", &edge);
    drop(done);
    drop(nginx);
    proxy.shutdown().await;

    // A TCP player through moonbridge: lanes and the kernel bound.
    let (backend, written, done) = flood_backend().await;
    let proxy = Proxy::start(&proxy_config(bound(outside), bound(outside), backend, &token)).await;
    let read =
        run_player(&path, Way::Tcp, proxy.addr(moonbridge_proxy::config::Transport::Tcp), Arc::clone(&written)).await;
    let tcp = measure("tcp through moonbridge", &written.lock().unwrap(), &read);
    row("TCP → moonbridge", &tcp);
    drop(done);
    proxy.shutdown().await;

    // A plain WebSocket (carriage v1): the lanes and the kernel bound; what the player sends reaches the backend
    // while its queue drains (the relay reads the player between two messages, however long the queue).
    let (backend, written, done) = flood_backend().await;
    let proxy = Proxy::start(&proxy_config(bound(outside), bound(outside), backend, &token)).await;
    let read =
        run_player(&path, Way::WsV1, proxy.addr(moonbridge_proxy::config::Transport::Ws), Arc::clone(&written)).await;
    let v1 = measure("plain websocket", &written.lock().unwrap(), &read);
    row("WebSocket v1 → moonbridge", &v1);
    let heard = written.lock().unwrap().player_chats.clone();
    drop(done);
    proxy.shutdown().await;
    assert!(read.sent_chats.len() >= 30, "the player chatted throughout ({})", read.sent_chats.len());
    assert_eq!(heard.len(), read.sent_chats.len(), "every chat of the player reached the backend");
    let slowest = read.sent_chats.iter().zip(&heard).map(|(s, h)| h.saturating_duration_since(*s)).max().unwrap();
    assert!(slowest < Duration::from_secs(1), "a player's chat reached the backend {slowest:?} after it was sent");

    // What players have without it: TCP through HAProxy to the backend.
    let (backend, written, done) = flood_backend().await;
    let haproxy = Haproxy::start_on(outside, &[("mc", vec![backend])]).await;
    let read = run_player(&path, Way::Tcp, haproxy.fronts[0], Arc::clone(&written)).await;
    let plain = measure("tcp through haproxy", &written.lock().unwrap(), &read);
    row("TCP → HAProxy", &plain);
    drop(done);
    drop(haproxy);

    assert!(urgent_delay > 0.0, "moonbridge_urgent_delay_seconds counted the urgent writes");
    // The operator's view of the player while it was behind: lanes on, its queue, the window as measured.
    assert_eq!(figures["lanes"], true, "{figures}");
    assert_eq!(figures["carriage"], "v2.zstd", "{figures}");
    let rtt = figures["rtt_ms"].as_f64().unwrap();
    assert!((35.0..150.0).contains(&rtt), "the round trip the carriage sees: {figures}");
    let rate = figures["rate_bytes_per_second"].as_u64().unwrap();
    assert!((300_000..800_000).contains(&rate), "the delivery rate of a 4 Mbit/s path: {figures}");
    assert!(figures["window_bytes"].as_u64().unwrap() < 256 * 1024, "{figures}");
    for (what, f) in [("direct", &direct), ("behind nginx", &edge)] {
        assert!(f.chat_p99 < goal, "{what}: chat p99 {:?} over 3 × RTT + one tick ({goal:?})", f.chat_p99);
        assert!(f.keep_alive_max < Duration::from_secs(1), "{what}: a Keep Alive waited {:?}", f.keep_alive_max);
        assert!(f.goodput > 250_000.0, "{what}: bulk at {:.0} B/s does not use the 500 kB/s path", f.goodput);
    }
    assert!(
        plain.chat_max > Duration::from_secs(2),
        "without lanes chat waits behind view loads ({:?})",
        plain.chat_max
    );
}
