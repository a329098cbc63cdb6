//! One capacity run: every player through moonbridge (or the peer), joined at `--connect-rate`, warmed up, then
//! measured for `--seconds` (tick round trips, CPU of each process, the proxies' memory), and the checks that
//! fail the run.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use moonbridge_test_certs::{KeyType, TestCert, TestDir};
use tokio_util::sync::CancellationToken;

use super::args::{CapacityArgs, JOINING_AT_ONCE, TICK_MS, WARM_UP};
use super::player::{player, Shared};
use super::report::{print_report, ProxyReport, Report};
use super::start;
use crate::backend::Load;
use crate::metrics;
use crate::peers::{PeerArg, TransportArg};
use crate::player::carriage::Carriage;
use crate::player::{tls_connector, Reach};
use crate::process::Process;
use crate::report::{self, percentile_ms};

/// One run of every player through moonbridge, or through `peer`; fails as [`super::main`] says.
pub async fn run_once(args: &CapacityArgs, peer: Option<PeerArg>) -> anyhow::Result<Report> {
    let players = args.idle + args.active;
    if players == 0 || args.proxies == 0 || args.connect_rate == 0 {
        bail!("--idle plus --active, --proxies and --connect-rate must be at least 1");
    }
    let per_proxy = players.div_ceil(args.proxies);
    start::check_file_limits(players, per_proxy)?;

    let dir = TestDir::new("moonbridge-capacity")?;
    let cert = TestCert::generate_in(dir.path().to_owned(), "localhost", KeyType::Ec)?;
    let ticks_per_s = metrics::clock_ticks_per_second();
    let (backend, backend_addr) = start::start_backend(dir.path(), args.load).await?;
    let (proxies, ports) = start::start_proxies(args, peer, dir.path(), &cert, &backend_addr, per_proxy).await?;
    let proxy_pids: Vec<u32> = proxies.iter().map(Process::id).collect();
    tokio::time::sleep(Duration::from_millis(300)).await;
    let rss_before: Vec<u64> = proxy_pids.iter().map(|&p| metrics::rss_kib(p).unwrap_or(0)).collect();
    let tcp_mem0 = metrics::kernel_tcp_kib();
    if !args.json {
        println!(
            "# capacity: {} idle and {} active ({:?}) {:?} players ({}) through {} {} process(es), backend at \
             {backend_addr}, joining at {}/s",
            args.idle,
            args.active,
            args.load,
            args.transport,
            if args.transport == TransportArg::Tcp { "no carriage" } else { args.carriage.subprotocol() },
            args.proxies,
            peer.map_or("moonbridge", PeerArg::name),
            args.connect_rate
        );
    }

    // The players: idle ones first.
    let shared = Arc::new(Shared {
        in_play_per_proxy: (0..args.proxies).map(|_| AtomicU64::new(0)).collect(),
        ..Shared::default()
    });
    let stop = CancellationToken::new();
    let gate = Arc::new(tokio::sync::Semaphore::new(JOINING_AT_ONCE));
    let reach = Reach {
        transport: args.transport,
        tls: Some(tls_connector(&cert.ca)?),
        offer: match (args.transport, peer) {
            (TransportArg::Tcp, _) | (_, Some(_)) => None,
            _ => Some(args.carriage.subprotocol()),
        },
        read_chunk: 64 * 1024,
    };
    // TCP players speak no carriage.
    let carriage = if args.transport == TransportArg::Tcp { Carriage::V1 } else { args.carriage };
    let answers = Arc::new(match args.load {
        Load::Modded | Load::Forge => args.load.templates().iter().map(Vec::len).collect(),
        Load::Light => vec![1],
    });
    let began = Instant::now();
    let t0 = tokio::time::Instant::now();
    let mut tasks = tokio::task::JoinSet::new();
    for i in 0..players {
        let start = t0 + Duration::from_secs_f64(i as f64 / f64::from(args.connect_rate));
        tasks.spawn(player(
            i,
            (i % ports.len(), ports[i % ports.len()]),
            i >= args.idle,
            start,
            Arc::clone(&gate),
            (reach.clone(), carriage),
            Arc::clone(&answers),
            Arc::clone(&shared),
            stop.clone(),
        ));
    }
    let deadline = Instant::now() + Duration::from_secs_f64(players as f64 / f64::from(args.connect_rate) + 60.0);
    let mut last_print = Instant::now();
    loop {
        let (joined, failed) = (shared.joined.load(Ordering::Relaxed), shared.failed_to_join.load(Ordering::Relaxed));
        if joined + failed >= players as u64 || Instant::now() > deadline {
            break;
        }
        if !args.json && last_print.elapsed() >= Duration::from_secs(2) {
            last_print = Instant::now();
            println!(
                "# joining: {joined} of {players} in play, {failed} failed, {:.0} s",
                began.elapsed().as_secs_f64()
            );
        }
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let join_seconds = began.elapsed().as_secs_f64();
    if !args.json {
        println!(
            "# {} of {players} in play after {join_seconds:.1} s; {} s of warm-up, then {} s measured",
            shared.in_play.load(Ordering::Relaxed),
            WARM_UP.as_secs(),
            args.seconds
        );
    }
    tokio::time::sleep(WARM_UP).await;

    let mut pids = proxy_pids.clone();
    pids.push(std::process::id());
    pids.push(backend.0.id());
    let cpu0 = metrics::cpu_seconds(&pids, ticks_per_s);
    let m0 = Instant::now();
    shared.measuring.store(true, Ordering::Relaxed);
    tokio::time::sleep(Duration::from_secs(args.seconds)).await;
    shared.measuring.store(false, Ordering::Relaxed);
    let cpu1 = metrics::cpu_seconds(&pids, ticks_per_s);
    let wall = m0.elapsed().as_secs_f64();
    let in_play = shared.in_play.load(Ordering::Relaxed);
    let tcp_mem1 = metrics::kernel_tcp_kib();
    let cores: Vec<f64> = cpu1.iter().zip(&cpu0).map(|(b, a)| (b - a) / wall).collect();
    let proxy: Vec<ProxyReport> = proxy_pids
        .iter()
        .enumerate()
        .map(|(k, &pid)| {
            let after = metrics::rss_kib(pid).unwrap_or(0);
            let n = shared.in_play_per_proxy.get(k).map_or(0, |c| c.load(Ordering::Relaxed)) as usize;
            ProxyReport {
                pid,
                players: n,
                cpu_cores: cores[k],
                rss_kib_before: rss_before[k],
                rss_kib_after: after,
                rss_kib_per_player: after.saturating_sub(rss_before[k]) as f64 / n.max(1) as f64,
                fds: metrics::fd_count(pid),
            }
        })
        .collect();

    // Grace for the answers of the last ticks, then every player leaves.
    tokio::time::sleep(Duration::from_millis(500)).await;
    stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(30), async { while tasks.join_next().await.is_some() {} }).await;
    if !tasks.is_empty() {
        shared.failures.push(format!("{} players did not stop within 30 s (their ticks are not counted)", tasks.len()));
        tasks.abort_all();
    }
    drop(proxies);
    drop(backend);

    let mut rtt = std::mem::take(&mut *shared.rtt_us.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    let mut late = std::mem::take(&mut *shared.late_us.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
    rtt.sort_unstable();
    late.sort_unstable();
    let n = args.proxies;
    let ticks_answered = shared.ticks_answered.load(Ordering::Relaxed);
    let proxy_cores: f64 = cores[..n].iter().sum();
    let report = Report {
        via: peer.map_or("moonbridge", PeerArg::name),
        transport: args.transport,
        idle: args.idle,
        active: args.active,
        load: args.load,
        carriage: (args.transport != TransportArg::Tcp).then_some(args.carriage),
        proxies: n,
        seconds: args.seconds,
        join_seconds,
        in_play,
        failed_to_join: shared.failed_to_join.load(Ordering::Relaxed),
        dropped: shared.dropped.load(Ordering::Relaxed),
        ticks_expected: args.active as u64 * args.seconds * (1000 / TICK_MS),
        ticks_sent: shared.ticks_sent.load(Ordering::Relaxed),
        ticks_answered: shared.ticks_answered.load(Ordering::Relaxed),
        ticks_unanswered: shared.ticks_unanswered.load(Ordering::Relaxed),
        rtt_ms_p50: percentile_ms(&rtt, 50.0),
        rtt_ms_p99: percentile_ms(&rtt, 99.0),
        rtt_ms_p999: percentile_ms(&rtt, 99.9),
        rtt_ms_max: rtt.last().map_or(0.0, |&m| f64::from(m) / 1000.0),
        timer_late_ms_p99: percentile_ms(&late, 99.0),
        kernel_tcp_kib_per_player: tcp_mem1.saturating_sub(tcp_mem0) as f64 / (in_play.max(1) as f64),
        proxy_cpu_cores: proxy_cores,
        proxy_cpu_us_per_tick: proxy_cores * wall * 1e6 / ticks_answered.max(1) as f64,
        load_generator_cpu_cores: cores[n],
        backend_cpu_cores: cores[n + 1],
        proxy,
        failures: shared.failures.list(),
    };
    report::emit(args.json, &report, print_report)?;
    let mut problems = report.failures.clone();
    if report.in_play < players as u64 {
        problems.push(format!("{} of {players} players were in play at the end of the measurement", report.in_play));
    }
    if args.active > 0 && report.ticks_answered == 0 {
        problems.push("no tick was answered".into());
    }
    // The ticks sent in the last round trip of the window may still be on their way when the players leave.
    if report.ticks_answered + 3 * (args.active as u64) < report.ticks_sent {
        problems.push(format!("{} ticks sent, {} answered", report.ticks_sent, report.ticks_answered));
    }
    // A load generator that cannot keep its players' ticks going measures itself, not the proxy.
    if (report.ticks_sent as f64) < 0.98 * report.ticks_expected as f64 {
        problems.push(format!(
            "the players sent {} of the {} ticks due (under 98%): the load generator was short of CPU",
            report.ticks_sent, report.ticks_expected
        ));
    }
    if report.rtt_ms_p99 > args.p99_limit_ms as f64 {
        problems.push(format!(
            "p99 tick round trip {:.1} ms is over the limit of {} ms",
            report.rtt_ms_p99, args.p99_limit_ms
        ));
    }
    if !problems.is_empty() {
        // What the processes said, before their directory goes (kept with MOONBRIDGE_KEEP_TEST_FILES=1): the
        // first 20 lines of each that are not a session's normal end.
        let logs = (0..args.proxies).map(|p| format!("proxy-{p}.log")).chain(["backend.log".to_string()]);
        for name in logs {
            let lines = report::log_lines(&dir.join(&name));
            let notable: Vec<&String> = lines.iter().filter(|l| !l.contains("session ended")).collect();
            eprintln!("--- {name}: {} notable lines, the first 20 ---", notable.len());
            for l in notable.iter().take(20) {
                eprintln!("{l}");
            }
        }
        bail!("capacity run failed:\n  {}", problems.join("\n  "));
    }
    Ok(report)
}
