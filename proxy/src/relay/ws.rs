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

use super::lanes::Outbox;
use super::v2::{apply_ack, next_resumption, send_ack, write_racing, Resumable, StretchEnd};
use super::{inject_shutdown, BackendSide, Flow, PlayerSink, RelayEnd, RelayReport, RelayStart};
use crate::resume::PlayerStream;
use crate::transfer::LOST;
use crate::wire::{Side, LINGER, RELAY_CHUNK};
use crate::ws_link::{PeerClose, Turn, Wake, WsLink};
use bytes::{Bytes, BytesMut};
use moonbridge_protocol::ws::frame::{self as wsframe, OP_PING};
use moonbridge_protocol::ws::{self as carriage, KeepaliveAction};

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
    /// The clientbound lanes (`[lanes]` on and the stream's frames followed).
    pub(super) out: Option<Outbox<'a>>,
}

impl<'a> Pipe<'a> {
    pub(super) fn new(backend: &'a mut BackendSide, mut start: RelayStart<'a>) -> Self {
        let shutdown = start.shutdown;
        let (lanes, max, metrics) = (start.lanes.take(), start.max_frame_len, start.metrics);
        let (up, mut down) = Flow::pair(start);
        let out = down.lanes(lanes).map(|l| Outbox::new(l, max, &shutdown.delivery, metrics));
        Self { backend, up, down, shutdown, out }
    }

    /// Bytes the next backend read may take: the lanes' room, or (without lanes) `room`.
    fn read_room(&self, room: usize) -> usize {
        self.out.as_ref().map_or(room, Outbox::room)
    }

    /// Everything the lanes hold, encrypted in online mode, in the order it goes, in pieces of at most a relay
    /// batch (each one message: the carriage's 1 MiB bound); nothing without lanes.
    pub(super) fn take_queued(&mut self) -> Vec<Bytes> {
        let Some(out) = self.out.as_mut() else { return Vec::new() };
        let mut all = out.take_all();
        self.down.seal(&mut all);
        let mut pieces = Vec::with_capacity(all.len().div_ceil(RELAY_CHUNK));
        while !all.is_empty() {
            pieces.push(all.split_to(all.len().min(RELAY_CHUNK)).freeze());
        }
        pieces
    }

