//! The network of instances as an attack surface (docs/network.md, "What a network trusts"): instance links
//! flooded before they prove anything, Redis entries written by someone else, requests carried from one real
//! address, refusals a peer causes in bulk. Real `redis-server` (Debian's package) and `moonbridge` processes
//! where their log or memory is read.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moonbridge_protocol::packets::Packet;
use moonbridge_proxy::config::Transport;
use moonbridge_test_certs::{free_port, ChildLog};
use testbed::network::{
    instance_config, instance_process, loopback, metric_at, secret, signed_entry, wait_metric_at, Redis,
};
use testbed::{login_backend, login_handshake, login_start, moonbridge_bin, rss_kib, Proxy, TestDir, STEP};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpSocket, TcpStream};
use tokio::time::timeout;

/// How long every instance may take to see another's change (two renewal periods, with slack).
const NETWORK_SEES: Duration = Duration::from_secs(7);

/// A token of a session instance `instance` (16 hex digits) never issued.
fn guessed_token(instance: &str, i: usize) -> String {
    format!("{instance}.{i:032x}")
}

/// The first answer at `addr` to `request` from a player a trusted proxy names as `real` (`X-Real-IP`).
async fn first_answer(addr: SocketAddr, real: Option<&str>, request: &str) -> Result<String, Option<u16>> {
    let headers: Vec<(&str, &str)> = real.map(|ip| ("X-Real-IP", ip)).into_iter().collect();
    testbed::first_answer(addr, &headers, request).await
}

/// Logs `name` in over TCP at `addr` and reads until the first byte of the answer.
async fn tcp_login(addr: SocketAddr, name: &str) -> (TcpStream, Vec<u8>) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[login_handshake("mc.example.com"), login_start(name)].concat()).await.unwrap();
    let mut buf = vec![0u8; 4096];
    let n = timeout(STEP, s.read(&mut buf)).await.expect("an answer in time").unwrap();
    buf.truncate(n);
    (s, buf)
}

/// The id of the instance whose entry in Redis names `peer`.
fn id_at(redis: &Redis, peer: SocketAddr) -> String {
    let ids = redis.cli(&["ZRANGE", "moonbridge:test:instances", "0", "-1"]);
    ids.lines()
        .map(str::trim)
        .find(|id| redis.cli(&["GET", &format!("moonbridge:test:instance:{id}")]).contains(&format!("\"{peer}\"")))
        .expect("the instance's id")
        .to_string()
}

