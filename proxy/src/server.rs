//! Listeners, the accept loops, connection caps and graceful shutdown (the shape of mini-redis's server).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use moonbridge_protocol::ws as carriage;
use prometheus::IntCounter;
use tokio::io::{AsyncRead, AsyncWrite};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{debug, info, info_span, warn, Instrument};

use crate::auth::OnlineAuth;
use crate::config::{
    AuthMode, Config, Forwarding, Listener, ListenerKind, RuntimeConfig, RuntimeMode, Settings, Transport, WsSettings,
};
use crate::limits::{HandshakeSlot, LogLimiter};
use crate::metrics::{Metrics, StageGauge};
use crate::rate::Bucket;
use crate::relay::resume::ResumeTable;
use crate::relay::ws::WsLink;
use crate::relay::ws_resume::deliver_resumption;
use crate::session::{self, within_handshake, ConnInfo, HandshakeCut, Player};
use crate::state::{Live, ProxyState};
use crate::tls::{Tls, TLS_LIBRARY, TLS_VERSIONS};
use crate::workers::Workers;
use crate::ws::upgrade::{accept_upgrade, Carriages, UpgradeError, Upgraded};

/// Listen backlog of the player listeners, in connections: the kernel queues this many completed handshakes
/// the proxy has not accepted yet (a reconnect storm after a restart), capped by `net.core.somaxconn`. Rust's
/// standard library and tokio's `TcpListener::bind` ask for 128.
pub(crate) const LISTEN_BACKLOG: u32 = 1024;

/// A player listener on `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR` on Unix, as `TcpListener::bind`
/// sets it, so a restart can bind while old connections are in TIME_WAIT).
fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Pause after a failed `accept` (for example out of file descriptors) before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// Why the server could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
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
    /// The `[metrics]` listener could not bind its address.
    #[error("cannot listen on metrics.bind {bind}: {source}")]
    MetricsBind {
        /// The address it tried.
        bind: SocketAddr,
        /// The I/O error.
        source: io::Error,
    },
    /// The metrics could not be set up (a defect: their definitions are constants).
    #[error("metrics: {0}")]
    Metrics(String),
}

