//! Measures the proxy's memory with `PLAYERS` carriage v2 sessions in the resume window at once, each with a
//! full resume buffer (docs/benchmarks.md, "Resume"): starts `moonbridge` as its own process (a `ws` listener,
//! `resume_window_seconds = 300`, `resume_buffer_bytes = BUFFER`), logs `PLAYERS` players in over raw v2
//! WebSockets, drops each player's connection right after the proxy's `session` message while its backend
//! keeps sending, and reports the proxy's resident set size (VmRSS) once the backends are held back (every
//! buffer full: the proxy stops reading each backend at the bound).
//!
//! ```sh
//! cargo build --release --bin moonbridge
//! cargo run --release -p moonbridge-tests --example resume_rss -- target/release/moonbridge 200 1048576
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use testbed::{
    hs_ls, login_success, masked_frame, raise_fd_limit, raw_v2_player, rss_kib, spawn_proxy_process, TestDir,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

/// A player: upgrade offering `moonbridge.v2`, handshake and Login Start, then frames until `session`.
async fn player(addr: SocketAddr) -> TcpStream {
    raw_v2_player(addr, "/").await
}

#[tokio::main]
async fn main() {
    raise_fd_limit();
    let mut args = std::env::args().skip(1);
    let bin = args.next().unwrap_or_else(|| "target/release/moonbridge".into());
    let players: usize = args.next().map_or(200, |s| s.parse().unwrap());
    let buffer: u64 = args.next().map_or(1 << 20, |s| s.parse().unwrap());

    // Each backend connection answers the login, then sends as fast as the proxy reads.
    let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = backend.local_addr().unwrap();
    let written = Arc::new(AtomicU64::new(0));
    let w = Arc::clone(&written);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = backend.accept().await {
            let w = Arc::clone(&w);
            tokio::spawn(async move {
                let mut buf = vec![0u8; hs_ls().len()];
                s.read_exact(&mut buf).await.unwrap();
                s.write_all(&login_success("Steve")).await.unwrap();
                let chunk: Vec<u8> = (0..65536u32).map(|i| (i * 7 % 251) as u8).collect();
                while s.write_all(&chunk).await.is_ok() {
                    w.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                }
            });
        }
    });
    let dir = TestDir::new("moonbridge-resume-rss").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = dir.join("resume.toml");
    std::fs::write(
        &config,
        format!(
            "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:{port}\"\npath = \"/\"\n\n\
             [[backend]]\nname = \"b\"\naddress = \"{backend_addr}\"\n\n\
             [limits]\nresume_window_seconds = 300\nresume_buffer_bytes = {buffer}\n\
             [rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n"
        ),
    )
    .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut proxy = spawn_proxy_process(&bin, &config, addr).await;
    let pid = proxy.id();
    // One session first (thread stacks, allocator arenas), ended by a Close 1000 (not parked), then the baseline.
    let mut first = player(addr).await;
    first.write_all(&masked_frame(0x8, &1000u16.to_be_bytes(), [1, 2, 3, 4])).await.unwrap();
    let mut sink = [0u8; 65536];
    while matches!(first.read(&mut sink).await, Ok(n) if n > 0) {}
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kib(pid);
    let started = Instant::now();
    for _ in 0..players {
        // Dropped right away: the proxy parks the session and retains what the backend sends.
        drop(player(addr).await);
    }
    // Until the backends are held back: nothing more written for a second (or 60 s).
    let mut last = written.load(Ordering::Relaxed);
    let mut still_since = Instant::now();
    while still_since.elapsed() < Duration::from_secs(1) && started.elapsed() < Duration::from_secs(60) {
        tokio::time::sleep(Duration::from_millis(100)).await;
        let now = written.load(Ordering::Relaxed);
        if now != last {
            last = now;
            still_since = Instant::now();
        }
    }
    let after = rss_kib(pid);
    let sessions = players as u64;
    let bound_kib = sessions * buffer / 1024 * 12 / 10;
    println!(
        "{sessions} sessions in the resume window, resume_buffer_bytes {buffer}: proxy RSS {before} KiB before, {after} KiB \
         after (+{} KiB, {} KiB per session); bound 1.2 x {sessions} x buffer = {bound_kib} KiB: {}; \
         backends wrote {} KiB in all ({} KiB per session: the buffer plus socket buffers)",
        after - before,
        (after - before) / sessions,
        if after <= bound_kib { "within" } else { "OVER" },
        last / 1024,
        last / 1024 / sessions,
    );
    let _ = proxy.kill();
    let _ = proxy.wait();
}
