//! How an instance reaches Redis ([`Dial`]): the host of `redis_url`, or through Redis Sentinel
//! (`redis_sentinels`, `redis_master_name`) the master the sentinels name at each connect, so that after a
//! failover the next renewal reaches the new master (docs/network.md, "Redis Sentinel"). And what a failed
//! round trip's error says went wrong ([`cause_of`]).

use redis::sentinel::{Sentinel, SentinelNodeConnectionInfo};
use redis::{ConnectionInfo, IntoConnectionInfo, RedisResult};

use super::NetworkError;
use crate::config::NetworkConfig;
use crate::labels::RedisCause;

/// How Redis is reached.
pub(super) enum Dial {
    /// `redis_url` itself.
    Direct(redis::Client),
    /// The master named `master` at the first of `sentinels` that answers, with `node`'s credentials, database
    /// and TLS mode (from `redis_url`).
    Sentinels { sentinels: Vec<ConnectionInfo>, master: String, node: SentinelNodeConnectionInfo },
}

impl Dial {
    /// How `config` reaches Redis.
    ///
    /// # Errors
    /// [`NetworkError::Redis`] for a URL or sentinel address the client refuses; [`NetworkError::RedisTlsFile`]
    /// for a file that cannot be read.
    pub(super) fn new(config: &NetworkConfig) -> Result<Self, NetworkError> {
        let Some(master) = config.redis_master_name.clone().filter(|_| !config.redis_sentinels.is_empty()) else {
            return client(config).map(Self::Direct);
        };
        let refused = |e: redis::RedisError| NetworkError::Redis(e.to_string());
        let url = config.redis_url.as_str().into_connection_info().map_err(refused)?;
        let mut node = SentinelNodeConnectionInfo::default().set_redis_connection_info(url.redis_settings().clone());
        if config.redis_url.starts_with("rediss://") {
            node = node.set_tls_mode(redis::TlsMode::Secure);
        }
        let sentinels = config
            .redis_sentinels
            .iter()
            .map(|s| format!("redis://{s}").as_str().into_connection_info())
            .collect::<RedisResult<Vec<_>>>()
            .map_err(refused)?;
        Ok(Self::Sentinels { sentinels, master, node })
    }

    /// A client of the Redis to use now: the one of `redis_url`, or the master the sentinels name (one that
    /// says it is a master).
    ///
    /// # Errors
    /// No sentinel answered, none knows the master, or the master it names does not answer as one.
    pub(super) async fn client(&self) -> RedisResult<redis::Client> {
        match self {
            Self::Direct(client) => Ok(client.clone()),
            Self::Sentinels { sentinels, master, node } => {
                let mut sentinel = Sentinel::build(sentinels.clone())?;
                sentinel.async_master_for(master, Some(node)).await
            }
        }
    }
}

/// The Redis client of `config`: with `redis_ca_file` and the client certificate when given (`rediss://`).
///
/// # Errors
/// [`NetworkError::Redis`] for a URL the client refuses; [`NetworkError::RedisTlsFile`] for a file that cannot
/// be read.
fn client(config: &NetworkConfig) -> Result<redis::Client, NetworkError> {
    let read = |p: &Option<std::path::PathBuf>| {
        p.as_ref()
            .map(|p| std::fs::read(p).map_err(|source| NetworkError::RedisTlsFile { path: p.clone(), source }))
            .transpose()
    };
    let root_cert = read(&config.redis_ca_file)?;
    let client_tls = match (read(&config.redis_client_cert)?, read(&config.redis_client_key)?) {
        (Some(client_cert), Some(client_key)) => Some(redis::ClientTlsConfig { client_cert, client_key }),
        _ => None,
    };
    let url = config.redis_url.as_str();
    let built = if root_cert.is_none() && client_tls.is_none() {
        redis::Client::open(url)
    } else {
        redis::Client::build_with_tls(url, redis::TlsCertificates { client_tls, root_cert })
    };
    built.map_err(|e| NetworkError::Redis(e.to_string()))
}

/// What a failed renewal's error says went wrong (`moonbridge_network_redis_errors_total{cause}`).
pub(super) fn cause_of(e: &redis::RedisError) -> RedisCause {
    match e.code() {
        Some("NOAUTH" | "WRONGPASS") => return RedisCause::Auth,
        Some("OOM") => return RedisCause::OutOfMemory,
        Some("READONLY") => return RedisCause::ReadOnly,
        Some("NOPERM") => return RedisCause::NoPermission,
        _ => {}
    }
    let text = e.to_string().to_ascii_lowercase();
    if e.kind() == redis::ErrorKind::AuthenticationFailed || text.contains("wrongpass") || text.contains("noauth") {
        RedisCause::Auth
    } else if e.is_timeout() {
        RedisCause::Timeout
    } else if e.is_connection_refusal() && !text.contains("certificate") && !text.contains("tls") {
        RedisCause::ConnectionRefused
    } else if text.contains("certificate") || text.contains("tls") || text.contains("handshake") {
        RedisCause::Tls
    } else if e.is_io_error() || e.is_connection_dropped() {
        RedisCause::Io
    } else {
        RedisCause::Other
    }
}
