//! The switchboard: the frame-by-frame relay between the hop and the player's current backend, with its
//! events (the player, the current backend, the one being switched to, the switch's deadline, the proxy's own
//! Keep Alive) and what it does to serverbound and clientbound frames.

use std::io;
use std::time::Duration;

use bytes::BytesMut;
use moonbridge_protocol::codec::Reader;
use moonbridge_protocol::frame::{FrameDecoder, MAX_FRAME_LEN};
use moonbridge_protocol::packets::{JoinGame, KeepAlive, Packet, PlayDisconnect, PluginMessage};
use moonbridge_protocol::transfer::watch::Watched;
use moonbridge_protocol::transfer::{
    fml, is_channel, BungeeRequest, Direction, EntityIdSwap, Leftovers, BUNGEE_CHANNEL,
};
use moonbridge_protocol::FrameScanner;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::time::{sleep_until, Instant};
use tracing::info;

use super::backend::{readable, try_read, Dialed, Link};
use super::common::{chat_plain, encode, put_frame, registration, Ctx, End, Outbox, READ_CHUNK};
use super::forge::Forge;
use super::keep_alive::KeepAlives;
use super::switch::{Switch, SwitchStep, Trigger, FALLBACK_WINDOW, MAX_FALLBACKS};
use crate::backend::Backend;
use crate::wire::{discard_until_eof, write_all, Side};

/// How long a closing switchboard waits for the relay to close its end of the hop.
const HOP_LINGER: Duration = Duration::from_secs(5);

/// What the switchboard needs from its session.
pub(super) struct SwitchStart {
    pub(super) ctx: Ctx,
    /// The backend the player is on, and its connection.
    pub(super) backend: Backend,
    pub(super) stream: TcpStream,
    /// Clientbound bytes from the backend not delivered to the player, from a frame start.
    pub(super) early: Vec<u8>,
    /// What the relay's watch learned before.
    pub(super) watched: Watched,
    /// Serverbound: the frame under way when the relay handed over (its rest goes to the backend unparsed).
    pub(super) tail: FrameScanner,
}

/// The player's side of the switchboard: the hop and its serverbound frames.
pub(super) struct PlayerEnd {
    hop: TcpStream,
    /// Serverbound frames from the hop.
    up: FrameDecoder,
    /// The serverbound frame the relay was in when it handed over: its rest is passed on first, to the backend
    /// that had its beginning (dropped once another backend serves the player).
    tail: FrameScanner,
    /// The backend that had the beginning of `tail`'s frame no longer serves the player.
    pub(super) tail_orphaned: bool,
}

/// The frame-by-frame relay between the hop and the player's current backend, with transfers.
pub(super) struct Switchboard {
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
    fallbacks: Vec<Instant>,
    /// The current backend's scoreboard, teams, tab list and open window, removed at a cutover.
    pub(super) leftovers: Leftovers,
    pub(super) keep_alive: KeepAlives,
    pub(super) out: Outbox,
    scratch: Vec<u8>,
}

/// What woke the switchboard.
enum Event {
    Player(io::Result<usize>),
    Backend(io::Result<usize>),
    Dialed(Dialed),
    Joining(io::Result<usize>),
    Deadline,
    OwnKeepAlive,
    /// A readiness wake-up with nothing to read after all.
    Nothing,
}

