//! WebSocket and TLS client helpers: connect (with a TLS client trusting a test CA), read bytes and close
//! codes, raw HTTP requests.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;
pub use tokio_tungstenite::tungstenite::Message;
pub use tokio_tungstenite::WebSocketStream;

use crate::{read_to_close, STEP};

/// A TLS client configuration that trusts exactly `ca` (a PEM file), offering `versions`.
pub fn tls_client_config(
    ca: &std::path::Path,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// Any byte stream a WebSocket client can run on.
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// Opens a WebSocket to `url` (`ws://127.0.0.1:port/path` or `wss://localhost:port/path`) over a TCP
/// connection to `addr`, with extra request headers. For `wss` the server is verified against `ca`.
pub async fn ws_connect(
    addr: SocketAddr,
    url: &str,
    headers: &[(&str, &str)],
    ca: Option<&std::path::Path>,
) -> WsConnected {
    ws_connect_from(None, addr, url, headers, ca).await
}

/// A WebSocket client's connection and the server's upgrade response, or why there is none.
pub type WsConnected = Result<
    (WebSocketStream<Box<dyn Io>>, tokio_tungstenite::tungstenite::handshake::client::Response),
    tokio_tungstenite::tungstenite::Error,
>;

/// As [`ws_connect`], from local address `source` when given (a loopback address other than 127.0.0.1 stands
/// for a player on another host).
pub async fn ws_connect_from(
    source: Option<std::net::IpAddr>,
    addr: SocketAddr,
    url: &str,
    headers: &[(&str, &str)],
    ca: Option<&std::path::Path>,
) -> WsConnected {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = url.into_client_request()?;
    for (k, v) in headers {
        req.headers_mut().insert(
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    let tcp = match source {
        Some(ip) => {
            let socket = if ip.is_ipv4() { tokio::net::TcpSocket::new_v4() } else { tokio::net::TcpSocket::new_v6() };
            let socket = socket.map_err(tokio_tungstenite::tungstenite::Error::Io)?;
            socket.bind(SocketAddr::new(ip, 0)).map_err(tokio_tungstenite::tungstenite::Error::Io)?;
            socket.connect(addr).await
        }
        None => TcpStream::connect(addr).await,
    }
    .map_err(tokio_tungstenite::tungstenite::Error::Io)?;
    tcp.set_nodelay(true).unwrap();
    let io: Box<dyn Io> = if url.starts_with("wss://") {
        let config =
            tls_client_config(ca.expect("wss needs a CA"), &[&rustls::version::TLS13, &rustls::version::TLS12]);
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(tokio_tungstenite::tungstenite::Error::Io)?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    tokio_tungstenite::client_async(req, io).await
}

/// Reads messages until a Close arrives (or the stream ends) and returns its code, answering Pings.
pub async fn ws_close_code<S: Io>(ws: &mut WebSocketStream<S>, within: Duration) -> Option<u16> {
    use futures_util::StreamExt;
    timeout(within, async {
        while let Some(m) = ws.next().await {
            match m {
                Ok(Message::Close(f)) => return f.map(|f| u16::from(f.code)),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    })
    .await
    .expect("close within the time limit")
}

/// Reads binary messages until `n` bytes arrived; returns them and how many messages carried them.
pub async fn ws_read_bytes<S: Io>(ws: &mut WebSocketStream<S>, n: usize, within: Duration) -> (Vec<u8>, usize) {
    use futures_util::StreamExt;
    let mut out = Vec::new();
    let mut messages = 0;
    timeout(within, async {
        while out.len() < n {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => {
                    messages += 1;
                    out.extend_from_slice(&b);
                }
                Some(Ok(Message::Close(f))) => panic!("closed while reading: {f:?}"),
                Some(Ok(_)) => {}
                Some(Err(e)) => panic!("read error: {e}"),
                None => panic!("stream ended after {} bytes", out.len()),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{n} bytes not received within {within:?}"));
    (out, messages)
}

/// Sends a raw HTTP request and returns the response head (up to the blank line) and whether the
/// connection was closed afterwards.
pub async fn raw_http(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let (got, _) = read_to_close(&mut s, STEP).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// Opens a raw WebSocket: sends the upgrade request, checks the 101, returns the socket.
pub async fn raw_upgrade(addr: SocketAddr) -> TcpStream {
    raw_upgrade_at(addr, "/mc", None).await.0
}

/// Opens a raw WebSocket on `path`, offering `protocol` (`Sec-WebSocket-Protocol`) when given: sends the upgrade
/// request, checks the 101 and the accept key (each byte of the head within [`STEP`]), returns the socket and
/// the response head.
pub async fn raw_upgrade_at(addr: SocketAddr, path: &str, protocol: Option<&str>) -> (TcpStream, String) {
    let mut s = TcpStream::connect(addr).await.unwrap();
    let offer = protocol.map(|p| format!("Sec-WebSocket-Protocol: {p}\r\n")).unwrap_or_default();
    let request = format!(
        "GET {path} HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
         Sec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\nSec-WebSocket-Version: 13\r\n{offer}\r\n"
    );
    s.write_all(request.as_bytes()).await.unwrap();
    let mut head = Vec::new();
    let mut b = [0u8; 1];
    while !head.ends_with(b"\r\n\r\n") {
        timeout(STEP, s.read_exact(&mut b)).await.unwrap().unwrap();
        head.push(b[0]);
    }
    let head = String::from_utf8(head).unwrap();
    assert!(head.starts_with("HTTP/1.1 101 "), "{head}");
    assert!(head.contains("Sec-WebSocket-Accept: s3pPLMBiTxaQ9kYGzzhZRbK+xOo="), "RFC 6455 §1.3 example: {head}");
    (s, head)
}

/// Opens a raw carriage v2 WebSocket on `path` (offering only `moonbridge.v2`) and checks the proxy selected it.
pub async fn raw_upgrade_v2(addr: SocketAddr, path: &str) -> TcpStream {
    let (s, head) = raw_upgrade_at(addr, path, Some("moonbridge.v2")).await;
    assert!(head.contains("moonbridge.v2"), "v2 selected: {head}");
    s
}

/// A raw carriage v2 player on `path`: the upgrade, the handshake and Login Start of [`crate::hs_ls`], then the
/// frames up to the proxy's `session` message; returns the socket there.
pub async fn raw_v2_player(addr: SocketAddr, path: &str) -> TcpStream {
    let mut s = raw_upgrade_v2(addr, path).await;
    s.write_all(&masked_frame(0x2, &crate::hs_ls(), [1, 2, 3, 4])).await.unwrap();
    loop {
        let (op, payload) = read_server_frame(&mut s).await;
        if op == 0x1 && payload.starts_with(b"session ") {
            return s;
        }
    }
}

/// A client frame with FIN set, masked with `mask` (RFC 6455 §5.2).
pub fn masked_frame(opcode: u8, payload: &[u8], mask: [u8; 4]) -> Vec<u8> {
    moonbridge_protocol::ws::frame::client_frame(opcode, payload, mask)
}

/// Reads one server frame: (opcode, payload). Asserts it is unmasked, as every server frame must be.
pub async fn read_server_frame(s: &mut TcpStream) -> (u8, Vec<u8>) {
    let mut h = [0u8; 2];
    timeout(STEP, s.read_exact(&mut h)).await.unwrap().unwrap();
    assert_eq!(h[1] & 0x80, 0, "server frames are never masked");
    let len = match h[1] & 0x7f {
        126 => {
            let mut l = [0u8; 2];
            s.read_exact(&mut l).await.unwrap();
            u16::from_be_bytes(l) as usize
        }
        127 => {
            let mut l = [0u8; 8];
            s.read_exact(&mut l).await.unwrap();
            u64::from_be_bytes(l) as usize
        }
        n => n as usize,
    };
    let mut payload = vec![0u8; len];
    timeout(STEP, s.read_exact(&mut payload)).await.unwrap().unwrap();
    (h[0] & 0x0f, payload)
}

/// Reads frames until a Close; returns its code (asserting it has one: 1005 is never sent on the wire).
pub async fn read_close(s: &mut TcpStream) -> u16 {
    loop {
        let (op, payload) = read_server_frame(s).await;
        if op == 0x8 {
            assert!(payload.len() >= 2, "a Close from the proxy always carries a code: {payload:?}");
            return u16::from_be_bytes([payload[0], payload[1]]);
        }
    }
}

/// A raw WebSocket client of a proxy (`ws` or through TLS).
pub type RawWs = WebSocketStream<Box<dyn crate::Io>>;

/// A raw WebSocket to the `ws` listener at `addr` (path `/mc`), offering the subprotocols `offer` (none when
/// empty); returns it with the subprotocol the proxy selected.
pub async fn ws_offering(addr: SocketAddr, offer: &str) -> (RawWs, Option<String>) {
    let url = format!("ws://127.0.0.1:{}/mc", addr.port());
    let headers: Vec<(&str, &str)> = if offer.is_empty() { vec![] } else { vec![("Sec-WebSocket-Protocol", offer)] };
    let (ws, resp) = ws_connect(addr, &url, &headers, None).await.unwrap();
    let selected = resp.headers().get("Sec-WebSocket-Protocol").map(|v| v.to_str().unwrap().to_string());
    (ws, selected)
}

/// Logs in over a raw carriage v2 WebSocket to the `ws` listener at `addr` (the handshake and Login Start of
/// [`crate::hs_ls`]) and returns it with the proxy's `session` token and the bytes of binary messages received
/// before it. Asserts the proxy selected `moonbridge.v2` and announced the default 15 s resume window.
pub async fn v2_session(addr: SocketAddr) -> (RawWs, String, u64) {
    use futures_util::{SinkExt, StreamExt};
    let (mut ws, selected) = ws_offering(addr, "moonbridge.v2, moonbridge.v1").await;
    assert_eq!(selected.as_deref(), Some("moonbridge.v2"));
    ws.send(Message::Binary(crate::hs_ls().into())).await.unwrap();
    let mut received = 0u64;
    loop {
        match timeout(STEP, ws.next()).await.unwrap().unwrap().unwrap() {
            Message::Binary(b) => received += b.len() as u64,
            Message::Text(t) if t.starts_with("session ") => {
                let token = t.split(' ').nth(1).unwrap().to_string();
                assert_eq!(t.split(' ').nth(2), Some("15"), "the window is announced");
                return (ws, token, received);
            }
            _ => {}
        }
    }
}

/// Opens a carriage v2 WebSocket to the `ws` listener at `addr` whose first message is `request` (`resume …`,
/// docs/carriage.md) and returns the proxy's answer: the `resumed` text, or the close code (`None` when the
/// connection ended without one). Each wait is bounded by [`STEP`].
pub async fn try_resume(addr: SocketAddr, request: &str) -> Result<String, Option<u16>> {
    first_answer(addr, &[], request).await
}

/// Opens a carriage v2 WebSocket to `addr` (path `/mc`, with `headers` besides the offer), sends `request` as
/// its first message and returns the text answer, or the close code (`None`: closed without one).
pub async fn first_answer(addr: SocketAddr, headers: &[(&str, &str)], request: &str) -> Result<String, Option<u16>> {
    use futures_util::{SinkExt, StreamExt};
    let url = format!("ws://127.0.0.1:{}/mc", addr.port());
    let headers: Vec<(&str, &str)> =
        [("Sec-WebSocket-Protocol", "moonbridge.v2")].into_iter().chain(headers.iter().copied()).collect();
    let (mut ws, _) = ws_connect(addr, &url, &headers, None).await.unwrap();
    ws.send(Message::Text(request.into())).await.unwrap();
    loop {
        match timeout(STEP, ws.next()).await.expect("an answer in time") {
            Some(Ok(Message::Text(t))) => return Ok(t.to_string()),
            Some(Ok(Message::Close(f))) => return Err(f.map(|f| u16::from(f.code))),
            Some(Ok(_)) => {}
            _ => return Err(None),
        }
    }
}
