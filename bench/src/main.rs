//! `session-bench`: the seed benchmark re-created. A fake protocol-5 backend and the clients run here; the
//! proxy (and any peer) runs as its own process. Direct phases (clients straight to the backend over TCP) and
//! proxy phases alternate with the order rotated. One line per phase; a summary with median and [min–max]
//! at the end. See docs/benchmarks.md.

// A benchmark binary: its modules are private, and the harness indexes its own fixed tables.
#![allow(clippy::indexing_slicing, unreachable_pub)]

mod backend;
mod capacity;
mod client;
mod floor;
mod forge;
mod metrics;
mod network;
mod peers;
mod sessions;
mod soak;
mod soak_network;
mod workload;

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Command, Stdio};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use clap::{Parser, ValueEnum};
use moonbridge_client::Options;
use moonbridge_test_certs::{free_port, ChildLog, KeyType, TestCert};

use crate::backend::Profile;
use crate::client::{run_client, ClientSpec, Sync};
use crate::peers::{PeerArg, TransportArg};

#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum ProfileArg {
    Echo,
    Modded,
    /// The modded shape with honest bytes: gzipped NBT, mod channel messages, deflated chunks, the FML
    /// registry handshake as the login burst.
    Forge,
    /// The forge profile with only the mod channel messages (S3F) of each tick: what compression does to
    /// mod-channel traffic apart from the gzipped NBT and deflated chunks it travels with.
    ForgeChannels,
}

/// What the benchmark measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
enum ModeArg {
    /// The relay.
    Relay,
    /// The server-transfer layer, before and after a switch.
    PostTransfer,
    /// The instance link of `[network]` (ws or wss): players served by their owner through another instance,
    /// against the same players straight to the owner (bench/src/network.rs; needs `redis-server`).
    Network,
}

/// `[runtime] mode` of a proxy under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
enum RuntimeArg {
    /// One single-threaded runtime per worker; a session stays on one thread.
    ThreadPerCore,
    /// tokio's work-stealing runtime.
    MultiThread,
}

impl RuntimeArg {
    fn name(self) -> &'static str {
        match self {
            Self::ThreadPerCore => "thread-per-core",
            Self::MultiThread => "multi-thread",
        }
    }
}

