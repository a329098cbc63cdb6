//! The switchboard's backend connections: one in Play with its clientbound frames ([`Link`]), and dialling
//! and logging in the backend a switch goes to ([`dial`]).

use std::io;
use std::time::Duration;

use bytes::BytesMut;
use moonbridge_protocol::frame::FrameDecoder;
use moonbridge_protocol::packets::{LoginDisconnect, LoginSuccess, Packet};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use super::common::{chat_plain, READ_CHUNK};
use crate::backend::{Backend, Identity};

/// Largest Login-state frame read from a new backend (Login Success, Login Disconnect, Encryption Request),
/// in bytes.
const MAX_LOGIN_FRAME: usize = 256 * 1024;

/// A backend connection in Play, with its clientbound frames.
pub(super) struct Link {
    pub(super) backend: Backend,
    pub(super) stream: TcpStream,
    pub(super) frames: FrameDecoder,
}

impl Link {
    /// A link whose frames may be `max_frame_len` bytes long (`limits.max_play_frame_bytes`).
    pub(super) fn new(backend: Backend, stream: TcpStream, early: &[u8], max_frame_len: usize) -> Self {
        let mut frames = FrameDecoder::new(max_frame_len);
        frames.queue_slice(early);
        Self { backend, stream, frames }
    }
}

/// A new backend connection logged in: the stream and the Play bytes read after Login Success, or why not.
pub(super) type Dialed = Result<(TcpStream, BytesMut), DialError>;

/// Why a new backend connection did not log in; its text is what the player reads in the chat (after "Could
/// not connect you to <backend>: ").
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum DialError {
    /// The connect timed out.
    #[error("it did not accept the connection in time")]
    ConnectTimeout,
    /// The connect failed.
    #[error("it is unreachable")]
    Unreachable,
    /// The handshake is too long to forward.
    #[error("the handshake could not be forwarded")]
    Handshake,
    /// The opening could not be written.
    #[error("it closed the connection")]
    WriteFailed,
    /// A Login Disconnect, with its reason as plain text.
    #[error("it refused the login: {0}")]
    Refused(String),
    /// An Encryption Request: an online-mode backend.
    #[error("it asked for encryption (online mode); backends behind MoonBridge run in offline mode")]
    OnlineMode,
    /// Another packet where Login Success belongs.
    #[error("it answered the login with packet {0:#04x}")]
    Unexpected(i32),
    /// A frame that does not parse.
    #[error("it sent a bad login frame: {0}")]
    BadFrame(#[from] moonbridge_protocol::FrameError),
    /// The connection ended before Login Success.
    #[error("it closed the connection during login")]
    Closed,
    /// A read failed.
    #[error("read failed: {0}")]
    Read(#[source] io::Error),
}

/// Connects to `target`, sends the player's opening and reads up to Login Success: the stream and the Play
/// bytes after it, or why not (a readable reason for the chat).
pub(super) async fn dial(target: Backend, identity: Identity, connect_timeout: Duration) -> Dialed {
    let mut stream = target.connect(identity.client, connect_timeout).await.map_err(|e| match e {
        crate::backend::BackendError::Timeout { .. } => DialError::ConnectTimeout,
        _ => DialError::Unreachable,
    })?;
    let opening = identity.opening(&target, &[]).map_err(|_| DialError::Handshake)?;
    stream.write_all(&opening).await.map_err(|_| DialError::WriteFailed)?;
    target.metrics.to_backend.inc_by(opening.len() as u64);
    let mut frames = FrameDecoder::new(MAX_LOGIN_FRAME);
    let mut buf = vec![0; READ_CHUNK];
    loop {
        match frames.try_next_frame() {
            Ok(Some(f)) if f.id == LoginSuccess::ID => return Ok((stream, frames.take_buffered())),
            Ok(Some(f)) if f.id == LoginDisconnect::ID => {
                let reason = f.decode::<LoginDisconnect>().map(|d| chat_plain(&d.reason_json)).unwrap_or_default();
                return Err(DialError::Refused(reason));
            }
            Ok(Some(f)) => return Err(if f.id == 0x01 { DialError::OnlineMode } else { DialError::Unexpected(f.id) }),
            Ok(None) => {}
            Err(e) => return Err(e.into()),
        }
        stream.readable().await.map_err(DialError::Read)?;
        match try_read(&stream, &mut buf) {
            Ok(0) => return Err(DialError::Closed),
            Ok(n) => {
                target.metrics.to_player.inc_by(n as u64);
                frames.queue_slice(buf.get(..n).unwrap_or_default());
            }
            Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
            Err(e) => return Err(DialError::Read(e)),
        }
    }
}

/// Waits until `stream` is readable; never, without a stream.
pub(super) async fn readable(stream: Option<&TcpStream>) -> io::Result<()> {
    match stream {
        Some(s) => s.readable().await,
        None => std::future::pending().await,
    }
}

/// One non-blocking read after readiness; `Interrupted` when the wake-up was spurious (not EOF).
pub(super) fn try_read(stream: &TcpStream, buf: &mut [u8]) -> io::Result<usize> {
    match stream.try_read(buf) {
        Ok(n) => Ok(n),
        Err(e) if e.kind() == io::ErrorKind::WouldBlock => Err(io::ErrorKind::Interrupted.into()),
        Err(e) => Err(e),
    }
}
