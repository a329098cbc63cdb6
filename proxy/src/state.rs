//! The proxy's state, shared by every session: what a reload may change ([`Live`]: backends and routes,
//! limits, the status and rate-limit settings), and what lives as long as the process (the connection caps,
//! the rate-limit table, log limiters, metrics, online mode's key pair).

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::{Arc, OnceLock, PoisonError, RwLock};
use std::time::Duration;

use crate::auth::OnlineAuth;
use crate::backend::Backend;
use crate::config::{AuthMode, Settings, Tunables};
use crate::limits::{ConnLimit, HandshakeSlots, LogLimiter};
use crate::metrics::Metrics;
use crate::network::Network;
use crate::players::PlayerTable;
use crate::rate::RateLimiter;
use crate::resume::ResumeTable;

/// What a reload (SIGHUP) replaces as a whole. A session takes one snapshot when it starts and keeps it, so
/// it never sees half of an old configuration and half of a new one.
#[derive(Debug)]
pub(crate) struct Live {
    /// `[limits]`, `[status]`, `[rate_limits]`, `[compression]`, `[transfer]` as checked.
    pub(crate) tunables: Tunables,
    backends: Vec<Backend>,
    routes: HashMap<String, usize>,
    default_backend: usize,
}

impl Live {
    /// Builds the live part of `settings`, reusing the backends of `previous` that kept their name, address
    /// and forwarding (so their status cache and readiness record survive a reload).
    pub(crate) fn new(settings: &Settings, metrics: &Metrics, previous: Option<&Live>) -> Self {
        let backends = settings
            .backends
            .iter()
            .map(|b| {
                previous
                    .and_then(|p| p.backends.iter().find(|old| old.same_as(b)))
                    .cloned()
                    .unwrap_or_else(|| Backend::new(b, metrics))
            })
            .collect();
        Self {
            tunables: settings.tunables.clone(),
            backends,
            routes: settings.routes.hosts.clone(),
            default_backend: settings.routes.default_backend,
        }
    }

    /// The backend for a routing key (see [`moonbridge_protocol::handshake::routing_key`]).
    pub(crate) fn route(&self, key: &str) -> Option<&Backend> {
        let i = self.routes.get(key).copied().unwrap_or(self.default_backend);
        self.backends.get(i)
    }

    /// The backend legacy pings go to (`None` only without backends, which validation refuses).
    pub(crate) fn default_backend(&self) -> Option<&Backend> {
        self.backends.get(self.default_backend).or_else(|| self.backends.first())
    }

    /// The backend called `name`.
    pub(crate) fn backend_named(&self, name: &str) -> Option<&Backend> {
        self.backends.iter().find(|b| b.name == name)
    }

    /// Every backend, in configuration order.
    pub(crate) fn backends(&self) -> &[Backend] {
        &self.backends
    }
}

/// State shared by every session.
#[derive(Debug)]
pub(crate) struct ProxyState {
    live: RwLock<Arc<Live>>,
    pub(crate) auth: AuthMode,
    /// Key pair and session-server client, in `online` mode.
    pub(crate) online: Option<Arc<OnlineAuth>>,
    /// Bad input from players (10 lines per 10 s).
    pub(crate) bad_input_log: LogLimiter,
    /// Caps reached and accept failures (one line per 10 s).
    pub(crate) limit_log: LogLimiter,
    /// Session-server failures in online mode (one line per 10 s).
    pub(crate) session_server_log: LogLimiter,
    /// `max_connections`.
    pub(crate) conn_limit: Arc<ConnLimit>,
    /// `max_handshaking`.
    pub(crate) handshaking: Arc<HandshakeSlots>,
    /// Session ids, for the logs.
    pub(crate) next_id: AtomicU64,
    /// Instance links (`peer_bind`) that ended, authenticated or not: the allocator trim counts them.
    pub(crate) links_ended: AtomicU64,
    /// Every metric (`[metrics]` serves them; they are counted either way).
    pub(crate) metrics: Arc<Metrics>,
    /// Shutdown has begun: `/readyz` answers 503 so load balancers stop sending players.
    pub(crate) draining: AtomicBool,
    /// `POST /drain` or the admin API's drain asked the proxy to stop, as SIGTERM does.
    pub(crate) stop_requested: tokio_util::sync::CancellationToken,
    /// The admin API's drain asked the process to stay up once the drain is over (until SIGTERM).
    pub(crate) stay_after_drain: AtomicBool,
    /// The `[rate_limits]` table (its settings are in [`Live`]).
    pub(crate) rate: RateLimiter,
    /// Carriage v2: this instance's resumable sessions.
    pub(crate) resume: Arc<ResumeTable>,
    /// The players in Play, for the `BungeeCord` channel's requests.
    pub(crate) players: Arc<PlayerTable>,
    /// `[network]`: this instance's place in a network of instances (set once at start).
    network: OnceLock<Arc<dyn Network>>,
}

impl ProxyState {
    pub(crate) fn new(settings: &Settings, online: Option<Arc<OnlineAuth>>, metrics: Arc<Metrics>) -> Self {
        let limits = &settings.tunables.limits;
        Self {
            auth: settings.auth.mode,
            online,
            bad_input_log: LogLimiter::new(10, Duration::from_secs(10)),
            limit_log: LogLimiter::new(1, Duration::from_secs(10)),
            session_server_log: LogLimiter::new(1, Duration::from_secs(10)),
            conn_limit: ConnLimit::new(limits.max_connections),
            handshaking: HandshakeSlots::new(limits.max_handshaking),
            next_id: AtomicU64::new(1),
            links_ended: AtomicU64::new(0),
            draining: AtomicBool::new(false),
            stop_requested: tokio_util::sync::CancellationToken::new(),
            stay_after_drain: AtomicBool::new(false),
            rate: RateLimiter::new(),
            resume: Arc::new(ResumeTable::new()),
            players: Arc::default(),
            network: OnceLock::new(),
            live: RwLock::new(Arc::new(Live::new(settings, &metrics, None))),
            metrics,
        }
    }

    /// This instance's network, when `[network]` is configured.
    pub(crate) fn network(&self) -> Option<&Arc<dyn Network>> {
        self.network.get()
    }

    /// Joins a network (once, at start).
    pub(crate) fn set_network(&self, network: Arc<dyn Network>) {
        let _ = self.network.set(network);
    }

    /// The current live configuration.
    pub(crate) fn live(&self) -> Arc<Live> {
        Arc::clone(&self.live.read().unwrap_or_else(PoisonError::into_inner))
    }

    /// Replaces the live configuration (a reload): sessions started from now on use `live`, the caps follow
    /// its limits at once.
    pub(crate) fn replace_live(&self, live: Live) {
        self.conn_limit.set_max(live.tunables.limits.max_connections);
        self.handshaking.set_max(live.tunables.limits.max_handshaking);
        *self.live.write().unwrap_or_else(PoisonError::into_inner) = Arc::new(live);
    }

    /// Open player connections (every stage).
    pub(crate) fn open_connections(&self) -> usize {
        self.conn_limit.open()
    }
}
