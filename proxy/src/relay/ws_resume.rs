//! The WebSocket relay of carriage v2 (`docs/carriage.md`): the v1 relay ([`super::ws`]) plus resume.
//!
//! - When play begins the player gets `session <token> <window>` and an `ack` of what the proxy has received.
//! - Every backend batch is sent as one Binary message and also kept in [`Retained`] until the player's `ack`
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
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use moonbridge_protocol::ws::frame::{self as wsframe, OP_PING};
use moonbridge_protocol::ws::v2::{self, AckSchedule, Control, Retained};
use moonbridge_protocol::ws::KeepaliveAction;
use moonbridge_protocol::ws::{self as carriage};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::resume::{Refusal, Registration, ResumeStart, ResumeTable, Resumption};
use super::ws::{control_frame, Turn, WsLink};
use super::{
    discard_until_eof, inject_shutdown, read_batch, write_all, BackendSide, Flow, RelayEnd, RelayReport, RelayStart,
    Side, LINGER, RELAY_CHUNK,
};
use crate::limits::LogLimiter;
use crate::metrics::Metrics;

/// How long a lost link's own close (FIN, TLS close_notify) may take before it is dropped.
const LOST_LINK_CLOSE: Duration = Duration::from_millis(200);

/// The close code a v2 player gets on proxy shutdown: 1012 Service Restart (RFC 6455 registry), which the
/// client takes as an end, not as a drop to resume (1001 is a drop).
const CLOSE_SERVICE_RESTART: u16 = 1012;

/// How a connected stretch of the relay ended.
enum StretchEnd<L> {
    /// The session is over.
    End(RelayEnd),
    /// The player's link was lost without a Minecraft disconnect (the cause, for the log).
    Lost(String),
    /// A resume arrived while the link still looked alive.
    TakenOver(Resumption<L>),
}

