//! WebSocket listeners: the HTTP/1.1 upgrade (RFC 6455 §4.2), the player's real address, and the
//! WebSocket side of a session (carriage version 1, see [`moonbridge_protocol::ws`]).
//!
//! The upgrade is parsed here with `httparse` rather than by tungstenite's server handshake because the proxy
//! must answer 404 for other paths and 426 for requests that are not upgrades, read forwarding headers, and
//! keep the whole exchange under the connection's handshake deadline. Framing after the upgrade is
//! tungstenite's.

use std::io;
use std::net::{IpAddr, SocketAddr};
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use futures_util::{FutureExt, SinkExt, StreamExt};
use ipnet::IpNet;
use moonbridge_protocol::ws::{self as carriage, Keepalive, KeepaliveAction};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::Interval;
use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, Role, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use crate::config::RealIpHeader;
use crate::relay::{discard_until_eof, write_all, Direction, RelayEnd, Side, RELAY_CHUNK, SHUTDOWN_FLUSH_TIMEOUT};
use crate::server::{Shared, LINGER};
use crate::session::{shutdown_disconnect_frame, Finish, Player, RelayReport, RelayStart};

/// Largest HTTP request head (request line and headers) accepted, in bytes; over it: 431.
pub(crate) const MAX_REQUEST_HEAD: usize = 8192;
/// Most request headers accepted; over it: 431.
const MAX_HEADERS: usize = 64;
/// tungstenite's read buffer per connection, in bytes. Player → proxy traffic is small (a tick's packets), and
/// tungstenite zero-fills this much before every read, so a small buffer is cheaper per read and per idle
/// connection; a larger message is still read whole (in several reads) up to `max_ws_message_bytes`.
const WS_READ_BUFFER: usize = 4 * 1024;

/// What a WebSocket listener needs to accept an upgrade.
#[derive(Debug)]
pub(crate) struct WsSettings {
    pub(crate) path: String,
    pub(crate) trusted: Vec<IpNet>,
    pub(crate) real_ip_header: RealIpHeader,
    pub(crate) ping_interval: Option<std::time::Duration>,
    pub(crate) max_message_bytes: usize,
}

/// Why an upgrade was refused. Each maps to an HTTP status sent before closing.
#[derive(Debug, thiserror::Error)]
pub(crate) enum UpgradeError {
    #[error("connection closed before the request was complete")]
    Closed,
    #[error("read error: {0}")]
    Io(#[from] io::Error),
    #[error("request head over {MAX_REQUEST_HEAD} bytes or {MAX_HEADERS} headers")]
    TooLarge,
    #[error("malformed HTTP request: {0}")]
    Malformed(String),
    #[error("path {0:?} is not the WebSocket path")]
    WrongPath(String),
    #[error("not a WebSocket upgrade request")]
    NotUpgrade,
    #[error("method {0} is not GET")]
    Method(String),
    #[error("unsupported Sec-WebSocket-Version {0:?}")]
    Version(String),
    #[error("missing Sec-WebSocket-Key")]
    MissingKey,
}

impl UpgradeError {
    fn response(&self) -> Option<&'static str> {
        Some(match self {
            Self::Closed | Self::Io(_) => return None,
            Self::TooLarge => "HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            Self::Malformed(_) | Self::MissingKey => "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            Self::WrongPath(_) => "HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            Self::NotUpgrade | Self::Version(_) => {
                "HTTP/1.1 426 Upgrade Required\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\n\r\n"
            }
            Self::Method(_) => "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
        })
    }
}

/// An accepted upgrade.
#[derive(Debug)]
pub(crate) struct Upgraded {
    /// The player's address: the TCP peer, or what a trusted proxy said.
    pub(crate) client: SocketAddr,
    /// Bytes the client sent after the request head (the start of the WebSocket stream).
    pub(crate) leftover: Vec<u8>,
}

fn header<'a>(req: &'a httparse::Request<'_, '_>, name: &str) -> Option<&'a str> {
    req.headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .map(str::trim)
}

