//! The relay's clientbound queue ([`Outbox`]): the player's urgent and bulk lanes
//! ([`moonbridge_protocol::lanes`]), their bound (`limits.player_queue_bytes`), carriage v2's window for a
//! paced client ([`moonbridge_protocol::pace`]), and the figures they publish (docs/lanes.md).
//!
//! Both relay loops use it the same way: a backend batch goes to the player at once when nothing is queued
//! and the window allows ([`Outbox::direct`], then [`Outbox::pass`]: no copy); otherwise it is queued
//! ([`Outbox::push`]) and the loop keeps reading the backend while the queue has room, sending
//! [`Outbox::next`] whenever the player's socket (and the window) takes more. The player's socket keeps at most
//! [`crate::wire::UNSENT_BYTES`] not yet sent in the kernel (`TCP_NOTSENT_LOWAT`, set at accept), so the
//! queue, and the choice of what goes first, stays here.

use std::time::Instant;

use bytes::BytesMut;
use moonbridge_protocol::lanes::{Lane, LaneQueue, Sorter};
use moonbridge_protocol::pace::Pacer;
use prometheus::{Histogram, IntGauge};

use crate::delivery::Delivery;
use crate::metrics::BackendMetrics;

/// What a relay's lanes start with (`[lanes]`, `limits.player_queue_bytes`).
#[derive(Debug)]
pub(crate) struct LaneStart {
    pub(crate) sorter: Sorter,
    /// `limits.player_queue_bytes`.
    pub(crate) bound: usize,
    /// Bytes left of the frame the stream sent so far ends inside (set by [`super::Flow::lanes`]).
    pub(crate) rest: usize,
}

impl LaneStart {
    /// The lanes' start when `[lanes]` is on.
    pub(crate) fn from_tunables(t: &crate::config::Tunables) -> Option<Box<Self>> {
        t.lanes.on().then(|| {
            let sorter = Sorter::with_channels(&t.lanes.urgent_channels);
            Box::new(Self { sorter, bound: t.limits.player_queue_bytes, rest: 0 })
        })
    }
}

/// At most this many bytes leave the queue per write when nothing paces them (TCP, carriage v1, an unpaced
/// v2 client), and at least this many per message when the window does: small enough that an urgent frame
/// waits behind little, large enough that a fast path costs few writes.
pub(crate) const QUEUED_WRITE_BYTES: usize = 16 * 1024;

/// A paced message carries about this much of the measured delivery rate (10 ms worth), at least
/// [`PACED_MIN_MESSAGE_BYTES`].
const PACED_SHARE_PER_SECOND: u64 = 100;

/// The smallest paced message from the queue, bytes: 8 ms at 4 Mbit/s.
const PACED_MIN_MESSAGE_BYTES: u64 = 4 * 1024;

/// The clientbound queue of one relay.
pub(crate) struct Outbox<'a> {
    queue: LaneQueue,
    bound: usize,
    pacer: Option<Pacer>,
    /// Unpaced: how fast the link took the last message that made it wait, bytes per second (`None`: it took
    /// the last one at once).
    write_rate: Option<u64>,
    figures: &'a Delivery,
    delay: Histogram,
    gauge: IntGauge,
    /// What this queue adds to `moonbridge_lane_queued_bytes` now.
    counted: i64,
}

impl<'a> Outbox<'a> {
    /// Lanes for a stream whose frames are followed from a boundary (frames longer than `max_frame_len`
    /// stop the sorting).
    pub(crate) fn new(start: LaneStart, max_frame_len: usize, figures: &'a Delivery, metrics: &BackendMetrics) -> Self {
        figures.lanes.store(true, std::sync::atomic::Ordering::Relaxed);
        Self {
            queue: LaneQueue::inside(start.sorter, max_frame_len, start.rest),
            bound: start.bound,
            pacer: None,
            write_rate: None,
            figures,
            delay: metrics.urgent_delay.clone(),
            gauge: metrics.lane_queued.clone(),
            counted: 0,
        }
    }

