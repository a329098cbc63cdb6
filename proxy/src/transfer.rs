//! Server transfer: moving a connected player from one backend to another without a reconnect
//! (docs/network.md). 1.7.10 has no transfer packet, so the client must believe it is still on one server.
//!
//! A session whose backend can send players on (`[transfer] targets`, or a `[transfer.fallback]` entry) keeps
//! the direct relay, which watches the backend's frames ([`moonbridge_protocol::transfer::watch`]: a length
//! prefix and a head per frame; the first Join Game, the Forge handshake and the leftovers recorded). At the
//! first frame that starts a switch the relay hands over ([`ToSwitchboard`]): the backend connection moves to the
//! [`Switchboard`], and the relay goes on against one end of a loopback TCP pair ([`crate::relay::hop`]) whose other end the
//! switchboard serves, relaying frame by frame. So every transport (tcp, ws, wss, carriage v2 resume, online
//! mode's cipher) works unchanged on the player's side, and a player who never switches never meets the
//! switchboard.
//!
//! What the switchboard does, with the sources of each fact:
//! - **Triggers.** A clientbound Plugin Message (S3F) on channel `BungeeCord` with subchannel `Connect` and a
//!   backend name (BungeeCord's plugin messaging channel, as server plugins use it) starts a switch and is not
//!   relayed. A Play Disconnect (S40) from a backend with a `[transfer.fallback]` entry starts a switch to the
//!   fallback instead of reaching the player.
//! - **Registration.** Each backend gets a `REGISTER` of the `BungeeCord` channel right after the login (when
//!   `targets` is set), as BungeeCord sends it: Bukkit-based servers let plugins send only on registered
//!   channels.
//! - **The switch.** The new backend is dialled and logged in ([`Identity::opening`]: the same handshake,
//!   Login Start and forwarding as the first login) while the old one keeps serving the player. Its Keep
//!   Alives are answered by the proxy until the cutover. With a Forge client (`\0FML\0` in the handshake), the
//!   first `FML|HS` message of the new backend is preceded by a HandshakeReset (`FML|HS` 0xFE,
//!   Forge 1.7.10 `FMLHandshakeMessage.HandshakeReset`), and the client's `FML|HS` answers go to the new
//!   backend, so the mod list and registry handshake run again; the deadline is then
//!   `forge_handshake_timeout_seconds` instead of `switch_timeout_seconds`.
//! - **The cutover**, at the new backend's Join Game (S01; a Forge server sends it once its handshake is
//!   complete, `NetworkDispatcher.completeServerSideConnection`): the client gets the removal of what the old
//!   server left ([`Leftovers`]: scoreboard objectives, teams, tab-list entries, an open window), then the two
//!   Respawns of [`world_reset`] instead of the Join Game, the old backend's connection is closed, and from then on every
//!   packet that carries the player's own entity id is rewritten both ways ([`EntityIdSwap`]).
//! - **Keep Alive.** After a switch, the client's answers (C00) reach the backend only for ids that backend
//!   sent (at most [`MAX_UNANSWERED_KEEP_ALIVES`] outstanding; more ends the session); while no backend serves
//!   the player (a fallback in progress) the proxy sends its own Keep Alives so the client's 30-second read
//!   timeout does not fire, and swallows their answers.
//! - **Failures.** The player stays on the old backend and is told why in chat. A Forge client whose handshake
//!   was reset gets the rest of the old backend's recorded handshake, from the message its state waits for, as
//!   long as it has not applied the new server's registry. When the old backend is gone (a fallback), or the
//!   client cannot be brought back, the player gets a Play Disconnect with the reason instead.

use std::collections::VecDeque;
use std::future::Future;
use std::io;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use moonbridge_protocol::codec::Reader;
use moonbridge_protocol::frame::{encode_frame, Frame, FrameDecoder, MAX_FRAME_LEN};
use moonbridge_protocol::packets::{
    chat_text, ChatMessage, JoinGame, KeepAlive, LoginDisconnect, LoginSuccess, Packet, PlayDisconnect, PluginMessage,
};
use moonbridge_protocol::transfer::watch::Watched;
use moonbridge_protocol::transfer::{
    bungee_registration, carries_entity_ids, fml, is_channel, world_reset, BungeeRequest, Direction, EntityIdSwap,
    Leftovers, BUNGEE_CHANNEL,
};
use moonbridge_protocol::FrameScanner;
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio::time::{sleep_until, Instant};
use tracing::info;

use crate::backend::{Backend, Identity};
use crate::metrics::Metrics;
use crate::relay::{write_all, Handed, Handover, Side};
use crate::state::Live;

/// How long a closing switchboard waits for the relay to close its end of the hop.
const HOP_LINGER: Duration = Duration::from_secs(5);

/// Largest read from the hop or a backend, in bytes.
const READ_CHUNK: usize = 64 * 1024;

