//! TLS for `wss` listeners: rustls with the aws-lc-rs provider, TLS 1.2 and 1.3 only, ECDHE key exchange with
//! AES-GCM or ChaCha20-Poly1305 only, ALPN `http/1.1`, and a certificate that is reloaded when its files
//! change (origin certificates rotate) — a bad new file keeps the old certificate and logs why.

use std::path::{Path, PathBuf};
use std::sync::{Arc, RwLock};
use std::time::{Duration, SystemTime};

use prometheus::IntCounter;
use rustls::crypto::aws_lc_rs::{self, cipher_suite};
use rustls::crypto::CryptoProvider;
use rustls::pki_types::pem::PemObject;
use rustls::pki_types::{CertificateDer, PrivateKeyDer};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use rustls::ServerConfig;
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use crate::metrics::Metrics;

/// How often certificate and key files are checked for changes.
pub(crate) const RELOAD_CHECK_INTERVAL: Duration = Duration::from_secs(10);

/// The TLS library and provider, as shown in the startup line.
pub(crate) const TLS_LIBRARY: &str = "rustls/aws-lc-rs";
/// The protocol versions on, as shown in the startup line.
pub(crate) const TLS_VERSIONS: &str = "1.2,1.3";

/// Why a certificate or key could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TlsError {
    /// The certificate file could not be read or holds no PEM certificate.
    #[error("certificate {path}: {reason}")]
    Certificate {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The key file could not be read or holds no usable PEM private key.
    #[error("private key {path}: {reason}")]
    Key {
        /// The file.
        path: PathBuf,
        /// What is wrong.
        reason: String,
    },
    /// The key does not belong to the certificate, or rustls refused the pair.
    #[error("certificate {cert} and key {key} do not form a usable pair: {reason}")]
    Pair {
        /// The certificate file.
        cert: PathBuf,
        /// The key file.
        key: PathBuf,
        /// rustls's reason.
        reason: String,
    },
}

/// The crypto provider: aws-lc-rs restricted to ECDHE with AEAD suites (TLS 1.3 suites are all AEAD).
pub(crate) fn provider() -> CryptoProvider {
    CryptoProvider {
        cipher_suites: vec![
            cipher_suite::TLS13_AES_128_GCM_SHA256,
            cipher_suite::TLS13_AES_256_GCM_SHA384,
            cipher_suite::TLS13_CHACHA20_POLY1305_SHA256,
            cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_128_GCM_SHA256,
            cipher_suite::TLS_ECDHE_ECDSA_WITH_AES_256_GCM_SHA384,
            cipher_suite::TLS_ECDHE_ECDSA_WITH_CHACHA20_POLY1305_SHA256,
            cipher_suite::TLS_ECDHE_RSA_WITH_AES_128_GCM_SHA256,
            cipher_suite::TLS_ECDHE_RSA_WITH_AES_256_GCM_SHA384,
            cipher_suite::TLS_ECDHE_RSA_WITH_CHACHA20_POLY1305_SHA256,
        ],
        ..aws_lc_rs::default_provider()
    }
}

/// Loads a PEM chain and key and checks that they belong together.
///
/// # Errors
/// [`TlsError`] naming the file and the reason.
pub fn load_certified_key(cert: &Path, key: &Path) -> Result<CertifiedKey, TlsError> {
    let chain: Vec<CertificateDer<'static>> = CertificateDer::pem_file_iter(cert)
        .map_err(|e| TlsError::Certificate { path: cert.into(), reason: e.to_string() })?
        .collect::<Result<_, _>>()
        .map_err(|e| TlsError::Certificate { path: cert.into(), reason: e.to_string() })?;
    if chain.is_empty() {
        return Err(TlsError::Certificate { path: cert.into(), reason: "no PEM CERTIFICATE block".into() });
    }
    let key_der = PrivateKeyDer::from_pem_file(key).map_err(|e| TlsError::Key {
        path: key.into(),
        reason: match e {
            rustls::pki_types::pem::Error::NoItemsFound => no_key_reason(key),
            other => other.to_string(),
        },
    })?;
    CertifiedKey::from_der(chain, key_der, &provider()).map_err(|e| TlsError::Pair {
        cert: cert.into(),
        key: key.into(),
        reason: e.to_string(),
    })
}

/// Why a PEM file holds no usable private key, in words an operator can act on.
fn no_key_reason(key: &Path) -> String {
    let text = std::fs::read_to_string(key).unwrap_or_default();
    if text.contains("-----BEGIN ENCRYPTED PRIVATE KEY-----") {
        "the key is encrypted (a passphrase-protected PKCS#8 key); write it unencrypted, for example with \
         `openssl pkcs8 -in key.pem -out key-plain.pem`, and keep that file readable only by the proxy's user"
            .into()
    } else if text.contains("-----BEGIN CERTIFICATE-----") {
        "the file holds a certificate, not a private key (tls_key and tls_cert swapped?)".into()
    } else {
        "no PEM private key block (PKCS#1, PKCS#8 or SEC1)".into()
    }
}

