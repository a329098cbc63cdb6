//! WebSocket carriage, version 2 (`docs/carriage.md`): session resume over a new WebSocket.
//!
//! Version 2 is version 1 (Binary messages carry the Minecraft byte stream) plus **control messages**: short
//! Text messages (one unfragmented frame, at most [`MAX_CONTROL_LEN`] bytes of ASCII). A Text message never
//! carries Minecraft bytes, so the two can never be confused. The forms, one space between fields, counts in
//! decimal:
//!
//! | message | sent by | meaning |
//! |---|---|---|
//! | `session <token> <window-seconds>` | proxy, when play begins | this session can be resumed with `<token>` for `<window-seconds>` after a drop |
//! | `ack <count>` | both | I have received `<count>` Minecraft bytes from you on this session, in all |
//! | `resume <token> <received> <sent>` | client, as the first message of a new WebSocket | resume the session of `<token>`; I have received `<received>` bytes from you and sent `<sent>` |
//! | `resumed <count> <token>` | proxy, in answer | resumed; I have received `<count>` bytes from you; the next resume uses `<token>` |
//! | `move <ticket>` | proxy, to a client that offered moves ([`MOVE_HEADER`]) | this instance is draining: reconnect and present `<ticket>`; no Minecraft bytes follow here |
//! | `moving <ticket> <received> <sent>` | client, as the first message of a new WebSocket | take over the session `<ticket>` names; I have received `<received>` bytes and sent `<sent>` |
//! | `moved <count> <token>` | proxy, in answer to `moving` | taken over; I hold `<count>` bytes of yours; the next resume uses `<token>` |
//! | `stay` | client, on the old WebSocket | the move was refused (close [`CLOSE_MOVE_REFUSED`] on the new one): go on here |
//!
//! Counts are the Minecraft bytes carried in Binary payloads since the session's first byte (its handshake),
//! over every WebSocket the session used. Each side keeps what it sent and the other has not acknowledged
//! ([`Retained`]), and after a resume sends again everything past the count the other side named.
//!
//! A token is `<instance>.<secret>`: 16 hexadecimal digits naming the proxy instance (random per process) and
//! 32 naming the session (128 random bits). Tokens are used once: the answer to a resume carries the next.

use std::collections::VecDeque;
use std::fmt;

use bytes::{Buf, Bytes};

/// The subprotocol of carriage version 2 (offered before `moonbridge.v1`; the proxy picks the highest it
/// knows).
pub const SUBPROTOCOL_V2: &str = "moonbridge.v2";

/// The longest keepalive (Ping) interval either side uses on a carriage v2 connection, whatever its
/// configured `ping_interval`: 4 seconds. Both ends agree on it: a silent drop is then noticed within three
/// intervals (12 s), in time to resume before a 1.7.10 server's 30-second read timeout ends the session.
pub const MAX_PING_INTERVAL: std::time::Duration = std::time::Duration::from_secs(4);

/// Longest control message, in bytes (one frame, so it fits a control-sized payload).
pub const MAX_CONTROL_LEN: usize = 125;

/// Each side sends an `ack` at least every this many bytes received (and at each keepalive tick when its count
/// changed), so the other side's retained bytes stay near this size.
pub const ACK_EVERY_BYTES: u64 = 64 * 1024;

/// 4001: the token is not known here (never issued, or its session ended: the window passed, the buffer ran
/// out, the proxy restarted).
pub const CLOSE_RESUME_UNKNOWN: u16 = 4001;
/// 4002: the token names another proxy instance (the reconnect reached a different instance).
pub const CLOSE_RESUME_OTHER_INSTANCE: u16 = 4002;
/// 4003: the count is outside what the proxy retains (bytes it no longer has, or never sent).
pub const CLOSE_RESUME_OUT_OF_RANGE: u16 = 4003;
/// 4004: the token was already used for a resume.
pub const CLOSE_RESUME_USED: u16 = 4004;
/// 4005: sent on a session's old WebSocket when a resume took the session over.
pub const CLOSE_TAKEN_OVER: u16 = 4005;

/// 4006: a `moving` request was refused (the ticket is not known, the draining instance cannot be reached, or
/// the backend refused the player's second login); the client goes on over its old WebSocket (`stay`).
pub const CLOSE_MOVE_REFUSED: u16 = 4006;

