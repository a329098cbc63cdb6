//! Listeners, the accept loops, connection caps and graceful shutdown (the shape of mini-redis's server).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::{Buf, BytesMut};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio::time::{timeout_at, Instant};
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::auth::OnlineAuth;
use crate::config::{AuthMode, Config, Forwarding, LimitsConfig, ListenerConfig, Transport};
use crate::limits::{HandshakeSlot, HandshakeSlots, LogLimiter};
use crate::relay::{relay_tcp, Direction};
use crate::session::{self, shutdown_disconnect_frame, ConnInfo, Finish, Player, RelayReport, RelayStart};
use crate::tls::{ReloadingCert, Tls, TLS_LIBRARY, TLS_VERSIONS};
use crate::ws::{accept_upgrade, WsPlayer, WsSettings};

/// How long an orderly close keeps reading (and discarding) after sending FIN or a WebSocket Close, so a
/// final message is not lost to a reset when the peer still had bytes in flight.
pub(crate) const LINGER: Duration = Duration::from_secs(1);

/// Pause after a failed `accept` (for example out of file descriptors) before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
pub enum ServerError {
    /// The configuration is invalid.
    #[error(transparent)]
    Config(#[from] crate::config::ConfigError),
    /// A listener could not bind its address.
    #[error("cannot listen on {transport} {bind}: {source}")]
    Bind {
        /// The listener's transport.
        transport: Transport,
        /// The address it tried.
        bind: SocketAddr,
        /// The I/O error.
        source: io::Error,
    },
    /// A `wss` listener's certificate or key could not be loaded.
    #[error(transparent)]
    Tls(#[from] crate::tls::TlsError),
    /// Online mode could not start (no RSA key pair).
    #[error(transparent)]
    Auth(#[from] crate::auth::AuthError),
}

/// A backend as the sessions see it.
#[derive(Clone, Debug)]
pub(crate) struct Backend {
    pub(crate) name: String,
    pub(crate) address: String,
    pub(crate) forwarding: Forwarding,
    /// Sent as the `bungeeguard-token` property with `bungeecord` forwarding.
    pub(crate) forwarding_secret: Option<String>,
}

/// State shared by every session.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) limits: LimitsConfig,
    pub(crate) auth: AuthMode,
    /// Key pair and session-server client, in `online` mode.
    pub(crate) online: Option<Arc<OnlineAuth>>,
    backends: Vec<Backend>,
    routes: HashMap<String, usize>,
    default_backend: usize,
    pub(crate) bad_input_log: LogLimiter,
    limit_log: LogLimiter,
    /// Session-server failures (online mode), logged at most once per 10 s.
    pub(crate) session_server_log: LogLimiter,
    conn_limit: Arc<Semaphore>,
    handshaking: Arc<HandshakeSlots>,
    next_id: AtomicU64,
    /// WebSocket messages received from players (every listener).
    pub(crate) ws_messages_in: AtomicU64,
    /// WebSocket messages sent to players (every listener).
    pub(crate) ws_messages_out: AtomicU64,
}

impl Shared {
    fn new(config: &Config, online: Option<Arc<OnlineAuth>>) -> Self {
        let backends: Vec<Backend> = config
            .backends
            .iter()
            .map(|b| Backend {
                name: b.name.clone(),
                address: b.address.clone(),
                forwarding: b.forwarding,
                forwarding_secret: b.forwarding_secret.clone(),
            })
            .collect();
        let index = |name: &str| backends.iter().position(|b| b.name == name);
        let routes = config
            .routing
            .hosts
            .iter()
            .filter_map(|(host, name)| Some((moonbridge_protocol::handshake::routing_key(host), index(name)?)))
            .collect();
        let default_backend = config.default_backend_name().and_then(index).unwrap_or(0);
        Self {
            limits: config.limits.clone(),
            auth: config.auth.mode,
            online,
            routes,
            default_backend,
            backends,
            bad_input_log: LogLimiter::new(10, Duration::from_secs(10)),
            limit_log: LogLimiter::new(1, Duration::from_secs(10)),
            session_server_log: LogLimiter::new(1, Duration::from_secs(10)),
            conn_limit: Arc::new(Semaphore::new(config.limits.max_connections)),
            handshaking: HandshakeSlots::new(config.limits.max_handshaking),
            next_id: AtomicU64::new(1),
            ws_messages_in: AtomicU64::new(0),
            ws_messages_out: AtomicU64::new(0),
        }
    }

    /// The backend for a routing key (see [`moonbridge_protocol::handshake::routing_key`]).
    pub(crate) fn route(&self, key: &str) -> Option<&Backend> {
        let i = self.routes.get(key).copied().unwrap_or(self.default_backend);
        self.backends.get(i)
    }

    /// The backend legacy pings go to (`None` only if the configuration had no backend, which validation
    /// refuses).
    pub(crate) fn default_backend(&self) -> Option<&Backend> {
        self.backends.get(self.default_backend).or_else(|| self.backends.first())
    }
}

/// A point-in-time view of the server's load and counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerStats {
    /// Open player connections (every stage).
    pub connections: usize,
    /// Connections still in the handshake stage (TLS, HTTP upgrade, Minecraft handshake).
    pub handshaking: usize,
    /// WebSocket messages received from players since start.
    pub ws_messages_in: u64,
    /// WebSocket messages sent to players since start.
    pub ws_messages_out: u64,
    /// Successful certificate reloads (every `wss` listener).
    pub tls_reloads: u64,
    /// Certificate reloads refused because the new files were bad (the old certificate stayed).
    pub tls_reload_failures: u64,
}

/// How a listener accepts players.
enum Kind {
    Tcp { proxy_protocol: bool, trusted: Vec<ipnet::IpNet> },
    Ws(WsSettings),
    Wss(WsSettings, Tls),
}

struct BoundListener {
    transport: Transport,
    listener: TcpListener,
    kind: Arc<Kind>,
    banner: String,
}

/// A proxy with every listener bound, ready to [`Server::run`].
pub struct Server {
    listeners: Vec<BoundListener>,
    shared: Arc<Shared>,
    certs: Vec<Arc<ReloadingCert>>,
    max_connections: usize,
}

fn kind_of(l: &ListenerConfig, limits: &LimitsConfig) -> Result<Kind, ServerError> {
    let ws = || WsSettings {
        path: l.path().to_owned(),
        trusted: l.trusted_networks(),
        real_ip_header: l.real_ip_header(),
        ping_interval: l.ping_interval(),
        max_message_bytes: limits.max_ws_message_bytes,
    };
    Ok(match l.transport {
        Transport::Tcp => Kind::Tcp { proxy_protocol: l.proxy_protocol, trusted: l.trusted_networks() },
        Transport::Ws => Kind::Ws(ws()),
        Transport::Wss => {
            let (Some(cert), Some(key)) = (&l.tls_cert, &l.tls_key) else {
                return Err(crate::config::ConfigError::Invalid(vec![crate::config::ConfigProblem {
                    key: "listener.tls_cert".into(),
                    message: "is required for a wss listener".into(),
                }])
                .into());
            };
            Kind::Wss(ws(), Tls::new(cert, key)?)
        }
    })
}

fn banner(l: &ListenerConfig, addr: SocketAddr) -> String {
    let mut b = format!("listening {} {addr}", l.transport);
    match l.transport {
        Transport::Tcp => {
            if l.proxy_protocol {
                b.push_str(" proxy_protocol=v1,v2");
            }
        }
        Transport::Ws | Transport::Wss => {
            b.push_str(&format!(" path={}", l.path()));
            if l.transport == Transport::Wss {
                b.push_str(&format!(" tls={TLS_LIBRARY} versions={TLS_VERSIONS} alpn=http/1.1"));
            }
            match l.ping_interval() {
                Some(i) => b.push_str(&format!(" ping={}s", i.as_secs())),
                None => b.push_str(" ping=off"),
            }
            if !l.trusted_proxies.is_empty() {
                b.push_str(&format!(" real_ip={} trusted={}", l.real_ip_header().name(), l.trusted_proxies.join(",")));
            }
        }
    }
    b
}

impl Server {
    /// Validates `config`, loads certificates and binds every listener.
    ///
    /// # Errors
    /// [`ServerError::Config`] for an invalid configuration, [`ServerError::Tls`] for unusable certificate
    /// files, [`ServerError::Bind`] when an address is taken, [`ServerError::Auth`] when online mode cannot
    /// make its key pair.
    pub async fn bind(config: &Config) -> Result<Self, ServerError> {
        config.validate()?;
        let online = match config.auth.mode {
            AuthMode::Online => {
                let (url, secs) = (config.auth.session_server.clone(), config.auth.session_timeout_seconds);
                // RSA key generation takes tens of milliseconds: keep it off the runtime's workers.
                let made = tokio::task::spawn_blocking(move || OnlineAuth::new(&url, Duration::from_secs(secs))).await;
                let auth = made.map_err(|e| crate::auth::AuthError::Key(e.to_string()))??;
                info!(
                    session_server = %config.auth.session_server,
                    "online mode: players are authenticated by the proxy (RSA-{} key pair made)",
                    crate::auth::RSA_BITS
                );
                Some(Arc::new(auth))
            }
            AuthMode::Passthrough | AuthMode::Offline => None,
        };
        if online.is_some() {
            for b in config.backends.iter().filter(|b| b.forwarding != Forwarding::Bungeecord) {
                warn!(
                    "online mode: backend {} has forwarding = {:?}, so it does not receive the verified UUIDs and \
                     skins (only forwarding = \"bungeecord\" carries them)",
                    b.name, b.forwarding
                );
            }
        }
        let mut listeners = Vec::with_capacity(config.listeners.len());
        let mut certs = Vec::new();
        for l in &config.listeners {
            let kind = kind_of(l, &config.limits)?;
            if let Kind::Wss(_, tls) = &kind {
                certs.push(Arc::clone(&tls.cert));
            }
            let listener = TcpListener::bind(l.bind).await.map_err(|source| ServerError::Bind {
                transport: l.transport,
                bind: l.bind,
                source,
            })?;
            let addr = listener.local_addr().unwrap_or(l.bind);
            listeners.push(BoundListener {
                transport: l.transport,
                listener,
                kind: Arc::new(kind),
                banner: banner(l, addr),
            });
        }
        Ok(Self {
            listeners,
            shared: Arc::new(Shared::new(config, online)),
            certs,
            max_connections: config.limits.max_connections,
        })
    }

