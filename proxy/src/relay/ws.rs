//! The WebSocket side of a session (carriage version 1, see [`moonbridge_protocol::ws`]): where a WebSocket
//! message becomes backend bytes and backend bytes become a message, in every stage.
//!
//! Framing is [`moonbridge_protocol::ws::frame`] (RFC 6455 §5, server side, sans-IO), so the proxy never holds a
//! whole message: the payload of a Binary frame leaves for the backend as it arrives, and what one connection
//! can make the proxy hold is one read ([`WS_READ_CHUNK`]) plus at most [`EARLY_DATA_LIMIT`] bytes sent ahead
//! during the login stage, whatever `max_ws_message_bytes` is.
//!
//! - Binary messages carry the Minecraft stream: their payloads are the bytes, whatever the message sizes.
//! - A Ping is answered with a Pong at once. Pongs are ignored.
//! - One close policy in every stage (RFC 6455 §5.5.1, §7.4): a Close from the player is answered with a Close
//!   echoing its code (1000 for a Close without one); a Text message is answered with 1003, a message over
//!   `max_ws_message_bytes` with 1009 (known from the frame header, before the payload is read), an unmasked
//!   or malformed frame, a status code that must not be sent or a 1-byte Close body with 1002. When the proxy
//!   ends a connection that is still open, a Close goes out before the TCP close; 1005 or 1006 never do.
//!   Nothing is written after a Close, nor after a write that was cut off (a frame is never left half-sent
//!   with another after it).
//! - One keepalive schedule per connection, from the upgrade to the end, in every stage (handshake, login,
//!   the waits for the backend and the session server, status, play): a Ping after `ping_interval` without
//!   writing, and a close with 1001 after three intervals without receiving anything.
//! - Every write to the player (data, Pong, Ping, Close) is bounded by `limits.write_stall_timeout_seconds`.
//! - In the relay, every backend read batch leaves as one Binary message, the backend's FIN becomes Close
//!   1000, and the player's Close (or a lost connection) becomes a FIN to the backend.
//! - With `moonbridge.v2.zstd` ([`moonbridge_protocol::ws::compress`]) every Binary payload is compressed on
//!   the way out and inflated on the way in, in pieces of at most the relay's batch; a message that inflates
//!   past `max_ws_message_bytes` is closed with 1009 when it gets there, and data that is not zstd with 1002.

use std::future::Future;
use std::io;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::{Bytes, BytesMut};
use moonbridge_protocol::ws::compress::{CompressError, Compressor, Decompressor};
use moonbridge_protocol::ws::frame::{
    self as wsframe, Event, FrameFault, ServerDecoder, OP_BINARY, OP_PING, OP_PONG, OP_TEXT,
};
use moonbridge_protocol::ws::v2::{self, Control};
use moonbridge_protocol::ws::{self as carriage, Keepalive, KeepaliveAction};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::metrics::WsMetrics;

use super::{
    discard_until_eof, inject_shutdown, read_batch, within_stall, write_all, BackendSide, Flow, PlayerGone, PlayerSink,
    RelayEnd, RelayReport, RelayStart, Side, EARLY_DATA_LIMIT, LINGER, RELAY_CHUNK,
};

/// Largest single read from a WebSocket player, in bytes. Player → proxy traffic is small (a tick's packets),
/// and the read buffer is kept per connection, so it stays small; larger messages arrive over several reads.
pub(crate) const WS_READ_CHUNK: usize = 4 * 1024;

/// Largest header of a frame the proxy sends (unmasked, 64-bit length; RFC 6455 §5.2), in bytes.
const MAX_SERVER_HEADER: usize = 10;

/// The zstd contexts of a `moonbridge.v2.zstd` connection (boxed: most connections have none). Each is made on
/// first use, so a connection that never sends (or is never sent) a Binary message costs none of its memory.
pub(super) struct Zstd {
    level: i32,
    deflate: Option<Compressor>,
    inflate: Option<Decompressor>,
    /// Where a piece of a player's message inflates before it joins the batch (its capacity is reused).
    scratch: Vec<u8>,
}

