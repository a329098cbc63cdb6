//! Listeners, the accept loops, connection caps and graceful shutdown (the shape of mini-redis's server).

use std::collections::HashMap;
use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info, info_span, warn, Instrument};

use crate::config::{AuthMode, Config, Forwarding, LimitsConfig, Transport};
use crate::limits::{HandshakeSlots, LogLimiter};
use crate::relay::{relay_tcp, Direction};
use crate::session::{
    self, shutdown_disconnect_frame, ConnInfo, Finish, Player, RelayReport, RelayStart,
};

/// How long an orderly close keeps reading (and discarding) after sending FIN, so a final message is not lost
/// to a reset when the peer still had bytes in flight.
const LINGER: Duration = Duration::from_secs(1);

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
}

/// A backend as the sessions see it.
#[derive(Clone, Debug)]
pub(crate) struct Backend {
    pub(crate) name: String,
    pub(crate) address: String,
    pub(crate) forwarding: Forwarding,
}

/// State shared by every session.
#[derive(Debug)]
pub(crate) struct Shared {
    pub(crate) limits: LimitsConfig,
    pub(crate) auth: AuthMode,
    backends: Vec<Backend>,
    routes: HashMap<String, usize>,
    default_backend: usize,
    pub(crate) bad_input_log: LogLimiter,
    limit_log: LogLimiter,
    conn_limit: Arc<Semaphore>,
    handshaking: Arc<HandshakeSlots>,
    next_id: AtomicU64,
}

impl Shared {
    fn new(config: &Config) -> Self {
        let backends: Vec<Backend> = config
            .backends
            .iter()
            .map(|b| Backend {
                name: b.name.clone(),
                address: b.address.clone(),
                forwarding: b.forwarding,
            })
            .collect();
        let index = |name: &str| backends.iter().position(|b| b.name == name);
        let routes = config
            .routing
            .hosts
            .iter()
            .filter_map(|(host, name)| {
                Some((
                    moonbridge_protocol::handshake::routing_key(host),
                    index(name)?,
                ))
            })
            .collect();
        let default_backend = config.default_backend_name().and_then(index).unwrap_or(0);
        Self {
            limits: config.limits.clone(),
            auth: config.auth.mode,
            routes,
            default_backend,
            backends,
            bad_input_log: LogLimiter::new(10, Duration::from_secs(10)),
            limit_log: LogLimiter::new(1, Duration::from_secs(10)),
            conn_limit: Arc::new(Semaphore::new(config.limits.max_connections)),
            handshaking: HandshakeSlots::new(config.limits.max_handshaking),
            next_id: AtomicU64::new(1),
        }
    }

    /// The backend for a routing key (see [`moonbridge_protocol::handshake::routing_key`]).
    pub(crate) fn route(&self, key: &str) -> Option<&Backend> {
        let i = self
            .routes
            .get(key)
            .copied()
            .unwrap_or(self.default_backend);
        self.backends.get(i)
    }

    /// The backend legacy pings and unknown hosts go to.
    pub(crate) fn default_backend(&self) -> &Backend {
        // `Config::check` guarantees at least one backend; index 0 is the fallback.
        self.backends
            .get(self.default_backend)
            .or_else(|| self.backends.first())
            .unwrap_or_else(|| unreachable_backend())
    }
}

#[allow(clippy::panic)]
fn unreachable_backend() -> &'static Backend {
    // Validation refuses a configuration without backends before a server is built.
    panic!("server built without backends")
}

/// A point-in-time view of the server's load.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ServerStats {
    /// Open player connections (every stage).
    pub connections: usize,
    /// Connections still in the handshake stage.
    pub handshaking: usize,
}

struct BoundListener {
    transport: Transport,
    listener: TcpListener,
}

/// A proxy with every listener bound, ready to [`Server::run`].
pub struct Server {
    listeners: Vec<BoundListener>,
    shared: Arc<Shared>,
    max_connections: usize,
}

impl Server {
    /// Validates `config` and binds every listener.
    ///
    /// # Errors
    /// [`ServerError::Config`] for an invalid configuration, [`ServerError::Bind`] when an address is taken.
    pub async fn bind(config: &Config) -> Result<Self, ServerError> {
        config.validate()?;
        let mut listeners = Vec::with_capacity(config.listeners.len());
        for l in &config.listeners {
            let listener = TcpListener::bind(l.bind)
                .await
                .map_err(|source| ServerError::Bind {
                    transport: l.transport,
                    bind: l.bind,
                    source,
                })?;
            listeners.push(BoundListener {
                transport: l.transport,
                listener,
            });
        }
        Ok(Self {
            listeners,
            shared: Arc::new(Shared::new(config)),
            max_connections: config.limits.max_connections,
        })
    }

