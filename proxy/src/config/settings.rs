//! [`Settings`]: the checked, typed configuration the proxy runs on, built by [`Config::settings`].

use std::collections::{HashMap, HashSet};
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::{
    AuthConfig, AuthMode, CompressionConfig, Config, ConfigError, ConfigProblem, Forwarding, LimitsConfig,
    ListenerConfig, MetricsConfig, RateLimitsConfig, RealIpHeader, RuntimeConfig, StatusConfig, TransferConfig,
    Transport, DEFAULT_PING_INTERVAL_SECONDS, DEFAULT_WS_PATH,
};
use crate::trusted::TrustedProxies;

/// The whole checked configuration.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Settings {
    /// The listeners, in file order.
    pub listeners: Vec<Listener>,
    /// The backends, in file order (at least one).
    pub backends: Vec<BackendSettings>,
    /// Handshake host → backend.
    pub routes: RouteTable,
    /// `[auth]`.
    pub auth: AuthConfig,
    /// `[limits]`.
    pub limits: LimitsConfig,
    /// `[metrics]`.
    pub metrics: MetricsConfig,
    /// `[status]`.
    pub status: StatusConfig,
    /// `[rate_limits]`.
    pub rate_limits: RateLimitsConfig,
    /// `[runtime]`.
    pub runtime: RuntimeConfig,
    /// `[compression]`.
    pub compression: CompressionConfig,
    /// `[transfer]` (every name checked against the backends).
    pub transfer: TransferConfig,
}

/// One listener.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Listener {
    /// Where it listens.
    pub bind: SocketAddr,
    /// How players reach it, with what that transport needs.
    pub kind: ListenerKind,
}

impl Listener {
    /// The listener's transport.
    pub fn transport(&self) -> Transport {
        match self.kind {
            ListenerKind::Tcp { .. } => Transport::Tcp,
            ListenerKind::Ws(_) => Transport::Ws,
            ListenerKind::Wss(..) => Transport::Wss,
        }
    }
}

/// A listener's transport and what it needs.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub enum ListenerKind {
    /// Plain Minecraft over TCP. `proxy_header`: every connection starts with a PROXY v1/v2 header, from any
    /// peer (`Some(None)`) or only from these peers (`Some(Some(..))`).
    Tcp {
        /// `proxy_protocol` and `trusted_proxies`.
        proxy_header: Option<Option<TrustedProxies>>,
    },
    /// WebSocket over plain HTTP.
    Ws(WsSettings),
    /// WebSocket over TLS: the certificate and key files are there by construction.
    Wss(WsSettings, TlsFiles),
}

/// What a WebSocket listener needs to accept an upgrade and run a session.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct WsSettings {
    /// The one accepted request path.
    pub path: String,
    /// Keepalive Ping interval; `None` disables pings and dead-peer detection.
    pub ping_interval: Option<Duration>,
    /// The peers whose `real_ip_header` is believed (empty: none).
    pub trusted: TrustedProxies,
    /// The header carrying the player's address from a trusted peer.
    pub real_ip_header: RealIpHeader,
    /// A path answered with `200 OK` without an upgrade (health checks), if any.
    pub health_path: Option<String>,
}

/// A `wss` listener's certificate chain and key files (PEM).
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct TlsFiles {
    /// `tls_cert`.
    pub cert: PathBuf,
    /// `tls_key`.
    pub key: PathBuf,
}

/// One backend.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub struct BackendSettings {
    /// `name`.
    pub name: String,
    /// `address` (`host:port`).
    pub address: String,
    /// `forwarding`.
    pub forwarding: Forwarding,
    /// `forwarding_secret` (only with `bungeecord`).
    pub forwarding_secret: Option<String>,
}

/// Handshake host → backend, by index into [`Settings::backends`].
#[derive(Clone, Debug, Default)]
#[non_exhaustive]
pub struct RouteTable {
    /// Routing keys ([`moonbridge_protocol::handshake::routing_key`]) to backend indexes.
    pub hosts: HashMap<String, usize>,
    /// The backend for every other host, and for legacy pings.
    pub default_backend: usize,
}

