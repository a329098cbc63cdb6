//! The window from a simulated path: rate and round trip measured, the window grows to 1.5 bandwidth-delay
//! products and no further.

use std::time::{Duration, Instant};

use super::*;

#[test]
fn the_window_starts_at_the_initial_window_and_is_capped() {
    let p = Pacer::new(0, 1 << 30);
    assert_eq!(p.window(), INITIAL_WINDOW);
    assert_eq!(p.room(10_000, Instant::now()), INITIAL_WINDOW - 10_000);
    assert_eq!(Pacer::new(0, 20_000).window(), INITIAL_WINDOW, "the cap is above it");
    assert_eq!(Pacer::new(0, 12_000).window(), MIN_WINDOW, "a cap under the smallest window: the smallest");
    assert_eq!(Pacer::new(0, 1).window(), MIN_WINDOW, "never under the smallest window");
}

#[test]
fn one_round_trip_gives_the_rate_and_the_round_trip() {
    let t = Instant::now();
    let mut p = Pacer::new(0, 1 << 30);
    p.on_sent(50_000, t);
    p.on_ack(50_000, t + Duration::from_millis(100));
    assert_eq!(p.rtt(), Some(Duration::from_millis(100)));
    assert_eq!(p.rate(), Some(500_000));
    assert_eq!(p.window(), 75_000, "1.5 × 500,000 B/s × 0.1 s");
    assert_eq!(p.acked(), 50_000);
}

/// A path of `rate` bytes per second and `rtt` round trip (queue-free), a sender that always has data and
/// sends what the window allows in 4 KiB messages; returns the window after `secs` of simulated time.
fn simulate(rate: u64, rtt: Duration, secs: u64) -> Pacer {
    let t0 = Instant::now();
    let mut p = Pacer::new(0, 1 << 30);
    let mut sent = 0u64;
    // Bytes leave the bottleneck at `rate`; each is acknowledged rtt after it left.
    let mut wire_free = t0;
    let mut acks: std::collections::VecDeque<(Instant, u64)> = Default::default();
    let step = Duration::from_millis(1);
    let mut now = t0;
    while now < t0 + Duration::from_secs(secs) {
        while acks.front().is_some_and(|(at, _)| *at <= now) {
            let (_, n) = acks.pop_front().unwrap();
            p.on_ack(n, now);
        }
        while p.room(sent, now) >= 4096 {
            sent += 4096;
            p.on_sent(sent, now);
            let start = wire_free.max(now);
            wire_free = start + Duration::from_micros(4096 * 1_000_000 / rate);
            acks.push_back((wire_free + rtt, sent));
        }
        now += step;
    }
    p
}

#[test]
fn the_window_settles_at_one_and_a_half_bandwidth_delay_products() {
    // 4 Mbit/s, 40 ms: 500,000 B/s × 0.04 s = 20,000 bytes.
    let p = simulate(500_000, Duration::from_millis(40), 5);
    let rate = p.rate().unwrap();
    assert!((450_000..=560_000).contains(&rate), "rate {rate}");
    let rtt = p.rtt().unwrap();
    assert!(rtt >= Duration::from_millis(40) && rtt <= Duration::from_millis(60), "rtt {rtt:?}");
    let w = p.window();
    assert!((27_000..=45_000).contains(&w), "window {w}");
}

#[test]
fn a_fast_path_opens_the_window_well_past_the_initial_one() {
    // 100 MB/s, 2 ms: a BDP of 200 KB.
    let p = simulate(100_000_000, Duration::from_millis(2), 2);
    assert!(p.window() >= 300_000, "window {}", p.window());
}

#[test]
fn old_acks_and_acks_without_a_mark_change_nothing() {
    let t = Instant::now();
    let mut p = Pacer::new(1_000, 1 << 30);
    p.on_ack(500, t);
    assert_eq!(p.acked(), 1_000);
    p.on_ack(2_000, t);
    assert_eq!(p.acked(), 2_000);
    assert_eq!(p.rtt(), None, "nothing was marked");
}

#[test]
fn the_round_trip_is_probed_at_the_start_and_when_old() {
    let t = Instant::now();
    let mut p = Pacer::new(0, 1 << 30);
    // A first sample behind 50 kB in flight: measured, but not the path's own round trip.
    p.on_sent(50_000, t);
    p.on_ack(50_000, t + Duration::from_millis(140));
    assert_eq!(p.window_at(t + Duration::from_millis(140)), PROBE_WINDOW, "probing: one small message in flight");
    // The probe's message: 4 kB alone on the path.
    p.on_sent(54_096, t + Duration::from_millis(140));
    p.on_ack(54_096, t + Duration::from_millis(188));
    assert_eq!(p.rtt(), Some(Duration::from_millis(48)));
    let now = t + Duration::from_millis(188);
    assert_eq!(p.window_at(now), p.window());
    assert!(p.window() > PROBE_WINDOW);
    // Ten seconds without a clean sample: probed again; a sample behind a full window does not end it.
    let late = now + FILTER + Duration::from_secs(1);
    assert_eq!(p.window_at(late), PROBE_WINDOW);
    p.on_sent(300_000, late);
    p.on_ack(300_000, late + Duration::from_millis(300));
    assert_eq!(p.window_at(late + Duration::from_millis(300)), PROBE_WINDOW);
    p.on_sent(301_000, late + Duration::from_millis(300));
    p.on_ack(301_000, late + Duration::from_millis(345));
    assert_eq!(p.rtt(), Some(Duration::from_millis(45)), "a clean sample replaces an old lowest");
    assert!(p.window_at(late + Duration::from_millis(345)) > PROBE_WINDOW);
}
