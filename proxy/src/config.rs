//! The proxy configuration: a TOML file (see `docs/configuration.md`) or the built-in defaults.
//!
//! Every section and key is optional; unknown keys are errors. [`Config::load`] parses and validates;
//! [`Config::check`] returns every problem at once, one line each naming the key, for `--check-config`.

use std::collections::{BTreeMap, HashSet};
use std::net::{IpAddr, SocketAddr};
use std::path::{Path, PathBuf};
use std::time::Duration;

use serde::Deserialize;

/// Address of the built-in TCP listener.
pub const DEFAULT_TCP_BIND: &str = "0.0.0.0:25577";
/// Address of the built-in WebSocket listener.
pub const DEFAULT_WS_BIND: &str = "0.0.0.0:8080";
/// Request path of WebSocket listeners without `path`.
pub const DEFAULT_WS_PATH: &str = "/mc";
/// Keepalive ping interval of WebSocket listeners without `ping_interval_seconds`, in seconds.
pub const DEFAULT_PING_INTERVAL_SECONDS: u64 = 30;
/// Name of the built-in backend.
pub const DEFAULT_BACKEND_NAME: &str = "default";
/// Address of the built-in backend.
pub const DEFAULT_BACKEND_ADDRESS: &str = "127.0.0.1:25565";

/// The whole configuration.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[[listener]]`: where players connect. Default: `tcp` on `0.0.0.0:25577` and `ws` on `0.0.0.0:8080`
    /// path `/mc`.
    #[serde(default = "default_listeners", rename = "listener")]
    pub listeners: Vec<ListenerConfig>,
    /// `[[backend]]`: the 1.7.10 servers. Default: one backend `default` at `127.0.0.1:25565`.
    #[serde(default = "default_backends", rename = "backend")]
    pub backends: Vec<BackendConfig>,
    /// `[routing]`: which backend a handshake host goes to.
    #[serde(default)]
    pub routing: RoutingConfig,
    /// `[auth]`: who authenticates players.
    #[serde(default)]
    pub auth: AuthConfig,
    /// `[limits]`: connection caps and deadlines.
    #[serde(default)]
    pub limits: LimitsConfig,
}

impl Default for Config {
    fn default() -> Self {
        Self {
            listeners: default_listeners(),
            backends: default_backends(),
            routing: RoutingConfig::default(),
            auth: AuthConfig::default(),
            limits: LimitsConfig::default(),
        }
    }
}

fn default_listeners() -> Vec<ListenerConfig> {
    vec![
        ListenerConfig {
            bind: DEFAULT_TCP_BIND.parse().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 25577))),
            ..ListenerConfig::new(Transport::Tcp)
        },
        ListenerConfig {
            bind: DEFAULT_WS_BIND.parse().unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 8080))),
            ..ListenerConfig::new(Transport::Ws)
        },
    ]
}

fn default_backends() -> Vec<BackendConfig> {
    vec![BackendConfig {
        name: DEFAULT_BACKEND_NAME.into(),
        address: DEFAULT_BACKEND_ADDRESS.into(),
        forwarding: Forwarding::None,
        forwarding_secret: None,
    }]
}

/// How players reach a listener.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Plain Minecraft over TCP.
    Tcp,
    /// WebSocket over plain HTTP (`ws://`), for a CDN or TLS terminator in front.
    Ws,
    /// WebSocket over TLS 1.2/1.3 (`wss://`), with rustls.
    Wss,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Tcp => "tcp",
            Self::Ws => "ws",
            Self::Wss => "wss",
        })
    }
}

/// The HTTP header a trusted proxy puts the player's address in.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
pub enum RealIpHeader {
    /// `CF-Connecting-IP`: Cloudflare's single address.
    #[default]
    #[serde(rename = "CF-Connecting-IP")]
    CfConnectingIp,
    /// `X-Forwarded-For`: a list; the rightmost address that is not a trusted proxy is the player.
    #[serde(rename = "X-Forwarded-For")]
    XForwardedFor,
    /// `X-Real-IP`: a single address (nginx).
    #[serde(rename = "X-Real-IP")]
    XRealIp,
}

impl RealIpHeader {
    /// The header name.
    pub fn name(self) -> &'static str {
        match self {
            Self::CfConnectingIp => "CF-Connecting-IP",
            Self::XForwardedFor => "X-Forwarded-For",
            Self::XRealIp => "X-Real-IP",
        }
    }
}

