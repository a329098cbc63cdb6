//! `session-bench flood`: chat and Keep Alive behind view loads, on loopback with a throttled reader (issue 51,
//! docs/lanes.md). A backend of this process logs the player in and then writes the mix of the lanes test: view
//! loads of 200 chunks (S21, 20 KiB each) at 50 per tick, one every 10 s, a chat every 500 ms and a Keep Alive
//! every 2 s, through a queue of its own (a server's Netty queue: each frame's time is when it was queued). The
//! player reads at `--reader-kbps` (a token bucket) with a 32 KiB receive buffer, so the path behind the proxy
//! is that slow and the queue builds in front of it. Each chat's delay is from its queueing at the backend to
//! its read by the player.
//!
//! Through: moonbridge over `tcp` and over `ws` (a plain WebSocket, carriage v1: the lanes and the kernel
//! bound; the v2 window needs the client library's acks and a real path: `tests/tests/lanes.rs`), and the
//! peers: HAProxy (tcp) and websocat (ws), which relay in order.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::mpsc;
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use moonbridge_client_scenarios::flood::{end_marker, Kind, Schedule, CHAT, KEEP_ALIVE, PLUGIN, TICK};
use moonbridge_protocol::packets::{LoginSuccess, Packet};
use moonbridge_protocol::FrameDecoder;
use serde::Serialize;
use tokio_tungstenite::tungstenite;

use crate::peers::{PeerArg, TransportArg};
use crate::process::{spawn, spawn_moonbridge, wait_for_port, Output};

/// How the player reaches the backend.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum, Serialize)]
#[serde(rename_all = "kebab-case")]
pub enum Through {
    MoonbridgeTcp,
    MoonbridgeWs,
    Haproxy,
    Websocat,
}

/// `session-bench flood` arguments.
#[derive(clap::Args, Debug, Clone)]
pub struct FloodArgs {
    /// Comma-separated: moonbridge-tcp, moonbridge-ws, haproxy, websocat.
    #[arg(long, default_value = "moonbridge-tcp,moonbridge-ws,haproxy", value_delimiter = ',')]
    pub through: Vec<Through>,
    /// The player's read rate, kilobytes per second (500: 4 Mbit/s).
    #[arg(long, default_value_t = 500)]
    pub reader_kbps: u64,
    /// View loads, one every 10 s (the reader needs 8 s for each at 500 kB/s).
    #[arg(long, default_value_t = 2)]
    pub loads: u32,
    /// The moonbridge binary.
    #[arg(long, default_value = "target/release/moonbridge")]
    pub proxy_bin: PathBuf,
    /// Print one JSON object per run instead of text.
    #[arg(long)]
    pub json: bool,
}

impl FloodArgs {
    /// The defaults of every flag (`session-bench --profile flood`).
    pub fn defaults() -> Self {
        Self {
            through: vec![Through::MoonbridgeTcp, Through::MoonbridgeWs, Through::Haproxy],
            reader_kbps: 500,
            loads: 2,
            proxy_bin: PathBuf::from("target/release/moonbridge"),
            json: false,
        }
    }
}

/// One run's result.
#[derive(Debug, Serialize)]
struct Run {
    through: Through,
    reader_kbps: u64,
    chats: usize,
    chat_p50_ms: f64,
    chat_p99_ms: f64,
    chat_max_ms: f64,
    keep_alive_max_ms: f64,
    /// Bulk bytes per second read, from the first bulk byte to the last.
    bulk_kbps: f64,
}

/// When the backend queued each chat and Keep Alive.
#[derive(Default)]
struct Queued {
    chats: Vec<Instant>,
    keep_alives: Vec<Instant>,
}

/// Serves one player: reads its handshake and Login Start, then writes the schedule through a writer thread.
fn serve(mut s: TcpStream, loads: u32, queued: Arc<Mutex<Queued>>) -> anyhow::Result<()> {
    let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
    let mut buf = vec![0; 4096];
    let mut frames = 0;
    while frames < 2 {
        let n = s.read(&mut buf)?;
        if n == 0 {
            return Ok(()); // a probe of a peer, not a player
        }
        dec.queue_slice(buf.get(..n).unwrap_or_default());
        while dec.try_next_frame()?.is_some() {
            frames += 1;
        }
    }
    let (tx, rx) = mpsc::channel::<Vec<u8>>();
    let mut w = s.try_clone()?;
    let writer = std::thread::spawn(move || {
        for f in rx {
            if w.write_all(&f).is_err() {
                return;
            }
        }
    });
    let uuid = moonbridge_protocol::forwarding::offline_uuid("Flood").to_string();
    tx.send(LoginSuccess { uuid, name: "Flood".into() }.to_frame_bytes()?.to_vec())?;
    let mut schedule = Schedule::new(loads);
    let start = Instant::now();
    let mut next_tick = start;
    while next_tick < start + schedule.length() {
        std::thread::sleep(next_tick.saturating_duration_since(Instant::now()));
        next_tick += TICK;
        for (kind, f) in schedule.tick(start.elapsed()) {
            let mut q = queued.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
            match kind {
                Kind::Chat => q.chats.push(Instant::now()),
                Kind::KeepAlive => q.keep_alives.push(Instant::now()),
                Kind::Chunk => {}
            }
            drop(q);
            tx.send(f)?;
        }
    }
    tx.send(end_marker())?;
    drop(tx);
    let _ = writer.join();
    // Held open until the player is done (a server does not hang up after a flood).
    let _ = s.read(&mut buf);
    Ok(())
}

