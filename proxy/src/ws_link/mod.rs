//! The player's WebSocket connection ([`WsLink`], carriage version 1 and the v2 additions, see
//! [`moonbridge_protocol::ws`]): where a WebSocket message becomes stream bytes and stream bytes become a
//! message, in every stage. The login stage ([`crate::session`]) and the relay ([`crate::relay`]) both stand
//! on it: the codec is [`codec`], the login stage's reads and waits are [`stage`].
//!
//! Framing is [`moonbridge_protocol::ws::frame`] (RFC 6455 §5, server side, sans-IO), so the proxy never holds a
//! whole message: the payload of a Binary frame leaves for the backend as it arrives, and what one connection
//! can make the proxy hold is one read ([`WS_READ_CHUNK`]) plus at most [`crate::wire::EARLY_DATA_LIMIT`] bytes sent ahead
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

use std::io;
use std::pin::Pin;
use std::time::{Duration, Instant};

use bytes::BytesMut;
use moonbridge_protocol::ws::compress::Contexts;
use moonbridge_protocol::ws::frame::{self as wsframe, Event, ServerDecoder, OP_PING, OP_TEXT};
use moonbridge_protocol::ws::v2::{self, Control};
use moonbridge_protocol::ws::{self as carriage, Keepalive, KeepaliveAction};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};

use crate::metrics::WsMetrics;
use crate::wire::LINGER;

pub(crate) mod codec;
pub(crate) mod stage;
mod state;
#[cfg(test)]
mod tests;

pub(crate) use state::PeerClose;
use state::State;

/// Largest single read from a WebSocket player, in bytes. Player → proxy traffic is small (a tick's packets),
/// and the read buffer is kept per connection, so it stays small; larger messages arrive over several reads.
pub(crate) const WS_READ_CHUNK: usize = 4 * 1024;

/// Largest header of a frame the proxy sends (unmasked, 64-bit length; RFC 6455 §5.2), in bytes.
const MAX_SERVER_HEADER: usize = 10;

/// The zstd contexts of a `moonbridge.v2.zstd` connection (boxed: most connections have none). Each is made on
/// first use and freed when its direction goes quiet ([`Contexts`]), so a connection that sends (or is sent)
/// no Binary message for a keepalive tick period or two costs none of its memory.
pub(crate) struct Zstd {
    ctx: Contexts,
    /// Where a piece of a player's message inflates before it joins the batch (its capacity is reused).
    scratch: Vec<u8>,
}

/// A player's WebSocket (over TCP or TLS) and what the session needs to know about it: a closed type, whose
/// state only its own methods change (the relay and the login stage read it through them).
pub(crate) struct WsLink<S> {
    stream: S,
    dec: ServerDecoder,
    counters: WsMetrics,
    /// The keepalive schedule (none when `ping_interval_seconds` is 0) and its one timer, kept across stages.
    keepalive: Option<Keepalive>,
    tick: Pin<Box<tokio::time::Sleep>>,
    /// How long a write to the player may make no progress (`limits.write_stall_timeout_seconds`).
    write_stall: Duration,
    /// Where its closing handshake is, a fault, a broken stream ([`State`]).
    state: State,
    /// Carriage v2 was negotiated (`moonbridge.v2`): control messages (Text) are accepted.
    v2: bool,
    /// Stream bytes received from and sent to the player in Binary payloads (carriage v2 counts; carried
    /// over to a resumed link).
    stream_in: u64,
    stream_out: u64,
    /// Stream bytes decoded but not yet taken by the session (sent ahead during the login stage).
    early: BytesMut,
    /// Binary messages received from and sent to this player.
    messages_in: u64,
    messages_out: u64,
    /// `max_ws_message_bytes`: also the most one compressed message may inflate to.
    max_message: usize,
    /// `moonbridge.v2.zstd` was selected: both directions' contexts.
    zstd: Option<Box<Zstd>>,
    /// The last decode turn stopped early (its byte limit, or a control message) with input left (see
    /// [`WsLink::decode_backlog`]).
    stopped_early: bool,
    /// The client offered moves (`MoonBridge-Move: 1`, carriage v2): a draining proxy may send it `move`.
    move_offered: bool,
    /// The client acknowledges every message (`MoonBridge-Pace: 1`).
    paced: bool,
}

/// What one decode turn turned up besides stream bytes: the event the relay acts on.
#[derive(Debug)]
pub(crate) enum Turn {
    /// Nothing that needs the relay.
    Continue,
    /// The player acknowledged this many stream bytes (carriage v2 `ack`).
    Ack(u64),
    /// The player's move was refused at the other instance (carriage v2 `stay`).
    Stay,
    /// The player closed (its Close answered) or its connection ended.
    Closed(PeerClose),
    /// The player broke the carriage (the Close it earned is recorded; close with it).
    Fault(io::Error),
    /// A write to the player (a Pong, the answering Close) failed: the link is lost, not broken by the player.
    Lost(io::Error),
}

