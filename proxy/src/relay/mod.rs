//! The relay: bytes both ways between a player and a backend once the backend has answered the login.
//!
//! One policy for every transport, written once here and used by both loops:
//! - [`Flow`]: per direction, the byte count, the frame scanner that knows where clientbound frames end,
//!   and online mode's AES-CFB8 (decrypt what the player sends, encrypt what it receives), all in place on the
//!   batch in flight;
//! - [`within_stall`]: a side that accepts no byte for `limits.write_stall_timeout_seconds` while the proxy
//!   has data for it ends the relay (a peer that stopped reading cannot pin a session);
//! - [`inject_shutdown`]: on proxy shutdown the player first gets what the backend already sent, then, when
//!   the clientbound stream is plaintext and between two frames, a Play Disconnect with
//!   [`SHUTDOWN_REASON`];
//! - [`Follow`]: for a player who can be moved, the clientbound transfer watch
//!   ([`moonbridge_protocol::transfer::watch`]): a frame head a batch ends in is held for the next batch, and at
//!   the first frame that starts a switch the loop hands the backend connection over ([`BackendSide`],
//!   [`Handover`]) and goes on against the transfer layer's hop;
//! - [`RelayEnd`]: how a relay ended, for the session log.
//!
//! The loops: [`tcp`] (two socket pumps, one read and one write per batch, zero-copy through a per-thread
//! scratch buffer) and [`ws`] (WebSocket messages in, backend bytes out, and the other way; keepalive Pings;
//! close codes). Where a WebSocket message becomes backend bytes: [`ws`].

use std::cell::RefCell;
use std::io;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use moonbridge_protocol::crypto::{Cfb8Decryptor, Cfb8Encryptor, SHARED_SECRET_LEN};
use moonbridge_protocol::packets::{chat_text, Packet, PlayDisconnect};
use moonbridge_protocol::transfer::watch::{ClientboundWatch, Verdict, Watched};
use moonbridge_protocol::transfer::Leftovers;
use moonbridge_protocol::FrameScanner;
use prometheus::IntCounter;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tokio_util::sync::CancellationToken;
use tracing::warn;

use crate::metrics::BackendMetrics;

pub(crate) mod resume;
pub(crate) mod tcp;
pub(crate) mod ws;
pub(crate) mod ws_resume;

/// Largest single read in the relay, in bytes (per direction, per batch).
pub(crate) const RELAY_CHUNK: usize = 256 * 1024;

/// Stream bytes a player may send ahead while the login stage waits for the backend or the session server, in
/// bytes (any transport); beyond this the proxy stops reading until the relay starts (backpressure, nothing is
/// dropped).
pub(crate) const EARLY_DATA_LIMIT: usize = 4 * 1024;

/// After one side sent FIN, how long the other direction may still run before both sockets are closed.
pub(crate) const HALF_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a shutdown waits for pending bytes and the disconnect packet to reach the player.
pub(crate) const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

/// How long an orderly close keeps reading (and discarding) after sending FIN or a WebSocket Close, so a
/// final message is not lost to a reset when the peer still had bytes in flight.
pub(crate) const LINGER: Duration = Duration::from_secs(1);

/// Shown to players when the proxy stops.
pub(crate) const SHUTDOWN_REASON: &str = "Proxy is restarting, please reconnect in a moment";

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0; RELAY_CHUNK]);
}

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
    pub(crate) shutdown: &'a CancellationToken,
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
}

/// How a direction follows its plaintext stream.
pub(crate) enum Follow {
    /// Not at all (not plaintext Minecraft frames, or the stream stopped parsing).
    Nothing,
    /// Frame boundaries (clientbound: where the shutdown disconnect may go).
    Frames(FrameScanner),
    /// Clientbound, in a session that can be moved: frame boundaries, and the watch that tells when the
    /// transfer layer takes over ([`moonbridge_protocol::transfer::watch`]).
    Watch(Box<Watching>),
    /// Serverbound, in a session that can be moved: frame boundaries (a handover inside a frame passes its rest
    /// on unparsed) and the count of the client's Close Window (C0D) frames, shared with the clientbound watch.
    Closes(FrameScanner, Arc<AtomicU64>),
}

impl std::fmt::Debug for Follow {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Nothing => "Nothing",
            Self::Frames(_) => "Frames",
            Self::Watch(_) => "Watch",
            Self::Closes(..) => "Closes",
        })
    }
}

