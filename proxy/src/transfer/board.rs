//! The switchboard: the frame-by-frame relay between the player's relay and the player's current backend,
//! run inside that relay (no task and no socket of its own), with its events (the current backend, the one
//! being switched to, the switch's deadline, the proxy's own Keep Alive, commands from other sessions) and what
//! it does to serverbound and clientbound frames.
//!
//! The relay hands it the player's plaintext bytes ([`Switchboard::send`]) and takes the player's
//! ([`Switchboard::ready`], [`Switchboard::take`]); frames nobody needs to look into pass as they came, one
//! run of them at a time ([`FrameDecoder::take_passing`]).

use std::io;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use moonbridge_protocol::frame::{passing_run, FrameDecoder, Run};
use moonbridge_protocol::transfer::watch::HEAD_LEN;
use moonbridge_protocol::transfer::{Direction, EntityIdSwap, Leftovers};
use tokio::net::TcpStream;
use tokio::sync::mpsc;
use tokio::time::{sleep_until, Instant};
use tracing::info;

use super::backend::{readable, Dialed, Link};
use super::common::{inspected, registration, Answers, Ctx, End, Handed, Outbox, LOST, MAX_WAITING_BYTES};
use super::forge::Forge;
use super::keep_alive::KeepAlives;
use super::switch::{Switch, SwitchStep, Trigger, FALLBACK_WINDOW, MAX_FALLBACKS};
use crate::backend::Backend;
use crate::limits::LogLimiter;
use crate::players::Command;
use crate::wire::{discard_until_eof, read_clearing, with_scratch, within_stall, Side};

/// Lines about sessions the transfer layer closed: at most 10 per 10 seconds for the process (a bad frame from
/// a peer causes one).
static CLOSED_LOG: std::sync::LazyLock<LogLimiter> =
    std::sync::LazyLock::new(|| LogLimiter::new(10, Duration::from_secs(10)));

/// The player's side of the switchboard: its serverbound frames.
pub(super) struct PlayerEnd {
    /// Serverbound frames from the relay.
    pub(super) up: FrameDecoder,
    /// The serverbound frame under way (the one the relay was in when it handed over, or one passing in
    /// pieces): body bytes still to come, and whether they are dropped (a `BungeeCord` message, or a frame
    /// whose backend no longer serves the player); passed on first, to the backend that had its beginning.
    pub(super) tail: (usize, bool),
    /// The player closed its side (FIN): nothing more comes.
    closed: bool,
}

impl PlayerEnd {
    /// A player end whose serverbound frames start with what `up` holds (no frame under way at a backend).
    pub(super) fn starting_with(up: FrameDecoder) -> Self {
        Self { up, tail: (0, false), closed: false }
    }

    /// Serverbound bytes queued after the last whole frame (the start of the next one).
    pub(super) fn up_buffered(&self) -> &[u8] {
        self.up.buffered()
    }
}

/// The frame-by-frame relay between the player's relay and the current backend, with transfers.
pub(crate) struct Switchboard {
    pub(super) ctx: Ctx,
    pub(super) player: PlayerEnd,
    pub(super) current: Option<Link>,
    pub(super) switch: Option<Switch>,
    /// The entity id the client learned from its first Join Game.
    pub(super) client_entity: Option<i32>,
    /// From the first cutover on: the swap between the client's id and the current backend's.
    pub(super) swap: Option<EntityIdSwap>,
    pub(super) forge: Forge,
    /// When this session's recent fallbacks started (at most [`MAX_FALLBACKS`] within [`FALLBACK_WINDOW`]).
    pub(super) fallbacks: Vec<Instant>,
    /// When this session's recent `Connect` switches started (at most `MAX_CONNECTS` within `CONNECT_WINDOW`).
    pub(super) connects: Vec<Instant>,
    /// The current backend's scoreboard, teams, tab list and open window, removed at a cutover.
    pub(super) leftovers: Leftovers,
    pub(super) keep_alive: KeepAlives,
    pub(super) out: Outbox,
    /// Commands from other sessions (`BungeeCord` `Message`, `KickPlayer`, `Forward…`).
    commands: Option<mpsc::Receiver<Command>>,
    /// Every backend the player was on, in order.
    pub(super) visited: Vec<String>,
    /// Why the switchboard ended; what is still in `out.to_player` goes to the player first.
    pub(super) ended: Option<End>,
    /// The current backend's Play Disconnect went to the player: its close is no failover.
    pub(super) goodbye: bool,
    /// The current backend is readable and nothing waits for the player: the relay reads it itself
    /// ([`Self::read_current_into`], [`Self::pass_through`]), so frames nobody looks into cost no copy.
    current_ready: bool,
    /// The drain asked this session to move to another instance ([`Self::take_move_request`]).
    pub(super) move_asked: bool,
    /// The session's state went to another instance ([`Self::handed_away`]): no more switches here.
    pub(super) handed_away: bool,
    /// The proxy's answers to the current backend's `BungeeCord` requests (`super::requests`).
    pub(super) answers: Answers,
}

