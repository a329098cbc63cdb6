//! The soak of one proxy pair (`session-bench soak`, `--instances 1`): the backend, the session server and the
//! two proxies (offline and online mode) started, the players launched over the ramp, the faults injected, and
//! at the end what the proxies hold compared with the start, and the report.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::bail;
use moonbridge_test_certs::{free_port, KeyType, TestCert, TestDir};
use tokio_util::sync::CancellationToken;

use super::args::{SoakArgs, SESSION_TIMEOUT_S, WRITE_STALL_S};
use super::state::{Counters, Listeners, Shared};
use super::{faults, player};
use crate::backend::{Backend, OnError, Profile};
use crate::metrics::{self, Held};
use crate::process::{self, Output, Process};
use crate::{report, workload};

/// What the soak reports.
#[derive(Debug, serde::Serialize)]
struct Report {
    seconds: u64,
    players: usize,
    sessions: u64,
    logins: u64,
    ticks: u64,
    bytes_to_players: u64,
    faults: usize,
    sessions_hit_and_ended_cleanly: u64,
    backend_errors: u64,
    failures: Vec<String>,
    proxy_start: Held,
    proxy_peak: Held,
    proxy_end: Held,
}

/// Runs the soak of one proxy pair (see the module documentation); fails when a check fails.
pub async fn run(args: SoakArgs) -> anyhow::Result<()> {
    let dir = TestDir::new("moonbridge-soak")?;
    let cert = TestCert::generate_in(dir.path().to_owned(), "localhost", KeyType::Ec)?;
    let delay = Arc::new(AtomicU64::new(0));
    let sessions = crate::sessions::start_with_delay(Arc::clone(&delay))?;
    let shared = Arc::new(Shared {
        faults: Mutex::new(Vec::new()),
        counters: Counters::default(),
        commands: (0..args.players).map(|_| AtomicUsize::new(0)).collect(),
        stop: CancellationToken::new(),
        templates: workload::templates(),
        ca: cert.ca.clone(),
        began: Instant::now(),
    });
    let on_error: OnError = {
        let shared = Arc::clone(&shared);
        Box::new(move |e| shared.counters.fail(format!("backend: {e}")))
    };
    let backend = Backend::listen(SocketAddr::from(([127, 0, 0, 1], 0)), Profile::Checked, Some(on_error)).await?;
    let mut proxies = Vec::new();
    let mut children = Vec::new();
    for online in [false, true] {
        let (ws, wss, tcp) = (free_port()?, free_port()?, free_port()?);
        let auth = if online {
            format!("[auth]\nmode = \"online\"\nsession_server = \"http://{sessions}\"\nsession_timeout_seconds = {SESSION_TIMEOUT_S}\n")
        } else {
            "[auth]\nmode = \"offline\"\n".to_string()
        };
        let config = dir.join(format!("soak-{}.toml", if online { "online" } else { "offline" }));
        std::fs::write(
            &config,
            format!(
                "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:{ws}\"\nping_interval_seconds = 5\n\n\
                 [[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:{wss}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\
                 ping_interval_seconds = 5\n\n\
                 [[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:{tcp}\"\n\n\
                 [[backend]]\nname = \"soak\"\naddress = \"{}\"\n\n{auth}\n\
                 [limits]\nwrite_stall_timeout_seconds = {WRITE_STALL_S}\nlogin_timeout_seconds = 10\n\
                 max_connections = {}\n\n\
                 [rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n",
                cert.cert.display(),
                cert.key.display(),
                backend.addr,
                args.players * 2 + 100
            ),
        )?;
        // The proxy's warnings go to a file beside its config (kept with MOONBRIDGE_KEEP_TEST_FILES=1).
        let log = dir.join(format!("proxy-{}.log", if online { "online" } else { "offline" }));
        children.push(process::spawn_moonbridge(&args.proxy_bin, &config, "warn", Output::File(&log))?);
        let l = Listeners {
            ws: SocketAddr::from(([127, 0, 0, 1], ws)),
            wss: SocketAddr::from(([127, 0, 0, 1], wss)),
            tcp: SocketAddr::from(([127, 0, 0, 1], tcp)),
            online,
        };
        process::wait_listening(l.tcp, "the proxy", None).await?;
        proxies.push(l);
    }
    let proxies = [proxies[0], proxies[1]];
    let pids: Vec<u32> = children.iter().map(Process::id).collect();
    let held_all = || {
        let (a, b) = (metrics::held(pids[0], sessions.port()), metrics::held(pids[1], sessions.port()));
        Held {
            fds: a.fds + b.fds,
            threads: a.threads + b.threads,
            rss_kib: a.rss_kib + b.rss_kib,
            close_wait: a.close_wait + b.close_wait,
            sockets: a.sockets + b.sockets,
        }
    };
    // What the proxy holds with no player (after a probe connection has come and gone).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = held_all();
    if !args.json {
        println!(
            "# soak: {} players for {} s (every tenth in online mode, through a second proxy), a fault every {} s; \
             proxies at start: {start:?}",
            args.players, args.seconds, args.fault_every
        );
    }

    // Players join over the first tenth of the run (at most 20 s).
    let ramp = Duration::from_secs((args.seconds / 10).clamp(1, 20));
    let mut tasks = Vec::new();
    for i in 0..args.players {
        let shared = Arc::clone(&shared);
        let wait = ramp.mul_f64(i as f64 / args.players as f64);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            player::player(i, proxies, shared).await;
        }));
    }

    let (n, peak) = faults::inject(&args, &shared, &backend, &delay, ramp, &held_all, start).await?;
    shared.stop.cancel();
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
    }
    // Everything the players opened must be released.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut end = held_all();
    while (end.sockets > start.sockets || end.close_wait > 0) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        end = held_all();
    }
    drop(children);

    let c = &shared.counters;
    let failures = c.failures.list();
    let report = Report {
        seconds: args.seconds,
        players: args.players,
        sessions: c.sessions.load(Ordering::Relaxed),
        logins: c.logins.load(Ordering::Relaxed),
        ticks: c.ticks.load(Ordering::Relaxed),
        bytes_to_players: c.bytes_in.load(Ordering::Relaxed),
        faults: n,
        sessions_hit_and_ended_cleanly: c.hit_clean.load(Ordering::Relaxed),
        backend_errors: backend.stats.errors.load(Ordering::Relaxed),
        failures,
        proxy_start: start,
        proxy_peak: peak,
        proxy_end: end,
    };
    let _ = c.refused_with_reason.load(Ordering::Relaxed);
    report::emit(args.json, &report, |r| println!("{r:#?}"))?;
    let mut problems = report.failures.clone();
    // File descriptors: the sockets above, plus the session server's keep-alive connections (at most a few).
    if end.fds > start.fds + 4 {
        problems.push(format!("open file descriptors {} at the end, {} at the start", end.fds, start.fds));
    }
    if end.close_wait > 0 {
        problems.push(format!("{} proxy sockets left in CLOSE_WAIT", end.close_wait));
    }
    if end.sockets > start.sockets {
        problems.push(format!("{} proxy sockets at the end, {} at the start", end.sockets, start.sockets));
    }
    if end.threads > start.threads + 2 {
        problems.push(format!("{} threads at the end, {} at the start", end.threads, start.threads));
    }
    // Memory: freed sessions go back to the allocator, which keeps some of it; the margin is documented.
    let margin = (start.rss_kib / 2).max(32 * 1024);
    if end.rss_kib > start.rss_kib + margin {
        problems.push(format!(
            "RSS {} KiB at the end, {} KiB at the start (margin {margin} KiB)",
            end.rss_kib, start.rss_kib
        ));
    }
    if report.logins < args.players as u64 {
        problems.push(format!("only {} logins for {} players", report.logins, args.players));
    }
    if !problems.is_empty() {
        // The proxies' warnings, to explain what their players saw.
        for side in ["offline", "online"] {
            let lines = report::log_lines(&dir.join(format!("proxy-{side}.log")));
            eprintln!("--- the {side} proxy's last warnings ({} lines in all) ---", lines.len());
            for l in &lines[lines.len().saturating_sub(40)..] {
                eprintln!("{l}");
            }
        }
        bail!("soak failed:\n  {}", problems.join("\n  "));
    }
    Ok(())
}