/// Why a reload was refused (the running configuration stays in force).
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ReloadError {
    /// The new configuration is invalid (every problem, one per key).
    #[error(transparent)]
    Invalid(#[from] crate::config::ConfigError),
    /// The new configuration changes what only a restart can change.
    #[error("{} changed, which needs a restart (listeners are bound and online mode's key made at start)", .0.join(", "))]
    NeedsRestart(Vec<&'static str>),
    /// The server was started from [`Settings`] without its [`Config`], so there is nothing to compare with.
    #[error("this server was started without a configuration to compare with; restart to apply a new one")]
    NoBaseline,
}

/// A point-in-time view of the server's load and counters.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[non_exhaustive]
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

/// How a bound listener accepts players.
enum Accept {
    Tcp { proxy_header: Option<Option<crate::trusted::TrustedProxies>> },
    Ws(WsSettings),
    Wss(WsSettings, Tls),
}

struct BoundListener {
    transport: Transport,
    listener: TcpListener,
    accept: Arc<Accept>,
    banner: String,
    /// `moonbridge_connections_accepted_total` of this transport.
    accepted: IntCounter,
}

/// A proxy with every listener bound, ready to [`Server::run`].
pub struct Server {
    listeners: Vec<BoundListener>,
    state: Arc<ProxyState>,
    /// The configuration it started from (for reloads), when it was started from one.
    config: Option<Config>,
    /// The `[metrics]` listener, when configured.
    ops: Option<TcpListener>,
    /// `[runtime]`.
    runtime: RuntimeConfig,
}

/// The startup line of a listener, in the configuration's own terms.
fn banner(l: &Listener, addr: SocketAddr) -> String {
    let mut b = format!("listening {} {addr}", l.transport());
    match &l.kind {
        ListenerKind::Tcp { proxy_header } => {
            if proxy_header.is_some() {
                b.push_str(" proxy_protocol=v1,v2");
            }
        }
        ListenerKind::Ws(ws) | ListenerKind::Wss(ws, _) => {
            b.push_str(&format!(" path={}", ws.path));
            if matches!(l.kind, ListenerKind::Wss(..)) {
                b.push_str(&format!(" tls={TLS_LIBRARY} versions={TLS_VERSIONS} alpn=http/1.1"));
            }
            match ws.ping_interval {
                Some(i) => b.push_str(&format!(" ping={}s", i.as_secs())),
                None => b.push_str(" ping=off"),
            }
            if !ws.trusted.is_empty() {
                b.push_str(&format!(" real_ip={} trusted={}", ws.real_ip_header.name(), ws.trusted));
            }
        }
    }
    b
}

impl Server {
    /// Checks `config`, loads certificates and binds every listener.
    ///
    /// # Errors
    /// [`ServerError::Config`] for an invalid configuration, [`ServerError::Tls`] for unusable certificate
    /// files, [`ServerError::Bind`] when an address is taken, [`ServerError::Auth`] when online mode cannot
    /// make its key pair.
    pub async fn bind(config: &Config) -> Result<Self, ServerError> {
        let mut server = Self::bind_settings(config.settings()?).await?;
        server.config = Some(config.clone());
        Ok(server)
    }

    /// Binds every listener of checked [`Settings`].
    ///
    /// # Errors
    /// As [`Server::bind`], except [`ServerError::Config`].
    pub async fn bind_settings(settings: Settings) -> Result<Self, ServerError> {
        let online = match settings.auth.mode {
            AuthMode::Online => {
                let (url, secs) = (settings.auth.session_server.clone(), settings.auth.session_timeout_seconds);
                // RSA key generation takes tens of milliseconds: keep it off the runtime's workers.
                let made = tokio::task::spawn_blocking(move || OnlineAuth::new(&url, Duration::from_secs(secs))).await;
                let auth = made.map_err(crate::auth::AuthError::Task)??;
                info!(
                    session_server = %settings.auth.session_server,
                    "online mode: players are authenticated by the proxy (RSA-{} key pair made)",
                    crate::auth::RSA_BITS
                );
                Some(Arc::new(auth))
            }
            AuthMode::Passthrough | AuthMode::Offline => None,
        };
        if online.is_some() {
            for b in settings.backends.iter().filter(|b| b.forwarding != Forwarding::Bungeecord) {
                warn!(
                    "online mode: backend {} has forwarding = \"{}\", so it does not receive the verified UUIDs and \
                     skins (only forwarding = \"bungeecord\" carries them)",
                    b.name, b.forwarding
                );
            }
        }
        let metrics = Arc::new(Metrics::new().map_err(|e| ServerError::Metrics(e.to_string()))?);
        let mut listeners = Vec::with_capacity(settings.listeners.len());
        for l in &settings.listeners {
            let accept = match &l.kind {
                ListenerKind::Tcp { proxy_header } => Accept::Tcp { proxy_header: proxy_header.clone() },
                ListenerKind::Ws(ws) => Accept::Ws(ws.clone()),
                ListenerKind::Wss(ws, files) => Accept::Wss(ws.clone(), Tls::new(&files.cert, &files.key, &metrics)?),
            };
            let listener = listen(l.bind).map_err(|source| ServerError::Bind {
                transport: l.transport(),
                bind: l.bind,
                source,
            })?;
            let addr = listener.local_addr().unwrap_or(l.bind);
            listeners.push(BoundListener {
                transport: l.transport(),
                listener,
                accept: Arc::new(accept),
                banner: banner(l, addr),
                accepted: metrics.accepted(l.transport()),
            });
        }
        let ops = match settings.metrics.bind {
            Some(bind) => {
                Some(TcpListener::bind(bind).await.map_err(|source| ServerError::MetricsBind { bind, source })?)
            }
            None => None,
        };
        let runtime = settings.runtime.clone();
        Ok(Self { listeners, state: Arc::new(ProxyState::new(&settings, online, metrics)), ops, config: None, runtime })
    }

    /// A handle that applies a new configuration while the server runs (what SIGHUP does).
    pub fn reload_handle(&self) -> ReloadHandle {
        ReloadHandle { state: Arc::clone(&self.state), config: Arc::new(std::sync::Mutex::new(self.config.clone())) }
    }

    /// The bound address of the `[metrics]` listener, when there is one (useful with port 0).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.ops.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The bound address of each listener, in configuration order (useful with port 0).
    pub fn local_addrs(&self) -> Vec<(Transport, SocketAddr)> {
        self.listeners.iter().filter_map(|l| l.listener.local_addr().ok().map(|a| (l.transport, a))).collect()
    }

    /// A handle that reads the server's load while it runs.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle { state: Arc::clone(&self.state) }
    }

    /// Accepts players until `shutdown` completes, then stops accepting, disconnects every player with a
    /// message (or WebSocket close 1001) and returns once they are gone or `shutdown_grace_seconds` passed.
    ///
    /// In `[runtime] mode = "thread-per-core"` sessions run on worker threads this starts (and stops before
    /// returning); the accept loops run on the caller's runtime, which then needs only one thread. In
    /// `"multi-thread"` mode everything runs on the caller's runtime. If the workers cannot start, sessions
    /// run on the caller's runtime, with a warning.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let token = CancellationToken::new();
        let tracker = TaskTracker::new();
        let workers = match self.runtime.mode {
            RuntimeMode::ThreadPerCore => match Workers::start(self.runtime.worker_count()) {
                Ok(w) => {
                    info!("runtime thread-per-core: {} session worker(s)", w.len());
                    Some(Arc::new(w))
                }
                Err(e) => {
                    warn!("cannot start the session workers ({e}); sessions run on the main runtime");
                    None
                }
            },
            RuntimeMode::MultiThread => {
                info!("runtime multi-thread: tokio's work-stealing workers");
                None
            }
        };
        // The operations listener outlives the player listeners: during the shutdown grace `/readyz` says 503.
        let ops_stop = CancellationToken::new();
        let ops = self.ops.map(|listener| {
            if let Ok(addr) = listener.local_addr() {
                info!("metrics on http://{addr}/metrics (health: /healthz, /readyz)");
            }
            tokio::spawn(crate::ops::serve(listener, Arc::clone(&self.state), ops_stop.clone()))
        });
        for l in self.listeners {
            info!("{}", l.banner);
            if let Accept::Wss(_, tls) = &*l.accept {
                tracker.spawn(Tls::watch(Arc::clone(&tls.cert), token.clone()));
            }
            tracker.spawn(accept_loop(l, Arc::clone(&self.state), token.clone(), tracker.clone(), workers.clone()));
        }
        shutdown.await;
        info!(sessions = self.state.open_connections(), "shutting down: no longer accepting, disconnecting players");
        self.state.draining.store(true, Ordering::Relaxed);
        token.cancel();
        tracker.close();
        let grace = self.state.live().limits.shutdown_grace();
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            warn!("shutdown grace period of {}s over; closing the remaining connections", grace.as_secs());
        } else {
            info!("shutdown complete");
        }
        ops_stop.cancel();
        if let Some(ops) = ops {
            let _ = ops.await;
        }
        if let Some(workers) = workers.and_then(|w| Arc::try_unwrap(w).ok()) {
            workers.stop().await;
        }
    }
}

