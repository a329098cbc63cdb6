//! The session benchmark's command line (`session-bench` with no subcommand): its options and their values.

use std::path::PathBuf;

use clap::ValueEnum;

use crate::backend::Profile;
use crate::peers::{PeerArg, TransportArg};

/// Workload: what the clients send and the backend answers.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum)]
pub enum ProfileArg {
    Echo,
    Modded,
    /// The modded shape with honest bytes: gzipped NBT, mod channel messages, deflated chunks, the FML
    /// registry handshake as the login burst.
    Forge,
    /// The forge profile with only the mod channel messages (S3F) of each tick: what compression does to
    /// mod-channel traffic apart from the gzipped NBT and deflated chunks it travels with.
    ForgeChannels,
    /// The modded shape with GT New Horizons' big packets: a 40–500 KiB mod channel message on about one tick
    /// in eight, a 3–8 MiB S26 on about one in 64 (4-byte frame prefixes, Forge's 3-byte S3F lengths).
    Gtnh,
    /// View loads, chat and Keep Alive to a throttled reader (docs/lanes.md): `session-bench flood` with its
    /// defaults (`--proxy-bin` and `--json` carried over; `session-bench flood --help` for its own flags).
    Flood,
}

impl ProfileArg {
    /// What the fake backend answers with: echo, or the tick answers (all the modded shapes).
    pub fn backend(self) -> Profile {
        match self {
            Self::Echo => Profile::Echo,
            Self::Modded | Self::Forge | Self::ForgeChannels | Self::Gtnh | Self::Flood => Profile::Modded,
        }
    }
}

/// What the benchmark measures.
#[derive(Clone, Copy, Debug, PartialEq, Eq, clap::ValueEnum)]
pub enum ModeArg {
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
pub enum RuntimeArg {
    /// One single-threaded runtime per worker; a session stays on one thread.
    ThreadPerCore,
    /// tokio's work-stealing runtime.
    MultiThread,
}

impl RuntimeArg {
    pub fn name(self) -> &'static str {
        match self {
            Self::ThreadPerCore => "thread-per-core",
            Self::MultiThread => "multi-thread",
        }
    }
}