/// What woke the switchboard.
enum Event {
    /// The current backend is readable (or its readiness failed).
    Backend(io::Result<()>),
    Dialed(Dialed),
    /// The backend being switched to is readable.
    Joining(io::Result<()>),
    Deadline,
    OwnKeepAlive,
    Command(Command),
    /// A readiness wake-up with nothing to read after all.
    Nothing,
}

impl Switchboard {
    /// The switchboard for a session whose relay hands over: the old backend's `stream`, and where the relay
    /// stopped.
    pub(super) fn new(ctx: Ctx, backend: Backend, stream: TcpStream, handed: Handed) -> Self {
        let Handed { rest, watched, tail, lost, command, commands } = handed;
        let moonbridge_protocol::transfer::watch::Watched { client_entity, fml_record, leftovers } = watched;
        // Read from the backend by the relay, not delivered (nor counted) there.
        backend.metrics.to_player.inc_by(rest.len() as u64);
        let visited = vec![backend.name.clone()];
        let limit = ctx.live.tunables.limits.max_play_frame_bytes;
        let mut player = PlayerEnd::starting_with(FrameDecoder::new(limit));
        player.tail = tail;
        let forge = Forge { record: fml_record, replaying: false };
        let mut board = Self::empty(ctx, player, forge, commands, visited);
        board.current = Some(Link::new(backend, stream, &rest, limit));
        board.client_entity = client_entity;
        board.leftovers = leftovers;
        let step = board.clientbound();
        board.settle(step);
        if let (Some(why), None) = (lost, &board.ended) {
            board.lost_current(&why);
        }
        if let (Some(command), None) = (command, &board.ended) {
            let step = board.command(command);
            board.settle(step);
        }
        board
    }

    /// A switchboard with no backend and no switch yet.
    pub(super) fn empty(
        ctx: Ctx,
        player: PlayerEnd,
        forge: Forge,
        commands: Option<mpsc::Receiver<Command>>,
        visited: Vec<String>,
    ) -> Self {
        Self {
            ctx,
            player,
            current: None,
            switch: None,
            client_entity: None,
            swap: None,
            forge,
            fallbacks: Vec::new(),
            connects: Vec::new(),
            leftovers: Leftovers::default(),
            keep_alive: KeepAlives::new(),
            out: Outbox::default(),
            commands,
            visited,
            ended: None,
            goodbye: false,
            current_ready: false,
            move_asked: false,
            handed_away: false,
            answers: Answers::default(),
        }
    }

    /// Bytes for the player are ready, or the switchboard has ended (then [`Self::take`] returns what is left
    /// and at last nothing). Writes what the last event produced for the backends first. Cancel-safe: every
    /// step keeps its progress in the switchboard.
    pub(crate) async fn ready(&mut self) {
        loop {
            self.flush().await;
            if self.answers.paused && self.ended.is_none() && !self.answers.over(&self.out) {
                // The backend's frames waited until what the proxy had for it was written (or, behind a frame of
                // the player's, until that frame was whole: meanwhile the backend is not read): go on with them
                // (a turn of the scheduler first: a flood of requests must not hold the worker thread; cancelled
                // there, the flag stays).
                tokio::task::consume_budget().await;
                self.answers.paused = false;
                let step = self.clientbound();
                self.settle(step);
                continue;
            }
            if !self.out.to_player.is_empty() || self.ended.is_some() {
                return;
            }
            // A drain's move, once the session can go: the relay sends `move` (crate::relay::move_out).
            if self.move_asked && self.movable_now().is_ok() {
                return;
            }
            let event = self.next_event().await;
            if matches!(event, Event::Backend(Ok(()))) {
                self.current_ready = true;
                return;
            }
            let step = self.handle(event);
            self.settle(step);
        }
    }