impl Config {
    /// Checks every value and reference, and builds the [`Settings`] the proxy runs on.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with every problem found, in file order, each naming its key.
    pub fn settings(&self) -> Result<Settings, ConfigError> {
        let mut problems = Vec::new();
        let mut push = |key: String, message: String| problems.push(ConfigProblem::new(key, message));
        if self.listeners.is_empty() {
            push("listener".into(), "at least one [[listener]] is needed".into());
        }
        let mut binds = HashSet::new();
        let mut listeners = Vec::with_capacity(self.listeners.len());
        for (i, l) in self.listeners.iter().enumerate() {
            // Port 0 (an ephemeral port) may repeat: each listener gets its own.
            if l.bind.port() != 0 && !binds.insert(l.bind) {
                push(format!("listener[{i}].bind"), format!("{} is used by another listener", l.bind));
            }
            if let Some(kind) = listener_kind(i, l, &mut push) {
                listeners.push(Listener { bind: l.bind, kind });
            }
        }
        if self.backends.is_empty() {
            push("backend".into(), "at least one [[backend]] is needed".into());
        }
        let mut names = HashSet::new();
        for (i, b) in self.backends.iter().enumerate() {
            if b.name.is_empty() {
                push(format!("backend[{i}].name"), "must not be empty".into());
            } else if !names.insert(b.name.as_str()) {
                push(format!("backend[{i}].name"), format!("\"{}\" is used by another backend", b.name));
            }
            if let Err(m) = check_host_port(&b.address) {
                push(format!("backend[{i}].address"), m);
            }
            if b.forwarding == Forwarding::Bungeecord && self.auth.mode == AuthMode::Passthrough {
                push(
                    format!("backend[{i}].forwarding"),
                    "\"bungeecord\" with auth.mode = \"passthrough\" would let players spoof any name and UUID; \
                     set auth.mode = \"offline\" (or \"online\")"
                        .into(),
                );
            }
            match &b.forwarding_secret {
                Some(_) if b.forwarding != Forwarding::Bungeecord => push(
                    format!("backend[{i}].forwarding_secret"),
                    "only applies with forwarding = \"bungeecord\"".into(),
                ),
                Some(secret) if secret.chars().count() < 16 => {
                    push(format!("backend[{i}].forwarding_secret"), "must be at least 16 characters".into());
                }
                _ => {}
            }
        }
        let index = |name: &str| self.backends.iter().position(|b| b.name == name);
        let default_backend = match &self.routing.default_backend {
            Some(d) => index(d).unwrap_or_else(|| {
                push("routing.default_backend".into(), format!("no [[backend]] is named \"{d}\""));
                0
            }),
            None => 0,
        };
        let mut hosts = HashMap::new();
        for (host, backend) in &self.routing.hosts {
            let key = moonbridge_protocol::handshake::routing_key(host);
            match index(backend) {
                Some(b) => {
                    if hosts.insert(key.clone(), b).is_some() {
                        push(format!("routing.hosts.\"{host}\""), format!("duplicates another entry for \"{key}\""));
                    }
                }
                None => {
                    push(format!("routing.hosts.\"{host}\""), format!("no [[backend]] is named \"{backend}\""));
                    if hosts.contains_key(&key) {
                        push(format!("routing.hosts.\"{host}\""), format!("duplicates another entry for \"{key}\""));
                    }
                    hosts.insert(key, 0);
                }
            }
        }
        if let Some(bind) = self.metrics.bind {
            if bind.port() != 0 && binds.contains(&bind) {
                push("metrics.bind".into(), format!("{bind} is used by a [[listener]]"));
            }
        }
        if self.status.cache_seconds > 3600 {
            push("status.cache_seconds".into(), "must be at most 3600 seconds".into());
        }
        if self.status.offline_message.as_ref().is_some_and(|m| m.chars().count() > 256) {
            push("status.offline_message".into(), "must be at most 256 characters".into());
        }
        let r = &self.rate_limits;
        for (key, rate, burst) in [
            ("rate_limits.connection_burst", r.connections_per_second, r.connection_burst),
            ("rate_limits.login_burst", r.logins_per_minute, r.login_burst),
        ] {
            if rate > 0 && burst == 0 {
                push(key.into(), "must be at least 1 while its rate is on".into());
            }
        }
        if r.ipv6_prefix > 128 {
            push("rate_limits.ipv6_prefix".into(), "must be between 0 and 128".into());
        }
        if !(1024..=10_000_000).contains(&r.max_tracked_addresses) {
            push("rate_limits.max_tracked_addresses".into(), "must be between 1024 and 10000000".into());
        }
        if !(-7..=19).contains(&self.compression.level) {
            push("compression.level".into(), "must be between -7 (fastest) and 19 (smallest)".into());
        }
        if self.runtime.workers > 1024 {
            push("runtime.workers".into(), "must be between 0 (one per core) and 1024".into());
        }
        check_transfer(&self.transfer, &|name| index(name).is_some(), &mut push);
        check_limits(&self.limits, &mut push);
        if let Err(m) = check_session_server(&self.auth.session_server) {
            push("auth.session_server".into(), m);
        }
        if self.auth.session_timeout_seconds == 0 || self.auth.session_timeout_seconds > 300 {
            push("auth.session_timeout_seconds".into(), "must be between 1 and 300 seconds".into());
        }
        if !problems.is_empty() {
            return Err(ConfigError::Invalid(problems));
        }
        Ok(Settings {
            listeners,
            backends: self
                .backends
                .iter()
                .map(|b| BackendSettings {
                    name: b.name.clone(),
                    address: b.address.clone(),
                    forwarding: b.forwarding,
                    forwarding_secret: b.forwarding_secret.clone(),
                })
                .collect(),
            routes: RouteTable { hosts, default_backend },
            auth: self.auth.clone(),
            limits: self.limits.clone(),
            metrics: self.metrics.clone(),
            status: self.status.clone(),
            rate_limits: self.rate_limits.clone(),
            runtime: self.runtime.clone(),
            compression: self.compression.clone(),
            transfer: self.transfer.clone(),
        })
    }
}

