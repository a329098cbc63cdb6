//! The I/O loop of a WebSocket connection (carriage v1, and v2 with its acks and retention): each batch one
//! Binary message (zstd-compressed under `moonbridge.v2.zstd`; a larger batch several, of at most 1 MiB, each in
//! frames of at most 64 KiB), Pings answered at once, keepalive Pings sent.

use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_util::{SinkExt, StreamExt};
use moonbridge_protocol::ws::compress::{CompressError, Contexts, DEFAULT_LEVEL};
use moonbridge_protocol::ws::v2::{self, AckSchedule, Control, ResumeToken, Retained};
use moonbridge_protocol::ws::{self as carriage, Keepalive, KeepaliveAction};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::error::ProtocolError;
use tokio_tungstenite::tungstenite::protocol::frame::coding::{Data, OpCode};
use tokio_tungstenite::tungstenite::protocol::frame::Frame;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use super::wait::{
    aged_cutoff, closing_flag, sleep_until, tick_deadline, wait_for_space, write_or_abandon, Scanners, Wake,
    CLOSE_LINGER,
};
use crate::connect::Stream;
use crate::error::ClientError;
use crate::shared::{bump, Shared};

/// The longest resume window the library waits for, whatever the proxy announces, in seconds.
pub(super) const MAX_RESUME_WINDOW_SECONDS: u64 = 3600;

/// Bytes of sent data kept for a resume before the library stops taking batches until the proxy's `ack`
/// (it acknowledges every 64 KiB, so this is only reached when the proxy stops reading).
pub(crate) const MAX_RETAINED_BYTES: usize = 4 * 1024 * 1024;

/// Carriage v2 state of a session, kept across its WebSocket connections (`docs/carriage.md`).
pub(super) struct Resume {
    /// The token of the next resume, once the proxy sent `session`.
    pub(super) token: Option<ResumeToken>,
    /// How long the proxy waits for a resume after a drop.
    pub(super) window: Duration,
    /// Stream bytes received from the proxy in all.
    pub(super) received: u64,
    /// What was sent and the proxy has not acknowledged.
    pub(super) retained: Retained,
    pub(super) acks: AckSchedule,
}

impl Resume {
    pub(super) fn new() -> Self {
        Self {
            token: None,
            window: Duration::ZERO,
            received: 0,
            retained: Retained::starting_at(0),
            acks: AckSchedule::paced(0),
        }
    }

    /// Bytes sent in all.
    pub(super) fn sent(&self) -> u64 {
        self.retained.end()
    }
}

pub(super) fn close_frame(code: u16, reason: &'static str) -> CloseFrame {
    CloseFrame { code: code.into(), reason: reason.into() }
}

/// Sorts a WebSocket error: the server broke the protocol, or the transport failed.
pub(super) fn ws_error(e: WsError) -> ClientError {
    match e {
        WsError::Protocol(_) | WsError::Capacity(_) | WsError::Utf8(_) => ClientError::Protocol(e.to_string()),
        e => ClientError::Io(e.to_string()),
    }
}

/// The close code for a read error the server caused (RFC 6455 §7.4.1): 1009 for a message or frame over the
/// library's limit, 1007 for a Text message that is not UTF-8, 1002 for any other protocol error; `None` for a
/// transport failure (nothing can be sent then).
pub(super) fn refusal_code(e: &WsError) -> Option<u16> {
    match e {
        WsError::Capacity(_) => Some(carriage::CLOSE_MESSAGE_TOO_BIG),
        WsError::Utf8(_) => Some(carriage::CLOSE_INVALID_PAYLOAD),
        WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => None,
        WsError::Protocol(_) => Some(carriage::CLOSE_PROTOCOL_ERROR),
        _ => None,
    }
}

/// The reason sent with [`refusal_code`]'s code.
fn refusal_reason(code: u16) -> &'static str {
    match code {
        carriage::CLOSE_MESSAGE_TOO_BIG => "message too big",
        carriage::CLOSE_INVALID_PAYLOAD => "invalid UTF-8",
        _ => "protocol error",
    }
}

/// How a WebSocket connection of a session ended.
pub(super) enum WsEnd {
    /// The session is over (an orderly close, a refusal, bad input, `close`).
    End(ClientError),
    /// The connection was lost without a Minecraft disconnect: a carriage v2 session may resume.
    Lost(ClientError),
    /// The proxy is draining and sent `move <ticket>`: nothing more comes on this connection until the move is
    /// done (the connection is then closed) or refused (the client sends `stay` and goes on here).
    Move(ResumeToken),
    /// The instance reached is draining and sent the client on (close 4007) before its session started there:
    /// connect again and send everything again (nothing was received).
    SentOn(ClientError),
}