/// The MoonBridge session benchmark.
#[derive(Debug, Parser)]
#[command(
    name = "session-bench",
    version,
    about,
    after_help = "Soak mode (players with injected faults, docs/reliability.md): session-bench soak --help\n\
                  Capacity mode (thousands of idle and active wss players, docs/benchmarks.md): \
                  session-bench capacity --help"
)]
struct Args {
    /// Workload: echo frames, or modpack-shaped ticks.
    #[arg(long, value_enum, default_value = "modded")]
    profile: ProfileArg,
    /// How clients reach the proxy (direct phases always use TCP).
    #[arg(long, value_enum, default_value = "tcp")]
    transport: TransportArg,
    /// `proxy` (direct and proxy phases), `direct` (direct phases only) or HOST:PORT (an external endpoint).
    #[arg(long, default_value = "proxy")]
    target: String,
    /// PID of the external endpoint's process, for its CPU time (with --target HOST:PORT).
    #[arg(long)]
    target_pid: Option<u32>,
    /// With --target HOST:PORT over wss: the CA certificates (a PEM file) the clients trust for the endpoint.
    /// Default: the web PKI roots (webpki-roots), as for a real edge or a CDN; the throwaway CA this run makes
    /// is only for the proxy it starts itself.
    #[arg(long, value_name = "PEM")]
    ca_file: Option<PathBuf>,
    /// With --target HOST:PORT over wss: the TLS server name (SNI, and the name the certificate must carry).
    /// Default: HOST.
    #[arg(long, value_name = "NAME")]
    server_name: Option<String>,
    /// Port of the fake backend on 127.0.0.1 (0: any free port; an external --target needs a fixed one).
    #[arg(long, default_value_t = 0)]
    backend_port: u16,
    /// Concurrent client connections.
    #[arg(long, default_value_t = 4)]
    connections: usize,
    /// Timed round trips per connection.
    #[arg(long, default_value_t = 5000)]
    messages: usize,
    /// Untimed round trips per connection before the timed phase.
    #[arg(long, default_value_t = 500)]
    warmup: usize,
    /// Echo: bytes per frame.
    #[arg(long, default_value_t = 1024)]
    payload: usize,
    /// Round trips in flight per connection.
    #[arg(long, default_value_t = 1)]
    window: usize,
    /// Echo: frames per client write.
    #[arg(long, default_value_t = 1)]
    burst: usize,
    /// Repeats of every phase (order rotated each repeat).
    #[arg(long, default_value_t = 2)]
    repeats: usize,
    /// 1: one message per tick (end_tick after each round trip); 0: one message per packet (vanilla-like).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    client_coalesce: u8,
    /// 1: the client library offers carriage v2 (`moonbridge.v2`: acknowledgements and retention for resume,
    /// its default); 0: carriage v1 only (ws and wss).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    client_resume: u8,
    /// `[runtime] mode` of the proxy under test (default: the proxy's own default, thread-per-core).
    #[arg(long, value_enum)]
    proxy_runtime: Option<RuntimeArg>,
    /// Light players besides the busy `--connections`: each makes one round trip (one modded tick) per
    /// `--light-tick-ms` while the busy ones run. They connect first and in turn with the busy ones (light,
    /// busy, light, busy, …, then the remaining light ones, each after the previous logged in), so with two
    /// proxy workers the busy players share one worker with a light player: the fairness check.
    #[arg(long, default_value_t = 0)]
    light_connections: usize,
    /// A light player's tick, in milliseconds (1.7.10 runs 20 ticks per second).
    #[arg(long, default_value_t = 50)]
    light_tick_ms: u64,
    /// `[compression] level` of the proxies under test (zstd, -7 to 19; default: the proxy's, 1).
    #[arg(long, allow_negative_numbers = true)]
    proxy_zstd_level: Option<i32>,
    /// `[runtime] workers` of the proxies under test (0: one per core, the proxy's default).
    #[arg(long, default_value_t = 0)]
    proxy_workers: usize,
    /// Also run a second moonbridge with this `[runtime] mode` (variant `moonbridge-MODE`), rotated with the
    /// others in every repeat: an interleaved A/B of the two runtimes.
    #[arg(long, value_enum)]
    also_runtime: Option<RuntimeArg>,
    /// 1: the client library offers `moonbridge.v2.zstd` (compressed WebSocket messages, its default); 0: not.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    client_compress: u8,
    /// `relay` (the proxy as players use it) or `post-transfer`: the cost of the server-transfer layer, with
    /// two more variants on one moonbridge with `[transfer]` on and two backends (`bench`, `bench2`, both the
    /// fake backend): `moonbridge-transfer` (players who never switch) and `moonbridge-switched` (each player is
    /// switched `--switches` times before its warmup, so its timed phase runs through the entity-id swap).
    /// Switch times are reported per phase (median and p95 over every switch).
    #[arg(long, value_enum, default_value = "relay")]
    mode: ModeArg,
    /// Switches per player of `moonbridge-switched` (`--mode post-transfer`).
    #[arg(long, default_value_t = 13)]
    switches: usize,
    /// Print one JSON object per phase instead of text.
    #[arg(long)]
    json: bool,
    /// The moonbridge binary (default: the release `moonbridge` next to this program).
    #[arg(long)]
    proxy_bin: Option<PathBuf>,
    /// Also run a third-party peer in every repeat, side by side.
    #[arg(long, value_enum)]
    peer: Option<PeerArg>,
    /// The peer's binary (default: found on PATH).
    #[arg(long)]
    peer_bin: Option<PathBuf>,
    /// Also run a second moonbridge with `auth.mode = "online"` (variant `moonbridge-online`): clients do the
    /// encryption handshake and AES-CFB8, against a stand-in session server in this process.
    #[arg(long)]
    online: bool,
}

/// One phase's figures.
#[derive(Debug, Clone, serde::Serialize)]
struct PhaseResult {
    repeat: usize,
    variant: String,
    transport: String,
    profile: String,
    window: usize,
    client_coalesce: u8,
    connections: usize,
    frames: u64,
    frames_per_s: f64,
    p50_ms: f64,
    p95_ms: f64,
    p99_ms: f64,
    proxy_cpu_ns_per_frame: Option<f64>,
    client_cpu_ns_per_frame: f64,
    client_io_cpu_ns_per_frame: f64,
    client_cpu_ns_per_tick: f64,
    messages_per_tick_up: f64,
    tcp_segments_per_frame: Option<f64>,
    login_burst_ms: f64,
    proxy_rss_kib_per_conn: Option<f64>,
    /// Light players (`--light-connections`).
    light_connections: usize,
    /// The worst light player's 99th-percentile round trip, in ms (none without light players).
    light_p99_ms: Option<f64>,
    /// 1 when the clients offered `moonbridge.v2.zstd`.
    client_compress: u8,
    /// Bytes of WebSocket frames the proxy wrote to the players per login (its `moonbridge_ws_bytes_total`,
    /// framing included, before TLS).
    login_wire_bytes: Option<f64>,
    /// The same per tick (round trip) in the timed phase, towards the player and from it.
    wire_bytes_down_per_tick: Option<f64>,
    wire_bytes_up_per_tick: Option<f64>,
    /// Server transfers done before the warmup (`--mode post-transfer`), and their median and 95th-percentile
    /// time in ms (from the request to the end of the world reset at the client).
    switches: usize,
    switch_p50_ms: Option<f64>,
    switch_p95_ms: Option<f64>,
    errors: u64,
}