/// 4007: the instance reached is draining (docs/network.md, "Drain") and sends a new session on before anything
/// of it starts there (the answer to its first message). The client connects to its URL again with backoff (the
/// balancer picks another instance) and sends its bytes again; nothing of the session was lost. Sent only to a
/// client that offered moves ([`MOVE_HEADER`]); a `moving` request or a resume of a session held elsewhere is
/// closed without a Close frame instead, which every client version tries again.
pub const CLOSE_DRAINING: u16 = 4007;

/// The reason of the Close 1000 with which a client ends its old WebSocket once the new one answered `moved`;
/// the draining proxy counts the move as done only on this Close (any other end of the old connection is a
/// lost link there).
pub const CLOSE_REASON_MOVED: &str = "moved";

/// The request header by which a client offers moves (`docs/carriage.md`, "Moving to another instance"):
/// `MoonBridge-Move: 1`. A proxy sends `move` only to a client that sent it.
pub const MOVE_HEADER: &str = "MoonBridge-Move";

/// The request header by which a client says it acknowledges often enough to be paced (`docs/carriage.md`,
/// "Pacing"): `MoonBridge-Pace: 1`, an `ack` after every Binary message received. A proxy keeps a window of
/// bytes in flight past the last `ack` only for a client that sent it.
pub const PACE_HEADER: &str = "MoonBridge-Pace";

/// True for the close codes that refuse a resume (the client gives up and reports it).
pub fn is_resume_refusal(code: u16) -> bool {
    matches!(code, CLOSE_RESUME_UNKNOWN..=CLOSE_RESUME_USED)
}

/// What a refusal close code means, for error messages.
pub fn refusal_text(code: u16) -> &'static str {
    match code {
        CLOSE_RESUME_UNKNOWN => "the proxy no longer holds this session (its resume window passed or it restarted)",
        CLOSE_RESUME_OTHER_INSTANCE => {
            "the reconnect reached a different proxy instance than the one holding the session"
        }
        CLOSE_RESUME_OUT_OF_RANGE => "the proxy no longer holds the bytes needed to resume",
        CLOSE_RESUME_USED => "the resume token was already used",
        _ => "the resume was refused",
    }
}

/// Bytes in an instance id.
pub const INSTANCE_LEN: usize = 8;
/// Bytes in a session secret (128 bits).
pub const SECRET_LEN: usize = 16;

/// A resume token: the proxy instance and the session's secret. Its text form is `<16 hex>.<32 hex>`.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
pub struct ResumeToken {
    /// The proxy instance that issued it.
    pub instance: [u8; INSTANCE_LEN],
    /// The session's random secret.
    pub secret: [u8; SECRET_LEN],
}

impl fmt::Debug for ResumeToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        // The secret is a credential: never in logs.
        write!(f, "ResumeToken({}.…)", hex(&self.instance))
    }
}

impl fmt::Display for ResumeToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}.{}", hex(&self.instance), hex(&self.secret))
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex<const N: usize>(s: &str) -> Option<[u8; N]> {
    if s.len() != N * 2 || !s.bytes().all(|b| b.is_ascii_hexdigit()) {
        return None;
    }
    let mut out = [0u8; N];
    for (i, o) in out.iter_mut().enumerate() {
        *o = u8::from_str_radix(s.get(i * 2..i * 2 + 2)?, 16).ok()?;
    }
    Some(out)
}

impl std::str::FromStr for ResumeToken {
    type Err = ControlError;

    fn from_str(s: &str) -> Result<Self, ControlError> {
        let (i, k) = s.split_once('.').ok_or(ControlError::Token)?;
        Ok(Self { instance: unhex(i).ok_or(ControlError::Token)?, secret: unhex(k).ok_or(ControlError::Token)? })
    }
}

