//! `session-bench capacity`: how many players one proxy holds.
//!
//! Thousands of players are driven from this one process as async tasks (`--transport wss`: tokio-tungstenite
//! over tokio-rustls, the default; `ws`; or `tcp`, Minecraft frames as they are; no thread per player), through
//! one or more `moonbridge` processes, to a backend in a child process (`session-bench capacity-backend`), so
//! that each of the three processes has its own file limit and its own CPU account. With `--peer`, the same
//! players then run again through a peer instead (HAProxy on tcp, websocat on ws, or the floor relay of
//! bench/src/floor.rs), and the report ends with moonbridge's proxy CPU per tick against the peer's. The players speak the carriage the client library speaks by default
//! (`--carriage v2.zstd`: carriage v2 with zstd, docs/carriage.md), or `v2` or `v1`. On v2 a player
//! acknowledges what it received every 64 KiB and, standing in for the client library's keepalive tick, at each
//! of the backend's Keep Alive (every 2 s) when the count moved; on `v2.zstd` it compresses each message with
//! the client library's own code (`moonbridge_protocol::ws::compress::Contexts`). A player's messages (a tick
//! of about 85 bytes, a Keep Alive answer) are all under 256 bytes, so they go as stored frames and the proxy
//! inflates nothing: compression's cost here is the proxy compressing the backend's answers.
//!
//! - **idle** players log in (offline mode: Handshake, Login Start, then Login Success and Join Game from the
//!   backend), then send nothing but the answers to the backend's Keep Alive (one every 2 s, as a 1.7.10
//!   server sends one every 40 ticks), and Pongs to the proxy's WebSocket Pings, which it sends only after
//!   half of `ping_interval_seconds` without writing (so the Keep Alive traffic leaves none here);
//! - **active** players also play: one client tick every 50 ms (20 ticks per second), C17 plugin message, C04
//!   position and C03 on ground in one WebSocket message, as the client library's per-tick coalescing sends
//!   it. The backend answers each tick with that tick's clientbound packets: the benchmark's modded mix
//!   (`--load modded`, 6–16 packets and about 6.5 KB per tick, a chunk on one tick in twenty) or one 64-byte
//!   plugin message (`--load light`). The tick round trip runs from when the tick was due (its 50 ms slot)
//!   to the last packet of its answer, so a load generator that falls behind adds to it instead of hiding
//!   it (a late tick is still sent, as a game catches up); ticks still unanswered at the end count with their
//!   age.
//!
//! Players join at `--connect-rate`, idle ones first; after 5 s of warm-up the round trips, the CPU of the
//! three kinds of process and the proxies' memory are measured for `--seconds`. The run fails when a player
//! cannot join or loses its connection, when the players sent under 98% of the ticks due (the load generator
//! itself was short of CPU), or when the p99 tick round trip is over `--p99-limit-ms`. The report also gives
//! how late the players' tick timers fired (p99), the load generator's own lag.
//!
//! "Idle" here is a quiet connection. A real 1.7.10 client standing still still sends a C03 every tick, which
//! is an active player's traffic in this model.
//!
//! A login burst (the Forge registry sync) is left out: it is what `session-bench` measures per login, and
//! thousands of 2 MB bursts would measure the ramp instead of what the proxy holds.

use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use futures_util::{SinkExt, StreamExt};
use moonbridge_protocol::frame::encode_frame;
use moonbridge_protocol::packets::{KeepAlive, LoginSuccess, Packet, PluginMessage};
use moonbridge_protocol::FrameDecoder;
use moonbridge_test_certs::{KeyType, TestCert, TestDir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::metrics;
use moonbridge_test_certs::free_port;

use crate::peers::{PeerArg, TransportArg};
use crate::soak::{tls_connector, Child, Failures};
use crate::workload;

/// What the backend answers an active player's tick with.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Load {
    /// The modded mix of `session-bench --profile modded`: about 6.5 KB in 6–16 packets per tick.
    Modded,
    /// One S3F plugin message of 64 bytes per tick.
    Light,
    /// The modded mix with honest bytes (`session-bench --profile forge`): gzipped NBT, mod channel messages,
    /// deflated chunks, as 1.7.10 Forge builds them.
    Forge,
}

impl Load {
    /// The tick answers' templates (`--load light` answers one packet of its own).
    fn templates(self) -> Vec<Vec<workload::Spec>> {
        match self {
            Self::Forge => workload::forge_templates(),
            Self::Modded | Self::Light => workload::templates(),
        }
    }
}

/// The WebSocket carriage the players speak (docs/carriage.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum Carriage {
    /// `moonbridge.v1`: plain Binary messages (what a WebSocket bridge speaks).
    #[value(name = "v1")]
    #[serde(rename = "v1")]
    V1,
    /// `moonbridge.v2`: resumable, acknowledged, not compressed (the client library with `compress: false`).
    #[value(name = "v2")]
    #[serde(rename = "v2")]
    V2,
    /// `moonbridge.v2.zstd`: carriage v2 with zstd (the client library's defaults).
    #[value(name = "v2.zstd")]
    #[serde(rename = "v2.zstd")]
    V2Zstd,
}

impl Carriage {
    /// The subprotocol offered.
    fn subprotocol(self) -> &'static str {
        match self {
            Self::V1 => "moonbridge.v1",
            Self::V2 => "moonbridge.v2",
            Self::V2Zstd => moonbridge_protocol::ws::compress::SUBPROTOCOL_V2_ZSTD,
        }
    }
}

/// A player's side of the carriage: wraps stream bytes into Binary payloads and back, and says when to
/// acknowledge (v2).
struct Carrier {
    v2: bool,
    zstd: Option<moonbridge_protocol::ws::compress::Contexts>,
    /// Stream bytes received, and acknowledged, so far.
    received: u64,
    acked: u64,
    inflated: Vec<u8>,
}

/// Acknowledge after this many stream bytes (the client library's rule).
const ACK_EVERY: u64 = 64 * 1024;
/// The most stream bytes one received message may inflate to (the client library's limit: 16 MiB).
const MAX_INFLATED: usize = 16 << 20;

