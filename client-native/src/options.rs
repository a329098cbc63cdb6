//! Connection options: a JSON object whose keys are all optional (DESIGN.md, "Client library contract").

use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use crate::error::ClientError;

/// How sent bytes are grouped into messages (or TCP writes).
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Coalesce {
    /// Everything sent between two `end_tick` calls leaves as one message (default).
    #[default]
    Tick,
    /// Every `send` leaves as its own message.
    Off,
}

/// A TLS protocol version a `wss://` connection may use.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
pub enum TlsVersion {
    /// TLS 1.2.
    #[serde(rename = "1.2")]
    V1_2,
    /// TLS 1.3.
    #[serde(rename = "1.3")]
    V1_3,
}

/// Every option, with its default.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct Options {
    /// `coalesce`: `"tick"` (default) or `"off"`.
    pub coalesce: Coalesce,
    /// `max_delay_ms`: a batch without `end_tick` leaves on its own after this long. Default 50 ms (one
    /// game tick is 50 ms).
    pub max_delay_ms: u64,
    /// `max_batch_bytes`: a batch leaves as soon as it holds this many bytes. Default 262144 bytes.
    pub max_batch_bytes: usize,
    /// `max_pending_bytes`: bytes sent but not yet written to the network; over it `send` fails instead of
    /// buffering more. Default 16777216 bytes (16 MiB).
    pub max_pending_bytes: usize,
    /// `tls_versions`: versions offered for `wss://`. Default `["1.2", "1.3"]`; `["1.2"]` pins TLS 1.2.
    pub tls_versions: Vec<TlsVersion>,
    /// `ca_file`: a PEM file of extra trusted roots (webpki-roots are always trusted). Default none.
    pub ca_file: Option<PathBuf>,
    /// `server_name`: the TLS SNI and the name the certificate must match. Default: the URL host.
    pub server_name: Option<String>,
    /// `connect_timeout_ms`: DNS, TCP connect, TLS handshake and WebSocket upgrade together. Default 10000 ms.
    pub connect_timeout_ms: u64,
    /// `ping_interval_ms`: send a WebSocket Ping after this long without writing, and treat 3 intervals
    /// without receiving anything as a dead server. 0 disables both. Default 30000 ms.
    pub ping_interval_ms: u64,
    /// `subprotocol`: offer the `moonbridge.v1` subprotocol in the WebSocket upgrade. Default `true`; set
    /// `false` for plain WebSocket-to-TCP bridges that do not echo it (the upgrade would fail otherwise).
    pub subprotocol: bool,
    /// `resume`: offer carriage v2 (`moonbridge.v2`, ahead of `moonbridge.v1`) so a dropped WebSocket is
    /// resumed on a new one within the proxy's window, invisibly to the game. Needs `subprotocol`. Default
    /// `true`.
    pub resume: bool,
    /// `compress`: offer `moonbridge.v2.zstd` ahead of `moonbridge.v2`, so the proxy may compress every
    /// WebSocket message with zstd (docs/carriage.md, "Compression"). Needs `resume`. Default `true`.
    pub compress: bool,
}

impl Default for Options {
    fn default() -> Self {
        Self {
            coalesce: Coalesce::Tick,
            max_delay_ms: 50,
            max_batch_bytes: 262_144,
            max_pending_bytes: 16 * 1024 * 1024,
            tls_versions: vec![TlsVersion::V1_2, TlsVersion::V1_3],
            ca_file: None,
            server_name: None,
            connect_timeout_ms: 10_000,
            ping_interval_ms: 30_000,
            subprotocol: true,
            resume: true,
            compress: true,
        }
    }
}

impl Options {
    /// Parses a JSON object; `None`, an empty string or `{}` give the defaults.
    ///
    /// # Errors
    /// [`ClientError::InvalidOptions`] naming the key for unknown keys, wrong types or values out of range.
    pub fn from_json(json: Option<&str>) -> Result<Self, ClientError> {
        let text = json.map(str::trim).filter(|t| !t.is_empty()).unwrap_or("{}");
        let o: Self = serde_json::from_str(text).map_err(|e| ClientError::InvalidOptions(e.to_string()))?;
        o.validate()?;
        Ok(o)
    }

    fn validate(&self) -> Result<(), ClientError> {
        let bad = |m: &str| Err(ClientError::InvalidOptions(m.into()));
        if self.max_batch_bytes == 0 {
            return bad("max_batch_bytes must be at least 1");
        }
        if self.max_pending_bytes < self.max_batch_bytes {
            return bad("max_pending_bytes must be at least max_batch_bytes");
        }
        if self.tls_versions.is_empty() {
            return bad("tls_versions must name at least one of \"1.2\", \"1.3\"");
        }
        if self.connect_timeout_ms == 0 {
            return bad("connect_timeout_ms must be at least 1");
        }
        if self.max_delay_ms == 0 || self.max_delay_ms > 60_000 {
            return bad("max_delay_ms must be between 1 and 60000");
        }
        Ok(())
    }

    /// `connect_timeout_ms` as a duration.
    pub fn connect_timeout(&self) -> Duration {
        Duration::from_millis(self.connect_timeout_ms)
    }

    /// `max_delay_ms` as a duration.
    pub fn max_delay(&self) -> Duration {
        Duration::from_millis(self.max_delay_ms)
    }

    /// The keepalive interval, `None` when disabled.
    pub fn ping_interval(&self) -> Option<Duration> {
        (self.ping_interval_ms > 0).then(|| Duration::from_millis(self.ping_interval_ms))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults() {
        for j in [None, Some(""), Some("{}"), Some("  ")] {
            assert_eq!(Options::from_json(j).unwrap(), Options::default());
        }
        let o = Options::default();
        assert_eq!(o.coalesce, Coalesce::Tick);
        assert_eq!(o.max_delay(), Duration::from_millis(50));
        assert_eq!(o.max_batch_bytes, 262_144);
        assert_eq!(o.tls_versions, [TlsVersion::V1_2, TlsVersion::V1_3]);
        assert_eq!(o.connect_timeout(), Duration::from_secs(10));
        assert_eq!(o.ping_interval(), Some(Duration::from_secs(30)));
    }

    #[test]
    fn every_key() {
        let o = Options::from_json(Some(
            r#"{"coalesce":"off","max_delay_ms":10,"max_batch_bytes":1000,"max_pending_bytes":5000,
                "tls_versions":["1.2"],"ca_file":"/tmp/ca.pem","server_name":"mc.example.com",
                "connect_timeout_ms":500,"ping_interval_ms":0,"subprotocol":false,"resume":false,
                "compress":false}"#,
        ))
        .unwrap();
        assert_eq!(o.coalesce, Coalesce::Off);
        assert_eq!(o.tls_versions, [TlsVersion::V1_2]);
        assert_eq!(o.ping_interval(), None);
        assert_eq!(o.server_name.as_deref(), Some("mc.example.com"));
        assert!(!o.subprotocol && !o.resume && !o.compress);
        assert!(Options::default().compress);
    }

    #[test]
    fn bad_options_name_the_problem() {
        for (json, needle) in [
            (r#"{"coalesce":"sometimes"}"#, "sometimes"),
            (r#"{"tls_versions":["1.1"]}"#, "1.1"),
            (r#"{"max_batch_bytes":0}"#, "max_batch_bytes"),
            (r#"{"pingInterval":5}"#, "pingInterval"),
            (r#"{"tls_versions":[]}"#, "tls_versions"),
            ("not json", "expected"),
        ] {
            let e = Options::from_json(Some(json)).unwrap_err().to_string();
            assert!(e.contains(needle), "{json}: {e}");
        }
    }
}