/// Keep Alive ids a backend may have outstanding with a switched client before the session is ended (the
/// client answers each one; a backend that sends more without answers in between is broken).
pub(crate) const MAX_UNANSWERED_KEEP_ALIVES: usize = 1024;

/// Bytes of clientbound frames (other than Keep Alive and `FML|HS`) a new backend may send before its Join
/// Game; they are held and delivered after the world reset. More fails the switch.
pub(crate) const MAX_HELD_BYTES: usize = 1024 * 1024;

/// Longest backend name from a `Connect` that is shown in chat and logs, in characters.
const MAX_SHOWN_NAME: usize = 64;

/// Fallbacks a session may take within [`FALLBACK_WINDOW`]; past that, a backend's disconnect reaches the
/// player (two backends that are each other's fallback and kick at once cannot bounce a player forever).
pub(crate) const MAX_FALLBACKS: usize = 3;
/// The window of [`MAX_FALLBACKS`].
const FALLBACK_WINDOW: Duration = Duration::from_secs(60);

/// How often the proxy sends its own Keep Alive while no backend serves the player.
const OWN_KEEP_ALIVE_INTERVAL: Duration = Duration::from_secs(5);

/// Largest Login-state frame read from a new backend (Login Success, Login Disconnect, Encryption Request),
/// in bytes.
const MAX_LOGIN_FRAME: usize = 256 * 1024;

/// Whether players on `backend` can be moved (their relay watches for the frames that start a switch).
pub(crate) fn applies(live: &Live, backend: &Backend) -> bool {
    !live.transfer.targets.is_empty() || live.transfer.fallback.contains_key(&backend.name)
}

/// Whether a Play Disconnect from `backend` starts a switch to its fallback.
pub(crate) fn has_fallback(live: &Live, backend: &Backend) -> bool {
    live.transfer.fallback.contains_key(&backend.name)
}

/// The `REGISTER` of the `BungeeCord` channel a backend gets after each login when `[transfer] targets` is set
/// (a whole serverbound frame), or nothing.
pub(crate) fn registration(live: &Live) -> BytesMut {
    let mut out = BytesMut::new();
    let mut fields = Vec::with_capacity(24);
    if !live.transfer.targets.is_empty() && bungee_registration().encode_fields(&mut fields).is_ok() {
        encode(&mut out, PluginMessage::SERVERBOUND_ID, &fields);
    }
    out
}

/// What a relay hands over to start the switchboard ([`Handover`]).
pub(crate) struct ToSwitchboard {
    pub(crate) live: Arc<Live>,
    pub(crate) identity: Identity,
    pub(crate) metrics: Arc<Metrics>,
    /// The backend the player is on.
    pub(crate) backend: Backend,
}

impl Handover for ToSwitchboard {
    fn start(self: Box<Self>, stream: TcpStream, hop: TcpStream, handed: Handed) -> JoinHandle<()> {
        let Self { live, identity, metrics, backend } = *self;
        metrics.transfer_handovers.inc();
        info!(player = %identity.name, backend = %backend.name, "transfer layer takes over the session");
        let Handed { rest, watched, tail } = handed;
        let start = SwitchStart { live, identity, metrics, backend, stream, early: rest, watched, tail };
        tokio::spawn(Switchboard::run(start, hop))
    }
}

/// What the switchboard needs from its session.
struct SwitchStart {
    live: Arc<Live>,
    identity: Identity,
    metrics: Arc<Metrics>,
    /// The backend the player is on, and its connection.
    backend: Backend,
    stream: TcpStream,
    /// Clientbound bytes from the backend not delivered to the player, from a frame start.
    early: Vec<u8>,
    /// What the relay's watch learned before.
    watched: Watched,
    /// Serverbound: the frame under way when the relay handed over (its rest goes to the backend unparsed).
    tail: FrameScanner,
}

/// A backend connection in Play, with its clientbound frames.
struct Link {
    backend: Backend,
    stream: TcpStream,
    frames: FrameDecoder,
}

impl Link {
    fn new(backend: Backend, stream: TcpStream, early: &[u8]) -> Self {
        let mut frames = FrameDecoder::new(MAX_FRAME_LEN);
        frames.queue_slice(early);
        Self { backend, stream, frames }
    }
}

/// Why a switch started.
enum Trigger {
    /// The old backend's BungeeCord `Connect`.
    Connect,
    /// Backend `from` disconnected the player: the frame as it came, and its reason as text.
    Fallback { from: String, disconnect: BytesMut, reason: String },
}

/// A new backend connection logged in: the stream and the Play bytes read after Login Success, or why not (a
/// readable reason for the chat).
type Dialed = Result<(TcpStream, BytesMut), String>;

/// Where a switch is.
enum SwitchStep {
    /// Connecting and logging in.
    Dialing(Pin<Box<dyn Future<Output = Dialed> + Send>>),
    /// In Play, before its Join Game.
    Joining(Link),
}

