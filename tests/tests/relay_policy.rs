//! The relay policy every transport shares (`proxy/src/relay/mod.rs`), run over a TCP player and a WebSocket
//! player alike: the shutdown step (what the backend already sent, then a Play Disconnect only at a frame
//! boundary, then the transport's close) and the write-stall deadline (a player that stops reading is dropped).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use moonbridge_protocol::packets::{Packet, PlayDisconnect};
use moonbridge_protocol::ws as carriage;
use moonbridge_proxy::config::Transport;
use testbed::{frames, login_success, read_to_close, ws_connect, Io, Message, Proxy, STEP};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;
use tokio_tungstenite::WebSocketStream;

const TRANSPORTS: [Transport; 2] = [Transport::Tcp, Transport::Ws];

/// A player over either transport.
enum Player {
    Tcp(TcpStream),
    Ws(Box<WebSocketStream<Box<dyn Io>>>),
}

impl Player {
    /// Connects to the proxy's listener of `transport` and sends the handshake and Login Start.
    async fn log_in(proxy: &Proxy, transport: Transport) -> Self {
        let addr = proxy.addr(transport);
        let hello = testbed::hs_ls();
        if transport == Transport::Tcp {
            let mut s = TcpStream::connect(addr).await.unwrap();
            s.write_all(&hello).await.unwrap();
            Self::Tcp(s)
        } else {
            let (mut ws, _) = ws_connect(addr, &format!("ws://{addr}/mc"), &[], None).await.unwrap();
            ws.send(Message::Binary(hello.into())).await.unwrap();
            Self::Ws(Box::new(ws))
        }
    }

    /// Reads `n` stream bytes.
    async fn read(&mut self, n: usize) -> Vec<u8> {
        match self {
            Self::Tcp(s) => {
                let mut b = vec![0; n];
                timeout(STEP, s.read_exact(&mut b)).await.unwrap().unwrap();
                b
            }
            Self::Ws(ws) => testbed::ws_read_bytes(ws, n, STEP).await.0,
        }
    }

    /// Reads every stream byte until the proxy closes: the bytes and the WebSocket close code (TCP: `None`).
    async fn read_to_close(&mut self) -> (Vec<u8>, Option<u16>) {
        match self {
            Self::Tcp(s) => {
                let (got, closed) = read_to_close(s, STEP).await;
                assert!(closed, "the proxy closes");
                (got, None)
            }
            Self::Ws(ws) => {
                let mut got = Vec::new();
                let code = timeout(STEP, async {
                    while let Some(m) = ws.next().await {
                        match m {
                            Ok(Message::Binary(b)) => got.extend_from_slice(&b),
                            Ok(Message::Close(f)) => return f.map(|f| u16::from(f.code)),
                            Ok(_) => {}
                            Err(e) => panic!("{e}"),
                        }
                    }
                    None
                })
                .await
                .expect("the proxy closes");
                (got, code)
            }
        }
    }
}

