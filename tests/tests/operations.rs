//! The `[metrics]` listener on live sockets: the exposition checked by `promtool check metrics` and scraped
//! by a real Prometheus server (Debian's `prometheus` package) while players are connected over tcp, ws and
//! wss; `/healthz` and `/readyz` as a backend goes down and comes back; a ws listener's `health_path`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use futures_util::SinkExt;
use moonbridge_proxy::config::Transport;
use testbed::{
    backend_section, hs_ls, login_backend, login_disconnect_reason, login_success, masked_frame, raw_http, raw_upgrade,
    read_server_frame, read_to_close, sample, tcp_config, ws_connect, ws_listener, ws_read_bytes, KeyType, Proxy,
    TestCert, TestDir, STEP,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;

const MASK: [u8; 4] = [1, 2, 3, 4];

/// `GET path` on the metrics listener: the status code and the body.
async fn get(addr: SocketAddr, path: &str) -> (u16, String) {
    let reply = raw_http(addr, &format!("GET {path} HTTP/1.1\r\nHost: x\r\n\r\n")).await;
    let (head, body) = reply.split_once("\r\n\r\n").expect("an HTTP response");
    let code = head.split(' ').nth(1).and_then(|c| c.parse().ok()).expect("a status code");
    (code, body.to_string())
}

/// Reads `/metrics` until `series` has `value` (a session's end is counted just after its socket closes), at
/// most for [`STEP`]: the last value seen.
async fn metric_until(addr: SocketAddr, series: &str, value: f64) -> Option<f64> {
    let deadline = tokio::time::Instant::now() + STEP;
    loop {
        let got = sample(&get(addr, "/metrics").await.1, series);
        if got == Some(value) || tokio::time::Instant::now() > deadline {
            return got;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prometheus_scrapes_sessions_logins_and_bytes_over_every_transport() {
    let cert = TestCert::generate("metrics-wss", KeyType::Ec).unwrap();
    let backend = login_backend().await;
    let toml = format!(
        "{}{}[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\n{}\n[metrics]\nbind = \"127.0.0.1:0\"\n",
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n",
        ws_listener(""),
        cert.cert.display(),
        cert.key.display(),
        backend_section(backend.addr, ""),
    );
    // And an instance of a network (on a real redis-server), whose metrics the dashboard's network panels query.
    let redis = testbed::network::Redis::start().await;
    let dir = TestDir::new("moonbridge-metrics-network").unwrap();
    let key = testbed::network::secret(&dir);
    let instance = testbed::network::instance_config(backend.addr, &redis, &key, "kick_existing", None);
    let net = Proxy::start(&format!("{instance}[metrics]\nbind = \"127.0.0.1:0\"\n")).await;
    let net_metrics = net.metrics.unwrap();
    let proxy = Proxy::start(&toml).await;
    let metrics = proxy.metrics.expect("a metrics listener");

    // One player per transport, each logged in and staying.
    let mut tcp = TcpStream::connect(proxy.addr(Transport::Tcp)).await.unwrap();
    tcp.write_all(&hs_ls()).await.unwrap();
    let mut got = vec![0u8; login_success("Steve").len()];
    tokio::time::timeout(STEP, tcp.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(got, login_success("Steve"));
    let mut ws = raw_upgrade(proxy.addr(Transport::Ws)).await;
    ws.write_all(&masked_frame(0x2, &hs_ls(), MASK)).await.unwrap();
    assert_eq!(read_server_frame(&mut ws).await, (0x2, login_success("Steve")));
    let addr = proxy.addr(Transport::Wss);
    let url = format!("wss://localhost:{}/mc", addr.port());
    let (mut wss, _) = ws_connect(addr, &url, &[], Some(&cert.ca)).await.unwrap();
    wss.send(Message::Binary(hs_ls().into())).await.unwrap();
    assert_eq!(ws_read_bytes(&mut wss, login_success("Steve").len(), STEP).await.0, login_success("Steve"));
    for i in 0..3 {
        backend.wait_received(i, hs_ls().len(), STEP).await;
    }

    let (code, text) = get(metrics, "/metrics").await;
    assert_eq!(code, 200);
    let up = (3 * hs_ls().len()) as f64;
    let down = (3 * login_success("Steve").len()) as f64;
    for (series, value) in [
        ("moonbridge_sessions{stage=\"play\",transport=\"tcp\"}", 1.0),
        ("moonbridge_sessions{stage=\"play\",transport=\"ws\"}", 1.0),
        ("moonbridge_sessions{stage=\"play\",transport=\"wss\"}", 1.0),
        ("moonbridge_sessions{stage=\"handshake\",transport=\"wss\"}", 0.0),
        ("moonbridge_logins_total{outcome=\"passthrough_ok\"}", 3.0),
        ("moonbridge_connections_accepted_total{transport=\"tcp\"}", 1.0),
        ("moonbridge_connections_accepted_total{transport=\"ws\"}", 1.0),
        ("moonbridge_connections_accepted_total{transport=\"wss\"}", 1.0),
        ("moonbridge_relayed_bytes_total{backend=\"survival\",direction=\"to_backend\"}", up),
        ("moonbridge_relayed_bytes_total{backend=\"survival\",direction=\"to_player\"}", down),
        ("moonbridge_backend_connect_seconds_count{backend=\"survival\"}", 3.0),
        ("moonbridge_tls_handshakes_total{version=\"TLSv1.3\"}", 1.0),
        ("moonbridge_ws_messages_total{direction=\"from_player\"}", 2.0),
    ] {
        assert_eq!(sample(&text, series), Some(value), "{series} in\n{text}");
    }
    assert!(sample(&text, "process_open_fds").is_some_and(|v| v > 0.0), "process metrics:\n{text}");
    for direction in ["from_player", "to_player"] {
        let series = format!("moonbridge_ws_bytes_total{{direction=\"{direction}\"}}");
        assert!(sample(&text, &series).is_some_and(|v| v > 0.0), "{series} in\n{text}");
    }

    // Every metric the Grafana dashboard queries exists in the exposition (of the network's instance for the
    // network panels).
    let net_text = get(net_metrics, "/metrics").await.1;
    let dashboard: serde_json::Value = serde_json::from_str(
        &std::fs::read_to_string(format!("{}/../deploy/grafana-dashboard.json", env!("CARGO_MANIFEST_DIR"))).unwrap(),
    )
    .unwrap();
    let mut queried = Vec::new();
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap();
            for word in expr.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
                if word.starts_with("moonbridge_") || word.starts_with("process_") {
                    queried.push(word.to_string());
                }
            }
        }
    }
    assert!(queried.len() >= 15, "{queried:?}");
    for name in queried {
        let family = ["_bucket", "_sum", "_count"].iter().find_map(|s| name.strip_suffix(s)).unwrap_or(&name);
        let exposed = |t: &str| t.contains(&format!("# TYPE {family} "));
        assert!(exposed(&text) || exposed(&net_text), "the dashboard queries {name}, which is not exposed");
    }

    // promtool lints each exposition (naming, types, units).
    for text in [&text, &net_text] {
        let mut promtool = tokio::process::Command::new("promtool")
            .args(["check", "metrics"])
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("promtool (Debian package prometheus) is installed");
        promtool.stdin.take().unwrap().write_all(text.as_bytes()).await.unwrap();
        let out = tokio::time::timeout(STEP, promtool.wait_with_output()).await.unwrap().unwrap();
        assert!(
            out.status.success(),
            "promtool check metrics: {}{}",
            String::from_utf8_lossy(&out.stdout),
            String::from_utf8_lossy(&out.stderr)
        );
    }

    // A real Prometheus scrapes it every second; its query API returns the same values.
    let server = testbed::prometheus::Prometheus::start(&[metrics, net_metrics]);
    for (query, value) in [
        ("sum(moonbridge_sessions{stage=\"play\"})", 3.0),
        ("sum(moonbridge_logins_total)", 3.0),
        ("sum(moonbridge_relayed_bytes_total{direction=\"to_backend\"})", up),
        ("sum(moonbridge_connections_accepted_total)", 3.0),
        // The dashboard's network panels.
        ("max(moonbridge_network_instances)", 1.0),
        ("max(moonbridge_network_players)", 0.0),
        ("min(moonbridge_network_redis_up)", 1.0),
    ] {
        let got = server.query_until(query, value, Duration::from_secs(60)).await;
        assert_eq!(got, Some(value), "Prometheus query {query}");
    }
    // Every query of the dashboard is valid PromQL (Grafana's variables filled in as Grafana would), and the labels
    // it groups by are on its series.
    for panel in dashboard["panels"].as_array().unwrap() {
        for target in panel["targets"].as_array().unwrap() {
            let expr = target["expr"].as_str().unwrap().replace("$instance", ".*").replace("$__rate_interval", "1m");
            let answer = server.query(&expr).await.expect("Prometheus answers");
            assert_eq!(answer["status"], "success", "{expr}: {answer}");
            let by = expr.split_once("by (").map(|(_, rest)| rest.split(')').next().unwrap_or_default());
            for series in answer["data"]["result"].as_array().unwrap() {
                // (`le` is consumed by histogram_quantile.)
                for label in by.into_iter().flat_map(|b| b.split(',')).map(str::trim).filter(|l| *l != "le") {
                    assert!(series["metric"].get(label).is_some(), "{expr}: no label {label} in {series}");
                }
            }
        }
    }
    drop(server);
    net.shutdown().await;

    drop((tcp, ws, wss));
    proxy.wait_connections(0, STEP).await;
    let play = "moonbridge_sessions{stage=\"play\",transport=\"wss\"}";
    assert_eq!(metric_until(metrics, play, 0.0).await, Some(0.0), "players left");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn readyz_follows_the_backend_down_and_back() {
    let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = backend.local_addr().unwrap();
    let proxy = Proxy::start(&tcp_config(
        backend_addr,
        "[limits]\nbackend_connect_timeout_seconds = 1\n[metrics]\nbind = \"127.0.0.1:0\"\n",
    ))
    .await;
    let metrics = proxy.metrics.unwrap();
    assert_eq!(get(metrics, "/healthz").await, (200, "ok\n".to_string()));
    // The first check probes the backend (a connect the listener's backlog completes).
    assert_eq!(get(metrics, "/readyz").await, (200, "ready\n".to_string()));

    // Down: a player's login finds it unreachable, and readiness says so at once.
    drop(backend);
    let mut s = TcpStream::connect(proxy.addr(Transport::Tcp)).await.unwrap();
    s.write_all(&hs_ls()).await.unwrap();
    let (got, _) = read_to_close(&mut s, STEP).await;
    assert_eq!(login_disconnect_reason(&got).as_deref(), Some("Server survival is unreachable"));
    let (code, body) = get(metrics, "/readyz").await;
    assert_eq!(code, 503);
    assert!(body.starts_with("no backend is reachable\nbackend survival: connect to "), "{body}");
    assert_eq!(get(metrics, "/healthz").await.0, 200, "alive while not ready");
    let unreachable = "moonbridge_logins_total{outcome=\"backend_unreachable\"}";
    assert_eq!(metric_until(metrics, unreachable, 1.0).await, Some(1.0));
    let (_, text) = get(metrics, "/metrics").await;
    // The player's connect and the readiness probe's.
    assert_eq!(sample(&text, "moonbridge_backend_connect_failures_total{backend=\"survival\"}"), Some(2.0));

    // Back: a failed backend is probed again on every check.
    let _back = TcpListener::bind(backend_addr).await.unwrap();
    assert_eq!(get(metrics, "/readyz").await, (200, "ready\n".to_string()));
    assert_eq!(get(metrics, "/nope").await.0, 404);
    let post = raw_http(metrics, "POST /metrics HTTP/1.1\r\nHost: x\r\nContent-Length: 0\r\n\r\n").await;
    assert!(post.starts_with("HTTP/1.1 405 "), "{post}");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ws_listener_answers_its_health_path_without_upgrading() {
    let backend = login_backend().await;
    let proxy = Proxy::start(
        &(ws_listener("health_path = \"/health\"")
            + &backend_section(backend.addr, "")
            + "[metrics]\nbind = \"127.0.0.1:0\"\n"),
    )
    .await;
    let reply = raw_http(proxy.addr(Transport::Ws), "GET /health HTTP/1.1\r\nHost: cdn\r\n\r\n").await;
    assert!(reply.starts_with("HTTP/1.1 200 OK\r\n"), "{reply}");
    assert!(reply.ends_with("\r\n\r\nok\n"), "{reply}");
    // The WebSocket path still upgrades; a health check is not a handshake failure.
    let mut ws = raw_upgrade(proxy.addr(Transport::Ws)).await;
    ws.write_all(&masked_frame(0x2, &hs_ls(), MASK)).await.unwrap();
    assert_eq!(read_server_frame(&mut ws).await, (0x2, login_success("Steve")));
    let (_, text) = get(proxy.metrics.unwrap(), "/metrics").await;
    let failures: f64 = text
        .lines()
        .filter(|l| l.starts_with("moonbridge_handshake_failures_total{"))
        .filter_map(|l| l.rsplit(' ').next()?.parse::<f64>().ok())
        .sum();
    assert_eq!(failures, 0.0, "{text}");
    assert_eq!(sample(&text, "moonbridge_connections_accepted_total{transport=\"ws\"}"), Some(2.0));
    proxy.shutdown().await;
}

/// A TCP connection to `to` from the loopback address `from` (127.0.0.0/8 is all loopback on Linux).
async fn connect_from(from: [u8; 4], to: SocketAddr) -> TcpStream {
    let socket = tokio::net::TcpSocket::new_v4().unwrap();
    socket.bind(SocketAddr::from((from, 0))).unwrap();
    socket.connect(to).await.unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rate_limits_refuse_a_flood_from_one_address_only() {
    let backend = login_backend().await;
    let proxy = Proxy::start(&tcp_config(
        backend.addr,
        "[rate_limits]\nconnections_per_second = 5\nconnection_burst = 10\nlogins_per_minute = 0\n[metrics]\nbind = \"127.0.0.1:0\"\n",
    ))
    .await;
    let addr = proxy.addr(Transport::Tcp);
    // 50 logins at once from 127.0.0.2: the burst of 10 (and what the rate refills meanwhile) gets through,
    // the rest are told why.
    let mut flood = Vec::new();
    let started = std::time::Instant::now();
    for _ in 0..50 {
        let mut s = connect_from([127, 0, 0, 2], addr).await;
        s.write_all(&hs_ls()).await.unwrap();
        flood.push(s);
    }
    // Meanwhile a player from another address logs in as usual.
    let mut other = connect_from([127, 0, 0, 3], addr).await;
    other.write_all(&hs_ls()).await.unwrap();
    let mut got = vec![0u8; login_success("Steve").len()];
    tokio::time::timeout(STEP, other.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(got, login_success("Steve"), "another address is not limited");
    let (mut limited, mut admitted) = (0, 0);
    for mut s in flood {
        let mut first = vec![0u8; login_success("Steve").len()];
        match tokio::time::timeout(STEP, s.read_exact(&mut first)).await.unwrap() {
            Ok(_) if first == login_success("Steve") => admitted += 1,
            _ => {
                let (rest, _) = read_to_close(&mut s, STEP).await;
                let all = [first, rest].concat();
                let reason = login_disconnect_reason(&all).unwrap_or_default();
                assert_eq!(reason, "Too many connections from your address; please wait a moment and try again");
                limited += 1;
            }
        }
    }
    // The burst, plus what 5 per second refilled while the 50 were being opened (and their handshakes read).
    let refill = (5.0 * started.elapsed().as_secs_f64()).ceil() as usize + 1;
    assert!((10..=10 + refill).contains(&admitted), "{admitted} admitted, {limited} limited, refill {refill}");
    assert_eq!(admitted + limited, 50);
    let refused = "moonbridge_connections_refused_total{reason=\"rate_limit\"}";
    assert_eq!(metric_until(proxy.metrics.unwrap(), refused, limited as f64).await, Some(limited as f64));
    proxy.shutdown().await;
}

/// Issue 33: 500 wss connections from one address with the default limits (a burst of 30, then 10 per second).
/// A WebSocket player that connects directly is limited by its address at accept, before TLS: the proxy
/// completes at most the burst plus what the rate refilled of TLS handshakes (`moonbridge_tls_handshakes_total`)
/// for the flood, and a player from another address logs in meanwhile.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wss_flood_from_one_address_costs_only_its_allowance_of_tls_handshakes() {
    let cert = TestCert::generate("tls-flood", KeyType::Ec).unwrap();
    let backend = login_backend().await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n{}\
         [metrics]\nbind = \"127.0.0.1:0\"\n\
         # The default connection limits (the test harness turns an unconfigured [rate_limits] off).\n\
         [rate_limits]\nconnections_per_second = 10\nconnection_burst = 30\nlogins_per_minute = 0\n",
        cert.cert.display(),
        cert.key.display(),
        backend_section(backend.addr, "")
    ))
    .await;
    let addr = proxy.addr(Transport::Wss);
    let config = testbed::ws::tls_client_config(&cert.ca, &[&rustls::version::TLS13]);
    let started = std::time::Instant::now();
    let mut flood = tokio::task::JoinSet::new();
    for _ in 0..500 {
        let tcp = connect_from([127, 0, 0, 2], addr).await;
        let config = Arc::clone(&config);
        flood.spawn(async move {
            let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
            let tls = tokio_rustls::TlsConnector::from(config).connect(name, tcp);
            // Kept open, so an admitted connection holds its place until the test ends.
            tokio::time::timeout(STEP, tls).await.ok().and_then(Result::ok)
        });
    }
    // Meanwhile a player from 127.0.0.1 logs in over wss.
    let url = format!("wss://localhost:{}/mc", addr.port());
    let (mut ws, _) = ws_connect(addr, &url, &[], Some(&cert.ca)).await.unwrap();
    ws.send(Message::Binary(hs_ls().into())).await.unwrap();
    let (got, _) = testbed::ws_read_bytes(&mut ws, login_success("Steve").len(), STEP).await;
    assert_eq!(got, login_success("Steve"), "another address is not limited");
    let mut admitted = Vec::new();
    while let Some(r) = flood.join_next().await {
        if let Some(tls) = r.unwrap() {
            admitted.push(tls);
        }
    }
    let allowance = 30 + (10.0 * started.elapsed().as_secs_f64()).ceil() as usize;
    assert!(
        (30..=allowance).contains(&admitted.len()),
        "{} TLS handshakes of the flood, allowance {allowance}",
        admitted.len()
    );
    let series = "moonbridge_tls_handshakes_total{version=\"TLSv1.3\"}";
    let done = proxy.metric(series).await.unwrap_or_default() as usize;
    assert_eq!(done, admitted.len() + 1, "the proxy completed the admitted handshakes and the player's, no more");
    let refused = proxy.metric("moonbridge_connections_refused_total{reason=\"rate_limit\"}").await.unwrap_or_default();
    assert_eq!(refused as usize, 500 - admitted.len());
    drop((ws, admitted));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_login_rate_limit_tells_the_player_with_a_login_disconnect() {
    let backend = login_backend().await;
    let proxy = Proxy::start(&tcp_config(
        backend.addr,
        "[rate_limits]\nlogins_per_minute = 1\nlogin_burst = 2\n[metrics]\nbind = \"127.0.0.1:0\"\n",
    ))
    .await;
    let addr = proxy.addr(Transport::Tcp);
    let mut kept = Vec::new();
    for _ in 0..2 {
        let mut s = connect_from([127, 0, 0, 4], addr).await;
        s.write_all(&hs_ls()).await.unwrap();
        let mut got = vec![0u8; login_success("Steve").len()];
        tokio::time::timeout(STEP, s.read_exact(&mut got)).await.unwrap().unwrap();
        assert_eq!(got, login_success("Steve"));
        kept.push(s);
    }
    let mut third = connect_from([127, 0, 0, 4], addr).await;
    third.write_all(&hs_ls()).await.unwrap();
    let (got, closed) = read_to_close(&mut third, STEP).await;
    assert!(closed);
    assert_eq!(
        login_disconnect_reason(&got).as_deref(),
        Some("Too many logins from your address; please wait a minute and try again")
    );
    assert_eq!(backend.accepted(), 2, "the refused login never reached the backend");
    let series = "moonbridge_logins_total{outcome=\"rate_limited\"}";
    assert_eq!(metric_until(proxy.metrics.unwrap(), series, 1.0).await, Some(1.0));
    proxy.shutdown().await;
}

/// Issue 33: a flood of slow connections on the metrics listener. 500 clients each hold a connection that
/// trickles a request head (one header line every 100 ms, never the end) and reconnect when the proxy gives up
/// on it. Meanwhile 40 fresh `/healthz` probes are each answered 200 within 1 s, and every `/metrics` request
/// reads a whole answer (200, or `503 busy` once the serving slots are taken), never a reset; with 500 slow
/// clients against 256 serving slots, at least one of them reads `503 busy`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn probes_answer_within_a_second_under_a_slow_connection_flood() {
    // The proxy as its own process, so the flood's 500 client tasks do not share its threads.
    let backend = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let dir = TestDir::new("moonbridge-probes").unwrap();
    let port = || moonbridge_test_certs::free_port().unwrap();
    let (tcp, metrics) = (SocketAddr::from(([127, 0, 0, 1], port())), SocketAddr::from(([127, 0, 0, 1], port())));
    let config = dir.join("probes.toml");
    std::fs::write(
        &config,
        format!(
            "[[listener]]\ntransport = \"tcp\"\nbind = \"{tcp}\"\n[[backend]]\nname = \"b\"\naddress = \"{}\"\n\
             [metrics]\nbind = \"{metrics}\"\n",
            backend.local_addr().unwrap()
        ),
    )
    .unwrap();
    let bin = testbed::moonbridge_bin();
    let _proxy = testbed::KillOnDrop(testbed::spawn_proxy_process(bin.to_str().unwrap(), &config, tcp).await);
    let stop = Arc::new(AtomicBool::new(false));
    let holding = Arc::new(AtomicUsize::new(0));
    let mut flood = tokio::task::JoinSet::new();
    for _ in 0..500 {
        let (stop, holding) = (Arc::clone(&stop), Arc::clone(&holding));
        flood.spawn(async move {
            while !stop.load(Ordering::Relaxed) {
                let Ok(mut s) = TcpStream::connect(metrics).await else { continue };
                if s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n").await.is_err() {
                    continue;
                }
                holding.fetch_add(1, Ordering::Relaxed);
                // Pacing of the flood, not synchronisation: a header line every 100 ms until the write fails.
                while !stop.load(Ordering::Relaxed) {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    if s.write_all(b"X-Slow: 1\r\n").await.is_err() {
                        break;
                    }
                }
                holding.fetch_sub(1, Ordering::Relaxed);
            }
        });
    }
    // The flood is in place once 450 of its connections are open at the same time (the others are being
    // closed by the proxy or reconnecting).
    tokio::time::timeout(STEP, async {
        while holding.load(Ordering::Relaxed) < 450 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("450 slow connections open at once");

    for i in 0..40 {
        // Each probe on a thread of its own (as a kubelet is a process of its own): the 1 s is the proxy's, not
        // the flood's 500 tasks on this runtime's two workers.
        let reply = tokio::task::spawn_blocking(move || probe_within(metrics, Duration::from_secs(1)))
            .await
            .unwrap()
            .unwrap_or_else(|e| panic!("probe {i} not answered within 1 s: {e}"));
        assert!(reply.starts_with("HTTP/1.1 200 OK\r\n") && reply.ends_with("\r\n\r\nok\n"), "probe {i}: {reply:?}");
    }
    let mut refused = 0;
    for i in 0..20 {
        let mut s = TcpStream::connect(metrics).await.unwrap();
        s.write_all(b"GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await.unwrap();
        let (got, closed) = read_to_close(&mut s, STEP).await;
        let reply = String::from_utf8_lossy(&got);
        assert!(closed, "request {i}: the answer ends with a close");
        if reply.starts_with("HTTP/1.1 503 ") {
            assert!(reply.ends_with("\r\n\r\nbusy\n"), "request {i}: {reply:?}");
            refused += 1;
        } else {
            assert!(
                reply.starts_with("HTTP/1.1 200 OK\r\n") && reply.contains("moonbridge_"),
                "request {i}: {reply:?}"
            );
        }
    }
    assert!(refused > 0, "with 500 slow clients some /metrics requests are refused");
    stop.store(true, Ordering::Relaxed);
    tokio::time::timeout(STEP, async { while flood.join_next().await.is_some() {} }).await.expect("the flood stops");
}

/// One liveness probe as a kubelet sends it: `GET /healthz` on a new connection, the whole answer read to the
/// close within `within` (connect included), with blocking sockets on the calling thread.
fn probe_within(addr: SocketAddr, within: Duration) -> std::io::Result<String> {
    use std::io::{Read, Write};
    let deadline = std::time::Instant::now() + within;
    let left = || deadline.checked_duration_since(std::time::Instant::now()).filter(|d| !d.is_zero());
    let timed_out = || std::io::Error::from(std::io::ErrorKind::TimedOut);
    let mut s = std::net::TcpStream::connect_timeout(&addr, within)?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n")?;
    let mut got = Vec::new();
    let mut buf = [0u8; 512];
    loop {
        s.set_read_timeout(Some(left().ok_or_else(timed_out)?))?;
        match s.read(&mut buf)? {
            0 => break,
            n => got.extend_from_slice(&buf[..n]),
        }
    }
    left().ok_or_else(timed_out)?;
    Ok(String::from_utf8_lossy(&got).into_owned())
}
