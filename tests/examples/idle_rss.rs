//! Measures the proxy's memory per idle session and its connection setup time: starts `moonbridge` as its
//! own process with a config that points at an in-process backend, logs `SESSIONS` players in over
//! `TRANSPORT` (tcp, ws or wss: handshake, Login Start, Login Success), lets them sit idle, and reports the
//! growth of the proxy's resident set size (VmRSS) divided by the sessions, and the median time from TCP
//! connect to an open WebSocket (TLS handshake and HTTP upgrade) for ws and wss.
//!
//! ```sh
//! cargo build --release --bin moonbridge
//! cargo run --release -p moonbridge-tests --example idle_rss -- target/release/moonbridge 1000 wss
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::{Duration, Instant};

use futures_util::SinkExt;
use testbed::{login_success, raise_fd_limit, ws_connect, ws_read_bytes, Io, KeyType, Message, TestCert, HS, LS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

enum Player {
    Tcp(#[allow(dead_code)] TcpStream),
    Ws(#[allow(dead_code)] Box<testbed::WebSocketStream<Box<dyn Io>>>),
}

#[tokio::main]
async fn main() {
    raise_fd_limit();
    let mut args = std::env::args().skip(1);
    let bin = args.next().unwrap_or_else(|| "target/release/moonbridge".into());
    let sessions: usize = args.next().map_or(1000, |s| s.parse().unwrap());
    let transport = args.next().unwrap_or_else(|| "tcp".into());

    let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = backend.local_addr().unwrap();
    let mut held = Vec::new();
    let (tx, mut rx) = tokio::sync::mpsc::unbounded_channel();
    tokio::spawn(async move {
        while let Ok((mut s, _)) = backend.accept().await {
            let tx = tx.clone();
            tokio::spawn(async move {
                let mut buf = vec![0u8; HS.len() + LS.len()];
                s.read_exact(&mut buf).await.unwrap();
                s.write_all(&login_success("Steve")).await.unwrap();
                tx.send(s).unwrap();
            });
        }
    });

    let port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    let dir = std::env::temp_dir().join(format!("moonbridge-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let cert = (transport == "wss").then(|| TestCert::generate("idle", KeyType::Ec).unwrap());
    let tls = cert
        .as_ref()
        .map(|c| format!("tls_cert = \"{}\"\ntls_key = \"{}\"\n", c.cert.display(), c.key.display()))
        .unwrap_or_default();
    let config = dir.join("idle.toml");
    std::fs::write(
        &config,
        format!(
            "[[listener]]\ntransport = \"{transport}\"\nbind = \"127.0.0.1:{port}\"\n{tls}\
             [[backend]]\nname = \"idle\"\naddress = \"{backend_addr}\"\n[limits]\nmax_connections = 100000\n\
             [rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n"
        ),
    )
    .unwrap();
    let mut proxy = tokio::process::Command::new(&bin)
        .arg("--config")
        .arg(&config)
        .env("RUST_LOG", "warn")
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .unwrap();
    let pid = proxy.id().unwrap();
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse().unwrap();
    for _ in 0..200 {
        if TcpStream::connect(addr).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    let url = format!("{transport}://localhost:{port}/mc");
    let ca = cert.as_ref().map(|c| c.ca.clone());
    let expected = login_success("Steve");
    let mut setup_times = Vec::new();
    let log_in = || {
        let url = url.clone();
        let ca = ca.clone();
        let expected = expected.clone();
        let transport = transport.clone();
        async move {
            if transport == "tcp" {
                let mut s = TcpStream::connect(addr).await.unwrap();
                s.write_all(&[HS, LS].concat()).await.unwrap();
                let mut got = vec![0u8; expected.len()];
                s.read_exact(&mut got).await.unwrap();
                assert_eq!(got, expected);
                (Player::Tcp(s), Duration::ZERO)
            } else {
                let t0 = Instant::now();
                let (mut ws, _) = ws_connect(addr, &url, &[], ca.as_deref()).await.unwrap();
                let setup = t0.elapsed();
                ws.send(Message::Binary([HS, LS].concat().into())).await.unwrap();
                let (got, _) = ws_read_bytes(&mut ws, expected.len(), Duration::from_secs(20)).await;
                assert_eq!(got, expected);
                (Player::Ws(Box::new(ws)), setup)
            }
        }
    };
    // Warm up the runtime (worker threads, first allocations) with a few sessions, then measure.
    let mut players = Vec::new();
    for _ in 0..8 {
        players.push(log_in().await.0);
        held.push(rx.recv().await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kib(pid);
    for _ in 0..sessions {
        let (p, setup) = log_in().await;
        players.push(p);
        setup_times.push(setup);
        held.push(rx.recv().await.unwrap());
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kib(pid);
    let per = (after.saturating_sub(before)) as f64 * 1024.0 / sessions as f64;
    println!(
        "proxy RSS {before} KiB -> {after} KiB with {sessions} idle {transport} sessions: {per:.0} bytes per session ({:.1} KiB)",
        per / 1024.0
    );
    if transport != "tcp" {
        setup_times.sort();
        let ms = |d: Duration| d.as_secs_f64() * 1000.0;
        println!(
            "{transport} connection setup (TCP connect + {}HTTP upgrade) over {sessions} sequential connects: median {:.3} ms, p95 {:.3} ms",
            if transport == "wss" { "TLS handshake + " } else { "" },
            ms(setup_times[setup_times.len() / 2]),
            ms(setup_times[setup_times.len() * 95 / 100]),
        );
    }
    proxy.kill().await.unwrap();
}
