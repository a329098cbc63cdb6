//! A direction of the relay ([`Flow`]): its byte count, the frame scanner that knows where clientbound frames
//! end, the transfer watch and online mode's AES-CFB8, all in place on the batch in flight; and the one batch
//! read from the backend through it ([`read_batch`]).

use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use moonbridge_protocol::crypto::{Cfb8Decryptor, Cfb8Encryptor, SHARED_SECRET_LEN};
use moonbridge_protocol::transfer::watch::{ClientboundWatch, ServerboundFilter, Verdict};
use moonbridge_protocol::{FrameError, FrameScanner};
use prometheus::IntCounter;
use tokio::net::TcpStream;
use tokio::sync::mpsc;

use crate::labels::StreamDirection;
use crate::metrics::BackendMetrics;
use crate::players::Command;
use crate::resume;
use crate::transfer::{Handed, Ticket};
use crate::unfollowed::{Afterwards, UnfollowedCounter};
use crate::wire::{read_clearing, with_scratch};

/// The player's AES-128-CFB8 stream in online mode (protocol 5: key = IV = the 16-byte shared secret), one
/// state per direction. Both transform in place, so the relay adds no copy and no allocation per batch.
#[derive(Debug)]
pub(crate) struct ClientCipher {
    /// Encrypts what the player receives.
    pub(crate) encrypt: Cfb8Encryptor,
    /// Decrypts what the player sends.
    pub(crate) decrypt: Cfb8Decryptor,
}

impl ClientCipher {
    pub(crate) fn new(shared_secret: &[u8; SHARED_SECRET_LEN]) -> Self {
        Self { encrypt: Cfb8Encryptor::new(shared_secret), decrypt: Cfb8Decryptor::new(shared_secret) }
    }
}

/// What the relay stage starts with.
pub(crate) struct RelayStart<'a> {
    /// The proxy's shutdown, or a kick of this session (a duplicate login).
    pub(crate) shutdown: &'a crate::players::Stop,
    /// How the clientbound stream is followed: nothing (not plaintext Play), its frame boundaries, or the
    /// transfer layer's watch.
    pub(crate) follow: Follow,
    /// Bytes already counted in each direction (handshake, Login Start, first answer; already in the
    /// metrics too).
    pub(crate) up: u64,
    pub(crate) down: u64,
    /// `limits.write_stall_timeout_seconds`.
    pub(crate) write_stall: Duration,
    /// Online mode: the player's AES-CFB8 stream (the backend link stays plaintext). Boxed: the AES key
    /// schedules are about 1.5 KiB, which would otherwise size every session's task.
    pub(crate) cipher: Option<Box<ClientCipher>>,
    /// The backend's series: bytes each way are added per batch (one relaxed atomic add).
    pub(crate) metrics: &'a BackendMetrics,
    /// Carriage v2 resume, when it is on (`limits.resume_window_seconds` > 0); used by v2 WebSocket links only.
    /// Boxed to keep every session's task small.
    pub(crate) resume: Option<Box<resume::ResumeStart>>,
    /// `limits.max_play_frame_bytes`: the longest frame followed either way.
    pub(crate) max_frame_len: usize,
    /// Where the player's filtered stream stands when bytes it sent with its Login Start went ahead with the
    /// opening (`None`: at the start of a frame).
    pub(crate) up_start: Option<Box<UpStart>>,
    /// `[lanes]` on: the clientbound lanes' start (used when the stream's frames are followed).
    pub(crate) lanes: Option<Box<super::lanes::LaneStart>>,
}

/// The serverbound filter's state after the bytes a player sent right after Login Start: the filter, and the
/// head of a frame it held back (it starts the relay's first batch).
pub(crate) struct UpStart {
    pub(crate) filter: ServerboundFilter,
    pub(crate) held: Vec<u8>,
}

