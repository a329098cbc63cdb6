//! The proxy configuration: a TOML file (see `docs/configuration.md`) or the built-in defaults.
//!
//! Every section and key is optional; unknown keys are errors. [`Config::load`] parses and validates;
//! [`Config::check`] returns every problem at once, one line each naming the key, for `--check-config`.

use std::collections::{BTreeMap, HashSet};
use std::net::SocketAddr;
use std::path::Path;
use std::time::Duration;

use serde::Deserialize;

/// Address of the built-in TCP listener.
pub const DEFAULT_TCP_BIND: &str = "0.0.0.0:25577";
/// Name of the built-in backend.
pub const DEFAULT_BACKEND_NAME: &str = "default";
/// Address of the built-in backend.
pub const DEFAULT_BACKEND_ADDRESS: &str = "127.0.0.1:25565";

/// The whole configuration.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields)]
pub struct Config {
    /// `[[listener]]`: where players connect. Default: one `tcp` listener on `0.0.0.0:25577`.
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
    vec![ListenerConfig {
        transport: Transport::Tcp,
        bind: DEFAULT_TCP_BIND
            .parse()
            .unwrap_or_else(|_| SocketAddr::from(([0, 0, 0, 0], 25577))),
        proxy_protocol: false,
    }]
}

fn default_backends() -> Vec<BackendConfig> {
    vec![BackendConfig {
        name: DEFAULT_BACKEND_NAME.into(),
        address: DEFAULT_BACKEND_ADDRESS.into(),
        forwarding: Forwarding::None,
    }]
}

/// How players reach a listener.
#[derive(Clone, Copy, Debug, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
pub enum Transport {
    /// Plain Minecraft over TCP.
    Tcp,
}

impl std::fmt::Display for Transport {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Tcp => "tcp",
        })
    }
}

/// One `[[listener]]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct ListenerConfig {
    /// `transport`: `"tcp"`. Required.
    pub transport: Transport,
    /// `bind`: `IP:port` to listen on, such as `"0.0.0.0:25565"`. Required.
    pub bind: SocketAddr,
    /// `proxy_protocol` (tcp only): require a PROXY v1/v2 header from every peer. Default `false`.
    #[serde(default)]
    pub proxy_protocol: bool,
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
}

/// One `[[backend]]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct BackendConfig {
    /// `name`: how routes, logs and disconnect messages refer to it. Required, unique.
    pub name: String,
    /// `address`: `host:port` of the 1.7.10 server; a hostname is resolved at each connect. Required.
    pub address: String,
    /// `forwarding`: `"none"` (default) or `"bungeecord"`.
    #[serde(default)]
    pub forwarding: Forwarding,
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
}

