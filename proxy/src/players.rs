//! This proxy's players in Play ([`PlayerTable`]): what the `BungeeCord` plugin channel's requests are
//! answered from (`PlayerCount`, `PlayerList`, `UUIDOther`, `IPOther`, …) and how a request reaches another
//! player's session (`Message`, `KickPlayer`, `Forward`, `ForwardToPlayer`: a [`Command`] on that session's
//! channel).
//!
//! Every session registers once its backend accepted the login and leaves when it ends ([`Registration`]
//! removes it on drop). Names are matched without regard to case, as a Minecraft server matches them.
//!
//! In a network of instances (`[network]`, `crate::network`) the table also holds what the network task last
//! read of the other instances' players: counts and lists ([`PlayerTable::count`], [`PlayerTable::names`])
//! are then the network's, and every change to this instance's players is queued for Redis ([`Updates`]).
//! [`PlayerTable::find`] and the commands stay local.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError, RwLock};

use tokio::sync::mpsc;
use tokio_util::sync::{CancellationToken, WaitForCancellationFuture};

mod action;

use crate::transport::{Carriage, Transport};
pub use action::{Action, ActionError, Reach, MAX_NAME_BYTES, MAX_TEXT_BYTES};

/// Commands a session may have waiting (a plugin that floods `Message` cannot grow a session's queue past
/// this; more are dropped).
pub(crate) const COMMAND_QUEUE: usize = 64;

/// What another session asks of a player's session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// A chat line (a JSON chat component) for the player.
    Chat(String),
    /// Disconnect the player with this reason (a JSON chat component).
    Kick(String),
    /// A `BungeeCord` Plugin Message (its payload: the plugin's channel, `i16` length, data) for the backend the
    /// player is on.
    Forward(Vec<u8>),
    /// An operator sends the player to backend `.0` (the admin API's `send`): the switch a `BungeeCord`
    /// `Connect` starts, to any configured backend.
    Switch(String),
    /// This instance is draining: move the player to another instance of the network (docs/network.md,
    /// "Drain"), or count it `not_movable` and stay.
    Move,
}

/// A session's stop signal: the proxy's shutdown (its parent token), or a kick of this one session (a
/// duplicate login elsewhere). The relay injects a Play Disconnect with [`Stop::kicked`]'s reason, or the
/// shutdown reason, at a frame boundary.
#[derive(Debug)]
pub(crate) struct Stop {
    token: CancellationToken,
    kicked: OnceLock<String>,
    /// The session's delivery figures (its relay writes them; the admin API reads them).
    pub(crate) delivery: crate::delivery::Delivery,
}

impl Stop {
    /// A signal that fires with `shutdown` or on [`Stop::kick`].
    pub(crate) fn child_of(shutdown: &CancellationToken) -> Arc<Self> {
        Arc::new(Self { token: shutdown.child_token(), kicked: OnceLock::new(), delivery: Default::default() })
    }

    /// Completes when the session must stop.
    pub(crate) fn cancelled(&self) -> WaitForCancellationFuture<'_> {
        self.token.cancelled()
    }

    /// Stops this session with `reason` (plain text, shown on the player's disconnect screen).
    pub(crate) fn kick(&self, reason: &str) {
        let _ = self.kicked.set(reason.to_string());
        self.token.cancel();
    }

    /// Stops this session as the proxy's shutdown does (the shutdown message), ahead of the others.
    pub(crate) fn shut(&self) {
        self.token.cancel();
    }

    /// The kick's reason, when the session was kicked rather than shut down.
    pub(crate) fn kicked(&self) -> Option<&str> {
        self.kicked.get().map(String::as_str)
    }
}

/// A player as the network's table records it (`moonbridge:<name>:players:<instance>` in Redis, as JSON), and
/// as the admin API lists it. The fields after `server` are absent from the records of versions before the admin API.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
pub(crate) struct Record {
    pub(crate) name: String,
    /// 32 hex digits, no dashes.
    pub(crate) uuid: String,
    /// The backend the player is on.
    pub(crate) server: String,
    /// The player's real address (what a trusted proxy vouched for, or the TCP peer).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub(crate) address: Option<SocketAddr>,
    /// The listener's transport.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub(crate) transport: Option<Transport>,
    /// How the player's stream is carried.
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub(crate) carriage: Option<Carriage>,
    /// When the player logged in, in milliseconds since the Unix epoch (a moved player keeps its login's).
    #[serde(default, skip_serializing_if = "Option::is_none", deserialize_with = "lenient")]
    pub(crate) since_ms: Option<u64>,
}

