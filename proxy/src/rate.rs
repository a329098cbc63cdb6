//! Per-address rate limits (`[rate_limits]`): token buckets for new connections and for logins, keyed by the
//! player's real address (after a PROXY header or a trusted real-IP header), IPv6 grouped by a prefix.
//!
//! The table is bounded: at most `max_tracked_addresses` entries (32 bytes each, about 66 with the map's own
//! overhead at its load factor, so 65,536 entries are about 4.2 MiB). An entry whose buckets are full again carries no
//! information, so when the table is full those are dropped first; if every entry is still active (a flood
//! from more addresses than the table holds), the oldest-updated entries are dropped, which can only make the
//! limit more lenient for them, never block anyone else.

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Mutex, PoisonError};
use std::time::Instant;

use crate::config::RateLimitsConfig;

/// One address (or IPv6 prefix) and its two buckets.
#[derive(Clone, Copy, Debug)]
struct Entry {
    /// Tokens left for new connections, and for logins.
    connections: f32,
    logins: f32,
    /// When the buckets were last refilled, in milliseconds since the limiter started.
    at: u64,
}

/// The limiter of one proxy.
#[derive(Debug)]
pub(crate) struct RateLimiter {
    table: Mutex<HashMap<u128, Entry>>,
    /// Time zero of [`Entry::at`].
    epoch: Instant,
}

/// Which bucket a check draws from.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Bucket {
    /// `connections_per_second`, burst `connection_burst`.
    Connection,
    /// `logins_per_minute`, burst `login_burst`.
    Login,
}

impl RateLimiter {
    pub(crate) fn new() -> Self {
        Self { table: Mutex::new(HashMap::new()), epoch: Instant::now() }
    }

    /// The table key of `ip`: an IPv4 address as its IPv4-mapped IPv6 form (`::ffff:a.b.c.d`), an IPv6
    /// address cut to `ipv6_prefix` bits. The two never meet: an IPv6 address in `::ffff:0:0/96` is an IPv4
    /// address (canonicalised first), and a prefix shorter than 96 bits clears the `ffff`.
    fn key(config: &RateLimitsConfig, ip: IpAddr) -> u128 {
        match ip.to_canonical() {
            IpAddr::V4(v4) => u128::from(v4.to_ipv6_mapped()),
            IpAddr::V6(v6) => {
                let bits = u32::from(config.ipv6_prefix.min(128));
                let mask = u128::MAX.checked_shl(128 - bits).unwrap_or(0);
                u128::from(v6) & mask
            }
        }
    }

    /// Milliseconds since the limiter started.
    fn now_ms(&self) -> u64 {
        u64::try_from(self.epoch.elapsed().as_millis()).unwrap_or(u64::MAX)
    }

    /// Takes one token from `ip`'s `bucket` under the limits `c`: `true` when allowed. Off (always `true`)
    /// when the limit is 0.
    pub(crate) fn allow(&self, c: &RateLimitsConfig, ip: IpAddr, bucket: Bucket) -> bool {
        let off = match bucket {
            Bucket::Connection => c.connections_per_second == 0,
            Bucket::Login => c.logins_per_minute == 0,
        };
        if off {
            return true;
        }
        let key = Self::key(c, ip);
        let now = self.now_ms();
        let mut table = self.table.lock().unwrap_or_else(PoisonError::into_inner);
        if !table.contains_key(&key) && table.len() >= c.max_tracked_addresses {
            Self::make_room(c, &mut table, now);
        }
        let e = table.entry(key).or_insert(Entry {
            connections: c.connection_burst as f32,
            logins: c.login_burst as f32,
            at: now,
        });
        // Refill both buckets for the time since the last update.
        let secs = now.saturating_sub(e.at) as f32 / 1000.0;
        e.connections = (e.connections + secs * c.connections_per_second as f32).min(c.connection_burst as f32);
        e.logins = (e.logins + secs * c.logins_per_minute as f32 / 60.0).min(c.login_burst as f32);
        e.at = now;
        let tokens = match bucket {
            Bucket::Connection => &mut e.connections,
            Bucket::Login => &mut e.logins,
        };
        if *tokens >= 1.0 {
            *tokens -= 1.0;
            true
        } else {
            false
        }
    }

    /// Frees at least a quarter of the table: entries whose buckets are full again first (they hold no
    /// information), then the least recently updated.
    fn make_room(c: &RateLimitsConfig, table: &mut HashMap<u128, Entry>, now: u64) {
        let full_after = |e: &Entry| {
            let conn = (c.connection_burst as f32 - e.connections) / (c.connections_per_second.max(1) as f32);
            let login = (c.login_burst as f32 - e.logins) / (c.logins_per_minute.max(1) as f32 / 60.0);
            now.saturating_sub(e.at) as f32 / 1000.0 >= conn.max(login)
        };
        table.retain(|_, e| !full_after(e));
        let target = c.max_tracked_addresses - c.max_tracked_addresses / 4;
        if table.len() > target {
            let mut ages: Vec<u64> = table.values().map(|e| e.at).collect();
            let cut = table.len() - target;
            ages.select_nth_unstable(cut.saturating_sub(1));
            let threshold = ages.get(cut.saturating_sub(1)).copied().unwrap_or(now);
            table.retain(|_, e| e.at > threshold);
        }
    }

