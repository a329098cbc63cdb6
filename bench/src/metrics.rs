//! Readings from /proc: process and thread CPU time, resident memory, what a process holds (file descriptors,
//! threads, sockets), the kernel's TCP memory and segment counters; the proxy's metrics; percentiles.

use std::time::Duration;

/// Clock ticks per second of `/proc/*/stat` times (`getconf CLK_TCK`, 100 on Linux almost everywhere).
pub fn clock_ticks_per_second() -> u64 {
    std::process::Command::new("getconf")
        .arg("CLK_TCK")
        .output()
        .ok()
        .and_then(|o| String::from_utf8(o.stdout).ok())
        .and_then(|s| s.trim().parse().ok())
        .filter(|t: &u64| *t > 0)
        .unwrap_or(100)
}

/// utime + stime of a `/proc/.../stat` line, in clock ticks; and the command name.
fn parse_stat(text: &str) -> Option<(String, u64)> {
    let open = text.find('(')?;
    let close = text.rfind(')')?;
    let comm = text.get(open + 1..close)?.to_string();
    let fields: Vec<&str> = text.get(close + 2..)?.split_whitespace().collect();
    // After "pid (comm) ", field 3 (state) is index 0, so utime (14) and stime (15) are 11 and 12.
    let utime: u64 = fields.get(11)?.parse().ok()?;
    let stime: u64 = fields.get(12)?.parse().ok()?;
    Some((comm, utime + stime))
}

/// The proxy's `moonbridge_ws_bytes_total` (from players, to players), scraped from its `[metrics]` listener:
/// the bytes of WebSocket frames on the player hop.
pub fn ws_wire_bytes(metrics: std::net::SocketAddr) -> Option<(u64, u64)> {
    let text = exposition(metrics)?;
    Some((
        sample(&text, "moonbridge_ws_bytes_total{direction=\"from_player\"}")? as u64,
        sample(&text, "moonbridge_ws_bytes_total{direction=\"to_player\"}")? as u64,
    ))
}

/// One sample of the proxy's metrics at `metrics`: `series` with its labels as exposed (for example
/// `moonbridge_network_link_sessions`).
pub fn scrape(metrics: std::net::SocketAddr, series: &str) -> Option<f64> {
    sample(&exposition(metrics)?, series)
}

/// The proxy's whole `/metrics` answer.
fn exposition(metrics: std::net::SocketAddr) -> Option<String> {
    use std::io::{Read, Write};
    let mut s = std::net::TcpStream::connect_timeout(&metrics, Duration::from_secs(2)).ok()?;
    s.set_read_timeout(Some(Duration::from_secs(2))).ok()?;
    s.write_all(b"GET /metrics HTTP/1.1\r\nHost: bench\r\nConnection: close\r\n\r\n").ok()?;
    let mut text = String::new();
    s.read_to_string(&mut text).ok()?;
    Some(text)
}

fn sample(text: &str, series: &str) -> Option<f64> {
    text.lines()
        .find_map(|l| l.strip_prefix(series).filter(|rest| rest.starts_with(' ')))
        .and_then(|v| v.trim().parse::<f64>().ok())
}

/// CPU time (user + system) of a whole process.
pub fn process_cpu(pid: u32, ticks_per_s: u64) -> Option<Duration> {
    let text = std::fs::read_to_string(format!("/proc/{pid}/stat")).ok()?;
    let (_, ticks) = parse_stat(&text)?;
    Some(Duration::from_nanos(ticks * 1_000_000_000 / ticks_per_s))
}

/// CPU time of this process's threads whose name starts with `prefix`.
pub fn threads_cpu(prefix: &str, ticks_per_s: u64) -> Duration {
    let mut ticks = 0;
    if let Ok(dir) = std::fs::read_dir("/proc/self/task") {
        for entry in dir.flatten() {
            if let Ok(text) = std::fs::read_to_string(entry.path().join("stat")) {
                if let Some((comm, t)) = parse_stat(&text) {
                    if comm.starts_with(prefix) {
                        ticks += t;
                    }
                }
            }
        }
    }
    Duration::from_nanos(ticks * 1_000_000_000 / ticks_per_s)
}

/// Resident set size of a process, in KiB.
pub fn rss_kib(pid: u32) -> Option<u64> {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).ok()?;
    status.lines().find(|l| l.starts_with("VmRSS:"))?.split_whitespace().nth(1)?.parse().ok()
}

/// TCP segments sent by the whole machine so far (`Tcp: OutSegs` in `/proc/net/snmp`).
pub fn tcp_out_segments() -> Option<u64> {
    let snmp = std::fs::read_to_string("/proc/net/snmp").ok()?;
    let mut tcp = snmp.lines().filter(|l| l.starts_with("Tcp:"));
    let names: Vec<&str> = tcp.next()?.split_whitespace().collect();
    let values: Vec<&str> = tcp.next()?.split_whitespace().collect();
    let i = names.iter().position(|n| *n == "OutSegs")?;
    values.get(i)?.parse().ok()
}