/// A control message (see the module documentation for the forms).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Control {
    /// `session <token> <window-seconds>` (proxy → client).
    Session {
        /// The token of the first resume.
        token: ResumeToken,
        /// How long the proxy keeps the session after a drop, in seconds.
        window_seconds: u64,
    },
    /// `ack <count>` (both ways).
    Ack(u64),
    /// `resume <token> <received> <sent>` (client → proxy, first message of a new WebSocket).
    Resume {
        /// The token the last `session` or `resumed` gave.
        token: ResumeToken,
        /// Bytes the client has received from the proxy.
        received: u64,
        /// Bytes the client has sent in all (what it will replay is past the proxy's count).
        sent: u64,
    },
    /// `resumed <count> <token>` (proxy → client).
    Resumed {
        /// Bytes the proxy has received from the client.
        received: u64,
        /// The token of the next resume.
        token: ResumeToken,
    },
    /// `move <ticket>` (draining proxy → client): reconnect and present the one-time `ticket`.
    Move {
        /// The one-time ticket (the form of a resume token: it names the draining instance).
        ticket: ResumeToken,
    },
    /// `moving <ticket> <received> <sent>` (client → proxy, first message of a new WebSocket).
    Moving {
        /// The ticket of the `move`.
        ticket: ResumeToken,
        /// Bytes the client has received from the draining proxy, in all (its count when `move` arrived).
        received: u64,
        /// Bytes the client has sent, in all.
        sent: u64,
    },
    /// `moved <count> <token>` (proxy → client, in answer to `moving`).
    Moved {
        /// Bytes of the client's the session holds (the client's `sent`: nothing is sent again).
        received: u64,
        /// The token of the next resume.
        token: ResumeToken,
    },
    /// `stay` (client → draining proxy, on the old WebSocket): the move was refused.
    Stay,
}

/// Why a control message was refused (the receiver closes with 1002).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ControlError {
    /// Not one of the forms, or longer than [`MAX_CONTROL_LEN`].
    #[error("malformed control message")]
    Malformed,
    /// A token that is not `<16 hex>.<32 hex>`.
    #[error("malformed resume token")]
    Token,
    /// A count that is not a decimal `u64`.
    #[error("malformed byte count")]
    Count,
}

fn count(s: &str) -> Result<u64, ControlError> {
    if s.is_empty() || !s.bytes().all(|b| b.is_ascii_digit()) {
        return Err(ControlError::Count);
    }
    s.parse().map_err(|_| ControlError::Count)
}

impl Control {
    /// Parses a Text message's payload.
    ///
    /// # Errors
    /// [`ControlError`] for anything but the forms above.
    pub fn parse(text: &[u8]) -> Result<Self, ControlError> {
        if text.len() > MAX_CONTROL_LEN {
            return Err(ControlError::Malformed);
        }
        let text = std::str::from_utf8(text).map_err(|_| ControlError::Malformed)?;
        let fields: Vec<&str> = text.split(' ').collect();
        match fields.as_slice() {
            ["session", t, w] => Ok(Self::Session { token: t.parse()?, window_seconds: count(w)? }),
            ["ack", n] => Ok(Self::Ack(count(n)?)),
            ["resume", t, n, m] => Ok(Self::Resume { token: t.parse()?, received: count(n)?, sent: count(m)? }),
            ["resumed", n, t] => Ok(Self::Resumed { received: count(n)?, token: t.parse()? }),
            ["move", t] => Ok(Self::Move { ticket: t.parse()? }),
            ["moving", t, n, m] => Ok(Self::Moving { ticket: t.parse()?, received: count(n)?, sent: count(m)? }),
            ["moved", n, t] => Ok(Self::Moved { received: count(n)?, token: t.parse()? }),
            ["stay"] => Ok(Self::Stay),
            _ => Err(ControlError::Malformed),
        }
    }

    /// The Text payload of this message.
    pub fn encode(&self) -> String {
        match self {
            Self::Session { token, window_seconds } => format!("session {token} {window_seconds}"),
            Self::Ack(n) => format!("ack {n}"),
            Self::Resume { token, received, sent } => format!("resume {token} {received} {sent}"),
            Self::Resumed { received, token } => format!("resumed {received} {token}"),
            Self::Move { ticket } => format!("move {ticket}"),
            Self::Moving { ticket, received, sent } => format!("moving {ticket} {received} {sent}"),
            Self::Moved { received, token } => format!("moved {received} {token}"),
            Self::Stay => "stay".to_string(),
        }
    }
}

/// Why [`Retained`] refused a count.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RetainError {
    /// The count is past what was sent.
    #[error("count {count} is past the {end} bytes sent")]
    Ahead {
        /// The count named.
        count: u64,
        /// Bytes sent so far.
        end: u64,
    },
    /// The count is before the first byte still retained.
    #[error("count {count} is before the {start} bytes already acknowledged")]
    Behind {
        /// The count named.
        count: u64,
        /// The first byte still retained.
        start: u64,
    },
}

