//! The configuration file as written ([`Config`]): every section and key, optional, with its default (the
//! `Default` impls, `#[serde(default)]`); unknown keys are errors. Keys that only apply to some listener
//! transports are `Option`s, because whether they were given matters (a `path` on a `tcp` listener is a
//! mistake). `docs/configuration.md` documents every key with its unit.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use serde::Deserialize;

use super::limits::LimitsConfig;
use crate::transport::Transport;
use crate::trusted::RealIpHeader;

/// Address of the built-in TCP listener.
pub const DEFAULT_TCP_BIND: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 25577);
/// Address of the built-in WebSocket listener.
pub const DEFAULT_WS_BIND: SocketAddr = SocketAddr::new(std::net::IpAddr::V4(std::net::Ipv4Addr::UNSPECIFIED), 8080);
/// Request path of WebSocket listeners without `path`.
pub const DEFAULT_WS_PATH: &str = "/mc";
/// Keepalive ping interval of WebSocket listeners without `ping_interval_seconds`, in seconds.
pub const DEFAULT_PING_INTERVAL_SECONDS: u64 = 30;
/// Name of the built-in backend.
pub const DEFAULT_BACKEND_NAME: &str = "default";
/// Address of the built-in backend.
pub const DEFAULT_BACKEND_ADDRESS: &str = "127.0.0.1:25565";

/// The whole configuration file.
#[derive(Clone, Debug, Deserialize, PartialEq)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct Config {
    /// `[[listener]]`: where players connect. Default: `tcp` on `0.0.0.0:25577` and `ws` on `0.0.0.0:8080`
    /// path `/mc`.
    #[serde(rename = "listener")]
    pub listeners: Vec<ListenerConfig>,
    /// `[[backend]]`: the 1.7.10 servers. Default: one backend `default` at `127.0.0.1:25565`.
    #[serde(rename = "backend")]
    pub backends: Vec<BackendConfig>,
    /// `[routing]`: which backend a handshake host goes to.
    pub routing: RoutingConfig,
    /// `[auth]`: who authenticates players.
    pub auth: AuthConfig,
    /// `[limits]`: connection caps and deadlines.
    pub limits: LimitsConfig,
    /// `[metrics]`: the operations HTTP listener (Prometheus metrics, health checks). Off by default.
    pub metrics: MetricsConfig,
    /// `[status]`: server-list answers (the status cache and the offline answer).
    pub status: StatusConfig,
    /// `[rate_limits]`: per-address token buckets for connections and logins.
    pub rate_limits: RateLimitsConfig,
    /// `[runtime]`: how the proxy uses threads.
    pub runtime: RuntimeConfig,
    /// `[compression]`: zstd on the WebSocket hop (carriage `moonbridge.v2.zstd`).
    pub compression: CompressionConfig,
    /// `[transfer]`: moving connected players between backends (BungeeCord `Connect`, fallbacks).
    pub transfer: TransferConfig,
    /// `[lanes]`: the clientbound urgent and bulk lanes (docs/lanes.md).
    pub lanes: LanesConfig,
    /// `[network]`: several instances sharing state through Redis (docs/network.md). Absent (the default): one
    /// instance.
    pub network: Option<NetworkConfig>,
}

/// `[network] duplicate_login`: what happens when a name that is already playing on the network logs in again.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DuplicateLogin {
    /// `"kick_existing"` (the default): the older session gets "You logged in from another location" (as a
    /// vanilla server does) and the new one plays.
    #[default]
    KickExisting,
    /// `"refuse_new"`: the new login is refused with a Login Disconnect; the older session plays on.
    RefuseNew,
}

impl std::fmt::Display for DuplicateLogin {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::KickExisting => "kick_existing",
            Self::RefuseNew => "refuse_new",
        })
    }
}