    /// The bytes for the player: the relay passes on as many as it can take from the front and removes them
    /// (`clear` when it took all: the buffer is kept for the next event).
    pub(crate) fn output(&mut self) -> &mut BytesMut {
        &mut self.out.to_player
    }

    /// True once the switchboard ended and the player got everything it had for them.
    pub(crate) fn finished(&self) -> bool {
        self.ended.is_some() && self.out.to_player.is_empty()
    }

    /// The player's plaintext bytes: handled frame by frame and written to the backends they are for.
    ///
    /// # Errors
    /// None so far: a backend that fails is handled as the switchboard handles it (a fallback, or the end the
    /// relay reads from [`Self::take`]).
    pub(crate) async fn send(&mut self, data: &[u8]) -> io::Result<()> {
        self.accept(data);
        self.flush().await;
        Ok(())
    }

    /// The player's plaintext bytes, handled frame by frame; what they produce for the backends is written by
    /// the next [`Self::flush`].
    pub(crate) fn accept(&mut self, data: &[u8]) {
        if self.ended.is_none() {
            let step = self.player_bytes(data);
            self.settle(step);
        }
    }

    /// The player closed its side: the current backend gets a FIN, and the switchboard ends once it closes.
    pub(crate) fn player_closed(&mut self) {
        self.player.closed = true;
        self.switch = None;
        if let Some(link) = &self.current {
            let _ = socket2::SockRef::from(&link.stream).shutdown(std::net::Shutdown::Write);
        }
    }

    /// Reads what the current backend still sends, for at most `linger`, then drops it.
    pub(crate) async fn linger(&mut self, linger: Duration) {
        if let Some(link) = &self.current {
            discard_until_eof(&link.stream, linger).await;
        }
    }

    /// Every backend the player was on, in order.
    pub(crate) fn visited(&self) -> &[String] {
        &self.visited
    }

    /// Records the end a step returned (the first one counts) and logs it.
    pub(super) fn settle(&mut self, mut step: Result<(), End>) {
        if self.ended.is_some() {
            return;
        }
        if step.is_ok() && self.out.waiting_over() {
            step = Err(End::Closed(format!(
                "over {MAX_WAITING_BYTES} bytes of the proxy's own frames waited behind a frame passing in pieces"
            )));
        }
        let end = match step {
            Err(end) => end,
            Ok(()) if self.current.is_none() && self.switch.is_none() => End::BackendGone,
            Ok(()) => return,
        };
        if let End::Closed(reason) = &end {
            // A peer can cause it (a bad frame): through the limiter.
            if let Some(suppressed) = CLOSED_LOG.allow() {
                info!(player = %self.ctx.identity.name, suppressed, "transfer layer closed the session: {reason}");
            }
        }
        self.switch = None;
        self.ended = Some(end);
        // Nothing more is done for other sessions: their commands go to another player from now on.
        self.commands = None;
    }

    /// Where a frame the switchboard makes for the current backend goes: behind the player's frame under way,
    /// if one is being written to it.
    pub(super) fn for_current(&mut self) -> &mut BytesMut {
        if self.player.tail.0 > 0 && !self.player.tail.1 {
            &mut self.out.backend_waiting
        } else {
            &mut self.out.to_backend
        }
    }