impl Carrier {
    fn new(carriage: Carriage) -> Self {
        let zstd = (carriage == Carriage::V2Zstd).then(|| {
            moonbridge_protocol::ws::compress::Contexts::new(moonbridge_protocol::ws::compress::DEFAULT_LEVEL)
        });
        Self { v2: carriage != Carriage::V1, zstd, received: 0, acked: 0, inflated: Vec::new() }
    }

    /// The Binary payload that carries `stream`.
    fn wrap(&mut self, stream: Vec<u8>) -> anyhow::Result<Vec<u8>> {
        let Some(z) = self.zstd.as_mut() else { return Ok(stream) };
        let mut out = Vec::with_capacity(stream.len() / 2 + 16);
        z.compress(&stream, &mut out)?;
        Ok(out)
    }

    /// The stream bytes a received Binary payload carries, queued into `dec`.
    fn unwrap_into(&mut self, payload: &[u8], dec: &mut FrameDecoder) -> anyhow::Result<()> {
        let n = match self.zstd.as_mut() {
            None => {
                dec.queue_slice(payload);
                payload.len()
            }
            Some(z) => {
                self.inflated.clear();
                z.queue(payload)?;
                while z.has_output() {
                    z.inflate(&mut self.inflated, MAX_INFLATED, MAX_INFLATED)?;
                }
                z.end_message();
                dec.queue_slice(&self.inflated);
                self.inflated.len()
            }
        };
        self.received += n as u64;
        Ok(())
    }

    /// The `ack` to send now, if any: every [`ACK_EVERY`] bytes, or on `tick` when the count moved (v2).
    fn ack(&mut self, tick: bool) -> Option<String> {
        let due = self.received - self.acked >= ACK_EVERY || (tick && self.received > self.acked);
        (self.v2 && due).then(|| {
            self.acked = self.received;
            format!("ack {}", self.received)
        })
    }
}

/// `session-bench capacity`: see the module documentation.
#[derive(Parser, Debug)]
#[command(
    name = "session-bench capacity",
    about = "How many idle and active players one proxy holds (players are async tasks of this process)",
    after_help = "The file limit: every player needs one file descriptor here, one in the backend process and two \
                  in the proxy (player and backend sockets). See docs/operations.md, \"Many players\"."
)]
pub struct CapacityArgs {
    /// Idle players: logged in, answering Keep Alive (every 2 s), no ticks.
    #[arg(long, default_value_t = 10_000)]
    pub idle: usize,
    /// Active players: one client tick per 50 ms, each answered by the backend.
    #[arg(long, default_value_t = 2_000)]
    pub active: usize,
    /// What the backend answers a tick with.
    #[arg(long, value_enum, default_value = "modded")]
    pub load: Load,
    /// The WebSocket carriage the players speak (default: the client library's).
    #[arg(long, value_enum, default_value = "v2.zstd")]
    pub carriage: Carriage,
    /// Seconds measured once every player is in play (after 5 s of warm-up).
    #[arg(long, default_value_t = 30)]
    pub seconds: u64,
    /// New connections per second while players join.
    #[arg(long, default_value_t = 500)]
    pub connect_rate: u32,
    /// Proxy processes, each on its own port; players are dealt to them in turn.
    #[arg(long, default_value_t = 1)]
    pub proxies: usize,
    /// Worker threads of each proxy (`[runtime] workers`; 0: one per core).
    #[arg(long, default_value_t = 0)]
    pub proxy_workers: usize,
    /// The moonbridge binary.
    #[arg(long, default_value = "target/release/moonbridge")]
    pub proxy_bin: PathBuf,
    /// The run fails when the p99 tick round trip is over this, in milliseconds.
    #[arg(long, default_value_t = 50)]
    pub p99_limit_ms: u64,
    /// The players' transport: `wss`, `ws`, or `tcp` (Minecraft frames as they are; no carriage).
    #[arg(long, value_enum, default_value = "wss")]
    pub transport: TransportArg,
    /// Then the same players again through a peer instead of moonbridge, in the same run: `haproxy` (tcp),
    /// `websocat` (ws) or `floor` (tcp or ws; `session-bench floor-relay`). On ws the peers speak plain
    /// WebSocket, so `--carriage v1` is needed; one proxy process.
    #[arg(long, value_enum)]
    pub peer: Option<PeerArg>,
    /// The peer's program (default: found on PATH; the floor is this program).
    #[arg(long)]
    pub peer_bin: Option<PathBuf>,
    /// Print JSON instead of text: one object per run (moonbridge, then the peer), then with `--peer` one
    /// with the ratio (`moonbridge_vs`, `proxy_cpu_per_tick_ratio`).
    #[arg(long)]
    pub json: bool,
}

/// Milliseconds between two client ticks (20 per second).
const TICK_MS: u64 = 50;
/// Seconds between two Keep Alive from the backend (a 1.7.10 server sends one every 40 ticks).
const KEEP_ALIVE_S: u64 = 2;
/// Warm-up between the last join and the measurement.
const WARM_UP: Duration = Duration::from_secs(5);
/// Players between TCP connect and Join Game at once (under the proxy's default `max_handshaking`, 1,024).
const JOINING_AT_ONCE: usize = 256;
/// Payload of a `--load light` answer, in bytes.
const LIGHT_BYTES: usize = 64;
/// Ticks a player sends without an answer before it gives up (10 s of ticks).
const MAX_IN_FLIGHT: usize = 200;
/// File descriptors a process needs besides its players' sockets.
const SPARE_FDS: u64 = 256;

// ------------------------------------------------------------------------------------------------------------
// The backend (a child process).
// ------------------------------------------------------------------------------------------------------------

/// `session-bench capacity-backend --load L`: listens on 127.0.0.1, prints `listening ADDR` and serves until
/// its standard input ends (its parent exited).
pub fn backend_main(load: Load) -> anyhow::Result<()> {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(0);
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        println!("listening {}", listener.local_addr()?);
        let templates = Arc::new(load.templates());
        loop {
            let s = match listener.accept().await {
                Ok((s, _)) => s,
                Err(e) => {
                    // Out of file descriptors, say: wait instead of spinning a core.
                    eprintln!("capacity backend: accept: {e}");
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    continue;
                }
            };
            let _ = s.set_nodelay(true);
            let t = Arc::clone(&templates);
            tokio::spawn(async move {
                if let Err(e) = backend_session(s, load, &t).await {
                    eprintln!("capacity backend: {e:#}");
                }
            });
        }
    })
}

