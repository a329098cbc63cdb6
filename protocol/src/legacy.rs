//! Legacy (pre-1.7) server-list pings and the `0xFF` kick packet that answers them.
//!
//! Three forms start with `0xFE` (wiki.vg "Server List Ping", legacy section):
//! - 1.3 and older: `FE` alone; answered `motd§online§max`.
//! - 1.4–1.5: `FE 01`; answered with the 1.4+ form `§1\0protocol\0version\0motd\0online\0max`.
//! - 1.6: `FE 01 FA`, then `i16 11`, `"MC|PingHost"` as UTF-16BE, `i16 data length`, `u8 protocol`,
//!   `i16 host length`, host as UTF-16BE, `i32 port`; answered with the 1.4+ form.
//!
//! A modern frame can also start `FE 01` (a 254-byte frame), but its third byte is the handshake's packet id
//! `00`, never `FA`, so the third byte tells them apart. 1.3 and 1.4 clients send nothing after `FE` or
//! `FE 01` and wait: a caller that sees [`LegacyDetect::NeedMore`] with `if_silent` set treats a short silence
//! as that ping.

use crate::error::DecodeError;

/// Which legacy ping was received.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegacyPing {
    /// `FE`: Minecraft 1.3 and older.
    V1_3,
    /// `FE 01`: Minecraft 1.4 and 1.5.
    V1_4,
    /// `FE 01 FA ...MC|PingHost`: Minecraft 1.6.
    V1_6 {
        /// The client's protocol number.
        protocol: u8,
        /// The host the player typed.
        host: String,
        /// The port the player typed.
        port: i32,
    },
}

/// What the first bytes of a connection are.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum LegacyDetect {
    /// A modern (1.7+) length-prefixed frame.
    Modern,
    /// Undecided. `if_silent` is the ping to assume if the client sends nothing more for a short while.
    NeedMore {
        /// The ping these bytes form on their own, if any.
        if_silent: Option<LegacyPing>,
    },
    /// A complete legacy ping of `len` bytes.
    Legacy {
        /// The form received.
        ping: LegacyPing,
        /// Bytes it took from the start of the buffer.
        len: usize,
    },
}

const PING_HOST_CHANNEL: &str = "MC|PingHost";

/// Classifies the first bytes of a connection.
///
/// # Errors
/// [`DecodeError`] when a 1.6 `MC|PingHost` packet is malformed.
pub fn detect(buf: &[u8]) -> Result<LegacyDetect, DecodeError> {
    match buf {
        [] => Ok(LegacyDetect::NeedMore { if_silent: None }),
        [first, ..] if *first != 0xfe => Ok(LegacyDetect::Modern),
        [_] => Ok(LegacyDetect::NeedMore { if_silent: Some(LegacyPing::V1_3) }),
        [_, 0x01] => Ok(LegacyDetect::NeedMore { if_silent: Some(LegacyPing::V1_4) }),
        [_, 0x01, 0x00, ..] => Ok(LegacyDetect::Modern),
        [_, 0x01, 0xfa, rest @ ..] => match parse_ping_host(rest)? {
            Some((ping, n)) => Ok(LegacyDetect::Legacy { ping, len: 3 + n }),
            // Case C37: widely used status libraries send `FE 01 FA` alone and wait. Answered as the 1.4–1.6 ping
            // it is (the §1 answer format) if nothing more comes.
            None => Ok(LegacyDetect::NeedMore { if_silent: Some(LegacyPing::V1_4) }),
        },
        [_, 0x01, ..] => Ok(LegacyDetect::Legacy { ping: LegacyPing::V1_4, len: 2 }),
        [_, ..] => Ok(LegacyDetect::Legacy { ping: LegacyPing::V1_3, len: 1 }),
    }
}

/// Parses the `MC|PingHost` plugin message after `FE 01 FA`; `Ok(None)` when incomplete.
fn parse_ping_host(buf: &[u8]) -> Result<Option<(LegacyPing, usize)>, DecodeError> {
    let mut r = crate::codec::Reader::new(buf);
    let Ok(chan_len) = r.u16("channel") else {
        return Ok(None);
    };
    if usize::from(chan_len) != PING_HOST_CHANNEL.len() {
        return Err(DecodeError::InvalidValue { field: "channel", reason: "not MC|PingHost" });
    }
    let Ok(chan) = r.bytes(2 * PING_HOST_CHANNEL.len(), "channel") else {
        return Ok(None);
    };
    if utf16be(chan, "channel")? != PING_HOST_CHANNEL {
        return Err(DecodeError::InvalidValue { field: "channel", reason: "not MC|PingHost" });
    }
    let Ok(data_len) = r.u16("data") else {
        return Ok(None);
    };
    // protocol (1) + host length (2) + host + port (4); the host takes the rest.
    let data_len = usize::from(data_len);
    if data_len < 7 {
        return Err(DecodeError::InvalidValue { field: "data", reason: "too short" });
    }
    let Ok(data) = r.bytes(data_len, "data") else {
        return Ok(None);
    };
    let mut d = crate::codec::Reader::new(data);
    let protocol = d.u8("protocol")?;
    let host_len = usize::from(d.u16("host")?);
    let host = utf16be(d.bytes(host_len * 2, "host")?, "host")?;
    let port = d.i32("port")?;
    d.finish()?;
    let used = buf.len() - r.remaining().len();
    Ok(Some((LegacyPing::V1_6 { protocol, host, port }, used)))
}