/// Applies a new configuration to a running server: backends, routes, forwarding, `[limits]`, `[status]`
/// and `[rate_limits]` change for every session that starts afterwards; connected players keep their
/// sessions; `[compression]` changes for connections accepted afterwards. Listeners, `[metrics]`, `[auth]` and
/// `[runtime]` need a restart.
#[derive(Clone, Debug)]
pub struct ReloadHandle {
    state: Arc<ProxyState>,
    config: Arc<std::sync::Mutex<Option<Config>>>,
}

impl ReloadHandle {
    /// Checks `config` whole and applies it, or refuses it and changes nothing. Returns a one-line summary.
    ///
    /// # Errors
    /// [`ReloadError::Invalid`] when it does not validate, [`ReloadError::NeedsRestart`] when it changes
    /// listeners, `[metrics]`, `[auth]` or `[runtime]`, [`ReloadError::NoBaseline`] for a server started from `Settings`.
    pub fn reload(&self, config: &Config) -> Result<String, ReloadError> {
        let mut current = self.config.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let Some(old) = current.as_ref() else { return Err(ReloadError::NoBaseline) };
        let mut restart = Vec::new();
        if config.listeners != old.listeners {
            restart.push("[[listener]]");
        }
        if config.metrics != old.metrics {
            restart.push("[metrics]");
        }
        if config.auth != old.auth {
            restart.push("[auth]");
        }
        if config.runtime != old.runtime {
            restart.push("[runtime]");
        }
        if !restart.is_empty() {
            return Err(ReloadError::NeedsRestart(restart));
        }
        let settings = config.settings()?;
        let previous = self.state.live();
        let live = crate::state::Live::new(&settings, &self.state.metrics, Some(&previous));
        let kept = live.backends().iter().filter(|b| previous.backends().iter().any(|p| p.is(b))).count();
        let summary = format!(
            "{} backend(s) ({} unchanged), {} host route(s), default backend {}",
            live.backends().len(),
            kept,
            settings.routes.hosts.len(),
            live.default_backend().map_or("-", |b| b.name.as_str()),
        );
        self.state.replace_live(live);
        *current = Some(config.clone());
        Ok(summary)
    }
}

