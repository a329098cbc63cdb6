//! Play streams the proxy stopped following (docs/modpacks.md): `moonbridge_unfollowed_streams_total` and the
//! one log line each, through a process-wide limiter.

use std::time::Duration;

use prometheus::IntCounterVec;

use crate::labels::{StreamDirection, Unfollowed};
use crate::limits::LogLimiter;

/// `moonbridge_unfollowed_streams_total`: Play streams the proxy stopped following (one pointer, so every
/// relay direction can keep it).
#[derive(Clone, Debug)]
pub(crate) struct UnfollowedCounter(pub(crate) IntCounterVec);

impl UnfollowedCounter {
    /// Counts a Play stream the proxy stopped following.
    pub(crate) fn inc(&self, direction: StreamDirection, reason: Unfollowed) {
        self.0.with_label_values(&[direction.as_str(), reason.as_str()]).inc();
    }

    /// A Play stream going `direction` stopped parsing (`e`): counted and logged (through [`UNFOLLOWED_LOG`],
    /// with the session's span), saying what happens `afterwards`.
    pub(crate) fn lost(&self, direction: StreamDirection, e: moonbridge_protocol::FrameError, afterwards: Afterwards) {
        self.inc(direction, Unfollowed::of(e));
        let Some(suppressed) = UNFOLLOWED_LOG.allow() else { return };
        let stream = match direction {
            StreamDirection::ToBackend => "the player's stream",
            StreamDirection::ToPlayer => "the backend's stream",
        };
        let then = match afterwards {
            Afterwards::Closed => "the session is closed",
            Afterwards::Unparsed => "relayed unparsed from here",
            Afterwards::UnparsedUnswitchable => "relayed unparsed from here, no server switch or move for this player",
        };
        tracing::warn!(
            suppressed,
            "stopped following the Minecraft frames of {stream}: {then} ({e}; see limits.max_play_frame_bytes and docs/modpacks.md)"
        );
    }
}

/// What happens to a Play stream the proxy stopped following ([`UnfollowedCounter::lost`]).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Afterwards {
    /// The session is closed.
    Closed,
    /// The stream is relayed on unparsed.
    Unparsed,
    /// Relayed on unparsed, and the player, who could be switched or moved until now, no longer can.
    UnparsedUnswitchable,
}

/// Lines about streams the proxy stopped following: at most 10 per 10 seconds for the whole process (a peer
/// causes them).
static UNFOLLOWED_LOG: std::sync::LazyLock<LogLimiter> =
    std::sync::LazyLock::new(|| LogLimiter::new(10, Duration::from_secs(10)));