/// What the player read.
#[derive(Default)]
struct Seen {
    chats: Vec<Instant>,
    keep_alives: Vec<Instant>,
    bulk: u64,
    first_bulk: Option<Instant>,
    last_bulk: Option<Instant>,
    login: bool,
}

impl Seen {
    /// Takes stream bytes; true once the end frame arrived.
    fn take(&mut self, dec: &mut FrameDecoder, bytes: &[u8]) -> anyhow::Result<bool> {
        dec.queue_slice(bytes);
        let now = Instant::now();
        while let Some(f) = dec.try_next_frame()? {
            if !self.login {
                self.login = true;
                continue;
            }
            match u8::try_from(f.id).unwrap_or(0xff) {
                CHAT => self.chats.push(now),
                KEEP_ALIVE => self.keep_alives.push(now),
                id => {
                    self.bulk += f.body.len() as u64;
                    self.first_bulk.get_or_insert(now);
                    self.last_bulk = Some(now);
                    if id == PLUGIN {
                        return Ok(true);
                    }
                }
            }
        }
        Ok(false)
    }
}

/// A socket with a 32 KiB receive buffer (set before connecting, so the window is that small from the start).
fn small_window(to: SocketAddr) -> anyhow::Result<TcpStream> {
    let s = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None)?;
    s.set_recv_buffer_size(32 * 1024)?;
    s.connect(&to.into())?;
    let s: TcpStream = s.into();
    s.set_read_timeout(Some(Duration::from_secs(30)))?;
    Ok(s)
}

/// The reader's token bucket: waits until `consumed` bytes fit the rate since `start`.
fn throttle(start: Instant, consumed: u64, bytes_per_s: u64) {
    let due = start + Duration::from_secs_f64(consumed as f64 / bytes_per_s as f64);
    std::thread::sleep(due.saturating_duration_since(Instant::now()));
}

/// The player: logs in through `to` (`ws`: a plain WebSocket at `/mc`) and reads at `bytes_per_s`.
fn play(to: SocketAddr, ws: bool, bytes_per_s: u64) -> anyhow::Result<Seen> {
    let hello = hello();
    let mut seen = Seen::default();
    let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
    let start = Instant::now();
    let mut consumed = 0u64;
    let deadline = start + Duration::from_secs(120);
    if ws {
        let (mut socket, _) = tungstenite::client(format!("ws://{to}/mc"), small_window(to)?)?;
        socket.send(tungstenite::Message::Binary(hello.into()))?;
        while Instant::now() < deadline {
            match socket.read()? {
                tungstenite::Message::Binary(b) => {
                    consumed += b.len() as u64;
                    if seen.take(&mut dec, &b)? {
                        return Ok(seen);
                    }
                    throttle(start, consumed, bytes_per_s);
                }
                tungstenite::Message::Close(c) => bail!("closed: {c:?}"),
                _ => {}
            }
        }
    } else {
        let mut s = small_window(to)?;
        s.write_all(&hello)?;
        let mut buf = vec![0; 8192];
        while Instant::now() < deadline {
            let n = s.read(&mut buf)?;
            if n == 0 {
                bail!("closed after {consumed} bytes");
            }
            consumed += n as u64;
            if seen.take(&mut dec, buf.get(..n).unwrap_or_default())? {
                return Ok(seen);
            }
            throttle(start, consumed, bytes_per_s);
        }
    }
    bail!("the schedule did not end within 120 s")
}

