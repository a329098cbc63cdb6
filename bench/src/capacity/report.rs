//! What the capacity run reports: per run (moonbridge, or the peer), the players, the tick round trips, each
//! proxy process's CPU, memory and file descriptors, and the CPU of the load generator and the backend.

use crate::backend::Load;
use crate::peers::TransportArg;
use crate::player::carriage::Carriage;

/// One proxy process in the report.
#[derive(Debug, serde::Serialize)]
pub struct ProxyReport {
    pub pid: u32,
    pub players: usize,
    /// CPU while measuring, in cores (1.0 = one core busy).
    pub cpu_cores: f64,
    pub rss_kib_before: u64,
    pub rss_kib_after: u64,
    /// (after − before) / players in play through it: the process's own memory (user space); the kernel's
    /// socket memory is in [`Report::kernel_tcp_kib_per_player`].
    pub rss_kib_per_player: f64,
    /// Open file descriptors with every player in play.
    pub fds: usize,
}

/// What `session-bench capacity` reports.
#[derive(Debug, serde::Serialize)]
pub struct Report {
    /// What the players went through: `moonbridge` or the peer's name.
    pub via: &'static str,
    pub transport: TransportArg,
    pub idle: usize,
    pub active: usize,
    pub load: Load,
    /// The WebSocket carriage (none on tcp).
    pub carriage: Option<Carriage>,
    pub proxies: usize,
    pub seconds: u64,
    /// From the first connect to the last Join Game.
    pub join_seconds: f64,
    /// Players in play at the end of the measurement.
    pub in_play: u64,
    pub failed_to_join: u64,
    pub dropped: u64,
    /// Ticks due while measuring: active players × seconds × 20.
    pub ticks_expected: u64,
    pub ticks_sent: u64,
    pub ticks_answered: u64,
    /// Counted ticks still unanswered when the players stopped (their age so far is in the percentiles).
    pub ticks_unanswered: u64,
    /// Round trips count from when a tick was due, so a late tick timer adds to them.
    pub rtt_ms_p50: f64,
    pub rtt_ms_p99: f64,
    pub rtt_ms_p999: f64,
    pub rtt_ms_max: f64,
    /// p99 of how late the players' tick timers fired: when high, the load generator was short of CPU.
    pub timer_late_ms_p99: f64,
    pub proxy: Vec<ProxyReport>,
    /// The kernel's TCP buffer memory (`/proc/net/sockstat` `mem`, whole machine, so the four socket ends of
    /// every player: load generator, proxy twice, backend), at the end of the measurement minus before the
    /// players joined, per player in play, in KiB.
    pub kernel_tcp_kib_per_player: f64,
    pub proxy_cpu_cores: f64,
    /// Proxy CPU per tick answered while measuring, in microseconds (the idle players' Keep Alive included).
    pub proxy_cpu_us_per_tick: f64,
    pub load_generator_cpu_cores: f64,
    pub backend_cpu_cores: f64,
    pub failures: Vec<String>,
}

/// Prints the report as text.
pub fn print_report(r: &Report) {
    println!(
        "players: {} in play of {} idle + {} active ({} failed to join, {} dropped); joined in {:.1} s",
        r.in_play, r.idle, r.active, r.failed_to_join, r.dropped, r.join_seconds
    );
    println!(
        "ticks over {} s: {} due, {} sent, {} answered, {} unanswered at the end; round trip (from when due) p50 \
         {:.2} ms, p99 {:.2} ms, p99.9 {:.2} ms, max {:.2} ms; tick timers late by {:.2} ms at p99",
        r.seconds,
        r.ticks_expected,
        r.ticks_sent,
        r.ticks_answered,
        r.ticks_unanswered,
        r.rtt_ms_p50,
        r.rtt_ms_p99,
        r.rtt_ms_p999,
        r.rtt_ms_max,
        r.timer_late_ms_p99
    );
    for p in &r.proxy {
        println!(
            "proxy pid {}: {} players, {:.2} cores, RSS {} → {} KiB ({:.1} KiB per player), {} fds",
            p.pid, p.players, p.cpu_cores, p.rss_kib_before, p.rss_kib_after, p.rss_kib_per_player, p.fds
        );
    }
    println!(
        "CPU (cores): {} {:.2} ({:.1} µs per tick), load generator {:.2}, backend {:.2}; kernel TCP buffers {:.1} \
         KiB per player",
        r.via,
        r.proxy_cpu_cores,
        r.proxy_cpu_us_per_tick,
        r.load_generator_cpu_cores,
        r.backend_cpu_cores,
        r.kernel_tcp_kib_per_player
    );
    for f in &r.failures {
        println!("failure: {f}");
    }
}