/// How a direction follows its plaintext stream.
pub(crate) enum Follow {
    /// Not at all (not plaintext Minecraft frames, or the stream stopped parsing).
    Nothing,
    /// Serverbound, after the filter lost the frames: nothing more goes to the backend (a `BungeeCord` message
    /// could no longer be told apart), and the relay ends with this error.
    Refused(FrameError),
    /// Clientbound, after the transfer watch lost the frames: relayed unparsed, nobody can be switched or moved;
    /// the ticket keeps the session's registration (the player table, the network's claim) until it ends.
    Lost {
        /// Held for what dropping it ends (the registration).
        _kept: Box<Ticket>,
    },
    /// Frame boundaries (clientbound: where the shutdown disconnect may go).
    Frames(FrameScanner),
    /// Clientbound, in a session that can be switched: frame boundaries, and the watch that tells when the
    /// transfer layer takes over ([`moonbridge_protocol::transfer::watch`]).
    Watch(Box<Watching>),
    /// Serverbound, in a session that can be switched: frame boundaries (a handover inside a frame passes its rest
    /// on unparsed), `BungeeCord` messages dropped, and the count of the client's Close Window (C0D) frames,
    /// shared with the clientbound watch.
    Serverbound(Box<ServerboundFilter>, Arc<AtomicU64>),
}

impl std::fmt::Debug for Follow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Nothing => "Nothing",
            Self::Refused(_) => "Refused",
            Self::Lost { .. } => "Lost",
            Self::Frames(_) => "Frames",
            Self::Watch(_) => "Watch",
            Self::Serverbound(..) => "Serverbound",
        })
    }
}

/// The clientbound watch of a session that can be switched, and what it needs for the handover.
pub(crate) struct Watching {
    pub(super) watch: ClientboundWatch,
    /// The client's C0D count (the serverbound direction counts).
    pub(super) closes: Arc<AtomicU64>,
    /// The handover is due: the rest of the batch, from the frame that starts a switch.
    pub(super) rest: Option<Vec<u8>>,
    /// Starts the transfer layer (`None` only in tests).
    pub(super) to: Option<Box<Ticket>>,
    /// The backend has a fallback: losing its connection hands over too (failover).
    failover: bool,
    /// The backend's connection was lost (why): the handover is a failover.
    lost: Option<String>,
    /// Commands from other sessions; one that arrived waits here for a frame boundary.
    commands: Option<mpsc::Receiver<Command>>,
    command: Option<Command>,
    /// The head of a frame the first bytes sent to the player ended in: it starts the relay's first batch.
    pub(crate) first_held: Vec<u8>,
}

impl Watching {
    /// A watch that has followed the first bytes sent to the player and hands over through `to`; `failover`
    /// when losing the backend hands over too; `commands` from other sessions.
    pub(crate) fn new(
        watch: ClientboundWatch,
        to: Option<Box<Ticket>>,
        failover: bool,
        commands: Option<mpsc::Receiver<Command>>,
    ) -> Self {
        let closes = Arc::new(AtomicU64::new(0));
        Self { watch, closes, rest: None, to, failover, lost: None, commands, command: None, first_held: Vec::new() }
    }

    /// A command waits and the stream is between two frames: the handover is due, with `held` (a frame head,
    /// or nothing) as its rest.
    fn due_for_command(&mut self, held: &mut Vec<u8>) {
        if self.command.is_some() && self.rest.is_none() && self.watch.at_boundary() {
            self.rest = Some(std::mem::take(held));
        }
    }
}

/// What a direction does to its bytes besides counting them.
#[derive(Debug)]
enum Transform {
    /// Player → backend in online mode: decrypt before anything looks at the bytes.
    Decrypt(Box<Cfb8Decryptor>),
    /// Backend → player in online mode: encrypt after the frame scanner has seen the plaintext.
    Encrypt(Box<Cfb8Encryptor>),
}

