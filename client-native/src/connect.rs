//! Establishing a connection: DNS, TCP (with TCP_NODELAY), TLS (rustls, webpki-roots plus `ca_file`) and the
//! WebSocket upgrade, each failure with its own error.

use std::cell::Cell;
use std::io;
use std::net::SocketAddr;
use std::sync::Arc;

use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, ServerName};
use rustls::{CertificateError, ClientConfig, RootCertStore};
use tokio::net::TcpStream;
use tokio_rustls::client::TlsStream;
use tokio_tungstenite::tungstenite::client::IntoClientRequest;
use tokio_tungstenite::tungstenite::protocol::WebSocketConfig;
use tokio_tungstenite::WebSocketStream;

use crate::error::ClientError;
use crate::options::{Options, TlsVersion};
use crate::target::{Scheme, Target};

/// The carriage the server selected in the WebSocket upgrade (docs/carriage.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Carriage {
    /// `moonbridge.v1`, or no subprotocol (a plain bridge).
    V1,
    /// `moonbridge.v2`: resumable sessions.
    V2,
    /// `moonbridge.v2.zstd`: v2 with every Binary message compressed.
    V2Zstd,
}

/// An established transport.
pub(crate) enum Stream {
    Tcp(TcpStream),
    /// A WebSocket, and the carriage the server selected.
    Ws(Box<WebSocketStream<TcpStream>>, Carriage),
    Wss(Box<WebSocketStream<TlsStream<TcpStream>>>, Carriage),
}

impl Stream {
    /// The negotiated TLS version (`"1.2"` or `"1.3"`) of a `wss://` connection.
    pub(crate) fn tls_version(&self) -> Option<&'static str> {
        match self {
            Self::Wss(ws, _) => match ws.get_ref().get_ref().1.protocol_version() {
                Some(rustls::ProtocolVersion::TLSv1_3) => Some("1.3"),
                Some(rustls::ProtocolVersion::TLSv1_2) => Some("1.2"),
                _ => Some("?"),
            },
            Self::Tcp(_) | Self::Ws(..) => None,
        }
    }

    /// True when the server selected carriage v2 (resumable sessions), compressed or not.
    pub(crate) fn v2(&self) -> bool {
        matches!(self, Self::Ws(_, Carriage::V2 | Carriage::V2Zstd) | Self::Wss(_, Carriage::V2 | Carriage::V2Zstd))
    }

    /// True when the server selected `moonbridge.v2.zstd`.
    pub(crate) fn zstd(&self) -> bool {
        matches!(self, Self::Ws(_, Carriage::V2Zstd) | Self::Wss(_, Carriage::V2Zstd))
    }
}

/// tungstenite's read buffer for the client, in bytes: one socket read takes up to this much, so a 2.1 MB
/// login burst is a few dozen reads. tungstenite zero-fills the buffer before every read, which is why it is
/// not larger.
const WS_READ_BUFFER: usize = 64 * 1024 + 16;

/// The WebSocket configuration of client connections: messages and frames up to what the carriage allows,
/// [`moonbridge_protocol::ws::MAX_MESSAGE_FOR_ONE_FRAME`] (2 MiB and 2 bytes; the proxy sends at most one relay
/// batch, 256 KiB, per message), so a server announcing a larger frame is refused from its header before any of
/// its payload is buffered; tungstenite buffers writes until [`futures_util::SinkExt::flush`].
pub(crate) fn ws_config() -> WebSocketConfig {
    let most = moonbridge_protocol::ws::MAX_MESSAGE_FOR_ONE_FRAME;
    WebSocketConfig::default().read_buffer_size(WS_READ_BUFFER).max_message_size(Some(most)).max_frame_size(Some(most))
}

/// Connects within `options.connect_timeout_ms`.
pub(crate) async fn establish(target: &Target, options: &Options) -> Result<Stream, ClientError> {
    let stage = Cell::new("DNS lookup");
    match tokio::time::timeout(options.connect_timeout(), connect(target, options, &stage)).await {
        Ok(r) => r,
        Err(_) => Err(ClientError::ConnectTimeout {
            target: target.authority(),
            ms: options.connect_timeout_ms,
            stage: stage.get(),
        }),
    }
}

