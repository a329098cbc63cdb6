//! `[network]` (docs/network.md): instances of one network on a real `redis-server` (Debian's package,
//! started here on a free port), node-minecraft-protocol 1.7.10 backends, players through the client library.
//! Resume across instances runs behind HAProxy (Debian's package) balancing round robin with no affinity, so
//! every reconnect lands on another instance than the last.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use moonbridge_client::{Connection, Options};
use moonbridge_protocol::frame::Frame;
use moonbridge_protocol::packets::{KeepAlive, LoginDisconnect, LoginSuccess, Packet, PlayDisconnect};
use moonbridge_proxy::config::Transport;
use serde_json::json;
use testbed::mc::{chat_frame, chat_message_text, send_login};
use testbed::network::{instance_config, secret, signed_claim, Haproxy, Redis};
use testbed::{
    moonbridge_bin, node_backend, spawn_proxy_process, status_ping, KeyType, KillOnDrop, Proxy, TestCert, TestDir, STEP,
};
use tokio::time::timeout;

/// How long an instance may take to write or read a change at its next renewal: one renewal period (2 s),
/// measured at 1.8–2.1 s here, with as much again for a loaded machine.
pub(crate) const RENEWAL: Duration = Duration::from_secs(4);
/// How long every instance may take to see another's change: the writer's renewal and the reader's (two
/// periods, measured at up to 4.1 s), with slack.
pub(crate) const NETWORK_SEES: Duration = Duration::from_secs(7);
/// How long a dead instance's entries may stay: its lease (10 s, from its last renewal) and the reader's
/// renewal (measured at 11.9 s), with slack.
pub(crate) const LEASE_ENDS: Duration = Duration::from_secs(15);

/// The server list's `players.online` at `addr` (a 1.7.10 status ping).
async fn online(addr: SocketAddr) -> u64 {
    let v: serde_json::Value = serde_json::from_str(&status_ping(addr).await).unwrap();
    v["players"]["online"].as_u64().expect("players.online")
}

