//! [`RedisNetwork`], the [`Network`] of `[network]`: several MoonBridge instances sharing state through Redis
//! (docs/network.md).
//!
//! - **Leases.** Each instance writes itself (`moonbridge:<name>:instance:<id>`, JSON: its peer address and
//!   player count, signed with the network's secret: [`super::entries`]) and its players (the hash `moonbridge:<name>:players:<id>`, lower-case name → JSON
//!   [`Record`]) with an expiry of [`LEASE`], renewed every [`RENEW_EVERY`]; the sorted set
//!   `moonbridge:<name>:instances` indexes the ids. An instance that dies or loses Redis is gone from the
//!   network within one lease. A renewal that finds its player hash missing (Redis restarted empty, a
//!   failover), or that follows a failed one, writes the whole table again.
//! - **What the others hold.** Each renewal ([`super::renewal`]) reads the live instances' peer addresses and
//!   their players, entry by entry (a bad one is skipped and reported), so counts and lists
//!   ([`crate::players::PlayerTable::count`]) and the server list are the network's.
//! - **One session per name.** A login claims its name in Redis atomically ([`RedisNetwork::admit_name`]:
//!   `SET … NX` for `refuse_new`, `SET … GET` for `kick_existing`); `duplicate_login` decides who stays. A kick
//!   on another instance goes over an instance link ([`super::link`]).
//! - **Resume across instances.** A resume whose token names another live instance is carried there over an
//!   instance link ([`super::link::open_carrier`]); the owner keeps the backend connection.
//! - **Degraded, not down.** Every Redis round trip is bounded by [`REDIS_TIMEOUT`]; without Redis an instance
//!   serves with local state (logins go on, resumes to other instances get 4002), logs once per change of
//!   state and says so in `moonbridge_network_redis_up`.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU8, Ordering};
use std::sync::{Arc, Mutex, PoisonError, RwLock};
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use tokio::sync::mpsc;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::config::{DuplicateLogin, NetworkConfig};
use crate::metrics::NetworkMetrics;

use crate::labels::{BadEntry, DuplicateAction, LeaseResult, RedisCause};
use crate::move_state::MoveAnswer;
use crate::players::{Action, Change, PlayerTable, Reach, Update, Updates};

use super::claims::{now_ms, release_of, CLAIM_NEW};
use super::dial::{cause_of, Dial};
use super::entries::claim_value;
use super::{
    link, Admit, BoxFuture, CarriedResume, Carrier, Claim, LinkError, Network, NetworkError, KICKED_ELSEWHERE,
};

/// How long an instance's and its players' entries live without a renewal: 10 seconds.
pub(crate) const LEASE: Duration = Duration::from_secs(10);
/// How often an instance renews its entries and reads the others': every 2 seconds.
pub(crate) const RENEW_EVERY: Duration = Duration::from_secs(2);
/// The longest one Redis round trip may take (connect, command or pipeline): 1 second. A login or a resume
/// waits at most this long for Redis before it goes on with local state.
pub(crate) const REDIS_TIMEOUT: Duration = Duration::from_secs(1);
/// Player changes queued for Redis between renewals: 4,096; past it the next renewal rewrites the whole table.
const UPDATE_QUEUE: usize = 4096;
/// The index of instance ids expires this long after the last renewal of any instance: 60 seconds. An id
/// whose lease entry is gone leaves the index at the next renewal of any other instance.
pub(super) const PRUNE_AFTER: Duration = Duration::from_secs(60);
/// Redis as last seen by the renewals (`RedisNetwork::up`): not tried yet, answered, did not answer.
const REDIS_UNKNOWN: u8 = 0;
const REDIS_UP: u8 = 1;
const REDIS_DOWN: u8 = 2;
/// Links a login or a resume asked for that failed (a kick, a carried resume): 10 lines per 10 seconds.
static LINK_FAILED_LOG: std::sync::LazyLock<crate::limits::LogLimiter> =
    std::sync::LazyLock::new(|| crate::limits::LogLimiter::new(10, Duration::from_secs(10)));

