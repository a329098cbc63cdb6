//! The Rust API: [`Connection`], and the I/O thread behind it.
//!
//! The game thread only touches memory: [`Connection::send`] appends to the current tick's batch,
//! [`Connection::end_tick`] hands the batch to the I/O thread, [`Connection::recv`] copies out bytes the I/O
//! thread already read. The I/O thread (one per connection, running a single-threaded tokio runtime) does all
//! socket work: it writes each batch as one WebSocket message (or one TCP write), flushes batches that waited
//! `max_delay_ms`, reads in large chunks, answers Pings at once and sends its own keepalive Pings, whatever
//! the game thread is doing.

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use futures_util::{SinkExt, StreamExt};
use moonbridge_protocol::ws::{Keepalive, KeepaliveAction};
use moonbridge_protocol::FrameScanner;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::sync::Notify;
use tokio_tungstenite::tungstenite::protocol::frame::coding::CloseCode;
use tokio_tungstenite::tungstenite::protocol::CloseFrame;
use tokio_tungstenite::tungstenite::Message;
use tokio_tungstenite::WebSocketStream;

use crate::connect::{establish, Stream};
use crate::error::ClientError;
use crate::options::{Coalesce, Options};
use crate::target::Target;

/// Received bytes held for the game before the I/O thread stops reading (backpressure to the server).
pub const MAX_INBOUND_BYTES: usize = 32 * 1024 * 1024;
/// Reading resumes once the game has taken the held bytes below this.
const INBOUND_RESUME_BYTES: usize = MAX_INBOUND_BYTES / 2;
/// Largest single TCP read, in bytes.
const TCP_READ_CHUNK: usize = 256 * 1024;
/// Largest WebSocket message sent: every proxy accepts it (one 2 MiB frame with its 3-byte prefix), so a
/// larger batch is split, never refused.
pub const MAX_WS_MESSAGE_BYTES: usize = moonbridge_protocol::MAX_FRAME_LEN + 3;
/// How long [`Connection::close`] waits for the server to acknowledge the close.
const CLOSE_LINGER: Duration = Duration::from_secs(1);
/// A server that accepts no byte for this long while the library has data for it has stopped reading: the
/// connection ends with an I/O error instead of blocking the I/O thread.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Counters of one connection. Frames are counted by following the length prefixes of the stream, so they
/// are only meaningful while the stream is not encrypted.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Stats {
    /// Minecraft frames sent.
    pub frames_out: u64,
    /// Minecraft frames received.
    pub frames_in: u64,
    /// WebSocket messages (or TCP writes) sent.
    pub messages_out: u64,
    /// WebSocket messages (or TCP reads) received.
    pub messages_in: u64,
    /// Stream bytes sent.
    pub bytes_out: u64,
    /// Stream bytes received.
    pub bytes_in: u64,
    /// Calls to `end_tick`.
    pub ticks: u64,
    /// Batches that left because they waited `max_delay_ms` without `end_tick`.
    pub delay_flushes: u64,
    /// Batches that left because they reached `max_batch_bytes`.
    pub size_flushes: u64,
    /// WebSocket Pings sent by the keepalive.
    pub pings_sent: u64,
}

#[derive(Debug, Default)]
struct Counters {
    frames_out: AtomicU64,
    frames_in: AtomicU64,
    messages_out: AtomicU64,
    messages_in: AtomicU64,
    bytes_out: AtomicU64,
    bytes_in: AtomicU64,
    ticks: AtomicU64,
    delay_flushes: AtomicU64,
    size_flushes: AtomicU64,
    pings_sent: AtomicU64,
}

fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Bytes from the game, on their way to the I/O thread.
#[derive(Debug, Default)]
struct Outbound {
    /// The batch being filled (this tick).
    current: BytesMut,
    /// When the first byte of `current` arrived.
    current_since: Option<Instant>,
    /// Batches ready to leave, each one message.
    queue: VecDeque<Bytes>,
    /// Bytes in `current` and `queue`.
    pending: usize,
    /// Set by `close`.
    closing: bool,
}

/// Bytes from the network, on their way to the game.
#[derive(Debug, Default)]
struct Inbound {
    buf: BytesMut,
    /// How the connection ended, once it has.
    end: Option<ClientError>,
    /// Reading is paused because `buf` is over [`MAX_INBOUND_BYTES`].
    paused: bool,
}

#[derive(Debug)]
struct Shared {
    options: Options,
    out: Mutex<Outbound>,
    out_ready: Notify,
    /// Set once by `close`: the moment after which pending writes are abandoned.
    close_deadline: Mutex<Option<Instant>>,
    close_requested: Notify,
    inb: Mutex<Inbound>,
    inb_ready: Condvar,
    inb_space: Notify,
    counters: Counters,
}

fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Takes every batch ready to leave; with `aged_before`, also the current batch if it is older.
    fn take_ready(&self, flush_current: bool, aged_before: Option<Instant>) -> (Vec<Bytes>, bool) {
        let mut out = lock(&self.out);
        let aged = matches!((aged_before, out.current_since), (Some(t), Some(since)) if since <= t);
        if (flush_current || aged) && !out.current.is_empty() {
            let batch = out.current.split().freeze();
            out.queue.push_back(batch);
            out.current_since = None;
            if aged && !flush_current {
                bump(&self.counters.delay_flushes, 1);
            }
        }
        let batches: Vec<Bytes> = out.queue.drain(..).collect();
        (batches, out.closing)
    }

    /// The batches were written: release their bytes from the pending bound.
    fn written(&self, bytes: usize) {
        let mut out = lock(&self.out);
        out.pending = out.pending.saturating_sub(bytes);
    }

    /// When the current batch must leave on its own, if there is one.
    fn delay_deadline(&self) -> Option<Instant> {
        lock(&self.out).current_since.map(|t| t + self.options.max_delay())
    }

    /// Hands received bytes to the game; returns false when reading must pause.
    fn deliver(&self, data: &[u8]) -> bool {
        let mut inb = lock(&self.inb);
        inb.buf.extend_from_slice(data);
        if inb.buf.len() >= MAX_INBOUND_BYTES {
            inb.paused = true;
        }
        let paused = inb.paused;
        drop(inb);
        self.inb_ready.notify_all();
        !paused
    }

    fn is_paused(&self) -> bool {
        lock(&self.inb).paused
    }

    /// Records how the connection ended and wakes everyone.
    fn finish(&self, end: ClientError) {
        {
            let mut inb = lock(&self.inb);
            if inb.end.is_none() {
                inb.end = Some(end);
            }
        }
        self.inb_ready.notify_all();
    }

    fn ended(&self) -> Option<ClientError> {
        lock(&self.inb).end.clone()
    }
}

/// A connection to a MoonBridge proxy (or any 1.7.10 server, for `tcp://`).
///
/// `send`, `end_tick` and `recv` may be called from different threads; the struct is `Send + Sync`.
#[derive(Debug)]
pub struct Connection {
    shared: Arc<Shared>,
    io: Mutex<Option<JoinHandle<()>>>,
    tls_version: Option<&'static str>,
}