/// A process under test (the proxy or a peer), killed on drop.
struct Spawned {
    child: ChildLog,
    addr: SocketAddr,
    /// The proxy's `[metrics]` listener.
    metrics: Option<SocketAddr>,
}

fn wait_for_port(addr: SocketAddr, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("{what} did not listen on {addr} within 20 s")
}

fn spawn_proxy(
    bin: &Path,
    transport: TransportArg,
    backend: SocketAddr,
    dir: &Path,
    cert: Option<&(PathBuf, PathBuf, PathBuf)>,
    session_server: Option<&str>,
    runtime: &str,
) -> anyhow::Result<Spawned> {
    let port = free_port()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let listener = match (transport, cert) {
        (TransportArg::Tcp, _) => format!("transport = \"tcp\"\nbind = \"{addr}\"\n"),
        (TransportArg::Ws, _) => format!("transport = \"ws\"\nbind = \"{addr}\"\n"),
        (TransportArg::Wss, Some((c, k, _))) => {
            format!(
                "transport = \"wss\"\nbind = \"{addr}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
                c.display(),
                k.display()
            )
        }
        (TransportArg::Wss, None) => bail!("wss needs a certificate"),
    };
    let auth = match session_server {
        Some(url) => format!("[auth]\nmode = \"online\"\nsession_server = \"{url}\"\n"),
        None => String::new(),
    };
    let config = dir.join(format!("moonbridge-{port}.toml"));
    std::fs::write(
        &config,
        // Every benchmark connection comes from 127.0.0.1: the per-address rate limits are off.
        format!(
            "[[listener]]\n{listener}\n[[backend]]\nname = \"bench\"\naddress = \"{backend}\"\n{auth}\n\
             [rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n{runtime}\
             [metrics]\nbind = \"{metrics}\"\n"
        ),
    )?;
    // Its warnings are shown as they come.
    let child = ChildLog::spawn_echoing(
        Command::new(bin).arg("--config").arg(&config).env("RUST_LOG", "warn").stdout(Stdio::null()),
        "[moonbridge] ",
    )
    .with_context(|| format!("cannot start the proxy {}", bin.display()))?;
    let s = Spawned { child, addr, metrics: Some(metrics) };
    wait_for_port(addr, "moonbridge")?;
    Ok(s)
}

/// The `[runtime]` and `[compression]` sections for the flags given, and nothing for those left out, so
/// `--proxy-bin` can run a proxy older than those sections.
fn runtime_toml(mode: Option<RuntimeArg>, workers: usize, zstd_level: Option<i32>) -> String {
    let mut t = String::new();
    if mode.is_some() || workers > 0 {
        t.push_str("[runtime]\n");
        if let Some(r) = mode {
            t.push_str(&format!("mode = \"{}\"\n", r.name()));
        }
        if workers > 0 {
            t.push_str(&format!("workers = {workers}\n"));
        }
    }
    if let Some(level) = zstd_level {
        t.push_str(&format!("[compression]\nlevel = {level}\n"));
    }
    t
}

fn spawn_peer(
    peer: PeerArg,
    bin: Option<&Path>,
    backend: SocketAddr,
    dir: &Path,
    transport: TransportArg,
) -> anyhow::Result<Spawned> {
    let port = free_port()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let mut command = peer.command(bin, addr, backend, transport, 4096, dir)?;
    let child = ChildLog::spawn_echoing(&mut command, &format!("[{}] ", peer.name())).context(peer.missing())?;
    let s = Spawned { child, addr, metrics: None };
    wait_for_port(addr, "the peer")?;
    Ok(s)
}

#[derive(Clone)]
struct Variant {
    name: String,
    /// Server transfers per player before the warmup.
    switches: usize,
    url: String,
    options: Options,
    pid: Option<u32>,
    online: bool,
    /// The proxy's `[metrics]` listener (WebSocket bytes on the wire).
    metrics: Option<SocketAddr>,
    /// A second proxy process whose CPU counts with `pid`'s (`--mode network`: the other instance).
    also_pid: Option<u32>,
    /// `--mode network`, `moonbridge-linked`: players moved onto an instance link after their login.
    relink: Option<network::Relink>,
}

