//! Real node-minecraft-protocol 1.7.10 clients over a WebSocket stream (the npm `ws` package) through `ws`
//! and `wss` listeners to a real node-minecraft-protocol 1.7.10 backend: login, chat round trip and the
//! 70 × 30,000-byte plugin-message burst checked byte for byte.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::time::Duration;

use moonbridge_proxy::config::Transport;
use serde_json::json;
use testbed::{node_backend, KeyType, NodePeer, Proxy, TestCert, STEP};

async fn run_clients(opts: serde_json::Value, count: u64) -> Vec<serde_json::Value> {
    let mut clients = NodePeer::spawn("client.js", &opts).await;
    let (results, done) = clients.collect_until_done("client", Duration::from_secs(120)).await;
    assert_eq!(done["ok"], count, "{results:?}");
    assert_eq!(clients.wait(STEP).await, Some(0));
    for r in &results {
        assert_eq!(r["ok"], true, "{r}");
        assert_eq!(r["burst"], 70, "{r}");
        assert_eq!(r["chat"], true, "{r}");
    }
    results
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn players_over_ws_with_and_without_the_subprotocol() {
    let (mut backend, backend_addr) = node_backend(json!({})).await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\npath = \"/mc\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{backend_addr}\"\n"
    ))
    .await;
    let port = proxy.addr(Transport::Ws).port();
    let url = format!("ws://127.0.0.1:{port}/mc");

    let results = run_clients(
        json!({ "port": port, "url": url, "subprotocol": "moonbridge.v1", "count": 10, "forge": "alternate" }),
        10,
    )
    .await;
    assert!(results.iter().all(|r| r["subprotocol"] == "moonbridge.v1"), "subprotocol echoed: {results:?}");

    let results = run_clients(json!({ "port": port, "url": url, "count": 2, "prefix": "NoProto" }), 2).await;
    assert!(results.iter().all(|r| r["subprotocol"].is_null()), "nothing echoed when nothing offered: {results:?}");

    for _ in 0..12 {
        let login = backend.event("login", STEP).await;
        assert!(login["serverHost"].as_str().unwrap().starts_with("mc.example.com"));
    }
    let stats = proxy.stats.stats();
    assert!(stats.ws_messages_in > 0 && stats.ws_messages_out > 0, "{stats:?}");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn players_over_wss() {
    let cert = TestCert::generate("wss-cross", KeyType::Ec).unwrap();
    let (_backend, backend_addr) = node_backend(json!({})).await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{backend_addr}\"\n",
        cert.cert.display(),
        cert.key.display()
    ))
    .await;
    let port = proxy.addr(Transport::Wss).port();
    run_clients(
        json!({
            "port": port, "url": format!("wss://127.0.0.1:{port}/mc"), "ca": cert.ca, "servername": "localhost",
            "subprotocol": "moonbridge.v1", "count": 10, "forge": "alternate"
        }),
        10,
    )
    .await;
    proxy.shutdown().await;
}
