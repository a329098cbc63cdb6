//! The capacity run's command line (`session-bench capacity`, and the hidden `capacity-backend` of its backend
//! process) and its fixed settings.

use std::path::PathBuf;
use std::time::Duration;

use crate::backend::Load;
use crate::peers::{PeerArg, TransportArg};
use crate::player::carriage::Carriage;

/// `session-bench capacity`: see the module documentation.
#[derive(clap::Args, Debug)]
#[command(
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
pub const TICK_MS: u64 = 50;
/// Warm-up between the last join and the measurement.
pub const WARM_UP: Duration = Duration::from_secs(5);
/// Players between TCP connect and Join Game at once (under the proxy's default `max_handshaking`, 1,024).
pub const JOINING_AT_ONCE: usize = 256;
/// Ticks a player sends without an answer before it gives up (10 s of ticks).
pub const MAX_IN_FLIGHT: usize = 200;
/// File descriptors a process needs besides its players' sockets.
pub const SPARE_FDS: u64 = 256;

/// `session-bench capacity-backend`: the backend process (started by `session-bench capacity`).
#[derive(clap::Args, Debug)]
pub struct BackendArgs {
    /// What a tick is answered with.
    #[arg(long, value_enum, default_value = "modded")]
    pub load: Load,
}
