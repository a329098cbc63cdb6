//! `session-bench soak --instances N` (N ≥ 2): the soak of a network of instances (docs/network.md).
//!
//! N moonbridge instances form a `[network]` on a `redis-server` this run starts on a free port (Debian's
//! package). Players reach them through two balancers in this process (one for the ws listeners, one for the
//! wss ones) that send every new connection to the next instance in turn (round robin, no affinity), and that
//! cut every connection they carry every `--fault-every` seconds (both sockets closed, no WebSocket Close: the
//! drop a CDN edge or a balancer restart causes). A reconnect therefore lands on any instance: its owner, or
//! another one that carries the session to the owner over an instance link.
//!
//! The players are the client library's own connections with its defaults (carriage v2: resume and zstd),
//! half over ws and half over wss, one thread each, playing the modded tick (one round trip per 50 ms game
//! tick) and checking every byte they receive against the backend's deterministic answers: a byte lost,
//! doubled or reordered across a resume fails the run.
//!
//! The run passes when every player is still in play at the end (no error, every answer checked), every
//! player resumed after every cut, some resumes were carried to their owner over an instance link (outcome
//! `forwarded`), and once the players have closed, every instance is back to no link and the network to no
//! player.

use std::net::SocketAddr;
use std::path::Path;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use moonbridge_client::Options;
use moonbridge_test_certs::{free_port, KeyType, TestCert, TestDir};

use super::args::SoakArgs;
use crate::backend::{self, Profile};
use crate::client::{self, ClientSpec, SoakPlayer};
use crate::network::{self, Redis, Switch};
use crate::process::{self, Output, Process};
use crate::workload;

/// One instance of the network.
struct Instance {
    _child: Process,
    ws: SocketAddr,
    wss: SocketAddr,
    metrics: SocketAddr,
}

/// Starts instance `i` with a ws and a wss listener, the bench backend and the `[network]` section.
fn start_instance(
    i: usize,
    bin: &Path,
    dir: &Path,
    cert: &TestCert,
    backend: SocketAddr,
    network_toml: &str,
    players: usize,
) -> anyhow::Result<Instance> {
    let ws = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let wss = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let metrics = SocketAddr::from(([127, 0, 0, 1], free_port()?));
    let config = dir.join(format!("instance-{i}.toml"));
    std::fs::write(
        &config,
        format!(
            "[[listener]]\ntransport = \"ws\"\nbind = \"{ws}\"\n\n\
             [[listener]]\ntransport = \"wss\"\nbind = \"{wss}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\n\
             [[backend]]\nname = \"bench\"\naddress = \"{backend}\"\n\n\
             [limits]\nmax_connections = {}\n\n\
             [rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n\n\
             [metrics]\nbind = \"{metrics}\"\n\n{network_toml}",
            cert.cert.display(),
            cert.key.display(),
            players * 2 + 100,
        ),
    )?;
    let child = process::spawn_moonbridge(bin, &config, "warn", Output::Echo(&format!("[moonbridge {i}] ")))?;
    process::wait_for_port(ws, "moonbridge (ws)")?;
    process::wait_for_port(wss, "moonbridge (wss)")?;
    Ok(Instance { _child: child, ws, wss, metrics })
}

/// The sum of `series` over every instance (a missing sample counts 0).
fn total(instances: &[Instance], series: &str) -> f64 {
    instances.iter().filter_map(|i| crate::metrics::scrape(i.metrics, series)).sum()
}