/// `[auth]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
pub struct AuthConfig {
    /// `mode`: `"passthrough"` (default) or `"offline"`.
    #[serde(default)]
    pub mode: AuthMode,
    /// `session_server`: base URL of the session server (used by `online` mode). Default
    /// `https://sessionserver.mojang.com`.
    #[serde(default = "default_session_server")]
    pub session_server: String,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            mode: AuthMode::default(),
            session_server: default_session_server(),
        }
    }
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
    /// `login_timeout_seconds`: from sending Login Start to the backend until its first answer (and the whole
    /// of a status exchange). Default 30 seconds.
    pub login_timeout_seconds: u64,
    /// `max_ws_message_bytes`: largest WebSocket message accepted from a player. Default 4194304 bytes.
    pub max_ws_message_bytes: usize,
    /// `shutdown_grace_seconds`: on SIGTERM/Ctrl-C, how long sessions get to receive their disconnect before
    /// the process exits. Default 10 seconds.
    pub shutdown_grace_seconds: u64,
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
            ConfigError::Parse(ConfigProblem {
                key: format!("line {line}, column {col}"),
                message,
            })
        })
    }

    /// Reads, parses and validates a file.
    ///
    /// # Errors
    /// Any [`ConfigError`].
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
            path: path.display().to_string(),
            source,
        })?;
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
            push(
                "listener".into(),
                "at least one [[listener]] is needed".into(),
            );
        }
        let mut binds = HashSet::new();
        for (i, l) in self.listeners.iter().enumerate() {
            if l.proxy_protocol {
                push(
                    format!("listener[{i}].proxy_protocol"),
                    "PROXY protocol headers are not supported yet".into(),
                );
            }
            if !binds.insert(l.bind) {
                push(
                    format!("listener[{i}].bind"),
                    format!("{} is used by another listener", l.bind),
                );
            }
        }
        if self.backends.is_empty() {
            push(
                "backend".into(),
                "at least one [[backend]] is needed".into(),
            );
        }
        let mut names = HashSet::new();
        for (i, b) in self.backends.iter().enumerate() {
            if b.name.is_empty() {
                push(format!("backend[{i}].name"), "must not be empty".into());
            } else if !names.insert(b.name.as_str()) {
                push(
                    format!("backend[{i}].name"),
                    format!("\"{}\" is used by another backend", b.name),
                );
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
        }
        if let Some(d) = &self.routing.default_backend {
            if !names.contains(d.as_str()) {
                push(
                    "routing.default_backend".into(),
                    format!("no [[backend]] is named \"{d}\""),
                );
            }
        }
        let mut keys = HashSet::new();
        for (host, backend) in &self.routing.hosts {
            let key = moonbridge_protocol::handshake::routing_key(host);
            if !names.contains(backend.as_str()) {
                push(
                    format!("routing.hosts.\"{host}\""),
                    format!("no [[backend]] is named \"{backend}\""),
                );
            }
            if !keys.insert(key.clone()) {
                push(
                    format!("routing.hosts.\"{host}\""),
                    format!("duplicates another entry for \"{key}\""),
                );
            }
        }
        let l = &self.limits;
        for (key, value) in [
            ("limits.max_connections", l.max_connections as u64),
            ("limits.max_handshaking", l.max_handshaking as u64),
            (
                "limits.handshake_timeout_seconds",
                l.handshake_timeout_seconds,
            ),
            (
                "limits.backend_connect_timeout_seconds",
                l.backend_connect_timeout_seconds,
            ),
            ("limits.login_timeout_seconds", l.login_timeout_seconds),
        ] {
            if value == 0 {
                push(key.into(), "must be at least 1".into());
            }
        }
        if l.max_connections > 1_000_000 {
            push(
                "limits.max_connections".into(),
                "must be at most 1000000".into(),
            );
        }
        for (key, value) in [
            (
                "limits.handshake_timeout_seconds",
                l.handshake_timeout_seconds,
            ),
            (
                "limits.backend_connect_timeout_seconds",
                l.backend_connect_timeout_seconds,
            ),
            ("limits.login_timeout_seconds", l.login_timeout_seconds),
            ("limits.shutdown_grace_seconds", l.shutdown_grace_seconds),
        ] {
            if value > 86_400 {
                push(key.into(), "must be at most 86400 seconds".into());
            }
        }
        // A 2 MiB Minecraft frame plus its prefix must fit one message.
        let min_ws = moonbridge_protocol::MAX_FRAME_LEN + 3;
        if l.max_ws_message_bytes < min_ws {
            push(
                "limits.max_ws_message_bytes".into(),
                format!("must be at least {min_ws} (one 1.7.10 frame)"),
            );
        }
        if self.auth.session_server.is_empty() {
            push("auth.session_server".into(), "must not be empty".into());
        }
        p
    }

    /// The backend for hosts without a route.
    pub fn default_backend_name(&self) -> Option<&str> {
        self.routing
            .default_backend
            .as_deref()
            .or_else(|| self.backends.first().map(|b| b.name.as_str()))
    }
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
        let e = Config::from_toml("[[listener]]\ntransport = \"tcp\"\nbindd = \"0.0.0.0:1\"\n")
            .unwrap_err();
        let s = e.to_string();
        assert!(s.contains("bindd"), "{s}");
        assert!(s.contains("line 3"), "{s}");
        let e = Config::from_toml("[limits]\nmax_conections = 5\n").unwrap_err();
        assert!(e.to_string().contains("max_conections"), "{e}");
        let e = Config::from_toml("[[listener]]\ntransport = \"udp\"\nbind = \"0.0.0.0:1\"\n")
            .unwrap_err();
        assert!(e.to_string().contains("udp"), "{e}");
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
}
