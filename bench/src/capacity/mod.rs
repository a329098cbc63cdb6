//! `session-bench capacity`: how many players one proxy holds.
//!
//! Thousands of players are driven from this one process as async tasks (`--transport wss`: tokio-tungstenite
//! over tokio-rustls, the default; `ws`; or `tcp`, Minecraft frames as they are; no thread per player), through
//! one or more `moonbridge` processes, to a backend in a child process (`session-bench capacity-backend`), so
//! that each of the three processes has its own file limit and its own CPU account. With `--peer`, the same
//! players then run again through a peer instead (HAProxy on tcp, websocat on ws, or the floor relay of
//! bench/src/floor/), and the report ends with moonbridge's proxy CPU per tick against the peer's. The players speak the carriage the client library speaks by default
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

mod args;
mod backend;
mod player;
mod report;
mod run;
mod start;

pub use args::{BackendArgs, CapacityArgs};
pub use backend::backend_main;

use anyhow::bail;

use crate::peers::TransportArg;
use crate::player::carriage::Carriage;

/// Runs `session-bench capacity` (see the module documentation); fails when a player cannot join, loses its
/// connection, or the p99 tick round trip is over the limit.
pub fn main(args: CapacityArgs) -> anyhow::Result<()> {
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("capacity").build()?;
    rt.block_on(run(args))
}

/// The run through moonbridge, then with `--peer` through the peer, and the two compared.
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
    let ours = run::run_once(&args, None).await?;
    let Some(peer) = args.peer else { return Ok(()) };
    let theirs = run::run_once(&args, Some(peer)).await?;
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
