//! PROXY protocol (HAProxy's v1 text and v2 binary headers): read from load balancers in front of listeners
//! with `proxy_protocol = true` (`tcp`, and `ws`/`wss` before TLS and the upgrade), and written to backends with
//! `forwarding = "proxy-protocol"`.
//! Parsing and building use the `ppp` crate.

use std::net::{IpAddr, Ipv4Addr, SocketAddr};

use bytes::BytesMut;
use ppp::v2::{Builder, Command, Protocol, Version};
use ppp::{HeaderResult, PartialResult};
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

/// Largest PROXY header accepted, in bytes (v1 is at most 107; v2 is 16 plus addresses and TLVs).
pub(crate) const MAX_PROXY_HEADER: usize = 4096;

/// Why a PROXY header was refused.
#[derive(Debug, thiserror::Error)]
pub(crate) enum ProxyHeaderError {
    #[error("connection closed before the PROXY header was complete")]
    Closed,
    #[error("read error: {0}")]
    Io(#[from] std::io::Error),
    #[error("invalid PROXY header: {0}")]
    Invalid(String),
    #[error("PROXY header longer than {MAX_PROXY_HEADER} bytes")]
    TooLong,
}

/// Reads a PROXY v1 or v2 header. Returns the client address it names (`None` for `LOCAL` or `UNKNOWN`, which
/// mean "use the TCP peer") and the bytes that followed it.
pub(crate) async fn read_header(stream: &mut TcpStream) -> Result<(Option<SocketAddr>, BytesMut), ProxyHeaderError> {
    let mut buf = BytesMut::with_capacity(256);
    loop {
        if stream.read_buf(&mut buf).await? == 0 {
            return Err(ProxyHeaderError::Closed);
        }
        if let Some((len, addr)) = parse_header(&buf)? {
            let _ = buf.split_to(len.min(buf.len()));
            return Ok((addr, buf));
        }
    }
}

/// Reads a PROXY v1 or v2 header and nothing after it (looked at with `peek`, then consumed exactly), so what
/// follows (a TLS ClientHello, an HTTP upgrade) is read by its own reader from the socket. Returns the client
/// address it names (`None` for `LOCAL` or `UNKNOWN`). While the header is incomplete it looks again after a
/// pause (1 ms, doubling to 50 ms): a balancer sends it whole, in the connection's first segment.
///
/// # Errors
/// As [`read_header`].
pub(crate) async fn read_header_exactly(stream: &mut TcpStream) -> Result<Option<SocketAddr>, ProxyHeaderError> {
    let mut buf = vec![0u8; MAX_PROXY_HEADER + 1];
    let (mut seen, mut pause) = (0, std::time::Duration::from_millis(1));
    loop {
        let n = stream.peek(&mut buf).await?;
        if n == 0 {
            return Err(ProxyHeaderError::Closed);
        }
        if let Some((len, addr)) = parse_header(buf.get(..n).unwrap_or_default())? {
            let header = buf.get_mut(..len).ok_or(ProxyHeaderError::TooLong)?;
            stream.read_exact(header).await?;
            return Ok(addr);
        }
        if n == seen {
            tokio::time::sleep(pause).await;
            pause = (pause * 2).min(std::time::Duration::from_millis(50));
        }
        seen = n;
    }
}

/// Parses a PROXY v1 or v2 header at the start of `buf` (sans-IO): `Ok(None)` while it is incomplete (and under
/// [`MAX_PROXY_HEADER`]), else its length in bytes and the client address it names (`None` for `LOCAL` or
/// `UNKNOWN`).
///
/// # Errors
/// [`ProxyHeaderError::Invalid`] or [`ProxyHeaderError::TooLong`].
pub(crate) fn parse_header(buf: &[u8]) -> Result<Option<(usize, Option<SocketAddr>)>, ProxyHeaderError> {
    let parsed = HeaderResult::parse(buf);
    if parsed.is_incomplete() {
        if buf.len() > MAX_PROXY_HEADER {
            return Err(ProxyHeaderError::TooLong);
        }
        return Ok(None);
    }
    match parsed {
        HeaderResult::V1(Ok(h)) => {
            let addr = match h.addresses {
                ppp::v1::Addresses::Tcp4(a) => Some(SocketAddr::new(IpAddr::V4(a.source_address), a.source_port)),
                ppp::v1::Addresses::Tcp6(a) => Some(SocketAddr::new(IpAddr::V6(a.source_address), a.source_port)),
                ppp::v1::Addresses::Unknown => None,
            };
            Ok(Some((h.header.len(), addr)))
        }
        HeaderResult::V2(Ok(h)) => {
            let addr = match (h.command, h.addresses) {
                (Command::Proxy, ppp::v2::Addresses::IPv4(a)) => {
                    Some(SocketAddr::new(IpAddr::V4(a.source_address), a.source_port))
                }
                (Command::Proxy, ppp::v2::Addresses::IPv6(a)) => {
                    Some(SocketAddr::new(IpAddr::V6(a.source_address), a.source_port))
                }
                _ => None,
            };
            Ok(Some((h.len(), addr)))
        }
        HeaderResult::V1(Err(e)) => Err(ProxyHeaderError::Invalid(e.to_string())),
        HeaderResult::V2(Err(e)) => Err(ProxyHeaderError::Invalid(e.to_string())),
    }
}

/// Builds a PROXY v2 `PROXY` header for a TCP stream from `client` to `destination`. When the families differ,
/// the destination becomes the unspecified address of the client's family (backends only use the source).
///
/// # Errors
/// [`ProxyHeaderError::Invalid`] when the header cannot be built.
pub(crate) fn v2_header(client: SocketAddr, destination: SocketAddr) -> Result<Vec<u8>, ProxyHeaderError> {
    let client = SocketAddr::new(client.ip().to_canonical(), client.port());
    let destination = match (client.ip(), destination.ip().to_canonical()) {
        (IpAddr::V4(_), IpAddr::V4(d)) => SocketAddr::new(IpAddr::V4(d), destination.port()),
        (IpAddr::V6(_), IpAddr::V6(d)) => SocketAddr::new(IpAddr::V6(d), destination.port()),
        (IpAddr::V4(_), IpAddr::V6(_)) => SocketAddr::new(IpAddr::V4(Ipv4Addr::UNSPECIFIED), destination.port()),
        (IpAddr::V6(_), IpAddr::V4(d)) => SocketAddr::new(IpAddr::V6(d.to_ipv6_mapped()), destination.port()),
    };
    Builder::with_addresses(Version::Two | Command::Proxy, Protocol::Stream, (client, destination))
        .build()
        .map_err(|e| ProxyHeaderError::Invalid(e.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn v2_header_round_trips() {
        let client: SocketAddr = "203.0.113.7:4711".parse().unwrap();
        let h = v2_header(client, "127.0.0.1:25565".parse().unwrap()).unwrap();
        assert_eq!(&h[..12], b"\r\n\r\n\0\r\nQUIT\n");
        assert_eq!(h[12], 0x21);
        match HeaderResult::parse(&h) {
            HeaderResult::V2(Ok(p)) => match p.addresses {
                ppp::v2::Addresses::IPv4(a) => {
                    assert_eq!(a.source_address.to_string(), "203.0.113.7");
                    assert_eq!(a.source_port, 4711);
                }
                other => panic!("{other:?}"),
            },
            other => panic!("{other:?}"),
        }
        // Mixed families still give one family.
        let h = v2_header("[2001:db8::1]:1".parse().unwrap(), "127.0.0.1:25565".parse().unwrap()).unwrap();
        assert!(matches!(HeaderResult::parse(&h), HeaderResult::V2(Ok(_))));
    }
}
