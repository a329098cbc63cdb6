//! One lease renewal on Redis ([`RedisNetwork::renew_on`]): this instance's entries written, the others'
//! read, each entry on its own ([`super::entries`]): a key of the wrong type or an entry that is not what an
//! instance writes is skipped and reported, and only a failed connection fails the renewal.

use std::collections::HashMap;
use std::net::SocketAddr;

use redis::aio::ConnectionManager;
use redis::Value;

use super::entries::{instance_entry, read_instance, read_player, report};
use super::redis::{lease_ms, RedisNetwork, PRUNE_AFTER};
use crate::labels::BadEntry;

impl RedisNetwork {
    /// One renewal on `con`: the player hash written whole when `rewrite` (with `releases` applied), the
    /// instance's lease and this instance's claims renewed, the others read. With `settled` (no player change
    /// in flight; the table's change count then), when no change happened during the round trip and Redis holds
    /// another number of this instance's players than it has, the hash is written whole again at once.
    ///
    /// # Errors
    /// Only when Redis could not be asked (connection, timeout): an error answer to one command is reported
    /// and that entry skipped.
    pub(super) async fn renew_on(
        &self,
        mut con: ConnectionManager,
        rewrite: &mut bool,
        releases: &mut Vec<(String, String)>,
        settled: Option<u64>,
    ) -> redis::RedisResult<()> {
        let now_ms = super::claims::now_ms();
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
        let me = instance_entry(&self.secret, &self.config.name, &self.id, &self.peer_address, records.len());
        let claims: Vec<(String, String)> =
            records.iter().filter_map(|(key, _, claim)| Some((key.clone(), claim.clone()?))).collect();
        let index = self.key("instances");
        let mut pipe = redis::pipe();
        // Each answer on its own: an error answer (a key of another type) is a value here, not the round's end.
        pipe.ignore_errors();
        pipe.pset_ex(self.key(&format!("instance:{}", self.id)), me, super::redis::LEASE.as_millis() as u64).ignore();
        pipe.zadd(&index, &self.id, now_ms).ignore();
        pipe.pexpire(&index, PRUNE_AFTER.as_millis() as i64).ignore();
        pipe.pexpire(&hash, lease_ms()).ignore();
        pipe.hlen(&hash);
        pipe.zrange(&index, 0, -1);
        // The names this instance's players hold live as long as its lease; one another instance took is
        // noticed here.
        let calls = self.renew_claims(&mut pipe, claims.iter().map(|(k, v)| (k.as_str(), v.as_str())));
        let mut answers: Vec<Value> = pipe.query_async(&mut con).await?;
        let lost: Vec<Value> = answers.drain(answers.len().saturating_sub(calls)..).collect();
        let mut answers = answers.into_iter();
        // Another type than a hash (or no answer) reads as none held: the hash is written whole again.
        let in_redis: Option<usize> = answers.next().and_then(|v| redis::from_redis_value(v).ok());
        let ids: Vec<String> = match answers.next().map(redis::from_redis_value::<Vec<String>>) {
            Some(Ok(ids)) => ids,
            _ => {
                report(&self.metrics, BadEntry::WrongTypeIndex, &index);
                let _: redis::RedisResult<()> = redis::cmd("DEL").arg(&index).query_async(&mut con).await;
                Vec::new()
            }
        };
        self.lost_claims(&claims, lost);
        if settled.is_some_and(|c| c == self.players.changes()) && in_redis != Some(records.len()) {
            // Redis lost some of this instance's players (restarted empty or failed over between renewals, a
            // change not taken, a key of another type): write them all again at the next renewal.
            *rewrite = true;
        }
        let others: Vec<String> = ids.into_iter().filter(|i| *i != self.id).collect();
        let (peers, names, gone) = self.read_others(&mut con, others).await?;
        if !gone.is_empty() {
            let _: () = redis::cmd("ZREM").arg(&index).arg(&gone).query_async(&mut con).await?;
        }
        self.metrics.instances.set(peers.len() as i64 + 1);
        self.metrics.players.set((names.len() + records.len()) as i64);
        self.players.set_others(names);
        *self.peers.write().unwrap_or_else(std::sync::PoisonError::into_inner) = peers;
        if *rewrite {
            // Once: the snapshot is written whole, and the comparison is not repeated.
            return Box::pin(self.renew_on(con, rewrite, releases, None)).await;
        }
        Ok(())
    }

    /// The other live instances' peer addresses and players (name, backend), and the ids whose lease is gone.
    /// Entries that are not what an instance writes are skipped and reported.
    async fn read_others(
        &self,
        con: &mut ConnectionManager,
        others: Vec<String>,
    ) -> redis::RedisResult<(HashMap<String, SocketAddr>, Vec<(String, String)>, Vec<String>)> {
        let (mut peers, mut names, mut gone) = (HashMap::new(), Vec::new(), Vec::new());
        if others.is_empty() {
            return Ok((peers, names, gone));
        }
        let mut pipe = redis::pipe();
        pipe.ignore_errors();
        for id in &others {
            pipe.get(self.key(&format!("instance:{id}")));
            pipe.hvals(self.players_key(id));
        }
        let answers: Vec<Value> = pipe.query_async(con).await?;
        let mut answers = answers.into_iter();
        for id in others {
            let (Some(entry), Some(players)) = (answers.next(), answers.next()) else { break };
            let entry_key = self.key(&format!("instance:{id}"));
            let peer = match entry {
                // No entry: its lease expired (the instance is gone), whatever its player hash still says. Its id
                // leaves the index by that fact, not by any instance's clock.
                Value::Nil => {
                    gone.push(id);
                    continue;
                }
                entry => match redis::from_redis_value::<String>(entry) {
                    Ok(raw) => read_instance(&self.secret, &self.config.name, &id, &raw),
                    Err(_) => Err(BadEntry::MalformedInstance),
                },
            };
            let peer = match peer {
                Ok(peer) => peer,
                Err(kind) => {
                    report(&self.metrics, kind, &entry_key);
                    continue;
                }
            };
            peers.insert(id.clone(), peer);
            match redis::from_redis_value::<Vec<String>>(players) {
                Ok(players) => {
                    for raw in players {
                        match read_player(&raw) {
                            Ok(r) => names.push((r.name, r.server)),
                            Err(kind) => report(&self.metrics, kind, &self.players_key(&id)),
                        }
                    }
                }
                Err(_) => report(&self.metrics, BadEntry::WrongTypePlayers, &self.players_key(&id)),
            }
        }
        Ok((peers, names, gone))
    }
}
