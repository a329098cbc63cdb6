//! Carriage v2 resume (`docs/carriage.md`): the table of this instance's resumable sessions.
//!
//! A session in play on carriage v2 registers a fresh 128-bit secret here, with the channel its relay listens
//! on. A resume request (a new WebSocket whose first message is `resume <token> <received> <sent>`) takes the
//! entry out of the table and hands its new link to the session, which checks the count, replays and goes on.
//! Tokens are used once: the answer names the next one. An entry leaves the table when it is used or when its
//! session ends (window passed, Minecraft disconnect, shutdown), so the table holds one entry per session in
//! play, and up to [`RETIRED_KEPT`] used secrets are remembered to tell a replayed token (4004) from an
//! unknown one (4001).
//!
//! A draining session's move ticket (docs/network.md, "Drain") is a token of the same kind, used once too: its
//! entry is the channel the `moving` request reaches the session on. Each entry is an [`Entry`]: what a token
//! names is known by its type, and a token of one kind is unknown to a request of another.

use std::collections::{HashMap, HashSet, VecDeque};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use moonbridge_protocol::ws::v2::{
    ResumeToken, CLOSE_RESUME_OTHER_INSTANCE, CLOSE_RESUME_UNKNOWN, CLOSE_RESUME_USED, INSTANCE_LEN, SECRET_LEN,
};
use rand_core::{OsRng, RngCore};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio_rustls::server::TlsStream;

use crate::labels::ResumeOutcome;
use crate::move_state::TicketTx;
use crate::ws_link::WsLink;

/// Used secrets remembered to answer a replayed token with 4004 (older ones get 4001), in secrets.
pub(crate) const RETIRED_KEPT: usize = 4096;

/// A new link for a session, handed over by the connection that carried the resume request.
pub(crate) struct Resumption<L> {
    /// The player's new WebSocket.
    pub(crate) link: L,
    /// The token the resume used.
    pub(crate) token: ResumeToken,
    /// Stream bytes the player has received from the proxy (its `resume` count).
    pub(crate) received: u64,
    /// Stream bytes the player has sent in all.
    pub(crate) sent: u64,
    /// When the resume request arrived (the resume's latency is measured from here).
    pub(crate) at: Instant,
}

/// The sending half a session's relay listens on.
pub(crate) type ResumptionTx<L> = mpsc::Sender<Resumption<L>>;

/// What a token names.
pub(crate) enum Entry {
    /// A carriage v2 session of a `ws` player: where its relay takes a new link.
    Ws(ResumptionTx<WsLink<TcpStream>>),
    /// A carriage v2 session of a `wss` player.
    Wss(ResumptionTx<WsLink<TlsStream<TcpStream>>>),
    /// A draining session's move ticket: where the `moving` request reaches it.
    Move(TicketTx),
}

/// A stream a player's WebSocket runs over (plain TCP for `ws`, TLS for `wss`): its sessions' entries in the
/// table.
pub(crate) trait PlayerStream: AsyncRead + AsyncWrite + Unpin + Send + Sized + 'static {
    /// The entry of a session on this stream.
    fn entry(tx: ResumptionTx<WsLink<Self>>) -> Entry;
    /// The session's channel, when `entry` is a session on this stream.
    fn session(entry: Entry) -> Option<ResumptionTx<WsLink<Self>>>;
    /// Whether `entry` is a session on this stream.
    fn holds(entry: &Entry) -> bool;
}

/// Implements [`PlayerStream`] for a stream type whose sessions are the entries of one [`Entry`] variant.
macro_rules! player_stream {
    ($stream:ty => $variant:ident) => {
        impl PlayerStream for $stream {
            fn entry(tx: ResumptionTx<WsLink<Self>>) -> Entry {
                Entry::$variant(tx)
            }

            fn session(entry: Entry) -> Option<ResumptionTx<WsLink<Self>>> {
                match entry {
                    Entry::$variant(tx) => Some(tx),
                    _ => None,
                }
            }

            fn holds(entry: &Entry) -> bool {
                matches!(entry, Entry::$variant(_))
            }
        }
    };
}

player_stream!(TcpStream => Ws);
player_stream!(TlsStream<TcpStream> => Wss);

/// What a v2 relay needs besides [`crate::relay::RelayStart`].
pub(crate) struct ResumeStart {
    pub(crate) table: Arc<ResumeTable>,
    /// `limits.resume_window_seconds`.
    pub(crate) window: Duration,
    /// `limits.resume_buffer_bytes`.
    pub(crate) buffer: usize,
    pub(crate) metrics: Arc<crate::metrics::Metrics>,
    /// The session moved here from a draining instance: the player gets `moved <count> <token>` instead of
    /// `session <token> <window>` (docs/carriage.md, "Moving to another instance").
    pub(crate) moved: bool,
}

/// The resumable sessions of this proxy instance.
pub(crate) struct ResumeTable {
    instance: [u8; INSTANCE_LEN],
    inner: Mutex<Inner>,
}

#[derive(Default)]
struct Inner {
    /// Secret → what the token names.
    live: HashMap<[u8; SECRET_LEN], Entry>,
    retired: HashSet<[u8; SECRET_LEN]>,
    retired_order: VecDeque<[u8; SECRET_LEN]>,
}

