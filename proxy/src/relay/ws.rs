//! The one WebSocket relay loop ([`WsLink`] ⇄ backend), which carriage v1 and v2 both run; what v2 adds
//! ([`super::v2`]: acks, retention, a resume racing every write, the 1001-is-a-drop rule) is an optional part
//! of the same loop, switched on by passing a [`Resumable`].
//!
//! - Every backend read batch leaves as one Binary message (compressed with `moonbridge.v2.zstd`); the
//!   backend's FIN becomes Close 1000.
//! - The player's stream bytes go to the backend in one write per decode turn; a Ping is answered inside the
//!   decode ([`crate::ws_link`]), a keepalive tick sends a Ping or closes a silent player with 1001.
//! - Carriage v1: the player's Close (or a lost connection) becomes a FIN to the backend and ends the relay.
//!   Carriage v2: a lost connection, a Close 1001, a failed write or a silent player is a *lost link* instead
//!   ([`StretchEnd::Lost`]), which [`super::ws_resume`] parks for a resume.
//! - Shutdown: what the backend already sent, the Play Disconnect at a frame boundary, then Close 1001 (v1) or
//!   1012 Service Restart (v2, so the client does not take it as a drop to resume).

use std::io;
use std::time::Instant;

use bytes::{Bytes, BytesMut};
use moonbridge_protocol::ws::frame::{self as wsframe, OP_PING};
use moonbridge_protocol::ws::{self as carriage, KeepaliveAction};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use super::v2::{next_resumption, Resumable, StretchEnd};
use super::{inject_shutdown, BackendSide, Flow, PlayerSink, RelayEnd, RelayReport, RelayStart};
use crate::transfer::LOST;
use crate::wire::{Side, LINGER, RELAY_CHUNK};
use crate::ws_link::{Turn, WsLink};

/// The close code a v2 player gets on proxy shutdown: 1012 Service Restart (RFC 6455 registry), which the
/// client takes as an end, not as a drop to resume (1001 is a drop).
pub(super) const CLOSE_SERVICE_RESTART: u16 = 1012;

/// What the relay runs over besides the player's link, for the whole session (a resume keeps it): the backend
/// connection, the two [`Flow`]s and the shutdown signal.
pub(super) struct Pipe<'a> {
    pub(super) backend: &'a mut BackendSide,
    pub(super) up: Flow,
    pub(super) down: Flow,
    pub(super) shutdown: &'a crate::players::Stop,
}

impl<'a> Pipe<'a> {
    pub(super) fn new(backend: &'a mut BackendSide, start: RelayStart<'a>) -> Self {
        let shutdown = start.shutdown;
        let (up, down) = Flow::pair(start);
        Self { backend, up, down, shutdown }
    }

    /// The session's report once the relay ended with `end`.
    pub(super) fn report(&self, end: RelayEnd) -> RelayReport {
        RelayReport { up: self.up.bytes, down: self.down.bytes, end, visited: None }
    }
}

/// Stream bytes decoded from the player, not written to the backend yet, and what the decode turn that made
/// them turned up besides.
pub(super) struct Inbound {
    pub(super) batch: BytesMut,
    pub(super) pending: Turn,
}

