//! What an instance reads back from Redis, checked before it is used: anyone who can write a key there must
//! not steer an instance's connections, nor take the network apart with one entry of the wrong type.
//!
//! - **Instance entries are signed.** `moonbridge:<name>:instance:<id>` holds
//!   `{"peer": "IP:port", "players": n, "sig": "<64 hex digits>"}`, the signature an HMAC-SHA-256 with the
//!   network's secret over the network's name, the id and the peer address ([`instance_entry`]). An entry that
//!   does not verify, or whose peer is not an `IP:port` (no host names: nothing is resolved), is skipped: no
//!   instance dials it, a drain does not count it as a live peer.
//! - **Every entry on its own.** A bad entry (wrong type, not the JSON an instance writes) is skipped, counted in
//!   `moonbridge_network_bad_entries_total{kind}` and logged through a limiter ([`report`]); the rest of the
//!   renewal goes on, and "Redis unreachable" is said only when Redis is.

use std::net::SocketAddr;

use tracing::warn;

use super::link::Secret;
use crate::labels::BadEntry;
use crate::limits::LogLimiter;
use crate::metrics::NetworkMetrics;
use crate::players::Record;

/// The longest player name a record from another instance may carry, in characters: 16 (a 1.7.10 name).
pub(crate) const MAX_RECORD_NAME: usize = 16;
/// The longest backend name a record from another instance may carry, in bytes: 256.
pub(crate) const MAX_RECORD_SERVER: usize = 256;

const ENTRY_ROLE: &[u8] = b"moonbridge instance entry";

/// The bad entries' lines: 10 per 10 seconds, each with the count suppressed before it.
static BAD_ENTRY_LOG: std::sync::LazyLock<LogLimiter> =
    std::sync::LazyLock::new(|| LogLimiter::new(10, std::time::Duration::from_secs(10)));

/// An instance entry as stored.
#[derive(serde::Serialize, serde::Deserialize)]
#[serde(deny_unknown_fields)]
struct InstanceEntry {
    peer: String,
    players: usize,
    /// Missing: an unsigned entry (refused as such).
    #[serde(default)]
    sig: String,
}

/// The signed parts: the role, then each field with its length (no two field lists sign alike).
fn signed<'a>(network: &'a str, id: &'a str, peer: &'a str) -> [Vec<u8>; 4] {
    let part = |s: &str| [&(s.len() as u32).to_be_bytes()[..], s.as_bytes()].concat();
    [ENTRY_ROLE.to_vec(), part(network), part(id), part(peer)]
}

/// Instance `id`'s entry in network `network`: its peer address (what the others dial) and player count,
/// signed with `secret`. JSON.
pub(crate) fn instance_entry(secret: &Secret, network: &str, id: &str, peer: &str, players: usize) -> String {
    let parts = signed(network, id, peer);
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    let sig = secret.mac(&refs).as_ref().iter().map(|b| format!("{b:02x}")).collect();
    serde_json::to_string(&InstanceEntry { peer: peer.to_string(), players, sig }).unwrap_or_default()
}

/// The peer address in instance `id`'s entry `raw`, when the entry is signed with `secret` and names an
/// `IP:port`.
///
/// # Errors
/// [`BadEntry::MalformedInstance`] for anything but that JSON with an `IP:port` peer;
/// [`BadEntry::UnsignedInstance`] when the signature does not verify.
pub(crate) fn read_instance(secret: &Secret, network: &str, id: &str, raw: &str) -> Result<SocketAddr, BadEntry> {
    let entry: InstanceEntry = serde_json::from_str(raw).map_err(|_| BadEntry::MalformedInstance)?;
    let peer: SocketAddr = entry.peer.parse().map_err(|_| BadEntry::MalformedInstance)?;
    let tag = hex(&entry.sig).ok_or(BadEntry::UnsignedInstance)?;
    let parts = signed(network, id, &entry.peer);
    let refs: Vec<&[u8]> = parts.iter().map(Vec::as_slice).collect();
    if secret.verify(&refs, &tag) {
        Ok(peer)
    } else {
        Err(BadEntry::UnsignedInstance)
    }
}

/// A player record from another instance's hash, when it is the JSON an instance writes, with a name of at
/// most [`MAX_RECORD_NAME`] characters and a backend name of at most [`MAX_RECORD_SERVER`] bytes.
///
/// # Errors
/// [`BadEntry::MalformedPlayer`] otherwise.
pub(crate) fn read_player(raw: &str) -> Result<Record, BadEntry> {
    let record: Record = serde_json::from_str(raw).map_err(|_| BadEntry::MalformedPlayer)?;
    let fits = !record.name.is_empty()
        && record.name.chars().count() <= MAX_RECORD_NAME
        && record.server.len() <= MAX_RECORD_SERVER;
    if fits {
        Ok(record)
    } else {
        Err(BadEntry::MalformedPlayer)
    }
}