/// Issue 48 (1): 10,400 silent connections on `peer_bind` from 40 addresses, held while a player resumes across
/// instances. Each address holds at most 16 pending openings and all of them 256; the instance's own links
/// (from a live instance's address) are held to neither, so the resume is carried; the memory the flood took
/// is given back once it ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_silent_links_keeps_no_instance_out_and_its_memory_returns() {
    testbed::raise_fd_limit();
    let redis = Redis::start().await;
    let backend = login_backend().await;
    let dir = TestDir::new("moonbridge-attacks-flood").unwrap();
    let key = secret(&dir);
    let metrics = "[metrics]\nbind = \"127.0.0.1:0\"\n";
    let a = Proxy::start(&(instance_config(backend.addr, &redis, &key, "kick_existing", None) + metrics)).await;
    let toml = instance_config(backend.addr, &redis, &key, "kick_existing", None);
    let (mut b, _, b_ws, b_peer, b_metrics) = instance_process(&dir, "b", toml, "");
    wait_metric_at(b_metrics, "moonbridge_network_instances", 2.0, NETWORK_SEES).await;
    wait_metric_at(a.metrics.unwrap(), "moonbridge_network_instances", 2.0, NETWORK_SEES).await;
    let before = rss_kib(b.id());

    // 260 silent connections from each of 40 addresses in turn, all held (10,400: more than the 10,000 links an
    // instance serves): 16 of each address's pending at most (the first 16 addresses), and 256 of all of them
    // (the other 24 addresses: all refused).
    let mut held = Vec::new();
    for source in 2..42u8 {
        for _ in 0..260 {
            let socket = TcpSocket::new_v4().unwrap();
            socket.bind(SocketAddr::from(([127, 0, 0, source], 0))).unwrap();
            held.push(timeout(STEP, socket.connect(b_peer)).await.expect("connected in time").unwrap());
        }
    }
    let refused = |reason: &str| format!("moonbridge_network_links_refused_total{{reason=\"{reason}\"}}");
    let per_source = wait_metric_at(b_metrics, &refused("per_source"), 1.0, STEP).await;
    let openings = wait_metric_at(b_metrics, &refused("openings"), 1.0, STEP).await;
    // Each refusal is counted (opening deadlines of 5 s may free a few slots on a slow machine).
    let deadline = Instant::now() + STEP;
    while metric_at(b_metrics, &refused("per_source")).await.unwrap_or(0.0)
        + metric_at(b_metrics, &refused("openings")).await.unwrap_or(0.0)
        < 10_000.0
    {
        assert!(Instant::now() < deadline, "refused: {per_source} per source, {openings} for all openings");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }

    // A session on B, its connection dropped, resumed at A: carried to B over a link while the flood goes on.
    let (ws, token, received) = testbed::v2_session(b_ws).await;
    drop(ws);
    let resume = format!("resume {token} {received} {}", testbed::hs_ls().len());
    let answer = testbed::try_resume(a.addr(Transport::Ws), &resume).await;
    assert!(answer.as_deref().is_ok_and(|t| t.starts_with("resumed")), "{answer:?}");
    let peak = rss_kib(b.id());

    let opened = held.len();
    drop(held);
    // What 10,400 connections (256 pending openings) hold: small tasks, nothing like the 12 KiB each of before.
    assert!(peak < before + 8 * 1024, "B's RSS: {before} KiB before, {peak} KiB in the flood");
    // Every pending opening ends within its 5 s deadline; the allocator trim (every 10 s) gives the memory back.
    let deadline = Instant::now() + Duration::from_secs(40);
    let ended = Instant::now();
    loop {
        let now = rss_kib(b.id());
        if now <= before + 4096 {
            eprintln!(
                "flood: {opened} connections; B's RSS {before} KiB before, {peak} KiB during, {now} KiB {:?} after",
                ended.elapsed()
            );
            break;
        }
        assert!(Instant::now() < deadline, "B's RSS: {before} KiB before, {peak} KiB in the flood, {now} KiB after");
        tokio::time::sleep(Duration::from_millis(250)).await;
    }
    assert!(b.child().try_wait().unwrap().is_none(), "B still runs");
    a.shutdown().await;
}

