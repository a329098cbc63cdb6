//! The `BungeeCord` plugin channel through which server plugins talk to a proxy, as BungeeCord's
//! `DownstreamBridge` reads it (wiki.vg "Bungee Plugin Messaging Channel"): a subchannel name, then its
//! arguments, each a Java `DataOutput` field (`writeUTF` strings: `u16` byte length, then modified UTF-8;
//! `writeInt`; `writeShort`). The proxy answers on the same channel, to the server that asked, through the same
//! player's connection ([`BungeeAnswer`]).

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

/// A message on the [`BUNGEE_CHANNEL`] from a backend, by subchannel. "The player" is the one whose
/// connection carries the message; `ALL` as a server or player name means every one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BungeeRequest {
    /// `Connect <server>`: move the player to backend `server`.
    Connect {
        /// The target backend's name.
        server: String,
    },
    /// `GetServers`: answered with `GetServers`, the backends' names joined by `", "`.
    GetServers,
    /// `GetServer`: answered with `GetServer`, the name of the player's current backend.
    GetServer,
    /// `PlayerCount <server|ALL>`: answered with `PlayerCount`, the name, an `i32` count.
    PlayerCount {
        /// A backend's name, or `ALL`.
        server: String,
    },
    /// `PlayerList <server|ALL>`: answered with `PlayerList`, the name, the players' names joined by `", "`.
    PlayerList {
        /// A backend's name, or `ALL`.
        server: String,
    },
    /// `UUID`: answered with `UUID`, the player's UUID as 32 hex digits (no dashes, as BungeeCord's
    /// `getUUID`).
    Uuid,
    /// `UUIDOther <player>`: answered with `UUIDOther`, the name, the UUID.
    UuidOther {
        /// The player's name.
        player: String,
    },
    /// `IP`: answered with `IP`, the player's address (text), its port (`i32`).
    Ip,
    /// `IPOther <player>`: answered with `IPOther`, the name, the address, the port (`i32`).
    IpOther {
        /// The player's name.
        player: String,
    },
    /// `ServerIP <server>`: answered with `ServerIP`, the name, the backend's host, its port (`u16`).
    ServerIp {
        /// A backend's name.
        server: String,
    },
    /// `Message <player|ALL> <text>`: a chat line (legacy text with `§` codes) to that player.
    Message {
        /// The player's name, or `ALL`.
        player: String,
        /// The text.
        text: String,
    },
    /// `MessageRaw <player|ALL> <json>`: a chat line given as a JSON chat component.
    MessageRaw {
        /// The player's name, or `ALL`.
        player: String,
        /// The JSON component.
        json: String,
    },
    /// `KickPlayer <player> <reason>`: disconnect that player with the reason (legacy text).
    KickPlayer {
        /// The player's name.
        player: String,
        /// The reason shown.
        reason: String,
    },
    /// `Forward <server|ALL|ONLINE> <channel> <i16 length> <data>`: to servers as `<channel>`, `<i16
    /// length> <data>` on the [`BUNGEE_CHANNEL`] (`ALL`: every other server, `ONLINE`: every other server
    /// with players).
    Forward {
        /// A backend's name, `ALL` or `ONLINE`.
        server: String,
        /// The plugin's own channel name.
        channel: String,
        /// The plugin's bytes.
        data: Vec<u8>,
    },
    /// `ForwardToPlayer <player> <channel> <i16 length> <data>`: the same, to the server that player is on.
    ForwardToPlayer {
        /// The player's name.
        player: String,
        /// The plugin's own channel name.
        channel: String,
        /// The plugin's bytes.
        data: Vec<u8>,
    },
    /// Any other subchannel (`ConnectOther`, `KickPlayerRaw`, …), by name: dropped by the proxy.
    Other {
        /// The subchannel.
        subchannel: String,
    },
}

