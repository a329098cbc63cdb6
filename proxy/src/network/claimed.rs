//! What an instance does about its players' name claims in Redis ([`super::Claim`], the scripts in
//! [`super::claims`]): renews them, ends a session whose claim a login of the network won, and takes back a
//! claim whose place holds something no login of the network made.
//!
//! A holder is one of three kinds ([`Holder`]): a claim signed with the network's secret by a live instance (it
//! is obeyed: the policy decides), one signed by an instance that is not live now (a login that has just
//! started elsewhere, an instance this one has not read yet, or a copy of an old claim: neither obeyed nor
//! replaced; it expires with its lease unless renewed), or anything else (replaced, and reported).

use redis::aio::ConnectionManager;
use tracing::{info, warn};

use super::claims::{CLAIMS_PER_CALL, MAX_CLAIM_READ, RELEASE_CLAIM, RENEW_CLAIMS, REPLACE_CLAIM};
use super::entries::{claim_signed, report};
use super::redis::{lease_ms, RedisNetwork, REDIS_TIMEOUT};
use super::{ALREADY_PLAYING, KICKED_ELSEWHERE};
use crate::config::DuplicateLogin;
use crate::labels::BadEntry;
use crate::limits::LogLimiter;

/// Unexpected answers to a claims renewal: 1 line per 10 seconds.
static CLAIMS_LOG: std::sync::LazyLock<LogLimiter> =
    std::sync::LazyLock::new(|| LogLimiter::new(1, std::time::Duration::from_secs(10)));

/// Who holds a name's claim, as far as this instance can tell.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum Holder {
    /// A login of the network on a live instance (this one, or one whose signed entry the last renewal read).
    Network,
    /// Signed by the network, on an instance that is not live as far as this one knows.
    Elsewhere,
    /// Nothing a login of the network made: not signed, not UTF-8, or longer than [`MAX_CLAIM_READ`].
    Forged,
}

/// A claim to take back: the name (lower case), what holds its place (as read, at most [`MAX_CLAIM_READ`] + 1
/// bytes), this login's value.
pub(super) type Reclaim = (String, Vec<u8>, String);

impl RedisNetwork {
    /// Who holds the claim of `lower` with value `holder` (as Redis gave it).
    pub(super) fn holder(&self, lower: &str, holder: &[u8]) -> Holder {
        let Some(holder) = std::str::from_utf8(holder).ok().filter(|h| h.len() <= MAX_CLAIM_READ) else {
            return Holder::Forged;
        };
        if !claim_signed(&self.secret, &self.config.name, lower, holder) {
            return Holder::Forged;
        }
        let instance = holder.split(':').next().unwrap_or_default();
        if instance == self.id || self.peer_of(instance).is_some() {
            Holder::Network
        } else {
            Holder::Elsewhere
        }
    }

    /// Adds the release of login claim `value` of name `key` (lower case) to `pipe` ([`RELEASE_CLAIM`]: only
    /// while the claim still holds that value).
    pub(super) fn release_claim(&self, pipe: &mut redis::Pipeline, key: &str, value: &str) {
        pipe.cmd("EVAL").arg(RELEASE_CLAIM).arg(1).arg(self.name_key(key)).arg(value).ignore();
    }