/// This instance's place in the network.
pub(crate) struct RedisNetwork {
    pub(crate) config: NetworkConfig,
    /// 16 hex digits: the resume tokens' instance id.
    pub(crate) id: String,
    /// `moonbridge:<name>:`.
    pub(super) prefix: String,
    /// What the others dial.
    pub(super) peer_address: String,
    pub(crate) secret: link::Secret,
    /// How Redis is reached: `redis_url`'s host, or the master the sentinels name.
    dial: Dial,
    redis: Mutex<Option<ConnectionManager>>,
    up: AtomicU8,
    /// Why the last renewal failed, while Redis is unreachable.
    trouble: Mutex<Option<String>>,
    /// Live instances other than this one: id → peer address (as of the last renewal; signed entries only).
    pub(super) peers: RwLock<HashMap<String, SocketAddr>>,
    pub(super) players: Arc<PlayerTable>,
    updates: Mutex<Option<mpsc::Receiver<Update>>>,
    overflowed: Arc<AtomicBool>,
    pub(crate) metrics: NetworkMetrics,
    /// Cancelled at shutdown: forwarded connections end (their players resume at another instance).
    pub(crate) stop: CancellationToken,
}

impl std::fmt::Debug for RedisNetwork {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("RedisNetwork").field("id", &self.id).field("name", &self.config.name).finish_non_exhaustive()
    }
}

impl RedisNetwork {
    /// Reads the secret and checks the Redis URL; `id` is the resume table's instance id, `peer_address` what
    /// the others dial (`peer_address`, or the bound `peer_bind`). Nothing is
    /// connected yet ([`RedisNetwork::run`] does that, and keeps trying).
    pub(crate) fn new(
        config: NetworkConfig,
        id: String,
        players: Arc<PlayerTable>,
        metrics: NetworkMetrics,
        peer_address: String,
    ) -> Result<Self, NetworkError> {
        let secret = link::Secret::load(&config.secret_file)?;
        let dial = Dial::new(&config)?;
        let (tx, rx) = mpsc::channel(UPDATE_QUEUE);
        let overflowed = Arc::new(AtomicBool::new(false));
        players.send_updates_to(Updates { tx, overflowed: Arc::clone(&overflowed) });
        Ok(Self {
            prefix: format!("moonbridge:{}:", config.name),
            peer_address,
            config,
            id,
            secret,
            dial,
            redis: Mutex::new(None),
            up: AtomicU8::new(REDIS_UNKNOWN),
            trouble: Mutex::new(None),
            peers: RwLock::new(HashMap::new()),
            players,
            updates: Mutex::new(Some(rx)),
            overflowed,
            metrics,
            stop: CancellationToken::new(),
        })
    }

    pub(super) fn key(&self, what: &str) -> String {
        format!("{}{what}", self.prefix)
    }

    pub(super) fn players_key(&self, id: &str) -> String {
        format!("{}players:{id}", self.prefix)
    }

    /// The claim of name `lower` (lower case).
    pub(super) fn name_key(&self, lower: &str) -> String {
        format!("{}name:{lower}", self.prefix)
    }

    /// What the other instances dial to reach this one (`peer_address`, or found at start).
    pub(crate) fn advertised(&self) -> &str {
        &self.peer_address
    }

    /// How many other instances were live at the last renewal (a drain moves players only when some are).
    pub(crate) fn live_peers(&self) -> usize {
        self.peers.read().unwrap_or_else(PoisonError::into_inner).len()
    }

    /// The peer address of live instance `id` (other than this one), as of the last renewal.
    pub(crate) fn peer_of(&self, id: &str) -> Option<String> {
        self.peers.read().unwrap_or_else(PoisonError::into_inner).get(id).map(SocketAddr::to_string)
    }

    /// Whether `ip` is a live instance's address (as its signed entry names it): its link openings are not
    /// held to the per-source bounds (`super::openings`).
    pub(crate) fn is_instance_ip(&self, ip: std::net::IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.peers.read().unwrap_or_else(PoisonError::into_inner).values().any(|p| p.ip().to_canonical() == ip)
    }