impl BungeeRequest {
    /// Parses a [`BUNGEE_CHANNEL`] payload.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] when a field is cut off, [`DecodeError::InvalidText`] when a string is
    /// not UTF-8 (modified UTF-8 differs only for NUL and characters outside the BMP, which names do not
    /// use), [`DecodeError::NegativeLength`] for a negative data length.
    pub fn parse(data: &[u8]) -> Result<Self, DecodeError> {
        let mut r = Reader::new(data);
        let subchannel = java_utf(&mut r, "subchannel")?;
        let mut utf = |field| java_utf(&mut r, field);
        Ok(match subchannel.as_str() {
            "Connect" => Self::Connect { server: utf("server")? },
            "GetServers" => Self::GetServers,
            "GetServer" => Self::GetServer,
            "PlayerCount" => Self::PlayerCount { server: utf("server")? },
            "PlayerList" => Self::PlayerList { server: utf("server")? },
            "UUID" => Self::Uuid,
            "UUIDOther" => Self::UuidOther { player: utf("player")? },
            "IP" => Self::Ip,
            "IPOther" => Self::IpOther { player: utf("player")? },
            "ServerIP" => Self::ServerIp { server: utf("server")? },
            "Message" => Self::Message { player: utf("player")?, text: utf("message")? },
            "MessageRaw" => Self::MessageRaw { player: utf("player")?, json: utf("message")? },
            "KickPlayer" => Self::KickPlayer { player: utf("player")?, reason: utf("reason")? },
            "Forward" | "ForwardToPlayer" => {
                let target = utf("target")?;
                let channel = utf("channel")?;
                let data = r.i16_bytes("data")?.to_vec();
                if subchannel == "Forward" {
                    Self::Forward { server: target, channel, data }
                } else {
                    Self::ForwardToPlayer { player: target, channel, data }
                }
            }
            _ => Self::Other { subchannel },
        })
    }

    /// The payload a server plugin sends for `Connect <server>`.
    ///
    /// # Errors
    /// [`EncodeError::StringTooLong`] for a name over 65,535 bytes (`writeUTF`'s limit).
    pub fn connect_payload(server: &str) -> Result<Vec<u8>, EncodeError> {
        let mut out = BungeeAnswer::new("Connect")?;
        out.utf(server)?;
        Ok(out.finish())
    }
}

/// A payload on the [`BUNGEE_CHANNEL`] as `DataOutput` writes it: the subchannel, then fields in order.
///
/// ```
/// use moonbridge_protocol::transfer::BungeeAnswer;
/// let mut a = BungeeAnswer::new("PlayerCount").unwrap();
/// a.utf("ALL").unwrap();
/// a.int(2);
/// assert_eq!(a.finish(), b"\x00\x0bPlayerCount\x00\x03ALL\x00\x00\x00\x02");
/// ```
#[derive(Clone, Debug)]
pub struct BungeeAnswer(Vec<u8>);

impl BungeeAnswer {
    /// A payload that starts with `subchannel`.
    ///
    /// # Errors
    /// As [`BungeeAnswer::utf`].
    pub fn new(subchannel: &str) -> Result<Self, EncodeError> {
        let mut a = Self(Vec::with_capacity(64));
        a.utf(subchannel)?;
        Ok(a)
    }

    /// `writeUTF`: a `u16` byte length, then the bytes (UTF-8; modified UTF-8 differs only for NUL and
    /// characters outside the BMP).
    ///
    /// # Errors
    /// [`EncodeError::StringTooLong`] over 65,535 bytes.
    pub fn utf(&mut self, s: &str) -> Result<&mut Self, EncodeError> {
        let len = u16::try_from(s.len()).map_err(|_| EncodeError::StringTooLong {
            field: "BungeeCord string",
            len: s.len(),
            max: usize::from(u16::MAX),
        })?;
        self.0.extend_from_slice(&len.to_be_bytes());
        self.0.extend_from_slice(s.as_bytes());
        Ok(self)
    }

    /// `writeInt`: a big-endian `i32`.
    pub fn int(&mut self, v: i32) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// `writeShort`: a big-endian `u16`.
    pub fn short(&mut self, v: u16) -> &mut Self {
        self.0.extend_from_slice(&v.to_be_bytes());
        self
    }

    /// `writeShort(length)` then the bytes, as `Forward` carries a plugin's data.
    ///
    /// # Errors
    /// [`EncodeError::ArrayTooLong`] over 32,767 bytes.
    pub fn short_bytes(&mut self, data: &[u8]) -> Result<&mut Self, EncodeError> {
        crate::codec::put_i16_bytes(&mut self.0, data, "BungeeCord data")?;
        Ok(self)
    }