/// What the relay keeps across links.
struct Resumable<L> {
    retained: Retained,
    acks: AckSchedule,
    /// The backend sent FIN while the player was away: replay, then end.
    backend_eof: bool,
    registration: Registration,
    /// The token the last resume used, valid again until the player shows it got the next one (its first
    /// `ack` or bytes on the new link): a drop during the resume exchange can then be resumed once more.
    previous: Option<Registration>,
    tx: mpsc::Sender<Resumption<L>>,
    rx: mpsc::Receiver<Resumption<L>>,
    table: Arc<ResumeTable>,
    metrics: Arc<Metrics>,
    window: Duration,
    buffer: usize,
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> WsLink<S> {
    /// Relays the WebSocket ⇄ `backend` with resume (see the module documentation).
    pub(crate) async fn relay_resumable(
        &mut self,
        backend: &mut BackendSide,
        start: RelayStart<'_>,
        resume: ResumeStart,
    ) -> RelayReport {
        let shutdown = start.shutdown;
        let (mut up, mut down) = Flow::pair(start);
        self.shorten_keepalive(v2::MAX_PING_INTERVAL);
        let (tx, rx) = mpsc::channel(1);
        let registration = resume.table.register(tx.clone());
        // As in v1: bytes sent ahead during the login stage first, then what is still buffered.
        let mut batch = self.early.split();
        let pending = if self.peer_closed {
            Turn::Closed
        } else {
            let limit = batch.len() + RELAY_CHUNK;
            self.decode(&mut batch, limit).await
        };
        let mut r = Resumable {
            retained: Retained::starting_at(self.stream_out),
            acks: AckSchedule::new(self.stream_in),
            backend_eof: false,
            registration,
            previous: None,
            tx,
            rx,
            table: resume.table,
            metrics: resume.metrics,
            window: resume.window,
            buffer: resume.buffer,
        };
        let end = self.run(backend, &mut up, &mut down, shutdown, &mut r, batch, pending).await;
        // A resume that arrived as the session ended: its link is told the session is gone.
        r.rx.close();
        while let Ok(h) = r.rx.try_recv() {
            tokio::spawn(async move {
                let mut link = h.link;
                link.close(Refusal::UNKNOWN.code, Refusal::UNKNOWN.reason).await;
            });
        }
        RelayReport { up: up.bytes, down: down.bytes, end }
    }

    /// The whole v2 relay: connected stretches, parking and resumes.
    #[allow(clippy::too_many_arguments)]
    async fn run(
        &mut self,
        backend: &mut BackendSide,
        up: &mut Flow,
        down: &mut Flow,
        shutdown: &CancellationToken,
        r: &mut Resumable<Self>,
        batch: BytesMut,
        pending: Turn,
    ) -> RelayEnd {
        let session = Control::Session { token: r.registration.token, window_seconds: r.window.as_secs() };
        r.acks = AckSchedule::new(self.stream_in);
        // Without its token the player cannot resume: a failure here ends the session at once.
        let announced = match self.send_control(&session).await {
            Ok(()) => self.send_control(&Control::Ack(self.stream_in)).await,
            Err(e) => Err(e),
        };
        if let Err(e) = announced {
            let _ = socket2::SockRef::from(backend.stream()).shutdown(std::net::Shutdown::Write);
            return RelayEnd::Error(Side::Player, e);
        }
        let mut step = self.connected(backend, up, down, shutdown, r, batch, pending).await;
        loop {
            let (resumption, cause, lost_at) = match step {
                StretchEnd::End(end) => return end,
                StretchEnd::TakenOver(h) => {
                    // The old link still looked alive: tell it, without waiting for it.
                    (h, "taken over by a new connection".to_string(), Instant::now())
                }
                StretchEnd::Lost(cause) => {
                    let lost_at = Instant::now();
                    if !self.peer_closed {
                        let _ = tokio::time::timeout(LOST_LINK_CLOSE, self.stream.shutdown()).await;
                    }
                    match self.park(backend, up, down, shutdown, r).await {
                        Ok(h) => (h, cause, lost_at),
                        Err(end) => {
                            if matches!(end, RelayEnd::NotResumed { .. }) {
                                r.metrics.resume("expired");
                                info!(cause = %cause, window_s = r.window.as_secs(), retained = r.retained.len(), "player not back within the resume window: closing the backend connection");
                            }
                            return end;
                        }
                    }
                }
            };
            step = match self.adopt(resumption, r, &cause, lost_at).await {
                Ok(()) if r.backend_eof => {
                    self.close(carriage::CLOSE_NORMAL, "").await;
                    return RelayEnd::Closed(Side::Backend);
                }
                Ok(()) => self.connected(backend, up, down, shutdown, r, BytesMut::new(), Turn::Continue).await,
                Err(AdoptError::Lost(cause)) => StretchEnd::Lost(cause),
                Err(AdoptError::Superseded(h)) => StretchEnd::TakenOver(h),
                Err(AdoptError::End(end)) => return end,
            };
        }
    }

    /// One connected stretch: the v1 relay loop with retention, acks and resumptions.
    #[allow(clippy::too_many_arguments)]
    async fn connected(
        &mut self,
        backend: &mut BackendSide,
        up: &mut Flow,
        down: &mut Flow,
        shutdown: &CancellationToken,
        r: &mut Resumable<Self>,
        mut batch: BytesMut,
        mut pending: Turn,
    ) -> StretchEnd<Self> {
        let stall = up.stall;
        loop {
            // A handover, when one is due: the player's bytes so far are with the old backend (each batch is
            // written whole).
            if let Err(e) = backend.hand_over(up, down).await {
                self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                return StretchEnd::End(RelayEnd::Error(Side::Backend, e));
            }
            // Bytes or an ack on this link: the player has the current token, so the last one is spent.
            if (!batch.is_empty() || self.peer_ack.is_some()) && r.previous.is_some() {
                if let Some(p) = r.previous.take() {
                    r.table.retire(p);
                }
            }
            if !batch.is_empty() {
                up.process(&mut batch);
                if let Err(e) = write_all(backend.stream(), &batch, stall, Side::Backend).await {
                    self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                    return StretchEnd::End(RelayEnd::Error(Side::Backend, e));
                }
                batch.clear();
            }
            if let Some(n) = self.peer_ack.take() {
                if let Err(e) = r.retained.ack(n) {
                    self.fault = Some((carriage::CLOSE_PROTOCOL_ERROR, "ack past the bytes sent"));
                    pending = Turn::Fault(io::Error::new(io::ErrorKind::InvalidData, e.to_string()));
                }
            }
            match std::mem::replace(&mut pending, Turn::Continue) {
                Turn::Continue => {}
                Turn::Closed if self.peer_close_code == Some(carriage::CLOSE_GOING_AWAY) => {
                    // A CDN edge going away (or the client's network leaving): its Close was answered; wait.
                    return StretchEnd::Lost("Close 1001 (going away)".into());
                }
                Turn::Closed => {
                    let _ = socket2::SockRef::from(backend.stream()).shutdown(std::net::Shutdown::Write);
                    discard_until_eof(backend.stream(), LINGER).await;
                    let _ = tokio::time::timeout(LINGER, self.stream.shutdown()).await;
                    return StretchEnd::End(RelayEnd::Closed(Side::Player));
                }
                Turn::Fault(e) if self.fault.is_none() => {
                    // A Pong that could not be written: the link is lost, not broken by the player.
                    return StretchEnd::Lost(format!("write failed: {e}"));
                }
                Turn::Fault(e) => {
                    self.close(carriage::CLOSE_PROTOCOL_ERROR, "protocol error").await;
                    return StretchEnd::End(RelayEnd::Error(Side::Player, e));
                }
            }
            if let Some(n) = r.acks.on_data(self.stream_in) {
                if let Err(step) = self.write_racing(&control_frame(&Control::Ack(n)), &mut r.rx).await {
                    return step;
                }
            }
            if self.decode_backlog() {
                pending = self.decode(&mut batch, RELAY_CHUNK).await;
                continue;
            }
            let room = r.retained.len() < r.buffer;
            tokio::select! {
                h = r.rx.recv() => {
                    if let Some(h) = h {
                        return StretchEnd::TakenOver(h);
                    }
                }
                res = Self::fill(&mut self.stream, &mut self.dec, &self.counters) => {
                    match res {
                        Ok(0) => {
                            self.peer_closed = true;
                            return StretchEnd::Lost("connection closed (FIN)".into());
                        }
                        Ok(_) => {}
                        Err(e) => {
                            self.peer_closed = true;
                            return StretchEnd::Lost(format!("connection lost: {e}"));
                        }
                    }
                    if let Some(k) = &mut self.keepalive {
                        k.on_receive(Instant::now());
                    }
                    pending = self.decode(&mut batch, RELAY_CHUNK).await;
                }
                res = backend.stream().readable(), if room => {
                    if let Err(e) = res {
                        self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                        return StretchEnd::End(RelayEnd::Error(Side::Backend, e));
                    }
                    let room = r.buffer - r.retained.len();
                    // One copy, out of the scratch buffer into the message; the retained chunk shares it. With
                    // moonbridge.v2.zstd the message is compressed and the retained chunk is its own copy (resume
                    // counts and replays stream bytes).
                    let msg = match read_batch(backend.stream(), down, room, |d| {
                        self.binary_frame(d).map(|(frame, at)| {
                            let kept = at.map_or_else(|| Bytes::copy_from_slice(d), |n| frame.slice(n..));
                            (frame, kept, d.len())
                        })
                    }) {
                        Ok(Some(Ok(m))) => m,
                        Ok(Some(Err(e))) => {
                            self.close(carriage::CLOSE_INTERNAL_ERROR, "compression failed").await;
                            return StretchEnd::End(RelayEnd::Error(Side::Player, e));
                        }
                        Ok(None) => continue,
                        Err(e) => {
                            self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                            return StretchEnd::End(RelayEnd::Error(Side::Backend, e));
                        }
                    };
                    if msg.2 == 0 {
                        self.close(carriage::CLOSE_NORMAL, "").await;
                        return StretchEnd::End(RelayEnd::Closed(Side::Backend));
                    }
                    r.retained.push(msg.1);
                    self.messages_out += 1;
                    self.stream_out += msg.2 as u64;
                    self.counters.messages_out.inc();
                    if let Err(step) = self.write_racing(&msg.0, &mut r.rx).await {
                        return step;
                    }
                }
                () = self.tick.as_mut(), if self.keepalive.is_some() => {
                    match self.keepalive_due(false) {
                        KeepaliveAction::None => {}
                        KeepaliveAction::Ping => {
                            if let Err(step) = self.write_racing(&wsframe::frame(OP_PING, &[]), &mut r.rx).await {
                                return step;
                            }
                        }
                        KeepaliveAction::Dead => {
                            self.close(carriage::CLOSE_GOING_AWAY, "no traffic").await;
                            return StretchEnd::Lost("no traffic for 3 ping intervals".into());
                        }
                    }
                    if let Some(n) = r.acks.on_tick(self.stream_in) {
                        if let Err(step) = self.write_racing(&control_frame(&Control::Ack(n)), &mut r.rx).await {
                            return step;
                        }
                    }
                }
                () = shutdown.cancelled() => {
                    inject_shutdown(self, down).await;
                    self.close(CLOSE_SERVICE_RESTART, "proxy shutting down").await;
                    return StretchEnd::End(RelayEnd::Shutdown);
                }
            }
        }
    }

    /// Waits for a resume with no player: the backend's bytes are retained (reads pause when the buffer is
    /// full), until a resumption, the window's end, or shutdown.
    async fn park(
        &mut self,
        backend: &mut BackendSide,
        up: &mut Flow,
        down: &mut Flow,
        shutdown: &CancellationToken,
        r: &mut Resumable<Self>,
    ) -> Result<Resumption<Self>, RelayEnd> {
        let deadline = tokio::time::Instant::now() + r.window;
        loop {
            // A switch may start while the player is away (a handover when one is due): its frames are retained
            // from the hop.
            backend.hand_over(up, down).await.map_err(|e| RelayEnd::Error(Side::Backend, e))?;
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
                res = backend.stream().readable(), if room => {
                    if let Err(e) = res {
                        return Err(RelayEnd::Error(Side::Backend, e));
                    }
                    let room = r.buffer - r.retained.len();
                    let retained = &mut r.retained;
                    match read_batch(backend.stream(), down, room, |d| {
                        retained.push(Bytes::copy_from_slice(d));
                        d.len()
                    }) {
                        Ok(Some(0)) => r.backend_eof = true,
                        Ok(_) => {}
                        Err(e) => return Err(RelayEnd::Error(Side::Backend, e)),
                    }
                }
                () = shutdown.cancelled() => return Err(RelayEnd::Shutdown),
            }
        }
    }

