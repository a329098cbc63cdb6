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
use moonbridge_protocol::ws::compress::{CompressError, Compressor, Decompressor, DEFAULT_LEVEL};
use moonbridge_protocol::ws::v2::{self, AckSchedule, Control, ResumeToken, Retained};
use moonbridge_protocol::ws::{self as carriage, Keepalive, KeepaliveAction};
use moonbridge_protocol::FrameScanner;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio_tungstenite::tungstenite::error::ProtocolError;
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
                            ws => run_ws_session(ws, &target, &shared).await,
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

/// How a WebSocket connection of a session ended.
enum WsEnd {
    /// The session is over (an orderly close, a refusal, bad input, `close`).
    End(ClientError),
    /// The connection was lost without a Minecraft disconnect: a carriage v2 session may resume.
    Lost(ClientError),
}

/// Sorts an error of an established WebSocket: the transport was lost (may resume), or the peer broke the
/// protocol (ends).
fn ws_loss(e: WsError) -> WsEnd {
    match e {
        WsError::Io(_)
        | WsError::ConnectionClosed
        | WsError::AlreadyClosed
        | WsError::Protocol(ProtocolError::ResetWithoutClosingHandshake) => WsEnd::Lost(ws_error(e)),
        e => WsEnd::End(ws_error(e)),
    }
}

/// A write failed: lost, unless the game asked to close (then the session is over).
fn write_loss(e: ClientError) -> WsEnd {
    match e {
        ClientError::Closed => WsEnd::End(e),
        e => WsEnd::Lost(e),
    }
}

/// Most stream bytes one compressed message from the proxy may inflate to (the proxy sends one backend read,
/// at most 256 KiB, per message): 16 MiB. Past it the connection closes with 1009.
pub(crate) const MAX_INFLATED_MESSAGE_BYTES: usize = 16 * 1024 * 1024;

/// The zstd contexts of one `moonbridge.v2.zstd` connection (each connection starts new streams).
struct WsZstd {
    deflate: Compressor,
    inflate: Decompressor,
    /// Where a message inflates before it is delivered (its capacity is reused).
    scratch: Vec<u8>,
}

impl WsZstd {
    /// The contexts for `stream`, when it selected `moonbridge.v2.zstd`.
    fn for_stream(stream: &Stream) -> Result<Option<Self>, ClientError> {
        if !stream.zstd() {
            return Ok(None);
        }
        let made = Compressor::new(DEFAULT_LEVEL).and_then(|d| Ok((d, Decompressor::new()?)));
        let (deflate, inflate) = made.map_err(|e| ClientError::Io(e.to_string()))?;
        Ok(Some(Self { deflate, inflate, scratch: Vec::new() }))
    }

    /// Inflates one whole message from the proxy into `scratch`.
    fn inflate_message(&mut self, payload: &[u8]) -> Result<&[u8], CompressError> {
        self.scratch.clear();
        self.inflate.queue(payload);
        while self.inflate.has_output() {
            self.inflate.inflate(&mut self.scratch, MAX_INFLATED_MESSAGE_BYTES, MAX_INFLATED_MESSAGE_BYTES)?;
        }
        self.inflate.end_message();
        Ok(&self.scratch)
    }
}

/// Stream bytes per message on a `moonbridge.v2.zstd` connection: 1 MiB, so a message stays under every proxy's
/// limit ([`MAX_WS_MESSAGE_BYTES`]) even when nothing shrinks (zstd adds at most about 0.4%).
pub(crate) const MAX_ZSTD_MESSAGE_STREAM_BYTES: usize = 1024 * 1024;

/// Queues `batch` on `ws` as Binary messages of at most [`MAX_WS_MESSAGE_BYTES`] stream bytes each (at most
/// [`MAX_ZSTD_MESSAGE_STREAM_BYTES`] compressed with `moonbridge.v2.zstd`), counting them; the caller flushes.
async fn feed_batch<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    batch: &Bytes,
    zstd: &mut Option<WsZstd>,
    shared: &Shared,
) -> Result<(), ClientError> {
    let largest = if zstd.is_some() { MAX_ZSTD_MESSAGE_STREAM_BYTES } else { MAX_WS_MESSAGE_BYTES };
    let mut rest = batch.clone();
    while !rest.is_empty() {
        let chunk = rest.split_to(rest.len().min(largest));
        let payload = match zstd {
            Some(z) => {
                let mut out = Vec::new();
                z.deflate.compress(&chunk, &mut out).map_err(|e| ClientError::Io(e.to_string()))?;
                Bytes::from(out)
            }
            None => chunk,
        };
        bump(&shared.counters.messages_out, 1);
        write_or_abandon(shared, ws.feed(Message::Binary(payload))).await?;
    }
    Ok(())
}

