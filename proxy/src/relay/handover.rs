//! The relay's backend side ([`BackendSide`]): the backend connection itself, or, from a handover on, the
//! transfer layer's switchboard, which runs inside the relay on the backend connections it owns (no task, no
//! socket pair: a switched player holds the same two sockets as one who never switched).
//!
//! Both loops use the same few calls whichever it is: [`BackendSide::readable`], [`BackendSide::read_batch`],
//! [`BackendSide::write_all`], [`BackendSide::shutdown_write`], [`BackendSide::linger`], and
//! [`BackendSide::hand_over`] at the top of each turn.

use std::io;
use std::time::Duration;

use bytes::Buf;
use tokio::net::TcpStream;

use super::flow::{read_batch, Flow};
use crate::transfer::Switchboard;
use crate::wire::{discard_until_eof, with_scratch, write_all, Side};

/// The relay's backend: the connection, or the switchboard behind which the connections are.
pub(crate) enum BackendSide {
    /// The backend connection, relayed as bytes.
    Direct(TcpStream),
    /// The switchboard, frame by frame.
    Board(Box<Switchboard>),
    /// Only while a handover swaps one for the other.
    Swapping,
}

impl BackendSide {
    /// The backend connection, as the relay starts on it.
    pub(crate) fn new(stream: TcpStream) -> Self {
        Self::Direct(stream)
    }

    /// Waits until a batch can be read ([`Self::read_batch`]); for a direct connection also until a command
    /// from another session arrives for `down`'s watch (the handover is then due). Cancel-safe.
    ///
    /// # Errors
    /// The connection's readiness failed.
    pub(crate) async fn readable(&mut self, down: &mut Flow) -> io::Result<()> {
        match self {
            Self::Direct(s) => tokio::select! {
                r = s.readable() => r,
                () = down.next_command() => Ok(()),
            },
            Self::Board(b) => {
                b.ready().await;
                Ok(())
            }
            Self::Swapping => std::future::pending().await,
        }
    }

    /// One batch for the player, through `down` (counted, frames followed, encrypted in online mode), handed
    /// to `take`: as [`read_batch`] for a direct connection; from the switchboard's output otherwise
    /// (`take(&[])` once it has ended and everything went out).
    ///
    /// # Errors
    /// The connection's read failed.
    pub(crate) fn read_batch<R>(
        &mut self,
        down: &mut Flow,
        max: usize,
        take: impl FnOnce(&mut [u8]) -> R,
    ) -> io::Result<Option<R>> {
        match self {
            Self::Direct(s) => read_batch(s, down, max, take),
            Self::Board(b) => {
                if b.finished() {
                    return Ok(Some(take(&mut [])));
                }
                if b.take_current_ready() {
                    // Read straight into the scratch buffer: frames nobody looks into go on from there, no copy.
                    return Ok(with_scratch(|buf| {
                        let end = max.max(1).min(buf.len());
                        let buf = buf.get_mut(..end).unwrap_or_default();
                        let n = b.read_current_into(buf)?;
                        let data = buf.get_mut(..n).unwrap_or_default();
                        let pass = b.pass_through(data);
                        let data = data.get_mut(..pass).filter(|d| !d.is_empty())?;
                        let keep = down.process(data);
                        Some(take(data.get_mut(..keep).unwrap_or_default()))
                    }));
                }
                let out = b.output();
                // At most a relay batch: one WebSocket message stays under the carriage's 1 MiB.
                let n = out.len().min(max.max(1)).min(crate::wire::RELAY_CHUNK);
                if n == 0 {
                    return Ok(None);
                }
                let data = out.get_mut(..n).unwrap_or_default();
                let keep = down.process(data);
                let r = take(data.get_mut(..keep).unwrap_or_default());
                if n == out.len() {
                    out.clear();
                } else {
                    out.advance(n);
                }
                Ok(Some(r))
            }
            Self::Swapping => Ok(None),
        }
    }

    /// Writes the player's bytes (already decrypted and followed by `up`) to the backend, or hands them to
    /// the switchboard.
    ///
    /// # Errors
    /// The write failed or stalled for `stall` (a direct connection).
    pub(crate) async fn write_all(&mut self, data: &[u8], stall: Duration) -> io::Result<()> {
        match self {
            Self::Direct(s) => write_all(s, data, stall, Side::Backend).await,
            Self::Board(b) => b.send(data).await,
            Self::Swapping => Ok(()),
        }
    }

    /// The player's plaintext bytes for the switchboard, written to the backends by [`Self::flush`]; a direct
    /// connection takes bytes through [`Self::write_all`] only.
    pub(crate) fn accept(&mut self, data: &[u8]) {
        if let Self::Board(b) = self {
            b.accept(data);
        }
    }

    /// Writes what the switchboard has for the backends (nothing for a direct connection).
    pub(crate) async fn flush(&mut self) {
        if let Self::Board(b) = self {
            b.flush().await;
        }
    }

    /// The player closed its side: a FIN to the backend.
    pub(crate) fn shutdown_write(&mut self) {
        match self {
            Self::Direct(s) => {
                let _ = socket2::SockRef::from(&*s).shutdown(std::net::Shutdown::Write);
            }
            Self::Board(b) => b.player_closed(),
            Self::Swapping => {}
        }
    }

    /// Reads and drops what the backend still sends, for at most `linger` (a closing socket with unread bytes
    /// would be reset).
    pub(crate) async fn linger(&mut self, linger: Duration) {
        match self {
            Self::Direct(s) => discard_until_eof(s, linger).await,
            Self::Board(b) => b.linger(linger).await,
            Self::Swapping => {}
        }
    }

    /// Replaces the direct connection with the switchboard when `down`'s watch asks for a handover; does
    /// nothing otherwise. Serverbound bytes the relay still holds must have reached the backend first.
    ///
    /// # Errors
    /// The session cannot be moved after all (no ticket: only in tests).
    pub(crate) fn hand_over(&mut self, up: &mut Flow, down: &mut Flow) -> io::Result<()> {
        if !matches!(self, Self::Direct(_)) {
            return Ok(());
        }
        let Some((ticket, handed)) = down.take_handover(up) else { return Ok(()) };
        let Self::Direct(stream) = std::mem::replace(self, Self::Swapping) else { return Ok(()) };
        let Some(ticket) = ticket else {
            *self = Self::Direct(stream);
            return Err(io::Error::other("this session cannot be moved"));
        };
        *self = Self::Board((*ticket).board(stream, handed));
        Ok(())
    }

    /// The drain asked this session to move and the switchboard can hand it over now.
    pub(crate) fn move_due(&self) -> bool {
        matches!(self, Self::Board(b) if b.move_asked() && b.movable_now().is_ok())
    }

    /// The switchboard, once one took over.
    pub(crate) fn board(&mut self) -> Option<&mut crate::transfer::Switchboard> {
        match self {
            Self::Board(b) => Some(b),
            _ => None,
        }
    }

    /// Every backend the player was on, in order, once a switchboard took over (`None` before).
    pub(crate) fn visited(&self) -> Option<&[String]> {
        match self {
            Self::Board(b) => Some(b.visited()),
            _ => None,
        }
    }
}
