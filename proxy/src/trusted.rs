//! Trusted proxies: the peers whose word about the player's address is believed, for both ways of saying it
//! (a PROXY protocol header on a `tcp` listener, a real-IP HTTP header on a `ws`/`wss` listener), and the
//! real-IP header rules.

use std::net::{IpAddr, SocketAddr};

use ipnet::IpNet;
use serde::Deserialize;

/// The HTTP header a trusted proxy puts the player's address in.
#[derive(Clone, Copy, Debug, Default, Deserialize, PartialEq, Eq)]
#[non_exhaustive]
pub enum RealIpHeader {
    /// `CF-Connecting-IP`: Cloudflare's single address.
    #[default]
    #[serde(rename = "CF-Connecting-IP")]
    CfConnectingIp,
    /// `X-Forwarded-For`: a list; the rightmost address that is not a trusted proxy is the player.
    #[serde(rename = "X-Forwarded-For")]
    XForwardedFor,
    /// `X-Real-IP`: a single address (nginx).
    #[serde(rename = "X-Real-IP")]
    XRealIp,
}

impl RealIpHeader {
    /// The header name, as written in the configuration.
    pub fn name(self) -> &'static str {
        match self {
            Self::CfConnectingIp => "CF-Connecting-IP",
            Self::XForwardedFor => "X-Forwarded-For",
            Self::XRealIp => "X-Real-IP",
        }
    }
}

/// A set of networks (`trusted_proxies`). Addresses are compared in canonical form, so an IPv4-mapped IPv6
/// peer (`::ffff:10.0.0.1`, seen on `[::]` listeners) matches `10.0.0.0/8`.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct TrustedProxies(Vec<IpNet>);

impl TrustedProxies {
    /// Parses `"10.0.0.0/8"`, `"2001:db8::/32"` or single addresses (a /32 or /128).
    ///
    /// # Errors
    /// One message per entry that is not an address or CIDR, naming it.
    pub fn parse(entries: &[String]) -> Result<Self, Vec<String>> {
        let mut nets = Vec::with_capacity(entries.len());
        let mut bad = Vec::new();
        for text in entries {
            match text.parse::<IpNet>() {
                Ok(net) => nets.push(net.trunc()),
                Err(_) => match text.parse::<IpAddr>() {
                    Ok(ip) => nets.push(IpNet::from(ip)),
                    Err(_) => bad.push(format!("\"{text}\" is not an IP address or CIDR")),
                },
            }
        }
        if bad.is_empty() {
            Ok(Self(nets))
        } else {
            Err(bad)
        }
    }

    /// True when no network is trusted.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }

    /// Number of networks.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// True when `ip` is in one of the networks.
    pub fn contains(&self, ip: IpAddr) -> bool {
        let ip = ip.to_canonical();
        self.0.iter().any(|n| n.contains(&ip))
    }
}

impl std::fmt::Display for TrustedProxies {
    /// The networks, comma-separated, as in the startup line.
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        for (i, n) in self.0.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{n}")?;
        }
        Ok(())
    }
}

/// Parses one address from a header value: `1.2.3.4`, `2001:db8::1`, `1.2.3.4:5678` or `[2001:db8::1]:5678`.
fn parse_ip(text: &str) -> Option<IpAddr> {
    let t = text.trim();
    t.parse::<IpAddr>().ok().or_else(|| t.parse::<SocketAddr>().ok().map(|s| s.ip())).map(|ip| ip.to_canonical())
}

