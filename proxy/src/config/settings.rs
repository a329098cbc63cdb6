//! [`Settings`]: the checked, typed configuration the proxy runs on, built by [`super::Config::settings`]
//! (`config/check.rs`).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use super::limits::LimitsConfig;
use super::schema::{
    AuthConfig, CompressionConfig, Forwarding, LanesConfig, MetricsConfig, NetworkConfig, RateLimitsConfig,
    RuntimeConfig, StatusConfig, TransferConfig,
};
use crate::transport::Transport;
use crate::trusted::{RealIpHeader, TrustedProxies};

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
    /// `[metrics]`.
    pub metrics: MetricsConfig,
    /// `[runtime]`.
    pub runtime: RuntimeConfig,
    /// `[network]`, when this instance is one of a network.
    pub network: Option<NetworkConfig>,
    /// The sections used as written once checked, which a reload changes.
    pub tunables: Tunables,
}

/// The sections the proxy uses as written once checked, and that a reload changes for sessions that start
/// afterwards (`[compression]`: for connections accepted afterwards). Held once by [`Settings`] and once by the
/// proxy's live state, so neither lists them again.
#[derive(Clone, Debug)]
#[non_exhaustive]
pub struct Tunables {
    /// `[limits]`.
    pub limits: LimitsConfig,
    /// `[status]`.
    pub status: StatusConfig,
    /// `[rate_limits]`.
    pub rate_limits: RateLimitsConfig,
    /// `[compression]`.
    pub compression: CompressionConfig,
    /// `[transfer]` (every name checked against the backends).
    pub transfer: TransferConfig,
    /// `[lanes]`.
    pub lanes: LanesConfig,
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
    /// `proxy_protocol`: every connection starts with a PROXY v1/v2 header (before TLS and the upgrade), from
    /// a peer in `trusted` only; the address it names is the player's TCP peer from then on (`real_ip_header` is
    /// believed only when that address is itself in `trusted`; never after a header that names no client).
    pub proxy_header: bool,
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
