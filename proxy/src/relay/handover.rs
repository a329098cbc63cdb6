//! The relay's backend side ([`BackendSide`]): the backend connection, or from a handover on the loopback hop
//! to the transfer layer, which then owns the backend connection.

use std::io;
use std::sync::atomic::Ordering;
use std::time::Duration;

use moonbridge_protocol::FrameScanner;
use tokio::net::TcpStream;
use tokio::task::JoinHandle;
use tracing::warn;

use super::flow::{Flow, Follow, Handed, Handover, Watching};

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