/// What woke a wait on the link ([`WsLink::wait`]).
pub(crate) enum Wake {
    /// A read from the socket: the bytes read (0 at end of stream), or its error.
    Read(io::Result<usize>),
    /// The keepalive timer.
    Tick,
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
            state: State::Open,
            v2: false,
            stream_in: 0,
            stream_out: 0,
            early: BytesMut::new(),
            messages_in: 0,
            messages_out: 0,
            max_message: max_message_bytes,
            zstd: None,
            stopped_early: false,
            move_offered: false,
            paced: false,
        }
    }

    /// The stream and the bytes read from it but not decoded yet (to carry the connection elsewhere whole:
    /// a resume for another instance of the network).
    pub(crate) fn into_raw(mut self) -> (S, BytesMut) {
        let rest = self.dec.buffer_mut().split();
        (self.stream, rest)
    }

    /// How long a write to the player may make no progress (`limits.write_stall_timeout_seconds`).
    pub(crate) fn write_stall(&self) -> Duration {
        self.write_stall
    }

    /// Turns on `moonbridge.v2.zstd` compression (after [`WsLink::enable_v2`]); `level` is for what the proxy
    /// sends. The contexts are made on first use.
    pub(crate) fn enable_zstd(&mut self, level: i32) {
        self.zstd = Some(Box::new(Zstd { ctx: Contexts::new(level), scratch: Vec::new() }));
    }

    /// At a keepalive tick, the quiet-spell rule of `moonbridge.v2.zstd` ([`Contexts::on_tick`]): when nothing
    /// was compressed for the player since the last tick, the whole Binary frame that ends the zstd frame (no
    /// stream bytes; counted as a message), and the compression context is freed. `None` otherwise.
    ///
    /// # Errors
    /// zstd failed (the stream cannot go on).
    pub(crate) fn zstd_quiet_frame(&mut self) -> io::Result<Option<Vec<u8>>> {
        let Some(z) = &mut self.zstd else { return Ok(None) };
        let Some(end) = z.ctx.on_tick().map_err(io::Error::other)? else { return Ok(None) };
        self.counters.zstd_freed.inc();
        let (h, n) = wsframe::encode_header(wsframe::OP_BINARY, end.len());
        let mut frame = Vec::with_capacity(n + end.len());
        frame.extend_from_slice(h.get(..n).unwrap_or_default());
        frame.extend_from_slice(&end);
        self.messages_out += 1;
        self.counters.messages_out.inc();
        Ok(Some(frame))
    }

    /// How this link carries the stream: v1, v2, or v2 with zstd.
    pub(crate) fn carriage(&self) -> crate::transport::Carriage {
        use crate::transport::Carriage;
        match (self.v2, self.zstd.is_some()) {
            (false, _) => Carriage::V1,
            (true, false) => Carriage::V2,
            (true, true) => Carriage::V2Zstd,
        }
    }

    /// Turns on carriage v2: control messages (Text, at most [`v2::MAX_CONTROL_LEN`] bytes) are decoded.
    pub(crate) fn enable_v2(&mut self) {
        self.v2 = true;
        self.dec.accept_text(v2::MAX_CONTROL_LEN);
    }

    /// On a v2 link before anything else: when the player's first message is a control message, reads and
    /// parses it (a resume request); `Ok(None)` when the first message is something else (a new session).
    /// Bad input earns its close code (sent by [`WsLink::close`]) and is an error.
    pub(crate) async fn first_control(&mut self) -> io::Result<Option<Control>> {
        loop {
            match self.dec.next_opcode() {
                Some(OP_TEXT) => match self.dec.try_next() {
                    Ok(Some(Event::Text(t))) => {
                        return match Control::parse(&t) {
                            Ok(c) => Ok(Some(c)),
                            Err(e) => {
                                self.fault(carriage::CLOSE_PROTOCOL_ERROR, "malformed control message");
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
                self.ended();
                return Err(io::ErrorKind::UnexpectedEof.into());
            }
        }
    }

    /// Sends a carriage v2 control message (one Text frame).
    pub(crate) async fn send_control(&mut self, c: &Control) -> io::Result<()> {
        self.write_frame(&control_frame(c)).await
    }

    /// One keepalive tick (the schedule of [`Keepalive`]): a Ping after an interval without writing, close 1001
    /// after three intervals without receiving anything; re-arms the timer. While the proxy itself is not
    /// reading (`paused`), silence does not count against the player. A Ping that cannot be written, or a dead
    /// peer, is an error.
    pub(crate) async fn keepalive_tick(&mut self, paused: bool) -> io::Result<()> {
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
    pub(crate) fn keepalive_due(&mut self, paused: bool) -> KeepaliveAction {
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
    pub(crate) fn shorten_keepalive(&mut self, max: Duration) {
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
        let (code, reason) = self.state.fault().unwrap_or((code, reason));
        self.send_close(code, reason).await;
        if !self.peer_closed() {
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
            self.ended();
        }
        let _ = tokio::time::timeout(LINGER, self.stream.shutdown()).await;
    }

    /// Records the close code bad input earned (the Close [`WsLink::close`] sends).
    pub(crate) fn fault(&mut self, code: u16, reason: &'static str) {
        self.state = self.state.faulted(code, reason);
    }

    /// The player's connection ended without a Close: nothing more is read.
    pub(crate) fn ended(&mut self) {
        self.state = self.state.peer_ended(PeerClose::ENDED);
    }

    /// How the player's side ended, once it did (its Close, or the connection's end).
    pub(crate) fn peer_close(&self) -> Option<PeerClose> {
        self.state.peer_close()
    }

    /// The player's side ended: nothing more will be read.
    pub(crate) fn peer_closed(&self) -> bool {
        self.peer_close().is_some()
    }

    /// Both sides of the closing handshake are done: the player's Close arrived (or its connection ended) and
    /// this side's Close went out (or cannot: the stream broke).
    pub(crate) fn closed_both_ways(&self) -> bool {
        self.peer_closed() && !self.state.writable()
    }

    /// The transport's own close (FIN, TLS close_notify) within `limit`, with no Close frame: a lost link's end.
    pub(crate) async fn shutdown_transport(&mut self, limit: Duration) {
        let _ = tokio::time::timeout(limit, self.stream.shutdown()).await;
    }

    /// Carriage v2 was negotiated.
    pub(crate) fn is_v2(&self) -> bool {
        self.v2
    }

    /// The client said it acknowledges often enough to be paced (`MoonBridge-Pace: 1`).
    pub(crate) fn set_paced(&mut self, paced: bool) {
        self.paced = paced;
    }

    /// The client acknowledges every message (`MoonBridge-Pace: 1`, carriage v2 only): the relay keeps a window.
    pub(crate) fn paced(&self) -> bool {
        self.v2 && self.paced
    }

    /// The client offered moves (`MoonBridge-Move: 1`): a draining proxy may send it `move`.
    pub(crate) fn offer_moves(&mut self, offered: bool) {
        self.move_offered = offered;
    }

    /// The player's client follows a draining instance's `move`: carriage v2 and offered.
    pub(crate) fn can_move(&self) -> bool {
        self.v2 && self.move_offered
    }

    /// Stream bytes received from and sent to the player (carriage v2 counts).
    pub(crate) fn counts(&self) -> (u64, u64) {
        (self.stream_in, self.stream_out)
    }

    /// Goes on from `received` stream bytes received from the player and `sent` sent to it (a moved
    /// session's counts).
    pub(crate) fn continue_counts(&mut self, received: u64, sent: u64) {
        self.stream_in = received;
        self.stream_out = sent;
    }

    /// Takes over the session of `old`, whose player resumes on this link having received `received` stream
    /// bytes: the counts go on from there, and the message counts add up.
    pub(crate) fn take_over_counts(&mut self, old: &Self, received: u64) {
        self.stream_in = old.stream_in;
        self.stream_out = received;
        self.messages_in += old.messages_in;
        self.messages_out += old.messages_out;
    }

    /// Binary messages received from and sent to this player.
    pub(crate) fn message_counts(&self) -> (u64, u64) {
        (self.messages_in, self.messages_out)
    }

    /// Counts one Binary message of `n` stream bytes sent to the player (built with
    /// [`WsLink::binary_frame`] and written by the caller).
    pub(crate) fn count_sent(&mut self, n: usize) {
        self.stream_out += n as u64;
        self.messages_out += 1;
        self.counters.messages_out.inc();
    }

    /// What the relay starts with: the bytes the player sent ahead during the login stage, then what is
    /// still buffered undecoded (reading paused at the early-data limit), and the turn that decoding ended with
    /// (the player's Close, when it came with them).
    pub(crate) async fn first_inbound(&mut self, chunk: usize) -> (BytesMut, Turn) {
        let mut batch = self.early.split();
        let turn = match self.peer_close() {
            Some(c) => Turn::Closed(c),
            None => {
                let limit = batch.len() + chunk;
                self.decode(&mut batch, limit).await
            }
        };
        (batch, turn)
    }
}

/// A carriage v2 control message as one Text frame (RFC 6455 §5.6, unmasked from the proxy).
pub(crate) fn control_frame(c: &Control) -> Vec<u8> {
    wsframe::frame(OP_TEXT, c.encode().as_bytes())
}

/// When the keepalive timer fires next: at the schedule's next tick, or now when there is no keepalive (the
/// timer's branch is disabled then).
pub(crate) fn tick_deadline(keepalive: Option<&Keepalive>) -> tokio::time::Instant {
    keepalive.map_or_else(tokio::time::Instant::now, |k| tokio::time::Instant::from_std(k.next_tick()))
}
