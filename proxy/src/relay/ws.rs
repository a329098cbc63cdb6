//! The WebSocket side of a session (carriage version 1, see [`moonbridge_protocol::ws`]): where a WebSocket
//! message becomes backend bytes and backend bytes become a message, in every stage.
//!
//! - Binary messages carry the Minecraft stream: their payloads are the bytes, whatever the message sizes.
//! - A Ping is answered at once (tungstenite queues the Pong; it is flushed here). Pongs are ignored.
//! - A Text message closes with 1003, a message over `max_ws_message_bytes` with 1009 (tungstenite refuses it
//!   from the frame header, before buffering it), an unmasked or malformed frame with 1002.
//! - In the relay, every backend read batch leaves as one Binary message, the keepalive sends a Ping after
//!   `ping_interval` without writing and closes with 1001 after three intervals without receiving anything,
//!   the backend's FIN becomes Close 1000, and the player's Close (or a lost connection) becomes a FIN to the
//!   backend.

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::{FutureExt, SinkExt, StreamExt};
use moonbridge_protocol::ws::{self as carriage, Keepalive, KeepaliveAction};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::error::{CapacityError, ProtocolError};
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::{CloseFrame, WebSocketConfig};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use super::{
    discard_until_eof, inject_shutdown, read_batch, within_stall, write_all, Direction, PlayerSink, RelayEnd,
    RelayReport, RelayStart, Side, LINGER, RELAY_CHUNK,
};

/// tungstenite's read buffer per connection, in bytes. Player → proxy traffic is small (a tick's packets), and
/// tungstenite zero-fills this much before every read, so a small buffer is cheaper per read and per idle
/// connection; a larger message is still read whole (in several reads) up to `max_ws_message_bytes`.
const WS_READ_BUFFER: usize = 4 * 1024;

/// The tungstenite configuration for players: messages and frames up to `max_message_bytes`, checked from the
/// frame header before the payload is read; unmasked client frames refused (RFC 6455 §5.1); writes not
/// buffered beyond what the socket does not take at once.
pub(crate) fn ws_config(max_message_bytes: usize) -> WebSocketConfig {
    WebSocketConfig::default()
        .read_buffer_size(WS_READ_BUFFER)
        .write_buffer_size(0)
        .max_write_buffer_size(RELAY_CHUNK * 4)
        .max_message_size(Some(max_message_bytes))
        .max_frame_size(Some(max_message_bytes))
        .accept_unmasked_frames(false)
}

/// WebSocket messages received from and sent to players, over every listener.
#[derive(Debug, Default)]
pub(crate) struct MessageCounters {
    pub(crate) received: AtomicU64,
    pub(crate) sent: AtomicU64,
}

