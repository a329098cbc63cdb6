//! Online mode: the proxy authenticates players with the session server itself (protocol 5 login
//! encryption), then forwards verified identities to backends that run in offline mode.
//!
//! 1. Encryption Request with server id `""`, this process's RSA-1024 public key (X.509 DER) and a 4-byte
//!    random verify token.
//! 2. Encryption Response: both arrays decrypted with PKCS#1 v1.5; the token must match, the shared secret must
//!    be 16 bytes. From here the player's stream is AES-128-CFB8 both ways (key = IV = shared secret).
//! 3. `GET {session_server}/session/minecraft/hasJoined?username=…&serverId=<server hash>`: 200 with the
//!    profile (id, name, signed properties) means verified; 204 means the client did not join.

use std::sync::Arc;
use std::time::Duration;

use moonbridge_protocol::forwarding::Property;
use rsa::pkcs8::EncodePublicKey;
use rsa::{Pkcs1v15Encrypt, RsaPrivateKey};
use serde::Deserialize;
use uuid::Uuid;

/// RSA key size used for the login, in bits (what vanilla servers use).
pub(crate) const RSA_BITS: usize = 1024;
/// Largest session-server answer read, in bytes.
const MAX_PROFILE_BYTES: u64 = 64 * 1024;
/// Most session checks in flight at once. Each holds a blocking thread for up to `session_timeout_seconds`;
/// logins beyond this wait (inside the same timeout) instead of piling threads onto a slow session server.
pub(crate) const MAX_CONCURRENT_CHECKS: usize = 64;

