//! The relay loop for a player on plain TCP: two socket pumps.
//!
//! - One read and one write per batch: a read lands in the per-worker-thread scratch buffer and is written to
//!   the other socket at once. Only what the other socket cannot take yet is copied into the direction's own
//!   `pending` buffer, and no more is read from that side until it has drained (backpressure). An idle session
//!   therefore holds no relay buffer at all, and a busy one at most one read's worth per direction.
//! - A FIN from one side is passed on as a FIN (`shutdown(Write)`) to the other; the other direction then has
//!   [`HALF_CLOSE_TIMEOUT`] to finish before both sockets are closed, so no task or socket lingers.
//! - A read or write error on either side ends both directions at once, and so does a side that accepts no
//!   byte for the write-stall time ([`within_stall`]).
//! - When the transfer watch asks for a handover (a switch, a request for the proxy, a command from another
//!   session, or the backend lost with a fallback to go to), both pumps stop (they are cancel-safe), what the
//!   player sent reaches the old backend, the backend side becomes the switchboard
//!   ([`BackendSide::hand_over`]), and one loop goes on between the player's socket and the switchboard
//!   ([`board_relay`]).

use std::io;
use std::net::Shutdown;

use tokio::net::TcpStream;

use super::lanes::{Outbox, QUEUED_WRITE_BYTES};
use super::{
    inject_shutdown, read_batch, BackendSide, Flow, PlayerSink, RelayEnd, RelayReport, RelayStart, HALF_CLOSE_TIMEOUT,
    SHUTDOWN_FLUSH_TIMEOUT,
};
use crate::transfer::LOST;
use crate::wire::{within_stall, write_all, Side, RELAY_CHUNK};

/// How a pump ended.
enum PumpError {
    Read(io::Error),
    Write(io::Error),
}

