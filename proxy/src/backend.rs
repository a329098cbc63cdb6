//! Backends: the 1.7.10 servers behind the proxy, and connecting to one (TCP with TCP_NODELAY, then the PROXY
//! v2 header first when the backend uses `proxy-protocol` forwarding).

use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::config::{BackendSettings, Forwarding};
use crate::proxy_header::{v2_header, ProxyHeaderError};

/// A backend as the sessions see it.
#[derive(Clone, Debug)]
pub(crate) struct Backend {
    pub(crate) name: String,
    pub(crate) address: String,
    pub(crate) forwarding: Forwarding,
    /// Sent as the `bungeeguard-token` property with `bungeecord` forwarding.
    pub(crate) forwarding_secret: Option<String>,
}

impl From<&BackendSettings> for Backend {
    fn from(b: &BackendSettings) -> Self {
        Self {
            name: b.name.clone(),
            address: b.address.clone(),
            forwarding: b.forwarding,
            forwarding_secret: b.forwarding_secret.clone(),
        }
    }
}

/// Why a backend could not be reached.
#[derive(Debug, thiserror::Error)]
pub(crate) enum BackendError {
    #[error("connect to {address} failed: {source}")]
    Connect { address: String, source: io::Error },
    #[error("connect to {address} timed out after {secs}s")]
    Timeout { address: String, secs: u64 },
    #[error("backend {address} vanished: {source}")]
    Vanished { address: String, source: io::Error },
    #[error("PROXY header for {address}: {source}")]
    ProxyHeader { address: String, source: ProxyHeaderError },
    #[error("write to {address} failed: {source}")]
    Write { address: String, source: io::Error },
}

impl Backend {
    /// Connects within `timeout`, with TCP_NODELAY, and sends the PROXY v2 header naming `client` first when
    /// the backend uses `proxy-protocol` forwarding.
    pub(crate) async fn connect(&self, client: SocketAddr, timeout: Duration) -> Result<TcpStream, BackendError> {
        let address = || self.address.clone();
        let mut s = match tokio::time::timeout(timeout, TcpStream::connect(&self.address)).await {
            Ok(Ok(s)) => s,
            Ok(Err(source)) => return Err(BackendError::Connect { address: address(), source }),
            Err(_) => return Err(BackendError::Timeout { address: address(), secs: timeout.as_secs() }),
        };
        let _ = s.set_nodelay(true);
        if self.forwarding == Forwarding::ProxyProtocol {
            let destination = s.peer_addr().map_err(|source| BackendError::Vanished { address: address(), source })?;
            let header = v2_header(client, destination)
                .map_err(|source| BackendError::ProxyHeader { address: address(), source })?;
            s.write_all(&header).await.map_err(|source| BackendError::Write { address: address(), source })?;
        }
        Ok(s)
    }
}
