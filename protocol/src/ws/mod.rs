//! WebSocket carriage, version 1: the rules both MoonBridge ends follow on top of RFC 6455.
//!
//! - Binary messages carry the bytes of the Minecraft TCP stream, in order; receivers treat them as one byte
//!   stream and never rely on where messages split.
//! - Close codes (RFC 6455 §7.4.1): see the constants below.
//! - Keepalive: each side sends a Ping when it has written nothing for the ping interval, answers every Ping
//!   at once, and treats 3 intervals without receiving anything as a dead peer ([`Keepalive`]).
//! - Size: a message of [`MAX_MESSAGE_FOR_ONE_FRAME`] bytes must always be accepted (one whole vanilla 1.7.10
//!   frame); a sender splits larger batches. MoonBridge's senders write no message over [`MAX_SENT_MESSAGE`]
//!   and no WebSocket frame over [`MAX_SENT_FRAME_PAYLOAD`] (a longer message goes as Continuation frames,
//!   RFC 6455 §5.4), so intermediaries with message or frame caps pass the carriage whatever the Minecraft
//!   frames' size (a modpack's may be 256 MiB: they span messages).

use std::time::{Duration, Instant};

pub mod compress;
pub mod frame;
pub mod v2;

/// The subprotocol a MoonBridge client may offer; the proxy echoes it when offered.
pub const SUBPROTOCOL: &str = "moonbridge.v1";

/// Bytes in the largest 1.7.10 frame with its length prefix: [`crate::MAX_FRAME_LEN`] plus a 3-byte VarInt.
/// Every receiver's message limit is at least this (the proxy's `max_ws_message_bytes` may not be lower);
/// the client library never sends a larger message.
pub const MAX_MESSAGE_FOR_ONE_FRAME: usize = crate::MAX_FRAME_LEN + 3;

/// Largest WebSocket message a MoonBridge sender writes, in bytes: 1 MiB, what Cloudflare Workers and Kong
/// (its default) let through.
pub const MAX_SENT_MESSAGE: usize = 1024 * 1024;

/// Largest WebSocket frame payload a MoonBridge sender writes, in bytes: 65,535 (a 16-bit length; Apache
/// APISIX, for one, refuses longer frames). A longer message is sent as a Binary frame and Continuation frames.
pub const MAX_SENT_FRAME_PAYLOAD: usize = 65_535;

/// 1000 Normal Closure: the backend closed the session.
pub const CLOSE_NORMAL: u16 = 1000;
/// 1001 Going Away: the proxy is shutting down.
pub const CLOSE_GOING_AWAY: u16 = 1001;
/// 1002 Protocol Error: a malformed or unmasked frame from the client, or bad Minecraft bytes.
pub const CLOSE_PROTOCOL_ERROR: u16 = 1002;

/// 1008 Policy Violation: the connection hit one of the proxy's limits before it logged in: the handshake
/// deadline (`limits.handshake_timeout_seconds`) passed, or a newer connection took its handshake slot
/// (`limits.max_handshaking`). A limit, not a protocol error.
pub const CLOSE_POLICY_VIOLATION: u16 = 1008;
/// 1003 Unsupported Data: a text message.
pub const CLOSE_UNSUPPORTED_DATA: u16 = 1003;
/// 1009 Message Too Big: over the configured message limit (sent before the message is buffered).
pub const CLOSE_MESSAGE_TOO_BIG: u16 = 1009;
/// 1007 Invalid Frame Payload Data: a Text message that is not UTF-8 (RFC 6455 §7.4.1; the client library
/// sends it to a server that sent one).
pub const CLOSE_INVALID_PAYLOAD: u16 = 1007;
/// 1011 Internal Error: the backend is unreachable or refused the connection (with a short reason).
pub const CLOSE_INTERNAL_ERROR: u16 = 1011;

/// True for the close codes of an orderly end (1000 Normal Closure, 1001 Going Away).
pub fn is_orderly_close(code: u16) -> bool {
    matches!(code, CLOSE_NORMAL | CLOSE_GOING_AWAY)
}

/// Number of ping intervals without receiving anything after which the peer is dead.
pub const DEAD_AFTER_INTERVALS: u32 = 3;

/// What a [`Keepalive`] tick asks the caller to do.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeepaliveAction {
    /// Nothing: something was written during the last half interval.
    None,
    /// Send a Ping now (nothing was written for at least half an interval).
    Ping,
    /// Nothing was received for [`DEAD_AFTER_INTERVALS`] intervals: close the connection.
    Dead,
}

/// The keepalive schedule, sans-IO: the caller waits until [`Keepalive::next_tick`] (every half interval),
/// calls [`Keepalive::on_tick`], and tells it about writes and reads; the write path only sets a flag.
///
/// Guarantees, for an interval `I`:
/// - never silent for longer than `I`: a write just after a tick is followed, if nothing else is written, by a
///   Ping at most two ticks (`I`) later;
/// - never a Ping sooner than `I / 2` after a write: a Ping is only sent at a tick when the whole half
///   interval before it had no write;
/// - while idle, one Ping per interval (a Ping counts as its period's write).
#[derive(Clone, Debug)]
pub struct Keepalive {
    interval: Duration,
    wrote: bool,
    last_received: Instant,
    next_tick: Instant,
}