/// A switch in progress.
struct Switch {
    target: Backend,
    trigger: Trigger,
    started: Instant,
    deadline: Instant,
    step: SwitchStep,
    /// A Forge HandshakeReset went to the client: it runs the new server's handshake now.
    reset_sent: bool,
    /// How far the client got in the new server's handshake: the last of its messages delivered
    /// ([`ServerStep`]).
    delivered: ServerStep,
    /// Frames the new backend sent before Join Game, framed again.
    held: BytesMut,
    /// The new backend's Forge handshake messages, for a replay if a later switch fails.
    record: Option<BytesMut>,
}

/// The server's messages of a Forge 1.7.10 handshake, in order (`FMLHandshakeServerState`: ServerHello,
/// ModList, ModIdData (or its `FML|MP` parts), then HandshakeAck 2 and 3). The client's state follows from the
/// last one it received (`FMLHandshakeClientState`): after ServerHello it waits for a ModList, after ModList for
/// the ModIdData; once a ModIdData is in, the new server's registry is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
enum ServerStep {
    None,
    ServerHello,
    ModList,
    Registry,
    Acks,
}

impl ServerStep {
    /// The step of a server `FML|HS` or `FML|MP` message (`body`: the Plugin Message fields).
    fn of(body: &[u8]) -> Self {
        if is_channel(body, "FML|MP") {
            return Self::Registry;
        }
        match fml_data(body).and_then(|d| d.first().copied()) {
            Some(fml::SERVER_HELLO) => Self::ServerHello,
            Some(fml::MOD_LIST) => Self::ModList,
            Some(fml::MOD_ID_DATA) => Self::Registry,
            Some(fml::HANDSHAKE_ACK) => Self::Acks,
            _ => Self::None,
        }
    }
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

/// How the switchboard ended (for the log line of the session, through the relay: the hop closes).
#[derive(Debug)]
enum End {
    /// The relay side closed (the player left, or the proxy shuts down).
    PlayerGone,
    /// The backend closed or failed, with no switch to wait for.
    BackendGone,
    /// The player was disconnected by the proxy (fallback failed, reset handshake) or the backend broke a rule.
    Closed(String),
}

/// The frame-by-frame relay between the hop and the player's current backend, with transfers.
struct Switchboard {
    live: Arc<Live>,
    identity: Identity,
    metrics: Arc<Metrics>,
    hop: TcpStream,
    /// The serverbound frame the relay was in when it handed over: its rest is passed on first, to the backend
    /// that had its beginning (dropped once another backend serves the player).
    tail: FrameScanner,
    /// The backend that had the beginning of `tail`'s frame no longer serves the player.
    tail_orphaned: bool,
    /// Serverbound frames from the hop.
    up: FrameDecoder,
    current: Option<Link>,
    switch: Option<Switch>,
    /// The entity id the client learned from its first Join Game.
    client_entity: Option<i32>,
    /// From the first cutover on: the swap between the client's id and the current backend's.
    swap: Option<EntityIdSwap>,
    /// The current backend's Forge handshake (its `FML|HS`, `FML|MP` and `REGISTER` messages before its Join
    /// Game, at most [`fml::MAX_RECORD_BYTES`]): replayed to the client when a switch fails after the client's
    /// handshake was reset, so it can stay. `None` when it was too large.
    fml_record: Option<BytesMut>,
    /// A replay runs: the client's `FML|HS` answers are the proxy's to swallow, up to its final HandshakeAck.
    replaying: bool,
    /// When this session's recent fallbacks started (at most [`MAX_FALLBACKS`] within [`FALLBACK_WINDOW`]).
    fallbacks: Vec<Instant>,
    /// The current backend's scoreboard, teams, tab list and open window, removed at a cutover.
    leftovers: Leftovers,
    /// Keep Alive ids the current backend sent and the client has not answered (after a switch).
    keep_alives: VecDeque<i32>,
    /// Keep Alive ids the proxy itself sent, not answered yet.
    own_keep_alives: VecDeque<i32>,
    next_own_keep_alive: i32,
    own_keep_alive_at: Instant,
    to_player: BytesMut,
    to_backend: BytesMut,
    to_target: BytesMut,
    scratch: Vec<u8>,
}

impl Switchboard {
    /// Runs until the player or the backend is gone; the hop is closed on return, which ends the relay.
    async fn run(start: SwitchStart, hop: TcpStream) {
        let SwitchStart { live, identity, metrics, backend, stream, early, watched, tail } = start;
        let Watched { client_entity, fml_record, leftovers } = watched;
        // Read from the backend by the relay, not delivered (nor counted) there.
        backend.metrics.to_player.inc_by(early.len() as u64);
        let mut board = Self {
            live,
            identity,
            metrics,
            hop,
            tail,
            tail_orphaned: false,
            up: FrameDecoder::new(MAX_FRAME_LEN),
            current: Some(Link::new(backend, stream, &early)),
            switch: None,
            client_entity,
            swap: None,
            fml_record,
            replaying: false,
            fallbacks: Vec::new(),
            leftovers,
            keep_alives: VecDeque::new(),
            own_keep_alives: VecDeque::new(),
            next_own_keep_alive: i32::MIN,
            own_keep_alive_at: Instant::now(),
            to_player: BytesMut::new(),
            to_backend: BytesMut::new(),
            to_target: BytesMut::new(),
            scratch: vec![0; READ_CHUNK],
        };
        let end = board.relay().await;
        let player = board.identity.name.clone();
        match end {
            End::PlayerGone | End::BackendGone => {}
            End::Closed(reason) => info!(player = %player, "transfer layer closed the session: {reason}"),
        }
        // Closed for writing, then drained: closing a socket with unread bytes would reset it, and the relay could
        // lose the last frames (a disconnect) on its way to the player.
        let _ = board.hop.shutdown().await;
        crate::relay::discard_until_eof(&board.hop, HOP_LINGER).await;
    }

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
                    let raw = self.tail.finish_frame(data).unwrap_or(0);
                    if raw > 0 && self.current.is_some() && !self.tail_orphaned {
                        self.to_backend.extend_from_slice(data.get(..raw).unwrap_or_default());
                    }
                    self.up.queue_slice(data.get(raw..).unwrap_or_default());
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
                    let registration = registration(&self.live);
                    self.to_target.extend_from_slice(&registration);
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
                    self.send_own_keep_alive();
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
        let hop = &self.hop;
        let current = self.current.as_ref().map(|l| &l.stream);
        let waiting_for_player = self.current.is_none() && self.switch.is_some();
        let own_at = self.own_keep_alive_at;
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
        let stall = self.live.limits.write_stall_timeout();
        if !self.to_player.is_empty() {
            let r = write_all(&self.hop, &self.to_player, stall, Side::Player).await;
            self.to_player.clear();
            r.map_err(|_| End::PlayerGone)?;
        }
        if !self.to_backend.is_empty() {
            if let Some(link) = &self.current {
                link.backend.metrics.to_backend.inc_by(self.to_backend.len() as u64);
                if write_all(&link.stream, &self.to_backend, stall, Side::Backend).await.is_err() {
                    self.current = None;
                }
            }
            self.to_backend.clear();
            if self.current.is_none() && self.switch.is_none() {
                return Err(End::BackendGone);
            }
        }
        if !self.to_target.is_empty() {
            let failed = match &self.switch {
                Some(Switch { step: SwitchStep::Joining(link), .. }) => {
                    link.backend.metrics.to_backend.inc_by(self.to_target.len() as u64);
                    write_all(&link.stream, &self.to_target, stall, Side::Backend).await.err()
                }
                _ => None,
            };
            self.to_target.clear();
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
            let frame = match self.up.try_next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(e) => return Err(End::Closed(format!("player sent a bad frame: {e}"))),
            };
            match frame.id {
                KeepAlive::ID => {
                    let Ok(k) = frame.decode::<KeepAlive>() else { continue };
                    if take(&mut self.own_keep_alives, k.id) {
                        continue;
                    }
                    if self.swap.is_some() && !take(&mut self.keep_alives, k.id) {
                        // An answer to the old backend (or to nobody): the current one never sent this id.
                        continue;
                    }
                }
                Leftovers::SERVERBOUND_ID => self.leftovers.observe(Direction::Serverbound, frame.id, &frame.body),
                PluginMessage::SERVERBOUND_ID if self.replaying && is_channel(&frame.body, fml::CHANNEL) => {
                    // The client's answers to the replayed handshake: the current backend finished its own long
                    // ago. Its final HandshakeAck (phase COMPLETE) ends the replay.
                    if fml_ack_phase(&frame.body) == Some(FML_CLIENT_COMPLETE) {
                        self.replaying = false;
                    }
                    continue;
                }
                PluginMessage::SERVERBOUND_ID if self.forge_handshake_running() && fml::is_handshake(&frame.body) => {
                    encode(&mut self.to_target, frame.id, &frame.body);
                    continue;
                }
                _ => {}
            }
            if self.current.is_some() {
                let swap = self.swap;
                put_frame(&mut self.to_backend, swap, Direction::Serverbound, frame, &mut Vec::new());
            }
        }
    }

    /// True while a switch's Forge handshake runs (the client's `FML|HS` answers go to the new backend).
    fn forge_handshake_running(&self) -> bool {
        matches!(&self.switch, Some(Switch { step: SwitchStep::Joining(_), reset_sent: true, .. }))
    }

    /// Handles the clientbound frames queued from the current backend.
    fn clientbound(&mut self) -> Result<(), End> {
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
                    fml::record(&mut self.fml_record, frame.id, &frame.body);
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
                    let fallback = self.live.transfer.fallback.get(&from).cloned();
                    if let Some(to) = fallback.filter(|_| self.fallbacks.len() < MAX_FALLBACKS) {
                        self.fallbacks.push(now);
                        let reason =
                            frame.decode::<PlayDisconnect>().map(|d| chat_plain(&d.reason_json)).unwrap_or_default();
                        let mut disconnect = BytesMut::new();
                        encode(&mut disconnect, frame.id, &frame.body);
                        info!(player = %self.identity.name, from = %from, to = %to, "backend disconnected the player ({reason}): sending them to the fallback");
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
                        if self.keep_alives.len() >= MAX_UNANSWERED_KEEP_ALIVES {
                            return Err(End::Closed(format!(
                                "more than {MAX_UNANSWERED_KEEP_ALIVES} Keep Alives unanswered"
                            )));
                        }
                        self.keep_alives.push_back(k.id);
                    }
                }
                _ => {}
            }
            put_frame(&mut self.to_player, self.swap, Direction::Clientbound, frame, &mut body);
        }
    }

    /// Starts a switch to backend `name`, or tells the player why not.
    fn request(&mut self, name: &str, trigger: Trigger) {
        let name = if name.chars().count() > MAX_SHOWN_NAME { "(a name too long)" } else { name };
        let transfer = &self.live.transfer;
        let allowed = matches!(trigger, Trigger::Fallback { .. }) || transfer.targets.iter().any(|t| t == name);
        let refusal = if self.switch.is_some() || self.replaying {
            Some("You are already being moved to another server".to_string())
        } else if self.current.as_ref().is_some_and(|l| l.backend.name == name) {
            Some("You are already connected to this server".to_string())
        } else if !allowed || self.live.backend_named(name).is_none() {
            Some(format!("Server {name} is not available"))
        } else if self.client_entity.is_none() {
            Some("You cannot be moved before you have joined".to_string())
        } else {
            None
        };
        let target = self.live.backend_named(name).cloned();
        let (Some(target), None) = (target, refusal.as_ref()) else {
            let refusal = refusal.unwrap_or_default();
            info!(player = %self.identity.name, to = %name, "transfer refused: {refusal}");
            self.metrics.transfer("refused");
            self.chat(&refusal);
            if let Trigger::Fallback { disconnect, .. } = trigger {
                self.to_player.extend_from_slice(&disconnect);
            }
            return;
        };
        let started = Instant::now();
        let deadline = started + transfer.switch_timeout();
        let dial = dial(target.clone(), self.identity.clone(), self.live.limits.backend_connect_timeout());
        self.switch = Some(Switch {
            target,
            trigger,
            started,
            deadline,
            step: SwitchStep::Dialing(Box::pin(dial)),
            reset_sent: false,
            delivered: ServerStep::None,
            held: BytesMut::new(),
            record: Some(BytesMut::new()),
        });
        self.own_keep_alive_at = started + OWN_KEEP_ALIVE_INTERVAL;
    }

    /// Handles the frames of the backend being switched to, up to its Join Game.
    fn joining_frames(&mut self) -> Result<(), End> {
        let forge = self.identity.is_forge();
        loop {
            let Some(Switch {
                step: SwitchStep::Joining(link),
                reset_sent,
                held,
                started,
                deadline,
                record,
                delivered,
                ..
            }) = &mut self.switch
            else {
                return Ok(());
            };
            let frame = match link.frames.try_next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(e) => return self.fail(&format!("it sent a bad frame: {e}")),
            };
            match frame.id {
                KeepAlive::ID => {
                    // Answered by the proxy: the client is still on the old backend.
                    encode(&mut self.to_target, frame.id, &frame.body);
                }
                PluginMessage::CLIENTBOUND_ID if forge && fml::is_handshake(&frame.body) => {
                    if !*reset_sent && is_channel(&frame.body, fml::CHANNEL) {
                        // The new server starts its handshake: the client must forget the old one's first.
                        *reset_sent = true;
                        *deadline = *started + self.live.transfer.forge_handshake_timeout();
                        encode(&mut self.to_player, PluginMessage::CLIENTBOUND_ID, &handshake_reset_fields());
                    }
                    fml::record(record, frame.id, &frame.body);
                    if !is_channel(&frame.body, "REGISTER") {
                        *delivered = (*delivered).max(ServerStep::of(&frame.body));
                    }
                    encode(&mut self.to_player, frame.id, &frame.body);
                }
                JoinGame::ID => {
                    let join = match frame.decode::<JoinGame>() {
                        Ok(j) => j,
                        Err(e) => return self.fail(&format!("its Join Game is malformed: {e}")),
                    };
                    return self.cutover(&join);
                }
                PlayDisconnect::ID => {
                    let reason =
                        frame.decode::<PlayDisconnect>().map(|d| chat_plain(&d.reason_json)).unwrap_or_default();
                    return self.fail(&format!("it disconnected you: {reason}"));
                }
                _ => {
                    if held.len() + frame.body.len() > MAX_HELD_BYTES {
                        return self.fail(&format!("it sent over {MAX_HELD_BYTES} bytes before Join Game"));
                    }
                    encode(held, frame.id, &frame.body);
                }
            }
        }
    }

    /// The new backend's Join Game: reset the client's world, move over, drop the old backend.
    fn cutover(&mut self, join: &JoinGame) -> Result<(), End> {
        let Some(switch) = self.switch.take() else { return Ok(()) };
        let SwitchStep::Joining(link) = switch.step else { return Ok(()) };
        // The rest of a frame begun with the old backend must not reach the new one.
        self.tail_orphaned = true;
        let client = self.client_entity.unwrap_or(join.entity_id);
        let swap = EntityIdSwap::new(client, join.entity_id);
        // What the old server left (scoreboard, teams, tab list, an open window) goes first, then the world.
        let _ = self.leftovers.clear(&mut self.to_player);
        for respawn in world_reset(join) {
            // Cannot fail: the level type was read within the same limit it is written with.
            let _ = respawn.encode_frame(&mut self.to_player);
        }
        // Frames held before the Join Game, now through the swap.
        let mut held = FrameDecoder::new(MAX_FRAME_LEN);
        held.queue_bytes(switch.held);
        let mut body = Vec::new();
        while let Ok(Some(frame)) = held.try_next_frame() {
            if Leftovers::CLIENTBOUND_IDS.contains(&frame.id) {
                self.leftovers.observe(Direction::Clientbound, frame.id, &frame.body);
            }
            if frame.id == PluginMessage::CLIENTBOUND_ID && is_channel(&frame.body, BUNGEE_CHANNEL) {
                continue;
            }
            put_frame(&mut self.to_player, Some(swap), Direction::Clientbound, frame, &mut body);
        }
        let from = match (&switch.trigger, &self.current) {
            (Trigger::Fallback { from, .. }, _) => from.clone(),
            (Trigger::Connect, Some(old)) => old.backend.name.clone(),
            (Trigger::Connect, None) => "-".into(),
        };
        let ms = switch.started.elapsed().as_secs_f64() * 1000.0;
        info!(
            player = %self.identity.name,
            from = %from,
            to = %link.backend.name,
            ms = format_args!("{ms:.1}"),
            "player moved to another backend"
        );
        self.metrics.transfer("moved");
        self.metrics.transfer_seconds.observe(ms / 1000.0);
        if let Trigger::Fallback { from, reason, .. } = &switch.trigger {
            self.chat(&format!("{from} disconnected you: {reason}"));
        }
        // The rest of what the new backend sent, still in its decoder, is relayed as the current backend's.
        // Keep Alive answers queued for the new backend go out with its other traffic now.
        let answers = std::mem::take(&mut self.to_target);
        self.to_backend.extend_from_slice(&answers);
        self.current = Some(link);
        self.fml_record = switch.record;
        self.replaying = false;
        self.swap = Some(swap);
        self.keep_alives.clear();
        self.clientbound()
    }

    /// A switch failed: the player stays (with a chat message saying why), or, when the old backend is gone or
    /// the Forge handshake was reset, is disconnected with the reason.
    fn fail(&mut self, why: &str) -> Result<(), End> {
        let Some(switch) = self.switch.take() else { return Ok(()) };
        let target = switch.target.name.clone();
        let message = format!("Could not connect you to {target}: {why}");
        info!(player = %self.identity.name, to = %target, "transfer failed: {why}");
        // After a reset the client runs the new server's handshake. It can stay only if it has not applied the new
        // registry yet: it then gets the rest of the current server's handshake, from the message its state waits
        // for (a 1.7.10 client takes a HandshakeReset only once its handshake is done, so none is sent now).
        let replay = match (switch.reset_sent, switch.delivered, &self.fml_record) {
            (false, _, _) => Some(None),
            (true, ServerStep::ServerHello, Some(record)) => replay_from(record, ServerStep::ModList).map(Some),
            (true, ServerStep::ModList, Some(record)) => replay_from(record, ServerStep::Registry).map(Some),
            _ => None,
        };
        self.metrics.transfer(if matches!(switch.trigger, Trigger::Fallback { .. }) {
            "fallback_failed"
        } else {
            "failed"
        });
        if let (true, Some(replay)) = (self.current.is_some(), replay) {
            if let Some(rest) = replay {
                self.to_player.extend_from_slice(&rest);
                self.replaying = true;
            }
            self.chat(&message);
            return Ok(());
        }
        match switch.trigger {
            Trigger::Fallback { disconnect, reason, .. } => {
                self.chat(&message);
                self.to_player.extend_from_slice(&disconnect);
                Err(End::Closed(format!("disconnected by the backend ({reason}); fallback {target} failed: {why}")))
            }
            Trigger::Connect => {
                if let Ok(frame) = (PlayDisconnect { reason_json: chat_text(&message) }).to_frame_bytes() {
                    self.to_player.extend_from_slice(&frame);
                }
                Err(End::Closed(message))
            }
        }
    }

    /// Queues a chat line for the player.
    fn chat(&mut self, text: &str) {
        let _ = (ChatMessage { json: chat_text(text) }).encode_frame(&mut self.to_player);
    }

    /// Sends the proxy's own Keep Alive (no backend serves the player right now).
    fn send_own_keep_alive(&mut self) {
        let id = self.next_own_keep_alive;
        self.next_own_keep_alive = self.next_own_keep_alive.wrapping_add(1);
        if self.own_keep_alives.len() >= MAX_UNANSWERED_KEEP_ALIVES {
            self.own_keep_alives.pop_front();
        }
        self.own_keep_alives.push_back(id);
        let _ = (KeepAlive { id }).encode_frame(&mut self.to_player);
        self.own_keep_alive_at = Instant::now() + OWN_KEEP_ALIVE_INTERVAL;
    }
}