/// Issue 48 (2, 3): what Redis holds is checked entry by entry. An unsigned instance entry naming a port here
/// is never dialled (a resume for it gets 4002, the port sees no connection), and is counted and logged; a
/// player hash of the wrong type, a name claim replaced by a list and a forged claim are skipped or taken back
/// and reported, the network stays whole (every instance, Redis up), nobody is told to go, and every name keeps
/// its one session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn redis_entries_are_checked_one_by_one_and_unsigned_instances_never_dialled() {
    let redis = Redis::start().await;
    let backend = login_backend().await;
    let dir = TestDir::new("moonbridge-attacks-redis").unwrap();
    let key = secret(&dir);
    let toml = instance_config(backend.addr, &redis, &key, "refuse_new", None);
    let (a, a_tcp, a_ws, a_peer, a_metrics) = instance_process(&dir, "a", toml, "");
    let b = Proxy::start(
        &(instance_config(backend.addr, &redis, &key, "refuse_new", None) + "[metrics]\nbind = \"127.0.0.1:0\"\n"),
    )
    .await;
    wait_metric_at(a_metrics, "moonbridge_network_instances", 2.0, NETWORK_SEES).await;

    // A forged instance: an entry without the network's signature, naming a port of the "attacker".
    let trap = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    trap.set_nonblocking(true).unwrap();
    let forged = "ffffffffffffffff";
    let entry = format!("{{\"peer\":\"{}\",\"players\":0}}", trap.local_addr().unwrap());
    redis.cli(&["SET", &format!("moonbridge:test:instance:{forged}"), &entry, "PX", "600000"]);
    redis.cli(&["ZADD", "moonbridge:test:instances", "1", forged]);
    let line = a.wait_line(&format!("instance:{forged}"), NETWORK_SEES).expect("a line names the forged entry");
    assert!(line.contains("not signed with the network's secret"), "{line}");
    wait_metric_at(a_metrics, "moonbridge_network_bad_entries_total{kind=\"unsigned_instance\"}", 1.0, STEP).await;
    let resume = format!("resume {} 0 0", guessed_token(forged, 1));
    assert_eq!(first_answer(a_ws, None, &resume).await, Err(Some(4002)));
    assert!(
        trap.accept().is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock),
        "nothing dialled the forged peer"
    );
    assert_eq!(metric_at(a_metrics, "moonbridge_network_instances").await, Some(2.0));

    // Three players on A.
    let mut players = Vec::new();
    for name in ["Alpha", "Bravo", "Charlie", "Golf"] {
        let (s, answer) = tcp_login(a_tcp, name).await;
        assert_eq!(testbed::frames(&answer).first().map(|f| f.0), Some(0x02), "{name} logs in");
        players.push(s);
    }
    // A third instance as the network writes it (signed), whose player hash is a string; Bravo's claim a list;
    // Charlie's claim a forged one, older than any login (under refuse_new the older login stays).
    let fake = "00000000000000bb";
    let entry = signed_entry(&dir, &key, fake, "127.0.0.1:9");
    redis.cli(&["SET", &format!("moonbridge:test:instance:{fake}"), &entry, "PX", "600000"]);
    redis.cli(&["ZADD", "moonbridge:test:instances", "1", fake]);
    redis.cli(&["SET", &format!("moonbridge:test:players:{fake}"), "not a hash"]);
    redis.cli(&["DEL", "moonbridge:test:name:bravo"]);
    redis.cli(&["RPUSH", "moonbridge:test:name:bravo", "not a claim"]);
    let a_id = id_at(&redis, a_peer);
    let forged_claim = format!("{a_id}:0000000000000001:0:forged");
    redis.cli(&["SET", "moonbridge:test:name:charlie", &forged_claim, "PX", "600000"]);
    // Golf's claim: one the network signed, on an instance that is not live (a copy of an old claim): neither
    // obeyed nor replaced.
    let elsewhere = testbed::network::signed_claim(&dir, &key, "golf", "00000000000000cc", 1, 0);
    redis.cli(&["SET", "moonbridge:test:name:golf", &elsewhere, "PX", "600000"]);
    let bad = |kind: &str| format!("moonbridge_network_bad_entries_total{{kind=\"{kind}\"}}");
    wait_metric_at(a_metrics, &bad("wrong_type_players"), 1.0, NETWORK_SEES).await;
    let claims = wait_metric_at(a_metrics, &bad("wrong_type_claim"), 1.0, NETWORK_SEES).await;
    assert_eq!(claims, 1.0, "the claim is replaced once");
    wait_metric_at(a_metrics, &bad("unsigned_claim"), 1.0, NETWORK_SEES).await;
    // Two renewals later every claim lives on a fresh lease, and the network is whole.
    let renewed = wait_metric_at(a_metrics, "moonbridge_network_leases_total{result=\"renewed\"}", 0.0, STEP).await;
    wait_metric_at(a_metrics, "moonbridge_network_leases_total{result=\"renewed\"}", renewed + 2.0, NETWORK_SEES).await;
    for name in ["alpha", "bravo", "charlie"] {
        let ttl: u64 = redis.cli(&["PTTL", &format!("moonbridge:test:name:{name}")]).trim().parse().unwrap();
        assert!(ttl > 5000 && ttl <= 10_000, "the claim of {name} was renewed (PTTL {ttl} ms)");
    }
    let charlie = redis.cli(&["GET", "moonbridge:test:name:charlie"]);
    assert!(charlie.starts_with(&a_id) && !charlie.contains("forged"), "Charlie's claim taken back: {charlie}");
    assert_eq!(redis.cli(&["GET", "moonbridge:test:name:golf"]).trim(), elsewhere, "Golf's claim left alone");
    assert_eq!(metric_at(a_metrics, &bad("unsigned_claim")).await, Some(1.0), "only Charlie's was forged");
    assert_eq!(metric_at(a_metrics, "moonbridge_network_redis_up").await, Some(1.0));
    assert_eq!(metric_at(a_metrics, "moonbridge_network_instances").await, Some(3.0), "A, B and the third");
    assert_eq!(b.metric("moonbridge_network_redis_up").await, Some(1.0));
    // Nobody was told to go: no byte came after the logins.
    for (p, name) in players.iter().zip(["Alpha", "Bravo", "Charlie", "Golf"]) {
        let mut b = [0u8; 1];
        assert!(p.try_read(&mut b).is_err_and(|e| e.kind() == std::io::ErrorKind::WouldBlock), "{name} plays on");
    }
    // A login whose name's claim is a list, or a claim no login made, gets in (refuse_new refuses only for a
    // login of the network): both replaced in one step.
    redis.cli(&["RPUSH", "moonbridge:test:name:delta", "not a claim"]);
    redis.cli(&["SET", "moonbridge:test:name:echo", "0123456789abcdef:0000000000000001:0:forged", "PX", "600000"]);
    for name in ["Delta", "Echo"] {
        let (s, answer) = tcp_login(b.addr(Transport::Tcp), name).await;
        assert_eq!(testbed::frames(&answer).first().map(|f| f.0), Some(0x02), "{name} logs in at B");
        players.push(s);
    }
    let b_metrics = b.metrics.unwrap();
    assert_eq!(metric_at(b_metrics, &bad("wrong_type_claim")).await, Some(1.0));
    assert_eq!(metric_at(b_metrics, &bad("unsigned_claim")).await, Some(1.0));
    // One session per name: each of the three is refused at B.
    for name in ["Alpha", "Bravo", "Charlie"] {
        let (_s, answer) = tcp_login(b.addr(Transport::Tcp), name).await;
        let reason = testbed::login_disconnect_reason(&answer);
        assert_eq!(reason.as_deref(), Some("You are already playing on this network"), "{name}");
    }
    drop(players);
    b.shutdown().await;
}