    /// The bound address of each listener, in configuration order (useful with port 0).
    pub fn local_addrs(&self) -> Vec<(Transport, SocketAddr)> {
        self.listeners.iter().filter_map(|l| l.listener.local_addr().ok().map(|a| (l.transport, a))).collect()
    }

    /// A handle that reads the server's load while it runs.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle {
            shared: Arc::clone(&self.shared),
            certs: self.certs.clone(),
            max_connections: self.max_connections,
        }
    }

    /// Accepts players until `shutdown` completes, then stops accepting, disconnects every player with a
    /// message (or WebSocket close 1001) and returns once they are gone or `shutdown_grace_seconds` passed.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let token = CancellationToken::new();
        let tracker = TaskTracker::new();
        for l in self.listeners {
            info!("{}", l.banner);
            if let Kind::Wss(_, tls) = &*l.kind {
                tracker.spawn(Tls::watch(Arc::clone(&tls.cert), token.clone()));
            }
            tracker.spawn(accept_loop(l, Arc::clone(&self.shared), token.clone(), tracker.clone()));
        }
        shutdown.await;
        let open = self.max_connections - self.shared.conn_limit.available_permits();
        info!(sessions = open, "shutting down: no longer accepting, disconnecting players");
        token.cancel();
        tracker.close();
        let grace = self.shared.limits.shutdown_grace();
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            warn!("shutdown grace period of {}s over; closing the remaining connections", grace.as_secs());
        } else {
            info!("shutdown complete");
        }
    }
}

