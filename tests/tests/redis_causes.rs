//! Redis that says what is wrong (issue 49): a refused password and an untrusted certificate are named in the
//! log line and in `moonbridge_network_redis_errors_total{cause}`, and `rediss://` with a private CA works
//! through `redis_ca_file`. Debian's `redis-server` 7 (with its TLS support), started here on free ports.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::process::{Command, Stdio};
use std::time::Duration;

use moonbridge_test_certs::free_port;
use testbed::network::{instance_process, metric_at, secret, wait_metric_at};
use testbed::{login_backend, KeyType, KillOnDrop, TestCert, TestDir};

/// How long an instance may take to try Redis and say so: a renewal period (2 s) and a connect (up to 2 s).
const TRIED: Duration = Duration::from_secs(8);

/// `redis-server` on a free loopback port with `args` (no persistence); returns it and its port once it
/// accepts TCP connections.
async fn redis_with(args: &[&str]) -> (KillOnDrop, u16) {
    let port = free_port().unwrap();
    let mut all = vec!["--bind", "127.0.0.1", "--save", "", "--appendonly", "no"];
    all.extend_from_slice(args);
    let port_text = port.to_string();
    let tls = args.contains(&"--tls-cert-file");
    if tls {
        all.extend_from_slice(&["--port", "0", "--tls-port", &port_text]);
    } else {
        all.extend_from_slice(&["--port", &port_text]);
    }
    let child = Command::new("redis-server").args(&all).stdout(Stdio::null()).spawn().expect("redis-server runs");
    tokio::time::timeout(Duration::from_secs(20), async {
        while tokio::net::TcpStream::connect(("127.0.0.1", port)).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("redis-server listens within 20 s");
    (KillOnDrop(child), port)
}

/// An instance's configuration on `redis_url` (`extra` appended to `[network]`).
fn config(backend: std::net::SocketAddr, key: &std::path::Path, redis_url: &str, extra: &str) -> String {
    format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n\
         [network]\nredis_url = \"{redis_url}\"\nname = \"test\"\npeer_bind = \"127.0.0.1:0\"\nsecret_file = \"{}\"\n{extra}",
        key.display()
    )
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_wrong_password_and_an_untrusted_certificate_are_named_and_a_private_ca_works() {
    let backend = login_backend().await;
    let dir = TestDir::new("moonbridge-redis-causes").unwrap();
    let key = secret(&dir);
    let cause = |c: &str| format!("moonbridge_network_redis_errors_total{{cause=\"{c}\"}}");

    // A password Redis does not take.
    let (_locked, port) = redis_with(&["--requirepass", "the-right-one"]).await;
    let url = format!("redis://:the-wrong-one@127.0.0.1:{port}/");
    let (a, _, _, _, metrics) = instance_process(&dir, "auth", config(backend.addr, &key, &url, ""), "");
    let line = a.wait_line("Redis unreachable", TRIED).expect("a line says Redis is unreachable");
    assert!(line.to_ascii_lowercase().contains("authentication failed"), "{line}");
    assert!(!line.contains("the-wrong-one"), "the password is not logged: {line}");
    wait_metric_at(metrics, &cause("auth"), 1.0, TRIED).await;
    drop(a);

    // TLS with a certificate of a private CA: untrusted without the CA, trusted with `redis_ca_file`.
    let cert = TestCert::generate("redis-tls", KeyType::Ec).unwrap();
    let (cert_file, key_file, ca_file) =
        (cert.cert.display().to_string(), cert.key.display().to_string(), cert.ca.display().to_string());
    let (_tls, port) = redis_with(&[
        "--tls-cert-file",
        &cert_file,
        "--tls-key-file",
        &key_file,
        "--tls-ca-cert-file",
        &ca_file,
        "--tls-auth-clients",
        "no",
    ])
    .await;
    let url = format!("rediss://localhost:{port}/");
    let (b, _, _, _, metrics) = instance_process(&dir, "untrusted", config(backend.addr, &key, &url, ""), "");
    let line = b.wait_line("Redis unreachable", TRIED).expect("a line says Redis is unreachable");
    assert!(line.to_ascii_lowercase().contains("certificate"), "{line}");
    wait_metric_at(metrics, &cause("tls"), 1.0, TRIED).await;
    drop(b);
    let ca = format!("redis_ca_file = \"{ca_file}\"\n");
    let (c, _, _, _, metrics) = instance_process(&dir, "trusted", config(backend.addr, &key, &url, &ca), "");
    assert!(c.wait_line("Redis reachable", TRIED).is_some(), "rediss:// with the private CA");
    assert_eq!(metric_at(metrics, "moonbridge_network_redis_up").await, Some(1.0));
    assert_eq!(metric_at(metrics, &cause("tls")).await, Some(0.0));
}