impl Inner {
    /// Remembers a used secret (the oldest is forgotten beyond [`RETIRED_KEPT`]).
    fn retire(&mut self, secret: [u8; SECRET_LEN]) {
        if !self.retired.insert(secret) {
            return;
        }
        if self.retired_order.len() >= RETIRED_KEPT {
            if let Some(old) = self.retired_order.pop_front() {
                self.retired.remove(&old);
            }
        }
        self.retired_order.push_back(secret);
    }
}

/// Why a resume request is refused: the close code and its reason.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Refusal {
    pub(crate) code: u16,
    /// The `outcome` label of `moonbridge_resumes_total`.
    pub(crate) outcome: ResumeOutcome,
    /// The close reason.
    pub(crate) reason: &'static str,
}

impl Refusal {
    pub(crate) const UNKNOWN: Self =
        Self { code: CLOSE_RESUME_UNKNOWN, outcome: ResumeOutcome::RefusedUnknown, reason: "unknown session" };
    pub(crate) const OTHER_INSTANCE: Self = Self {
        code: CLOSE_RESUME_OTHER_INSTANCE,
        outcome: ResumeOutcome::RefusedOtherInstance,
        reason: "session held by another proxy instance",
    };
    pub(crate) const OUT_OF_RANGE: Self = Self {
        code: moonbridge_protocol::ws::v2::CLOSE_RESUME_OUT_OF_RANGE,
        outcome: ResumeOutcome::RefusedOutOfRange,
        reason: "count outside the retained bytes",
    };
    pub(crate) const USED: Self =
        Self { code: CLOSE_RESUME_USED, outcome: ResumeOutcome::RefusedUsed, reason: "token already used" };
}

/// An instance id as text (16 lowercase hexadecimal digits), as in a token.
pub(crate) fn hex_id(instance: &[u8; INSTANCE_LEN]) -> String {
    instance.iter().map(|b| format!("{b:02x}")).collect()
}

/// A session's entry in the table; dropping it removes the entry (if still there).
pub(crate) struct Registration {
    table: Arc<ResumeTable>,
    pub(crate) token: ResumeToken,
}

impl Drop for Registration {
    fn drop(&mut self) {
        self.table.lock().live.remove(&self.token.secret);
    }
}

impl std::fmt::Debug for ResumeTable {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ResumeTable").field("sessions", &self.lock().live.len()).finish_non_exhaustive()
    }
}

impl ResumeTable {
    /// A table for a new instance (a random instance id).
    pub(crate) fn new() -> Self {
        let mut instance = [0u8; INSTANCE_LEN];
        OsRng.fill_bytes(&mut instance);
        Self { instance, inner: Mutex::new(Inner::default()) }
    }

    /// This instance's id as tokens carry it: 16 lowercase hexadecimal digits.
    pub(crate) fn instance_id(&self) -> String {
        hex_id(&self.instance)
    }

    /// True when `instance` (a token's) is this instance.
    pub(crate) fn is_own(&self, instance: &[u8; INSTANCE_LEN]) -> bool {
        self.instance == *instance
    }

    fn lock(&self) -> std::sync::MutexGuard<'_, Inner> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Registers a session reachable through `tx` under a fresh token.
    pub(crate) fn register<S: PlayerStream>(self: &Arc<Self>, tx: ResumptionTx<WsLink<S>>) -> Registration {
        self.insert(S::entry(tx))
    }

    /// Registers a draining session's move ticket (docs/network.md, "Drain"): the channel its `moving` request
    /// arrives on, under a fresh token used once, as a resume token is.
    pub(crate) fn register_ticket(self: &Arc<Self>, tx: TicketTx) -> Registration {
        self.insert(Entry::Move(tx))
    }

    fn insert(self: &Arc<Self>, entry: Entry) -> Registration {
        let mut secret = [0u8; SECRET_LEN];
        OsRng.fill_bytes(&mut secret);
        self.lock().live.insert(secret, entry);
        Registration { table: Arc::clone(self), token: ResumeToken { instance: self.instance, secret } }
    }

    /// Takes the session of `token` for a resume: its channel, or why not. A token found is used up (it
    /// answers 4004 from then on), unless it names something else (a ws session resumed through a wss
    /// listener, a move ticket: 4001, and the entry stays).
    pub(crate) fn take<S: PlayerStream>(&self, token: &ResumeToken) -> Result<ResumptionTx<WsLink<S>>, Refusal> {
        self.remove(token, S::holds).and_then(|e| S::session(e).ok_or(Refusal::UNKNOWN))
    }

    /// Takes the move ticket `token` (used once), or why not.
    pub(crate) fn take_ticket(&self, token: &ResumeToken) -> Result<TicketTx, Refusal> {
        match self.remove(token, |e| matches!(e, Entry::Move(_)))? {
            Entry::Move(tx) => Ok(tx),
            _ => Err(Refusal::UNKNOWN),
        }
    }