/// The session benchmark's options (`session-bench` with no subcommand).
#[derive(Debug, clap::Args)]
pub struct SessionArgs {
    /// Workload: echo frames, or modpack-shaped ticks.
    #[arg(long, value_enum, default_value = "modded")]
    pub profile: ProfileArg,
    /// How clients reach the proxy (direct phases always use TCP).
    #[arg(long, value_enum, default_value = "tcp")]
    pub transport: TransportArg,
    /// `proxy` (direct and proxy phases), `direct` (direct phases only) or HOST:PORT (an external endpoint).
    #[arg(long, default_value = "proxy")]
    pub target: String,
    /// PID of the external endpoint's process, for its CPU time (with --target HOST:PORT).
    #[arg(long)]
    pub target_pid: Option<u32>,
    /// With --target HOST:PORT over wss: the CA certificates (a PEM file) the clients trust for the endpoint.
    /// Default: the web PKI roots (webpki-roots), as for a real edge or a CDN; the throwaway CA this run makes
    /// is only for the proxy it starts itself.
    #[arg(long, value_name = "PEM")]
    pub ca_file: Option<PathBuf>,
    /// With --target HOST:PORT over wss: the TLS server name (SNI, and the name the certificate must carry).
    /// Default: HOST.
    #[arg(long, value_name = "NAME")]
    pub server_name: Option<String>,
    /// Port of the fake backend on 127.0.0.1 (0: any free port; an external --target needs a fixed one).
    #[arg(long, default_value_t = 0)]
    pub backend_port: u16,
    /// Concurrent client connections.
    #[arg(long, default_value_t = 4)]
    pub connections: usize,
    /// Timed round trips per connection.
    #[arg(long, default_value_t = 5000)]
    pub messages: usize,
    /// Untimed round trips per connection before the timed phase.
    #[arg(long, default_value_t = 500)]
    pub warmup: usize,
    /// Echo: bytes per frame.
    #[arg(long, default_value_t = 1024)]
    pub payload: usize,
    /// Round trips in flight per connection.
    #[arg(long, default_value_t = 1)]
    pub window: usize,
    /// Echo: frames per client write.
    #[arg(long, default_value_t = 1)]
    pub burst: usize,
    /// Repeats of every phase (order rotated each repeat).
    #[arg(long, default_value_t = 2)]
    pub repeats: usize,
    /// 1: one message per tick (end_tick after each round trip); 0: one message per packet (vanilla-like).
    #[arg(long, default_value_t = 0, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub client_coalesce: u8,
    /// 1: the client library offers carriage v2 (`moonbridge.v2`: acknowledgements and retention for resume,
    /// its default); 0: carriage v1 only (ws and wss).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub client_resume: u8,
    /// `[runtime] mode` of the proxy under test (default: the proxy's own default, thread-per-core).
    #[arg(long, value_enum)]
    pub proxy_runtime: Option<RuntimeArg>,
    /// Light players besides the busy `--connections`: each makes one round trip (one modded tick) per
    /// `--light-tick-ms` while the busy ones run. They connect first and in turn with the busy ones (light,
    /// busy, light, busy, …, then the remaining light ones, each after the previous logged in), so with two
    /// proxy workers the busy players share one worker with a light player: the fairness check.
    #[arg(long, default_value_t = 0)]
    pub light_connections: usize,
    /// A light player's tick, in milliseconds (1.7.10 runs 20 ticks per second).
    #[arg(long, default_value_t = 50)]
    pub light_tick_ms: u64,
    /// `[compression] level` of the proxies under test (zstd, -7 to 19; default: the proxy's, 1).
    #[arg(long, allow_negative_numbers = true)]
    pub proxy_zstd_level: Option<i32>,
    /// `[runtime] workers` of the proxies under test (0: one per core, the proxy's default).
    #[arg(long, default_value_t = 0)]
    pub proxy_workers: usize,
    /// Also run a second moonbridge with this `[runtime] mode` (variant `moonbridge-MODE`), rotated with the
    /// others in every repeat: an interleaved A/B of the two runtimes.
    #[arg(long, value_enum)]
    pub also_runtime: Option<RuntimeArg>,
    /// 1: the client library offers `moonbridge.v2.zstd` (compressed WebSocket messages, its default); 0: not.
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u8).range(0..=1))]
    pub client_compress: u8,
    /// `relay` (the proxy as players use it) or `post-transfer`: the cost of the server-transfer layer, with
    /// two more variants on one moonbridge with `[transfer]` on and two backends (`bench`, `bench2`, both the
    /// fake backend): `moonbridge-transfer` (players who never switch) and `moonbridge-switched` (each player is
    /// switched `--switches` times before its warmup, so its timed phase runs through the entity-id swap).
    /// Switch times are reported per phase (median and p95 over every switch).
    #[arg(long, value_enum, default_value = "relay")]
    pub mode: ModeArg,
    /// Switches per player of `moonbridge-switched` (`--mode post-transfer`).
    #[arg(long, default_value_t = 13)]
    pub switches: usize,
    /// Print one JSON object per phase instead of text.
    #[arg(long)]
    pub json: bool,
    /// The moonbridge binary (default: the release `moonbridge` next to this program).
    #[arg(long)]
    pub proxy_bin: Option<PathBuf>,
    /// Also run a third-party peer in every repeat, side by side.
    #[arg(long, value_enum)]
    pub peer: Option<PeerArg>,
    /// The peer's binary (default: found on PATH).
    #[arg(long)]
    pub peer_bin: Option<PathBuf>,
    /// Also run a second moonbridge with `auth.mode = "online"` (variant `moonbridge-online`): clients do the
    /// encryption handshake and AES-CFB8, against a stand-in session server in this process.
    #[arg(long)]
    pub online: bool,
}