/// Why online mode could not start.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum AuthError {
    /// The RSA key pair could not be made.
    #[error("cannot generate the RSA-{RSA_BITS} key pair: {0}")]
    Key(#[source] rsa::Error),
    /// The public key could not be encoded as X.509 SubjectPublicKeyInfo (DER).
    #[error("cannot encode the RSA public key: {0}")]
    PublicKey(#[source] rsa::pkcs8::spki::Error),
    /// The key generation task did not finish.
    #[error("the RSA key generation task failed: {0}")]
    Task(#[source] tokio::task::JoinError),
}

/// Why a session check failed.
#[derive(Debug, thiserror::Error)]
pub(crate) enum SessionError {
    #[error("session server {0} did not answer within {1}s")]
    Timeout(String, u64),
    #[error("session server unreachable: {0}")]
    Unreachable(String),
    #[error("session server answered HTTP {0}")]
    Status(u16),
    #[error("session server sent an unreadable profile: {0}")]
    BadProfile(String),
}

/// A verified player.
#[derive(Clone, Debug)]
pub(crate) struct Profile {
    pub(crate) id: Uuid,
    pub(crate) name: String,
    pub(crate) properties: Vec<Property>,
}

#[derive(Deserialize)]
struct ProfileJson {
    id: String,
    name: String,
    #[serde(default)]
    properties: Vec<Property>,
}

/// The process-wide online-mode state: key pair and HTTP agent.
pub(crate) struct OnlineAuth {
    key: RsaPrivateKey,
    public_der: Vec<u8>,
    agent: ureq::Agent,
    session_server: String,
    timeout: Duration,
    checks: Arc<tokio::sync::Semaphore>,
}

impl std::fmt::Debug for OnlineAuth {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("OnlineAuth").field("session_server", &self.session_server).finish_non_exhaustive()
    }
}

/// Percent-encodes a query value (RFC 3986 unreserved characters stay).
fn encode_query(value: &str) -> String {
    let mut out = String::with_capacity(value.len());
    for b in value.bytes() {
        if b.is_ascii_alphanumeric() || matches!(b, b'-' | b'.' | b'_' | b'~') {
            out.push(char::from(b));
        } else {
            out.push_str(&format!("%{b:02X}"));
        }
    }
    out
}

impl OnlineAuth {
    /// Generates the RSA-1024 key pair (once per process) and prepares the HTTP agent (rustls with the
    /// aws-lc-rs provider and the webpki roots, no redirects; `http://` URLs work too, for local stand-ins).
    pub(crate) fn new(session_server: &str, timeout: Duration) -> Result<Self, AuthError> {
        let key = RsaPrivateKey::new(&mut rand_core::OsRng, RSA_BITS).map_err(AuthError::Key)?;
        let public_der = key.to_public_key().to_public_key_der().map_err(AuthError::PublicKey)?.as_bytes().to_vec();
        let tls = ureq::tls::TlsConfig::builder()
            .provider(ureq::tls::TlsProvider::Rustls)
            .root_certs(ureq::tls::RootCerts::WebPki)
            .unversioned_rustls_crypto_provider(std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
            .build();
        let config = ureq::Agent::config_builder()
            .timeout_global(Some(timeout))
            .max_redirects(0)
            .http_status_as_error(false)
            .tls_config(tls)
            .user_agent("moonbridge")
            .build();
        Ok(Self {
            key,
            public_der,
            agent: ureq::Agent::new_with_config(config),
            session_server: session_server.trim_end_matches('/').to_string(),
            timeout,
            checks: Arc::new(tokio::sync::Semaphore::new(MAX_CONCURRENT_CHECKS)),
        })
    }

    /// The public key as sent in Encryption Request.
    pub(crate) fn public_key_der(&self) -> &[u8] {
        &self.public_der
    }

    /// Decrypts a PKCS#1 v1.5 block from Encryption Response (with RSA blinding); `None` when it does not
    /// decrypt. Blocking CPU work: call from `spawn_blocking`.
    pub(crate) fn decrypt(&self, ciphertext: &[u8]) -> Option<Vec<u8>> {
        self.key.decrypt_blinded(&mut rand_core::OsRng, Pkcs1v15Encrypt, ciphertext).ok()
    }

    /// Asks the session server about `name` and `server_hash` on the blocking pool, at most
    /// [`MAX_CONCURRENT_CHECKS`] at once; the whole check, waiting for a turn included, is bounded by
    /// `session_timeout_seconds`.
    pub(crate) async fn check(
        self: &Arc<Self>,
        name: &str,
        server_hash: String,
    ) -> Result<Option<Profile>, SessionError> {
        let auth = Arc::clone(self);
        let name = name.to_string();
        let run = async move {
            let permit =
                Arc::clone(&auth.checks).acquire_owned().await.map_err(|e| SessionError::Unreachable(e.to_string()))?;
            // The permit lives as long as the blocking call, even when this future is dropped by the timeout.
            tokio::task::spawn_blocking(move || {
                let r = auth.has_joined(&name, &server_hash);
                drop(permit);
                r
            })
            .await
            .unwrap_or_else(|e| Err(SessionError::Unreachable(format!("session check task: {e}"))))
        };
        match tokio::time::timeout(self.timeout, run).await {
            Ok(r) => r,
            Err(_) => Err(SessionError::Timeout(self.session_server.clone(), self.timeout.as_secs())),
        }
    }

    /// Asks the session server whether `name` joined with `server_hash`. Blocking: call from
    /// `spawn_blocking`.
    pub(crate) fn has_joined(&self, name: &str, server_hash: &str) -> Result<Option<Profile>, SessionError> {
        let url = format!(
            "{}/session/minecraft/hasJoined?username={}&serverId={}",
            self.session_server,
            encode_query(name),
            encode_query(server_hash)
        );
        let response = self.agent.get(&url).call().map_err(|e| match e {
            ureq::Error::Timeout(_) => SessionError::Timeout(self.session_server.clone(), self.timeout.as_secs()),
            other => SessionError::Unreachable(other.to_string()),
        })?;
        match response.status().as_u16() {
            204 => return Ok(None),
            200 => {}
            other => return Err(SessionError::Status(other)),
        }
        let body = response
            .into_body()
            .with_config()
            .limit(MAX_PROFILE_BYTES)
            .read_to_string()
            .map_err(|e| SessionError::BadProfile(e.to_string()))?;
        if body.trim().is_empty() {
            return Ok(None);
        }
        let p: ProfileJson = serde_json::from_str(&body).map_err(|e| SessionError::BadProfile(e.to_string()))?;
        let id = Uuid::try_parse(&p.id).map_err(|e| SessionError::BadProfile(format!("id {:?}: {e}", p.id)))?;
        Ok(Some(Profile { id, name: p.name, properties: p.properties }))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn query_values_are_encoded() {
        assert_eq!(encode_query("Steve_1"), "Steve_1");
        assert_eq!(encode_query("-7c9d5b"), "-7c9d5b");
        assert_eq!(encode_query("a b&c"), "a%20b%26c");
    }

    #[test]
    fn key_pair_round_trips() {
        let auth = OnlineAuth::new("http://127.0.0.1:1", Duration::from_secs(1)).unwrap();
        use rsa::pkcs8::DecodePublicKey;
        let public = rsa::RsaPublicKey::from_public_key_der(auth.public_key_der()).unwrap();
        let ct = public.encrypt(&mut rand_core::OsRng, Pkcs1v15Encrypt, b"0123456789abcdef").unwrap();
        assert_eq!(ct.len(), RSA_BITS / 8);
        assert_eq!(auth.decrypt(&ct).as_deref(), Some(&b"0123456789abcdef"[..]));
        assert_eq!(auth.decrypt(&[0u8; 128]), None);
    }
}