/// One direction of the relay.
#[derive(Debug)]
pub(crate) struct Flow {
    /// Bytes read from the source side so far.
    pub(crate) bytes: u64,
    /// Bytes read but not yet accepted by the destination socket (TCP relay; at most one read's worth).
    pub(super) pending: Vec<u8>,
    /// A frame head a batch ended in, to start the next batch (clientbound under `watch::MAX_HELD` bytes,
    /// serverbound under `watch::MAX_HELD_SERVERBOUND`).
    pub(super) held: Vec<u8>,
    /// How the plaintext stream is followed: frame boundaries of a clientbound stream, for injecting a
    /// disconnect on shutdown; the transfer watch.
    pub(super) follow: Follow,
    /// How long the destination may accept nothing before the relay gives up on it.
    pub(crate) stall: Duration,
    /// Online mode's cipher for this direction.
    transform: Option<Transform>,
    /// `moonbridge_relayed_bytes_total` of this direction and backend; `None` after a handover (the transfer
    /// layer counts under the backend each byte came from or went to).
    pub(super) counter: Option<IntCounter>,
    /// Online mode with lanes: bytes are encrypted when they leave the queue, not when read ([`Flow::seal`]).
    deferred: bool,
    /// Which way this direction goes, and the series that count a stream it stops following.
    direction: StreamDirection,
    unfollowed: UnfollowedCounter,
}

impl Flow {
    /// The two directions a relay starts with: player → backend (decrypting in online mode) and backend →
    /// player (following frames with `scanner`, encrypting in online mode), with the bytes already counted.
    pub(crate) fn pair(start: RelayStart<'_>) -> (Self, Self) {
        let (encrypt, decrypt) = match start.cipher.map(|c| *c) {
            Some(c) => (Some(Transform::Encrypt(Box::new(c.encrypt))), Some(Transform::Decrypt(Box::new(c.decrypt)))),
            None => (None, None),
        };
        let flow = |bytes, follow, transform, counter: &IntCounter, direction| Self {
            bytes,
            pending: Vec::new(),
            held: Vec::new(),
            follow,
            stall: start.write_stall,
            transform,
            counter: Some(counter.clone()),
            deferred: false,
            direction,
            unfollowed: start.metrics.unfollowed.clone(),
        };
        let mut follow = start.follow;
        // The filter goes on from where the bytes sent with Login Start left it.
        let (filter, up_held) = match start.up_start.map(|u| *u) {
            Some(UpStart { filter, held }) => (Box::new(filter), held),
            None => (Box::new(ServerboundFilter::with_limit(start.max_frame_len)), Vec::new()),
        };
        let (up_follow, held) = match &mut follow {
            Follow::Watch(w) => (Follow::Serverbound(filter, Arc::clone(&w.closes)), std::mem::take(&mut w.first_held)),
            // A session whose backend stream was lost at once still keeps the player off the `BungeeCord` channel.
            Follow::Lost { .. } => (Follow::Serverbound(filter, Arc::new(AtomicU64::new(0))), Vec::new()),
            _ => (Follow::Nothing, Vec::new()),
        };
        let mut down = flow(start.down, follow, encrypt, &start.metrics.to_player, StreamDirection::ToPlayer);
        down.held = held;
        let mut up = flow(start.up, up_follow, decrypt, &start.metrics.to_backend, StreamDirection::ToBackend);
        if matches!(up.follow, Follow::Serverbound(..)) {
            up.held = up_held;
        }
        (up, down)
    }

    /// Everything that happens to a batch in flight, in place: decrypt (serverbound), follow, count and scan
    /// the plaintext, encrypt (clientbound). Returns how many bytes from the start may go on now: all of them,
    /// except when the transfer watch holds a frame head back for the next batch or asks for a handover (it
    /// keeps the rest, uncounted and unencrypted).
    pub(crate) fn process(&mut self, data: &mut [u8]) -> usize {
        self.process_from(data, 0)
    }