/// Issue 48 (4, 5): behind a trusted proxy, resume and `moving` requests are limited by the real address
/// before anything is carried (1 per second, burst 3: the rest are closed without a Close frame, as at
/// accept), and 300 refused resumes carried to their owner leave a bounded number of lines in its log (each one
/// counted).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn carried_requests_are_limited_by_the_real_address_and_their_refusals_logged_within_bounds() {
    let redis = Redis::start().await;
    let backend = login_backend().await;
    let dir = TestDir::new("moonbridge-attacks-carried").unwrap();
    let key = secret(&dir);
    let trusted = instance_config(backend.addr, &redis, &key, "kick_existing", None).replacen(
        "ping_interval_seconds = 1\n",
        "ping_interval_seconds = 1\ntrusted_proxies = [\"127.0.0.1\"]\nreal_ip_header = \"X-Real-IP\"\n",
        1,
    );
    let a = Proxy::start(&format!(
        "{trusted}[rate_limits]\nconnections_per_second = 1\nconnection_burst = 3\n[metrics]\nbind = \"127.0.0.1:0\"\n"
    ))
    .await;
    let toml = instance_config(backend.addr, &redis, &key, "kick_existing", None);
    let (b, _, b_ws, _, b_metrics) = instance_process(&dir, "b", toml, "[rate_limits]\nconnections_per_second = 0\n");
    wait_metric_at(b_metrics, "moonbridge_network_instances", 2.0, NETWORK_SEES).await;
    wait_metric_at(a.metrics.unwrap(), "moonbridge_network_instances", 2.0, NETWORK_SEES).await;
    let (_ws, token, _) = testbed::v2_session(b_ws).await;
    let owner = &token[..16];

    let mut limited = 0;
    for (i, request) in (0..30).map(|i| (i, format!("resume {} 0 0", guessed_token(owner, i)))) {
        match first_answer(a.addr(Transport::Ws), Some("203.0.113.7"), &request).await {
            Err(None) => limited += 1,
            Err(Some(4001)) => assert!(i < 6, "resume {i} was carried"),
            other => panic!("resume {i}: {other:?}"),
        }
    }
    assert!(limited >= 24, "{limited} of 30 resumes limited");
    let mut moves_limited = 0;
    for i in 0..30 {
        let request = format!("moving {} 0 0", guessed_token(owner, 100 + i));
        match first_answer(a.addr(Transport::Ws), Some("203.0.113.8"), &request).await {
            Err(None) => moves_limited += 1,
            Err(Some(4006)) => assert!(i < 6, "move {i} was handed on"),
            other => panic!("move {i}: {other:?}"),
        }
    }
    assert!(moves_limited >= 24, "{moves_limited} of 30 moves limited");
    let carried =
        metric_at(b_metrics, "moonbridge_network_link_requests_total{outcome=\"refused\",request=\"resume\"}").await;
    assert!(carried.is_some_and(|n| n <= 6.0), "resumes carried to B: {carried:?}");

    // 300 guessed tokens for B presented at B's own ws listener... and carried there from an instance without
    // limits: each refusal is counted, the log keeps at most 10 lines per 10 s.
    let c = Proxy::start(&format!(
        "{}[rate_limits]\nconnections_per_second = 0\n[metrics]\nbind = \"127.0.0.1:0\"\n",
        instance_config(backend.addr, &redis, &key, "kick_existing", None)
    ))
    .await;
    wait_metric_at(b_metrics, "moonbridge_network_instances", 3.0, NETWORK_SEES).await;
    wait_metric_at(c.metrics.unwrap(), "moonbridge_network_instances", 3.0, NETWORK_SEES).await;
    for i in 0..300 {
        let answer =
            first_answer(c.addr(Transport::Ws), None, &format!("resume {} 0 0", guessed_token(owner, 1000 + i))).await;
        assert_eq!(answer, Err(Some(4001)), "resume {i}");
    }
    let series = "moonbridge_network_link_requests_total{outcome=\"refused\",request=\"resume\"}";
    wait_metric_at(b_metrics, series, 300.0, STEP).await;
    let lines = b.count_lines("resume carried over an instance link", Duration::from_secs(1));
    assert!(lines <= 20, "{lines} lines for 300 refused carried resumes");
    c.shutdown().await;
    a.shutdown().await;
}

