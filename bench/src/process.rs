//! The processes a run starts (the proxy, a peer, the capacity backend): spawning them with their output
//! echoed or written to a log, waiting until they listen, and killing them when dropped.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use moonbridge_test_certs::ChildLog;

/// A process killed (and reaped) when dropped.
pub struct Child(pub std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Where a spawned process's standard error goes.
#[derive(Clone, Copy)]
pub enum Output<'a> {
    /// Printed line by line to ours after this prefix (its stdin closed).
    Echo(&'a str),
    /// Written to this file (its stdin inherited).
    File(&'a Path),
}

/// A spawned process, killed when dropped.
pub enum Process {
    Echoing(ChildLog),
    Logged(Child),
}

impl Process {
    /// Its process id.
    pub fn id(&self) -> u32 {
        match self {
            Self::Echoing(c) => c.id(),
            Self::Logged(c) => c.0.id(),
        }
    }
}

/// Spawns `command` with its standard error sent to `output`; `context` says what failed to start.
pub fn spawn(command: &mut Command, output: Output<'_>, context: impl FnOnce() -> String) -> anyhow::Result<Process> {
    match output {
        Output::Echo(prefix) => Ok(Process::Echoing(ChildLog::spawn_echoing(command, prefix).with_context(context)?)),
        Output::File(log) => {
            let stderr = std::fs::File::create(log)?;
            Ok(Process::Logged(Child(command.stderr(stderr).spawn().with_context(context)?)))
        }
    }
}

/// Starts the moonbridge binary `bin` with `config`, `RUST_LOG` set to `rust_log` and its standard output
/// discarded.
pub fn spawn_moonbridge(bin: &Path, config: &Path, rust_log: &str, output: Output<'_>) -> anyhow::Result<Process> {
    let mut command = Command::new(bin);
    command.arg("--config").arg(config).env("RUST_LOG", rust_log).stdout(Stdio::null());
    // The echoed proxies say which program it was; the logged ones name the binary only.
    let what = match output {
        Output::Echo(_) => "cannot start the proxy",
        Output::File(_) => "cannot start",
    };
    spawn(&mut command, output, || format!("{what} {}", bin.display()))
}

/// Waits (blocking) until something accepts connections on `addr`, for at most 20 s.
pub fn wait_for_port(addr: SocketAddr, what: &str) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while Instant::now() < deadline {
        if std::net::TcpStream::connect(addr).is_ok() {
            return Ok(());
        }
        std::thread::sleep(Duration::from_millis(20));
    }
    bail!("{what} did not listen on {addr} within 20 s")
}

/// Waits (async) until something accepts connections on `addr`, for at most 20 s; on failure, says so with
/// the first lines of `log` when there is one.
pub async fn wait_listening(addr: SocketAddr, what: &str, log: Option<&Path>) -> anyhow::Result<()> {
    let deadline = Instant::now() + Duration::from_secs(20);
    while tokio::net::TcpStream::connect(addr).await.is_err() {
        if Instant::now() > deadline {
            let Some(log) = log else { bail!("{what} did not listen within 20 s") };
            let said = std::fs::read_to_string(log).unwrap_or_default();
            let said: Vec<&str> = said.lines().take(10).collect();
            bail!("{what} did not listen within 20 s; its log ({}) begins:\n{}", log.display(), said.join("\n"));
        }
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    Ok(())
}
