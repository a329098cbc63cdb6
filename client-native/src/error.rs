//! Errors of the client library. Each maps to one C return code ([`ClientError::code`]).

/// C return code: success.
pub const MB_OK: i32 = 0;
/// C return code: a NULL or unknown handle, a bad URL or bad options.
pub const MB_ERR_INVALID_ARGUMENT: i32 = -1;
/// C return code: DNS failure, connection refused or connect timeout.
pub const MB_ERR_CONNECT: i32 = -2;
/// C return code: the TLS handshake failed (the error text names the reason).
pub const MB_ERR_TLS: i32 = -3;
/// C return code: the WebSocket upgrade was refused (the error text gives the HTTP status).
pub const MB_ERR_HANDSHAKE: i32 = -4;
/// C return code: the connection is closed (after an orderly close, or by the peer with a close code).
pub const MB_ERR_CLOSED: i32 = -5;
/// C return code: a wait timed out.
pub const MB_ERR_TIMEOUT: i32 = -6;
/// C return code: an I/O error, or the send buffer is full.
pub const MB_ERR_IO: i32 = -7;
/// C return code: the library panicked (a bug); the connection should be closed.
pub const MB_ERR_PANIC: i32 = -8;

/// Why a client operation failed.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
pub enum ClientError {
    /// The URL is not `tcp://host:port`, `ws://host[:port]/path` or `wss://host[:port]/path`.
    #[error("invalid URL {url:?}: {reason}")]
    InvalidUrl {
        /// The URL given.
        url: String,
        /// What is wrong with it.
        reason: String,
    },
    /// The options JSON is invalid.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
    /// A NULL pointer, an unknown or closed handle, or another bad argument at the C or JNI boundary.
    #[error("invalid argument: {0}")]
    InvalidArgument(String),
    /// The host name did not resolve.
    #[error("DNS lookup of {host} failed: {reason}")]
    Dns {
        /// The host.
        host: String,
        /// The resolver's message.
        reason: String,
    },
    /// The server refused the TCP connection.
    #[error("connection to {addr} refused")]
    Refused {
        /// The address tried.
        addr: String,
    },
    /// Connecting (DNS, TCP, TLS and upgrade) took longer than `connect_timeout_ms`.
    #[error("connect to {target} timed out after {ms} ms ({stage})")]
    ConnectTimeout {
        /// The URL host and port.
        target: String,
        /// The timeout.
        ms: u64,
        /// The stage that was running.
        stage: &'static str,
    },
    /// Another error while connecting the TCP socket.
    #[error("connect to {addr} failed: {reason}")]
    Connect {
        /// The address tried.
        addr: String,
        /// The OS error.
        reason: String,
    },
    /// The TLS handshake failed.
    #[error("TLS handshake with {server_name} failed: {reason}")]
    Tls {
        /// The name verified (SNI).
        server_name: String,
        /// The reason, such as "unknown issuer", "certificate not valid for this name" or "protocol version".
        reason: String,
    },
    /// The server answered the WebSocket upgrade with something other than 101.
    #[error("WebSocket upgrade refused with HTTP {status}")]
    UpgradeRefused {
        /// The HTTP status code.
        status: u16,
    },
    /// The WebSocket upgrade failed otherwise (bad response).
    #[error("WebSocket upgrade failed: {0}")]
    Upgrade(String),
    /// The peer closed the connection. `code` is the WebSocket close code (`None` for TCP or a close without
    /// a code).
    #[error("connection closed by peer{}", match (code, reason.is_empty()) { (Some(c), true) => format!(" with code {c}"), (Some(c), false) => format!(" with code {c}: {reason}"), (None, _) => String::new() })]
    ClosedByPeer {
        /// The close code.
        code: Option<u16>,
        /// The close reason text.
        reason: String,
    },
    /// The connection was closed by this side.
    #[error("connection closed")]
    Closed,
    /// The server sent nothing (not even a Pong) for 3 ping intervals.
    #[error("server silent for {0} ms: connection considered dead")]
    Dead(u64),
    /// The send buffer is full: the network is not draining.
    #[error("send buffer full: {pending} bytes pending (max_pending_bytes = {max})")]
    SendBufferFull {
        /// Bytes waiting.
        pending: usize,
        /// The limit.
        max: usize,
    },
    /// An I/O or protocol error on an established connection.
    #[error("I/O error: {0}")]
    Io(String),
}

impl ClientError {
    /// The C return code for this error.
    pub fn code(&self) -> i32 {
        match self {
            Self::InvalidUrl { .. } | Self::InvalidOptions(_) | Self::InvalidArgument(_) => MB_ERR_INVALID_ARGUMENT,
            Self::Dns { .. } | Self::Refused { .. } | Self::ConnectTimeout { .. } | Self::Connect { .. } => {
                MB_ERR_CONNECT
            }
            Self::Tls { .. } => MB_ERR_TLS,
            Self::UpgradeRefused { .. } | Self::Upgrade(_) => MB_ERR_HANDSHAKE,
            Self::ClosedByPeer { .. } | Self::Closed | Self::Dead(_) => MB_ERR_CLOSED,
            Self::SendBufferFull { .. } | Self::Io(_) => MB_ERR_IO,
        }
    }

    /// True for an orderly end: TCP EOF, or a WebSocket close with 1000 (normal) or 1001 (going away).
    pub fn is_orderly_close(&self) -> bool {
        matches!(self, Self::ClosedByPeer { code: None | Some(1000 | 1001), .. } | Self::Closed)
    }
}