/// A descriptive field of a [`Record`] that does not read (a transport or carriage a later version added) is
/// `None`, not a bad record: the player still counts.
fn lenient<'de, D: serde::Deserializer<'de>, T: serde::de::DeserializeOwned>(d: D) -> Result<Option<T>, D::Error> {
    let value = <Option<serde_json::Value> as serde::Deserialize>::deserialize(d)?;
    Ok(value.and_then(|v| serde_json::from_value(v).ok()))
}

/// A change to this instance's players, for the network task.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Update {
    /// The lower-case name.
    pub(crate) key: String,
    pub(crate) change: Change,
    /// The login's claim of the name in Redis (`crate::network::Claim`): renewed with the record, released
    /// (only while it still holds this value) when the player left or the login did not get in.
    pub(crate) claim: Option<String>,
}

/// What happened to a name of this instance.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Change {
    /// The player plays (joined, or switched to another backend): its record.
    Plays(Record),
    /// The player left: its record goes, and its claim is released.
    Left,
    /// A login that claimed the name did not get in: only its claim is released (a player of that name here
    /// stays recorded).
    NotIn,
}

/// What [`PlayerTable::register`] does when a session of the same name is registered already (two logins of
/// one name at once).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Duplicate {
    /// The new session replaces the older one in the table; the older plays on (outside a network: the
    /// backends decide).
    Replace,
    /// One of the two stays and the other is told to go with `reason`: the later login (`kick_existing`) or
    /// the earlier (`refuse_new`), by their claims ([`claim_order`]), as the network's renewal decides between
    /// two instances; by the order of registration when a claim is missing.
    Keep {
        /// Keep the later login (`kick_existing`), or the earlier (`refuse_new`).
        later: bool,
        /// Plain text for the session that goes.
        reason: &'static str,
    },
}

/// How two claims of one name compare (`<instance>:<nonce>:<login ms>:<signature>`): by login time, then by
/// the whole value, so every instance (and the `RENEW_CLAIMS` script in Redis) orders them alike. A value
/// without a time counts as the earliest.
pub(crate) fn claim_order(claim: &str) -> (u64, &str) {
    let born = claim.split(':').nth(2).and_then(|t| t.parse().ok()).unwrap_or(0);
    (born, claim)
}

/// Now, in milliseconds since the Unix epoch (0 before it).
pub(crate) fn now_ms() -> u64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| u64::try_from(d.as_millis()).unwrap_or(u64::MAX))
}

/// Where the table queues its changes in a network (bounded; an overflow asks for a full rewrite instead).
#[derive(Debug)]
pub(crate) struct Updates {
    pub(crate) tx: mpsc::Sender<Update>,
    /// Set when an update could not be queued: the network task writes the whole table at its next renewal.
    pub(crate) overflowed: Arc<AtomicBool>,
}

/// One player in the table.
#[derive(Debug)]
struct Entry {
    /// Which registration this is (a second session under the same name replaces the first).
    id: u64,
    name: String,
    /// 32 hex digits, no dashes.
    uuid: String,
    address: SocketAddr,
    transport: Transport,
    carriage: Carriage,
    /// When the player logged in (its claim's time in a network), in milliseconds since the Unix epoch.
    since_ms: u64,
    /// The backend the player is on.
    server: String,
    /// The session's command channel, when it takes commands (a session whose backend cannot send players on
    /// does not).
    commands: Option<mpsc::Sender<Command>>,
    /// The session's stop signal (kicks).
    stop: Option<Arc<Stop>>,
    /// In a network: the login's claim of the name in Redis (see [`Update::claim`]).
    claim: Option<String>,
    /// A drain can move the player.
    movable: bool,
    /// A drain took the player already (asked it to move, or shut it).
    drained: bool,
}

impl Entry {
    fn record(&self) -> Record {
        Record {
            name: self.name.clone(),
            uuid: self.uuid.clone(),
            server: self.server.clone(),
            address: Some(self.address),
            transport: Some(self.transport),
            carriage: Some(self.carriage),
            since_ms: Some(self.since_ms),
        }
    }
}

