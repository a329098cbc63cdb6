//! `--mode network`: the cost of the instance link (docs/network.md). Two moonbridge instances (A and B) form a
//! `[network]` on a `redis-server` this run starts on a free port. Players reach them through a switch in this
//! process (a TCP splice that sends new connections to one instance and can cut every connection it carries):
//!
//! - `moonbridge-owner`: the switch always sends players to A, which holds their sessions;
//! - `moonbridge-linked`: players log in on A; after the login the switch turns to B and cuts every connection,
//!   so each client resumes at B, which carries the session to A over an instance link for the timed phase.
//!
//! Both variants cross the switch, and the proxy CPU of both is A's and B's together, so the difference is the
//! link: one more process hop (B) and the link socket.

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use moonbridge_test_certs::{free_port, ChildLog};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

/// A `redis-server` (Debian's package) on a free port of 127.0.0.1, without persistence; stopped on drop.
pub struct Redis {
    _child: ChildLog,
    pub url: String,
}

impl Redis {
    /// Starts it and waits until it accepts connections.
    pub fn start() -> anyhow::Result<Self> {
        let port = free_port()?;
        let child = ChildLog::spawn(
            Command::new("redis-server")
                .args(["--port", &port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
                .stdout(Stdio::null()),
        )
        .context("cannot start redis-server (Debian: apt-get install redis-server)")?;
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        let deadline = Instant::now() + Duration::from_secs(20);
        while std::net::TcpStream::connect(addr).is_err() {
            if Instant::now() > deadline {
                bail!("redis-server did not listen on {addr} within 20 s");
            }
            std::thread::sleep(Duration::from_millis(20));
        }
        Ok(Self { _child: child, url: format!("redis://{addr}/0") })
    }
}

/// The `[network]` section of an instance of the bench network; `secret` is the shared secret file.
pub fn network_toml(redis: &Redis, secret: &Path) -> String {
    format!(
        "[network]\nredis_url = \"{}\"\nname = \"bench\"\npeer_bind = \"127.0.0.1:{}\"\nsecret_file = \"{}\"\n",
        redis.url,
        free_port().unwrap_or(0),
        secret.display()
    )
}

/// Writes a fresh shared secret into `dir`.
pub fn write_secret(dir: &Path) -> anyhow::Result<std::path::PathBuf> {
    use rand_core::RngCore;
    let mut key = [0u8; 32];
    rand_core::OsRng.fill_bytes(&mut key);
    let hex: String = key.iter().map(|b| format!("{b:02x}")).collect();
    let path = dir.join("network.key");
    std::fs::write(&path, hex)?;
    Ok(path)
}

/// Waits until the instance whose metrics are at `metrics` shows `series` at `value`.
pub fn wait_metric(metrics: SocketAddr, series: &str, value: f64, within: Duration) -> anyhow::Result<()> {
    let deadline = Instant::now() + within;
    loop {
        let now = crate::metrics::scrape(metrics, series);
        if now == Some(value) {
            return Ok(());
        }
        if Instant::now() > deadline {
            bail!("{series} at {metrics} is {now:?}, not {value}, after {within:?}");
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// A TCP splice in front of the instances: each new connection goes to the current target (or, made with
/// [`Switch::round_robin`], to the next target in turn); [`Switch::cut`] closes every connection it carries
/// (both sockets, without a WebSocket Close: a drop the client resumes).
pub struct Switch {
    pub addr: SocketAddr,
    targets: Vec<SocketAddr>,
    current: AtomicUsize,
    /// Round robin: `current` counts connections and the target is `current % targets.len()`.
    rotate: bool,
    cut: std::sync::Mutex<CancellationToken>,
    _runtime: tokio::runtime::Runtime,
}

impl Switch {
    /// Listens on a free port of 127.0.0.1 and sends connections to `targets[0]` until told otherwise.
    pub fn start(targets: Vec<SocketAddr>) -> anyhow::Result<Arc<Self>> {
        Self::spawn(targets, false)
    }

    /// Listens on a free port of 127.0.0.1 and sends each new connection to the next of `targets` (no
    /// affinity: a reconnect lands wherever the turn is).
    pub fn round_robin(targets: Vec<SocketAddr>) -> anyhow::Result<Arc<Self>> {
        Self::spawn(targets, true)
    }

    fn spawn(targets: Vec<SocketAddr>, rotate: bool) -> anyhow::Result<Arc<Self>> {
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("bench-switch")
            .enable_all()
            .build()?;
        let listener = runtime.block_on(TcpListener::bind("127.0.0.1:0"))?;
        let addr = listener.local_addr()?;
        let switch = Arc::new(Self {
            addr,
            targets,
            current: AtomicUsize::new(0),
            rotate,
            cut: std::sync::Mutex::new(CancellationToken::new()),
            _runtime: runtime,
        });
        let s = Arc::clone(&switch);
        switch._runtime.spawn(async move {
            while let Ok((player, _)) = listener.accept().await {
                let index = if s.rotate {
                    s.current.fetch_add(1, Ordering::Relaxed) % s.targets.len().max(1)
                } else {
                    s.current.load(Ordering::Relaxed)
                };
                let target = s.targets.get(index).copied();
                let cut = s.cut.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone();
                tokio::spawn(async move {
                    let Some(target) = target else { return };
                    let Ok(mut upstream) = TcpStream::connect(target).await else { return };
                    let mut player = player;
                    let _ = player.set_nodelay(true);
                    let _ = upstream.set_nodelay(true);
                    tokio::select! {
                        _ = tokio::io::copy_bidirectional(&mut player, &mut upstream) => {}
                        () = cut.cancelled() => {}
                    }
                });
            }
        });
        Ok(switch)
    }

    /// New connections go to `targets[i]` from now on.
    pub fn route(&self, i: usize) {
        self.current.store(i, Ordering::Relaxed);
    }

    /// Closes every connection carried so far.
    pub fn cut(&self) {
        let mut token = self.cut.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        token.cancel();
        *token = CancellationToken::new();
    }
}

/// What `moonbridge-linked` does around a phase: logins on A, then every player moved onto a link through B.
#[derive(Clone)]
pub struct Relink {
    pub switch: Arc<Switch>,
    /// B's `[metrics]` listener.
    pub carrier_metrics: SocketAddr,
}

impl Relink {
    /// Before the players connect: logins go to A.
    pub fn before_login(&self) {
        self.switch.route(0);
    }

    /// After every player logged in: the switch turns to B and cuts; waits until B carries all `players`.
    pub fn after_login(&self, players: usize) -> anyhow::Result<()> {
        self.switch.route(1);
        self.switch.cut();
        wait_metric(self.carrier_metrics, "moonbridge_network_link_sessions", players as f64, Duration::from_secs(30))
            .context("the players did not all resume through the other instance")
    }
}