fn utf16be(bytes: &[u8], field: &'static str) -> Result<String, DecodeError> {
    let units: Vec<u16> = bytes.chunks_exact(2).map(|c| u16::from_be_bytes(c.try_into().unwrap_or_default())).collect();
    String::from_utf16(&units).map_err(|_| DecodeError::InvalidText(field))
}

/// What a legacy status answer reports.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LegacyStatus {
    /// Protocol number shown to the client (127 marks "incompatible" on legacy clients, as proxies use).
    pub protocol: i32,
    /// Version name, such as `1.7.10`.
    pub version: String,
    /// Message of the day (no `§` or NUL characters; they are removed).
    pub motd: String,
    /// Players online.
    pub online: u32,
    /// Player slots.
    pub max: u32,
}

/// The bytes a client sends for `ping`: `FE`, `FE 01`, or `FE 01 FA` and the `MC|PingHost` plugin message
/// (channel and host in UTF-16BE with `u16` lengths, protocol `u8`, port `i32`), as 1.6 clients do. The inverse
/// of [`detect`].
pub fn encode_ping(ping: &LegacyPing) -> Vec<u8> {
    match ping {
        LegacyPing::V1_3 => vec![0xfe],
        LegacyPing::V1_4 => vec![0xfe, 0x01],
        LegacyPing::V1_6 { protocol, host, port } => {
            let mut p = vec![0xfe, 0x01, 0xfa];
            let channel: Vec<u16> = PING_HOST_CHANNEL.encode_utf16().collect();
            p.extend_from_slice(&(channel.len() as u16).to_be_bytes());
            p.extend(channel.iter().flat_map(|u| u.to_be_bytes()));
            // The length fields are u16: a host is cut at 32,764 UTF-16 units (no real host comes close).
            let host: Vec<u16> = host.encode_utf16().take((usize::from(u16::MAX) - 7) / 2).collect();
            p.extend_from_slice(&((7 + host.len() * 2) as u16).to_be_bytes());
            p.push(*protocol);
            p.extend_from_slice(&(host.len() as u16).to_be_bytes());
            p.extend(host.iter().flat_map(|u| u.to_be_bytes()));
            p.extend_from_slice(&port.to_be_bytes());
            p
        }
    }
}

/// Encodes the `0xFF` kick packet answering `ping`: `FF`, `u16` length in UTF-16 units, UTF-16BE text.
pub fn encode_kick(ping: &LegacyPing, status: &LegacyStatus) -> Vec<u8> {
    let motd: String = status.motd.chars().filter(|c| *c != '§' && *c != '\0').collect();
    let text = match ping {
        LegacyPing::V1_3 => format!("{motd}§{}§{}", status.online, status.max),
        LegacyPing::V1_4 | LegacyPing::V1_6 { .. } => {
            format!("§1\0{}\0{}\0{motd}\0{}\0{}", status.protocol, status.version, status.online, status.max)
        }
    };
    let units: Vec<u16> = text.encode_utf16().take(usize::from(u16::MAX)).collect();
    let mut out = Vec::with_capacity(3 + units.len() * 2);
    out.push(0xff);
    // Bounded by the take() above.
    out.extend_from_slice(&(units.len() as u16).to_be_bytes());
    for u in units {
        out.extend_from_slice(&u.to_be_bytes());
    }
    out
}