/// The clientbound watch of a session that can be moved, and what it needs for the handover.
pub(crate) struct Watching {
    watch: ClientboundWatch,
    /// The client's C0D count (the serverbound direction counts).
    closes: Arc<AtomicU64>,
    /// A frame head a batch ended in, to start the next batch (under `MAX_HELD` bytes).
    held: Vec<u8>,
    /// The handover is due: the rest of the batch, from the frame that starts a switch.
    rest: Option<Vec<u8>>,
    /// Starts the transfer layer.
    to: Box<dyn Handover>,
}

impl Watching {
    /// A watch that has followed `first` (bytes already sent to the player) and hands over through `to`.
    pub(crate) fn new(watch: ClientboundWatch, held: Vec<u8>, to: Box<dyn Handover>) -> Self {
        Self { watch, closes: Arc::new(AtomicU64::new(0)), held, rest: None, to }
    }
}

/// Starts the transfer layer behind a relay (`crate::transfer`, which depends on this module, not the other
/// way).
pub(crate) trait Handover: Send {
    /// Starts the transfer layer on the old `backend` connection and the switchboard's end of the `hop`,
    /// continuing from `handed`; returns its task.
    fn start(self: Box<Self>, backend: TcpStream, hop: TcpStream, handed: Handed) -> JoinHandle<()>;
}

/// How long opening the transfer hop may take (a loopback connect: microseconds unless the host is out of
/// resources, such as a full connection-tracking table that drops the SYN).
const HOP_TIMEOUT: Duration = Duration::from_secs(5);

/// A connected pair of loopback TCP sockets: the relay works on the first, the transfer layer on the second.
///
/// # Errors
/// Binding, connecting or accepting on 127.0.0.1 failed or took over [`HOP_TIMEOUT`], or another process
/// connected first (usually the proxy is out of file descriptors or local ports); logged here as a warning.
pub(crate) async fn hop() -> io::Result<(TcpStream, TcpStream)> {
    let open = async {
        let listener = tokio::net::TcpListener::bind((std::net::Ipv4Addr::LOCALHOST, 0)).await?;
        let address = listener.local_addr()?;
        let (relay_end, (switch_end, peer)) = tokio::try_join!(TcpStream::connect(address), listener.accept())?;
        if relay_end.local_addr()? != peer {
            return Err(io::Error::other("another process connected to the transfer hop first"));
        }
        relay_end.set_nodelay(true)?;
        switch_end.set_nodelay(true)?;
        Ok((relay_end, switch_end))
    };
    tokio::time::timeout(HOP_TIMEOUT, open)
        .await
        .unwrap_or_else(|_| {
            Err(io::Error::new(io::ErrorKind::TimedOut, format!("not open within {}s", HOP_TIMEOUT.as_secs())))
        })
        .inspect_err(|e| warn!("transfer hop could not be opened: {e}"))
}

/// Replaces `backend` with the relay's end of `hop` (from [`hop`]) and starts the transfer layer behind it
/// through `to`; returns its task.
pub(crate) fn start_over(
    to: Box<dyn Handover>,
    backend: &mut TcpStream,
    (relay_end, switch_end): (TcpStream, TcpStream),
    handed: Handed,
) -> JoinHandle<()> {
    let old = std::mem::replace(backend, relay_end);
    to.start(old, switch_end, handed)
}

/// Where the relay stopped, for the transfer layer that goes on from there.
pub(crate) struct Handed {
    /// Clientbound bytes read from the backend and not delivered, from a frame start.
    pub(crate) rest: Vec<u8>,
    /// What the watch learned (the player's entity id, the Forge handshake, the leftovers).
    pub(crate) watched: Watched,
    /// Serverbound: the frame under way at the backend (its rest is passed on unparsed first).
    pub(crate) tail: FrameScanner,
}

/// The relay's backend connection: the backend itself, or from a handover on the hop to the transfer layer
/// (which then owns the backend connection).
pub(crate) struct BackendSide {
    stream: TcpStream,
    /// The transfer layer's task, from a handover on.
    switchboard: Option<JoinHandle<()>>,
}

impl BackendSide {
    /// The backend connection, as the relay starts on it.
    pub(crate) fn new(stream: TcpStream, switchboard: Option<JoinHandle<()>>) -> Self {
        Self { stream, switchboard }
    }