/// `[network]`: instances with the same `name` on one Redis form a network (docs/network.md): a lease per
/// instance and per player (10 seconds, renewed every 2), resume across instances over authenticated instance
/// links, one session per player name, network-wide counts. Needs a restart to change.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct NetworkConfig {
    /// `redis_url`: `redis://[user:password@]host:port/db`, or `rediss://` for Redis over TLS (verified
    /// against the system's roots, or `redis_ca_file`). Required.
    pub redis_url: String,
    /// `redis_ca_file` (`rediss://`): PEM certificates Redis's certificate is verified against instead of the
    /// system's roots (a private CA). Default: none.
    #[serde(default)]
    pub redis_ca_file: Option<PathBuf>,
    /// `redis_client_cert` and `redis_client_key` (`rediss://`, both or neither): a PEM certificate chain and
    /// its key this instance presents to Redis (`tls-auth-clients yes`). Default: none.
    #[serde(default)]
    pub redis_client_cert: Option<PathBuf>,
    /// See `redis_client_cert`.
    #[serde(default)]
    pub redis_client_key: Option<PathBuf>,
    /// `redis_sentinels`: `"host:port"` of Redis Sentinels (at most [`MAX_SENTINELS`]) to ask for the master
    /// named `redis_master_name`, instead of dialling `redis_url`'s host; `redis_url` then gives the scheme,
    /// user, password and database of the master (docs/network.md, "Redis Sentinel"). Default: none.
    #[serde(default)]
    pub redis_sentinels: Vec<String>,
    /// `redis_master_name`: the master's name at the sentinels (`sentinel monitor <name> …`). Required with
    /// `redis_sentinels`.
    #[serde(default)]
    pub redis_master_name: Option<String>,
    /// `name`: instances with the same name (and Redis) form one network; keys are kept under
    /// `moonbridge:<name>:`. 1 to 64 characters of `A-Z a-z 0-9 - _ .`. Default `"main"`.
    #[serde(default = "default_network_name")]
    pub name: String,
    /// `peer_bind`: `"IP:port"` where this instance accepts instance links from the others. Required. Keep it
    /// on a private network: it is not for players.
    pub peer_bind: SocketAddr,
    /// `peer_address`: `"host:port"` the other instances dial to reach this one; a host name is resolved once, at
    /// start, and the address advertised (an instance never resolves what it reads from Redis). Default:
    /// `peer_bind`; when
    /// that is an unspecified address (`0.0.0.0`, `[::]`), the address this host uses to reach the Redis host
    /// (its route, as on a Kubernetes pod: the pod's IP) with `peer_bind`'s port.
    #[serde(default)]
    pub peer_address: Option<String>,
    /// `secret_file`: a file holding the network's shared secret (at least 32 bytes, surrounding whitespace
    /// ignored); instance links are mutually authenticated with it (HMAC-SHA-256 challenges both ways), and a
    /// peer that cannot prove it is closed before anything is served. Required.
    pub secret_file: PathBuf,
    /// `duplicate_login`: `"kick_existing"` (default) or `"refuse_new"` ([`DuplicateLogin`]).
    #[serde(default)]
    pub duplicate_login: DuplicateLogin,
    /// `drain_rate`: on shutdown with live peers, players moved to another instance per second (a move is a
    /// second login at the backend; the rate spreads them). 1 to 10,000. Default 50 (200 players in 4 s).
    #[serde(default = "default_drain_rate")]
    pub drain_rate: u32,
}

/// The most `[network] redis_sentinels` entries: 16.
pub const MAX_SENTINELS: usize = 16;

/// The shortest `[network] secret_file` secret accepted, in bytes (surrounding whitespace not counted): 32.
pub(crate) const MIN_SECRET_BYTES: usize = 32;

fn default_drain_rate() -> u32 {
    50
}

fn default_network_name() -> String {
    "main".into()
}

/// `[compression]`: per-message zstd compression on WebSocket connections whose client offers
/// `moonbridge.v2.zstd` (docs/carriage.md, "Compression"). It needs carriage v2, so resume must be on
/// (`limits.resume_window_seconds` > 0). Plain and `moonbridge.v1`/`moonbridge.v2` clients are unaffected.
/// Applies to connections accepted after a reload.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct CompressionConfig {
    /// `enabled`: select `moonbridge.v2.zstd` when a client offers it. Default true.
    pub enabled: bool,
    /// `level`: zstd compression level for what the proxy sends, -7 (fastest) to 19 (smallest). Default 1.
    pub level: i32,
}

impl Default for CompressionConfig {
    fn default() -> Self {
        Self { enabled: true, level: moonbridge_protocol::ws::compress::DEFAULT_LEVEL }
    }
}

/// `[lanes]`: what the proxy sends a player first when its path is slower than the backend (docs/lanes.md).
/// Applies to sessions that start after a reload.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct LanesConfig {
    /// `enabled`: sort Play frames into the urgent and bulk lanes, keep the queue in the proxy (the kernel's
    /// unsent bytes bounded, carriage v2's window). Default true (docs/lanes.md, "Turning it off").
    pub enabled: Option<bool>,
    /// `urgent_channels`: Plugin Message channels (each at most 20 bytes; at most 32) whose messages go in
    /// the urgent lane. Default none: mod channels are bulk.
    pub urgent_channels: Vec<String>,
}