    fn connection(&self) -> Option<ConnectionManager> {
        self.redis.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    /// Applies `duplicate_login` to a login of `name`: on this instance, and on the network through the name's
    /// claim in Redis, taken atomically so that two logins of one name at once cannot both get in
    /// (`refuse_new`: `SET … NX`, the second is refused; `kick_existing`: `SET … GET`, the older holder is
    /// told to end its session over an instance link). Waits for Redis at most [`REDIS_TIMEOUT`] and for a
    /// kick at most the link's opening; without Redis only this instance is checked.
    pub(crate) async fn admit_name(&self, name: &str) -> Admit {
        let policy = self.config.duplicate_login;
        if self.players.find(name).is_some() {
            if policy == DuplicateLogin::RefuseNew {
                self.metrics.duplicate(DuplicateAction::RefusedNew);
                return Admit::Refuse;
            }
            self.players.kick(name, KICKED_ELSEWHERE);
            self.metrics.duplicate(DuplicateAction::KickedExisting);
        }
        let lower = name.to_lowercase();
        let nonce = rand_core::RngCore::next_u64(&mut rand_core::OsRng);
        let value = claim_value(&self.secret, &self.config.name, &lower, &self.id, nonce, now_ms());
        let key = self.name_key(&lower);
        // Held from here: whatever Redis answers (or not), the release names this login's value.
        let claim = Claim { players: Arc::clone(&self.players), key: lower.clone(), value: Some(value.clone()) };
        let Some(mut con) = self.connection() else { return Admit::Go(claim) };
        // refuse_new: "OK" when claimed, nil when held; kick_existing: the previous holder, or nil. Without an
        // answer the login goes on with local state, and the next renewal settles the claim.
        let answer = match policy {
            DuplicateLogin::RefuseNew => {
                let mut eval = redis::cmd("EVAL");
                eval.arg(CLAIM_NEW).arg(1).arg(&key).arg(&value).arg(lease_ms());
                let Ok(Ok((claimed, replaced))) =
                    tokio::time::timeout(REDIS_TIMEOUT, eval.query_async::<(i64, i64)>(&mut con)).await
                else {
                    return Admit::Go(claim);
                };
                if replaced == 1 {
                    super::entries::report(&self.metrics, BadEntry::WrongTypeClaim, &key);
                }
                let claimed = claimed == 1 || self.take_forged(&mut con, &lower, &value).await;
                claimed.then(|| "OK".to_string())
            }
            DuplicateLogin::KickExisting => {
                let mut set = redis::cmd("SET");
                set.arg(&key).arg(&value).arg("PX").arg(lease_ms()).arg("GET");
                match tokio::time::timeout(REDIS_TIMEOUT, set.query_async::<Option<String>>(&mut con)).await {
                    Ok(Ok(answer)) => answer,
                    _ => return Admit::Go(claim),
                }
            }
        };
        match (policy, answer) {
            (DuplicateLogin::RefuseNew, None) => {
                // Held by another instance, or by a login of the same name here that is still under way.
                let _ = claim.take();
                self.metrics.duplicate(DuplicateAction::RefusedNew);
                Admit::Refuse
            }
            (DuplicateLogin::KickExisting, Some(holder)) => {
                let instance = holder.split(':').next().unwrap_or_default();
                if instance != self.id {
                    self.metrics.duplicate(DuplicateAction::KickedExisting);
                    match self.peer_of(instance) {
                        Some(peer) => {
                            if let Err(e) = link::kick(&peer, &self.secret, name, &holder, KICKED_ELSEWHERE).await {
                                if let Some(suppressed) = LINK_FAILED_LOG.allow() {
                                    warn!(%instance, %peer, suppressed, "could not ask the instance holding {name} to end that session ({e}); it ends it at its next renewal");
                                }
                            }
                        }
                        None => {
                            if let Some(suppressed) = LINK_FAILED_LOG.allow() {
                                warn!(%instance, suppressed, "the instance holding {name} is not known here yet; it ends that session at its next renewal");
                            }
                        }
                    }
                }
                // One here: the player table replaces it at registration.
                Admit::Go(claim)
            }
            _ => Admit::Go(claim),
        }
    }

    /// Renews this instance's leases and reads the others' until `stop`, then removes this instance's entries
    /// (so its players leave the network's counts at once).
    pub(crate) async fn run(self: Arc<Self>, stop: CancellationToken) {
        let Some(mut updates) = self.updates.lock().unwrap_or_else(PoisonError::into_inner).take() else { return };
        let mut tick = tokio::time::interval(RENEW_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        // The first renewal writes everything.
        let mut rewrite = true;
        // Claims to release with the next rewrite: those of changes a rewrite replaced or Redis did not take (at
        // most UPDATE_QUEUE, the newest).
        let mut releases: Vec<(String, String)> = Vec::new();
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let changes = self.players.changes();
                    // A change that did not fit the queue asks for a rewrite (taken here only, where the queue is
                    // drained).
                    if self.overflowed.swap(false, Ordering::Relaxed) {
                        rewrite = true;
                    }
                    if rewrite {
                        // The snapshot about to be written holds every change queued so far: none of them may
                        // be applied after it (an older change would undo a newer one). Their releases are
                        // kept: a release names one login's claim, so it is right whenever it is applied.
                        while let Ok(update) = updates.try_recv() {
                            releases.extend(release_of(update));
                        }
                    }
                    // Bounded: a claim not released lives at most one lease after its last renewal anyway.
                    if releases.len() > UPDATE_QUEUE {
                        releases.drain(..releases.len() - UPDATE_QUEUE);
                    }
                    // With no change in flight, Redis must hold exactly this instance's players.
                    let settled = updates.is_empty();
                    let renewed = self.renew(&mut rewrite, &mut releases, settled.then_some(changes)).await;
                    self.set_up(renewed);
                }
                Some(update) = updates.recv() => {
                    if rewrite {
                        releases.extend(release_of(update));
                    } else if let Err(update) = self.apply(update).await {
                        releases.extend(release_of(update));
                        rewrite = true;
                    }
                }
                () = stop.cancelled() => break,
            }
        }
        if let Some(mut con) = self.connection() {
            let mut pipe = redis::pipe();
            let claims = self.players.records().into_iter().filter_map(|(key, _, claim)| Some((key, claim?)));
            for (key, value) in releases.into_iter().chain(claims) {
                self.release_claim(&mut pipe, &key, &value);
            }
            pipe.del(self.key(&format!("instance:{}", self.id))).ignore();
            pipe.del(self.players_key(&self.id)).ignore();
            pipe.zrem(self.key("instances"), &self.id).ignore();
            let _ = tokio::time::timeout(REDIS_TIMEOUT, pipe.query_async::<()>(&mut con)).await;
        }
        // Out of the network: nothing of the others is kept (a drained instance that stays up lists and counts
        // only its own, and asks no peer).
        self.players.set_others(Vec::new());
        self.peers.write().unwrap_or_else(PoisonError::into_inner).clear();
        self.metrics.instances.set(1);
        self.metrics.players.set(self.players.local_count() as i64);
        self.metrics.redis_up.set(0);
    }

    /// Logs (with the cause) and counts a change between Redis reachable and not.
    fn set_up(&self, renewed: Result<(), String>) {
        let ok = renewed.is_ok();
        *self.trouble.lock().unwrap_or_else(PoisonError::into_inner) = renewed.as_ref().err().cloned();
        self.metrics.redis_up.set(i64::from(ok));
        let now = if ok { REDIS_UP } else { REDIS_DOWN };
        // From the start too: an instance that never reaches Redis says so once.
        if self.up.swap(now, Ordering::Relaxed) != now {
            if ok {
                info!(network = %self.config.name, instance = %self.id, "Redis reachable: this instance is part of the network");
            } else {
                let why = renewed.err().unwrap_or_default();
                warn!(network = %self.config.name, instance = %self.id, "Redis unreachable ({why}): serving with this instance's state only (logins go on; resumes to other instances are refused)");
                self.players.set_others(Vec::new());
                self.peers.write().unwrap_or_else(PoisonError::into_inner).clear();
                self.metrics.instances.set(1);
                self.metrics.players.set(self.players.local_count() as i64);
            }
        }
    }

    /// One player change and its name's claim; the change back when Redis did not take it. A player whose
    /// claim another login won (`RENEW_CLAIMS`) is told to go.
    async fn apply(&self, update: Update) -> Result<(), Update> {
        let Some(mut con) = self.connection() else { return Err(update) };
        let hash = self.players_key(&self.id);
        let mut pipe = redis::pipe();
        let mut calls = 0;
        match (&update.change, &update.claim) {
            (Change::Plays(record), claim) => {
                if let Ok(json) = serde_json::to_string(record) {
                    pipe.hset(&hash, &update.key, json).ignore().pexpire(&hash, lease_ms()).ignore();
                }
                if let Some(value) = claim {
                    calls = self.renew_claims(&mut pipe, [(update.key.as_str(), value.as_str())]);
                }
            }
            (Change::Left | Change::NotIn, claim) => {
                if update.change == Change::Left {
                    pipe.hdel(&hash, &update.key).ignore();
                }
                if let Some(value) = claim {
                    self.release_claim(&mut pipe, &update.key, value);
                }
            }
        }
        let answers: Vec<redis::Value> = match tokio::time::timeout(REDIS_TIMEOUT, pipe.query_async(&mut con)).await {
            Ok(Ok(a)) => a,
            _ => return Err(update),
        };
        if let (Some(value), true) = (&update.claim, calls > 0) {
            let reclaim = self.lost_claims(&[(update.key.clone(), value.clone())], answers);
            self.reclaim(&mut con, reclaim).await;
        }
        Ok(())
    }

    /// Connects when not yet connected; one renewal; the others read.
    ///
    /// # Errors
    /// Why Redis failed (as the log says it): not connected, a refused command, or no answer in time.
    async fn renew(
        &self,
        rewrite: &mut bool,
        releases: &mut Vec<(String, String)>,
        settled: Option<u64>,
    ) -> Result<(), String> {
        let con = match self.connection() {
            Some(c) => c,
            None => {
                let cfg = ConnectionManagerConfig::new()
                    .set_connection_timeout(Some(REDIS_TIMEOUT))
                    .set_response_timeout(Some(REDIS_TIMEOUT))
                    // No retry here: a renewal that fails drops the connection, and the next one (one renewal
                    // period later) connects again.
                    .set_number_of_retries(0);
                // With sentinels, the master is asked for at each connect: after a failover the next renewal
                // reaches the new master.
                let connect = async {
                    let client = self.dial.client().await?;
                    ConnectionManager::new_with_config(client, cfg).await
                };
                match tokio::time::timeout(REDIS_TIMEOUT * 3, connect).await {
                    Ok(Ok(c)) => {
                        *self.redis.lock().unwrap_or_else(PoisonError::into_inner) = Some(c.clone());
                        c
                    }
                    failed => {
                        self.metrics.lease(LeaseResult::Missed);
                        *rewrite = true;
                        let (cause, why) = match failed {
                            Ok(Err(e)) => (cause_of(&e), format!("cannot connect: {e}")),
                            _ => (RedisCause::Timeout, "cannot connect: no answer in time".into()),
                        };
                        self.metrics.redis_error(cause);
                        return Err(why);
                    }
                }
            }
        };
        let result = tokio::time::timeout(REDIS_TIMEOUT * 2, self.renew_on(con, rewrite, releases, settled)).await;
        let result = match result {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => {
                self.metrics.redis_error(cause_of(&e));
                Err(e.to_string())
            }
            Err(_) => {
                self.metrics.redis_error(RedisCause::Timeout);
                Err("no answer in time".into())
            }
        };
        self.metrics.lease(if result.is_ok() { LeaseResult::Renewed } else { LeaseResult::Missed });
        if result.is_err() {
            // Whatever was lost meanwhile is written again at the next renewal that works, on a new connection:
            // the connection manager would reconnect only after its next request failed as well, which would
            // make the state come back one renewal later than it can.
            *rewrite = true;
            *self.redis.lock().unwrap_or_else(PoisonError::into_inner) = None;
        }
        result
    }
}