    /// Addresses tracked now.
    #[cfg(test)]
    fn tracked(&self) -> usize {
        self.table.lock().unwrap_or_else(PoisonError::into_inner).len()
    }
}

#[cfg(test)]
mod tests {
    use std::net::{Ipv4Addr, Ipv6Addr};

    use super::*;

    /// A limiter and its settings, as `allow` and `key` take them.
    struct Limiter(RateLimiter, RateLimitsConfig);

    impl Limiter {
        fn allow(&self, ip: IpAddr, bucket: Bucket) -> bool {
            self.0.allow(&self.1, ip, bucket)
        }
        fn key(&self, ip: IpAddr) -> u128 {
            RateLimiter::key(&self.1, ip)
        }
        fn tracked(&self) -> usize {
            self.0.tracked()
        }
    }

    fn limiter(f: impl FnOnce(&mut RateLimitsConfig)) -> Limiter {
        let mut c = RateLimitsConfig::default();
        f(&mut c);
        Limiter(RateLimiter::new(), c)
    }

    #[test]
    fn a_burst_then_the_rate() {
        let r = limiter(|c| {
            c.connections_per_second = 1;
            c.connection_burst = 3;
        });
        let ip: IpAddr = Ipv4Addr::new(203, 0, 113, 7).into();
        let allowed = (0..10).filter(|_| r.allow(ip, Bucket::Connection)).count();
        assert_eq!(allowed, 3, "the burst, then nothing within the same instant");
        // Another address is not affected.
        assert!(r.allow(Ipv4Addr::new(203, 0, 113, 8).into(), Bucket::Connection));
        // Logins are a separate bucket.
        assert!(r.allow(ip, Bucket::Login));
    }

    #[test]
    fn ipv6_addresses_in_one_prefix_share_a_bucket() {
        let r = limiter(|c| {
            c.connections_per_second = 1;
            c.connection_burst = 2;
            c.ipv6_prefix = 64;
        });
        let a: Ipv6Addr = "2001:db8:1:2::1".parse().unwrap();
        let b: Ipv6Addr = "2001:db8:1:2:ffff::9".parse().unwrap();
        let other: Ipv6Addr = "2001:db8:1:3::1".parse().unwrap();
        assert!(r.allow(a.into(), Bucket::Connection));
        assert!(r.allow(b.into(), Bucket::Connection));
        assert!(!r.allow(a.into(), Bucket::Connection), "same /64: the burst of 2 is spent");
        assert!(r.allow(other.into(), Bucket::Connection), "another /64");
        // An IPv4-mapped address is its IPv4 address.
        let v4: IpAddr = Ipv4Addr::new(198, 51, 100, 1).into();
        let mapped: IpAddr = Ipv4Addr::new(198, 51, 100, 1).to_ipv6_mapped().into();
        assert_eq!(r.key(v4), r.key(mapped));
        assert_ne!(r.key(v4), r.key(Ipv6Addr::from(0xc633_6401u128).into()), "IPv4 and IPv6 keys never meet");
        let r128 = limiter(|c| c.ipv6_prefix = 128);
        let just_mapped_bits: Ipv6Addr = "::ffff:0:c633:6401".parse().unwrap();
        assert_ne!(r128.key(v4), r128.key(just_mapped_bits.into()));
    }

    /// This process's resident set, in KiB (Linux).
    fn rss_kib() -> u64 {
        let status = std::fs::read_to_string("/proc/self/status").unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse().unwrap()
    }

    #[test]
    fn the_table_stays_within_its_bound_for_100_000_addresses() {
        // The default bound (65,536 addresses) against 100,000 distinct ones.
        let r = limiter(|_| {});
        let before = rss_kib();
        for i in 0..100_000u32 {
            let ip: IpAddr = Ipv4Addr::from(0x0a00_0000 + i).into();
            assert!(r.allow(ip, Bucket::Connection), "a new address is never limited");
            assert!(r.tracked() <= 65_536);
        }
        let grown = rss_kib().saturating_sub(before);
        // Entries whose buckets refilled (0.1 s after one connection) are dropped first; the rest stay.
        assert!(r.tracked() > 0);
        // The table's own memory: its buckets (key and entry) and one control byte each, whatever the
        // process does meanwhile (other tests share it, so RSS is printed, not asserted).
        let table = r.0.table.lock().unwrap();
        let bytes = table.capacity() * (std::mem::size_of::<(u128, Entry)>() + 1);
        assert_eq!(std::mem::size_of::<(u128, Entry)>(), 32);
        assert!(bytes < 5 * 1024 * 1024, "the table holds {bytes} bytes");
        drop(table);
        eprintln!("100,000 addresses: {} tracked, RSS +{grown} KiB", r.tracked());
    }

    #[test]
    fn zero_turns_a_limit_off() {
        let r = limiter(|c| c.connections_per_second = 0);
        let ip: IpAddr = Ipv4Addr::LOCALHOST.into();
        assert!((0..1000).all(|_| r.allow(ip, Bucket::Connection)));
    }
}
