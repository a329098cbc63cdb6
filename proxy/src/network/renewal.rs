//! One lease renewal on Redis ([`RedisNetwork::renew_on`]): this instance's entries written, the others'
//! read, each entry on its own ([`super::entries`]): a key of another type, or an entry that is not what an
//! instance writes, is skipped and reported; what is read is bounded ([`MAX_INSTANCES`], [`MAX_PLAYERS_READ`],
//! [`MAX_ENTRY_BYTES`]); any other error answer (out of memory, a read-only replica, a missing permission) or a
//! failed connection fails the renewal, as before.

use std::collections::HashMap;
use std::net::SocketAddr;

use redis::aio::ConnectionManager;
use redis::Value;

use super::claims::now_ms;
use super::entries::{instance_entry, read_instance, read_player, report};
use super::redis::{lease_ms, RedisNetwork, LEASE, PRUNE_AFTER};
use crate::labels::BadEntry;
use crate::players::Record;

/// Instances of a network read at each renewal, at most: 1,000 (the index's first; more are reported).
pub(crate) const MAX_INSTANCES: usize = 1000;
/// Players of one other instance read at each renewal, at most: 20,000 (a hash with more is not read and is
/// reported).
pub(crate) const MAX_PLAYERS_READ: usize = 20_000;
/// Bytes of one player record read, at most: 512 (an instance writes about 100; a longer one reads as empty and
/// is reported). So one instance's players cost at most 10 MiB to read.
pub(crate) const MAX_RECORD_BYTES: usize = 512;
/// Bytes of an instance entry read, at most: 1,024 (an instance writes about 200; a longer one is reported).
pub(crate) const MAX_ENTRY_BYTES: usize = 1024;

/// Reads another instance's player hash only when it holds at most `ARGV[1]` entries: the values (each longer
/// than `ARGV[2]` bytes as an empty string), or the count when over, or `wrongtype` when the key is of another
/// type.
const PLAYERS_UP_TO: &str = r"
local n = redis.pcall('HLEN', KEYS[1])
if type(n) == 'table' then return 'wrongtype' end
if n > tonumber(ARGV[1]) then return n end
local values = redis.call('HVALS', KEYS[1])
local most = tonumber(ARGV[2])
for i, v in ipairs(values) do
  if #v > most then values[i] = '' end
end
return values
";

/// One command's answer in a pipeline with `ignore_errors`: the value; `None` when the key holds another type
/// (`WRONGTYPE`: reported as a bad entry by the caller).
///
/// # Errors
/// Any other error answer: the renewal fails (Redis is out of memory, read-only, or refuses the command).
fn checked(v: Value) -> redis::RedisResult<Option<Value>> {
    match v {
        Value::ServerError(e) if e.code() == "WRONGTYPE" => Ok(None),
        Value::ServerError(e) => Err(e.into()),
        v => Ok(Some(v)),
    }
}