fn config(backend: SocketAddr, extra: &str) -> String {
    format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\
         [[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\nping_interval_seconds = 0\n\
         [[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n{extra}"
    )
}

/// A backend that logs the player in and then sends `after_login` and keeps the connection open.
async fn backend(after_login: Vec<u8>) -> (SocketAddr, tokio::task::JoinHandle<()>) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let task = tokio::spawn(async move {
        while let Ok((mut s, _)) = listener.accept().await {
            let after = after_login.clone();
            tokio::spawn(async move {
                let mut hello = vec![0u8; testbed::hs_ls().len()];
                s.read_exact(&mut hello).await.unwrap();
                s.write_all(&[login_success("Steve"), after].concat()).await.unwrap();
                let mut sink = [0u8; 1024];
                while matches!(s.read(&mut sink).await, Ok(n) if n > 0) {}
            });
        }
    });
    (addr, task)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shutdown_sends_a_disconnect_at_a_frame_boundary_over_both_transports() {
    let success = login_success("Steve");
    // Between frames: the player gets the chat frame, then the Play Disconnect, then the close.
    // Inside a frame (the backend sent 3 bytes of a 7-byte frame): no Disconnect could be parsed there, so none
    // is sent; the player gets what the backend sent and the close.
    let chat = vec![0x04, 0x02, 0x02, b'h', b'i'];
    let half = vec![0x06, 0x3f, 0x00];
    for (after, disconnect) in [(chat, true), (half, false)] {
        for transport in TRANSPORTS {
            let (addr, task) = backend(after.clone()).await;
            let proxy = Proxy::start(&config(addr, "")).await;
            let mut p = Player::log_in(&proxy, transport).await;
            assert_eq!(p.read(success.len() + after.len()).await, [&success[..], &after[..]].concat());
            let stop = tokio::spawn(proxy.shutdown());
            let (rest, code) = p.read_to_close().await;
            if disconnect {
                let f = frames(&rest);
                assert_eq!(f.len(), 1, "{transport}: {rest:02x?}");
                assert_eq!(f[0].0, PlayDisconnect::ID, "{transport}");
                let reason =
                    PlayDisconnect::decode_body(&mut moonbridge_protocol::codec::Reader::new(&f[0].1)).unwrap();
                assert!(reason.reason_json.contains("restarting"), "{}", reason.reason_json);
            } else {
                assert_eq!(rest, Vec::<u8>::new(), "{transport}: nothing inserted inside a frame");
            }
            let expected_code = (transport == Transport::Ws).then_some(carriage::CLOSE_GOING_AWAY);
            assert_eq!(code, expected_code, "{transport}");
            timeout(STEP, stop).await.unwrap().unwrap();
            task.abort();
        }
    }
}

/// A player that stops reading is dropped after the write-stall limit, and the backend that flooded it sees
/// the end of its stream (a FIN), not a reset of the bytes the proxy had not read yet (with the lanes on, the
/// proxy reads ahead into the player's queue; off, it stops reading at once).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_player_that_stops_reading_is_dropped_after_the_stall_limit_over_both_transports() {
    // A Map Chunk Bulk frame (bulk) of 64 KiB: 0x80 0x80 0x04 is the VarInt 65,536.
    let mut chunk = vec![0x80, 0x80, 0x04, 0x26];
    chunk.resize(3 + 65_536, 0);
    for lanes in [false, true] {
        for transport in TRANSPORTS {
            let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
            let backend_addr = listener.local_addr().unwrap();
            let extra = format!("[limits]\nwrite_stall_timeout_seconds = 2\n[lanes]\nenabled = {lanes}\n");
            let proxy = Proxy::start(&config(backend_addr, &extra)).await;
            let chunk = chunk.clone();
            let flood = tokio::spawn(async move {
                let (s, _) = listener.accept().await.unwrap();
                let (mut r, mut w) = s.into_split();
                let mut hello = vec![0u8; testbed::hs_ls().len()];
                r.read_exact(&mut hello).await.unwrap();
                w.write_all(&login_success("Steve")).await.unwrap();
                let started = Instant::now();
                // Flood while reading, as a server does, until the proxy ends the stream.
                let writer = async {
                    while w.write_all(&chunk).await.is_ok() {}
                    std::future::pending::<()>().await;
                };
                let reader = async {
                    let mut b = [0u8; 4096];
                    loop {
                        match r.read(&mut b).await {
                            Ok(0) => return Ok(()),
                            Ok(_) => {}
                            Err(e) => return Err(e),
                        }
                    }
                };
                let end = tokio::select! {
                    () = writer => unreachable!(),
                    r = timeout(Duration::from_secs(30), reader) => r.expect("the proxy kept the stalled session"),
                };
                (started.elapsed(), end)
            });
            let player = Player::log_in(&proxy, transport).await;
            // Never read.
            let (flooded_for, end) = timeout(Duration::from_secs(40), flood).await.unwrap().unwrap();
            assert!(flooded_for < Duration::from_secs(20), "{transport}, lanes {lanes}: {flooded_for:?}");
            if let Err(e) = end {
                panic!("{transport}, lanes {lanes}: the backend's stream was broken, not ended: {e}");
            }
            proxy.wait_connections(0, STEP).await;
            drop(player);
            proxy.shutdown().await;
        }
    }
}
