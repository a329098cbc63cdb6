//! The HTTP/1.1 WebSocket upgrade (RFC 6455 §4.2) and the player's real address.
//!
//! The upgrade is parsed here with `httparse` rather than by tungstenite's server handshake because the proxy
//! must answer 404 for other paths and 426 for requests that are not upgrades, read forwarding headers, and
//! keep the whole exchange under the connection's handshake deadline, and answer a configured `health_path`
//! without upgrading. Framing after the upgrade is [`moonbridge_protocol::ws::frame`]'s ([`crate::ws_link`]).

use std::io;
use std::net::SocketAddr;

use moonbridge_protocol::ws::compress::SUBPROTOCOL_V2_ZSTD;
use moonbridge_protocol::ws::{self as carriage, v2};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};

use crate::config::{RealIpHeader, WsSettings};
use crate::http_head::{parse_head, HeadError, MAX_HEADERS, MAX_REQUEST_HEAD};
use crate::trusted::real_ip;

/// Who is at the other end of a WebSocket connection before its upgrade request is read.
#[derive(Clone, Copy, Debug)]
pub(crate) struct Peer {
    /// The TCP peer, or the client a balancer's PROXY header named.
    pub(crate) addr: SocketAddr,
    /// Whether a trusted peer's `real_ip_header` may still name the player: false when a balancer's PROXY header
    /// named no client (`LOCAL`, `UNKNOWN`), since the peer is then the balancer, which passes the player's TLS
    /// through and cannot vouch for what the player wrote in its headers.
    pub(crate) headers: bool,
}

#[derive(Debug, thiserror::Error)]
pub(crate) enum UpgradeError {
    #[error("connection closed before the request was complete")]
    Closed,
    #[error("read error: {0}")]
    Io(#[from] io::Error),
    #[error("request head over {MAX_REQUEST_HEAD} bytes or {MAX_HEADERS} headers")]
    TooLarge,
    #[error("malformed HTTP request: {0}")]
    Malformed(String),
    #[error("path {0:?} is not the WebSocket path")]
    WrongPath(String),
    #[error("not a WebSocket upgrade request")]
    NotUpgrade,
    #[error("method {0} is not GET")]
    Method(String),
    #[error("unsupported Sec-WebSocket-Version {0:?}")]
    Version(String),
    #[error("missing Sec-WebSocket-Key")]
    MissingKey,
    /// Not an error: a request for the listener's `health_path`, answered with 200 and closed.
    #[error("health check answered")]
    HealthCheck,
}

impl UpgradeError {
    fn response(&self) -> Option<&'static str> {
        Some(match self {
            Self::Closed | Self::Io(_) => return None,
            Self::TooLarge => "HTTP/1.1 431 Request Header Fields Too Large\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            Self::Malformed(_) | Self::MissingKey => "HTTP/1.1 400 Bad Request\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            Self::WrongPath(_) => "HTTP/1.1 404 Not Found\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            Self::NotUpgrade | Self::Version(_) => {
                "HTTP/1.1 426 Upgrade Required\r\nUpgrade: websocket\r\nConnection: Upgrade, close\r\nSec-WebSocket-Version: 13\r\nContent-Length: 0\r\n\r\n"
            }
            Self::Method(_) => "HTTP/1.1 405 Method Not Allowed\r\nAllow: GET\r\nConnection: close\r\nContent-Length: 0\r\n\r\n",
            Self::HealthCheck => {
                "HTTP/1.1 200 OK\r\nContent-Type: text/plain\r\nCache-Control: no-store\r\nConnection: close\r\nContent-Length: 3\r\n\r\nok\n"
            }
        })
    }
}