/// The value of the real-IP header: for `X-Forwarded-For`, every line joined in order with `,` (a proxy may
/// append its own line instead of extending the client's); for single-address headers, the last line (the
/// one the nearest proxy added).
fn real_ip_header_value(req: &httparse::Request<'_, '_>, header: RealIpHeader) -> Option<String> {
    let mut lines = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case(header.name()))
        .filter_map(|h| std::str::from_utf8(h.value).ok())
        .map(str::trim);
    match header {
        RealIpHeader::XForwardedFor => {
            let all: Vec<&str> = lines.collect();
            (!all.is_empty()).then(|| all.join(","))
        }
        RealIpHeader::CfConnectingIp | RealIpHeader::XRealIp => lines.next_back().map(str::to_owned),
    }
}

fn has_token(value: Option<&str>, token: &str) -> bool {
    value.is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

/// Parses one address from a header value: `1.2.3.4`, `2001:db8::1`, `1.2.3.4:5678` or `[2001:db8::1]:5678`.
fn parse_ip(text: &str) -> Option<IpAddr> {
    let t = text.trim();
    t.parse::<IpAddr>().ok().or_else(|| t.parse::<SocketAddr>().ok().map(|s| s.ip())).map(|ip| ip.to_canonical())
}

/// The player's address for a request from `peer`: `peer` itself unless `peer` is a trusted proxy that
/// sent `header`. For `X-Forwarded-For` the rightmost address that is not itself trusted is taken (the hop
/// that reached the first trusted proxy); if every hop is trusted, the leftmost.
pub(crate) fn real_ip(peer: IpAddr, trusted: &[IpNet], header: RealIpHeader, value: Option<&str>) -> IpAddr {
    let peer = peer.to_canonical();
    let is_trusted = |ip: &IpAddr| trusted.iter().any(|n| n.contains(ip));
    if !is_trusted(&peer) {
        return peer;
    }
    let Some(value) = value else { return peer };
    match header {
        RealIpHeader::CfConnectingIp | RealIpHeader::XRealIp => parse_ip(value).unwrap_or(peer),
        RealIpHeader::XForwardedFor => {
            let hops: Vec<IpAddr> = value.split(',').filter_map(parse_ip).collect();
            hops.iter().rev().find(|ip| !is_trusted(ip)).or_else(|| hops.first()).copied().unwrap_or(peer)
        }
    }
}

/// Reads the HTTP request head and answers it: 101 and the accepted upgrade, or an error status.
pub(crate) async fn accept_upgrade<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    settings: &WsSettings,
    peer: SocketAddr,
) -> Result<Upgraded, UpgradeError> {
    let result = read_and_check(stream, settings, peer).await;
    match result {
        Ok((response, upgraded)) => {
            stream.write_all(response.as_bytes()).await?;
            stream.flush().await?;
            Ok(upgraded)
        }
        Err(e) => {
            if let Some(r) = e.response() {
                let _ = stream.write_all(r.as_bytes()).await;
                let _ = stream.flush().await;
                let _ = stream.shutdown().await;
            }
            Err(e)
        }
    }
}

async fn read_and_check<S: AsyncRead + Unpin>(
    stream: &mut S,
    settings: &WsSettings,
    peer: SocketAddr,
) -> Result<(String, Upgraded), UpgradeError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(UpgradeError::Closed);
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        let mut headers = [httparse::EMPTY_HEADER; MAX_HEADERS];
        let mut req = httparse::Request::new(&mut headers);
        match req.parse(&buf) {
            Ok(httparse::Status::Complete(head_len)) => {
                let leftover = buf.get(head_len..).unwrap_or_default().to_vec();
                return check_request(&req, settings, peer, leftover);
            }
            Ok(httparse::Status::Partial) if buf.len() <= MAX_REQUEST_HEAD => {}
            Ok(httparse::Status::Partial) | Err(httparse::Error::TooManyHeaders) => return Err(UpgradeError::TooLarge),
            Err(e) => return Err(UpgradeError::Malformed(e.to_string())),
        }
    }
}