/// The bytes one side sent (or queued to send) and the other has not acknowledged: the stream from count
/// [`Retained::start`] to [`Retained::end`], kept as the chunks that were sent (no copy: a chunk shares the
/// buffer of the message it went out in). Bounded by its owner (the proxy pauses its backend reads at
/// `resume_buffer_bytes`; the client stops taking batches at its own bound).
#[derive(Debug, Default)]
pub struct Retained {
    start: u64,
    chunks: VecDeque<Bytes>,
    len: usize,
}

impl Retained {
    /// Nothing retained yet; the next byte pushed is byte `start` of the stream.
    pub fn starting_at(start: u64) -> Self {
        Self { start, chunks: VecDeque::new(), len: 0 }
    }

    /// Count of the first retained byte.
    pub fn start(&self) -> u64 {
        self.start
    }

    /// Count just past the last byte sent.
    pub fn end(&self) -> u64 {
        self.start + self.len as u64
    }

    /// Bytes retained.
    pub fn len(&self) -> usize {
        self.len
    }

    /// True when nothing is retained.
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Keeps bytes just sent (a reference to them, not a copy).
    pub fn push(&mut self, bytes: Bytes) {
        if !bytes.is_empty() {
            self.len += bytes.len();
            self.chunks.push_back(bytes);
        }
    }

    /// The other side has received `count` bytes: drops what it acknowledged. An older count than one seen
    /// before is harmless and ignored.
    ///
    /// # Errors
    /// [`RetainError::Ahead`] for a count past what was sent (the peer is broken).
    pub fn ack(&mut self, count: u64) -> Result<(), RetainError> {
        if count > self.end() {
            return Err(RetainError::Ahead { count, end: self.end() });
        }
        let mut drop = usize::try_from(count.saturating_sub(self.start)).unwrap_or(usize::MAX);
        while drop > 0 {
            let Some(front) = self.chunks.front_mut() else { break };
            let n = drop.min(front.len());
            if n == front.len() {
                self.chunks.pop_front();
            } else {
                front.advance(n);
            }
            drop -= n;
            self.len -= n;
            self.start += n as u64;
        }
        Ok(())
    }

    /// What to send again after a resume in which the other side said it has `count` bytes: acknowledges
    /// them, then returns the rest, in order, as the chunks they were sent in.
    ///
    /// # Errors
    /// [`RetainError`] when `count` is not between [`Retained::start`] and [`Retained::end`].
    pub fn resume_from(&mut self, count: u64) -> Result<impl Iterator<Item = &Bytes>, RetainError> {
        if count < self.start {
            return Err(RetainError::Behind { count, start: self.start });
        }
        self.ack(count)?;
        Ok(self.chunks.iter())
    }
}

/// When to send an `ack`: every [`ACK_EVERY_BYTES`] received, and at a keepalive tick when the count moved.
/// The caller keeps the count of bytes received; the schedule remembers the last count acknowledged.
#[derive(Clone, Copy, Debug)]
pub struct AckSchedule {
    acked: u64,
    every: u64,
}

impl AckSchedule {
    /// A schedule whose last acknowledged count is `acked`, every [`ACK_EVERY_BYTES`].
    pub fn new(acked: u64) -> Self {
        Self { acked, every: ACK_EVERY_BYTES }
    }

    /// A paced client's schedule ([`PACE_HEADER`]): after every message that carried bytes.
    pub fn paced(acked: u64) -> Self {
        Self { acked, every: 1 }
    }

    /// After receiving data (`received` bytes in all): `Some(received)` when an `ack` is due now.
    pub fn on_data(&mut self, received: u64) -> Option<u64> {
        (received.saturating_sub(self.acked) >= self.every).then(|| self.sent(received))
    }

    /// At a keepalive tick: `Some(received)` when the count moved since the last `ack`.
    pub fn on_tick(&mut self, received: u64) -> Option<u64> {
        (received != self.acked).then(|| self.sent(received))
    }

