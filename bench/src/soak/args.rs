//! The soak's command line (`session-bench soak`) and the proxy settings its faults are measured against.

use std::path::PathBuf;

/// `session-bench soak`: players with injected faults (see the module documentation).
#[derive(clap::Args, Debug)]
#[command(about = "Soak the proxy with players and injected faults")]
pub struct SoakArgs {
    /// How long the players play, in seconds.
    #[arg(long, default_value_t = 600)]
    pub seconds: u64,
    /// Players at once (40% ws, 40% wss, 20% tcp).
    #[arg(long, default_value_t = 1000)]
    pub players: usize,
    /// Seconds between two injected faults.
    #[arg(long, default_value_t = 10)]
    pub fault_every: u64,
    /// Instances of a network on Redis (2 or more: the network soak of bench/src/soak/network.rs, with
    /// client-library players over ws and wss behind a round-robin balancer that cuts every connection every
    /// `--fault-every` seconds; needs `redis-server`). 1: one proxy with the faults listed above.
    #[arg(long, default_value_t = 1)]
    pub instances: usize,
    /// The moonbridge binary.
    #[arg(long, default_value = "target/release/moonbridge")]
    pub proxy_bin: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The proxy's `limits.write_stall_timeout_seconds` in the soak.
pub const WRITE_STALL_S: u64 = 4;
/// The proxy's `auth.session_timeout_seconds` in the soak.
pub const SESSION_TIMEOUT_S: u64 = 3;
/// Ticks a game client runs per second.
pub const TICKS_PER_S: u64 = 20;