/// A backend of the test's own: accepts connections in turn, and for each the login's bytes, then Login
/// Success and Join Game and whatever `play` does with the socket.
async fn scripted_backend<F, Fut>(play: F) -> SocketAddr
where
    F: Fn(usize, TcpStream) -> Fut + Send + 'static,
    Fut: std::future::Future<Output = ()> + Send + 'static,
{
    let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        let mut n = 0;
        while let Ok((mut s, _)) = listener.accept().await {
            let mut buf = vec![0u8; 4096];
            let _ = timeout(STEP, s.read(&mut buf)).await;
            let hello = [testbed::login_success("Steve"), testbed::gtnh::join_game(7, 0)].concat();
            s.write_all(&hello).await.unwrap();
            tokio::spawn(play(n, s));
            n += 1;
        }
    });
    addr
}

/// A player at `addr` over TCP that logs in as `name` and reads everything until the connection ends.
async fn reading_player(addr: SocketAddr, name: &str) -> tokio::task::JoinHandle<u64> {
    let (mut s, first) = tcp_login(addr, name).await;
    tokio::spawn(async move {
        let mut total = first.len() as u64;
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(Ok(n)) = timeout(Duration::from_secs(30), s.read(&mut buf)).await {
            if n == 0 {
                break;
            }
            total += n as u64;
        }
        total
    })
}

