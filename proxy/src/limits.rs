//! Connection caps: `max_connections` (a counter with a limit) and `max_handshaking` (slots that evict the
//! oldest). Both limits can change while connections are open (a reload): a lower `max_connections` admits no
//! new connection until enough have ended and closes none; a lower `max_handshaking` evicts the oldest
//! handshakes as new connections arrive, as a full stage always does.

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

/// `max_connections`: open player connections, and the limit.
#[derive(Debug)]
pub(crate) struct ConnLimit {
    open: AtomicUsize,
    max: AtomicUsize,
}

impl ConnLimit {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self { open: AtomicUsize::new(0), max: AtomicUsize::new(max) })
    }

    /// Counts one more open connection, unless the limit is reached.
    pub(crate) fn try_acquire(self: &Arc<Self>) -> Option<ConnPermit> {
        let max = self.max.load(Ordering::Relaxed);
        self.open
            .fetch_update(Ordering::AcqRel, Ordering::Acquire, |n| (n < max).then_some(n + 1))
            .ok()
            .map(|_| ConnPermit(Arc::clone(self)))
    }

    /// Changes the limit (for connections accepted from now on).
    pub(crate) fn set_max(&self, max: usize) {
        self.max.store(max, Ordering::Relaxed);
    }

    /// Open connections now.
    pub(crate) fn open(&self) -> usize {
        self.open.load(Ordering::Relaxed)
    }
}

/// One open connection's place under `max_connections`; given back on drop.
#[derive(Debug)]
pub(crate) struct ConnPermit(Arc<ConnLimit>);

impl Drop for ConnPermit {
    fn drop(&mut self) {
        self.0.open.fetch_sub(1, Ordering::AcqRel);
    }
}

/// Slots for connections still in the handshake stage.
///
/// When every slot is taken, admitting a new connection closes the one that has waited longest. Slow-loris
/// clients then only ever push each other out, while a real player's handshake (milliseconds) completes long
/// before `max_handshaking` newer connections arrive.
#[derive(Debug)]
pub(crate) struct HandshakeSlots {
    max: AtomicUsize,
    inner: Mutex<SlotsInner>,
}

#[derive(Debug, Default)]
struct SlotsInner {
    next_id: u64,
    live: BTreeMap<u64, CancellationToken>,
}

impl HandshakeSlots {
    pub(crate) fn new(max: usize) -> Arc<Self> {
        Arc::new(Self { max: AtomicUsize::new(max.max(1)), inner: Mutex::new(SlotsInner::default()) })
    }

    /// Changes the number of slots (for connections that enter from now on).
    pub(crate) fn set_max(&self, max: usize) {
        self.max.store(max.max(1), Ordering::Relaxed);
    }

    /// Takes a slot; returns it and whether an older connection was evicted for it.
    pub(crate) fn enter(self: &Arc<Self>) -> (HandshakeSlot, bool) {
        let token = CancellationToken::new();
        let mut inner = self.inner.lock().unwrap_or_else(PoisonError::into_inner);
        let mut evicted = false;
        while inner.live.len() >= self.max.load(Ordering::Relaxed) {
            match inner.live.pop_first() {
                Some((_, oldest)) => {
                    oldest.cancel();
                    evicted = true;
                }
                None => break,
            }
        }
        let id = inner.next_id;
        inner.next_id += 1;
        inner.live.insert(id, token.clone());
        drop(inner);
        (HandshakeSlot { id, slots: Arc::clone(self), evicted: token }, evicted)
    }

    /// Connections in the handshake stage now.
    pub(crate) fn in_use(&self) -> usize {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner).live.len()
    }
}

/// A held handshake slot; released on drop.
#[derive(Debug)]
pub(crate) struct HandshakeSlot {
    id: u64,
    slots: Arc<HandshakeSlots>,
    evicted: CancellationToken,
}

impl HandshakeSlot {
    /// Completes when a newer connection evicted this one.
    pub(crate) async fn evicted(&self) {
        self.evicted.cancelled().await;
    }
}

impl Drop for HandshakeSlot {
    fn drop(&mut self) {
        let mut inner = self.slots.inner.lock().unwrap_or_else(PoisonError::into_inner);
        inner.live.remove(&self.id);
    }
}

/// Lets through at most `per_interval` log lines per interval and counts the rest, so bad input from many
/// peers cannot flood the log. Each allowed line reports how many were suppressed before it.
#[derive(Debug)]
pub(crate) struct LogLimiter {
    interval: Duration,
    per_interval: u32,
    state: Mutex<LimiterState>,
}

#[derive(Debug)]
struct LimiterState {
    window_start: Instant,
    in_window: u32,
    suppressed: u64,
}

impl LogLimiter {
    pub(crate) fn new(per_interval: u32, interval: Duration) -> Self {
        Self {
            interval,
            per_interval,
            state: Mutex::new(LimiterState { window_start: Instant::now(), in_window: 0, suppressed: 0 }),
        }
    }

    /// `Some(suppressed_before)` when a line may be logged now.
    pub(crate) fn allow(&self) -> Option<u64> {
        let mut s = self.state.lock().unwrap_or_else(PoisonError::into_inner);
        let now = Instant::now();
        if now.duration_since(s.window_start) >= self.interval {
            s.window_start = now;
            s.in_window = 0;
        }
        if s.in_window < self.per_interval {
            s.in_window += 1;
            Some(std::mem::take(&mut s.suppressed))
        } else {
            s.suppressed += 1;
            None
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn oldest_is_evicted_when_full() {
        let slots = HandshakeSlots::new(2);
        let (a, ev) = slots.enter();
        assert!(!ev);
        let (_b, ev) = slots.enter();
        assert!(!ev);
        assert!(!a.evicted.is_cancelled());
        let (_c, ev) = slots.enter();
        assert!(ev);
        assert!(a.evicted.is_cancelled());
        assert_eq!(slots.in_use(), 2);
        drop(a); // already evicted: dropping must not remove anyone else
        assert_eq!(slots.in_use(), 2);
    }

    #[test]
    fn released_on_drop() {
        let slots = HandshakeSlots::new(1);
        let (a, _) = slots.enter();
        drop(a);
        assert_eq!(slots.in_use(), 0);
        let (_b, ev) = slots.enter();
        assert!(!ev);
    }

    #[test]
    fn limiter_counts_suppressed_lines() {
        let l = LogLimiter::new(2, Duration::from_secs(3600));
        assert_eq!(l.allow(), Some(0));
        assert_eq!(l.allow(), Some(0));
        assert_eq!(l.allow(), None);
        assert_eq!(l.allow(), None);
        let mut s = l.state.lock().unwrap();
        s.window_start -= Duration::from_secs(3601);
        drop(s);
        assert_eq!(l.allow(), Some(2));
    }
}