/// An accepted upgrade.
#[derive(Debug)]
pub(crate) struct Upgraded {
    /// The player's address: the TCP peer, or what a trusted proxy said.
    pub(crate) client: SocketAddr,
    /// Bytes the client sent after the request head (the start of the WebSocket stream).
    pub(crate) leftover: Vec<u8>,
    /// Carriage v2 (`moonbridge.v2`, or `moonbridge.v2.zstd`) was selected.
    pub(crate) v2: bool,
    /// `moonbridge.v2.zstd` was selected: the zstd level of what the proxy sends.
    pub(crate) zstd: Option<i32>,
    /// Carriage v2 was selected and the client offered moves (`MoonBridge-Move: 1`).
    pub(crate) move_offered: bool,
    /// Carriage v2 was selected and the client acknowledges often enough to be paced (`MoonBridge-Pace: 1`).
    pub(crate) paced: bool,
}

/// Which carriage versions the proxy selects when a client offers them (the highest offered wins).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub(crate) struct Carriages {
    /// `moonbridge.v2`: resume is on (`limits.resume_window_seconds` > 0).
    pub(crate) v2: bool,
    /// `moonbridge.v2.zstd` at this level: v2 is on and `[compression] enabled`.
    pub(crate) zstd: Option<i32>,
}

fn header<'a>(req: &'a httparse::Request<'_, '_>, name: &str) -> Option<&'a str> {
    req.headers
        .iter()
        .find(|h| h.name.eq_ignore_ascii_case(name))
        .and_then(|h| std::str::from_utf8(h.value).ok())
        .map(str::trim)
}

/// The value of the real-IP header: for `X-Forwarded-For`, every line joined in order with `,` (a proxy may
/// append its own line instead of extending the client's); for single-address headers, the last line (the
/// one the nearest proxy added).
fn real_ip_header_value(req: &httparse::Request<'_, '_>, header: RealIpHeader) -> Option<String> {
    let mut lines = req
        .headers
        .iter()
        .filter(|h| h.name.eq_ignore_ascii_case(header.name()))
        .filter_map(|h| std::str::from_utf8(h.value).ok())
        .map(str::trim);
    match header {
        RealIpHeader::XForwardedFor => {
            let all: Vec<&str> = lines.collect();
            (!all.is_empty()).then(|| all.join(","))
        }
        RealIpHeader::CfConnectingIp | RealIpHeader::XRealIp => lines.next_back().map(str::to_owned),
    }
}

fn has_token(value: Option<&str>, token: &str) -> bool {
    value.is_some_and(|v| v.split(',').any(|t| t.trim().eq_ignore_ascii_case(token)))
}

/// Reads the HTTP request head and answers it: 101 and the accepted upgrade, or an error status.
pub(crate) async fn accept_upgrade<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    settings: &WsSettings,
    peer: Peer,
    carriages: Carriages,
) -> Result<Upgraded, UpgradeError> {
    let result = read_and_check(stream, settings, peer, carriages).await;
    match result {
        Ok((response, upgraded)) => {
            stream.write_all(response.as_bytes()).await?;
            stream.flush().await?;
            Ok(upgraded)
        }
        Err(e) => {
            if let Some(r) = e.response() {
                let _ = stream.write_all(r.as_bytes()).await;
                let _ = stream.flush().await;
                let _ = stream.shutdown().await;
            }
            Err(e)
        }
    }
}

async fn read_and_check<S: AsyncRead + Unpin>(
    stream: &mut S,
    settings: &WsSettings,
    peer: Peer,
    carriages: Carriages,
) -> Result<(String, Upgraded), UpgradeError> {
    let mut buf = Vec::with_capacity(1024);
    let mut chunk = [0u8; 1024];
    loop {
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(UpgradeError::Closed);
        }
        buf.extend_from_slice(chunk.get(..n).unwrap_or_default());
        if let Some(done) = parse_upgrade(&buf, settings, peer, carriages)? {
            return Ok(done);
        }
    }
}

