//! The `moonbridge` command line as a process: `--version`, `--help`, `--check-config`, built-in defaults and
//! SIGTERM, SIGHUP, and both `[runtime]` modes relaying a player.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

use moonbridge_test_certs::ChildLog;

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
    for needle in ["--config <FILE>", "--check-config <FILE>", "--version", "RUST_LOG", "25577", "SIGHUP reloads"] {
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

/// Spawns the binary with `args` (`RUST_LOG=info`), its stderr lines read on a thread.
fn spawn(args: &[&str]) -> ChildLog {
    ChildLog::spawn(Command::new(BIN).args(args).env("RUST_LOG", "info").stdout(Stdio::null())).unwrap()
}

/// The next stderr line of `child` containing `needle`, or a panic naming it after `within`.
fn wait_line(child: &ChildLog, needle: &str, within: Duration) -> String {
    child.wait_line(needle, within).unwrap_or_else(|| panic!("no log line containing {needle:?} within {within:?}"))
}

#[test]
fn no_arguments_runs_on_defaults_and_sigterm_stops_it() {
    let mut child = spawn(&[]);
    let line = wait_line(&child, "listening tcp", Duration::from_secs(20));
    assert!(line.contains("listening tcp 0.0.0.0:25577"), "{line}");
    let line = wait_line(&child, "listening ws", Duration::from_secs(20));
    assert!(line.contains("listening ws 0.0.0.0:8080 path=/mc ping=30s"), "{line}");
    std::net::TcpStream::connect("127.0.0.1:25577").expect("default tcp listener accepts");
    std::net::TcpStream::connect("127.0.0.1:8080").expect("default ws listener accepts");
    sigterm_stops_it(&mut child);
}

/// Sends SIGTERM and checks that the process says so and exits with 0 within 15 s.
fn sigterm_stops_it(log: &mut ChildLog) {
    let status = Command::new("kill").arg("-TERM").arg(log.id().to_string()).status().unwrap();
    assert!(status.success());
    wait_line(log, "SIGTERM received", Duration::from_secs(10));
    exits_with_0(log, "SIGTERM");
}

/// Checks that the process exits with 0 within 15 s (after `what`).
fn exits_with_0(log: &mut ChildLog, what: &str) {
    let child = log.child();
    let deadline = Instant::now() + Duration::from_secs(15);
    let code = loop {
        if let Some(s) = child.try_wait().unwrap() {
            break s.code();
        }
        assert!(Instant::now() < deadline, "moonbridge did not exit after {what}");
        // Polling a child process's exit status (there is no wait with a timeout in std).
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

/// Issue 49: an operating-system error that stops the start is said once (the listener's error names it; the
/// log line does not repeat it).
#[test]
fn a_bind_failure_names_its_os_error_once() {
    let taken = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
    let addr = taken.local_addr().unwrap();
    let p = write_config(
        "taken-port.toml",
        &format!("[[listener]]\ntransport = \"tcp\"\nbind = \"{addr}\"\n[[backend]]\nname = \"b\"\naddress = \"127.0.0.1:1\"\n"),
    );
    let out = Command::new(BIN).arg("--config").arg(&p).output().unwrap();
    assert_eq!(out.status.code(), Some(1));
    let err = String::from_utf8(out.stderr).unwrap();
    let line = err.lines().find(|l| l.contains("ERROR")).unwrap_or_default();
    assert!(line.contains(&format!("cannot listen on tcp {addr}")), "{err}");
    assert_eq!(line.matches("(os error 98)").count(), 1, "{line}");
}

#[test]
fn sighup_reloads_the_config_file_or_refuses_it_with_the_reason() {
    let base = "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\n[[backend]]\nname = \"a\"\naddress = \"127.0.0.1:25565\"\n";
    let file = write_config("reload.toml", base);
    let mut child = spawn(&["--config", file.path.to_str().unwrap()]);
    wait_line(&child, "listening tcp", Duration::from_secs(20));
    let hup = |child: &ChildLog| {
        assert!(Command::new("kill").arg("-HUP").arg(child.id().to_string()).status().unwrap().success());
    };
    // An invalid file: refused, with the key.
    std::fs::write(&file.path, format!("{base}[limits]\nlogin_timeout_seconds = 0\n")).unwrap();
    hup(&child);
    let line = wait_line(&child, "SIGHUP: reload of", Duration::from_secs(10));
    assert!(
        line.contains("refused, the running configuration stays") && line.contains("limits.login_timeout_seconds"),
        "{line}"
    );
    // A listener change: refused, it needs a restart.
    std::fs::write(&file.path, base.replace("127.0.0.1:0", "127.0.0.1:1")).unwrap();
    hup(&child);
    let line = wait_line(&child, "SIGHUP: reload of", Duration::from_secs(10));
    assert!(line.contains("[[listener]] changed, which needs a restart"), "{line}");
    // A new backend and route: applied.
    std::fs::write(
        &file.path,
        format!("{base}\n[[backend]]\nname = \"b\"\naddress = \"127.0.0.1:25566\"\n\n[routing.hosts]\n\"b.example.com\" = \"b\"\n"),
    )
    .unwrap();
    hup(&child);
    let line = wait_line(&child, "SIGHUP: reloaded", Duration::from_secs(10));
    assert!(line.contains("2 backend(s) (1 unchanged), 1 host route(s), default backend a"), "{line}");
    // Still serving; SIGTERM still stops it cleanly.
    sigterm_stops_it(&mut child);
}

/// Reads from `s` until `buf` holds at least `want` bytes (the socket's read timeout bounds each read).
fn read_at_least(s: &mut std::net::TcpStream, buf: &mut Vec<u8>, want: usize) {
    use std::io::Read;
    let mut chunk = [0u8; 4096];
    while buf.len() < want {
        let n = s.read(&mut chunk).expect("read within the timeout");
        assert!(n > 0, "connection closed after {} of {want} bytes", buf.len());
        buf.extend_from_slice(&chunk[..n]);
    }
}

/// Both `[runtime]` modes, as the binary runs them, carry a player's login and play bytes both ways and log
/// which mode runs (the in-process tests run the default, thread-per-core, on their own workers).
#[test]
fn both_runtime_modes_relay_a_player() {
    use moonbridge_protocol::packets::{Handshake, LoginStart, LoginSuccess, NextState, Packet};
    use std::io::Write;
    for (mode, banner) in [
        ("thread-per-core", "runtime thread-per-core: 2 session worker(s)"),
        ("multi-thread", "runtime multi-thread: tokio's work-stealing workers"),
    ] {
        let backend = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let text = format!(
            "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\n[[backend]]\nname = \"a\"\naddress = \"{}\"\n\n\
             [runtime]\nmode = \"{mode}\"\nworkers = 2\n",
            backend.local_addr().unwrap()
        );
        let file = write_config(&format!("runtime-{mode}.toml"), &text);
        let mut child = spawn(&["--config", file.path.to_str().unwrap()]);
        wait_line(&child, banner, Duration::from_secs(20));
        let line = wait_line(&child, "listening tcp 127.0.0.1:", Duration::from_secs(20));
        let addr = line.split("listening tcp ").nth(1).and_then(|r| r.split_whitespace().next()).unwrap();
        let mut player = std::net::TcpStream::connect(addr).unwrap();
        player.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let hs = Handshake {
            protocol_version: 5,
            server_address: "localhost".into(),
            server_port: 25565,
            next_state: NextState::Login,
        };
        player.write_all(&hs.to_frame_bytes().unwrap()).unwrap();
        player.write_all(&LoginStart { name: "Steve".into() }.to_frame_bytes().unwrap()).unwrap();
        // The backend side: accepted on a helper thread so the wait is bounded.
        let (tx, accepted) = mpsc::channel();
        std::thread::spawn(move || {
            let _ = tx.send(backend.accept().map(|(s, _)| s));
        });
        let mut server = accepted.recv_timeout(Duration::from_secs(10)).expect("backend dialled").unwrap();
        server.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        let login = LoginStart { name: "Steve".into() }.to_frame_bytes().unwrap();
        let mut got = Vec::new();
        read_at_least(&mut server, &mut got, login.len());
        while !got.ends_with(&login) {
            let want = got.len() + 1;
            read_at_least(&mut server, &mut got, want);
        }
        let success = LoginSuccess { uuid: "00000000-0000-3000-8000-000000000000".into(), name: "Steve".into() }
            .to_frame_bytes()
            .unwrap();
        server.write_all(&success).unwrap();
        let mut down = Vec::new();
        read_at_least(&mut player, &mut down, success.len());
        assert_eq!(down, success, "{mode}: Login Success reaches the player unchanged");
        // Play: a chat packet up (0x01, string "hi") and the same bytes back down.
        let chat = [4u8, 0x01, 2, b'h', b'i'];
        player.write_all(&chat).unwrap();
        let mut up = Vec::new();
        read_at_least(&mut server, &mut up, chat.len());
        assert_eq!(up, chat, "{mode}: the player's packet reaches the backend");
        server.write_all(&chat).unwrap();
        let mut back = Vec::new();
        read_at_least(&mut player, &mut back, chat.len());
        assert_eq!(back, chat, "{mode}: the backend's packet reaches the player");
        sigterm_stops_it(&mut child);
    }
}

/// `--probe ADDR`, the image's HEALTHCHECK (deploy/Containerfile): exit 0 while the metrics listener at ADDR
/// answers `GET /healthz` with 200, and 1 with the address and the reason once nothing listens there.
#[test]
fn probe_exits_0_while_the_metrics_listener_is_healthy_and_1_after() {
    let (tcp, metrics) = (moonbridge_test_certs::free_port().unwrap(), moonbridge_test_certs::free_port().unwrap());
    let p = write_config(
        "probe",
        &format!(
            "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:{tcp}\"\n[[backend]]\nname = \"b\"\naddress = \"127.0.0.1:1\"\n\
             [metrics]\nbind = \"127.0.0.1:{metrics}\"\n"
        ),
    );
    let mut child = spawn(&["--config", p.as_ref().to_str().unwrap()]);
    wait_line(&child, "metrics on http://", Duration::from_secs(20));
    let addr = format!("127.0.0.1:{metrics}");
    let out = Command::new(BIN).args(["--probe", &addr]).output().unwrap();
    assert!(out.status.success(), "healthy: {}", String::from_utf8_lossy(&out.stderr));
    // Without admin_token_file the listener is no admin API: `ctl` says so and exits 4.
    let token = p.path.with_file_name("admin.token");
    std::fs::write(&token, "9".repeat(64)).unwrap();
    let url = format!("http://{addr}");
    let args = ["ctl", "--url", &url, "--token-file", token.to_str().unwrap(), "players"];
    let out = Command::new(BIN).args(args).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(4), "{stderr}");
    assert!(stderr.contains("not an admin API answer"), "{stderr}");
    sigterm_stops_it(&mut child);
    let out = Command::new(BIN).args(["--probe", &addr]).output().unwrap();
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert_eq!(out.status.code(), Some(1), "{stderr}");
    assert!(stderr.starts_with(&format!("{addr}: ")) && stderr.to_lowercase().contains("refused"), "{stderr}");
}

/// `moonbridge ctl` against one instance's admin API, with each kind of token: a token file readable by every
/// user is warned about at start; no token and a wrong one get 401 (a rate-limited log line, exit 3 from
/// `ctl`); the right one lists the players; a name nobody plays exits 1; `ctl drain` stops the process; a port
/// nothing listens on exits 4.
/// `--check-config` names a missing or short token file and a token without `bind`.
#[test]
fn ctl_exit_codes_and_the_admin_token_rules() {
    use std::io::{Read, Write};
    let (tcp, metrics) = (moonbridge_test_certs::free_port().unwrap(), moonbridge_test_certs::free_port().unwrap());
    let dir = moonbridge_test_certs::TestDir::new("moonbridge-cli-ctl").unwrap();
    let (token, wrong) = (dir.join("admin.token"), dir.join("wrong.token"));
    std::fs::write(&token, format!("{}\n", "7".repeat(64))).unwrap();
    std::fs::write(&wrong, "8".repeat(64)).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o644)).unwrap();
    }
    let config = |extra: &str| {
        format!(
            "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:{tcp}\"\n[[backend]]\nname = \"b\"\naddress = \"127.0.0.1:1\"\n\
             [metrics]\n{extra}admin_token_file = \"{}\"\n",
            token.display()
        )
    };
    let p = write_config("ctl.toml", &config(&format!("bind = \"127.0.0.1:{metrics}\"\n")));
    let out = Command::new(BIN).args(["--check-config", p.as_ref().to_str().unwrap()]).output().unwrap();
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    let mut child = spawn(&["--config", p.as_ref().to_str().unwrap()]);
    let line = wait_line(&child, "admin_token_file", Duration::from_secs(20));
    assert!(line.contains("readable by every user of this host: chmod 600 it"), "{line}");
    wait_line(&child, "metrics on http://", Duration::from_secs(20));

    let request = |auth: &str| {
        let mut s = std::net::TcpStream::connect(("127.0.0.1", metrics)).unwrap();
        s.set_read_timeout(Some(Duration::from_secs(10))).unwrap();
        write!(s, "GET /admin/players HTTP/1.1\r\nHost: x\r\n{auth}\r\n").unwrap();
        let mut got = String::new();
        s.read_to_string(&mut got).unwrap();
        got
    };
    for auth in ["", &format!("Authorization: Bearer {}\r\n", "8".repeat(64))] {
        let got = request(auth);
        assert!(got.starts_with("HTTP/1.1 401 Unauthorized\r\n"), "{got}");
        assert!(got.contains("\r\nWWW-Authenticate: Bearer\r\n") && got.contains("\"error\":"), "{got}");
    }
    wait_line(&child, "admin API request refused: no token", Duration::from_secs(10));
    wait_line(&child, "admin API request refused: a wrong token", Duration::from_secs(10));
    let got = request(&format!("Authorization: Bearer {}\r\n", "7".repeat(64)));
    assert!(got.starts_with("HTTP/1.1 200 OK\r\n") && got.ends_with("{\"players\":[]}\n"), "{got}");

    let url = format!("http://127.0.0.1:{metrics}");
    let ctl = |file: &std::path::Path, args: &[&str]| {
        let mut all = vec!["ctl", "--url", &url, "--token-file", file.to_str().unwrap()];
        all.extend_from_slice(args);
        Command::new(BIN).args(all).output().unwrap()
    };
    let out = ctl(&token, &["players"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "NAME  INSTANCE  BACKEND  ADDRESS  TRANSPORT  CARRIAGE  SESSION\n0 player(s)\n"
    );
    let out = ctl(&token, &["--json", "players"]);
    assert_eq!(String::from_utf8_lossy(&out.stdout), "[]\n");
    let out = ctl(&wrong, &["players"]);
    assert_eq!(out.status.code(), Some(3), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stderr).contains("refused: the token"), "{out:?}");
    let out = ctl(&token, &["find", "Nobody"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "moonbridge ctl: 404: no player named Nobody in the network\n");
    let out = ctl(&token, &["send", "Nobody", "--to", "nowhere"]);
    assert_eq!(out.status.code(), Some(1));
    assert_eq!(String::from_utf8_lossy(&out.stderr), "moonbridge ctl: 400: no backend named nowhere\n");
    let out = ctl(&token, &["kick"]);
    assert_eq!(out.status.code(), Some(2), "a usage error");
    // `ctl drain` stops it as SIGTERM does.
    let out = ctl(&token, &["drain"]);
    assert_eq!(out.status.code(), Some(0), "{}", String::from_utf8_lossy(&out.stderr));
    assert!(String::from_utf8_lossy(&out.stdout).contains("the process exits afterwards"), "{out:?}");
    wait_line(&child, "drain asked (POST /drain or the admin API): stopping as on SIGTERM", Duration::from_secs(10));
    exits_with_0(&mut child, "ctl drain");
    let out = ctl(&token, &["players"]);
    assert_eq!(out.status.code(), Some(4), "nothing listens: {}", String::from_utf8_lossy(&out.stderr));

    // --check-config: a token without the listener, a missing file, a short token.
    let p = write_config("ctl-nobind.toml", &config(""));
    let out = Command::new(BIN).args(["--check-config", p.as_ref().to_str().unwrap()]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("metrics.admin_token_file: needs metrics.bind"), "{out:?}");
    std::fs::write(&token, "short").unwrap();
    let p = write_config("ctl-short.toml", &config(&format!("bind = \"127.0.0.1:{metrics}\"\n")));
    let out = Command::new(BIN).args(["--check-config", p.as_ref().to_str().unwrap()]).output().unwrap();
    let err = String::from_utf8_lossy(&out.stderr);
    assert!(
        err.contains("metrics.admin_token_file:") && err.contains("holds 5 bytes; the token needs at least 32"),
        "{err}"
    );
    std::fs::remove_file(&token).unwrap();
    let out = Command::new(BIN).args(["--check-config", p.as_ref().to_str().unwrap()]).output().unwrap();
    assert!(String::from_utf8_lossy(&out.stderr).contains("metrics.admin_token_file: cannot read"), "{out:?}");
}