/// Reads a running server's load.
#[derive(Clone, Debug)]
pub struct StatsHandle {
    state: Arc<ProxyState>,
}

impl StatsHandle {
    /// Current load and counters.
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            connections: self.state.open_connections(),
            handshaking: self.state.handshaking.in_use(),
            ws_messages_in: self.state.metrics.ws.messages_in.get(),
            ws_messages_out: self.state.metrics.ws.messages_out.get(),
            tls_reloads: self.state.metrics.tls_reloads_ok.get(),
            tls_reload_failures: self.state.metrics.tls_reloads_kept.get(),
        }
    }
}

/// Accepts on one listener until `token` is cancelled; each connection's session runs on `workers` when there
/// are (thread-per-core), else on this runtime.
async fn accept_loop(
    l: BoundListener,
    state: Arc<ProxyState>,
    token: CancellationToken,
    tracker: TaskTracker,
    workers: Option<Arc<Workers>>,
) {
    loop {
        let accepted = tokio::select! {
            r = l.listener.accept() => r,
            () = token.cancelled() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                if let Some(suppressed) = state.limit_log.allow() {
                    warn!(suppressed, "accept failed: {e}");
                }
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_RETRY) => continue,
                    () = token.cancelled() => return,
                }
            }
        };
        l.accepted.inc();
        let Some(permit) = state.conn_limit.try_acquire() else {
            state.metrics.refused("max_connections");
            if let Some(suppressed) = state.limit_log.allow() {
                warn!(suppressed, client = %peer.ip(), "max_connections ({}) reached: closing new connection", state.live().limits.max_connections);
            }
            continue;
        };
        let _ = stream.set_nodelay(true);
        let (slot, evicted) = state.handshaking.enter();
        if evicted {
            if let Some(suppressed) = state.limit_log.allow() {
                warn!(
                    suppressed,
                    "max_handshaking ({}) reached: closed the connection waiting longest in the handshake",
                    state.live().limits.max_handshaking
                );
            }
        }
        let id = state.next_id.fetch_add(1, Ordering::Relaxed);
        let span = info_span!("conn", id, peer = %peer, via = %l.transport);
        let stage = state.metrics.stage(l.transport);
        let conn = Conn { state: Arc::clone(&state), slot, token: token.clone(), peer, stage, live: state.live() };
        let accept = Arc::clone(&l.accept);
        let session = move |stream| {
            async move {
                let _permit = permit;
                conn.serve(stream, &accept).await;
            }
            .instrument(span)
        };
        match &workers {
            Some(w) => w.spawn(&tracker, stream, session),
            None => {
                tracker.spawn(session(stream));
            }
        }
    }
}

/// A freshly accepted connection: the transport setup (PROXY header, TLS, HTTP upgrade) runs under the same
/// handshake deadline and slot as the Minecraft handshake that follows.
struct Conn {
    state: Arc<ProxyState>,
    slot: HandshakeSlot,
    token: CancellationToken,
    peer: SocketAddr,
    /// Its place in `moonbridge_sessions` (the handshake stage, to begin with).
    stage: StageGauge,
    /// The configuration it runs on, from accept to end (a reload affects later connections).
    live: Arc<Live>,
}