/// Parses and checks an upgrade request from the bytes read so far (sans-IO): `Ok(None)` while the head is
/// incomplete (and under [`MAX_REQUEST_HEAD`]), else the `101` response to send and the upgraded connection.
/// `carriages`: the versions selected when offered.
///
/// # Errors
/// [`UpgradeError`] for a head that is too large, malformed or not a valid WebSocket upgrade for `settings`.
pub(crate) fn parse_upgrade(
    buf: &[u8],
    settings: &WsSettings,
    peer: Peer,
    carriages: Carriages,
) -> Result<Option<(String, Upgraded)>, UpgradeError> {
    match parse_head(buf, |req, head_len| {
        let leftover = buf.get(head_len..).unwrap_or_default().to_vec();
        check_request(req, settings, peer, leftover, carriages)
    }) {
        Ok(Some(checked)) => checked.map(Some),
        Ok(None) => Ok(None),
        Err(HeadError::TooLarge) => Err(UpgradeError::TooLarge),
        Err(HeadError::Malformed(e)) => Err(UpgradeError::Malformed(e)),
    }
}

fn check_request(
    req: &httparse::Request<'_, '_>,
    settings: &WsSettings,
    peer: Peer,
    leftover: Vec<u8>,
    carriages: Carriages,
) -> Result<(String, Upgraded), UpgradeError> {
    let target = req.path.unwrap_or("");
    let path = target.split_once('?').map_or(target, |(p, _)| p);
    if settings.health_path.as_deref() == Some(path) {
        return Err(UpgradeError::HealthCheck);
    }
    if path != settings.path {
        return Err(UpgradeError::WrongPath(path.chars().take(128).collect()));
    }
    if !has_token(header(req, "Upgrade"), "websocket") || !has_token(header(req, "Connection"), "upgrade") {
        return Err(UpgradeError::NotUpgrade);
    }
    if req.method != Some("GET") {
        return Err(UpgradeError::Method(req.method.unwrap_or("?").chars().take(16).collect()));
    }
    // A body would be read as WebSocket data after the 101 (RFC 6455 §4.1: the opening handshake is a GET
    // with none).
    let body =
        header(req, "Content-Length").is_some_and(|l| l.trim() != "0") || header(req, "Transfer-Encoding").is_some();
    if body {
        return Err(UpgradeError::Malformed("an upgrade request with a body".into()));
    }
    match header(req, "Sec-WebSocket-Version") {
        Some("13") => {}
        other => return Err(UpgradeError::Version(other.unwrap_or("").chars().take(16).collect())),
    }
    let key = header(req, "Sec-WebSocket-Key").ok_or(UpgradeError::MissingKey)?;
    let accept = tungstenite::handshake::derive_accept_key(key.as_bytes());
    // The highest version offered that this proxy speaks (v2 only while resume is on).
    let offered = header(req, "Sec-WebSocket-Protocol");
    let zstd = carriages.zstd.filter(|_| carriages.v2 && has_token(offered, SUBPROTOCOL_V2_ZSTD));
    let v2 = zstd.is_some() || (carriages.v2 && has_token(offered, v2::SUBPROTOCOL_V2));
    let subprotocol = if zstd.is_some() {
        Some(SUBPROTOCOL_V2_ZSTD)
    } else if v2 {
        Some(v2::SUBPROTOCOL_V2)
    } else {
        has_token(offered, carriage::SUBPROTOCOL).then_some(carriage::SUBPROTOCOL)
    };
    let value = real_ip_header_value(req, settings.real_ip_header);
    let ip = match peer.headers {
        true => real_ip(peer.addr.ip(), &settings.trusted, settings.real_ip_header, value.as_deref()),
        false => peer.addr.ip(),
    };
    let mut response = format!(
        "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\nSec-WebSocket-Accept: {accept}\r\n"
    );
    if let Some(p) = subprotocol {
        response.push_str("Sec-WebSocket-Protocol: ");
        response.push_str(p);
        response.push_str("\r\n");
    }
    response.push_str("\r\n");
    let client = SocketAddr::new(ip, if ip == peer.addr.ip().to_canonical() { peer.addr.port() } else { 0 });
    let move_offered = v2 && header(req, v2::MOVE_HEADER).is_some_and(|h| h.trim() == "1");
    let paced = v2 && header(req, v2::PACE_HEADER).is_some_and(|h| h.trim() == "1");
    Ok((response, Upgraded { client, leftover, v2, zstd, move_offered, paced }))
}

