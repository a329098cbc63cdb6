//! Case C21 and certificate reloading against the `moonbridge` binary's `wss` listener, with the real
//! `openssl s_client` as the TLS peer (certificates from `moonbridge-test-certs`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::Write;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use moonbridge_test_certs::{free_port, ChildLog, KeyType, TestCert, TestDir};

const BIN: &str = env!("CARGO_BIN_EXE_moonbridge");

/// A scratch directory for one test, removed when the test ends (also when it fails).
fn dir(name: &str) -> TestDir {
    TestDir::new(&format!("moonbridge-tls-{name}")).unwrap()
}

/// The binary on a `wss` listener, its stderr lines read on a thread (killed when dropped).
struct Running {
    log: ChildLog,
    port: u16,
}

impl Running {
    fn start(cert: &Path, key: &Path, d: &Path) -> Self {
        Self::start_with_backend(cert, key, d, "127.0.0.1:9")
    }

    fn start_with_backend(cert: &Path, key: &Path, d: &Path, backend: &str) -> Self {
        let port = free_port().unwrap();
        let config = d.join("wss.toml");
        std::fs::write(
            &config,
            format!(
                "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:{port}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\
                 [[backend]]\nname = \"b\"\naddress = \"{backend}\"\n",
                cert.display(),
                key.display()
            ),
        )
        .unwrap();
        let log = ChildLog::spawn(
            Command::new(BIN).arg("--config").arg(&config).env("RUST_LOG", "info").stdout(Stdio::null()),
        )
        .unwrap();
        Self { log, port }
    }

    fn wait_line(&self, needle: &str, within: Duration) -> String {
        self.log
            .wait_line(needle, within)
            .unwrap_or_else(|| panic!("no log line containing {needle:?} within {within:?}"))
    }

    /// Runs `openssl s_client` with `args`; returns (success, combined output).
    fn s_client(&self, args: &[&str]) -> (bool, String) {
        let mut child = Command::new("openssl")
            .args(["s_client", "-connect", &format!("127.0.0.1:{}", self.port), "-servername", "localhost"])
            .args(args)
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        // Close stdin so s_client ends after the handshake.
        child.stdin.take().unwrap().write_all(b"").unwrap();
        let out = child.wait_with_output().unwrap();
        let text = String::from_utf8_lossy(&out.stdout).into_owned() + &String::from_utf8_lossy(&out.stderr);
        (out.status.success() && text.contains("Cipher is ") && !text.contains("Cipher is (NONE)"), text)
    }
}

#[test]
fn c21_tls_versions_and_suites() {
    let d = dir("c21");
    // RSA: the suites below are the ECDHE-RSA ones.
    let certs = TestCert::generate_in(d.path().to_owned(), "localhost", KeyType::Rsa).unwrap();
    let p = Running::start(&certs.cert, &certs.key, d.path());
    let banner = p.wait_line("listening wss", Duration::from_secs(20));
    assert!(banner.contains("tls=rustls/aws-lc-rs versions=1.2,1.3"), "{banner}");

    // TLS 1.2-only client: completes with ECDHE and AES-GCM.
    let (ok, out) = p.s_client(&["-tls1_2"]);
    assert!(ok, "{out}");
    assert!(out.contains("TLSv1.2"), "{out}");
    assert!(out.contains("Cipher is ECDHE-RSA-AES") && out.contains("GCM"), "{out}");
    // ChaCha20 with TLS 1.2 too.
    let (ok, out) = p.s_client(&["-tls1_2", "-cipher", "ECDHE-RSA-CHACHA20-POLY1305"]);
    assert!(ok, "{out}");
    // TLS 1.3, with ALPN http/1.1.
    let (ok, out) = p.s_client(&["-tls1_3", "-alpn", "http/1.1"]);
    assert!(ok, "{out}");
    assert!(out.contains("TLSv1.3") && out.contains("ALPN protocol: http/1.1"), "{out}");

    // No shared suite: finite-field DHE, then ECDHE with CBC. Refused, with a log line naming the reason.
    for cipher in ["DHE-RSA-AES256-GCM-SHA384", "ECDHE-RSA-AES128-SHA"] {
        let (ok, out) = p.s_client(&["-tls1_2", "-cipher", cipher]);
        assert!(!ok, "{cipher} must be refused: {out}");
        let line = p.wait_line("TLS handshake failed", Duration::from_secs(10));
        assert!(line.contains("NoCipherSuitesInCommon") || line.contains("NoKxGroupsInCommon"), "{line}");
    }
    // TLS 1.0 and 1.1 (the client is allowed to offer them with SECLEVEL=0): refused.
    for v in ["-tls1", "-tls1_1"] {
        let (ok, out) = p.s_client(&[v, "-cipher", "DEFAULT@SECLEVEL=0"]);
        assert!(!ok, "{v} must be refused: {out}");
        let line = p.wait_line("TLS handshake failed", Duration::from_secs(10));
        assert!(line.contains("peer is incompatible") || line.contains("peer sent"), "{line}");
    }
}

