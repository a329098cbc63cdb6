//! Player identity handed to backends: offline UUIDs and BungeeCord ("legacy") IP forwarding.
//!
//! BungeeCord forwarding rewrites the handshake address to `host\0ip\0uuid[\0properties]`, where `uuid` has
//! no dashes and `properties` is a JSON array of `{"name","value"[,"signature"]}` objects. Spigot, Paper,
//! Sponge and the Forge-side BungeeCord bridges split it on NUL into 3 or 4 fields.
//!
//! A Forge client's marker (`\0FML\0`) cannot stay in the address: it would add NUL-separated fields. It is
//! carried the way BungeeCord carries it, as two properties appended to the list: `forgeClient` = `"true"`
//! and `extraData` = the marker with every NUL replaced by `\u0001` (signature `""`).

use std::net::IpAddr;

use md5::{Digest, Md5};
use serde::{Deserialize, Serialize};
use uuid::Uuid;

/// Name of the property that marks a Forge client (BungeeCord's `ForgeConstants.FML_LOGIN_PROFILE`).
pub const FORGE_CLIENT_PROPERTY: &str = "forgeClient";
/// Name of the property carrying the original handshake marker (BungeeCord's `ForgeConstants.EXTRA_DATA`).
pub const EXTRA_DATA_PROPERTY: &str = "extraData";

/// A game profile property, as the session server returns it and BungeeCord forwards it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Property {
    /// Property name, such as `textures`.
    pub name: String,
    /// Property value (base64 for `textures`).
    pub value: String,
    /// Yggdrasil signature of the value, when signed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub signature: Option<String>,
}

/// The offline-mode UUID of a player: version 3 (MD5) over the UTF-8 bytes of `"OfflinePlayer:" + name`,
/// as Java's `UUID.nameUUIDFromBytes` computes it (no namespace).
pub fn offline_uuid(name: &str) -> Uuid {
    let mut hash: [u8; 16] = Md5::new().chain_update(b"OfflinePlayer:").chain_update(name.as_bytes()).finalize().into();
    hash[6] = (hash[6] & 0x0f) | 0x30;
    hash[8] = (hash[8] & 0x3f) | 0x80;
    Uuid::from_bytes(hash)
}

/// The two properties that tell a backend the player runs Forge, for the handshake `marker` that followed the
/// hostname (normally `"\0FML\0"`).
pub fn forge_properties(marker: &str) -> [Property; 2] {
    [
        Property { name: FORGE_CLIENT_PROPERTY.into(), value: "true".into(), signature: None },
        Property {
            name: EXTRA_DATA_PROPERTY.into(),
            value: marker.replace('\0', "\u{1}"),
            signature: Some(String::new()),
        },
    ]
}

/// Builds the BungeeCord-forwarded handshake address `hostname\0ip\0uuid[\0properties-json]`.
///
/// `ip` is written in its canonical text form (an IPv4-mapped IPv6 address becomes IPv4); `properties` is
/// omitted when empty. `hostname` must not contain NUL (take it from [`crate::handshake::HostField`]).
pub fn bungeecord_address(hostname: &str, ip: IpAddr, uuid: Uuid, properties: &[Property]) -> String {
    let mut s = format!("{hostname}\0{}\0{}", ip.to_canonical(), uuid.simple());
    if !properties.is_empty() {
        s.push('\0');
        // Serialising a slice of plain string structs cannot fail.
        s.push_str(&serde_json::to_string(properties).unwrap_or_else(|_| "[]".into()));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::handshake::HostField;

    #[test]
    fn offline_uuid_vectors() {
        // Values a vanilla offline-mode server assigns (UUID.nameUUIDFromBytes).
        assert_eq!(offline_uuid("Steve").to_string(), "5627dd98-e6be-3c21-b8a8-e92344183641");
        assert_eq!(offline_uuid("Notch").to_string(), "b50ad385-829d-3141-a216-7e7d7539ba7f");
        assert_eq!(offline_uuid("Steve").get_version_num(), 3);
    }

    #[test]
    fn c4_forge_marker_becomes_properties() {
        let host = HostField::parse("mc.example.com\0FML\0");
        let props = forge_properties(host.marker.unwrap());
        let ip: IpAddr = "203.0.113.7".parse().unwrap();
        let addr = bungeecord_address(host.hostname, ip, offline_uuid("Steve"), &props);
        let fields: Vec<&str> = addr.split('\0').collect();
        assert_eq!(fields.len(), 4);
        assert_eq!(fields[0], "mc.example.com");
        assert_eq!(fields[1], "203.0.113.7");
        assert_eq!(fields[2], "5627dd98e6be3c21b8a8e92344183641");
        assert_eq!(
            fields[3],
            r#"[{"name":"forgeClient","value":"true"},{"name":"extraData","value":"\u0001FML\u0001","signature":""}]"#
        );
        let parsed: Vec<Property> = serde_json::from_str(fields[3]).unwrap();
        assert_eq!(parsed, props);
    }

    #[test]
    fn vanilla_client_gets_three_fields() {
        let ip: IpAddr = "::ffff:203.0.113.7".parse().unwrap();
        let addr = bungeecord_address("mc.example.com", ip, offline_uuid("Steve"), &[]);
        assert_eq!(addr, "mc.example.com\x00203.0.113.7\x005627dd98e6be3c21b8a8e92344183641");
        let v6: IpAddr = "2001:db8::1".parse().unwrap();
        assert_eq!(bungeecord_address("h", v6, Uuid::nil(), &[]).split('\0').nth(1), Some("2001:db8::1"));
    }
}
