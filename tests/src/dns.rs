//! A real DNS server on loopback for the tests: Debian's dnsmasq (`dnsmasq-base`), started with the records a
//! test needs and nothing else (no upstream servers, no hosts file), authoritative for `example.com` and
//! `example.net` (unknown names there get NXDOMAIN). Every query is logged; [`DnsServer::queries`] counts them.

use std::net::SocketAddr;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};

/// TTL of every record the test server answers with, in seconds.
pub const RECORD_TTL_SECONDS: u32 = 60;

/// A running dnsmasq.
pub struct DnsServer {
    pub addr: SocketAddr,
    child: Child,
    log: Arc<Mutex<Vec<String>>>,
}

impl DnsServer {
    /// Starts dnsmasq on a free loopback port with `records`: dnsmasq options such as
    /// `--txt-record=_moonbridge.mc.example.com,wss://…` (each further `,text` is another character-string of
    /// the record; no quotes, they would be part of the text) or `--srv-host=…`.
    pub async fn start(records: &[String]) -> Self {
        let port = {
            let udp = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
            udp.local_addr().unwrap().port()
        };
        let bin = ["/usr/sbin/dnsmasq", "/usr/bin/dnsmasq"]
            .into_iter()
            .find(|p| std::path::Path::new(p).is_file())
            .expect("dnsmasq is installed (scripts/test-all.sh installs dnsmasq-base)");
        let mut cmd = Command::new(bin);
        cmd.args(["--keep-in-foreground", "--conf-file=/dev/null", "--listen-address=127.0.0.1", "--bind-interfaces"])
            .args(["--no-resolv", "--no-hosts", "--no-poll", "--pid-file=", "--log-queries", "--log-facility=-"])
            .args(["--local=/example.com/", "--local=/example.net/"])
            .arg(format!("--local-ttl={RECORD_TTL_SECONDS}"))
            .arg(format!("--port={port}"))
            .args(records)
            .stdout(Stdio::null())
            .stderr(Stdio::piped())
            .kill_on_drop(true);
        // As root dnsmasq drops to "nobody" after binding; stay root so it can write its log to our pipe.
        if running_as_root() {
            cmd.arg("--user=root");
        }
        let mut child = cmd.spawn().expect("dnsmasq starts");
        let stderr = child.stderr.take().unwrap();
        let log: Arc<Mutex<Vec<String>>> = Arc::default();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let l = Arc::clone(&log);
        tokio::spawn(async move {
            let mut lines = BufReader::new(stderr).lines();
            let mut ready = Some(ready_tx);
            while let Ok(Some(line)) = lines.next_line().await {
                if line.contains("cleared cache") || line.contains("started") {
                    if let Some(tx) = ready.take() {
                        let _ = tx.send(());
                    }
                }
                l.lock().unwrap().push(line);
            }
        });
        tokio::time::timeout(Duration::from_secs(10), ready_rx).await.expect("dnsmasq ready in time").unwrap();
        Self { addr: SocketAddr::from(([127, 0, 0, 1], port)), child, log }
    }

    /// How many queries for `name` of `qtype` (`TXT`, `SRV`, `A`) dnsmasq has received. dnsmasq logs
    /// asynchronously, so this first sends a query of its own and waits for its log line: every query sent
    /// before is counted by then.
    pub async fn queries(&self, qtype: &str, name: &str) -> usize {
        self.sync().await;
        let needle = format!("query[{qtype}] {name} ");
        self.log.lock().unwrap().iter().filter(|l| l.contains(&needle)).count()
    }

    /// Sends an A query for a fresh name and waits (10 s at most) until dnsmasq has logged it.
    async fn sync(&self) {
        static SEQ: std::sync::atomic::AtomicU32 = std::sync::atomic::AtomicU32::new(0);
        let label = format!("sync-{}", SEQ.fetch_add(1, std::sync::atomic::Ordering::Relaxed));
        let mut query = vec![0x12, 0x34, 0x01, 0x00, 0, 1, 0, 0, 0, 0, 0, 0];
        for part in [label.as_str(), "example", "com"] {
            query.push(u8::try_from(part.len()).unwrap());
            query.extend_from_slice(part.as_bytes());
        }
        query.extend_from_slice(&[0, 0, 1, 0, 1]);
        let socket = tokio::net::UdpSocket::bind("127.0.0.1:0").await.unwrap();
        socket.send_to(&query, self.addr).await.unwrap();
        let needle = format!("query[A] {label}.example.com ");
        tokio::time::timeout(Duration::from_secs(10), async {
            while !self.log.lock().unwrap().iter().any(|l| l.contains(&needle)) {
                tokio::time::sleep(Duration::from_millis(5)).await; // polling the log, bounded by the timeout
            }
        })
        .await
        .expect("dnsmasq logs its queries");
    }

    /// Stops dnsmasq.
    pub async fn stop(mut self) {
        let _ = self.child.kill().await;
    }
}

fn running_as_root() -> bool {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| s.lines().find(|l| l.starts_with("Uid:")).map(|l| l.split_whitespace().nth(1) == Some("0")))
        .unwrap_or(false)
}