/// A player's WebSocket (over TCP or TLS) and what the session needs to know about it.
pub(crate) struct WsLink<S> {
    ws: WebSocketStream<S>,
    counters: Arc<MessageCounters>,
    ping_interval: Option<Duration>,
    /// The close code earned by bad input, sent when the session finishes.
    pub(crate) fault: Option<(u16, &'static str)>,
    /// Binary messages received from and sent to this player.
    pub(crate) messages_in: u64,
    pub(crate) messages_out: u64,
}

/// What one received message means for the Minecraft stream.
enum Incoming {
    /// Stream bytes (possibly none).
    Data(Bytes),
    /// A Ping: the queued Pong must be flushed now.
    Ping,
    /// Nothing for the stream (a Pong, a raw frame).
    Nothing,
    /// The player closed (Close message) or the connection ended.
    Closed,
    /// The player broke the carriage: close with this code and reason.
    Fault(u16, &'static str, io::Error),
}

/// Classifies a message off the socket; the one place carriage rules for incoming messages live.
fn incoming(msg: Option<Result<Message, WsError>>) -> Incoming {
    match msg {
        Some(Ok(Message::Binary(b))) => Incoming::Data(b),
        Some(Ok(Message::Ping(_))) => Incoming::Ping,
        Some(Ok(Message::Pong(_) | Message::Frame(_))) => Incoming::Nothing,
        Some(Ok(Message::Text(_))) => Incoming::Fault(
            carriage::CLOSE_UNSUPPORTED_DATA,
            "text messages are not supported",
            io::Error::new(io::ErrorKind::InvalidData, "text message"),
        ),
        Some(Ok(Message::Close(_))) | None => Incoming::Closed,
        Some(Err(e)) => {
            let (code, reason) = match &e {
                WsError::Capacity(CapacityError::MessageTooLong { .. }) => {
                    (carriage::CLOSE_MESSAGE_TOO_BIG, "message too big")
                }
                WsError::Protocol(ProtocolError::UnmaskedFrameFromClient) => {
                    (carriage::CLOSE_PROTOCOL_ERROR, "unmasked frame")
                }
                _ => (carriage::CLOSE_PROTOCOL_ERROR, "protocol error"),
            };
            Incoming::Fault(code, reason, io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> WsLink<S> {
    /// Starts the WebSocket protocol on an upgraded stream; `leftover` are bytes read after the request head.
    pub(crate) async fn new(
        stream: S,
        leftover: Vec<u8>,
        ping_interval: Option<Duration>,
        max_message_bytes: usize,
        counters: Arc<MessageCounters>,
    ) -> Self {
        let ws = WebSocketStream::from_partially_read(
            stream,
            leftover,
            tokio_tungstenite::tungstenite::protocol::Role::Server,
            Some(ws_config(max_message_bytes)),
        )
        .await;
        Self { ws, counters, ping_interval, fault: None, messages_in: 0, messages_out: 0 }
    }

    fn count_in(&mut self) {
        self.messages_in += 1;
        self.counters.received.fetch_add(1, Ordering::Relaxed);
    }

    /// Sends stream bytes as one Binary message.
    pub(crate) async fn send_binary(&mut self, data: Bytes) -> Result<(), WsError> {
        self.messages_out += 1;
        self.counters.sent.fetch_add(1, Ordering::Relaxed);
        self.ws.send(Message::Binary(data)).await
    }

    /// Reads stream bytes into `buf` (appending), answering Pings on the way: `Ok(0)` when the player closed.
    /// Bad input is an error, and [`WsLink::fault`] holds the close code it earned.
    pub(crate) async fn read_stream(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        loop {
            match incoming(self.ws.next().await) {
                Incoming::Data(b) => {
                    self.count_in();
                    if b.is_empty() {
                        continue;
                    }
                    buf.extend_from_slice(&b);
                    return Ok(b.len());
                }
                Incoming::Ping => self.ws.flush().await.map_err(io::Error::other)?,
                Incoming::Nothing => {}
                Incoming::Closed => return Ok(0),
                Incoming::Fault(code, reason, e) => {
                    self.fault = Some((code, reason));
                    return Err(e);
                }
            }
        }
    }

    /// Sends a Close with `code` (the fault's code when bad input earned one) and waits briefly for the
    /// player's Close, so the TCP close does not race it.
    pub(crate) async fn close(&mut self, code: u16, reason: &'static str) {
        let (code, reason) = self.fault.unwrap_or((code, reason));
        let frame = CloseFrame { code: CloseCode::from(code), reason: reason.into() };
        let _ = tokio::time::timeout(LINGER, self.ws.close(Some(frame))).await;
        let _ = tokio::time::timeout(LINGER, async { while let Some(Ok(_)) = self.ws.next().await {} }).await;
    }

    /// Relays the WebSocket ⇄ `backend` until either side ends (see the module documentation).
    pub(crate) async fn relay(&mut self, backend: &TcpStream, start: RelayStart<'_>) -> RelayReport {
        let shutdown = start.shutdown;
        // Counting, frame following and (online mode) AES-CFB8, in place per batch, as in the TCP relay.
        let (mut up, mut down) = Direction::pair(start);
        let stall = up.stall;
        let mut keepalive = self.ping_interval.map(|i| Keepalive::new(i, Instant::now()));
        // One timer for the whole relay, re-armed at each keepalive tick (not a new timer per message).
        let tick = tokio::time::sleep_until(tick_deadline(keepalive.as_ref()));
        tokio::pin!(tick);
        // Binary messages already read, written to the backend together (one write per received batch).
        let mut batch: Vec<u8> = Vec::new();
        let end = loop {
            tokio::select! {
                msg = self.ws.next() => {
                    if let Some(k) = &mut keepalive {
                        k.on_receive(Instant::now());
                    }
                    // Take every message tungstenite can hand over without waiting (those of the same read).
                    let mut next = incoming(msg);
                    while let Incoming::Data(b) = next {
                        self.count_in();
                        if batch.is_empty() {
                            batch = b.into();
                        } else {
                            batch.extend_from_slice(&b);
                        }
                        if batch.len() >= RELAY_CHUNK {
                            next = Incoming::Nothing;
                            break;
                        }
                        next = match self.ws.next().now_or_never() {
                            Some(m) => incoming(m),
                            None => Incoming::Nothing,
                        };
                    }
                    if !batch.is_empty() {
                        up.process(&mut batch);
                        if let Err(e) = write_all(backend, &batch, stall, Side::Backend).await {
                            self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                            break RelayEnd::Error(Side::Backend, e);
                        }
                        batch.clear();
                        if batch.capacity() > RELAY_CHUNK {
                            batch = Vec::new();
                        }
                    }
                    match next {
                        Incoming::Data(_) | Incoming::Nothing => {}
                        Incoming::Ping => {
                            // tungstenite queued the Pong: send it now.
                            if let Err(e) = within_stall(stall, Side::Player, async { self.ws.flush().await.map_err(io::Error::other) }).await {
                                break RelayEnd::Error(Side::Player, e);
                            }
                            if let Some(k) = &mut keepalive {
                                k.on_write();
                            }
                        }
                        Incoming::Fault(code, reason, e) => {
                            self.fault = Some((code, reason));
                            self.close(code, reason).await;
                            break RelayEnd::Error(Side::Player, e);
                        }
                        Incoming::Closed => {
                            // The player is gone: FIN to the backend, then let it finish briefly.
                            let _ = tokio::time::timeout(LINGER, self.ws.flush()).await;
                            let _ = socket2::SockRef::from(backend).shutdown(std::net::Shutdown::Write);
                            discard_until_eof(backend, LINGER).await;
                            break RelayEnd::Closed(Side::Player);
                        }
                    }
                }
                r = backend.readable() => {
                    if let Err(e) = r {
                        break RelayEnd::Error(Side::Backend, e);
                    }
                    // One copy, out of the scratch buffer into the message.
                    let data = match read_batch(backend, &mut down, |d| Bytes::copy_from_slice(d)) {
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
                    if let Err(e) = within_stall(stall, Side::Player, async { self.send_binary(data).await.map_err(io::Error::other) }).await {
                        break RelayEnd::Error(Side::Player, e);
                    }
                    if let Some(k) = &mut keepalive {
                        k.on_write();
                    }
                }
                () = &mut tick, if keepalive.is_some() => {
                    let Some(k) = &mut keepalive else { continue };
                    let action = k.on_tick(Instant::now());
                    tick.as_mut().reset(tick_deadline(Some(k)));
                    match action {
                        KeepaliveAction::None => {}
                        KeepaliveAction::Ping => {
                            if let Err(e) = within_stall(stall, Side::Player, async { self.ws.send(Message::Ping(Bytes::new())).await.map_err(io::Error::other) }).await {
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
                    inject_shutdown(self, &mut down).await;
                    self.close(carriage::CLOSE_GOING_AWAY, "proxy shutting down").await;
                    break RelayEnd::Shutdown;
                }
            }
        };
        RelayReport { up: up.bytes, down: down.bytes, end }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> PlayerSink for WsLink<S> {
    async fn drain(&mut self, _down: &mut Direction) -> io::Result<()> {
        Ok(()) // every batch left as a whole message
    }

    async fn send(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        self.send_binary(Bytes::from(bytes)).await.map_err(io::Error::other)
    }
}

/// When the keepalive timer fires next: at the schedule's next tick, or now when there is no keepalive (the
/// timer's branch is disabled then).
fn tick_deadline(keepalive: Option<&Keepalive>) -> tokio::time::Instant {
    keepalive.map_or_else(tokio::time::Instant::now, |k| tokio::time::Instant::from_std(k.next_tick()))
}
