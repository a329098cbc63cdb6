//! Real node-minecraft-protocol 1.7.10 peers (`tests/peers/`, installed with `npm ci`), run as child
//! processes that print one JSON object per line.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::time::Duration;

use serde_json::Value;
use tokio::io::{AsyncBufReadExt, BufReader};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::time::timeout;

use crate::STEP;

/// The directory holding the node peers (`package.json`, `package-lock.json`, scripts).
pub fn peers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// A running node peer script that prints one JSON object per line.
pub struct NodePeer {
    child: Child,
    lines: mpsc::UnboundedReceiver<Value>,
}

impl NodePeer {
    /// Runs `node peers/<script> '<opts>'`.
    pub async fn spawn(script: &str, opts: &Value) -> Self {
        let dir = peers_dir();
        assert!(
            dir.join("node_modules/minecraft-protocol").is_dir(),
            "node peers are not installed: run `npm ci` in {}",
            dir.display()
        );
        let mut child = Command::new("node")
            .arg(script)
            .arg(opts.to_string())
            .current_dir(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs");
        let stdout = child.stdout.take().expect("stdout piped");
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = r.next_line().await {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        let _ = tx.send(v);
                    }
                    Err(_) => eprintln!("[node] {line}"),
                }
            }
        });
        Self { child, lines }
    }

    /// The next line whose `event` is `name` (earlier other lines are returned by [`Self::take_seen`]).
    pub async fn event(&mut self, name: &str, within: Duration) -> Value {
        let got = timeout(within, async {
            while let Some(v) = self.lines.recv().await {
                if v["event"] == name {
                    return Some(v);
                }
            }
            None
        })
        .await;
        match got {
            Ok(Some(v)) => v,
            Ok(None) => panic!("node peer exited before event {name:?}"),
            Err(_) => panic!("no {name:?} event within {within:?}"),
        }
    }

    /// The next `n` lines, whatever their events.
    pub async fn next_lines(&mut self, n: usize, within: Duration) -> Vec<Value> {
        let mut seen = Vec::new();
        let got = timeout(within, async {
            while seen.len() < n {
                match self.lines.recv().await {
                    Some(v) => seen.push(v),
                    None => return false,
                }
            }
            true
        })
        .await;
        match got {
            Ok(true) => seen,
            Ok(false) => panic!("node peer exited after {seen:?}"),
            Err(_) => panic!("fewer than {n} lines within {within:?}: {seen:?}"),
        }
    }

    /// Every line whose `event` is `name` until the peer prints `done`, plus the `done` line.
    pub async fn collect_until_done(&mut self, name: &str, within: Duration) -> (Vec<Value>, Value) {
        let mut seen = Vec::new();
        let got = timeout(within, async {
            while let Some(v) = self.lines.recv().await {
                if v["event"] == "done" {
                    return Some(v);
                }
                if v["event"] == name {
                    seen.push(v);
                }
            }
            None
        })
        .await;
        match got {
            Ok(Some(done)) => (seen, done),
            Ok(None) => panic!("node peer exited without a done line; saw {seen:?}"),
            Err(_) => panic!("node peer not done within {within:?}; saw {seen:?}"),
        }
    }

    /// Waits for the process to exit and returns its status code.
    pub async fn wait(mut self, within: Duration) -> Option<i32> {
        timeout(within, self.child.wait()).await.expect("node peer exits in time").expect("wait").code()
    }
}

/// Starts the node-minecraft-protocol 1.7.10 backend and returns it with its address.
pub async fn node_backend(opts: Value) -> (NodePeer, SocketAddr) {
    let mut peer = NodePeer::spawn("backend.js", &opts).await;
    let ev = peer.event("listening", STEP).await;
    let port = u16::try_from(ev["port"].as_u64().expect("port")).expect("port fits");
    (peer, SocketAddr::from(([127, 0, 0, 1], port)))
}
