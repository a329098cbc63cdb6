//! The URL schemes: `tcp://host:port`, `ws://host[:port]/path`, `wss://host[:port]/path`.

use crate::error::ClientError;

/// Where to connect and how.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Target {
    /// The transport.
    pub scheme: Scheme,
    /// Host name or address (IPv6 without brackets).
    pub host: String,
    /// Port (defaults: 80 for ws, 443 for wss; required for tcp).
    pub port: u16,
    /// The request path and query for WebSocket schemes (`/` when absent); empty for tcp.
    pub path: String,
    /// The URL as given.
    pub url: String,
}

/// The transport of a [`Target`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Scheme {
    /// Plain TCP with TCP_NODELAY.
    Tcp,
    /// WebSocket over TCP.
    Ws,
    /// WebSocket over TLS.
    Wss,
}

impl Target {
    /// Parses a URL.
    ///
    /// # Errors
    /// [`ClientError::InvalidUrl`] with the reason.
    pub fn parse(url: &str) -> Result<Self, ClientError> {
        let bad = |reason: &str| ClientError::InvalidUrl { url: url.into(), reason: reason.into() };
        let (scheme, rest) = url.split_once("://").ok_or_else(|| bad("missing scheme (tcp://, ws:// or wss://)"))?;
        let scheme = match scheme.to_ascii_lowercase().as_str() {
            "tcp" => Scheme::Tcp,
            "ws" => Scheme::Ws,
            "wss" => Scheme::Wss,
            _ => return Err(bad("scheme must be tcp, ws or wss")),
        };
        let (authority, path) = match rest.find(['/', '?']) {
            Some(i) => rest.split_at(i),
            None => (rest, ""),
        };
        if authority.contains('@') {
            return Err(bad("user information is not supported"));
        }
        let (host, port) = if let Some(v6) = authority.strip_prefix('[') {
            let (h, after) = v6.split_once(']').ok_or_else(|| bad("unclosed [ in IPv6 host"))?;
            let port = match after {
                "" => None,
                p => Some(p.strip_prefix(':').ok_or_else(|| bad("junk after IPv6 host"))?),
            };
            (h, port)
        } else {
            match authority.rsplit_once(':') {
                Some((h, p)) => (h, Some(p)),
                None => (authority, None),
            }
        };
        if host.is_empty() {
            return Err(bad("missing host"));
        }
        let port = match port {
            Some(p) => p.parse::<u16>().ok().filter(|p| *p != 0).ok_or_else(|| bad("port must be 1-65535"))?,
            None => match scheme {
                Scheme::Tcp => return Err(bad("tcp:// needs a port")),
                Scheme::Ws => 80,
                Scheme::Wss => 443,
            },
        };
        let path = match (scheme, path) {
            (Scheme::Tcp, "" | "/") => String::new(),
            (Scheme::Tcp, _) => return Err(bad("tcp:// takes no path")),
            (_, "") => "/".into(),
            (_, p) if p.starts_with('?') => format!("/{p}"),
            (_, p) => p.into(),
        };
        if path.contains(|c: char| c.is_whitespace() || c.is_control()) {
            return Err(bad("path holds spaces or control characters"));
        }
        Ok(Self { scheme, host: host.into(), port, path, url: url.into() })
    }

    /// `host:port` for messages and DNS (IPv6 in brackets).
    pub fn authority(&self) -> String {
        if self.host.contains(':') {
            format!("[{}]:{}", self.host, self.port)
        } else {
            format!("{}:{}", self.host, self.port)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn schemes() {
        let t = Target::parse("tcp://mc.example.com:25565").unwrap();
        assert_eq!((t.scheme, t.host.as_str(), t.port, t.path.as_str()), (Scheme::Tcp, "mc.example.com", 25565, ""));
        let t = Target::parse("ws://mc.example.com/mc").unwrap();
        assert_eq!((t.scheme, t.port, t.path.as_str()), (Scheme::Ws, 80, "/mc"));
        let t = Target::parse("wss://mc.example.com:8443/mc?x=1").unwrap();
        assert_eq!((t.scheme, t.port, t.path.as_str()), (Scheme::Wss, 8443, "/mc?x=1"));
        let t = Target::parse("WSS://[2001:db8::1]/").unwrap();
        assert_eq!((t.host.as_str(), t.port, t.authority()), ("2001:db8::1", 443, "[2001:db8::1]:443".to_string()));
        assert_eq!(Target::parse("ws://h").unwrap().path, "/");
    }

    #[test]
    fn bad_urls() {
        for (u, needle) in [
            ("mc.example.com:25565", "scheme"),
            ("http://x/mc", "scheme must be"),
            ("tcp://x", "needs a port"),
            ("tcp://x:1/path", "no path"),
            ("ws://:80/mc", "missing host"),
            ("ws://x:99999/mc", "port"),
            ("ws://x:0/mc", "port"),
            ("ws://u@x/mc", "user"),
            ("ws://[::1/mc", "unclosed"),
            ("ws://x/a b", "spaces"),
        ] {
            let e = Target::parse(u).unwrap_err();
            assert_eq!(e.code(), crate::error::MB_ERR_INVALID_ARGUMENT);
            assert!(e.to_string().contains(needle), "{u}: {e}");
        }
    }
}
