//! Errors of the client library. Each maps to one C result code ([`ClientError::code`], [`MbResult`]).

/// The C result codes: `MB_OK` (0) or a negative error. Emitted as a C enum in `moonbridge_client.h`; the
/// functions return them as `int32_t`.
#[repr(i32)]
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[allow(non_camel_case_types, clippy::upper_case_acronyms)]
pub enum MbResult {
    /// Success.
    MB_OK = 0,
    /// A NULL or unknown handle, a bad URL or bad options, another bad argument.
    MB_ERR_INVALID_ARGUMENT = -1,
    /// DNS failure, connection refused, connect timeout or another failure to connect.
    MB_ERR_CONNECT = -2,
    /// The TLS handshake failed (the error text names the reason).
    MB_ERR_TLS = -3,
    /// The WebSocket upgrade was refused or failed (the error text gives the HTTP status).
    MB_ERR_HANDSHAKE = -4,
    /// The connection is closed: after an orderly close, by the peer with a close code, or by this side.
    MB_ERR_CLOSED = -5,
    /// The connection timed out while established: the server sent nothing (not even a Pong) for three ping
    /// intervals, or accepted no data for the write-stall time.
    MB_ERR_TIMEOUT = -6,
    /// An I/O or protocol error on an established connection, or the send buffer is full.
    MB_ERR_IO = -7,
    /// The library panicked (a bug); the connection should be closed.
    MB_ERR_PANIC = -8,
}

/// [`MbResult::MB_OK`] as an `i32`.
pub const MB_OK: i32 = MbResult::MB_OK as i32;
/// [`MbResult::MB_ERR_INVALID_ARGUMENT`] as an `i32`.
pub const MB_ERR_INVALID_ARGUMENT: i32 = MbResult::MB_ERR_INVALID_ARGUMENT as i32;
/// [`MbResult::MB_ERR_CONNECT`] as an `i32`.
pub const MB_ERR_CONNECT: i32 = MbResult::MB_ERR_CONNECT as i32;
/// [`MbResult::MB_ERR_TLS`] as an `i32`.
pub const MB_ERR_TLS: i32 = MbResult::MB_ERR_TLS as i32;
/// [`MbResult::MB_ERR_HANDSHAKE`] as an `i32`.
pub const MB_ERR_HANDSHAKE: i32 = MbResult::MB_ERR_HANDSHAKE as i32;
/// [`MbResult::MB_ERR_CLOSED`] as an `i32`.
pub const MB_ERR_CLOSED: i32 = MbResult::MB_ERR_CLOSED as i32;
/// [`MbResult::MB_ERR_TIMEOUT`] as an `i32`.
pub const MB_ERR_TIMEOUT: i32 = MbResult::MB_ERR_TIMEOUT as i32;
/// [`MbResult::MB_ERR_IO`] as an `i32`.
pub const MB_ERR_IO: i32 = MbResult::MB_ERR_IO as i32;
/// [`MbResult::MB_ERR_PANIC`] as an `i32`.
pub const MB_ERR_PANIC: i32 = MbResult::MB_ERR_PANIC as i32;

