//! The WebSocket codec of a [`WsLink`]: reading frames into the sans-IO decoder
//! ([`moonbridge_protocol::ws::frame`], RFC 6455 §5), decoding them into stream bytes (inflating with
//! `moonbridge.v2.zstd`), the close codes bad input earns, and writing whole frames under the write-stall bound.

use std::io;
use std::ops::Range;

use bytes::{Bytes, BytesMut};
use moonbridge_protocol::ws as carriage;
use moonbridge_protocol::ws::compress::CompressError;
use moonbridge_protocol::ws::frame::{self as wsframe, Event, FrameFault, ServerDecoder, OP_BINARY, OP_PONG};
use moonbridge_protocol::ws::v2::Control;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use super::{PeerClose, Turn, Wake, WsLink, MAX_SERVER_HEADER, WS_READ_CHUNK};
use crate::metrics::WsMetrics;
use crate::wire::{within_stall, Side, LINGER};

impl<S: AsyncRead + AsyncWrite + Unpin + Send> WsLink<S> {
    /// One Binary message carrying `data` (compressed with `moonbridge.v2.zstd`) in frames of at most
    /// [`carriage::MAX_SENT_FRAME_PAYLOAD`] bytes (Continuation frames past the first), and where `data`'s pieces
    /// sit in it when it is carried as is (so a caller can keep them without copying). `data` is at most
    /// [`crate::wire::RELAY_CHUNK`] bytes, so the message stays under [`carriage::MAX_SENT_MESSAGE`].
    ///
    /// # Errors
    /// zstd failed (the stream cannot go on).
    pub(crate) fn binary_frame(&mut self, data: &[u8]) -> io::Result<(Bytes, Option<Vec<Range<usize>>>)> {
        let Some(z) = &mut self.zstd else {
            let mut msg = Vec::new();
            let pieces = wsframe::encode_binary_message(&mut msg, data, carriage::MAX_SENT_FRAME_PAYLOAD);
            return Ok((Bytes::from(msg), Some(pieces)));
        };
        // Room for the longest header in front, written once the compressed length is known: no second copy
        // when it fits one frame (the usual case: a relay batch compresses well under 64 KiB).
        let mut msg = vec![0u8; MAX_SERVER_HEADER];
        z.ctx.compress(data, &mut msg).map_err(io::Error::other)?;
        let compressed = msg.get(MAX_SERVER_HEADER..).unwrap_or_default();
        if compressed.len() > carriage::MAX_SENT_FRAME_PAYLOAD {
            let mut fragmented = Vec::new();
            wsframe::encode_binary_message(&mut fragmented, compressed, carriage::MAX_SENT_FRAME_PAYLOAD);
            return Ok((Bytes::from(fragmented), None));
        }
        let (h, n) = wsframe::encode_header(OP_BINARY, compressed.len());
        let start = MAX_SERVER_HEADER - n;
        if let (Some(dst), Some(src)) = (msg.get_mut(start..MAX_SERVER_HEADER), h.get(..n)) {
            dst.copy_from_slice(src);
        }
        Ok((Bytes::from(msg).slice(start..), None))
    }

    /// Reads more from the player into the decoder: the number of bytes read, 0 at end of stream. Anything
    /// read counts as a sign of life for the keepalive schedule. Cancel-safe.
    pub(crate) async fn read(&mut self) -> io::Result<usize> {
        let r = Self::fill(&mut self.stream, &mut self.dec, &self.counters).await;
        self.received(r)
    }

    /// Waits for the player's next bytes (read into the decoder, as [`WsLink::read`]) or the keepalive timer,
    /// whichever comes first. Cancel-safe.
    pub(crate) async fn wait(&mut self) -> Wake {
        tokio::select! {
            r = Self::fill(&mut self.stream, &mut self.dec, &self.counters) => Wake::Read(self.received(r)),
            () = self.tick.as_mut(), if self.keepalive.is_some() => Wake::Tick,
        }
    }

    /// Notes a read for the keepalive schedule (anything received shows the player is alive).
    pub(super) fn received(&mut self, r: io::Result<usize>) -> io::Result<usize> {
        if let (Ok(n), Some(k)) = (&r, &mut self.keepalive) {
            if *n > 0 {
                k.on_receive(std::time::Instant::now());
            }
        }
        r
    }

    /// Reads at most [`WS_READ_CHUNK`] bytes from the socket into the decoder; 0 at end of stream.
    pub(super) async fn fill(stream: &mut S, dec: &mut ServerDecoder, counters: &WsMetrics) -> io::Result<usize> {
        let buf = dec.buffer_mut();
        buf.reserve(WS_READ_CHUNK);
        let n = (&mut *stream).take(WS_READ_CHUNK as u64).read_buf(buf).await?;
        counters.bytes_in.inc_by(n as u64);
        Ok(n)
    }