/// Login Success and Join Game (S01: entity id, game mode, dimension, difficulty, max players, level type).
fn login_answer(name: &str, entity_id: i32) -> anyhow::Result<Vec<u8>> {
    let uuid = moonbridge_protocol::forwarding::offline_uuid(name).to_string();
    let mut out = LoginSuccess { uuid, name: name.into() }.to_frame_bytes()?.to_vec();
    let mut join = entity_id.to_be_bytes().to_vec();
    join.extend_from_slice(&[0, 0, 2, 100]);
    moonbridge_protocol::codec::put_string(&mut join, "default", 16, "level type")?;
    encode_frame(&mut out, 0x01, &join)?;
    Ok(out)
}

/// One player's connection at the backend: the login, then Keep Alive every 2 s and an answer per tick.
async fn backend_session(mut s: TcpStream, load: Load, templates: &[Vec<workload::Spec>]) -> anyhow::Result<()> {
    let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
    let mut buf = bytes::BytesMut::with_capacity(4096);
    // Players send nothing behind Login Start before they have joined.
    let Some((login, _)) = crate::backend::read_login(&mut s, &mut dec, &mut buf).await? else {
        return Ok(());
    };
    s.write_all(&login_answer(&login.name, 1000)?).await?;
    let mut keep_alive = tokio::time::interval_at(
        tokio::time::Instant::now() + Duration::from_secs(KEEP_ALIVE_S),
        Duration::from_secs(KEEP_ALIVE_S),
    );
    keep_alive.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut ka_id = 0i32;
    let mut tick: Option<u32> = None;
    let mut out = Vec::with_capacity(16 * 1024);
    loop {
        tokio::select! {
            _ = keep_alive.tick() => {
                ka_id = ka_id.wrapping_add(1);
                s.write_all(&KeepAlive { id: ka_id }.to_frame_bytes()?).await?;
            }
            r = s.read_buf(&mut buf) => {
                if r? == 0 {
                    return Ok(());
                }
                dec.queue_bytes(buf.split());
                while let Some(f) = dec.try_next_frame()? {
                    match f.id {
                        0x17 => tick = workload::client_tick_seq(f.id, &f.body),
                        0x03 => {
                            let seq = tick.take().context("C03 without its tick's C17")?;
                            match load {
                                Load::Modded | Load::Forge => {
                                    workload::encode_tick_answer(templates, seq, &mut out);
                                }
                                Load::Light => {
                                    let mut data = seq.to_be_bytes().to_vec();
                                    data.resize(LIGHT_BYTES, 0x5a);
                                    let p = PluginMessage { channel: "MB|Light".into(), data };
                                    let mut fields = Vec::new();
                                    p.encode_fields(&mut fields)?;
                                    encode_frame(&mut out, PluginMessage::CLIENTBOUND_ID, &fields)?;
                                }
                            }
                        }
                        _ => {} // C04, and C00 Keep Alive answers
                    }
                }
                if !out.is_empty() {
                    s.write_all(&out).await?;
                    out.clear();
                }
                buf.reserve(4096);
            }
        }
    }
}

// ------------------------------------------------------------------------------------------------------------
// The players.
// ------------------------------------------------------------------------------------------------------------

#[derive(Default)]
struct Shared {
    in_play: AtomicU64,
    joined: AtomicU64,
    failed_to_join: AtomicU64,
    dropped: AtomicU64,
    /// Set while the round trips count.
    measuring: AtomicBool,
    /// Round trips of ticks sent while measuring, in microseconds.
    rtt_us: Mutex<Vec<u32>>,
    /// How late the tick timer fired, in microseconds: the load generator's own lag.
    late_us: Mutex<Vec<u32>>,
    ticks_sent: AtomicU64,
    ticks_answered: AtomicU64,
    /// Counted ticks still without an answer when the players stopped.
    ticks_unanswered: AtomicU64,
    /// Players in play through each proxy.
    in_play_per_proxy: Vec<AtomicU64>,
    failures: Failures<20>,
}

/// A byte stream a WebSocket runs over (TCP, or TLS over TCP).
trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// A player's connection: plain TCP (Minecraft frames as they are) or a WebSocket (`ws` or `wss`).
enum Link {
    Tcp(TcpStream, Vec<u8>),
    Ws(Box<tokio_tungstenite::WebSocketStream<Box<dyn Io>>>),
}

/// What a player receives.
enum Incoming {
    /// Stream bytes (TCP) or a Binary message's payload.
    Data(bytes::Bytes),
    /// The peer closed (the WebSocket Close, or the end of the TCP stream).
    Closed(String),
    /// Anything else (Ping, Pong, Text): nothing to do.
    Other,
}

impl Link {
    async fn send_binary(&mut self, b: Vec<u8>) -> anyhow::Result<()> {
        match self {
            Self::Tcp(s, _) => s.write_all(&b).await?,
            Self::Ws(ws) => ws.send(Message::Binary(b.into())).await?,
        }
        Ok(())
    }

    /// A Text message (carriage v2's `ack`); TCP players never send one.
    async fn send_text(&mut self, t: String) -> anyhow::Result<()> {
        if let Self::Ws(ws) = self {
            ws.send(Message::Text(t.into())).await?;
        }
        Ok(())
    }

    /// The next thing received (cancel-safe); an error when the connection failed.
    async fn next(&mut self) -> anyhow::Result<Incoming> {
        match self {
            Self::Tcp(s, buf) => {
                buf.resize(64 * 1024, 0);
                let n = s.read(buf).await?;
                Ok(match n {
                    0 => Incoming::Closed("the connection ended".into()),
                    n => Incoming::Data(bytes::Bytes::copy_from_slice(buf.get(..n).unwrap_or_default())),
                })
            }
            Self::Ws(ws) => Ok(match ws.next().await {
                Some(Ok(Message::Binary(b))) => Incoming::Data(b),
                Some(Ok(Message::Close(c))) => Incoming::Closed(format!("closed: {c:?}")),
                Some(Ok(_)) => Incoming::Other,
                Some(Err(e)) => return Err(e.into()),
                None => Incoming::Closed("the connection ended".into()),
            }),
        }
    }