#[allow(clippy::too_many_arguments)]
fn run_phase(
    args: &Args,
    repeat: usize,
    variant: &Variant,
    templates: &Arc<Vec<Vec<workload::Spec>>>,
    ticks_per_s: u64,
    backend_errors: &backend::BackendStats,
) -> anyhow::Result<PhaseResult> {
    let profile = match args.profile {
        ProfileArg::Echo => Profile::Echo,
        ProfileArg::Modded | ProfileArg::Forge | ProfileArg::ForgeChannels => Profile::Modded,
    };
    let light = args.light_connections;
    let sync = Sync::new(args.connections + light, args.connections);
    let rss_before = variant.pid.and_then(metrics::rss_kib);
    // Busy (false) and light (true) players in connection order.
    let mut order = Vec::new();
    for i in 0..args.connections.max(light) {
        if i < light {
            order.push(true);
        }
        if i < args.connections {
            order.push(false);
        }
    }
    let io_start = variant.metrics.and_then(metrics::ws_wire_bytes);
    if let Some(r) = &variant.relink {
        r.before_login();
    }
    let mut handles = Vec::new();
    for (i, &is_light) in order.iter().enumerate() {
        let spec = ClientSpec {
            url: variant.url.clone(),
            options: variant.options.clone(),
            profile,
            warmup: if is_light { 10 } else { args.warmup },
            messages: args.messages,
            window: args.window.max(1),
            payload: args.payload.max(8),
            burst: args.burst.max(1),
            end_ticks: args.client_coalesce == 1,
            name: format!("Bench{repeat}x{i}"),
            online: variant.online,
            pace: is_light.then(|| Duration::from_millis(args.light_tick_ms.max(1))),
            switches: if is_light { 0 } else { variant.switches },
        };
        let (t, s) = (Arc::clone(templates), Arc::clone(&sync));
        handles.push(std::thread::Builder::new().name("bench-client".into()).spawn(move || run_client(spec, t, s))?);
        if light > 0 {
            // Connect in this order: the next client starts after this one logged in (or failed).
            let deadline = Instant::now() + Duration::from_secs(60);
            while sync.logged_in.load(std::sync::atomic::Ordering::Relaxed) <= i {
                if Instant::now() > deadline {
                    bail!("client {i} did not log in within 60 s");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    sync.logged.wait();
    let io_logged = variant.metrics.and_then(metrics::ws_wire_bytes);
    if let Some(r) = &variant.relink {
        // During the warmup: every player resumes through the other instance.
        r.after_login(args.connections + light)?;
    }
    sync.warmed.wait();
    let rss_after_login = variant.pid.and_then(metrics::rss_kib);
    let errors_before = backend_errors.errors.load(std::sync::atomic::Ordering::Relaxed);
    let cpu = |v: &Variant| {
        let main = v.pid.and_then(|p| metrics::process_cpu(p, ticks_per_s))?;
        let also = v.also_pid.map_or(Some(Duration::ZERO), |p| metrics::process_cpu(p, ticks_per_s))?;
        Some(main + also)
    };
    let proxy0 = cpu(variant);
    let client0 = metrics::threads_cpu("bench-client", ticks_per_s);
    let io0 = metrics::threads_cpu("moonbridge-io", ticks_per_s);
    let seg0 = metrics::tcp_out_segments();
    let wire0 = variant.metrics.and_then(metrics::ws_wire_bytes);
    let started = Instant::now();
    sync.go.wait();
    sync.done.wait();
    let elapsed = started.elapsed();
    let proxy1 = cpu(variant);
    let client1 = metrics::threads_cpu("bench-client", ticks_per_s);
    let io1 = metrics::threads_cpu("moonbridge-io", ticks_per_s);
    let seg1 = metrics::tcp_out_segments();
    let wire1 = variant.metrics.and_then(metrics::ws_wire_bytes);
    sync.release.wait();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap_or_default()).collect();

    let mut errors = backend_errors.errors.load(std::sync::atomic::Ordering::Relaxed) - errors_before;
    let mut latencies = Vec::new();
    let (mut frames, mut round_trips, mut messages_up) = (0u64, 0u64, 0u64);
    let mut bursts = Vec::new();
    let mut light_p99: Option<f64> = None;
    let mut switch_times: Vec<Duration> = results.iter().flat_map(|r| r.switch_times.iter().copied()).collect();
    switch_times.sort_unstable();
    let switch_ms =
        |p: f64| (!switch_times.is_empty()).then(|| metrics::percentile(&switch_times, p).as_secs_f64() * 1000.0);
    for (r, &is_light) in results.iter().zip(&order) {
        if let Some(e) = &r.error {
            eprintln!("error: {e}");
            errors += 1;
        }
        if is_light {
            let mut own = r.latencies.clone();
            own.sort_unstable();
            let p99 = metrics::percentile(&own, 99.0).as_secs_f64() * 1000.0;
            light_p99 = Some(light_p99.map_or(p99, |w| w.max(p99)));
        } else {
            latencies.extend_from_slice(&r.latencies);
        }
        frames += r.frames;
        round_trips += r.round_trips;
        messages_up += r.stats.messages_out;
        bursts.push(r.login_burst.as_secs_f64() * 1000.0);
    }
    latencies.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let per_frame = |d: Duration| if frames == 0 { f64::NAN } else { d.as_nanos() as f64 / frames as f64 };
    let client_cpu = client1.saturating_sub(client0) + io1.saturating_sub(io0);
    Ok(PhaseResult {
        repeat,
        variant: variant.name.clone(),
        transport: if variant.name == "direct" { "tcp".into() } else { format!("{:?}", args.transport).to_lowercase() },
        // The name given on the command line (`forge-channels`).
        profile: args.profile.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default(),
        window: args.window,
        client_coalesce: args.client_coalesce,
        connections: args.connections,
        frames,
        frames_per_s: frames as f64 / elapsed.as_secs_f64(),
        p50_ms: ms(metrics::percentile(&latencies, 50.0)),
        p95_ms: ms(metrics::percentile(&latencies, 95.0)),
        p99_ms: ms(metrics::percentile(&latencies, 99.0)),
        proxy_cpu_ns_per_frame: match (proxy0, proxy1) {
            (Some(a), Some(b)) => Some(per_frame(b.saturating_sub(a))),
            _ => None,
        },
        client_cpu_ns_per_frame: per_frame(client_cpu),
        client_io_cpu_ns_per_frame: per_frame(io1.saturating_sub(io0)),
        client_cpu_ns_per_tick: if round_trips == 0 {
            f64::NAN
        } else {
            client_cpu.as_nanos() as f64 / round_trips as f64
        },
        messages_per_tick_up: if round_trips == 0 { f64::NAN } else { messages_up as f64 / round_trips as f64 },
        tcp_segments_per_frame: match (seg0, seg1) {
            (Some(a), Some(b)) if frames > 0 => Some((b - a) as f64 / frames as f64),
            _ => None,
        },
        login_burst_ms: metrics::median_range(&bursts).0,
        proxy_rss_kib_per_conn: match (rss_before, rss_after_login) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / (args.connections + light) as f64),
            _ => None,
        },
        light_connections: light,
        light_p99_ms: light_p99,
        client_compress: args.client_compress,
        // The proxy's WebSocket frame bytes (moonbridge_ws_bytes_total), over the logins and the timed phase.
        login_wire_bytes: match (io_start, io_logged) {
            (Some(a), Some(b)) => Some(b.1.saturating_sub(a.1) as f64 / (args.connections + light) as f64),
            _ => None,
        },
        wire_bytes_down_per_tick: match (wire0, wire1) {
            (Some(a), Some(b)) if round_trips > 0 => Some(b.1.saturating_sub(a.1) as f64 / round_trips as f64),
            _ => None,
        },
        wire_bytes_up_per_tick: match (wire0, wire1) {
            (Some(a), Some(b)) if round_trips > 0 => Some(b.0.saturating_sub(a.0) as f64 / round_trips as f64),
            _ => None,
        },
        switches: switch_times.len(),
        switch_p50_ms: switch_ms(50.0),
        switch_p95_ms: switch_ms(95.0),
        errors,
    })
}

fn print_phase(r: &PhaseResult, json: bool) {
    if json {
        println!("{}", serde_json::to_string(r).unwrap_or_default());
        return;
    }
    let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |x| format!("{x:.prec$}"));
    println!(
        "repeat={} variant={} transport={} profile={} window={} coalesce={} frames_per_s={:.0} p50_ms={:.3} p95_ms={:.3} p99_ms={:.3} \
         proxy_cpu_ns_per_frame={} client_cpu_ns_per_frame={:.0} client_io_cpu_ns_per_frame={:.0} client_cpu_ns_per_tick={:.0} \
         messages_per_tick_up={:.2} tcp_segments_per_frame={} login_burst_ms={:.1} proxy_rss_kib_per_conn={} light_p99_ms={} login_wire_bytes={} \
         wire_bytes_down_per_tick={} wire_bytes_up_per_tick={} switches={} switch_p50_ms={} switch_p95_ms={} errors={}",
        r.repeat, r.variant, r.transport, r.profile, r.window, r.client_coalesce, r.frames_per_s, r.p50_ms, r.p95_ms, r.p99_ms,
        opt(r.proxy_cpu_ns_per_frame, 0), r.client_cpu_ns_per_frame, r.client_io_cpu_ns_per_frame, r.client_cpu_ns_per_tick,
        r.messages_per_tick_up, opt(r.tcp_segments_per_frame, 3), r.login_burst_ms, opt(r.proxy_rss_kib_per_conn, 0), opt(r.light_p99_ms, 3), opt(r.login_wire_bytes, 0),
        opt(r.wire_bytes_down_per_tick, 0), opt(r.wire_bytes_up_per_tick, 0), r.switches, opt(r.switch_p50_ms, 1),
        opt(r.switch_p95_ms, 1), r.errors
    );
}