/// The handshake and Login Start of `Flood`.
fn hello() -> Vec<u8> {
    use moonbridge_protocol::packets::{Handshake, LoginStart, NextState};
    let hs = Handshake {
        protocol_version: 5,
        server_address: "mc.example.com".into(),
        server_port: 25565,
        next_state: NextState::Login,
    };
    let mut out = hs.to_frame_bytes().map(|b| b.to_vec()).unwrap_or_default();
    out.extend(LoginStart { name: "Flood".into() }.to_frame_bytes().map(|b| b.to_vec()).unwrap_or_default());
    out
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// Runs each `--through` (see the module documentation).
pub fn main(args: &FloodArgs) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("session-bench-flood-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let mut runs = Vec::new();
    for &through in &args.through {
        let backend = TcpListener::bind("127.0.0.1:0")?;
        let backend_addr = backend.local_addr()?;
        let queued = Arc::new(Mutex::new(Queued::default()));
        let q = Arc::clone(&queued);
        let loads = args.loads;
        std::thread::spawn(move || {
            for conn in backend.incoming().flatten() {
                let q = Arc::clone(&q);
                std::thread::spawn(move || serve(conn, loads, q));
            }
        });
        let listen = SocketAddr::from(([127, 0, 0, 1], free_port()?));
        let log = dir.join(format!("{through:?}.log"));
        let (_relay, ws) = match through {
            Through::MoonbridgeTcp | Through::MoonbridgeWs => {
                let config = dir.join("moonbridge.toml");
                let transport = if through == Through::MoonbridgeWs { "ws" } else { "tcp" };
                std::fs::write(
                    &config,
                    format!(
                        "[[listener]]\ntransport = \"{transport}\"\nbind = \"{listen}\"\n\n\
                         [[backend]]\nname = \"flood\"\naddress = \"{backend_addr}\"\n\n[lanes]\nenabled = true\n"
                    ),
                )?;
                let p = spawn_moonbridge(&args.proxy_bin, &config, "warn", Output::File(&log))?;
                (p, through == Through::MoonbridgeWs)
            }
            Through::Haproxy | Through::Websocat => {
                let (peer, transport) = match through {
                    Through::Haproxy => (PeerArg::Haproxy, TransportArg::Tcp),
                    _ => (PeerArg::Websocat, TransportArg::Ws),
                };
                let mut c = peer.command(None, listen, backend_addr, transport, 4, &dir)?;
                (spawn(&mut c, Output::File(&log), || peer.missing().to_string())?, transport == TransportArg::Ws)
            }
        };
        wait_for_port(listen, "the relay")?;
        let seen = play(listen, ws, args.reader_kbps * 1000).with_context(|| format!("through {through:?}"))?;
        let queued = queued.lock().map_err(|_| anyhow::anyhow!("poisoned"))?;
        runs.push(measure(through, args.reader_kbps, &queued, &seen));
    }
    if args.json {
        for r in &runs {
            println!("{}", serde_json::to_string(r)?);
        }
    } else {
        println!("| through | reader kB/s | chat p50 ms | chat p99 ms | chat max ms | Keep Alive max ms | bulk kB/s |");
        println!("|---|---:|---:|---:|---:|---:|---:|");
        for r in &runs {
            println!(
                "| {:?} | {} | {:.0} | {:.0} | {:.0} | {:.0} | {:.0} |",
                r.through, r.reader_kbps, r.chat_p50_ms, r.chat_p99_ms, r.chat_max_ms, r.keep_alive_max_ms, r.bulk_kbps
            );
        }
    }
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn measure(through: Through, reader_kbps: u64, queued: &Queued, seen: &Seen) -> Run {
    let delays = |q: &[Instant], s: &[Instant]| -> Vec<f64> {
        let mut d: Vec<f64> =
            q.iter().zip(s).map(|(q, s)| s.saturating_duration_since(*q).as_secs_f64() * 1e3).collect();
        d.sort_by(f64::total_cmp);
        d
    };
    let chats = delays(&queued.chats, &seen.chats);
    let keep_alives = delays(&queued.keep_alives, &seen.keep_alives);
    let pct = |d: &[f64], p: f64| {
        d.get(((d.len() as f64 * p).ceil() as usize).clamp(1, d.len().max(1)) - 1).copied().unwrap_or(0.0)
    };
    let span = match (seen.first_bulk, seen.last_bulk) {
        (Some(a), Some(b)) => b.duration_since(a).as_secs_f64().max(1e-3),
        _ => 1.0,
    };
    Run {
        through,
        reader_kbps,
        chats: chats.len(),
        chat_p50_ms: pct(&chats, 0.5),
        chat_p99_ms: pct(&chats, 0.99),
        chat_max_ms: chats.last().copied().unwrap_or(0.0),
        keep_alive_max_ms: keep_alives.last().copied().unwrap_or(0.0),
        bulk_kbps: seen.bulk as f64 / span / 1e3,
    }
}