    async fn close(&mut self) {
        match self {
            Self::Tcp(s, _) => {
                let _ = s.shutdown().await;
            }
            Self::Ws(ws) => {
                let _ = ws.as_mut().close(None).await;
            }
        }
    }
}

/// How a player reaches its proxy: the transport, the TLS connector for `wss`, and the subprotocol offered
/// (none to a plain WebSocket bridge).
#[derive(Clone)]
struct Reach {
    transport: TransportArg,
    tls: tokio_rustls::TlsConnector,
    offer: Option<&'static str>,
}

/// Connects with `reach`, then logs in with `carrier`'s carriage; returns the link once Join Game has arrived,
/// with what followed it in `dec`.
async fn join(
    port: u16,
    name: &str,
    reach: &Reach,
    carrier: &mut Carrier,
    dec: &mut FrameDecoder,
) -> anyhow::Result<Link> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let tcp = TcpStream::connect(("127.0.0.1", port)).await?;
    tcp.set_nodelay(true)?;
    let mut link = match reach.transport {
        TransportArg::Tcp => Link::Tcp(tcp, Vec::new()),
        TransportArg::Ws | TransportArg::Wss => {
            let (io, scheme): (Box<dyn Io>, _) = if reach.transport == TransportArg::Wss {
                (Box::new(reach.tls.connect(rustls::pki_types::ServerName::try_from("localhost")?, tcp).await?), "wss")
            } else {
                (Box::new(tcp), "ws")
            };
            let mut request = format!("{scheme}://localhost:{port}/mc").into_client_request()?;
            if let Some(offer) = reach.offer {
                request.headers_mut().insert("Sec-WebSocket-Protocol", offer.parse()?);
            }
            let (ws, response) = tokio_tungstenite::client_async(request, io).await?;
            let selected = response.headers().get("Sec-WebSocket-Protocol").and_then(|v| v.to_str().ok());
            if selected != reach.offer {
                bail!("offered {:?}, the proxy selected {selected:?}", reach.offer);
            }
            Link::Ws(Box::new(ws))
        }
    };
    link.send_binary(carrier.wrap(workload::login_hello("localhost", name)?)?).await?;
    let mut seen = 0;
    while seen < 2 {
        match link.next().await? {
            Incoming::Data(b) => carrier.unwrap_into(&b, dec)?,
            Incoming::Closed(why) => bail!("closed during the login: {why}"),
            Incoming::Other => continue,
        }
        while seen < 2 {
            let Some(f) = dec.try_next_frame()? else { break };
            match (seen, f.id) {
                (0, 0x02) | (1, 0x01) => seen += 1,
                (0, 0x00) => bail!("Login Disconnect: {}", String::from_utf8_lossy(&f.body)),
                (_, id) => bail!("packet 0x{id:02x} during the login"),
            }
        }
    }
    Ok(link)
}