/// Checks `[transfer]`: every name is a backend, a fallback is not its own, the deadlines are in range.
fn check_transfer(t: &TransferConfig, known: &dyn Fn(&str) -> bool, push: &mut impl FnMut(String, String)) {
    for (i, name) in t.targets.iter().enumerate() {
        if !known(name) {
            push(format!("transfer.targets[{i}]"), format!("no [[backend]] is named \"{name}\""));
        }
    }
    for (from, to) in &t.fallback {
        let key = format!("transfer.fallback.\"{from}\"");
        if !known(from) {
            push(key.clone(), format!("no [[backend]] is named \"{from}\""));
        }
        if !known(to) {
            push(key.clone(), format!("no [[backend]] is named \"{to}\""));
        } else if from == to {
            push(key, "a backend cannot be its own fallback".into());
        }
    }
    for (key, value) in [
        ("transfer.switch_timeout_seconds", t.switch_timeout_seconds),
        ("transfer.forge_handshake_timeout_seconds", t.forge_handshake_timeout_seconds),
    ] {
        if !(1..=300).contains(&value) {
            push(key.into(), "must be between 1 and 300 seconds".into());
        }
    }
}

/// Checks one listener's transport-specific keys and builds its kind (`None` when a problem was reported).
fn listener_kind(i: usize, l: &ListenerConfig, push: &mut impl FnMut(String, String)) -> Option<ListenerKind> {
    let key = |k: &str| format!("listener[{i}].{k}");
    let only = |t: &str| format!("only applies to {t} listeners (this one is {})", l.transport);
    let mut ok = true;
    let mut problem = |k: &str, m: String| {
        ok = false;
        push(key(k), m);
    };
    let ws = matches!(l.transport, Transport::Ws | Transport::Wss);
    if !ws {
        for (set, k) in [
            (l.path.is_some(), "path"),
            (l.ping_interval_seconds.is_some(), "ping_interval_seconds"),
            (l.real_ip_header.is_some(), "real_ip_header"),
            (l.health_path.is_some(), "health_path"),
        ] {
            if set {
                problem(k, only("ws and wss"));
            }
        }
        if !l.trusted_proxies.is_empty() && !l.proxy_protocol {
            problem("trusted_proxies", "on a tcp listener it needs proxy_protocol = true".into());
        }
    } else if l.proxy_protocol {
        problem("proxy_protocol", only("tcp"));
    }
    let mut tls = None;
    if l.transport == Transport::Wss {
        for (path, k) in [(&l.tls_cert, "tls_cert"), (&l.tls_key, "tls_key")] {
            match path {
                None => problem(k, "is required for a wss listener".into()),
                Some(p) if std::fs::metadata(p).is_err() => problem(k, format!("cannot read {}", p.display())),
                Some(_) => {}
            }
        }
        if let (Some(cert), Some(key_path)) = (&l.tls_cert, &l.tls_key) {
            if std::fs::metadata(cert).is_ok() && std::fs::metadata(key_path).is_ok() {
                match crate::tls::load_certified_key(cert, key_path) {
                    Ok(_) => tls = Some(TlsFiles { cert: cert.clone(), key: key_path.clone() }),
                    Err(e @ crate::tls::TlsError::Certificate { .. }) => problem("tls_cert", e.to_string()),
                    Err(e) => problem("tls_key", e.to_string()),
                }
            }
        }
    } else {
        for (set, k) in [(l.tls_cert.is_some(), "tls_cert"), (l.tls_key.is_some(), "tls_key")] {
            if set {
                problem(k, only("wss"));
            }
        }
    }
    let path = l.path.clone().unwrap_or_else(|| DEFAULT_WS_PATH.into());
    if !path.starts_with('/') || path.contains(|c: char| c.is_whitespace() || c == '?' || c == '#') {
        problem("path", format!("\"{path}\" must start with / and hold no spaces, ? or #"));
    }
    if let Some(h) = &l.health_path {
        if !h.starts_with('/') || h.contains(|c: char| c.is_whitespace() || c == '?' || c == '#') {
            problem("health_path", format!("\"{h}\" must start with / and hold no spaces, ? or #"));
        } else if *h == path {
            problem("health_path", format!("\"{h}\" is the WebSocket path; choose another"));
        }
    }
    let ping = l.ping_interval_seconds.unwrap_or(DEFAULT_PING_INTERVAL_SECONDS);
    if ping > 3600 {
        problem("ping_interval_seconds", "must be at most 3600 seconds".into());
    }
    let trusted = match TrustedProxies::parse(&l.trusted_proxies) {
        Ok(t) => Some(t),
        Err(bad) => {
            for m in bad {
                problem("trusted_proxies", m);
            }
            None
        }
    };
    let trusted = trusted.filter(|_| ok)?;
    let settings = || WsSettings {
        path: path.clone(),
        ping_interval: (ping > 0).then(|| Duration::from_secs(ping)),
        trusted: trusted.clone(),
        real_ip_header: l.real_ip_header.unwrap_or_default(),
        health_path: l.health_path.clone(),
    };
    Some(match l.transport {
        Transport::Tcp => {
            ListenerKind::Tcp { proxy_header: l.proxy_protocol.then(|| (!trusted.is_empty()).then(|| trusted.clone())) }
        }
        Transport::Ws => ListenerKind::Ws(settings()),
        Transport::Wss => ListenerKind::Wss(settings(), tls?),
    })
}

