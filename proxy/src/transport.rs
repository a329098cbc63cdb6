//! [`Transport`]: how players reach a listener. A leaf type: the configuration, the metrics and the listeners
//! all name it, and it names nothing of theirs.

use serde::Deserialize;

/// How players reach a listener.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
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