/// A player's WebSocket (over TCP or TLS) and what the session needs to know about it.
pub(crate) struct WsLink<S> {
    pub(super) stream: S,
    pub(super) dec: ServerDecoder,
    pub(super) counters: WsMetrics,
    /// The keepalive schedule (none when `ping_interval_seconds` is 0) and its one timer, kept across stages.
    pub(super) keepalive: Option<Keepalive>,
    pub(super) tick: Pin<Box<tokio::time::Sleep>>,
    /// How long a write to the player may make no progress (`limits.write_stall_timeout_seconds`).
    write_stall: Duration,
    /// A write failed or was cut off: the frame stream may be broken, so nothing more is written.
    broken: bool,
    /// Carriage v2 was negotiated (`moonbridge.v2`): control messages (Text) are accepted.
    pub(crate) v2: bool,
    /// Stream bytes received from and sent to the player in Binary payloads (carriage v2 counts; carried
    /// over to a resumed link).
    pub(crate) stream_in: u64,
    pub(crate) stream_out: u64,
    /// The highest `ack` count the player sent and the relay has not applied yet (carriage v2).
    pub(super) peer_ack: Option<u64>,
    /// The code of the player's Close, when one arrived (1005 for a Close without a code).
    pub(super) peer_close_code: Option<u16>,
    /// Stream bytes decoded but not yet taken by the session (sent ahead during the login stage).
    pub(super) early: BytesMut,
    /// The close code earned by bad input, sent when the session finishes.
    pub(crate) fault: Option<(u16, &'static str)>,
    /// The player's Close arrived (or its connection ended): nothing more will be read.
    pub(super) peer_closed: bool,
    /// A Close was sent: no frame may follow it (RFC 6455 §5.5.1).
    pub(super) close_sent: bool,
    /// Binary messages received from and sent to this player.
    pub(crate) messages_in: u64,
    pub(crate) messages_out: u64,
    /// `max_ws_message_bytes`: also the most one compressed message may inflate to.
    max_message: usize,
    /// `moonbridge.v2.zstd` was selected: both directions' contexts.
    pub(super) zstd: Option<Box<Zstd>>,
    /// The last decode turn stopped at its byte limit (see [`WsLink::decode_backlog`]).
    stopped_at_limit: bool,
}

/// What reading a batch of events turned up besides stream bytes.
pub(super) enum Turn {
    /// Nothing that ends the connection.
    Continue,
    /// The player closed (Close answered) or its connection ended.
    Closed,
    /// The player broke the carriage (the fault is recorded; close with it).
    Fault(io::Error),
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> WsLink<S> {
    /// Starts the WebSocket protocol on an upgraded stream; `leftover` are bytes read after the request head.
    pub(crate) fn new(
        stream: S,
        leftover: &[u8],
        ping_interval: Option<Duration>,
        write_stall: Duration,
        max_message_bytes: usize,
        counters: WsMetrics,
    ) -> Self {
        let mut dec = ServerDecoder::new(max_message_bytes);
        dec.queue_slice(leftover);
        let keepalive = ping_interval.map(|i| Keepalive::new(i, Instant::now()));
        let tick = Box::pin(tokio::time::sleep_until(tick_deadline(keepalive.as_ref())));
        Self {
            stream,
            dec,
            counters,
            keepalive,
            tick,
            write_stall,
            broken: false,
            v2: false,
            stream_in: 0,
            stream_out: 0,
            peer_ack: None,
            peer_close_code: None,
            early: BytesMut::new(),
            fault: None,
            peer_closed: false,
            close_sent: false,
            messages_in: 0,
            messages_out: 0,
            max_message: max_message_bytes,
            zstd: None,
            stopped_at_limit: false,
        }
    }

    /// Turns on `moonbridge.v2.zstd` compression (after [`WsLink::enable_v2`]); `level` is for what the proxy
    /// sends. The contexts are made on first use.
    pub(crate) fn enable_zstd(&mut self, level: i32) {
        self.zstd = Some(Box::new(Zstd { level, deflate: None, inflate: None, scratch: Vec::new() }));
    }

    /// One Binary frame carrying `data` (compressed with `moonbridge.v2.zstd`), and where `data` itself starts
    /// in it when it is carried as is (so a caller can keep that part without copying).
    ///
    /// # Errors
    /// zstd failed (the stream cannot go on).
    pub(super) fn binary_frame(&mut self, data: &[u8]) -> io::Result<(Bytes, Option<usize>)> {
        let Some(z) = &mut self.zstd else {
            let (h, n) = wsframe::encode_header(OP_BINARY, data.len());
            let mut msg = Vec::with_capacity(n + data.len());
            msg.extend_from_slice(h.get(..n).unwrap_or_default());
            msg.extend_from_slice(data);
            return Ok((Bytes::from(msg), Some(n)));
        };
        // Room for the longest header in front, written once the compressed length is known: no second copy.
        let mut msg = vec![0u8; MAX_SERVER_HEADER];
        let deflate = match &mut z.deflate {
            Some(d) => d,
            None => z.deflate.insert(Compressor::new(z.level).map_err(io::Error::other)?),
        };
        deflate.compress(data, &mut msg).map_err(io::Error::other)?;
        let (h, n) = wsframe::encode_header(OP_BINARY, msg.len() - MAX_SERVER_HEADER);
        let start = MAX_SERVER_HEADER - n;
        if let (Some(dst), Some(src)) = (msg.get_mut(start..MAX_SERVER_HEADER), h.get(..n)) {
            dst.copy_from_slice(src);
        }
        Ok((Bytes::from(msg).slice(start..), None))
    }

    /// Turns on carriage v2: control messages (Text, at most [`v2::MAX_CONTROL_LEN`] bytes) are decoded.
    pub(crate) fn enable_v2(&mut self) {
        self.v2 = true;
        self.dec.accept_text(v2::MAX_CONTROL_LEN);
    }

    /// On a v2 link before anything else: when the player's first message is a control message, reads and
    /// parses it (a resume request); `Ok(None)` when the first message is something else (a new session).
    /// Bad input earns its close code in [`WsLink::fault`] and is an error.
    pub(crate) async fn first_control(&mut self) -> io::Result<Option<Control>> {
        loop {
            match self.dec.next_opcode() {
                Some(OP_TEXT) => match self.dec.try_next() {
                    Ok(Some(Event::Text(t))) => {
                        return match Control::parse(&t) {
                            Ok(c) => Ok(Some(c)),
                            Err(e) => {
                                self.fault = Some((carriage::CLOSE_PROTOCOL_ERROR, "malformed control message"));
                                Err(io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
                            }
                        };
                    }
                    Ok(_) => {}
                    Err(f) => return Err(self.fault_error(&f)),
                },
                Some(_) => return Ok(None),
                None => {}
            }
            if self.fill_alive().await? == 0 {
                self.peer_closed = true;
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// Sends a carriage v2 control message (one Text frame).
    pub(crate) async fn send_control(&mut self, c: &Control) -> io::Result<()> {
        self.write_frame(&control_frame(c)).await
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
    /// buffered), Pings are answered, a Close is answered and ends the turn.
    pub(super) async fn decode(&mut self, data: &mut BytesMut, limit: usize) -> Turn {
        let mut pongs: Vec<u8> = Vec::new();
        self.stopped_at_limit = false;
        let turn = loop {
            if data.len() >= limit {
                // Frames may still be buffered: the relay decodes again before it waits for the socket.
                self.stopped_at_limit = true;
                break Turn::Continue;
            }
            // A compressed message inflates in pieces of at most about what the caller takes this turn.
            if let Some(z) = self.zstd.as_mut() {
                if let Some(inflate) = z.inflate.as_mut().filter(|i| i.has_output()) {
                    z.scratch.clear();
                    match inflate.inflate(&mut z.scratch, limit - data.len(), self.max_message) {
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
                    Some(z) => match &mut z.inflate {
                        Some(i) => i.queue(&d),
                        None => match Decompressor::new() {
                            Ok(i) => z.inflate.insert(i).queue(&d),
                            Err(e) => break self.inflate_fault(&e),
                        },
                    },
                    None => {
                        self.stream_in += d.len() as u64;
                        data.extend_from_slice(&d);
                    }
                },
                Ok(Some(Event::Text(t))) => match Control::parse(&t) {
                    Ok(Control::Ack(n)) if self.v2 => self.peer_ack = Some(self.peer_ack.map_or(n, |a| a.max(n))),
                    _ => {
                        self.fault = Some((carriage::CLOSE_PROTOCOL_ERROR, "unexpected control message"));
                        break Turn::Fault(io::Error::new(io::ErrorKind::InvalidData, "unexpected control message"));
                    }
                },
                Ok(Some(Event::MessageEnd)) => {
                    if let Some(i) = self.zstd.as_mut().and_then(|z| z.inflate.as_mut()) {
                        i.end_message();
                    }
                    self.messages_in += 1;
                    self.counters.messages_in.inc();
                }
                Ok(Some(Event::Ping(p))) => pongs.extend_from_slice(&wsframe::frame(OP_PONG, &p)),
                Ok(Some(Event::Pong)) => {}
                Ok(Some(Event::Close(c))) => {
                    self.peer_closed = true;
                    self.peer_close_code = Some(match &c {
                        wsframe::CloseReceived::NoCode => 1005,
                        wsframe::CloseReceived::Code(code, _) => *code,
                    });
                    let _ = self.write_frame(&pongs).await;
                    self.send_close(c.reply_code(), "").await;
                    return Turn::Closed;
                }
                Err(f) => break self.fault_turn(&f),
            }
        };
        if !pongs.is_empty() {
            if let Err(e) = self.write_frame(&pongs).await {
                return Turn::Fault(e);
            }
        }
        turn
    }

    /// True when the last decode turn stopped at its limit with input left (buffered frames, or a compressed
    /// message with more to inflate): the relay decodes again before it waits for the socket.
    pub(super) fn decode_backlog(&self) -> bool {
        self.stopped_at_limit
            || self.zstd.as_ref().and_then(|z| z.inflate.as_ref()).is_some_and(Decompressor::has_output)
    }

    /// A compressed message that inflates too far (1009), is not zstd (1002), or finds no memory (1011).
    fn inflate_fault(&mut self, e: &CompressError) -> Turn {
        self.fault = Some(match e {
            CompressError::TooLarge { .. } => (carriage::CLOSE_MESSAGE_TOO_BIG, "message too big"),
            CompressError::NoMemory => (carriage::CLOSE_INTERNAL_ERROR, "out of memory"),
            _ => (carriage::CLOSE_PROTOCOL_ERROR, "bad compressed data"),
        });
        Turn::Fault(io::Error::new(io::ErrorKind::InvalidData, e.to_string()))
    }

    fn fault_turn(&mut self, f: &FrameFault) -> Turn {
        Turn::Fault(self.fault_error(f))
    }

    /// Records the close code a frame fault earned and returns it as an error.
    fn fault_error(&mut self, f: &FrameFault) -> io::Error {
        self.fault = Some((f.close_code(), f.close_reason()));
        io::Error::new(io::ErrorKind::InvalidData, f.to_string())
    }

    /// Writes one or more whole frames within the write-stall limit. Refused after a Close was sent or after
    /// an earlier write failed or was cut off (its frame may be half on the wire).
    pub(super) async fn write_frame(&mut self, bytes: &[u8]) -> io::Result<()> {
        if self.close_sent || self.broken {
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the WebSocket is closing"));
        }
        if bytes.is_empty() {
            return Ok(());
        }
        // Set until the write completes: a write dropped half-way (a timeout or select around it) leaves it set.
        self.broken = true;
        let stream = &mut self.stream;
        within_stall(self.write_stall, Side::Player, async {
            stream.write_all(bytes).await?;
            stream.flush().await
        })
        .await?;
        self.broken = false;
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
    pub(super) async fn send_close(&mut self, code: u16, reason: &str) {
        if !self.close_sent && !self.broken {
            let frame = wsframe::close_frame(code, reason);
            let _ = tokio::time::timeout(LINGER, self.write_frame(&frame)).await;
        }
        self.close_sent = true;
    }

    /// Reads more from the player into the decoder while keeping the keepalive schedule: the number of bytes
    /// read, 0 at end of stream; an error when the player is silent for three intervals or a Ping cannot leave.
    async fn fill_alive(&mut self) -> io::Result<usize> {
        loop {
            tokio::select! {
                biased;
                () = self.tick.as_mut(), if self.keepalive.is_some() => self.keepalive_tick(false).await?,
                r = Self::fill(&mut self.stream, &mut self.dec, &self.counters) => return self.received(r),
            }
        }
    }

    /// Notes a read for the keepalive schedule (anything received shows the player is alive).
    fn received(&mut self, r: io::Result<usize>) -> io::Result<usize> {
        if let (Ok(n), Some(k)) = (&r, &mut self.keepalive) {
            if *n > 0 {
                k.on_receive(Instant::now());
            }
        }
        r
    }

    /// Reads stream bytes into `buf` (appending), answering Pings on the way: `Ok(0)` when the player closed.
    /// Bad input is an error, and [`WsLink::fault`] holds the close code it earned.
    pub(crate) async fn read_stream(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        let before = buf.len();
        if !self.early.is_empty() {
            buf.extend_from_slice(&self.early.split());
            return Ok(buf.len() - before);
        }
        loop {
            match self.decode(buf, before + WS_READ_CHUNK).await {
                Turn::Continue => {}
                Turn::Closed => return Ok(buf.len() - before),
                Turn::Fault(e) => return Err(e),
            }
            if buf.len() > before {
                return Ok(buf.len() - before);
            }
            if self.peer_closed {
                return Ok(0);
            }
            if self.fill_alive().await? == 0 {
                self.peer_closed = true;
                return Ok(0);
            }
        }
    }

    /// Runs `work` while keeping the player's WebSocket alive: Pings on the keepalive schedule, Pongs to the
    /// player's Pings; stream bytes the player sends meanwhile are kept (at most [`EARLY_DATA_LIMIT`], then
    /// reading pauses) and reach the backend first. Fails, dropping `work`, when the player leaves or breaks the
    /// carriage, or goes silent for three intervals (not counting time when reading is paused). Writes to the
    /// player meanwhile (Pongs, Pings) are bounded by the write-stall limit.
    pub(crate) async fn during<T>(&mut self, work: impl Future<Output = T>) -> Result<T, PlayerGone> {
        if self.peer_closed {
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
                            self.peer_closed = true;
                            return Err(PlayerGone::Left("connection lost".into()));
                        }
                        Ok(_) => {}
                    }
                    let mut early = std::mem::take(&mut self.early);
                    let turn = self.decode(&mut early, EARLY_DATA_LIMIT).await;
                    self.early = early;
                    match turn {
                        Turn::Continue => {}
                        Turn::Closed => return Err(PlayerGone::Left("closed".into())),
                        Turn::Fault(e) => return Err(PlayerGone::Fault(e.to_string())),
                    }
                }
            }
        }
    }

    /// One keepalive tick (the schedule of [`Keepalive`]): a Ping after an interval without writing, close 1001
    /// after three intervals without receiving anything; re-arms the timer. While the proxy itself is not
    /// reading (`paused`), silence does not count against the player. A Ping that cannot be written, or a dead
    /// peer, is an error.
    pub(super) async fn keepalive_tick(&mut self, paused: bool) -> io::Result<()> {
        match self.keepalive_due(paused) {
            KeepaliveAction::None => Ok(()),
            KeepaliveAction::Ping => self.write_frame(&wsframe::frame(OP_PING, &[])).await,
            KeepaliveAction::Dead => {
                self.close(carriage::CLOSE_GOING_AWAY, "no traffic").await;
                Err(io::Error::new(io::ErrorKind::TimedOut, "no traffic for 3 ping intervals"))
            }
        }
    }

    /// The keepalive schedule's decision at a tick, without acting on it: re-arms the timer and counts the
    /// Ping or the dead peer in the metrics.
    pub(super) fn keepalive_due(&mut self, paused: bool) -> KeepaliveAction {
        let Some(k) = &mut self.keepalive else { return KeepaliveAction::None };
        let now = Instant::now();
        if paused {
            k.on_receive(now);
        }
        let action = k.on_tick(now);
        self.tick.as_mut().reset(tick_deadline(Some(k)));
        match action {
            KeepaliveAction::Ping => self.counters.pings_sent.inc(),
            KeepaliveAction::Dead => self.counters.silent_closed.inc(),
            KeepaliveAction::None => {}
        }
        action
    }

    /// Shortens the keepalive interval to at most `max` (carriage v2 notices a silent drop sooner); no effect
    /// when the keepalive is off.
    pub(super) fn shorten_keepalive(&mut self, max: Duration) {
        if let Some(k) = &self.keepalive {
            if k.tick_period() * 2 > max {
                let k = Keepalive::new(max, Instant::now());
                self.tick.as_mut().reset(tick_deadline(Some(&k)));
                self.keepalive = Some(k);
            }
        }
    }

    /// Ends the WebSocket: a Close with `code` (the fault's code when bad input earned one), unless one was
    /// already sent; then, unless the player's Close already arrived, a brief wait for it (so the TCP close
    /// does not race it); then the transport's own close (TLS close_notify, FIN).
    pub(crate) async fn close(&mut self, code: u16, reason: &'static str) {
        let (code, reason) = self.fault.unwrap_or((code, reason));
        self.send_close(code, reason).await;
        if !self.peer_closed {
            // Until the player's Close (or EOF): frames are decoded and dropped while the stream is in step;
            // after a frame fault the decoder is not, so raw bytes are dropped (reading on keeps the kernel
            // from answering with a reset that could destroy the Close just sent).
            let _ = tokio::time::timeout(LINGER, async {
                let mut in_step = true;
                loop {
                    while in_step {
                        match self.dec.try_next() {
                            Ok(Some(Event::Close(_))) => return,
                            Ok(Some(_)) => {}
                            Ok(None) => break,
                            Err(_) => in_step = false,
                        }
                    }
                    if !in_step {
                        self.dec.buffer_mut().clear();
                    }
                    match Self::fill(&mut self.stream, &mut self.dec, &self.counters).await {
                        Ok(0) | Err(_) => return,
                        Ok(_) => {}
                    }
                }
            })
            .await;
            self.peer_closed = true;
        }
        let _ = tokio::time::timeout(LINGER, self.stream.shutdown()).await;
    }

    /// Relays the WebSocket ⇄ `backend` until either side ends (see the module documentation).
    pub(crate) async fn relay(&mut self, backend: &mut BackendSide, start: RelayStart<'_>) -> RelayReport {
        let shutdown = start.shutdown;
        // Counting, frame following and (online mode) AES-CFB8, in place per batch, as in the TCP relay.
        let (mut up, mut down) = Flow::pair(start);
        let stall = up.stall;
        // Stream bytes decoded from the player, written to the backend together (one write per read). Bytes the
        // player sent ahead during the login stage go first, then what is still buffered undecoded (reading
        // paused at the early-data limit), and a Close that came with them.
        let mut batch = self.early.split();
        let mut pending_turn = if self.peer_closed {
            Turn::Closed
        } else {
            let limit = batch.len() + RELAY_CHUNK;
            self.decode(&mut batch, limit).await
        };
        let end = loop {
            // A handover, when one is due: the player's bytes so far are with the old backend (each batch is
            // written whole).
            if let Err(e) = backend.hand_over(&mut up, &mut down).await {
                self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                break RelayEnd::Error(Side::Backend, e);
            }
            if !batch.is_empty() {
                up.process(&mut batch);
                if let Err(e) = write_all(backend.stream(), &batch, stall, Side::Backend).await {
                    self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                    break RelayEnd::Error(Side::Backend, e);
                }
                batch.clear();
            }
            match std::mem::replace(&mut pending_turn, Turn::Continue) {
                Turn::Continue => {}
                Turn::Closed => {
                    // The player is gone (its Close was answered): FIN to the backend, then let it finish briefly.
                    let _ = socket2::SockRef::from(backend.stream()).shutdown(std::net::Shutdown::Write);
                    discard_until_eof(backend.stream(), LINGER).await;
                    let _ = tokio::time::timeout(LINGER, self.stream.shutdown()).await;
                    break RelayEnd::Closed(Side::Player);
                }
                Turn::Fault(e) => {
                    self.close(carriage::CLOSE_PROTOCOL_ERROR, "protocol error").await;
                    break RelayEnd::Error(Side::Player, e);
                }
            }
            if self.decode_backlog() {
                pending_turn = self.decode(&mut batch, RELAY_CHUNK).await;
                continue;
            }
            tokio::select! {
                r = Self::fill(&mut self.stream, &mut self.dec, &self.counters) => {
                    match r {
                        Ok(0) => {
                            self.peer_closed = true;
                            pending_turn = Turn::Closed;
                            continue;
                        }
                        Ok(_) => {}
                        Err(e) => {
                            self.peer_closed = true;
                            let _ = socket2::SockRef::from(backend.stream()).shutdown(std::net::Shutdown::Write);
                            break RelayEnd::Error(Side::Player, e);
                        }
                    }
                    if let Some(k) = &mut self.keepalive {
                        k.on_receive(Instant::now());
                    }
                    // Pongs are written inside, under the write-stall limit.
                    pending_turn = self.decode(&mut batch, RELAY_CHUNK).await;
                }
                r = backend.stream().readable() => {
                    if let Err(e) = r {
                        break RelayEnd::Error(Side::Backend, e);
                    }
                    // One copy, out of the scratch buffer into the message (header in front), compressing on the way
                    // with moonbridge.v2.zstd.
                    let data = match read_batch(backend.stream(), &mut down, RELAY_CHUNK, |d| (self.binary_frame(d), d.len())) {
                        Ok(Some((Ok(msg), n))) => (msg.0, n),
                        Ok(Some((Err(e), _))) => {
                            self.close(carriage::CLOSE_INTERNAL_ERROR, "compression failed").await;
                            break RelayEnd::Error(Side::Player, e);
                        }
                        Ok(None) => continue,
                        Err(e) => {
                            self.close(carriage::CLOSE_INTERNAL_ERROR, "server connection lost").await;
                            break RelayEnd::Error(Side::Backend, e);
                        }
                    };
                    if data.1 == 0 {
                        // Backend FIN: close 1000, then the TCP close.
                        self.close(carriage::CLOSE_NORMAL, "").await;
                        break RelayEnd::Closed(Side::Backend);
                    }
                    self.messages_out += 1;
                    self.stream_out += data.1 as u64;
                    self.counters.messages_out.inc();
                    if let Err(e) = self.write_frame(&data.0).await {
                        break RelayEnd::Error(Side::Player, e);
                    }
                }
                () = self.tick.as_mut(), if self.keepalive.is_some() => {
                    if let Err(e) = self.keepalive_tick(false).await {
                        break RelayEnd::Error(Side::Player, e);
                    }
                }
                () = shutdown.cancelled() => {
                    inject_shutdown(self, &mut down).await;
                    self.close(carriage::CLOSE_GOING_AWAY, "proxy shutting down").await;
                    break RelayEnd::Shutdown;
                }
            }
        };
        RelayReport { up: up.bytes, down: down.bytes, end }
    }
}

impl<S: AsyncRead + AsyncWrite + Unpin + Send> PlayerSink for WsLink<S> {
    async fn drain(&mut self, _down: &mut Flow) -> io::Result<()> {
        Ok(()) // every batch left as a whole message
    }

    async fn send(&mut self, bytes: Vec<u8>) -> io::Result<()> {
        self.send_binary(&bytes).await
    }
}

/// A carriage v2 control message as one Text frame (RFC 6455 §5.6, unmasked from the proxy).
pub(super) fn control_frame(c: &Control) -> Vec<u8> {
    wsframe::frame(OP_TEXT, c.encode().as_bytes())
}

/// When the keepalive timer fires next: at the schedule's next tick, or now when there is no keepalive (the
/// timer's branch is disabled then).
pub(super) fn tick_deadline(keepalive: Option<&Keepalive>) -> tokio::time::Instant {
    keepalive.map_or_else(tokio::time::Instant::now, |k| tokio::time::Instant::from_std(k.next_tick()))
}