/// Smallest `limits.resume_buffer_bytes`: four acknowledgement periods, so a connected player's acks keep
/// the backend flowing.
const RESUME_BUFFER_MIN: usize = 4 * moonbridge_protocol::ws::v2::ACK_EVERY_BYTES as usize;
/// Largest `limits.resume_buffer_bytes` (1 GiB).
const RESUME_BUFFER_MAX: usize = 1 << 30;

fn check_limits(l: &LimitsConfig, push: &mut impl FnMut(String, String)) {
    for (key, value) in [
        ("limits.max_connections", l.max_connections as u64),
        ("limits.max_handshaking", l.max_handshaking as u64),
        ("limits.handshake_timeout_seconds", l.handshake_timeout_seconds),
        ("limits.backend_connect_timeout_seconds", l.backend_connect_timeout_seconds),
        ("limits.login_timeout_seconds", l.login_timeout_seconds),
        ("limits.write_stall_timeout_seconds", l.write_stall_timeout_seconds),
    ] {
        if value == 0 {
            push(key.into(), "must be at least 1".into());
        }
    }
    if l.max_connections > 1_000_000 {
        push("limits.max_connections".into(), "must be at most 1000000".into());
    }
    for (key, value) in [
        ("limits.handshake_timeout_seconds", l.handshake_timeout_seconds),
        ("limits.backend_connect_timeout_seconds", l.backend_connect_timeout_seconds),
        ("limits.login_timeout_seconds", l.login_timeout_seconds),
        ("limits.shutdown_grace_seconds", l.shutdown_grace_seconds),
        ("limits.write_stall_timeout_seconds", l.write_stall_timeout_seconds),
    ] {
        if value > 86_400 {
            push(key.into(), "must be at most 86400 seconds".into());
        }
    }
    if l.resume_window_seconds > 3600 {
        push("limits.resume_window_seconds".into(), "must be at most 3600 seconds".into());
    }
    if !(RESUME_BUFFER_MIN..=RESUME_BUFFER_MAX).contains(&l.resume_buffer_bytes) {
        push(
            "limits.resume_buffer_bytes".into(),
            format!("must be between {RESUME_BUFFER_MIN} and {RESUME_BUFFER_MAX} bytes"),
        );
    }
    // A 2 MiB Minecraft frame plus its prefix must fit one message.
    let min_ws = moonbridge_protocol::ws::MAX_MESSAGE_FOR_ONE_FRAME;
    if l.max_ws_message_bytes < min_ws {
        push("limits.max_ws_message_bytes".into(), format!("must be at least {min_ws} (one 1.7.10 frame)"));
    }
}