    /// Handles the player's bytes.
    fn player_bytes(&mut self, mut data: &[u8]) -> Result<(), End> {
        // The rest of a frame under way (begun before the handover, or passing in pieces) goes on as it is (or
        // is dropped).
        let (remaining, dropping) = self.player.tail;
        if remaining > 0 {
            let raw = remaining.min(data.len());
            if !dropping && self.current.is_some() {
                self.out.to_backend.extend_from_slice(data.get(..raw).unwrap_or_default());
            }
            self.player.tail.0 -= raw;
            data = data.get(raw..).unwrap_or_default();
            if self.player.tail.0 == 0 && !self.out.backend_waiting.is_empty() {
                let waiting = self.out.backend_waiting.split();
                self.out.to_backend.unsplit(waiting);
            }
        }
        // Frames nobody looks into go straight on (the last one in pieces, when its head says so); only the rest
        // is queued (and copied) for parsing.
        let swapped = self.swap.is_some_and(|s| !s.is_identity());
        let forge = self.forge.replaying || self.forge_handshake_running();
        let limit = self.ctx.live.tunables.limits.max_play_frame_bytes;
        let run = if self.player.up.is_empty() && self.player.tail.0 == 0 {
            let passes = |id, f: &[u8]| !inspected(Direction::Serverbound, id, f, true, swapped, forge);
            passing_run(data, limit, HEAD_LEN, passes).unwrap_or_default()
        } else {
            Run::default()
        };
        let pass = run.len;
        if run.owed > 0 {
            self.player.tail = (run.owed, false);
        }
        if self.current.is_some() {
            self.out.to_backend.extend_from_slice(data.get(..pass).unwrap_or_default());
        }
        self.player.up.queue_slice(data.get(pass..).unwrap_or_default());
        self.serverbound()
    }

    /// Handles one event.
    fn handle(&mut self, event: Event) -> Result<(), End> {
        match event {
            Event::Backend(ready) => {
                // Read into the worker thread's scratch buffer (a switched player holds no read buffer).
                let read = ready.and_then(|()| with_scratch(|buf| self.read_current(buf)));
                match read {
                    Ok(Some(step)) => step,
                    Ok(None) => Ok(()),
                    Err(e) => {
                        // Closed or failed without a disconnect the proxy acted on.
                        info!(player = %self.ctx.identity.name, "backend connection failed: {e}");
                        self.lost_current(LOST);
                        Ok(())
                    }
                }
            }
            Event::Dialed(Ok((stream, early))) => {
                let limit = self.ctx.live.tunables.limits.max_play_frame_bytes;
                if let Some(s) = &mut self.switch {
                    s.step = SwitchStep::Joining(Box::new(Link::new(s.target.clone(), stream, &early, limit)));
                }
                let registration = registration(&self.ctx.live);
                self.out.to_target.extend_from_slice(&registration);
                self.joining_frames()
            }
            Event::Dialed(Err(why)) => self.fail(&why.to_string()),
            Event::Joining(ready) => {
                let read = ready.and_then(|()| {
                    with_scratch(|buf| {
                        let Some(Switch { step: SwitchStep::Joining(link), .. }) = &mut self.switch else {
                            return Ok(Some(0));
                        };
                        match read_clearing(&link.stream, buf) {
                            Ok(n) => {
                                link.backend.metrics.to_player.inc_by(n as u64);
                                link.frames.queue_slice(buf.get(..n).unwrap_or_default());
                                Ok(Some(n))
                            }
                            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
                            Err(e) => Err(e),
                        }
                    })
                });
                match read {
                    Ok(Some(0)) => self.fail("it closed the connection"),
                    Ok(Some(_)) => self.joining_frames(),
                    Ok(None) => Ok(()),
                    Err(e) => self.fail(&format!("read failed: {e}")),
                }
            }
            Event::Deadline => {
                let secs = self.switch.as_ref().map_or(0, |s| (s.deadline - s.started).as_secs());
                self.fail(&format!("it did not finish within {secs}s"))
            }
            Event::OwnKeepAlive => {
                self.keep_alive.send_own(self.out.player());
                Ok(())
            }
            Event::Command(c) => self.command(c),
            Event::Nothing => Ok(()),
        }
    }