#[cfg(test)]
mod tests {
    use std::net::IpAddr;

    use super::*;
    use crate::trusted::TrustedProxies;

    #[test]
    fn an_upgrade_request_with_a_body_is_refused() {
        let settings = WsSettings {
            path: "/mc".into(),
            ping_interval: None,
            trusted: TrustedProxies::default(),
            real_ip_header: RealIpHeader::CfConnectingIp,
            health_path: None,
            proxy_header: false,
        };
        let peer: SocketAddr = "192.0.2.1:5000".parse().unwrap();
        let carriages = Carriages { v2: true, zstd: None };
        let head = "GET /mc HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                    Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n";
        for (extra, ok) in [
            ("", true),
            ("Content-Length: 0\r\n", true),
            ("Content-Length: 5\r\n", false),
            ("Transfer-Encoding: chunked\r\n", false),
        ] {
            let request = format!("{head}{extra}\r\nhello");
            let got = parse_upgrade(request.as_bytes(), &settings, Peer { addr: peer, headers: true }, carriages);
            assert_eq!(got.is_ok(), ok, "{extra:?}: {got:?}");
        }
    }

    /// After a balancer's PROXY header that named no client, the peer is the balancer (trusted), yet what the
    /// player wrote in its headers is not believed.
    #[test]
    fn headers_are_not_believed_after_a_proxy_header_without_a_client() {
        let settings = WsSettings {
            path: "/mc".into(),
            ping_interval: None,
            trusted: TrustedProxies::parse(&["10.0.0.2".to_string()]).unwrap(),
            real_ip_header: RealIpHeader::CfConnectingIp,
            health_path: None,
            proxy_header: true,
        };
        let balancer: SocketAddr = "10.0.0.2:5000".parse().unwrap();
        let request = "GET /mc HTTP/1.1\r\nHost: x\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
                       Sec-WebSocket-Version: 13\r\nSec-WebSocket-Key: dGhlIHNhbXBsZSBub25jZQ==\r\n\
                       CF-Connecting-IP: 203.0.113.9\r\n\r\n";
        let carriages = Carriages { v2: false, zstd: None };
        let client = |headers| {
            let peer = Peer { addr: balancer, headers };
            parse_upgrade(request.as_bytes(), &settings, peer, carriages).unwrap().unwrap().1.client
        };
        assert_eq!(client(true).ip().to_string(), "203.0.113.9");
        assert_eq!(client(false), balancer);
    }

    #[test]
    fn repeated_forwarding_headers_cannot_hide_the_real_hop() {
        // A client line first, then the line a trusted proxy appended (parsed by the one head reader).
        let head = b"GET /mc HTTP/1.1\r\nX-Forwarded-For: 6.6.6.6\r\nx-forwarded-for: 203.0.113.7\r\n\
                     CF-Connecting-IP: 6.6.6.6\r\nCF-Connecting-IP: 203.0.113.9\r\n\r\n";
        let values = crate::http_head::parse_head(head, |req, _| {
            [RealIpHeader::XForwardedFor, RealIpHeader::CfConnectingIp, RealIpHeader::XRealIp]
                .map(|h| real_ip_header_value(req, h))
        });
        let [xff, cf, x_real_ip] = values.unwrap().unwrap();
        assert_eq!(xff.as_deref(), Some("6.6.6.6,203.0.113.7"));
        let peer: IpAddr = "10.0.0.1".parse().unwrap();
        let t = TrustedProxies::parse(&["10.0.0.0/8".to_string()]).unwrap();
        assert_eq!(real_ip(peer, &t, RealIpHeader::XForwardedFor, xff.as_deref()).to_string(), "203.0.113.7");
        assert_eq!(cf.as_deref(), Some("203.0.113.9"));
        assert_eq!(x_real_ip, None);
    }
}
