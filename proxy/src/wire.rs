//! What every stage does to a socket the same way: the sizes of reads, the write-stall bound, the linger of an
//! orderly close, and non-blocking reads on a shared [`TcpStream`] through one per-thread scratch buffer.
//!
//! Below the player's WebSocket ([`crate::ws_link`]), the relay ([`crate::relay`]) and the transfer layer,
//! which all stand on it.

use std::cell::RefCell;
use std::io;
use std::time::Duration;

use tokio::net::TcpStream;

/// Largest single read in the relay, in bytes (per direction, per batch).
pub(crate) const RELAY_CHUNK: usize = 256 * 1024;

// A relay batch is one WebSocket message: under the carriage's message cap even with zstd's worst case.
const _: () = assert!(RELAY_CHUNK + RELAY_CHUNK / 128 < moonbridge_protocol::ws::MAX_SENT_MESSAGE);

/// Stream bytes a player may send ahead while the login stage waits for the backend or the session server, in
/// bytes (any transport); beyond this the proxy stops reading until the relay starts (backpressure, nothing is
/// dropped).
pub(crate) const EARLY_DATA_LIMIT: usize = 4 * 1024;

/// How long an orderly close keeps reading (and discarding) after sending FIN or a WebSocket Close, so a
/// final message is not lost to a reset when the peer still had bytes in flight.
pub(crate) const LINGER: Duration = Duration::from_secs(1);

thread_local! {
    static SCRATCH: RefCell<Vec<u8>> = RefCell::new(vec![0; RELAY_CHUNK]);
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
    pub(crate) fn other(self) -> Self {
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

/// The kernel's bound on a player socket's bytes not yet sent, while `[lanes]` is on (`TCP_NOTSENT_LOWAT`,
/// docs/lanes.md): past it the socket takes no more, so the rest waits in the proxy's lanes, where urgent
/// frames can overtake it. 16 KiB: 33 ms at 4 Mbit/s; the bytes in flight (the congestion window) are not
/// bounded by it, so a fast path loses no throughput.
pub(crate) const UNSENT_BYTES: u32 = 16 * 1024;

/// Sets [`UNSENT_BYTES`] on a player's socket (Linux; elsewhere nothing: the lanes then work with whatever the
/// kernel buffers).
pub(crate) fn bound_unsent(stream: &TcpStream) {
    #[cfg(any(target_os = "linux", target_os = "android"))]
    let _ = socket2::SockRef::from(stream).set_tcp_notsent_lowat(UNSENT_BYTES);
    #[cfg(not(any(target_os = "linux", target_os = "android")))]
    let _ = stream;
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test(start_paused = true)]
    async fn the_stall_policy_names_the_side_that_stopped_reading() {
        let never = std::future::pending::<io::Result<()>>();
        let e = within_stall(Duration::from_secs(60), Side::Backend, never).await.unwrap_err();
        assert_eq!(e.kind(), io::ErrorKind::TimedOut);
        assert_eq!(e.to_string(), "backend accepted no data for 60s (limits.write_stall_timeout_seconds)");
        assert_eq!(Side::Backend.other(), Side::Player);
    }
}