    /// The socket the relay reads and writes.
    pub(crate) fn stream(&self) -> &TcpStream {
        &self.stream
    }

    /// True when the clientbound watch asks for the transfer layer.
    pub(crate) fn handover_due(down: &Flow) -> bool {
        matches!(&down.follow, Follow::Watch(w) if w.rest.is_some())
    }

    /// Hands the backend connection over to the transfer layer when [`BackendSide::handover_due`] (otherwise
    /// does nothing): the relay goes on, on the hop, with the same player, cipher and counts. Serverbound bytes
    /// the relay still holds must have reached the backend first.
    ///
    /// # Errors
    /// The hop could not be opened: the session cannot go on (the frame that asked for the switch is not
    /// delivered).
    pub(crate) async fn hand_over(&mut self, up: &mut Flow, down: &mut Flow) -> io::Result<()> {
        if !Self::handover_due(down) {
            return Ok(());
        }
        // Opened before anything is taken from the directions, so a cancelled or failed wait changes nothing.
        let hop = hop().await?;
        let Follow::Watch(w) = std::mem::replace(&mut down.follow, Follow::Frames(FrameScanner::new())) else {
            return Ok(());
        };
        up.counter = None;
        down.counter = None;
        let Watching { watch, closes, rest, to, .. } = *w;
        let tail = match std::mem::replace(&mut up.follow, Follow::Nothing) {
            Follow::Closes(tail, _) => tail,
            _ => FrameScanner::new(),
        };
        let handed =
            Handed { rest: rest.unwrap_or_default(), watched: watch.finish(closes.load(Ordering::Relaxed)), tail };
        self.switchboard = Some(start_over(to, &mut self.stream, hop, handed));
        Ok(())
    }

    /// Closes the relay's socket (the backend connection, or the hop) and returns the transfer layer's task,
    /// which ends once it sees the hop closed (closing the old backend): the session awaits it last.
    pub(crate) fn close(self) -> Option<JoinHandle<()>> {
        drop(self.stream);
        self.switchboard
    }
}

/// What the relay stage reports.
pub(crate) struct RelayReport {
    pub(crate) up: u64,
    pub(crate) down: u64,
    pub(crate) end: RelayEnd,
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
    pending: Vec<u8>,
    /// How the plaintext stream is followed: frame boundaries of a clientbound stream, for injecting a
    /// disconnect on shutdown; the transfer watch.
    follow: Follow,
    /// How long the destination may accept nothing before the relay gives up on it.
    pub(crate) stall: Duration,
    /// Online mode's cipher for this direction.
    transform: Option<Transform>,
    /// `moonbridge_relayed_bytes_total` of this direction and backend; `None` after a handover (the transfer
    /// layer counts under the backend each byte came from or went to).
    counter: Option<IntCounter>,
}

impl Flow {
    /// The two directions a relay starts with: player → backend (decrypting in online mode) and backend →
    /// player (following frames with `scanner`, encrypting in online mode), with the bytes already counted.
    pub(crate) fn pair(start: RelayStart<'_>) -> (Self, Self) {
        let (encrypt, decrypt) = match start.cipher.map(|c| *c) {
            Some(c) => (Some(Transform::Encrypt(Box::new(c.encrypt))), Some(Transform::Decrypt(Box::new(c.decrypt)))),
            None => (None, None),
        };
        let direction = |bytes, follow, transform, counter: &IntCounter| Self {
            bytes,
            pending: Vec::new(),
            follow,
            stall: start.write_stall,
            transform,
            counter: Some(counter.clone()),
        };
        let up_follow = match &start.follow {
            Follow::Watch(w) => Follow::Closes(FrameScanner::new(), Arc::clone(&w.closes)),
            _ => Follow::Nothing,
        };
        (
            direction(start.up, up_follow, decrypt, &start.metrics.to_backend),
            direction(start.down, start.follow, encrypt, &start.metrics.to_player),
        )
    }