async fn connect(target: &Target, options: &Options, stage: &Cell<&'static str>) -> Result<Stream, ClientError> {
    // TLS configuration errors (a bad ca_file) are reported before any network activity.
    let tls = match target.scheme {
        Scheme::Wss => Some(tls_config(options)?),
        _ => None,
    };
    let tcp = tcp_connect(target, stage).await?;
    match target.scheme {
        Scheme::Tcp => Ok(Stream::Tcp(tcp)),
        Scheme::Ws => {
            stage.set("WebSocket upgrade");
            let (ws, v2) = upgrade(target, options, tcp).await?;
            Ok(Stream::Ws(Box::new(ws), v2))
        }
        Scheme::Wss => {
            stage.set("TLS handshake");
            let name = options.server_name.clone().unwrap_or_else(|| target.host.clone());
            let server_name = ServerName::try_from(name.clone()).map_err(|_| ClientError::Tls {
                server_name: name.clone(),
                reason: "not a valid DNS name or IP".into(),
            })?;
            let connector =
                tokio_rustls::TlsConnector::from(tls.ok_or_else(|| ClientError::Io("no TLS config".into()))?);
            let stream = connector
                .connect(server_name, tcp)
                .await
                .map_err(|e| ClientError::Tls { server_name: name, reason: describe_tls_error(&e, options) })?;
            stage.set("WebSocket upgrade");
            let (ws, v2) = upgrade(target, options, stream).await?;
            Ok(Stream::Wss(Box::new(ws), v2))
        }
    }
}

async fn tcp_connect(target: &Target, stage: &Cell<&'static str>) -> Result<TcpStream, ClientError> {
    let addrs: Vec<SocketAddr> = tokio::net::lookup_host(target.authority())
        .await
        .map_err(|e| ClientError::Dns { host: target.host.clone(), reason: e.to_string() })?
        .collect();
    if addrs.is_empty() {
        return Err(ClientError::Dns { host: target.host.clone(), reason: "no addresses".into() });
    }
    stage.set("TCP connect");
    let mut last = None;
    for addr in addrs {
        match TcpStream::connect(addr).await {
            Ok(s) => {
                // The point of this library: no Nagle delay on the game's small packets.
                s.set_nodelay(true)
                    .map_err(|e| ClientError::Connect { addr: addr.to_string(), reason: e.to_string() })?;
                return Ok(s);
            }
            Err(e) if e.kind() == io::ErrorKind::ConnectionRefused => {
                last = Some(ClientError::Refused { addr: addr.to_string() });
            }
            Err(e) => last = Some(ClientError::Connect { addr: addr.to_string(), reason: e.to_string() }),
        }
    }
    Err(last.unwrap_or_else(|| ClientError::Dns { host: target.host.clone(), reason: "no addresses".into() }))
}

/// The rustls client configuration for `options`.
pub(crate) fn tls_config(options: &Options) -> Result<Arc<ClientConfig>, ClientError> {
    let mut roots = RootCertStore { roots: webpki_roots::TLS_SERVER_ROOTS.to_vec() };
    if let Some(path) = &options.ca_file {
        let bad = |reason: String| ClientError::InvalidOptions(format!("ca_file {}: {reason}", path.display()));
        let mut added = 0;
        for cert in CertificateDer::pem_file_iter(path).map_err(|e| bad(e.to_string()))? {
            roots.add(cert.map_err(|e| bad(e.to_string()))?).map_err(|e| bad(e.to_string()))?;
            added += 1;
        }
        if added == 0 {
            return Err(bad("no PEM CERTIFICATE block".into()));
        }
    }
    let versions: Vec<&'static rustls::SupportedProtocolVersion> = options
        .tls_versions
        .iter()
        .map(|v| match v {
            TlsVersion::V1_2 => &rustls::version::TLS12,
            TlsVersion::V1_3 => &rustls::version::TLS13,
        })
        .collect();
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let mut config = ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(&versions)
        .map_err(|e| ClientError::InvalidOptions(format!("tls_versions: {e}")))?
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Ok(Arc::new(config))
}