/// One player: joins at `start`, then plays (or idles) until `stop`.
#[allow(clippy::too_many_arguments)]
async fn player(
    i: usize,
    (proxy, port): (usize, u16),
    active: bool,
    start: tokio::time::Instant,
    gate: Arc<tokio::sync::Semaphore>,
    (reach, carriage): (Reach, Carriage),
    answers: Arc<Vec<usize>>,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    tokio::time::sleep_until(start).await;
    let name = format!("cap{i:05}");
    let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
    let mut carrier = Carrier::new(carriage);
    let joined = {
        let Ok(_permit) = gate.acquire().await else { return };
        let joining = join(port, &name, &reach, &mut carrier, &mut dec);
        tokio::select! {
            r = tokio::time::timeout(Duration::from_secs(30), joining) => r,
            () = stop.cancelled() => return,
        }
    };
    let mut link = match joined {
        Ok(Ok(link)) => link,
        Ok(Err(e)) => {
            shared.failed_to_join.fetch_add(1, Ordering::Relaxed);
            shared.failures.push(format!("{name} could not join: {e:#}"));
            return;
        }
        Err(_) => {
            shared.failed_to_join.fetch_add(1, Ordering::Relaxed);
            shared.failures.push(format!("{name} could not join within 30 s"));
            return;
        }
    };
    shared.joined.fetch_add(1, Ordering::Relaxed);
    shared.in_play.fetch_add(1, Ordering::Relaxed);
    shared.in_play_per_proxy[proxy].fetch_add(1, Ordering::Relaxed);
    let mut ticker = active.then(|| {
        let mut t = tokio::time::interval(Duration::from_millis(TICK_MS));
        // A late tick is still sent (as a game catches up), and its round trip counts from when it was due, so
        // a busy load generator shows up in the round trips instead of in ticks that were never sent.
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        t
    });
    // Ticks in flight: (packets of the answer still to come, when it was due, counted).
    let mut in_flight: std::collections::VecDeque<(usize, tokio::time::Instant, bool)> =
        std::collections::VecDeque::new();
    let (mut rtt, mut late) = (Vec::new(), Vec::new());
    let (mut sent, mut answered) = (0u64, 0u64);
    let mut seq = 0u32;
    let mut out = Vec::new();
    let ended: Option<String> = loop {
        let next_tick = async {
            match ticker.as_mut() {
                Some(t) => t.tick().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop.cancelled() => break None,
            due = next_tick => {
                let measuring = shared.measuring.load(Ordering::Relaxed);
                if measuring {
                    late.push(u32::try_from(due.elapsed().as_micros()).unwrap_or(u32::MAX));
                    sent += 1;
                }
                if in_flight.len() >= MAX_IN_FLIGHT {
                    break Some(format!("{MAX_IN_FLIGHT} ticks without an answer"));
                }
                let msg = match carrier.wrap(workload::encode_client_tick(seq).concat()) {
                    Ok(m) => m,
                    Err(e) => break Some(format!("compress: {e}")),
                };
                let frames = answers.get(seq as usize % answers.len().max(1)).copied().unwrap_or(1);
                in_flight.push_back((frames, due, measuring));
                seq = seq.wrapping_add(1);
                if let Err(e) = link.send_binary(msg).await {
                    break Some(format!("send: {e}"));
                }
            }
            m = link.next() => {
                match m {
                    Ok(Incoming::Data(b)) => {
                        if let Err(e) = carrier.unwrap_into(&b, &mut dec) {
                            break Some(format!("bad message from the proxy: {e}"));
                        }
                    }
                    Ok(Incoming::Closed(why)) => break Some(why),
                    Ok(Incoming::Other) => continue,
                    Err(e) => break Some(format!("{e:#}")),
                }
                out.clear();
                let mut fault = None;
                let mut keep_alive = false;
                loop {
                    let f = match dec.try_next_frame() {
                        Ok(Some(f)) => f,
                        Ok(None) => break,
                        Err(e) => {
                            fault = Some(format!("bad frame from the proxy: {e}"));
                            break;
                        }
                    };
                    if f.id == KeepAlive::ID {
                        if let Ok(k) = f.decode::<KeepAlive>() {
                            let _ = encode_frame(&mut out, KeepAlive::ID, &k.id.to_be_bytes());
                        }
                        keep_alive = true;
                        continue;
                    }
                    if let Some(front) = in_flight.front_mut() {
                        front.0 = front.0.saturating_sub(1);
                        if front.0 == 0 {
                            if let Some((_, at, counted)) = in_flight.pop_front() {
                                if counted {
                                    answered += 1;
                                    rtt.push(u32::try_from(at.elapsed().as_micros()).unwrap_or(u32::MAX));
                                }
                            }
                        }
                    }
                }
                if let Some(f) = fault {
                    break Some(f);
                }
                if let Some(ack) = carrier.ack(keep_alive) {
                    if let Err(e) = link.send_text(ack).await {
                        break Some(format!("send: {e}"));
                    }
                }
                if !out.is_empty() {
                    let msg = match carrier.wrap(std::mem::take(&mut out)) {
                        Ok(m) => m,
                        Err(e) => break Some(format!("compress: {e}")),
                    };
                    if let Err(e) = link.send_binary(msg).await {
                        break Some(format!("send: {e}"));
                    }
                }
            }
        }
    };
    shared.in_play.fetch_sub(1, Ordering::Relaxed);
    shared.in_play_per_proxy[proxy].fetch_sub(1, Ordering::Relaxed);
    // Counted ticks still unanswered count with their age so far (a lower bound), not as if they were fast.
    let mut unanswered = 0u64;
    for (_, due, counted) in in_flight {
        if counted {
            unanswered += 1;
            rtt.push(u32::try_from(due.elapsed().as_micros()).unwrap_or(u32::MAX));
        }
    }
    if let Some(why) = ended {
        shared.dropped.fetch_add(1, Ordering::Relaxed);
        shared.failures.push(format!("{name} ({}) lost its connection: {why}", if active { "active" } else { "idle" }));
    } else {
        let _ = tokio::time::timeout(Duration::from_secs(2), link.close()).await;
    }
    shared.ticks_sent.fetch_add(sent, Ordering::Relaxed);
    shared.ticks_answered.fetch_add(answered, Ordering::Relaxed);
    shared.ticks_unanswered.fetch_add(unanswered, Ordering::Relaxed);
    shared.rtt_us.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(rtt);
    shared.late_us.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(late);
}

// ------------------------------------------------------------------------------------------------------------
// The run.
// ------------------------------------------------------------------------------------------------------------

/// `session-bench capacity-backend`: the backend process (started by `session-bench capacity`).
#[derive(Parser, Debug)]
#[command(name = "session-bench capacity-backend", hide = true)]
pub struct BackendArgs {
    /// What a tick is answered with.
    #[arg(long, value_enum, default_value = "modded")]
    pub load: Load,
}

/// One proxy process in the report.
#[derive(Debug, serde::Serialize)]
struct ProxyReport {
    pid: u32,
    players: usize,
    /// CPU while measuring, in cores (1.0 = one core busy).
    cpu_cores: f64,
    rss_kib_before: u64,
    rss_kib_after: u64,
    /// (after − before) / players in play through it: the process's own memory (user space); the kernel's
    /// socket memory is in [`Report::kernel_tcp_kib_per_player`].
    rss_kib_per_player: f64,
    /// Open file descriptors with every player in play.
    fds: usize,
}

/// What `session-bench capacity` reports.
#[derive(Debug, serde::Serialize)]
struct Report {
    /// What the players went through: `moonbridge` or the peer's name.
    via: &'static str,
    transport: TransportArg,
    idle: usize,
    active: usize,
    load: Load,
    /// The WebSocket carriage (none on tcp).
    carriage: Option<Carriage>,
    proxies: usize,
    seconds: u64,
    /// From the first connect to the last Join Game.
    join_seconds: f64,
    /// Players in play at the end of the measurement.
    in_play: u64,
    failed_to_join: u64,
    dropped: u64,
    /// Ticks due while measuring: active players × seconds × 20.
    ticks_expected: u64,
    ticks_sent: u64,
    ticks_answered: u64,
    /// Counted ticks still unanswered when the players stopped (their age so far is in the percentiles).
    ticks_unanswered: u64,
    /// Round trips count from when a tick was due, so a late tick timer adds to them.
    rtt_ms_p50: f64,
    rtt_ms_p99: f64,
    rtt_ms_p999: f64,
    rtt_ms_max: f64,
    /// p99 of how late the players' tick timers fired: when high, the load generator was short of CPU.
    timer_late_ms_p99: f64,
    proxy: Vec<ProxyReport>,
    /// The kernel's TCP buffer memory (`/proc/net/sockstat` `mem`, whole machine, so the four socket ends of
    /// every player: load generator, proxy twice, backend), at the end of the measurement minus before the
    /// players joined, per player in play, in KiB.
    kernel_tcp_kib_per_player: f64,
    proxy_cpu_cores: f64,
    /// Proxy CPU per tick answered while measuring, in microseconds (the idle players' Keep Alive included).
    proxy_cpu_us_per_tick: f64,
    load_generator_cpu_cores: f64,
    backend_cpu_cores: f64,
    failures: Vec<String>,
}

/// Runs `session-bench capacity` (see the module documentation); fails when a player cannot join, loses its
/// connection, or the p99 tick round trip is over the limit.
pub fn main(args: CapacityArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("capacity").build()?;
    rt.block_on(run(args))
}

/// The nearest-rank percentile `p` of sorted microseconds ([`metrics::percentile`]), in milliseconds.
fn percentile_ms(sorted: &[u32], p: f64) -> f64 {
    f64::from(metrics::percentile(sorted, p)) / 1000.0
}

/// The kernel's TCP buffer memory in KiB: `/proc/net/sockstat`'s `TCP: … mem N` (pages of 4 KiB).
fn kernel_tcp_kib() -> u64 {
    let text = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("TCP:"))
        .and_then(|l| l.split_whitespace().skip_while(|w| *w != "mem").nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4)
}

fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(Iterator::count).unwrap_or(0)
}

/// CPU time of each process, in seconds.
fn cpu_seconds(pids: &[u32], ticks_per_s: u64) -> Vec<f64> {
    pids.iter().map(|&p| metrics::process_cpu(p, ticks_per_s).map_or(0.0, |d| d.as_secs_f64())).collect()
}

async fn run(args: CapacityArgs) -> anyhow::Result<()> {
    if let Some(peer) = args.peer {
        peer.check(args.transport)?;
        if args.transport == TransportArg::Ws && args.carriage != Carriage::V1 {
            bail!("--peer {} speaks plain WebSocket: run it with --carriage v1", peer.name());
        }
        if args.proxies != 1 {
            bail!("--peer runs with one proxy process (--proxies 1)");
        }
        if args.active == 0 {
            bail!("--peer compares CPU per tick: it needs active players (--active)");
        }
    }
    let ours = run_once(&args, None).await?;
    let Some(peer) = args.peer else { return Ok(()) };
    let theirs = run_once(&args, Some(peer)).await?;
    let ratio = ours.proxy_cpu_us_per_tick / theirs.proxy_cpu_us_per_tick;
    if args.json {
        println!("{}", serde_json::json!({ "moonbridge_vs": peer.name(), "proxy_cpu_per_tick_ratio": ratio }));
    } else {
        println!(
            "# proxy CPU per tick: moonbridge {:.1} µs, {} {:.1} µs: {ratio:.2}×",
            ours.proxy_cpu_us_per_tick,
            peer.name(),
            theirs.proxy_cpu_us_per_tick
        );
    }
    Ok(())
}

