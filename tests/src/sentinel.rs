//! Redis Sentinel as operators run it: a `redis-server` master, a replica of it and three `redis-sentinel`
//! processes (Debian's `redis-sentinel` package) watching the master as `mymaster` with a quorum of 2, all on
//! free loopback ports, killed when dropped. A failover after the master dies takes
//! [`DOWN_AFTER_MS`] plus the sentinels' election (about 1–3 s here).

use std::collections::HashMap;
use std::process::{Command, Stdio};
use std::time::Duration;

use moonbridge_test_certs::{free_port, TestDir};
use tokio::time::timeout;

use crate::network::Redis;
use crate::KillOnDrop;

/// The master's name at the sentinels.
pub const MASTER_NAME: &str = "mymaster";
/// `sentinel down-after-milliseconds`: how long the master may be silent before it counts as down, in ms.
pub const DOWN_AFTER_MS: u64 = 1000;

/// A master, its replica and three sentinels.
pub struct Sentinels {
    /// The master at start (killed by [`Sentinels::kill_master`]).
    pub master: Option<Redis>,
    /// Its replica, promoted by a failover.
    pub replica: Redis,
    /// The sentinels' ports.
    pub ports: Vec<u16>,
    _children: Vec<KillOnDrop>,
    _dir: TestDir,
}

impl Sentinels {
    /// Starts them and waits (at most 30 s) until every sentinel knows the replica and the two other
    /// sentinels, and the replica's link to the master is up: a failover can then happen.
    pub async fn start() -> Self {
        let master = Redis::start().await;
        let replica = Redis::start_with(&["--replicaof", "127.0.0.1", &master.port.to_string()]).await;
        let dir = TestDir::new("moonbridge-sentinels").unwrap();
        let (mut ports, mut children) = (Vec::new(), Vec::new());
        for i in 0..3 {
            let port = free_port().unwrap();
            let conf = dir.join(format!("sentinel-{i}.conf"));
            // Sentinel rewrites its configuration file: one each, in the test's directory.
            std::fs::write(
                &conf,
                format!(
                    "port {port}\nbind 127.0.0.1\ndaemonize no\ndir {}\nlogfile \"\"\n\
                     sentinel monitor {MASTER_NAME} 127.0.0.1 {} 2\n\
                     sentinel down-after-milliseconds {MASTER_NAME} {DOWN_AFTER_MS}\n\
                     sentinel failover-timeout {MASTER_NAME} 10000\n",
                    dir.path().display(),
                    master.port
                ),
            )
            .unwrap();
            let child = Command::new("redis-sentinel")
                .arg(&conf)
                .stdout(Stdio::null())
                .spawn()
                .expect("redis-sentinel runs (Debian package redis-sentinel; scripts/test-all.sh installs it)");
            children.push(KillOnDrop(child));
            ports.push(port);
        }
        let set = Self { master: Some(master), replica, ports, _children: children, _dir: dir };
        timeout(Duration::from_secs(30), async {
            loop {
                let ready = set.ports.iter().all(|p| {
                    let m = master_fields(*p);
                    m.get("num-slaves").map(String::as_str) == Some("1")
                        && m.get("num-other-sentinels").map(String::as_str) == Some("2")
                });
                let linked = set.replica.cli(&["INFO", "replication"]).contains("master_link_status:up");
                if ready && linked {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("the sentinels know the replica and each other within 30 s");
        set
    }

    /// `redis_sentinels = [...]` and `redis_master_name` for a `[network]` table.
    pub fn network_keys(&self) -> String {
        let list: Vec<String> = self.ports.iter().map(|p| format!("\"127.0.0.1:{p}\"")).collect();
        format!("redis_sentinels = [{}]\nredis_master_name = \"{MASTER_NAME}\"\n", list.join(", "))
    }

    /// Kills the master (SIGKILL).
    pub fn kill_master(&mut self) {
        self.master = None;
    }

    /// The master's port as the first sentinel that answers names it.
    pub fn master_port(&self) -> Option<u16> {
        self.ports.iter().find_map(|p| {
            let out = sentinel_cli(*p, &["SENTINEL", "get-master-addr-by-name", MASTER_NAME]);
            out.lines().nth(1)?.trim().parse().ok()
        })
    }
}

/// `SENTINEL master mymaster` at the sentinel on `port`: its fields by name.
fn master_fields(port: u16) -> HashMap<String, String> {
    let out = sentinel_cli(port, &["SENTINEL", "master", MASTER_NAME]);
    let lines: Vec<&str> = out.lines().collect();
    lines.chunks(2).filter_map(|kv| Some((kv.first()?.to_string(), kv.get(1)?.to_string()))).collect()
}

/// `redis-cli -p <port> args…`: what it printed.
fn sentinel_cli(port: u16, args: &[&str]) -> String {
    let out = Command::new("redis-cli").args(["-p", &port.to_string()]).args(args).output();
    out.map(|o| String::from_utf8_lossy(&o.stdout).into_owned()).unwrap_or_default()
}
