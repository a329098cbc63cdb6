//! Giving freed memory back to the operating system.
//!
//! glibc's allocator keeps what a burst of sessions freed (resume buffers, relay and TLS buffers) in its arenas
//! for reuse, so after a flood the proxy's resident size would stay at its peak for good, and an operator's
//! graphs with it. Looking every [`TRIM_INTERVAL`], once enough connections ended (sessions over, parked
//! sessions expired, instance links ended) or zstd contexts were freed after a quiet spell (about 119 KiB compressing, 223 KiB
//! decompressing: [`TRIM_AFTER_ENDED`]), the proxy asks glibc to return the free pages of every arena
//! (`malloc_trim(0)`, which also `madvise`s whole free pages in the middle of a heap away). It runs on a blocking
//! thread and takes about 10 ms for 80 MiB of free heap (docs/benchmarks.md, "Memory after a flood"). Other allocators (musl, macOS, Windows) return memory on their own: there this is a no-op.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::state::ProxyState;

/// How often the open-connection count is looked at: 10 seconds. Memory freed by ending sessions is back with
/// the operating system within about this long.
pub(crate) const TRIM_INTERVAL: Duration = Duration::from_secs(10);

/// Connections that must have ended since the last trim before the next one, unless none are open: 32, or a
/// quarter of those open when that is more. A busy proxy with steady churn reuses what leaving players free
/// and is not trimmed every interval (each trim locks each arena for a few milliseconds); the end of a flood,
/// or of the last session, is.
pub(crate) const TRIM_AFTER_ENDED: u64 = 32;

/// Whether `ended` connections since the last trim, with `open` open now, call for a trim.
fn trim_due(ended: u64, open: u64) -> bool {
    ended > 0 && (open == 0 || ended >= TRIM_AFTER_ENDED.max(open / 4))
}

/// Trims the allocator's free memory, looking every [`TRIM_INTERVAL`], once enough connections ended
/// ([`TRIM_AFTER_ENDED`]), until `stop`.
pub(crate) async fn trim_after_sessions_end(state: Arc<ProxyState>, stop: CancellationToken) {
    let mut open = state.open_connections() as u64;
    let mut accepted = state.next_id.load(Ordering::Relaxed);
    let mut freed = state.metrics.ws.zstd_freed.get();
    let mut links = state.links_ended.load(Ordering::Relaxed);
    let mut ended = 0u64;
    loop {
        tokio::select! {
            () = tokio::time::sleep(TRIM_INTERVAL) => {}
            () = stop.cancelled() => return,
        }
        let (open_now, accepted_now) = (state.open_connections() as u64, state.next_id.load(Ordering::Relaxed));
        // Those open at the last look and those accepted since, less those open now: the connections that ended
        // (give or take one whose counters were read between two steps).
        ended += (open + accepted_now.saturating_sub(accepted)).saturating_sub(open_now);
        (open, accepted) = (open_now, accepted_now);
        // A freed zstd context counts as an ended connection: each frees more than a whole idle session holds.
        let freed_now = state.metrics.ws.zstd_freed.get();
        ended += freed_now.saturating_sub(freed);
        freed = freed_now;
        // An instance link counts as a connection too (a flood of openings on `peer_bind` frees as much).
        let links_now = state.links_ended.load(Ordering::Relaxed);
        ended += links_now.saturating_sub(links);
        links = links_now;
        if trim_due(ended, open_now) {
            let started = std::time::Instant::now();
            let released = tokio::task::spawn_blocking(trim).await.unwrap_or(false);
            let us = started.elapsed().as_micros() as u64;
            debug!(ended, connections = open_now, released, us, "allocator trimmed");
            ended = 0;
        }
    }
}

/// Returns free allocator memory to the operating system: true when glibc released some.
#[cfg(all(target_os = "linux", target_env = "gnu"))]
#[allow(unsafe_code)] // The proxy's one foreign call.
fn trim() -> bool {
    // SAFETY: malloc_trim takes no pointers and may be called from any thread at any time (glibc locks each
    // arena while it trims it).
    unsafe { libc::malloc_trim(0) == 1 }
}

/// Other allocators return memory on their own.
#[cfg(not(all(target_os = "linux", target_env = "gnu")))]
fn trim() -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_flood_or_the_last_session_ending_is_trimmed_steady_churn_is_not() {
        assert!(!trim_due(0, 0), "nothing ended");
        assert!(trim_due(1, 0), "the last session ended");
        assert!(trim_due(300, 0) && trim_due(300, 1000), "the end of a flood");
        assert!(!trim_due(10, 1000), "ten of a thousand players left");
        assert!(!trim_due(31, 20) && trim_due(32, 20));
        assert!(!trim_due(249, 1000) && trim_due(250, 1000));
    }
}
