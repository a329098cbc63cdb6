//! Measures the proxy's memory per idle session: starts `moonbridge` as its own process with a config that
//! points at an in-process backend, logs `--sessions` players in (handshake, Login Start, Login Success), lets
//! them sit idle, and reports the growth of the proxy's resident set size (VmRSS) divided by the sessions.
//!
//! ```sh
//! cargo build --release --bin moonbridge
//! cargo run --release -p moonbridge-tests --example idle_rss -- target/release/moonbridge 1000
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::process::Stdio;
use std::time::Duration;

use moonbridge_tests::{login_success, raise_fd_limit, HS, LS};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

#[tokio::main]
async fn main() {
    raise_fd_limit();
    let mut args = std::env::args().skip(1);
    let bin = args.next().unwrap_or_else(|| "target/release/moonbridge".into());
    let sessions: usize = args.next().map_or(1000, |s| s.parse().unwrap());

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

    let port = {
        let l = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        l.local_addr().unwrap().port()
    };
    let dir = std::env::temp_dir().join(format!("moonbridge-idle-{}", std::process::id()));
    std::fs::create_dir_all(&dir).unwrap();
    let config = dir.join("idle.toml");
    std::fs::write(
        &config,
        format!(
            "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:{port}\"\n[[backend]]\nname = \"idle\"\naddress = \"{backend_addr}\"\n"
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
    let addr = format!("127.0.0.1:{port}");
    // Wait for the listener.
    for _ in 0..200 {
        if TcpStream::connect(&addr).await.is_ok() {
            break;
        }
        tokio::time::sleep(Duration::from_millis(25)).await;
    }
    // Warm up the runtime (worker threads, first allocations) with a few sessions, then measure.
    let mut players = Vec::new();
    let expected = login_success("Steve");
    for _ in 0..8 {
        players.push(log_in(&addr, &expected).await);
        held.push(rx.recv().await.unwrap());
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
    let before = rss_kib(pid);
    for _ in 0..sessions {
        players.push(log_in(&addr, &expected).await);
        held.push(rx.recv().await.unwrap());
    }
    tokio::time::sleep(Duration::from_secs(2)).await;
    let after = rss_kib(pid);
    let per = (after.saturating_sub(before)) as f64 * 1024.0 / sessions as f64;
    println!(
        "proxy RSS {before} KiB -> {after} KiB with {sessions} idle tcp sessions: {per:.0} bytes per session ({:.1} KiB)",
        per / 1024.0
    );
    proxy.kill().await.unwrap();
}

async fn log_in(addr: &str, expected: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[HS, LS].concat()).await.unwrap();
    let mut got = vec![0u8; expected.len()];
    s.read_exact(&mut got).await.unwrap();
    assert_eq!(got, expected);
    s
}