/// One `[[listener]]`. Keys marked ws/wss or wss are errors on other transports.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// `transport`: `"tcp"`, `"ws"` or `"wss"`. Required.
    pub transport: Transport,
    /// `bind`: `IP:port` to listen on, such as `"0.0.0.0:25565"`. Required.
    pub bind: SocketAddr,
    /// `proxy_protocol` (tcp): require a PROXY v1 or v2 header from every peer (behind a load balancer).
    /// Default `false`.
    #[serde(default)]
    pub proxy_protocol: bool,
    /// `path` (ws/wss): the one accepted request path; others get HTTP 404. Default `"/mc"`.
    #[serde(default)]
    pub path: Option<String>,
    /// `tls_cert` (wss, required): PEM certificate chain, leaf first. Reloaded when the file changes.
    #[serde(default)]
    pub tls_cert: Option<PathBuf>,
    /// `tls_key` (wss, required): PEM private key (PKCS#8, PKCS#1 RSA or SEC1 EC).
    #[serde(default)]
    pub tls_key: Option<PathBuf>,
    /// `ping_interval_seconds` (ws/wss): send a WebSocket Ping after this long without writing; 0 disables
    /// pings and dead-peer detection. Default 30 seconds.
    #[serde(default)]
    pub ping_interval_seconds: Option<u64>,
    /// `trusted_proxies` (ws/wss, or tcp with `proxy_protocol`): CIDRs or addresses whose `real_ip_header`
    /// (or PROXY header) is believed. Default empty: the TCP peer is the player.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// `real_ip_header` (ws/wss): `"CF-Connecting-IP"` (default), `"X-Forwarded-For"` or `"X-Real-IP"`.
    #[serde(default)]
    pub real_ip_header: Option<RealIpHeader>,
}

impl ListenerConfig {
    /// A listener of `transport` on `0.0.0.0:0` with every optional key at its default.
    pub fn new(transport: Transport) -> Self {
        Self {
            transport,
            bind: SocketAddr::from(([0, 0, 0, 0], 0)),
            proxy_protocol: false,
            path: None,
            tls_cert: None,
            tls_key: None,
            ping_interval_seconds: None,
            trusted_proxies: Vec::new(),
            real_ip_header: None,
        }
    }

    /// The request path (ws/wss).
    pub fn path(&self) -> &str {
        self.path.as_deref().unwrap_or(DEFAULT_WS_PATH)
    }

    /// The keepalive interval (ws/wss); `None` when disabled.
    pub fn ping_interval(&self) -> Option<Duration> {
        match self.ping_interval_seconds.unwrap_or(DEFAULT_PING_INTERVAL_SECONDS) {
            0 => None,
            s => Some(Duration::from_secs(s)),
        }
    }

    /// The header carrying the player's address from a trusted proxy.
    pub fn real_ip_header(&self) -> RealIpHeader {
        self.real_ip_header.unwrap_or_default()
    }

    /// `trusted_proxies` parsed; entries that do not parse are skipped (validation reports them).
    pub fn trusted_networks(&self) -> Vec<ipnet::IpNet> {
        self.trusted_proxies.iter().filter_map(|t| parse_network(t).ok()).collect()
    }
}

/// Parses `"10.0.0.0/8"`, `"2001:db8::/32"` or a single address (a /32 or /128).
fn parse_network(text: &str) -> Result<ipnet::IpNet, String> {
    if let Ok(net) = text.parse::<ipnet::IpNet>() {
        return Ok(net.trunc());
    }
    text.parse::<IpAddr>().map(ipnet::IpNet::from).map_err(|_| format!("\"{text}\" is not an IP address or CIDR"))
}

/// How a backend learns who the player is.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
pub enum Forwarding {
    /// The handshake is passed on unchanged (the backend sees the proxy's address).
    #[default]
    None,
    /// BungeeCord IP forwarding in the handshake address (backend in offline mode with `bungeecord: true`).
    Bungeecord,
    /// A PROXY protocol v2 header with the player's address before the handshake (backend or its load
    /// balancer must expect it).
    ProxyProtocol,
}

/// One `[[backend]]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// `name`: how routes, logs and disconnect messages refer to it. Required, unique.
    pub name: String,
    /// `address`: `host:port` of the 1.7.10 server; a hostname is resolved at each connect. Required.
    pub address: String,
    /// `forwarding`: `"none"` (default), `"bungeecord"` or `"proxy-protocol"`.
    #[serde(default)]
    pub forwarding: Forwarding,
    /// `forwarding_secret` (bungeecord only): added to the forwarded properties as `bungeeguard-token`, for
    /// backends running BungeeGuard (or a compatible check). Default none.
    #[serde(default)]
    pub forwarding_secret: Option<String>,
}