impl RedisNetwork {
    /// One renewal on `con`: the player hash written whole when `rewrite` (with `releases` applied), the
    /// instance's lease and this instance's claims renewed, the others read. With `settled` (no player change
    /// in flight; the table's change count then), when no change happened during the round trip and Redis holds
    /// another number of this instance's players than it has, the hash is written whole again at once.
    ///
    /// # Errors
    /// When Redis could not be asked (connection, timeout) or refused a write; a key of another type is
    /// reported and that entry skipped.
    pub(super) async fn renew_on(
        &self,
        mut con: ConnectionManager,
        rewrite: &mut bool,
        releases: &mut Vec<(String, String)>,
        settled: Option<u64>,
    ) -> redis::RedisResult<()> {
        let now_ms = now_ms();
        let hash = self.players_key(&self.id);
        let records = self.players.records();
        if std::mem::take(rewrite) {
            // One transaction: the hash deleted first, so a key of another type there is replaced too.
            let mut pipe = redis::pipe();
            pipe.atomic().del(&hash).ignore();
            for (key, record, _) in &records {
                if let Ok(json) = serde_json::to_string(record) {
                    pipe.hset(&hash, key, json).ignore();
                }
            }
            pipe.pexpire(&hash, lease_ms()).ignore();
            for (key, value) in releases.iter() {
                self.release_claim(&mut pipe, key, value);
            }
            if let Err(e) = pipe.query_async::<()>(&mut con).await {
                *rewrite = true;
                return Err(e);
            }
            releases.clear();
        }
        let until = now_ms.saturating_add(LEASE.as_millis() as u64);
        let me = instance_entry(&self.secret, &self.config.name, &self.id, &self.peer_address, records.len(), until);
        let claims: Vec<(String, String)> =
            records.iter().filter_map(|(key, _, claim)| Some((key.clone(), claim.clone()?))).collect();
        let index = self.key("instances");
        let mut pipe = redis::pipe();
        // Each answer on its own: an error answer (a key of another type) is a value here, not the round's end,
        // and every write's answer is looked at.
        pipe.ignore_errors();
        pipe.pset_ex(self.key(&format!("instance:{}", self.id)), me, LEASE.as_millis() as u64);
        pipe.zadd(&index, &self.id, now_ms);
        pipe.pexpire(&index, PRUNE_AFTER.as_millis() as i64);
        pipe.pexpire(&hash, lease_ms());
        pipe.hlen(&hash);
        pipe.zcard(&index);
        pipe.zrange(&index, 0, MAX_INSTANCES as isize - 1);
        // The names this instance's players hold live as long as its lease; one another instance took is
        // noticed here.
        let calls = self.renew_claims(&mut pipe, claims.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let answers: Vec<Value> = pipe.query_async(&mut con).await?;
        let mut answers = answers.into_iter().map(checked);
        let mut next = || answers.next().unwrap_or(Ok(Some(Value::Nil)));
        let mut index_ok = true;
        for _write in 0..4 {
            // PSET and PEXPIRE take any type; ZADD answers WRONGTYPE for an index of another type.
            index_ok &= next()?.is_some();
        }
        // Another type than a hash reads as none held: the hash is written whole again.
        let in_redis: Option<usize> = next()?.and_then(|v| redis::from_redis_value(v).ok());
        let listed: Option<usize> = next()?.and_then(|v| redis::from_redis_value(v).ok());
        let ids: Option<Vec<String>> = next()?.and_then(|v| redis::from_redis_value(v).ok());
        let lost =
            (0..calls).map(|_| next().map(|v| v.unwrap_or(Value::Nil))).collect::<redis::RedisResult<Vec<_>>>()?;
        let ids = match ids.filter(|_| index_ok) {
            Some(ids) => ids,
            None => {
                report(&self.metrics, BadEntry::WrongTypeIndex, &index);
                let _: () = redis::cmd("DEL").arg(&index).query_async(&mut con).await?;
                Vec::new()
            }
        };
        if listed.is_some_and(|n| n > MAX_INSTANCES) {
            report(&self.metrics, BadEntry::Oversized, &index);
        }
        let reclaim = self.lost_claims(&claims, lost);
        self.reclaim(&mut con, reclaim).await;
        if settled.is_some_and(|c| c == self.players.changes()) && in_redis != Some(records.len()) {
            // Redis lost some of this instance's players (restarted empty or failed over between renewals, a
            // change not taken, a key of another type): write them all again at the next renewal.
            *rewrite = true;
        }
        let others: Vec<String> = ids.into_iter().filter(|i| *i != self.id).collect();
        let (peers, names, gone) = self.read_others(&mut con, others, now_ms).await?;
        if !gone.is_empty() {
            let _: () = redis::cmd("ZREM").arg(&index).arg(&gone).query_async(&mut con).await?;
        }
        self.metrics.instances.set(peers.len() as i64 + 1);
        // A player moving between instances is held by both for a moment: the table counts each name once, so
        // the count is never above the players really in play.
        self.players.set_others(names);
        self.metrics.players.set(self.players.count(None) as i64);
        *self.peers.write().unwrap_or_else(std::sync::PoisonError::into_inner) = peers;
        if *rewrite {
            // Once: the snapshot is written whole, and the comparison is not repeated.
            return Box::pin(self.renew_on(con, rewrite, releases, None)).await;
        }
        Ok(())
    }

    /// The other live instances' peer addresses and players (instance id, record), and the ids whose lease is
    /// gone.
    /// Entries that are not what an instance writes are skipped and reported.
    async fn read_others(
        &self,
        con: &mut ConnectionManager,
        others: Vec<String>,
        now_ms: u64,
    ) -> redis::RedisResult<(HashMap<String, SocketAddr>, Vec<(String, Record)>, Vec<String>)> {
        let (mut peers, mut names, mut gone) = (HashMap::new(), Vec::new(), Vec::new());
        if others.is_empty() {
            return Ok((peers, names, gone));
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for id in &others {
            // One byte more than an entry may hold: a longer one is seen as such.
            pipe.getrange(self.key(&format!("instance:{id}")), 0, MAX_ENTRY_BYTES as isize);
            pipe.cmd("EVAL")
                .arg(PLAYERS_UP_TO)
                .arg(1)
                .arg(self.players_key(id))
                .arg(MAX_PLAYERS_READ)
                .arg(MAX_RECORD_BYTES);
        }
        let answers: Vec<Value> = pipe.query_async(con).await?;
        let mut answers = answers.into_iter().map(checked);
        for id in others {
            let (Some(entry), Some(players)) = (answers.next(), answers.next()) else { break };
            let entry_key = self.key(&format!("instance:{id}"));
            // Bytes: a value that is not UTF-8 (or cut inside a character at the bound) is reported, not gone.
            let raw = match entry?.map(redis::from_redis_value::<Vec<u8>>) {
                Some(Ok(raw)) => raw,
                _ => {
                    report(&self.metrics, BadEntry::MalformedInstance, &entry_key);
                    continue;
                }
            };
            // No entry (GETRANGE answers ""): its lease expired (the instance is gone), whatever its player hash
            // still says. Its id leaves the index by that fact, not by any instance's clock.
            if raw.is_empty() {
                gone.push(id);
                continue;
            }
            if raw.len() > MAX_ENTRY_BYTES {
                report(&self.metrics, BadEntry::Oversized, &entry_key);
                continue;
            }
            let Ok(raw) = String::from_utf8(raw) else {
                report(&self.metrics, BadEntry::MalformedInstance, &entry_key);
                continue;
            };
            let peer = match read_instance(&self.secret, &self.config.name, &id, &raw, now_ms) {
                Ok(peer) => peer,
                Err(kind) => {
                    report(&self.metrics, kind, &entry_key);
                    continue;
                }
            };
            peers.insert(id.clone(), peer);
            let players_key = self.players_key(&id);
            match players? {
                Some(Value::Array(values)) => {
                    for v in values {
                        match redis::from_redis_value::<String>(v).map_err(|_| BadEntry::MalformedPlayer) {
                            Ok(raw) => match read_player(&raw) {
                                Ok(r) => names.push((id.clone(), r)),
                                Err(kind) => report(&self.metrics, kind, &players_key),
                            },
                            Err(kind) => report(&self.metrics, kind, &players_key),
                        }
                    }
                }
                Some(Value::Int(_)) => report(&self.metrics, BadEntry::Oversized, &players_key),
                _ => report(&self.metrics, BadEntry::WrongTypePlayers, &players_key),
            }
        }
        Ok((peers, names, gone))
    }
}
