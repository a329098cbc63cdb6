//! The checks: [`Config::settings`] checks every value and reference of the file and builds the
//! [`Settings`], reporting every problem at once, one per key, in file order (for `--check-config`).

use std::collections::{HashMap, HashSet};
use std::time::Duration;

use super::errors::{ConfigError, ConfigProblem};
use super::limits::LimitsConfig;
use super::schema::{
    AuthMode, Config, Forwarding, LanesConfig, ListenerConfig, NetworkConfig, TransferConfig,
    DEFAULT_PING_INTERVAL_SECONDS, DEFAULT_WS_PATH, MAX_SENTINELS, MIN_ADMIN_TOKEN_BYTES, MIN_SECRET_BYTES,
};
use super::settings::{BackendSettings, Listener, ListenerKind, RouteTable, Settings, TlsFiles, Tunables, WsSettings};
use crate::transport::Transport;
use crate::trusted::TrustedProxies;

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
        if let Some(path) = &self.metrics.admin_token_file {
            if self.metrics.bind.is_none() {
                push("metrics.admin_token_file".into(), "needs metrics.bind (the admin API is served there)".into());
            }
            if let Some(m) = key_file_problem(path, MIN_ADMIN_TOKEN_BYTES, "token") {
                push("metrics.admin_token_file".into(), m);
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
        check_lanes(&self.lanes, &mut push);
        if let Err(m) = check_session_server(&self.auth.session_server) {
            push("auth.session_server".into(), m);
        }
        if self.auth.session_timeout_seconds == 0 || self.auth.session_timeout_seconds > 300 {
            push("auth.session_timeout_seconds".into(), "must be between 1 and 300 seconds".into());
        }
        if let Some(n) = &self.network {
            check_network(n, &binds, &mut push);
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
            metrics: self.metrics.clone(),
            runtime: self.runtime.clone(),
            network: self.network.clone(),
            tunables: Tunables {
                limits: self.limits.clone(),
                status: self.status.clone(),
                rate_limits: self.rate_limits.clone(),
                compression: self.compression.clone(),
                lanes: self.lanes.clone(),
                transfer: self.transfer.clone(),
            },
        })
    }
}

