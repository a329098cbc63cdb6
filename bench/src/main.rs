//! `session-bench`: MoonBridge's benchmark harness, one binary. This file holds its command line (the clap
//! types) and the dispatch only: `session-bench` with no subcommand is the session benchmark
//! (bench/src/session/), `soak` the soak with injected faults (bench/src/soak/), `capacity` how many players
//! one proxy holds (bench/src/capacity/), `floor-relay` the floor relay run beside moonbridge as `--peer floor`
//! (bench/src/floor/), `big-frame` one huge frame through the proxy and its RSS (bench/src/big_frame.rs),
//! `flood` chat behind view loads to a throttled reader (bench/src/flood.rs). See
//! docs/benchmarks.md.
//!
//! The pieces the commands share: the fake backend (`backend/`), the raw players (`player/`), the client
//! library's players (`client/`), the processes under test (`process.rs`), the readings from /proc
//! (`metrics.rs`), the report helpers (`report.rs`), the workload (`workload.rs`, `forge.rs`), the peers
//! (`peers.rs`), the stand-in session server (`sessions.rs`) and the network of instances (`network.rs`).

// A benchmark binary: its modules are private, and the harness indexes its own fixed tables.
#![allow(clippy::indexing_slicing, unreachable_pub)]

mod backend;
mod big_frame;
mod capacity;
mod client;
mod flood;
mod floor;
mod forge;
mod metrics;
mod network;
mod peers;
mod player;
mod process;
mod report;
mod session;
mod sessions;
mod soak;
mod workload;

use clap::{Parser, Subcommand};

/// The MoonBridge session benchmark.
#[derive(Debug, Parser)]
#[command(
    name = "session-bench",
    version,
    about,
    args_conflicts_with_subcommands = true,
    disable_help_subcommand = true,
    after_help = "Soak mode (players with injected faults, docs/reliability.md): session-bench soak --help\n\
                  Capacity mode (thousands of idle and active wss players, docs/benchmarks.md): \
                  session-bench capacity --help"
)]
struct Cli {
    #[command(subcommand)]
    command: Option<Command>,
    /// With no subcommand: the session benchmark.
    #[command(flatten)]
    session: session::SessionArgs,
}

/// The commands besides the session benchmark.
#[derive(Debug, Subcommand)]
enum Command {
    /// Soak the proxy with players and injected faults.
    Soak(soak::SoakArgs),
    /// How many idle and active players one proxy holds (players are async tasks of this process).
    Capacity(capacity::CapacityArgs),
    /// One huge frame (GT New Horizons' 256 MiB) through the proxy over tcp, ws and wss: the proxy's RSS.
    BigFrame(big_frame::BigFrameArgs),
    /// Chat and Keep Alive behind view loads to a throttled reader, through moonbridge and the peers
    /// (docs/lanes.md); also `--profile flood`.
    Flood(flood::FloodArgs),
    /// The floor relay: the least any relay must do, run beside moonbridge as `--peer floor`.
    FloorRelay(floor::FloorArgs),
    /// The backend process of `session-bench capacity` (started by it).
    #[command(hide = true)]
    CapacityBackend(capacity::BackendArgs),
}

fn main() -> anyhow::Result<()> {
    let cli = Cli::parse();
    match cli.command {
        None => session::run(cli.session),
        Some(Command::Soak(args)) => soak::main(args),
        Some(Command::Capacity(args)) => capacity::main(args),
        Some(Command::FloorRelay(args)) => floor::main(&args),
        Some(Command::BigFrame(args)) => big_frame::main(&args),
        Some(Command::Flood(args)) => flood::main(&args),
        Some(Command::CapacityBackend(args)) => capacity::backend_main(args.load),
    }
}
