//! A resume carried to the instance that holds its session ([`crate::network::Network::carry`]): once the
//! instance link is open, this instance only copies the player's bytes both ways, in the player's connection
//! task (counted in `max_connections`, out of its handshake slot).

use std::future::Future;
use std::pin::Pin;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tracing::debug;

use crate::network::{Carrier, LinkStream};
use crate::resume::PlayerStream;

/// Longest wait for bytes from either side of a carried resume before the carrier ends it: 12 s, three of
/// carriage v2's longest ping intervals ([`moonbridge_protocol::ws::v2::MAX_PING_INTERVAL`]): the owner pings
/// the player and the player pings back through the copy, so a live pair is never this quiet.
pub(crate) const CARRIED_IDLE: Duration = Duration::from_secs(12);

/// A resumed session carried to its owner: the copy both ways, run by the player's connection task once its
/// setup is over, so it stays counted in `max_connections` and leaves its handshake slot. It ends when either
/// side ends, when a side sends nothing for [`CARRIED_IDLE`], when a write makes no progress for
/// `write_stall_timeout_seconds`, or at once on shutdown.
pub(crate) struct Carried(Pin<Box<dyn Future<Output = ()> + Send>>);

impl std::fmt::Debug for Carried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Carried")
    }
}

impl Carried {
    /// Copies until the carried session ends.
    pub(crate) async fn run(self) {
        self.0.await;
    }

    /// The copy between the player's connection (`stream`, with `leftover` bytes read from it but not decoded)
    /// and the owner's end of `carrier`, for the player at `client` (for the log).
    pub(crate) fn new<S: PlayerStream>(
        stream: S,
        leftover: BytesMut,
        carrier: Carrier,
        stall: Duration,
        client: std::net::SocketAddr,
    ) -> Self {
        Self(Box::pin(async move {
            let Carrier { stream: owner, metrics, stop } = carrier;
            metrics.link_sessions.inc();
            let (mut up, mut down) = (0u64, 0u64);
            let ended = tokio::select! {
                r = pipe(stream, &leftover, owner, stall, (&mut up, &mut down)) => r,
                () = stop.cancelled() => Ok(()),
            };
            metrics.link_sessions.dec();
            metrics.link_bytes_to_peer.inc_by(up);
            metrics.link_bytes_from_peer.inc_by(down);
            match ended {
                Ok(()) => debug!(client = %client, up, down, "instance link for a resumed session closed"),
                Err(e) => debug!(client = %client, up, down, "instance link for a resumed session ended: {e}"),
            }
        }))
    }
}

/// Copies `player` ⇄ `owner` (the player's bytes read ahead first) until either side ends or fails (see
/// [`Carried`]), counting the bytes each way into `counts` (to the owner, from the owner).
async fn pipe<S: AsyncRead + AsyncWrite + Unpin>(
    player: S,
    leftover: &[u8],
    owner: LinkStream,
    stall: Duration,
    counts: (&mut u64, &mut u64),
) -> std::io::Result<()> {
    async fn both<A: AsyncRead + AsyncWrite + Unpin, B: AsyncRead + AsyncWrite + Unpin>(
        player: A,
        leftover: &[u8],
        mut owner: B,
        stall: Duration,
        (up, down): (&mut u64, &mut u64),
    ) -> std::io::Result<()> {
        within(stall, owner.write_all(leftover)).await?;
        *up += leftover.len() as u64;
        let (mut player_rx, mut player_tx) = tokio::io::split(player);
        let (mut owner_rx, mut owner_tx) = tokio::io::split(owner);
        // The first direction to end ends both: a WebSocket has no half-close (its Close is in band).
        tokio::select! {
            r = one_way(&mut player_rx, &mut owner_tx, stall, up) => r,
            r = one_way(&mut owner_rx, &mut player_tx, stall, down) => r,
        }
    }
    match owner {
        LinkStream::Tcp(s) => both(player, leftover, s, stall, counts).await,
        LinkStream::Tls(s) => both(player, leftover, *s, stall, counts).await,
    }
}

/// Copies `from` to `to` until `from` ends: each read within [`CARRIED_IDLE`], each write (and its flush)
/// within `stall`; counts the bytes into `count`.
async fn one_way<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    from: &mut R,
    to: &mut W,
    stall: Duration,
    count: &mut u64,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = within(CARRIED_IDLE, from.read(&mut buf)).await?;
        if n == 0 {
            return Ok(());
        }
        let data = buf.get(..n).unwrap_or_default();
        within(stall, async {
            to.write_all(data).await?;
            to.flush().await
        })
        .await?;
        *count += n as u64;
    }
}

/// `io` within `limit`, a timeout being an error of kind `TimedOut`.
async fn within<T>(limit: Duration, io: impl Future<Output = std::io::Result<T>>) -> std::io::Result<T> {
    tokio::time::timeout(limit, io)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no progress for {limit:?}")))?
}