    /// [`Flow::process`] for a batch whose first `fresh` bytes are a frame head held back from the last batch:
    /// already plaintext, so only the bytes after it are decrypted.
    fn process_from(&mut self, data: &mut [u8], fresh: usize) -> usize {
        if let Some(Transform::Decrypt(d)) = &mut self.transform {
            d.apply(data.get_mut(fresh..).unwrap_or_default());
        }
        let keep = match &mut self.follow {
            Follow::Nothing | Follow::Lost { .. } => data.len(),
            Follow::Refused(_) => 0,
            Follow::Frames(s) => {
                if let Err(e) = s.scan(data) {
                    // Relayed opaquely from here; said once.
                    self.lose_track(e, false);
                }
                data.len()
            }
            Follow::Serverbound(f, closes) => match f.filter(data) {
                Ok(kept) => {
                    closes.store(f.closes(), Ordering::Relaxed);
                    let held = data.get(kept.pass..kept.pass + kept.held).unwrap_or_default();
                    self.held.extend_from_slice(held);
                    kept.pass
                }
                Err(e) => {
                    // A `BungeeCord` message could hide anywhere from here: nothing more reaches the backend.
                    self.lose_track(e, false);
                    self.follow = Follow::Refused(e);
                    0
                }
            },
            Follow::Watch(w) => match w.watch.scan(data, w.closes.load(Ordering::Relaxed)) {
                Ok(Verdict::Pass) => {
                    w.due_for_command(&mut Vec::new());
                    data.len()
                }
                Ok(Verdict::Hold(k)) => {
                    self.held.extend_from_slice(data.get(k..).unwrap_or_default());
                    w.due_for_command(&mut self.held);
                    k
                }
                Ok(Verdict::Handover(k)) => {
                    w.rest = Some(data.get(k..).unwrap_or_default().to_vec());
                    k
                }
                Err(e) => {
                    // Relayed opaquely from here, and the player can no longer be switched or moved.
                    self.lose_track(e, true);
                    if let Follow::Watch(w) = std::mem::replace(&mut self.follow, Follow::Nothing) {
                        if let Some(ticket) = w.to {
                            self.follow = Follow::Lost { _kept: ticket };
                        }
                    }
                    data.len()
                }
            },
        };
        let data = data.get_mut(..keep).unwrap_or_default();
        self.bytes += data.len() as u64;
        if let Some(c) = &self.counter {
            c.inc_by(data.len() as u64);
        }
        if !self.deferred {
            self.seal(data);
        }
        keep
    }

    /// The lanes' start when this (clientbound) direction follows its frames from a boundary and `[lanes]` is
    /// on; from then on the batch is encrypted (online mode) only when it leaves the queue ([`Flow::seal`]).
    pub(crate) fn lanes(&mut self, lanes: Option<Box<super::lanes::LaneStart>>) -> Option<super::lanes::LaneStart> {
        let mut lanes = *lanes?;
        lanes.rest = match &self.follow {
            Follow::Frames(s) => s.remaining()?,
            Follow::Watch(w) => w.watch.remaining(),
            _ => return None,
        };
        self.deferred = true;
        Some(lanes)
    }

    /// The stream stopped parsing (`e`): counted, logged once for this direction (through the process's limiter,
    /// with the session's span), and followed no more. `switchable`: the session could be switched or moved
    /// until now.
    fn lose_track(&mut self, e: FrameError, switchable: bool) {
        let afterwards = match self.direction {
            StreamDirection::ToBackend => Afterwards::Closed,
            StreamDirection::ToPlayer if switchable => Afterwards::UnparsedUnswitchable,
            StreamDirection::ToPlayer => Afterwards::Unparsed,
        };
        if !switchable {
            self.follow = Follow::Nothing;
        }
        self.unfollowed.lost(self.direction, e, afterwards);
    }

    /// The error the relay ends with when this direction refused to go on (the serverbound filter lost the
    /// frames).
    pub(crate) fn refusal(&self) -> Option<io::Error> {
        match &self.follow {
            Follow::Refused(e) => Some(io::Error::new(io::ErrorKind::InvalidData, *e)),
            _ => None,
        }
    }

