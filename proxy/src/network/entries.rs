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
const CLAIM_ROLE: &[u8] = b"moonbridge name claim";

/// The bad entries' lines: 10 per 10 seconds, each with the count suppressed before it.
static BAD_ENTRY_LOG: std::sync::LazyLock<LogLimiter> =
    std::sync::LazyLock::new(|| LogLimiter::new(10, std::time::Duration::from_secs(10)));

/// An instance entry as stored (fields a later version adds are ignored).
#[derive(serde::Serialize, serde::Deserialize)]
struct InstanceEntry {
    peer: String,
    players: usize,
    /// Until when the entry holds, in milliseconds since the Unix epoch (signed: a copy of a dead instance's
    /// entry is refused once it passed).
    #[serde(default)]
    until: u64,
    /// Missing: an unsigned entry (refused as such).
    #[serde(default)]
    sig: String,
}

/// How far past its `until` an instance entry is still taken, in milliseconds: 30,000 (clocks of the
/// instances a little apart; keep them in sync with NTP).
pub(crate) const CLOCK_SLACK_MS: u64 = 30_000;

/// `parts` as signed: each with its length first (no two lists of parts sign alike).
fn framed(role: &[u8], parts: &[&[u8]]) -> Vec<u8> {
    let mut out = role.to_vec();
    for p in parts {
        out.extend_from_slice(&(p.len() as u32).to_be_bytes());
        out.extend_from_slice(p);
    }
    out
}

/// The MAC of `parts` under `role`, hex.
fn sign(secret: &Secret, role: &[u8], parts: &[&[u8]]) -> String {
    secret.mac(&[&framed(role, parts)[..]]).as_ref().iter().map(|b| format!("{b:02x}")).collect()
}

/// Whether hex `sig` is the MAC of `parts` under `role`.
fn verify(secret: &Secret, role: &[u8], parts: &[&[u8]], sig: &str) -> bool {
    hex(sig).is_some_and(|tag| secret.verify(&[&framed(role, parts)[..]], &tag))
}

/// Instance `id`'s entry in network `network`: its peer address (what the others dial) and player count,
/// holding until `until` (ms since the Unix epoch), signed with `secret`. JSON.
pub(crate) fn instance_entry(
    secret: &Secret,
    network: &str,
    id: &str,
    peer: &str,
    players: usize,
    until: u64,
) -> String {
    let until_text = until.to_string();
    let sig = sign(secret, ENTRY_ROLE, &[network.as_bytes(), id.as_bytes(), peer.as_bytes(), until_text.as_bytes()]);
    serde_json::to_string(&InstanceEntry { peer: peer.to_string(), players, until, sig }).unwrap_or_default()
}

/// The peer address in instance `id`'s entry `raw`, when the entry is signed with `secret`, names an
/// `IP:port` and holds at `now_ms` (within [`CLOCK_SLACK_MS`]).
///
/// # Errors
/// [`BadEntry::MalformedInstance`] for anything but that JSON with an `IP:port` peer;
/// [`BadEntry::UnsignedInstance`] when the signature does not verify or the entry passed its time.
pub(crate) fn read_instance(
    secret: &Secret,
    network: &str,
    id: &str,
    raw: &str,
    now_ms: u64,
) -> Result<SocketAddr, BadEntry> {
    let entry: InstanceEntry = serde_json::from_str(raw).map_err(|_| BadEntry::MalformedInstance)?;
    let peer: SocketAddr = entry.peer.parse().map_err(|_| BadEntry::MalformedInstance)?;
    let until = entry.until.to_string();
    let parts = [network.as_bytes(), id.as_bytes(), entry.peer.as_bytes(), until.as_bytes()];
    let fresh = entry.until.saturating_add(CLOCK_SLACK_MS) >= now_ms;
    if fresh && verify(secret, ENTRY_ROLE, &parts, &entry.sig) {
        Ok(peer)
    } else {
        Err(BadEntry::UnsignedInstance)
    }
}

/// A login's claim of name `lower` (lower case) in network `network`, by instance `id`:
/// `<id>:<nonce>:<login ms>:<signature>` (16 hex digits, 16 hex digits, milliseconds since the Unix epoch, 64
/// hex digits).
pub(crate) fn claim_value(secret: &Secret, network: &str, lower: &str, id: &str, nonce: u64, login_ms: u64) -> String {
    let head = format!("{id}:{nonce:016x}:{login_ms}");
    let sig = sign(secret, CLAIM_ROLE, &[network.as_bytes(), lower.as_bytes(), head.as_bytes()]);
    format!("{head}:{sig}")
}

/// Whether claim `value` of name `lower` was made by an instance of network `network` (signed with `secret`).
pub(crate) fn claim_signed(secret: &Secret, network: &str, lower: &str, value: &str) -> bool {
    let Some((head, sig)) = value.rsplit_once(':') else { return false };
    verify(secret, CLAIM_ROLE, &[network.as_bytes(), lower.as_bytes(), head.as_bytes()], sig)
}