impl LanesConfig {
    /// Whether the lanes are on (`enabled`, default true).
    pub fn on(&self) -> bool {
        self.enabled.unwrap_or(true)
    }
}

/// `[runtime] mode`: how sessions are spread over threads.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
pub enum RuntimeMode {
    /// `"thread-per-core"` (the default): one single-threaded tokio runtime per worker thread. A player's
    /// connection and its backend connection live on one worker for the whole session, so relaying a frame
    /// never wakes another thread. New connections go to the worker with the fewest open connections.
    #[default]
    ThreadPerCore,
    /// `"multi-thread"`: tokio's work-stealing runtime (one worker per core, or `TOKIO_WORKER_THREADS`);
    /// tasks move between workers as load shifts, at the cost of cross-thread wakeups.
    MultiThread,
}

impl std::fmt::Display for RuntimeMode {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::ThreadPerCore => "thread-per-core",
            Self::MultiThread => "multi-thread",
        })
    }
}

/// `[runtime]`: threads. Needs a restart to change.
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RuntimeConfig {
    /// `mode`: `"thread-per-core"` or `"multi-thread"` (see [`RuntimeMode`]). Default `"thread-per-core"`.
    pub mode: RuntimeMode,
    /// `workers`: worker threads that run sessions. 0 means one per CPU core the process may use. Default 0,
    /// at most 1024. In `"multi-thread"` mode 0 leaves the choice to tokio (`TOKIO_WORKER_THREADS`, else
    /// one per core).
    pub workers: usize,
}

impl RuntimeConfig {
    /// The number of session workers this configuration asks for (`workers`, or the cores available).
    pub fn worker_count(&self) -> usize {
        match self.workers {
            0 => std::thread::available_parallelism().map_or(1, std::num::NonZeroUsize::get),
            n => n,
        }
    }
}

/// `[rate_limits]`: token buckets per player address (the real address, after a PROXY header or a trusted
/// real-IP header; IPv6 grouped by `ipv6_prefix`). The defaults leave a household of players behind one NAT
/// far from any limit. A rate of 0 turns that limit off.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RateLimitsConfig {
    /// `connections_per_second`: new connections per address per second, refilled continuously. Default 10.
    pub connections_per_second: u32,
    /// `connection_burst`: connections an address may open at once before the rate applies. Default 30.
    pub connection_burst: u32,
    /// `logins_per_minute`: logins (Login Start) per address per minute. Default 30.
    pub logins_per_minute: u32,
    /// `login_burst`: logins an address may make at once before the rate applies. Default 10.
    pub login_burst: u32,
    /// `ipv6_prefix`: IPv6 addresses are counted per prefix of this many bits (a home usually gets a /64).
    /// Default 64, 0 to 128.
    pub ipv6_prefix: u8,
    /// `max_tracked_addresses`: addresses (or prefixes) tracked at once; the table never grows past it.
    /// Default 65536 (about 4 MiB), 1024 to 10,000,000.
    pub max_tracked_addresses: usize,
}

impl Default for RateLimitsConfig {
    fn default() -> Self {
        Self {
            connections_per_second: 10,
            connection_burst: 30,
            logins_per_minute: 30,
            login_burst: 10,
            ipv6_prefix: 64,
            max_tracked_addresses: 65_536,
        }
    }
}

/// `[transfer]`: moving a connected player from one backend to another without a reconnect (docs/servers.md).
/// A backend asks for it with the BungeeCord plugin channel's `Connect` message; a fallback catches players a
/// backend disconnects. Off by default: with no `targets` and no `fallback`, sessions run as before, and only
/// sessions whose backend can send players on (a `targets` list, or a `fallback` entry) pay for the transfer
/// layer. Applies to sessions that start after a reload.
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct TransferConfig {
    /// `targets`: the backends (by `name`) a `Connect` message may send a player to. A `Connect` naming any
    /// other backend is refused with a chat message. Default: empty (no `Connect` is obeyed).
    pub targets: Vec<String>,
    /// `[transfer.fallback]`: backend name → the backend a player is sent to when that one disconnects them
    /// (a Play Disconnect), such as `"survival" = "lobby"`; the player sees the reason in chat. When the
    /// fallback cannot take the player either, the original disconnect reaches them. Default: empty.
    pub fallback: BTreeMap<String, String>,
    /// `switch_timeout_seconds`: from the request to the new backend's Join Game (connect, login and, for
    /// vanilla clients, the cutover). The player keeps playing on the old backend meanwhile. Default 15
    /// seconds, 1 to 300.
    pub switch_timeout_seconds: u64,
    /// `forge_handshake_timeout_seconds`: the same deadline when the new backend runs the Forge handshake
    /// (`FML|HS`) with a Forge client, from the request. Default 30 seconds, 1 to 300.
    pub forge_handshake_timeout_seconds: u64,
}