/// `[routing]`.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct RoutingConfig {
    /// `default_backend`: the backend for hosts not in `hosts`, and for legacy pings. Default: the first
    /// `[[backend]]`.
    #[serde(default)]
    pub default_backend: Option<String>,
    /// `[routing.hosts]`: handshake host → backend name. Keys are matched after the Forge marker and one
    /// trailing dot are stripped and ASCII is lowercased. Default: empty.
    #[serde(default)]
    pub hosts: BTreeMap<String, String>,
}

/// Who authenticates players.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum AuthMode {
    /// The backend authenticates (or not); the proxy only reads the name for its logs.
    #[default]
    Passthrough,
    /// The proxy names players with offline UUIDs (`OfflinePlayer:<name>`), for `bungeecord` forwarding.
    Offline,
    /// The proxy authenticates players with the session server (login encryption ends at the proxy) and
    /// forwards their verified UUID and properties.
    Online,
}

/// `[auth]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// `mode`: `"passthrough"` (default), `"offline"` or `"online"`.
    #[serde(default)]
    pub mode: AuthMode,
    /// `session_server`: base URL of the session server for `online` mode (`https://`, or `http://` for a
    /// local stand-in). Default `https://sessionserver.mojang.com`.
    #[serde(default = "default_session_server")]
    pub session_server: String,
    /// `session_timeout_seconds`: the whole `hasJoined` request. Default 10 seconds.
    #[serde(default = "default_session_timeout")]
    pub session_timeout_seconds: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            mode: AuthMode::default(),
            session_server: default_session_server(),
            session_timeout_seconds: default_session_timeout(),
        }
    }
}

fn default_session_timeout() -> u64 {
    10
}

fn default_session_server() -> String {
    "https://sessionserver.mojang.com".into()
}

/// `[limits]`. Every limit is per proxy process.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
pub struct LimitsConfig {
    /// `max_connections`: open player connections, in every stage. Over it a new connection is closed at
    /// once. Default 10000 connections.
    pub max_connections: usize,
    /// `max_handshaking`: connections that have not finished the handshake (and Login Start). Over it the
    /// oldest such connection is closed to admit the new one, so slow clients cannot lock players out.
    /// Default 1024 connections.
    pub max_handshaking: usize,
    /// `handshake_timeout_seconds`: one deadline for the whole handshake stage (handshake + Login Start, or a
    /// legacy ping), never reset by incoming bytes. Default 5 seconds.
    pub handshake_timeout_seconds: u64,
    /// `backend_connect_timeout_seconds`: TCP connect to a backend. Default 5 seconds.
    pub backend_connect_timeout_seconds: u64,
    /// `login_timeout_seconds`: from sending Login Start to the backend until its first answer; also the
    /// whole of a status exchange, and in online mode the wait for the player's Encryption Response. Default
    /// 30 seconds.
    pub login_timeout_seconds: u64,
    /// `max_ws_message_bytes`: largest WebSocket message accepted from a player. Default 4194304 bytes.
    pub max_ws_message_bytes: usize,
    /// `shutdown_grace_seconds`: on SIGTERM/Ctrl-C, how long sessions get to receive their disconnect before
    /// the process exits. Default 10 seconds.
    pub shutdown_grace_seconds: u64,
    /// `write_stall_timeout_seconds`: a player or backend whose socket accepts no byte for this long while the
    /// proxy has data for it is disconnected (it stopped reading). Default 60 seconds.
    pub write_stall_timeout_seconds: u64,
}

impl Default for LimitsConfig {
    fn default() -> Self {
        Self {
            max_connections: 10_000,
            max_handshaking: 1024,
            handshake_timeout_seconds: 5,
            backend_connect_timeout_seconds: 5,
            login_timeout_seconds: 30,
            max_ws_message_bytes: 4 * 1024 * 1024,
            shutdown_grace_seconds: 10,
            write_stall_timeout_seconds: 60,
        }
    }
}

