//! Real node-minecraft-protocol 1.7.10 players reach a real node-minecraft-protocol 1.7.10 backend through a
//! `tcp` listener configured as in DESIGN.md.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::time::{Duration, Instant};

use moonbridge_proxy::config::Transport;
use serde_json::json;
use testbed::{node_backend, tcp_config, NodePeer, Proxy, STEP};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fifty_players_log_in_chat_and_receive_the_burst() {
    let (mut backend, backend_addr) = node_backend(json!({ "burstCount": 70, "burstSize": 30000 })).await;
    let proxy = Proxy::start(&tcp_config(
        backend_addr,
        "[routing]\ndefault_backend = \"survival\"\n[routing.hosts]\n\"mc.example.com\" = \"survival\"\n",
    ))
    .await;
    let port = proxy.addr(Transport::Tcp).port();

    let started = Instant::now();
    let mut clients = NodePeer::spawn(
        "client.js",
        &json!({ "port": port, "count": 50, "forge": "alternate", "burstCount": 70, "burstSize": 30000, "timeoutMs": 90000 }),
    )
    .await;
    let (results, done) = clients.collect_until_done("client", Duration::from_secs(120)).await;
    let elapsed = started.elapsed();
    eprintln!("50-client login + 70 x 30000-byte burst + chat round trip through moonbridge tcp: {elapsed:?}");
    assert_eq!(done["ok"], 50, "failed clients: {results:?}");
    assert_eq!(done["failed"], 0);
    assert_eq!(results.len(), 50, "{results:?}");
    for r in &results {
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["burst"], 70, "{r}");
        assert_eq!(r["chat"], true, "{r}");
    }
    assert_eq!(clients.wait(STEP).await, Some(0));

    // The backend saw every login, with the Forge marker kept for Forge clients only.
    let mut forge = 0;
    let mut vanilla = 0;
    for _ in 0..50 {
        let login = backend.event("login", STEP).await;
        let host = login["serverHost"].as_str().unwrap();
        match host {
            "mc.example.com\0FML\0" => forge += 1,
            "mc.example.com" => vanilla += 1,
            other => panic!("unexpected handshake host {other:?}"),
        }
    }
    assert_eq!((forge, vanilla), (25, 25));
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_ping_returns_the_backends_answer() {
    let (_backend, backend_addr) = node_backend(json!({ "motd": "Backend MOTD 42" })).await;
    let proxy = Proxy::start(&tcp_config(backend_addr, "")).await;
    let port = proxy.addr(Transport::Tcp).port();
    let mut status = NodePeer::spawn("status.js", &json!({ "port": port })).await;
    let ev = status.event("status", STEP).await;
    assert_eq!(ev["response"]["description"]["text"], "Backend MOTD 42");
    assert_eq!(ev["response"]["version"]["protocol"], 5);
    assert_eq!(ev["response"]["players"]["max"], 100);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn status_ping_is_answered_by_the_proxy_when_the_backend_is_down() {
    // A port nothing listens on: bind, note the port, close.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let proxy = Proxy::start(&tcp_config(dead, "")).await;
    let port = proxy.addr(Transport::Tcp).port();
    let mut status = NodePeer::spawn("status.js", &json!({ "port": port })).await;
    let ev = status.event("status", STEP).await;
    assert_eq!(ev["response"]["description"]["text"], "Server survival is unreachable");
    assert_eq!(ev["response"]["version"]["protocol"], 5);
    proxy.shutdown().await;
}