impl Network for RedisNetwork {
    fn duplicate_login(&self) -> DuplicateLogin {
        self.config.duplicate_login
    }

    fn admit<'a>(&'a self, name: &'a str) -> BoxFuture<'a, Admit> {
        Box::pin(self.admit_name(name))
    }

    fn trouble(&self) -> Option<String> {
        self.trouble.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn carry(&self, owner: &str, resume: CarriedResume) -> Option<BoxFuture<'_, Result<Carrier, LinkError>>> {
        let peer = self.peer_of(owner).filter(|_| owner != self.id)?;
        Some(Box::pin(async move {
            let client = resume.client;
            match link::open_carrier(&peer, &self.secret, resume).await {
                Ok(stream) => Ok(Carrier { stream, metrics: self.metrics.clone(), stop: self.stop.clone() }),
                Err(e) => {
                    // A player presenting tokens can cause one per request: through the limiter.
                    if let Some(suppressed) = LINK_FAILED_LOG.allow() {
                        info!(client = %client, peer = %peer, suppressed, "resume for another instance: {e}");
                    }
                    Err(e)
                }
            }
        }))
    }

    fn fetch_move<'a>(
        &'a self,
        ticket: &'a moonbridge_protocol::ws::v2::ResumeToken,
        received: u64,
        sent: u64,
    ) -> Option<BoxFuture<'a, Result<MoveAnswer, LinkError>>> {
        let owner = crate::resume::hex_id(&ticket.instance);
        let peer = self.peer_of(&owner).filter(|_| owner != self.id)?;
        Some(Box::pin(async move { super::moves::fetch(&peer, &self.secret, ticket, received, sent).await }))
    }

    fn id(&self) -> &str {
        &self.id
    }

    fn peers(&self) -> Vec<String> {
        let mut ids: Vec<String> = self.peers.read().unwrap_or_else(PoisonError::into_inner).keys().cloned().collect();
        ids.sort_unstable();
        ids
    }

    fn act<'a>(&'a self, id: &'a str, action: &'a Action) -> Option<BoxFuture<'a, Result<Reach, LinkError>>> {
        let peer = self.peer_of(id).filter(|_| id != self.id)?;
        Some(Box::pin(async move { link::act(&peer, &self.secret, action).await }))
    }
}

pub(super) fn lease_ms() -> i64 {
    LEASE.as_millis() as i64
}