fn summary(results: &[PhaseResult], variants: &[String], json: bool) {
    if json {
        return;
    }
    println!("# summary: median [min-max] over repeats");
    for v in variants {
        let rs: Vec<&PhaseResult> = results.iter().filter(|r| &r.variant == v).collect();
        let col = |f: &dyn Fn(&PhaseResult) -> Option<f64>| {
            let vals: Vec<f64> = rs.iter().filter_map(|r| f(r)).collect();
            let (m, lo, hi) = metrics::median_range(&vals);
            format!("{m:.1} [{lo:.1}-{hi:.1}]")
        };
        println!(
            "{v}: frames_per_s {} | p50_ms {} | proxy_cpu_ns_per_frame {} | client_cpu_ns_per_frame {} | login_burst_ms {} | messages_per_tick_up {} | light_p99_ms {} | login_wire_bytes {} | wire_bytes_down_per_tick {} | switch_p50_ms {} | switch_p95_ms {}",
            col(&|r| Some(r.frames_per_s)),
            col(&|r| Some(r.p50_ms)),
            col(&|r| r.proxy_cpu_ns_per_frame),
            col(&|r| Some(r.client_cpu_ns_per_frame)),
            col(&|r| Some(r.login_burst_ms)),
            col(&|r| Some(r.messages_per_tick_up)),
            col(&|r| r.light_p99_ms),
            col(&|r| r.login_wire_bytes),
            col(&|r| r.wire_bytes_down_per_tick),
            col(&|r| r.switch_p50_ms),
            col(&|r| r.switch_p95_ms),
        );
    }
    // Per-pair ratios within each repeat.
    let pairs = |a: &str, b: &str, f: &dyn Fn(&PhaseResult) -> Option<f64>| -> Vec<f64> {
        let repeats: Vec<usize> = results.iter().map(|r| r.repeat).collect();
        let mut out = Vec::new();
        for rep in repeats.iter().copied().collect::<std::collections::BTreeSet<_>>() {
            let x = results.iter().find(|r| r.repeat == rep && r.variant == a).and_then(f);
            let y = results.iter().find(|r| r.repeat == rep && r.variant == b).and_then(f);
            if let (Some(x), Some(y)) = (x, y) {
                out.push(x / y);
            }
        }
        out
    };
    let show = |name: &str, v: Vec<f64>| {
        if !v.is_empty() {
            let (m, lo, hi) = metrics::median_range(&v);
            let each: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
            println!("{name}: median {m:.2} [{lo:.2}-{hi:.2}] per pair: {}", each.join(", "));
        }
    };
    if variants.iter().any(|v| v == "direct") && variants.iter().any(|v| v == "moonbridge") {
        show("moonbridge/direct frames_per_s", pairs("moonbridge", "direct", &|r| Some(r.frames_per_s)));
    }
    if variants.iter().any(|v| v == "moonbridge-online") {
        show(
            "moonbridge-online/moonbridge proxy_cpu_ns_per_frame",
            pairs("moonbridge-online", "moonbridge", &|r| r.proxy_cpu_ns_per_frame),
        );
        show(
            "moonbridge-online/moonbridge frames_per_s",
            pairs("moonbridge-online", "moonbridge", &|r| Some(r.frames_per_s)),
        );
    }
    for v in ["moonbridge-transfer", "moonbridge-switched"] {
        if variants.iter().any(|x| x == v) {
            show(
                &format!("{v}/moonbridge proxy_cpu_ns_per_frame"),
                pairs(v, "moonbridge", &|r| r.proxy_cpu_ns_per_frame),
            );
            show(&format!("{v}/moonbridge p50_ms"), pairs(v, "moonbridge", &|r| Some(r.p50_ms)));
        }
    }
    let transfer_variants = ["direct", "moonbridge", "moonbridge-online", "moonbridge-transfer", "moonbridge-switched"];
    for peer in variants.iter().filter(|v| !transfer_variants.contains(&v.as_str())) {
        show(
            &format!("moonbridge/{peer} proxy_cpu_ns_per_frame"),
            pairs("moonbridge", peer, &|r| r.proxy_cpu_ns_per_frame),
        );
        show(&format!("moonbridge/{peer} frames_per_s"), pairs("moonbridge", peer, &|r| Some(r.frames_per_s)));
    }
}

