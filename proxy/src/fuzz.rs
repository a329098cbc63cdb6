//! Entry points for the cargo-fuzz targets in `fuzz/` (built only with `--cfg fuzzing`): the parsers a player
//! or a load balancer feeds, each called on arbitrary bytes. None may panic.

use std::net::{IpAddr, SocketAddr};

use crate::config::{RealIpHeader, WsSettings};
use crate::trusted::TrustedProxies;

fn settings(header: RealIpHeader) -> WsSettings {
    let trusted = TrustedProxies::parse(&["127.0.0.0/8".into(), "10.0.0.0/8".into(), "2001:db8::/32".into()])
        .unwrap_or_else(|_| TrustedProxies::parse(&[]).unwrap_or_default());
    WsSettings {
        path: "/mc".into(),
        ping_interval: None,
        trusted,
        real_ip_header: header,
        health_path: Some("/healthz".into()),
        proxy_header: false,
    }
}

/// The HTTP upgrade request of a `ws`/`wss` listener, with each real-IP header, from a trusted and an untrusted
/// peer. A `101` answer must name the right subprotocol and a client address that is the peer or a valid IP.
pub fn upgrade(data: &[u8]) {
    for header in [RealIpHeader::CfConnectingIp, RealIpHeader::XForwardedFor, RealIpHeader::XRealIp] {
        for peer in ["127.0.0.1:4711", "192.0.2.9:4711"] {
            let peer: SocketAddr = peer.parse().unwrap_or_else(|_| SocketAddr::from(([127, 0, 0, 1], 1)));
            if let Ok(Some((response, up))) = crate::listen::upgrade::parse_upgrade(
                data,
                &settings(header),
                crate::listen::upgrade::Peer { addr: peer, headers: true },
                crate::listen::upgrade::Carriages { v2: true, zstd: Some(1) },
            ) {
                assert!(response.starts_with("HTTP/1.1 101 "));
                assert!(response.ends_with("\r\n\r\n"));
                if peer.ip() != IpAddr::from([127, 0, 0, 1]) {
                    assert_eq!(up.client.ip(), peer.ip(), "an untrusted peer is taken at its address");
                }
            }
        }
    }
}

/// A PROXY v1/v2 header: a parsed length never exceeds the input.
pub fn proxy_header(data: &[u8]) {
    if let Ok(Some((len, _))) = crate::proxy_header::parse_header(data) {
        assert!(len <= data.len());
    }
}

/// A real-IP header value (as UTF-8 text), from a trusted and from an untrusted peer: an untrusted peer is always
/// taken at its own address.
pub fn real_ip(data: &[u8]) {
    let Ok(value) = std::str::from_utf8(data) else { return };
    let s = settings(RealIpHeader::XForwardedFor);
    for header in [RealIpHeader::CfConnectingIp, RealIpHeader::XForwardedFor, RealIpHeader::XRealIp] {
        let _ = crate::trusted::real_ip(IpAddr::from([127, 0, 0, 1]), &s.trusted, header, Some(value));
        let stranger = IpAddr::from([192, 0, 2, 9]);
        assert_eq!(crate::trusted::real_ip(stranger, &s.trusted, header, Some(value)), stranger);
    }
}

/// A configuration file: parsing and checking never panic, and a file that checks clean builds settings.
pub fn config(data: &[u8]) {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(config) = crate::Config::from_toml(text) {
        if config.check().is_empty() {
            let _ = config.settings();
        }
    }
}

/// What anyone who can write the network's Redis keys can put there, as a renewal reads it: a player record, an
/// instance entry and a name claim. None may panic; a record that reads is within its bounds, and an instance
/// entry or a claim is never taken without the network's signature.
pub fn redis_entries(data: &[u8]) {
    use crate::network::entries::{claim_signed, read_instance, read_player, MAX_RECORD_NAME, MAX_RECORD_SERVER};
    let raw = String::from_utf8_lossy(data);
    if let Ok(record) = read_player(&raw) {
        assert!(!record.name.is_empty() && record.name.chars().count() <= MAX_RECORD_NAME);
        assert!(record.server.len() <= MAX_RECORD_SERVER);
    }
    let secret = crate::network::link::Secret::new(b"fuzzing: not the network's secret, 32+ bytes");
    // Arbitrary bytes carry no valid HMAC-SHA-256 (a 2^-256 chance aside).
    assert!(read_instance(&secret, "main", "00000000000000aa", &raw, 1_765_000_000_000).is_err());
    assert!(!claim_signed(&secret, "main", "steve", &raw));
}