    /// Continues the session on the handed-over link: checks the player's count, answers `resumed`, sends
    /// again what the player has not received, and makes the new link this one (the old one is closed in the
    /// background: 4005 if it was still open).
    async fn adopt(
        &mut self,
        resumption: Resumption<Self>,
        r: &mut Resumable<Self>,
        cause: &str,
        lost_at: Instant,
    ) -> Result<(), AdoptError<Self>> {
        let Resumption { mut link, token, received, sent, at } = resumption;
        let (from, to) = (r.retained.start(), r.retained.end());
        let replay = match r.retained.resume_from(received) {
            Ok(b) if sent >= self.stream_in => b,
            _ => {
                r.metrics.resume(Refusal::OUT_OF_RANGE.outcome);
                info!(
                    received,
                    sent,
                    retained_from = from,
                    retained_to = to,
                    "resume refused: count outside what is retained"
                );
                link.close(Refusal::OUT_OF_RANGE.code, Refusal::OUT_OF_RANGE.reason).await;
                let e = io::Error::new(io::ErrorKind::InvalidData, "resume count outside the retained bytes");
                return Err(AdoptError::End(RelayEnd::Error(Side::Player, e)));
            }
        };
        link.shorten_keepalive(v2::MAX_PING_INTERVAL);
        r.registration = r.table.register(r.tx.clone());
        // The token this resume used stays valid until the player shows it got the next one.
        r.previous = Some(r.table.reinstate(token, r.tx.clone()));
        link.stream_in = self.stream_in;
        link.stream_out = received;
        link.messages_in += self.messages_in;
        link.messages_out += self.messages_out;
        let resumed = control_frame(&Control::Resumed { received: self.stream_in, token: r.registration.token });
        let mut outcome = link.write_racing(&resumed, &mut r.rx).await;
        let mut replayed_to_player = 0;
        for chunk in replay {
            if outcome.is_err() {
                break;
            }
            outcome = match link.binary_frame(chunk) {
                Ok((frame, _)) => link.write_racing(&frame, &mut r.rx).await,
                Err(e) => Err(StretchEnd::Lost(format!("compression failed: {e}"))),
            };
            link.stream_out += chunk.len() as u64;
            link.messages_out += 1;
            link.counters.messages_out.inc();
            replayed_to_player += chunk.len();
        }
        let first_byte = at.elapsed();
        match outcome {
            Ok(()) => {}
            Err(StretchEnd::TakenOver(newer)) => {
                // An even newer resume arrived meanwhile: it wins, this link is closed (4005).
                tokio::spawn(close_old(link));
                return Err(AdoptError::Superseded(newer));
            }
            Err(other) => {
                tokio::spawn(close_old(link));
                let cause = match other {
                    StretchEnd::Lost(c) => c,
                    _ => "resumed link lost".into(),
                };
                return Err(AdoptError::Lost(format!("resumed link lost during the replay: {cause}")));
            }
        }
        std::mem::swap(self, &mut link);
        let old = link;
        if !old.peer_closed || !old.close_sent {
            tokio::spawn(close_old(old));
        }
        r.metrics.resume("resumed");
        info!(
            cause = %cause,
            gap_ms = lost_at.elapsed().as_millis() as u64,
            replayed_to_player,
            replayed_from_player = sent.saturating_sub(self.stream_in),
            resume_us = first_byte.as_micros() as u64,
            "session resumed"
        );
        Ok(())
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send + 'static> WsLink<S> {
    /// Writes whole frames to the player unless a resume arrives first (a link that stopped reading must not
    /// hold up a resume): a failed write is a lost link, a resumption a take-over.
    async fn write_racing(
        &mut self,
        frames: &[u8],
        rx: &mut mpsc::Receiver<Resumption<Self>>,
    ) -> Result<(), StretchEnd<Self>> {
        tokio::select! {
            biased;
            res = self.write_frame(frames) => res.map_err(|e| StretchEnd::Lost(format!("write failed: {e}"))),
            Some(h) = rx.recv() => Err(StretchEnd::TakenOver(h)),
        }
    }
}

/// Why [`WsLink::adopt`] did not continue the session on the handed-over link.
enum AdoptError<L> {
    /// The new link was lost too: wait for the next resume.
    Lost(String),
    /// A newer resume arrived during this one: adopt that instead.
    Superseded(Resumption<L>),
    /// The session is over.
    End(RelayEnd),
}

/// Closes a link a resume replaced: 4005 when it was still open, then its transport.
async fn close_old<S: AsyncRead + AsyncWrite + Unpin + Send>(mut old: WsLink<S>) {
    old.close(v2::CLOSE_TAKEN_OVER, "resumed on another connection").await;
}

/// A resume request arrived on `link` (its first message): hands the link to its session, or closes it with
/// the refusal's code. Returns the outcome label for the log.
pub(crate) async fn deliver_resumption<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    mut link: WsLink<S>,
    control: Control,
    table: &ResumeTable,
    metrics: &Metrics,
    log: &LogLimiter,
) -> &'static str {
    let Control::Resume { token, received, sent } = control else {
        link.close(carriage::CLOSE_PROTOCOL_ERROR, "expected a resume request").await;
        return "bad_request";
    };
    let at = Instant::now();
    let refusal = match table.take::<WsLink<S>>(&token) {
        Ok(tx) => match tx.send(Resumption { link, token, received, sent, at }).await {
            Ok(()) => return "handed_over",
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
    refusal.outcome
}