impl Keepalive {
    /// A schedule for `interval` (non-zero), starting at `now`.
    pub fn new(interval: Duration, now: Instant) -> Self {
        Self { interval, wrote: true, last_received: now, next_tick: now + interval / 2 }
    }

    /// How often [`Keepalive::on_tick`] runs: half the interval.
    pub fn tick_period(&self) -> Duration {
        self.interval / 2
    }

    /// When the next tick is due. A caller that ticks late (a stalled thread) gets the following tick a whole
    /// period after that, never a burst of catch-up ticks.
    pub fn next_tick(&self) -> Instant {
        self.next_tick
    }

    /// Records that something (data, Pong or Ping) was written.
    #[inline]
    pub fn on_write(&mut self) {
        self.wrote = true;
    }

    /// Records that something (any frame) was received at `now`.
    #[inline]
    pub fn on_receive(&mut self, now: Instant) {
        self.last_received = now;
    }

    /// Decides what to do at a tick, and schedules the next one.
    pub fn on_tick(&mut self, now: Instant) -> KeepaliveAction {
        self.next_tick = (self.next_tick + self.tick_period()).max(now + self.tick_period());
        if now.saturating_duration_since(self.last_received) >= self.interval * DEAD_AFTER_INTERVALS {
            return KeepaliveAction::Dead;
        }
        if std::mem::replace(&mut self.wrote, false) {
            KeepaliveAction::None
        } else {
            self.wrote = true;
            KeepaliveAction::Ping
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Simulates a connection with writes at the given millisecond offsets, ticking every half interval,
    /// and returns the Ping times.
    fn pings(interval_ms: u64, writes: &[u64], until_ms: u64) -> Vec<u64> {
        let t0 = Instant::now();
        let at = |ms: u64| t0 + Duration::from_millis(ms);
        let mut k = Keepalive::new(Duration::from_millis(interval_ms), t0);
        let half = interval_ms / 2;
        let mut events: Vec<(u64, bool)> = writes.iter().map(|&w| (w, true)).collect();
        events.extend((1..=until_ms / half).map(|i| (i * half, false)));
        events.sort_by_key(|&(t, is_write)| (t, !is_write));
        let mut out = Vec::new();
        for (t, is_write) in events {
            k.on_receive(at(t)); // the peer keeps answering
            if is_write {
                k.on_write();
            } else if k.on_tick(at(t)) == KeepaliveAction::Ping {
                out.push(t);
            }
        }
        out
    }

    #[test]
    fn idle_connection_pings_once_per_interval() {
        assert_eq!(pings(1000, &[], 5000), [1000, 2000, 3000, 4000, 5000]);
    }

    #[test]
    fn busy_connection_never_pings() {
        let writes: Vec<u64> = (0..50).map(|i| i * 300).collect();
        // Writes every 300 ms (the last at 14.7 s): no tick up to 15 s ever sees a silent half interval.
        assert_eq!(pings(1000, &writes, 15_000), Vec::<u64>::new());
        // Once they stop, pings resume within one interval.
        assert_eq!(pings(1000, &writes, 17_000), [15_500, 16_500]);
    }

    #[test]
    fn bounds_hold_for_every_write_offset() {
        // For a single write at any offset, the first Ping comes between I/2 and I after it.
        for w in (0..3000).step_by(37) {
            let p = pings(1000, &[w], 6000);
            let first = p.iter().copied().find(|&t| t > w).unwrap();
            assert!(first - w >= 500, "write at {w}, ping at {first}");
            assert!(first - w <= 1000, "write at {w}, ping at {first}");
            // No ping closer than I/2 after the write.
            assert!(p.iter().all(|&t| t <= w || t - w >= 500));
        }
    }

    #[test]
    fn next_tick_follows_the_period_and_never_bursts() {
        let t0 = Instant::now();
        let mut k = Keepalive::new(Duration::from_secs(2), t0);
        assert_eq!(k.next_tick(), t0 + Duration::from_secs(1));
        k.on_tick(t0 + Duration::from_secs(1));
        assert_eq!(k.next_tick(), t0 + Duration::from_secs(2));
        // Ten seconds late: one tick now, the next a period later rather than ten at once.
        k.on_receive(t0 + Duration::from_secs(12));
        k.on_tick(t0 + Duration::from_secs(12));
        assert_eq!(k.next_tick(), t0 + Duration::from_secs(13));
    }

    #[test]
    fn orderly_close_codes() {
        assert!(is_orderly_close(1000) && is_orderly_close(1001));
        assert!(!is_orderly_close(1002) && !is_orderly_close(1011) && !is_orderly_close(1006));
        assert_eq!(MAX_MESSAGE_FOR_ONE_FRAME, 2_097_154);
    }

    #[test]
    fn silence_for_three_intervals_is_dead() {
        let t0 = Instant::now();
        let mut k = Keepalive::new(Duration::from_secs(1), t0);
        assert_eq!(k.tick_period(), Duration::from_millis(500));
        assert_eq!(k.on_tick(t0 + Duration::from_millis(2999)), KeepaliveAction::None);
        assert_eq!(k.on_tick(t0 + Duration::from_millis(3000)), KeepaliveAction::Dead);
        k.on_receive(t0 + Duration::from_millis(3000));
        assert_ne!(k.on_tick(t0 + Duration::from_millis(3500)), KeepaliveAction::Dead);
    }
}