impl Switchboard {
    /// Runs until the player or the backend is gone; the hop is closed on return, which ends the relay.
    pub(super) async fn run(start: SwitchStart, hop: TcpStream) {
        let SwitchStart { ctx, backend, stream, early, watched, tail } = start;
        let Watched { client_entity, fml_record, leftovers } = watched;
        // Read from the backend by the relay, not delivered (nor counted) there.
        backend.metrics.to_player.inc_by(early.len() as u64);
        let mut board = Self {
            ctx,
            player: PlayerEnd { hop, up: FrameDecoder::new(MAX_FRAME_LEN), tail, tail_orphaned: false },
            current: Some(Link::new(backend, stream, &early)),
            switch: None,
            client_entity,
            swap: None,
            forge: Forge { record: fml_record, replaying: false },
            fallbacks: Vec::new(),
            leftovers,
            keep_alive: KeepAlives::new(),
            out: Outbox::default(),
            scratch: vec![0; READ_CHUNK],
        };
        let end = board.relay().await;
        match end {
            End::PlayerGone | End::BackendGone => {}
            End::Closed(reason) => {
                info!(player = %board.ctx.identity.name, "transfer layer closed the session: {reason}")
            }
        }
        // Closed for writing, then drained: closing a socket with unread bytes would reset it, and the relay could
        // lose the last frames (a disconnect) on its way to the player.
        let _ = board.player.hop.shutdown().await;
        discard_until_eof(&board.player.hop, HOP_LINGER).await;
    }

    /// The loop: writes what the last event produced, waits for the next, handles it.
    async fn relay(&mut self) -> End {
        if let Err(end) = self.clientbound() {
            return end;
        }
        loop {
            if let Err(end) = self.flush().await {
                return end;
            }
            let event = self.next_event().await;
            let step = match event {
                Event::Player(Ok(0)) | Event::Player(Err(_)) => return End::PlayerGone,
                Event::Player(Ok(n)) => {
                    let data = self.scratch.get(..n).unwrap_or_default();
                    // The rest of a frame the relay had begun before the handover goes on as it is.
                    let raw = self.player.tail.finish_frame(data).unwrap_or(0);
                    if raw > 0 && self.current.is_some() && !self.player.tail_orphaned {
                        self.out.to_backend.extend_from_slice(data.get(..raw).unwrap_or_default());
                    }
                    self.player.up.queue_slice(data.get(raw..).unwrap_or_default());
                    self.serverbound()
                }
                Event::Backend(Ok(n)) if n > 0 => {
                    if let Some(link) = &mut self.current {
                        link.backend.metrics.to_player.inc_by(n as u64);
                        link.frames.queue_slice(self.scratch.get(..n).unwrap_or_default());
                    }
                    self.clientbound()
                }
                Event::Backend(_) => {
                    // Closed or failed without a disconnect the proxy acted on.
                    self.current = None;
                    if self.switch.is_none() {
                        return End::BackendGone;
                    }
                    Ok(())
                }
                Event::Dialed(Ok((stream, early))) => {
                    if let Some(s) = &mut self.switch {
                        s.step = SwitchStep::Joining(Link::new(s.target.clone(), stream, &early));
                    }
                    let registration = registration(&self.ctx.live);
                    self.out.to_target.extend_from_slice(&registration);
                    self.joining_frames()
                }
                Event::Dialed(Err(why)) => self.fail(&why),
                Event::Joining(Ok(n)) if n > 0 => {
                    if let Some(Switch { step: SwitchStep::Joining(link), .. }) = &mut self.switch {
                        link.backend.metrics.to_player.inc_by(n as u64);
                        link.frames.queue_slice(self.scratch.get(..n).unwrap_or_default());
                    }
                    self.joining_frames()
                }
                Event::Joining(Ok(_)) => self.fail("it closed the connection"),
                Event::Joining(Err(e)) => self.fail(&format!("read failed: {e}")),
                Event::Deadline => {
                    let secs = self.switch.as_ref().map_or(0, |s| (s.deadline - s.started).as_secs());
                    self.fail(&format!("it did not finish within {secs}s"))
                }
                Event::OwnKeepAlive => {
                    self.keep_alive.send_own(&mut self.out.to_player);
                    Ok(())
                }
                Event::Nothing => Ok(()),
            };
            if let Err(end) = step {
                let _ = self.flush().await;
                return end;
            }
            if self.current.is_none() && self.switch.is_none() {
                // The old backend is gone and no switch is under way (a refused fallback).
                let _ = self.flush().await;
                return End::BackendGone;
            }
        }
    }

