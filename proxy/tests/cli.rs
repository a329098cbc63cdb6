//! The `moonbridge` command line as a process: `--version`, `--help`, `--check-config`, built-in defaults and
//! SIGTERM.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::io::{BufRead, BufReader};
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

const BIN: &str = env!("CARGO_BIN_EXE_moonbridge");

/// A configuration file in its own scratch directory, removed when the value is dropped.
struct ConfigFile {
    _dir: moonbridge_test_certs::TestDir,
    path: std::path::PathBuf,
}

impl AsRef<std::ffi::OsStr> for ConfigFile {
    fn as_ref(&self) -> &std::ffi::OsStr {
        self.path.as_os_str()
    }
}

fn write_config(name: &str, text: &str) -> ConfigFile {
    let dir = moonbridge_test_certs::TestDir::new(&format!("moonbridge-cli-{name}")).unwrap();
    let p = dir.join(name);
    std::fs::write(&p, text).unwrap();
    ConfigFile { _dir: dir, path: p }
}

#[test]
fn version_and_help() {
    let out = Command::new(BIN).arg("--version").output().unwrap();
    assert!(out.status.success());
    assert_eq!(String::from_utf8(out.stdout).unwrap().trim(), format!("moonbridge {}", env!("CARGO_PKG_VERSION")));

    let out = Command::new(BIN).arg("--help").output().unwrap();
    assert!(out.status.success());
    let help = String::from_utf8(out.stdout).unwrap();
    for needle in ["--config <FILE>", "--check-config <FILE>", "--version", "RUST_LOG", "25577"] {
        assert!(help.contains(needle), "--help lacks {needle:?}:\n{help}");
    }
}

#[test]
fn check_config_accepts_a_valid_file() {
    let p = write_config(
        "good.toml",
        "[[listener]]\ntransport = \"tcp\"\nbind = \"0.0.0.0:25565\"\n[[backend]]\nname = \"survival\"\naddress = \"127.0.0.1:25566\"\n",
    );
    let out = Command::new(BIN).arg("--check-config").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8(out.stdout).unwrap().contains("OK"));
}

#[test]
fn check_config_lists_every_problem_by_key() {
    let p = write_config(
        "bad.toml",
        "[[backend]]\nname = \"a\"\naddress = \"nohost\"\n[routing]\ndefault_backend = \"zzz\"\n[limits]\nmax_connections = 0\n",
    );
    let out = Command::new(BIN).arg("--check-config").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    let lines: Vec<&str> = err.lines().collect();
    assert_eq!(lines.len(), 3, "{err}");
    assert!(lines[0].contains("backend[0].address"), "{err}");
    assert!(lines[1].contains("routing.default_backend"), "{err}");
    assert!(lines[2].contains("limits.max_connections"), "{err}");

    let p = write_config("unknown.toml", "[limits]\nmax_conections = 5\n");
    let out = Command::new(BIN).arg("--check-config").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert_eq!(err.lines().count(), 1, "{err}");
    assert!(err.contains("max_conections") && err.contains("line 2"), "{err}");

    let out = Command::new(BIN).arg("--check-config").arg("/nonexistent/moonbridge.toml").output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    assert!(String::from_utf8(out.stderr).unwrap().contains("cannot read"));
}

/// Spawns the binary and returns it with a channel of its stderr lines.
fn spawn(args: &[&str]) -> (std::process::Child, mpsc::Receiver<String>) {
    let mut child = Command::new(BIN)
        .args(args)
        .env("RUST_LOG", "info")
        .stdout(Stdio::null())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let stderr = child.stderr.take().unwrap();
    let (tx, rx) = mpsc::channel();
    std::thread::spawn(move || {
        for line in BufReader::new(stderr).lines().map_while(Result::ok) {
            if tx.send(line).is_err() {
                break;
            }
        }
    });
    (child, rx)
}

fn wait_line(rx: &mpsc::Receiver<String>, needle: &str, within: Duration) -> String {
    let deadline = Instant::now() + within;
    loop {
        let left = deadline.saturating_duration_since(Instant::now());
        match rx.recv_timeout(left) {
            Ok(l) if l.contains(needle) => return l,
            Ok(_) => {}
            Err(_) => panic!("no log line containing {needle:?} within {within:?}"),
        }
    }
}

#[test]
fn no_arguments_runs_on_defaults_and_sigterm_stops_it() {
    let (mut child, rx) = spawn(&[]);
    let line = wait_line(&rx, "listening tcp", Duration::from_secs(20));
    assert!(line.contains("listening tcp 0.0.0.0:25577"), "{line}");
    let line = wait_line(&rx, "listening ws", Duration::from_secs(20));
    assert!(line.contains("listening ws 0.0.0.0:8080 path=/mc ping=30s"), "{line}");
    std::net::TcpStream::connect("127.0.0.1:25577").expect("default tcp listener accepts");
    std::net::TcpStream::connect("127.0.0.1:8080").expect("default ws listener accepts");
    let status = Command::new("kill").arg("-TERM").arg(child.id().to_string()).status().unwrap();
    assert!(status.success());
    wait_line(&rx, "SIGTERM received", Duration::from_secs(10));
    let deadline = Instant::now() + Duration::from_secs(15);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        assert!(Instant::now() < deadline, "moonbridge did not exit after SIGTERM");
        std::thread::sleep(Duration::from_millis(50));
    };
    assert_eq!(code, Some(0));
}

#[test]
fn c32_ipv6_backend_addresses_need_brackets() {
    let p = write_config(
        "v6.toml",
        "[[listener]]\ntransport = \"tcp\"\nbind = \"[::]:25565\"\n[[backend]]\nname = \"v6\"\naddress = \"[2001:db8::10]:25566\"\n",
    );
    let out = Command::new(BIN).arg("--check-config").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let p = write_config("v6-bare.toml", "[[backend]]\nname = \"v6\"\naddress = \"2001:db8::1:2565\"\n");
    let out = Command::new(BIN).arg("--check-config").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("backend[0].address"), "{err}");
}

#[test]
fn an_invalid_config_stops_startup_with_a_clear_error() {
    let p = write_config("invalid-run.toml", "[[backend]]\nname = \"\"\naddress = \"127.0.0.1:1\"\n");
    let out = Command::new(BIN).arg("--config").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    assert!(err.contains("backend[0].name"), "{err}");
}