fn main() -> anyhow::Result<()> {
    if std::env::args_os().nth(1).is_some_and(|a| a == "soak") {
        return soak::main(soak::SoakArgs::parse_from(std::env::args_os().skip(1)));
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == "capacity") {
        return capacity::main(capacity::CapacityArgs::parse_from(std::env::args_os().skip(1)));
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == "floor-relay") {
        return floor::main(&floor::FloorArgs::parse_from(std::env::args_os().skip(1)));
    }
    if std::env::args_os().nth(1).is_some_and(|a| a == "capacity-backend") {
        let args = capacity::BackendArgs::parse_from(std::env::args_os().skip(1));
        return capacity::backend_main(args.load);
    }
    let args = Args::parse();
    let ticks_per_s = metrics::clock_ticks_per_second();
    let profile = match args.profile {
        ProfileArg::Echo => Profile::Echo,
        ProfileArg::Modded | ProfileArg::Forge | ProfileArg::ForgeChannels => Profile::Modded,
    };
    // Before the first login answer is built.
    let forge = matches!(args.profile, ProfileArg::Forge | ProfileArg::ForgeChannels);
    workload::FORGE.store(forge, std::sync::atomic::Ordering::Relaxed);
    workload::CHANNELS_ONLY.store(args.profile == ProfileArg::ForgeChannels, std::sync::atomic::Ordering::Relaxed);
    let (backend_addr, backend_stats, _rt) =
        backend::start(SocketAddr::from(([127, 0, 0, 1], args.backend_port)), profile, 1)?;
    if !args.json {
        println!("# fake backend at {backend_addr}");
    }
    let templates = Arc::new(if forge { workload::forge_templates() } else { workload::templates() });
    if args.profile != ProfileArg::Echo && !args.json {
        let (p, b) = workload::template_averages(&templates);
        println!("# modded templates: {p:.1} clientbound packets and {b:.0} payload bytes per tick on average");
    }
    let dir = std::env::temp_dir().join(format!("session-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cert = if args.transport == TransportArg::Wss {
        let c = TestCert::generate_in(dir.clone(), "localhost", KeyType::Ec)?;
        Some((c.cert, c.key, c.ca))
    } else {
        None
    };
    let coalesce = if args.client_coalesce == 1 { "tick" } else { "off" };
    let mut options = serde_json::json!({
        "coalesce": coalesce,
        "ping_interval_ms": 0,
        "resume": args.client_resume == 1,
        "compress": args.client_compress == 1,
    });
    if let Some((_, _, ca)) = &cert {
        options["ca_file"] = serde_json::json!(ca);
    }
    let options = Options::from_json(Some(&options.to_string()))?;
    let direct_options = Options::from_json(Some(&serde_json::json!({ "coalesce": coalesce }).to_string()))?;
    let scheme = |t: TransportArg, addr: SocketAddr| match t {
        TransportArg::Tcp => format!("tcp://{addr}"),
        TransportArg::Ws => format!("ws://{addr}/mc"),
        TransportArg::Wss => format!("wss://localhost:{}/mc", addr.port()),
    };

    let mut variants = vec![Variant {
        name: "direct".into(),
        switches: 0,
        url: scheme(TransportArg::Tcp, backend_addr),
        options: direct_options,
        pid: None,
        online: false,
        metrics: None,
        also_pid: None,
        relink: None,
    }];
    let mut _keep = Vec::new();
    let mut _keep_network = Vec::new();
    match args.target.as_str() {
        "direct" => {}
        "proxy" => {
            let bin = match &args.proxy_bin {
                Some(b) => b.clone(),
                None => std::env::current_exe()?.with_file_name("moonbridge"),
            };
            // Each moonbridge variant: its own process, config and name.
            let mut add_proxy =
                |name: String, session_server: Option<&str>, runtime: Option<RuntimeArg>, extra: &str| {
                    // The `[runtime]` sections, then the variant's own (a second backend, `[transfer]`).
                    let runtime = runtime_toml(runtime, args.proxy_workers, args.proxy_zstd_level) + extra;
                    let p =
                        spawn_proxy(&bin, args.transport, backend_addr, &dir, cert.as_ref(), session_server, &runtime)?;
                    variants.push(Variant {
                        name,
                        switches: 0,
                        url: scheme(args.transport, p.addr),
                        options: options.clone(),
                        pid: Some(p.child.id()),
                        online: session_server.is_some(),
                        metrics: p.metrics,
                        also_pid: None,
                        relink: None,
                    });
                    _keep.push(p);
                    anyhow::Ok(())
                };
            add_proxy("moonbridge".into(), None, args.proxy_runtime, "")?;
            if let Some(runtime) = args.also_runtime {
                add_proxy(format!("moonbridge-{}", runtime.name()), None, Some(runtime), "")?;
            }
            if args.online {
                let url = format!("http://{}", sessions::start()?);
                add_proxy("moonbridge-online".into(), Some(&url), args.proxy_runtime, "")?;
            }
            if args.mode == ModeArg::PostTransfer {
                // One proxy with the transfer layer on, measured with players who never switch and with players
                // switched before their warmup: the second backend is the same fake backend.
                let [first, second] = client::SWITCH_TARGETS;
                let extra = format!(
                    "[[backend]]\nname = \"{second}\"\naddress = \"{backend_addr}\"\n\
                     [transfer]\ntargets = [\"{first}\", \"{second}\"]\n"
                );
                add_proxy("moonbridge-transfer".into(), None, args.proxy_runtime, &extra)?;
                let mut switched = variants.last().map(|v| Variant {
                    name: "moonbridge-switched".into(),
                    switches: args.switches.max(1),
                    ..v.clone()
                });
                variants.extend(switched.take());
            }
            if args.mode == ModeArg::Network {
                if args.transport == TransportArg::Tcp {
                    bail!("--mode network measures a resumed WebSocket: use --transport ws or wss");
                }
                let redis = network::Redis::start()?;
                let secret = network::write_secret(&dir)?;
                let mut instances = Vec::new();
                for _ in 0..2 {
                    let extra = network::network_toml(&redis, &secret);
                    let runtime = runtime_toml(args.proxy_runtime, args.proxy_workers, args.proxy_zstd_level) + &extra;
                    instances.push(spawn_proxy(
                        &bin,
                        args.transport,
                        backend_addr,
                        &dir,
                        cert.as_ref(),
                        None,
                        &runtime,
                    )?);
                }
                for p in &instances {
                    let m = p.metrics.context("the instances have metrics")?;
                    network::wait_metric(m, "moonbridge_network_instances", 2.0, Duration::from_secs(20))?;
                }
                let (a, b) = (&instances[0], &instances[1]);
                let owner = network::Switch::start(vec![a.addr])?;
                let linked = network::Switch::start(vec![a.addr, b.addr])?;
                for (name, switch, relink) in
                    [("moonbridge-owner", &owner, false), ("moonbridge-linked", &linked, true)]
                {
                    variants.push(Variant {
                        name: name.into(),
                        switches: 0,
                        url: scheme(args.transport, switch.addr),
                        options: options.clone(),
                        pid: Some(a.child.id()),
                        online: false,
                        metrics: a.metrics,
                        also_pid: Some(b.child.id()),
                        relink: relink.then(|| network::Relink {
                            switch: Arc::clone(switch),
                            carrier_metrics: b.metrics.unwrap_or(a.addr),
                        }),
                    });
                }
                _keep_network.push((redis, instances, owner, linked));
            }
            if let Some(peer) = args.peer {
                peer.check(args.transport)?;
                let p = spawn_peer(peer, args.peer_bin.as_deref(), backend_addr, &dir, args.transport)?;
                let mut o = options.clone();
                o.subprotocol = false; // plain bridges do not echo moonbridge.v1
                variants.push(Variant {
                    name: peer.name().into(),
                    switches: 0,
                    url: scheme(args.transport, p.addr),
                    options: o,
                    pid: Some(p.child.id()),
                    online: false,
                    metrics: p.metrics,
                    also_pid: None,
                    relink: None,
                });
                _keep.push(p);
            }
        }
        other => {
            use std::net::ToSocketAddrs;
            let bad = || format!("--target {other:?} is not proxy, direct or HOST:PORT");
            // Checked here, so a typo fails before any phase runs.
            other.to_socket_addrs().with_context(bad)?.next().with_context(bad)?;
            let url = match args.transport {
                // The host as given, so TLS checks the name the endpoint's certificate carries.
                TransportArg::Tcp => format!("tcp://{other}"),
                TransportArg::Ws => format!("ws://{other}/mc"),
                TransportArg::Wss => format!("wss://{other}/mc"),
            };
            let mut target_options = options.clone();
            target_options.ca_file = args.ca_file.clone();
            target_options.server_name = args.server_name.clone();
            variants.push(Variant {
                name: "target".into(),
                switches: 0,
                url,
                options: target_options,
                pid: args.target_pid,
                online: false,
                metrics: None,
                also_pid: None,
                relink: None,
            });
        }
    }

    let names: Vec<String> = variants.iter().map(|v| v.name.clone()).collect();
    let mut results = Vec::new();
    let mut failed = false;
    for repeat in 1..=args.repeats.max(1) {
        let n = variants.len();
        for k in 0..n {
            let v = &variants[(k + repeat - 1) % n];
            let r = run_phase(&args, repeat, v, &templates, ticks_per_s, &backend_stats)?;
            failed |= r.errors > 0;
            print_phase(&r, args.json);
            results.push(r);
        }
    }
    summary(&results, &names, args.json);
    let _ = std::fs::remove_dir_all(&dir);
    if failed {
        bail!("errors during the run (see above)");
    }
    Ok(())
}
