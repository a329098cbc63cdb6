//! The flood of `docs/lanes.md`, as a backend sends it: view loads of 200 chunks (S21, 20 KiB of pseudo-random
//! bytes each, so zstd has nothing to shrink) at 50 per tick, one every 10 s, a Chat Message every 500 ms and a
//! Keep Alive every 2 s. Sans-IO: [`Schedule::tick`] gives a tick's frames; the lanes cross-test
//! (`tests/tests/lanes.rs`) and `session-bench flood` write them.

use std::time::Duration;

/// Body bytes of a chunk (after its packet id).
pub const CHUNK_BODY: usize = 20 * 1024;
/// Chunks in a view load.
pub const CHUNKS: usize = 200;
/// Chunks per tick while a view load goes on (GT New Horizons' Hodgepodge allows 50).
pub const PER_TICK: usize = 50;
/// The game's tick.
pub const TICK: Duration = Duration::from_millis(50);
/// A view load starts this often.
pub const LOAD_EVERY: Duration = Duration::from_secs(10);
/// A Chat Message this often.
pub const CHAT_EVERY: Duration = Duration::from_millis(500);
/// A Keep Alive this often.
pub const KEEP_ALIVE_EVERY: Duration = Duration::from_secs(2);

/// Packet ids (Play, clientbound).
pub const KEEP_ALIVE: u8 = 0x00;
pub const CHAT: u8 = 0x02;
pub const MAP_CHUNK: u8 = 0x21;
pub const PLUGIN: u8 = 0x3f;

/// What a frame of the schedule is.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    Chunk,
    Chat,
    KeepAlive,
}

/// A frame: its length, the packet id, `body`.
pub fn frame(id: u8, body: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(body.len() + 6);
    moonbridge_protocol::VarInt(body.len() as i32 + 1).encode(&mut out);
    out.push(id);
    out.extend_from_slice(body);
    out
}

/// The end of the schedule: a Plugin Message on `MB|End` (bulk, so it comes after everything sent before it).
pub fn end_marker() -> Vec<u8> {
    let mut body = vec![6];
    body.extend_from_slice(b"MB|End");
    body.extend_from_slice(&0u16.to_be_bytes());
    frame(PLUGIN, &body)
}

/// Where the schedule stands.
#[derive(Debug)]
pub struct Schedule {
    length: Duration,
    next_load: Duration,
    next_chat: Duration,
    next_keep_alive: Duration,
    loading: usize,
    chat: u32,
    keep_alive: i32,
    seed: u64,
}

impl Schedule {
    /// `loads` view loads: the schedule lasts `loads` × 10 s.
    pub fn new(loads: u32) -> Self {
        Self {
            length: LOAD_EVERY * loads,
            next_load: Duration::ZERO,
            next_chat: Duration::ZERO,
            next_keep_alive: Duration::ZERO,
            loading: 0,
            chat: 0,
            keep_alive: 0,
            seed: 0x2545_f491_4f6c_dd1d,
        }
    }

    /// How long it lasts.
    pub fn length(&self) -> Duration {
        self.length
    }

    /// The frames of the tick at `at` after the start, in the order a server writes them: the tick's chunks,
    /// then the Chat Message and the Keep Alive that are due. Nothing starts at or after [`Schedule::length`].
    pub fn tick(&mut self, at: Duration) -> Vec<(Kind, Vec<u8>)> {
        let mut out = Vec::new();
        if at >= self.length {
            return out;
        }
        if at >= self.next_load {
            self.loading = CHUNKS;
            self.next_load += LOAD_EVERY;
        }
        for _ in 0..PER_TICK.min(self.loading) {
            let body = self.noise(CHUNK_BODY);
            out.push((Kind::Chunk, frame(MAP_CHUNK, &body)));
            self.loading -= 1;
        }
        if at >= self.next_chat {
            let text = format!("{{\"text\":\"chat {}\"}}", self.chat);
            let mut body = Vec::new();
            moonbridge_protocol::VarInt(text.len() as i32).encode(&mut body);
            body.extend_from_slice(text.as_bytes());
            out.push((Kind::Chat, frame(CHAT, &body)));
            self.chat += 1;
            self.next_chat += CHAT_EVERY;
        }
        if at >= self.next_keep_alive {
            out.push((Kind::KeepAlive, frame(KEEP_ALIVE, &self.keep_alive.to_be_bytes())));
            self.keep_alive += 1;
            self.next_keep_alive += KEEP_ALIVE_EVERY;
        }
        out
    }

    /// `n` pseudo-random bytes (xorshift64).
    fn noise(&mut self, n: usize) -> Vec<u8> {
        (0..n)
            .map(|_| {
                self.seed ^= self.seed << 13;
                self.seed ^= self.seed >> 7;
                self.seed ^= self.seed << 17;
                self.seed as u8
            })
            .collect()
    }
}