/// The player's address for a request from `peer`: `peer` itself unless `peer` is a trusted proxy that sent
/// `header` (`value`). For `X-Forwarded-For` the rightmost address that is not itself trusted is taken (the
/// hop that reached the first trusted proxy); if every hop is trusted, the leftmost.
pub(crate) fn real_ip(peer: IpAddr, trusted: &TrustedProxies, header: RealIpHeader, value: Option<&str>) -> IpAddr {
    let peer = peer.to_canonical();
    if !trusted.contains(peer) {
        return peer;
    }
    let Some(value) = value else { return peer };
    match header {
        RealIpHeader::CfConnectingIp | RealIpHeader::XRealIp => parse_ip(value).unwrap_or(peer),
        RealIpHeader::XForwardedFor => {
            let hops: Vec<IpAddr> = value.split(',').filter_map(parse_ip).collect();
            hops.iter().rev().find(|ip| !trusted.contains(**ip)).or_else(|| hops.first()).copied().unwrap_or(peer)
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn nets(list: &[&str]) -> TrustedProxies {
        TrustedProxies::parse(&list.iter().map(|s| (*s).to_owned()).collect::<Vec<_>>()).unwrap()
    }

    #[test]
    fn entries_parse_or_are_named() {
        assert_eq!(nets(&["10.0.0.1", "10.0.0.0/8", "2001:db8::/32"]).len(), 3);
        assert_eq!(nets(&["10.9.9.9/8"]).to_string(), "10.0.0.0/8");
        let bad = TrustedProxies::parse(&["1.2.3.4".into(), "not-an-ip".into(), "10.0.0.0/33".into()]).unwrap_err();
        assert_eq!(bad.len(), 2);
        assert!(bad[0].contains("\"not-an-ip\""), "{bad:?}");
        assert!(bad[1].contains("\"10.0.0.0/33\""), "{bad:?}");
    }

    #[test]
    fn untrusted_peers_cannot_spoof() {
        let peer: IpAddr = "198.51.100.9".parse().unwrap();
        let ip = real_ip(peer, &nets(&["10.0.0.0/8"]), RealIpHeader::CfConnectingIp, Some("203.0.113.7"));
        assert_eq!(ip, peer);
        assert_eq!(real_ip(peer, &TrustedProxies::default(), RealIpHeader::XRealIp, Some("203.0.113.7")), peer);
    }

    #[test]
    fn trusted_peers_are_believed() {
        let peer: IpAddr = "10.1.2.3".parse().unwrap();
        let t = nets(&["10.0.0.0/8"]);
        assert_eq!(real_ip(peer, &t, RealIpHeader::CfConnectingIp, Some(" 203.0.113.7 ")).to_string(), "203.0.113.7");
        assert_eq!(real_ip(peer, &t, RealIpHeader::XRealIp, Some("2001:db8::1")).to_string(), "2001:db8::1");
        assert_eq!(real_ip(peer, &t, RealIpHeader::CfConnectingIp, Some("garbage")), peer);
        assert_eq!(real_ip(peer, &t, RealIpHeader::CfConnectingIp, None), peer);
    }

    #[test]
    fn x_forwarded_for_takes_the_rightmost_untrusted_hop() {
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let t = nets(&["10.0.0.0/8", "192.0.2.0/24"]);
        let h = RealIpHeader::XForwardedFor;
        // The client may prepend anything; only hops appended by trusted proxies count.
        assert_eq!(real_ip(peer, &t, h, Some("6.6.6.6, 203.0.113.7, 192.0.2.10")).to_string(), "203.0.113.7");
        assert_eq!(real_ip(peer, &t, h, Some("203.0.113.7:4711")).to_string(), "203.0.113.7");
        assert_eq!(real_ip(peer, &t, h, Some("[2001:db8::2]:1, 10.9.9.9")).to_string(), "2001:db8::2");
        assert_eq!(real_ip(peer, &t, h, Some("10.2.2.2, 10.3.3.3")).to_string(), "10.2.2.2");
    }

    #[test]
    fn ipv4_mapped_addresses_are_canonical() {
        let peer: IpAddr = "::ffff:127.0.0.1".parse().unwrap();
        assert_eq!(
            real_ip(peer, &nets(&["127.0.0.1/32"]), RealIpHeader::XRealIp, Some("::ffff:203.0.113.7")).to_string(),
            "203.0.113.7"
        );
    }
}
