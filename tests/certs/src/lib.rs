//! Certificates for the tests and the benchmark: a throwaway CA and leaf certificates signed by it, made with
//! rcgen (no `openssl` command line), written as PEM files the proxy loads (`tls_cert`, `tls_key`) and
//! clients trust (`ca_file`).
//!
//! Every certificate is valid from one day ago for two days, so clock skew between the processes of a test
//! does not matter.
//!
//! Also [`TestDir`], the scratch directory tests write their files into: removed when dropped (also when the
//! test fails and unwinds), unless `MOONBRIDGE_KEEP_TEST_FILES` is set; and [`process`]: a free port for a
//! child, and a spawned binary whose stderr lines are read on a thread ([`ChildLog`]). The one place for the
//! helpers every test crate and the benchmark share.

pub mod process;

pub use process::{free_port, ChildLog};

use std::fmt;
use std::io;
use std::net::IpAddr;
use std::path::{Path, PathBuf};

use rcgen::{
    BasicConstraints, CertificateParams, DnType, IsCa, Issuer, KeyPair, KeyUsagePurpose, SanType,
    PKCS_ECDSA_P256_SHA256, PKCS_RSA_SHA256,
};

/// The key algorithm of the CA and its leaves.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum KeyType {
    /// ECDSA P-256 with SHA-256.
    Ec,
    /// RSA 2048 bits with SHA-256 (PKCS#1 v1.5 signatures).
    Rsa,
}

/// A subject alternative name of a leaf.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum San {
    /// A DNS name, such as `localhost`.
    Dns(String),
    /// An IP address, such as `127.0.0.1` or `::1`.
    Ip(IpAddr),
}

/// Why a certificate could not be made or written.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum CertError {
    /// rcgen refused the parameters or failed to sign.
    #[error("cannot generate a certificate: {0}")]
    Generate(#[from] rcgen::Error),
    /// Writing a PEM file failed.
    #[error("cannot write {}: {source}", path.display())]
    Write {
        /// The file.
        path: PathBuf,
        /// The I/O error.
        source: io::Error,
    },
}

/// A test CA and a leaf for `localhost`, `127.0.0.1` and `::1` signed by it, in a fresh directory.
/// `cert` is the chain (leaf, then CA) a server loads; `key` its private key (PKCS#8 PEM); `ca` is what clients
/// trust.
pub struct TestCert {
    /// The directory of the files.
    pub dir: PathBuf,
    /// The leaf and CA certificates, PEM.
    pub cert: PathBuf,
    /// The leaf's private key, PKCS#8 PEM.
    pub key: PathBuf,
    /// The CA certificate, PEM.
    pub ca: PathBuf,
    ca_pem: String,
    issuer: Issuer<'static, KeyPair>,
    key_type: KeyType,
    /// The directory, when [`TestCert::generate`] made it (removed on drop).
    _owned: Option<TestDir>,
}

impl fmt::Debug for TestCert {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("TestCert").field("dir", &self.dir).field("key_type", &self.key_type).finish_non_exhaustive()
    }
}

/// A fresh directory under the system's temporary directory, named after a prefix and this process, removed
/// with everything in it when dropped. Set `MOONBRIDGE_KEEP_TEST_FILES=1` to keep it for a post-mortem.
#[derive(Debug)]
pub struct TestDir(PathBuf);

impl TestDir {
    /// Creates `<temp>/<prefix>-<pid>-<n>`, `n` counting the directories this process made, so two tests
    /// that pick the same prefix never share (or delete) each other's files.
    ///
    /// # Errors
    /// [`CertError::Write`] when it cannot be created.
    pub fn new(prefix: &str) -> Result<Self, CertError> {
        static NEXT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
        let n = NEXT.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        let dir = std::env::temp_dir().join(format!("{prefix}-{}-{n}", std::process::id()));
        let _ = std::fs::remove_dir_all(&dir); // left by a crashed process that had this pid
        std::fs::create_dir_all(&dir).map_err(|e| CertError::Write { path: dir.clone(), source: e })?;
        Ok(Self(dir))
    }

    /// The directory.
    pub fn path(&self) -> &Path {
        &self.0
    }

    /// A path inside the directory.
    pub fn join(&self, name: impl AsRef<Path>) -> PathBuf {
        self.0.join(name)
    }
}

impl Drop for TestDir {
    fn drop(&mut self) {
        if std::env::var_os("MOONBRIDGE_KEEP_TEST_FILES").is_none() {
            let _ = std::fs::remove_dir_all(&self.0);
        }
    }
}

/// The names every default leaf is valid for.
pub fn local_names() -> Vec<San> {
    vec![
        San::Dns("localhost".into()),
        San::Ip(IpAddr::from([127, 0, 0, 1])),
        San::Ip(IpAddr::from(std::net::Ipv6Addr::LOCALHOST)),
    ]
}

fn new_key(key_type: KeyType) -> Result<KeyPair, rcgen::Error> {
    match key_type {
        KeyType::Ec => KeyPair::generate_for(&PKCS_ECDSA_P256_SHA256),
        KeyType::Rsa => KeyPair::generate_rsa_for(&PKCS_RSA_SHA256, rcgen::RsaKeySize::_2048),
    }
}