/// A player record from another instance's hash, when it is the JSON an instance writes, with a name a Login
/// Start may carry (1 to [`MAX_RECORD_NAME`] characters of `A-Z a-z 0-9 _`) and a backend name of at most
/// [`MAX_RECORD_SERVER`] bytes without control characters (the admin API prints both).
///
/// # Errors
/// [`BadEntry::MalformedPlayer`] otherwise.
pub(crate) fn read_player(raw: &str) -> Result<Record, BadEntry> {
    let record: Record = serde_json::from_str(raw).map_err(|_| BadEntry::MalformedPlayer)?;
    let fits = moonbridge_protocol::packets::is_valid_player_name(&record.name)
        && record.name.chars().count() <= MAX_RECORD_NAME
        && record.server.len() <= MAX_RECORD_SERVER
        && !record.server.chars().any(char::is_control);
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
            BadEntry::UnsignedClaim => {
                "a name claim no login of the network made (unsigned, or of an instance that is not live): replaced, no session ends"
            }
            BadEntry::Oversized => {
                "more than MoonBridge reads (instances, players of one instance, or bytes of an instance entry): the rest is not read"
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
        let (id, now) = ("00112233aabbccdd", 1_000_000);
        let raw = instance_entry(&s, "main", id, "10.0.0.5:25600", 3, now + 10_000);
        assert_eq!(read_instance(&s, "main", id, &raw, now), Ok("10.0.0.5:25600".parse().unwrap()));
        // Another id, network or secret, or a changed peer or time: not signed for that.
        assert_eq!(read_instance(&s, "main", "00112233aabbccde", &raw, now), Err(BadEntry::UnsignedInstance));
        assert_eq!(read_instance(&s, "other", id, &raw, now), Err(BadEntry::UnsignedInstance));
        let other = Secret::new(&[8u8; 32]);
        assert_eq!(read_instance(&other, "main", id, &raw, now), Err(BadEntry::UnsignedInstance));
        let moved = raw.replace("10.0.0.5", "10.0.0.6");
        assert_eq!(read_instance(&s, "main", id, &moved, now), Err(BadEntry::UnsignedInstance));
        let later = raw.replace(&format!("{}", now + 10_000), &format!("{}", now + 99_999_999));
        assert_eq!(read_instance(&s, "main", id, &later, now), Err(BadEntry::UnsignedInstance));
        // A copy of an entry whose time passed (a dead instance's) is refused after the clock slack.
        let then = now + 10_000 + CLOCK_SLACK_MS;
        assert!(read_instance(&s, "main", id, &raw, then).is_ok());
        assert_eq!(read_instance(&s, "main", id, &raw, then + 1), Err(BadEntry::UnsignedInstance));
        // Fields a later version adds are ignored.
        let more = raw.replacen('{', "{\"zone\":\"eu\",", 1);
        assert!(read_instance(&s, "main", id, &more, now).is_ok());
        // The parts cannot slide into each other: id "a" + peer "b…" is not id "ab" + peer "…".
        assert_ne!(framed(ENTRY_ROLE, &[b"n", b"ab", b"1.2.3.4:5"]), framed(ENTRY_ROLE, &[b"n", b"a", b"b1.2.3.4:5"]));
    }

    #[test]
    fn unsigned_host_names_and_other_shapes_are_refused() {
        let s = secret();
        let plain = r#"{"peer":"10.0.0.5:25600","players":0}"#;
        assert_eq!(read_instance(&s, "main", "id", plain, 0), Err(BadEntry::UnsignedInstance));
        let bad_sig = r#"{"peer":"10.0.0.5:25600","players":0,"until":9,"sig":"zz"}"#;
        assert_eq!(read_instance(&s, "main", "id", bad_sig, 0), Err(BadEntry::UnsignedInstance));
        // A host name is never resolved, signed or not.
        let named = instance_entry(&s, "main", "id", "evil.example:25600", 0, u64::MAX);
        assert_eq!(read_instance(&s, "main", "id", &named, 0), Err(BadEntry::MalformedInstance));
        assert_eq!(read_instance(&s, "main", "id", "[1,2]", 0), Err(BadEntry::MalformedInstance));
        let v6 = instance_entry(&s, "main", "id", "[::1]:7", 0, u64::MAX);
        assert_eq!(read_instance(&s, "main", "id", &v6, 0), Ok("[::1]:7".parse().unwrap()));
    }

    #[test]
    fn claims_are_signed_for_their_name() {
        let s = secret();
        let v = claim_value(&s, "main", "steve", "00112233aabbccdd", 7, 1_700_000_000_000);
        assert!(v.starts_with("00112233aabbccdd:0000000000000007:1700000000000:"), "{v}");
        assert!(claim_signed(&s, "main", "steve", &v));
        assert!(!claim_signed(&s, "main", "alex", &v), "a claim copied to another name");
        assert!(!claim_signed(&s, "other", "steve", &v));
        assert!(!claim_signed(&Secret::new(&[8u8; 32]), "main", "steve", &v));
        assert!(!claim_signed(&s, "main", "steve", "00112233aabbccdd:0000000000000007:0"));
        assert!(!claim_signed(&s, "main", "steve", &v.replace(":1700000000000:", ":1:")));
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
        // What the admin API prints: no escape sequences in a name or a backend name.
        assert_eq!(read_player(&ok.replace("Steve", "St\\u001b[2Je")), Err(BadEntry::MalformedPlayer));
        assert_eq!(read_player(&ok.replace("lobby", "lo\\u0007bby")), Err(BadEntry::MalformedPlayer));
        assert_eq!(read_player(&ok.replace("Steve", "St eve")), Err(BadEntry::MalformedPlayer));
        assert_eq!(hex("0aFf"), Some(vec![10, 255]));
        assert_eq!(hex("0"), None);
    }
}