/// Nearest-rank percentile of sorted values: the smallest value with at least `p` percent at or below it.
pub fn percentile<T: Copy + Default>(sorted: &[T], p: f64) -> T {
    if sorted.is_empty() {
        return T::default();
    }
    let rank = ((p / 100.0) * sorted.len() as f64).ceil().max(1.0) as usize;
    sorted.get(rank.min(sorted.len()) - 1).copied().unwrap_or_default()
}

/// Median and range of a series.
pub fn median_range(values: &[f64]) -> (f64, f64, f64) {
    let mut v: Vec<f64> = values.iter().copied().filter(|x| x.is_finite()).collect();
    if v.is_empty() {
        return (f64::NAN, f64::NAN, f64::NAN);
    }
    v.sort_by(f64::total_cmp);
    let mid = v.len() / 2;
    let median = if v.len().is_multiple_of(2) { (v[mid - 1] + v[mid]) / 2.0 } else { v[mid] };
    (median, v[0], v[v.len() - 1])
}

/// What the proxy process holds at one moment (Linux `/proc`).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
pub struct Held {
    pub fds: usize,
    pub threads: usize,
    pub rss_kib: u64,
    /// The proxy's TCP sockets in CLOSE_WAIT (the peer closed, the proxy never did).
    pub close_wait: usize,
    /// The proxy's TCP sockets in any state.
    pub sockets: usize,
}

/// What process `pid` holds; sockets connected to `ignore_port` (the session server, whose HTTP client keeps a
/// few idle keep-alive connections by design) are not counted.
pub fn held(pid: u32, ignore_port: u16) -> Held {
    let mut h = Held::default();
    let mut inodes = std::collections::HashSet::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in dir.flatten() {
            h.fds += 1;
            if let Ok(target) = std::fs::read_link(e.path()) {
                let t = target.to_string_lossy();
                if let Some(inode) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                    inodes.insert(inode.to_string());
                }
            }
        }
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    for line in status.lines() {
        if let Some(v) = line.strip_prefix("Threads:") {
            h.threads = v.trim().parse().unwrap_or(0);
        }
        if let Some(v) = line.strip_prefix("VmRSS:") {
            h.rss_kib = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
        }
    }
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let remote_port =
                cols.get(2).and_then(|r| r.rsplit_once(':')).and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if let (Some(state), Some(inode)) = (cols.get(3), cols.get(9)) {
                if inodes.contains(*inode) && remote_port != Some(ignore_port) {
                    h.sockets += 1;
                    if *state == "08" {
                        h.close_wait += 1;
                    }
                }
            }
        }
    }
    h
}
/// The kernel's TCP buffer memory in KiB: `/proc/net/sockstat`'s `TCP: … mem N` (pages of 4 KiB).
pub fn kernel_tcp_kib() -> u64 {
    let text = std::fs::read_to_string("/proc/net/sockstat").unwrap_or_default();
    text.lines()
        .find_map(|l| l.strip_prefix("TCP:"))
        .and_then(|l| l.split_whitespace().skip_while(|w| *w != "mem").nth(1))
        .and_then(|v| v.parse::<u64>().ok())
        .map_or(0, |pages| pages * 4)
}

/// Open file descriptors of a process.
pub fn fd_count(pid: u32) -> usize {
    std::fs::read_dir(format!("/proc/{pid}/fd")).map(Iterator::count).unwrap_or(0)
}

/// CPU time of each process, in seconds.
pub fn cpu_seconds(pids: &[u32], ticks_per_s: u64) -> Vec<f64> {
    pids.iter().map(|&p| process_cpu(p, ticks_per_s).map_or(0.0, |d| d.as_secs_f64())).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn stat_fields() {
        let line = "1234 (moonbridge io) S 1 2 3 4 5 6 7 8 9 10 250 50 0 0 20 0 4 0 100 0";
        assert_eq!(parse_stat(line), Some(("moonbridge io".to_string(), 300)));
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<Duration> = (1..=100).map(Duration::from_millis).collect();
        assert_eq!(percentile(&v, 50.0), Duration::from_millis(50));
        assert_eq!(percentile(&v, 95.0), Duration::from_millis(95));
        assert_eq!(percentile(&v, 99.0), Duration::from_millis(99));
        assert_eq!(percentile(&v[..1], 99.0), Duration::from_millis(1));
        assert_eq!(median_range(&[3.0, 1.0, 2.0]), (2.0, 1.0, 3.0));
        assert_eq!(median_range(&[4.0, 1.0, 2.0, 3.0]), (2.5, 1.0, 4.0));
    }
}
