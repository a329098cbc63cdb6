//! Issue 33: memory that comes back. 300 carriage v2 sessions parked for resume with full retention (the
//! backends keep sending while the players are gone) grow the proxy by tens of MiB; once their resume window
//! (15 s, long enough that none expires before the peak is read) passes and they expire, the proxy's resident size returns to within 16 MiB of its baseline within 30 s
//! (`proxy/src/memory.rs`). The proxy runs as its own process (`target/<profile>/moonbridge`, built by
//! `cargo build --workspace` before the tests), so its RSS is its own.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use testbed::{
    hs_ls, login_success, masked_frame, moonbridge_bin, raise_fd_limit, raw_http, raw_v2_player, rss_kib, sample,
    spawn_proxy_process, KillOnDrop, TestDir, STEP,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

const PLAYERS: usize = 300;
const BUFFER: usize = 256 * 1024;

/// A raw carriage v2 player, within [`STEP`] (see [`raw_v2_player`]).
async fn player(addr: SocketAddr) -> TcpStream {
    tokio::time::timeout(STEP, raw_v2_player(addr, "/")).await.expect("a player logs in within STEP")
}

/// The value of `series` on the proxy's metrics listener (0 when absent).
async fn metric(metrics: SocketAddr, series: &str) -> f64 {
    let reply = raw_http(metrics, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    reply.split_once("\r\n\r\n").and_then(|(_, body)| sample(body, series)).unwrap_or(0.0)
}

/// Polls `done` every 100 ms until it holds or `within` passes: whether it held.
async fn until(within: Duration, mut done: impl AsyncFnMut() -> bool) -> bool {
    let deadline = Instant::now() + within;
    while Instant::now() < deadline {
        if done().await {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    done().await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn memory_of_expired_sessions_goes_back_to_the_system() {
    raise_fd_limit();
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
    let dir = TestDir::new("moonbridge-memory").unwrap();
    let free = || std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let (addr, metrics) = (free(), free());
    let config = dir.join("memory.toml");
    std::fs::write(
        &config,
        format!(
            "[[listener]]\ntransport = \"ws\"\nbind = \"{addr}\"\npath = \"/\"\n\n\
             [[backend]]\nname = \"b\"\naddress = \"{backend_addr}\"\n\n\
             [limits]\nresume_window_seconds = 15\nresume_buffer_bytes = {BUFFER}\n\
             [rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n\
             [metrics]\nbind = \"{metrics}\"\n"
        ),
    )
    .unwrap();
    let bin = moonbridge_bin();
    let proxy = KillOnDrop(spawn_proxy_process(bin.to_str().unwrap(), &config, addr).await);
    let pid = proxy.0.id();

    // The baseline: one session (thread stacks, arenas) ended by a Close 1000, and no connection open.
    let mut first = player(addr).await;
    first.write_all(&masked_frame(0x8, &1000u16.to_be_bytes(), [1, 2, 3, 4])).await.unwrap();
    let mut sink = [0u8; 65536];
    while matches!(first.read(&mut sink).await, Ok(n) if n > 0) {}
    let open = "moonbridge_sessions{stage=\"play\",transport=\"ws\"}";
    assert!(until(Duration::from_secs(10), async || metric(metrics, open).await == 0.0).await);
    let baseline = rss_kib(pid);

    // The flood: every player dropped right after its `session`; the proxy parks each session and retains
    // what its backend sends, up to the buffer, then stops reading it.
    for _ in 0..PLAYERS {
        drop(player(addr).await);
    }
    let mut last = written.load(Ordering::Relaxed);
    let mut still_since = Instant::now();
    let held_back = until(Duration::from_secs(60), async || {
        let now = written.load(Ordering::Relaxed);
        if now != last {
            (last, still_since) = (now, Instant::now());
        }
        still_since.elapsed() > Duration::from_secs(1)
    })
    .await;
    assert!(held_back, "the backends are held back");
    let peak = rss_kib(pid);
    assert!(peak > baseline + 40 * 1024, "the flood grew the proxy: {baseline} KiB → {peak} KiB");

    // Expiry: every session's window passes; then the memory comes back.
    let expired = "moonbridge_resumes_total{outcome=\"expired\"}";
    assert!(
        until(Duration::from_secs(30), async || metric(metrics, expired).await == PLAYERS as f64).await,
        "every parked session expires"
    );
    let started = Instant::now();
    let back = until(Duration::from_secs(30), async || rss_kib(pid) <= baseline + 16 * 1024).await;
    let after = rss_kib(pid);
    assert!(
        back,
        "RSS {baseline} KiB before the flood, {peak} KiB at its peak, {after} KiB 30 s after the sessions expired"
    );
    println!(
        "RSS {baseline} KiB before, {peak} KiB with {PLAYERS} parked sessions, {after} KiB {:.1} s after they expired",
        started.elapsed().as_secs_f64()
    );
}
