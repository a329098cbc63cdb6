//! The pieces of a network of instances the tests start for real: [`Redis`] (Debian's `redis-server`) and
//! [`Haproxy`] (Debian's `haproxy` in TCP mode, round robin: every new connection goes to the next instance, no
//! affinity), both on free loopback ports, killed when dropped.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::{Command, Stdio};
use std::time::{Duration, Instant};

use moonbridge_test_certs::{free_port, TestDir};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::KillOnDrop;

/// The shared secret file of the test network.
pub fn secret(dir: &TestDir) -> std::path::PathBuf {
    let path = dir.path().join("network.key");
    std::fs::write(&path, "0123456789abcdef0123456789abcdef-test-network\n").unwrap();
    path
}

/// An instance's configuration: a `tcp` listener, a `ws` and (with `cert`) a `wss` one, the backend, and
/// `[network]` on `redis` with `duplicate_login`.
pub fn instance_config(
    backend: SocketAddr,
    redis: &Redis,
    secret: &std::path::Path,
    policy: &str,
    cert: Option<&crate::TestCert>,
) -> String {
    let wss = cert.map_or(String::new(), |c| {
        format!(
            "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\nping_interval_seconds = 1\n\
             tls_cert = \"{}\"\ntls_key = \"{}\"\n",
            c.cert.display(),
            c.key.display()
        )
    });
    format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\
         [[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\nping_interval_seconds = 1\n{wss}\
         [[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n\
         [network]\nredis_url = \"{}\"\nname = \"test\"\npeer_bind = \"127.0.0.1:0\"\nsecret_file = \"{}\"\n\
         duplicate_login = \"{policy}\"\n",
        redis.url(),
        secret.display()
    )
}

/// 127.0.0.1 and `port`.
pub fn loopback(port: u16) -> SocketAddr {
    SocketAddr::from(([127, 0, 0, 1], port))
}

/// `series` on the `[metrics]` listener at `addr` now.
pub async fn metric_at(addr: SocketAddr, series: &str) -> Option<f64> {
    let reply = crate::raw_http(addr, "GET /metrics HTTP/1.1\r\nHost: x\r\n\r\n").await;
    crate::sample(reply.split_once("\r\n\r\n")?.1, series)
}

/// Waits until `series` at `addr` reads at least `at_least`; returns the value.
pub async fn wait_metric_at(addr: SocketAddr, series: &str, at_least: f64, within: Duration) -> f64 {
    let deadline = Instant::now() + within;
    loop {
        let now = metric_at(addr, series).await;
        if let Some(v) = now.filter(|v| *v >= at_least) {
            return v;
        }
        assert!(Instant::now() < deadline, "{series} at {addr} is {now:?}, not {at_least} or more, after {within:?}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// An instance as its own `moonbridge` process (info log kept), with its listeners, `peer_bind` and
/// `[metrics]` on the ports returned: (process, tcp, ws, peer, metrics).
pub fn instance_process(
    dir: &TestDir,
    name: &str,
    toml: String,
    extra: &str,
) -> (moonbridge_test_certs::ChildLog, SocketAddr, SocketAddr, SocketAddr, SocketAddr) {
    let [tcp, ws, peer, metrics] = [(); 4].map(|()| loopback(free_port().unwrap()));
    let toml = toml.replacen("127.0.0.1:0", &tcp.to_string(), 1).replacen("127.0.0.1:0", &ws.to_string(), 1).replacen(
        "127.0.0.1:0",
        &peer.to_string(),
        1,
    );
    let path = dir.join(format!("{name}.toml"));
    std::fs::write(&path, format!("{toml}[metrics]\nbind = \"{metrics}\"\n{extra}")).unwrap();
    let log = moonbridge_test_certs::ChildLog::spawn(
        std::process::Command::new(crate::moonbridge_bin()).arg("--config").arg(&path).env("RUST_LOG", "info"),
    )
    .unwrap();
    assert!(log.wait_line("listening", Duration::from_secs(20)).is_some(), "{name} starts");
    (log, tcp, ws, peer, metrics)
}

/// The HMAC-SHA-256 (hex) with the network's secret in `key` of `role` and `parts` framed as MoonBridge frames
/// them (each part after its length, 4 bytes big-endian), computed by `openssl mac`: a second implementation of
/// the rule in docs/network.md, "What a network trusts".
pub fn network_mac(dir: &TestDir, key: &std::path::Path, role: &str, parts: &[&str]) -> String {
    let secret = std::fs::read_to_string(key).unwrap();
    let mut data = role.as_bytes().to_vec();
    for part in parts {
        data.extend_from_slice(&(part.len() as u32).to_be_bytes());
        data.extend_from_slice(part.as_bytes());
    }
    let input = dir.path().join("signed.bin");
    std::fs::write(&input, data).unwrap();
    let out = Command::new("openssl")
        .args(["mac", "-digest", "SHA256", "-macopt", &format!("key:{}", secret.trim()), "-in"])
        .arg(&input)
        .arg("HMAC")
        .output()
        .unwrap();
    let sig = String::from_utf8(out.stdout).unwrap().trim().to_lowercase();
    assert_eq!(sig.len(), 64, "openssl mac printed a SHA-256 MAC");
    sig
}

/// The entry of instance `id` at `peer` in network `test`, as an instance writes it (signed, holding for 10
/// minutes), with 1,000 players announced.
pub fn signed_entry(dir: &TestDir, key: &std::path::Path, id: &str, peer: &str) -> String {
    let now = std::time::SystemTime::now().duration_since(std::time::UNIX_EPOCH).unwrap().as_millis();
    let until = (now + 600_000).to_string();
    let sig = network_mac(dir, key, "moonbridge instance entry", &["test", id, peer, &until]);
    format!("{{\"peer\":\"{peer}\",\"players\":1000,\"until\":{until},\"sig\":\"{sig}\"}}")
}

/// A claim of `lower` (a lower-case name) in network `test` by a login on instance `instance`, as an instance
/// makes it: `<instance>:<nonce>:<login ms>:<signature>`.
pub fn signed_claim(
    dir: &TestDir,
    key: &std::path::Path,
    lower: &str,
    instance: &str,
    nonce: u64,
    login_ms: u64,
) -> String {
    let head = format!("{instance}:{nonce:016x}:{login_ms}");
    let sig = network_mac(dir, key, "moonbridge name claim", &["test", lower, &head]);
    format!("{head}:{sig}")
}

/// A `redis-server` on a free loopback port, with no persistence (a restart starts empty).
pub struct Redis {
    pub port: u16,
    child: Option<KillOnDrop>,
    /// More `redis-server` arguments (a replica's `--replicaof`).
    extra: Vec<String>,
    /// Its working directory (a replica's full sync writes `dump.rdb` there, not into the test's).
    dir: TestDir,
}

impl Redis {
    /// Starts one and waits (at most 20 s) until it answers `PING`.
    pub async fn start() -> Self {
        Self::start_with(&[]).await
    }

    /// Starts one with more `redis-server` arguments (`--replicaof 127.0.0.1 <port>`), as [`Redis::start`].
    pub async fn start_with(extra: &[&str]) -> Self {
        let extra = extra.iter().map(|a| a.to_string()).collect();
        let dir = TestDir::new("moonbridge-redis").unwrap();
        let mut r = Self { port: free_port().unwrap(), child: None, extra, dir };
        r.restart().await;
        r
    }

    /// `redis://127.0.0.1:<port>/`.
    pub fn url(&self) -> String {
        format!("redis://127.0.0.1:{}/", self.port)
    }

    /// Kills it (SIGKILL): the instances lose Redis.
    pub fn stop(&mut self) {
        self.child = None;
    }

    /// Starts it again on the same port, empty.
    pub async fn restart(&mut self) {
        self.child = None;
        let child = Command::new("redis-server")
            .args(["--port", &self.port.to_string(), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"])
            .arg("--dir")
            .arg(self.dir.path())
            .args(&self.extra)
            .stdout(Stdio::null())
            .spawn()
            .expect("redis-server runs (Debian package redis-server; scripts/test-all.sh installs it)");
        self.child = Some(KillOnDrop(child));
        timeout(Duration::from_secs(20), async {
            loop {
                if self.command(&["PING"]).await.is_some_and(|r| r == "+PONG") {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .expect("redis-server answers PING within 20 s");
    }

    /// Runs `redis-cli` (Debian's `redis-tools`, which `redis-server` depends on) with `args` against it and
    /// returns what it printed (one line per element of an array answer).
    pub fn cli(&self, args: &[&str]) -> String {
        let out = Command::new("redis-cli")
            .args(["-p", &self.port.to_string()])
            .args(args)
            .output()
            .expect("redis-cli runs (Debian package redis-tools)");
        String::from_utf8_lossy(&out.stdout).into_owned()
    }

    /// Sends one command (RESP) and returns the first line of the answer, or `None` when Redis is not there.
    pub async fn command(&self, args: &[&str]) -> Option<String> {
        let mut s = TcpStream::connect(("127.0.0.1", self.port)).await.ok()?;
        let mut req = format!("*{}\r\n", args.len());
        for a in args {
            req.push_str(&format!("${}\r\n{a}\r\n", a.len()));
        }
        s.write_all(req.as_bytes()).await.ok()?;
        let mut buf = vec![0u8; 64 * 1024];
        let n = timeout(Duration::from_secs(2), s.read(&mut buf)).await.ok()?.ok()?;
        let text = String::from_utf8_lossy(&buf[..n]).into_owned();
        let mut lines = text.lines();
        let first = lines.next()?;
        // A bulk string (`$<length>`, then the string): the string itself; nil (`$-1`): None.
        match first.strip_prefix('$') {
            Some("-1") => None,
            Some(_) => lines.next().map(str::to_string),
            None => Some(first.to_string()),
        }
    }
}

/// HAProxy in TCP mode in front of instances: one frontend per named group, each balancing round robin over
/// its servers; [`Haproxy::cut`] ends every connection through a group (its runtime API's `shutdown sessions
/// server`, as an operator or a failing edge would).
pub struct Haproxy {
    /// The frontend address of each group, in the order given.
    pub fronts: Vec<SocketAddr>,
    groups: Vec<(String, usize)>,
    socket: PathBuf,
    _child: KillOnDrop,
    _dir: TestDir,
}

impl Haproxy {
    /// `groups`: a name and the instance addresses it balances over.
    pub async fn start(groups: &[(&str, Vec<SocketAddr>)]) -> Self {
        Self::start_with(groups, "").await
    }

    /// As [`Haproxy::start`], with `server` options on every server line (`send-proxy-v2`, `source <ip>`), and a
    /// connection that fails tried again at another server (`retries 3`, `option redispatch 1`).
    pub async fn start_with(groups: &[(&str, Vec<SocketAddr>)], server: &str) -> Self {
        Self::start_defaults(groups, server, "  retries 3\n  option redispatch 1\n").await
    }

    /// As docs/network.md shows it: `server` options on every server line and HAProxy's defaults otherwise (no
    /// `option redispatch`: a connection that fails is tried again at the same server only).
    pub async fn start_documented(groups: &[(&str, Vec<SocketAddr>)], server: &str) -> Self {
        Self::start_defaults(groups, server, "").await
    }

    /// As [`Haproxy::start_documented`], its frontends on `ip` (an address of a [`crate::shaped::ShapedPath`]).
    pub async fn start_on(ip: std::net::IpAddr, groups: &[(&str, Vec<SocketAddr>)]) -> Self {
        Self::start_at(ip, groups, "", "").await
    }

    /// HAProxy with `defaults` lines `extra` (each indented, ending in a newline) besides mode and timeouts.
    async fn start_defaults(groups: &[(&str, Vec<SocketAddr>)], server: &str, extra: &str) -> Self {
        Self::start_at(std::net::Ipv4Addr::LOCALHOST.into(), groups, server, extra).await
    }

    async fn start_at(ip: std::net::IpAddr, groups: &[(&str, Vec<SocketAddr>)], server: &str, extra: &str) -> Self {
        let dir = TestDir::new("moonbridge-haproxy").unwrap();
        let socket = dir.path().join("admin.sock");
        let mut cfg = format!(
            "global\n  stats socket {} mode 600 level admin\n  maxconn 4096\n\
             defaults\n  mode tcp\n  timeout connect 5s\n  timeout client 120s\n  timeout server 120s\n{extra}",
            socket.display()
        );
        let mut fronts = Vec::new();
        for (name, servers) in groups {
            let front = SocketAddr::new(ip, free_port().unwrap());
            cfg.push_str(&format!("frontend f_{name}\n  bind {front}\n  default_backend b_{name}\n"));
            cfg.push_str(&format!("backend b_{name}\n  balance roundrobin\n"));
            for (i, s) in servers.iter().enumerate() {
                cfg.push_str(&format!("  server s{i} {s} {server}\n"));
            }
            fronts.push(front);
        }
        let path = dir.path().join("haproxy.cfg");
        std::fs::write(&path, cfg).unwrap();
        let child = Command::new("haproxy")
            .arg("-db")
            .arg("-f")
            .arg(&path)
            .stdout(Stdio::null())
            .spawn()
            .expect("haproxy runs (Debian package haproxy; scripts/test-all.sh installs it)");
        let child = KillOnDrop(child);
        for f in &fronts {
            timeout(Duration::from_secs(20), async {
                while TcpStream::connect(f).await.is_err() {
                    tokio::time::sleep(Duration::from_millis(50)).await;
                }
            })
            .await
            .expect("haproxy listens within 20 s");
        }
        let groups = groups.iter().map(|(n, s)| (n.to_string(), s.len())).collect();
        Self { fronts, groups, socket, _child: child, _dir: dir }
    }

    /// Ends every connection of group `name` (both sides get a FIN), through the runtime API.
    pub async fn cut(&self, name: &str) {
        let count = self.groups.iter().find(|(n, _)| n == name).map(|(_, c)| *c).expect("a known group");
        for i in 0..count {
            let mut s = tokio::net::UnixStream::connect(&self.socket).await.expect("haproxy's admin socket");
            s.write_all(format!("shutdown sessions server b_{name}/s{i}\n").as_bytes()).await.unwrap();
            let mut answer = Vec::new();
            let _ = timeout(Duration::from_secs(5), s.read_to_end(&mut answer)).await;
        }
    }
}
