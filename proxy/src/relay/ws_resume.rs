//! The carriage v2 session over links (`docs/carriage.md`): the one relay loop ([`super::ws`]) run with its v2
//! part ([`super::v2`]) for each connected stretch, parking when a link is lost, and resumes.
//!
//! - When play begins the player gets `session <token> <window>` and an `ack` of what the proxy has received.
//! - Every backend batch is sent as one Binary message and also kept in [`v2::Retained`] until the player's `ack`
//!   covers it; the proxy acknowledges what it receives every [`v2::ACK_EVERY_BYTES`] and at keepalive ticks.
//!   Backend reads pause while `resume_buffer_bytes` are retained.
//! - A link lost without a Minecraft disconnect (EOF, reset, a Close 1001, a failed write, no traffic for three
//!   ping intervals) parks the session: the backend connection stays, what it sends is retained (reads pause
//!   when the buffer is full), and the session waits `resume_window_seconds` for a resume. When the window
//!   passes, the backend connection is closed and the reason logged.
//! - A resume hands the session a new link ([`Resumption`]): the count is checked against what is retained (4003
//!   otherwise), the proxy answers `resumed <count> <next token>`, sends again what the player has not received,
//!   and the relay goes on. A resume while the old link still looks alive takes over: the old link gets 4005.
//! - A Close with another code, a backend FIN, bad input and shutdown end the session as in v1.

use std::io;
use std::time::{Duration, Instant};

use bytes::Bytes;
use moonbridge_protocol::ws::v2::{self, AckSchedule, Control};
use moonbridge_protocol::ws::{self as carriage};
use tokio::sync::mpsc;
use tracing::info;

use super::move_out::{move_out, MoveEnd};
use super::v2::{write_racing, Resumable, StretchEnd};
use super::ws::{pump, Inbound, Pipe};
use super::{BackendSide, RelayEnd, RelayReport, RelayStart};
use crate::labels::{DrainMove, ResumeOutcome};
use crate::limits::LogLimiter;
use crate::metrics::Metrics;
use crate::resume::{PlayerStream, Refusal, ResumeStart, ResumeTable, Resumption};
use crate::transfer::LOST;
use crate::wire::Side;
use crate::ws_link::{control_frame, WsLink};

/// How long a lost link's own close (FIN, TLS close_notify) may take before it is dropped.
const LOST_LINK_CLOSE: Duration = Duration::from_millis(200);

/// Relays the WebSocket ⇄ `backend` with resume (see the module documentation).
pub(crate) async fn relay_resumable<S: PlayerStream>(
    link: &mut WsLink<S>,
    backend: &mut BackendSide,
    start: RelayStart<'_>,
    resume: ResumeStart,
) -> RelayReport {
    let mut pipe = Pipe::new(backend, start);
    link.shorten_keepalive(v2::MAX_PING_INTERVAL);
    let moved = resume.moved;
    let (received, sent) = link.counts();
    let mut r = Resumable::register(resume, sent, received);
    // A client that acknowledges every message gets a window (docs/carriage.md, "Pacing").
    if let (true, Some(out)) = (link.paced(), pipe.out.as_mut()) {
        out.pace(sent, r.buffer);
    }
    // As in v1: bytes sent ahead during the login stage first, then what is still buffered.
    let inbound = Inbound::first(link).await;
    let end = run(link, &mut pipe, &mut r, inbound, moved).await;
    // A resume that arrived as the session ended: its link is told the session is gone.
    r.rx.close();
    while let Ok(h) = r.rx.try_recv() {
        tokio::spawn(async move {
            let mut link = h.link;
            link.close(Refusal::UNKNOWN.code, Refusal::UNKNOWN.reason).await;
        });
    }
    pipe.report(end)
}

