//! A rolling restart of a network of three instances behind the balancers operators run (issue 49): nginx at its
//! **default** upstream settings (`testbed::nginx`: round robin, `max_fails=1`, `fail_timeout=10s`) and HAProxy as
//! `docs/network.md` shows it (TCP mode, round robin, `check`, `send-proxy-v2`, no `redispatch`). Each instance in
//! turn is stopped as SIGTERM stops it (its drain moves its players to the others while its listeners stay open)
//! and started again on the same ports; 30 client-library players chat all the while, and not one of them sees
//! a disconnect screen.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use moonbridge_client::{Connection, Options, Stats};
use moonbridge_protocol::packets::{LoginSuccess, Packet};
use moonbridge_test_certs::free_port;
use serde_json::json;
use testbed::network::{secret, wait_metric_at, Haproxy, Redis};
use testbed::nginx::Nginx;
use testbed::prometheus::Prometheus;
use testbed::{node_backend, Proxy, TestDir, STEP};
use tokio::time::timeout;

// `metric_at` that reads `None` once the listener is gone (an instance that exited).
use super::network::{metric_at, player_until, Player};

/// Players in the test, half through each balancer.
const PLAYERS: usize = 30;

/// How long the network takes to see a restarted instance on every instance (two lease renewals and a margin).
const NETWORK_SEES: Duration = Duration::from_secs(7);

/// One instance's fixed listener ports, kept across its restarts (the balancers name them).
#[derive(Clone, Copy)]
struct Ports {
    /// `ws` behind nginx (`X-Forwarded-For` from 127.0.0.1 believed).
    nginx: u16,
    /// `ws` behind HAProxy (a PROXY v2 header from 127.0.0.1).
    haproxy: u16,
    /// `[metrics]`, which Prometheus scrapes.
    metrics: u16,
}

/// The configuration of an instance on `ports`: both `ws` listeners as docs/network.md shows them, the network
/// on `redis`, metrics, 10 s of shutdown grace.
fn config(ports: Ports, backend: SocketAddr, redis: &Redis, key: &std::path::Path) -> String {
    format!(
        "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:{}\"\nping_interval_seconds = 1\n\
         trusted_proxies = [\"127.0.0.1\"]\nreal_ip_header = \"X-Forwarded-For\"\n\
         [[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:{}\"\nping_interval_seconds = 1\n\
         proxy_protocol = true\ntrusted_proxies = [\"127.0.0.1\"]\n\
         [[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n\
         [network]\nredis_url = \"{}\"\nname = \"rolling\"\npeer_bind = \"127.0.0.1:0\"\nsecret_file = \"{}\"\n\
         duplicate_login = \"kick_existing\"\n\
         [metrics]\nbind = \"127.0.0.1:{}\"\n[limits]\nshutdown_grace_seconds = 10\nhandshake_timeout_seconds = 30\n",
        ports.nginx,
        ports.haproxy,
        redis.url(),
        key.display(),
        ports.metrics,
    )
}

/// Waits until every instance of `instances` counts `n` instances in the network.
async fn network_of(instances: &[Proxy], n: usize) {
    for p in instances {
        wait_metric_at(p.metrics.unwrap(), "moonbridge_network_instances", n as f64, NETWORK_SEES).await;
    }
}

/// `moonbridge_drain_arrivals_total{outcome}` summed over `instances`.
async fn arrivals(instances: &[Proxy], outcome: &str) -> f64 {
    let series = format!("moonbridge_drain_arrivals_total{{outcome=\"{outcome}\"}}");
    let mut sum = 0.0;
    for p in instances {
        sum += metric_at(p.metrics.unwrap(), &series).await.expect("a live instance's metrics");
    }
    sum
}