/// A readable reason for a failed TLS handshake.
fn describe_tls_error(e: &io::Error, options: &Options) -> String {
    let Some(tls) = e.get_ref().and_then(|inner| inner.downcast_ref::<rustls::Error>()) else {
        return e.to_string();
    };
    match tls {
        rustls::Error::InvalidCertificate(CertificateError::UnknownIssuer) => {
            "unknown issuer: the certificate is not signed by a trusted root (set ca_file for a private CA)".into()
        }
        rustls::Error::InvalidCertificate(
            CertificateError::NotValidForName | CertificateError::NotValidForNameContext { .. },
        ) => "name mismatch: the certificate is not valid for this server name (see server_name)".into(),
        rustls::Error::InvalidCertificate(CertificateError::Expired | CertificateError::ExpiredContext { .. }) => {
            "certificate expired".into()
        }
        // webpki's CaUsedAsEndEntity arrives as CertificateError::Other; its Debug text is the stable part.
        rustls::Error::InvalidCertificate(c) if format!("{c:?}").contains("CaUsedAsEndEntity") => {
            "the server's certificate is marked as a CA (basicConstraints CA:TRUE, which `openssl req -x509` sets by \
             default), so it cannot identify a server: make it with `-addext basicConstraints=critical,CA:FALSE`, \
             or make a small CA and a server certificate signed by it and give the CA as ca_file"
                .into()
        }
        rustls::Error::AlertReceived(rustls::AlertDescription::ProtocolVersion)
        | rustls::Error::PeerIncompatible(_) => {
            let offered: Vec<&str> = options
                .tls_versions
                .iter()
                .map(|v| match v {
                    TlsVersion::V1_2 => "1.2",
                    TlsVersion::V1_3 => "1.3",
                })
                .collect();
            format!("protocol version: the server does not accept TLS {} ({tls})", offered.join(" or "))
        }
        other => other.to_string(),
    }
}

/// The WebSocket upgrade; also the carriage the server selected.
async fn upgrade<S>(
    target: &Target,
    options: &Options,
    stream: S,
) -> Result<(WebSocketStream<S>, Carriage), ClientError>
where
    S: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin,
{
    use tokio_tungstenite::tungstenite::Error as WsError;
    let scheme = if target.scheme == Scheme::Wss { "wss" } else { "ws" };
    let mut request = format!("{scheme}://{}{}", target.authority(), target.path)
        .into_client_request()
        .map_err(|e| ClientError::InvalidUrl { url: target.url.clone(), reason: e.to_string() })?;
    if options.subprotocol {
        // The highest carriage first (compressed v2, v2, v1): a proxy picks the highest it knows.
        let (v1, v2, zstd) = (
            moonbridge_protocol::ws::SUBPROTOCOL,
            moonbridge_protocol::ws::v2::SUBPROTOCOL_V2,
            moonbridge_protocol::ws::compress::SUBPROTOCOL_V2_ZSTD,
        );
        let offer = match (options.resume, options.compress) {
            (true, true) => format!("{zstd}, {v2}, {v1}"),
            (true, false) => format!("{v2}, {v1}"),
            (false, _) => v1.to_string(),
        };
        let protocol = offer.parse().map_err(|_| ClientError::Upgrade("bad subprotocol header".into()))?;
        request.headers_mut().insert("Sec-WebSocket-Protocol", protocol);
        if options.resume {
            // Carriage v2 clients of this library follow a draining proxy's `move` (docs/carriage.md).
            request.headers_mut().insert(
                moonbridge_protocol::ws::v2::MOVE_HEADER,
                tokio_tungstenite::tungstenite::http::HeaderValue::from_static("1"),
            );
            // And acknowledge often enough to be paced (docs/carriage.md, "Pacing").
            request.headers_mut().insert(
                moonbridge_protocol::ws::v2::PACE_HEADER,
                tokio_tungstenite::tungstenite::http::HeaderValue::from_static("1"),
            );
        }
    }
    match tokio_tungstenite::client_async_with_config(request, stream, Some(ws_config())).await {
        Ok((ws, response)) => {
            let selected = response.headers().get("Sec-WebSocket-Protocol").and_then(|v| v.to_str().ok());
            let carriage = match selected.map(str::trim) {
                Some(p) if p == moonbridge_protocol::ws::compress::SUBPROTOCOL_V2_ZSTD && options.compress => {
                    Carriage::V2Zstd
                }
                Some(p) if p == moonbridge_protocol::ws::v2::SUBPROTOCOL_V2 => Carriage::V2,
                _ => Carriage::V1,
            };
            Ok((ws, carriage))
        }
        Err(WsError::Http(resp)) => Err(ClientError::UpgradeRefused { status: resp.status().as_u16() }),
        Err(e) => Err(ClientError::Upgrade(e.to_string())),
    }
}