    /// Everything that happens to a batch in flight, in place: decrypt (serverbound), follow, count and scan
    /// the plaintext, encrypt (clientbound). Returns how many bytes from the start may go on now: all of them,
    /// except when the transfer watch holds a frame head back for the next batch or asks for a handover (it
    /// keeps the rest, uncounted and unencrypted).
    pub(crate) fn process(&mut self, data: &mut [u8]) -> usize {
        if let Some(Transform::Decrypt(d)) = &mut self.transform {
            d.apply(data);
        }
        let keep = match &mut self.follow {
            Follow::Nothing => data.len(),
            Follow::Frames(s) => {
                if s.scan(data).is_err() {
                    // A stream that stops parsing (backend encryption, garbage) simply loses its scanner.
                    self.follow = Follow::Nothing;
                }
                data.len()
            }
            Follow::Closes(s, closes) => {
                let mut n = 0;
                if s.scan_ids(data, |id| n += u64::from(i32::from(id) == Leftovers::SERVERBOUND_ID)).is_err() {
                    self.follow = Follow::Nothing;
                } else if n > 0 {
                    closes.fetch_add(n, Ordering::Relaxed);
                }
                data.len()
            }
            Follow::Watch(w) => match w.watch.scan(data, w.closes.load(Ordering::Relaxed)) {
                Ok(Verdict::Pass) => data.len(),
                Ok(Verdict::Hold(k)) => {
                    w.held.extend_from_slice(data.get(k..).unwrap_or_default());
                    k
                }
                Ok(Verdict::Handover(k)) => {
                    w.rest = Some(data.get(k..).unwrap_or_default().to_vec());
                    k
                }
                Err(_) => {
                    // Not Minecraft frames after all: relayed opaquely, and nobody can be moved.
                    self.follow = Follow::Nothing;
                    data.len()
                }
            },
        };
        let data = data.get_mut(..keep).unwrap_or_default();
        self.bytes += data.len() as u64;
        if let Some(c) = &self.counter {
            c.inc_by(data.len() as u64);
        }
        self.seal(data);
        keep
    }

    /// Encrypts bytes the proxy itself inserts into a clientbound stream (not counted, not scanned).
    fn seal(&mut self, data: &mut [u8]) {
        if let Some(Transform::Encrypt(e)) = &mut self.transform {
            e.apply(data);
        }
    }

    /// Bytes read from the player before the relay started (sent ahead during the login stage): processed like
    /// any batch and written to the backend before anything else.
    pub(crate) fn preload(&mut self, mut early: Vec<u8>) {
        if !early.is_empty() {
            self.process(&mut early);
            self.pending = early;
        }
    }

    /// True when a packet can be inserted into this stream now.
    fn at_frame_boundary(&self) -> bool {
        self.pending.is_empty()
            && match &self.follow {
                Follow::Frames(s) | Follow::Closes(s, _) => s.at_boundary(),
                // Held bytes are the head of a frame not sent yet: the player's stream is between two frames.
                Follow::Watch(w) => w.watch.at_boundary(),
                Follow::Nothing => false,
            }
    }
}

/// Why [`crate::session::Player::during`] ended before its work: the player left (EOF, reset, a Close, silence)
/// or broke the carriage. The work (a backend or session-server wait) is dropped.
#[derive(Debug, thiserror::Error)]
pub(crate) enum PlayerGone {
    #[error("player left: {0}")]
    Left(String),
    #[error("player broke the protocol: {0}")]
    Fault(String),
}

/// Which side a relay event concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Player,
    Backend,
}

impl Side {
    fn other(self) -> Self {
        match self {
            Self::Player => Self::Backend,
            Self::Backend => Self::Player,
        }
    }
}

impl std::fmt::Display for Side {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Player => "player",
            Self::Backend => "backend",
        })
    }
}

/// Why a relay ended.
#[derive(Debug)]
pub(crate) enum RelayEnd {
    /// That side closed first (FIN, WebSocket Close), and the other finished in time.
    Closed(Side),
    /// That side closed first, and the other did not finish within [`HALF_CLOSE_TIMEOUT`].
    HalfCloseTimeout(Side),
    /// An I/O or protocol error on that side (a write stall is a `TimedOut` error on the side that stalled).
    Error(Side, io::Error),
    /// The proxy is shutting down.
    Shutdown,
    /// Carriage v2: the player's connection was lost and no resume came within the window (seconds).
    NotResumed { window: u64 },
}

impl std::fmt::Display for RelayEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Closed(s) => write!(f, "{s} closed"),
            Self::HalfCloseTimeout(s) => write!(f, "{s} closed; other side did not finish in time"),
            Self::Error(s, e) => write!(f, "{s} error: {e}"),
            Self::Shutdown => f.write_str("proxy shutdown"),
            Self::NotResumed { window } => write!(f, "player connection lost and not resumed within {window}s"),
        }
    }
}