/// Runs the network soak (see the module documentation).
pub fn run(args: &SoakArgs) -> anyhow::Result<()> {
    if args.players < 2 {
        bail!("--instances needs at least 2 players (half over ws, half over wss)");
    }
    let dir = TestDir::new("moonbridge-soak-network")?;
    let cert = TestCert::generate_in(dir.path().to_owned(), "localhost", KeyType::Ec)?;
    let redis = Redis::start()?;
    let secret = network::write_secret(dir.path())?;
    let (backend_addr, backend_stats, _backend_rt) =
        backend::start(SocketAddr::from(([127, 0, 0, 1], 0)), Profile::Modded, 1)?;
    let mut instances = Vec::new();
    for i in 0..args.instances {
        let toml = network::network_toml(&redis, &secret);
        instances.push(start_instance(i, &args.proxy_bin, dir.path(), &cert, backend_addr, &toml, args.players)?);
    }
    for inst in &instances {
        network::wait_metric(
            inst.metrics,
            "moonbridge_network_instances",
            args.instances as f64,
            Duration::from_secs(20),
        )
        .context("the instances did not all see each other through Redis")?;
    }
    let ws_lb = Switch::round_robin(instances.iter().map(|i| i.ws).collect())?;
    let wss_lb = Switch::round_robin(instances.iter().map(|i| i.wss).collect())?;
    if !args.json {
        println!(
            "# {} instances on Redis at {}, {} players (ws and wss, client library defaults) through round-robin \
             balancers, every connection cut every {} s for {} s",
            args.instances, redis.url, args.players, args.fault_every, args.seconds
        );
    }

    let templates = Arc::new(workload::templates());
    let logged_in = Arc::new(AtomicUsize::new(0));
    let playing = Arc::new(AtomicUsize::new(1));
    let ws_options = Options::default();
    let wss_options = Options::from_json(Some(&serde_json::json!({ "ca_file": cert.ca }).to_string()))?;
    let mut handles = Vec::new();
    for p in 0..args.players {
        let wss = p % 2 == 1;
        let spec = ClientSpec {
            url: if wss {
                format!("wss://localhost:{}/mc", wss_lb.addr.port())
            } else {
                format!("ws://{}/mc", ws_lb.addr)
            },
            options: if wss { wss_options.clone() } else { ws_options.clone() },
            profile: Profile::Modded,
            warmup: 0,
            messages: 0,
            window: 1,
            payload: 0,
            burst: 0,
            end_ticks: true,
            name: format!("soak{p}"),
            online: false,
            pace: Some(Duration::from_millis(50)),
            switches: 0,
        };
        let (t, l, g) = (Arc::clone(&templates), Arc::clone(&logged_in), Arc::clone(&playing));
        handles.push(
            std::thread::Builder::new().name("bench-client".into()).spawn(move || {
                client::run_soak_player(&spec, &t, &l, &g).map_err(|e| format!("{}: {e:#}", spec.name))
            })?,
        );
    }
    let deadline = Instant::now() + Duration::from_secs(60);
    while logged_in.load(Ordering::Relaxed) < args.players && handles.iter().all(|h| !h.is_finished()) {
        if Instant::now() > deadline {
            break;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    let logged = logged_in.load(Ordering::Relaxed);

    // The schedule: a cut of every connection every `fault_every` seconds, the last one at least one period
    // before the end so that every player resumes and plays on after it.
    let began = Instant::now();
    let period = Duration::from_secs(args.fault_every.max(1));
    let mut cuts = 0u64;
    if logged == args.players {
        while began.elapsed() + 2 * period <= Duration::from_secs(args.seconds) {
            // Pacing the schedule, not synchronising: the players run on their own clock.
            std::thread::sleep(period);
            if handles.iter().any(|h| h.is_finished()) {
                break;
            }
            ws_lb.cut();
            wss_lb.cut();
            cuts += 1;
        }
        if let Some(rest) = Duration::from_secs(args.seconds).checked_sub(began.elapsed()) {
            std::thread::sleep(rest);
        }
    }
    playing.store(0, Ordering::Relaxed);
    let mut results: Vec<Result<SoakPlayer, String>> = Vec::new();
    for h in handles {
        results.push(h.join().unwrap_or_else(|_| Err("a player thread panicked".into())));
    }
    let elapsed = began.elapsed();

    let mut failures: Vec<String> = results.iter().filter_map(|r| r.as_ref().err().cloned()).collect();
    if logged < args.players {
        failures.push(format!("only {logged} of {} players logged in within 60 s", args.players));
    }
    let ok: Vec<&SoakPlayer> = results.iter().filter_map(|r| r.as_ref().ok()).collect();
    let round_trips: u64 = ok.iter().map(|p| p.round_trips).sum();
    let resumes: u64 = ok.iter().map(|p| p.resumes).sum();
    for (p, r) in results.iter().enumerate() {
        if let Ok(r) = r {
            if r.resumes < cuts {
                failures.push(format!("soak{p} resumed {} times after {cuts} cuts", r.resumes));
            }
        }
    }
    let forwarded = total(&instances, "moonbridge_resumes_total{outcome=\"forwarded\"}");
    let resumed = total(&instances, "moonbridge_resumes_total{outcome=\"resumed\"}");
    let link_bytes = total(&instances, "moonbridge_network_link_bytes_total{direction=\"to_owner\"}")
        + total(&instances, "moonbridge_network_link_bytes_total{direction=\"from_owner\"}");
    if cuts > 0 && forwarded == 0.0 {
        failures.push("no resume was carried to its owner over an instance link".into());
    }
    let backend_errors = backend_stats.errors.load(Ordering::Relaxed);
    if backend_errors > 0 {
        failures.push(format!("the backend saw {backend_errors} sessions with bytes other than the players sent"));
    }
    // Once the players have closed: no link left on any instance, no player left on the network.
    for (i, inst) in instances.iter().enumerate() {
        for series in ["moonbridge_network_link_sessions", "moonbridge_network_players"] {
            if let Err(e) = network::wait_metric(inst.metrics, series, 0.0, Duration::from_secs(20)) {
                failures.push(format!("instance {i}: {e:#}"));
            }
        }
    }

    if args.json {
        println!(
            "{}",
            serde_json::json!({
                "mode": "soak-network",
                "instances": args.instances,
                "players": args.players,
                "logged_in": logged,
                "seconds": elapsed.as_secs_f64(),
                "cuts": cuts,
                "round_trips": round_trips,
                "client_resumes": resumes,
                "resumes_at_owner": resumed,
                "resumes_forwarded": forwarded,
                "link_bytes": link_bytes,
                "failures": failures,
            })
        );
    } else {
        println!(
            "players {}/{} in play, {cuts} cuts in {:.0} s, {round_trips} round trips checked byte for byte, \
             {resumes} resumes ({resumed} taken by the owner, {forwarded} of them carried over an instance link, {:.1} MiB on \
             links)",
            ok.len(),
            args.players,
            elapsed.as_secs_f64(),
            link_bytes / (1024.0 * 1024.0)
        );
        for f in &failures {
            println!("FAIL {f}");
        }
    }
    if !failures.is_empty() {
        bail!("the network soak failed: {} problem(s)", failures.len());
    }
    Ok(())
}
