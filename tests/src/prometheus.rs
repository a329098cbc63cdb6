//! A real Prometheus server (Debian's `prometheus` package) scraping MoonBridge's `[metrics]` listeners every
//! second, on a free loopback port, killed when dropped; [`Prometheus::query_until`] asks its HTTP API.

use std::net::SocketAddr;
use std::process::Stdio;
use std::time::Duration;

use moonbridge_test_certs::{free_port, TestDir};
use tokio::io::AsyncWriteExt;
use tokio::net::TcpStream;

use crate::{read_to_close, STEP};

/// Prometheus scraping some targets every second.
pub struct Prometheus {
    web: SocketAddr,
    _child: tokio::process::Child,
    _dir: TestDir,
}

impl Prometheus {
    /// Starts Prometheus scraping `targets` (`[metrics]` listeners) every second.
    pub fn start(targets: &[SocketAddr]) -> Self {
        let dir = TestDir::new("prometheus").unwrap();
        let web = SocketAddr::from(([127, 0, 0, 1], free_port().unwrap()));
        let config = dir.path().join("prometheus.yml");
        let targets: Vec<String> = targets.iter().map(|t| format!("'{t}'")).collect();
        std::fs::write(
            &config,
            format!(
                "global:\n  scrape_interval: 1s\nscrape_configs:\n  - job_name: moonbridge\n    static_configs:\n      - targets: [{}]\n",
                targets.join(", ")
            ),
        )
        .unwrap();
        let child = tokio::process::Command::new("prometheus")
            .arg(format!("--config.file={}", config.display()))
            .arg(format!("--storage.tsdb.path={}", dir.path().join("data").display()))
            .arg(format!("--web.listen-address={web}"))
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .kill_on_drop(true)
            .spawn()
            .expect("prometheus (Debian package prometheus) is installed");
        Self { web, _child: child, _dir: dir }
    }

    /// Queries the HTTP API until the first result's value is `want` (or `within` passes): the last value seen.
    pub async fn query_until(&self, query: &str, want: f64, within: Duration) -> Option<f64> {
        let mut last = None;
        let deadline = tokio::time::Instant::now() + within;
        while tokio::time::Instant::now() < deadline {
            let answer = self.query(query).await;
            let first = answer.and_then(|v| v["data"]["result"][0]["value"][1].as_str()?.parse().ok());
            last = first.or(last);
            if last == Some(want) {
                return last;
            }
            // Polling an external process: each scrape is a second apart.
            tokio::time::sleep(Duration::from_millis(250)).await;
        }
        last
    }

    /// One instant query: the API's JSON answer (`status`, `data`, or `errorType` and `error`), or `None` when
    /// Prometheus did not answer (yet).
    pub async fn query(&self, query: &str) -> Option<serde_json::Value> {
        let encoded: String = query
            .bytes()
            .map(|b| if b.is_ascii_alphanumeric() || b == b'_' { (b as char).to_string() } else { format!("%{b:02X}") })
            .collect();
        let mut s = TcpStream::connect(self.web).await.ok()?;
        let req = format!("GET /api/v1/query?query={encoded} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n");
        s.write_all(req.as_bytes()).await.ok()?;
        let (reply, _) = read_to_close(&mut s, STEP).await;
        let reply = String::from_utf8_lossy(&reply);
        serde_json::from_str(reply.split_once("\r\n\r\n")?.1.trim()).ok()
    }
}