/// Decodes a `0xFF` kick packet; `Ok(None)` when incomplete. Returns the text and the bytes used.
///
/// # Errors
/// When the first byte is not `0xFF` or the text is not valid UTF-16.
pub fn decode_kick(buf: &[u8]) -> Result<Option<(String, usize)>, DecodeError> {
    let mut r = crate::codec::Reader::new(buf);
    let Ok(id) = r.u8("id") else { return Ok(None) };
    if id != 0xff {
        return Err(DecodeError::UnexpectedPacketId { expected: 0xff, got: i32::from(id) });
    }
    let Ok(len) = r.u16("reason") else {
        return Ok(None);
    };
    let Ok(raw) = r.bytes(usize::from(len) * 2, "reason") else {
        return Ok(None);
    };
    Ok(Some((utf16be(raw, "reason")?, 3 + raw.len())))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn status() -> LegacyStatus {
        LegacyStatus { protocol: 127, version: "1.7.10".into(), motd: "Hi".into(), online: 1, max: 20 }
    }

    #[test]
    fn c6_detects_every_form() {
        assert_eq!(detect(&[]).unwrap(), LegacyDetect::NeedMore { if_silent: None });
        assert_eq!(detect(&[0xfe]).unwrap(), LegacyDetect::NeedMore { if_silent: Some(LegacyPing::V1_3) });
        assert_eq!(detect(&[0xfe, 0x01]).unwrap(), LegacyDetect::NeedMore { if_silent: Some(LegacyPing::V1_4) });
        assert_eq!(detect(&[0xfe, 0x05]).unwrap(), LegacyDetect::Legacy { ping: LegacyPing::V1_3, len: 1 });
        assert_eq!(detect(&[0xfe, 0x01, 0x02]).unwrap(), LegacyDetect::Legacy { ping: LegacyPing::V1_4, len: 2 });
        assert_eq!(detect(crate::tests::HS).unwrap(), LegacyDetect::Modern);
    }

    #[test]
    fn modern_frame_of_254_bytes_is_not_a_ping() {
        // FE 01 is the length prefix 254; the body starts with the handshake id 00.
        assert_eq!(detect(&[0xfe, 0x01, 0x00, 0x05]).unwrap(), LegacyDetect::Modern);
    }

    #[test]
    fn v1_6_ping_host() {
        // The exact bytes a 1.6.4 client sends for localhost:25565, protocol 78.
        let mut p = vec![0xfe, 0x01, 0xfa, 0x00, 0x0b];
        for u in "MC|PingHost".encode_utf16() {
            p.extend_from_slice(&u.to_be_bytes());
        }
        p.extend_from_slice(&[0x00, 25, 78, 0x00, 0x09]);
        for u in "localhost".encode_utf16() {
            p.extend_from_slice(&u.to_be_bytes());
        }
        p.extend_from_slice(&25565i32.to_be_bytes());
        let ping = LegacyPing::V1_6 { protocol: 78, host: "localhost".into(), port: 25565 };
        assert_eq!(encode_ping(&ping), p, "the encoder writes what the client sends");
        let expected = LegacyPing::V1_6 { protocol: 78, host: "localhost".into(), port: 25565 };
        assert_eq!(detect(&p).unwrap(), LegacyDetect::Legacy { ping: expected, len: p.len() });
        // Every prefix from FE 01 FA on is undecided, and a 1.4–1.6 ping (§1 answer) if the client stops there
        // (case C37: `FE 01 FA` alone).
        for cut in 3..p.len() {
            assert_eq!(
                detect(&p[..cut]).unwrap(),
                LegacyDetect::NeedMore { if_silent: Some(LegacyPing::V1_4) },
                "cut {cut}"
            );
        }
        // A wrong channel is an error.
        let mut bad = p.clone();
        bad[6] = b'X';
        assert!(detect(&bad).is_err());
    }

    #[test]
    fn kick_vectors() {
        let k = encode_kick(&LegacyPing::V1_3, &status());
        assert_eq!(&k[..3], &[0xff, 0x00, 0x07]);
        assert_eq!(decode_kick(&k).unwrap(), Some(("Hi§1§20".to_string(), k.len())));

        let k = encode_kick(&LegacyPing::V1_4, &status());
        let (text, n) = decode_kick(&k).unwrap().unwrap();
        assert_eq!(n, k.len());
        assert!(text.starts_with("§1\0"));
        assert_eq!(text.split('\0').collect::<Vec<_>>(), ["§1", "127", "1.7.10", "Hi", "1", "20"]);
        // "§1" is UTF-16BE 00 A7 00 31.
        assert_eq!(&k[3..7], &[0x00, 0xa7, 0x00, 0x31]);
        assert_eq!(decode_kick(&k[..k.len() - 1]).unwrap(), None);
    }

    #[test]
    fn motd_control_characters_are_removed() {
        let s = LegacyStatus { motd: "a§b\0c".into(), ..status() };
        let (text, _) = decode_kick(&encode_kick(&LegacyPing::V1_4, &s)).unwrap().unwrap();
        assert_eq!(text.split('\0').nth(3), Some("abc"));
    }
}