/// `auth.session_server`: an `https://` URL, or `http://` to a loopback host (a local stand-in). Plain HTTP to
/// anywhere else would let anyone on the path answer `hasJoined` with any profile.
fn check_session_server(url: &str) -> Result<(), String> {
    let lower = url.to_ascii_lowercase();
    let (rest, secure) = if let Some(r) = lower.strip_prefix("https://") {
        (r, true)
    } else if let Some(r) = lower.strip_prefix("http://") {
        (r, false)
    } else {
        return Err(format!("\"{url}\" is not an https:// URL"));
    };
    let authority = rest.split(['/', '?', '#']).next().unwrap_or("");
    let host = match authority.strip_prefix('[') {
        Some(v6) => v6.split(']').next().unwrap_or(""),
        None => authority.rsplit_once(':').map_or(authority, |(h, _)| h),
    };
    if host.is_empty() {
        return Err(format!("\"{url}\" has no host"));
    }
    let loopback = host == "localhost" || host.parse::<std::net::IpAddr>().is_ok_and(|ip| ip.is_loopback());
    if !secure && !loopback {
        return Err(format!(
            "\"{url}\": plain http:// is only accepted for a loopback host (a local stand-in); use https://"
        ));
    }
    Ok(())
}

fn check_host_port(address: &str) -> Result<(), String> {
    let Some((host, port)) = address.rsplit_once(':') else {
        return Err(format!("\"{address}\" is not host:port"));
    };
    if host.is_empty() {
        return Err(format!("\"{address}\" has no host"));
    }
    // An IPv6 address needs brackets (RFC 3986): without them its last group would be read as the port.
    if host.contains(':') && !(host.starts_with('[') && host.ends_with(']')) {
        return Err(format!("\"{address}\": an IPv6 address needs brackets, for example \"[2001:db8::10]:25566\""));
    }
    if let Some(inner) = host.strip_prefix('[').and_then(|h| h.strip_suffix(']')) {
        if inner.parse::<std::net::Ipv6Addr>().is_err() {
            return Err(format!("\"{address}\": {inner:?} in brackets is not an IPv6 address"));
        }
    }
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("\"{address}\" has no valid port (1-65535)")),
        Ok(_) => Ok(()),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::config::RuntimeMode;

    #[test]
    fn ipv6_backend_addresses_need_brackets() {
        assert!(check_host_port("[2001:db8::10]:25566").is_ok());
        assert!(check_host_port("mc.example.com:25565").is_ok());
        assert!(check_host_port("2001:db8::1:2565").unwrap_err().contains("needs brackets"));
        assert!(check_host_port("[mc.example.com]:25565").unwrap_err().contains("not an IPv6 address"));
    }

    #[test]
    fn empty_file_means_defaults() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c, Config::default());
        let s = c.settings().unwrap();
        assert_eq!(s.listeners[0].bind.to_string(), "0.0.0.0:25577");
        assert_eq!(s.listeners[0].transport(), Transport::Tcp);
        assert_eq!(s.listeners[1].transport(), Transport::Ws);
        assert_eq!(s.listeners[1].bind.to_string(), "0.0.0.0:8080");
        let ListenerKind::Ws(ws) = &s.listeners[1].kind else { panic!("ws") };
        assert_eq!(ws.path, "/mc");
        assert_eq!(ws.ping_interval, Some(Duration::from_secs(30)));
        assert_eq!(s.backends[s.routes.default_backend].name, "default");
        assert!(c.check().is_empty());
    }

    #[test]
    fn full_tcp_config() {
        let c = Config::from_toml(
            r#"
            [[listener]]
            transport = "tcp"
            bind = "0.0.0.0:25565"
            proxy_protocol = false

            [[backend]]
            name = "survival"
            address = "127.0.0.1:25566"
            forwarding = "bungeecord"

            [routing]
            default_backend = "survival"
            [routing.hosts]
            "mc.example.com" = "survival"

            [auth]
            mode = "offline"

            [limits]
            max_connections = 100
            handshake_timeout_seconds = 3
            "#,
        )
        .unwrap();
        assert!(c.check().is_empty(), "{:?}", c.check());
        let s = c.settings().unwrap();
        assert_eq!(s.backends[0].forwarding, Forwarding::Bungeecord);
        assert_eq!(s.routes.hosts.get("mc.example.com"), Some(&0));
        assert!(matches!(s.listeners[0].kind, ListenerKind::Tcp { proxy_header: None }));
        assert_eq!(c.limits.max_connections, 100);
        assert_eq!(c.limits.max_handshaking, 1024);
        assert_eq!(c.limits.handshake_timeout(), Duration::from_secs(3));
    }

    #[test]
    fn runtime_keys() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c.runtime.mode, RuntimeMode::ThreadPerCore);
        assert_eq!(c.runtime.workers, 0);
        assert!(c.runtime.worker_count() >= 1);
        let c = Config::from_toml("[runtime]\nmode = \"multi-thread\"\nworkers = 3\n").unwrap();
        assert_eq!(c.settings().unwrap().runtime, RuntimeConfig { mode: RuntimeMode::MultiThread, workers: 3 });
        assert_eq!(c.runtime.worker_count(), 3);
        let c = Config::from_toml("[runtime]\nmode = \"thread-per-core\"\nworkers = 1025\n").unwrap();
        assert_eq!(c.check().iter().map(|p| p.key.as_str()).collect::<Vec<_>>(), ["runtime.workers"]);
        let c = Config::from_toml("[compression]\nenabled = false\nlevel = 20\n").unwrap();
        assert!(!c.compression.enabled);
        assert_eq!(c.check().iter().map(|p| p.key.as_str()).collect::<Vec<_>>(), ["compression.level"]);
        assert_eq!(Config::default().compression, CompressionConfig { enabled: true, level: 1 });
        let e = Config::from_toml("[runtime]\nmode = \"green-threads\"\n").unwrap_err().to_string();
        assert!(e.contains("thread-per-core") && e.contains("multi-thread"), "{e}");
    }

    #[test]
    fn unknown_keys_are_named_with_their_line() {
        let e = Config::from_toml("[[listener]]\ntransport = \"tcp\"\nbindd = \"0.0.0.0:1\"\n").unwrap_err();
        let s = e.to_string();
        assert!(s.contains("bindd"), "{s}");
        assert!(s.contains("line 3"), "{s}");
        let e = Config::from_toml("[limits]\nmax_conections = 5\n").unwrap_err();
        assert!(e.to_string().contains("max_conections"), "{e}");
        let e = Config::from_toml("[[listener]]\ntransport = \"udp\"\nbind = \"0.0.0.0:1\"\n").unwrap_err();
        assert!(e.to_string().contains("udp"), "{e}");
    }

    #[test]
    fn websocket_listener_keys() {
        let c = Config::from_toml(
            r#"
            [[listener]]
            transport = "ws"
            bind = "127.0.0.1:8080"
            path = "/play"
            ping_interval_seconds = 0
            trusted_proxies = ["127.0.0.1", "10.0.0.0/8", "2001:db8::/32"]
            real_ip_header = "X-Forwarded-For"
            [[listener]]
            transport = "tcp"
            bind = "127.0.0.1:25565"
            proxy_protocol = true
            [[listener]]
            transport = "tcp"
            bind = "127.0.0.1:25566"
            proxy_protocol = true
            trusted_proxies = ["10.0.0.1"]
            [[backend]]
            name = "b"
            address = "127.0.0.1:1"
            forwarding = "proxy-protocol"
            "#,
        )
        .unwrap();
        let s = c.settings().unwrap();
        let ListenerKind::Ws(ws) = &s.listeners[0].kind else { panic!("ws") };
        assert_eq!(ws.path, "/play");
        assert_eq!(ws.ping_interval, None);
        assert_eq!(ws.real_ip_header, RealIpHeader::XForwardedFor);
        assert_eq!(ws.trusted.len(), 3);
        assert!(ws.trusted.contains("127.0.0.1".parse().unwrap()));
        assert!(ws.trusted.contains("::ffff:10.1.2.3".parse().unwrap()), "IPv4-mapped peers match");
        assert!(!ws.trusted.contains("192.0.2.1".parse().unwrap()));
        assert!(matches!(s.listeners[1].kind, ListenerKind::Tcp { proxy_header: Some(None) }), "any peer");
        let ListenerKind::Tcp { proxy_header: Some(Some(t)) } = &s.listeners[2].kind else { panic!("tcp") };
        assert!(t.contains("10.0.0.1".parse().unwrap()) && !t.contains("10.0.0.2".parse().unwrap()));
        assert_eq!(s.backends[0].forwarding, Forwarding::ProxyProtocol);
    }

    #[test]
    fn transport_specific_keys_are_checked() {
        let c = Config::from_toml(
            r#"
            [[listener]]
            transport = "tcp"
            bind = "127.0.0.1:1"
            path = "/mc"
            trusted_proxies = ["1.2.3.4"]
            [[listener]]
            transport = "ws"
            bind = "127.0.0.1:2"
            proxy_protocol = true
            tls_cert = "x.pem"
            path = "mc"
            ping_interval_seconds = 7200
            trusted_proxies = ["not-an-ip"]
            [[listener]]
            transport = "wss"
            bind = "127.0.0.1:3"
            tls_key = "/nonexistent/key.pem"
            "#,
        )
        .unwrap();
        let problems = c.check();
        let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
        assert_eq!(
            keys,
            [
                "listener[0].path",
                "listener[0].trusted_proxies",
                "listener[1].proxy_protocol",
                "listener[1].tls_cert",
                "listener[1].path",
                "listener[1].ping_interval_seconds",
                "listener[1].trusted_proxies",
                "listener[2].tls_cert",
                "listener[2].tls_key",
            ]
        );
        assert!(problems[6].message.contains("\"not-an-ip\""), "{}", problems[6]);
    }

    #[test]
    fn transfer_names_backends_and_bounds_its_deadlines() {
        let c = Config::from_toml(
            r#"
            [[backend]]
            name = "survival"
            address = "127.0.0.1:25566"
            [[backend]]
            name = "lobby"
            address = "127.0.0.1:25567"
            [transfer]
            targets = ["lobby", "creative"]
            switch_timeout_seconds = 0
            forge_handshake_timeout_seconds = 301
            [transfer.fallback]
            "survival" = "lobby"
            "lobby" = "lobby"
            "hub" = "void"
            "#,
        )
        .unwrap();
        let problems = c.check();
        let got: Vec<String> = problems.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "transfer.targets[1]: no [[backend]] is named \"creative\"",
                "transfer.fallback.\"hub\": no [[backend]] is named \"hub\"",
                "transfer.fallback.\"hub\": no [[backend]] is named \"void\"",
                "transfer.fallback.\"lobby\": a backend cannot be its own fallback",
                "transfer.switch_timeout_seconds: must be between 1 and 300 seconds",
                "transfer.forge_handshake_timeout_seconds: must be between 1 and 300 seconds",
            ]
        );
        let ok = Config::from_toml(
            "[[backend]]\nname = \"a\"\naddress = \"h:1\"\n[[backend]]\nname = \"b\"\naddress = \"h:2\"\n\
             [transfer]\ntargets = [\"b\"]\n[transfer.fallback]\n\"a\" = \"b\"\n",
        )
        .unwrap();
        let t = ok.settings().unwrap().transfer;
        assert_eq!(t.fallback.get("a").map(String::as_str), Some("b"));
        assert_eq!((t.switch_timeout_seconds, t.forge_handshake_timeout_seconds), (15, 30));
    }

    #[test]
    fn every_problem_is_reported() {
        let c = Config::from_toml(
            r#"
            [[backend]]
            name = "a"
            address = "nohost"
            forwarding = "bungeecord"
            [[backend]]
            name = "a"
            address = "h:0"
            [routing]
            default_backend = "zzz"
            [routing.hosts]
            "X.com" = "a"
            "x.com." = "missing"
            [limits]
            max_connections = 0
            max_ws_message_bytes = 10
            "#,
        )
        .unwrap();
        let keys: Vec<String> = c.check().into_iter().map(|p| p.key).collect();
        assert_eq!(
            keys,
            [
                "backend[0].address",
                "backend[0].forwarding",
                "backend[1].name",
                "backend[1].address",
                "routing.default_backend",
                "routing.hosts.\"x.com.\"",
                "routing.hosts.\"x.com.\"",
                "limits.max_connections",
                "limits.max_ws_message_bytes",
            ]
        );
    }

    #[test]
    fn online_mode_keys() {
        let c = Config::from_toml(
            r#"
            [[backend]]
            name = "a"
            address = "127.0.0.1:25565"
            forwarding = "bungeecord"
            forwarding_secret = "0123456789abcdef"
            [auth]
            mode = "online"
            session_server = "http://127.0.0.1:8081"
            session_timeout_seconds = 3
            "#,
        )
        .unwrap();
        assert!(c.check().is_empty(), "{:?}", c.check());
        assert_eq!(c.auth.mode, AuthMode::Online);
        assert_eq!(c.auth.session_timeout_seconds, 3);
        assert_eq!(c.backends[0].forwarding_secret.as_deref(), Some("0123456789abcdef"));
        assert_eq!(Config::default().auth.session_timeout_seconds, 10);
        assert_eq!(Config::default().auth.session_server, "https://sessionserver.mojang.com");
        for ok in ["https://sessionserver.mojang.com", "http://127.0.0.1:8081", "http://[::1]:80/x", "http://localhost"]
        {
            assert_eq!(check_session_server(ok), Ok(()), "{ok}");
        }
        for bad in
            ["http://sessionserver.mojang.com", "http://10.0.0.1", "ftp://x", "https://", "sessionserver.mojang.com"]
        {
            assert!(check_session_server(bad).is_err(), "{bad}");
        }

        let bad = Config::from_toml(
            r#"
            [[backend]]
            name = "a"
            address = "127.0.0.1:25565"
            forwarding = "bungeecord"
            forwarding_secret = "short"
            [[backend]]
            name = "b"
            address = "127.0.0.1:25566"
            forwarding_secret = "0123456789abcdef"
            [auth]
            mode = "online"
            session_server = "sessionserver.mojang.com"
            session_timeout_seconds = 0
            "#,
        )
        .unwrap();
        let keys: Vec<String> = bad.check().into_iter().map(|p| p.key).collect();
        assert_eq!(
            keys,
            [
                "backend[0].forwarding_secret",
                "backend[1].forwarding_secret",
                "auth.session_server",
                "auth.session_timeout_seconds",
            ]
        );
    }

    #[test]
    fn the_configurations_own_spelling() {
        assert_eq!(Forwarding::None.to_string(), "none");
        assert_eq!(Forwarding::ProxyProtocol.to_string(), "proxy-protocol");
        assert_eq!(AuthMode::Passthrough.to_string(), "passthrough");
        assert_eq!(Transport::Wss.to_string(), "wss");
    }
}