    /// Encrypts bytes the proxy itself inserts into a clientbound stream (not counted, not scanned).
    pub(super) fn seal(&mut self, data: &mut [u8]) {
        self.seal_now(data);
    }

    /// Where a followed stream stands after the bytes processed so far: bytes left of the frame under way and
    /// the start of a length prefix not finished (`None` when the stream is not followed).
    pub(super) fn position(&self) -> Option<(usize, &[u8])> {
        match &self.follow {
            Follow::Frames(s) => Some((s.remaining().unwrap_or(0), s.prefix())),
            Follow::Watch(w) => Some((w.watch.remaining(), &[])),
            _ => None,
        }
    }

    /// True when this direction encrypts (online mode, clientbound).
    pub(super) fn sealing(&self) -> bool {
        matches!(self.transform, Some(Transform::Encrypt(_)))
    }

    fn seal_now(&mut self, data: &mut [u8]) {
        if let Some(Transform::Encrypt(e)) = &mut self.transform {
            e.apply(data);
        }
    }

    /// Bytes read from the player before the relay started (sent ahead during the login stage): processed like
    /// any batch (a `BungeeCord` message dropped, a frame head held for the next batch) and what may go on is
    /// written to the backend before anything else.
    ///
    /// # Errors
    /// [`Flow::refusal`]: the relay must end (nothing is pending then).
    pub(crate) fn preload(&mut self, early: Vec<u8>) -> io::Result<()> {
        if !early.is_empty() {
            // A head held back from the bytes sent with Login Start starts it.
            let h = self.held.len();
            let mut batch = std::mem::take(&mut self.held);
            batch.extend_from_slice(&early);
            let keep = self.process_from(&mut batch, h);
            batch.truncate(keep);
            self.pending = batch;
        }
        self.refusal().map_or(Ok(()), Err)
    }

    /// [`Flow::process`] for a batch the caller owns (the WebSocket relay's decoded stream bytes): a frame
    /// head held from the last batch starts it, and it is cut to what may go on now.
    ///
    /// # Errors
    /// [`Flow::refusal`]: the relay must end (the batch is empty then).
    pub(crate) fn process_owned(&mut self, batch: &mut BytesMut) -> io::Result<()> {
        let h = self.held.len();
        if h > 0 {
            let mut joined = BytesMut::with_capacity(self.held.len() + batch.len());
            joined.extend_from_slice(&self.held);
            joined.extend_from_slice(batch);
            *batch = joined;
            self.held.clear();
        }
        let keep = self.process_from(batch, h);
        batch.truncate(keep);
        self.refusal().map_or(Ok(()), Err)
    }

    /// The backend's connection was lost (`why`: as the player reads it after the backend's name): when the
    /// session can fail over and the player's stream is between two frames, the handover is due and true is
    /// returned; otherwise the relay ends as before.
    pub(crate) fn fail_over(&mut self, why: &str) -> bool {
        match &mut self.follow {
            Follow::Watch(w) if w.failover && w.rest.is_none() && w.watch.at_boundary() => {
                w.lost = Some(why.to_string());
                w.rest = Some(std::mem::take(&mut self.held));
                true
            }
            _ => false,
        }
    }

    /// True when the clientbound watch asks for the transfer layer (see [`Flow::take_handover`]).
    pub(crate) fn handover_due(&self) -> bool {
        matches!(&self.follow, Follow::Watch(w) if w.rest.is_some())
    }

    /// True when the handover that is due is a failover (the backend's connection is gone).
    pub(crate) fn failing_over(&self) -> bool {
        matches!(&self.follow, Follow::Watch(w) if w.lost.is_some())
    }

