//! `[network]` as the core sees it: one small interface ([`Network`]) that the session, relay and listener
//! code call through an optional handle in [`crate::state::ProxyState`], and the types that cross it. The
//! implementation on Redis and instance links sits above the core in `network/` and only the server's
//! lifecycle ([`crate::server`]) opens it (docs/network.md):
//!
//! - [`redis`]: leases, the network's player table, one session per name ([`claims`]);
//! - [`link`]: the authenticated instance links; [`peer`]: their listener (kicks, resumes carried here, moves);
//! - [`moves`]: a drain's pacing and a move's state over a link.
//!
//! The core asks three things of a network: may this name log in ([`Network::admit`]), carry this resume to
//! the instance that holds its session ([`Network::carry`]), fetch this move's state from the draining
//! instance ([`Network::fetch_move`]).

mod claimed;
mod claims;
mod dial;
pub(crate) mod entries;
pub(crate) mod link;
pub(crate) mod moves;
mod openings;
pub(crate) mod peer;
pub(crate) mod redis;
mod renewal;

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;

use moonbridge_protocol::ws::v2::ResumeToken;
use tokio::net::TcpStream;
use tokio_util::sync::CancellationToken;

use crate::config::DuplicateLogin;
use crate::metrics::NetworkMetrics;
use crate::move_state::MoveAnswer;
use crate::players::{Action, PlayerTable, Reach};

/// What the older session of a name reads when `duplicate_login = "kick_existing"` (a vanilla server's words).
pub(crate) const KICKED_ELSEWHERE: &str = "You logged in from another location";
/// What a new login reads when `duplicate_login = "refuse_new"`.
pub(crate) const ALREADY_PLAYING: &str = "You are already playing on this network";

pub(crate) use crate::config::MIN_SECRET_BYTES;
/// The longest instance-link request, in bytes of JSON: 4,096.
pub(crate) const MAX_REQUEST_BYTES: usize = 4096;
/// An instance link's opening deadline on each side (connect, TLS, both MACs and the request): 5 seconds.
pub(crate) const AUTH_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(5);

/// A future a [`Network`] returns (boxed: the interface is a trait object).
pub(crate) type BoxFuture<'a, T> = Pin<Box<dyn Future<Output = T> + Send + 'a>>;

/// This instance's network, as the core uses it.
pub(crate) trait Network: Send + Sync + std::fmt::Debug {
    /// `duplicate_login`: what two sessions of one name on one instance come to.
    fn duplicate_login(&self) -> DuplicateLogin;

    /// Applies `duplicate_login` to a login of `name` on the whole network: go on holding the name's claim,
    /// or refuse. Bounded in time; without Redis only this instance is checked.
    fn admit<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Admit>;

    /// A resume whose token names instance `owner`: when `owner` is a live instance other than this one, the
    /// instance link that carries the player's connection there, opened (bounded by the link's opening
    /// deadline). `None` when it is not (the token is then refused here).
    fn carry(&self, owner: &str, resume: CarriedResume) -> Option<BoxFuture<'_, Result<Carrier, LinkError>>>;

    /// Why this instance serves alone, when it does: the last renewal's error while Redis is unreachable
    /// (`/readyz` shows it; the instance stays ready: degraded, not down).
    fn trouble(&self) -> Option<String>;

    /// A player's `moving` request for `ticket` (its counts `received` and `sent`): the state from the
    /// draining instance the ticket names, over an instance link. `None` when that is not a live instance other
    /// than this one. The caller bounds the wait.
    fn fetch_move<'a>(
        &'a self,
        ticket: &'a ResumeToken,
        received: u64,
        sent: u64,
    ) -> Option<BoxFuture<'a, Result<MoveAnswer, LinkError>>>;

    /// This instance's id in the network (16 hex digits).
    fn id(&self) -> &str;

    /// The ids of the other live instances, as the last renewal read them, sorted.
    fn peers(&self) -> Vec<String>;

    /// Asks live instance `id` (other than this one) to carry out an operator's `action` on its players, over an
    /// instance link (bounded by the link's deadline): what it came to there. `None` when `id` is not such an
    /// instance.
    fn act<'a>(&'a self, id: &'a str, action: &'a Action) -> Option<BoxFuture<'a, Result<Reach, LinkError>>>;
}

/// What a login may do about a name that is already playing.
#[derive(Debug)]
pub(crate) enum Admit {
    /// Go on (nobody else had the name, or the older session was told to go), holding the name's claim.
    Go(Claim),
    /// Refuse the new login (`refuse_new`).
    Refuse,
}

/// A login's claim of its name ([`Network::admit`]): `moonbridge:<name>:name:<lower-case name>` holds
/// `<instance id>:<nonce>:<login time>` (16 hex digits each, one nonce per login; the time in milliseconds
/// since the Unix epoch), expiring with the lease and renewed with it while the player plays. The player's
/// registration takes it over ([`Claim::take`]); dropped before that (the login did not get in), it queues its
/// release. A release deletes the claim only while it still holds this login's value, so it never deletes a
/// later login's claim.
#[derive(Debug)]
pub(crate) struct Claim {
    pub(crate) players: Arc<PlayerTable>,
    pub(crate) key: String,
    pub(crate) value: Option<String>,
}

