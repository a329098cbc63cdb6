//! Backends: the 1.7.10 servers behind the proxy, and connecting to one (TCP with TCP_NODELAY, then the PROXY
//! v2 header first when the backend uses `proxy-protocol` forwarding).

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::config::{BackendSettings, Forwarding};
use crate::metrics::{BackendMetrics, Metrics};
use crate::proxy_header::{v2_header, ProxyHeaderError};

/// The outcome of the latest TCP connect to a backend (by a player's session or a readiness probe).
#[derive(Clone, Debug)]
pub(crate) struct Reach {
    /// When it finished.
    pub(crate) at: Instant,
    /// Why it failed; `None` when it succeeded.
    pub(crate) error: Option<String>,
}

/// A backend as the sessions see it.
#[derive(Clone, Debug)]
pub(crate) struct Backend {
    pub(crate) name: String,
    pub(crate) address: String,
    pub(crate) forwarding: Forwarding,
    /// Sent as the `bungeeguard-token` property with `bungeecord` forwarding.
    pub(crate) forwarding_secret: Option<String>,
    /// Its series in the metrics (connect time and failures, bytes relayed).
    pub(crate) metrics: BackendMetrics,
    /// The latest connect's outcome, for `/readyz`.
    reach: Arc<Mutex<Option<Reach>>>,
    /// The latest status fetch (`[status] cache_seconds`); the lock is held during a fetch, so concurrent
    /// pings wait for one exchange instead of each making their own.
    pub(crate) status: Arc<tokio::sync::Mutex<Option<CachedStatus>>>,
    /// The latest legacy ping answers, one per answer format (1.3; 1.4–1.6), cached like `status`.
    pub(crate) legacy: Arc<tokio::sync::Mutex<[Option<CachedLegacy>; 2]>>,
}

/// A backend's `0xFF` answer to a legacy ping (`None`: it gave none), and when.
#[derive(Clone, Debug)]
pub(crate) struct CachedLegacy {
    pub(crate) at: Instant,
    pub(crate) answer: Option<Vec<u8>>,
}

/// A backend's Status Response JSON (or why it could not be fetched), and when.
#[derive(Clone, Debug)]
pub(crate) struct CachedStatus {
    pub(crate) at: Instant,
    pub(crate) json: Result<String, String>,
}

impl Backend {
    pub(crate) fn new(b: &BackendSettings, metrics: &Metrics) -> Self {
        Self {
            name: b.name.clone(),
            address: b.address.clone(),
            forwarding: b.forwarding,
            forwarding_secret: b.forwarding_secret.clone(),
            metrics: metrics.backend(&b.name),
            reach: Arc::default(),
            status: Arc::default(),
            legacy: Arc::default(),
        }
    }

    /// Whether `b` describes this backend unchanged (name, address, forwarding and secret).
    pub(crate) fn same_as(&self, b: &BackendSettings) -> bool {
        self.name == b.name
            && self.address == b.address
            && self.forwarding == b.forwarding
            && self.forwarding_secret == b.forwarding_secret
    }

    /// Whether `other` is this very backend, carried over by a reload (they share caches and records).
    pub(crate) fn is(&self, other: &Backend) -> bool {
        Arc::ptr_eq(&self.reach, &other.reach)
    }

    /// The latest connect's outcome, if any.
    pub(crate) fn reach(&self) -> Option<Reach> {
        self.reach.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Records a connect's outcome in the metrics and for `/readyz`.
    fn record(&self, started: Instant, error: Option<String>) {
        self.metrics.connected(started.elapsed(), error.is_none());
        *self.reach.lock().unwrap_or_else(PoisonError::into_inner) = Some(Reach { at: Instant::now(), error });
    }

    /// A readiness probe: a TCP connect within `timeout`, closed at once without a byte (recorded like a
    /// player's connect).
    pub(crate) async fn probe(&self, timeout: Duration) {
        let started = Instant::now();
        let error = match tokio::time::timeout(timeout, TcpStream::connect(&self.address)).await {
            Ok(Ok(_)) => None,
            Ok(Err(e)) => Some(format!("connect to {} failed: {e}", self.address)),
            Err(_) => Some(format!("connect to {} timed out after {}s", self.address, timeout.as_secs())),
        };
        self.record(started, error);
    }
}

/// Why a backend could not be reached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BackendError {
    #[error("connect to {address} failed: {source}")]
    Connect { address: String, source: io::Error },
    #[error("connect to {address} timed out after {secs}s")]
    Timeout { address: String, secs: u64 },
    #[error("backend {address} vanished: {source}")]
    Vanished { address: String, source: io::Error },
    #[error("PROXY header for {address}: {source}")]
    ProxyHeader { address: String, source: ProxyHeaderError },
    #[error("write to {address} failed: {source}")]
    Write { address: String, source: io::Error },
}

impl Backend {
    /// Connects within `timeout`, with TCP_NODELAY, and sends the PROXY v2 header naming `client` first when
    /// the backend uses `proxy-protocol` forwarding.
    pub(crate) async fn connect(&self, client: SocketAddr, timeout: Duration) -> Result<TcpStream, BackendError> {
        let address = || self.address.clone();
        let started = Instant::now();
        let connected = match tokio::time::timeout(timeout, TcpStream::connect(&self.address)).await {
            Ok(Ok(s)) => Ok(s),
            Ok(Err(source)) => Err(BackendError::Connect { address: address(), source }),
            Err(_) => Err(BackendError::Timeout { address: address(), secs: timeout.as_secs() }),
        };
        self.record(started, connected.as_ref().err().map(ToString::to_string));
        let mut s = connected?;
        let _ = s.set_nodelay(true);
        if self.forwarding == Forwarding::ProxyProtocol {
            let destination = s.peer_addr().map_err(|source| BackendError::Vanished { address: address(), source })?;
            let header = v2_header(client, destination)
                .map_err(|source| BackendError::ProxyHeader { address: address(), source })?;
            s.write_all(&header).await.map_err(|source| BackendError::Write { address: address(), source })?;
        }
        Ok(s)
    }
}
