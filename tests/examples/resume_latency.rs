//! Measures how long a carriage v2 resume takes (docs/benchmarks.md, "Resume"): from the new TCP connect to
//! the first replayed byte, over `wss://` on loopback, `RESUMES` times, with the proxy in this process.
//!
//! Each round: the backend sends 1,000 bytes, the player reads them but does not count them (as if they were
//! lost with the connection), drops its connection, then connects again (TCP, TLS 1.3, upgrade offering
//! `moonbridge.v2`), sends `resume`, and waits for `resumed` and the replayed bytes. No backoff wait is
//! included: the reconnect starts at once.
//!
//! ```sh
//! cargo run --release -p moonbridge-tests --example resume_latency -- 100
//! ```

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use moonbridge_proxy::config::Transport;
use testbed::{hs_ls, login_backend, ws_connect, Io, KeyType, Message, Proxy, TestCert, WebSocketStream};

type Ws = WebSocketStream<Box<dyn Io>>;

async fn next_message(ws: &mut Ws) -> Message {
    tokio::time::timeout(Duration::from_secs(10), ws.next()).await.expect("a message in time").unwrap().unwrap()
}

#[tokio::main]
async fn main() {
    let resumes: usize = std::env::args().nth(1).map_or(100, |s| s.parse().unwrap());
    let cert = TestCert::generate("resume-latency", KeyType::Ec).unwrap();
    let backend = login_backend().await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\npath = \"/mc\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{}\"\n",
        cert.cert.display(),
        cert.key.display(),
        backend.addr
    ))
    .await;
    let addr = proxy.addr(Transport::Wss);
    let url = format!("wss://localhost:{}/mc", addr.port());
    let offer = [("Sec-WebSocket-Protocol", "moonbridge.v2")];
    let (mut ws, _) = ws_connect(addr, &url, &offer, Some(&cert.ca)).await.unwrap();
    ws.send(Message::Binary(hs_ls().into())).await.unwrap();
    let sent = hs_ls().len() as u64;
    let mut received = 0u64;
    let mut token = loop {
        match next_message(&mut ws).await {
            Message::Binary(b) => received += b.len() as u64,
            Message::Text(t) if t.starts_with("session ") => break t.split(' ').nth(1).unwrap().to_string(),
            _ => {}
        }
    };
    let chunk = vec![7u8; 1000];
    let mut times = Vec::with_capacity(resumes);
    for _ in 0..resumes {
        backend.send(0, &chunk).await;
        // Read the bytes but do not count them: the proxy must send them again.
        loop {
            if let Message::Binary(b) = next_message(&mut ws).await {
                assert_eq!(b.len(), chunk.len());
                break;
            }
        }
        drop(ws);
        let t0 = Instant::now();
        let (mut fresh, _) = ws_connect(addr, &url, &offer, Some(&cert.ca)).await.unwrap();
        fresh.send(Message::Text(format!("resume {token} {received} {sent}").into())).await.unwrap();
        match next_message(&mut fresh).await {
            Message::Text(t) => {
                let fields: Vec<&str> = t.split(' ').collect();
                assert_eq!((fields[0], fields[1]), ("resumed", sent.to_string().as_str()));
                token = fields[2].to_string();
            }
            other => panic!("expected resumed, got {other:?}"),
        }
        match next_message(&mut fresh).await {
            Message::Binary(b) => {
                times.push(t0.elapsed());
                assert!(b.as_ref() == chunk.as_slice(), "the replay is the bytes the player missed");
                received += b.len() as u64;
            }
            other => panic!("expected the replay, got {other:?}"),
        }
        ws = fresh;
    }
    times.sort();
    let us = |d: Duration| d.as_secs_f64() * 1e6;
    let pct = |p: f64| times[((times.len() as f64 * p).ceil() as usize).saturating_sub(1).min(times.len() - 1)];
    println!(
        "resumes {}: TCP connect to first replayed byte median {:.0} us, p95 {:.0} us, min {:.0} us, max {:.0} us",
        times.len(),
        us(pct(0.5)),
        us(pct(0.95)),
        us(times[0]),
        us(times[times.len() - 1])
    );
    drop(ws);
    proxy.shutdown().await;
}
