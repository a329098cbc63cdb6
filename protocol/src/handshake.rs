//! The handshake's server address: hostname, Forge marker, routing key.
//!
//! Forge 1.7.10 clients send `host + "\0FML\0"` so Forge servers can tell modded clients apart. Anything
//! after the first NUL is kept verbatim as the *marker* and given back to the backend; only the part before it
//! is used for routing.

/// The marker Forge 1.7.10 (FML) clients append to the handshake address.
pub const FORGE_MARKER: &str = "\0FML\0";

/// A handshake address split at its first NUL.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct HostField<'a> {
    /// The address the player typed (before the first NUL).
    pub hostname: &'a str,
    /// Everything from the first NUL on (for example [`FORGE_MARKER`]), if present.
    pub marker: Option<&'a str>,
}

impl<'a> HostField<'a> {
    /// Splits a raw handshake address.
    pub fn parse(server_address: &'a str) -> Self {
        match server_address.find('\0') {
            Some(i) => Self { hostname: server_address.get(..i).unwrap_or_default(), marker: server_address.get(i..) },
            None => Self { hostname: server_address, marker: None },
        }
    }

    /// True when the marker is exactly the Forge 1.7.10 one.
    pub fn is_forge(&self) -> bool {
        self.marker == Some(FORGE_MARKER)
    }

    /// The address to send the backend when the hostname is replaced by `hostname`: the marker is kept.
    pub fn with_hostname(&self, hostname: &str) -> String {
        let mut s = String::with_capacity(hostname.len() + self.marker.map_or(0, str::len));
        s.push_str(hostname);
        if let Some(m) = self.marker {
            s.push_str(m);
        }
        s
    }

    /// The routing key: the hostname with one trailing dot removed and ASCII letters lowercased.
    pub fn routing_key(&self) -> String {
        routing_key(self.hostname)
    }
}

/// Normalises a hostname for routing: strips one trailing dot (a fully qualified name), lowercases ASCII.
pub fn routing_key(hostname: &str) -> String {
    hostname.strip_suffix('.').unwrap_or(hostname).to_ascii_lowercase()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn c3_forge_marker_is_split_and_kept() {
        let h = HostField::parse("mc.example.com\0FML\0");
        assert_eq!(h.hostname, "mc.example.com");
        assert_eq!(h.marker, Some("\0FML\0"));
        assert!(h.is_forge());
        assert_eq!(h.routing_key(), "mc.example.com");
        assert_eq!(h.with_hostname("backend.local"), "backend.local\0FML\0");
    }

    #[test]
    fn without_marker() {
        let h = HostField::parse("MC.Example.COM.");
        assert_eq!(h.marker, None);
        assert!(!h.is_forge());
        assert_eq!(h.routing_key(), "mc.example.com");
        assert_eq!(h.with_hostname("x"), "x");
    }

    #[test]
    fn only_one_trailing_dot_is_stripped() {
        assert_eq!(routing_key("a.."), "a.");
        assert_eq!(routing_key(""), "");
        assert_eq!(routing_key("."), "");
    }

    #[test]
    fn other_nul_data_is_a_marker_but_not_forge() {
        let h = HostField::parse("host\x00203.0.113.7\x00abc");
        assert_eq!(h.hostname, "host");
        assert_eq!(h.marker, Some("\x00203.0.113.7\x00abc"));
        assert!(!h.is_forge());
    }
}