/// The Play Disconnect frame (protocol 5, packet 0x40 with a JSON chat reason) sent to players on shutdown.
pub(crate) fn shutdown_disconnect_frame() -> Vec<u8> {
    (PlayDisconnect { reason_json: chat_text(SHUTDOWN_REASON) })
        .to_frame_bytes()
        .map(|b| b.to_vec())
        .unwrap_or_default()
}

/// The write-stall policy: runs `write` (one write, or a wait for writability), failing with `TimedOut` when it
/// makes no progress for `stall`. `side` is the side being written to.
pub(crate) async fn within_stall<T>(
    stall: Duration,
    side: Side,
    write: impl std::future::Future<Output = io::Result<T>>,
) -> io::Result<T> {
    match tokio::time::timeout(stall, write).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("{side} accepted no data for {}s (limits.write_stall_timeout_seconds)", stall.as_secs()),
        )),
    }
}

/// Where the player's bytes go, for [`inject_shutdown`]: a TCP socket or a WebSocket.
pub(crate) trait PlayerSink {
    /// Writes what is still pending for the player (TCP relay) or nothing (WebSocket relay).
    async fn drain(&mut self, down: &mut Flow) -> io::Result<()>;
    /// Sends bytes to the player as one write or one message.
    async fn send(&mut self, bytes: Vec<u8>) -> io::Result<()>;
}

/// The shutdown step of every relay: within [`SHUTDOWN_FLUSH_TIMEOUT`], the player gets what the backend
/// already sent and then, at a frame boundary of a plaintext stream, the Play Disconnect (encrypted in online
/// mode). The transport's own close (FIN, WebSocket Close 1001) follows in the caller.
pub(crate) async fn inject_shutdown(sink: &mut impl PlayerSink, down: &mut Flow) {
    let _ = tokio::time::timeout(SHUTDOWN_FLUSH_TIMEOUT, async {
        sink.drain(down).await?;
        if down.at_frame_boundary() {
            let mut disconnect = shutdown_disconnect_frame();
            down.seal(&mut disconnect);
            sink.send(disconnect).await?;
        }
        io::Result::Ok(())
    })
    .await;
}

/// Reads from a shared socket like `try_read`, but a read that returns less than `buf.len()` also marks the
/// socket not-readable (as tokio's own `poll_read` does): with epoll, a short read means the socket buffer is
/// empty, so the next wait goes straight to epoll instead of costing a `recv` that fails with EAGAIN.
pub(crate) fn read_clearing(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    use std::io::Read;
    let cap = buf.len();
    let mut got = 0;
    let r = stream.try_io(tokio::io::Interest::READABLE, || {
        let sock = socket2::SockRef::from(stream);
        let n = (&*sock).read(buf)?;
        got = n;
        if n > 0 && n < cap {
            Err(io::ErrorKind::WouldBlock.into())
        } else {
            Ok(n)
        }
    });
    match r {
        Err(e) if e.kind() == io::ErrorKind::WouldBlock && got > 0 => Ok(got),
        other => other,
    }
}

/// Runs `f` with this worker thread's relay scratch buffer ([`RELAY_CHUNK`] bytes). `f` must not await.
pub(crate) fn with_scratch<R>(f: impl FnOnce(&mut [u8]) -> R) -> R {
    SCRATCH.with_borrow_mut(|buf| f(buf))
}

