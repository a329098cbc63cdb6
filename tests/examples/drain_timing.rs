//! Measures a drain (docs/benchmarks.md, "Drain"): two `moonbridge` processes of one `[network]` on a real
//! `redis-server`, behind HAProxy balancing round robin without affinity, in front of a node-minecraft-protocol
//! 1.7.10 backend (`tests/peers/backend.js`, its Keep Alive off, a vanilla server's duplicate-login rule).
//! `2 × PLAYERS` client-library players (carriage `moonbridge.v2.zstd`, the library's defaults) log in one at a
//! time, so each instance holds `PLAYERS`; then instance A gets SIGTERM. Reports the time from SIGTERM to the
//! last of A's players having its world reset by B (the two Respawns of the move), and to A's exit.
//!
//! ```sh
//! cargo build --release --bin moonbridge
//! npm ci --prefix tests/peers
//! cargo run --release -p moonbridge-tests --example drain_timing -- target/release/moonbridge 200 50
//! cargo run --release -p moonbridge-tests --example drain_timing -- target/release/moonbridge 200 1000
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moonbridge_client::{Connection, Options};
use moonbridge_protocol::FrameDecoder;
use serde_json::json;
use testbed::mc::send_login;
use testbed::network::{Haproxy, Redis};
use testbed::{node_backend, raise_fd_limit, spawn_proxy_process, KillOnDrop, TestDir, STEP};

/// One player: log in, wait for Join Game, tell `ready`; then read until `stop`, telling `moved` when the
/// second Respawn of a move arrives.
fn player(
    url: &str,
    i: usize,
    ready: &std::sync::mpsc::Sender<()>,
    moved: &std::sync::mpsc::Sender<Instant>,
    stop: &AtomicBool,
) {
    let conn = Connection::connect(url, Options::from_json(None).unwrap()).unwrap();
    send_login(&conn, &format!("p{i}"), false);
    let mut dec = FrameDecoder::new(1 << 21);
    let mut buf = vec![0u8; 1 << 16];
    let (mut joined, mut respawns) = (false, 0);
    let deadline = Instant::now() + STEP;
    while !stop.load(Ordering::Relaxed) {
        assert!(joined || Instant::now() < deadline, "p{i} did not join within {STEP:?}");
        let n = conn.recv(&mut buf, Some(Duration::from_millis(50))).expect("the connection stays up");
        dec.queue_slice(&buf[..n]);
        while let Some(f) = dec.try_next_frame().unwrap() {
            match f.id {
                0x01 if !joined => {
                    joined = true;
                    ready.send(()).unwrap();
                }
                0x07 => {
                    respawns += 1;
                    if respawns == 2 {
                        moved.send(Instant::now()).unwrap();
                    }
                }
                0x40 => panic!("p{i} was disconnected"),
                _ => {}
            }
        }
    }
    conn.close();
}

fn instance_config(
    (ws, peer, metrics): (SocketAddr, SocketAddr, SocketAddr),
    backend: SocketAddr,
    redis: &Redis,
    key: &std::path::Path,
    rate: u32,
) -> String {
    format!(
        "[[listener]]\ntransport = \"ws\"\nbind = \"{ws}\"\n[metrics]\nbind = \"{metrics}\"\n[[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n\
         [rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n\
         [network]\nredis_url = \"{}\"\nname = \"timing\"\npeer_bind = \"{peer}\"\nsecret_file = \"{}\"\ndrain_rate = {rate}\n",
        redis.url(),
        key.display()
    )
}

#[tokio::main]
async fn main() {
    raise_fd_limit();
    let mut args = std::env::args().skip(1);
    let bin = args.next().unwrap_or_else(|| "target/release/moonbridge".into());
    let players: usize = args.next().map_or(200, |s| s.parse().unwrap());
    let rate: u32 = args.next().map_or(50, |s| s.parse().unwrap());

    let redis = Redis::start().await;
    let (_node, backend) =
        node_backend(json!({ "burstCount": 0, "keepAlive": false, "duplicate": "kick_existing" })).await;
    let dir = TestDir::new("moonbridge-drain-timing").unwrap();
    let key = dir.path().join("network.key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef-drain-timing\n").unwrap();
    let free = || SocketAddr::from(([127, 0, 0, 1], moonbridge_test_certs::free_port().unwrap()));
    let mut children = Vec::new();
    let mut ws = Vec::new();
    let mut metrics = Vec::new();
    for name in ["a", "b"] {
        let addrs = (free(), free(), free());
        let config = dir.path().join(format!("{name}.toml"));
        std::fs::write(&config, instance_config(addrs, backend, &redis, &key, rate)).unwrap();
        children.push(spawn_proxy_process(&bin, &config, addrs.0).await);
        ws.push(addrs.0);
        metrics.push(addrs.2);
    }
    // Both instances see each other (a lease renewal each) before a player comes.
    for m in metrics {
        let deadline = Instant::now() + Duration::from_secs(20);
        loop {
            let reply = testbed::raw_http(m, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
            let body = reply.split_once("\r\n\r\n").map_or("", |(_, b)| b);
            if testbed::sample(body, "moonbridge_network_instances") == Some(2.0) {
                break;
            }
            assert!(Instant::now() < deadline, "the instances see each other within 20 s");
            tokio::time::sleep(Duration::from_millis(100)).await;
        }
    }
    let haproxy = Haproxy::start(&[("ws", ws.clone())]).await;
    let url = format!("ws://{}/mc", haproxy.fronts[0]);
    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, ready_rx) = std::sync::mpsc::channel();
    let (moved_tx, moved_rx) = std::sync::mpsc::channel();
    let mut handles = Vec::new();
    let logins = Instant::now();
    for i in 0..2 * players {
        let (url, ready, moved, stop) = (url.clone(), ready_tx.clone(), moved_tx.clone(), Arc::clone(&stop));
        handles.push(std::thread::spawn(move || player(&url, i, &ready, &moved, &stop)));
        // One at a time: round robin alternates A, B, A, …
        ready_rx.recv_timeout(STEP).expect("the player joins");
    }
    // One login after another, for comparison: the backend's own time per login.
    let per_login = logins.elapsed().as_secs_f64() * 1000.0 / (2 * players) as f64;
    let a = children.remove(0);
    let pid = a.id();
    let mut a = KillOnDrop(a);
    let sigterm = Instant::now();
    std::process::Command::new("kill").args(["-TERM", &pid.to_string()]).status().unwrap();
    let mut moved = Vec::new();
    for _ in 0..players {
        let at = moved_rx.recv_timeout(Duration::from_secs(60)).expect("every player of A is moved within 60 s");
        moved.push((at - sigterm).as_secs_f64());
    }
    moved.sort_by(f64::total_cmp);
    let exited = tokio::task::spawn_blocking(move || {
        a.0.wait().unwrap();
        Instant::now()
    })
    .await
    .unwrap();
    stop.store(true, Ordering::Relaxed);
    for h in handles {
        h.join().unwrap();
    }
    let _b = KillOnDrop(children.remove(0));
    println!(
        "{players} players on A (of {}), drain_rate {rate}/s: SIGTERM to the first player moved {:.2} s, the median \
         {:.2} s, the last {:.2} s; to A's exit {:.2} s (logins one at a time before: {per_login:.1} ms each)",
        2 * players,
        moved[0],
        moved[players / 2],
        moved[players - 1],
        (exited - sigterm).as_secs_f64()
    );
}