/// Carriage v2 state of a session, kept across its WebSocket connections (`docs/carriage.md`).
struct Resume {
    /// The token of the next resume, once the proxy sent `session`.
    token: Option<ResumeToken>,
    /// How long the proxy waits for a resume after a drop.
    window: Duration,
    /// Stream bytes received from the proxy in all.
    received: u64,
    /// What was sent and the proxy has not acknowledged.
    retained: Retained,
    acks: AckSchedule,
}

impl Resume {
    fn new() -> Self {
        Self {
            token: None,
            window: Duration::ZERO,
            received: 0,
            retained: Retained::starting_at(0),
            acks: AckSchedule::new(0),
        }
    }

    /// Bytes sent in all.
    fn sent(&self) -> u64 {
        self.retained.end()
    }
}

/// Runs a WebSocket session: its connections one after another while a carriage v2 session resumes after
/// drops (new TCP, TLS and upgrade each time, within the proxy's window, with backoff).
async fn run_ws_session(first: Stream, target: &Target, shared: &Shared) -> ClientError {
    let mut resume = Resume::new();
    let mut zstd = match WsZstd::for_stream(&first) {
        Ok(z) => z,
        Err(e) => return e,
    };
    let mut stream = first;
    loop {
        let v2 = stream.v2();
        let end = match stream {
            Stream::Ws(ws, _) => run_ws(*ws, shared, v2.then_some(&mut resume), zstd).await,
            Stream::Wss(ws, _) => run_ws(*ws, shared, v2.then_some(&mut resume), zstd).await,
            Stream::Tcp(s) => return run_tcp(s, shared).await,
        };
        let cause = match end {
            WsEnd::End(e) => return e,
            WsEnd::Lost(e) if !v2 || resume.token.is_none() => return e,
            WsEnd::Lost(e) => e,
        };
        (stream, zstd) = match reconnect(target, shared, &mut resume, &cause).await {
            Ok(s) => s,
            Err(e) => return e,
        };
    }
}

/// Why one resume attempt did not work.
enum Attempt {
    /// The proxy refused (4001–4004, or no v2 any more): give up.
    Refused(String),
    /// Connecting or the exchange failed: try again while the window lasts.
    Failed(String),
}

/// Reconnects and resumes within the window, with backoff (50 ms doubling to 1 s between attempts).
async fn reconnect(
    target: &Target,
    shared: &Shared,
    resume: &mut Resume,
    cause: &ClientError,
) -> Result<(Stream, Option<WsZstd>), ClientError> {
    let deadline = Instant::now().checked_add(resume.window).unwrap_or_else(Instant::now);
    let failed = |reason: String| ClientError::ResumeFailed { cause: cause.to_string(), reason };
    let mut backoff = Duration::from_millis(50);
    let mut last = String::from("no attempt finished");
    loop {
        if closing_flag(shared) {
            return Err(ClientError::Closed);
        }
        let now = Instant::now();
        let Some(left) = deadline.checked_duration_since(now).filter(|d| !d.is_zero()) else {
            return Err(failed(format!(
                "not resumed within the proxy's {} s window (last attempt: {last})",
                resume.window.as_secs()
            )));
        };
        let attempt = tokio::select! {
            r = tokio::time::timeout(left, attempt(target, shared, resume)) => r,
            () = close_expired(shared) => return Err(ClientError::Closed),
        };
        match attempt {
            Ok(Ok(stream)) => {
                bump(&shared.counters.resumes, 1);
                shared
                    .counters
                    .last_resume_us
                    .store(now.elapsed().as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
                return Ok(stream);
            }
            Ok(Err(Attempt::Refused(reason))) => return Err(failed(reason)),
            Ok(Err(Attempt::Failed(reason))) => last = reason,
            Err(_) => last = "timed out".into(),
        }
        let pause = backoff.min(deadline.saturating_duration_since(Instant::now()));
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = close_expired(shared) => return Err(ClientError::Closed),
        }
        backoff = (backoff * 2).min(Duration::from_secs(1));
    }
}

