//! Measures the proxy's memory per player with the carriage the client library speaks (docs/benchmarks.md,
//! "Memory per player by carriage"): starts `moonbridge` as its own process (one `ws` listener) in front of a
//! node-minecraft-protocol 1.7.10 backend (`tests/peers/backend.js`: Join Game, then a 60 kB burst of two
//! 30,000-byte plugin messages, then an echo for every chat; its Keep Alive off, so idle players are silent).
//! `PLAYERS` players, each a `moonbridge_client::Connection` with the options `OPTIONS` (JSON; `{}` is the
//! library's defaults: carriage `moonbridge.v2.zstd`), log in, read the burst and chat 3 times (each echoed).
//! Reports the growth of the proxy's resident set size (VmRSS) per player right after the last chat, and again
//! after `IDLE` seconds without traffic.
//!
//! ```sh
//! cargo build --release --bin moonbridge
//! npm ci --prefix tests/peers
//! cargo run --release -p moonbridge-tests --example carriage_rss -- target/release/moonbridge 200 '{}' 15
//! cargo run --release -p moonbridge-tests --example carriage_rss -- target/release/moonbridge 200 '{"compress":false}' 15
//! cargo run --release -p moonbridge-tests --example carriage_rss -- target/release/moonbridge 200 '{"resume":false}' 15
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::net::SocketAddr;
use std::sync::{Arc, Barrier};
use std::time::{Duration, Instant};

use moonbridge_client::{Connection, Options};
use moonbridge_protocol::codec::Reader;
use moonbridge_protocol::packets::PluginMessage;
use serde_json::json;
use testbed::mc::{chat_frame, chat_message_text, send_login, FrameReader};
use testbed::{node_backend, raise_fd_limit, rss_kib, spawn_proxy_process, TestDir, BURST_CHANNEL, STEP};

/// One player: log in, take the burst, chat 3 times; then wait at `idle` until the measurement is done.
fn player(url: &str, options: Options, i: usize, done: &Barrier, measured: &Barrier) {
    let conn = Connection::connect(url, options).unwrap();
    send_login(&conn, &format!("p{i}"), false);
    let mut r = FrameReader::new(&conn);
    let mut burst = 0;
    while burst < 2 {
        let f = r.next(STEP);
        if f.id == PluginMessage::CLIENTBOUND_ID
            && PluginMessage::decode_fields(&mut Reader::new(&f.body)).is_ok_and(|p| p.channel == BURST_CHANNEL)
        {
            burst += 1;
        }
    }
    for k in 0..3 {
        let m = format!("p{i}-{k}");
        conn.send(&chat_frame(&m)).unwrap();
        conn.end_tick().unwrap();
        loop {
            let f = r.next(STEP);
            if f.id == 0x02 {
                assert_eq!(chat_message_text(&f).unwrap_or_default(), format!("echo:{m}"));
                break;
            }
        }
    }
    done.wait();
    measured.wait();
    conn.close();
}

#[tokio::main]
async fn main() {
    raise_fd_limit();
    let mut args = std::env::args().skip(1);
    let bin = args.next().unwrap_or_else(|| "target/release/moonbridge".into());
    let players: usize = args.next().map_or(200, |s| s.parse().unwrap());
    let options = args.next().unwrap_or_else(|| "{}".into());
    let idle: u64 = args.next().map_or(15, |s| s.parse().unwrap());
    let opts = Options::from_json(Some(&options)).unwrap();

    let (_node, backend) = node_backend(json!({ "burstCount": 2, "burstSize": 30000, "keepAlive": false })).await;
    let dir = TestDir::new("moonbridge-carriage-rss").unwrap();
    let ws = SocketAddr::from(([127, 0, 0, 1], moonbridge_test_certs::free_port().unwrap()));
    let config = dir.path().join("moonbridge.toml");
    std::fs::write(
        &config,
        format!(
            "[[listener]]\ntransport = \"ws\"\nbind = \"{ws}\"\n[[backend]]\nname = \"survival\"\n\
             address = \"{backend}\"\n[rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n"
        ),
    )
    .unwrap();
    let child = spawn_proxy_process(&bin, &config, ws).await;
    let pid = child.id();
    let _child = testbed::KillOnDrop(child);
    let before = rss_kib(pid);

    let url = format!("ws://{ws}/mc");
    let done = Arc::new(Barrier::new(players + 1));
    let measured = Arc::new(Barrier::new(players + 1));
    let started = Instant::now();
    let mut handles = Vec::new();
    for i in 0..players {
        let (url, opts, d, m) = (url.clone(), opts.clone(), Arc::clone(&done), Arc::clone(&measured));
        handles.push(std::thread::spawn(move || player(&url, opts, i, &d, &m)));
    }
    let d = Arc::clone(&done);
    tokio::task::spawn_blocking(move || d.wait()).await.unwrap();
    let active = rss_kib(pid);
    let took = started.elapsed();
    // Idle: no player or backend sends anything; the proxy's own timers (quiet spells, keepalive) run.
    tokio::time::sleep(Duration::from_secs(idle)).await;
    let after_idle = rss_kib(pid);
    let m = Arc::clone(&measured);
    tokio::task::spawn_blocking(move || m.wait()).await.unwrap();
    for h in handles {
        h.join().unwrap();
    }
    let per = |kib: u64| kib.saturating_sub(before) as f64 / players as f64;
    println!(
        "options {options}: {players} players in {:.1} s; proxy RSS {before} KiB before, {active} KiB after the chats \
         ({:.1} KiB per player), {after_idle} KiB after {idle} s idle ({:.1} KiB per player)",
        took.as_secs_f64(),
        per(active),
        per(after_idle)
    );
}