/// The whole v2 relay: connected stretches, parking and resumes.
async fn run<S: PlayerStream>(
    link: &mut WsLink<S>,
    pipe: &mut Pipe<'_>,
    r: &mut Resumable<WsLink<S>>,
    inbound: Inbound,
    moved: bool,
) -> RelayEnd {
    let end = stretches(link, pipe, r, inbound, moved).await;
    if pipe.backend.board().is_some_and(|b| b.move_asked()) {
        // Asked to move by a drain, but the session ended before the move could start.
        r.metrics.drain_move(DrainMove::Failed);
    }
    if r.handed_over {
        // Not back here after a drain's hand-over: the other instance holds the player and the name's claim,
        // which this session's end must not release.
        pipe.leave_claim();
    }
    end
}

/// [`run`]'s loop.
async fn stretches<S: PlayerStream>(
    link: &mut WsLink<S>,
    pipe: &mut Pipe<'_>,
    r: &mut Resumable<WsLink<S>>,
    inbound: Inbound,
    moved: bool,
) -> RelayEnd {
    let session = if moved {
        // A moved player holds everything it sent: nothing is sent again.
        Control::Moved { received: link.counts().0, token: r.registration.token }
    } else {
        Control::Session { token: r.registration.token, window_seconds: r.window.as_secs() }
    };
    r.acks = AckSchedule::new(link.counts().0);
    // Without its token the player cannot resume: a failure here ends the session at once.
    let announced = match link.send_control(&session).await {
        Ok(()) => link.send_control(&Control::Ack(link.counts().0)).await,
        Err(e) => Err(e),
    };
    if let Err(e) = announced {
        pipe.backend.shutdown_write();
        return RelayEnd::Error(Side::Player, e);
    }
    let mut step = pump(link, pipe, Some(&mut *r), inbound).await;
    loop {
        let (resumption, cause, lost_at) = match step {
            StretchEnd::End(end) => return end,
            StretchEnd::Move => {
                step = match move_out(link, pipe, r).await {
                    MoveEnd::Stay(ack) => pump(link, pipe, Some(&mut *r), Inbound::acked(ack)).await,
                    MoveEnd::Over(end) => return end,
                    MoveEnd::Stretch(s) => s,
                };
                continue;
            }
            StretchEnd::TakenOver(h) => {
                // The old link still looked alive: tell it, without waiting for it.
                (h, "taken over by a new connection".to_string(), Instant::now())
            }
            StretchEnd::Lost(cause) => {
                let lost_at = Instant::now();
                if !link.peer_closed() {
                    link.shutdown_transport(LOST_LINK_CLOSE).await;
                }
                match park(pipe, r).await {
                    Ok(h) => (h, cause, lost_at),
                    Err(end) => {
                        if matches!(end, RelayEnd::NotResumed { .. }) {
                            r.metrics.resume(ResumeOutcome::Expired);
                            info!(cause = %cause, window_s = r.window.as_secs(), retained = r.retained.len(), "player not back within the resume window: closing the backend connection");
                        }
                        return end;
                    }
                }
            }
        };
        let adopted = adopt(link, resumption, r, &cause, lost_at).await;
        if adopted.is_ok() && r.handed_over {
            // Back here: the move did not happen, the claim stays this session's.
            r.handed_over = false;
            if let Some(board) = pipe.backend.board() {
                board.handed_away(false);
            }
        }
        step = match adopted {
            Ok(()) if r.backend_eof => {
                link.close(carriage::CLOSE_NORMAL, "").await;
                return RelayEnd::Closed(Side::Backend);
            }
            Ok(()) => pump(link, pipe, Some(&mut *r), Inbound::empty()).await,
            Err(AdoptError::Lost(cause)) => StretchEnd::Lost(cause),
            Err(AdoptError::Superseded(h)) => StretchEnd::TakenOver(h),
            Err(AdoptError::End(end)) => return end,
        };
    }
}

