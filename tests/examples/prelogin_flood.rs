//! Measures what unauthenticated WebSocket connections can make the proxy hold (issue 15, fault 1): starts
//! `moonbridge` as its own process (a `ws` listener, a 60 s handshake deadline so nothing is closed by time),
//! opens `CONNECTIONS` WebSockets that each start a 4 MB Binary message and never complete a Minecraft
//! handshake, in two shapes, and reports the growth of the proxy's resident set size (VmRSS):
//!
//! - **held**: each message begins with a valid, unfinished handshake frame (a length prefix of 1,000 and half
//!   of it), then the sender waits: the proxy keeps the connection in the handshake stage;
//! - **pushed**: each connection sends its whole 4 MB message as fast as it can: the proxy refuses it from the
//!   first bytes.
//!
//! Meanwhile a real player (an in-process backend answering the login) logs in, and the time it took is shown.
//!
//! ```sh
//! cargo build --release --bin moonbridge
//! cargo run --release -p moonbridge-tests --example prelogin_flood -- target/release/moonbridge 1000
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use testbed::{
    hs_ls, login_success, masked_frame, raise_fd_limit, raw_upgrade, read_server_frame, rss_kib, spawn_proxy_process,
    TestDir,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const MESSAGE: u64 = 4_000_000;

/// A masked Binary frame header declaring `len` bytes, with a zero mask (the payload goes as is).
fn header(len: u64) -> Vec<u8> {
    let mut h = vec![0x82, 0x80 | 127];
    h.extend_from_slice(&len.to_be_bytes());
    h.extend_from_slice(&[0, 0, 0, 0]);
    h
}

async fn player_login(addr: SocketAddr) -> Duration {
    let started = Instant::now();
    let mut p = raw_upgrade(addr).await;
    p.write_all(&masked_frame(0x2, &hs_ls(), [1, 2, 3, 4])).await.unwrap();
    assert_eq!(read_server_frame(&mut p).await, (0x2, login_success("Steve")));
    started.elapsed()
}

#[tokio::main]
async fn main() {
    raise_fd_limit();
    let mut args = std::env::args().skip(1);
    let bin = args.next().unwrap_or_else(|| "target/release/moonbridge".into());
    let connections: usize = args.next().map_or(1000, |s| s.parse().unwrap());

    let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = backend.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = backend.accept().await {
            tokio::spawn(async move {
                let mut buf = vec![0u8; hs_ls().len()];
                s.read_exact(&mut buf).await.unwrap();
                s.write_all(&login_success("Steve")).await.unwrap();
                let mut sink = [0u8; 1024];
                while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    let dir = TestDir::new("moonbridge-flood").unwrap();
    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let config = dir.join("flood.toml");
    std::fs::write(
        &config,
        format!(
            "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:{port}\"\n\n[[backend]]\nname = \"b\"\naddress = \"{backend_addr}\"\n\n\
             [limits]\nhandshake_timeout_seconds = 60\nmax_connections = {}\n\
             [rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n",
            connections * 2 + 100
        ),
    )
    .unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    let mut proxy = spawn_proxy_process(&bin, &config, addr).await;
    let pid = proxy.id();
    let login_alone = player_login(addr).await;
    tokio::time::sleep(Duration::from_millis(300)).await;
    let before = rss_kib(pid);

    // Held: a 4 MB message that starts an unfinished handshake, then silence.
    let mut held = Vec::with_capacity(connections);
    for _ in 0..connections {
        let mut s = raw_upgrade(addr).await;
        let mut start = header(MESSAGE);
        start.extend_from_slice(&[0xe8, 0x07]); // VarInt 1,000: a handshake frame within the limit
        start.extend_from_slice(&[0x00; 500]); // half of it
        s.write_all(&start).await.unwrap();
        held.push(s);
    }
    let login_held = player_login(addr).await;
    tokio::time::sleep(Duration::from_secs(1)).await;
    let with_held = rss_kib(pid);

    // Pushed: whole 4 MB messages at full speed, all at once.
    let payload = vec![0u8; 64 * 1024];
    let pushers: Vec<_> = (0..connections)
        .map(|_| {
            let payload = payload.clone();
            tokio::spawn(async move {
                let mut s = raw_upgrade(addr).await;
                let _ = s.write_all(&header(MESSAGE)).await;
                let mut sent = 0u64;
                while sent < MESSAGE {
                    if s.write_all(&payload).await.is_err() {
                        break; // the proxy closed the connection
                    }
                    sent += payload.len() as u64;
                }
                sent
            })
        })
        .collect();
    let login_pushed = player_login(addr).await;
    let mut peak = rss_kib(pid);
    let mut sent_total = 0u64;
    for p in pushers {
        sent_total += p.await.unwrap();
        peak = peak.max(rss_kib(pid));
    }
    let after = rss_kib(pid);
    println!(
        "{connections} held connections: proxy RSS {before} KiB -> {with_held} KiB (+{} KiB, {:.1} KiB each); \
         {connections} pushed 4 MB messages: peak {peak} KiB (+{} KiB over the start), {} MB accepted by the \
         socket before the proxy closed them, {after} KiB after; player login alone {login_alone:?}, with the \
         held connections {login_held:?}, during the push {login_pushed:?}",
        with_held - before,
        (with_held - before) as f64 / connections as f64,
        peak - before,
        sent_total / 1_000_000,
    );
    drop(held);
    let _ = proxy.kill();
    let _ = proxy.wait();
}