impl Connection {
    /// Connects to `url` (`tcp://host:port`, `ws://host[:port]/path` or `wss://host[:port]/path`) and starts
    /// the connection's I/O thread. Blocks until connected or failed (at most `connect_timeout_ms`).
    ///
    /// # Errors
    /// [`ClientError::InvalidUrl`], [`ClientError::InvalidOptions`], [`ClientError::Dns`],
    /// [`ClientError::Refused`], [`ClientError::ConnectTimeout`], [`ClientError::Connect`],
    /// [`ClientError::Tls`], [`ClientError::UpgradeRefused`] or [`ClientError::Upgrade`].
    pub fn connect(url: &str, options: Options) -> Result<Self, ClientError> {
        let target = Target::parse(url)?;
        let shared = Arc::new(Shared {
            options,
            out: Mutex::default(),
            out_ready: Notify::new(),
            close_deadline: Mutex::new(None),
            close_requested: Notify::new(),
            inb: Mutex::default(),
            inb_ready: Condvar::new(),
            inb_space: Notify::new(),
            counters: Counters::default(),
        });
        let (tx, rx) = std::sync::mpsc::sync_channel(1);
        let io_shared = Arc::clone(&shared);
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
                let guard = EndGuard(Arc::clone(&io_shared));
                runtime.block_on(async move {
                    match establish(&target, &io_shared.options).await {
                        Ok(stream) => {
                            let _ = tx.send(Ok(stream.tls_version()));
                            let end = match stream {
                                Stream::Tcp(s) => run_tcp(s, &io_shared).await,
                                Stream::Ws(ws) => run_ws(*ws, &io_shared).await,
                                Stream::Wss(ws) => run_ws(*ws, &io_shared).await,
                            };
                            io_shared.finish(end);
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
            Ok(Ok(tls_version)) => Ok(Self { shared, io: Mutex::new(Some(handle)), tls_version }),
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

    /// Queues stream bytes. Never blocks on the network: with `coalesce = "tick"` they join the current
    /// batch (which leaves at `end_tick`, after `max_delay_ms`, or at `max_batch_bytes`); with `"off"` they
    /// leave as their own message.
    ///
    /// # Errors
    /// [`ClientError::SendBufferFull`] when `max_pending_bytes` would be exceeded; the connection's end
    /// ([`ClientError::ClosedByPeer`], [`ClientError::Closed`], …) once it has ended.
    pub fn send(&self, data: &[u8]) -> Result<(), ClientError> {
        if data.is_empty() {
            return Ok(());
        }
        if let Some(end) = self.shared.ended() {
            return Err(end);
        }
        let o = &self.shared.options;
        let mut out = lock(&self.shared.out);
        if out.closing {
            return Err(ClientError::Closed);
        }
        if out.pending + data.len() > o.max_pending_bytes {
            return Err(ClientError::SendBufferFull { pending: out.pending, max: o.max_pending_bytes });
        }
        out.pending += data.len();
        let notify = match o.coalesce {
            Coalesce::Off => {
                out.queue.push_back(Bytes::copy_from_slice(data));
                true
            }
            Coalesce::Tick => {
                let was_empty = out.current.is_empty();
                out.current.extend_from_slice(data);
                if out.current.len() >= o.max_batch_bytes {
                    let batch = out.current.split().freeze();
                    out.queue.push_back(batch);
                    out.current_since = None;
                    bump(&self.shared.counters.size_flushes, 1);
                    true
                } else if was_empty {
                    // The I/O thread arms the max_delay timer.
                    out.current_since = Some(Instant::now());
                    true
                } else {
                    false
                }
            }
        };
        drop(out);
        if notify {
            self.shared.out_ready.notify_one();
        }
        Ok(())
    }

    /// Ends the game tick: the bytes sent since the last call leave now, as one message.
    ///
    /// # Errors
    /// The connection's end once it has ended.
    pub fn end_tick(&self) -> Result<(), ClientError> {
        if let Some(end) = self.shared.ended() {
            return Err(end);
        }
        bump(&self.shared.counters.ticks, 1);
        let mut out = lock(&self.shared.out);
        if out.current.is_empty() {
            return Ok(());
        }
        let batch = out.current.split().freeze();
        out.queue.push_back(batch);
        out.current_since = None;
        drop(out);
        self.shared.out_ready.notify_one();
        Ok(())
    }

    /// Copies received stream bytes into `buf`, waiting up to `timeout` (`None`: until data or the end).
    /// Returns the number of bytes (0 when the wait timed out or `buf` is empty).
    ///
    /// # Errors
    /// Once every received byte has been returned: how the connection ended. An orderly close (TCP EOF or
    /// WebSocket close 1000/1001) is [`ClientError::ClosedByPeer`] with [`ClientError::is_orderly_close`].
    pub fn recv(&self, buf: &mut [u8], timeout: Option<Duration>) -> Result<usize, ClientError> {
        if buf.is_empty() {
            return Ok(0);
        }
        self.recv_with(timeout, |data| {
            let n = buf.len().min(data.len());
            if let (Some(dst), Some(src)) = (buf.get_mut(..n), data.get(..n)) {
                dst.copy_from_slice(src);
            }
            n
        })
    }

    /// Waits like [`Connection::recv`], then lends the received bytes to `take`, which copies what it can
    /// and returns how many it consumed. Lets a caller copy straight into its own memory (a Java array).
    ///
    /// # Errors
    /// As [`Connection::recv`].
    pub fn recv_with(
        &self,
        timeout: Option<Duration>,
        take: impl FnOnce(&[u8]) -> usize,
    ) -> Result<usize, ClientError> {
        let deadline = timeout.map(|t| Instant::now() + t);
        let mut inb = lock(&self.shared.inb);
        loop {
            if !inb.buf.is_empty() {
                let n = take(&inb.buf).min(inb.buf.len());
                let _ = inb.buf.split_to(n);
                if inb.paused && inb.buf.len() <= INBOUND_RESUME_BYTES {
                    inb.paused = false;
                    drop(inb);
                    self.shared.inb_space.notify_one();
                }
                return Ok(n);
            }
            if let Some(end) = &inb.end {
                return Err(end.clone());
            }
            inb = match deadline {
                None => self.shared.inb_ready.wait(inb).unwrap_or_else(PoisonError::into_inner),
                Some(d) => {
                    let left = d.saturating_duration_since(Instant::now());
                    if left.is_zero() {
                        return Ok(0);
                    }
                    self.shared.inb_ready.wait_timeout(inb, left).unwrap_or_else(PoisonError::into_inner).0
                }
            };
        }
    }

    /// The TLS version negotiated for a `wss://` connection (`"1.2"` or `"1.3"`); `None` otherwise.
    pub fn tls_version(&self) -> Option<&'static str> {
        self.tls_version
    }

    /// Counters so far.
    pub fn stats(&self) -> Stats {
        let c = &self.shared.counters;
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            frames_out: g(&c.frames_out),
            frames_in: g(&c.frames_in),
            messages_out: g(&c.messages_out),
            messages_in: g(&c.messages_in),
            bytes_out: g(&c.bytes_out),
            bytes_in: g(&c.bytes_in),
            ticks: g(&c.ticks),
            delay_flushes: g(&c.delay_flushes),
            size_flushes: g(&c.size_flushes),
            pings_sent: g(&c.pings_sent),
        }
    }

    /// Sends what is queued, closes the connection (WebSocket close 1000, or FIN) and stops the I/O thread.
    /// Idempotent; also done on drop.
    pub fn close(&self) {
        lock(&self.shared.out).closing = true;
        lock(&self.shared.close_deadline).get_or_insert_with(|| Instant::now() + CLOSE_LINGER);
        self.shared.close_requested.notify_one();
        self.shared.out_ready.notify_one();
        let handle = lock(&self.io).take();
        if let Some(h) = handle {
            let _ = h.join();
        }
        self.shared.finish(ClientError::Closed);
    }
}

/// Marks the connection ended when the I/O thread exits for any reason, including a panic.
struct EndGuard(Arc<Shared>);

impl Drop for EndGuard {
    fn drop(&mut self) {
        self.0.finish(ClientError::Io("the I/O thread ended".into()));
    }
}

impl Drop for Connection {
    fn drop(&mut self) {
        self.close();
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
            Err(_) => Err(ClientError::Io(format!(
                "the server accepted no data for {} s", WRITE_STALL_TIMEOUT.as_secs()
            ))),
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

/// Completes at the next keepalive tick; never when keepalive is off.
async fn tick(ticker: &mut Option<tokio::time::Interval>) {
    match ticker {
        Some(t) => {
            t.tick().await;
        }
        None => std::future::pending().await,
    }
}

async fn run_ws<S: AsyncRead + AsyncWrite + Unpin>(mut ws: WebSocketStream<S>, shared: &Shared) -> ClientError {
    let mut scanners = Scanners::new();
    let mut keepalive = shared.options.ping_interval().map(|i| Keepalive::new(i, Instant::now()));
    let mut ticker = keepalive.as_ref().map(|k| {
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + k.tick_period(), k.tick_period());
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    loop {
        let delay = shared.delay_deadline();
        let paused = shared.is_paused();
        let wake = tokio::select! {
            () = shared.out_ready.notified() => Wake::Outbound,
            () = sleep_until(delay) => Wake::Delay,
            () = wait_for_space(shared), if paused => Wake::Space,
            () = tick(&mut ticker) => {
                let Some(k) = &mut keepalive else { continue };
                if paused {
                    // Not reading is our own backpressure, not the server's silence.
                    k.on_receive(Instant::now());
                }
                match k.on_tick(Instant::now()) {
                    KeepaliveAction::None => {}
                    KeepaliveAction::Ping => {
                        bump(&shared.counters.pings_sent, 1);
                        if let Err(e) = write_or_abandon(shared, ws.send(Message::Ping(Bytes::new()))).await {
                            return e;
                        }
                    }
                    KeepaliveAction::Dead => {
                        let _ = write_or_abandon(shared, ws.close(Some(CloseFrame { code: CloseCode::Away, reason: "no traffic".into() }))).await;
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
                        let _ = write_or_abandon(shared, ws.close(Some(CloseFrame { code: CloseCode::Unsupported, reason: "text message".into() }))).await;
                        return ClientError::Io("the server sent a text message".into());
                    }
                    Some(Ok(Message::Close(frame))) => {
                        let _ = write_or_abandon(shared, ws.flush()).await;
                        let (code, reason) = frame.map_or((None, String::new()), |f| (Some(u16::from(f.code)), f.reason.to_string()));
                        return ClientError::ClosedByPeer { code, reason };
                    }
                    Some(Err(e)) => return ClientError::Io(e.to_string()),
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
            let _ = write_or_abandon(shared, ws.close(Some(CloseFrame { code: CloseCode::Normal, reason: "".into() })))
                .await;
            let _ = tokio::time::timeout(CLOSE_LINGER, async { while let Some(Ok(_)) = ws.next().await {} }).await;
            return ClientError::Closed;
        }
    }
}