/// Reads a running server's load.
#[derive(Clone, Debug)]
pub struct StatsHandle {
    shared: Arc<Shared>,
    certs: Vec<Arc<ReloadingCert>>,
    max_connections: usize,
}

impl StatsHandle {
    /// Current load and counters.
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            connections: self.max_connections - self.shared.conn_limit.available_permits(),
            handshaking: self.shared.handshaking.in_use(),
            ws_messages_in: self.shared.ws_messages_in.load(Ordering::Relaxed),
            ws_messages_out: self.shared.ws_messages_out.load(Ordering::Relaxed),
            tls_reloads: self.certs.iter().map(|c| c.reloads.load(Ordering::Relaxed)).sum(),
            tls_reload_failures: self.certs.iter().map(|c| c.reload_failures.load(Ordering::Relaxed)).sum(),
        }
    }
}

async fn accept_loop(l: BoundListener, shared: Arc<Shared>, token: CancellationToken, tracker: TaskTracker) {
    loop {
        let accepted = tokio::select! {
            r = l.listener.accept() => r,
            () = token.cancelled() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                if let Some(suppressed) = shared.limit_log.allow() {
                    warn!(suppressed, "accept failed: {e}");
                }
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_RETRY) => continue,
                    () = token.cancelled() => return,
                }
            }
        };
        let Ok(permit) = Arc::clone(&shared.conn_limit).try_acquire_owned() else {
            if let Some(suppressed) = shared.limit_log.allow() {
                warn!(suppressed, client = %peer.ip(), "max_connections ({}) reached: closing new connection", shared.limits.max_connections);
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (slot, evicted) = shared.handshaking.enter();
        if evicted {
            if let Some(suppressed) = shared.limit_log.allow() {
                warn!(
                    suppressed,
                    "max_handshaking ({}) reached: closed the connection waiting longest in the handshake",
                    shared.limits.max_handshaking
                );
            }
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let span = info_span!("conn", id, peer = %peer, via = %l.transport);
        let conn = Conn { shared: Arc::clone(&shared), slot, token: token.clone(), peer };
        let kind = Arc::clone(&l.kind);
        tracker.spawn(
            async move {
                let _permit = permit;
                conn.serve(stream, &kind).await;
            }
            .instrument(span),
        );
    }
}

/// A freshly accepted connection: the transport setup (PROXY header, TLS, HTTP upgrade) runs under the same
/// handshake deadline and slot as the Minecraft handshake that follows.
struct Conn {
    shared: Arc<Shared>,
    slot: HandshakeSlot,
    token: CancellationToken,
    peer: SocketAddr,
}

/// What a transport setup produced.
enum Setup<P> {
    Ready(P, SocketAddr),
    Failed(String),
}

impl Conn {
    async fn serve(self, stream: TcpStream, kind: &Kind) {
        let deadline = Instant::now() + self.shared.limits.handshake_timeout();
        let (peer, shared) = (self.peer, Arc::clone(&self.shared));
        // Each transport's session future is boxed on its own, so a task holds only the state of its own
        // transport (a TLS session is several KiB larger than a TCP one).
        match kind {
            Kind::Tcp { proxy_protocol, trusted } => {
                Box::pin(self.run(deadline, tcp_setup(stream, peer, *proxy_protocol, trusted))).await;
            }
            Kind::Ws(settings) => Box::pin(self.run(deadline, ws_setup(stream, peer, settings, shared))).await,
            Kind::Wss(settings, tls) => {
                Box::pin(self.run(deadline, wss_setup(stream, peer, settings, tls, shared))).await;
            }
        }
    }

    async fn run<P: Player>(self, deadline: Instant, setup: impl Future<Output = Setup<P>>) {
        let outcome = tokio::select! {
            r = timeout_at(deadline, setup) => r.unwrap_or_else(|_| Setup::Failed(format!(
                "handshake not complete within {}s", self.shared.limits.handshake_timeout_seconds))),
            () = self.slot.evicted() => Setup::Failed("evicted: too many connections in the handshake stage".into()),
            () = self.token.cancelled() => Setup::Failed("proxy shutdown".into()),
        };
        match outcome {
            Setup::Ready(player, client) => {
                let info = ConnInfo { client };
                session::serve(player, info, self.shared, self.slot, self.token, deadline).await;
            }
            Setup::Failed(reason) => {
                if let Some(suppressed) = self.shared.bad_input_log.allow() {
                    info!(client = %self.peer.ip(), suppressed, "connection closed before the handshake: {reason}");
                }
            }
        }
    }
}

async fn tcp_setup(
    mut stream: TcpStream,
    peer: SocketAddr,
    proxy_protocol: bool,
    trusted: &[ipnet::IpNet],
) -> Setup<TcpPlayer> {
    if !proxy_protocol {
        return Setup::Ready(TcpPlayer { stream, prefix: BytesMut::new() }, peer);
    }
    let peer_ip = peer.ip().to_canonical();
    if !trusted.is_empty() && !trusted.iter().any(|n| n.contains(&peer_ip)) {
        return Setup::Failed(format!("{peer_ip} is not in trusted_proxies and may not send a PROXY header"));
    }
    match crate::proxy_header::read_header(&mut stream).await {
        Ok((addr, prefix)) => Setup::Ready(TcpPlayer { stream, prefix }, addr.unwrap_or(peer)),
        Err(e) => Setup::Failed(e.to_string()),
    }
}

async fn ws_setup(
    mut stream: TcpStream,
    peer: SocketAddr,
    settings: &WsSettings,
    shared: Arc<Shared>,
) -> Setup<WsPlayer<TcpStream>> {
    match accept_upgrade(&mut stream, settings, peer).await {
        Ok(up) => {
            let client = up.client;
            Setup::Ready(WsPlayer::new(stream, up.leftover, settings, shared).await, client)
        }
        Err(e) => Setup::Failed(format!("WebSocket upgrade refused: {e}")),
    }
}

async fn wss_setup(
    stream: TcpStream,
    peer: SocketAddr,
    settings: &WsSettings,
    tls: &Tls,
    shared: Arc<Shared>,
) -> Setup<WsPlayer<tokio_rustls::server::TlsStream<TcpStream>>> {
    let mut tls_stream = match tls.acceptor.accept(stream).await {
        Ok(s) => s,
        Err(e) => return Setup::Failed(format!("TLS handshake failed: {e}")),
    };
    {
        let (_, conn) = tls_stream.get_ref();
        debug!(
            sni = conn.server_name().unwrap_or("-"),
            version = ?conn.protocol_version(),
            suite = ?conn.negotiated_cipher_suite().map(|s| s.suite()),
            "TLS established"
        );
    }
    match accept_upgrade(&mut tls_stream, settings, peer).await {
        Ok(up) => {
            let client = up.client;
            Setup::Ready(WsPlayer::new(tls_stream, up.leftover, settings, shared).await, client)
        }
        Err(e) => Setup::Failed(format!("WebSocket upgrade refused: {e}")),
    }
}

/// A player on a plain TCP connection.
pub(crate) struct TcpPlayer {
    stream: TcpStream,
    /// Bytes already read after a PROXY header, served before the socket.
    prefix: BytesMut,
}

impl Player for TcpPlayer {
    async fn read_some(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        if !self.prefix.is_empty() {
            let n = self.prefix.len();
            buf.extend_from_slice(&self.prefix);
            self.prefix.advance(n);
            return Ok(n);
        }
        self.stream.read_buf(buf).await
    }

    async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.stream.write_all(bytes).await
    }

    async fn finish(&mut self, how: Finish) {
        let _ = self.stream.shutdown().await;
        if how != Finish::ProtocolError {
            // Lingering close: read until the player closes too (or briefly), so a reset cannot discard the
            // message just sent.
            crate::relay::discard_until_eof(&self.stream, LINGER).await;
        }
    }

    async fn relay(&mut self, backend: TcpStream, start: RelayStart<'_>) -> RelayReport {
        let shutdown = start.shutdown;
        let (mut up, mut down) = Direction::pair(start);
        let end = relay_tcp(&self.stream, &backend, &mut up, &mut down, shutdown, &shutdown_disconnect_frame()).await;
        RelayReport { up: up.bytes, down: down.bytes, end }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A session's task is allocated at its largest state for its whole life, so rarely used states (online
    /// login, status, legacy ping, the AES key schedules) are boxed. This keeps an idle TCP session small: the
    /// bound is what `idle_rss` measures per session (about 6 KiB) minus the sockets' kernel-side share.
    #[tokio::test]
    async fn session_tasks_stay_small() {
        let config = Config::default();
        let shared = Arc::new(Shared::new(&config, None));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = listener.local_addr().unwrap();
        let stream = TcpStream::connect(peer).await.unwrap();
        let (slot, _) = shared.handshaking.enter();
        let conn = Conn { shared: Arc::clone(&shared), slot, token: CancellationToken::new(), peer };
        let deadline = Instant::now();
        let tcp = conn.run(deadline, tcp_setup(stream, peer, false, &[]));
        let size = std::mem::size_of_val(&tcp);
        assert!(size < 5 * 1024, "a TCP session task is {size} bytes");
    }
}
