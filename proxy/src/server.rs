//! The server's lifecycle (the shape of mini-redis's server): binding the listeners, running until a shutdown
//! signal and the graceful drain after it, live reload and the stats handle. Accepting and setting up each
//! connection is the listening room's ([`crate::listen`]).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, warn};

use crate::admin::AdminToken;
use crate::auth::OnlineAuth;
use crate::config::{AuthMode, Config, Forwarding, ListenerKind, RuntimeConfig, RuntimeMode, Settings, Transport};
use crate::listen::{accept_loop, banner, listen, Accept, BoundListener};
use crate::metrics::Metrics;
use crate::network::peer::route_to_redis;
use crate::network::redis::RedisNetwork;
use crate::state::ProxyState;
use crate::tls::Tls;
use crate::workers::Workers;

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
    /// `[network]` could not start (its secret, its Redis URL, its peer address).
    #[error(transparent)]
    Network(#[from] crate::network::NetworkError),
    /// `[metrics] admin_token_file` could not be used.
    #[error(transparent)]
    AdminToken(#[from] crate::admin::TokenError),
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

/// A proxy with every listener bound, ready to [`Server::run`].
pub struct Server {
    listeners: Vec<BoundListener>,
    state: Arc<ProxyState>,
    /// The configuration it started from (for reloads), when it was started from one.
    config: Option<Config>,
    /// The `[metrics]` listener, when configured.
    ops: Option<TcpListener>,
    /// The admin API's token (`[metrics] admin_token_file`), when configured.
    admin: Option<Arc<AdminToken>>,
    /// `[runtime]`.
    runtime: RuntimeConfig,
    /// `[network]`: the network, the instance-link listener and the listeners a carried resume runs with.
    peer: Option<(Arc<RedisNetwork>, TcpListener, Arc<crate::network::peer::Carriers>)>,
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
        let mut carriers = crate::network::peer::Carriers { ws: None, wss: None };
        for l in &settings.listeners {
            let accept = match &l.kind {
                ListenerKind::Tcp { proxy_header } => Accept::Tcp { proxy_header: proxy_header.clone() },
                ListenerKind::Ws(ws) => {
                    carriers.ws.get_or_insert_with(|| ws.clone());
                    Accept::Ws(ws.clone())
                }
                ListenerKind::Wss(ws, files) => {
                    let tls = Tls::new(&files.cert, &files.key, &metrics)?;
                    carriers.wss.get_or_insert_with(|| (ws.clone(), tls.clone()));
                    Accept::Wss(ws.clone(), tls)
                }
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
            Some(bind) => Some(listen(bind).map_err(|source| ServerError::MetricsBind { bind, source })?),
            None => None,
        };
        let runtime = settings.runtime.clone();
        let state = Arc::new(ProxyState::new(&settings, online, Arc::clone(&metrics)));
        let peer = match &settings.network {
            Some(n) => {
                // rediss:// takes rustls' process-wide provider.
                let _ = rustls::crypto::aws_lc_rs::default_provider().install_default();
                let net_metrics = metrics.network().map_err(|e| ServerError::Metrics(e.to_string()))?;
                let listener = listen(n.peer_bind)
                    .map_err(|source| crate::network::NetworkError::PeerBind { bind: n.peer_bind, source })?;
                let bound = listener.local_addr().unwrap_or(n.peer_bind);
                let advertised = match &n.peer_address {
                    // A host name is resolved here, once: what the others read from Redis is an address.
                    Some(a) => resolve_peer_address(a, bound).await?,
                    None if bound.ip().is_unspecified() => route_to_redis(&n.redis_url, bound.port())?,
                    None => bound.to_string(),
                };
                let id = state.resume.instance_id();
                let network =
                    Arc::new(RedisNetwork::new(n.clone(), id, Arc::clone(&state.players), net_metrics, advertised)?);
                state.set_network(Arc::clone(&network) as Arc<dyn crate::network::Network>);
                Some((network, listener, Arc::new(carriers)))
            }
            None => None,
        };
        let admin = match &settings.metrics.admin_token_file {
            Some(path) => {
                let (token, world_readable) = AdminToken::load(path)?;
                if world_readable {
                    warn!(
                        "metrics.admin_token_file {} is readable by every user of this host: chmod 600 it",
                        path.display()
                    );
                }
                Some(Arc::new(token))
            }
            None => None,
        };
        Ok(Self { listeners, state, ops, admin, config: None, runtime, peer })
    }

    /// A handle that applies a new configuration while the server runs (what SIGHUP does).
    pub fn reload_handle(&self) -> ReloadHandle {
        ReloadHandle { state: Arc::clone(&self.state), config: Arc::new(std::sync::Mutex::new(self.config.clone())) }
    }

    /// The bound address of the `[metrics]` listener, when there is one (useful with port 0).
    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.ops.as_ref().and_then(|l| l.local_addr().ok())
    }

    /// The bound address of the `[network]` instance-link listener, when there is one (useful with port 0).
    pub fn peer_addr(&self) -> Option<SocketAddr> {
        self.peer.as_ref().and_then(|(_, l, _)| l.local_addr().ok())
    }

    /// The bound address of each listener, in configuration order (useful with port 0).
    pub fn local_addrs(&self) -> Vec<(Transport, SocketAddr)> {
        self.listeners.iter().filter_map(|l| l.listener.local_addr().ok().map(|a| (l.transport, a))).collect()
    }

    /// A handle that reads the server's load while it runs.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle { state: Arc::clone(&self.state) }
    }

    /// Accepts players until `shutdown` completes (and, in a network drain, until its moves are over: see
    /// [`crate::network`]), then stops accepting, disconnects every player with a
    /// message (or WebSocket close 1001) and returns once they are gone or `shutdown_grace_seconds` passed.
    ///
    /// In `[runtime] mode = "thread-per-core"` sessions run on worker threads this starts (and stops before
    /// returning); the accept loops run on the caller's runtime, which then needs only one thread. In
    /// `"multi-thread"` mode everything runs on the caller's runtime. If the workers cannot start, sessions
    /// run on the caller's runtime, with a warning.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let token = CancellationToken::new();
        // Stops the listeners; `token` stops the sessions (later, after a drain's moves).
        let accepting = CancellationToken::new();
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
            tokio::spawn(crate::ops::serve(listener, Arc::clone(&self.state), self.admin.clone(), ops_stop.clone()))
        });
        tracker.spawn(crate::memory::trim_after_sessions_end(Arc::clone(&self.state), token.clone()));
        // `[network]`: leases and the others' state, and the instance links, until the grace is over (the
        // instance stays in the network while its sessions end).
        let net_stop = CancellationToken::new();
        let mut net_tasks = Vec::new();
        let network = self.peer.as_ref().map(|(net, _, _)| Arc::clone(net));
        if let Some((net, listener, carriers)) = self.peer {
            info!(
                network = %net.config.name,
                instance = %net.id,
                peer_bind = %listener.local_addr().map_or_else(|_| net.config.peer_bind.to_string(), |a| a.to_string()),
                advertised = %net.advertised(),
                "network: instance links on peer_bind, reached by the others at the advertised address; Redis at {}",
                redact(&net.config.redis_url),
            );
            net_tasks.push(tokio::spawn(Arc::clone(&net).run(net_stop.clone())));
            let serve = crate::network::peer::serve(listener, Arc::clone(&self.state), net, carriers, net_stop.clone());
            net_tasks.push(tokio::spawn(serve));
        }
        for l in self.listeners {
            info!("{}", l.banner);
            if let Accept::Wss(_, tls) = &*l.accept {
                tracker.spawn(Tls::watch(Arc::clone(&tls.cert), token.clone()));
            }
            let tokens = (accepting.clone(), token.clone());
            tracker.spawn(accept_loop(l, Arc::clone(&self.state), tokens, tracker.clone(), workers.clone()));
        }
        let shutdown = std::pin::pin!(shutdown);
        let mut shutdown = shutdown;
        let by_request = tokio::select! {
            () = &mut shutdown => false,
            () = self.state.stop_requested.cancelled() => {
                info!("drain asked (POST /drain or the admin API): stopping as on SIGTERM");
                true
            }
        };
        let grace = self.state.live().tunables.limits.shutdown_grace();
        let grace_ends = tokio::time::Instant::now() + grace;
        self.state.draining.store(true, Ordering::Relaxed);
        // `[network]` with live peers: players move to the other instances first (docs/network.md, "Drain").
        // The listeners stay open meanwhile (a balancer that finds them closed marks the instance failed): a
        // client that can move is sent on at once to connect again, any other login is told the restart message.
        if let Some(net) = network.as_ref().filter(|n| n.live_peers() > 0) {
            let moves_end = grace_ends.checked_sub(DRAIN_RESERVE).unwrap_or(grace_ends);
            crate::network::moves::drain(&self.state, net.config.drain_rate, moves_end).await;
        }
        accepting.cancel();
        info!(sessions = self.state.open_connections(), "shutting down: no longer accepting, disconnecting players");
        token.cancel();
        if let Some(net) = &network {
            // Connections carried to other instances end now: their players resume at another instance.
            net.stop.cancel();
        }
        tracker.close();
        if tokio::time::timeout_at(grace_ends, tracker.wait()).await.is_err() {
            warn!("shutdown grace period of {}s over; closing the remaining connections", grace.as_secs());
        } else {
            info!("shutdown complete");
        }
        if by_request && self.state.stay_after_drain.load(Ordering::Relaxed) {
            // The admin API's drain with `"exit": false`: out of the network (the others stop counting this
            // instance as a peer), the operations listener still answering (`/readyz`: 503), until a signal.
            net_stop.cancel();
            for t in net_tasks.drain(..) {
                let _ = t.await;
            }
            let open = self.state.open_connections();
            info!(open, "drained: listeners closed, out of the network; the process stays up until SIGTERM or Ctrl-C");
            shutdown.await;
        }
        ops_stop.cancel();
        if let Some(ops) = ops {
            let _ = ops.await;
        }
        net_stop.cancel();
        for t in net_tasks {
            let _ = t.await;
        }
        if let Some(workers) = workers.and_then(|w| Arc::try_unwrap(w).ok()) {
            workers.stop().await;
        }
    }
}

