//! The `BungeeCord` plugin channel through which server plugins ask a proxy to move a player (`Connect`), as
//! BungeeCord's `DownstreamBridge` reads it: a subchannel name, then `DataOutput.writeUTF` strings.

use crate::codec::Reader;
use crate::error::{DecodeError, EncodeError};

/// The BungeeCord plugin channel, as server plugins name it (`BungeeCord`).
pub const BUNGEE_CHANNEL: &str = "BungeeCord";

/// The `REGISTER` Plugin Message (serverbound C17; data: channel names separated by NUL) that names the
/// [`BUNGEE_CHANNEL`]. A proxy sends it to each backend after the login, as BungeeCord's `ServerConnector`
/// does: a Bukkit-based server (CraftBukkit, Thermos) only lets a plugin send on channels the player has
/// registered (`CraftPlayer.sendPluginMessage`), so without it a `Connect` never leaves the server.
pub fn bungee_registration() -> crate::packets::PluginMessage {
    crate::packets::PluginMessage { channel: "REGISTER".into(), data: BUNGEE_CHANNEL.as_bytes().to_vec() }
}

/// A message on the [`BUNGEE_CHANNEL`] from a backend: a subchannel name, then its arguments, each a Java
/// `DataOutput.writeUTF` string (`u16` byte length, then modified UTF-8).
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BungeeRequest {
    /// `Connect <server>`: move the player whose connection carries the message to backend `server`.
    Connect {
        /// The target backend's name.
        server: String,
    },
    /// Any other subchannel (`ConnectOther`, `IP`, `PlayerCount`, `Forward`, …), by name.
    Other {
        /// The subchannel.
        subchannel: String,
    },
}

impl BungeeRequest {
    /// Parses a [`BUNGEE_CHANNEL`] payload.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] when a string is cut off, [`DecodeError::InvalidText`] when one is not
    /// UTF-8 (modified UTF-8 differs only for NUL and characters outside the BMP, which server names do not
    /// use).
    pub fn parse(data: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(data);
        let subchannel = java_utf(&mut r, "subchannel")?;
        if subchannel == "Connect" {
            return Ok(Self::Connect { server: java_utf(&mut r, "server")? });
        }
        Ok(Self::Other { subchannel })
    }

    /// The payload a server plugin sends for `Connect <server>`.
    ///
    /// # Errors
    /// [`EncodeError::StringTooLong`] for a name over 65,535 bytes (`writeUTF`'s limit).
    pub fn connect_payload(server: &str) -> Result<Vec<u8>, EncodeError> {
        let mut out = Vec::with_capacity(11 + server.len());
        for s in ["Connect", server] {
            let len = u16::try_from(s.len()).map_err(|_| EncodeError::StringTooLong {
                field: "server",
                len: s.len(),
                max: usize::from(u16::MAX),
            })?;
            out.extend_from_slice(&len.to_be_bytes());
            out.extend_from_slice(s.as_bytes());
        }
        Ok(out)
    }
}

/// Reads a `DataOutput.writeUTF` string.
fn java_utf(r: &mut Reader<'_>, field: &'static str) -> Result<String, DecodeError> {
    let len = r.u16(field)?;
    let bytes = r.bytes(usize::from(len), field)?;
    std::str::from_utf8(bytes).map(str::to_owned).map_err(|_| DecodeError::InvalidText(field))
}

/// Whether a Plugin Message's fields (`fields`: after the packet id) name `channel`.
pub fn is_channel(fields: &[u8], channel: &str) -> bool {
    let mut r = Reader::new(fields);
    r.string(crate::packets::MAX_CHANNEL_CHARS, "channel").is_ok_and(|c| c == channel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bungee_connect_byte_exact() {
        // What a Bukkit plugin writes: writeUTF("Connect"), writeUTF("survival").
        let data =
            [0, 7, b'C', b'o', b'n', b'n', b'e', b'c', b't', 0, 8, b's', b'u', b'r', b'v', b'i', b'v', b'a', b'l'];
        assert_eq!(BungeeRequest::parse(&data), Ok(BungeeRequest::Connect { server: "survival".into() }));
        assert_eq!(BungeeRequest::connect_payload("survival").unwrap(), data);
        assert!(BungeeRequest::connect_payload(&"x".repeat(65_536)).is_err());
        assert_eq!(BungeeRequest::parse(&[0, 2, b'I', b'P']), Ok(BungeeRequest::Other { subchannel: "IP".into() }));
        assert_eq!(BungeeRequest::parse(&data[..12]), Err(DecodeError::UnexpectedEnd("server")));
        assert_eq!(BungeeRequest::parse(&[0]), Err(DecodeError::UnexpectedEnd("subchannel")));
        assert_eq!(BungeeRequest::parse(&[0, 1, 0xff]), Err(DecodeError::InvalidText("subchannel")));
    }

    #[test]
    fn the_bungee_registration_is_register_with_the_channel_name() {
        let mut fields = Vec::new();
        bungee_registration().encode_fields(&mut fields).unwrap();
        assert_eq!(fields, b"\x08REGISTER\x00\x0aBungeeCord");
    }
}