/// Checks `[network]`: the Redis URL's form, the name, the peer addresses (`binds`: the listeners').
fn check_network(n: &NetworkConfig, binds: &HashSet<std::net::SocketAddr>, push: &mut impl FnMut(String, String)) {
    let scheme_ok = n.redis_url.starts_with("redis://") || n.redis_url.starts_with("rediss://");
    if !scheme_ok {
        push("network.redis_url".into(), "must start with redis:// or rediss://".into());
    } else if let Err(e) = redis::IntoConnectionInfo::into_connection_info(n.redis_url.as_str()) {
        push("network.redis_url".into(), format!("not a Redis URL: {e}"));
    }
    let tls_files = [
        ("network.redis_ca_file", &n.redis_ca_file),
        ("network.redis_client_cert", &n.redis_client_cert),
        ("network.redis_client_key", &n.redis_client_key),
    ];
    for (key, path) in tls_files {
        let Some(path) = path else { continue };
        if !n.redis_url.starts_with("rediss://") {
            push(key.into(), "needs a rediss:// redis_url".into());
        } else if let Err(e) = std::fs::metadata(path) {
            push(key.into(), format!("cannot read {}: {e}", path.display()));
        }
    }
    check_sentinels(n, push);
    if n.redis_client_cert.is_some() != n.redis_client_key.is_some() {
        push("network.redis_client_cert".into(), "redis_client_cert and redis_client_key go together".into());
    }
    let name_ok = |c: char| c.is_ascii_alphanumeric() || matches!(c, '-' | '_' | '.');
    if n.name.is_empty() || n.name.len() > 64 || !n.name.chars().all(name_ok) {
        push("network.name".into(), "must be 1 to 64 characters of A-Z a-z 0-9 - _ .".into());
    }
    if !(1..=10_000).contains(&n.drain_rate) {
        push("network.drain_rate".into(), format!("{} players per second is outside 1 to 10000", n.drain_rate));
    }
    if n.peer_bind.port() != 0 && binds.contains(&n.peer_bind) {
        push("network.peer_bind".into(), format!("{} is used by a [[listener]]", n.peer_bind));
    }
    if let Some(Err(m)) = n.peer_address.as_deref().map(check_host_port) {
        push("network.peer_address".into(), m);
    }
    if n.secret_file.as_os_str().is_empty() {
        push("network.secret_file".into(), "must name a file".into());
    } else if let Some(m) = key_file_problem(&n.secret_file, MIN_SECRET_BYTES, "secret") {
        // The same rule the start applies (network/link.rs), said before it.
        push("network.secret_file".into(), m);
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
    } else if l.proxy_protocol && l.trusted_proxies.is_empty() {
        // A WebSocket player's PROXY header would be believed from anyone, and skip the limits at accept.
        problem("proxy_protocol", "on a ws or wss listener it needs trusted_proxies (the balancers' addresses)".into());
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
        proxy_header: l.proxy_protocol,
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

/// Most `lanes.urgent_channels`.
const MAX_URGENT_CHANNELS: usize = 32;

fn check_lanes(l: &LanesConfig, push: &mut impl FnMut(String, String)) {
    if l.urgent_channels.len() > MAX_URGENT_CHANNELS {
        push("lanes.urgent_channels".into(), format!("at most {MAX_URGENT_CHANNELS} channels"));
    }
    let max = moonbridge_protocol::lanes::MAX_CHANNEL_BYTES;
    for c in &l.urgent_channels {
        if c.is_empty() || c.len() > max || c.chars().any(char::is_control) {
            push(
                "lanes.urgent_channels".into(),
                format!("{c:?}: a channel name is 1 to {max} bytes, no control characters"),
            );
        }
    }
}

/// Smallest and largest `limits.player_queue_bytes`.
const PLAYER_QUEUE_MIN: usize = 256 * 1024;
const PLAYER_QUEUE_MAX: usize = 1 << 30;

fn check_limits(l: &LimitsConfig, push: &mut impl FnMut(String, String)) {
    if !(PLAYER_QUEUE_MIN..=PLAYER_QUEUE_MAX).contains(&l.player_queue_bytes) {
        push(
            "limits.player_queue_bytes".into(),
            format!("must be between {PLAYER_QUEUE_MIN} and {PLAYER_QUEUE_MAX} bytes"),
        );
    }
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
    let vanilla = moonbridge_protocol::MAX_FRAME_LEN;
    let widest = moonbridge_protocol::frame::MAX_WIDE_FRAME_LEN;
    if !(vanilla..=widest).contains(&l.max_play_frame_bytes) {
        push(
            "limits.max_play_frame_bytes".into(),
            format!("must be between {vanilla} (a vanilla 1.7.10 frame) and {widest} (what a 5-byte prefix declares)"),
        );
    }
}

/// `auth.session_server`: an `https://` URL, or `http://` to a loopback host (a local stand-in). Plain HTTP to
/// anywhere else would let anyone on the path answer `hasJoined` with any profile.
pub(super) fn check_session_server(url: &str) -> Result<(), String> {
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

pub(super) fn check_host_port(address: &str) -> Result<(), String> {
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

/// `redis_sentinels` and `redis_master_name`: both or neither, each sentinel `host:port`, at most
/// [`MAX_SENTINELS`]; no private CA or client certificate with them (the sentinel client takes neither).
fn check_sentinels(n: &NetworkConfig, push: &mut impl FnMut(String, String)) {
    match (n.redis_sentinels.is_empty(), &n.redis_master_name) {
        (true, None) => return,
        (false, None) => push("network.redis_master_name".into(), "is required with redis_sentinels".into()),
        (true, Some(_)) => push("network.redis_master_name".into(), "needs redis_sentinels".into()),
        (false, Some(name)) if name.is_empty() || name.len() > 64 => {
            push("network.redis_master_name".into(), "must have 1 to 64 characters".into());
        }
        (false, Some(_)) => {}
    }
    if n.redis_sentinels.len() > MAX_SENTINELS {
        push("network.redis_sentinels".into(), format!("lists more than {MAX_SENTINELS} sentinels"));
    }
    for s in &n.redis_sentinels {
        if let Err(m) = check_host_port(s) {
            push("network.redis_sentinels".into(), format!("{s}: {m}"));
        }
    }
    let tls_files = [n.redis_ca_file.is_some(), n.redis_client_cert.is_some(), n.redis_client_key.is_some()];
    if tls_files.contains(&true) {
        push(
            "network.redis_sentinels".into(),
            "cannot be used with redis_ca_file or a client certificate (rediss:// with the system's roots only)".into(),
        );
    }
}

/// What is wrong with a file that must hold a `what` (a secret, a token) of at least `min` bytes, surrounding
/// whitespace not counted: it cannot be read, or holds fewer.
pub(crate) fn key_file_problem(path: &std::path::Path, min: usize, what: &str) -> Option<String> {
    match std::fs::read(path) {
        Err(e) => Some(format!("cannot read {}: {e}", path.display())),
        Ok(bytes) if bytes.trim_ascii().len() < min => Some(format!(
            "{} holds {} bytes; the {what} needs at least {min} (openssl rand -hex 32)",
            path.display(),
            bytes.trim_ascii().len(),
        )),
        Ok(_) => None,
    }
}
