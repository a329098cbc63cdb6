//! MoonBridge behind the TCP balancers operators run (issue 49): HAProxy in TCP mode (Debian's package, started
//! here) passing TLS through to a `wss` listener with a PROXY v2 header in front.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::{IpAddr, SocketAddr};
use std::time::Duration;

use futures_util::SinkExt;
use moonbridge_proxy::config::Transport;
use testbed::network::Haproxy;
use testbed::{
    backend_section, forwarded_fields, hs_ls, read_to_close, ws_connect_from, KeyType, Message, Proxy, RawBackend,
    RawBehaviour, TestCert, STEP,
};
use tokio::io::AsyncWriteExt;

/// Waits (at most [`STEP`]) until `series` at `proxy` reads `value`.
async fn wait_for(proxy: &Proxy, series: &str, value: f64) {
    let deadline = tokio::time::Instant::now() + STEP;
    while proxy.metric(series).await != Some(value) {
        assert!(tokio::time::Instant::now() < deadline, "{series} is not {value}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A player at `source` (a loopback address standing for its host) logs in over `wss` through `front`.
async fn wss_login_from(source: [u8; 4], front: SocketAddr, cert: &TestCert) -> Option<testbed::RawWs> {
    let url = format!("wss://localhost:{}/mc", front.port());
    let (mut ws, _) = ws_connect_from(Some(IpAddr::from(source)), front, &url, &[], Some(&cert.ca)).await.ok()?;
    ws.send(Message::Binary(hs_ls().into())).await.ok()?;
    Some(ws)
}

/// Issue 49 (2): end-to-end TLS behind HAProxy in TCP mode with `send-proxy-v2`: the `wss` listener reads the
/// PROXY header before TLS and takes each player's address from it, so the backend hears every player's own
/// address and the per-address limits count each player (3 players from 3 hosts all get in; a fourth connection
/// from a host over its burst of 1 does not), while a PROXY header from a peer outside `trusted_proxies` closes
/// the connection before TLS.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn proxy_v2_from_haproxy_into_a_wss_listener_keeps_every_players_address() {
    let cert = TestCert::generate("balancer-wss", KeyType::Ec).unwrap();
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\
         proxy_protocol = true\ntrusted_proxies = [\"127.0.0.2\"]\n{}\
         [auth]\nmode = \"offline\"\n[rate_limits]\nconnections_per_second = 1\nconnection_burst = 1\n\
         [metrics]\nbind = \"127.0.0.1:0\"\n",
        cert.cert.display(),
        cert.key.display(),
        backend_section(backend.addr, "forwarding = \"bungeecord\"")
    ))
    .await;
    let wss = proxy.addr(Transport::Wss);
    // HAProxy's own connections come from 127.0.0.2, the one address the listener trusts.
    let haproxy = Haproxy::start_with(&[("wss", vec![wss])], "send-proxy-v2 source 127.0.0.2").await;
    let front = haproxy.fronts[0];

    // Host .11 twice at once: its burst of 1 lets the first in and refuses the second, by its own address.
    let first = wss_login_from([127, 0, 0, 11], front, &cert).await.expect("the player connects");
    let again = wss_login_from([127, 0, 0, 11], front, &cert).await;
    let fields = forwarded_fields(&backend.wait_frames(0, 2, STEP).await);
    assert_eq!(fields.get(1).map(String::as_str), Some("127.0.0.11"), "{fields:?}");
    let refused = "moonbridge_connections_refused_total{reason=\"rate_limit\"}";
    wait_for(&proxy, refused, 1.0).await;
    drop(again);
    // Two more hosts: each gets in, each by its own address (the balancer's would have been over its burst).
    let mut players = vec![first];
    for (i, host) in [[127, 0, 0, 12], [127, 0, 0, 13]].into_iter().enumerate() {
        players.push(wss_login_from(host, front, &cert).await.expect("the player connects"));
        let fields = forwarded_fields(&backend.wait_frames(i + 1, 2, STEP).await);
        assert_eq!(fields.get(1).map(String::as_str), Some(IpAddr::from(host).to_string().as_str()), "{fields:?}");
    }
    assert_eq!(backend.conns.lock().unwrap().len(), 3, "only the three players reached the backend");

    // A PROXY header straight from 127.0.0.1 (not trusted): closed before TLS, nothing reaches the backend.
    let mut forged = tokio::net::TcpStream::connect(wss).await.unwrap();
    let header = b"PROXY TCP4 203.0.113.9 127.0.0.1 5555 443\r\n";
    forged.write_all(header).await.unwrap();
    let (answer, closed) = read_to_close(&mut forged, STEP).await;
    assert!(closed && answer.is_empty(), "closed without a byte: {answer:?}");
    wait_for(&proxy, "moonbridge_connections_refused_total{reason=\"untrusted_proxy_peer\"}", 1.0).await;
    assert_eq!(backend.conns.lock().unwrap().len(), 3);
    drop(players);
    proxy.shutdown().await;
}
