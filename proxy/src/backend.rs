//! Backends: the 1.7.10 servers behind the proxy, and connecting to one (TCP with TCP_NODELAY, then the PROXY
//! v2 header first when the backend uses `proxy-protocol` forwarding).

use std::io;
use std::net::SocketAddr;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use bytes::BytesMut;
use moonbridge_protocol::error::EncodeError;
use moonbridge_protocol::forwarding::{bungeecord_address, forge_properties, offline_uuid, Property};
use moonbridge_protocol::handshake::HostField;
use moonbridge_protocol::packets::{Handshake, Packet};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::auth::Profile;
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

/// The name of the property BungeeGuard-style backends check against their configured token.
const BUNGEEGUARD_PROPERTY: &str = "bungeeguard-token";

/// Who a player is, as every backend they are sent to must hear it: the login, then each server transfer,
/// opens a backend with the same handshake and Login Start (with that backend's forwarding applied).
#[derive(Clone, Debug)]
pub(crate) struct Identity {
    /// The handshake as the player sent it.
    pub(crate) handshake: Handshake,
    /// The Login Start frame as the player sent it.
    pub(crate) login_raw: BytesMut,
    /// The name in Login Start.
    pub(crate) name: String,
    /// The player's real address.
    pub(crate) client: SocketAddr,
    /// The profile the session server vouched for (online mode).
    pub(crate) profile: Option<Profile>,
}

impl Identity {
    /// The handshake host `backend` receives: as sent, or with BungeeCord forwarding (the player's address,
    /// UUID — the verified one in online mode, else the offline UUID of the name — and properties: the
    /// profile's, Forge's marker, the backend's `bungeeguard-token`).
    fn server_address(&self, backend: &Backend) -> String {
        match backend.forwarding {
            Forwarding::None | Forwarding::ProxyProtocol => self.handshake.server_address.clone(),
            Forwarding::Bungeecord => {
                let host = HostField::parse(&self.handshake.server_address);
                let mut props: Vec<Property> = Vec::new();
                let uuid = match &self.profile {
                    Some(profile) => {
                        props.extend(profile.properties.iter().cloned());
                        profile.id
                    }
                    None => offline_uuid(&self.name),
                };
                if let Some(marker) = host.marker.filter(|_| host.is_forge()) {
                    props.extend(forge_properties(marker));
                }
                if let Some(secret) = &backend.forwarding_secret {
                    props.push(Property { name: BUNGEEGUARD_PROPERTY.into(), value: secret.clone(), signature: None });
                }
                bungeecord_address(host.hostname, self.client.ip(), uuid, &props)
            }
        }
    }

    /// The player's UUID: the session server's in online mode, else the offline UUID of the name (as the
    /// backend is told it with BungeeCord forwarding).
    pub(crate) fn uuid(&self) -> uuid::Uuid {
        self.profile.as_ref().map_or_else(|| offline_uuid(&self.name), |p| p.id)
    }

    /// Whether the player's handshake carries Forge's marker (`\0FML\0`): a Forge client.
    pub(crate) fn is_forge(&self) -> bool {
        HostField::parse(&self.handshake.server_address).is_forge()
    }

    /// What `backend` is sent first: the handshake (forwarding applied) and Login Start, then `rest`.
    ///
    /// # Errors
    /// The forwarded handshake host is over its limit ([`moonbridge_protocol::packets::MAX_FORWARDED_HOST_CHARS`]).
    pub(crate) fn opening(&self, backend: &Backend, rest: &[u8]) -> Result<BytesMut, EncodeError> {
        let server_address = self.server_address(backend);
        let mut out = BytesMut::with_capacity(server_address.len() + self.login_raw.len() + rest.len() + 16);
        let h = &self.handshake;
        let handshake = Handshake {
            protocol_version: h.protocol_version,
            server_address,
            server_port: h.server_port,
            next_state: h.next_state,
        };
        handshake.encode_frame(&mut out)?;
        out.extend_from_slice(&self.login_raw);
        out.extend_from_slice(rest);
        Ok(out)
    }
}
