//! [`Transport`]: how players reach a listener, and [`Carriage`]: how a WebSocket carries their stream. Leaf
//! types: the configuration, the metrics, the listeners and the admin API all name them, and they name nothing
//! of theirs.

use serde::{Deserialize, Serialize};

/// How players reach a listener.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
pub enum Transport {
    /// Plain Minecraft over TCP.
    Tcp,
    /// WebSocket over plain HTTP (`ws://`), for a CDN or TLS terminator in front.
    Ws,
    /// WebSocket over TLS 1.2/1.3 (`wss://`), with rustls.
    Wss,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Tcp => "tcp",
            Self::Ws => "ws",
            Self::Wss => "wss",
        })
    }
}

/// How a player's Minecraft stream is carried (docs/carriage.md): the subprotocol its WebSocket selected.
#[derive(Clone, Copy, Debug, Deserialize, Serialize, PartialEq, Eq)]
#[non_exhaustive]
pub enum Carriage {
    /// No WebSocket: the frames as they are, over TCP.
    #[serde(rename = "none")]
    None,
    /// Carriage v1: Binary messages, each a run of stream bytes (`moonbridge.v1`, or no subprotocol).
    #[serde(rename = "v1")]
    V1,
    /// Carriage v2 (`moonbridge.v2`): v1 plus acks, resumes and moves.
    #[serde(rename = "v2")]
    V2,
    /// Carriage v2 with zstd (`moonbridge.v2.zstd`).
    #[serde(rename = "v2.zstd")]
    V2Zstd,
}

impl std::fmt::Display for Carriage {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::V1 => "v1",
            Self::V2 => "v2",
            Self::V2Zstd => "v2.zstd",
        })
    }
}
