//! The I/O thread of a connection: one thread per connection running a single-threaded tokio runtime. It
//! connects, then does all socket work: writes each batch as one WebSocket message (or one TCP write),
//! flushes batches that waited `max_delay_ms`, reads in large chunks, answers Pings at once and sends its
//! own keepalive Pings ([`Keepalive`], the schedule the proxy uses too). Every write is bounded by
//! [`WRITE_STALL_TIMEOUT`] and by the close grace period, so the thread never blocks forever.

use std::sync::atomic::AtomicU64;
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use moonbridge_protocol::ws::{self as carriage, Keepalive, KeepaliveAction};
use moonbridge_protocol::FrameScanner;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use crate::connect::{establish, Stream};
use crate::error::ClientError;
use crate::shared::{bump, lock, Shared};
use crate::target::Target;

/// Largest single TCP read, in bytes.
const TCP_READ_CHUNK: usize = 256 * 1024;
/// Largest WebSocket message sent, in bytes: every proxy accepts it (one 2 MiB frame with its 3-byte prefix,
/// [`carriage::MAX_MESSAGE_FOR_ONE_FRAME`]), so a larger batch is split, never refused.
pub const MAX_WS_MESSAGE_BYTES: usize = carriage::MAX_MESSAGE_FOR_ONE_FRAME;
/// How long [`crate::Connection::close`] waits for queued bytes to leave and for the server to acknowledge
/// the close.
pub(crate) const CLOSE_LINGER: Duration = Duration::from_secs(1);
/// A server that accepts no byte for this long while the library has data for it has stopped reading: the
/// connection ends with [`ClientError::WriteStall`] instead of blocking the I/O thread.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Starts the I/O thread of a new connection and waits until it has connected to `target` (or failed, at
/// most `connect_timeout_ms`). Returns the thread and the negotiated TLS version (`wss://` only).
///
/// # Errors
/// The connect errors of [`crate::Connection::connect`]; [`ClientError::Io`] when the thread or its runtime
/// cannot start.
pub(crate) fn start(
    target: Target,
    shared: Arc<Shared>,
) -> Result<(JoinHandle<()>, Option<&'static str>), ClientError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let handle = std::thread::Builder::new()
        .name("moonbridge-io".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Err(ClientError::Io(format!("cannot start the I/O runtime: {e}"))));
                    return;
                }
            };
            // Whatever happens on this thread (even a panic), the connection ends visibly.
            let guard = EndGuard(Arc::clone(&shared));
            runtime.block_on(async move {
                match establish(&target, &shared.options).await {
                    Ok(stream) => {
                        let _ = tx.send(Ok(stream.tls_version()));
                        let end = match stream {
                            Stream::Tcp(s) => run_tcp(s, &shared).await,
                            Stream::Ws(ws) => run_ws(*ws, &shared).await,
                            Stream::Wss(ws) => run_ws(*ws, &shared).await,
                        };
                        shared.finish(end);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
            drop(guard);
            // Do not wait for a resolver still stuck in getaddrinfo after a connect timeout.
            runtime.shutdown_background();
        })
        .map_err(|e| ClientError::Io(format!("cannot start the I/O thread: {e}")))?;
    match rx.recv() {
        Ok(Ok(tls_version)) => Ok((handle, tls_version)),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => {
            let _ = handle.join();
            Err(ClientError::Io("the I/O thread stopped while connecting".into()))
        }
    }
}

fn close_frame(code: u16, reason: &'static str) -> CloseFrame {
    CloseFrame { code: code.into(), reason: reason.into() }
}

/// Sorts a WebSocket error: the server broke the protocol, or the transport failed.
fn ws_error(e: WsError) -> ClientError {
    match e {
        WsError::Protocol(_) | WsError::Capacity(_) | WsError::Utf8(_) => ClientError::Protocol(e.to_string()),
        e => ClientError::Io(e.to_string()),
    }
}

/// Marks the connection ended when the I/O thread exits for any reason, including a panic.
struct EndGuard(Arc<Shared>);

impl Drop for EndGuard {
    fn drop(&mut self) {
        self.0.finish(ClientError::Io("the I/O thread ended".into()));
    }
}

/// Frame counting on both directions, in the I/O thread.
#[derive(Default)]
struct Scanners {
    out: Option<FrameScanner>,
    inb: Option<FrameScanner>,
}

impl Scanners {
    fn new() -> Self {
        Self { out: Some(FrameScanner::new()), inb: Some(FrameScanner::new()) }
    }

    fn count(scanner: &mut Option<FrameScanner>, data: &[u8], counter: &AtomicU64) {
        if let Some(s) = scanner {
            match s.scan(data) {
                Ok(n) => bump(counter, n),
                Err(_) => *scanner = None,
            }
        }
    }
}

/// When the keepalive timer fires next: at the schedule's next tick, or now when there is no keepalive (the
/// timer's branch is disabled then).
fn tick_deadline(keepalive: Option<&Keepalive>) -> tokio::time::Instant {
    keepalive.map_or_else(tokio::time::Instant::now, |k| tokio::time::Instant::from_std(k.next_tick()))
}

/// Sleeps until `deadline`, or forever when there is none.
async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

/// Completes [`CLOSE_LINGER`] after `close` was called: a write still blocked then (a server that stopped
/// reading) is abandoned, so `close` never hangs.
async fn close_expired(shared: &Shared) {
    loop {
        let deadline = *lock(&shared.close_deadline);
        match deadline {
            Some(d) => return tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
            None => shared.close_requested.notified().await,
        }
    }
}

/// Runs a write, unless the connection is closing and its grace period is over, or the server accepts nothing
/// for [`WRITE_STALL_TIMEOUT`]. Every write of the I/O thread goes through here, so it never blocks forever.
async fn write_or_abandon<T, E: std::fmt::Display>(
    shared: &Shared,
    write: impl std::future::Future<Output = Result<T, E>>,
) -> Result<T, ClientError> {
    tokio::select! {
        r = tokio::time::timeout(WRITE_STALL_TIMEOUT, write) => match r {
            Ok(r) => r.map_err(|e| ClientError::Io(e.to_string())),
            Err(_) => Err(ClientError::WriteStall(WRITE_STALL_TIMEOUT.as_secs())),
        },
        () = close_expired(shared) => Err(ClientError::Closed),
    }
}

/// Completes when reading may resume (immediately when not paused).
async fn wait_for_space(shared: &Shared) {
    if shared.is_paused() {
        shared.inb_space.notified().await;
    }
}

/// What woke the I/O loop.
enum Wake {
    Outbound,
    Delay,
    Space,
}

async fn run_tcp(mut stream: TcpStream, shared: &Shared) -> ClientError {
    let mut scanners = Scanners::new();
    let mut read_buf = BytesMut::with_capacity(TCP_READ_CHUNK);
    loop {
        let delay = shared.delay_deadline();
        let paused = shared.is_paused();
        let wake = tokio::select! {
            () = shared.out_ready.notified() => Wake::Outbound,
            () = sleep_until(delay) => Wake::Delay,
            () = wait_for_space(shared), if paused => Wake::Space,
            r = stream.read_buf(&mut read_buf), if !paused => {
                match r {
                    Ok(0) => return ClientError::ClosedByPeer { code: None, reason: String::new() },
                    Ok(n) => {
                        bump(&shared.counters.messages_in, 1);
                        bump(&shared.counters.bytes_in, n as u64);
                        Scanners::count(&mut scanners.inb, &read_buf, &shared.counters.frames_in);
                        shared.deliver(&read_buf);
                        read_buf.clear();
                        if read_buf.capacity() < TCP_READ_CHUNK {
                            read_buf.reserve(TCP_READ_CHUNK);
                        }
                        continue;
                    }
                    Err(e) => return ClientError::Io(e.to_string()),
                }
            }
        };
        let aged = aged_cutoff(&wake, shared);
        let (batches, closing) = shared.take_ready(closing_flag(shared), aged);
        let mut written = 0;
        for b in &batches {
            if let Err(e) = write_or_abandon(shared, stream.write_all(b)).await {
                return e;
            }
            written += b.len();
            bump(&shared.counters.messages_out, 1);
            bump(&shared.counters.bytes_out, b.len() as u64);
            Scanners::count(&mut scanners.out, b, &shared.counters.frames_out);
        }
        shared.written(written);
        if closing {
            let _ = write_or_abandon(shared, stream.shutdown()).await;
            let _ = tokio::time::timeout(CLOSE_LINGER, async {
                while matches!(stream.read_buf(&mut read_buf).await, Ok(n) if n > 0) {
                    read_buf.clear();
                }
            })
            .await;
            return ClientError::Closed;
        }
    }
}

/// After a max_delay wake: batches started before this instant have waited long enough.
fn aged_cutoff(wake: &Wake, shared: &Shared) -> Option<Instant> {
    match wake {
        Wake::Delay => Instant::now().checked_sub(shared.options.max_delay()),
        Wake::Outbound | Wake::Space => None,
    }
}

fn closing_flag(shared: &Shared) -> bool {
    lock(&shared.out).closing
}

async fn run_ws<S: AsyncRead + AsyncWrite + Unpin>(mut ws: WebSocketStream<S>, shared: &Shared) -> ClientError {
    let mut scanners = Scanners::new();
    let mut keepalive = shared.options.ping_interval().map(|i| Keepalive::new(i, Instant::now()));
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
                            return e;
                        }
                    }
                    KeepaliveAction::Dead => {
                        let _ = write_or_abandon(shared, ws.close(Some(close_frame(carriage::CLOSE_GOING_AWAY, "no traffic")))).await;
                        return ClientError::Dead(shared.options.ping_interval_ms * 3);
                    }
                }
                continue;
            }
            m = ws.next(), if !paused => {
                if let Some(k) = &mut keepalive {
                    k.on_receive(Instant::now());
                }
                match m {
                    Some(Ok(Message::Binary(b))) => {
                        bump(&shared.counters.messages_in, 1);
                        bump(&shared.counters.bytes_in, b.len() as u64);
                        Scanners::count(&mut scanners.inb, &b, &shared.counters.frames_in);
                        shared.deliver(&b);
                    }
                    Some(Ok(Message::Ping(_))) => {
                        // tungstenite queued the Pong: send it now, whatever the game thread is doing.
                        if let Err(e) = write_or_abandon(shared, ws.flush()).await {
                            return e;
                        }
                        if let Some(k) = &mut keepalive {
                            k.on_write();
                        }
                    }
                    Some(Ok(Message::Pong(_) | Message::Frame(_))) => {}
                    Some(Ok(Message::Text(_))) => {
                        let _ = write_or_abandon(shared, ws.close(Some(close_frame(carriage::CLOSE_UNSUPPORTED_DATA, "text message")))).await;
                        return ClientError::Protocol("the server sent a text message".into());
                    }
                    Some(Ok(Message::Close(frame))) => {
                        let _ = write_or_abandon(shared, ws.flush()).await;
                        let (code, reason) = frame.map_or((None, String::new()), |f| (Some(u16::from(f.code)), f.reason.to_string()));
                        return ClientError::ClosedByPeer { code, reason };
                    }
                    Some(Err(e)) => return ws_error(e),
                    None => return ClientError::ClosedByPeer { code: None, reason: String::new() },
                }
                continue;
            }
        };
        let aged = aged_cutoff(&wake, shared);
        let (batches, closing) = shared.take_ready(closing_flag(shared), aged);
        if !batches.is_empty() {
            let mut written = 0;
            for b in &batches {
                Scanners::count(&mut scanners.out, b, &shared.counters.frames_out);
                let mut rest = b.clone();
                while !rest.is_empty() {
                    let chunk = rest.split_to(rest.len().min(MAX_WS_MESSAGE_BYTES));
                    bump(&shared.counters.messages_out, 1);
                    if let Err(e) = write_or_abandon(shared, ws.feed(Message::Binary(chunk))).await {
                        return e;
                    }
                }
                written += b.len();
                bump(&shared.counters.bytes_out, b.len() as u64);
            }
            if let Err(e) = write_or_abandon(shared, ws.flush()).await {
                return e;
            }
            if let Some(k) = &mut keepalive {
                k.on_write();
            }
            shared.written(written);
        }
        if closing {
            let _ = write_or_abandon(shared, ws.close(Some(close_frame(carriage::CLOSE_NORMAL, "")))).await;
            let _ = tokio::time::timeout(CLOSE_LINGER, async { while let Some(Ok(_)) = ws.next().await {} }).await;
            return ClientError::Closed;
        }
    }
}