    /// The bound address of each listener, in configuration order (useful with port 0).
    pub fn local_addrs(&self) -> Vec<(Transport, SocketAddr)> {
        self.listeners
            .iter()
            .filter_map(|l| l.listener.local_addr().ok().map(|a| (l.transport, a)))
            .collect()
    }

    /// A handle that reads the server's load while it runs.
    pub fn stats_handle(&self) -> StatsHandle {
        StatsHandle {
            shared: Arc::clone(&self.shared),
            max_connections: self.max_connections,
        }
    }

    /// Accepts players until `shutdown` completes, then stops accepting, disconnects every player with a
    /// message (or WebSocket close 1001) and returns once they are gone or `shutdown_grace_seconds` passed.
    pub async fn run(self, shutdown: impl Future<Output = ()>) {
        let token = CancellationToken::new();
        let tracker = TaskTracker::new();
        for l in self.listeners {
            let addr = l
                .listener
                .local_addr()
                .map_or_else(|_| "?".to_string(), |a| a.to_string());
            info!("listening {} {addr}", l.transport);
            tracker.spawn(accept_loop(
                l,
                Arc::clone(&self.shared),
                token.clone(),
                tracker.clone(),
            ));
        }
        shutdown.await;
        let open = self.max_connections - self.shared.conn_limit.available_permits();
        info!(
            sessions = open,
            "shutting down: no longer accepting, disconnecting players"
        );
        token.cancel();
        tracker.close();
        let grace = self.shared.limits.shutdown_grace();
        if tokio::time::timeout(grace, tracker.wait()).await.is_err() {
            warn!(
                "shutdown grace period of {}s over; closing the remaining connections",
                grace.as_secs()
            );
        } else {
            info!("shutdown complete");
        }
    }
}

/// Reads a running server's load.
#[derive(Clone, Debug)]
pub struct StatsHandle {
    shared: Arc<Shared>,
    max_connections: usize,
}

impl StatsHandle {
    /// Current load.
    pub fn stats(&self) -> ServerStats {
        ServerStats {
            connections: self.max_connections - self.shared.conn_limit.available_permits(),
            handshaking: self.shared.handshaking.in_use(),
        }
    }
}

async fn accept_loop(
    l: BoundListener,
    shared: Arc<Shared>,
    token: CancellationToken,
    tracker: TaskTracker,
) {
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
                warn!(suppressed, "max_handshaking ({}) reached: closed the connection waiting longest in the handshake", shared.limits.max_handshaking);
            }
        }
        let id = shared.next_id.fetch_add(1, Ordering::Relaxed);
        let span = info_span!("conn", id, peer = %peer, via = %l.transport);
        let shared = Arc::clone(&shared);
        let token = token.clone();
        tracker.spawn(
            async move {
                let _permit = permit;
                let info = ConnInfo { client: peer };
                match l.transport {
                    Transport::Tcp => {
                        session::serve(TcpPlayer { stream }, info, shared, slot, token).await
                    }
                }
            }
            .instrument(span),
        );
    }
}

/// A player on a plain TCP connection.
struct TcpPlayer {
    stream: TcpStream,
}

impl Player for TcpPlayer {
    async fn read_some(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
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
            let mut sink = [0u8; 512];
            let _ = tokio::time::timeout(LINGER, async {
                while matches!(self.stream.read(&mut sink).await, Ok(n) if n > 0) {}
            })
            .await;
        }
    }

    async fn relay(&mut self, backend: TcpStream, start: RelayStart<'_>) -> RelayReport {
        let mut up = Direction::new(None);
        up.bytes = start.up;
        let mut down = Direction::new(start.scanner);
        down.bytes = start.down;
        let end = relay_tcp(
            &self.stream,
            &backend,
            &mut up,
            &mut down,
            start.shutdown,
            &shutdown_disconnect_frame(),
        )
        .await;
        RelayReport {
            up: up.bytes,
            down: down.bytes,
            end,
        }
    }
}