/// Counts a bad entry under `key` and logs it through the limiter.
pub(crate) fn report(metrics: &NetworkMetrics, kind: BadEntry, key: &str) {
    metrics.bad_entry(kind);
    if let Some(suppressed) = BAD_ENTRY_LOG.allow() {
        let what = match kind {
            BadEntry::UnsignedInstance => "an instance entry not signed with the network's secret: not dialled",
            BadEntry::MalformedInstance => "an instance entry that is not IP:port JSON: not dialled",
            BadEntry::WrongTypePlayers => "a player hash of another Redis type: its players are not counted",
            BadEntry::MalformedPlayer => "a player entry that is not a player record: not counted",
            BadEntry::WrongTypeClaim => "a name claim of another Redis type: replaced by this instance's claim",
            BadEntry::WrongTypeIndex => {
                "the instance index of another Redis type: deleted (re-written at the next renewals)"
            }
        };
        warn!(%key, suppressed, "skipped in Redis: {what}");
    }
}

/// The bytes of lower-case or upper-case hex `s`, two digits per byte.
fn hex(s: &str) -> Option<Vec<u8>> {
    if !s.len().is_multiple_of(2) {
        return None;
    }
    (0..s.len()).step_by(2).map(|i| s.get(i..i + 2).and_then(|d| u8::from_str_radix(d, 16).ok())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn secret() -> Secret {
        Secret::new(&[7u8; 32])
    }

    #[test]
    fn a_signed_entry_reads_back_and_any_change_is_refused() {
        let s = secret();
        let raw = instance_entry(&s, "main", "00112233aabbccdd", "10.0.0.5:25600", 3);
        assert_eq!(read_instance(&s, "main", "00112233aabbccdd", &raw), Ok("10.0.0.5:25600".parse().unwrap()));
        // Another id, network or secret, or a changed peer: not signed for that.
        assert_eq!(read_instance(&s, "main", "00112233aabbccde", &raw), Err(BadEntry::UnsignedInstance));
        assert_eq!(read_instance(&s, "other", "00112233aabbccdd", &raw), Err(BadEntry::UnsignedInstance));
        let other = Secret::new(&[8u8; 32]);
        assert_eq!(read_instance(&other, "main", "00112233aabbccdd", &raw), Err(BadEntry::UnsignedInstance));
        let moved = raw.replace("10.0.0.5", "10.0.0.6");
        assert_eq!(read_instance(&s, "main", "00112233aabbccdd", &moved), Err(BadEntry::UnsignedInstance));
        // The fields cannot slide into each other: id "a" + peer "b…" is not id "ab" + peer "…".
        let a = signed("n", "ab", "1.2.3.4:5");
        let b = signed("n", "a", "b1.2.3.4:5");
        assert_ne!(a, b);
    }

    #[test]
    fn unsigned_host_names_and_other_shapes_are_refused() {
        let s = secret();
        let plain = r#"{"peer":"10.0.0.5:25600","players":0}"#;
        assert_eq!(read_instance(&s, "main", "id", plain), Err(BadEntry::UnsignedInstance));
        let bad_sig = r#"{"peer":"10.0.0.5:25600","players":0,"sig":"zz"}"#;
        assert_eq!(read_instance(&s, "main", "id", bad_sig), Err(BadEntry::UnsignedInstance));
        // A host name is never resolved, signed or not.
        let named = instance_entry(&s, "main", "id", "evil.example:25600", 0);
        assert_eq!(read_instance(&s, "main", "id", &named), Err(BadEntry::MalformedInstance));
        assert_eq!(read_instance(&s, "main", "id", "[1,2]"), Err(BadEntry::MalformedInstance));
        let v6 = instance_entry(&s, "main", "id", "[::1]:7", 0);
        assert_eq!(read_instance(&s, "main", "id", &v6), Ok("[::1]:7".parse().unwrap()));
    }

    #[test]
    fn player_records_are_bounded() {
        let ok = r#"{"name":"Steve","uuid":"00000000000000000000000000000000","server":"lobby"}"#;
        assert_eq!(read_player(ok).map(|r| r.name), Ok("Steve".to_string()));
        let long = ok.replace("Steve", &"x".repeat(17));
        assert_eq!(read_player(&long), Err(BadEntry::MalformedPlayer));
        let empty = ok.replace("Steve", "");
        assert_eq!(read_player(&empty), Err(BadEntry::MalformedPlayer));
        assert_eq!(read_player("7"), Err(BadEntry::MalformedPlayer));
        assert_eq!(hex("0aFf"), Some(vec![10, 255]));
        assert_eq!(hex("0"), None);
    }
}