/// Waits for a resume with no player: the backend's bytes are retained (reads pause when the buffer is
/// full), until a resumption, the window's end, or shutdown.
async fn park<S: PlayerStream>(
    pipe: &mut Pipe<'_>,
    r: &mut Resumable<WsLink<S>>,
) -> Result<Resumption<WsLink<S>>, RelayEnd> {
    let deadline = tokio::time::Instant::now() + r.window;
    // What the lanes held goes to the resume buffer, in the order it would have gone.
    for piece in pipe.take_queued() {
        r.retained.push(piece);
    }
    loop {
        // A switch may start while the player is away (a handover when one is due): the switchboard's output
        // is retained like the backend's bytes.
        pipe.backend.hand_over(&mut pipe.up, &mut pipe.down).map_err(|e| RelayEnd::Error(Side::Backend, e))?;
        let room = r.retained.len() < r.buffer && !r.backend_eof;
        tokio::select! {
            biased;
            h = r.rx.recv() => {
                if let Some(h) = h {
                    return Ok(h);
                }
            }
            () = tokio::time::sleep_until(deadline) => {
                return Err(RelayEnd::NotResumed { window: r.window.as_secs() });
            }
            res = pipe.backend.readable(&mut pipe.down), if room => {
                if let Err(e) = res {
                    if pipe.down.fail_over(LOST) {
                        continue;
                    }
                    return Err(RelayEnd::Error(Side::Backend, e));
                }
                let room = r.buffer - r.retained.len();
                let retained = &mut r.retained;
                let out = &mut pipe.out;
                let read = pipe.backend.read_batch(&mut pipe.down, room, |d| {
                    match out.as_mut() {
                        Some(o) => o.push(d),
                        None => retained.push(Bytes::copy_from_slice(d)),
                    }
                    d.len()
                });
                for piece in pipe.take_queued() {
                    r.retained.push(piece);
                }
                match read {
                    Ok(Some(0)) if pipe.down.fail_over(LOST) => {}
                    Ok(Some(0)) => r.backend_eof = true,
                    Ok(_) => {}
                    Err(_) if pipe.down.fail_over(LOST) => {}
                    Err(e) => return Err(RelayEnd::Error(Side::Backend, e)),
                }
            }
            () = pipe.shutdown.cancelled() => return Err(RelayEnd::Shutdown),
        }
    }
}

/// Continues the session on the handed-over link: checks the player's count, answers `resumed`, sends
/// again what the player has not received, and makes the new link this one (the old one is closed in the
/// background: 4005 if it was still open).
async fn adopt<S: PlayerStream>(
    link: &mut WsLink<S>,
    resumption: Resumption<WsLink<S>>,
    r: &mut Resumable<WsLink<S>>,
    cause: &str,
    lost_at: Instant,
) -> Result<(), AdoptError<WsLink<S>>> {
    let Resumption { link: mut new, token, received, sent, at } = resumption;
    let (from, to) = (r.retained.start(), r.retained.end());
    let replay = match r.retained.resume_from(received) {
        Ok(b) if sent >= link.counts().0 => b,
        _ => {
            r.metrics.resume(Refusal::OUT_OF_RANGE.outcome);
            info!(
                received,
                sent,
                retained_from = from,
                retained_to = to,
                "resume refused: count outside what is retained"
            );
            new.close(Refusal::OUT_OF_RANGE.code, Refusal::OUT_OF_RANGE.reason).await;
            let e = io::Error::new(io::ErrorKind::InvalidData, "resume count outside the retained bytes");
            return Err(AdoptError::End(RelayEnd::Error(Side::Player, e)));
        }
    };
    new.shorten_keepalive(v2::MAX_PING_INTERVAL);
    r.registration = r.table.register(r.tx.clone());
    // The token this resume used stays valid until the player shows it got the next one.
    r.previous = Some(r.table.reinstate(token, r.tx.clone()));
    new.take_over_counts(link, received);
    let resumed = control_frame(&Control::Resumed { received: link.counts().0, token: r.registration.token });
    let mut outcome = write_racing(&mut new, &resumed, &mut r.rx).await;
    let mut replayed_to_player = 0;
    for chunk in replay {
        if outcome.is_err() {
            break;
        }
        outcome = match new.binary_frame(chunk) {
            Ok((frame, _)) => write_racing(&mut new, &frame, &mut r.rx).await,
            Err(e) => Err(StretchEnd::Lost(format!("compression failed: {e}"))),
        };
        new.count_sent(chunk.len());
        replayed_to_player += chunk.len();
    }
    let first_byte = at.elapsed();
    match outcome {
        Ok(()) => {}
        Err(StretchEnd::TakenOver(newer)) => {
            // An even newer resume arrived meanwhile: it wins, this link is closed (4005).
            tokio::spawn(close_old(new));
            return Err(AdoptError::Superseded(newer));
        }
        Err(other) => {
            tokio::spawn(close_old(new));
            let cause = match other {
                StretchEnd::Lost(c) => c,
                _ => "resumed link lost".into(),
            };
            return Err(AdoptError::Lost(format!("resumed link lost during the replay: {cause}")));
        }
    }
    std::mem::swap(link, &mut new);
    let old = new;
    if !old.closed_both_ways() {
        tokio::spawn(close_old(old));
    }
    r.metrics.resume(ResumeOutcome::Resumed);
    info!(
        cause = %cause,
        gap_ms = lost_at.elapsed().as_millis() as u64,
        replayed_to_player,
        replayed_from_player = sent.saturating_sub(link.counts().0),
        resume_us = first_byte.as_micros() as u64,
        "session resumed"
    );
    Ok(())
}

