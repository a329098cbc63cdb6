//! What carriage v2 adds to the WebSocket relay loop ([`super::ws`]), as one optional part of it: the bytes
//! retained for a resume, the ack schedule, the session's resume registration and the channel a resumption
//! arrives on (`docs/carriage.md`).

use std::io;
use std::sync::Arc;
use std::time::Duration;

use moonbridge_protocol::ws::v2::{AckSchedule, Control, Retained};
use tokio::sync::mpsc;

use super::RelayEnd;
use crate::metrics::Metrics;
use crate::resume::{PlayerStream, Registration, ResumeStart, ResumeTable, Resumption};
use crate::ws_link::{control_frame, WsLink};

/// How a connected stretch of the WebSocket relay ended.
pub(super) enum StretchEnd<L> {
    /// The session is over.
    End(RelayEnd),
    /// The player's link was lost without a Minecraft disconnect (the cause, for the log); carriage v2 only.
    Lost(String),
    /// A resume arrived while the link still looked alive; carriage v2 only.
    TakenOver(Resumption<L>),
    /// The drain asked to move the player, and the session is at a point where it can go (docs/network.md,
    /// "Drain"); carriage v2 only.
    Move,
}

/// What the v2 relay keeps across links.
pub(super) struct Resumable<L> {
    /// Stream bytes sent to the player and not acknowledged yet (at most `buffer` bytes, plus one batch).
    pub(super) retained: Retained,
    pub(super) acks: AckSchedule,
    /// The backend sent FIN while the player was away: replay, then end.
    pub(super) backend_eof: bool,
    pub(super) registration: Registration,
    /// The token the last resume used, valid again until the player shows it got the next one (its first
    /// `ack` or bytes on the new link): a drop during the resume exchange can then be resumed once more.
    pub(super) previous: Option<Registration>,
    pub(super) tx: mpsc::Sender<Resumption<L>>,
    pub(super) rx: mpsc::Receiver<Resumption<L>>,
    pub(super) table: Arc<ResumeTable>,
    pub(super) metrics: Arc<Metrics>,
    /// `limits.resume_window_seconds`.
    pub(super) window: Duration,
    /// `limits.resume_buffer_bytes`.
    pub(super) buffer: usize,
    /// A drain handed the session's state to another instance and the link was lost before the player said
    /// where it went: if it does not resume here, the other instance holds it and the name's claim.
    pub(super) handed_over: bool,
}

impl<S: PlayerStream> Resumable<WsLink<S>> {
    /// Registers a new resumable session: `sent` and `received` are the stream counts so far.
    pub(super) fn register(resume: ResumeStart, sent: u64, received: u64) -> Self {
        let (tx, rx) = mpsc::channel(1);
        let registration = resume.table.register(tx.clone());
        Self {
            retained: Retained::starting_at(sent),
            acks: AckSchedule::new(received),
            backend_eof: false,
            handed_over: false,
            registration,
            previous: None,
            tx,
            rx,
            table: resume.table,
            metrics: resume.metrics,
            window: resume.window,
            buffer: resume.buffer,
        }
    }
}

impl<L> Resumable<L> {
    /// How many bytes the next backend read may take: backend reads pause while `buffer` bytes are retained.
    pub(super) fn room(&self) -> usize {
        self.buffer.saturating_sub(self.retained.len())
    }

    /// The player showed it has the current token (bytes or an ack on the new link): the last one is spent.
    pub(super) fn retire_previous(&mut self) {
        if let Some(p) = self.previous.take() {
            self.table.retire(p);
        }
    }
}

/// Waits for a resumption on a v2 relay; never on a v1 relay (`None`).
pub(super) async fn next_resumption<L>(v2: Option<&mut Resumable<L>>) -> Option<Resumption<L>> {
    match v2 {
        Some(r) => r.rx.recv().await,
        None => std::future::pending().await,
    }
}

/// Writes whole frames to the player unless a resume arrives first (a link that stopped reading must not
/// hold up a resume): a failed write is a lost link, a resumption a take-over.
pub(super) async fn write_racing<S: PlayerStream>(
    link: &mut WsLink<S>,
    frames: &[u8],
    rx: &mut mpsc::Receiver<Resumption<WsLink<S>>>,
) -> Result<(), StretchEnd<WsLink<S>>> {
    tokio::select! {
        biased;
        res = link.write_frame(frames) => res.map_err(|e| StretchEnd::Lost(format!("write failed: {e}"))),
        Some(h) = rx.recv() => Err(StretchEnd::TakenOver(h)),
    }
}

/// Sends `ack <n>` racing a resume.
pub(super) async fn send_ack<S: PlayerStream>(
    link: &mut WsLink<S>,
    n: u64,
    rx: &mut mpsc::Receiver<Resumption<WsLink<S>>>,
) -> Result<(), StretchEnd<WsLink<S>>> {
    write_racing(link, &control_frame(&Control::Ack(n)), rx).await
}

/// Applies the player's `ack <n>` to what is retained; an `ack` past the bytes sent earns 1002 (the error is
/// returned, the close code recorded on the link).
pub(super) fn apply_ack<S: PlayerStream>(
    link: &mut WsLink<S>,
    r: &mut Resumable<WsLink<S>>,
    n: u64,
) -> Option<io::Error> {
    let e = r.retained.ack(n).err()?;
    link.fault(moonbridge_protocol::ws::CLOSE_PROTOCOL_ERROR, "ack past the bytes sent");
    Some(io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
}
