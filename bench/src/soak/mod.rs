//! `session-bench soak`: many players over ws, wss and tcp, in online mode, at the game's 20 ticks per second
//! with the modded mix, for a while, while faults are injected on a schedule:
//!
//! - the backend killed (its sockets reset, like a crash) and restarted 3 s later;
//! - player connections cut by a reset and by a FIN;
//! - players that stop reading (the proxy's write-stall limit must end them);
//! - the session server slow (answers 2 s late, under `session_timeout_seconds`) and too slow (5 s, over it).
//!
//! Every byte is checked both ways: the backend compares each client tick with the bytes the player must have
//! sent, and the player compares everything it receives with the backend's deterministic answers. A session
//! that ends before the soak does must be explained by a fault that could hit it, and must end with a
//! Disconnect (Login or Play, with a reason) or a clean close (WebSocket Close with a code, TCP FIN); at the
//! end, the proxy's open file descriptors, threads and memory are compared with the start, and no socket of the
//! proxy may be left in CLOSE_WAIT.
//!
//! Players are async tasks speaking the real protocols (tokio-tungstenite for ws/wss, raw TCP, RSA and
//! AES-CFB8 for the login), so a test can cut their sockets; the session server is the harness's stand-in.
//!
//! The network soak (`--instances 2` or more) is in `network.rs`.

mod args;
mod faults;
mod network;
mod player;
mod run;
mod state;

pub use args::SoakArgs;

/// Runs the soak (see the module documentation); fails when a check fails.
pub fn main(args: SoakArgs) -> anyhow::Result<()> {
    if args.instances > 1 {
        return network::run(&args);
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("soak").build()?;
    rt.block_on(run::run(args))
}