    fn sent(&mut self, received: u64) -> u64 {
        self.acked = received;
        received
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const TOKEN: &str = "0123456789abcdef.00112233445566778899aabbccddeeff";

    #[test]
    fn control_messages_round_trip_byte_exact() {
        let token: ResumeToken = TOKEN.parse().unwrap();
        assert_eq!(token.instance, [0x01, 0x23, 0x45, 0x67, 0x89, 0xab, 0xcd, 0xef]);
        assert_eq!(token.secret[15], 0xff);
        let cases = [
            (Control::Session { token, window_seconds: 15 }, format!("session {TOKEN} 15")),
            (Control::Ack(65_536), "ack 65536".to_string()),
            (Control::Resume { token, received: 2_100_000, sent: 77 }, format!("resume {TOKEN} 2100000 77")),
            (Control::Resumed { received: 0, token }, format!("resumed 0 {TOKEN}")),
            (Control::Move { ticket: token }, format!("move {TOKEN}")),
            (
                Control::Moving { ticket: token, received: u64::MAX, sent: 12 },
                format!("moving {TOKEN} 18446744073709551615 12"),
            ),
            (Control::Moved { received: 12, token }, format!("moved 12 {TOKEN}")),
            (Control::Stay, "stay".to_string()),
        ];
        for (c, text) in cases {
            assert_eq!(c.encode(), text);
            assert!(text.len() <= MAX_CONTROL_LEN);
            assert_eq!(Control::parse(text.as_bytes()), Ok(c));
        }
        assert_eq!(format!("{token:?}"), "ResumeToken(0123456789abcdef.…)");
    }

    #[test]
    fn malformed_control_messages_are_refused() {
        for (text, e) in [
            ("", ControlError::Malformed),
            ("ack", ControlError::Malformed),
            ("ack  1", ControlError::Malformed),
            ("ack -1", ControlError::Count),
            ("ack +1", ControlError::Count),
            ("ack 18446744073709551616", ControlError::Count),
            ("ACK 1", ControlError::Malformed),
            ("resume 0123.00 1 1", ControlError::Token),
            ("resume 0123456789abcdef00112233445566778899aabbccddeeff 1 1", ControlError::Token),
            ("resume 0123456789abcdeg.00112233445566778899aabbccddeeff 1 1", ControlError::Token),
            ("resume 0123456789abcdef.00112233445566778899aabbccddeeff 1", ControlError::Malformed),
            ("session 0123456789abcdef.00112233445566778899aabbccddeeff", ControlError::Malformed),
            ("move", ControlError::Malformed),
            ("stay ", ControlError::Malformed),
            ("moving 0123456789abcdef.00112233445566778899aabbccddeeff 1", ControlError::Malformed),
            ("moved x 0123456789abcdef.00112233445566778899aabbccddeeff", ControlError::Count),
        ] {
            assert_eq!(Control::parse(text.as_bytes()), Err(e), "{text:?}");
        }
        assert_eq!(Control::parse(&[0xff, 0xfe]), Err(ControlError::Malformed));
        assert_eq!(Control::parse(&[b'a'; 126]), Err(ControlError::Malformed));
    }

    #[test]
    fn retained_bytes_follow_acks_and_resumes() {
        let mut r = Retained::starting_at(100);
        r.push(Bytes::from_static(b"hello "));
        r.push(Bytes::from_static(b"world"));
        r.push(Bytes::new());
        assert_eq!((r.start(), r.end(), r.len()), (100, 111, 11));
        r.ack(103).unwrap();
        assert_eq!(r.start(), 103);
        r.ack(101).unwrap(); // an older ack is harmless
        assert_eq!(r.start(), 103);
        assert_eq!(r.ack(112), Err(RetainError::Ahead { count: 112, end: 111 }));
        assert_eq!(r.resume_from(102).err(), Some(RetainError::Behind { count: 102, start: 103 }));
        let replay: Vec<u8> = r.resume_from(104).unwrap().flat_map(|c| c.to_vec()).collect();
        assert_eq!(replay, b"o world");
        assert_eq!(r.len(), 7);
        let replay: Vec<u8> = r.resume_from(106).unwrap().flat_map(|c| c.to_vec()).collect();
        assert_eq!(replay, b"world");
        assert_eq!(r.resume_from(111).unwrap().count(), 0);
        assert!(r.is_empty());
    }

    #[test]
    fn acks_every_64_kib_and_at_ticks_when_moved() {
        let mut a = AckSchedule::new(10);
        assert_eq!(a.on_tick(10), None);
        assert_eq!(a.on_data(65_545), None);
        assert_eq!(a.on_data(65_546), Some(65_546));
        assert_eq!(a.on_tick(65_546), None);
        assert_eq!(a.on_data(65_551), None);
        assert_eq!(a.on_tick(65_551), Some(65_551));
    }

    #[test]
    fn refusal_codes() {
        assert!((4001..=4004).all(is_resume_refusal));
        assert!(!is_resume_refusal(CLOSE_TAKEN_OVER) && !is_resume_refusal(1001));
        assert!(refusal_text(4002).contains("different proxy instance"));
    }
}
