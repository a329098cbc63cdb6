//! The session benchmark's report: one line (or JSON object) per phase, and the summary over the repeats
//! (median and [min–max] per variant, and per-pair ratios).

use crate::metrics;

/// One phase's figures.
#[derive(Debug, Clone, serde::Serialize)]
pub struct PhaseResult {
    pub repeat: usize,
    pub variant: String,
    pub transport: String,
    pub profile: String,
    pub window: usize,
    pub client_coalesce: u8,
    pub connections: usize,
    pub frames: u64,
    pub frames_per_s: f64,
    pub p50_ms: f64,
    pub p95_ms: f64,
    pub p99_ms: f64,
    pub proxy_cpu_ns_per_frame: Option<f64>,
    pub client_cpu_ns_per_frame: f64,
    pub client_io_cpu_ns_per_frame: f64,
    pub client_cpu_ns_per_tick: f64,
    pub messages_per_tick_up: f64,
    pub tcp_segments_per_frame: Option<f64>,
    pub login_burst_ms: f64,
    pub proxy_rss_kib_per_conn: Option<f64>,
    /// Light players (`--light-connections`).
    pub light_connections: usize,
    /// The worst light player's 99th-percentile round trip, in ms (none without light players).
    pub light_p99_ms: Option<f64>,
    /// 1 when the clients offered `moonbridge.v2.zstd`.
    pub client_compress: u8,
    /// Bytes of WebSocket frames the proxy wrote to the players per login (its `moonbridge_ws_bytes_total`,
    /// framing included, before TLS).
    pub login_wire_bytes: Option<f64>,
    /// The same per tick (round trip) in the timed phase, towards the player and from it.
    pub wire_bytes_down_per_tick: Option<f64>,
    pub wire_bytes_up_per_tick: Option<f64>,
    /// Server transfers done before the warmup (`--mode post-transfer`), and their median and 95th-percentile
    /// time in ms (from the request to the end of the world reset at the client).
    pub switches: usize,
    pub switch_p50_ms: Option<f64>,
    pub switch_p95_ms: Option<f64>,
    pub errors: u64,
}

/// Prints one phase: a JSON object or a text line.
pub fn print_phase(r: &PhaseResult, json: bool) {
    if json {
        println!("{}", serde_json::to_string(r).unwrap_or_default());
        return;
    }
    let opt = |v: Option<f64>, prec: usize| v.map_or("-".to_string(), |x| format!("{x:.prec$}"));
    println!(
        "repeat={} variant={} transport={} profile={} window={} coalesce={} frames_per_s={:.0} p50_ms={:.3} p95_ms={:.3} p99_ms={:.3} \
         proxy_cpu_ns_per_frame={} client_cpu_ns_per_frame={:.0} client_io_cpu_ns_per_frame={:.0} client_cpu_ns_per_tick={:.0} \
         messages_per_tick_up={:.2} tcp_segments_per_frame={} login_burst_ms={:.1} proxy_rss_kib_per_conn={} light_p99_ms={} login_wire_bytes={} \
         wire_bytes_down_per_tick={} wire_bytes_up_per_tick={} switches={} switch_p50_ms={} switch_p95_ms={} errors={}",
        r.repeat, r.variant, r.transport, r.profile, r.window, r.client_coalesce, r.frames_per_s, r.p50_ms, r.p95_ms, r.p99_ms,
        opt(r.proxy_cpu_ns_per_frame, 0), r.client_cpu_ns_per_frame, r.client_io_cpu_ns_per_frame, r.client_cpu_ns_per_tick,
        r.messages_per_tick_up, opt(r.tcp_segments_per_frame, 3), r.login_burst_ms, opt(r.proxy_rss_kib_per_conn, 0), opt(r.light_p99_ms, 3), opt(r.login_wire_bytes, 0),
        opt(r.wire_bytes_down_per_tick, 0), opt(r.wire_bytes_up_per_tick, 0), r.switches, opt(r.switch_p50_ms, 1),
        opt(r.switch_p95_ms, 1), r.errors
    );
}