    /// Sends everything the lanes hold, whatever the window (the session ends: a backend FIN, shutdown).
    async fn flush_queued<S: PlayerStream>(&mut self, link: &mut WsLink<S>) -> io::Result<()> {
        for piece in self.take_queued() {
            link.send_binary(&piece).await?;
        }
        Ok(())
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

    /// Nothing decoded yet but the player's highest `ack` so far, applied first (a relay going on after a
    /// move that did not happen).
    pub(super) fn acked(ack: Option<u64>) -> Self {
        Self { batch: BytesMut::new(), pending: ack.map_or(Turn::Continue, Turn::Ack) }
    }

    /// What the relay starts with ([`WsLink::first_inbound`]).
    pub(super) async fn first<S: PlayerStream>(link: &mut WsLink<S>) -> Self {
        let (batch, pending) = link.first_inbound(RELAY_CHUNK).await;
        Self { batch, pending }
    }
}

/// Relays the WebSocket ⇄ `backend` with carriage v1 until either side ends (see the module documentation).
pub(crate) async fn relay<S: PlayerStream>(
    link: &mut WsLink<S>,
    backend: &mut BackendSide,
    start: RelayStart<'_>,
) -> RelayReport {
    let mut pipe = Pipe::new(backend, start);
    let inbound = Inbound::first(link).await;
    let end = match pump(link, &mut pipe, None, inbound).await {
        StretchEnd::End(end) => end,
        // Without a Resumable the loop neither loses a link nor is taken over; kept total all the same.
        StretchEnd::Lost(cause) => RelayEnd::Error(Side::Player, io::Error::other(cause)),
        StretchEnd::TakenOver(_) => RelayEnd::Error(Side::Player, io::Error::other("taken over")),
        StretchEnd::Move => RelayEnd::Error(Side::Player, io::Error::other("moved")),
    };
    pipe.report(end)
}

/// The relay loop over one link, until the session ends or (with `v2`) the link is lost or taken over.
pub(super) async fn pump<S: PlayerStream>(
    link: &mut WsLink<S>,
    pipe: &mut Pipe<'_>,
    mut v2: Option<&mut Resumable<WsLink<S>>>,
    inbound: Inbound,
) -> StretchEnd<WsLink<S>> {
    let Inbound { mut batch, mut pending } = inbound;
    let stall = pipe.up.stall;
    // The backend sent FIN while the lanes still held bytes: they go out paced, then Close 1000.
    let mut backend_done = false;
    loop {
        // A handover, when one is due: the player's bytes so far are with the old backend (each batch is
        // written whole).
        if let Err(e) = pipe.backend.hand_over(&mut pipe.up, &mut pipe.down) {
            link.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
            return StretchEnd::End(RelayEnd::Error(Side::Backend, e));
        }
        if let Some(r) = v2.as_deref_mut() {
            if !batch.is_empty() || matches!(pending, Turn::Ack(_)) {
                r.retire_previous();
            }
        }
        if !batch.is_empty() {
            if let Err(e) = pipe.up.process_owned(&mut batch) {
                link.close(carriage::CLOSE_PROTOCOL_ERROR, "unreadable Minecraft frames").await;
                return StretchEnd::End(RelayEnd::Error(Side::Player, e));
            }
        }
        if !batch.is_empty() {
            if let Err(e) = pipe.backend.write_all(&batch, stall).await {
                link.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                return StretchEnd::End(RelayEnd::Error(Side::Backend, e));
            }
            batch.clear();
        }
        match std::mem::replace(&mut pending, Turn::Continue) {
            // A stray `stay` (no move under way) says nothing.
            Turn::Continue | Turn::Stay => {}
            Turn::Ack(n) => {
                if let Some(r) = v2.as_deref_mut() {
                    if let Some(e) = apply_ack(link, r, n) {
                        link.close(carriage::CLOSE_PROTOCOL_ERROR, "protocol error").await;
                        return StretchEnd::End(RelayEnd::Error(Side::Player, e));
                    }
                    if let Some(out) = pipe.out.as_mut() {
                        out.acked(n);
                    }
                }
            }
            Turn::Closed(c) if v2.is_some() && c.code == Some(carriage::CLOSE_GOING_AWAY) => {
                // A CDN edge going away (or the client's network leaving): its Close was answered; wait.
                return StretchEnd::Lost("Close 1001 (going away)".into());
            }
            Turn::Closed(_) => {
                // The player is gone (its Close was answered): FIN to the backend, then let it finish briefly.
                pipe.backend.shutdown_write();
                pipe.backend.linger(LINGER).await;
                link.shutdown_transport(LINGER).await;
                return StretchEnd::End(RelayEnd::Closed(Side::Player));
            }
            Turn::Lost(e) if v2.is_some() => {
                // A Pong that could not be written: the link is lost, not broken by the player.
                return StretchEnd::Lost(format!("write failed: {e}"));
            }
            Turn::Fault(e) | Turn::Lost(e) => {
                link.close(carriage::CLOSE_PROTOCOL_ERROR, "protocol error").await;
                return StretchEnd::End(RelayEnd::Error(Side::Player, e));
            }
        }
        if let Some(r) = v2.as_deref_mut() {
            if let Some(n) = r.acks.on_data(link.counts().0) {
                if let Err(end) = send_ack(link, n, &mut r.rx).await {
                    return end;
                }
            }
        }
        if link.decode_backlog() {
            pending = link.decode(&mut batch, RELAY_CHUNK).await;
            continue;
        }
        // Queued bytes go when the link and the window take more: one of the select's branches, so the player,
        // shutdown and a resume get their turns between two messages however long the queue.
        let retention = v2.as_deref().map_or(RELAY_CHUNK, Resumable::room);
        let can_send = retention > 0 && pipe.out.as_ref().is_some_and(|o| o.ready(link.counts().1));
        if backend_done && pipe.out.as_ref().is_none_or(Outbox::stalled) {
            // Everything went (the head of a frame the backend never finished stays unsent: the stream ends).
            if let Err(e) = pipe.flush_queued(link).await {
                return StretchEnd::End(RelayEnd::Error(Side::Player, e));
            }
            link.close(carriage::CLOSE_NORMAL, "").await;
            return StretchEnd::End(RelayEnd::Closed(Side::Backend));
        }
        // A drain's move, once the switchboard is between two frames both ways, nothing is queued for the
        // player and everything the player sent so far was decoded (v2 only).
        if v2.is_some() && pipe.backend.move_due() && pipe.out.as_ref().is_none_or(Outbox::is_empty) {
            return StretchEnd::Move;
        }
        let room = pipe.read_room(retention);
        tokio::select! {
            Some(h) = next_resumption(v2.as_deref_mut()) => return StretchEnd::TakenOver(h),
            () = std::future::ready(()), if can_send => {
                // The backend is read into the lanes while the message is written.
                if let Some(out) = pipe.out.as_mut() {
                    let mut chunk = out.next(link.counts().1, retention);
                    if !chunk.is_empty() {
                        pipe.down.seal(&mut chunk);
                        if let Err(end) = send_queued(link, pipe, v2.as_deref_mut(), &chunk).await {
                            return end;
                        }
                    }
                }
            }
            wake = link.wait() => match wake {
                Wake::Read(res) => {
                    match res {
                        Ok(0) if v2.is_some() => {
                            link.ended();
                            return StretchEnd::Lost("connection closed (FIN)".into());
                        }
                        Ok(0) => {
                            link.ended();
                            pending = Turn::Closed(PeerClose::ENDED);
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) if v2.is_some() => {
                            link.ended();
                            return StretchEnd::Lost(format!("connection lost: {e}"));
                        }
                        Err(e) => {
                            link.ended();
                            pipe.backend.shutdown_write();
                            return StretchEnd::End(RelayEnd::Error(Side::Player, e));
                        }
                    }
                    // Pongs are written inside, under the write-stall limit.
                    pending = link.decode(&mut batch, RELAY_CHUNK).await;
                }
                Wake::Tick => {
                    if let Err(end) = tick(link, v2.as_deref_mut()).await {
                        return end;
                    }
                }
            },
            res = pipe.backend.readable(&mut pipe.down), if room > 0 && !backend_done => {
                if let Err(e) = res {
                    match backend_failed(link, &mut pipe.down, e).await {
                        None => continue,
                        Some(end) => return end,
                    }
                }
                // One copy, out of the scratch buffer into the message (header in front); v2 retains the
                // stream bytes, sharing the message's buffer (with moonbridge.v2.zstd the retained chunk is
                // its own copy: resume counts and replays stream bytes).
                let retain = v2.is_some();
                // With lanes a batch goes at once only when nothing is queued and the window and the resume
                // buffer take it whole (and, in online mode, never: it is encrypted as it leaves the queue).
                let sent = link.counts().1;
                let sealing = pipe.down.sealing();
                let out = &mut pipe.out;
                let mut whole = false;
                let msg = match pipe.backend.read_batch(&mut pipe.down, room, |d| {
                    if d.is_empty() {
                        // The end: no message (compressing nothing would move the zstd stream on for nothing).
                        return Ok(Some((Bytes::new(), None, 0)));
                    }
                    let mut d: &[u8] = d;
                    if let Some(o) = out.as_mut() {
                        if sealing || d.len() > retention || !o.direct(d.len(), sent) {
                            o.push(d);
                            return Ok(None);
                        }
                        // As much as the link took quickly of late goes at once; the rest is queued. A whole
                        // batch is followed from the relay's own scanner below (no second parse).
                        let (now, rest) = d.split_at(o.direct_len(d.len()));
                        if !rest.is_empty() {
                            o.pass(now);
                            o.push(rest);
                            d = now;
                        } else {
                            whole = true;
                        }
                    }
                    link.binary_frame(d).map(|(frame, at)| {
                        let kept = retain.then(|| match at {
                            Some(pieces) => pieces.into_iter().map(|p| frame.slice(p)).collect(),
                            None => vec![Bytes::copy_from_slice(d)],
                        });
                        Some((frame, kept, d.len()))
                    })
                }) {
                    Ok(Some(Ok(Some(m)))) => m,
                    Ok(Some(Ok(None))) => continue,
                    Ok(Some(Err(e))) => {
                        link.close(carriage::CLOSE_INTERNAL_ERROR, "compression failed").await;
                        return StretchEnd::End(RelayEnd::Error(Side::Player, e));
                    }
                    Ok(None) => continue,
                    Err(e) => match backend_failed(link, &mut pipe.down, e).await {
                        None => continue,
                        Some(end) => return end,
                    },
                };
                let (frame, kept, n) = msg;
                if whole {
                    if let Some(o) = pipe.out.as_mut() {
                        o.passed(pipe.down.position());
                    }
                }
                if n == 0 && pipe.down.fail_over(LOST) {
                    continue;
                }
                if n == 0 && pipe.out.as_ref().is_some_and(|o| !o.is_empty()) {
                    // Backend FIN with bytes queued: they go first, as the window lets them (sending them all at
                    // once would park them in an edge's buffers, which the close could then reset).
                    backend_done = true;
                    continue;
                }
                if n == 0 {
                    // Backend FIN: close 1000, then the TCP close.
                    link.close(carriage::CLOSE_NORMAL, "").await;
                    return StretchEnd::End(RelayEnd::Closed(Side::Backend));
                }
                if let (Some(r), Some(kept)) = (v2.as_deref_mut(), kept) {
                    for piece in kept {
                        r.retained.push(piece);
                    }
                }
                link.count_sent(n);
                if let Err(end) = write_reading(link, pipe, v2.as_deref_mut(), &frame).await {
                    return end;
                }
            }
            () = pipe.shutdown.cancelled() => {
                // What the lanes hold goes first, then the disconnect at a frame boundary.
                let flushed = tokio::time::timeout(super::SHUTDOWN_FLUSH_TIMEOUT, pipe.flush_queued(link)).await;
                let boundary = pipe.out.as_ref().is_none_or(Outbox::at_boundary);
                if boundary && matches!(flushed, Ok(Ok(()))) {
                    inject_shutdown(link, &mut pipe.down, pipe.shutdown).await;
                }
                // A kick (a duplicate login) ends the session for good: a normal close, nothing to resume.
                let (code, reason) = match pipe.shutdown.kicked() {
                    Some(_) => (moonbridge_protocol::ws::CLOSE_NORMAL, "kicked"),
                    None if v2.is_some() => (CLOSE_SERVICE_RESTART, "proxy shutting down"),
                    None => (carriage::CLOSE_GOING_AWAY, "proxy shutting down"),
                };
                link.close(code, reason).await;
                return StretchEnd::End(RelayEnd::Shutdown);
            }
        }
    }
}

/// Sends bytes that left the lanes (encrypted already) as one message: retained (v2), counted, written while
/// the backend is read into the lanes (so urgent frames behind bulk ones are found while the link is busy).
async fn send_queued<S: PlayerStream>(
    link: &mut WsLink<S>,
    pipe: &mut Pipe<'_>,
    mut v2: Option<&mut Resumable<WsLink<S>>>,
    chunk: &[u8],
) -> Result<(), StretchEnd<WsLink<S>>> {
    let (frame, at) = match link.binary_frame(chunk) {
        Ok(m) => m,
        Err(e) => {
            link.close(carriage::CLOSE_INTERNAL_ERROR, "compression failed").await;
            return Err(StretchEnd::End(RelayEnd::Error(Side::Player, e)));
        }
    };
    if let Some(r) = v2.as_deref_mut() {
        match at {
            Some(pieces) => pieces.into_iter().for_each(|p| r.retained.push(frame.slice(p))),
            None => r.retained.push(Bytes::copy_from_slice(chunk)),
        }
    }
    link.count_sent(chunk.len());
    write_reading(link, pipe, v2, &frame).await
}

/// Writes a message of stream bytes already counted: with lanes, timed (how fast the link takes it sizes the
/// next messages) and while the backend is read into the lanes (so urgent frames behind bulk ones are found
/// while the link is busy). A backend that fails meanwhile ends the relay (or fails over) once the message is
/// written, as the loop's own read would.
async fn write_reading<S: PlayerStream>(
    link: &mut WsLink<S>,
    pipe: &mut Pipe<'_>,
    v2: Option<&mut Resumable<WsLink<S>>>,
    frame: &[u8],
) -> Result<(), StretchEnd<WsLink<S>>> {
    let Pipe { backend, down, out, .. } = pipe;
    let Some(out) = out.as_mut() else { return send_frames(link, frame, v2).await };
    out.sent(link.counts().1);
    let began = std::time::Instant::now();
    let failed = {
        let write = send_frames(link, frame, v2);
        tokio::pin!(write);
        let mut reading = true;
        let mut failed = None;
        loop {
            tokio::select! {
                r = &mut write => {
                    out.wrote(frame.len(), began.elapsed());
                    r?;
                    break;
                }
                res = backend.readable(down), if reading && out.room() > 0 && !down.handover_due() => {
                    // The end is seen again by the loop's own read once the write is done; a failure is kept.
                    match res.and_then(|()| backend.read_batch(down, out.room(), |d| {
                        out.push(d);
                        d.len()
                    })) {
                        Ok(None | Some(1..)) => {}
                        Ok(Some(_)) => reading = false,
                        Err(e) => {
                            reading = false;
                            failed = Some(e);
                        }
                    }
                }
            }
        }
        failed
    };
    match failed {
        Some(e) => backend_failed(link, down, e).await.map_or(Ok(()), Err),
        None => Ok(()),
    }
}

/// A backend connection that failed (a read or its readiness): a failover when one is due (`None`: the relay
/// goes on and hands over), otherwise the end, the player told with Close 1011.
async fn backend_failed<S: PlayerStream>(
    link: &mut WsLink<S>,
    down: &mut Flow,
    e: io::Error,
) -> Option<StretchEnd<WsLink<S>>> {
    if down.fail_over(LOST) {
        return None;
    }
    link.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
    Some(StretchEnd::End(RelayEnd::Error(Side::Backend, e)))
}

/// A keepalive tick in the relay: a Ping, or the end of a silent player (a lost link with `v2`); the
/// quiet-spell rule of `moonbridge.v2.zstd`; with `v2`, an `ack` when one is due.
async fn tick<S: PlayerStream>(
    link: &mut WsLink<S>,
    mut v2: Option<&mut Resumable<WsLink<S>>>,
) -> Result<(), StretchEnd<WsLink<S>>> {
    match link.keepalive_due(false) {
        KeepaliveAction::None => {}
        KeepaliveAction::Ping => send_frames(link, &wsframe::frame(OP_PING, &[]), v2.as_deref_mut()).await?,
        KeepaliveAction::Dead => {
            link.close(carriage::CLOSE_GOING_AWAY, "no traffic").await;
            const SILENT: &str = "no traffic for 3 ping intervals";
            return Err(match v2 {
                Some(_) => StretchEnd::Lost(SILENT.into()),
                None => StretchEnd::End(RelayEnd::Error(Side::Player, io::Error::new(io::ErrorKind::TimedOut, SILENT))),
            });
        }
    }
    match link.zstd_quiet_frame() {
        Ok(None) => {}
        Ok(Some(frame)) => send_frames(link, &frame, v2.as_deref_mut()).await?,
        Err(e) => {
            link.close(carriage::CLOSE_INTERNAL_ERROR, "compression failed").await;
            return Err(StretchEnd::End(RelayEnd::Error(Side::Player, e)));
        }
    }
    if let Some(r) = v2 {
        if let Some(n) = r.acks.on_tick(link.counts().0) {
            send_ack(link, n, &mut r.rx).await?;
        }
    }
    Ok(())
}

/// Writes whole frames to the player: racing a resume on a v2 relay (a failed write is a lost link there),
/// plainly on a v1 relay (a failed write ends it).
async fn send_frames<S: PlayerStream>(
    link: &mut WsLink<S>,
    frames: &[u8],
    v2: Option<&mut Resumable<WsLink<S>>>,
) -> Result<(), StretchEnd<WsLink<S>>> {
    match v2 {
        Some(r) => write_racing(link, frames, &mut r.rx).await,
        None => link.write_frame(frames).await.map_err(|e| StretchEnd::End(RelayEnd::Error(Side::Player, e))),
    }
}

impl<S: PlayerStream> PlayerSink for WsLink<S> {
    async fn drain(&mut self, _down: &mut Flow) -> io::Result<()> {
        Ok(()) // every batch left as a whole message
    }

    async fn send(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        self.send_binary(&bytes).await
    }
}