/// Sorts an error of an established WebSocket: the transport was lost (may resume), or the peer broke the
/// protocol (ends).
pub(super) fn ws_loss(e: WsError) -> WsEnd {
    match e {
        WsError::Io(_)
        | WsError::ConnectionClosed
        | WsError::AlreadyClosed
        | WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => WsEnd::Lost(ws_error(e)),
        e => WsEnd::End(ws_error(e)),
    }
}

/// A write failed: lost, unless the game asked to close (then the session is over).
pub(super) fn write_loss(e: ClientError) -> WsEnd {
    match e {
        ClientError::Closed => WsEnd::End(e),
        e => WsEnd::Lost(e),
    }
}

/// Most stream bytes one compressed message from the proxy may inflate to (the proxy sends one backend read,
/// at most 256 KiB, per message): 16 MiB. Past it the connection closes with 1009.
pub(crate) const MAX_INFLATED_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The zstd contexts of one `moonbridge.v2.zstd` connection (each connection starts new streams), each made on
/// first use and freed when its direction goes quiet ([`Contexts`]: at a keepalive tick).
pub(super) struct WsZstd {
    pub(super) ctx: Contexts,
    /// Where a message inflates before it is delivered (its capacity is reused).
    pub(super) scratch: Vec<u8>,
}

impl WsZstd {
    /// The contexts for `stream`, when it selected `moonbridge.v2.zstd`.
    pub(super) fn for_stream(stream: &Stream) -> Result<Option<Self>, ClientError> {
        if !stream.zstd() {
            return Ok(None);
        }
        Ok(Some(Self { ctx: Contexts::new(DEFAULT_LEVEL), scratch: Vec::new() }))
    }

    /// Inflates one whole message from the proxy into `scratch`.
    pub(super) fn inflate_message(&mut self, payload: &[u8]) -> Result<&[u8], CompressError> {
        self.scratch.clear();
        self.ctx.queue(payload)?;
        while self.ctx.has_output() {
            self.ctx.inflate(&mut self.scratch, MAX_INFLATED_MESSAGE_BYTES, MAX_INFLATED_MESSAGE_BYTES)?;
        }
        self.ctx.end_message();
        Ok(&self.scratch)
    }
}

/// Stream bytes per message on a `moonbridge.v2.zstd` connection: 1 MiB less 8 KiB, so a compressed message
/// stays under [`carriage::MAX_SENT_MESSAGE`] even when nothing shrinks (zstd's stored blocks add 3 bytes per
/// 128 KiB, and a frame header).
pub(crate) const MAX_ZSTD_MESSAGE_STREAM_BYTES: usize = carriage::MAX_SENT_MESSAGE - 8 * 1024;

/// Queues `batch` on `ws` as Binary messages of at most [`carriage::MAX_SENT_MESSAGE`] stream bytes each (at
/// most [`MAX_ZSTD_MESSAGE_STREAM_BYTES`] compressed with `moonbridge.v2.zstd`), counting them; a message over
/// [`carriage::MAX_SENT_FRAME_PAYLOAD`] goes as a Binary frame and Continuation frames (RFC 6455 §5.4). The
/// caller flushes.
pub(super) async fn feed_batch<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    batch: &Bytes,
    zstd: &mut Option<WsZstd>,
    shared: &Shared,
) -> Result<(), ClientError> {
    let largest = if zstd.is_some() { MAX_ZSTD_MESSAGE_STREAM_BYTES } else { carriage::MAX_SENT_MESSAGE };
    let mut rest = batch.clone();
    while !rest.is_empty() {
        let chunk = rest.split_to(rest.len().min(largest));
        let mut payload = match zstd {
            Some(z) => {
                let mut out = Vec::new();
                z.ctx.compress(&chunk, &mut out).map_err(|e| ClientError::Io(e.to_string()))?;
                Bytes::from(out)
            }
            None => chunk,
        };
        bump(&shared.counters.messages_out, 1);
        if payload.len() <= carriage::MAX_SENT_FRAME_PAYLOAD {
            write_or_abandon(shared, ws.feed(Message::Binary(payload))).await?;
            continue;
        }
        let mut opcode = OpCode::Data(Data::Binary);
        while !payload.is_empty() {
            let piece = payload.split_to(payload.len().min(carriage::MAX_SENT_FRAME_PAYLOAD));
            let frame = Frame::message(piece, opcode, payload.is_empty());
            write_or_abandon(shared, ws.feed(Message::Frame(frame))).await?;
            opcode = OpCode::Data(Data::Continue);
        }
    }
    Ok(())
}