    /// Keeps carriage v2's window for a paced client that has acknowledged `acked` bytes; the window never
    /// exceeds `cap` (the resume buffer).
    pub(crate) fn pace(&mut self, acked: u64, cap: usize) {
        self.pacer = Some(Pacer::new(acked, cap as u64));
    }

    /// How many bytes the next backend read may queue.
    pub(crate) fn room(&self) -> usize {
        self.bound.saturating_sub(self.queue.len())
    }

    /// True when a batch of `n` bytes may go to the player at once (nothing queued, and the window allows it
    /// when `sent` bytes were sent in all).
    pub(crate) fn direct(&self, n: usize, sent: u64) -> bool {
        self.queue.is_empty() && self.pacer.as_ref().is_none_or(|p| p.room(sent, Instant::now()) >= n as u64)
    }

    /// How many of `n` bytes may go at once in one message: all of them when paced (the window decided) or when
    /// the link takes messages at once; otherwise about 10 ms of the rate it took the last one at.
    pub(crate) fn direct_len(&self, n: usize) -> usize {
        match (&self.pacer, self.write_rate) {
            (None, Some(rate)) => n.min(unpaced_len(rate)),
            _ => n,
        }
    }

    /// A message of `n` bytes took `took` to write (the socket keeps at most 16 KiB unsent, so a write waits
    /// about as long as the path needs for it). A small one written at once says nothing (it fit the kernel's
    /// 16 KiB); a large one written at once says the link is fast.
    pub(crate) fn wrote(&mut self, n: usize, took: std::time::Duration) {
        if took >= std::time::Duration::from_millis(2) {
            self.write_rate = Some(u64::try_from(n as u128 * 1_000_000 / took.as_micros().max(1)).unwrap_or(u64::MAX));
        } else if n >= 4 * QUEUED_WRITE_BYTES {
            self.write_rate = None;
        }
    }

    /// Follows plaintext bytes that went to the player at once.
    pub(crate) fn pass(&mut self, data: &[u8]) {
        self.queue.pass(data, Instant::now());
    }

    /// Follows a whole batch that went to the player at once from where the relay's own frame scanner stands
    /// after it (`Some((rest, prefix))`, see [`super::Flow::position`]), without looking at its bytes again;
    /// `None`: the stream is no longer followed, and the lanes keep its order from here.
    pub(crate) fn passed(&mut self, position: Option<(usize, &[u8])>) {
        match position {
            Some((rest, prefix)) => self.queue.resync(rest, prefix),
            None => self.queue.lose(),
        }
    }

    /// Queues plaintext bytes from the backend.
    pub(crate) fn push(&mut self, data: &[u8]) {
        let now = Instant::now();
        self.queue.push(data, now);
        self.publish(now);
    }

    /// True when [`Outbox::next`] would give bytes (`sent`: the carriage's count of bytes sent in all).
    pub(crate) fn ready(&self, sent: u64) -> bool {
        if self.queue.stalled() {
            return false;
        }
        let Some(p) = &self.pacer else { return true };
        // Paced: room for a message worth sending, not a few bytes at a time as acks trickle in (each ack
        // freeing one small message would keep every later message as small): about 10 ms of the rate, at
        // most a quarter of the window, at least 4 KiB; less when less is queued.
        let now = Instant::now();
        let worth = paced_len(p).min(p.window_at(now) / 4).max(PACED_MIN_MESSAGE_BYTES);
        let queued = (self.queue.queued(Lane::Urgent) + self.queue.queued(Lane::Bulk)) as u64;
        p.room(sent, now) >= worth.min(queued).max(1)
    }

