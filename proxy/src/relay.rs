//! The TCP relay: a byte stream both ways once the backend has answered the login.
//!
//! - One read and one write per batch: a read lands in a per-worker-thread scratch buffer and is written to the
//!   other socket at once. Only what the other socket cannot take yet is copied into the session's own
//!   `pending` buffer, and no more is read from that side until it has drained (backpressure). An idle session
//!   therefore holds no relay buffer at all, and a busy one at most one read's worth per direction.
//! - A FIN from one side is passed on as a FIN (`shutdown(Write)`) to the other; the other direction then has
//!   [`HALF_CLOSE_TIMEOUT`] to finish before both sockets are closed, so no task or socket lingers.
//! - A read or write error on either side ends both directions at once, and so does a side that accepts no
//!   byte for `limits.write_stall_timeout_seconds` (a peer that stopped reading cannot pin a session).

use std::cell::RefCell;
use std::io;
use std::net::Shutdown;
use std::time::Duration;

use moonbridge_protocol::crypto::{Cfb8Decryptor, Cfb8Encryptor};
use moonbridge_protocol::FrameScanner;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::session::RelayStart;

/// Largest single read in the relay, in bytes (per direction, per batch).
pub(crate) const RELAY_CHUNK: usize = 256 * 1024;

/// After one side sent FIN, how long the other direction may still run before both sockets are closed.
pub(crate) const HALF_CLOSE_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a shutdown waits for pending bytes and the disconnect packet to reach the player.
pub(crate) const SHUTDOWN_FLUSH_TIMEOUT: Duration = Duration::from_secs(2);

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
    pub(crate) fn new(shared_secret: &[u8; moonbridge_protocol::crypto::SHARED_SECRET_LEN]) -> Self {
        Self { encrypt: Cfb8Encryptor::new(shared_secret), decrypt: Cfb8Decryptor::new(shared_secret) }
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
pub(crate) struct Direction {
    /// Bytes read from the source side so far.
    pub(crate) bytes: u64,
    /// Bytes read but not yet accepted by the destination socket (at most one read's worth).
    pending: Vec<u8>,
    /// Frame boundaries of a plaintext clientbound stream, for injecting a disconnect on shutdown.
    pub(crate) scanner: Option<FrameScanner>,
    /// How long the destination may accept nothing before the relay gives up on it.
    stall: Duration,
    /// Online mode's cipher for this direction.
    transform: Option<Transform>,
}

impl Direction {
    /// The two directions a relay starts with: player → backend (decrypting in online mode) and backend →
    /// player (following frames with `scanner`, encrypting in online mode), with the bytes already counted.
    pub(crate) fn pair(start: RelayStart<'_>) -> (Self, Self) {
        let (encrypt, decrypt) = match start.cipher.map(|c| *c) {
            Some(c) => (Some(Transform::Encrypt(Box::new(c.encrypt))), Some(Transform::Decrypt(Box::new(c.decrypt)))),
            None => (None, None),
        };
        let direction = |bytes, scanner, transform| Self {
            bytes,
            pending: Vec::new(),
            scanner,
            stall: start.write_stall,
            transform,
        };
        (direction(start.up, None, decrypt), direction(start.down, start.scanner, encrypt))
    }

    /// Everything that happens to a batch in flight, in place: decrypt (serverbound), count and scan the
    /// plaintext, encrypt (clientbound).
    pub(crate) fn process(&mut self, data: &mut [u8]) {
        if let Some(Transform::Decrypt(d)) = &mut self.transform {
            d.apply(data);
        }
        self.account(data);
        self.seal(data);
    }

    /// Encrypts bytes the proxy itself inserts into a clientbound stream (not counted, not scanned).
    pub(crate) fn seal(&mut self, data: &mut [u8]) {
        if let Some(Transform::Encrypt(e)) = &mut self.transform {
            e.apply(data);
        }
    }

    /// Counts bytes going through and follows frame boundaries; a stream that stops parsing (encryption,
    /// garbage) simply loses its scanner.
    pub(crate) fn account(&mut self, data: &[u8]) {
        self.bytes += data.len() as u64;
        if let Some(s) = &mut self.scanner {
            if s.scan(data).is_err() {
                self.scanner = None;
            }
        }
    }

    /// True when a packet can be inserted into this stream now.
    pub(crate) fn at_frame_boundary(&self) -> bool {
        self.pending.is_empty() && self.scanner.as_ref().is_some_and(FrameScanner::at_boundary)
    }
}

/// How a pump ended.
#[derive(Debug)]
pub(crate) enum PumpError {
    Read(io::Error),
    Write(io::Error),
}

/// Which side a relay event concerns.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Side {
    Player,
    Backend,
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
    /// That side closed first (FIN), and the other finished in time.
    Closed(Side),
    /// That side closed first, and the other did not finish within [`HALF_CLOSE_TIMEOUT`].
    HalfCloseTimeout(Side),
    /// An I/O error on that side.
    Error(Side, io::Error),
    /// The proxy is shutting down.
    Shutdown,
}

impl std::fmt::Display for RelayEnd {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Closed(s) => write!(f, "{s} closed"),
            Self::HalfCloseTimeout(s) => write!(f, "{s} closed; other side did not finish in time"),
            Self::Error(s, e) => write!(f, "{s} error: {e}"),
            Self::Shutdown => f.write_str("proxy shutdown"),
        }
    }
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