fn check_request(
    req: &httparse::Request<'_, '_>,
    settings: &WsSettings,
    peer: SocketAddr,
    leftover: Vec<u8>,
) -> Result<(String, Upgraded), UpgradeError> {
    let target = req.path.unwrap_or("");
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    if path != settings.path {
        return Err(UpgradeError::WrongPath(path.chars().take(128).collect()));
    }
    if !has_token(header(req, "Upgrade"), "websocket") || !has_token(header(req, "Connection"), "upgrade") {
        return Err(UpgradeError::NotUpgrade);
    }
    if req.method != Some("GET") {
        return Err(UpgradeError::Method(req.method.unwrap_or("?").chars().take(16).collect()));
    }
    match header(req, "Sec-WebSocket-Version") {
        Some("13") => {}
        other => return Err(UpgradeError::Version(other.unwrap_or("").chars().take(16).collect())),
    }
    let key = header(req, "Sec-WebSocket-Key").ok_or(UpgradeError::MissingKey)?;
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    let subprotocol = has_token(header(req, "Sec-WebSocket-Protocol"), carriage::SUBPROTOCOL);
    let value = real_ip_header_value(req, settings.real_ip_header);
    let ip = real_ip(peer.ip(), &settings.trusted, settings.real_ip_header, value.as_deref());
    let mut response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n"
    );
    if subprotocol {
        response.push_str("Sec-WebSocket-Protocol: ");
        response.push_str(carriage::SUBPROTOCOL);
        response.push_str("\r\n");
    }
    response.push_str("\r\n");
    let client = SocketAddr::new(ip, if ip == peer.ip().to_canonical() { peer.port() } else { 0 });
    Ok((response, Upgraded { client, leftover }))
}

/// The tungstenite configuration for players: messages and frames up to `max_message_bytes`, checked from the
/// frame header before the payload is read; unmasked client frames refused (RFC 6455 §5.1).
pub(crate) fn ws_config(max_message_bytes: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(WS_READ_BUFFER)
        .write_buffer_size(0)
        .max_write_buffer_size(RELAY_CHUNK * 4)
        .max_message_size(Some(max_message_bytes))
        .max_frame_size(Some(max_message_bytes))
        .accept_unmasked_frames(false)
}