impl Inbound {
    /// Nothing decoded yet (a resumed link starts so).
    pub(super) fn empty() -> Self {
        Self { batch: BytesMut::new(), pending: Turn::Continue }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> WsLink<S> {
    /// Relays the WebSocket ⇄ `backend` with carriage v1 until either side ends (see the module documentation).
    pub(crate) async fn relay(&mut self, backend: &mut BackendSide, start: RelayStart<'_>) -> RelayReport {
        let mut pipe = Pipe::new(backend, start);
        let inbound = self.first_inbound().await;
        let end = match self.pump(&mut pipe, None, inbound).await {
            StretchEnd::End(end) => end,
            // Without a Resumable the loop neither loses a link nor is taken over; kept total all the same.
            StretchEnd::Lost(cause) => RelayEnd::Error(Side::Player, io::Error::other(cause)),
            StretchEnd::TakenOver(_) => RelayEnd::Error(Side::Player, io::Error::other("taken over")),
            StretchEnd::Move => RelayEnd::Error(Side::Player, io::Error::other("moved")),
        };
        pipe.report(end)
    }

    /// What the relay starts with: the bytes the player sent ahead during the login stage, then what is still
    /// buffered undecoded (reading paused at the early-data limit), and a Close that came with them.
    pub(super) async fn first_inbound(&mut self) -> Inbound {
        let mut batch = self.early.split();
        let pending = if self.peer_closed {
            Turn::Closed
        } else {
            let limit = batch.len() + RELAY_CHUNK;
            self.decode(&mut batch, limit).await
        };
        Inbound { batch, pending }
    }

    /// The relay loop over one link, until the session ends or (with `v2`) the link is lost or taken over.
    pub(super) async fn pump(
        &mut self,
        pipe: &mut Pipe<'_>,
        mut v2: Option<&mut Resumable<Self>>,
        inbound: Inbound,
    ) -> StretchEnd<Self> {
        let Inbound { mut batch, mut pending } = inbound;
        let stall = pipe.up.stall;
        loop {
            // A handover, when one is due: the player's bytes so far are with the old backend (each batch is
            // written whole).
            if let Err(e) = pipe.backend.hand_over(&mut pipe.up, &mut pipe.down) {
                self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                return StretchEnd::End(RelayEnd::Error(Side::Backend, e));
            }
            if let Some(r) = v2.as_deref_mut() {
                if !batch.is_empty() || self.peer_ack.is_some() {
                    r.retire_previous();
                }
            }
            if !batch.is_empty() {
                pipe.up.process_owned(&mut batch);
            }
            if !batch.is_empty() {
                if let Err(e) = pipe.backend.write_all(&batch, stall).await {
                    self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                    return StretchEnd::End(RelayEnd::Error(Side::Backend, e));
                }
                batch.clear();
            }
            if let Some(e) = v2.as_deref_mut().and_then(|r| self.apply_ack(r)) {
                pending = Turn::Fault(e);
            }
            match std::mem::replace(&mut pending, Turn::Continue) {
                Turn::Continue => {}
                Turn::Closed if v2.is_some() && self.peer_close_code == Some(carriage::CLOSE_GOING_AWAY) => {
                    // A CDN edge going away (or the client's network leaving): its Close was answered; wait.
                    return StretchEnd::Lost("Close 1001 (going away)".into());
                }
                Turn::Closed => {
                    // The player is gone (its Close was answered): FIN to the backend, then let it finish briefly.
                    pipe.backend.shutdown_write();
                    pipe.backend.linger(LINGER).await;
                    let _ = tokio::time::timeout(LINGER, self.stream.shutdown()).await;
                    return StretchEnd::End(RelayEnd::Closed(Side::Player));
                }
                Turn::Fault(e) if v2.is_some() && self.fault.is_none() => {
                    // A Pong that could not be written: the link is lost, not broken by the player.
                    return StretchEnd::Lost(format!("write failed: {e}"));
                }
                Turn::Fault(e) => {
                    self.close(carriage::CLOSE_PROTOCOL_ERROR, "protocol error").await;
                    return StretchEnd::End(RelayEnd::Error(Side::Player, e));
                }
            }
            if let Some(r) = v2.as_deref_mut() {
                if let Some(n) = r.acks.on_data(self.stream_in) {
                    if let Err(end) = self.send_ack(n, &mut r.rx).await {
                        return end;
                    }
                }
            }
            if self.decode_backlog() {
                pending = self.decode(&mut batch, RELAY_CHUNK).await;
                continue;
            }
            // A drain's move, once the switchboard is between two frames both ways and everything the player
            // sent so far was decoded (v2 only).
            if v2.is_some() && pipe.backend.move_due() {
                return StretchEnd::Move;
            }
            let room = v2.as_deref().map_or(RELAY_CHUNK, Resumable::room);
            tokio::select! {
                Some(h) = next_resumption(v2.as_deref_mut()) => return StretchEnd::TakenOver(h),
                res = Self::fill(&mut self.stream, &mut self.dec, &self.counters) => {
                    match res {
                        Ok(0) if v2.is_some() => {
                            self.peer_closed = true;
                            return StretchEnd::Lost("connection closed (FIN)".into());
                        }
                        Ok(0) => {
                            self.peer_closed = true;
                            pending = Turn::Closed;
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) if v2.is_some() => {
                            self.peer_closed = true;
                            return StretchEnd::Lost(format!("connection lost: {e}"));
                        }
                        Err(e) => {
                            self.peer_closed = true;
                            pipe.backend.shutdown_write();
                            return StretchEnd::End(RelayEnd::Error(Side::Player, e));
                        }
                    }
                    if let Some(k) = &mut self.keepalive {
                        k.on_receive(Instant::now());
                    }
                    // Pongs are written inside, under the write-stall limit.
                    pending = self.decode(&mut batch, RELAY_CHUNK).await;
                }
                res = pipe.backend.readable(&mut pipe.down), if room > 0 => {
                    if let Err(e) = res {
                        if pipe.down.fail_over(LOST) {
                            continue;
                        }
                        self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                        return StretchEnd::End(RelayEnd::Error(Side::Backend, e));
                    }
                    // One copy, out of the scratch buffer into the message (header in front); v2 retains the
                    // stream bytes, sharing the message's buffer (with moonbridge.v2.zstd the retained chunk is
                    // its own copy: resume counts and replays stream bytes).
                    let retain = v2.is_some();
                    let msg = match pipe.backend.read_batch(&mut pipe.down, room, |d| {
                        self.binary_frame(d).map(|(frame, at)| {
                            let kept = retain.then(|| at.map_or_else(|| Bytes::copy_from_slice(d), |n| frame.slice(n..)));
                            (frame, kept, d.len())
                        })
                    }) {
                        Ok(Some(Ok(m))) => m,
                        Ok(Some(Err(e))) => {
                            self.close(carriage::CLOSE_INTERNAL_ERROR, "compression failed").await;
                            return StretchEnd::End(RelayEnd::Error(Side::Player, e));
                        }
                        Ok(None) => continue,
                        Err(_) if pipe.down.fail_over(LOST) => continue,
                        Err(e) => {
                            self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                            return StretchEnd::End(RelayEnd::Error(Side::Backend, e));
                        }
                    };
                    let (frame, kept, n) = msg;
                    if n == 0 && pipe.down.fail_over(LOST) {
                        continue;
                    }
                    if n == 0 {
                        // Backend FIN: close 1000, then the TCP close.
                        self.close(carriage::CLOSE_NORMAL, "").await;
                        return StretchEnd::End(RelayEnd::Closed(Side::Backend));
                    }
                    if let (Some(r), Some(kept)) = (v2.as_deref_mut(), kept) {
                        r.retained.push(kept);
                    }
                    self.messages_out += 1;
                    self.stream_out += n as u64;
                    self.counters.messages_out.inc();
                    if let Err(end) = self.send_frames(&frame, v2.as_deref_mut()).await {
                        return end;
                    }
                }
                () = self.tick.as_mut(), if self.keepalive.is_some() => {
                    match self.keepalive_due(false) {
                        KeepaliveAction::None => {}
                        KeepaliveAction::Ping => {
                            if let Err(end) = self.send_frames(&wsframe::frame(OP_PING, &[]), v2.as_deref_mut()).await {
                                return end;
                            }
                        }
                        KeepaliveAction::Dead => {
                            self.close(carriage::CLOSE_GOING_AWAY, "no traffic").await;
                            const SILENT: &str = "no traffic for 3 ping intervals";
                            return match v2 {
                                Some(_) => StretchEnd::Lost(SILENT.into()),
                                None => StretchEnd::End(RelayEnd::Error(Side::Player, io::Error::new(io::ErrorKind::TimedOut, SILENT))),
                            };
                        }
                    }
                    match self.zstd_quiet_frame() {
                        Ok(None) => {}
                        Ok(Some(frame)) => {
                            if let Err(end) = self.send_frames(&frame, v2.as_deref_mut()).await {
                                return end;
                            }
                        }
                        Err(e) => {
                            self.close(carriage::CLOSE_INTERNAL_ERROR, "compression failed").await;
                            return StretchEnd::End(RelayEnd::Error(Side::Player, e));
                        }
                    }
                    if let Some(r) = v2.as_deref_mut() {
                        if let Some(n) = r.acks.on_tick(self.stream_in) {
                            if let Err(end) = self.send_ack(n, &mut r.rx).await {
                                return end;
                            }
                        }
                    }
                }
                () = pipe.shutdown.cancelled() => {
                    inject_shutdown(self, &mut pipe.down, pipe.shutdown).await;
                    // A kick (a duplicate login) ends the session for good: a normal close, nothing to resume.
                    let (code, reason) = match pipe.shutdown.kicked() {
                        Some(_) => (moonbridge_protocol::ws::CLOSE_NORMAL, "kicked"),
                        None if v2.is_some() => (CLOSE_SERVICE_RESTART, "proxy shutting down"),
                        None => (carriage::CLOSE_GOING_AWAY, "proxy shutting down"),
                    };
                    self.close(code, reason).await;
                    return StretchEnd::End(RelayEnd::Shutdown);
                }
            }
        }
    }

    /// Writes whole frames to the player: racing a resume on a v2 relay (a failed write is a lost link there),
    /// plainly on a v1 relay (a failed write ends it).
    async fn send_frames(&mut self, frames: &[u8], v2: Option<&mut Resumable<Self>>) -> Result<(), StretchEnd<Self>> {
        match v2 {
            Some(r) => self.write_racing(frames, &mut r.rx).await,
            None => self.write_frame(frames).await.map_err(|e| StretchEnd::End(RelayEnd::Error(Side::Player, e))),
        }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> PlayerSink for WsLink<S> {
    async fn drain(&mut self, _down: &mut Flow) -> io::Result<()> {
        Ok(()) // every batch left as a whole message
    }

    async fn send(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        self.send_binary(&bytes).await
    }
}
