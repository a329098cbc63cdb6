//! The proxy in this process, on ephemeral ports ([`Proxy`]), and config builders.

use std::net::SocketAddr;
use std::time::Duration;

use moonbridge_proxy::config::{RateLimitsConfig, Transport};
use moonbridge_proxy::{Config, Server, StatsHandle};
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

/// Raises this process's open-file limit (tests open thousands of sockets).
pub fn raise_fd_limit() {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
}

/// The proxy running in this process.
pub struct Proxy {
    pub addrs: Vec<(Transport, SocketAddr)>,
    /// The `[metrics]` listener, when configured.
    pub metrics: Option<SocketAddr>,
    pub stats: StatsHandle,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy from TOML text. Every listener should bind `127.0.0.1:0`.
    pub async fn start(toml: &str) -> Self {
        let config = Config::from_toml(toml).expect("test config parses");
        Self::start_config(&config).await
    }

    /// Every test connection comes from a loopback address, so the per-address rate limits are turned off
    /// unless the test configures `[rate_limits]` itself.
    pub async fn start_config(config: &Config) -> Self {
        let mut config = config.clone();
        if config.rate_limits == RateLimitsConfig::default() {
            config.rate_limits.connections_per_second = 0;
            config.rate_limits.logins_per_minute = 0;
        }
        let server = Server::bind(&config).await.expect("proxy binds");
        let addrs = server.local_addrs();
        let metrics = server.metrics_addr();
        let stats = server.stats_handle();
        let stop = CancellationToken::new();
        let s = stop.clone();
        let task = tokio::spawn(async move { server.run(s.cancelled_owned()).await });
        Self { addrs, metrics, stats, stop, task }
    }

    /// The address of the first listener of `transport`.
    pub fn addr(&self, transport: Transport) -> SocketAddr {
        self.addrs.iter().find(|(t, _)| *t == transport).map(|(_, a)| *a).expect("listener of that transport")
    }

    /// Signals shutdown (as SIGTERM would) and waits for the server to return.
    pub async fn shutdown(self) {
        self.stop.cancel();
        timeout(Duration::from_secs(30), self.task).await.expect("proxy stops in time").expect("proxy task");
    }

    /// Waits for the server to return by itself (after `POST /drain`, say), at most `within`.
    pub async fn wait_exit(self, within: Duration) {
        timeout(within, self.task).await.expect("proxy stops in time").expect("proxy task");
    }

    /// Waits until open connections drop to `n`.
    pub async fn wait_connections(&self, n: usize, within: Duration) {
        let stats = self.stats.clone();
        let ok = timeout(within, async {
            loop {
                if stats.stats().connections == n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(ok.is_ok(), "expected {n} open connections, have {:?}", self.stats.stats());
    }
}

/// A one-backend proxy config with a TCP listener on an ephemeral port. `extra` is appended verbatim.
pub fn tcp_config(backend: SocketAddr, extra: &str) -> String {
    format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\n[[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n{extra}\n"
    )
}

/// A `ws` listener on an ephemeral port, path `/mc`; `extra` is appended to its table.
pub fn ws_listener(extra: &str) -> String {
    format!("[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\n{extra}\n")
}

/// A `[[backend]]` named `survival` at `addr`; `extra` is appended to its table.
pub fn backend_section(addr: SocketAddr, extra: &str) -> String {
    format!("[[backend]]\nname = \"survival\"\naddress = \"{addr}\"\n{extra}\n")
}

/// The resident set size (VmRSS) of process `pid`, in KiB.
pub fn rss_kib(pid: u32) -> u64 {
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap();
    let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
    line.split_whitespace().nth(1).unwrap().parse().unwrap()
}

/// The `moonbridge` binary next to the running test (`target/<profile>/moonbridge`, built by
/// `cargo build --workspace` before the tests, as `scripts/test-all.sh` does).
pub fn moonbridge_bin() -> std::path::PathBuf {
    let exe = std::env::current_exe().unwrap();
    let bin = exe.parent().and_then(|deps| deps.parent()).unwrap().join("moonbridge");
    assert!(bin.is_file(), "{} is built (cargo build --workspace)", bin.display());
    bin
}

/// A child process killed and reaped when dropped, also when the test fails and unwinds.
#[derive(Debug)]
pub struct KillOnDrop(pub std::process::Child);

impl Drop for KillOnDrop {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// Starts the `moonbridge` binary `bin` as its own process with `config` (errors only on stderr, dropped) and
/// waits until `listens_on` accepts connections (at most 20 s).
pub async fn spawn_proxy_process(bin: &str, config: &std::path::Path, listens_on: SocketAddr) -> std::process::Child {
    // `MOONBRIDGE_TEST_LOG=<dir>`: the process logs at info level to `<dir>/<port>.log` (for a look at a run).
    let (level, stderr) = match std::env::var_os("MOONBRIDGE_TEST_LOG") {
        Some(dir) => {
            let file = std::fs::File::create(std::path::Path::new(&dir).join(format!("{}.log", listens_on.port())));
            ("info", file.map_or_else(|_| std::process::Stdio::null(), std::process::Stdio::from))
        }
        None => ("error", std::process::Stdio::null()),
    };
    let child = std::process::Command::new(bin)
        .arg("--config")
        .arg(config)
        .env("RUST_LOG", level)
        .stderr(stderr)
        .spawn()
        .unwrap_or_else(|e| panic!("cannot start {bin}: {e}"));
    timeout(Duration::from_secs(20), async {
        while tokio::net::TcpStream::connect(listens_on).await.is_err() {
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    })
    .await
    .expect("the proxy listens within 20 s");
    child
}

/// A proxy with one `ws` listener (path `/mc`) in front of the backend `survival` at `backend`; `extra` is
/// appended (a `[limits]` or `[compression]` table).
pub async fn ws_proxy(backend: SocketAddr, extra: &str) -> Proxy {
    Proxy::start(&format!("{}{}{extra}", ws_listener("path = \"/mc\""), backend_section(backend, ""))).await
}

/// The value of the sample `series` (name and labels exactly as exposed) in a Prometheus exposition.
pub fn sample(exposition: &str, series: &str) -> Option<f64> {
    exposition.lines().find_map(|l| l.strip_prefix(series)?.strip_prefix(' ')?.trim().parse().ok())
}

impl Proxy {
    /// The value of `series` on the proxy's `[metrics]` listener now (`None` without the listener or the
    /// series).
    pub async fn metric(&self, series: &str) -> Option<f64> {
        let reply = crate::raw_http(self.metrics?, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
        sample(reply.split_once("\r\n\r\n")?.1, series)
    }
}