    /// The payload.
    pub fn finish(self) -> Vec<u8> {
        self.0
    }
}

/// Reads a `DataOutput.writeUTF` string.
fn java_utf(r: &mut Reader<'_>, field: &'static str) -> Result<String, DecodeError> {
    let len = r.u16(field)?;
    let bytes = r.bytes(usize::from(len), field)?;
    std::str::from_utf8(bytes).map(str::to_owned).map_err(|_| DecodeError::InvalidText(field))
}

/// Whether a Plugin Message's fields (`fields`: after the packet id, possibly only their start) begin with the
/// channel name `channel`, compared as bytes: the check a relay makes per frame to know whether it must look
/// further. The name's length is read as the VarInt it is, in any of its forms: a 1.7.10 server reads `8A 00`
/// as 10 as readily as `0A`, so a padded length must not hide a channel (at most
/// [`crate::varint::VarInt::MAX_SIZE`] bytes, then the name: [`CHANNEL_HEAD`] bytes tell).
pub fn starts_with_channel(fields: &[u8], channel: &str) -> bool {
    let name = channel.as_bytes();
    match crate::varint::VarInt::decode_partial(fields) {
        Ok((len, n)) => usize::try_from(len).ok() == Some(name.len()) && fields.get(n..n + name.len()) == Some(name),
        Err(_) => false,
    }
}

/// Bytes at the start of a Plugin Message's fields that [`starts_with_channel`] needs to tell `BungeeCord`
/// apart, whatever form its length takes: the longest VarInt and the name.
pub const CHANNEL_HEAD: usize = crate::varint::VarInt::MAX_SIZE + BUNGEE_CHANNEL.len();