/// One run of every player through moonbridge, or through `peer`; fails as [`main`] says.
async fn run_once(args: &CapacityArgs, peer: Option<PeerArg>) -> anyhow::Result<Report> {
    let players = args.idle + args.active;
    if players == 0 || args.proxies == 0 || args.connect_rate == 0 {
        bail!("--idle plus --active, --proxies and --connect-rate must be at least 1");
    }
    let per_proxy = players.div_ceil(args.proxies);
    // The file limits: see docs/operations.md, "Many players".
    let own = rlimit::increase_nofile_limit(u64::MAX).unwrap_or(0);
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE)?;
    if players as u64 + SPARE_FDS > own {
        bail!(
            "{players} players need {} file descriptors in this process, and its limit is {own}; raise the hard \
             limit (docs/operations.md, \"Many players\")",
            players as u64 + SPARE_FDS
        );
    }
    let per_proxy_fds = 2 * per_proxy as u64 + SPARE_FDS;
    if per_proxy_fds > hard {
        let fit = (hard.saturating_sub(SPARE_FDS) / 2).max(1) as usize;
        bail!(
            "{per_proxy} players per proxy need {per_proxy_fds} file descriptors in each proxy process (a player \
             socket and a backend socket each), and the hard limit here is {hard}: raise it (docs/operations.md, \
             \"Many players\") or pass --proxies {}",
            players.div_ceil(fit)
        );
    }

    let dir = TestDir::new("moonbridge-capacity")?;
    let cert = TestCert::generate_in(dir.path().to_owned(), "localhost", KeyType::Ec)?;
    let ticks_per_s = metrics::clock_ticks_per_second();

    // The backend process.
    let load_name = match args.load {
        Load::Modded => "modded",
        Load::Light => "light",
        Load::Forge => "forge",
    };
    let mut backend = std::process::Command::new(std::env::current_exe()?)
        .args(["capacity-backend", "--load", load_name])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(dir.join("backend.log"))?)
        .spawn()
        .context("cannot start the backend process")?;
    let stdout = backend.stdout.take().context("no backend stdout")?;
    let backend = Child(backend);
    let first = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).map(|_| line)
    })
    .await??;
    let backend_addr = first.trim().strip_prefix("listening ").context("the backend did not start")?.to_owned();

    // The proxies (or the peer).
    let mut proxies = Vec::new();
    let mut ports = Vec::new();
    let listener = match args.transport {
        TransportArg::Tcp => "transport = \"tcp\"".to_owned(),
        TransportArg::Ws => "transport = \"ws\"".to_owned(),
        TransportArg::Wss => {
            format!("transport = \"wss\"\ntls_cert = \"{}\"\ntls_key = \"{}\"", cert.cert.display(), cert.key.display())
        }
    };
    for p in 0..args.proxies {
        let port = free_port()?;
        let log = dir.join(format!("proxy-{p}.log"));
        if let Some(peer) = peer {
            let listen = std::net::SocketAddr::from(([127, 0, 0, 1], port));
            let mut command = peer.command(
                args.peer_bin.as_deref(),
                listen,
                backend_addr.parse()?,
                args.transport,
                per_proxy,
                dir.path(),
            )?;
            let child = command.stderr(std::fs::File::create(&log)?).spawn().context(peer.missing())?;
            proxies.push(Child(child));
            wait_listening(port, p, &log).await?;
            ports.push(port);
            continue;
        }
        let runtime = if args.proxy_workers > 0 {
            format!("[runtime]\nworkers = {}\n", args.proxy_workers)
        } else {
            String::new()
        };
        let config = dir.join(format!("capacity-{p}.toml"));
        std::fs::write(
            &config,
            format!(
                "[[listener]]\n{listener}\nbind = \"127.0.0.1:{port}\"\n\n\
                 [[backend]]\nname = \"capacity\"\naddress = \"{backend_addr}\"\n\n[auth]\nmode = \"offline\"\n\n\
                 [limits]\nmax_connections = {}\n\n[rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n\n\
                 {runtime}",
                per_proxy + 100,
            ),
        )?;
        let child = std::process::Command::new(&args.proxy_bin)
            .arg("--config")
            .arg(&config)
            // Handshake timeouts are logged at debug (rate-limited), so a failed join can be explained.
            .env("RUST_LOG", "warn,moonbridge_proxy::listen=info,moonbridge_proxy::session::serve=debug")
            .stdout(std::process::Stdio::null())
            .stderr(std::fs::File::create(&log)?)
            .spawn()
            .with_context(|| format!("cannot start {}", args.proxy_bin.display()))?;
        proxies.push(Child(child));
        wait_listening(port, p, &log).await?;
        ports.push(port);
    }
    let proxy_pids: Vec<u32> = proxies.iter().map(|c| c.0.id()).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_before: Vec<u64> = proxy_pids.iter().map(|&p| metrics::rss_kib(p).unwrap_or(0)).collect();
    let tcp_mem0 = kernel_tcp_kib();
    if !args.json {
        println!(
            "# capacity: {} idle and {} active ({:?}) {:?} players ({}) through {} {} process(es), backend at \
             {backend_addr}, joining at {}/s",
            args.idle,
            args.active,
            args.load,
            args.transport,
            if args.transport == TransportArg::Tcp { "no carriage" } else { args.carriage.subprotocol() },
            args.proxies,
            peer.map_or("moonbridge", PeerArg::name),
            args.connect_rate
        );
    }

    // The players: idle ones first.
    let shared = Arc::new(Shared {
        in_play_per_proxy: (0..args.proxies).map(|_| AtomicU64::new(0)).collect(),
        ..Shared::default()
    });
    let stop = CancellationToken::new();
    let gate = Arc::new(tokio::sync::Semaphore::new(JOINING_AT_ONCE));
    let reach = Reach {
        transport: args.transport,
        tls: tls_connector(&cert.ca)?,
        offer: match (args.transport, peer) {
            (TransportArg::Tcp, _) | (_, Some(_)) => None,
            _ => Some(args.carriage.subprotocol()),
        },
    };
    // TCP players speak no carriage.
    let carriage = if args.transport == TransportArg::Tcp { Carriage::V1 } else { args.carriage };
    let answers = Arc::new(match args.load {
        Load::Modded | Load::Forge => args.load.templates().iter().map(Vec::len).collect(),
        Load::Light => vec![1],
    });
    let began = Instant::now();
    let t0 = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..players {
        let start = t0 + Duration::from_secs_f64(i as f64 / f64::from(args.connect_rate));
        tasks.spawn(player(
            i,
            (i % ports.len(), ports[i % ports.len()]),
            i >= args.idle,
            start,
            Arc::clone(&gate),
            (reach.clone(), carriage),
            Arc::clone(&answers),
            Arc::clone(&shared),
            stop.clone(),
        ));
    }
    let deadline = Instant::now() + Duration::from_secs_f64(players as f64 / f64::from(args.connect_rate) + 60.0);
    let mut last_print = Instant::now();
    loop {
        let (joined, failed) = (shared.joined.load(Ordering::Relaxed), shared.failed_to_join.load(Ordering::Relaxed));
        if joined + failed >= players as u64 || Instant::now() > deadline {
            break;
        }
        if !args.json && last_print.elapsed() >= Duration::from_secs(2) {
            last_print = Instant::now();
            println!(
                "# joining: {joined} of {players} in play, {failed} failed, {:.0} s",
                began.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let join_seconds = began.elapsed().as_secs_f64();
    if !args.json {
        println!(
            "# {} of {players} in play after {join_seconds:.1} s; {} s of warm-up, then {} s measured",
            shared.in_play.load(Ordering::Relaxed),
            WARM_UP.as_secs(),
            args.seconds
        );
    }
    tokio::time::sleep(WARM_UP).await;

    let mut pids = proxy_pids.clone();
    pids.push(std::process::id());
    pids.push(backend.0.id());
    let cpu0 = cpu_seconds(&pids, ticks_per_s);
    let m0 = Instant::now();
    shared.measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    shared.measuring.store(false, Ordering::Relaxed);
    let cpu1 = cpu_seconds(&pids, ticks_per_s);
    let wall = m0.elapsed().as_secs_f64();
    let in_play = shared.in_play.load(Ordering::Relaxed);
    let tcp_mem1 = kernel_tcp_kib();
    let cores: Vec<f64> = cpu1.iter().zip(&cpu0).map(|(b, a)| (b - a) / wall).collect();
    let proxy: Vec<ProxyReport> = proxy_pids
        .iter()
        .enumerate()
        .map(|(k, &pid)| {
            let after = metrics::rss_kib(pid).unwrap_or(0);
            let n = shared.in_play_per_proxy.get(k).map_or(0, |c| c.load(Ordering::Relaxed)) as usize;
            ProxyReport {
                pid,
                players: n,
                cpu_cores: cores[k],
                rss_kib_before: rss_before[k],
                rss_kib_after: after,
                rss_kib_per_player: after.saturating_sub(rss_before[k]) as f64 / n.max(1) as f64,
                fds: fd_count(pid),
            }
        })
        .collect();

    // Grace for the answers of the last ticks, then every player leaves.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), async { while tasks.join_next().await.is_some() {} }).await;
    if !tasks.is_empty() {
        shared.failures.push(format!("{} players did not stop within 30 s (their ticks are not counted)", tasks.len()));
        tasks.abort_all();
    }
    drop(proxies);
    drop(backend);

    let mut rtt = std::mem::take(&mut *shared.rtt_us.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    let mut late = std::mem::take(&mut *shared.late_us.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    rtt.sort_unstable();
    late.sort_unstable();
    let n = args.proxies;
    let ticks_answered = shared.ticks_answered.load(Ordering::Relaxed);
    let proxy_cores: f64 = cores[..n].iter().sum();
    let report = Report {
        via: peer.map_or("moonbridge", PeerArg::name),
        transport: args.transport,
        idle: args.idle,
        active: args.active,
        load: args.load,
        carriage: (args.transport != TransportArg::Tcp).then_some(args.carriage),
        proxies: n,
        seconds: args.seconds,
        join_seconds,
        in_play,
        failed_to_join: shared.failed_to_join.load(Ordering::Relaxed),
        dropped: shared.dropped.load(Ordering::Relaxed),
        ticks_expected: args.active as u64 * args.seconds * (1000 / TICK_MS),
        ticks_sent: shared.ticks_sent.load(Ordering::Relaxed),
        ticks_answered: shared.ticks_answered.load(Ordering::Relaxed),
        ticks_unanswered: shared.ticks_unanswered.load(Ordering::Relaxed),
        rtt_ms_p50: percentile_ms(&rtt, 50.0),
        rtt_ms_p99: percentile_ms(&rtt, 99.0),
        rtt_ms_p999: percentile_ms(&rtt, 99.9),
        rtt_ms_max: rtt.last().map_or(0.0, |&m| f64::from(m) / 1000.0),
        timer_late_ms_p99: percentile_ms(&late, 99.0),
        kernel_tcp_kib_per_player: tcp_mem1.saturating_sub(tcp_mem0) as f64 / (in_play.max(1) as f64),
        proxy_cpu_cores: proxy_cores,
        proxy_cpu_us_per_tick: proxy_cores * wall * 1e6 / ticks_answered.max(1) as f64,
        load_generator_cpu_cores: cores[n],
        backend_cpu_cores: cores[n + 1],
        proxy,
        failures: shared.failures.list(),
    };
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        print_report(&report);
    }
    let mut problems = report.failures.clone();
    if report.in_play < players as u64 {
        problems.push(format!("{} of {players} players were in play at the end of the measurement", report.in_play));
    }
    if args.active > 0 && report.ticks_answered == 0 {
        problems.push("no tick was answered".into());
    }
    // The ticks sent in the last round trip of the window may still be on their way when the players leave.
    if report.ticks_answered + 3 * (args.active as u64) < report.ticks_sent {
        problems.push(format!("{} ticks sent, {} answered", report.ticks_sent, report.ticks_answered));
    }
    // A load generator that cannot keep its players' ticks going measures itself, not the proxy.
    if (report.ticks_sent as f64) < 0.98 * report.ticks_expected as f64 {
        problems.push(format!(
            "the players sent {} of the {} ticks due (under 98%): the load generator was short of CPU",
            report.ticks_sent, report.ticks_expected
        ));
    }
    if report.rtt_ms_p99 > args.p99_limit_ms as f64 {
        problems.push(format!(
            "p99 tick round trip {:.1} ms is over the limit of {} ms",
            report.rtt_ms_p99, args.p99_limit_ms
        ));
    }
    if !problems.is_empty() {
        // What the processes said, before their directory goes (kept with MOONBRIDGE_KEEP_TEST_FILES=1): the
        // first 20 lines of each that are not a session's normal end.
        let logs = (0..args.proxies).map(|p| format!("proxy-{p}.log")).chain(["backend.log".to_string()]);
        for name in logs {
            let text = std::fs::read_to_string(dir.join(&name)).unwrap_or_default();
            let notable: Vec<&str> = text.lines().filter(|l| !l.contains("session ended")).collect();
            eprintln!("--- {name}: {} notable lines, the first 20 ---", notable.len());
            for l in notable.iter().take(20) {
                eprintln!("{l}");
            }
        }
        bail!("capacity run failed:\n  {}", problems.join("\n  "));
    }
    Ok(report)
}

/// Waits until something listens on `port` (proxy number `p`, logging to `log`), for at most 20 s.
async fn wait_listening(port: u16, p: usize, log: &std::path::Path) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).await.is_err() {
        if Instant::now() > deadline {
            let said = std::fs::read_to_string(log).unwrap_or_default();
            let said: Vec<&str> = said.lines().take(10).collect();
            bail!("proxy {p} did not listen within 20 s; its log ({}) begins:\n{}", log.display(), said.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}

fn print_report(r: &Report) {
    println!(
        "players: {} in play of {} idle + {} active ({} failed to join, {} dropped); joined in {:.1} s",
        r.in_play, r.idle, r.active, r.failed_to_join, r.dropped, r.join_seconds
    );
    println!(
        "ticks over {} s: {} due, {} sent, {} answered, {} unanswered at the end; round trip (from when due) p50 \
         {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms; tick timers late by {:.2} ms at p99",
        r.seconds,
        r.ticks_expected,
        r.ticks_sent,
        r.ticks_answered,
        r.ticks_unanswered,
        r.rtt_ms_p50,
        r.rtt_ms_p99,
        r.rtt_ms_p999,
        r.rtt_ms_max,
        r.timer_late_ms_p99
    );
    for p in &r.proxy {
        println!(
            "proxy pid {}: {} players, {:.2} cores, RSS {} → {} KiB ({:.1} KiB per player), {} fds",
            p.pid, p.players, p.cpu_cores, p.rss_kib_before, p.rss_kib_after, p.rss_kib_per_player, p.fds
        );
    }
    println!(
        "CPU (cores): {} {:.2} ({:.1} µs per tick), load generator {:.2}, backend {:.2}; kernel TCP buffers {:.1} \
         KiB per player",
        r.via,
        r.proxy_cpu_cores,
        r.proxy_cpu_us_per_tick,
        r.load_generator_cpu_cores,
        r.backend_cpu_cores,
        r.kernel_tcp_kib_per_player
    );
    for f in &r.failures {
        println!("failure: {f}");
    }
}