/// Default `[transfer] switch_timeout_seconds`.
pub const DEFAULT_SWITCH_TIMEOUT_SECONDS: u64 = 15;
/// Default `[transfer] forge_handshake_timeout_seconds`.
pub const DEFAULT_FORGE_HANDSHAKE_TIMEOUT_SECONDS: u64 = 30;

impl Default for TransferConfig {
    fn default() -> Self {
        Self {
            targets: Vec::new(),
            fallback: BTreeMap::new(),
            switch_timeout_seconds: DEFAULT_SWITCH_TIMEOUT_SECONDS,
            forge_handshake_timeout_seconds: DEFAULT_FORGE_HANDSHAKE_TIMEOUT_SECONDS,
        }
    }
}

impl TransferConfig {
    /// The switch deadline for a vanilla client.
    pub fn switch_timeout(&self) -> Duration {
        Duration::from_secs(self.switch_timeout_seconds)
    }

    /// The switch deadline once the new backend runs the Forge handshake.
    pub fn forge_handshake_timeout(&self) -> Duration {
        Duration::from_secs(self.forge_handshake_timeout_seconds)
    }
}

/// Default `[status] cache_seconds`.
pub const DEFAULT_STATUS_CACHE_SECONDS: u64 = 5;

/// `[status]`: how the proxy answers server-list pings (1.7 status and legacy `0xFE`).
#[derive(Clone, Debug, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct StatusConfig {
    /// `cache_seconds`: a backend's Status Response is fetched at most once per this many seconds and served
    /// to every ping meanwhile (a failed fetch is remembered as long, so a down backend is not hammered
    /// either). `0` fetches for every ping. Default 5 seconds, at most 3600.
    pub cache_seconds: u64,
    /// `offline_message`: the server-list text when the backend cannot be reached, for example
    /// `"Server is restarting"`. Default: `"Server NAME is unreachable"`. At most 256 characters.
    pub offline_message: Option<String>,
}

impl Default for StatusConfig {
    fn default() -> Self {
        Self { cache_seconds: DEFAULT_STATUS_CACHE_SECONDS, offline_message: None }
    }
}

/// `[metrics]`: an HTTP/1.1 listener for operators, serving `GET /metrics` (the Prometheus text format),
/// `GET /healthz` and `GET /readyz`, and with `admin_token_file` the admin API (see `docs/operations.md`).
#[derive(Clone, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct MetricsConfig {
    /// `bind`: `IP:port` of the listener, such as `"127.0.0.1:9477"`. Default: none (no listener). Put it on a
    /// private address: the metrics and probes have no authentication.
    pub bind: Option<SocketAddr>,
    /// `admin_token_file`: a file holding the admin API's bearer token (at least [`MIN_ADMIN_TOKEN_BYTES`]
    /// bytes, surrounding whitespace not counted; `openssl rand -hex 32`). Default: none (no admin API). Needs
    /// `bind`. The file should be readable by the proxy's user only (a warning at start otherwise).
    pub admin_token_file: Option<std::path::PathBuf>,
}

/// The shortest `[metrics] admin_token_file` token accepted, in bytes (surrounding whitespace not counted): 32.
pub const MIN_ADMIN_TOKEN_BYTES: usize = 32;

