//! Live reload on live sockets ([`moonbridge_proxy::ReloadHandle`], what SIGHUP calls): a route change reaches
//! new players while 20 connected players keep playing with no byte lost either way; an invalid
//! configuration and one that needs a restart are refused whole and change nothing.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use moonbridge_proxy::config::Transport;
use moonbridge_proxy::{Config, ReloadError, Server};
use testbed::{hs_ls, login_success, STEP};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A backend that answers the login with Login Success and then echoes every byte; counts its connections.
async fn echo_backend() -> (SocketAddr, Arc<AtomicUsize>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let accepted = Arc::new(AtomicUsize::new(0));
    let count = Arc::clone(&accepted);
    tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            count.fetch_add(1, Ordering::SeqCst);
            tokio::spawn(async move {
                let mut opening = vec![0u8; hs_ls().len()];
                if s.read_exact(&mut opening).await.is_err() || s.write_all(&login_success("Steve")).await.is_err() {
                    return;
                }
                let (mut r, mut w) = s.split();
                let _ = tokio::io::copy(&mut r, &mut w).await;
            });
        }
    });
    (addr, accepted)
}

fn config(a: SocketAddr, b: SocketAddr, route_to: &str, extra: &str) -> Config {
    Config::from_toml(&format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\n\
         [[backend]]\nname = \"a\"\naddress = \"{a}\"\n\n[[backend]]\nname = \"b\"\naddress = \"{b}\"\n\n\
         [routing]\ndefault_backend = \"a\"\n[routing.hosts]\n\"mc.example.com\" = \"{route_to}\"\n\n\
         [rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n{extra}"
    ))
    .unwrap()
}

/// Logs in through the proxy; returns the stream after Login Success.
async fn login(addr: SocketAddr) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&hs_ls()).await.unwrap();
    let mut got = vec![0u8; login_success("Steve").len()];
    tokio::time::timeout(STEP, s.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(got, login_success("Steve"));
    s
}

/// Sends `round`'s 4 KiB and reads them back, byte for byte.
async fn play(s: &mut TcpStream, player: usize, round: u8) {
    let data: Vec<u8> = (0..4096).map(|i| (i as u8) ^ round ^ player as u8).collect();
    s.write_all(&data).await.unwrap();
    let mut back = vec![0u8; data.len()];
    tokio::time::timeout(STEP, s.read_exact(&mut back)).await.unwrap().unwrap();
    assert_eq!(back, data, "player {player}, round {round}: every byte back, in order");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_route_change_reaches_new_players_while_connected_ones_keep_playing() {
    let (a, on_a) = echo_backend().await;
    let (b, on_b) = echo_backend().await;
    let server = Server::bind(&config(a, b, "a", "")).await.unwrap();
    let addr = server.local_addrs().iter().find(|(t, _)| *t == Transport::Tcp).unwrap().1;
    let reload = server.reload_handle();
    let stop = CancellationToken::new();
    let s = stop.clone();
    let task = tokio::spawn(async move { server.run(s.cancelled_owned()).await });

    let mut players = Vec::new();
    for i in 0..20 {
        let mut p = login(addr).await;
        play(&mut p, i, 1).await;
        players.push(p);
    }
    assert_eq!(on_a.load(Ordering::SeqCst), 20);

    // An invalid file is refused whole: nothing changes.
    let mut bad = config(a, b, "b", "");
    bad.limits.login_timeout_seconds = 0;
    let e = reload.reload(&bad).unwrap_err();
    assert!(matches!(e, ReloadError::Invalid(_)), "{e}");
    assert!(e.to_string().contains("limits.login_timeout_seconds"), "{e}");
    // A listener change needs a restart: refused, nothing changes.
    let mut moved = config(a, b, "b", "");
    moved.listeners[0].bind = "127.0.0.1:1".parse().unwrap();
    let e = reload.reload(&moved).unwrap_err();
    assert_eq!(
        e.to_string(),
        "[[listener]] changed, which needs a restart (listeners are bound and online mode's key made at start)"
    );
    let _new = login(addr).await;
    assert_eq!((on_a.load(Ordering::SeqCst), on_b.load(Ordering::SeqCst)), (21, 0), "still routed to a");

    // The route change: new players reach b; the 20 keep playing on a.
    let summary = reload.reload(&config(a, b, "b", "")).unwrap();
    assert_eq!(summary, "2 backend(s) (2 unchanged), 1 host route(s), default backend a");
    let _on_b = login(addr).await;
    assert_eq!(on_b.load(Ordering::SeqCst), 1, "a new player reaches b");
    for (i, p) in players.iter_mut().enumerate() {
        play(p, i, 2).await;
        play(p, i, 3).await;
    }
    assert_eq!(on_a.load(Ordering::SeqCst), 21, "nobody was moved or reconnected");
    stop.cancel();
    tokio::time::timeout(STEP * 3, task).await.unwrap().unwrap();
}