/// Reads one batch (at most `max` bytes, at most [`RELAY_CHUNK`]) from the backend into the scratch buffer and
/// passes it through `down` (counted, frames followed, encrypted in online mode), then hands it to `take` before
/// the next read can reuse the buffer. `Ok(None)` when nothing was ready after all, or nothing may go on yet
/// (the transfer watch held it back or asks for a handover: see [`BackendSide::handover_due`]); `Ok(Some(r))`
/// with `take(&[])` at EOF.
pub(crate) fn read_batch<R>(
    from: &TcpStream,
    down: &mut Flow,
    max: usize,
    take: impl FnOnce(&mut [u8]) -> R,
) -> io::Result<Option<R>> {
    with_scratch(|buf| {
        // A frame head the last batch ended in starts this one.
        let held = match &down.follow {
            Follow::Watch(w) => w.held.as_slice(),
            _ => &[],
        };
        let h = held.len();
        if let Some(start) = buf.get_mut(..h) {
            start.copy_from_slice(held);
        }
        // At least one new byte: a resume buffer with less room than the held head goes over by under
        // `MAX_HELD` bytes.
        let end = max.max(h + 1).min(buf.len());
        match read_clearing(from, buf.get_mut(h..end).unwrap_or_default()) {
            Ok(n) => {
                if let Follow::Watch(w) = &mut down.follow {
                    w.held.clear();
                }
                if n == 0 {
                    // EOF: a frame head held back can never be completed.
                    return Ok(Some(take(&mut [])));
                }
                let data = buf.get_mut(..h + n).unwrap_or_default();
                let keep = down.process(data);
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

/// Writes all of `data` to a shared socket (readiness + `try_write`, so both directions can use one socket),
/// under the write-stall policy.
pub(crate) async fn write_all(to: &TcpStream, mut data: &[u8], stall: Duration, side: Side) -> io::Result<()> {
    while !data.is_empty() {
        within_stall(stall, side, to.writable()).await?;
        match to.try_write(data) {
            Ok(n) => data = data.get(n..).unwrap_or_default(),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => {}
            Err(e) => return Err(e),
        }
    }
    Ok(())
}

/// Reads and discards from a shared socket until EOF, an error, or `within`.
pub(crate) async fn discard_until_eof(from: &TcpStream, within: Duration) {
    let _ = tokio::time::timeout(within, async {
        loop {
            if from.readable().await.is_err() {
                return;
            }
            let done = with_scratch(|buf| match from.try_read(buf) {
                Ok(0) => true,
                Ok(_) => false,
                Err(e) => e.kind() != io::ErrorKind::WouldBlock,
            });
            if done {
                return;
            }
        }
    })
    .await;
}

#[cfg(test)]
mod tests {
    use super::*;
    use moonbridge_protocol::transfer::watch::MAX_HELD;

    #[test]
    fn a_direction_counts_scans_and_ciphers_in_place() {
        let secret = [7u8; SHARED_SECRET_LEN];
        let shutdown = CancellationToken::new();
        let metrics = crate::metrics::Metrics::new().unwrap().backend("b");
        let start = RelayStart {
            shutdown: &shutdown,
            follow: Follow::Frames(FrameScanner::new()),
            up: 10,
            down: 20,
            write_stall: Duration::from_secs(1),
            cipher: Some(Box::new(ClientCipher::new(&secret))),
            metrics: &metrics,
            resume: None,
        };
        let (mut up, mut down) = Flow::pair(start);
        // Clientbound: two whole frames, scanned as plaintext, then encrypted.
        let plain = [0x02, 0x00, 0x01, 0x01, 0x00];
        let mut batch = plain;
        down.process(&mut batch);
        assert_eq!(down.bytes, 25);
        assert!(down.at_frame_boundary());
        let mut player_side = ClientCipher::new(&secret);
        let mut seen = batch;
        player_side.decrypt.apply(&mut seen);
        assert_eq!(seen, plain, "the player decrypts what the relay encrypted");
        // Half a frame: not a boundary any more.
        let mut half = [0x05, 0x00];
        down.process(&mut half);
        assert!(!down.at_frame_boundary());
        // Serverbound: decrypted before counting.
        let mut sent = *b"hello";
        player_side.encrypt.apply(&mut sent);
        up.process(&mut sent);
        assert_eq!(&sent, b"hello");
        assert_eq!(up.bytes, 15);
    }

    /// Stands in for the transfer layer (`crate::transfer`, tested on live sockets in `tests/tests/transfer.rs`):
    /// keeps what the relay handed over.
    struct Recorder(std::sync::mpsc::Sender<Handed>);

    impl Handover for Recorder {
        fn start(self: Box<Self>, _backend: TcpStream, _hop: TcpStream, handed: Handed) -> JoinHandle<()> {
            self.0.send(handed).unwrap();
            tokio::spawn(async {})
        }
    }

    fn frame(id: i32, fields: &[u8]) -> Vec<u8> {
        let mut out = bytes::BytesMut::new();
        moonbridge_protocol::frame::encode_frame(&mut out, id, fields).unwrap();
        out.to_vec()
    }

    #[tokio::test]
    async fn the_watch_holds_frame_heads_back_and_hands_over_at_a_connect_in_tiny_reads() {
        use moonbridge_protocol::packets::PluginMessage;
        use moonbridge_protocol::transfer::BungeeRequest;
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let mut backend = TcpStream::connect(listener.local_addr().unwrap()).await.unwrap();
        let (relay_end, _) = listener.accept().await.unwrap();
        // Join Game (entity 9), an objective, a chat line, then BungeeCord's Connect and what follows it.
        let mut join = 9i32.to_be_bytes().to_vec();
        join.extend_from_slice(&[0, 0, 1, 20, 7, b'd', b'e', b'f', b'a', b'u', b'l', b't']);
        let mut connect = Vec::new();
        let data = BungeeRequest::connect_payload("lobby").unwrap();
        PluginMessage { channel: "BungeeCord".into(), data }.encode_fields(&mut connect).unwrap();
        let before = [frame(0x01, &join), frame(0x3b, &[1, b'o', 1, b'O', 0]), frame(0x02, b"\x04\"hi\"")].concat();
        let after = [frame(0x3f, &connect), frame(0x00, &[0, 0, 0, 5])].concat();
        tokio::io::AsyncWriteExt::write_all(&mut backend, &[before.clone(), after.clone()].concat()).await.unwrap();

        let secret = [3u8; SHARED_SECRET_LEN];
        let shutdown = CancellationToken::new();
        let metrics = crate::metrics::Metrics::new().unwrap().backend("b");
        let (tx, rx) = std::sync::mpsc::channel();
        let watching = Watching::new(ClientboundWatch::new(false), Vec::new(), Box::new(Recorder(tx)));
        let start = RelayStart {
            shutdown: &shutdown,
            follow: Follow::Watch(Box::new(watching)),
            up: 0,
            down: 0,
            write_stall: Duration::from_secs(1),
            cipher: Some(Box::new(ClientCipher::new(&secret))),
            metrics: &metrics,
            resume: None,
        };
        let (mut up, mut down) = Flow::pair(start);
        // Serverbound: a Close Window (C0D), then half of a Chat Message.
        let mut player = ClientCipher::new(&secret);
        let mut sent = [frame(0x0d, &[1]), vec![0x05, 0x01]].concat();
        player.encrypt.apply(&mut sent);
        assert_eq!(up.process(&mut sent), 5);
        let mut passed = Vec::new();
        while !BackendSide::handover_due(&down) {
            tokio::time::timeout(Duration::from_secs(5), relay_end.readable()).await.unwrap().unwrap();
            // Reads of at most 5 bytes: every frame head is split at least once.
            if let Some(data) = read_batch(&relay_end, &mut down, 5, |d| d.to_vec()).unwrap() {
                assert!(!data.is_empty(), "no EOF before the handover");
                passed.extend_from_slice(&data);
            }
        }
        player.decrypt.apply(&mut passed);
        assert_eq!(passed, before, "everything before the Connect reached the player, encrypted once");
        assert_eq!(down.bytes, before.len() as u64, "the bytes not delivered are not counted");
        assert!(down.at_frame_boundary());
        let mut side = BackendSide::new(relay_end, None);
        side.hand_over(&mut up, &mut down).await.unwrap();
        let Handed { rest, watched, mut tail } = rx.try_recv().unwrap();
        assert!(rest.len() <= 5 + MAX_HELD && after.starts_with(&rest), "the rest starts at the Connect");
        assert_eq!(rest.first(), after.first());
        assert_eq!(watched.client_entity, Some(9));
        let mut objective = Leftovers::default();
        objective.observe(moonbridge_protocol::transfer::Direction::Clientbound, 0x3b, &[1, b'o', 1, b'O', 0]);
        assert_eq!(watched.leftovers, objective);
        // The serverbound frame under way: 4 more bytes finish it.
        assert_eq!(tail.finish_frame(&[1, 2, 3, 4, 9, 9]).unwrap(), 4);
        assert!(matches!(down.follow, Follow::Frames(_)) && matches!(up.follow, Follow::Nothing));
        side.close().unwrap().await.unwrap();
    }

    #[tokio::test(start_paused = true)]
    async fn the_stall_policy_names_the_side_that_stopped_reading() {
        let never = std::future::pending::<io::Result<()>>();
        let e = within_stall(Duration::from_secs(60), Side::Backend, never).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(e.to_string(), "backend accepted no data for 60s (limits.write_stall_timeout_seconds)");
        assert_eq!(Side::Backend.other(), Side::Player);
    }
}
