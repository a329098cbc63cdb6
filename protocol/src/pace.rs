//! Carriage v2's window: how many stream bytes the proxy lets be in flight past the client's last `ack`, so
//! that the queue stays in the proxy (where urgent frames can overtake) and not in a CDN's or an edge's
//! buffers. Sized as BBR sizes its in-flight cap (Cardwell et al., "BBR: Congestion-Based Congestion
//! Control", ACM Queue 14(5), 2016): a multiple of the bandwidth-delay product (BBR's is 2, this one 1.5: see
//! `GAIN_HALVES`), from the highest delivery rate and the lowest round trip seen in the last [`FILTER`].
//!
//! Sans-IO: the caller says when it sent bytes ([`Pacer::on_sent`]) and when an `ack` came
//! ([`Pacer::on_ack`]), with the time; counts are the carriage's stream-byte counts (`docs/carriage.md`).
//!
//! - **Round trip**: from sending a message to the `ack` that covers its last byte.
//! - **Delivery rate**: bytes acknowledged while that message was in flight, over its round trip (BBR's
//!   delivery-rate sample).
//! - **Window**: 1.5 × rate × round trip, at least [`MIN_WINDOW`]; [`INITIAL_WINDOW`] before the first sample.
//!   A sender limited by the window measures at most window / round trip, so the window grows by half each
//!   round trip until the path's rate is reached (as a slow start does, more gently).

use std::collections::VecDeque;
use std::time::{Duration, Instant};

/// How long the highest rate and the lowest round trip are remembered.
pub const FILTER: Duration = Duration::from_secs(10);

/// The smallest window, bytes.
pub const MIN_WINDOW: u64 = 16 * 1024;

/// The window before the first round trip is measured, bytes.
pub const INITIAL_WINDOW: u64 = 16 * 1024;

/// The window while the round trip is probed, bytes: one small message in flight, so that its `ack` shows the
/// path's own round trip, not a queue in it (BBR's ProbeRTT).
pub const PROBE_WINDOW: u64 = 4 * 1024;

/// A sample is clean when at most this many bytes were in flight once its message was sent.
const CLEAN_FLIGHT: u64 = 2 * PROBE_WINDOW;

/// The window is this many times the measured bandwidth-delay product, in halves (3: 1.5 times). BBR's 2
/// covers acks that come late and in bursts; a paced client acknowledges every message at once, so half a
/// bandwidth-delay product of room is enough, and the queue a full window keeps in the path is half as long.
const GAIN_HALVES: u64 = 3;

/// Sends remembered for round-trip samples at once (more are not sampled until acks free room).
const MAX_MARKS: usize = 64;

/// One send: the stream count after it, when, and the count acknowledged then (so `sent - acked` were in
/// flight once it was sent).
#[derive(Clone, Copy, Debug)]
struct Mark {
    sent: u64,
    at: Instant,
    acked: u64,
}

/// The window of one carriage v2 session.
#[derive(Debug)]
pub struct Pacer {
    marks: VecDeque<Mark>,
    acked: u64,
    min_rtt: Option<(Duration, Instant)>,
    /// When the last clean sample came (`None`: none yet).
    clean: Option<Instant>,
    /// Bytes per second.
    max_rate: Option<(u64, Instant)>,
    /// The largest window the caller allows (the retention bound).
    cap: u64,
}

impl Pacer {
    /// A pacer whose client has acknowledged `acked` bytes so far; the window never exceeds `cap` bytes.
    pub fn new(acked: u64, cap: u64) -> Self {
        Self { marks: VecDeque::new(), acked, min_rtt: None, clean: None, max_rate: None, cap: cap.max(MIN_WINDOW) }
    }

    /// Bytes were sent: the stream count is `sent` after them, at `now`.
    pub fn on_sent(&mut self, sent: u64, now: Instant) {
        if self.marks.len() < MAX_MARKS && self.marks.back().is_none_or(|m| m.sent < sent) {
            self.marks.push_back(Mark { sent, at: now, acked: self.acked });
        }
    }

    /// The client acknowledged `acked` bytes in all, at `now`. A count below the last is ignored.
    pub fn on_ack(&mut self, acked: u64, now: Instant) {
        if acked <= self.acked {
            return;
        }
        self.acked = acked;
        let mut last = None;
        while self.marks.front().is_some_and(|m| m.sent <= acked) {
            last = self.marks.pop_front();
        }
        let Some(mark) = last else { return };
        let rtt = now.saturating_duration_since(mark.at).max(Duration::from_micros(100));
        // A clean sample (little in flight ahead of it: sent while probing, or on a quiet path) shows the path's
        // own round trip and replaces an old lowest; a sample behind a full window measures the queue too.
        let clean = mark.sent - mark.acked <= CLEAN_FLIGHT;
        let old = self.clean.is_none_or(|at| now.saturating_duration_since(at) > FILTER);
        if self.min_rtt.is_none_or(|(r, _)| rtt <= r) || (clean && old) {
            self.min_rtt = Some((rtt, now));
        }
        if clean {
            self.clean = Some(now);
        }
        let delivered = acked - mark.acked;
        let rate = u64::try_from(u128::from(delivered) * 1_000_000 / rtt.as_micros().max(1)).unwrap_or(u64::MAX);
        if self.max_rate.is_none_or(|(r, at)| rate >= r || now.saturating_duration_since(at) > FILTER) {
            self.max_rate = Some((rate, now));
        }
    }

    /// The lowest round trip of the last [`FILTER`] (`None` before the first sample).
    pub fn rtt(&self) -> Option<Duration> {
        self.min_rtt.map(|(r, _)| r)
    }

    /// The highest delivery rate of the last [`FILTER`], bytes per second.
    pub fn rate(&self) -> Option<u64> {
        self.max_rate.map(|(r, _)| r)
    }

    /// The window at `now`, bytes: [`PROBE_WINDOW`] once a round trip was measured but no clean sample came
    /// in the last [`FILTER`] (the queue in the path drains and the next `ack` shows the path's own round
    /// trip: BBR's ProbeRTT, here also at the start), [`Pacer::window`] otherwise.
    pub fn window_at(&self, now: Instant) -> u64 {
        let probing = self.min_rtt.is_some() && self.clean.is_none_or(|at| now.saturating_duration_since(at) > FILTER);
        if probing {
            PROBE_WINDOW
        } else {
            self.window()
        }
    }

    /// The window from the last samples, bytes (without the drain of [`Pacer::window_at`]).
    pub fn window(&self) -> u64 {
        match (self.rtt(), self.rate()) {
            (Some(rtt), Some(rate)) => {
                let bdp = u128::from(rate) * rtt.as_micros() / 1_000_000;
                (u64::try_from(bdp).unwrap_or(u64::MAX).saturating_mul(GAIN_HALVES) / 2).clamp(MIN_WINDOW, self.cap)
            }
            _ => INITIAL_WINDOW.min(self.cap),
        }
    }

    /// Bytes that may be sent at `now` when `sent` have been in all.
    pub fn room(&self, sent: u64, now: Instant) -> u64 {
        self.window_at(now).saturating_sub(sent.saturating_sub(self.acked))
    }

    /// The count the client acknowledged last.
    pub fn acked(&self) -> u64 {
        self.acked
    }
}

#[cfg(test)]
mod tests;