fn validity(params: &mut CertificateParams) {
    let now = std::time::SystemTime::now();
    let day = std::time::Duration::from_secs(86_400);
    params.not_before = (now - day).into();
    params.not_after = (now + 2 * day).into();
}

fn write(path: &Path, text: &str) -> Result<(), CertError> {
    std::fs::write(path, text).map_err(|e| CertError::Write { path: path.to_owned(), source: e })
}

impl TestCert {
    /// Makes a CA and a leaf (common name `name`, valid for [`local_names`]) in a fresh directory under the
    /// system's temporary directory, named after `name` and this process.
    ///
    /// # Errors
    /// [`CertError`] when generating or writing fails.
    /// The directory is removed when the value is dropped.
    pub fn generate(name: &str, key_type: KeyType) -> Result<Self, CertError> {
        let dir = TestDir::new(&format!("moonbridge-cert-{name}"))?;
        let mut cert = Self::generate_in(dir.path().to_owned(), name, key_type)?;
        cert._owned = Some(dir);
        Ok(cert)
    }

    /// Like [`TestCert::generate`], in `dir` (which must exist; the caller removes it).
    ///
    /// # Errors
    /// [`CertError`] when generating or writing fails.
    pub fn generate_in(dir: PathBuf, name: &str, key_type: KeyType) -> Result<Self, CertError> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, "MoonBridge Test CA");
        params.is_ca = IsCa::Ca(BasicConstraints::Unconstrained);
        params.key_usages = vec![KeyUsagePurpose::KeyCertSign, KeyUsagePurpose::DigitalSignature];
        validity(&mut params);
        let ca_key = new_key(key_type)?;
        let ca_pem = params.self_signed(&ca_key)?.pem();
        let t = Self {
            cert: dir.join("fullchain.pem"),
            key: dir.join("privkey.pem"),
            ca: dir.join("ca.pem"),
            dir,
            ca_pem,
            issuer: Issuer::new(params, ca_key),
            key_type,
            _owned: None,
        };
        write(&t.ca, &t.ca_pem)?;
        t.issue_for(&t.cert, &t.key, name, &local_names())?;
        Ok(t)
    }

    /// Issues a new leaf (common name `cn`) from this CA, valid for [`local_names`], into `cert` (leaf + CA
    /// chain) and `key`.
    ///
    /// # Errors
    /// [`CertError`] when generating or writing fails.
    pub fn issue(&self, cert: &Path, key: &Path, cn: &str) -> Result<(), CertError> {
        self.issue_for(cert, key, cn, &local_names())
    }

    /// Issues a new leaf (common name `cn`) valid for exactly `sans`.
    ///
    /// # Errors
    /// [`CertError`] when generating or writing fails.
    pub fn issue_for(&self, cert: &Path, key: &Path, cn: &str, sans: &[San]) -> Result<(), CertError> {
        let mut params = CertificateParams::default();
        params.distinguished_name.push(DnType::CommonName, cn);
        params.is_ca = IsCa::ExplicitNoCa;
        params.subject_alt_names = sans
            .iter()
            .map(|s| match s {
                San::Dns(name) => Ok(SanType::DnsName(name.clone().try_into()?)),
                San::Ip(ip) => Ok(SanType::IpAddress(*ip)),
            })
            .collect::<Result<_, rcgen::Error>>()?;
        validity(&mut params);
        let leaf_key = new_key(self.key_type)?;
        let leaf = params.signed_by(&leaf_key, &self.issuer)?;
        write(cert, &format!("{}{}", leaf.pem(), self.ca_pem))?;
        write(key, &leaf_key.serialize_pem())
    }
}

/// Writes a self-signed certificate for [`local_names`] (ECDSA P-256, common name `cn`) to `cert` and its key to
/// `key`, the kind people make with `openssl req -x509`. With `ca` it is marked as a CA (basicConstraints
/// CA:TRUE, what that command does by default); without, as an end entity (CA:FALSE).
///
/// # Errors
/// [`CertError`] when generating or writing fails.
pub fn self_signed(cert: &Path, key: &Path, cn: &str, ca: bool) -> Result<(), CertError> {
    let mut params = CertificateParams::default();
    params.distinguished_name.push(DnType::CommonName, cn);
    params.is_ca = if ca { IsCa::Ca(BasicConstraints::Unconstrained) } else { IsCa::ExplicitNoCa };
    params.subject_alt_names = local_names()
        .into_iter()
        .map(|s| match s {
            San::Dns(name) => Ok(SanType::DnsName(name.try_into()?)),
            San::Ip(ip) => Ok(SanType::IpAddress(ip)),
        })
        .collect::<Result<_, rcgen::Error>>()?;
    validity(&mut params);
    let k = new_key(KeyType::Ec)?;
    let c = params.self_signed(&k)?;
    write(cert, &c.pem())?;
    write(key, &k.serialize_pem())
}