    /// Waits for a command from another session and keeps it for the handover (due at the next frame
    /// boundary); never, for a session that takes none. Cancel-safe.
    pub(crate) async fn next_command(&mut self) {
        let Follow::Watch(w) = &mut self.follow else { return std::future::pending().await };
        let (Some(rx), None) = (&mut w.commands, &w.command) else { return std::future::pending().await };
        match rx.recv().await {
            Some(c) => {
                w.command = Some(c);
                w.due_for_command(&mut self.held);
            }
            None => w.commands = None,
        }
    }

    /// Takes what the watch kept for a handover when one is due: the ticket and where the relay stopped
    /// (`up`'s frame under way included). Afterwards `self` follows frame boundaries only and `up` nothing.
    pub(crate) fn take_handover(&mut self, up: &mut Flow) -> Option<(Option<Box<Ticket>>, Handed)> {
        if !self.handover_due() {
            return None;
        }
        let Follow::Watch(w) = std::mem::replace(&mut self.follow, Follow::Nothing) else {
            return None;
        };
        self.follow = Follow::Frames(FrameScanner::with_limit(w.watch.max_frame_len()));
        up.counter = None;
        self.counter = None;
        let Watching { watch, closes, rest, to, lost, commands, command, .. } = *w;
        let tail = match std::mem::replace(&mut up.follow, Follow::Nothing) {
            Follow::Serverbound(f, _) => f.under_way(),
            _ => (0, false),
        };
        // A serverbound frame head held back (`up.held`) starts the player's next batch, which the switchboard
        // parses from that frame's start.
        let watched = watch.finish(closes.load(Ordering::Relaxed));
        Some((to, Handed { rest: rest.unwrap_or_default(), watched, tail, lost, command, commands }))
    }

    /// True when a packet can be inserted into this stream now.
    pub(super) fn at_frame_boundary(&self) -> bool {
        self.pending.is_empty()
            && match &self.follow {
                Follow::Frames(s) => s.at_boundary(),
                Follow::Serverbound(f, _) => f.under_way().0 == 0,
                // Held bytes are the head of a frame not sent yet: the player's stream is between two frames.
                Follow::Watch(w) => w.watch.at_boundary(),
                Follow::Nothing | Follow::Refused(_) | Follow::Lost { .. } => false,
            }
    }
}

/// Reads one batch (at most `max` bytes, at most [`crate::wire::RELAY_CHUNK`]) from the backend into the scratch buffer and
/// passes it through `down` (counted, frames followed, encrypted in online mode), then hands it to `take` before
/// the next read can reuse the buffer. `Ok(None)` when nothing was ready after all, or nothing may go on yet
/// (the transfer watch held it back or asks for a handover: see [`Flow::take_handover`]); `Ok(Some(r))`
/// with `take(&[])` at EOF.
pub(crate) fn read_batch<R>(
    from: &TcpStream,
    down: &mut Flow,
    max: usize,
    take: impl FnOnce(&mut [u8]) -> R,
) -> io::Result<Option<R>> {
    with_scratch(|buf| {
        // A frame head the last batch ended in starts this one.
        let held = down.held.as_slice();
        let h = held.len();
        if let Some(start) = buf.get_mut(..h) {
            start.copy_from_slice(held);
        }
        // At least one new byte: a resume buffer with less room than the held head goes over by under
        // `MAX_HELD` bytes.
        let end = max.max(h + 1).min(buf.len());
        match read_clearing(from, buf.get_mut(h..end).unwrap_or_default()) {
            Ok(n) => {
                down.held.clear();
                if n == 0 {
                    // EOF: a frame head held back can never be completed.
                    return Ok(Some(take(&mut [])));
                }
                let data = buf.get_mut(..h + n).unwrap_or_default();
                let keep = down.process_from(data, h);
                if let Some(e) = down.refusal() {
                    return Err(e);
                }
                if keep == 0 {
                    return Ok(None);
                }
                Ok(Some(take(data.get_mut(..keep).unwrap_or_default())))
            }
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => Ok(None),
            Err(e) => Err(e),
        }
    })
}

#[cfg(test)]
mod tests;