/// A backend that reads the `login_len` bytes of the handshake and Login Start, answers with Login Success for
/// `Steve`, then echoes every byte.
fn echo_backend(login_len: usize) -> std::net::SocketAddr {
    let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = listener.local_addr().unwrap();
    std::thread::spawn(move || {
        use moonbridge_protocol::packets::{LoginSuccess, Packet};
        use std::io::Read;
        let (mut s, _) = listener.accept().unwrap();
        let mut login = vec![0u8; login_len];
        s.read_exact(&mut login).unwrap();
        let mut buf = [0u8; 4096];
        let uuid = moonbridge_protocol::forwarding::offline_uuid("Steve").to_string();
        s.write_all(&LoginSuccess { uuid, name: "Steve".into() }.to_frame_bytes().unwrap()).unwrap();
        while let Ok(n) = s.read(&mut buf) {
            if n == 0 || s.write_all(&buf[..n]).is_err() {
                break;
            }
        }
    });
    addr
}

fn subject(out: &str) -> &str {
    if out.contains("CN=first") || out.contains("CN = first") {
        "first"
    } else if out.contains("CN=second") || out.contains("CN = second") {
        "second"
    } else {
        "none"
    }
}

#[test]
fn c34_certificate_reload_keeps_a_consistent_pair_and_every_player() {
    let d = dir("reload");
    let certs = TestCert::generate_in(d.path().to_owned(), "first", KeyType::Rsa).unwrap();
    let (cert, key) = (certs.cert.clone(), certs.key.clone());
    let hs = moonbridge_protocol::packets::Handshake {
        protocol_version: 5,
        server_address: "localhost".into(),
        server_port: 25565,
        next_state: moonbridge_protocol::packets::NextState::Login,
    };
    use moonbridge_protocol::packets::Packet;
    let login = [
        hs.to_frame_bytes().unwrap().to_vec(),
        moonbridge_protocol::packets::LoginStart { name: "Steve".into() }.to_frame_bytes().unwrap().to_vec(),
    ]
    .concat();
    let p = Running::start_with_backend(&cert, &key, d.path(), &echo_backend(login.len()).to_string());
    p.wait_line("listening wss", Duration::from_secs(20));
    let (ok, out) = p.s_client(&[]);
    assert!(ok && subject(&out) == "first", "{out}");

    // A player relaying through the listener the whole time (the client library over wss).
    let options = moonbridge_client::Options::from_json(Some(&format!(
        r#"{{"ca_file":{:?},"ping_interval_ms":0}}"#,
        certs.ca.display().to_string()
    )))
    .unwrap();
    let player = moonbridge_client::Connection::connect(&format!("wss://localhost:{}/mc", p.port), options).unwrap();
    player.send(&login).unwrap();
    player.end_tick().unwrap();
    let echo = |tag: u8| {
        player.send(&[0x02, 0x00, tag]).unwrap();
        player.end_tick().unwrap();
        let mut got = Vec::new();
        let deadline = Instant::now() + Duration::from_secs(20);
        while !got.ends_with(&[0x02, 0x00, tag]) {
            assert!(Instant::now() < deadline, "echo {tag} not back: {got:02x?}");
            let mut buf = [0u8; 4096];
            let n = player.recv(&mut buf, Some(Duration::from_millis(200))).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
    };
    echo(1);

    // Only the key replaced (key B of a new pair): not a pair; the previous one stays and the log says so.
    let (cert_b, key_b) = (d.join("cert.b"), d.join("key.b"));
    certs.issue(&cert_b, &key_b, "second").unwrap();
    std::fs::copy(&key_b, d.join("key.tmp")).unwrap();
    std::fs::rename(d.join("key.tmp"), &key).unwrap();
    let line = p.wait_line("TLS certificate not reloaded", Duration::from_secs(30));
    assert!(line.contains("keeping the previous one"), "{line}");
    let (ok, out) = p.s_client(&[]);
    assert!(ok && subject(&out) == "first", "{out}");
    echo(2);

    // Then the certificate: pair B is served.
    std::fs::copy(&cert_b, d.join("cert.tmp")).unwrap();
    std::fs::rename(d.join("cert.tmp"), &cert).unwrap();
    p.wait_line("reloaded TLS certificate", Duration::from_secs(30));
    let (ok, out) = p.s_client(&[]);
    assert!(ok && subject(&out) == "second", "{out}");

    // A truncated certificate file: pair B stays, and the log says why.
    let full = std::fs::read(&cert).unwrap();
    std::fs::write(&cert, &full[..full.len() / 2]).unwrap();
    let line = p.wait_line("TLS certificate not reloaded", Duration::from_secs(30));
    assert!(line.contains("certificate"), "{line}");
    let (ok, out) = p.s_client(&[]);
    assert!(ok && subject(&out) == "second", "{out}");
    // The player never dropped.
    echo(3);
    player.close();
}

/// Runs `openssl` (the real tool that makes each key format, the input of case C33).
fn openssl(args: &[&str], dir: &Path) {
    let out = Command::new("openssl").args(args).current_dir(dir).output().expect("openssl is installed");
    assert!(out.status.success(), "openssl {args:?}: {}", String::from_utf8_lossy(&out.stderr));
}

#[test]
fn c33_key_formats() {
    let d = dir("c33");
    let dp = d.path();
    // An RSA PKCS#1 key, an RSA PKCS#8 key, an EC SEC1 key and an EC PKCS#8 key, each with a certificate.
    openssl(&["genrsa", "-traditional", "-out", "rsa1.key", "2048"], dp);
    openssl(&["genpkey", "-algorithm", "RSA", "-pkeyopt", "rsa_keygen_bits:2048", "-out", "rsa8.key"], dp);
    openssl(&["ecparam", "-name", "prime256v1", "-genkey", "-noout", "-out", "ec1.key"], dp);
    openssl(&["pkcs8", "-topk8", "-nocrypt", "-in", "ec1.key", "-out", "ec8.key"], dp);
    openssl(
        &["pkcs8", "-topk8", "-v2", "aes-256-cbc", "-passout", "pass:secret", "-in", "ec1.key", "-out", "enc.key"],
        dp,
    );
    for k in ["rsa1", "rsa8", "ec1", "ec8"] {
        openssl(
            &[
                "req",
                "-new",
                "-x509",
                "-days",
                "2",
                "-key",
                &format!("{k}.key"),
                "-subj",
                "/CN=localhost",
                "-addext",
                "basicConstraints=critical,CA:FALSE",
                "-addext",
                "subjectAltName=DNS:localhost",
                "-out",
                &format!("{k}.pem"),
            ],
            dp,
        );
    }
    let check = |cert: &str, key: &str| {
        let config = dp.join(format!("{cert}-{key}.toml"));
        std::fs::write(
            &config,
            format!(
                "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\
                 [[backend]]\nname = \"b\"\naddress = \"127.0.0.1:9\"\n",
                dp.join(cert).display(),
                dp.join(key).display()
            ),
        )
        .unwrap();
        Command::new(BIN).arg("--check-config").arg(&config).output().unwrap()
    };
    for k in ["rsa1", "rsa8", "ec1", "ec8"] {
        let out = check(&format!("{k}.pem"), &format!("{k}.key"));
        assert_eq!(out.status.code(), Some(0), "{k}: {}", String::from_utf8_lossy(&out.stderr));
        let p = Running::start(&dp.join(format!("{k}.pem")), &dp.join(format!("{k}.key")), dp);
        p.wait_line("listening wss", Duration::from_secs(20));
        let (ok, text) = p.s_client(&[]);
        assert!(ok, "{k}: {text}");
    }
    // An encrypted key, the certificate given as the key, a key of another pair: refused, naming tls_key.
    for (cert, key, reason) in [
        ("ec1.pem", "enc.key", "encrypted"),
        ("ec1.pem", "ec1.pem", "holds a certificate"),
        ("ec1.pem", "rsa8.key", "do not form a usable pair"),
    ] {
        let out = check(cert, key);
        assert_eq!(out.status.code(), Some(1), "{key}");
        let err = String::from_utf8_lossy(&out.stderr);
        assert!(err.contains("tls_key") && err.contains(reason), "{key}: {err}");
        assert!(!err.contains("panicked"), "{err}");
    }
}
