//! The proxy's state, shared by every session: backends and routes, limits, the connection caps, log
//! limiters and counters. Built once from [`Settings`] when the server starts.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::Semaphore;

use crate::auth::OnlineAuth;
use crate::backend::Backend;
use crate::config::{AuthMode, LimitsConfig, Settings, StatusConfig};
use crate::limits::{HandshakeSlots, LogLimiter};
use crate::metrics::Metrics;
use crate::rate::RateLimiter;

/// State shared by every session.
#[derive(Debug)]
pub(crate) struct ProxyState {
    pub(crate) limits: LimitsConfig,
    /// `[status]`.
    pub(crate) status: StatusConfig,
    pub(crate) auth: AuthMode,
    /// Key pair and session-server client, in `online` mode.
    pub(crate) online: Option<Arc<OnlineAuth>>,
    backends: Vec<Backend>,
    routes: HashMap<String, usize>,
    default_backend: usize,
    /// Bad input from players (10 lines per 10 s).
    pub(crate) bad_input_log: LogLimiter,
    /// Caps reached and accept failures (one line per 10 s).
    pub(crate) limit_log: LogLimiter,
    /// Session-server failures in online mode (one line per 10 s).
    pub(crate) session_server_log: LogLimiter,
    /// `max_connections`.
    pub(crate) conn_limit: Arc<Semaphore>,
    /// `max_handshaking`.
    pub(crate) handshaking: Arc<HandshakeSlots>,
    /// Session ids, for the logs.
    pub(crate) next_id: AtomicU64,
    /// Every metric (`[metrics]` serves them; they are counted either way).
    pub(crate) metrics: Arc<Metrics>,
    /// Shutdown has begun: `/readyz` answers 503 so load balancers stop sending players.
    pub(crate) draining: AtomicBool,
    /// `[rate_limits]`.
    pub(crate) rate: RateLimiter,
}

impl ProxyState {
    pub(crate) fn new(settings: &Settings, online: Option<Arc<OnlineAuth>>, metrics: Arc<Metrics>) -> Self {
        let limits = settings.limits.clone();
        Self {
            auth: settings.auth.mode,
            status: settings.status.clone(),
            online,
            backends: settings.backends.iter().map(|b| Backend::new(b, &metrics)).collect(),
            routes: settings.routes.hosts.clone(),
            default_backend: settings.routes.default_backend,
            bad_input_log: LogLimiter::new(10, Duration::from_secs(10)),
            limit_log: LogLimiter::new(1, Duration::from_secs(10)),
            session_server_log: LogLimiter::new(1, Duration::from_secs(10)),
            conn_limit: Arc::new(Semaphore::new(limits.max_connections)),
            handshaking: HandshakeSlots::new(limits.max_handshaking),
            next_id: AtomicU64::new(1),
            metrics,
            draining: AtomicBool::new(false),
            rate: RateLimiter::new(settings.rate_limits.clone()),
            limits,
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

    /// Every backend, in configuration order.
    pub(crate) fn backends(&self) -> &[Backend] {
        &self.backends
    }

    /// Open player connections (every stage).
    pub(crate) fn open_connections(&self) -> usize {
        self.limits.max_connections - self.conn_limit.available_permits()
    }
}