    /// Takes what `token` names, when `kind` holds for it (used once).
    fn remove(&self, token: &ResumeToken, kind: impl Fn(&Entry) -> bool) -> Result<Entry, Refusal> {
        if token.instance != self.instance {
            return Err(Refusal::OTHER_INSTANCE);
        }
        let mut inner = self.lock();
        match inner.live.get(&token.secret) {
            None => return Err(if inner.retired.contains(&token.secret) { Refusal::USED } else { Refusal::UNKNOWN }),
            Some(entry) if !kind(entry) => return Err(Refusal::UNKNOWN),
            Some(_) => {}
        }
        let entry = inner.live.remove(&token.secret);
        inner.retire(token.secret);
        entry.ok_or(Refusal::UNKNOWN)
    }

    /// Makes a used `token` valid again for the session of `tx`, until the returned registration is dropped
    /// or [`ResumeTable::retire`]d: the player may not have received the next token yet.
    pub(crate) fn reinstate<S: PlayerStream>(
        self: &Arc<Self>,
        token: ResumeToken,
        tx: ResumptionTx<WsLink<S>>,
    ) -> Registration {
        let mut inner = self.lock();
        inner.retired.remove(&token.secret);
        inner.live.insert(token.secret, S::entry(tx));
        Registration { table: Arc::clone(self), token }
    }

    /// Ends a registration and remembers its token as used (4004 from then on).
    pub(crate) fn retire(&self, registration: Registration) {
        let secret = registration.token.secret;
        drop(registration);
        self.lock().retire(secret);
    }

    /// Sessions registered now.
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lock().live.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_used_once_and_name_their_instance() {
        let table = Arc::new(ResumeTable::new());
        let (tx, _rx) = mpsc::channel::<Resumption<WsLink<TcpStream>>>(1);
        let reg = table.register(tx.clone());
        let token = reg.token;
        assert_eq!(table.len(), 1);
        assert!(table.take::<TcpStream>(&token).is_ok());
        assert_eq!(table.take::<TcpStream>(&token).err(), Some(Refusal::USED));
        let forged = ResumeToken { secret: [7; SECRET_LEN], ..token };
        assert_eq!(table.take::<TcpStream>(&forged).err(), Some(Refusal::UNKNOWN));
        let other = ResumeToken { instance: [0; INSTANCE_LEN], ..token };
        let other =
            if other.instance == token.instance { ResumeToken { instance: [1; INSTANCE_LEN], ..token } } else { other };
        assert_eq!(table.take::<TcpStream>(&other).err(), Some(Refusal::OTHER_INSTANCE));
        // The wrong link type, or a ticket request, is refused as unknown and leaves the session reachable; an
        // ended session's token is unknown, not used.
        let reg2 = table.register(tx.clone());
        assert_eq!(table.take::<TlsStream<TcpStream>>(&reg2.token).err(), Some(Refusal::UNKNOWN));
        assert_eq!(table.take_ticket(&reg2.token).err(), Some(Refusal::UNKNOWN));
        assert!(table.take::<TcpStream>(&reg2.token).is_ok());
        // A used token reinstated works once more; retired, it answers 4004.
        let again = table.reinstate(reg2.token, tx.clone());
        assert!(table.take::<TcpStream>(&reg2.token).is_ok());
        let again = table.reinstate(again.token, tx.clone());
        table.retire(again);
        assert_eq!(table.take::<TcpStream>(&reg2.token).err(), Some(Refusal::USED));
        let reg3 = table.register(tx);
        let t3 = reg3.token;
        drop(reg3);
        assert_eq!(table.len(), 0);
        assert_eq!(table.take::<TcpStream>(&t3).err(), Some(Refusal::UNKNOWN));
        drop(reg);
    }

    #[test]
    fn a_move_ticket_is_used_once_and_is_no_resume_token() {
        let table = Arc::new(ResumeTable::new());
        let (tx, _rx) = mpsc::channel(1);
        let ticket = table.register_ticket(tx);
        let token = ticket.token;
        assert_eq!(table.take::<TcpStream>(&token).err(), Some(Refusal::UNKNOWN));
        assert!(table.take_ticket(&token).is_ok());
        assert_eq!(table.take_ticket(&token).err(), Some(Refusal::USED));
    }

    #[test]
    fn the_retired_set_is_bounded() {
        let table = Arc::new(ResumeTable::new());
        let (tx, _rx) = mpsc::channel::<Resumption<WsLink<TcpStream>>>(1);
        let first = table.register(tx.clone()).token;
        // Registration dropped at once: take it before that to retire it.
        let reg = table.register(tx.clone());
        let used = reg.token;
        assert!(table.take::<TcpStream>(&used).is_ok());
        for _ in 0..RETIRED_KEPT {
            let r = table.register(tx.clone());
            let t = r.token;
            assert!(table.take::<TcpStream>(&t).is_ok());
        }
        assert_eq!(table.lock().retired.len(), RETIRED_KEPT);
        // The oldest used token has been forgotten: unknown now.
        assert_eq!(table.take::<TcpStream>(&used).err(), Some(Refusal::UNKNOWN));
        assert_eq!(table.take::<TcpStream>(&first).err(), Some(Refusal::UNKNOWN));
    }
}
