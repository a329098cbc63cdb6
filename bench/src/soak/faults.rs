//! The soak's fault schedule: every `--fault-every` seconds after the ramp, the next fault in turn (the
//! backend killed and restarted, connections reset or ended with a FIN, players that stop reading, the session
//! server slow or too slow), recorded before it happens so the sessions it ends are explained; meanwhile the
//! proxies' peak of what they hold.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use super::args::{SoakArgs, SESSION_TIMEOUT_S, WRITE_STALL_S};
use super::state::Shared;
use crate::backend::Backend;
use crate::metrics::Held;

/// Injects the faults until the soak's end (see the module documentation); `delay` is the session server's
/// answer delay in ms. Returns how many faults were injected, and the proxies' holdings at their peak of
/// memory (from `start` on).
pub async fn inject(
    args: &SoakArgs,
    shared: &Arc<Shared>,
    backend: &Arc<Backend>,
    delay: &AtomicU64,
    ramp: Duration,
    held_all: impl Fn() -> Held,
    start: Held,
) -> anyhow::Result<(usize, Held)> {
    let began = Instant::now();
    let end_at = began + Duration::from_secs(args.seconds);
    let mut peak = start;
    let mut n = 0usize;
    let mut rng = 0x5eed_u64;
    let mut pick = |k: usize| -> Vec<usize> {
        (0..k)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng % args.players as u64) as usize
            })
            .collect()
    };
    let mut next_fault = began + ramp + Duration::from_secs(args.fault_every);
    while Instant::now() < end_at {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let h = held_all();
        if h.rss_kib > peak.rss_kib {
            peak = h;
        }
        if Instant::now() < next_fault || Instant::now() + Duration::from_secs(8) > end_at {
            continue;
        }
        next_fault += Duration::from_secs(args.fault_every);
        let now = Instant::now();
        let kind = n % 6;
        n += 1;
        match kind {
            0 => {
                // Recorded before it happens: a player that sees the fault at once finds it explained.
                shared.add_fault("backend killed", now, now + Duration::from_secs(3), None);
                backend.kill();
                tokio::time::sleep(Duration::from_secs(3)).await;
                backend.restart().await?;
            }
            1 | 2 => {
                let players = pick(5);
                let name = if kind == 1 { "connection reset" } else { "connection FIN" };
                shared.add_fault(name, now, now + Duration::from_secs(1), Some(players.clone()));
                for &p in &players {
                    shared.commands[p].store(kind, Ordering::Relaxed);
                }
            }
            3 => {
                let players = pick(3);
                shared.add_fault(
                    "player stops reading",
                    now,
                    now + Duration::from_secs(WRITE_STALL_S * 3 + 2),
                    Some(players.clone()),
                );
                for &p in &players {
                    shared.commands[p].store(3, Ordering::Relaxed);
                }
            }
            4 => {
                // Slow but in time: logins take 2 s longer and succeed.
                delay.store(2000, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(5)).await;
                delay.store(0, Ordering::Relaxed);
            }
            _ => {
                // Too slow: logins meanwhile fail with "servers are down".
                delay.store(SESSION_TIMEOUT_S * 1000 + 2000, Ordering::Relaxed);
                shared.add_fault(
                    "session server too slow",
                    now,
                    now + Duration::from_secs(5 + SESSION_TIMEOUT_S),
                    None,
                );
                tokio::time::sleep(Duration::from_secs(5)).await;
                delay.store(0, Ordering::Relaxed);
            }
        }
    }
    Ok((n, peak))
}