impl Claim {
    /// The claim's value, for the player's registration, which releases it from then on.
    pub(crate) fn take(mut self) -> Option<String> {
        self.value.take()
    }
}

impl Drop for Claim {
    fn drop(&mut self) {
        if let Some(value) = self.value.take() {
            self.players.release(&self.key, value);
        }
    }
}

/// A resume carried to the instance that holds its session: what the player's connection is.
#[derive(Debug)]
pub(crate) struct CarriedResume {
    /// The player reached this instance over `wss`.
    pub(crate) secure: bool,
    /// `moonbridge.v2.zstd` was selected, at this level.
    pub(crate) zstd: Option<i32>,
    /// The player's real address.
    pub(crate) client: SocketAddr,
    /// The player's `resume` message, as it sent it.
    pub(crate) control: String,
}

/// An instance link opened for a carried resume: the owner's end, and what the copy counts into.
pub(crate) struct Carrier {
    /// The owner's end of the link.
    pub(crate) stream: LinkStream,
    /// The link's gauges and counters (`moonbridge_network_link_*`).
    pub(crate) metrics: NetworkMetrics,
    /// Cancelled when this instance stops: the copy ends (the player resumes at another instance).
    pub(crate) stop: CancellationToken,
}

impl std::fmt::Debug for Carrier {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Carrier").finish_non_exhaustive()
    }
}

/// The dialler's end of an instance link: plain, or TLS for a `wss` player's resume.
pub(crate) enum LinkStream {
    /// A plain link.
    Tcp(TcpStream),
    /// A TLS link.
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// Why an instance link failed.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum LinkError {
    /// The connection failed.
    #[error("instance link: {0}")]
    Io(#[from] io::Error),
    /// A MAC did not verify.
    #[error("instance link: the peer did not prove the network's secret")]
    BadMac,
    /// The first bytes were not the link's magic.
    #[error("instance link: not a MoonBridge instance link")]
    BadMagic,
    /// A request or answer over its size limit (bytes).
    #[error("instance link: request of {0} bytes (at most {MAX_REQUEST_BYTES})")]
    TooLong(usize),
    /// A request or answer that is not the JSON object it should be.
    #[error("instance link: bad request: {0}")]
    Json(#[from] serde_json::Error),
    /// A request this instance cannot carry out.
    #[error("instance link: bad request: {0}")]
    BadRequest(Unservable),
    /// The link's opening deadline passed.
    #[error("instance link: timed out after {}s", AUTH_TIMEOUT.as_secs())]
    Timeout,
    /// TLS failed.
    #[error("instance link: TLS: {0}")]
    Tls(#[from] rustls::Error),
    /// The link's TLS server name does not parse.
    #[error("instance link: TLS: {0}")]
    ServerName(#[from] rustls::pki_types::InvalidDnsNameError),
    /// A `wss` resume reached an instance without a `wss` listener.
    #[error("instance link: TLS: no wss listener here")]
    NoWssListener,
}

/// A well-formed request this instance cannot serve.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum Unservable {
    /// A `wss` resume without TLS, or a `ws` one over TLS.
    #[error("a wss resume must come over TLS, a ws one without")]
    TransportMismatch,
    /// No listener of the resumed session's transport here.
    #[error("no listener of that transport here")]
    NoListener,
    /// The carried control message does not parse.
    #[error("malformed resume request")]
    MalformedResume,
    /// An operator's action out of its bounds.
    #[error("malformed action: {0}")]
    MalformedAction(#[from] crate::players::ActionError),
}

/// Why the network could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum NetworkError {
    /// `secret_file` could not be read.
    #[error("network.secret_file {path}: {source}")]
    SecretRead {
        /// The file.
        path: std::path::PathBuf,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `secret_file` holds fewer than [`MIN_SECRET_BYTES`] bytes.
    #[error("network.secret_file {path}: the secret has {len} bytes; at least {} are needed", MIN_SECRET_BYTES)]
    SecretShort {
        /// The file.
        path: std::path::PathBuf,
        /// Bytes it holds (surrounding whitespace ignored).
        len: usize,
    },
    /// `redis_url` was refused by the Redis client.
    #[error("network.redis_url: {0}")]
    Redis(String),
    /// `redis_ca_file`, `redis_client_cert` or `redis_client_key` cannot be read.
    #[error("network: cannot read {path}: {source}")]
    RedisTlsFile {
        /// The file.
        path: std::path::PathBuf,
        /// Why it cannot be read.
        #[source]
        source: std::io::Error,
    },
    /// `peer_bind` could not be bound.
    #[error("cannot listen on network.peer_bind {bind}: {source}")]
    PeerBind {
        /// The address.
        bind: SocketAddr,
        /// The I/O error.
        source: std::io::Error,
    },
    /// `peer_address` is not set, `peer_bind` is unspecified, and the address to advertise could not be
    /// found from the route to Redis.
    #[error("network.peer_address: not set, and peer_bind is unspecified; finding this host's address towards Redis failed: {0} (set peer_address)")]
    PeerAddress(String),
}