/// Prints the summary over the repeats (text only).
pub fn summary(results: &[PhaseResult], variants: &[String], json: bool) {
    if json {
        return;
    }
    println!("# summary: median [min-max] over repeats");
    for v in variants {
        let rs: Vec<&PhaseResult> = results.iter().filter(|r| &r.variant == v).collect();
        let col = |f: &dyn Fn(&PhaseResult) -> Option<f64>| {
            let vals: Vec<f64> = rs.iter().filter_map(|r| f(r)).collect();
            let (m, lo, hi) = metrics::median_range(&vals);
            format!("{m:.1} [{lo:.1}-{hi:.1}]")
        };
        println!(
            "{v}: frames_per_s {} | p50_ms {} | proxy_cpu_ns_per_frame {} | client_cpu_ns_per_frame {} | login_burst_ms {} | messages_per_tick_up {} | light_p99_ms {} | login_wire_bytes {} | wire_bytes_down_per_tick {} | switch_p50_ms {} | switch_p95_ms {}",
            col(&|r| Some(r.frames_per_s)),
            col(&|r| Some(r.p50_ms)),
            col(&|r| r.proxy_cpu_ns_per_frame),
            col(&|r| Some(r.client_cpu_ns_per_frame)),
            col(&|r| Some(r.login_burst_ms)),
            col(&|r| Some(r.messages_per_tick_up)),
            col(&|r| r.light_p99_ms),
            col(&|r| r.login_wire_bytes),
            col(&|r| r.wire_bytes_down_per_tick),
            col(&|r| r.switch_p50_ms),
            col(&|r| r.switch_p95_ms),
        );
    }
    // Per-pair ratios within each repeat.
    let pairs = |a: &str, b: &str, f: &dyn Fn(&PhaseResult) -> Option<f64>| -> Vec<f64> {
        let repeats: Vec<usize> = results.iter().map(|r| r.repeat).collect();
        let mut out = Vec::new();
        for rep in repeats.iter().copied().collect::<std::collections::BTreeSet<_>>() {
            let x = results.iter().find(|r| r.repeat == rep && r.variant == a).and_then(f);
            let y = results.iter().find(|r| r.repeat == rep && r.variant == b).and_then(f);
            if let (Some(x), Some(y)) = (x, y) {
                out.push(x / y);
            }
        }
        out
    };
    let show = |name: &str, v: Vec<f64>| {
        if !v.is_empty() {
            let (m, lo, hi) = metrics::median_range(&v);
            let each: Vec<String> = v.iter().map(|x| format!("{x:.2}")).collect();
            println!("{name}: median {m:.2} [{lo:.2}-{hi:.2}] per pair: {}", each.join(", "));
        }
    };
    if variants.iter().any(|v| v == "direct") && variants.iter().any(|v| v == "moonbridge") {
        show("moonbridge/direct frames_per_s", pairs("moonbridge", "direct", &|r| Some(r.frames_per_s)));
    }
    if variants.iter().any(|v| v == "moonbridge-online") {
        show(
            "moonbridge-online/moonbridge proxy_cpu_ns_per_frame",
            pairs("moonbridge-online", "moonbridge", &|r| r.proxy_cpu_ns_per_frame),
        );
        show(
            "moonbridge-online/moonbridge frames_per_s",
            pairs("moonbridge-online", "moonbridge", &|r| Some(r.frames_per_s)),
        );
    }
    for v in ["moonbridge-transfer", "moonbridge-switched"] {
        if variants.iter().any(|x| x == v) {
            show(
                &format!("{v}/moonbridge proxy_cpu_ns_per_frame"),
                pairs(v, "moonbridge", &|r| r.proxy_cpu_ns_per_frame),
            );
            show(&format!("{v}/moonbridge p50_ms"), pairs(v, "moonbridge", &|r| Some(r.p50_ms)));
        }
    }
    let transfer_variants = ["direct", "moonbridge", "moonbridge-online", "moonbridge-transfer", "moonbridge-switched"];
    for peer in variants.iter().filter(|v| !transfer_variants.contains(&v.as_str())) {
        show(
            &format!("moonbridge/{peer} proxy_cpu_ns_per_frame"),
            pairs("moonbridge", peer, &|r| r.proxy_cpu_ns_per_frame),
        );
        show(&format!("moonbridge/{peer} frames_per_s"), pairs("moonbridge", peer, &|r| Some(r.frames_per_s)));
    }
}