/// Connects to `target`, sends the player's opening and reads up to Login Success: the stream and the Play
/// bytes after it, or why not (a readable reason for the chat).
async fn dial(target: Backend, identity: Identity, connect_timeout: Duration) -> Dialed {
    let mut stream = target.connect(identity.client, connect_timeout).await.map_err(|e| match e {
        crate::backend::BackendError::Timeout { .. } => "it did not accept the connection in time".to_string(),
        _ => "it is unreachable".to_string(),
    })?;
    let opening = identity.opening(&target, &[]).map_err(|_| "the handshake could not be forwarded".to_string())?;
    stream.write_all(&opening).await.map_err(|_| "it closed the connection".to_string())?;
    target.metrics.to_backend.inc_by(opening.len() as u64);
    let mut frames = FrameDecoder::new(MAX_LOGIN_FRAME);
    let mut buf = vec![0; READ_CHUNK];
    loop {
        match frames.try_next_frame() {
            Ok(Some(f)) if f.id == LoginSuccess::ID => return Ok((stream, frames.take_buffered())),
            Ok(Some(f)) if f.id == LoginDisconnect::ID => {
                let reason = f.decode::<LoginDisconnect>().map(|d| chat_plain(&d.reason_json)).unwrap_or_default();
                return Err(format!("it refused the login: {reason}"));
            }
            Ok(Some(f)) => {
                return Err(if f.id == 0x01 {
                    "it asked for encryption (online mode); backends behind MoonBridge run in offline mode".into()
                } else {
                    format!("it answered the login with packet {:#04x}", f.id)
                })
            }
            Ok(None) => {}
            Err(e) => return Err(format!("it sent a bad login frame: {e}")),
        }
        stream.readable().await.map_err(|e| format!("read failed: {e}"))?;
        match try_read(&stream, &mut buf) {
            Ok(0) => return Err("it closed the connection during login".into()),
            Ok(n) => {
                target.metrics.to_player.inc_by(n as u64);
                frames.queue_slice(buf.get(..n).unwrap_or_default());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(format!("read failed: {e}")),
        }
    }
}

/// Waits until `stream` is readable; never, without a stream.
async fn readable(stream: Option<&TcpStream>) -> io::Result<()> {
    match stream {
        Some(s) => s.readable().await,
        None => std::future::pending().await,
    }
}

/// One non-blocking read after readiness; `Interrupted` when the wake-up was spurious (not EOF).
fn try_read(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    match stream.try_read(buf) {
        Ok(n) => Ok(n),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(io::ErrorKind::Interrupted.into()),
        Err(e) => Err(e),
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

/// Ordinal of the Forge 1.7.10 client's `COMPLETE` state (`FMLHandshakeClientState`: START 0, HELLO 1,
/// WAITINGSERVERDATA 2, WAITINGSERVERCOMPLETE 3, PENDINGCOMPLETE 4, COMPLETE 5): the phase of its last
/// HandshakeAck.
const FML_CLIENT_COMPLETE: u8 = 5;

/// The data of a Plugin Message (`body`: its fields), if it parses.
fn fml_data(body: &[u8]) -> Option<&[u8]> {
    let mut r = Reader::new(body);
    r.string(moonbridge_protocol::packets::MAX_CHANNEL_CHARS, "channel").ok()?;
    r.i16_bytes("data").ok()
}

/// The frames of a recorded handshake from the first message of step `from` on (`REGISTER` left out), or
/// `None` when the record has no such message.
fn replay_from(record: &BytesMut, from: ServerStep) -> Option<BytesMut> {
    let mut frames = FrameDecoder::new(MAX_FRAME_LEN);
    frames.queue_slice(record);
    let mut out = BytesMut::new();
    while let Ok(Some(f)) = frames.try_next_frame() {
        if is_channel(&f.body, "REGISTER") || (out.is_empty() && ServerStep::of(&f.body) != from) {
            continue;
        }
        encode(&mut out, f.id, &f.body);
    }
    (!out.is_empty()).then_some(out)
}

/// The phase of an `FML|HS` HandshakeAck (discriminator 0xFF, then the sender's state ordinal), if the body is
/// one.
fn fml_ack_phase(body: &[u8]) -> Option<u8> {
    match fml_data(body)? {
        [fml::HANDSHAKE_ACK, phase, ..] => Some(*phase),
        _ => None,
    }
}

/// The fields of the `FML|HS` HandshakeReset Plugin Message.
fn handshake_reset_fields() -> Vec<u8> {
    let mut fields = Vec::with_capacity(10);
    let _ = fml::handshake_reset().encode_fields(&mut fields);
    fields
}

/// Appends a frame.
fn encode(out: &mut BytesMut, id: i32, body: &[u8]) {
    let _ = encode_frame(out, id, body);
}

/// Appends `frame`, with its entity ids through `swap` when it carries any.
fn put_frame(out: &mut BytesMut, swap: Option<EntityIdSwap>, direction: Direction, frame: Frame, body: &mut Vec<u8>) {
    if let Some(swap) = swap.filter(|s| !s.is_identity() && carries_entity_ids(direction, frame.id)) {
        body.clear();
        body.extend_from_slice(&frame.body);
        if swap.rewrite(direction, frame.id, body).is_ok() {
            encode(out, frame.id, body);
            return;
        }
    }
    encode(out, frame.id, &frame.body);
}

/// The plain text of a JSON chat component (its `text` and `extra` parts), for logs and chat lines.
fn chat_plain(json: &str) -> String {
    fn walk(v: &serde_json::Value, out: &mut String) {
        match v {
            serde_json::Value::String(s) => out.push_str(s),
            serde_json::Value::Object(o) => {
                if let Some(t) = o.get("text") {
                    walk(t, out);
                }
                if let Some(serde_json::Value::Array(extra)) = o.get("extra") {
                    extra.iter().for_each(|e| walk(e, out));
                }
            }
            serde_json::Value::Array(a) => a.iter().for_each(|e| walk(e, out)),
            _ => {}
        }
    }
    match serde_json::from_str::<serde_json::Value>(json) {
        Ok(v) => {
            let mut out = String::new();
            walk(&v, &mut out);
            out
        }
        Err(_) => json.to_string(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn chat_plain_reads_text_and_extra() {
        assert_eq!(chat_plain(r#"{"text":"Bye","extra":[{"text":" now"},"!"]}"#), "Bye now!");
        assert_eq!(chat_plain(r#""plain""#), "plain");
        assert_eq!(chat_plain("not json"), "not json");
    }

    #[test]
    fn channels_are_matched_exactly() {
        let mut body = Vec::new();
        PluginMessage { channel: "BungeeCord".into(), data: vec![0, 1] }.encode_fields(&mut body).unwrap();
        assert!(is_channel(&body, BUNGEE_CHANNEL));
        assert!(!is_channel(&body, fml::CHANNEL));
        assert!(!is_channel(&[0xff], BUNGEE_CHANNEL));
    }

    #[test]
    fn frames_pass_through_the_swap_only_when_they_carry_ids() {
        let swap = Some(EntityIdSwap::new(7, 300));
        let mut out = BytesMut::new();
        // S12 Entity Velocity: i32 entity id, then three i16.
        let frame = Frame { id: 0x12, body: BytesMut::from(&[0, 0, 1, 44, 0, 1, 0, 2, 0, 3][..]) };
        put_frame(&mut out, swap, Direction::Clientbound, frame, &mut Vec::new());
        assert_eq!(&out[..], &[11, 0x12, 0, 0, 0, 7, 0, 1, 0, 2, 0, 3]);
        out.clear();
        // S02 Chat carries none: unchanged.
        let frame = Frame { id: 0x02, body: BytesMut::from(&[2, b'{', b'}'][..]) };
        put_frame(&mut out, swap, Direction::Clientbound, frame, &mut Vec::new());
        assert_eq!(&out[..], &[4, 0x02, 2, b'{', b'}']);
    }

    #[test]
    fn keep_alive_ids_are_taken_once() {
        let mut ids = VecDeque::from([1, 2, 3]);
        assert!(take(&mut ids, 2));
        assert!(!take(&mut ids, 2));
        assert_eq!(ids, VecDeque::from([1, 3]));
    }
}