    /// One read of the current backend into `buf` and what it brings: `Ok(None)` when nothing was ready after
    /// all; `Ok(Some(step))` once the bytes were handled; an error, or EOF as an error, when the connection ended.
    fn read_current(&mut self, buf: &mut [u8]) -> io::Result<Option<Result<(), End>>> {
        let Some(link) = &mut self.current else { return Ok(None) };
        let n = match read_clearing(&link.stream, buf) {
            Ok(0) => return Err(io::Error::new(io::ErrorKind::UnexpectedEof, "closed without a Play Disconnect")),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(None),
            Err(e) => return Err(e),
        };
        let data = buf.get(..n).unwrap_or_default();
        // What passes goes right after what was already queued for the player, before anything the bytes
        // after it produce.
        let before = self.out.to_player.len();
        let pass = self.pass_through(data);
        let after = self.out.to_player.split_off(before);
        self.out.to_player.extend_from_slice(data.get(..pass).unwrap_or_default());
        self.out.to_player.unsplit(after);
        Ok(Some(Ok(())))
    }

    /// True once, after [`Self::ready`] returned because the current backend is readable: the relay then
    /// reads it with [`Self::read_current_into`].
    pub(crate) fn take_current_ready(&mut self) -> bool {
        std::mem::take(&mut self.current_ready) && self.out.to_player.is_empty()
    }

    /// The relay's read of the current backend into `buf` (its scratch buffer): how many bytes came, or `None`
    /// when none did (nothing ready, or the connection ended: handled here, as a failover or the end).
    pub(crate) fn read_current_into(&mut self, buf: &mut [u8]) -> Option<usize> {
        let link = self.current.as_ref()?;
        match read_clearing(&link.stream, buf) {
            Ok(0) => {}
            Ok(n) => return Some(n),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return None,
            Err(e) => info!(player = %self.ctx.identity.name, "backend connection failed: {e}"),
        }
        self.lost_current(LOST);
        self.settle(Ok(()));
        None
    }

    /// Bytes just read from the current backend: how many from the start go to the player as they are (the
    /// rest of a frame passing in pieces, then whole frames nobody looks into while nothing is queued before
    /// them, the last one in pieces when its head says so); the rest is queued,
    /// parsed, and what it produces waits in [`Self::output`] behind them. Counted under the backend.
    pub(crate) fn pass_through(&mut self, data: &[u8]) -> usize {
        let (joined, swapped) = (self.client_entity.is_some(), self.swap.is_some_and(|s| !s.is_identity()));
        let limit = self.ctx.live.tunables.limits.max_play_frame_bytes;
        let Some(link) = &mut self.current else { return 0 };
        link.backend.metrics.to_player.inc_by(data.len() as u64);
        let mut pass = self.out.player_owed.min(data.len());
        let was_owed = self.out.player_owed > 0;
        self.out.player_passed(pass);
        if self.out.player_owed == 0 && link.frames.is_empty() && self.out.to_player.is_empty() {
            let rest = data.get(pass..).unwrap_or_default();
            let passes = |id, f: &[u8]| !inspected(Direction::Clientbound, id, f, joined, swapped, false);
            let run = passing_run(rest, limit, HEAD_LEN, passes).unwrap_or_default();
            pass += run.len;
            self.out.player_owed = run.owed;
        }
        if pass < data.len() {
            link.frames.queue_slice(data.get(pass..).unwrap_or_default());
            let step = self.clientbound();
            self.settle(step);
        }
        if was_owed && self.out.player_owed == 0 && self.switch.is_some() {
            // A switch waited for the frame to end before it went on with the new backend's frames.
            let step = self.joining_frames();
            self.settle(step);
        }
        pass
    }

    /// The current backend is gone without a Play Disconnect (`why`, as the player reads it after the name):
    /// the player goes to its fallback when it has one (failover), or the session ends as the backend ended it.
    pub(super) fn lost_current(&mut self, why: &str) {
        let Some(link) = self.current.take() else { return };
        if self.out.player_owed > 0 {
            // The player is inside a frame that only this backend could finish: no other server can go on, and
            // a switch under way cannot end well either.
            let why = format!("backend {} {why} inside a frame", link.backend.name);
            self.settle(Err(End::Closed(why)));
            return;
        }
        if self.switch.is_some() || self.player.closed || self.goodbye || self.handed_away {
            // A switch under way decides; a player who left (or went to another instance) is not moved.
            return;
        }
        let from = link.backend.name.clone();
        let now = Instant::now();
        self.fallbacks.retain(|t| now.duration_since(*t) < FALLBACK_WINDOW);
        let fallback = self.ctx.live.tunables.transfer.fallback.get(&from).cloned();
        match fallback.filter(|_| self.fallbacks.len() < MAX_FALLBACKS) {
            Some(to) => {
                self.fallbacks.push(now);
                info!(player = %self.ctx.identity.name, from = %from, to = %to, "backend {why}: sending the player to the fallback");
                self.request(&to, Trigger::Lost { from, why: why.to_string() });
            }
            None => {
                info!(player = %self.ctx.identity.name, backend = %from, "backend {why}");
            }
        }
    }

