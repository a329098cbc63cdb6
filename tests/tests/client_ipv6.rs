//! Case C25 at the client library: IPv6 literals in URLs. The WebSocket upgrade names the host in brackets
//! (`Host: [::1]:port`), a `wss://` URL with an IP literal sends no SNI (RFC 6066 §3 allows only host names
//! there) and the certificate is checked against its IP address SAN.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::sync::{Arc, Mutex};
use std::time::Duration;

use moonbridge_client::{ClientError, Connection, Options};
use rustls::server::{ClientHello, ResolvesServerCert};
use rustls::sign::CertifiedKey;
use testbed::{KeyType, San, TestCert};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::time::timeout(Duration::from_secs(30), tokio::task::spawn_blocking(f)).await.expect("in time").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_upgrade_names_an_ipv6_host_in_brackets() {
    let listener = TcpListener::bind("[::1]:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    let server = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut head = Vec::new();
        let mut b = [0u8; 1];
        while !head.ends_with(b"\r\n\r\n") {
            s.read_exact(&mut b).await.unwrap();
            head.push(b[0]);
        }
        s.write_all(b"HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n").await.unwrap();
        String::from_utf8(head).unwrap()
    });
    let url = format!("ws://[::1]:{port}/mc");
    let e = blocking(move || Connection::connect(&url, Options::default()).expect_err("404")).await;
    assert_eq!(e, ClientError::UpgradeRefused { status: 404 });
    let head = server.await.unwrap();
    let host = head.lines().find_map(|l| l.strip_prefix("Host: ")).unwrap();
    assert_eq!(host, format!("[::1]:{port}"), "{head}");
    assert!(head.starts_with("GET /mc HTTP/1.1\r\n"), "{head}");
}

/// Serves one certificate and records the SNI of every ClientHello.
#[derive(Debug)]
struct Recorder {
    key: Arc<CertifiedKey>,
    sni: Mutex<Vec<Option<String>>>,
}

impl ResolvesServerCert for Recorder {
    fn resolve(&self, hello: ClientHello<'_>) -> Option<Arc<CertifiedKey>> {
        self.sni.lock().unwrap().push(hello.server_name().map(str::to_owned));
        Some(Arc::clone(&self.key))
    }
}

/// A TLS + WebSocket server on `[::1]` with `cert`'s leaf that records SNI and completes the upgrade.
async fn wss_server(cert: &std::path::Path, key: &std::path::Path) -> (u16, Arc<Recorder>) {
    use rustls::pki_types::pem::PemObject;
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let chain: Vec<_> = rustls::pki_types::CertificateDer::pem_file_iter(cert).unwrap().map(Result::unwrap).collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(key).unwrap();
    let certified = Arc::new(CertifiedKey::from_der(chain, key, &provider).unwrap());
    let recorder = Arc::new(Recorder { key: certified, sni: Mutex::new(Vec::new()) });
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_cert_resolver(Arc::clone(&recorder) as Arc<dyn ResolvesServerCert>);
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("[::1]:0").await.unwrap();
    let port = listener.local_addr().unwrap().port();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let a = acceptor.clone();
            tokio::spawn(async move {
                if let Ok(tls) = a.accept(s).await {
                    let _ = tokio_tungstenite::accept_async(tls).await;
                }
            });
        }
    });
    (port, recorder)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_ip_literal_wss_url_sends_no_sni_and_the_ip_san_is_checked() {
    let cert = TestCert::generate("client-ipv6", KeyType::Ec).unwrap();
    let (port, recorder) = wss_server(&cert.cert, &cert.key).await;
    let opts = Options::from_json(Some(&format!(r#"{{"ca_file":{:?},"subprotocol":false}}"#, cert.ca))).unwrap();
    let url = format!("wss://[::1]:{port}/mc");
    let conn = blocking(move || Connection::connect(&url, opts)).await.expect("the IP SAN ::1 matches");
    blocking(move || conn.close()).await;
    assert_eq!(recorder.sni.lock().unwrap().as_slice(), &[None], "no SNI for an IP literal");

    // A certificate without ::1 among its names is refused for that address.
    let (no_ip_cert, no_ip_key) = (cert.dir.join("dns-only.pem"), cert.dir.join("dns-only.key"));
    cert.issue_for(&no_ip_cert, &no_ip_key, "localhost", &[San::Dns("localhost".into())]).unwrap();
    let (port, _) = wss_server(&no_ip_cert, &no_ip_key).await;
    let opts = Options::from_json(Some(&format!(r#"{{"ca_file":{:?},"subprotocol":false}}"#, cert.ca))).unwrap();
    let url = format!("wss://[::1]:{port}/mc");
    let e = blocking(move || Connection::connect(&url, opts).expect_err("no IP SAN")).await;
    assert!(matches!(e, ClientError::Tls { ref reason, .. } if reason.contains("name mismatch")), "{e}");
}