    /// Adds [`RENEW_CLAIMS`] calls for `claims` (lower-case name, claim value) to `pipe`, one per
    /// [`CLAIMS_PER_CALL`]; each call answers a list (see [`RedisNetwork::lost_claims`]).
    pub(super) fn renew_claims<'a>(
        &self,
        pipe: &mut redis::Pipeline,
        claims: impl IntoIterator<Item = (&'a str, &'a str)>,
    ) -> usize {
        let claims: Vec<(&str, &str)> = claims.into_iter().collect();
        let keep = match self.config.duplicate_login {
            DuplicateLogin::RefuseNew => "older",
            DuplicateLogin::KickExisting => "newer",
        };
        let mut calls = 0;
        for chunk in claims.chunks(CLAIMS_PER_CALL) {
            let eval = pipe.cmd("EVAL").arg(RENEW_CLAIMS).arg(chunk.len());
            for (key, _) in chunk {
                eval.arg(self.name_key(key));
            }
            for (_, value) in chunk {
                eval.arg(*value);
            }
            eval.arg(keep).arg(lease_ms());
            calls += 1;
        }
        calls
    }

    /// Ends the local sessions whose claims another login of the network won (the answers of
    /// [`RedisNetwork::renew_claims`] for `claims`, in order): a login elsewhere took the name while Redis had
    /// lost this one's claim, or while a kick could not reach this instance. The player reads what
    /// `duplicate_login` tells the session that goes. Returns the claims to take back ([`Holder::Forged`]).
    pub(super) fn lost_claims(&self, claims: &[(String, String)], answers: Vec<redis::Value>) -> Vec<Reclaim> {
        let reason = match self.config.duplicate_login {
            DuplicateLogin::RefuseNew => ALREADY_PLAYING,
            DuplicateLogin::KickExisting => KICKED_ELSEWHERE,
        };
        let mut reclaim = Vec::new();
        for (chunk, answer) in claims.chunks(CLAIMS_PER_CALL).zip(answers) {
            // Bytes: one holder that is not UTF-8 must not hide the others.
            let lost: Vec<Vec<u8>> = match redis::from_redis_value(answer) {
                Ok(l) => l,
                Err(e) => {
                    if let Some(suppressed) = CLAIMS_LOG.allow() {
                        warn!(suppressed, "unexpected answer from Redis to a claims renewal: {e}");
                    }
                    continue;
                }
            };
            for pair in lost.chunks_exact(2) {
                let [i, holder] = pair else { continue };
                let i = String::from_utf8_lossy(i);
                let (kind, position) = match i.strip_prefix('w') {
                    Some(p) => (Some(BadEntry::WrongTypeClaim), p),
                    None => (None, i.as_ref()),
                };
                let Some((key, value)) = position.parse::<usize>().ok().and_then(|p| chunk.get(p.checked_sub(1)?))
                else {
                    continue;
                };
                if let Some(kind) = kind {
                    report(&self.metrics, kind, &self.name_key(key));
                    continue;
                }
                match self.holder(key, holder) {
                    Holder::Network => {
                        if self.players.kick_claim(key, value, reason) {
                            let instance =
                                String::from_utf8_lossy(holder.split(|b| *b == b':').next().unwrap_or_default());
                            info!(player = %key, %instance, "another login holds the name: ending this session");
                        }
                    }
                    // Its instance's next renewal renews it (then it is obeyed), or it expires with its lease.
                    Holder::Elsewhere => {}
                    Holder::Forged => {
                        report(&self.metrics, BadEntry::UnsignedClaim, &self.name_key(key));
                        reclaim.push((key.clone(), holder.clone(), value.clone()));
                    }
                }
            }
        }
        reclaim
    }

    /// Sets the claims `reclaim` again, each only while what was read still holds its place
    /// ([`REPLACE_CLAIM`]).
    pub(super) async fn reclaim(&self, con: &mut ConnectionManager, reclaim: Vec<Reclaim>) {
        if reclaim.is_empty() {
            return;
        }
        let mut pipe = redis::pipe();
        for (key, holder, value) in &reclaim {
            pipe.cmd("EVAL").arg(REPLACE_CLAIM).arg(1).arg(self.name_key(key)).arg(holder).arg(value).arg(lease_ms());
            pipe.ignore();
        }
        let _ = tokio::time::timeout(REDIS_TIMEOUT, pipe.query_async::<()>(con)).await;
    }

    /// A `refuse_new` login of `lower` found the name's claim held: when what holds it is
    /// [`Holder::Forged`], replaces it with `mine` (only while it still holds what was read) and says whether it
    /// did, within [`REDIS_TIMEOUT`] each way.
    pub(super) async fn take_forged(&self, con: &mut ConnectionManager, lower: &str, mine: &str) -> bool {
        let key = self.name_key(lower);
        let mut get = redis::cmd("GETRANGE");
        get.arg(&key).arg(0).arg(MAX_CLAIM_READ);
        let Ok(Ok(holder)) = tokio::time::timeout(REDIS_TIMEOUT, get.query_async::<Vec<u8>>(con)).await else {
            return false;
        };
        if holder.is_empty() || self.holder(lower, &holder) != Holder::Forged {
            return false;
        }
        report(&self.metrics, BadEntry::UnsignedClaim, &key);
        let mut eval = redis::cmd("EVAL");
        eval.arg(REPLACE_CLAIM).arg(1).arg(&key).arg(&holder).arg(mine).arg(lease_ms());
        matches!(tokio::time::timeout(REDIS_TIMEOUT, eval.query_async::<i64>(con)).await, Ok(Ok(1)))
    }
}
