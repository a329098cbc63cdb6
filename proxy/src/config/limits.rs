//! `[limits]`: what one proxy process allows (docs/configuration.md, "[limits]").

use std::time::Duration;

use serde::Deserialize;

/// The default of `limits.max_play_frame_bytes`: 256 MiB, GT New Horizons' Hodgepodge `packetSizeLimit`.
pub const DEFAULT_MAX_PLAY_FRAME_BYTES: usize = 256 * 1024 * 1024;

/// `[limits]`. Every limit is per proxy process.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct LimitsConfig {
    /// `max_connections`: open player connections, in every stage. Over it a new connection is closed at
    /// once. Default 10000 connections.
    pub max_connections: usize,
    /// `max_handshaking`: connections that have not finished the handshake (and Login Start). Over it the
    /// oldest such connection is closed to admit the new one, so slow clients cannot lock players out.
    /// Default 1024 connections.
    pub max_handshaking: usize,
    /// `handshake_timeout_seconds`: one deadline for the whole handshake stage (handshake + Login Start, or a
    /// legacy ping), never reset by incoming bytes. Default 5 seconds.
    pub handshake_timeout_seconds: u64,
    /// `backend_connect_timeout_seconds`: TCP connect to a backend. Default 5 seconds.
    pub backend_connect_timeout_seconds: u64,
    /// `login_timeout_seconds`: from sending Login Start to the backend until its first answer; also the
    /// whole of a status exchange, and in online mode the wait for the player's Encryption Response. Default
    /// 30 seconds.
    pub login_timeout_seconds: u64,
    /// `max_ws_message_bytes`: largest WebSocket message accepted from a player. Default 4194304 bytes.
    pub max_ws_message_bytes: usize,
    /// `max_play_frame_bytes`: largest Minecraft frame followed in Play, either way (frame body, prefix not
    /// counted). Frames nobody looks into are streamed, never held whole; the few the proxy must read from a
    /// backend once the transfer layer runs are held up to this size (docs/modpacks.md). Default 268435456 bytes
    /// (256 MiB: GT New Horizons' Hodgepodge `packetSizeLimit`), at least 2097151 (vanilla's); prefixes may be as
    /// wide as the limit needs (5 bytes for the default).
    pub max_play_frame_bytes: usize,
    /// `shutdown_grace_seconds`: on SIGTERM/Ctrl-C, how long sessions get to receive their disconnect before
    /// the process exits. Default 10 seconds.
    pub shutdown_grace_seconds: u64,
    /// `write_stall_timeout_seconds`: a player or backend whose socket accepts no byte for this long while the
    /// proxy has data for it is disconnected (it stopped reading). Default 60 seconds.
    pub write_stall_timeout_seconds: u64,
    /// `resume_window_seconds`: how long a carriage v2 session whose WebSocket dropped (without a Minecraft
    /// disconnect) keeps its backend connection, waiting for the client to resume. 0 disables resume (the
    /// proxy then never selects `moonbridge.v2`). Default 15 seconds (under the 1.7.10 server's 30-second read
    /// timeout).
    pub resume_window_seconds: u64,
    /// `resume_buffer_bytes`: per carriage v2 session, the most backend bytes kept for a resume (sent but not
    /// acknowledged, plus what arrives while the player is away); when full, the proxy stops reading the
    /// backend. Default 1048576 bytes (1 MiB).
    pub resume_buffer_bytes: usize,
    /// `player_queue_bytes`: per player, the most backend bytes the proxy queues in its lanes while the
    /// player's path is slower than the backend (docs/lanes.md); reading the backend pauses past it
    /// (backpressure). Counted in the memory figures. Default 8388608 bytes (8 MiB), 262144 to 1073741824.
    pub player_queue_bytes: usize,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            max_handshaking: 1024,
            handshake_timeout_seconds: 5,
            backend_connect_timeout_seconds: 5,
            login_timeout_seconds: 30,
            max_ws_message_bytes: 4 * 1024 * 1024,
            max_play_frame_bytes: DEFAULT_MAX_PLAY_FRAME_BYTES,
            shutdown_grace_seconds: 10,
            write_stall_timeout_seconds: 60,
            resume_window_seconds: 15,
            resume_buffer_bytes: 1024 * 1024,
            player_queue_bytes: 8 * 1024 * 1024,
        }
    }
}

impl LimitsConfig {
    /// `handshake_timeout_seconds` as a duration.
    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_secs(self.handshake_timeout_seconds)
    }
    /// `backend_connect_timeout_seconds` as a duration.
    pub fn backend_connect_timeout(&self) -> Duration {
        Duration::from_secs(self.backend_connect_timeout_seconds)
    }
    /// `login_timeout_seconds` as a duration.
    pub fn login_timeout(&self) -> Duration {
        Duration::from_secs(self.login_timeout_seconds)
    }
    /// `shutdown_grace_seconds` as a duration.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_seconds)
    }
    /// `write_stall_timeout_seconds` as a duration.
    pub fn write_stall_timeout(&self) -> Duration {
        Duration::from_secs(self.write_stall_timeout_seconds)
    }
    /// `resume_window_seconds` as a duration; `None` when resume is off.
    pub fn resume_window(&self) -> Option<Duration> {
        (self.resume_window_seconds > 0).then(|| Duration::from_secs(self.resume_window_seconds))
    }
}