impl LimitsConfig {
    /// `handshake_timeout_seconds` as a duration.
    pub fn handshake_timeout(&self) -> Duration {
        Duration::from_secs(self.handshake_timeout_seconds)
    }
    /// `backend_connect_timeout_seconds` as a duration.
    pub fn backend_connect_timeout(&self) -> Duration {
        Duration::from_secs(self.backend_connect_timeout_seconds)
    }
    /// `login_timeout_seconds` as a duration.
    pub fn login_timeout(&self) -> Duration {
        Duration::from_secs(self.login_timeout_seconds)
    }
    /// `shutdown_grace_seconds` as a duration.
    pub fn shutdown_grace(&self) -> Duration {
        Duration::from_secs(self.shutdown_grace_seconds)
    }
    /// `write_stall_timeout_seconds` as a duration.
    pub fn write_stall_timeout(&self) -> Duration {
        Duration::from_secs(self.write_stall_timeout_seconds)
    }
}

/// One thing wrong with a configuration, naming the key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
pub struct ConfigProblem {
    /// The key path, such as `listener[1].bind` or `routing.hosts."mc.example.com"`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys or wrong types (one problem, with its line).
    #[error("{0}")]
    Parse(ConfigProblem),
    /// The file parsed, but values are invalid or inconsistent.
    #[error("{} problem(s): {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<ConfigProblem>),
}

impl ConfigError {
    /// Every problem, one per line for `--check-config`.
    pub fn problems(&self) -> Vec<String> {
        match self {
            Self::Read { .. } | Self::Parse(_) => vec![self.to_string()],
            Self::Invalid(p) => p.iter().map(ToString::to_string).collect(),
        }
    }
}

impl Config {
    /// Parses TOML text (no validation beyond types and unknown keys).
    ///
    /// # Errors
    /// [`ConfigError::Parse`] with the line and column of the first problem.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let (line, col) = e.span().map_or((0, 0), |s| line_col(text, s.start));
            let message = e.message().replace('\n', " ");
            ConfigError::Parse(ConfigProblem { key: format!("line {line}, column {col}"), message })
        })
    }

    /// Reads, parses and validates a file.
    ///
    /// # Errors
    /// Any [`ConfigError`].
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        let config = Self::from_toml(&text)?;
        config.validate()?;
        Ok(config)
    }

    /// Validates values and references.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with every problem found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        let problems = self.check();
        if problems.is_empty() {
            Ok(())
        } else {
            Err(ConfigError::Invalid(problems))
        }
    }

    /// Every problem with the values, in file order.
    pub fn check(&self) -> Vec<ConfigProblem> {
        let mut p = Vec::new();
        let mut push = |key: String, message: String| p.push(ConfigProblem { key, message });
        if self.listeners.is_empty() {
            push("listener".into(), "at least one [[listener]] is needed".into());
        }
        let mut binds = HashSet::new();
        for (i, l) in self.listeners.iter().enumerate() {
            // Port 0 (an ephemeral port) may repeat: each listener gets its own.
            if l.bind.port() != 0 && !binds.insert(l.bind) {
                push(format!("listener[{i}].bind"), format!("{} is used by another listener", l.bind));
            }
            check_listener(i, l, &mut push);
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
        if let Some(d) = &self.routing.default_backend {
            if !names.contains(d.as_str()) {
                push("routing.default_backend".into(), format!("no [[backend]] is named \"{d}\""));
            }
        }
        let mut keys = HashSet::new();
        for (host, backend) in &self.routing.hosts {
            let key = moonbridge_protocol::handshake::routing_key(host);
            if !names.contains(backend.as_str()) {
                push(format!("routing.hosts.\"{host}\""), format!("no [[backend]] is named \"{backend}\""));
            }
            if !keys.insert(key.clone()) {
                push(format!("routing.hosts.\"{host}\""), format!("duplicates another entry for \"{key}\""));
            }
        }
        let l = &self.limits;
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
        // A 2 MiB Minecraft frame plus its prefix must fit one message.
        let min_ws = moonbridge_protocol::MAX_FRAME_LEN + 3;
        if l.max_ws_message_bytes < min_ws {
            push("limits.max_ws_message_bytes".into(), format!("must be at least {min_ws} (one 1.7.10 frame)"));
        }
        if let Err(m) = check_session_server(&self.auth.session_server) {
            push("auth.session_server".into(), m);
        }
        if self.auth.session_timeout_seconds == 0 || self.auth.session_timeout_seconds > 300 {
            push("auth.session_timeout_seconds".into(), "must be between 1 and 300 seconds".into());
        }
        p
    }

    /// The backend for hosts without a route.
    pub fn default_backend_name(&self) -> Option<&str> {
        self.routing.default_backend.as_deref().or_else(|| self.backends.first().map(|b| b.name.as_str()))
    }
}

