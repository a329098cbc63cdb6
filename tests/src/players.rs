//! A test player of any transport, reading and writing raw stream bytes: a TCP socket, a plain WebSocket
//! client (carriage v1), or the client library (carriage v2, with or without zstd, over ws or wss); and waits on
//! what a [`RawBackend`] received.

use std::sync::Arc;
use std::time::Duration;

use futures_util::{SinkExt, StreamExt};
use moonbridge_client::{Connection, Options};
use moonbridge_proxy::config::Transport;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::Message;

use crate::{ws_connect, Proxy, RawBackend, RawWs, TestCert, STEP};

/// How a test player reaches the proxy.
#[derive(Clone, Copy, Debug)]
pub enum Way {
    Tcp,
    /// A plain WebSocket client offering no subprotocol: carriage v1.
    WsV1,
    /// The client library over ws: carriage v2 with zstd.
    WsV2Zstd,
    /// The client library over wss, compression off: carriage v2.
    WssV2,
}

pub const EVERY_WAY: [Way; 4] = [Way::Tcp, Way::WsV1, Way::WsV2Zstd, Way::WssV2];

/// A player's connection, whichever way it came.
pub enum Player {
    Tcp(TcpStream),
    Ws(Box<RawWs>),
    Library(Arc<Connection>),
}

impl Player {
    pub async fn open(way: Way, proxy: &Proxy, cert: &TestCert) -> Self {
        let ws = if matches!(way, Way::Tcp) { proxy.addr(Transport::Tcp) } else { proxy.addr(Transport::Ws) };
        match way {
            Way::Tcp => Self::Tcp(TcpStream::connect(proxy.addr(Transport::Tcp)).await.unwrap()),
            Way::WsV1 => Self::Ws(Box::new(ws_connect(ws, &format!("ws://{ws}/mc"), &[], None).await.unwrap().0)),
            Way::WsV2Zstd | Way::WssV2 => {
                let (url, options) = match way {
                    Way::WsV2Zstd => (format!("ws://{ws}/mc"), "{}".to_string()),
                    _ => (
                        format!("wss://{}/mc", proxy.addr(Transport::Wss)),
                        format!(r#"{{"ca_file":{:?},"server_name":"localhost","compress":false}}"#, cert.ca),
                    ),
                };
                Self::library(url, options).await
            }
        }
    }

    /// The client library's connection to `url` with `options` (JSON).
    pub async fn library(url: String, options: String) -> Self {
        let conn = tokio::task::spawn_blocking(move || {
            Connection::connect(&url, Options::from_json(Some(&options)).unwrap()).unwrap()
        })
        .await
        .unwrap();
        Self::Library(Arc::new(conn))
    }

    pub async fn send(&mut self, bytes: &[u8]) {
        match self {
            Self::Tcp(s) => s.write_all(bytes).await.unwrap(),
            Self::Ws(ws) => ws.send(Message::Binary(bytes.to_vec().into())).await.unwrap(),
            Self::Library(c) => {
                let (c, bytes) = (Arc::clone(c), bytes.to_vec());
                tokio::task::spawn_blocking(move || {
                    c.send(&bytes).unwrap();
                    c.end_tick().unwrap();
                })
                .await
                .unwrap();
            }
        }
    }

    /// Reads exactly `n` stream bytes, within `within`.
    pub async fn read(&mut self, n: usize, within: Duration) -> Vec<u8> {
        let mut out = Vec::with_capacity(n);
        let read = async {
            match self {
                Self::Tcp(s) => {
                    out.resize(n, 0);
                    s.read_exact(&mut out).await.unwrap();
                }
                Self::Ws(ws) => {
                    while out.len() < n {
                        match ws.next().await {
                            Some(Ok(Message::Binary(b))) => out.extend_from_slice(&b),
                            Some(Ok(Message::Close(f))) => panic!("closed after {} bytes: {f:?}", out.len()),
                            Some(Ok(_)) => {}
                            other => panic!("read failed after {} bytes: {other:?}", out.len()),
                        }
                    }
                }
                Self::Library(c) => {
                    let c = Arc::clone(c);
                    out = tokio::task::spawn_blocking(move || {
                        let mut got = Vec::with_capacity(n);
                        let mut buf = vec![0; 1 << 20];
                        while got.len() < n {
                            let k = c.recv(&mut buf, Some(within)).unwrap();
                            got.extend_from_slice(&buf[..k]);
                        }
                        got
                    })
                    .await
                    .unwrap();
                }
            }
        };
        tokio::time::timeout(within, read).await.unwrap_or_else(|_| panic!("{n} bytes not read within {within:?}"));
        assert_eq!(out.len(), n, "nothing past what was sent");
        out
    }

    /// True once the proxy ended the connection (EOF, a Close, or an error), within `within`.
    pub async fn ended(&mut self, within: Duration) -> bool {
        let end = async {
            match self {
                Self::Tcp(s) => {
                    let mut buf = [0u8; 4096];
                    loop {
                        if matches!(s.read(&mut buf).await, Ok(0) | Err(_)) {
                            return true;
                        }
                    }
                }
                Self::Ws(ws) => loop {
                    match ws.next().await {
                        Some(Ok(Message::Close(_))) | None | Some(Err(_)) => return true,
                        Some(Ok(_)) => {}
                    }
                },
                Self::Library(c) => {
                    let c = Arc::clone(c);
                    tokio::task::spawn_blocking(move || {
                        let mut buf = vec![0; 1 << 16];
                        loop {
                            if c.recv(&mut buf, Some(Duration::from_secs(1))).is_err() {
                                return true;
                            }
                        }
                    })
                    .await
                    .unwrap()
                }
            }
        };
        tokio::time::timeout(within, end).await.unwrap_or(false)
    }
}

/// What the `i`-th connection of `backend` received, once it holds `part` (within a step).
pub async fn until_contains(backend: &RawBackend, i: usize, part: &[u8]) -> Vec<u8> {
    tokio::time::timeout(STEP, async {
        loop {
            let got = backend.wait_received(i, part.len(), STEP).await;
            if got.windows(part.len()).any(|w| w == part) {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("connection {i} did not receive {part:02x?}"))
}

/// What the `i`-th connection of `backend` received, once it ends with `tail` (within `within`).
pub async fn until_ends_with(backend: &RawBackend, i: usize, tail: &[u8], within: Duration) -> Vec<u8> {
    tokio::time::timeout(within, async {
        loop {
            let got = backend.wait_received(i, tail.len(), within).await;
            if got.ends_with(tail) {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .unwrap_or_else(|_| {
        let got = backend.conns.lock().unwrap().get(i).map(|c| c.lock().unwrap().received.clone()).unwrap_or_default();
        let end = &got[got.len().saturating_sub(64)..];
        panic!("connection {i} did not receive the {} bytes expected last; it ends with {end:02x?}", tail.len())
    })
}