/// Modification time and length of a file, to notice replacements.
type Stamp = Option<(SystemTime, u64)>;

/// The stamp of `path` now.
fn stamp(path: &Path) -> Stamp {
    let m = std::fs::metadata(path).ok()?;
    Some((m.modified().ok()?, m.len()))
}

/// Serves the current certificate and swaps in a new one when its files change.
#[derive(Debug)]
pub(crate) struct ReloadingCert {
    cert_path: PathBuf,
    key_path: PathBuf,
    current: RwLock<Arc<CertifiedKey>>,
    stamps: RwLock<(Stamp, Stamp)>,
    /// `moonbridge_tls_certificate_reloads_total{result="ok"}`.
    reloads: IntCounter,
    /// `moonbridge_tls_certificate_reloads_total{result="kept_previous"}`.
    reload_failures: IntCounter,
}

impl ReloadingCert {
    fn load(cert_path: &Path, key_path: &Path, metrics: &Metrics) -> Result<Self, TlsError> {
        let stamps = (stamp(cert_path), stamp(key_path));
        let key = load_certified_key(cert_path, key_path)?;
        Ok(Self {
            cert_path: cert_path.into(),
            key_path: key_path.into(),
            current: RwLock::new(Arc::new(key)),
            stamps: RwLock::new(stamps),
            reloads: metrics.tls_reloads_ok.clone(),
            reload_failures: metrics.tls_reloads_kept.clone(),
        })
    }

    /// Reloads when either file changed since the last attempt.
    fn check(&self) {
        let now = (stamp(&self.cert_path), stamp(&self.key_path));
        {
            let last = self.stamps.read().unwrap_or_else(std::sync::PoisonError::into_inner);
            if *last == now {
                return;
            }
        }
        *self.stamps.write().unwrap_or_else(std::sync::PoisonError::into_inner) = now;
        match load_certified_key(&self.cert_path, &self.key_path) {
            Ok(key) => {
                *self.current.write().unwrap_or_else(std::sync::PoisonError::into_inner) = Arc::new(key);
                self.reloads.inc();
                info!("reloaded TLS certificate {}", self.cert_path.display());
            }
            Err(e) => {
                self.reload_failures.inc();
                warn!("TLS certificate not reloaded, keeping the previous one: {e}");
            }
        }
    }
}

impl ResolvesServerCert for ReloadingCert {
    fn resolve(&self, _hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        Some(Arc::clone(&self.current.read().unwrap_or_else(std::sync::PoisonError::into_inner)))
    }
}

/// A `wss` listener's TLS acceptor and its certificate.
#[derive(Clone)]
pub(crate) struct Tls {
    pub(crate) acceptor: tokio_rustls::TlsAcceptor,
    pub(crate) cert: Arc<ReloadingCert>,
}

impl Tls {
    /// Builds the server configuration from the listener's PEM files (reloads are counted in `metrics`).
    pub(crate) fn new(cert: &Path, key: &Path, metrics: &Metrics) -> Result<Self, TlsError> {
        let resolver = Arc::new(ReloadingCert::load(cert, key, metrics)?);
        let mut config = ServerConfig::builder_with_provider(Arc::new(provider()))
            .with_protocol_versions(&[&rustls::version::TLS12, &rustls::version::TLS13])
            .map_err(|e| TlsError::Pair { cert: cert.into(), key: key.into(), reason: e.to_string() })?
            .with_no_client_auth()
            .with_cert_resolver(Arc::clone(&resolver) as Arc<dyn ResolvesServerCert>);
        config.alpn_protocols = vec![b"http/1.1".to_vec()];
        Ok(Self { acceptor: tokio_rustls::TlsAcceptor::from(Arc::new(config)), cert: resolver })
    }

    /// Checks the files every [`RELOAD_CHECK_INTERVAL`] until `stop`.
    pub(crate) async fn watch(cert: Arc<ReloadingCert>, stop: CancellationToken) {
        let mut tick = tokio::time::interval(RELOAD_CHECK_INTERVAL);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = tick.tick() => {
                    let c = Arc::clone(&cert);
                    // File reads and parsing stay off the I/O threads.
                    let _ = tokio::task::spawn_blocking(move || c.check()).await;
                }
                () = stop.cancelled() => return,
            }
        }
    }
}