    /// Decodes what is buffered: stream bytes go to `data` (up to `limit` bytes in all; the rest stays
    /// buffered), Pings are answered, a Close is answered and ends the turn, and so does a carriage v2 control
    /// message (its event is the turn's; what follows it stays buffered).
    pub(crate) async fn decode(&mut self, data: &mut BytesMut, limit: usize) -> Turn {
        let mut pongs: Vec<u8> = Vec::new();
        self.stopped_early = false;
        let turn = loop {
            if data.len() >= limit {
                // Frames may still be buffered: the relay decodes again before it waits for the socket.
                self.stopped_early = true;
                break Turn::Continue;
            }
            // A compressed message inflates in pieces of at most about what the caller takes this turn.
            if let Some(z) = self.zstd.as_mut() {
                if z.ctx.has_output() {
                    z.scratch.clear();
                    match z.ctx.inflate(&mut z.scratch, limit - data.len(), self.max_message) {
                        Ok(n) => {
                            data.extend_from_slice(&z.scratch);
                            self.stream_in += n as u64;
                            continue;
                        }
                        Err(e) => break self.inflate_fault(&e),
                    }
                }
            }
            match self.dec.try_next() {
                Ok(None) => break Turn::Continue,
                Ok(Some(Event::Data(d))) => match &mut self.zstd {
                    Some(z) => {
                        if let Err(e) = z.ctx.queue(&d) {
                            break self.inflate_fault(&e);
                        }
                    }
                    None => {
                        self.stream_in += d.len() as u64;
                        data.extend_from_slice(&d);
                    }
                },
                Ok(Some(Event::Text(t))) => match Control::parse(&t) {
                    Ok(Control::Ack(n)) if self.v2 => {
                        self.stopped_early = true;
                        break Turn::Ack(n);
                    }
                    Ok(Control::Stay) if self.v2 && self.move_offered => {
                        self.stopped_early = true;
                        break Turn::Stay;
                    }
                    _ => {
                        self.fault(carriage::CLOSE_PROTOCOL_ERROR, "unexpected control message");
                        break Turn::Fault(io::Error::new(io::ErrorKind::InvalidData, "unexpected control message"));
                    }
                },
                Ok(Some(Event::MessageEnd)) => {
                    if self.zstd.as_mut().is_some_and(|z| z.ctx.end_message()) {
                        self.counters.zstd_freed.inc();
                    }
                    self.messages_in += 1;
                    self.counters.messages_in.inc();
                }
                Ok(Some(Event::Ping(p))) => pongs.extend_from_slice(&wsframe::frame(OP_PONG, &p)),
                Ok(Some(Event::Pong)) => {}
                Ok(Some(Event::Close(c))) => {
                    let code = match &c {
                        wsframe::CloseReceived::NoCode => 1005,
                        wsframe::CloseReceived::Code(code, _) => *code,
                    };
                    let moved = matches!(&c, wsframe::CloseReceived::Code(carriage::CLOSE_NORMAL, r)
                        if r == moonbridge_protocol::ws::v2::CLOSE_REASON_MOVED);
                    let close = PeerClose { code: Some(code), moved };
                    self.state = self.state.peer_ended(close);
                    let _ = self.write_frame(&pongs).await;
                    self.send_close(c.reply_code(), "").await;
                    return Turn::Closed(close);
                }
                Err(f) => break self.fault_turn(&f),
            }
        };
        if !pongs.is_empty() {
            // Lost when they cannot be written, unless the player broke the carriage first (then the fault ends
            // the session).
            let faulted = self.state.fault().is_some();
            if let Err(e) = self.write_frame(&pongs).await {
                return if faulted { Turn::Fault(e) } else { Turn::Lost(e) };
            }
        }
        turn
    }

    /// True when the last decode turn stopped early (at its limit, or at a control message) with input
    /// perhaps left (buffered frames, or a compressed message with more to inflate): the relay decodes again
    /// before it waits for the socket.
    pub(crate) fn decode_backlog(&self) -> bool {
        self.stopped_early || self.zstd.as_ref().is_some_and(|z| z.ctx.has_output())
    }

    /// A compressed message that inflates too far (1009), is not zstd (1002), or finds no memory (1011).
    fn inflate_fault(&mut self, e: &CompressError) -> Turn {
        let (code, reason) = match e {
            CompressError::TooLarge { .. } => (carriage::CLOSE_MESSAGE_TOO_BIG, "message too big"),
            CompressError::NoMemory => (carriage::CLOSE_INTERNAL_ERROR, "out of memory"),
            _ => (carriage::CLOSE_PROTOCOL_ERROR, "bad compressed data"),
        };
        self.fault(code, reason);
        Turn::Fault(io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
    }

    fn fault_turn(&mut self, f: &FrameFault) -> Turn {
        Turn::Fault(self.fault_error(f))
    }

    /// Records the close code a frame fault earned and returns it as an error.
    pub(super) fn fault_error(&mut self, f: &FrameFault) -> io::Error {
        self.fault(f.close_code(), f.close_reason());
        io::Error::new(io::ErrorKind::InvalidData, f.to_string())
    }

    /// Writes one or more whole frames within the write-stall limit. Refused after a Close was sent or after
    /// an earlier write failed or was cut off (its frame may be half on the wire).
    pub(crate) async fn write_frame(&mut self, bytes: &[u8]) -> io::Result<()> {
        if !self.state.writable() {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the WebSocket is closing"));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        // Broken until the write completes: a write dropped half-way (a timeout or select around it) leaves it so.
        let before = self.state;
        self.state = before.writing();
        let stream = &mut self.stream;
        within_stall(self.write_stall, Side::Player, async {
            stream.write_all(bytes).await?;
            stream.flush().await
        })
        .await?;
        self.state = before;
        self.counters.bytes_out.inc_by(bytes.len() as u64);
        if let Some(k) = &mut self.keepalive {
            k.on_write();
        }
        Ok(())
    }

    /// Sends stream bytes as one Binary message.
    pub(crate) async fn send_binary(&mut self, data: &[u8]) -> io::Result<()> {
        self.stream_out += data.len() as u64;
        self.messages_out += 1;
        self.counters.messages_out.inc();
        let (msg, _) = self.binary_frame(data)?;
        self.write_frame(&msg).await
    }

    /// Sends a Close (once) within [`LINGER`], unless the frame stream is already broken.
    pub(crate) async fn send_close(&mut self, code: u16, reason: &str) {
        if self.state.writable() {
            let frame = wsframe::close_frame(code, reason);
            let _ = tokio::time::timeout(LINGER, self.write_frame(&frame)).await;
        }
        // Unless the write broke the stream.
        self.state = self.state.close_sent();
    }
}