/// Why a transport setup failed.
#[derive(Debug, thiserror::Error)]
enum SetupError {
    #[error(transparent)]
    Cut(#[from] HandshakeCut),
    #[error(transparent)]
    Tcp(#[from] crate::tcp::TcpSetupError),
    #[error("TLS handshake failed: {0}")]
    Tls(io::Error),
    #[error("WebSocket upgrade refused: {0}")]
    Upgrade(#[from] UpgradeError),
    /// The connection carried a carriage v2 resume request (handed to its session, or refused).
    #[error("resume request: {0}")]
    Resume(&'static str),
}

/// On a carriage v2 connection, a first message that is a resume request is handed to its session (or
/// refused with its close code) and this connection's own setup ends; anything else starts a new session.
async fn resume_or_session<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    mut link: WsLink<S>,
    up: Upgraded,
    table: &ResumeTable,
    metrics: &Metrics,
    log: &LogLimiter,
) -> Result<(WsLink<S>, SocketAddr), SetupError> {
    if up.v2 {
        link.enable_v2();
        if let Some(level) = up.zstd {
            link.enable_zstd(level);
        }
        match link.first_control().await {
            Ok(None) => {}
            Ok(Some(control)) => {
                return Err(SetupError::Resume(deliver_resumption(link, control, table, metrics, log).await));
            }
            Err(_) => {
                link.close(carriage::CLOSE_PROTOCOL_ERROR, "protocol error").await;
                return Err(SetupError::Resume("bad_request"));
            }
        }
    }
    Ok((link, up.client))
}

impl Conn {
    async fn serve(self, stream: TcpStream, accept: &Accept) {
        let live = Arc::clone(&self.live);
        let deadline = Instant::now() + live.limits.handshake_timeout();
        let peer = self.peer;
        let max_message = live.limits.max_ws_message_bytes;
        let write_stall = live.limits.write_stall_timeout();
        let counters = self.state.metrics.ws.clone();
        let metrics = Arc::clone(&self.state.metrics);
        let resume = Arc::clone(&self.state.resume);
        let state = Arc::clone(&self.state);
        let v2 = live.limits.resume_window().is_some();
        let carriages = Carriages { v2, zstd: live.compression.enabled.then_some(live.compression.level) };
        // Each transport's session future is boxed on its own, so a task holds only the state of its own
        // transport (a TLS session is several KiB larger than a TCP one).
        match accept {
            Accept::Tcp { proxy_header } => {
                let setup = async { Ok(crate::tcp::setup(stream, peer, proxy_header.as_ref()).await?) };
                Box::pin(self.run(deadline, setup)).await;
            }
            Accept::Ws(ws) => {
                let setup = async move {
                    let mut stream = stream;
                    let up = accept_upgrade(&mut stream, ws, peer, carriages).await?;
                    let link = WsLink::new(stream, &up.leftover, ws.ping_interval, write_stall, max_message, counters);
                    resume_or_session(link, up, &resume, &metrics, &state.bad_input_log).await
                };
                Box::pin(self.run(deadline, setup)).await;
            }
            Accept::Wss(ws, tls) => {
                let setup = async move {
                    let mut stream = tls.acceptor.accept(stream).await.map_err(SetupError::Tls)?;
                    {
                        let (_, conn) = stream.get_ref();
                        metrics.tls_handshake(match conn.protocol_version() {
                            Some(rustls::ProtocolVersion::TLSv1_3) => "TLSv1.3",
                            Some(rustls::ProtocolVersion::TLSv1_2) => "TLSv1.2",
                            _ => "other",
                        });
                        debug!(
                            sni = conn.server_name().unwrap_or("-"),
                            version = ?conn.protocol_version(),
                            suite = ?conn.negotiated_cipher_suite().map(|s| s.suite()),
                            "TLS established"
                        );
                    }
                    let up = accept_upgrade(&mut stream, ws, peer, carriages).await?;
                    let link = WsLink::new(stream, &up.leftover, ws.ping_interval, write_stall, max_message, counters);
                    resume_or_session(link, up, &resume, &metrics, &state.bad_input_log).await
                };
                Box::pin(self.run(deadline, setup)).await;
            }
        }
    }

    async fn run<P: Player>(self, deadline: Instant, setup: impl Future<Output = Result<(P, SocketAddr), SetupError>>) {
        let limit = self.live.limits.handshake_timeout_seconds;
        let outcome = within_handshake(deadline, limit, &self.slot, &self.token, setup).await;
        match outcome.map_err(SetupError::from).and_then(|r| r) {
            Ok((player, client)) => {
                let Self { state, slot, token, stage, live, .. } = self;
                let rate_limited = !state.rate.allow(&live.rate_limits, client.ip(), Bucket::Connection);
                let info = ConnInfo { client, rate_limited };
                let accepted = session::serve::Accepted { info, state, live, slot, shutdown: token, deadline, stage };
                session::serve::serve(player, accepted).await;
            }
            Err(SetupError::Upgrade(UpgradeError::HealthCheck)) => {}
            Err(SetupError::Resume(outcome)) if outcome != "bad_request" => {}
            Err(reason) => {
                let metrics = &self.state.metrics;
                match &reason {
                    SetupError::Cut(HandshakeCut::Shutdown) => {}
                    SetupError::Cut(HandshakeCut::Timeout(_)) => metrics.handshake_failed("timeout"),
                    SetupError::Cut(HandshakeCut::Evicted) => metrics.handshake_failed("evicted"),
                    SetupError::Tcp(crate::tcp::TcpSetupError::Untrusted(_)) => metrics.refused("untrusted_proxy_peer"),
                    SetupError::Tcp(_) => metrics.handshake_failed("bad_proxy_header"),
                    SetupError::Tls(_) => metrics.handshake_failed("tls"),
                    SetupError::Upgrade(UpgradeError::Closed | UpgradeError::Io(_)) => {
                        metrics.handshake_failed("closed")
                    }
                    SetupError::Upgrade(_) => metrics.handshake_failed("bad_upgrade"),
                    SetupError::Resume(_) => metrics.handshake_failed("bad_frame"),
                }
                if let Some(suppressed) = self.state.bad_input_log.allow() {
                    info!(client = %self.peer.ip(), suppressed, "connection closed before the handshake: {reason}");
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The backlog the kernel reports for a player listener (`ss`, from iproute2: a listening socket's Send-Q
    /// is its backlog) is [`LISTEN_BACKLOG`], or `net.core.somaxconn` when that is lower.
    #[tokio::test]
    async fn player_listeners_ask_for_the_documented_backlog() {
        let l = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = l.local_addr().unwrap().port();
        let out = std::process::Command::new("ss")
            .args(["-Hltn", &format!("sport = :{port}")])
            .output()
            .expect("ss (iproute2) runs");
        let text = String::from_utf8_lossy(&out.stdout);
        // State, Recv-Q, Send-Q, local address, peer address.
        let backlog: u32 = text.split_whitespace().nth(2).and_then(|v| v.parse().ok()).expect("a listener line");
        let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap().trim().parse().unwrap();
        assert_eq!(backlog, LISTEN_BACKLOG.min(somaxconn), "ss said: {text}");
        assert!(backlog > 128, "more than the standard library's 128 (somaxconn {somaxconn})");
    }

    /// A session's task is allocated at its largest state for its whole life, so rarely used states (online
    /// login, status, legacy ping, the AES key schedules) are boxed. This keeps an idle TCP session small: the
    /// bound is what `idle_rss` measures per session (about 6 KiB) minus the sockets' kernel-side share, plus
    /// about 300 bytes for operations (the stage gauge, a byte counter per relay direction, the login outcome,
    /// the session's configuration snapshot for live reload): 5,424 bytes when this bound was last raised.
    #[tokio::test]
    async fn session_tasks_stay_small() {
        let settings = Config::default().settings().unwrap();
        let state = Arc::new(ProxyState::new(&settings, None, Arc::new(Metrics::new().unwrap())));
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let peer = listener.local_addr().unwrap();
        let stream = TcpStream::connect(peer).await.unwrap();
        let (slot, _) = state.handshaking.enter();
        let stage = state.metrics.stage(Transport::Tcp);
        let live = state.live();
        let conn = Conn { state: Arc::clone(&state), slot, token: CancellationToken::new(), peer, stage, live };
        let setup = async { Ok(crate::tcp::setup(stream, peer, None).await?) };
        let tcp = conn.run(Instant::now(), setup);
        let size = std::mem::size_of_val(&tcp);
        // 5,472 bytes before the transfer layer, 5,520 with it (the player's identity kept for later logins,
        // boxed; the transfer relay and its hop boxed too).
        assert!(size < 5 * 1024 + 448, "a TCP session task is {size} bytes");
    }
}