    /// Waits for the next thing to do.
    async fn next_event(&mut self) -> Event {
        let scratch = &mut self.scratch;
        let hop = &self.player.hop;
        let current = self.current.as_ref().map(|l| &l.stream);
        let waiting_for_player = self.current.is_none() && self.switch.is_some();
        let own_at = self.keep_alive.own_at;
        let (dial, joining, deadline) = match &mut self.switch {
            Some(Switch { step: SwitchStep::Dialing(d), deadline, .. }) => (Some(d), None, Some(*deadline)),
            Some(Switch { step: SwitchStep::Joining(l), deadline, .. }) => (None, Some(&l.stream), Some(*deadline)),
            None => (None, None, None),
        };
        // One scratch buffer serves every read: only one branch reads at a time.
        tokio::select! {
            r = hop.readable() => read_event(r, Some(hop), scratch, Event::Player),
            r = readable(current) => read_event(r, current, scratch, Event::Backend),
            r = async { match dial { Some(d) => d.await, None => std::future::pending().await } } => Event::Dialed(r),
            r = readable(joining) => read_event(r, joining, scratch, Event::Joining),
            () = async { match deadline { Some(d) => sleep_until(d).await, None => std::future::pending().await } } => Event::Deadline,
            () = sleep_until(own_at), if waiting_for_player => Event::OwnKeepAlive,
        }
    }

    /// Writes what the last event produced: to the player, the current backend and the joining one.
    async fn flush(&mut self) -> Result<(), End> {
        let stall = self.ctx.live.tunables.limits.write_stall_timeout();
        if !self.out.to_player.is_empty() {
            let r = write_all(&self.player.hop, &self.out.to_player, stall, Side::Player).await;
            self.out.to_player.clear();
            r.map_err(|_| End::PlayerGone)?;
        }
        if !self.out.to_backend.is_empty() {
            if let Some(link) = &self.current {
                link.backend.metrics.to_backend.inc_by(self.out.to_backend.len() as u64);
                if write_all(&link.stream, &self.out.to_backend, stall, Side::Backend).await.is_err() {
                    self.current = None;
                }
            }
            self.out.to_backend.clear();
            if self.current.is_none() && self.switch.is_none() {
                return Err(End::BackendGone);
            }
        }
        if !self.out.to_target.is_empty() {
            let failed = match &self.switch {
                Some(Switch { step: SwitchStep::Joining(link), .. }) => {
                    link.backend.metrics.to_backend.inc_by(self.out.to_target.len() as u64);
                    write_all(&link.stream, &self.out.to_target, stall, Side::Backend).await.err()
                }
                _ => None,
            };
            self.out.to_target.clear();
            if let Some(e) = failed {
                // What the failure tells the player is written even when it ends the session.
                let failed = self.fail(&format!("write failed: {e}"));
                let flushed = Box::pin(self.flush()).await;
                failed?;
                flushed?;
            }
        }
        Ok(())
    }