/// One resume attempt: connect, `resume`, then the proxy's `resumed` and the replay of what it lacks
/// (compressed when the new connection selected `moonbridge.v2.zstd`; each connection starts new streams).
async fn attempt(target: &Target, shared: &Shared, resume: &mut Resume) -> Result<(Stream, Option<WsZstd>), Attempt> {
    let mut stream = establish(target, &shared.options).await.map_err(|e| Attempt::Failed(e.to_string()))?;
    if !stream.v2() {
        return Err(Attempt::Refused("the server no longer offers carriage v2".into()));
    }
    let mut zstd = WsZstd::for_stream(&stream).map_err(|e| Attempt::Failed(e.to_string()))?;
    match &mut stream {
        Stream::Ws(ws, _) => resume_on(ws, shared, resume, &mut zstd).await?,
        Stream::Wss(ws, _) => resume_on(ws, shared, resume, &mut zstd).await?,
        Stream::Tcp(_) => return Err(Attempt::Refused("not a WebSocket".into())),
    }
    Ok((stream, zstd))
}

/// The resume exchange on a new WebSocket (`docs/carriage.md`).
async fn resume_on<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    shared: &Shared,
    resume: &mut Resume,
    zstd: &mut Option<WsZstd>,
) -> Result<(), Attempt> {
    let failed = |e: WsError| Attempt::Failed(e.to_string());
    let token = resume.token.ok_or_else(|| Attempt::Refused("no resume token".into()))?;
    let request = Control::Resume { token, received: resume.received, sent: resume.sent() };
    ws.send(Message::Text(request.encode().into())).await.map_err(failed)?;
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => match Control::parse(t.as_bytes()) {
                Ok(Control::Resumed { received, token }) => {
                    let replay = resume
                        .retained
                        .resume_from(received)
                        .map_err(|e| Attempt::Refused(format!("the proxy's count is wrong: {e}")))?;
                    resume.token = Some(token);
                    // Tells the proxy at once that the new token arrived (the old one is then spent).
                    let ack = Control::Ack(resume.received).encode();
                    ws.feed(Message::Text(ack.into())).await.map_err(failed)?;
                    for batch in replay {
                        feed_batch(ws, batch, zstd, shared).await.map_err(|e| Attempt::Failed(e.to_string()))?;
                    }
                    ws.flush().await.map_err(failed)?;
                    return Ok(());
                }
                _ => return Err(Attempt::Refused("unexpected answer to the resume request".into())),
            },
            Some(Ok(Message::Close(frame))) => {
                let code = frame.as_ref().map(|f| u16::from(f.code));
                return Err(match code {
                    Some(c) if v2::is_resume_refusal(c) => {
                        Attempt::Refused(format!("{} (close {c})", v2::refusal_text(c)))
                    }
                    Some(c) => Attempt::Refused(format!("the proxy closed with {c}")),
                    None => Attempt::Failed("closed".into()),
                });
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(failed(e)),
            None => return Err(Attempt::Failed("connection closed".into())),
        }
    }
}

/// The longest resume window the library waits for, whatever the proxy announces, in seconds.
const MAX_RESUME_WINDOW_SECONDS: u64 = 3600;

/// The longest keepalive interval on a carriage v2 connection: a silent drop is noticed within three of them
/// (12 s), in time to resume before a 1.7.10 server's 30-second read timeout.
const V2_MAX_PING_INTERVAL: Duration = Duration::from_secs(4);

/// Bytes of sent data kept for a resume before the library stops taking batches until the proxy's `ack`
/// (it acknowledges every 64 KiB, so this is only reached when the proxy stops reading).
pub(crate) const MAX_RETAINED_BYTES: usize = 4 * 1024 * 1024;

async fn run_ws<S: AsyncRead + AsyncWrite + Unpin>(
    mut ws: WebSocketStream<S>,
    shared: &Shared,
    mut resume: Option<&mut Resume>,
    mut zstd: Option<WsZstd>,
) -> WsEnd {
    let mut scanners = Scanners::new();
    let interval =
        shared.options.ping_interval().map(|i| if resume.is_some() { i.min(V2_MAX_PING_INTERVAL) } else { i });
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
                        let b: &[u8] = match &mut zstd {
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
                        return if code == Some(carriage::CLOSE_GOING_AWAY) { WsEnd::Lost(e) } else { WsEnd::End(e) };
                    }
                    Some(Err(e)) => return ws_loss(e),
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
                if let Err(e) = feed_batch(&mut ws, b, &mut zstd, shared).await {
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
