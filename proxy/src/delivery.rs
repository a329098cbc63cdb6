//! A player's delivery figures ([`Delivery`]): what its relay has queued in each lane and since when, and what
//! carriage v2's window measured (delivery rate, round trip, window, bytes in flight). The relay writes them
//! (relaxed atomics, at each send); the admin API's `GET /admin/delivery` reads them (docs/lanes.md). Not
//! Prometheus labels: one series per player would not scale; the aggregate is `moonbridge_urgent_delay_seconds`.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::OnceLock;
use std::time::{Duration, Instant};

/// The process's reference instant for the figures' times (queued-since), in microseconds after it.
fn epoch() -> Instant {
    static EPOCH: OnceLock<Instant> = OnceLock::new();
    *EPOCH.get_or_init(Instant::now)
}

/// Microseconds from the process's reference instant to `at`, at least 1 (0 means "nothing queued").
pub(crate) fn micros(at: Instant) -> u64 {
    u64::try_from(at.saturating_duration_since(epoch()).as_micros()).unwrap_or(u64::MAX).max(1)
}

/// One lane's figures.
#[derive(Debug, Default)]
pub(crate) struct LaneFigures {
    /// Bytes queued.
    pub(crate) bytes: AtomicU64,
    /// When the oldest queued byte was queued ([`micros`]), 0 when the lane is empty.
    pub(crate) since_us: AtomicU64,
}

impl LaneFigures {
    /// Bytes queued and how long the oldest has waited at `now`.
    pub(crate) fn read(&self, now: Instant) -> (u64, Duration) {
        let since = self.since_us.load(Ordering::Relaxed);
        let age = if since == 0 { 0 } else { micros(now).saturating_sub(since) };
        (self.bytes.load(Ordering::Relaxed), Duration::from_micros(age))
    }

    /// Sets them: `bytes` queued, the oldest since `since` (`None`: empty).
    pub(crate) fn set(&self, bytes: usize, since: Option<Instant>) {
        self.bytes.store(bytes as u64, Ordering::Relaxed);
        self.since_us.store(since.map_or(0, micros), Ordering::Relaxed);
    }
}

/// A player's delivery figures, shared between its relay and the admin API.
#[derive(Debug, Default)]
pub(crate) struct Delivery {
    /// The relay sorts this player's frames into lanes.
    pub(crate) lanes: AtomicBool,
    pub(crate) urgent: LaneFigures,
    pub(crate) bulk: LaneFigures,
    /// Carriage v2 paced: the highest delivery rate of the last 10 s, bytes per second (0: not measured).
    pub(crate) rate: AtomicU64,
    /// Carriage v2 paced: the lowest round trip of the last 10 s, microseconds (0: not measured).
    pub(crate) rtt_us: AtomicU64,
    /// Carriage v2 paced: the window, bytes (0: not paced).
    pub(crate) window: AtomicU64,
    /// Carriage v2 paced: bytes sent and not acknowledged.
    pub(crate) in_flight: AtomicU64,
    /// The longest an urgent frame waited in the queue, microseconds, since the session started.
    pub(crate) urgent_max_us: AtomicU64,
}

impl Delivery {
    /// Notes that urgent frames waited `waited` in the queue.
    pub(crate) fn urgent_waited(&self, waited: Duration) {
        let us = u64::try_from(waited.as_micros()).unwrap_or(u64::MAX);
        self.urgent_max_us.fetch_max(us, Ordering::Relaxed);
    }
}
