//! The state between the two sides of a connection: the game-thread API ([`crate::Connection`]) fills the
//! outbound batches and drains the inbound bytes; the I/O thread (`io/`) does the opposite. Every access
//! is a short critical section on a [`Mutex`]; waits use a [`Condvar`] (game side) or a [`Notify`] (I/O side).

use std::collections::VecDeque;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Condvar, Mutex, MutexGuard, PoisonError};
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use tokio::sync::Notify;

use crate::error::ClientError;
use crate::options::Options;

/// Received bytes held for the game before the I/O thread stops reading (backpressure to the server), in
/// bytes.
pub const MAX_INBOUND_BYTES: usize = 32 * 1024 * 1024;
/// Reading resumes once the game has taken the held bytes below this many bytes.
pub(crate) const INBOUND_RESUME_BYTES: usize = MAX_INBOUND_BYTES / 2;

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
    /// Carriage v2 resumes after a dropped connection.
    pub resumes: u64,
    /// The last resume's time from the start of its successful attempt (DNS, TCP connect) to the proxy's
    /// answer being read and the replay written, in microseconds.
    pub last_resume_us: u64,
    /// Tries of a move (`docs/carriage.md`, "Moving to another instance") that failed and were tried again:
    /// the new connection did not open (a balancer's 502, a refused connection), or the instance reached was
    /// draining too (close 4007).
    pub move_retries: u64,
    /// New sessions a draining instance sent on (close 4007) that connected again.
    pub sent_on: u64,
}

/// The live counters behind [`Stats`].
#[derive(Debug, Default)]
pub(crate) struct Counters {
    pub(crate) frames_out: AtomicU64,
    pub(crate) frames_in: AtomicU64,
    pub(crate) messages_out: AtomicU64,
    pub(crate) messages_in: AtomicU64,
    pub(crate) bytes_out: AtomicU64,
    pub(crate) bytes_in: AtomicU64,
    pub(crate) ticks: AtomicU64,
    pub(crate) delay_flushes: AtomicU64,
    pub(crate) size_flushes: AtomicU64,
    pub(crate) pings_sent: AtomicU64,
    pub(crate) resumes: AtomicU64,
    pub(crate) last_resume_us: AtomicU64,
    pub(crate) move_retries: AtomicU64,
    pub(crate) sent_on: AtomicU64,
}

impl Counters {
    /// The counters now, as [`Stats`].
    pub(crate) fn snapshot(&self) -> Stats {
        let g = |a: &AtomicU64| a.load(Ordering::Relaxed);
        Stats {
            frames_out: g(&self.frames_out),
            frames_in: g(&self.frames_in),
            messages_out: g(&self.messages_out),
            messages_in: g(&self.messages_in),
            bytes_out: g(&self.bytes_out),
            bytes_in: g(&self.bytes_in),
            ticks: g(&self.ticks),
            delay_flushes: g(&self.delay_flushes),
            size_flushes: g(&self.size_flushes),
            pings_sent: g(&self.pings_sent),
            resumes: g(&self.resumes),
            last_resume_us: g(&self.last_resume_us),
            move_retries: g(&self.move_retries),
            sent_on: g(&self.sent_on),
        }
    }
}

/// Adds `n` to a counter.
pub(crate) fn bump(c: &AtomicU64, n: u64) {
    c.fetch_add(n, Ordering::Relaxed);
}

/// Bytes from the game, on their way to the I/O thread.
#[derive(Debug, Default)]
pub(crate) struct Outbound {
    /// The batch being filled (this tick).
    pub(crate) current: BytesMut,
    /// When the first byte of `current` arrived.
    pub(crate) current_since: Option<Instant>,
    /// Batches ready to leave, each one message.
    pub(crate) queue: VecDeque<Bytes>,
    /// Bytes in `current` and `queue`.
    pub(crate) pending: usize,
    /// Set by `close`.
    pub(crate) closing: bool,
}

/// Bytes from the network, on their way to the game.
#[derive(Debug, Default)]
pub(crate) struct Inbound {
    pub(crate) buf: BytesMut,
    /// How the connection ended, once it has.
    pub(crate) end: Option<ClientError>,
    /// Reading is paused because `buf` is over [`MAX_INBOUND_BYTES`].
    pub(crate) paused: bool,
}

/// The state the game-thread API and the I/O thread share: the outbound batches, the inbound bytes, the end
/// of the connection and the counters.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) options: Options,
    pub(crate) out: Mutex<Outbound>,
    pub(crate) out_ready: Notify,
    /// Set once by `close`: the moment after which pending writes are abandoned.
    pub(crate) close_deadline: Mutex<Option<Instant>>,
    pub(crate) close_requested: Notify,
    pub(crate) inb: Mutex<Inbound>,
    pub(crate) inb_ready: Condvar,
    pub(crate) inb_space: Notify,
    pub(crate) counters: Counters,
}

/// Locks `m`, ignoring poisoning (the data stays consistent: every critical section is a few assignments).
pub(crate) fn lock<T>(m: &Mutex<T>) -> MutexGuard<'_, T> {
    m.lock().unwrap_or_else(PoisonError::into_inner)
}

impl Shared {
    /// Fresh state for a connection with `options`.
    pub(crate) fn new(options: Options) -> Self {
        Self {
            options,
            out: Mutex::default(),
            out_ready: Notify::new(),
            close_deadline: Mutex::new(None),
            close_requested: Notify::new(),
            inb: Mutex::default(),
            inb_ready: Condvar::new(),
            inb_space: Notify::new(),
            counters: Counters::default(),
        }
    }

    /// Takes every batch ready to leave; with `aged_before`, also the current batch if it is older.
    pub(crate) fn take_ready(&self, flush_current: bool, aged_before: Option<Instant>) -> (Vec<Bytes>, bool) {
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
    pub(crate) fn written(&self, bytes: usize) {
        let mut out = lock(&self.out);
        out.pending = out.pending.saturating_sub(bytes);
    }

    /// When the current batch must leave on its own, if there is one.
    pub(crate) fn delay_deadline(&self) -> Option<Instant> {
        lock(&self.out).current_since.map(|t| t + self.options.max_delay())
    }

    /// Hands received bytes to the game; returns false when reading must pause.
    pub(crate) fn deliver(&self, data: &[u8]) -> bool {
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

    pub(crate) fn is_paused(&self) -> bool {
        lock(&self.inb).paused
    }

    /// Records how the connection ended and wakes everyone.
    pub(crate) fn finish(&self, end: ClientError) {
        {
            let mut inb = lock(&self.inb);
            if inb.end.is_none() {
                inb.end = Some(end);
            }
        }
        self.inb_ready.notify_all();
    }

    pub(crate) fn ended(&self) -> Option<ClientError> {
        lock(&self.inb).end.clone()
    }
}
