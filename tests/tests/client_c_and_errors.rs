//! The C ABI from a real C program compiled with `cc` against the committed header, and every client error
//! kind produced by a real condition.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

use moonbridge_client::error::{MB_ERR_CLOSED, MB_ERR_CONNECT, MB_ERR_HANDSHAKE, MB_ERR_INVALID_ARGUMENT, MB_ERR_TLS};
use moonbridge_client::{ClientError, Connection, Options};
use moonbridge_proxy::config::Transport;
use testbed::mc::send_login;
use testbed::{login_success, self_signed, KeyType, Proxy, RawBackend, RawBehaviour, TestCert, TestDir, STEP};
use tokio::net::TcpListener;

/// `target/<profile>`, where cargo put the test binary and the cdylib.
fn target_dir() -> PathBuf {
    let exe = std::env::current_exe().unwrap();
    exe.parent().and_then(|deps| deps.parent()).unwrap().to_path_buf()
}

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::time::timeout(Duration::from_secs(60), tokio::task::spawn_blocking(f)).await.expect("in time").unwrap()
}

fn opts(json: &str) -> Options {
    Options::from_json(Some(json)).unwrap()
}

async fn connect_err(url: String, options: Options) -> ClientError {
    blocking(move || Connection::connect(&url, options).expect_err("connect must fail")).await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_c_program_uses_the_header_and_the_library() {
    let lib_dir = target_dir();
    assert!(
        lib_dir.join("libmoonbridge_client.so").is_file(),
        "libmoonbridge_client.so is not in {}: run `cargo build -p moonbridge-client` first (scripts/test-all.sh does)",
        lib_dir.display()
    );
    let root = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let exe = lib_dir.join("moonbridge-c-smoke");
    let out = std::process::Command::new("cc")
        .args(["-std=c11", "-Wall", "-Wextra", "-Werror"])
        .arg("-I")
        .arg(root.join("client-native/include"))
        .arg(root.join("tests/c/smoke.c"))
        .arg("-L")
        .arg(&lib_dir)
        .arg("-lmoonbridge_client")
        .arg(format!("-Wl,-rpath,{}", lib_dir.display()))
        .arg("-o")
        .arg(&exe)
        .output()
        .expect("cc is installed");
    assert!(out.status.success(), "cc failed:\n{}", String::from_utf8_lossy(&out.stderr));

    let backend = RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply: login_success("Steve") }).await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\n[[backend]]\nname = \"b\"\naddress = \"{}\"\n",
        backend.addr
    ))
    .await;
    let url = format!("ws://127.0.0.1:{}/mc", proxy.addr(Transport::Ws).port());
    let run = tokio::process::Command::new(&exe).arg(&url).output();
    let out = tokio::time::timeout(STEP, run).await.unwrap().unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert_eq!(out.status.code(), Some(0), "stdout: {stdout}\nstderr: {}", String::from_utf8_lossy(&out.stderr));
    assert!(stdout.contains("login ok: 45 bytes"), "{stdout}");
    assert_eq!(backend.wait_received(0, 34, STEP).await.len(), 34);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_url_and_options() {
    let e = connect_err("mc.example.com:25565".into(), Options::default()).await;
    assert!(matches!(e, ClientError::InvalidUrl { .. }), "{e}");
    assert_eq!(e.code(), MB_ERR_INVALID_ARGUMENT);
    let e = Options::from_json(Some(r#"{"ca_file":1}"#)).unwrap_err();
    assert_eq!(e.code(), MB_ERR_INVALID_ARGUMENT);
    let e = connect_err("wss://localhost:1/mc".into(), opts(r#"{"ca_file":"/nonexistent/ca.pem"}"#)).await;
    assert!(matches!(e, ClientError::InvalidOptions(ref m) if m.contains("ca_file")), "{e}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dns_failure() {
    let e = connect_err("ws://moonbridge-test.invalid/mc".into(), opts(r#"{"connect_timeout_ms":30000}"#)).await;
    assert!(matches!(e, ClientError::Dns { ref host, .. } if host == "moonbridge-test.invalid"), "{e}");
    assert_eq!(e.code(), MB_ERR_CONNECT);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn refused_and_timed_out() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let e = connect_err(format!("tcp://{dead}"), Options::default()).await;
    assert!(matches!(e, ClientError::Refused { .. }), "{e}");
    assert_eq!(e.code(), MB_ERR_CONNECT);

    // A server that accepts and never answers the WebSocket upgrade.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = silent.local_addr().unwrap();
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let e = connect_err(format!("ws://{addr}/mc"), opts(r#"{"connect_timeout_ms":300}"#)).await;
    assert!(matches!(e, ClientError::ConnectTimeout { stage: "WebSocket upgrade", ms: 300, .. }), "{e}");
    assert_eq!(e.code(), MB_ERR_CONNECT);
    hold.abort();
}

async fn wss_proxy(cert: &TestCert) -> Proxy {
    wss_proxy_files(&cert.cert, &cert.key).await
}

async fn wss_proxy_files(cert: &std::path::Path, key: &std::path::Path) -> Proxy {
    let backend = RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply: login_success("Steve") }).await;
    let p = Proxy::start(&format!(
        "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\
         [[backend]]\nname = \"b\"\naddress = \"{}\"\n",
        cert.display(),
        key.display(),
        backend.addr
    ))
    .await;
    std::mem::forget(backend); // lives as long as the test process
    p
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn tls_failures_name_the_reason() {
    let cert = TestCert::generate("client-tls-errors", KeyType::Ec).unwrap();
    let proxy = wss_proxy(&cert).await;
    let port = proxy.addr(Transport::Wss).port();
    let url = format!("wss://localhost:{port}/mc");

    // Not signed by a trusted root (no ca_file).
    let e = connect_err(url.clone(), Options::default()).await;
    assert!(matches!(e, ClientError::Tls { ref reason, .. } if reason.contains("unknown issuer")), "{e}");
    assert_eq!(e.code(), MB_ERR_TLS);

    // Trusted, but the certificate is not for the requested name.
    let o = opts(&format!(r#"{{"ca_file":{:?},"server_name":"other.example.com"}}"#, cert.ca));
    let e = connect_err(url.clone(), o).await;
    assert!(
        matches!(e, ClientError::Tls { ref reason, ref server_name } if reason.contains("name mismatch") && server_name == "other.example.com"),
        "{e}"
    );

    // The same settings with the right name connect.
    let o = opts(&format!(r#"{{"ca_file":{:?},"server_name":"localhost"}}"#, cert.ca));
    let c = blocking(move || Connection::connect(&url, o)).await.unwrap();
    assert_eq!(c.tls_version(), Some("1.3"));
    blocking(move || c.close()).await;

    // A server that only speaks TLS 1.3, and a client pinned to TLS 1.2.
    let only13 = tls13_only_server(&cert).await;
    let o = opts(&format!(r#"{{"ca_file":{:?},"tls_versions":["1.2"]}}"#, cert.ca));
    let e = connect_err(format!("wss://localhost:{}/mc", only13.port()), o).await;
    assert!(matches!(e, ClientError::Tls { ref reason, .. } if reason.contains("protocol version")), "{e}");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_self_signed_ca_certificate_is_explained_and_the_documented_fix_works() {
    let dir = TestDir::new("moonbridge-self-signed").unwrap();
    // What `openssl req -x509` makes by default: self-signed and marked as a CA.
    let (cert, key) = (dir.join("ca-like.pem"), dir.join("ca-like.key"));
    self_signed(&cert, &key, "localhost", true).unwrap();
    let proxy = wss_proxy_files(&cert, &key).await;
    let url = format!("wss://localhost:{}/mc", proxy.addr(Transport::Wss).port());
    let e = connect_err(url, opts(&format!(r#"{{"ca_file":{cert:?}}}"#))).await;
    assert!(
        matches!(e, ClientError::Tls { ref reason, .. } if reason.contains("marked as a CA") && reason.contains("basicConstraints=critical,CA:FALSE")),
        "{e}"
    );
    proxy.shutdown().await;
    // The fix the message gives (an end-entity certificate, CA:FALSE) connects.
    let (cert, key) = (dir.join("leaf.pem"), dir.join("leaf.key"));
    self_signed(&cert, &key, "localhost", false).unwrap();
    let proxy = wss_proxy_files(&cert, &key).await;
    let url = format!("wss://localhost:{}/mc", proxy.addr(Transport::Wss).port());
    let o = opts(&format!(r#"{{"ca_file":{cert:?}}}"#));
    let c = blocking(move || Connection::connect(&url, o)).await.unwrap();
    blocking(move || c.close()).await;
    proxy.shutdown().await;
}

/// A bare TLS 1.3-only server (rustls) with the test certificate.
async fn tls13_only_server(cert: &TestCert) -> std::net::SocketAddr {
    use rustls::pki_types::pem::PemObject;
    let certs: Vec<_> =
        rustls::pki_types::CertificateDer::pem_file_iter(&cert.cert).unwrap().map(Result::unwrap).collect();
    let key = rustls::pki_types::PrivateKeyDer::from_pem_file(&cert.key).unwrap();
    let config = rustls::ServerConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_protocol_versions(&[&rustls::version::TLS13])
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .unwrap();
    let acceptor = tokio_rustls::TlsAcceptor::from(Arc::new(config));
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let a = acceptor.clone();
            tokio::spawn(async move {
                let _ = a.accept(s).await;
            });
        }
    });
    addr
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn upgrade_refused_with_its_status() {
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\n[[backend]]\nname = \"b\"\naddress = \"{}\"\n",
        backend.addr
    ))
    .await;
    let e = connect_err(format!("ws://127.0.0.1:{}/wrong-path", proxy.addr(Transport::Ws).port()), Options::default())
        .await;
    assert_eq!(e, ClientError::UpgradeRefused { status: 404 });
    assert_eq!(e.code(), MB_ERR_HANDSHAKE);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn closed_by_peer_with_its_close_code() {
    // Backend unreachable: the proxy sends a Login Disconnect, then close 1011.
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\n[[backend]]\nname = \"survival\"\naddress = \"{dead}\"\n"
    ))
    .await;
    let url = format!("ws://127.0.0.1:{}/mc", proxy.addr(Transport::Ws).port());
    let (text, end) = blocking(move || {
        let c = Connection::connect(&url, Options::default()).unwrap();
        send_login(&c, "Steve", true);
        let mut all = Vec::new();
        let mut buf = vec![0u8; 4096];
        let end = loop {
            match c.recv(&mut buf, Some(Duration::from_secs(10))) {
                Ok(0) => panic!("timed out"),
                Ok(n) => all.extend_from_slice(&buf[..n]),
                Err(e) => break e,
            }
        };
        (testbed::login_disconnect_reason(&all), end)
    })
    .await;
    assert_eq!(text.as_deref(), Some("Server survival is unreachable"));
    assert!(matches!(end, ClientError::ClosedByPeer { code: Some(1011), .. }), "{end}");
    assert!(!end.is_orderly_close());
    assert_eq!(end.code(), MB_ERR_CLOSED);
    assert!(end.to_string().contains("1011"), "{end}");
    proxy.shutdown().await;

    // The backend ends the session: close 1000, an orderly close.
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let backend_addr = listener.local_addr().unwrap();
    let (close_tx, close_rx) = tokio::sync::oneshot::channel::<()>();
    tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (mut s, _) = listener.accept().await.unwrap();
        let mut hs = vec![0u8; 34];
        s.read_exact(&mut hs).await.unwrap();
        s.write_all(&login_success("Steve")).await.unwrap();
        let _ = close_rx.await;
        drop(s);
    });
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\n[[backend]]\nname = \"b\"\naddress = \"{backend_addr}\"\n"
    ))
    .await;
    let url = format!("ws://127.0.0.1:{}/mc", proxy.addr(Transport::Ws).port());
    let c = blocking(move || {
        let c = Connection::connect(&url, Options::default()).unwrap();
        send_login(&c, "Steve", true);
        let mut buf = [0u8; 45];
        let mut n = 0;
        while n < 45 {
            n += c.recv(&mut buf[n..], Some(Duration::from_secs(10))).unwrap();
        }
        c
    })
    .await;
    close_tx.send(()).unwrap();
    let end = blocking(move || {
        let mut buf = [0u8; 16];
        loop {
            match c.recv(&mut buf, Some(Duration::from_secs(10))) {
                Ok(0) => panic!("no close"),
                Ok(_) => {}
                Err(e) => return e,
            }
        }
    })
    .await;
    assert!(matches!(end, ClientError::ClosedByPeer { code: Some(1000), .. }), "{end}");
    assert!(end.is_orderly_close(), "{end}");
    proxy.shutdown().await;
}

/// Issue 33: a hostile server that announces a WebSocket frame larger than the carriage allows (3 MiB, and
/// nothing more) is refused from the frame header at once, not noticed as silence three ping intervals later;
/// issue 48: with a Close 1009 (Message Too Big, RFC 6455 §7.4.1), not a dropped socket.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_frame_over_the_carriage_limit_is_refused_from_its_header_with_1009() {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let server = tokio::spawn(async move {
        use tokio::io::{AsyncReadExt, AsyncWriteExt};
        let (s, _) = listener.accept().await.unwrap();
        let mut ws = tokio_tungstenite::accept_async(s).await.unwrap();
        let raw = ws.get_mut();
        // Binary with FIN, unmasked, 64-bit payload length (RFC 6455 §5.2): 3 MiB.
        let mut header = vec![0x82, 127];
        header.extend_from_slice(&(3u64 << 20).to_be_bytes());
        raw.write_all(&header).await.unwrap();
        // The client's answer: a masked Close frame (§5.5.1), its first two payload bytes the code.
        let mut frame = [0u8; 8];
        tokio::time::timeout(Duration::from_secs(5), raw.read_exact(&mut frame))
            .await
            .expect("a frame in time")
            .unwrap();
        assert_eq!(frame[0], 0x88, "a Close frame");
        assert!(frame[1] & 0x80 != 0 && frame[1] & 0x7f >= 2, "masked, with a code");
        u16::from_be_bytes([frame[6] ^ frame[2], frame[7] ^ frame[3]])
    });
    let (end, took) = blocking(move || {
        let options = opts(r#"{"subprotocol":false}"#);
        let c = Connection::connect(&format!("ws://{addr}/mc"), options).unwrap();
        let started = std::time::Instant::now();
        let mut buf = [0u8; 64];
        let end = c.recv(&mut buf, Some(Duration::from_secs(10))).expect_err("the frame is refused");
        (end, started.elapsed())
    })
    .await;
    assert!(matches!(&end, ClientError::Protocol(m) if m.contains("2097154")), "{end}");
    assert!(took < Duration::from_secs(3), "refused after {took:?}");
    assert_eq!(server.await.unwrap(), 1009, "the close code");
}
