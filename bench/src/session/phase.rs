//! One phase of the session benchmark: a variant's clients (busy and light) log in, warm up and run their
//! timed round trips, and the phase's figures are read around them (CPU, memory, segments, wire bytes).

use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use clap::ValueEnum;

use super::args::SessionArgs;
use super::report::PhaseResult;
use super::variants::Variant;
use crate::client::{run_client, ClientSpec, Sync};
use crate::{metrics, workload};

#[allow(clippy::too_many_arguments)]
/// Runs one phase of `variant`: its clients log in, warm up, then run the timed round trips, measured.
pub fn run_phase(
    args: &SessionArgs,
    repeat: usize,
    variant: &Variant,
    templates: &Arc<Vec<Vec<workload::Spec>>>,
    ticks_per_s: u64,
    backend_errors: &crate::backend::BackendStats,
) -> anyhow::Result<PhaseResult> {
    let profile = args.profile.backend();
    let light = args.light_connections;
    let sync = Sync::new(args.connections + light, args.connections);
    let rss_before = variant.pid.and_then(metrics::rss_kib);
    // Busy (false) and light (true) players in connection order.
    let mut order = Vec::new();
    for i in 0..args.connections.max(light) {
        if i < light {
            order.push(true);
        }
        if i < args.connections {
            order.push(false);
        }
    }
    let io_start = variant.metrics.and_then(metrics::ws_wire_bytes);
    if let Some(r) = &variant.relink {
        r.before_login();
    }
    let mut handles = Vec::new();
    for (i, &is_light) in order.iter().enumerate() {
        let spec = ClientSpec {
            url: variant.url.clone(),
            options: variant.options.clone(),
            profile,
            warmup: if is_light { 10 } else { args.warmup },
            messages: args.messages,
            window: args.window.max(1),
            payload: args.payload.max(8),
            burst: args.burst.max(1),
            end_ticks: args.client_coalesce == 1,
            name: format!("Bench{repeat}x{i}"),
            online: variant.online,
            pace: is_light.then(|| Duration::from_millis(args.light_tick_ms.max(1))),
            switches: if is_light { 0 } else { variant.switches },
        };
        let (t, s) = (Arc::clone(templates), Arc::clone(&sync));
        handles.push(std::thread::Builder::new().name("bench-client".into()).spawn(move || run_client(spec, t, s))?);
        if light > 0 {
            // Connect in this order: the next client starts after this one logged in (or failed).
            let deadline = Instant::now() + Duration::from_secs(60);
            while sync.logged_in.load(std::sync::atomic::Ordering::Relaxed) <= i {
                if Instant::now() > deadline {
                    bail!("client {i} did not log in within 60 s");
                }
                std::thread::sleep(Duration::from_millis(1));
            }
        }
    }
    sync.logged.wait();
    let io_logged = variant.metrics.and_then(metrics::ws_wire_bytes);
    if let Some(r) = &variant.relink {
        // During the warmup: every player resumes through the other instance.
        r.after_login(args.connections + light)?;
    }
    sync.warmed.wait();
    let rss_after_login = variant.pid.and_then(metrics::rss_kib);
    let errors_before = backend_errors.errors.load(std::sync::atomic::Ordering::Relaxed);
    let cpu = |v: &Variant| {
        let main = v.pid.and_then(|p| metrics::process_cpu(p, ticks_per_s))?;
        let also = v.also_pid.map_or(Some(Duration::ZERO), |p| metrics::process_cpu(p, ticks_per_s))?;
        Some(main + also)
    };
    let proxy0 = cpu(variant);
    let client0 = metrics::threads_cpu("bench-client", ticks_per_s);
    let io0 = metrics::threads_cpu("moonbridge-io", ticks_per_s);
    let seg0 = metrics::tcp_out_segments();
    let wire0 = variant.metrics.and_then(metrics::ws_wire_bytes);
    let started = Instant::now();
    sync.go.wait();
    sync.done.wait();
    let elapsed = started.elapsed();
    let proxy1 = cpu(variant);
    let client1 = metrics::threads_cpu("bench-client", ticks_per_s);
    let io1 = metrics::threads_cpu("moonbridge-io", ticks_per_s);
    let seg1 = metrics::tcp_out_segments();
    let wire1 = variant.metrics.and_then(metrics::ws_wire_bytes);
    sync.release.wait();
    let results: Vec<_> = handles.into_iter().map(|h| h.join().unwrap_or_default()).collect();

    let mut errors = backend_errors.errors.load(std::sync::atomic::Ordering::Relaxed) - errors_before;
    let mut latencies = Vec::new();
    let (mut frames, mut round_trips, mut messages_up) = (0u64, 0u64, 0u64);
    let mut bursts = Vec::new();
    let mut light_p99: Option<f64> = None;
    let mut switch_times: Vec<Duration> = results.iter().flat_map(|r| r.switch_times.iter().copied()).collect();
    switch_times.sort_unstable();
    let switch_ms =
        |p: f64| (!switch_times.is_empty()).then(|| metrics::percentile(&switch_times, p).as_secs_f64() * 1000.0);
    for (r, &is_light) in results.iter().zip(&order) {
        if let Some(e) = &r.error {
            eprintln!("error: {e}");
            errors += 1;
        }
        if is_light {
            let mut own = r.latencies.clone();
            own.sort_unstable();
            let p99 = metrics::percentile(&own, 99.0).as_secs_f64() * 1000.0;
            light_p99 = Some(light_p99.map_or(p99, |w| w.max(p99)));
        } else {
            latencies.extend_from_slice(&r.latencies);
        }
        frames += r.frames;
        round_trips += r.round_trips;
        messages_up += r.stats.messages_out;
        bursts.push(r.login_burst.as_secs_f64() * 1000.0);
    }
    latencies.sort_unstable();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let per_frame = |d: Duration| if frames == 0 { f64::NAN } else { d.as_nanos() as f64 / frames as f64 };
    let client_cpu = client1.saturating_sub(client0) + io1.saturating_sub(io0);
    Ok(PhaseResult {
        repeat,
        variant: variant.name.clone(),
        transport: if variant.name == "direct" { "tcp".into() } else { format!("{:?}", args.transport).to_lowercase() },
        // The name given on the command line (`forge-channels`).
        profile: args.profile.to_possible_value().map(|v| v.get_name().to_owned()).unwrap_or_default(),
        window: args.window,
        client_coalesce: args.client_coalesce,
        connections: args.connections,
        frames,
        frames_per_s: frames as f64 / elapsed.as_secs_f64(),
        p50_ms: ms(metrics::percentile(&latencies, 50.0)),
        p95_ms: ms(metrics::percentile(&latencies, 95.0)),
        p99_ms: ms(metrics::percentile(&latencies, 99.0)),
        proxy_cpu_ns_per_frame: match (proxy0, proxy1) {
            (Some(a), Some(b)) => Some(per_frame(b.saturating_sub(a))),
            _ => None,
        },
        client_cpu_ns_per_frame: per_frame(client_cpu),
        client_io_cpu_ns_per_frame: per_frame(io1.saturating_sub(io0)),
        client_cpu_ns_per_tick: if round_trips == 0 {
            f64::NAN
        } else {
            client_cpu.as_nanos() as f64 / round_trips as f64
        },
        messages_per_tick_up: if round_trips == 0 { f64::NAN } else { messages_up as f64 / round_trips as f64 },
        tcp_segments_per_frame: match (seg0, seg1) {
            (Some(a), Some(b)) if frames > 0 => Some((b - a) as f64 / frames as f64),
            _ => None,
        },
        login_burst_ms: metrics::median_range(&bursts).0,
        proxy_rss_kib_per_conn: match (rss_before, rss_after_login) {
            (Some(a), Some(b)) => Some(b.saturating_sub(a) as f64 / (args.connections + light) as f64),
            _ => None,
        },
        light_connections: light,
        light_p99_ms: light_p99,
        client_compress: args.client_compress,
        // The proxy's WebSocket frame bytes (moonbridge_ws_bytes_total), over the logins and the timed phase.
        login_wire_bytes: match (io_start, io_logged) {
            (Some(a), Some(b)) => Some(b.1.saturating_sub(a.1) as f64 / (args.connections + light) as f64),
            _ => None,
        },
        wire_bytes_down_per_tick: match (wire0, wire1) {
            (Some(a), Some(b)) if round_trips > 0 => Some(b.1.saturating_sub(a.1) as f64 / round_trips as f64),
            _ => None,
        },
        wire_bytes_up_per_tick: match (wire0, wire1) {
            (Some(a), Some(b)) if round_trips > 0 => Some(b.0.saturating_sub(a.0) as f64 / round_trips as f64),
            _ => None,
        },
        switches: switch_times.len(),
        switch_p50_ms: switch_ms(50.0),
        switch_p95_ms: switch_ms(95.0),
        errors,
    })
}