/// Transport-specific keys and values of one listener.
fn check_listener(i: usize, l: &ListenerConfig, push: &mut impl FnMut(String, String)) {
    let key = |k: &str| format!("listener[{i}].{k}");
    let ws = matches!(l.transport, Transport::Ws | Transport::Wss);
    let only = |t: &str| format!("only applies to {t} listeners (this one is {})", l.transport);
    if !ws {
        for (set, k) in [
            (l.path.is_some(), "path"),
            (l.ping_interval_seconds.is_some(), "ping_interval_seconds"),
            (l.real_ip_header.is_some(), "real_ip_header"),
        ] {
            if set {
                push(key(k), only("ws and wss"));
            }
        }
        if !l.trusted_proxies.is_empty() && !l.proxy_protocol {
            push(key("trusted_proxies"), "on a tcp listener it needs proxy_protocol = true".into());
        }
    } else if l.proxy_protocol {
        push(key("proxy_protocol"), only("tcp"));
    }
    if l.transport == Transport::Wss {
        for (path, k) in [(&l.tls_cert, "tls_cert"), (&l.tls_key, "tls_key")] {
            match path {
                None => push(key(k), "is required for a wss listener".into()),
                Some(p) if std::fs::metadata(p).is_err() => push(key(k), format!("cannot read {}", p.display())),
                Some(_) => {}
            }
        }
        if let (Some(cert), Some(key_path)) = (&l.tls_cert, &l.tls_key) {
            if std::fs::metadata(cert).is_ok() && std::fs::metadata(key_path).is_ok() {
                if let Err(e) = crate::tls::load_certified_key(cert, key_path) {
                    push(key("tls_cert"), e.to_string());
                }
            }
        }
    } else {
        for (set, k) in [(l.tls_cert.is_some(), "tls_cert"), (l.tls_key.is_some(), "tls_key")] {
            if set {
                push(key(k), only("wss"));
            }
        }
    }
    if let Some(p) = &l.path {
        if !p.starts_with('/') || p.contains(|c: char| c.is_whitespace() || c == '?' || c == '#') {
            push(key("path"), format!("\"{p}\" must start with / and hold no spaces, ? or #"));
        }
    }
    if l.ping_interval_seconds.is_some_and(|s| s > 3600) {
        push(key("ping_interval_seconds"), "must be at most 3600 seconds".into());
    }
    for t in &l.trusted_proxies {
        if let Err(m) = parse_network(t) {
            push(key("trusted_proxies"), m);
        }
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
    match port.parse::<u16>() {
        Ok(0) | Err(_) => Err(format!("\"{address}\" has no valid port (1-65535)")),
        Ok(_) => Ok(()),
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn empty_file_means_defaults() {
        let c = Config::from_toml("").unwrap();
        assert_eq!(c, Config::default());
        assert_eq!(c.listeners[0].bind.to_string(), "0.0.0.0:25577");
        assert_eq!(c.listeners[1].transport, Transport::Ws);
        assert_eq!(c.listeners[1].bind.to_string(), "0.0.0.0:8080");
        assert_eq!(c.listeners[1].path(), "/mc");
        assert_eq!(c.listeners[1].ping_interval(), Some(Duration::from_secs(30)));
        assert_eq!(c.default_backend_name(), Some("default"));
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
        assert_eq!(c.backends[0].forwarding, Forwarding::Bungeecord);
        assert_eq!(c.limits.max_connections, 100);
        assert_eq!(c.limits.max_handshaking, 1024);
        assert_eq!(c.limits.handshake_timeout(), Duration::from_secs(3));
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
            [[backend]]
            name = "b"
            address = "127.0.0.1:1"
            forwarding = "proxy-protocol"
            "#,
        )
        .unwrap();
        assert!(c.check().is_empty(), "{:?}", c.check());
        let l = &c.listeners[0];
        assert_eq!(l.path(), "/play");
        assert_eq!(l.ping_interval(), None);
        assert_eq!(l.real_ip_header(), RealIpHeader::XForwardedFor);
        assert_eq!(l.trusted_networks().len(), 3);
        assert!(l.trusted_networks()[0].contains(&"127.0.0.1".parse::<IpAddr>().unwrap()));
        assert_eq!(c.backends[0].forwarding, Forwarding::ProxyProtocol);
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
        let keys: Vec<String> = c.check().into_iter().map(|p| p.key).collect();
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
}