    /// Waits for the next thing to do.
    async fn next_event(&mut self) -> Event {
        // Not read while its frames wait for the proxy's answers to go (`Answers::paused`).
        let current = self.current.as_ref().filter(|_| !self.answers.paused).map(|l| &l.stream);
        let waiting_for_player = self.current.is_none() && self.switch.is_some();
        let own_at = self.keep_alive.own_at;
        let commands = self.commands.as_mut();
        // The new backend waits while a frame of the current one passes in pieces (its Join Game would cut over
        // inside that frame).
        let frame_under_way = self.out.player_owed > 0;
        let (dial, joining, deadline) = match &mut self.switch {
            Some(Switch { step: SwitchStep::Dialing(d), deadline, .. }) => (Some(d), None, Some(*deadline)),
            Some(Switch { step: SwitchStep::Joining(l), deadline, .. }) => (None, Some(&l.stream), Some(*deadline)),
            None => (None, None, None),
        };
        tokio::select! {
            r = readable(current) => Event::Backend(r),
            r = async { match dial { Some(d) => d.await, None => std::future::pending().await } } => Event::Dialed(r),
            r = readable(joining.filter(|_| !frame_under_way)) => Event::Joining(r),
            () = async { match deadline { Some(d) => sleep_until(d).await, None => std::future::pending().await } } => Event::Deadline,
            // Built only when it can fire: a timer per event would cost every frame of a switched player.
            () = async { if waiting_for_player { sleep_until(own_at).await } else { std::future::pending().await } } => Event::OwnKeepAlive,
            c = async { match commands { Some(rx) => rx.recv().await, None => std::future::pending().await } } => match c {
                Some(c) => Event::Command(c),
                None => {
                    self.commands = None;
                    Event::Nothing
                }
            },
        }
    }

    /// Writes what the last event produced for the current backend and the joining one. Cancel-safe: written
    /// bytes leave the outbox as they go.
    pub(crate) async fn flush(&mut self) {
        let stall = self.ctx.live.tunables.limits.write_stall_timeout();
        if !self.out.to_backend.is_empty() {
            let written = match &self.current {
                Some(link) => write_out(&link.stream, &mut self.out.to_backend, stall, &link.backend).await,
                None => Ok(()),
            };
            self.out.to_backend.clear();
            if let Err(e) = written {
                info!(player = %self.ctx.identity.name, "backend write failed: {e}");
                self.lost_current(LOST);
                self.settle(Ok(()));
            }
        }
        if !self.out.to_target.is_empty() {
            let written = match &self.switch {
                Some(Switch { step: SwitchStep::Joining(link), .. }) => {
                    write_out(&link.stream, &mut self.out.to_target, stall, &link.backend).await
                }
                _ => Ok(()),
            };
            self.out.to_target.clear();
            if let Err(e) = written {
                // What the failure tells the player is written even when it ends the session.
                let step = self.fail(&format!("write failed: {e}"));
                self.settle(step);
            }
        }
    }
}

/// Writes all of `buf` to a backend under the write-stall bound, advancing it as bytes go (cancel-safe), and
/// counts them under that backend.
async fn write_out(stream: &TcpStream, buf: &mut BytesMut, stall: Duration, backend: &Backend) -> io::Result<()> {
    while !buf.is_empty() {
        // Written at once when the socket takes it; the stall bound (a timer) only when it does not.
        match stream.try_write(buf) {
            Ok(n) => {
                backend.metrics.to_backend.inc_by(n as u64);
                buf.advance(n);
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {
                within_stall(stall, Side::Backend, stream.writable()).await?;
            }
            Err(e) => return Err(e),
        }
    }
    Ok(())
}