    /// Handles the serverbound frames queued from the hop.
    fn serverbound(&mut self) -> Result<(), End> {
        loop {
            let frame = match self.player.up.try_next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(e) => return Err(End::Closed(format!("player sent a bad frame: {e}"))),
            };
            match frame.id {
                KeepAlive::ID => {
                    let Ok(k) = frame.decode::<KeepAlive>() else { continue };
                    if !self.keep_alive.answer_goes_on(k.id, self.swap.is_some()) {
                        continue;
                    }
                }
                Leftovers::SERVERBOUND_ID => self.leftovers.observe(Direction::Serverbound, frame.id, &frame.body),
                PluginMessage::SERVERBOUND_ID if self.forge.replaying && is_channel(&frame.body, fml::CHANNEL) => {
                    // The client's answers to the replayed handshake: the current backend finished its own long
                    // ago.
                    self.forge.swallow_answer(&frame.body);
                    continue;
                }
                PluginMessage::SERVERBOUND_ID if self.forge_handshake_running() && fml::is_handshake(&frame.body) => {
                    encode(&mut self.out.to_target, frame.id, &frame.body);
                    continue;
                }
                _ => {}
            }
            if self.current.is_some() {
                let swap = self.swap;
                put_frame(&mut self.out.to_backend, swap, Direction::Serverbound, frame, &mut Vec::new());
            }
        }
    }

    /// True while a switch's Forge handshake runs (the client's `FML|HS` answers go to the new backend).
    pub(super) fn forge_handshake_running(&self) -> bool {
        matches!(&self.switch, Some(Switch { step: SwitchStep::Joining(_), reset_sent: true, .. }))
    }

    /// Handles the clientbound frames queued from the current backend.
    pub(super) fn clientbound(&mut self) -> Result<(), End> {
        let mut body = Vec::new();
        loop {
            let Some(link) = &mut self.current else { return Ok(()) };
            let frame = match link.frames.try_next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(e) => return Err(End::Closed(format!("backend {} sent a bad frame: {e}", link.backend.name))),
            };
            match frame.id {
                JoinGame::ID if self.client_entity.is_none() => {
                    if let Ok(join) = frame.decode::<JoinGame>() {
                        self.client_entity = Some(join.entity_id);
                    }
                }
                PluginMessage::CLIENTBOUND_ID if self.client_entity.is_none() && fml::is_handshake(&frame.body) => {
                    // The first backend's Forge handshake, kept for a replay.
                    fml::record(&mut self.forge.record, frame.id, &frame.body);
                }
                PluginMessage::CLIENTBOUND_ID if is_channel(&frame.body, BUNGEE_CHANNEL) => {
                    let mut r = Reader::new(&frame.body);
                    if let Ok(m) = PluginMessage::decode_fields(&mut r) {
                        if let Ok(BungeeRequest::Connect { server }) = BungeeRequest::parse(&m.data) {
                            self.request(&server, Trigger::Connect);
                            continue;
                        }
                    }
                }
                PlayDisconnect::ID if self.switch.is_none() => {
                    let from = link.backend.name.clone();
                    let now = Instant::now();
                    self.fallbacks.retain(|t| now.duration_since(*t) < FALLBACK_WINDOW);
                    let fallback = self.ctx.live.tunables.transfer.fallback.get(&from).cloned();
                    if let Some(to) = fallback.filter(|_| self.fallbacks.len() < MAX_FALLBACKS) {
                        self.fallbacks.push(now);
                        let reason =
                            frame.decode::<PlayDisconnect>().map(|d| chat_plain(&d.reason_json)).unwrap_or_default();
                        let mut disconnect = BytesMut::new();
                        encode(&mut disconnect, frame.id, &frame.body);
                        info!(player = %self.ctx.identity.name, from = %from, to = %to, "backend disconnected the player ({reason}): sending them to the fallback");
                        // The old backend is done with the player; nothing more is read from it.
                        self.current = None;
                        self.request(&to, Trigger::Fallback { from, disconnect, reason });
                        return Ok(());
                    }
                }
                PlayDisconnect::ID => {
                    // The old backend let the player go while a switch is under way: the switch decides.
                    self.current = None;
                    return Ok(());
                }
                id if Leftovers::CLIENTBOUND_IDS.contains(&id) => {
                    self.leftovers.observe(Direction::Clientbound, id, &frame.body);
                }
                KeepAlive::ID if self.swap.is_some() => {
                    if let Ok(k) = frame.decode::<KeepAlive>() {
                        self.keep_alive.sent_by_backend(k.id).map_err(End::Closed)?;
                    }
                }
                _ => {}
            }
            put_frame(&mut self.out.to_player, self.swap, Direction::Clientbound, frame, &mut body);
        }
    }
}

/// The event for a readiness wake-up of `stream`: the read's outcome, or [`Event::Nothing`].
fn read_event(
    ready: io::Result<()>,
    stream: Option<&TcpStream>,
    buf: &mut [u8],
    event: fn(io::Result<usize>) -> Event,
) -> Event {
    let read = ready.and_then(|()| stream.map_or(Ok(0), |s| try_read(s, buf)));
    match read {
        Err(e) if e.kind() == io::ErrorKind::Interrupted => Event::Nothing,
        other => event(other),
    }
}