/// Whether a Plugin Message's fields (`fields`: after the packet id) name `channel`.
pub fn is_channel(fields: &[u8], channel: &str) -> bool {
    let mut r = Reader::new(fields);
    r.string(crate::packets::MAX_CHANNEL_CHARS, "channel").is_ok_and(|c| c == channel)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_channel_length_in_any_varint_form_names_the_channel() {
        let mut padded = vec![0x8a, 0x80, 0x00];
        padded.extend_from_slice(b"BungeeCord\x00\x03abc");
        assert!(starts_with_channel(&padded, BUNGEE_CHANNEL), "8A 80 00 is 10");
        assert!(starts_with_channel(b"\x0aBungeeCord", BUNGEE_CHANNEL));
        assert!(!starts_with_channel(b"\x0aBungeeCore", BUNGEE_CHANNEL));
        assert!(!starts_with_channel(b"\x8a", BUNGEE_CHANNEL), "cut short: not known to be it");
        assert!(!starts_with_channel(b"\x09BungeeCor", BUNGEE_CHANNEL));
        assert!(CHANNEL_HEAD >= padded.len() - 5);
    }

    #[test]
    fn bungee_connect_byte_exact() {
        // What a Bukkit plugin writes: writeUTF("Connect"), writeUTF("survival").
        let data =
            [0, 7, b'C', b'o', b'n', b'n', b'e', b'c', b't', 0, 8, b's', b'u', b'r', b'v', b'i', b'v', b'a', b'l'];
        assert_eq!(BungeeRequest::parse(&data), Ok(BungeeRequest::Connect { server: "survival".into() }));
        assert_eq!(BungeeRequest::connect_payload("survival").unwrap(), data);
        assert!(BungeeRequest::connect_payload(&"x".repeat(65_536)).is_err());
        assert_eq!(BungeeRequest::parse(&[0, 2, b'I', b'P']), Ok(BungeeRequest::Ip));
        assert_eq!(BungeeRequest::parse(&data[..12]), Err(DecodeError::UnexpectedEnd("server")));
        assert_eq!(BungeeRequest::parse(&[0]), Err(DecodeError::UnexpectedEnd("subchannel")));
        assert_eq!(BungeeRequest::parse(&[0, 1, 0xff]), Err(DecodeError::InvalidText("subchannel")));
    }

    fn payload(parts: &[&str]) -> Vec<u8> {
        let mut a = BungeeAnswer::new(parts[0]).unwrap();
        for p in &parts[1..] {
            a.utf(p).unwrap();
        }
        a.finish()
    }

    #[test]
    fn every_subchannel_a_proxy_answers_parses() {
        let s = String::from;
        let cases = [
            (payload(&["GetServers"]), BungeeRequest::GetServers),
            (payload(&["GetServer"]), BungeeRequest::GetServer),
            (payload(&["PlayerCount", "ALL"]), BungeeRequest::PlayerCount { server: s("ALL") }),
            (payload(&["PlayerList", "lobby"]), BungeeRequest::PlayerList { server: s("lobby") }),
            (payload(&["UUID"]), BungeeRequest::Uuid),
            (payload(&["UUIDOther", "Steve"]), BungeeRequest::UuidOther { player: s("Steve") }),
            (payload(&["IP"]), BungeeRequest::Ip),
            (payload(&["IPOther", "Steve"]), BungeeRequest::IpOther { player: s("Steve") }),
            (payload(&["ServerIP", "lobby"]), BungeeRequest::ServerIp { server: s("lobby") }),
            (payload(&["Message", "ALL", "hi"]), BungeeRequest::Message { player: s("ALL"), text: s("hi") }),
            (payload(&["MessageRaw", "A", "{}"]), BungeeRequest::MessageRaw { player: s("A"), json: s("{}") }),
            (payload(&["KickPlayer", "A", "bye"]), BungeeRequest::KickPlayer { player: s("A"), reason: s("bye") }),
            (payload(&["ConnectOther", "A", "b"]), BungeeRequest::Other { subchannel: s("ConnectOther") }),
        ];
        for (data, want) in cases {
            assert_eq!(BungeeRequest::parse(&data), Ok(want));
        }
        // Forward: target, channel, then writeShort(length) and the bytes.
        let mut fwd = payload(&["Forward", "ONLINE", "MyChannel"]);
        fwd.extend_from_slice(&[0, 3, 1, 2, 3]);
        assert_eq!(
            BungeeRequest::parse(&fwd),
            Ok(BungeeRequest::Forward { server: s("ONLINE"), channel: s("MyChannel"), data: vec![1, 2, 3] })
        );
        let mut to = payload(&["ForwardToPlayer", "Alex", "c"]);
        to.extend_from_slice(&[0, 0]);
        assert_eq!(
            BungeeRequest::parse(&to),
            Ok(BungeeRequest::ForwardToPlayer { player: s("Alex"), channel: s("c"), data: vec![] })
        );
        let mut negative = payload(&["Forward", "ALL", "c"]);
        negative.extend_from_slice(&[0xff, 0xff]);
        assert_eq!(BungeeRequest::parse(&negative), Err(DecodeError::NegativeLength("data")));
        assert_eq!(BungeeRequest::parse(&payload(&["PlayerCount"])), Err(DecodeError::UnexpectedEnd("server")));
    }

    #[test]
    fn answers_are_written_as_data_output_writes_them() {
        let mut a = BungeeAnswer::new("ServerIP").unwrap();
        a.utf("lobby").unwrap().utf("10.0.0.1").unwrap().short(25565);
        assert_eq!(a.finish(), b"\x00\x08ServerIP\x00\x05lobby\x00\x0810.0.0.1\x63\xdd");
        let mut f = BungeeAnswer::new("chan").unwrap();
        f.short_bytes(&[9, 8]).unwrap();
        assert_eq!(f.finish(), b"\x00\x04chan\x00\x02\x09\x08");
        assert!(BungeeAnswer::new("c").unwrap().short_bytes(&[0; 40_000]).is_err());
    }

    #[test]
    fn channel_names_are_compared_as_bytes() {
        assert!(starts_with_channel(b"\x0aBungeeCord\x00\x00", BUNGEE_CHANNEL));
        assert!(!starts_with_channel(b"\x0aBungeeCore", BUNGEE_CHANNEL));
        assert!(!starts_with_channel(b"\x06FML|HS", "FML"), "the length is part of the name");
        assert!(starts_with_channel(b"\x03FML\x00\x01\x03", "FML"));
        assert!(!starts_with_channel(b"", "FML"));
    }

    #[test]
    fn the_bungee_registration_is_register_with_the_channel_name() {
        let mut fields = Vec::new();
        bungee_registration().encode_fields(&mut fields).unwrap();
        assert_eq!(fields, b"\x08REGISTER\x00\x0aBungeeCord");
    }
}
