//! A [`WsLink`] in the stages before the relay: reading the stream (the handshake, Login Start), and keeping
//! the player's WebSocket alive while the proxy waits for the backend or the session server.

use std::future::Future;
use std::io;

use bytes::BytesMut;
use tokio::io::{AsyncRead, AsyncWrite};

use super::{Turn, WsLink, WS_READ_CHUNK};
use crate::wire::{PlayerGone, EARLY_DATA_LIMIT};

impl<S: AsyncRead + AsyncWrite + Unpin + Send> WsLink<S> {
    /// Reads more from the player into the decoder while keeping the keepalive schedule: the number of bytes
    /// read, 0 at end of stream; an error when the player is silent for three intervals or a Ping cannot leave.
    pub(super) async fn fill_alive(&mut self) -> io::Result<usize> {
        loop {
            tokio::select! {
                biased;
                () = self.tick.as_mut(), if self.keepalive.is_some() => self.keepalive_tick(false).await?,
                r = Self::fill(&mut self.stream, &mut self.dec, &self.counters) => return self.received(r),
            }
        }
    }

    /// Reads stream bytes into `buf` (appending), answering Pings on the way: `Ok(0)` when the player closed.
    /// Bad input is an error, and the close code it earned is recorded ([`WsLink::close`] sends it). Carriage
    /// v2 control messages before the relay mean nothing yet: an `ack` of what the login stage sent (the relay
    /// retains only what it sends itself) or a stray `stay`.
    pub(crate) async fn read_stream(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        let before = buf.len();
        if !self.early.is_empty() {
            buf.extend_from_slice(&self.early.split());
            return Ok(buf.len() - before);
        }
        loop {
            match self.decode(buf, before + WS_READ_CHUNK).await {
                Turn::Ack(n) => self.early_ack(n)?,
                Turn::Continue | Turn::Stay => {}
                Turn::Closed(_) => return Ok(buf.len() - before),
                Turn::Fault(e) | Turn::Lost(e) => return Err(e),
            }
            if buf.len() > before {
                return Ok(buf.len() - before);
            }
            if self.peer_closed() {
                return Ok(0);
            }
            if self.decode_backlog() {
                continue;
            }
            if self.fill_alive().await? == 0 {
                self.ended();
                return Ok(0);
            }
        }
    }

    /// An `ack` before the relay: nothing is retained yet (the relay retains only what it sends), so it only
    /// has to be within what was sent; past it, it earns 1002 as in the relay.
    fn early_ack(&mut self, n: u64) -> io::Result<()> {
        if n <= self.stream_out {
            return Ok(());
        }
        self.fault(moonbridge_protocol::ws::CLOSE_PROTOCOL_ERROR, "ack past the bytes sent");
        Err(io::Error::new(io::ErrorKind::InvalidData, format!("ack of {n} bytes, {} were sent", self.stream_out)))
    }

    /// Runs `work` while keeping the player's WebSocket alive: Pings on the keepalive schedule, Pongs to the
    /// player's Pings; stream bytes the player sends meanwhile are kept (at most [`EARLY_DATA_LIMIT`], then
    /// reading pauses) and reach the backend first. Fails, dropping `work`, when the player leaves or breaks the
    /// carriage, or goes silent for three intervals (not counting time when reading is paused). Writes to the
    /// player meanwhile (Pongs, Pings) are bounded by the write-stall limit.
    pub(crate) async fn during<T>(&mut self, work: impl Future<Output = T>) -> Result<T, PlayerGone> {
        if self.peer_closed() {
            // Its Close arrived with the bytes before (and was answered): nothing to wait for.
            return Err(PlayerGone::Left("closed".into()));
        }
        tokio::pin!(work);
        loop {
            let room = self.early.len() < EARLY_DATA_LIMIT;
            tokio::select! {
                biased;
                r = &mut work => return Ok(r),
                () = self.tick.as_mut(), if self.keepalive.is_some() => {
                    if let Err(e) = self.keepalive_tick(!room).await {
                        return Err(PlayerGone::Left(e.to_string()));
                    }
                }
                r = Self::fill(&mut self.stream, &mut self.dec, &self.counters), if room => {
                    match self.received(r) {
                        Ok(0) | Err(_) => {
                            self.ended();
                            return Err(PlayerGone::Left("connection lost".into()));
                        }
                        Ok(_) => {}
                    }
                    loop {
                        let mut early = std::mem::take(&mut self.early);
                        let turn = self.decode(&mut early, EARLY_DATA_LIMIT).await;
                        self.early = early;
                        match turn {
                            // A control message stops the turn: what follows it is decoded too.
                            Turn::Ack(n) => {
                                if let Err(e) = self.early_ack(n) {
                                    return Err(PlayerGone::Fault(e.to_string()));
                                }
                            }
                            Turn::Stay => {}
                            Turn::Continue => break,
                            Turn::Closed(_) => return Err(PlayerGone::Left("closed".into())),
                            Turn::Fault(e) | Turn::Lost(e) => return Err(PlayerGone::Fault(e.to_string())),
                        }
                    }
                }
            }
        }
    }
}
