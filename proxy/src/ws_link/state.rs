//! The state of a player's WebSocket ([`State`]): where its closing handshake is (RFC 6455 §7.1: each side
//! sends one Close and receives one), whether bad input earned a close code (§7.4), and whether the frame
//! stream can still be written. One enum, changed only by its transitions here; the link asks it what it may
//! do.

/// How the player's side ended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PeerClose {
    /// The code of the player's Close (1005 for a Close without one); `None` when the connection ended without
    /// a Close.
    pub(crate) code: Option<u16>,
    /// The Close was 1000 with the reason `moved`: the player left after a move (docs/carriage.md).
    pub(crate) moved: bool,
}

impl PeerClose {
    /// The connection ended without a Close.
    pub(crate) const ENDED: Self = Self { code: None, moved: false };
}

/// Where a link is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(super) enum State {
    /// Frames go both ways.
    Open,
    /// The player broke the carriage: the Close it earned (code and reason) goes out when the link closes.
    /// Its session ends: whoever reads the link stops at the fault.
    Faulted(u16, &'static str),
    /// The player's side ended (its Close, or the connection's end) and this side's Close has not gone out.
    PeerClosed(PeerClose),
    /// This side's Close went out first: nothing more is written, the player's Close is awaited briefly.
    CloseSent,
    /// Both sides are done.
    Closed(PeerClose),
    /// A write failed or was cut off (a frame may be half on the wire): nothing more is written. With how the
    /// player's side ended, when it did.
    Broken(Option<PeerClose>),
}

impl State {
    /// Frames may still be written.
    pub(super) fn writable(self) -> bool {
        matches!(self, Self::Open | Self::Faulted(..) | Self::PeerClosed(_))
    }

    /// How the player's side ended, once it did.
    pub(super) fn peer_close(self) -> Option<PeerClose> {
        match self {
            Self::PeerClosed(c) | Self::Closed(c) | Self::Broken(Some(c)) => Some(c),
            _ => None,
        }
    }

    /// The Close that bad input earned, if any.
    pub(super) fn fault(self) -> Option<(u16, &'static str)> {
        match self {
            Self::Faulted(code, reason) => Some((code, reason)),
            _ => None,
        }
    }

    /// Bad input earned `code` (kept only while the link is open).
    pub(super) fn faulted(self, code: u16, reason: &'static str) -> Self {
        match self {
            Self::Open | Self::Faulted(..) => Self::Faulted(code, reason),
            other => other,
        }
    }

    /// The player's side ended as `close` (a second end changes nothing).
    pub(super) fn peer_ended(self, close: PeerClose) -> Self {
        match self {
            Self::Open | Self::Faulted(..) => Self::PeerClosed(close),
            Self::CloseSent => Self::Closed(close),
            Self::Broken(None) => Self::Broken(Some(close)),
            other => other,
        }
    }

    /// This side's Close went out.
    pub(super) fn close_sent(self) -> Self {
        match self {
            Self::Open | Self::Faulted(..) => Self::CloseSent,
            Self::PeerClosed(c) => Self::Closed(c),
            other => other,
        }
    }

    /// A write is under way: if it does not complete, the frame stream is broken.
    pub(super) fn writing(self) -> Self {
        Self::Broken(self.peer_close())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const BYE: PeerClose = PeerClose { code: Some(1000), moved: false };

    #[test]
    fn the_closing_handshake_from_either_side_ends_closed_with_the_peers_code() {
        // The player closes first: its Close is answered.
        let s = State::Open.peer_ended(BYE);
        assert!(s.writable(), "the answering Close still goes out");
        assert_eq!(s.close_sent(), State::Closed(BYE));
        // This side closes first: the player's Close (or its end) follows.
        let s = State::Open.close_sent();
        assert!(!s.writable());
        assert_eq!(s.peer_close(), None);
        assert_eq!(s.peer_ended(PeerClose::ENDED), State::Closed(PeerClose::ENDED));
        // A second end changes nothing.
        assert_eq!(State::Closed(BYE).peer_ended(PeerClose::ENDED), State::Closed(BYE));
    }

    #[test]
    fn a_fault_is_kept_until_the_close_and_a_cut_write_breaks_the_stream() {
        let s = State::Open.faulted(1002, "protocol error");
        assert_eq!(s.fault(), Some((1002, "protocol error")));
        assert!(s.writable(), "Pongs queued before the fault and the Close it earned still go out");
        assert_eq!(s.close_sent(), State::CloseSent);
        assert_eq!(State::PeerClosed(BYE).faulted(1002, "x"), State::PeerClosed(BYE), "no fault after the end");
        // A write that does not complete leaves the stream broken, keeping what is known of the player.
        let s = State::PeerClosed(BYE).writing();
        assert!(!s.writable());
        assert_eq!(s.peer_close(), Some(BYE));
        assert_eq!(s.close_sent(), s, "a broken stream takes no Close");
        assert_eq!(State::Open.writing().peer_ended(BYE), State::Broken(Some(BYE)));
    }
}