/// Of `shutdown_grace_seconds`, what a drain leaves for the players it did not move to read the shutdown
/// message: 3 seconds.
pub(crate) const DRAIN_RESERVE: std::time::Duration = std::time::Duration::from_secs(3);

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
        if config.network != old.network {
            restart.push("[network]");
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

/// A Redis URL without its password, for the logs.
fn redact(url: &str) -> String {
    match (url.split_once("://"), url.rfind('@')) {
        (Some((scheme, rest)), Some(at)) if at > scheme.len() => {
            let user = rest.split_once(':').map_or("", |(u, _)| u);
            format!("{scheme}://{user}:***@{}", url.get(at + 1..).unwrap_or(""))
        }
        _ => url.to_string(),
    }
}

/// `peer_address` as the others dial it: an `IP:port` as it is, a `host:port` resolved once at start (the first
/// address).
///
/// # Errors
/// [`crate::network::NetworkError::PeerAddress`] when the host does not resolve, or the address is one the
/// others cannot dial: unspecified (`0.0.0.0`), or loopback while `peer_bind` (`bound`) is not (a host name that
/// names this host only, as Debian's `127.0.1.1` does).
async fn resolve_peer_address(address: &str, bound: SocketAddr) -> Result<String, crate::network::NetworkError> {
    let fail = |why: String| crate::network::NetworkError::PeerAddress(format!("peer_address {address}: {why}"));
    let resolved = match address.parse::<SocketAddr>() {
        Ok(a) => a,
        Err(_) => {
            let mut found = tokio::net::lookup_host(address).await.map_err(|e| fail(e.to_string()))?;
            found.next().ok_or_else(|| fail("no address".into()))?
        }
    };
    if resolved.ip().is_unspecified() {
        return Err(fail("an unspecified address cannot be dialled; name this host's address".into()));
    }
    if resolved.ip().is_loopback() && !bound.ip().is_loopback() {
        return Err(fail(format!("{resolved} is a loopback address the other instances cannot reach")));
    }
    Ok(resolved.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn peer_address_is_an_address_the_others_can_dial() {
        let any: SocketAddr = "0.0.0.0:25600".parse().unwrap();
        let local: SocketAddr = "127.0.0.1:25600".parse().unwrap();
        let ok = |r: Result<String, crate::network::NetworkError>| r.ok();
        assert_eq!(ok(resolve_peer_address("10.0.0.5:25600", any).await).as_deref(), Some("10.0.0.5:25600"));
        // A name is resolved once, here; its loopback address only serves instances on one host.
        assert_eq!(ok(resolve_peer_address("localhost:7", local).await).map(|a| a.ends_with(":7")), Some(true));
        let refused =
            [("localhost:7", any), ("0.0.0.0:25600", any), ("127.0.0.1:25600", any), ("no-such-host.invalid:1", any)];
        for (address, bound) in refused {
            let e = resolve_peer_address(address, bound).await;
            assert!(
                matches!(&e, Err(crate::network::NetworkError::PeerAddress(m)) if m.contains(address)),
                "{address}: {e:?}"
            );
        }
    }
}