/// Waits until `to` is writable, failing with `TimedOut` after `stall` without progress.
async fn writable_within(to: &TcpStream, stall: Duration) -> io::Result<()> {
    match tokio::time::timeout(stall, to.writable()).await {
        Ok(r) => r,
        Err(_) => Err(io::Error::new(
            io::ErrorKind::TimedOut,
            format!("peer accepted no data for {}s (limits.write_stall_timeout_seconds)", stall.as_secs()),
        )),
    }
}

/// Writes all of `data` to a shared socket (readiness + `try_write`, so both directions can use one socket);
/// fails when the peer accepts nothing for `stall`.
pub(crate) async fn write_all(to: &TcpStream, mut data: &[u8], stall: Duration) -> io::Result<()> {
    while !data.is_empty() {
        writable_within(to, stall).await?;
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

/// Writes `dir.pending` to `to` until it is empty; fails when `to` accepts nothing for `dir.stall`.
async fn drain(to: &TcpStream, dir: &mut Direction) -> io::Result<()> {
    while !dir.pending.is_empty() {
        writable_within(to, dir.stall).await?;
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

/// Reads one batch from `from` into the thread's scratch buffer and writes it to `to` in the same step.
fn forward_batch(from: &TcpStream, to: &TcpStream, dir: &mut Direction) -> Result<Batch, PumpError> {
    with_scratch(|buf| {
        let n = match read_clearing(from, buf) {
            Ok(0) => return Ok(Batch::Eof),
            Ok(n) => n,
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => return Ok(Batch::WouldBlock),
            Err(e) => return Err(PumpError::Read(e)),
        };
        let data = buf.get_mut(..n).unwrap_or_default();
        dir.process(data);
        let data = &*data;
        match to.try_write(data) {
            Ok(m) => dir.pending.extend_from_slice(data.get(m..).unwrap_or_default()),
            Err(e) if e.kind() == io::ErrorKind::WouldBlock => dir.pending.extend_from_slice(data),
            Err(e) => return Err(PumpError::Write(e)),
        }
        Ok(Batch::Forwarded)
    })
}

/// Copies `from` to `to` until `from` sends FIN (then shuts down `to`'s write side) or an error.
/// Cancel-safe: all progress lives in `dir`.
pub(crate) async fn pump(from: &TcpStream, to: &TcpStream, dir: &mut Direction) -> Result<(), PumpError> {
    loop {
        drain(to, dir).await.map_err(PumpError::Write)?;
        from.readable().await.map_err(PumpError::Read)?;
        match forward_batch(from, to, dir)? {
            Batch::Forwarded | Batch::WouldBlock => {}
            Batch::Eof => {
                drain(to, dir).await.map_err(PumpError::Write)?;
                // The peer may already be gone; the relay ends through the other direction then.
                let _ = socket2::SockRef::from(to).shutdown(Shutdown::Write);
                return Ok(());
            }
        }
    }
}

fn side_error(from: Side, e: PumpError) -> RelayEnd {
    let to = match from {
        Side::Player => Side::Backend,
        Side::Backend => Side::Player,
    };
    match e {
        PumpError::Read(e) => RelayEnd::Error(from, e),
        PumpError::Write(e) => RelayEnd::Error(to, e),
    }
}

/// Relays `player` ⇄ `backend` until both directions end, one fails, or `shutdown` fires.
///
/// On shutdown the player first gets what the backend already sent, then — when the clientbound stream is
/// plaintext and between two frames — the `disconnect` frame.
pub(crate) async fn relay_tcp(
    player: &TcpStream,
    backend: &TcpStream,
    up: &mut Direction,
    down: &mut Direction,
    shutdown: &CancellationToken,
    disconnect: &[u8],
) -> RelayEnd {
    let first = {
        let c2b = pump(player, backend, up);
        let b2c = pump(backend, player, down);
        tokio::pin!(c2b, b2c);
        let first = tokio::select! {
            r = &mut c2b => r.map(|()| Side::Player).map_err(|e| side_error(Side::Player, e)),
            r = &mut b2c => r.map(|()| Side::Backend).map_err(|e| side_error(Side::Backend, e)),
            () = shutdown.cancelled() => Err(RelayEnd::Shutdown),
        };
        match first {
            Ok(closed) => {
                let rest = async {
                    match closed {
                        Side::Player => b2c.await.map_err(|e| side_error(Side::Backend, e)),
                        Side::Backend => c2b.await.map_err(|e| side_error(Side::Player, e)),
                    }
                };
                tokio::select! {
                    r = tokio::time::timeout(HALF_CLOSE_TIMEOUT, rest) => match r {
                        Ok(Ok(())) => return RelayEnd::Closed(closed),
                        Ok(Err(end)) => return end,
                        Err(_) => return RelayEnd::HalfCloseTimeout(closed),
                    },
                    () = shutdown.cancelled() => RelayEnd::Shutdown,
                }
            }
            Err(end) => end,
        }
    };
    if matches!(first, RelayEnd::Shutdown) {
        let _ = tokio::time::timeout(SHUTDOWN_FLUSH_TIMEOUT, async {
            drain(player, down).await?;
            if down.at_frame_boundary() {
                let mut disconnect = disconnect.to_vec();
                down.seal(&mut disconnect);
                write_all(player, &disconnect, SHUTDOWN_FLUSH_TIMEOUT).await?;
            }
            io::Result::Ok(())
        })
        .await;
    }
    first
}
