//! Case C21 and certificate reloading against the `moonbridge` binary's `wss` listener, with the real
//! `openssl s_client` as the TLS peer (certificates from `moonbridge-test-certs`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::{BufRead, BufReader, Write};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use moonbridge_test_certs::{KeyType, TestCert};

const BIN: &str = env!("CARGO_BIN_EXE_moonbridge");

fn dir(name: &str) -> PathBuf {
    let d = std::env::temp_dir().join(format!("moonbridge-tls-{}-{name}", std::process::id()));
    std::fs::create_dir_all(&d).unwrap();
    d
}

fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port()
}

struct Running {
    child: Child,
    lines: mpsc::Receiver<String>,
    port: u16,
}

impl Drop for Running {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Running {
    fn start(cert: &Path, key: &Path, d: &Path) -> Self {
        let port = free_port();
        let config = d.join("wss.toml");
        std::fs::write(
            &config,
            format!(
                "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:{port}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\
                 [[backend]]\nname = \"b\"\naddress = \"127.0.0.1:9\"\n",
                cert.display(),
                key.display()
            ),
        )
        .unwrap();
        let mut child = Command::new(BIN)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info")
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let stderr = child.stderr.take().unwrap();
        let (tx, lines) = mpsc::channel();
        std::thread::spawn(move || {
            for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                if tx.send(line).is_err() {
                    break;
                }
            }
        });
        Self { child, lines, port }
    }

    fn wait_line(&self, needle: &str, within: Duration) -> String {
        let deadline = Instant::now() + within;
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) if l.contains(needle) => return l,
                Ok(_) => {}
                Err(_) => panic!("no log line containing {needle:?} within {within:?}"),
            }
        }
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
    let certs = TestCert::generate_in(d.clone(), "localhost", KeyType::Rsa).unwrap();
    let p = Running::start(&certs.cert, &certs.key, &d);
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

#[test]
fn certificates_reload_without_restart_and_bad_files_keep_the_old_one() {
    let d = dir("reload");
    let certs = TestCert::generate_in(d.clone(), "first", KeyType::Rsa).unwrap();
    let (cert, key) = (certs.cert.clone(), certs.key.clone());
    let p = Running::start(&cert, &key, &d);
    p.wait_line("listening wss", Duration::from_secs(20));
    let (ok, out) = p.s_client(&[]);
    assert!(ok && (out.contains("CN=first") || out.contains("CN = first")), "{out}");

    // Rotate: write the new pair next to the old one, then move both into place.
    let (new_cert, new_key) = (d.join("cert.new"), d.join("key.new"));
    certs.issue(&new_cert, &new_key, "second").unwrap();
    std::fs::rename(&new_key, &key).unwrap();
    std::fs::rename(&new_cert, &cert).unwrap();
    p.wait_line("reloaded TLS certificate", Duration::from_secs(30));
    let (ok, out) = p.s_client(&[]);
    assert!(ok && (out.contains("CN=second") || out.contains("CN = second")), "{out}");

    // A broken certificate file: the old certificate stays, and the log says why.
    std::fs::write(&cert, "not a certificate\n").unwrap();
    let line = p.wait_line("TLS certificate not reloaded", Duration::from_secs(30));
    assert!(line.contains("no PEM CERTIFICATE block") || line.contains("certificate"), "{line}");
    let (ok, out) = p.s_client(&[]);
    assert!(ok && (out.contains("CN=second") || out.contains("CN = second")), "{out}");
}