/// This proxy's players in Play, by lower-case name.
#[derive(Debug, Default)]
pub(crate) struct PlayerTable {
    inner: Mutex<HashMap<String, Entry>>,
    next_id: AtomicU64,
    /// The other instances' players, as the network task last read them, each name once; empty outside a
    /// network or while Redis is unreachable.
    others: RwLock<Vec<Other>>,
    /// In a network: where changes go.
    updates: OnceLock<Updates>,
    /// Changes made so far (queued or not): the network task compares it across a renewal to know that no
    /// change happened meanwhile.
    changes: AtomicU64,
}

/// A player of another instance, as the network task last read it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Other {
    /// The lower-case name.
    pub(crate) key: String,
    /// The id of the instance it plays on.
    pub(crate) instance: String,
    pub(crate) record: Record,
}

/// A player's place in the table, removed on drop.
#[derive(Debug)]
pub(crate) struct Registration {
    table: Arc<PlayerTable>,
    key: String,
    id: u64,
}

/// What a player's session knows of a player in the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) name: String,
    pub(crate) uuid: String,
    pub(crate) address: SocketAddr,
    pub(crate) transport: Transport,
    pub(crate) carriage: Carriage,
    pub(crate) server: String,
    /// A drain can move the player to another instance (docs/network.md, "Drain").
    pub(crate) movable: bool,
}

