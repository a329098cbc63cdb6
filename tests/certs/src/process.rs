//! Child processes for the tests and the benchmark: a free local port to give a child, and a spawned binary
//! whose stderr is read line by line on its own thread ([`ChildLog`]).

use std::io::{self, BufRead, BufReader};
use std::process::{Child, Command, Stdio};
use std::sync::mpsc;
use std::time::{Duration, Instant};

/// A TCP port on 127.0.0.1 that was free a moment ago, for a child process that cannot report the port it
/// bound, or a listener restarted on the same port. It is taken below the kernel's ephemeral range
/// (`net.ipv4.ip_local_port_range`): a port the kernel hands to outgoing connections could be taken by one of
/// them while the listener is down between two runs (a restart failed so in CI: `AddrInUse` on a freed metrics
/// port while the balancers and Prometheus kept connecting). Each call of a process tries the next port of its
/// own sequence (the process id spreads concurrent processes apart) until one binds; another process could
/// still take it in between, which on a test machine does not happen in practice.
///
/// # Errors
/// No port of the range binds, or binding 127.0.0.1:0 failed (the fallback when the range is empty).
pub fn free_port() -> io::Result<u16> {
    use std::sync::atomic::{AtomicU32, Ordering};
    static NEXT: AtomicU32 = AtomicU32::new(0);
    const LOWEST: u32 = 10_000;
    let ephemeral_low = std::fs::read_to_string("/proc/sys/net/ipv4/ip_local_port_range")
        .ok()
        .and_then(|r| r.split_whitespace().next()?.parse::<u32>().ok())
        .unwrap_or(32_768);
    let size = ephemeral_low.saturating_sub(LOWEST);
    if size == 0 {
        return Ok(std::net::TcpListener::bind("127.0.0.1:0")?.local_addr()?.port());
    }
    let start = std::process::id().wrapping_mul(7_919) % size;
    for _ in 0..size {
        let n = NEXT.fetch_add(1, Ordering::Relaxed);
        let port = u16::try_from(LOWEST + (start + n) % size).unwrap_or(0);
        if port != 0 && std::net::TcpListener::bind(("127.0.0.1", port)).is_ok() {
            return Ok(port);
        }
    }
    Err(io::Error::new(io::ErrorKind::AddrInUse, "no free port below the ephemeral range"))
}

/// A child process whose stderr lines are read on a thread, so the child never blocks on a full pipe; killed
/// and reaped when dropped.
#[derive(Debug)]
pub struct ChildLog {
    child: Child,
    /// The stderr lines, in order (none when the lines are echoed instead).
    lines: mpsc::Receiver<String>,
}

impl ChildLog {
    /// Spawns `command` with stderr piped (stdout goes to null unless `command` set it) and keeps its stderr
    /// lines for [`ChildLog::wait_line`].
    ///
    /// # Errors
    /// The command could not be started.
    pub fn spawn(command: &mut Command) -> io::Result<Self> {
        Self::start(command, None)
    }

    /// As [`ChildLog::spawn`], but every stderr line is printed to this process's stderr after `prefix`
    /// instead of being kept (for long runs whose child logs only what a person should see).
    ///
    /// # Errors
    /// The command could not be started.
    pub fn spawn_echoing(command: &mut Command, prefix: &str) -> io::Result<Self> {
        Self::start(command, Some(prefix.to_owned()))
    }

    fn start(command: &mut Command, echo: Option<String>) -> io::Result<Self> {
        let mut child = command.stdin(Stdio::null()).stderr(Stdio::piped()).spawn()?;
        let (tx, lines) = mpsc::channel();
        if let Some(stderr) = child.stderr.take() {
            std::thread::spawn(move || {
                for line in BufReader::new(stderr).lines().map_while(Result::ok) {
                    match &echo {
                        Some(prefix) => eprintln!("{prefix}{line}"),
                        None => {
                            if tx.send(line).is_err() {
                                break;
                            }
                        }
                    }
                }
            });
        }
        Ok(Self { child, lines })
    }

    /// The next stderr line containing `needle`, skipping the others, within `within`; `None` when none came
    /// (the time passed, or the child closed its stderr).
    pub fn wait_line(&self, needle: &str, within: Duration) -> Option<String> {
        let deadline = Instant::now() + within;
        loop {
            match self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
                Ok(l) if l.contains(needle) => return Some(l),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
    }

    /// How many stderr lines containing `needle` come within `during` (the others are skipped).
    pub fn count_lines(&self, needle: &str, during: Duration) -> usize {
        let deadline = Instant::now() + during;
        let mut n = 0;
        while let Ok(l) = self.lines.recv_timeout(deadline.saturating_duration_since(Instant::now())) {
            n += usize::from(l.contains(needle));
        }
        n
    }

    /// The child's process id.
    pub fn id(&self) -> u32 {
        self.child.id()
    }

    /// The child itself (for `try_wait`, `wait`).
    pub fn child(&mut self) -> &mut Child {
        &mut self.child
    }
}

impl Drop for ChildLog {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn lines_are_found_in_order_and_a_missing_one_times_out() {
        let mut cmd = Command::new("sh");
        cmd.args(["-c", "echo one >&2; echo two >&2; echo three >&2"]);
        let log = ChildLog::spawn(&mut cmd).unwrap();
        assert_eq!(log.wait_line("tw", Duration::from_secs(10)).as_deref(), Some("two"));
        assert_eq!(log.wait_line("one", Duration::from_millis(500)), None, "already passed");
        assert_ne!(free_port().unwrap(), 0);
    }
}
