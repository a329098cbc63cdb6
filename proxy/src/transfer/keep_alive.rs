//! Keep Alive across a switch (protocol 5 `KeepAlive`, 0x00 both ways, an i32 id): which backend's Keep Alive
//! a client's answer belongs to, and the proxy's own while no backend serves the player.

use std::collections::VecDeque;
use std::time::Duration;

use bytes::BytesMut;
use moonbridge_protocol::packets::{KeepAlive, Packet};
use tokio::time::Instant;

/// Keep Alive ids a backend may have outstanding with a switched client before the session is ended (the
/// client answers each one; a backend that sends more without answers in between is broken).
pub(crate) const MAX_UNANSWERED_KEEP_ALIVES: usize = 1024;

/// How often the proxy sends its own Keep Alive while no backend serves the player.
pub(super) const OWN_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// The Keep Alive ids in flight.
pub(super) struct KeepAlives {
    /// Ids the current backend sent and the client has not answered (after a switch).
    pub(super) backend: VecDeque<i32>,
    /// Ids the proxy itself sent, not answered yet.
    own: VecDeque<i32>,
    next_own: i32,
    /// When the proxy sends its next own Keep Alive (while no backend serves the player).
    pub(super) own_at: Instant,
}

impl KeepAlives {
    pub(super) fn new() -> Self {
        Self { backend: VecDeque::new(), own: VecDeque::new(), next_own: i32::MIN, own_at: Instant::now() }
    }

    /// The client answered Keep Alive `id`: true when the answer goes on to the current backend. An answer to
    /// the proxy's own is swallowed; after a switch (`switched`) so is an answer the current backend never
    /// asked for (it was the old backend's, or nobody's).
    pub(super) fn answer_goes_on(&mut self, id: i32, switched: bool) -> bool {
        if take(&mut self.own, id) {
            return false;
        }
        !switched || take(&mut self.backend, id)
    }

    /// The current backend sent Keep Alive `id` after a switch.
    ///
    /// # Errors
    /// More than [`MAX_UNANSWERED_KEEP_ALIVES`] outstanding: the reason to end the session.
    pub(super) fn sent_by_backend(&mut self, id: i32) -> Result<(), String> {
        if self.backend.len() >= MAX_UNANSWERED_KEEP_ALIVES {
            return Err(format!("more than {MAX_UNANSWERED_KEEP_ALIVES} Keep Alives unanswered"));
        }
        self.backend.push_back(id);
        Ok(())
    }

    /// Appends the proxy's own Keep Alive to `to_player` and schedules the next.
    pub(super) fn send_own(&mut self, to_player: &mut BytesMut) {
        let id = self.next_own;
        self.next_own = self.next_own.wrapping_add(1);
        if self.own.len() >= MAX_UNANSWERED_KEEP_ALIVES {
            self.own.pop_front();
        }
        self.own.push_back(id);
        let _ = (KeepAlive { id }).encode_frame(to_player);
        self.own_at = Instant::now() + OWN_KEEP_ALIVE_INTERVAL;
    }
}

/// Removes `id` from `ids` if it is there.
fn take(ids: &mut VecDeque<i32>, id: i32) -> bool {
    match ids.iter().position(|&k| k == id) {
        Some(i) => {
            ids.remove(i);
            true
        }
        None => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keep_alive_ids_are_taken_once() {
        let mut ids = VecDeque::from([1, 2, 3]);
        assert!(take(&mut ids, 2));
        assert!(!take(&mut ids, 2));
        assert_eq!(ids, VecDeque::from([1, 3]));
    }

    #[test]
    fn answers_go_to_the_backend_that_asked() {
        let mut k = KeepAlives::new();
        let mut out = BytesMut::new();
        k.send_own(&mut out);
        assert_eq!(&out[..], &[5, 0x00, 0x80, 0, 0, 0]);
        assert!(!k.answer_goes_on(i32::MIN, true), "the proxy's own is swallowed");
        assert!(k.answer_goes_on(9, false), "before a switch every answer goes on");
        k.sent_by_backend(9).unwrap();
        assert!(!k.answer_goes_on(8, true));
        assert!(k.answer_goes_on(9, true));
        assert!(!k.answer_goes_on(9, true), "taken once");
        for id in 0..MAX_UNANSWERED_KEEP_ALIVES as i32 {
            k.sent_by_backend(id).unwrap();
        }
        assert_eq!(k.sent_by_backend(-1).unwrap_err(), "more than 1024 Keep Alives unanswered");
    }
}