impl PlayerTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a player on backend `server`; `commands` when the session takes [`Command`]s; `stop` to be
    /// kickable; `claim`, in a network, the login's claim of the name (see [`Update::claim`]); `duplicate`
    /// decides between this session and one already registered under the same name.
    pub(crate) fn register(
        self: &Arc<Self>,
        seen: Seen,
        commands: Option<mpsc::Sender<Command>>,
        stop: Option<Arc<Stop>>,
        claim: Option<String>,
        duplicate: Duplicate,
    ) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let key = seen.name.to_lowercase();
        let Seen { name, uuid, address, transport, carriage, server, movable } = seen;
        let since_ms = claim.as_deref().map(|c| claim_order(c).0).filter(|&t| t > 0).unwrap_or_else(now_ms);
        // Queued under the table's lock, so the network sees the changes in the table's order.
        let mut table = self.lock();
        if let (Duplicate::Keep { later, reason }, Some(older)) = (duplicate, table.get(&key)) {
            let new_is_later = match (&claim, &older.claim) {
                (Some(new), Some(old)) => claim_order(new) > claim_order(old),
                _ => true,
            };
            if new_is_later != later {
                // This one goes, and is not in the table: its end changes nothing there.
                self.changed(&key, Change::NotIn, claim);
                drop(table);
                if let Some(stop) = stop {
                    stop.kick(reason);
                }
                return Registration { table: Arc::clone(self), key, id };
            }
        }
        let entry = Entry {
            id,
            name,
            uuid,
            address,
            transport,
            carriage,
            since_ms,
            server,
            commands,
            stop,
            claim,
            movable,
            drained: false,
        };
        self.changed(&key, Change::Plays(entry.record()), entry.claim.clone());
        let older = table.insert(key.clone(), entry);
        drop(table);
        if let (Some(older), Duplicate::Keep { reason, .. }) = (older, duplicate) {
            // Its claim is not released: the name is this one's now.
            if let Some(stop) = older.stop {
                stop.kick(reason);
            }
        }
        Registration { table: Arc::clone(self), key, id }
    }

    /// Sends the network task its change queue's receiving end from now on.
    pub(crate) fn send_updates_to(&self, updates: Updates) {
        let _ = self.updates.set(updates);
    }

    /// Queues a change for the network (nothing outside a network). Called with the table locked, so the
    /// queue's order is the table's. A change that does not fit the queue asks for a full rewrite (its claim's
    /// release, if any, is lost: that claim expires with its lease instead).
    fn changed(&self, key: &str, change: Change, claim: Option<String>) {
        self.changes.fetch_add(1, Ordering::Relaxed);
        if let Some(u) = self.updates.get() {
            if u.tx.try_send(Update { key: key.to_string(), change, claim }).is_err() {
                u.overflowed.store(true, Ordering::Relaxed);
            }
        }
    }

    /// Changes made to the table so far.
    pub(crate) fn changes(&self) -> u64 {
        self.changes.load(Ordering::Relaxed)
    }

    /// Queues the release of claim `claim` of name `key` (lower case) for the network: a login that claimed
    /// the name and did not get in.
    pub(crate) fn release(&self, key: &str, claim: String) {
        let _table = self.lock();
        self.changed(key, Change::NotIn, Some(claim));
    }

    /// This instance's players as the network records them, by lower-case name, with their claims.
    pub(crate) fn records(&self) -> Vec<(String, Record, Option<String>)> {
        self.lock().iter().map(|(k, e)| (k.clone(), e.record(), e.claim.clone())).collect()
    }

    /// Stops the session of player `key` (lower case) with `reason` if it still holds claim `claim`; false
    /// otherwise.
    pub(crate) fn kick_claim(&self, key: &str, claim: &str, reason: &str) -> bool {
        let stop = self.lock().get(key).filter(|e| e.claim.as_deref() == Some(claim)).and_then(|e| e.stop.clone());
        stop.map(|s| s.kick(reason)).is_some()
    }

    /// Replaces what is known of the other instances' players (instance id, record). A name read twice (a
    /// player moving between two other instances is held by both for a moment) is kept once.
    pub(crate) fn set_others(&self, others: Vec<(String, Record)>) {
        let mut seen = std::collections::HashSet::with_capacity(others.len());
        let keyed = others.into_iter().map(|(instance, record)| Other {
            key: record.name.to_ascii_lowercase(),
            instance,
            record,
        });
        let others = keyed.filter(|o| seen.insert(o.key.clone())).collect();
        *self.others.write().unwrap_or_else(PoisonError::into_inner) = others;
    }

    /// Every player of the network as last known: this instance's (`None` for the instance) and the others'
    /// not held here, by name.
    pub(crate) fn everyone(&self) -> Vec<(Option<String>, Record)> {
        let here = self.lock();
        let mut all: Vec<(Option<String>, Record)> = here.values().map(|e| (None, e.record())).collect();
        let others = self.others.read().unwrap_or_else(PoisonError::into_inner);
        all.extend(
            others.iter().filter(|o| !here.contains_key(&o.key)).map(|o| (Some(o.instance.clone()), o.record.clone())),
        );
        all.sort_unstable_by(|a, b| a.1.name.cmp(&b.1.name));
        all
    }

    /// Players in Play on `server`, or on every backend for `None`: this instance's and, in a network, the
    /// other instances' as last read; a player moving here, held by its draining instance too for a moment,
    /// counts once.
    pub(crate) fn count(&self, server: Option<&str>) -> usize {
        let here = self.lock();
        let mine = here.values().filter(|e| server.is_none_or(|s| e.server == s)).count();
        let others = self.others.read().unwrap_or_else(PoisonError::into_inner);
        let elsewhere =
            others.iter().filter(|o| server.is_none_or(|want| o.record.server == want) && !here.contains_key(&o.key));
        mine + elsewhere.count()
    }

    /// Players in Play on this instance alone.
    pub(crate) fn local_count(&self) -> usize {
        self.lock().len()
    }

    /// The names of this instance's players on `server` (every backend for `None`).
    pub(crate) fn local_names(&self, server: Option<&str>) -> Vec<String> {
        self.lock().values().filter(|e| server.is_none_or(|s| e.server == s)).map(|e| e.name.clone()).collect()
    }

    /// The names of the players on `server` (every backend for `None`), sorted, the network's included.
    pub(crate) fn names(&self, server: Option<&str>) -> Vec<String> {
        let mut names: Vec<String> =
            self.lock().values().filter(|e| server.is_none_or(|s| e.server == s)).map(|e| e.name.clone()).collect();
        let others = self.others.read().unwrap_or_else(PoisonError::into_inner);
        let theirs = others.iter().filter(|o| server.is_none_or(|want| o.record.server == want));
        names.extend(theirs.map(|o| o.record.name.clone()));
        names.sort_unstable();
        names.dedup();
        names
    }

    /// Stops player `name`'s session with `reason` (plain text); false when the player is not here or its
    /// session cannot be stopped.
    pub(crate) fn kick(&self, name: &str, reason: &str) -> bool {
        let stop = self.lock().get(&name.to_lowercase()).and_then(|e| e.stop.clone());
        stop.map(|s| s.kick(reason)).is_some()
    }

    /// What the table knows of player `name`.
    pub(crate) fn find(&self, name: &str) -> Option<Seen> {
        self.lock().get(&name.to_lowercase()).map(|e| Seen {
            name: e.name.clone(),
            uuid: e.uuid.clone(),
            address: e.address,
            transport: e.transport,
            carriage: e.carriage,
            server: e.server.clone(),
            movable: e.movable,
        })
    }

    /// Queues `command` for player `name`; false when the player is not here, takes no commands, or has
    /// [`COMMAND_QUEUE`] waiting.
    pub(crate) fn send(&self, name: &str, command: Command) -> bool {
        let sender = self.lock().get(&name.to_lowercase()).and_then(|e| e.commands.clone());
        sender.is_some_and(|s| s.try_send(command).is_ok())
    }

    /// This instance's players with their stop signals (which carry their delivery figures), by name.
    pub(crate) fn local_stops(&self) -> Vec<(String, Transport, Carriage, Arc<Stop>)> {
        let mut v: Vec<_> = self
            .lock()
            .values()
            .filter_map(|e| e.stop.clone().map(|s| (e.name.clone(), e.transport, e.carriage, s)))
            .collect();
        v.sort_by(|a, b| a.0.cmp(&b.0));
        v
    }

    /// For a drain: the command channels of the players that can move, and the stop signals of the others;
    /// each player once (a later call returns only the players registered since).
    pub(crate) fn drain_split(&self) -> (Vec<mpsc::Sender<Command>>, Vec<Arc<Stop>>) {
        let (mut movers, mut others) = (Vec::new(), Vec::new());
        for e in self.lock().values_mut().filter(|e| !e.drained) {
            e.drained = true;
            match (&e.commands, &e.stop) {
                (Some(tx), _) if e.movable => movers.push(tx.clone()),
                (_, Some(stop)) => others.push(Arc::clone(stop)),
                _ => {}
            }
        }
        (movers, others)
    }

    /// Queues `command` for every player that takes commands; how many got it.
    pub(crate) fn send_all(&self, command: &Command) -> usize {
        let senders: Vec<_> = self.lock().values().filter_map(|e| e.commands.clone()).collect();
        senders.iter().filter(|s| s.try_send(command.clone()).is_ok()).count()
    }

    /// Queues `command` for one player on `server` that takes commands (a message for the server itself goes
    /// through any of its players, as BungeeCord sends it); false when none does.
    pub(crate) fn send_to_server(&self, server: &str, command: Command) -> bool {
        let senders: Vec<_> = self
            .lock()
            .values()
            .filter(|e| e.server == server)
            .filter_map(|e| e.commands.clone())
            .filter(|s| !s.is_closed())
            .collect();
        senders.iter().any(|s| s.try_send(command.clone()).is_ok())
    }

    /// The backends with at least one player.
    pub(crate) fn servers(&self) -> Vec<String> {
        let mut servers: Vec<String> = self.lock().values().map(|e| e.server.clone()).collect();
        servers.sort_unstable();
        servers.dedup();
        servers
    }
}