/// Writes `dir.pending` to `to` until it is empty, under the write-stall policy.
async fn drain(to: &TcpStream, dir: &mut Flow, side: Side) -> io::Result<()> {
    while !dir.pending.is_empty() {
        within_stall(dir.stall, side, to.writable()).await?;
        match to.try_write(&dir.pending) {
            Ok(n) => {
                dir.pending.drain(..n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    if dir.pending.capacity() > RELAY_CHUNK {
        dir.pending.shrink_to(RELAY_CHUNK);
    }
    Ok(())
}

/// Result of one read-and-forward attempt.
enum Batch {
    Forwarded,
    WouldBlock,
    Eof,
}

/// Reads one batch from `from` into the thread's scratch buffer and writes it to `to` in the same step; with
/// lanes (`out`), only when nothing is queued and the stream is not encrypted, and queues it otherwise.
fn forward_batch(
    from: &TcpStream,
    to: &TcpStream,
    dir: &mut Flow,
    mut out: Option<&mut Outbox<'_>>,
) -> Result<Batch, PumpError> {
    let mut pending = std::mem::take(&mut dir.pending);
    let direct = !dir.sealing() && pending.is_empty();
    let max = out.as_deref().map_or(RELAY_CHUNK, Outbox::room);
    let mut whole = false;
    let r = read_batch(from, dir, max, |data| {
        if data.is_empty() {
            return Ok(Batch::Eof);
        }
        if let Some(o) = out.as_deref_mut() {
            whole = write_or_queue(to, data, direct, o).map_err(PumpError::Write)?;
            return Ok(Batch::Forwarded);
        }
        match to.try_write(data) {
            Ok(m) => pending.extend_from_slice(data.get(m..).unwrap_or_default()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => pending.extend_from_slice(data),
            Err(e) => return Err(PumpError::Write(e)),
        }
        Ok(Batch::Forwarded)
    });
    dir.pending = pending;
    if let (true, Some(o)) = (whole, out) {
        o.passed(dir.position());
    }
    match r {
        Ok(Some(b)) => b,
        Ok(None) => Ok(Batch::WouldBlock),
        Err(e) => Err(PumpError::Read(e)),
    }
}

/// How a pump stopped without an error.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Stop {
    /// `from` sent FIN (passed on).
    Eof,
    /// The transfer watch asks for a handover (clientbound only).
    Handover,
}

/// Copies `from` to `to` until `from` sends FIN (then shuts down `to`'s write side), a handover or an error;
/// clientbound with lanes, through `out` (queued bytes are written as `to` takes them, `from` read meanwhile).
/// Cancel-safe: all progress lives in `dir` and `out`.
async fn pump(
    from: &TcpStream,
    to: &TcpStream,
    dir: &mut Flow,
    to_side: Side,
    mut out: Option<&mut Outbox<'_>>,
) -> Result<Stop, PumpError> {
    loop {
        drain(to, dir, to_side).await.map_err(PumpError::Write)?;
        if dir.handover_due() {
            return Ok(Stop::Handover);
        }
        if let Some(o) = out.as_deref_mut() {
            if o.ready(0) {
                // Boxed: only while something is queued, and every session's task is sized for it.
                if Box::pin(queued_turn(from, to, dir, to_side, o)).await? {
                    continue;
                }
            }
        }
        // A command from another session wakes a clientbound pump too (its handover is then due).
        let ready = tokio::select! {
            r = from.readable(), if out.as_deref().is_none_or(|o| o.room() > 0) => r,
            () = dir.next_command() => continue,
        };
        let batch = ready.map_err(PumpError::Read).and_then(|()| forward_batch(from, to, dir, out.as_deref_mut()));
        let batch = match batch {
            Err(PumpError::Read(_)) if dir.fail_over(LOST) => continue,
            other => other?,
        };
        match batch {
            Batch::Forwarded | Batch::WouldBlock => {}
            Batch::Eof if dir.fail_over(LOST) => {}
            Batch::Eof => {
                Box::pin(flush_queued(to, dir, to_side, out.as_deref_mut())).await.map_err(PumpError::Write)?;
                drain(to, dir, to_side).await.map_err(PumpError::Write)?;
                // The peer may already be gone; the relay ends through the other direction then.
                let _ = socket2::SockRef::from(to).shutdown(Shutdown::Write);
                return Ok(Stop::Eof);
            }
        }
    }
}

/// One turn of a clientbound pump while its lanes hold bytes: the next of them written when `to` takes more
/// (true), or `from` readable with room in the lanes (false: read it), or a command arrived (true).
async fn queued_turn(
    from: &TcpStream,
    to: &TcpStream,
    dir: &mut Flow,
    to_side: Side,
    o: &mut Outbox<'_>,
) -> Result<bool, PumpError> {
    let room = o.room();
    tokio::select! {
        r = within_stall(dir.stall, to_side, to.writable()) => {
            r.map_err(PumpError::Write)?;
            let mut chunk = o.next(0, QUEUED_WRITE_BYTES);
            dir.seal(&mut chunk);
            match to.try_write(&chunk) {
                Ok(m) => dir.pending.extend_from_slice(chunk.get(m..).unwrap_or_default()),
                Err(e) if e.kind() == io::ErrorKind::WouldBlock => dir.pending.extend_from_slice(&chunk),
                Err(e) => return Err(PumpError::Write(e)),
            }
            Ok(true)
        }
        r = from.readable(), if room > 0 => r.map(|()| false).map_err(PumpError::Read),
        () = dir.next_command() => Ok(true),
    }
}

/// A plaintext batch with lanes: written at once as far as the socket takes it when nothing is queued and
/// `direct` (not encrypted, nothing pending), the rest queued. True when all of it went.
fn write_or_queue(to: &TcpStream, data: &[u8], direct: bool, o: &mut Outbox<'_>) -> io::Result<bool> {
    if !(direct && o.direct(data.len(), 0)) {
        o.push(data);
        return Ok(false);
    }
    let m = match to.try_write(data) {
        Ok(m) => m,
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => 0,
        Err(e) => return Err(e),
    };
    if m >= data.len() {
        // All of it went: the caller tells the lanes where the relay's scanner stands (no second parse).
        return Ok(true);
    }
    let (sent, rest) = data.split_at(m);
    o.pass(sent);
    o.push(rest);
    Ok(false)
}

/// Moves everything the lanes hold (encrypted in online mode) behind what is pending, and writes it all.
async fn flush_queued(to: &TcpStream, dir: &mut Flow, side: Side, out: Option<&mut Outbox<'_>>) -> io::Result<()> {
    if let Some(o) = out {
        let mut all = o.take_all();
        dir.seal(&mut all);
        dir.pending.extend_from_slice(&all);
    }
    drain(to, dir, side).await
}

fn side_error(from: Side, e: PumpError) -> RelayEnd {
    match e {
        PumpError::Read(e) => RelayEnd::Error(from, e),
        PumpError::Write(e) => RelayEnd::Error(from.other(), e),
    }
}

/// The player's socket as the shutdown step writes to it, and the lanes that go first.
struct TcpSink<'a, 'b>(&'a TcpStream, Option<&'a mut Outbox<'b>>);

impl PlayerSink for TcpSink<'_, '_> {
    async fn drain(&mut self, down: &mut Flow) -> io::Result<()> {
        Box::pin(flush_queued(self.0, down, Side::Player, self.1.as_deref_mut())).await
    }

    async fn send(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        write_all(self.0, &bytes, SHUTDOWN_FLUSH_TIMEOUT, Side::Player).await
    }
}

/// Relays `player` ⇄ `backend` until both directions end, one fails, or shutdown.
/// `early` are bytes the player sent ahead during the login stage; they reach the backend first.
pub(crate) async fn run(
    player: &TcpStream,
    backend: &mut BackendSide,
    mut start: RelayStart<'_>,
    early: Vec<u8>,
) -> RelayReport {
    let shutdown = start.shutdown;
    let (lanes, max, metrics) = (start.lanes.take(), start.max_frame_len, start.metrics);
    let (mut up, mut down) = Flow::pair(start);
    // Boxed: every session's task is sized for it.
    let mut out = down.lanes(lanes).map(|l| Box::new(Outbox::new(l, max, &shutdown.delivery, metrics)));
    if let Err(e) = up.preload(early) {
        return RelayReport { up: up.bytes, down: down.bytes, end: RelayEnd::Error(Side::Player, e), visited: None };
    }
    let first = loop {
        let BackendSide::Direct(stream) = backend else {
            break board_relay(player, backend, &mut up, &mut down, shutdown, out.as_deref_mut()).await;
        };
        match pumps(player, stream, &mut up, &mut down, shutdown, out.as_deref_mut()).await {
            Some(end) => break end,
            None => {
                // What the player sent so far reaches the old backend (unless it is gone: a failover); the
                // switchboard parses from there on.
                let handed = match drain(stream, &mut up, Side::Backend).await {
                    Err(e) if !down.failing_over() => Err(e),
                    _ => backend.hand_over(&mut up, &mut down),
                };
                if let Err(e) = handed {
                    break RelayEnd::Error(Side::Backend, e);
                }
            }
        }
    };
    if matches!(first, RelayEnd::Shutdown) {
        inject_shutdown(&mut TcpSink(player, out.as_deref_mut()), &mut down, shutdown).await;
    }
    RelayReport { up: up.bytes, down: down.bytes, end: first, visited: None }
}

/// Runs both pumps until the relay ends, or `None` for a handover.
async fn pumps(
    player: &TcpStream,
    backend: &TcpStream,
    up: &mut Flow,
    down: &mut Flow,
    shutdown: &crate::players::Stop,
    out: Option<&mut Outbox<'_>>,
) -> Option<RelayEnd> {
    let c2b = pump(player, backend, up, Side::Backend, None);
    let b2c = pump(backend, player, down, Side::Player, out);
    tokio::pin!(c2b, b2c);
    let first = tokio::select! {
        r = &mut c2b => r.map(|_| Side::Player).map_err(|e| side_error(Side::Player, e)),
        r = &mut b2c => match r {
            Ok(Stop::Handover) => return None,
            r => r.map(|_| Side::Backend).map_err(|e| side_error(Side::Backend, e)),
        },
        () = shutdown.cancelled() => Err(RelayEnd::Shutdown),
    };
    Some(match first {
        Ok(closed) => {
            // After the player's FIN a handover ends the relay (the pump stops): the player is leaving, and the
            // switchboard would only pass the FIN on.
            let rest = async {
                match closed {
                    Side::Player => b2c.await.map(|_| ()).map_err(|e| side_error(Side::Backend, e)),
                    Side::Backend => c2b.await.map(|_| ()).map_err(|e| side_error(Side::Player, e)),
                }
            };
            tokio::select! {
                r = tokio::time::timeout(HALF_CLOSE_TIMEOUT, rest) => match r {
                    Ok(Ok(())) => RelayEnd::Closed(closed),
                    Ok(Err(end)) => end,
                    Err(_) => RelayEnd::HalfCloseTimeout(closed),
                },
                () = shutdown.cancelled() => RelayEnd::Shutdown,
            }
        }
        Err(end) => end,
    })
}

/// The relay once the switchboard took over: the player's socket ⇄ the switchboard, until either ends, one
/// fails, or shutdown. The player's FIN goes on to the backend, which then has [`HALF_CLOSE_TIMEOUT`].
async fn board_relay(
    player: &TcpStream,
    backend: &mut BackendSide,
    up: &mut Flow,
    down: &mut Flow,
    shutdown: &crate::players::Stop,
    mut out: Option<&mut Outbox<'_>>,
) -> RelayEnd {
    let mut player_done: Option<tokio::time::Instant> = None;
    loop {
        // Queued bytes, when the player's socket takes more (the pending ones first).
        let queued = out.as_deref().is_some_and(|o| o.ready(0));
        let room = out.as_deref().map_or(RELAY_CHUNK, Outbox::room);
        let half_closed = async {
            match player_done {
                Some(at) => tokio::time::sleep_until(at).await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            r = player.readable(), if player_done.is_none() => {
                if let Err(e) = r {
                    return RelayEnd::Error(Side::Player, e);
                }
                // Handed to the switchboard straight from the scratch buffer, then written to the backends.
                match read_batch(player, up, RELAY_CHUNK, |d| {
                    backend.accept(d);
                    d.is_empty()
                }) {
                    Ok(Some(true)) => {
                        backend.shutdown_write();
                        player_done = Some(tokio::time::Instant::now() + HALF_CLOSE_TIMEOUT);
                    }
                    Ok(Some(false)) => backend.flush().await,
                    Ok(None) => {}
                    Err(e) => return RelayEnd::Error(Side::Player, e),
                }
            }
            r = Box::pin(within_stall(down.stall, Side::Player, player.writable())), if queued => {
                if let Err(e) = r {
                    return RelayEnd::Error(Side::Player, e);
                }
                if let Some(o) = out.as_deref_mut() {
                    let mut chunk = o.next(0, QUEUED_WRITE_BYTES);
                    down.seal(&mut chunk);
                    down.pending.extend_from_slice(&chunk);
                }
                if let Err(e) = drain(player, down, Side::Player).await {
                    return RelayEnd::Error(Side::Player, e);
                }
            }
            r = backend.readable(down), if room > 0 => {
                if let Err(e) = r {
                    return RelayEnd::Error(Side::Backend, e);
                }
                let mut pending = std::mem::take(&mut down.pending);
                let direct = !down.sealing() && pending.is_empty();
                let lanes = out.as_deref_mut();
                let mut whole = false;
                let r = backend.read_batch(down, room, |data| {
                    if data.is_empty() {
                        return Ok(true);
                    }
                    if let Some(o) = lanes {
                        whole = write_or_queue(player, data, direct, o)?;
                        return Ok(false);
                    }
                    match player.try_write(data) {
                        Ok(m) => pending.extend_from_slice(data.get(m..).unwrap_or_default()),
                        Err(e) if e.kind() == io::ErrorKind::WouldBlock => pending.extend_from_slice(data),
                        Err(e) => return Err(e),
                    }
                    Ok(false)
                });
                down.pending = pending;
                if let (true, Some(o)) = (whole, out.as_deref_mut()) {
                    o.passed(down.position());
                }
                let eof = match r {
                    Ok(Some(Ok(eof))) => eof,
                    Ok(Some(Err(e))) => return RelayEnd::Error(Side::Player, e),
                    Ok(None) => false,
                    Err(e) => return RelayEnd::Error(Side::Backend, e),
                };
                if let Err(e) = drain(player, down, Side::Player).await {
                    return RelayEnd::Error(Side::Player, e);
                }
                if eof {
                    if let Err(e) = Box::pin(flush_queued(player, down, Side::Player, out.as_deref_mut())).await {
                        return RelayEnd::Error(Side::Player, e);
                    }
                    let _ = socket2::SockRef::from(player).shutdown(Shutdown::Write);
                    return match player_done {
                        Some(_) => RelayEnd::Closed(Side::Player),
                        None => RelayEnd::Closed(Side::Backend),
                    };
                }
            }
            () = half_closed => return RelayEnd::HalfCloseTimeout(Side::Player),
            () = shutdown.cancelled() => return RelayEnd::Shutdown,
        }
    }
}