impl Default for Config {
    fn default() -> Self {
        Self {
            listeners: vec![
                ListenerConfig { bind: DEFAULT_TCP_BIND, ..ListenerConfig::new(Transport::Tcp) },
                ListenerConfig { bind: DEFAULT_WS_BIND, ..ListenerConfig::new(Transport::Ws) },
            ],
            backends: vec![BackendConfig {
                name: DEFAULT_BACKEND_NAME.into(),
                address: DEFAULT_BACKEND_ADDRESS.into(),
                forwarding: Forwarding::None,
                forwarding_secret: None,
            }],
            routing: RoutingConfig::default(),
            auth: AuthConfig::default(),
            limits: LimitsConfig::default(),
            metrics: MetricsConfig::default(),
            status: StatusConfig::default(),
            rate_limits: RateLimitsConfig::default(),
            runtime: RuntimeConfig::default(),
            compression: CompressionConfig::default(),
            lanes: LanesConfig::default(),
            transfer: TransferConfig::default(),
            network: None,
        }
    }
}

/// One `[[listener]]` as written. Keys marked ws/wss, wss or tcp are errors on other transports.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct ListenerConfig {
    /// `transport`: `"tcp"`, `"ws"` or `"wss"`. Required.
    pub transport: Transport,
    /// `bind`: `IP:port` to listen on, such as `"0.0.0.0:25565"` or `"[::]:25565"`. Required.
    pub bind: SocketAddr,
    /// `proxy_protocol`: require a PROXY v1 or v2 header from every peer (behind a TCP load balancer; on ws/wss
    /// before TLS and the upgrade). Default `false`.
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
    /// (or PROXY header) is believed. Default empty: on ws/wss the TCP peer is the player; on tcp with
    /// `proxy_protocol` every peer may send the header.
    #[serde(default)]
    pub trusted_proxies: Vec<String>,
    /// `real_ip_header` (ws/wss): `"CF-Connecting-IP"` (default), `"X-Forwarded-For"` or `"X-Real-IP"`.
    #[serde(default)]
    pub real_ip_header: Option<RealIpHeader>,
    /// `health_path` (ws/wss): a request path answered with `200 OK` and no upgrade, for a CDN's or load
    /// balancer's health check (for example `"/healthz"`). Default: none.
    #[serde(default)]
    pub health_path: Option<String>,
}

impl ListenerConfig {
    /// A listener of `transport` on `0.0.0.0:0` with every optional key left out.
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
            health_path: None,
        }
    }
}

/// How a backend learns who the player is.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "kebab-case")]
#[non_exhaustive]
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

impl std::fmt::Display for Forwarding {
    /// The configuration's spelling: `none`, `bungeecord`, `proxy-protocol`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::None => "none",
            Self::Bungeecord => "bungeecord",
            Self::ProxyProtocol => "proxy-protocol",
        })
    }
}

/// One `[[backend]]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields)]
#[non_exhaustive]
pub struct BackendConfig {
    /// `name`: how routes, logs and disconnect messages refer to it. Required, unique.
    pub name: String,
    /// `address`: `host:port` of the 1.7.10 server (IPv6 in brackets); a hostname is resolved at each
    /// connect. Required.
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
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct RoutingConfig {
    /// `default_backend`: the backend for hosts not in `hosts`, and for legacy pings. Default: the first
    /// `[[backend]]`.
    pub default_backend: Option<String>,
    /// `[routing.hosts]`: handshake host → backend name. Keys are matched after the Forge marker and one
    /// trailing dot are stripped and ASCII is lowercased. Default: empty.
    pub hosts: BTreeMap<String, String>,
}

/// Who authenticates players.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[serde(rename_all = "lowercase")]
#[non_exhaustive]
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

impl std::fmt::Display for AuthMode {
    /// The configuration's spelling: `passthrough`, `offline`, `online`.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Self::Passthrough => "passthrough",
            Self::Offline => "offline",
            Self::Online => "online",
        })
    }
}

/// `[auth]`.
#[derive(Clone, Debug, Deserialize, PartialEq, Eq)]
#[serde(deny_unknown_fields, default)]
#[non_exhaustive]
pub struct AuthConfig {
    /// `mode`: `"passthrough"` (default), `"offline"` or `"online"`.
    pub mode: AuthMode,
    /// `session_server`: base URL of the session server for `online` mode (`https://`, or `http://` for a
    /// local stand-in). Default `https://sessionserver.mojang.com`.
    pub session_server: String,
    /// `session_timeout_seconds`: the whole `hasJoined` request. Default 10 seconds.
    pub session_timeout_seconds: u64,
}

impl Default for AuthConfig {
    fn default() -> Self {
        Self {
            mode: AuthMode::default(),
            session_server: "https://sessionserver.mojang.com".into(),
            session_timeout_seconds: 10,
        }
    }
}
