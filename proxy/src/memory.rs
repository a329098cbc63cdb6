//! Giving freed memory back to the operating system.
//!
//! glibc's allocator keeps what a burst of sessions freed (resume buffers, relay and TLS buffers) in its arenas
//! for reuse, so after a flood the proxy's resident size would stay at its peak for good, and an operator's
//! graphs with it. Every [`TRIM_INTERVAL`] in which connections ended (sessions over, parked sessions
//! expired), the proxy asks glibc to return the free pages of every arena
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

/// Trims the allocator's free memory every [`TRIM_INTERVAL`] in which connections ended, until `stop`.
pub(crate) async fn trim_after_sessions_end(state: Arc<ProxyState>, stop: CancellationToken) {
    let mut open = state.open_connections();
    let mut accepted = state.next_id.load(Ordering::Relaxed);
    loop {
        tokio::select! {
            () = tokio::time::sleep(TRIM_INTERVAL) => {}
            () = stop.cancelled() => return,
        }
        let (open_now, accepted_now) = (state.open_connections(), state.next_id.load(Ordering::Relaxed));
        // Those open at the last look and those accepted since, less those open now: the connections that ended.
        let ended = (open as u64 + accepted_now.saturating_sub(accepted)).saturating_sub(open_now as u64);
        if ended > 0 {
            let started = std::time::Instant::now();
            let released = tokio::task::spawn_blocking(trim).await.unwrap_or(false);
            let us = started.elapsed().as_micros() as u64;
            debug!(ended, connections = open_now, released, us, "allocator trimmed");
        }
        (open, accepted) = (open_now, accepted_now);
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