/// A client-library player over `url` ([`player_until`]: chats every 100 ms until `stop`, then once more; panics
/// on any disconnect): its chats in order and the client library's statistics.
fn player(
    url: &str,
    name: &str,
    ready: tokio::sync::mpsc::UnboundedSender<()>,
    stop: &AtomicBool,
) -> (Vec<String>, Stats) {
    let options = Options::from_json(Some(&json!({ "ping_interval_ms": 1000 }).to_string())).unwrap();
    let conn = Connection::connect(url, options).unwrap_or_else(|e| panic!("{name} connects: {e}"));
    player_until(conn, name, ready, stop)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_rolling_restart_behind_nginx_and_haproxy_shows_no_player_a_disconnect_screen() {
    let (mut node, backend) = node_backend(json!({ "burstCount": 0, "duplicate": "kick_existing" })).await;
    let redis = Redis::start().await;
    let dir = TestDir::new("moonbridge-rolling").unwrap();
    let key = secret(&dir);
    let port = || free_port().unwrap();
    let ports: Vec<Ports> = (0..3).map(|_| Ports { nginx: port(), haproxy: port(), metrics: port() }).collect();
    let mut instances = Vec::new();
    for p in &ports {
        instances.push(Proxy::start(&config(*p, backend, &redis, &key)).await);
    }
    network_of(&instances, 3).await;
    let loopback = |port| SocketAddr::from(([127, 0, 0, 1], port));
    // What operators watch: Prometheus scraping every instance every second.
    let prometheus = Prometheus::start(&ports.iter().map(|p| loopback(p.metrics)).collect::<Vec<_>>());
    let nginx = Nginx::start(&ports.iter().map(|p| loopback(p.nginx)).collect::<Vec<_>>()).await;
    // docs/network.md's HAProxy example: TCP health checks that send a PROXY header too, no `option redispatch`.
    let haproxy = Haproxy::start_documented(
        &[("ws", ports.iter().map(|p| loopback(p.haproxy)).collect())],
        "check check-send-proxy send-proxy-v2",
    )
    .await;

    let stop = Arc::new(AtomicBool::new(false));
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut players = Vec::new();
    for n in 0..PLAYERS {
        let (front, via) = if n % 2 == 0 { (nginx.front, "nginx") } else { (haproxy.fronts[0], "haproxy") };
        let url = format!("ws://localhost:{}/mc", front.port());
        let name = format!("{via}{n}");
        let (ready, stop) = (ready_tx.clone(), Arc::clone(&stop));
        let thread_name = name.clone();
        players.push((name, std::thread::spawn(move || player(&url, &thread_name, ready, &stop))));
    }
    for _ in 0..PLAYERS {
        timeout(STEP * 2, ready_rx.recv()).await.expect("every player chats within two steps").expect("ready");
    }
    // Sessions past their handshake (the balancers' health checks never leave it).
    let on = |instances: &[Proxy]| {
        instances.iter().map(|p| p.stats.stats()).map(|s| s.connections.saturating_sub(s.handshaking)).sum::<usize>()
    };
    assert_eq!(on(&instances), PLAYERS, "every player is on an instance");

    // Each instance in turn: SIGTERM (the drain moves its players), then started again on the same ports once it
    // exited, and the network sees all three again before the next.
    let mut moved = 0;
    let roll = tokio::time::Instant::now();
    for (i, p) in ports.iter().enumerate() {
        let stopping = instances.remove(i);
        let held = on(std::slice::from_ref(&stopping));
        let ops = stopping.metrics.unwrap();
        let before = (arrivals(&instances, "moved").await, arrivals(&instances, "refused").await);
        let draining = tokio::spawn(stopping.shutdown());
        let mut failed = 0.0;
        while !draining.is_finished() {
            failed = metric_at(ops, "moonbridge_drain_moves_total{outcome=\"failed\"}").await.unwrap_or(failed);
            // The network's count never reads above the players in play, though moving players are held by two
            // instances for a moment.
            for p in &instances {
                let players = metric_at(p.metrics.unwrap(), "moonbridge_network_players").await;
                assert!(players.is_none_or(|n| n <= PLAYERS as f64), "network players read {players:?} of {PLAYERS}");
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        timeout(STEP, draining).await.expect("the instance exits within its grace").unwrap();
        assert_eq!(failed, 0.0, "instance {i}: no move failed");
        // Every move is counted where the player arrived, on the instances that live on: exactly the players the
        // stopped instance held, none refused.
        let after = (arrivals(&instances, "moved").await, arrivals(&instances, "refused").await);
        assert_eq!(after.0 - before.0, held as f64, "instance {i}'s {held} players arrived at the two others");
        assert_eq!(after.1, before.1, "no move was refused");
        // Prometheus, scraping every second, sees every one of them (the instances that count them live on).
        let query = "sum(moonbridge_drain_arrivals_total{outcome=\"moved\"})";
        let seen = prometheus.query_until(query, after.0, Duration::from_secs(15)).await;
        assert_eq!(seen, Some(after.0), "Prometheus sees the arrivals of instance {i}'s drain");
        moved += held;
        assert_eq!(on(&instances), PLAYERS, "every player is on one of the two others");
        instances.insert(i, Proxy::start(&config(*p, backend, &redis, &key)).await);
        network_of(&instances, 3).await;
    }

    let roll = roll.elapsed();
    stop.store(true, Ordering::Relaxed);
    let mut sessions = Vec::new();
    let (mut retries, mut sent_on) = (0, 0);
    for (name, h) in players {
        let (sent, stats) = tokio::task::spawn_blocking(move || h.join())
            .await
            .unwrap()
            .unwrap_or_else(|_| panic!("{name} played on without a disconnect screen"));
        retries += stats.move_retries;
        sent_on += stats.sent_on;
        sessions.push((name, sent));
    }
    println!(
        "rolling restart of 3 instances in {roll:?}: {moved} moves, {retries} move retries, {sent_on} sessions sent on"
    );
    // The backend's transcript: every chat once, in order, per player; every player logged in again at least
    // once (each instance restarted, so each player moved).
    let chats: usize = sessions.iter().map(|(_, s)| s.len()).sum();
    let mut lines = Vec::new();
    while lines.iter().filter(|l: &&serde_json::Value| l["event"] == "chat").count() < chats {
        lines.extend(node.next_lines(1, STEP).await);
    }
    for (name, sent) in &sessions {
        let got: Vec<&str> = lines
            .iter()
            .filter(|l| l["event"] == "chat" && l["username"] == *name)
            .map(|l| l["message"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(got, sent.iter().map(String::as_str).collect::<Vec<_>>(), "{name}'s transcript");
        let logins = lines.iter().filter(|l| l["event"] == "login" && l["username"] == *name).count();
        assert!(logins >= 2, "{name} logged in {logins} time(s): it was never moved");
    }
    for p in instances {
        p.shutdown().await;
    }
}

/// What reaches a draining instance while it drains (its listeners stay open): a client that offered moves is
/// sent on before anything of its session starts (a new session with close 4007; a `moving` request or a resume
/// of a session held elsewhere closed without a Close frame), each counted as `sent_on`, and a client-library
/// player sent on plays on at the other instance; any other login is told the restart message
/// (`moonbridge_connections_refused_total{reason="draining"}`). A connection accepted before the drain goes on as
/// usual: here one waiting in its handshake holds the drain open meanwhile (a drain ends once no login it began
/// with is under way).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_instance_sends_movers_on_with_4007_and_tells_other_logins_to_reconnect() {
    use futures_util::SinkExt;
    use moonbridge_proxy::config::Transport;
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let backend = testbed::login_backend().await;
    let redis = Redis::start().await;
    let dir = TestDir::new("moonbridge-drain-answers").unwrap();
    let key = secret(&dir);
    let config = format!(
        "{}[metrics]\nbind = \"127.0.0.1:0\"\n[limits]\nshutdown_grace_seconds = 10\nhandshake_timeout_seconds = 30\n",
        testbed::network::instance_config(backend.addr, &redis, &key, "kick_existing", None)
    );
    let (a, b) = (Proxy::start(&config).await, Proxy::start(&config).await);
    let pair = [a, b];
    network_of(&pair, 2).await;
    let [a, b] = pair;
    let (tcp, ws, ops) = (a.addr(Transport::Tcp), a.addr(Transport::Ws), a.metrics.unwrap());
    let hold = tokio::net::TcpStream::connect(tcp).await.unwrap();
    a.wait_connections(1, STEP).await;
    let reached = backend.conns.lock().unwrap().iter().filter(|c| !c.lock().unwrap().received.is_empty()).count();
    let stopping = tokio::spawn(a.shutdown());
    let deadline = tokio::time::Instant::now() + STEP;
    while !testbed::raw_http(ops, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n").await.starts_with("HTTP/1.1 503") {
        assert!(tokio::time::Instant::now() < deadline, "A is draining within a step");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let mover = [("MoonBridge-Move", "1")];
    // A new session of a client that can move: its first message (the handshake) is answered with 4007.
    let url = format!("ws://127.0.0.1:{}/mc", ws.port());
    let offer = [("Sec-WebSocket-Protocol", "moonbridge.v2"), mover[0]];
    let (mut fresh, _) = testbed::ws_connect(ws, &url, &offer, None).await.unwrap();
    fresh.send(testbed::Message::Binary(testbed::hs_ls().into())).await.unwrap();
    assert_eq!(testbed::ws_close_code(&mut fresh, STEP).await, Some(4007), "a new session is sent on");
    // A `moving` request the balancer sent back here, and a resume of a session another instance holds: closed
    // without a Close frame, which every client library version tries again.
    let token = "00112233445566ff.00112233445566778899aabbccddeeff";
    for request in [format!("moving {token} 0 0"), format!("resume {token} 0 0")] {
        let answer = testbed::first_answer(ws, &mover, &request).await;
        assert_eq!(answer, Err(None), "{request} is closed without a Close frame (every client tries again)");
    }
    assert_eq!(metric_at(ops, "moonbridge_drain_moves_total{outcome=\"sent_on\"}").await, Some(3.0));
    // Two client-library players through a round-robin balancer over A and B: the one that reaches A is sent on,
    // connects again (to B), sends its handshake and Login Start again and logs in; neither sees an error.
    let haproxy = Haproxy::start(&[("ws", vec![ws, b.addr(Transport::Ws)])]).await;
    let url = format!("ws://localhost:{}/mc", haproxy.fronts[0].port());
    let mut sent_on = 0;
    for name in ["First", "Second"] {
        let url = url.clone();
        let stats = tokio::task::spawn_blocking(move || {
            let options = Options::from_json(Some(&json!({ "ping_interval_ms": 1000 }).to_string())).unwrap();
            let (p, first) = Player::login_over(Connection::connect(&url, options).unwrap(), name);
            assert_eq!(first.id, LoginSuccess::ID, "{name} logs in");
            let stats = p.conn.stats();
            p.conn.close();
            stats
        })
        .await
        .unwrap();
        sent_on += stats.sent_on;
    }
    // Round robin sends one of the two to A at least (both, if its rotation starts there).
    assert!((1..=2).contains(&sent_on), "a player that reached A was sent on ({sent_on})");
    let counted = metric_at(ops, "moonbridge_drain_moves_total{outcome=\"sent_on\"}").await;
    assert_eq!(counted, Some(3.0 + sent_on as f64), "each sent on counted");
    // A client that cannot move (here over TCP), connecting during the drain: its login is told the restart
    // message.
    let mut other = tokio::net::TcpStream::connect(tcp).await.unwrap();
    other.write_all(&testbed::hs_ls()).await.unwrap();
    let mut told = Vec::new();
    timeout(STEP, other.read_to_end(&mut told)).await.expect("closed within a step").unwrap();
    let told = String::from_utf8_lossy(&told);
    assert!(told.contains("Proxy is restarting, please reconnect in a moment"), "a Login Disconnect: {told:?}");
    assert_eq!(metric_at(ops, "moonbridge_connections_refused_total{reason=\"draining\"}").await, Some(1.0));
    // (`/readyz` opens a connection to the backend without a byte: a reachability check.)
    let logins = backend.conns.lock().unwrap().iter().filter(|c| !c.lock().unwrap().received.is_empty()).count();
    assert_eq!(logins, reached + 2, "only the two players' logins (through B) reached the backend");
    // The login under way ends: A exits before its grace.
    drop(hold);
    timeout(STEP, stopping).await.expect("A exits once no login is under way").unwrap();
    b.shutdown().await;
}
