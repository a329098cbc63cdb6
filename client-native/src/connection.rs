//! The Rust API, [`Connection`]: what the game thread calls. It only touches memory:
//! [`Connection::send`] appends to the current tick's batch, [`Connection::end_tick`] hands the batch to the
//! I/O thread, [`Connection::recv`] copies out bytes the I/O thread already read. All socket work happens on
//! the connection's I/O thread (`io/`), whatever the game thread is doing.

use std::sync::{Arc, Mutex, PoisonError};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

use bytes::Bytes;

use crate::error::ClientError;
use crate::io::CLOSE_LINGER;
use crate::options::{Coalesce, Options};
use crate::shared::{bump, lock, Shared, Stats, INBOUND_RESUME_BYTES};
use crate::target::Target;

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
        let shared = Arc::new(Shared::new(options));
        let (io, tls_version) = crate::io::start(target, Arc::clone(&shared))?;
        Ok(Self { shared, io: Mutex::new(Some(io)), tls_version })
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
        self.shared.counters.snapshot()
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

impl Drop for Connection {
    fn drop(&mut self) {
        self.close();
    }
}