/// Why [`adopt`] did not continue the session on the handed-over link.
enum AdoptError<L> {
    /// The new link was lost too: wait for the next resume.
    Lost(String),
    /// A newer resume arrived during this one: adopt that instead.
    Superseded(Resumption<L>),
    /// The session is over.
    End(RelayEnd),
}

/// Closes a link a resume replaced: 4005 when it was still open, then its transport.
async fn close_old<S: PlayerStream>(mut old: WsLink<S>) {
    old.close(v2::CLOSE_TAKEN_OVER, "resumed on another connection").await;
}

/// What became of a resume request ([`deliver_resumption`]), for the log.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Delivered {
    /// The link went to its session.
    HandedOver,
    /// The first message was not a resume request (closed 1002).
    BadRequest,
    /// Refused (closed with the refusal's code), counted under this outcome.
    Refused(ResumeOutcome),
}

impl Delivered {
    /// The outcome as the log names it.
    pub(crate) fn as_str(self) -> &'static str {
        match self {
            Self::HandedOver => "handed_over",
            Self::BadRequest => "bad_request",
            Self::Refused(outcome) => outcome.as_str(),
        }
    }
}

/// A resume request arrived on `link` (its first message): hands the link to its session, or closes it with
/// the refusal's code.
pub(crate) async fn deliver_resumption<S: PlayerStream>(
    mut link: WsLink<S>,
    control: Control,
    table: &ResumeTable,
    metrics: &Metrics,
    log: &LogLimiter,
) -> Delivered {
    let Control::Resume { token, received, sent } = control else {
        link.close(carriage::CLOSE_PROTOCOL_ERROR, "expected a resume request").await;
        return Delivered::BadRequest;
    };
    let at = Instant::now();
    let refusal = match table.take::<S>(&token) {
        Ok(tx) => match tx.send(Resumption { link, token, received, sent, at }).await {
            Ok(()) => return Delivered::HandedOver,
            Err(mpsc::error::SendError(h)) => {
                link = h.link;
                Refusal::UNKNOWN
            }
        },
        Err(refusal) => refusal,
    };
    metrics.resume(refusal.outcome);
    // Refusals come from unauthenticated connections: logged through the bad-input limiter.
    if let Some(suppressed) = log.allow() {
        info!(token = ?token, code = refusal.code, suppressed, "resume refused: {}", refusal.reason);
    }
    link.close(refusal.code, refusal.reason).await;
    Delivered::Refused(refusal.outcome)
}