pub(super) async fn run_ws<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    shared: &Shared,
    mut resume: Option<&mut Resume>,
    zstd: &mut Option<WsZstd>,
) -> WsEnd {
    let mut scanners = Scanners::new();
    let interval =
        shared.options.ping_interval().map(|i| if resume.is_some() { i.min(v2::MAX_PING_INTERVAL) } else { i });
    let mut keepalive = interval.map(|i| Keepalive::new(i, Instant::now()));
    // One timer for the whole connection, re-armed at each keepalive tick (not a new timer per wake-up).
    let tick = tokio::time::sleep_until(tick_deadline(keepalive.as_ref()));
    tokio::pin!(tick);
    loop {
        let delay = shared.delay_deadline();
        let paused = shared.is_paused();
        let wake = tokio::select! {
            () = shared.out_ready.notified() => Wake::Outbound,
            () = sleep_until(delay) => Wake::Delay,
            () = wait_for_space(shared), if paused => Wake::Space,
            () = &mut tick, if keepalive.is_some() => {
                let Some(k) = &mut keepalive else { continue };
                if paused {
                    // Not reading is our own backpressure, not the server's silence.
                    k.on_receive(Instant::now());
                }
                let action = k.on_tick(Instant::now());
                tick.as_mut().reset(tick_deadline(Some(k)));
                match action {
                    KeepaliveAction::None => {}
                    KeepaliveAction::Ping => {
                        bump(&shared.counters.pings_sent, 1);
                        if let Err(e) = write_or_abandon(shared, ws.send(Message::Ping(Bytes::new()))).await {
                            return write_loss(e);
                        }
                    }
                    KeepaliveAction::Dead => {
                        let _ = tokio::time::timeout(Duration::from_millis(100), ws.close(Some(close_frame(carriage::CLOSE_GOING_AWAY, "no traffic")))).await;
                        let silent = interval.map_or(0, |i| i.as_millis() as u64 * 3);
                        return WsEnd::Lost(ClientError::Dead(silent));
                    }
                }
                // The quiet-spell rule of moonbridge.v2.zstd: a direction quiet for a tick ends its zstd frame.
                match zstd.as_mut().map(|z| z.ctx.on_tick()).transpose() {
                    Ok(Some(Some(end))) => {
                        bump(&shared.counters.messages_out, 1);
                        if let Err(e) = write_or_abandon(shared, ws.send(Message::Binary(end.into()))).await {
                            return write_loss(e);
                        }
                    }
                    Ok(_) => {}
                    Err(e) => return WsEnd::End(ClientError::Io(e.to_string())),
                }
                if let Some(r) = resume.as_deref_mut() {
                    if let Some(n) = r.acks.on_tick(r.received) {
                        if let Err(e) = write_or_abandon(shared, ws.send(Message::Text(Control::Ack(n).encode().into()))).await {
                            return write_loss(e);
                        }
                    }
                }
                continue;
            }
            m = ws.next(), if !paused => {
                if let Some(k) = &mut keepalive {
                    k.on_receive(Instant::now());
                }
                match m {
                    Some(Ok(Message::Binary(payload))) => {
                        bump(&shared.counters.messages_in, 1);
                        let b: &[u8] = match zstd {
                            None => &payload,
                            Some(z) => match z.inflate_message(&payload) {
                                Ok(b) => b,
                                Err(e) => {
                                    let code = match e {
                                        CompressError::TooLarge { .. } => carriage::CLOSE_MESSAGE_TOO_BIG,
                                        _ => carriage::CLOSE_PROTOCOL_ERROR,
                                    };
                                    let _ = write_or_abandon(shared, ws.close(Some(close_frame(code, "bad compressed message")))).await;
                                    return WsEnd::End(ClientError::Protocol(format!("the server's message: {e}")));
                                }
                            },
                        };
                        bump(&shared.counters.bytes_in, b.len() as u64);
                        Scanners::count(&mut scanners.inb, b, &shared.counters.frames_in);
                        shared.deliver(b);
                        if let Some(r) = resume.as_deref_mut() {
                            r.received += b.len() as u64;
                            if let Some(n) = r.acks.on_data(r.received) {
                                if let Err(e) = write_or_abandon(shared, ws.send(Message::Text(Control::Ack(n).encode().into()))).await {
                                    return write_loss(e);
                                }
                            }
                        }
                        continue;
                    }
                    Some(Ok(Message::Ping(_))) => {
                        // tungstenite queued the Pong: send it now, whatever the game thread is doing.
                        if let Err(e) = write_or_abandon(shared, ws.flush()).await {
                            return write_loss(e);
                        }
                        if let Some(k) = &mut keepalive {
                            k.on_write();
                        }
                        continue;
                    }
                    Some(Ok(Message::Pong(_) | Message::Frame(_))) => continue,
                    Some(Ok(Message::Text(t))) => {
                        let control = resume.as_deref_mut().map(|r| (Control::parse(t.as_bytes()), r));
                        match control {
                            // Only after `session`: a move needs the counts and the token of a session in play.
                            Some((Ok(Control::Move { ticket }), r)) if r.token.is_some() => {
                                return WsEnd::Move(ticket);
                            }
                            Some((Ok(Control::Session { token, window_seconds }), r)) => {
                                r.token = Some(token);
                                r.window = Duration::from_secs(window_seconds.min(MAX_RESUME_WINDOW_SECONDS));
                                continue;
                            }
                            // An acknowledgement frees retained bytes: batches may leave again.
                            Some((Ok(Control::Ack(n)), r)) => {
                                if let Err(e) = r.retained.ack(n) {
                                    let _ = write_or_abandon(shared, ws.close(Some(close_frame(carriage::CLOSE_PROTOCOL_ERROR, "bad ack")))).await;
                                    return WsEnd::End(ClientError::Protocol(format!("the server's ack is wrong: {e}")));
                                }
                                Wake::Space
                            }
                            _ => {
                                let _ = write_or_abandon(shared, ws.close(Some(close_frame(carriage::CLOSE_UNSUPPORTED_DATA, "text message")))).await;
                                return WsEnd::End(ClientError::Protocol("the server sent an unexpected text message".into()));
                            }
                        }
                    }
                    Some(Ok(Message::Close(frame))) => {
                        let _ = write_or_abandon(shared, ws.flush()).await;
                        let (code, reason) = frame.map_or((None, String::new()), |f| (Some(u16::from(f.code)), f.reason.to_string()));
                        let e = ClientError::ClosedByPeer { code, reason };
                        // 1001: the proxy's side went away (a CDN edge restarting, or it found us silent).
                        return match code {
                            Some(carriage::CLOSE_GOING_AWAY) => WsEnd::Lost(e),
                            // A draining instance sends a new session on before it starts there.
                            Some(v2::CLOSE_DRAINING) if resume.as_ref().is_some_and(|r| r.token.is_none() && r.received == 0) => WsEnd::SentOn(e),
                            _ => WsEnd::End(e),
                        };
                    }
                    Some(Err(e)) => {
                        // The server broke the carriage (a message over the limit, bad UTF-8, a bad frame): the
                        // close code RFC 6455 §7.4.1 gives it, then the session ends.
                        if let Some(code) = refusal_code(&e) {
                            let _ = write_or_abandon(shared, ws.close(Some(close_frame(code, refusal_reason(code))))).await;
                        }
                        return ws_loss(e);
                    }
                    None => return WsEnd::Lost(ClientError::ClosedByPeer { code: None, reason: String::new() }),
                }
            }
        };
        let aged = aged_cutoff(&wake, shared);
        // Sent bytes are kept until acknowledged; at the bound, batches wait for the proxy's ack.
        let full = resume.as_deref().is_some_and(|r| r.retained.len() >= MAX_RETAINED_BYTES) && !closing_flag(shared);
        let (batches, closing) =
            if full { (Vec::new(), closing_flag(shared)) } else { shared.take_ready(closing_flag(shared), aged) };
        if !batches.is_empty() {
            // Every batch taken is retained before any is written: if a write fails, the rest is replayed.
            if let Some(r) = resume.as_deref_mut() {
                for b in &batches {
                    r.retained.push(b.clone());
                }
            }
            let mut written = 0;
            for b in &batches {
                Scanners::count(&mut scanners.out, b, &shared.counters.frames_out);
                if let Err(e) = feed_batch(ws, b, zstd, shared).await {
                    shared.written(batches.iter().map(Bytes::len).sum());
                    return write_loss(e);
                }
                written += b.len();
                bump(&shared.counters.bytes_out, b.len() as u64);
            }
            if let Err(e) = write_or_abandon(shared, ws.flush()).await {
                shared.written(written);
                return write_loss(e);
            }
            if let Some(k) = &mut keepalive {
                k.on_write();
            }
            shared.written(written);
        }
        if closing {
            let _ = write_or_abandon(shared, ws.close(Some(close_frame(carriage::CLOSE_NORMAL, "")))).await;
            let _ = tokio::time::timeout(CLOSE_LINGER, async { while let Some(Ok(_)) = ws.next().await {} }).await;
            return WsEnd::End(ClientError::Closed);
        }
    }
}