/// Waits until the server list at `addr` shows `n` players.
async fn wait_online(addr: SocketAddr, n: u64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let now = online(addr).await;
        if now == n {
            return;
        }
        assert!(Instant::now() < deadline, "the server list at {addr} shows {now} players, not {n}, after {within:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// A player connected through the client library (blocking: run it on a blocking thread). Its frame decoder
/// lives as long as the player, so bytes read past one frame (a Disconnect right behind Login Success) are
/// never lost between two reads.
pub(crate) struct Player {
    pub(crate) conn: Connection,
    dec: std::sync::Mutex<moonbridge_protocol::FrameDecoder>,
}

impl Player {
    /// Connects to `url` and logs in as `name`; the first frame the backend (or proxy) answered with.
    pub(crate) fn login(url: &str, options: Options, name: &str) -> (Self, Frame) {
        Self::login_over(Connection::connect(url, options).unwrap(), name)
    }

    /// Logs in as `name` over an open connection; the first frame the backend (or proxy) answered with.
    pub(crate) fn login_over(conn: Connection, name: &str) -> (Self, Frame) {
        send_login(&conn, name, false);
        let player = Self { conn, dec: std::sync::Mutex::new(moonbridge_protocol::FrameDecoder::new(1 << 21)) };
        let first = player.next(STEP);
        (player, first)
    }

    /// The next frame, waiting at most `wait`: `Ok(None)` when none came, `Err` once the connection ended
    /// and every frame before its end was returned.
    fn try_next(&self, wait: Duration) -> Result<Option<Frame>, moonbridge_client::ClientError> {
        let mut dec = self.dec.lock().unwrap();
        if let Some(f) = dec.try_next_frame().unwrap() {
            return Ok(Some(f));
        }
        let mut buf = vec![0u8; 1 << 16];
        let n = self.conn.recv(&mut buf, Some(wait))?;
        dec.queue_slice(&buf[..n]);
        Ok(dec.try_next_frame().unwrap())
    }

    /// The next frame; panics when none comes within `within` or the connection ended.
    pub(crate) fn next(&self, within: Duration) -> Frame {
        let deadline = Instant::now() + within;
        loop {
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no frame within {within:?}");
            match self.try_next(left) {
                Ok(Some(f)) => return f,
                Ok(None) => {}
                Err(e) => panic!("connection ended: {e}"),
            }
        }
    }

    /// Sends a chat message and reads until its echo; panics on a disconnect.
    pub(crate) fn chat(&self, message: &str) {
        self.chat_through(message, None);
    }

    /// Sends a chat message and reads until its echo; panics on a disconnect (see [`Self::try_chat`]).
    pub(crate) fn chat_through(&self, message: &str, moving: Option<&[String]>) {
        if let Err(reason) = self.try_chat(message, moving) {
            panic!("disconnected: {reason}");
        }
    }

    /// Sends a chat message and reads until its echo; `Err` with the Play Disconnect's reason (JSON) when the
    /// player is disconnected instead (also when the send fails: the connection closed behind its Play
    /// Disconnect, which is then read). With `moving: Some(sent)` (the player's chats so far), also until the
    /// world reset of a move (the two Respawns, S07): the old backend's answers after the draining instance's
    /// `move` are not delivered (as after a server switch), so the echo of a chat the old backend got just
    /// before never comes; the echo of one the new backend got may come after the reset, during the next chat
    /// (an echo of an earlier message of `sent` is passed over then). Panics on an echo out of order (of
    /// something never sent, while moving) and on a world reset without `moving`.
    fn try_chat(&self, message: &str, moving: Option<&[String]>) -> Result<(), String> {
        if self.conn.send(&chat_frame(message)).and_then(|()| self.conn.end_tick()).is_err() {
            return Err(self.disconnected());
        }
        let mut respawns = 0;
        loop {
            let f = self.next(STEP);
            match f.id {
                0x00 => self.answer_keep_alive(&f),
                0x02 => {
                    let text = chat_message_text(&f).unwrap_or_default();
                    if text == format!("echo:{message}") {
                        return Ok(());
                    }
                    let sent = moving.unwrap_or_else(|| panic!("echoes arrive once each, in order: {text}"));
                    assert!(
                        sent.iter().any(|m| text == format!("echo:{m}")),
                        "an echo of a message sent before: {text}"
                    );
                }
                0x07 if moving.is_some() => {
                    respawns += 1;
                    if respawns == 2 {
                        return Ok(());
                    }
                }
                0x07 => panic!("the player was not moved, yet its world was reset"),
                0x40 => return Err(f.decode::<PlayDisconnect>().unwrap().reason_json),
                _ => {}
            }
        }
    }

    /// Answers Keep Alive `f` (S00) with the same id, as a client does.
    pub(crate) fn answer_keep_alive(&self, f: &Frame) {
        let ka: KeepAlive = f.decode().unwrap();
        self.conn.send(&ka.to_frame_bytes().unwrap()).unwrap();
        self.conn.end_tick().unwrap();
    }

    /// Reads until a Play Disconnect and returns its reason (JSON).
    pub(crate) fn disconnected(&self) -> String {
        loop {
            let f = self.next(STEP);
            if f.id == PlayDisconnect::ID {
                return f.decode::<PlayDisconnect>().unwrap().reason_json;
            }
        }
    }
}

pub(crate) fn tcp_url(p: &Proxy) -> String {
    format!("tcp://{}", p.addr(Transport::Tcp))
}

pub(crate) async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    timeout(Duration::from_secs(120), tokio::task::spawn_blocking(f)).await.expect("in time").expect("no panic")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_counts_every_instance_and_a_name_plays_once() {
    let redis = Redis::start().await;
    let (_node, backend) = node_backend(json!({ "burstCount": 0 })).await;
    let dir = TestDir::new("moonbridge-network-dup").unwrap();
    let key = secret(&dir);
    let a = Proxy::start(&instance_config(backend, &redis, &key, "kick_existing", None)).await;
    let b = Proxy::start(&instance_config(backend, &redis, &key, "kick_existing", None)).await;
    let (a_url, b_url) = (tcp_url(&a), tcp_url(&b));

    // One player on B: the server list at A shows it.
    let (alex_b, first) = blocking(move || Player::login(&b_url, Options::default(), "Alex")).await;
    assert_eq!(first.id, LoginSuccess::ID);
    wait_online(a.addr(Transport::Tcp), 1, RENEWAL).await;
    assert_eq!(online(b.addr(Transport::Tcp)).await, 1);

    // The same name through A: the session on B ends with a vanilla server's message, the new one plays.
    let (alex_a, first) = blocking(move || Player::login(&a_url, Options::default(), "alex")).await;
    assert_eq!(first.id, LoginSuccess::ID);
    let reason = blocking(move || alex_b.disconnected()).await;
    assert!(reason.contains("You logged in from another location"), "{reason}");
    let alex_a = blocking(move || {
        alex_a.chat("still here");
        alex_a
    })
    .await;
    // One Alex on the network, at both instances (B's count includes A's player once its renewal read it).
    wait_online(a.addr(Transport::Tcp), 1, RENEWAL).await;
    wait_online(b.addr(Transport::Tcp), 1, RENEWAL).await;
    drop(alex_a);
    a.shutdown().await;
    // A's entries are gone at once when it stops: B counts nobody.
    wait_online(b.addr(Transport::Tcp), 0, Duration::from_secs(5)).await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refuse_new_keeps_the_first_and_a_killed_instance_leaves_no_stale_lock() {
    let redis = Redis::start().await;
    let (_node, backend) = node_backend(json!({ "burstCount": 0 })).await;
    let dir = TestDir::new("moonbridge-network-kill").unwrap();
    let key = secret(&dir);
    let a = Proxy::start(&instance_config(backend, &redis, &key, "refuse_new", None)).await;
    // B as its own process, to be killed with SIGKILL.
    let b_tcp = SocketAddr::from(([127, 0, 0, 1], moonbridge_test_certs::free_port().unwrap()));
    let b_toml =
        instance_config(backend, &redis, &key, "refuse_new", None).replacen("127.0.0.1:0", &b_tcp.to_string(), 1);
    let b_path = dir.path().join("b.toml");
    std::fs::write(&b_path, b_toml).unwrap();
    let mut b = KillOnDrop(spawn_proxy_process(moonbridge_bin().to_str().unwrap(), &b_path, b_tcp).await);

    let b_url = format!("tcp://{b_tcp}");
    let (bob_b, first) = blocking(move || Player::login(&b_url, Options::default(), "Bob")).await;
    assert_eq!(first.id, LoginSuccess::ID);
    wait_online(a.addr(Transport::Tcp), 1, RENEWAL).await;

    // refuse_new: the second Bob is turned away at A, the first plays on.
    let a_url = tcp_url(&a);
    let url = a_url.clone();
    let (_, refused) = blocking(move || Player::login(&url, Options::default(), "Bob")).await;
    assert_eq!(refused.id, LoginDisconnect::ID);
    let reason = refused.decode::<LoginDisconnect>().unwrap().reason_json;
    assert!(reason.contains("already playing on this network"), "{reason}");
    let bob_b = blocking(move || {
        bob_b.chat("first one stays");
        bob_b
    })
    .await;

    // B dies without a word: within one lease the count drops and Bob can log in at A.
    b.0.kill().unwrap();
    let killed = Instant::now();
    let _ = b.0.wait();
    drop(bob_b);
    wait_online(a.addr(Transport::Tcp), 0, LEASE_ENDS).await;
    let url = a_url.clone();
    let (bob_a, first) = blocking(move || Player::login(&url, Options::default(), "Bob")).await;
    assert_eq!(first.id, LoginSuccess::ID, "no stale lock {:?} after the kill", killed.elapsed());
    assert!(killed.elapsed() < LEASE_ENDS);
    blocking(move || bob_a.chat("back")).await;
    a.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_redis_logins_go_on_and_a_restarted_redis_is_filled_again() {
    let mut redis = Redis::start().await;
    let (_node, backend) = node_backend(json!({ "burstCount": 0 })).await;
    let dir = TestDir::new("moonbridge-network-redis").unwrap();
    let key = secret(&dir);
    let cfg = |_: ()| instance_config(backend, &redis, &key, "kick_existing", None);
    let metrics = "[metrics]\nbind = \"127.0.0.1:0\"\n";
    let a = Proxy::start(&format!("{}{metrics}", cfg(()))).await;
    let b = Proxy::start(&cfg(())).await;
    let b_url = tcp_url(&b);
    let (carl, _) = blocking(move || Player::login(&b_url, Options::default(), "Carl")).await;
    wait_online(a.addr(Transport::Tcp), 1, RENEWAL).await;
    assert_eq!(a.metric("moonbridge_network_redis_up").await, Some(1.0));
    assert_eq!(a.metric("moonbridge_network_instances").await, Some(2.0));

    redis.stop();
    let a_url = tcp_url(&a);
    let (dan, first) = blocking(move || Player::login(&a_url, Options::default(), "Dan")).await;
    assert_eq!(first.id, LoginSuccess::ID, "a login without Redis goes on");
    wait_metric(&a, "moonbridge_network_redis_up", 0.0, RENEWAL).await;
    assert_eq!(online(a.addr(Transport::Tcp)).await, 1, "local state only: Dan");
    // Liveness is not Redis's to decide: /readyz stays ready.
    let ready = testbed::raw_http(a.metrics.unwrap(), "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n").await;
    assert!(ready.starts_with("HTTP/1.1 200"), "{ready}");

    // Redis back, empty: within one renewal both instances wrote themselves, their players and their claims
    // again; within the next, each counts the other's.
    redis.restart().await;
    let deadline = Instant::now() + RENEWAL;
    loop {
        let instances = redis.command(&["ZCARD", "moonbridge:test:instances"]).await;
        let carl = redis.command(&["EXISTS", "moonbridge:test:name:carl"]).await;
        let dan = redis.command(&["EXISTS", "moonbridge:test:name:dan"]).await;
        if instances.as_deref() == Some(":2") && carl.as_deref() == Some(":1") && dan.as_deref() == Some(":1") {
            break;
        }
        assert!(Instant::now() < deadline, "not written again: instances {instances:?}, claims {carl:?} {dan:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    wait_online(a.addr(Transport::Tcp), 2, RENEWAL).await;
    wait_online(b.addr(Transport::Tcp), 2, RENEWAL).await;
    drop((carl, dan));
    a.shutdown().await;
    b.shutdown().await;
}

/// A player through the balancer: logs in, then `cuts` times has every connection through its group cut and
/// chats on; the chats it sent, in order, and the client library's resume count.
fn player_through_cuts(url: &str, options: Options, name: &str, cuts: usize, cut: impl Fn()) -> (Vec<String>, u64) {
    let (p, first) = Player::login(url, options, name);
    assert_eq!(first.id, LoginSuccess::ID);
    let mut sent = Vec::new();
    for i in 0..=cuts {
        for k in 0..3 {
            let m = format!("{name}-{i}.{k}");
            p.chat(&m);
            sent.push(m);
        }
        if i < cuts {
            cut();
        }
    }
    let resumes = p.conn.stats().resumes;
    p.conn.close();
    (sent, resumes)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn resume_lands_on_other_instances_behind_a_balancer_without_affinity() {
    let redis = Redis::start().await;
    let (mut node, backend) = node_backend(json!({ "burstCount": 0 })).await;
    let dir = TestDir::new("moonbridge-network-resume").unwrap();
    let key = secret(&dir);
    let cert = TestCert::generate("network-resume", KeyType::Ec).unwrap();
    let metrics = "[metrics]\nbind = \"127.0.0.1:0\"\n";
    let mut instances = Vec::new();
    for _ in 0..3 {
        instances.push(
            Proxy::start(&format!("{}{metrics}", instance_config(backend, &redis, &key, "kick_existing", Some(&cert))))
                .await,
        );
    }
    // Every instance sees the other two before a player comes.
    for p in &instances {
        wait_metric(p, "moonbridge_network_instances", 3.0, NETWORK_SEES).await;
    }
    let ws: Vec<SocketAddr> = instances.iter().map(|p| p.addr(Transport::Ws)).collect();
    let wss: Vec<SocketAddr> = instances.iter().map(|p| p.addr(Transport::Wss)).collect();
    let haproxy = std::sync::Arc::new(Haproxy::start(&[("ws", ws), ("wss", wss)]).await);
    let rt = tokio::runtime::Handle::current();
    const CUTS: usize = 6;

    let mut sessions = Vec::new();
    for (group, scheme, front, name) in
        [("ws", "ws", haproxy.fronts[0], "WsPlayer"), ("wss", "wss", haproxy.fronts[1], "WssPlayer")]
    {
        let url = format!("{scheme}://localhost:{}/mc", front.port());
        let options =
            Options::from_json(Some(&json!({ "ca_file": cert.ca, "ping_interval_ms": 500 }).to_string())).unwrap();
        let (h, rt) = (std::sync::Arc::clone(&haproxy), rt.clone());
        let cut = move || rt.block_on(h.cut(group));
        let (sent, resumes) = blocking(move || player_through_cuts(&url, options, name, CUTS, cut)).await;
        // At least one resume per cut: on a loaded machine the client's 1.5 s dead-peer timeout may add one.
        assert!((CUTS as u64..=CUTS as u64 + 2).contains(&resumes), "{name}: {resumes} resumes for {CUTS} cuts");
        sessions.push((name, sent));
    }
    // Each session's transcript at the backend: every chat once, in order (node-minecraft-protocol would also
    // fail to parse a lost or repeated byte).
    let total: usize = sessions.iter().map(|(_, s)| 1 + s.len()).sum();
    let lines = node.next_lines(total, STEP).await;
    assert!(lines.iter().all(|l| l["event"] != "client_error"), "{lines:?}");
    for (name, sent) in &sessions {
        let got: Vec<&str> = lines
            .iter()
            .filter(|l| l["event"] == "chat" && l["username"] == *name)
            .map(|l| l["message"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(got, sent.iter().map(String::as_str).collect::<Vec<_>>(), "{name}'s transcript");
    }
    // Round robin over three instances: every reconnect reached another instance than the one before; those
    // that did not reach the owner were carried to it over an instance link.
    // The owners count a resume as they adopt it, which may be just after the client saw `resumed`.
    let deadline = Instant::now() + STEP;
    let (forwarded, resumed) = loop {
        let (mut forwarded, mut resumed) = (0.0, 0.0);
        for p in &instances {
            forwarded += p.metric("moonbridge_resumes_total{outcome=\"forwarded\"}").await.unwrap();
            resumed += p.metric("moonbridge_resumes_total{outcome=\"resumed\"}").await.unwrap();
            assert_eq!(p.metric("moonbridge_resumes_total{outcome=\"refused_other_instance\"}").await, Some(0.0));
        }
        if resumed >= 2.0 * CUTS as f64 || Instant::now() > deadline {
            break (forwarded, resumed);
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    };
    // At least one per cut; one more when a cut lands while a resume's answer is on its way (the owner took the
    // resume, the client never saw `resumed` and resumes again).
    assert!(
        (2.0 * CUTS as f64..=2.0 * CUTS as f64 + 2.0).contains(&resumed),
        "every resume reached its session: {resumed}"
    );
    assert!(forwarded >= 2.0 * (CUTS as f64) / 2.0, "{forwarded} resumes carried over instance links");
    for p in instances {
        p.wait_connections(0, STEP).await;
        p.shutdown().await;
    }
}

/// Waits until `series` at `p`'s `[metrics]` listener reads `value`.
pub(crate) async fn wait_metric(p: &Proxy, series: &str, value: f64, within: Duration) {
    let deadline = Instant::now() + within;
    loop {
        let now = p.metric(series).await;
        if now == Some(value) {
            return;
        }
        assert!(Instant::now() < deadline, "{series} is {now:?}, not {value}, after {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_resume_at_another_instance_gets_4002_only_without_redis_or_without_its_owner() {
    let mut redis = Redis::start().await;
    let (_node, backend) = node_backend(json!({ "burstCount": 0 })).await;
    let dir = TestDir::new("moonbridge-network-4002").unwrap();
    let key = secret(&dir);
    let metrics = "[metrics]\nbind = \"127.0.0.1:0\"\n";
    let a = Proxy::start(&format!("{}{metrics}", instance_config(backend, &redis, &key, "kick_existing", None))).await;
    // B as its own process (its tcp and ws listeners on known ports), to be killed with SIGKILL.
    let port = || SocketAddr::from(([127, 0, 0, 1], moonbridge_test_certs::free_port().unwrap()));
    let (b_tcp, b_ws) = (port(), port());
    let b_toml = instance_config(backend, &redis, &key, "kick_existing", None)
        .replacen("127.0.0.1:0", &b_tcp.to_string(), 1)
        .replacen("127.0.0.1:0", &b_ws.to_string(), 1);
    let b_path = dir.path().join("b.toml");
    std::fs::write(&b_path, b_toml).unwrap();
    let mut b = KillOnDrop(spawn_proxy_process(moonbridge_bin().to_str().unwrap(), &b_path, b_tcp).await);
    wait_metric(&a, "moonbridge_network_instances", 2.0, NETWORK_SEES).await;

    // A carriage v2 session on B; its connection drops (B keeps it for the resume window).
    let (ws, token, received) = testbed::v2_session(b_ws).await;
    drop(ws);
    let resume = format!("resume {token} {received} {}", testbed::hs_ls().len());
    let refused = "moonbridge_resumes_total{outcome=\"refused_other_instance\"}";

    // Redis unreachable: A cannot tell where B is, so the resume is refused with 4002 (B lives on).
    redis.stop();
    wait_metric(&a, "moonbridge_network_redis_up", 0.0, RENEWAL).await;
    assert_eq!(testbed::try_resume(a.addr(Transport::Ws), &resume).await, Err(Some(4002)));
    assert_eq!(a.metric(refused).await, Some(1.0));

    // Redis back: the same resume at A is carried to B over an instance link.
    redis.restart().await;
    wait_metric(&a, "moonbridge_network_instances", 2.0, NETWORK_SEES).await;
    let answer = testbed::try_resume(a.addr(Transport::Ws), &resume).await;
    assert!(answer.as_deref().is_ok_and(|t| t.starts_with("resumed")), "{answer:?}");
    assert_eq!(a.metric("moonbridge_resumes_total{outcome=\"forwarded\"}").await, Some(1.0));

    // B killed (its lease still in Redis): the link cannot reach it, so the owner is gone: 4002.
    b.0.kill().unwrap();
    let _ = b.0.wait();
    assert_eq!(testbed::try_resume(a.addr(Transport::Ws), &resume).await, Err(Some(4002)));
    assert_eq!(a.metric(refused).await, Some(2.0));
    a.wait_connections(0, STEP).await;
    a.shutdown().await;
}

/// Reads `players` (two sessions of one name) until one gets a Play Disconnect, within [`STEP`] (Keep Alives
/// answered); then checks the other still plays (its chat echoed once). Returns which one ended and why.
fn one_of_two_ends(players: [&Player; 2]) -> (usize, String) {
    let deadline = Instant::now() + STEP;
    // The next frame of player `i`, waiting at most `wait`; a session that ends must say why first.
    let next = |i: usize, wait: Duration| -> Option<Frame> {
        players[i].try_next(wait).unwrap_or_else(|e| panic!("session {i} closed without a Play Disconnect: {e}"))
    };
    let ended = 'read: loop {
        assert!(Instant::now() < deadline, "neither session of the name ended");
        for (i, player) in players.iter().enumerate() {
            while let Some(f) = next(i, Duration::from_millis(20)) {
                match f.id {
                    KeepAlive::ID => {
                        // A session told to go may be closed already: its Disconnect is read next.
                        let ka: KeepAlive = f.decode().unwrap();
                        let _ = player.conn.send(&ka.to_frame_bytes().unwrap());
                        let _ = player.conn.end_tick();
                    }
                    PlayDisconnect::ID => break 'read (i, f.decode::<PlayDisconnect>().unwrap().reason_json),
                    _ => {}
                }
            }
        }
    };
    let other = 1 - ended.0;
    players[other].conn.send(&chat_frame("still here")).expect("the session that stays is open");
    players[other].conn.end_tick().expect("the session that stays is open");
    loop {
        assert!(Instant::now() < deadline + STEP, "no echo for the session that stays");
        if let Some(f) = next(other, Duration::from_millis(100)) {
            match f.id {
                0x02 => {
                    assert_eq!(chat_message_text(&f).unwrap_or_default(), "echo:still here");
                    return ended;
                }
                PlayDisconnect::ID => panic!("both sessions of the name ended"),
                _ => {}
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_logins_of_one_name_at_once_leave_exactly_one_playing() {
    let redis = Redis::start().await;
    let (_node, backend) = node_backend(json!({ "burstCount": 0 })).await;
    let dir = TestDir::new("moonbridge-network-race").unwrap();
    let key = secret(&dir);
    let metrics = "[metrics]\nbind = \"127.0.0.1:0\"\n";
    // Through two instances, then both through one.
    let cases = [("refuse_new", "RaceR", false), ("kick_existing", "RaceK", false), ("kick_existing", "RaceS", true)];
    for (policy, name, one_instance) in cases {
        let a = Proxy::start(&format!("{}{metrics}", instance_config(backend, &redis, &key, policy, None))).await;
        let b = Proxy::start(&format!("{}{metrics}", instance_config(backend, &redis, &key, policy, None))).await;
        for p in [&a, &b] {
            wait_metric(p, "moonbridge_network_instances", 2.0, NETWORK_SEES).await;
        }
        // Both logins start together.
        let (ua, ub) = (tcp_url(&a), tcp_url(if one_instance { &a } else { &b }));
        let (first_a, first_b) = tokio::join!(
            blocking(move || Player::login(&ua, Options::default(), name)),
            blocking(move || Player::login(&ub, Options::default(), name)),
        );
        let ((pa, fa), (pb, fb)) = (first_a, first_b);
        if policy == "refuse_new" {
            let ids = [fa.id, fb.id];
            assert!(
                ids.contains(&LoginSuccess::ID) && ids.contains(&LoginDisconnect::ID),
                "exactly one refused: {ids:?}"
            );
            let refused = if fa.id == LoginDisconnect::ID { &fa } else { &fb };
            let reason = refused.decode::<LoginDisconnect>().unwrap().reason_json;
            assert!(reason.contains("already playing on this network"), "{reason}");
            let stays = if fa.id == LoginSuccess::ID { pa } else { pb };
            let stays = blocking(move || {
                stays.chat("the first one plays");
                stays
            })
            .await;
            // One session of the name on the network.
            wait_online(a.addr(Transport::Tcp), 1, RENEWAL).await;
            drop(stays);
        } else {
            assert_eq!((fa.id, fb.id), (LoginSuccess::ID, LoginSuccess::ID), "both get in, one is then told to go");
            let (reason, both) = blocking(move || (one_of_two_ends([&pa, &pb]).1, (pa, pb))).await;
            assert!(reason.contains("You logged in from another location"), "{reason}");
            wait_online(a.addr(Transport::Tcp), 1, RENEWAL).await;
            drop(both);
        }
        a.shutdown().await;
        b.shutdown().await;
    }
}

/// Each renewal checks the claims of the instance's players (here changed straight in Redis, as Redis losing a
/// claim, or a login elsewhere while it was lost, would change them): a claim Redis lost is set again; one
/// another login holds is set back when this login wins by `duplicate_login` (`kick_existing`: the later
/// login, `refuse_new`: the earlier), and otherwise this session is told to go, with that policy's message,
/// within one renewal (2 s).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_claim_another_login_holds_is_settled_by_the_policy_within_one_renewal() {
    let redis = Redis::start().await;
    let (_node, backend) = node_backend(json!({ "burstCount": 0 })).await;
    let dir = TestDir::new("moonbridge-network-claims").unwrap();
    let key = secret(&dir);
    for (policy, name, message) in [
        ("kick_existing", "Eve", "You logged in from another location"),
        ("refuse_new", "Fay", "You are already playing on this network"),
    ] {
        let a = Proxy::start(&instance_config(backend, &redis, &key, policy, None)).await;
        let url = tcp_url(&a);
        let (player, first) = blocking(move || Player::login(&url, Options::default(), name)).await;
        assert_eq!(first.id, LoginSuccess::ID);
        let claim = format!("moonbridge:test:name:{}", name.to_lowercase());
        // Claimed at the login, or at the first renewal when the login came before the instance reached Redis.
        let deadline = Instant::now() + RENEWAL;
        let held = loop {
            if let Some(held) = redis.command(&["GET", &claim]).await {
                break held;
            }
            assert!(Instant::now() < deadline, "{policy}: no claim");
            tokio::time::sleep(Duration::from_millis(50)).await;
        };
        let fields: Vec<&str> = held.split(':').collect();
        let [instance, nonce, born, sig] = fields[..] else {
            panic!("not <instance>:<nonce>:<login ms>:<signature>: {held}")
        };
        assert_eq!((instance.len(), nonce.len(), sig.len()), (16, 16, 64), "{held}");
        let born: u64 = born.parse().expect("a login time in ms");
        // Other logins of the name, made as a login of the network makes them (signed, on a live instance: this
        // one); a claim nobody of the network made never ends a session (tests/tests/network_attacks.rs).
        let lower = name.to_lowercase();
        let (earlier, later) = (
            signed_claim(&dir, &key, &lower, instance, 1, born - 1),
            signed_claim(&dir, &key, &lower, instance, 2, born + 1),
        );
        let (loser, winner) = if policy == "kick_existing" { (earlier, later) } else { (later, earlier) };
        let set_back = |what: &'static str| {
            let (redis, claim, held) = (&redis, claim.clone(), held.clone());
            async move {
                let deadline = Instant::now() + RENEWAL;
                while redis.command(&["GET", &claim]).await.as_deref() != Some(held.as_str()) {
                    assert!(
                        Instant::now() < deadline,
                        "{policy}: the claim is not set back within one renewal after {what}"
                    );
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
        };
        // Redis loses the claim: set again, to the same login's value.
        assert_eq!(redis.command(&["DEL", &claim]).await.as_deref(), Some(":1"));
        set_back("a loss").await;
        // A login this one wins against: set back, and the player plays on.
        assert_eq!(redis.command(&["SET", &claim, &loser]).await.as_deref(), Some("+OK"));
        set_back("a losing login").await;
        let player = blocking(move || {
            player.chat("still mine");
            player
        })
        .await;
        // A login that wins against this one: the player is told to go; her release leaves the winner's claim.
        assert_eq!(redis.command(&["SET", &claim, &winner]).await.as_deref(), Some("+OK"));
        let taken = Instant::now();
        let (reason, player) = blocking(move || (player.disconnected(), player)).await;
        let waited = taken.elapsed();
        assert!(reason.contains(message), "{policy}: {reason}");
        assert!(waited < RENEWAL, "{policy}: told to go after {waited:?}");
        wait_online(a.addr(Transport::Tcp), 0, RENEWAL).await;
        assert_eq!(redis.command(&["GET", &claim]).await, Some(winner), "{policy}: the winner's claim stays");
        drop(player);
        a.shutdown().await;
    }
}

/// Opens a carriage v2 WebSocket to `addr`, sends `resume <token> <received> <sent>` and reads until the
/// `resumed` answer: returns the WebSocket (kept open) and the next token.
async fn resumed_at(addr: SocketAddr, token: &str, received: u64, sent: usize) -> (testbed::RawWs, String) {
    use futures_util::{SinkExt, StreamExt};
    let (mut ws, _) = testbed::ws_offering(addr, "moonbridge.v2").await;
    ws.send(testbed::Message::Text(format!("resume {token} {received} {sent}").into())).await.unwrap();
    loop {
        match timeout(STEP, ws.next()).await.expect("an answer in time") {
            Some(Ok(testbed::Message::Text(t))) if t.starts_with("resumed ") => {
                let next = t.split(' ').nth(2).expect("the next token").to_string();
                return (ws, next);
            }
            Some(Ok(_)) => {}
            other => panic!("no resumed answer: {other:?}"),
        }
    }
}

/// A session carried to its owner over a link is taken over by a later resume at a third instance: the
/// carried connection gets 4005 from the owner, and the carrying instance ends its copy (its link sessions
/// back to 0) although the player behind it keeps its socket open without a word.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_carried_session_taken_over_elsewhere_gets_4005_and_its_link_ends() {
    let redis = Redis::start().await;
    let backend = testbed::login_backend().await;
    let dir = TestDir::new("moonbridge-network-takeover").unwrap();
    let key = secret(&dir);
    let metrics = "[metrics]\nbind = \"127.0.0.1:0\"\n";
    let mut instances = Vec::new();
    for _ in 0..3 {
        let cfg = instance_config(backend.addr, &redis, &key, "kick_existing", None);
        instances.push(Proxy::start(&format!("{cfg}{metrics}")).await);
    }
    for p in &instances {
        wait_metric(p, "moonbridge_network_instances", 3.0, NETWORK_SEES).await;
    }
    let (owner, carrier, third) = (&instances[0], &instances[1], &instances[2]);
    let (ws, token, received) = testbed::v2_session(owner.addr(Transport::Ws)).await;
    drop(ws);
    let sent = testbed::hs_ls().len();
    let (mut carried, token) = resumed_at(carrier.addr(Transport::Ws), &token, received, sent).await;
    assert_eq!(carrier.metric("moonbridge_network_link_sessions").await, Some(1.0));
    // The player resumes again, at the third instance, while the carried connection is still open.
    let (_taken, _) = resumed_at(third.addr(Transport::Ws), &token, received, sent).await;
    assert_eq!(testbed::ws_close_code(&mut carried, STEP).await, Some(4005));
    // `carried` stays open on the player's side: the carrier must end its copy on its own.
    wait_metric(carrier, "moonbridge_network_link_sessions", 0.0, STEP).await;
    wait_metric(third, "moonbridge_network_link_sessions", 1.0, STEP).await;
    drop(carried);
    for p in instances {
        p.shutdown().await;
    }
}

/// A player through the balancer who logs in as `name` over `conn`, chats until `stop`, then once more: the
/// chats it sent, in order, and the client library's statistics at the end.
pub(crate) fn player_until(
    conn: Connection,
    name: &str,
    ready: tokio::sync::mpsc::UnboundedSender<()>,
    stop: &std::sync::atomic::AtomicBool,
) -> (Vec<String>, moonbridge_client::Stats) {
    let (p, first) = Player::login_over(conn, name);
    assert_eq!(first.id, LoginSuccess::ID, "{name} logs in");
    let mut sent = Vec::new();
    let mut i = 0;
    let mut chat = |p: &Player, sent: &mut Vec<String>| {
        let m = format!("{name}-{i}");
        i += 1;
        sent.push(m.clone());
        p.chat_through(&m, Some(sent));
    };
    chat(&p, &mut sent);
    ready.send(()).unwrap();
    while !stop.load(std::sync::atomic::Ordering::Relaxed) {
        chat(&p, &mut sent);
        // Bounded by the chat's own wait: one message per 100 ms at most, as a player types.
        std::thread::sleep(Duration::from_millis(100));
    }
    // After the draining instance has exited: every player plays on.
    chat(&p, &mut sent);
    let stats = p.conn.stats();
    p.conn.close();
    (sent, stats)
}

/// `series` at the `[metrics]` listener `addr`; `None` once it no longer answers.
pub(crate) async fn metric_at(addr: SocketAddr, series: &str) -> Option<f64> {
    let reply = timeout(Duration::from_secs(2), async {
        let mut s = tokio::net::TcpStream::connect(addr).await.ok()?;
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await.ok()?;
        let mut out = String::new();
        s.read_to_string(&mut out).await.ok()?;
        Some(out)
    })
    .await
    .ok()??;
    testbed::proxy::sample(reply.split_once("\r\n\r\n")?.1, series)
}

/// The client library's options for the drain tests' players: the test CA, a Ping every second.
fn options_for(cert: &TestCert) -> Options {
    Options::from_json(Some(&json!({ "ca_file": cert.ca, "ping_interval_ms": 1000 }).to_string())).unwrap()
}

/// The drain tests' network: two instances on one `redis-server` and `backend` (tcp, ws and wss listeners,
/// metrics, `grace` seconds of shutdown grace), each seeing the other.
struct Pair {
    a: Proxy,
    b: Proxy,
    cert: TestCert,
    _redis: Redis,
    _dir: TestDir,
}

impl Pair {
    async fn start(name: &str, backend: SocketAddr, grace: u64) -> Self {
        let redis = Redis::start().await;
        let dir = TestDir::new(&format!("moonbridge-{name}")).unwrap();
        let key = secret(&dir);
        let cert = TestCert::generate(name, KeyType::Ec).unwrap();
        let config = format!(
            "{}[metrics]\nbind = \"127.0.0.1:0\"\n[limits]\nshutdown_grace_seconds = {grace}\nhandshake_timeout_seconds = 30\n",
            instance_config(backend, &redis, &key, "kick_existing", Some(&cert))
        );
        let (a, b) = (Proxy::start(&config).await, Proxy::start(&config).await);
        for p in [&a, &b] {
            wait_metric(p, "moonbridge_network_instances", 2.0, NETWORK_SEES).await;
        }
        Self { a, b, cert, _redis: redis, _dir: dir }
    }

    /// HAProxy balancing round robin over the two instances, without affinity: one front per transport.
    async fn balancer(&self, transports: &[(&str, Transport)]) -> Haproxy {
        let groups: Vec<_> = transports.iter().map(|(n, t)| (*n, vec![self.a.addr(*t), self.b.addr(*t)])).collect();
        Haproxy::start(&groups).await
    }

    /// Names the instance the only player is on `a`.
    fn player_on_a(&mut self) {
        if self.a.stats.stats().connections != 1 {
            std::mem::swap(&mut self.a, &mut self.b);
        }
        assert_eq!(self.a.stats.stats().connections, 1, "the player is on one instance");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_draining_instance_moves_every_player_to_another_and_exits_early() {
    // A vanilla server's rule: a second login of a name in play kicks the older connection.
    let (mut node, backend) = node_backend(json!({ "burstCount": 0, "duplicate": "kick_existing" })).await;
    const GRACE: u64 = 10;
    let pair = Pair::start("network-drain", backend, GRACE).await;
    // Round robin over [A, B], no affinity: every other connection of each group lands on A.
    let haproxy = pair.balancer(&[("ws", Transport::Ws), ("wss", Transport::Wss)]).await;
    let Pair { a, b, cert, _redis, _dir } = pair;
    const PER_GROUP: usize = 20;
    let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel();
    let mut players = Vec::new();
    for (scheme, front) in [("ws", haproxy.fronts[0]), ("wss", haproxy.fronts[1])] {
        for n in 0..PER_GROUP {
            let url = format!("{scheme}://localhost:{}/mc", front.port());
            let options = options_for(&cert);
            let name = format!("{scheme}{n}");
            let (ready, stop) = (ready_tx.clone(), std::sync::Arc::clone(&stop));
            let thread_name = name.clone();
            let h = std::thread::spawn(move || {
                player_until(Connection::connect(&url, options).unwrap(), &thread_name, ready, &stop).0
            });
            players.push((name, h));
            // One at a time, so round robin alternates A, B, A, … in each group.
            timeout(STEP, ready_rx.recv()).await.expect("the player chats within a step").expect("ready");
        }
    }
    assert_eq!(a.stats.stats().connections, PER_GROUP, "half of the players are on A");
    // One more player's connection on A, its Login Start held back until the others moved: it is moved too.
    let mut late = None;
    let mut spare = None;
    for n in 0..2 {
        let (url, opts) = (format!("ws://localhost:{}/mc", haproxy.fronts[0].port()), options_for(&cert));
        let conn = blocking(move || Connection::connect(&url, opts).unwrap()).await;
        let open = 2 * PER_GROUP + 1 + n;
        let deadline = Instant::now() + STEP;
        while a.stats.stats().connections + b.stats.stats().connections < open {
            assert!(Instant::now() < deadline, "the late connection is open at an instance within a step");
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
        if a.stats.stats().connections > PER_GROUP {
            late = Some(conn);
            break;
        }
        spare = Some(conn); // on B: the next one alternates to A
    }
    let late = late.expect("a late connection on A");
    let ops = a.metrics.unwrap();
    // SIGTERM to A: it moves its players to B and exits once they are gone, before its grace ends.
    let started = Instant::now();
    let stopping = tokio::spawn(a.shutdown());
    let deadline = Instant::now() + STEP;
    while !testbed::raw_http(ops, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n").await.starts_with("HTTP/1.1 503") {
        assert!(Instant::now() < deadline, "A is draining within a step");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    // Its Login Start only once A's other players have all moved: A waits for the login under way, then moves it.
    let deadline = Instant::now() + STEP * 2;
    loop {
        match metric_at(ops, "moonbridge_drain_moves_total{outcome=\"moved\"}").await {
            Some(n) if n == PER_GROUP as f64 => break,
            Some(_) => {}
            None => panic!("A exited while a connection on it had not logged in yet"),
        }
        assert!(Instant::now() < deadline, "A's {PER_GROUP} players moved within two steps");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    let late_player = {
        let (ready, stop) = (ready_tx.clone(), std::sync::Arc::clone(&stop));
        std::thread::spawn(move || player_until(late, "Late", ready, &stop).0)
    };
    players.push(("Late".to_string(), late_player));
    timeout(STEP, stopping).await.expect("A exits").unwrap();
    let took = started.elapsed();
    assert!(
        took < Duration::from_secs(GRACE - 3),
        "A exited {took:?} after SIGTERM, before moves stop (grace {GRACE}s)"
    );
    stop.store(true, std::sync::atomic::Ordering::Relaxed);
    let mut sessions = Vec::new();
    for (name, h) in players {
        let sent = blocking(move || h.join()).await.unwrap_or_else(|_| panic!("{name} played on without an error"));
        sessions.push((name, sent));
    }
    drop(spare);
    // The backend's transcript: every chat once, in order, per player; A's players logged in twice.
    // Every chat, a login per player, and a second one for each of A's players (the late one's included).
    let logins_in_all = (2 * PER_GROUP + 1) + (PER_GROUP + 1);
    let total: usize = sessions.iter().map(|(_, s)| s.len()).sum::<usize>() + logins_in_all;
    let lines = node.next_lines(total, STEP * 2).await;
    assert!(lines.iter().all(|l| l["event"] != "client_error"), "{lines:?}");
    for (name, sent) in &sessions {
        let got: Vec<&str> = lines
            .iter()
            .filter(|l| l["event"] == "chat" && l["username"] == *name)
            .map(|l| l["message"].as_str().unwrap_or("?"))
            .collect();
        assert_eq!(got, sent.iter().map(String::as_str).collect::<Vec<_>>(), "{name}'s transcript");
    }
    let logins = |name: &str| lines.iter().filter(|l| l["event"] == "login" && l["username"] == name).count();
    let twice = sessions.iter().filter(|(n, _)| logins(n) == 2).count();
    assert_eq!(twice, PER_GROUP + 1, "A's players, the late one too, logged in again through B");
    assert_eq!(logins("Late"), 2, "the player whose login ended during the drain was moved too");
    b.wait_connections(0, STEP).await;
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_the_backend_refuses_leaves_the_player_on_the_draining_instance_until_its_grace() {
    // A server that refuses a second login of a name in play: the move's login is turned away.
    let (mut node, backend) = node_backend(json!({ "burstCount": 0, "duplicate": "refuse_new" })).await;
    const GRACE: u64 = 7;
    let mut pair = Pair::start("network-drain-refused", backend, GRACE).await;
    let haproxy = pair.balancer(&[("ws", Transport::Ws)]).await;
    let url = format!("ws://localhost:{}/mc", haproxy.fronts[0].port());
    let refused = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let (ready_tx, mut ready_rx) = tokio::sync::mpsc::unbounded_channel();
    let seen_refused = std::sync::Arc::clone(&refused);
    // The player chats until it is disconnected: its echoes after the refusal, and the reason it read.
    let player = std::thread::spawn(move || {
        let options = Options::from_json(Some(&json!({ "ping_interval_ms": 1000 }).to_string())).unwrap();
        let (p, first) = Player::login(&url, options, "Stays");
        assert_eq!(first.id, LoginSuccess::ID);
        let _ = ready_tx.send(());
        let mut echoed_after = 0;
        for i in 0.. {
            match p.try_chat(&format!("Stays-{i}"), None) {
                Ok(()) if seen_refused.load(std::sync::atomic::Ordering::Relaxed) => echoed_after += 1,
                Ok(()) => {}
                Err(reason) => return (echoed_after, reason, p.conn.stats().resumes),
            }
            std::thread::sleep(Duration::from_millis(100));
        }
        unreachable!()
    });
    timeout(STEP, ready_rx.recv()).await.expect("the player plays").expect("ready");
    // A is the instance the balancer sent the player to.
    pair.player_on_a();
    let Pair { a, b, _redis, _dir, .. } = pair;
    let a_metrics = a.metrics.unwrap();
    // A TCP player on A cannot move: it gets the shutdown message at once, as without a network.
    let tcp_url = tcp_url(&a);
    let (tcp, first) = blocking(move || Player::login(&tcp_url, Options::from_json(None).unwrap(), "TcpPlayer")).await;
    assert_eq!(first.id, LoginSuccess::ID);
    let started = Instant::now();
    let told = tokio::task::spawn_blocking(move || (tcp.disconnected(), Instant::now()));
    let stopping = tokio::spawn(a.shutdown());
    // The move is refused (4006 at B, `stay` at A) while A is still up.
    let deadline = Instant::now() + STEP;
    while metric_at(a_metrics, "moonbridge_drain_moves_total{outcome=\"failed\"}").await != Some(1.0) {
        assert!(Instant::now() < deadline, "the move failed within a step");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(metric_at(a_metrics, "moonbridge_drain_moves_total{outcome=\"moved\"}").await, Some(0.0));
    refused.store(true, std::sync::atomic::Ordering::Relaxed);
    let (reason, at) = told.await.unwrap();
    assert!(reason.contains("Proxy is restarting"), "the TCP player's message: {reason}");
    assert!(at - started < Duration::from_secs(2), "the TCP player was told at once: {:?}", at - started);
    timeout(Duration::from_secs(GRACE + 5), stopping).await.expect("A stops by its grace").unwrap();
    let took = started.elapsed();
    assert!(took >= Duration::from_secs(GRACE - 3), "the player was kept until the grace's end: {took:?}");
    let (echoed_after, reason, resumes) = blocking(move || player.join()).await.unwrap();
    assert!(echoed_after >= 1, "the player played on at A after the refusal");
    assert!(reason.contains("Proxy is restarting"), "the shutdown message: {reason}");
    assert_eq!(resumes, 0, "no resume, no move");
    // Nothing is left: B closed the refused connection, the backend saw one refusal and holds no connection.
    b.wait_connections(0, STEP).await;
    let refusal = node.event("refused_duplicate", STEP).await;
    assert_eq!(refusal["username"], "Stays");
    b.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_forge_client_is_moved_with_its_handshake_reset_and_run_again() {
    use testbed::forge::{forge_server, handshake, through_client_library, ForgeClient};
    let (backend, log) = forge_server("survival", 1, false).await;
    const GRACE: u64 = 10;
    let mut pair = Pair::start("network-drain-forge", backend, GRACE).await;
    let haproxy = pair.balancer(&[("wss", Transport::Wss)]).await;
    let url = format!("wss://localhost:{}/mc", haproxy.fronts[0].port());
    let mut client = ForgeClient::over(through_client_library(&url, options_for(&pair.cert)).await, "Forger").await;
    client.until(|seen| seen.iter().any(|s| s.starts_with("JoinGame"))).await;
    let joined = client.seen.len();
    pair.player_on_a();
    let Pair { a, b, _redis, _dir, .. } = pair;
    // The operations endpoint starts the drain here (the other tests use the signal's path).
    let started = Instant::now();
    let ops = a.metrics.unwrap();
    assert!(testbed::raw_http(ops, "GET /drain HTTP/1.1\r\nHost: x\r\n\r\n").await.starts_with("HTTP/1.1 405"));
    let accepted = testbed::raw_http(ops, "POST /drain HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").await;
    assert!(accepted.starts_with("HTTP/1.1 202"), "{accepted}");
    let stopping = tokio::spawn(a.wait_exit(Duration::from_secs(GRACE)));
    client.until(|seen| seen.iter().filter(|s| s.starts_with("Respawn")).count() == 2).await;
    // At the other instance: the reset, the server's whole handshake again, then the world reset.
    let mut after = vec!["Reset".to_string()];
    after.extend(handshake("survival"));
    after.extend(["Respawn -1".to_string(), "Respawn 0".to_string()]);
    assert_eq!(client.seen[joined..], after[..]);
    assert_eq!(client.state, testbed::forge::ClientState::Done, "the client finished the handshake again");
    timeout(Duration::from_secs(GRACE), stopping).await.expect("A exits before its grace ends").unwrap();
    assert!(started.elapsed() < Duration::from_secs(GRACE - 3), "A exited early: {:?}", started.elapsed());
    client.say("hello").await;
    client.until(|seen| seen.last().is_some_and(|s| s.starts_with("Chat"))).await;
    assert_eq!(client.seen.last().unwrap(), "Chat [survival] echo:hello");
    // The server ran two whole handshakes (one per login) and closed the first connection.
    let heard = log.lock().unwrap().clone();
    assert_eq!(heard.iter().filter(|l| *l == "Ack 5").count(), 2, "{heard:?}");
    assert_eq!(heard.iter().filter(|l| *l == "closed").count(), 1, "{heard:?}");
    assert_eq!(heard.last().map(String::as_str), Some("chat hello"), "{heard:?}");
    drop(client);
    b.wait_connections(0, STEP).await;
    b.shutdown().await;
}

/// After the state was handed over, the draining instance counts the move as done only on the client's
/// Close 1000 `moved`: a raw carriage v2 client that offered moves takes `moved` from B, then drops its old
/// connection without a Close. A counts it `failed` (a lost link there, not a move), and the player plays on
/// through B (a chat echoed).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_the_hand_over_only_the_clients_moved_close_counts_as_moved() {
    use futures_util::{SinkExt, StreamExt};
    use testbed::Message;
    let (_node, backend) = node_backend(json!({ "burstCount": 0, "duplicate": "kick_existing" })).await;
    const GRACE: u64 = 7;
    let Pair { a, b, _redis, _dir, .. } = Pair::start("network-drain-raw", backend, GRACE).await;
    let headers = [("Sec-WebSocket-Protocol", "moonbridge.v2"), ("MoonBridge-Move", "1")];
    let url = format!("ws://127.0.0.1:{}/mc", a.addr(Transport::Ws).port());
    let (mut old, _) = testbed::ws_connect(a.addr(Transport::Ws), &url, &headers, None).await.unwrap();
    let sent = testbed::hs_ls();
    old.send(Message::Binary(sent.clone().into())).await.unwrap();
    let ops = a.metrics.unwrap();
    // In play at A (Join Game read), then SIGTERM: the binary bytes up to `move` are what the client received.
    let mut received = 0u64;
    let mut frames = moonbridge_protocol::FrameDecoder::new(1 << 21);
    let mut joined = false;
    let mut stopping = None;
    let mut a = Some(a);
    let ticket = loop {
        match timeout(STEP, old.next()).await.expect("A writes within a step") {
            Some(Ok(Message::Binary(bytes))) => {
                received += bytes.len() as u64;
                frames.queue_slice(&bytes);
                while let Some(f) = frames.try_next_frame().unwrap() {
                    joined |= f.id == 0x01;
                }
            }
            Some(Ok(Message::Text(t))) if t.starts_with("move ") => break t["move ".len()..].to_string(),
            Some(Ok(_)) => {}
            other => panic!("A ended before `move`: {other:?}"),
        }
        if joined && stopping.is_none() {
            stopping = Some(tokio::spawn(a.take().unwrap().shutdown()));
        }
    };
    // Before it reconnects, the client still sends on the old connection, its acks among its bytes: A reads
    // them all up to the count the client names (an `ack` there does not end the catch-up).
    let late = chat_frame("sent while moving");
    old.send(Message::Binary(late.clone().into())).await.unwrap();
    old.send(Message::Text(format!("ack {received}").into())).await.unwrap();
    let sent = [sent, late].concat();
    // The move, at B: the state comes over the link, the backend takes the second login.
    let b_url = format!("ws://127.0.0.1:{}/mc", b.addr(Transport::Ws).port());
    let (mut new, _) = testbed::ws_connect(b.addr(Transport::Ws), &b_url, &headers, None).await.unwrap();
    new.send(Message::Text(format!("moving {ticket} {received} {}", sent.len()).into())).await.unwrap();
    let moved = loop {
        match timeout(STEP, new.next()).await.expect("B answers within a step") {
            Some(Ok(Message::Text(t))) => break t.to_string(),
            Some(Ok(_)) => {}
            other => panic!("B ended without an answer: {other:?}"),
        }
    };
    assert!(moved.starts_with(&format!("moved {} ", sent.len())), "B holds every byte sent: {moved}");
    // The old connection ends without the client's Close: not a move at A.
    drop(old);
    let deadline = Instant::now() + STEP;
    while metric_at(ops, "moonbridge_drain_moves_total{outcome=\"failed\"}").await != Some(1.0) {
        assert!(Instant::now() < deadline, "A counts the lost link as failed within a step");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    assert_eq!(metric_at(ops, "moonbridge_drain_moves_total{outcome=\"moved\"}").await, Some(0.0));
    // The player plays on through B.
    new.send(Message::Binary(chat_frame("after the move").into())).await.unwrap();
    let mut frames = moonbridge_protocol::FrameDecoder::new(1 << 21);
    let echoed = timeout(STEP, async {
        loop {
            match new.next().await {
                Some(Ok(Message::Binary(bytes))) => {
                    frames.queue_slice(&bytes);
                    while let Some(f) = frames.try_next_frame().unwrap() {
                        if f.id == 0x02 && chat_message_text(&f).as_deref() == Some("echo:after the move") {
                            return;
                        }
                    }
                }
                Some(Ok(_)) => {}
                other => panic!("B ended: {other:?}"),
            }
        }
    })
    .await;
    assert!(echoed.is_ok(), "the chat is echoed through B");
    timeout(Duration::from_secs(GRACE + 5), stopping.unwrap()).await.expect("A stops by its grace").unwrap();
    drop(new);
    b.wait_connections(0, STEP).await;
    b.shutdown().await;
}
