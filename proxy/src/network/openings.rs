//! What a connection to `peer_bind` may hold before it proves it knows the network's secret: one of at most
//! [`MAX_OPENINGS`] pending openings, at most [`MAX_OPENINGS_PER_SOURCE`] of them from one address. Connections
//! from the address of a live instance (as its signed entry in Redis names it) are held to neither: a flood
//! from elsewhere cannot keep the network's own links out. An opening ends when the link is authenticated
//! (it then holds one of `peer::MAX_LINKS`), fails, or passes its deadline (`AUTH_TIMEOUT`, 5 s).

use std::collections::HashMap;
use std::net::IpAddr;
use std::sync::{Arc, Mutex, PoisonError};

use crate::labels::LinkRefused;

/// Openings pending at once from one source address (other than a live instance's), at most: 16.
pub(crate) const MAX_OPENINGS_PER_SOURCE: usize = 16;
/// Openings pending at once from all addresses (other than live instances'), at most: 256.
pub(crate) const MAX_OPENINGS: usize = 256;

/// The pending openings, by source address.
#[derive(Debug, Default)]
pub(crate) struct Openings {
    pending: Mutex<Pending>,
}

#[derive(Debug, Default)]
struct Pending {
    by_source: HashMap<IpAddr, usize>,
    all: usize,
}

/// One pending opening; dropping it ends it.
#[derive(Debug)]
pub(crate) struct Opening {
    openings: Arc<Openings>,
    source: Option<IpAddr>,
}

impl Openings {
    /// A pending opening from `source`, or why not. `instance`: the address is a live instance's (not counted).
    ///
    /// # Errors
    /// [`LinkRefused::PerSource`] or [`LinkRefused::Openings`] when that bound is reached.
    pub(crate) fn open(self: &Arc<Self>, source: IpAddr, instance: bool) -> Result<Opening, LinkRefused> {
        if instance {
            return Ok(Opening { openings: Arc::clone(self), source: None });
        }
        let source = source_of(source);
        let mut p = self.pending.lock().unwrap_or_else(PoisonError::into_inner);
        if p.all >= MAX_OPENINGS {
            return Err(LinkRefused::Openings);
        }
        let from_source = p.by_source.entry(source).or_insert(0);
        if *from_source >= MAX_OPENINGS_PER_SOURCE {
            return Err(LinkRefused::PerSource);
        }
        *from_source += 1;
        p.all += 1;
        Ok(Opening { openings: Arc::clone(self), source: Some(source) })
    }

    /// Openings pending now (not counting live instances').
    #[cfg(test)]
    fn pending(&self) -> usize {
        self.pending.lock().unwrap_or_else(PoisonError::into_inner).all
    }
}

/// The source an opening is counted under: the IPv4 address (also when it arrives IPv4-mapped on a dual-stack
/// socket), or the IPv6 address's /64 (one host is usually given a whole /64).
pub(crate) fn source_of(ip: IpAddr) -> IpAddr {
    match ip.to_canonical() {
        IpAddr::V6(v6) => {
            let mut segments = v6.segments();
            segments[4..].fill(0);
            IpAddr::V6(segments.into())
        }
        v4 => v4,
    }
}

impl Drop for Opening {
    fn drop(&mut self) {
        let Some(source) = self.source else { return };
        let mut p = self.openings.pending.lock().unwrap_or_else(PoisonError::into_inner);
        p.all = p.all.saturating_sub(1);
        if let Some(n) = p.by_source.get_mut(&source) {
            *n -= 1;
            if *n == 0 {
                // Nothing is kept for an address once its openings ended.
                p.by_source.remove(&source);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn openings_are_bounded_per_source_and_in_all_and_released() {
        let o = Arc::new(Openings::default());
        let a: IpAddr = [192, 0, 2, 1].into();
        let held: Vec<Opening> = (0..MAX_OPENINGS_PER_SOURCE).map(|_| o.open(a, false).unwrap()).collect();
        assert_eq!(o.open(a, false).err(), Some(LinkRefused::PerSource));
        // A live instance's address is not held to either bound.
        assert!(o.open(a, true).is_ok());
        drop(held);
        assert_eq!(o.pending(), 0);
        assert!(o.pending.lock().unwrap().by_source.is_empty(), "nothing kept for an address");
        let mut many = Vec::new();
        for i in 0..MAX_OPENINGS {
            let ip: IpAddr = [10, 0, (i / 256) as u8, (i % 256) as u8].into();
            many.push(o.open(ip, false).unwrap());
        }
        assert_eq!(o.open([10, 9, 9, 9].into(), false).err(), Some(LinkRefused::Openings));
        many.clear();
        // One IPv6 /64 is one source; an IPv4-mapped address is its IPv4 address.
        let v6 = |last: u16| IpAddr::from([0x2001, 0xdb8, 0, 1, 0, 0, 0, last]);
        let held: Vec<Opening> = (0..MAX_OPENINGS_PER_SOURCE as u16).map(|i| o.open(v6(i), false).unwrap()).collect();
        assert_eq!(o.open(v6(999), false).err(), Some(LinkRefused::PerSource));
        assert_eq!(source_of("::ffff:192.0.2.1".parse().unwrap()), a);
        drop(held);
        assert!(o.open([10, 9, 9, 9].into(), true).is_ok());
        assert_eq!(o.pending(), 0);
    }
}
