//! Server-list answers on live sockets: a storm of status pings costs the backend one exchange per
//! `[status] cache_seconds`, a favicon at the protocol's size passes intact, and a stopped backend shows the
//! configured offline message to node-minecraft-protocol's status ping and to legacy pings.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::time::Duration;

use moonbridge_protocol::legacy;
use moonbridge_protocol::packets::{Packet, StatusResponse};
use moonbridge_proxy::config::Transport;
use serde_json::json;
use testbed::{read_to_close, status_ping, tcp_config, NodePeer, Proxy, RawBackend, RawBehaviour, STEP};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_ping_storm_costs_the_backend_one_exchange_per_interval() {
    // A favicon that fills the JSON almost to the protocol's 32,767-character limit.
    let favicon = format!("data:image/png;base64,{}", "QUJD".repeat(8000));
    let answer = json!({
        "version": { "name": "1.7.10", "protocol": 5 },
        "players": { "max": 20, "online": 7 },
        "description": { "text": "cached" },
        "favicon": favicon,
    })
    .to_string();
    assert!(answer.len() > 32_000 && answer.len() <= 32_767);
    let reply = StatusResponse { json: answer.clone() }.to_frame_bytes().unwrap().to_vec();
    let backend = RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply }).await;
    let proxy = Proxy::start(&tcp_config(backend.addr, "[status]\ncache_seconds = 5\n")).await;
    let addr = proxy.addr(Transport::Tcp);
    // 1,000 pings over 10 s, one every 10 ms (the workload's pace, not a synchronisation).
    let mut tick = tokio::time::interval(Duration::from_millis(10));
    let started = tokio::time::Instant::now();
    for i in 0..1000 {
        tick.tick().await;
        assert_eq!(status_ping(addr).await, answer, "ping {i}: the backend's answer, byte for byte");
    }
    let secs = started.elapsed().as_secs_f64();
    // One exchange per 5 s: at most ceil(elapsed / 5) + 1 (the first, then one per expiry).
    let bound = (secs / 5.0).ceil() as usize + 1;
    let exchanges = backend.accepted();
    assert!((1..=bound).contains(&exchanges), "{exchanges} backend exchanges in {secs:.1} s (bound {bound})");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_backend_shows_the_offline_message() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let proxy =
        Proxy::start(&tcp_config(dead, "[status]\noffline_message = \"Server is restarting\"\ncache_seconds = 0\n"))
            .await;
    let port = proxy.addr(Transport::Tcp).port();
    let mut status = NodePeer::spawn("status.js", &json!({ "port": port })).await;
    let ev = status.event("status", STEP).await;
    assert_eq!(ev["response"]["description"]["text"], "Server is restarting");
    assert_eq!(ev["response"]["version"]["protocol"], 5);
    assert_eq!(ev["response"]["version"]["name"], "1.7.10");

    // The legacy ping says the same.
    let mut s = TcpStream::connect(proxy.addr(Transport::Tcp)).await.unwrap();
    s.write_all(&[0xfe, 0x01]).await.unwrap();
    let (got, _) = read_to_close(&mut s, STEP).await;
    let (text, _) = legacy::decode_kick(&got).unwrap().expect("a complete FF kick packet");
    assert_eq!(text.split('\0').nth(3), Some("Server is restarting"));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hung_backend_costs_pings_seconds_and_one_fetch() {
    // Accepts and never answers (a long world save): ten pings at once share one fetch, and each gets the
    // offline message within the fetch limit (3 s) plus a little, not login_timeout_seconds (30 s).
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let proxy = Proxy::start(&tcp_config(backend.addr, "[status]\noffline_message = \"Saving the world\"\n")).await;
    let addr = proxy.addr(Transport::Tcp);
    let started = tokio::time::Instant::now();
    let pings: Vec<_> = (0..10).map(|_| tokio::spawn(status_ping(addr))).collect();
    for p in pings {
        let json: serde_json::Value = serde_json::from_str(&p.await.unwrap()).unwrap();
        assert_eq!(json["description"]["text"], "Saving the world");
    }
    assert!(started.elapsed() < Duration::from_millis(4500), "answered after {:?}", started.elapsed());
    assert_eq!(backend.accepted(), 1, "one fetch for the ten pings");
    proxy.shutdown().await;
}
