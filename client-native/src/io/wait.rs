//! What the TCP and WebSocket loops of the I/O thread share: frame counting, the tick and close deadlines,
//! bounded writes, waiting for room in the queue, and the limits every loop keeps.

use std::sync::atomic::AtomicU64;
use std::time::{Duration, Instant};

use moonbridge_protocol::ws::{self as carriage, Keepalive};
use moonbridge_protocol::FrameScanner;

use crate::error::ClientError;
use crate::shared::{bump, lock, Shared};

/// Largest WebSocket message received, in bytes: what every MoonBridge sender stays under
/// ([`carriage::MAX_MESSAGE_FOR_ONE_FRAME`], 2 MiB and 3 bytes: one whole vanilla frame with its prefix). The
/// library sends at most [`carriage::MAX_SENT_MESSAGE`] (1 MiB) per message, so a larger batch is split, never
/// refused.
pub const MAX_WS_MESSAGE_BYTES: usize = carriage::MAX_MESSAGE_FOR_ONE_FRAME;

/// How long [`crate::Connection::close`] waits for queued bytes to leave and for the server to acknowledge
/// the close.
pub(crate) const CLOSE_LINGER: Duration = Duration::from_secs(1);

/// A server that accepts no byte for this long while the library has data for it has stopped reading: the
/// connection ends with [`ClientError::WriteStall`] instead of blocking the I/O thread.
pub const WRITE_STALL_TIMEOUT: Duration = Duration::from_secs(60);

/// Frame counting on both directions, in the I/O thread.
#[derive(Default)]
pub(super) struct Scanners {
    pub(super) out: Option<FrameScanner>,
    pub(super) inb: Option<FrameScanner>,
}

impl Scanners {
    pub(super) fn new() -> Self {
        // Counting only: the library carries any dialect's frames (GT New Horizons' reach 256 MiB), so the
        // scanners follow any length a prefix can declare.
        let wide = moonbridge_protocol::frame::MAX_WIDE_FRAME_LEN;
        Self { out: Some(FrameScanner::with_limit(wide)), inb: Some(FrameScanner::with_limit(wide)) }
    }

    pub(super) fn count(scanner: &mut Option<FrameScanner>, data: &[u8], counter: &AtomicU64) {
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
pub(super) fn tick_deadline(keepalive: Option<&Keepalive>) -> tokio::time::Instant {
    keepalive.map_or_else(tokio::time::Instant::now, |k| tokio::time::Instant::from_std(k.next_tick()))
}

/// Sleeps until `deadline`, or forever when there is none.
pub(super) async fn sleep_until(deadline: Option<Instant>) {
    match deadline {
        Some(d) => tokio::time::sleep_until(tokio::time::Instant::from_std(d)).await,
        None => std::future::pending().await,
    }
}

/// Completes [`CLOSE_LINGER`] after `close` was called: a write still blocked then (a server that stopped
/// reading) is abandoned, so `close` never hangs.
pub(super) async fn close_expired(shared: &Shared) {
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
pub(super) async fn write_or_abandon<T, E: std::fmt::Display>(
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
pub(super) async fn wait_for_space(shared: &Shared) {
    if shared.is_paused() {
        shared.inb_space.notified().await;
    }
}

/// What woke the I/O loop.
pub(super) enum Wake {
    Outbound,
    Delay,
    Space,
}

/// After a max_delay wake: batches started before this instant have waited long enough.
pub(super) fn aged_cutoff(wake: &Wake, shared: &Shared) -> Option<Instant> {
    match wake {
        Wake::Delay => Instant::now().checked_sub(shared.options.max_delay()),
        Wake::Outbound | Wake::Space => None,
    }
}

pub(super) fn closing_flag(shared: &Shared) -> bool {
    lock(&shared.out).closing
}