    /// The next plaintext bytes to send (empty when none may go), at most `cap`: urgent frames first, at most
    /// [`QUEUED_WRITE_BYTES`] unpaced; paced, at most the window's room and about 10 ms of the delivery rate
    /// (at least 4 KiB).
    pub(crate) fn next(&mut self, sent: u64, cap: usize) -> BytesMut {
        let max = match &self.pacer {
            None => self.write_rate.map_or(QUEUED_WRITE_BYTES, unpaced_len),
            Some(p) => usize::try_from(paced_len(p).min(p.room(sent, Instant::now()))).unwrap_or(QUEUED_WRITE_BYTES),
        };
        let max = max.min(cap);
        let now = Instant::now();
        let mut out = BytesMut::with_capacity(max.min(self.queue.len()));
        let taken = self.queue.take(max, &mut out, now);
        if let Some(waited) = taken.urgent_wait {
            self.delay.observe(waited.as_secs_f64());
            self.figures.urgent_waited(waited);
        }
        self.publish(now);
        out
    }

    /// Everything queued, in the order it goes (a lost link's queue goes to the resume buffer; shutdown).
    pub(crate) fn take_all(&mut self) -> BytesMut {
        let now = Instant::now();
        let (out, taken) = self.queue.take_all(now);
        if let Some(waited) = taken.urgent_wait {
            self.delay.observe(waited.as_secs_f64());
        }
        self.publish(now);
        out
    }

    /// The carriage's count of bytes sent is `sent` after a send.
    pub(crate) fn sent(&mut self, sent: u64) {
        if let Some(p) = &mut self.pacer {
            p.on_sent(sent, Instant::now());
            self.figures.in_flight.store(sent.saturating_sub(p.acked()), std::sync::atomic::Ordering::Relaxed);
        }
    }

    /// The client acknowledged `acked` bytes in all.
    pub(crate) fn acked(&mut self, acked: u64) {
        use std::sync::atomic::Ordering::Relaxed;
        if let Some(p) = &mut self.pacer {
            p.on_ack(acked, Instant::now());
            let f = self.figures;
            f.rate.store(p.rate().unwrap_or(0), Relaxed);
            f.rtt_us.store(p.rtt().map_or(0, |r| u64::try_from(r.as_micros()).unwrap_or(u64::MAX)), Relaxed);
            f.window.store(p.window_at(Instant::now()), Relaxed);
        }
    }

    /// Nothing can leave the lanes whatever the window: they are empty, or the frame under way waits for
    /// bytes not received.
    pub(crate) fn stalled(&self) -> bool {
        self.queue.stalled()
    }

    /// Nothing queued or held.
    pub(crate) fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    /// The bytes sent so far end at a frame boundary.
    pub(crate) fn at_boundary(&self) -> bool {
        self.queue.at_boundary()
    }

    fn publish(&mut self, now: Instant) {
        let q = &self.queue;
        let since = |lane| q.age(lane, now).map(|age| now - age);
        self.figures.urgent.set(q.queued(Lane::Urgent), since(Lane::Urgent));
        self.figures.bulk.set(q.queued(Lane::Bulk), since(Lane::Bulk));
        let total = i64::try_from(q.len()).unwrap_or(i64::MAX);
        self.gauge.add(total - self.counted);
        self.counted = total;
    }
}

/// A paced message's length: about 10 ms of the delivery rate, between [`PACED_MIN_MESSAGE_BYTES`] and a relay
/// batch.
fn paced_len(p: &Pacer) -> u64 {
    share(p.rate().unwrap_or(0), PACED_MIN_MESSAGE_BYTES)
}

/// An unpaced write's length from the rate the link took the last one at: about 10 ms of it, at least
/// [`QUEUED_WRITE_BYTES`].
fn unpaced_len(rate: u64) -> usize {
    usize::try_from(share(rate, QUEUED_WRITE_BYTES as u64)).unwrap_or(QUEUED_WRITE_BYTES)
}

/// About 10 ms of `rate` (bytes per second), between `at_least` and a relay batch.
fn share(rate: u64, at_least: u64) -> u64 {
    (rate / PACED_SHARE_PER_SECOND).clamp(at_least, crate::wire::RELAY_CHUNK as u64)
}

impl Drop for Outbox<'_> {
    fn drop(&mut self) {
        self.gauge.sub(self.counted);
    }
}