/// A player on a WebSocket (over TCP or TLS).
pub(crate) struct WsPlayer<S> {
    ws: WebSocketStream<S>,
    shared: Arc<Shared>,
    ping_interval: Option<std::time::Duration>,
    /// The close code earned by bad input, sent by [`Player::finish`].
    fault: Option<(u16, &'static str)>,
    /// Binary messages received from and sent to this player.
    messages_in: u64,
    messages_out: u64,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> WsPlayer<S> {
    pub(crate) async fn new(stream: S, leftover: Vec<u8>, settings: &WsSettings, shared: Arc<Shared>) -> Self {
        let ws = WebSocketStream::from_partially_read(
            stream,
            leftover,
            Role::Server,
            Some(ws_config(settings.max_message_bytes)),
        )
        .await;
        Self { ws, shared, ping_interval: settings.ping_interval, fault: None, messages_in: 0, messages_out: 0 }
    }

    /// Classifies a read error, remembering the close code it earns.
    fn fault_from(&mut self, e: &WsError) -> io::Error {
        self.fault = Some(match e {
            WsError::Capacity(CapacityError::MessageTooLong { .. }) => {
                (carriage::CLOSE_MESSAGE_TOO_BIG, "message too big")
            }
            WsError::Protocol(ProtocolError::UnmaskedFrameFromClient) => {
                (carriage::CLOSE_PROTOCOL_ERROR, "unmasked frame")
            }
            _ => (carriage::CLOSE_PROTOCOL_ERROR, "protocol error"),
        });
        io::Error::new(io::ErrorKind::InvalidData, e.to_string())
    }

    async fn close(&mut self, code: u16, reason: &'static str) {
        let frame = CloseFrame { code: CloseCode::from(code), reason: reason.into() };
        let _ = tokio::time::timeout(LINGER, self.ws.close(Some(frame))).await;
        // Wait briefly for the client's Close so the TCP close does not race it.
        let _ = tokio::time::timeout(LINGER, async { while let Some(Ok(_)) = self.ws.next().await {} }).await;
    }

    fn count_in(&mut self) {
        self.messages_in += 1;
        self.shared.ws_messages_in.fetch_add(1, Ordering::Relaxed);
    }

    async fn send_binary(&mut self, data: Bytes) -> Result<(), WsError> {
        self.messages_out += 1;
        self.shared.ws_messages_out.fetch_add(1, Ordering::Relaxed);
        self.ws.send(Message::Binary(data)).await
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> Player for WsPlayer<S> {
    async fn read_some(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        loop {
            match self.ws.next().await {
                Some(Ok(Message::Binary(b))) => {
                    self.count_in();
                    if b.is_empty() {
                        continue;
                    }
                    buf.extend_from_slice(&b);
                    return Ok(b.len());
                }
                Some(Ok(Message::Text(_))) => {
                    self.fault = Some((carriage::CLOSE_UNSUPPORTED_DATA, "text messages are not supported"));
                    return Err(io::Error::new(io::ErrorKind::InvalidData, "text message"));
                }
                Some(Ok(Message::Ping(_))) => {
                    // tungstenite queued the Pong; send it now.
                    self.ws.flush().await.map_err(io::Error::other)?;
                }
                Some(Ok(Message::Pong(_) | Message::Frame(_))) => {}
                Some(Ok(Message::Close(_))) | None => return Ok(0),
                Some(Err(e)) => return Err(self.fault_from(&e)),
            }
        }
    }

    async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.send_binary(Bytes::copy_from_slice(bytes)).await.map_err(io::Error::other)
    }

    async fn finish(&mut self, how: Finish) {
        let (code, reason) = match (self.fault, how) {
            (Some(f), _) => f,
            (None, Finish::Normal) => (carriage::CLOSE_NORMAL, ""),
            (None, Finish::Shutdown) => (carriage::CLOSE_GOING_AWAY, "proxy shutting down"),
            (None, Finish::ProtocolError) => (carriage::CLOSE_PROTOCOL_ERROR, "protocol error"),
            (None, Finish::BackendUnavailable) => (carriage::CLOSE_INTERNAL_ERROR, "server unavailable"),
        };
        self.close(code, reason).await;
    }

    fn message_counts(&self) -> Option<(u64, u64)> {
        Some((self.messages_in, self.messages_out))
    }

    async fn relay(&mut self, backend: TcpStream, start: RelayStart<'_>) -> RelayReport {
        let (stall, shutdown) = (start.write_stall, start.shutdown);
        // Counting, frame following and (online mode) AES-CFB8, in place per batch, as in the TCP relay.
        let (mut up, mut down) = Direction::pair(start);
        let mut keepalive = self.ping_interval.map(|i| Keepalive::new(i, Instant::now()));
        let mut ticker = keepalive.as_ref().map(|k| {
            let mut t = tokio::time::interval_at(tokio::time::Instant::now() + k.tick_period(), k.tick_period());
            t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
            t
        });
        // Binary messages already read, written to the backend together (one write per received batch).
        let mut batch: Vec<u8> = Vec::new();
        let end = loop {
            tokio::select! {
                msg = self.ws.next() => {
                    if let Some(k) = &mut keepalive {
                        k.on_receive(Instant::now());
                    }
                    let mut msg = msg;
                    // Take every message tungstenite can hand over without waiting (those of the same read).
                    let next = loop {
                        match msg {
                            Some(Ok(Message::Binary(b))) => {
                                self.count_in();
                                if batch.is_empty() {
                                    batch = b.into();
                                } else {
                                    batch.extend_from_slice(&b);
                                }
                                if batch.len() >= RELAY_CHUNK {
                                    break None;
                                }
                                match self.ws.next().now_or_never() {
                                    Some(m) => msg = m,
                                    None => break None,
                                }
                            }
                            other => break Some(other),
                        }
                    };
                    if !batch.is_empty() {
                        up.process(&mut batch);
                        if let Err(e) = write_all(&backend, &batch, stall).await {
                            self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                            break RelayEnd::Error(Side::Backend, e);
                        }
                        batch.clear();
                        if batch.capacity() > RELAY_CHUNK {
                            batch = Vec::new();
                        }
                    }
                    match next {
                        None | Some(Some(Ok(Message::Pong(_) | Message::Frame(_)))) => {}
                        Some(Some(Ok(Message::Binary(_)))) => {} // handled above
                        Some(Some(Ok(Message::Ping(_)))) => {
                            // tungstenite queued the Pong: send it now.
                            if let Err(e) = bounded(stall, self.ws.flush()).await {
                                break RelayEnd::Error(Side::Player, e);
                            }
                            if let Some(k) = &mut keepalive {
                                k.on_write();
                            }
                        }
                        Some(Some(Ok(Message::Text(_)))) => {
                            self.close(carriage::CLOSE_UNSUPPORTED_DATA, "text messages are not supported").await;
                            break RelayEnd::Error(Side::Player, io::Error::new(io::ErrorKind::InvalidData, "text message"));
                        }
                        Some(Some(Ok(Message::Close(_))) | None) => {
                            // The player is gone: FIN to the backend, then let it finish briefly.
                            let _ = bounded(LINGER, self.ws.flush()).await;
                            let _ = socket2::SockRef::from(&backend).shutdown(std::net::Shutdown::Write);
                            discard_until_eof(&backend, LINGER).await;
                            break RelayEnd::Closed(Side::Player);
                        }
                        Some(Some(Err(e))) => {
                            let err = self.fault_from(&e);
                            let (code, reason) = self.fault.unwrap_or((carriage::CLOSE_PROTOCOL_ERROR, "protocol error"));
                            self.close(code, reason).await;
                            break RelayEnd::Error(Side::Player, err);
                        }
                    }
                }
                r = backend.readable() => {
                    if let Err(e) = r {
                        break RelayEnd::Error(Side::Backend, e);
                    }
                    let data = match read_batch(&backend, &mut down) {
                        Ok(Some(d)) => d,
                        Ok(None) => continue,
                        Err(e) => {
                            self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                            break RelayEnd::Error(Side::Backend, e);
                        }
                    };
                    if data.is_empty() {
                        // Backend FIN: close 1000, then the TCP close.
                        self.close(carriage::CLOSE_NORMAL, "").await;
                        break RelayEnd::Closed(Side::Backend);
                    }
                    self.messages_out += 1;
                    self.shared.ws_messages_out.fetch_add(1, Ordering::Relaxed);
                    if let Err(e) = bounded(stall, self.ws.send(Message::Binary(data))).await {
                        break RelayEnd::Error(Side::Player, e);
                    }
                    if let Some(k) = &mut keepalive {
                        k.on_write();
                    }
                }
                () = tick(&mut ticker) => {
                    let Some(k) = &mut keepalive else { continue };
                    match k.on_tick(Instant::now()) {
                        KeepaliveAction::None => {}
                        KeepaliveAction::Ping => {
                            if let Err(e) = bounded(stall, self.ws.send(Message::Ping(Bytes::new()))).await {
                                break RelayEnd::Error(Side::Player, e);
                            }
                        }
                        KeepaliveAction::Dead => {
                            self.close(carriage::CLOSE_GOING_AWAY, "no traffic").await;
                            break RelayEnd::Error(Side::Player, io::Error::new(io::ErrorKind::TimedOut, "no traffic for 3 ping intervals"));
                        }
                    }
                }
                () = shutdown.cancelled() => {
                    let at_boundary = down.at_frame_boundary();
                    let _ = tokio::time::timeout(SHUTDOWN_FLUSH_TIMEOUT, async {
                        if at_boundary {
                            let mut disconnect = shutdown_disconnect_frame();
                            down.seal(&mut disconnect);
                            let _ = self.send_binary(Bytes::from(disconnect)).await;
                        }
                        self.close(carriage::CLOSE_GOING_AWAY, "proxy shutting down").await;
                    })
                    .await;
                    break RelayEnd::Shutdown;
                }
            }
        };
        RelayReport { up: up.bytes, down: down.bytes, end }
    }
}

/// Runs a write to the player, failing with `TimedOut` when it makes no progress for `stall`.
async fn bounded<T>(
    stall: std::time::Duration,
    write: impl std::future::Future<Output = Result<T, WsError>>,
) -> io::Result<T> {
    match tokio::time::timeout(stall, write).await {
        Ok(r) => r.map_err(io::Error::other),
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("player accepted no data for {}s (limits.write_stall_timeout_seconds)", stall.as_secs()),
        )),
    }
}

/// Completes at the next keepalive tick; never when keepalive is off.
async fn tick(ticker: &mut Option<Interval>) {
    match ticker {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

/// Reads one batch from the backend: `Some(empty)` at EOF, `None` when nothing was ready after all. The batch
/// goes through `down` (counted, frames followed, encrypted in online mode) in the scratch buffer, before the
/// one copy into the message.
fn read_batch(backend: &TcpStream, down: &mut Direction) -> io::Result<Option<Bytes>> {
    crate::relay::with_scratch(|buf| match crate::relay::read_clearing(backend, buf) {
        Ok(n) => {
            let data = buf.get_mut(..n).unwrap_or_default();
            down.process(data);
            Ok(Some(Bytes::copy_from_slice(data)))
        }
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
        Err(e) => Err(e),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> Vec<IpNet> {
        list.iter().map(|s| s.parse().unwrap()).collect()
    }

    #[test]
    fn untrusted_peers_cannot_spoof() {
        let peer: IpAddr = "198.51.100.9".parse().unwrap();
        let ip = real_ip(peer, &nets(&["10.0.0.0/8"]), RealIpHeader::CfConnectingIp, Some("203.0.113.7"));
        assert_eq!(ip, peer);
    }

    #[test]
    fn trusted_peers_are_believed() {
        let peer: IpAddr = "10.1.2.3".parse().unwrap();
        let t = nets(&["10.0.0.0/8"]);
        assert_eq!(real_ip(peer, &t, RealIpHeader::CfConnectingIp, Some(" 203.0.113.7 ")).to_string(), "203.0.113.7");
        assert_eq!(real_ip(peer, &t, RealIpHeader::XRealIp, Some("2001:db8::1")).to_string(), "2001:db8::1");
        assert_eq!(real_ip(peer, &t, RealIpHeader::CfConnectingIp, Some("garbage")), peer);
        assert_eq!(real_ip(peer, &t, RealIpHeader::CfConnectingIp, None), peer);
    }

    #[test]
    fn x_forwarded_for_takes_the_rightmost_untrusted_hop() {
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let t = nets(&["10.0.0.0/8", "192.0.2.0/24"]);
        let h = RealIpHeader::XForwardedFor;
        // The client may prepend anything; only hops appended by trusted proxies count.
        assert_eq!(real_ip(peer, &t, h, Some("6.6.6.6, 203.0.113.7, 192.0.2.10")).to_string(), "203.0.113.7");
        assert_eq!(real_ip(peer, &t, h, Some("203.0.113.7:4711")).to_string(), "203.0.113.7");
        assert_eq!(real_ip(peer, &t, h, Some("[2001:db8::2]:1, 10.9.9.9")).to_string(), "2001:db8::2");
        assert_eq!(real_ip(peer, &t, h, Some("10.2.2.2, 10.3.3.3")).to_string(), "10.2.2.2");
    }

    #[test]
    fn repeated_forwarding_headers_cannot_hide_the_real_hop() {
        // A client line first, then the line a trusted proxy appended.
        let mut headers = [
            httparse::Header { name: "X-Forwarded-For", value: b"6.6.6.6" },
            httparse::Header { name: "x-forwarded-for", value: b"203.0.113.7" },
            httparse::Header { name: "CF-Connecting-IP", value: b"6.6.6.6" },
            httparse::Header { name: "CF-Connecting-IP", value: b"203.0.113.9" },
        ];
        let mut req = httparse::Request::new(&mut headers);
        req.method = Some("GET");
        let xff = real_ip_header_value(&req, RealIpHeader::XForwardedFor);
        assert_eq!(xff.as_deref(), Some("6.6.6.6,203.0.113.7"));
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let t = nets(&["10.0.0.0/8"]);
        assert_eq!(real_ip(peer, &t, RealIpHeader::XForwardedFor, xff.as_deref()).to_string(), "203.0.113.7");
        let cf = real_ip_header_value(&req, RealIpHeader::CfConnectingIp);
        assert_eq!(cf.as_deref(), Some("203.0.113.9"));
        assert_eq!(real_ip_header_value(&req, RealIpHeader::XRealIp), None);
    }

    #[test]
    fn ipv4_mapped_addresses_are_canonical() {
        let peer: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(
            real_ip(peer, &nets(&["127.0.0.1/32"]), RealIpHeader::XRealIp, Some("::ffff:203.0.113.7")).to_string(),
            "203.0.113.7"
        );
    }
}