/// Issue 48 (5): one backend write of 20,000 `Connect`s to a server that does not exist: each is refused and
/// counted, and the log keeps at most 10 lines per 10 s of them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn twenty_thousand_refused_connects_leave_a_bounded_log() {
    let backend = scripted_backend(|_, mut s| async move {
        let request = testbed::gtnh::bungee_request("Connect", &["nowhere"], 0);
        s.write_all(&request.repeat(20_000)).await.unwrap();
        let mut sink = vec![0u8; 1 << 16];
        while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
    let dir = TestDir::new("moonbridge-attacks-connects").unwrap();
    let [tcp, metrics] = [(); 2].map(|()| loopback(free_port().unwrap()));
    let path = dir.join("moonbridge.toml");
    std::fs::write(
        &path,
        format!(
            "[[listener]]\ntransport = \"tcp\"\nbind = \"{tcp}\"\n[[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n\
             [[backend]]\nname = \"lobby\"\naddress = \"{backend}\"\n[transfer]\ntargets = [\"lobby\"]\n\
             [metrics]\nbind = \"{metrics}\"\n"
        ),
    )
    .unwrap();
    let log = ChildLog::spawn(
        std::process::Command::new(moonbridge_bin()).arg("--config").arg(&path).env("RUST_LOG", "info"),
    )
    .unwrap();
    assert!(log.wait_line("listening", Duration::from_secs(20)).is_some(), "the proxy starts");
    let player = reading_player(tcp, "Steve").await;
    wait_metric_at(metrics, "moonbridge_transfers_total{outcome=\"refused\"}", 20_000.0, Duration::from_secs(30)).await;
    let lines = log.count_lines("transfer refused", Duration::from_secs(1));
    assert!((1..=20).contains(&lines), "{lines} lines for 20,000 refused Connects");
    player.abort();
}

/// Issue 48 (6): 8,000 `PlayerList ALL` in one backend write on a network of 1,000 players (another
/// instance's, written to Redis with the network's signature): every one is answered, the proxy's memory grows
/// by less than 24 MiB (answers wait for the backend to read, 64 KiB at most), and a bystander on the same
/// worker thread gets its Keep Alives within 50 ms.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_flood_of_player_list_requests_waits_on_the_backend_and_holds_no_one_up() {
    let redis = Redis::start().await;
    let dir = TestDir::new("moonbridge-attacks-playerlist").unwrap();
    let key = secret(&dir);
    let id = "00000000000000aa";
    redis.cli(&[
        "SET",
        &format!("moonbridge:test:instance:{id}"),
        &signed_entry(&dir, &key, id, "127.0.0.1:9"),
        "PX",
        "600000",
    ]);
    redis.cli(&["ZADD", "moonbridge:test:instances", "1", id]);
    let mut hset = vec!["HSET".to_string(), format!("moonbridge:test:players:{id}")];
    for i in 0..1000 {
        hset.push(format!("player{i:04}"));
        hset.push(format!("{{\"name\":\"Player{i:04}\",\"uuid\":\"{:032x}\",\"server\":\"survival\"}}", i));
    }
    redis.cli(&hset.iter().map(String::as_str).collect::<Vec<_>>());

    let t0 = Instant::now();
    let (done_tx, done_rx) = tokio::sync::oneshot::channel::<usize>();
    let done_tx = Arc::new(std::sync::Mutex::new(Some(done_tx)));
    let backend = scripted_backend(move |n, mut s| {
        let done_tx = Arc::clone(&done_tx);
        async move {
            if n == 0 {
                // The bystander's backend: a Keep Alive every tick, its id the milliseconds since t0.
                loop {
                    let id = t0.elapsed().as_millis() as i32;
                    let ka = moonbridge_protocol::packets::KeepAlive { id }.to_frame_bytes().unwrap();
                    if s.write_all(&ka).await.is_err() {
                        return;
                    }
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            }
            let request = testbed::gtnh::bungee_request("PlayerList", &["ALL"], 0);
            s.write_all(&request.repeat(8000)).await.unwrap();
            let mut dec = moonbridge_protocol::FrameDecoder::new(1 << 21);
            let mut answers = 0;
            let mut buf = vec![0u8; 1 << 16];
            while answers < 8000 {
                let Ok(Ok(n)) = timeout(STEP, s.read(&mut buf)).await else { break };
                if n == 0 {
                    break;
                }
                dec.queue_slice(&buf[..n]);
                while let Ok(Some(f)) = dec.try_next_frame() {
                    answers += usize::from(f.id == 0x17 && f.body.windows(10).any(|w| w == b"PlayerList"));
                }
            }
            if let Some(tx) = done_tx.lock().unwrap().take() {
                let _ = tx.send(answers);
            }
        }
    })
    .await;
    let toml = format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n[[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n\
         [[backend]]\nname = \"lobby\"\naddress = \"{backend}\"\n[transfer]\ntargets = [\"lobby\"]\n[runtime]\nworkers = 1\n\
         [network]\nredis_url = \"{}\"\nname = \"test\"\npeer_bind = \"127.0.0.1:0\"\nsecret_file = \"{}\"\n",
        redis.url(),
        key.display()
    );
    let (proxy, tcp, _, _, metrics) = instance_process(&dir, "p", toml, "");
    wait_metric_at(metrics, "moonbridge_network_players", 1000.0, NETWORK_SEES).await;
    let before = rss_kib(proxy.id());

    // The bystander first: its Keep Alives' delay, from the backend's write to the player's read.
    let (mut bystander, _) = tcp_login(tcp, "Quebec").await;
    let watching = tokio::spawn(async move {
        let mut dec = moonbridge_protocol::FrameDecoder::new(1 << 21);
        let mut worst = Duration::ZERO;
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(Ok(n)) = timeout(Duration::from_secs(5), bystander.read(&mut buf)).await {
            if n == 0 {
                break;
            }
            let now = t0.elapsed();
            dec.queue_slice(&buf[..n]);
            while let Ok(Some(f)) = dec.try_next_frame() {
                if let Ok(ka) = f.decode::<moonbridge_protocol::packets::KeepAlive>() {
                    worst = worst.max(now.saturating_sub(Duration::from_millis(ka.id as u64)));
                }
            }
        }
        worst
    });
    let pid = proxy.id();
    let sampling = Arc::new(AtomicBool::new(true));
    let sampler = Arc::clone(&sampling);
    let peak = tokio::spawn(async move {
        let mut peak = 0;
        while sampler.load(Ordering::Relaxed) {
            peak = peak.max(rss_kib(pid));
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        peak
    });
    let _asker = reading_player(tcp, "Papa").await;
    let answers = timeout(Duration::from_secs(30), done_rx).await.expect("answered in time").unwrap();
    assert_eq!(answers, 8000, "every request is answered");
    sampling.store(false, Ordering::Relaxed);
    let peak = peak.await.unwrap();
    assert!(peak < before + 24 * 1024, "RSS {before} KiB before, {peak} KiB at most while 8,000 were answered");
    eprintln!("8,000 PlayerList ALL: RSS {before} KiB before, {peak} KiB at most");
    drop(proxy);
    let worst = watching.await.unwrap();
    assert!(worst < Duration::from_millis(50), "a bystander's Keep Alive waited {worst:?}");
    eprintln!("the bystander's longest Keep Alive delay: {worst:?}");
}

/// Issue 48 (5): two backends that send a player to each other at once (each `Connect`s it to the other as
/// soon as it joins) switch it at most 10 times in 10 s; the next `Connect` is refused and the player reads why.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connect_ping_pong_between_two_backends_is_bounded() {
    let backend = scripted_backend(|n, mut s| async move {
        let to = if n % 2 == 0 { "lobby" } else { "survival" };
        let _ = s.write_all(&testbed::gtnh::bungee_request("Connect", &[to], 0)).await;
        let mut sink = vec![0u8; 1 << 16];
        while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
    })
    .await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n[[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n\
         [[backend]]\nname = \"lobby\"\naddress = \"{backend}\"\n[transfer]\ntargets = [\"lobby\", \"survival\"]\n\
         [metrics]\nbind = \"127.0.0.1:0\"\n"
    ))
    .await;
    let (mut player, first) = tcp_login(proxy.addr(Transport::Tcp), "Steve").await;
    let mut seen = first;
    let deadline = Instant::now() + STEP;
    while !String::from_utf8_lossy(&seen).contains("You are switching servers too often") {
        let mut buf = vec![0u8; 1 << 16];
        let left = deadline.saturating_duration_since(Instant::now());
        let n = timeout(left, player.read(&mut buf)).await.expect("the refusal in time").unwrap();
        assert!(n > 0, "the session goes on");
        seen.extend_from_slice(&buf[..n]);
    }
    let metrics = proxy.metrics.unwrap();
    assert_eq!(metric_at(metrics, "moonbridge_transfers_total{outcome=\"moved\"}").await, Some(10.0));
    assert_eq!(metric_at(metrics, "moonbridge_transfers_total{outcome=\"refused\"}").await, Some(1.0));
    proxy.shutdown().await;
}

/// Issue 48 (3): Redis that refuses writes (out of memory) fails the renewal and says why; an index of more
/// instances than are read (1,200) is read in part and reported, and the network goes on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_redis_that_refuses_writes_is_named_and_an_oversized_index_read_in_part() {
    let redis = Redis::start().await;
    let backend = login_backend().await;
    let dir = TestDir::new("moonbridge-attacks-oom").unwrap();
    let key = secret(&dir);
    let toml = instance_config(backend.addr, &redis, &key, "kick_existing", None);
    let (a, _, _, _, a_metrics) = instance_process(&dir, "a", toml, "");
    assert!(a.wait_line("Redis reachable", NETWORK_SEES).is_some(), "A reaches Redis");

    // 1,200 more ids in the index than instances: the first 1,000 are read (no entry: gone, and removed).
    let mut zadd = vec!["ZADD".to_string(), "moonbridge:test:instances".to_string()];
    for i in 0..1200 {
        zadd.push("1".into());
        zadd.push(format!("{i:016x}"));
    }
    redis.cli(&zadd.iter().map(String::as_str).collect::<Vec<_>>());
    let oversized = "moonbridge_network_bad_entries_total{kind=\"oversized\"}";
    wait_metric_at(a_metrics, oversized, 1.0, NETWORK_SEES).await;
    assert_eq!(metric_at(a_metrics, "moonbridge_network_redis_up").await, Some(1.0));

    // Out of memory: every write refused. The renewal is missed, and the log says why.
    redis.cli(&["CONFIG", "SET", "maxmemory-policy", "noeviction"]);
    redis.cli(&["CONFIG", "SET", "maxmemory", "1"]);
    let line = a.wait_line("Redis unreachable", NETWORK_SEES).expect("the renewal fails");
    assert!(line.contains("OOM"), "{line}");
    assert_eq!(metric_at(a_metrics, "moonbridge_network_redis_up").await, Some(0.0));
    redis.cli(&["CONFIG", "SET", "maxmemory", "0"]);
    assert!(a.wait_line("Redis reachable", NETWORK_SEES).is_some(), "A is back in the network");
}