impl Registration {
    /// The player is on backend `server` now (after a switch).
    pub(crate) fn moved_to(&self, server: &str) {
        let mut table = self.table.lock();
        if let Some(e) = table.get_mut(&self.key).filter(|e| e.id == self.id) {
            e.server = server.to_string();
            self.table.changed(&self.key, Change::Plays(e.record()), e.claim.clone());
        }
    }

    /// The login's claim of the name in Redis (in a network).
    pub(crate) fn claim(&self) -> Option<String> {
        self.table.lock().get(&self.key).filter(|e| e.id == self.id).and_then(|e| e.claim.clone())
    }

    /// The player moved to another instance, which holds the claim now: this registration's end leaves it.
    pub(crate) fn forget_claim(&self) {
        if let Some(e) = self.table.lock().get_mut(&self.key).filter(|e| e.id == self.id) {
            e.claim = None;
        }
    }

    /// The table this registration is in.
    pub(crate) fn table(&self) -> &Arc<PlayerTable> {
        &self.table
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut table = self.table.lock();
        if table.get(&self.key).is_some_and(|e| e.id == self.id) {
            let claim = table.remove(&self.key).and_then(|e| e.claim);
            self.table.changed(&self.key, Change::Left, claim);
        }
    }
}

#[cfg(test)]
mod tests;
