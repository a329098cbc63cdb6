//! The handshake stage: what the first bytes of a connection are (a legacy ping, or a handshake and, for login,
//! Login Start), read with frame limits that fit only those packets.

use std::io;

use bytes::BytesMut;
use moonbridge_protocol::legacy::{self, LegacyDetect, LegacyPing};
use moonbridge_protocol::packets::{
    is_valid_player_name, Handshake, LoginStart, NextState, Packet, MAX_HANDSHAKE_FRAME_LEN, MAX_LOGIN_START_FRAME_LEN,
};
use moonbridge_protocol::{DecodeError, Frame, FrameDecoder, FrameError};
use tokio::time::{timeout, Duration};

use super::Player;

/// How long a connection that sent only `FE`, `FE 01` or an incomplete `FE 01 FA …` may stay silent before it
/// is answered as a legacy ping (1.3–1.5 clients, and status libraries that send `FE 01 FA` alone, send nothing
/// more and wait).
pub(crate) const LEGACY_SILENCE: Duration = Duration::from_millis(500);

/// Largest legacy ping accepted (a 1.6 `MC|PingHost` with a 255-character host is about 540 bytes).
const MAX_LEGACY_PING_BYTES: usize = 1024;

/// What a player with an illegal name is told (case C31).
const INVALID_NAME: &str = "Invalid player name: use 1 to 16 letters, digits or underscores";

/// What the first bytes of a connection turned out to be.
pub(crate) enum Opening {
    Legacy { ping: LegacyPing, raw: BytesMut },
    Status { handshake: Handshake, rest: BytesMut },
    Login { handshake: Handshake, login: LoginStart, login_raw: BytesMut, rest: BytesMut },
}

/// Why the handshake stage failed (bad input is reported at a rate-limited level).
#[derive(Debug, thiserror::Error)]
pub(crate) enum OpeningError {
    #[error("connection closed during the handshake")]
    Closed,
    #[error("read error during the handshake: {0}")]
    Io(#[from] io::Error),
    #[error("bad frame: {0}")]
    Frame(#[from] FrameError),
    #[error("bad packet: {0}")]
    Decode(#[from] DecodeError),
    #[error("legacy ping longer than {MAX_LEGACY_PING_BYTES} bytes")]
    LegacyTooLong,
    /// The frame after a login handshake is not a usable Login Start: another packet, or a name that is not
    /// 1–16 ASCII letters, digits or underscores (case C31). `tell` is what the player is told; `detail` is
    /// escaped (`{:?}`), so a name with a newline cannot break a log line.
    #[error("{detail}")]
    BadLoginStart {
        /// The Login Disconnect text.
        tell: &'static str,
        /// For the log.
        detail: String,
    },
}

/// Reads until a whole frame is decoded.
pub(crate) async fn next_frame<P: Player>(player: &mut P, dec: &mut FrameDecoder) -> Result<Frame, OpeningError> {
    loop {
        if let Some(f) = dec.try_next_frame()? {
            return Ok(f);
        }
        let mut chunk = BytesMut::with_capacity(dec.bytes_wanted()?.clamp(64, 2048));
        if player.read_some(&mut chunk).await? == 0 {
            return Err(OpeningError::Closed);
        }
        dec.queue_bytes(chunk);
    }
}

/// Reads the opening of a connection.
pub(crate) async fn read<P: Player>(player: &mut P) -> Result<Opening, OpeningError> {
    let mut buf = BytesMut::with_capacity(256);
    loop {
        match legacy::detect(&buf)? {
            LegacyDetect::Modern => break,
            LegacyDetect::Legacy { ping, len } => return Ok(Opening::Legacy { ping, raw: buf.split_to(len) }),
            LegacyDetect::NeedMore { if_silent } => {
                if buf.len() > MAX_LEGACY_PING_BYTES {
                    return Err(OpeningError::LegacyTooLong);
                }
                let read = match &if_silent {
                    Some(_) => timeout(LEGACY_SILENCE, player.read_some(&mut buf)).await,
                    None => Ok(player.read_some(&mut buf).await),
                };
                match (read, if_silent) {
                    (Err(_silent), Some(ping)) => {
                        // Only the bytes of the ping assumed (`FE` or `FE 01`) go to a backend: an incomplete
                        // `MC|PingHost` tail would make it wait too.
                        let len = if ping == LegacyPing::V1_3 { 1 } else { 2 };
                        return Ok(Opening::Legacy { ping, raw: buf.split_to(len.min(buf.len())) });
                    }
                    (Ok(Ok(0)), _) => return Err(OpeningError::Closed),
                    (Ok(Ok(_)), _) | (Err(_), None) => {}
                    (Ok(Err(e)), _) => return Err(e.into()),
                }
            }
        }
    }
    let mut dec = FrameDecoder::new(MAX_HANDSHAKE_FRAME_LEN);
    dec.queue_bytes(buf);
    let handshake: Handshake = next_frame(player, &mut dec).await?.decode()?;
    match handshake.next_state {
        NextState::Status => Ok(Opening::Status { handshake, rest: dec.take_buffered() }),
        NextState::Login => {
            dec.set_max_frame_len(MAX_LOGIN_START_FRAME_LEN);
            let frame = next_frame(player, &mut dec).await?;
            if frame.id != LoginStart::ID {
                return Err(OpeningError::BadLoginStart {
                    tell: "Expected Login Start",
                    detail: format!("expected Login Start, got packet {:#04x}", frame.id),
                });
            }
            let login: LoginStart = frame.decode().map_err(|e| OpeningError::BadLoginStart {
                tell: INVALID_NAME,
                detail: format!("invalid player name: {e}"),
            })?;
            if !is_valid_player_name(&login.name) {
                return Err(OpeningError::BadLoginStart {
                    tell: INVALID_NAME,
                    detail: format!("invalid player name {:?}", login.name),
                });
            }
            let login_raw = login
                .to_frame_bytes()
                .map_err(|_| DecodeError::InvalidValue { field: "name", reason: "cannot be re-encoded" })?;
            Ok(Opening::Login { handshake, login, login_raw, rest: dec.take_buffered() })
        }
    }
}
