//! The TCP relay: half-close propagation, no leaked sockets, bounded buffers with backpressure, the
//! connection cap, and graceful shutdown with a disconnect message.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use moonbridge_protocol::packets::{LoginDisconnect, Packet, PlayDisconnect};
use moonbridge_proxy::config::Transport;
use testbed::{
    frames, login_disconnect_reason, login_success, read_to_close, tcp_config, Proxy, RawBackend, RawBehaviour, HS, LS,
    STEP,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

async fn logged_in(addr: std::net::SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[HS, LS].concat()).await.unwrap();
    let expected = login_success("Steve");
    let mut got = vec![0u8; expected.len()];
    timeout(STEP, s.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(got, expected);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn player_fin_reaches_the_backend_and_everything_is_released() {
    let backend = RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply: login_success("Steve") }).await;
    let proxy = Proxy::start(&tcp_config(backend.addr, "")).await;
    let mut p = logged_in(proxy.addr(Transport::Tcp)).await;
    p.write_all(&[0x02, 0x00, 0x09]).await.unwrap();
    p.shutdown().await.unwrap(); // FIN
                                 // The backend gets the last bytes, then EOF (it then closes, which closes the player's side).
    let rx = backend.wait_received(0, HS.len() + LS.len() + 3, STEP).await;
    assert_eq!(&rx[rx.len() - 3..], &[0x02, 0x00, 0x09]);
    backend.wait_closed(0, STEP).await;
    let (_, closed) = read_to_close(&mut p, STEP).await;
    assert!(closed, "player sees EOF after the backend closed");
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

/// Sockets of this machine in CLOSE_WAIT whose local or remote port is `port` (from /proc/net/tcp and tcp6).
fn close_wait_on(port: u16) -> usize {
    let mut n = 0;
    for table in ["/proc/net/tcp", "/proc/net/tcp6"] {
        let Ok(text) = std::fs::read_to_string(table) else { continue };
        for line in text.lines().skip(1) {
            let f: Vec<&str> = line.split_whitespace().collect();
            let port_of = |field: &str| field.rsplit(':').next().and_then(|p| u16::from_str_radix(p, 16).ok());
            // State 08 is CLOSE_WAIT.
            if f.len() > 3 && f[3] == "08" && (port_of(f[1]) == Some(port) || port_of(f[2]) == Some(port)) {
                n += 1;
            }
        }
    }
    n
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn backend_close_closes_the_player_without_leaks() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = listener.local_addr().unwrap();
    let proxy = Proxy::start(&tcp_config(backend_addr, "")).await;
    let addr = proxy.addr(Transport::Tcp);
    let backend = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; HS.len() + LS.len()];
        s.read_exact(&mut buf).await.unwrap();
        s.write_all(&login_success("Steve")).await.unwrap();
        s.write_all(&[0x02, 0x00, 0x2a]).await.unwrap();
        // Close fully.
    });
    let mut p = logged_in(addr).await;
    timeout(STEP, backend).await.unwrap().unwrap();
    let (rest, closed) = read_to_close(&mut p, STEP).await;
    assert!(closed);
    assert_eq!(rest, [0x02, 0x00, 0x2a]);
    proxy.wait_connections(0, STEP).await;
    // The proxy released its side of the backend connection: nothing of it lingers in CLOSE_WAIT.
    assert_eq!(close_wait_on(backend_addr.port()), 0, "proxy socket left in CLOSE_WAIT");
    drop(p);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_that_stops_reading_stalls_the_backend_instead_of_growing_buffers() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = listener.local_addr().unwrap();
    let proxy = Proxy::start(&tcp_config(backend_addr, "")).await;
    let addr = proxy.addr(Transport::Tcp);
    let written = Arc::new(AtomicU64::new(0));
    let w = Arc::clone(&written);
    let backend = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; HS.len() + LS.len()];
        s.read_exact(&mut buf).await.unwrap();
        s.write_all(&login_success("Steve")).await.unwrap();
        let chunk = vec![0x5au8; 64 * 1024];
        // Write until a write makes no progress for 1 s: the proxy has stopped reading from us.
        loop {
            match timeout(Duration::from_secs(1), s.write_all(&chunk)).await {
                Ok(Ok(())) => {
                    w.fetch_add(chunk.len() as u64, Ordering::SeqCst);
                }
                Ok(Err(e)) => panic!("backend write failed: {e}"),
                Err(_) => return s,
            }
            assert!(w.load(Ordering::SeqCst) < 256 * 1024 * 1024, "backend never stalled");
        }
    });
    let mut p = TcpStream::connect(addr).await.unwrap();
    p.write_all(&[HS, LS].concat()).await.unwrap();
    // Do not read: the backend must stall.
    let backend_sock = timeout(Duration::from_secs(60), backend).await.unwrap().unwrap();
    let stalled_at = written.load(Ordering::SeqCst);
    // Kernel socket buffers on both hops plus at most one relay batch (256 KiB).
    assert!(stalled_at < 32 * 1024 * 1024, "backend could write {stalled_at} bytes into a stalled player");
    // Nothing was lost: the player can read every byte.
    let expect = login_success("Steve").len() as u64 + stalled_at;
    drop(backend_sock);
    let mut total = 0u64;
    let mut buf = vec![0u8; 1 << 16];
    timeout(STEP, async {
        loop {
            let n = p.read(&mut buf).await.unwrap();
            if n == 0 {
                break;
            }
            total += n as u64;
        }
    })
    .await
    .unwrap();
    assert!(total >= expect, "read {total}, backend wrote at least {expect}");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn max_connections_closes_extra_connections_at_once() {
    let backend = RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply: login_success("Steve") }).await;
    let proxy = Proxy::start(&tcp_config(backend.addr, "[limits]\nmax_connections = 2\n")).await;
    let addr = proxy.addr(Transport::Tcp);
    let _a = logged_in(addr).await;
    let _b = logged_in(addr).await;
    let mut c = TcpStream::connect(addr).await.unwrap();
    let (got, closed) = read_to_close(&mut c, STEP).await;
    assert!(closed && got.is_empty());
    assert_eq!(proxy.stats.stats().connections, 2);
    drop(_a);
    proxy.wait_connections(1, STEP).await;
    let _d = logged_in(addr).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_disconnects_players_with_a_message() {
    // One player in Play, one still waiting for a backend that never answers.
    let playing = RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply: login_success("Steve") }).await;
    let silent = RawBackend::start(RawBehaviour::Silent).await;
    let config = format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\
         [[backend]]\nname = \"play\"\naddress = \"{}\"\n[[backend]]\nname = \"silent\"\naddress = \"{}\"\n\
         [routing.hosts]\n\"silent.example.com\" = \"silent\"\n",
        playing.addr, silent.addr
    );
    let proxy = Proxy::start(&config).await;
    let addr = proxy.addr(Transport::Tcp);
    let mut p = logged_in(addr).await;

    let hs = testbed::login_handshake("silent.example.com");
    let mut w = TcpStream::connect(addr).await.unwrap();
    w.write_all(&[&hs[..], LS].concat()).await.unwrap();
    silent.wait_received(0, hs.len() + LS.len(), STEP).await;

    let stop = tokio::spawn(proxy.shutdown());
    let (got, closed) = read_to_close(&mut p, STEP).await;
    assert!(closed);
    let f = frames(&got);
    assert_eq!(f.len(), 1, "{got:02x?}");
    assert_eq!(f[0].0, PlayDisconnect::ID);
    let reason = PlayDisconnect::decode_body(&mut moonbridge_protocol::codec::Reader::new(&f[0].1)).unwrap();
    assert!(reason.reason_json.contains("restarting"), "{}", reason.reason_json);

    let (got, closed) = read_to_close(&mut w, STEP).await;
    assert!(closed);
    assert_eq!(frames(&got)[0].0, LoginDisconnect::ID);
    assert!(login_disconnect_reason(&got).unwrap().contains("restarting"));
    timeout(STEP, stop).await.unwrap().unwrap();
    // New connections are refused once the proxy has stopped.
    assert!(TcpStream::connect(addr).await.is_err());
}