/// Why a client operation failed.
///
/// Connecting fails with one of the connect errors (there is no connection yet). On an established
/// connection, [`ClientError::InvalidArgument`] and [`ClientError::SendBufferFull`] fail only that call; every
/// other error ends the connection ([`ClientError::ends_connection`]).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
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
    /// A NULL pointer, an unknown or closed handle, or another bad argument at the C or JNI boundary. Only this
    /// call fails.
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
    /// The peer closed the connection (ends it). `code` is the WebSocket close code (`None` for TCP or a close
    /// without a code).
    #[error("connection closed by peer{}", match (code, reason.is_empty()) { (Some(c), true) => format!(" with code {c}"), (Some(c), false) => format!(" with code {c}: {reason}"), (None, _) => String::new() })]
    ClosedByPeer {
        /// The close code.
        code: Option<u16>,
        /// The close reason text.
        reason: String,
    },
    /// The connection was closed by this side (ends it).
    #[error("connection closed")]
    Closed,
    /// The server sent nothing (not even a Pong) for 3 ping intervals. Ends the connection.
    #[error("server silent for {0} ms: connection considered dead")]
    Dead(u64),
    /// The server accepted no data for this many seconds while the library had data for it. Ends the
    /// connection.
    #[error("the server accepted no data for {0} s")]
    WriteStall(u64),
    /// The send buffer is full: the network is not draining. Only this call fails; the connection goes on.
    #[error("send buffer full: {pending} bytes pending (max_pending_bytes = {max})")]
    SendBufferFull {
        /// Bytes waiting.
        pending: usize,
        /// The limit.
        max: usize,
    },
    /// The server broke the WebSocket protocol (RFC 6455) or carriage version 1 (a text message, a malformed
    /// frame). Ends the connection.
    #[error("protocol error: {0}")]
    Protocol(String),
    /// An I/O error on an established connection (or a thread that cannot start). Ends the connection.
    #[error("I/O error: {0}")]
    Io(String),
    /// A carriage v2 connection was lost and could not be resumed: the proxy refused (close 4001–4004: it no
    /// longer holds the session, another instance holds it, the bytes needed are gone, the token was used)
    /// or its resume window passed. Ends the connection.
    #[error("connection lost ({cause}) and could not be resumed: {reason}")]
    ResumeFailed {
        /// How the connection was lost.
        cause: String,
        /// Why it could not be resumed.
        reason: String,
    },
}

impl ClientError {
    /// The C result code for this error.
    pub fn result(&self) -> MbResult {
        match self {
            Self::InvalidUrl { .. } | Self::InvalidOptions(_) | Self::InvalidArgument(_) => {
                MbResult::MB_ERR_INVALID_ARGUMENT
            }
            Self::Dns { .. } | Self::Refused { .. } | Self::ConnectTimeout { .. } | Self::Connect { .. } => {
                MbResult::MB_ERR_CONNECT
            }
            Self::Tls { .. } => MbResult::MB_ERR_TLS,
            Self::UpgradeRefused { .. } | Self::Upgrade(_) => MbResult::MB_ERR_HANDSHAKE,
            Self::ClosedByPeer { .. } | Self::Closed | Self::ResumeFailed { .. } => MbResult::MB_ERR_CLOSED,
            Self::Dead(_) | Self::WriteStall(_) => MbResult::MB_ERR_TIMEOUT,
            Self::SendBufferFull { .. } | Self::Protocol(_) | Self::Io(_) => MbResult::MB_ERR_IO,
        }
    }

    /// The C result code for this error, as an `i32`.
    pub fn code(&self) -> i32 {
        self.result() as i32
    }

    /// True for an orderly end: TCP EOF, or a WebSocket close with 1000 (normal) or 1001 (going away).
    pub fn is_orderly_close(&self) -> bool {
        match self {
            Self::ClosedByPeer { code, .. } => code.is_none_or(moonbridge_protocol::ws::is_orderly_close),
            Self::Closed => true,
            _ => false,
        }
    }

    /// True when the connection has ended with this error (every later call fails with it too); false for
    /// errors of one call ([`ClientError::InvalidArgument`], [`ClientError::SendBufferFull`]) and for connect
    /// errors (there was no connection).
    pub fn ends_connection(&self) -> bool {
        matches!(
            self,
            Self::ClosedByPeer { .. }
                | Self::Closed
                | Self::Dead(_)
                | Self::WriteStall(_)
                | Self::Protocol(_)
                | Self::Io(_)
                | Self::ResumeFailed { .. }
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn codes_and_what_ends_a_connection() {
        assert_eq!(ClientError::Dead(90_000).code(), -6);
        assert_eq!(ClientError::WriteStall(60).code(), MB_ERR_TIMEOUT);
        assert_eq!(ClientError::Closed.result(), MbResult::MB_ERR_CLOSED);
        assert!(ClientError::ClosedByPeer { code: Some(1001), reason: String::new() }.is_orderly_close());
        assert!(!ClientError::ClosedByPeer { code: Some(1011), reason: String::new() }.is_orderly_close());
        assert!(ClientError::Io("x".into()).ends_connection());
        assert!(!ClientError::SendBufferFull { pending: 1, max: 1 }.ends_connection());
        assert!(!ClientError::Refused { addr: "a".into() }.ends_connection());
    }
}
