//! The client library as a Windows program: `client-cross.exe` (the scenarios of `client_cross.rs`, built for
//! `x86_64-pc-windows-gnu`) runs under Wine against the Linux proxy and node backend on loopback.
//!
//! `scripts/wine-env.sh` prepares what this needs (Wine, a Wine prefix under `target/wine`, the test-only
//! `bcryptprimitives.dll` stand-in, the Windows build of `client-cross.exe`); `scripts/test-all.sh` runs it and
//! sets `MOONBRIDGE_WINE=required`, so in CI a missing piece is a failure, never a skip.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::time::Duration;

use moonbridge_proxy::config::Transport;
use serde_json::json;
use testbed::{node_backend, KeyType, Proxy, TestCert};

fn target_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("../target")
}

/// The Windows executable and the Wine prefix, or `None` (with the reason) when this machine has no Wine setup.
fn wine_setup() -> Option<(PathBuf, PathBuf)> {
    let exe = target_dir().join("x86_64-pc-windows-gnu/debug/client-cross.exe");
    let prefix = target_dir().join("wine/prefix");
    let missing = if !exe.is_file() {
        Some(format!("{} is not built", exe.display()))
    } else if !prefix.join("drive_c/windows/system32/bcryptprimitives.dll").is_file() {
        Some(format!("the Wine prefix {} is not prepared", prefix.display()))
    } else {
        None
    };
    match missing {
        None => Some((exe, prefix)),
        Some(why) => {
            assert!(
                std::env::var("MOONBRIDGE_WINE").as_deref() != Ok("required"),
                "MOONBRIDGE_WINE=required but {why}: run scripts/wine-env.sh"
            );
            eprintln!("skipped: {why} (run scripts/wine-env.sh, or scripts/test-all.sh)");
            None
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_scenarios_pass_as_a_windows_program_under_wine() {
    let Some((exe, prefix)) = wine_setup() else { return };
    let cert = TestCert::generate("client-windows", KeyType::Ec).unwrap();
    let (_node, backend): (_, SocketAddr) = node_backend(json!({})).await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\
         [[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\n\
         [[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n",
        cert.cert.display(),
        cert.key.display()
    ))
    .await;
    let dead_port = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap().port();
    // Wine maps the Linux root to drive Z:, so Linux paths work with a Z: prefix.
    let ca = format!("Z:{}", cert.ca.display()).replace('/', "\\");
    let run = tokio::process::Command::new("wine")
        .arg(&exe)
        .args(["--tcp", &format!("tcp://127.0.0.1:{}", proxy.addr(Transport::Tcp).port())])
        .args(["--ws", &format!("ws://127.0.0.1:{}/mc", proxy.addr(Transport::Ws).port())])
        .args(["--wss", &format!("wss://localhost:{}/mc", proxy.addr(Transport::Wss).port())])
        .args(["--ca", &ca])
        .args(["--dead-port", &dead_port.to_string()])
        .env("WINEPREFIX", &prefix)
        .env("WINEDEBUG", "-all")
        .kill_on_drop(true)
        .output();
    let out = tokio::time::timeout(Duration::from_secs(300), run).await.expect("client-cross.exe in time").unwrap();
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    eprintln!("{stdout}");
    assert_eq!(out.status.code(), Some(0), "client-cross.exe failed\nstdout:\n{stdout}\nstderr:\n{stderr}");
    assert_eq!(stdout.lines().filter(|l| l.starts_with("ok every_transport: ")).count(), 8, "{stdout}");
    assert!(stdout.contains("ok burst_in_few_reads: "), "{stdout}");
    assert!(stdout.contains("ok connect_errors: "), "{stdout}");
    assert!(stdout.trim_end().ends_with("all scenarios passed"), "{stdout}");
    proxy.shutdown().await;
}
