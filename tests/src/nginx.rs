//! nginx (Debian's `nginx` package) as the WebSocket reverse proxy operators run in front of a network's `ws`
//! listeners: `http {}` with an `upstream` of the instances at nginx's **default** settings (round robin,
//! `max_fails=1`, `fail_timeout=10s`, `proxy_next_upstream error timeout`), the upgrade headers and
//! `X-Forwarded-For`, on a free loopback port, stopped when dropped. The configuration is the one
//! `docs/network.md` ("Balancers") shows.

use std::net::SocketAddr;
use std::process::{Command, Stdio};
use std::time::Duration;

use moonbridge_test_certs::{free_port, TestDir};
use tokio::net::TcpStream;
use tokio::time::timeout;

use crate::KillOnDrop;

/// The `http {}` part of `docs/network.md`'s nginx example, for `servers` and a front on `front`.
pub fn http_block(servers: &[SocketAddr], front: SocketAddr) -> String {
    let upstream: String = servers.iter().map(|s| format!("        server {s};\n")).collect();
    format!(
        "    map $http_upgrade $connection_upgrade {{\n        default upgrade;\n        ''      close;\n    }}\n\
         \x20   upstream moonbridge {{\n{upstream}    }}\n\
         \x20   server {{\n        listen {front};\n        location / {{\n\
         \x20           proxy_pass http://moonbridge;\n\
         \x20           proxy_http_version 1.1;\n\
         \x20           proxy_set_header Upgrade $http_upgrade;\n\
         \x20           proxy_set_header Connection $connection_upgrade;\n\
         \x20           proxy_set_header X-Forwarded-For $proxy_add_x_forwarded_for;\n\
         \x20           proxy_read_timeout 120s;\n\
         \x20       }}\n    }}\n"
    )
}

/// nginx in front of `ws` listeners.
pub struct Nginx {
    /// Where players connect (`ws://<front>/mc`).
    pub front: SocketAddr,
    _child: KillOnDrop,
    _dir: TestDir,
}

impl Nginx {
    /// Starts nginx balancing over `servers` (each a `ws` listener) and waits until it listens (at most 20 s).
    pub async fn start(servers: &[SocketAddr]) -> Self {
        Self::start_on(std::net::Ipv4Addr::LOCALHOST.into(), servers).await
    }

    /// As [`Nginx::start`], listening on `ip` (an address of a [`crate::shaped::ShapedPath`]).
    pub async fn start_on(ip: std::net::IpAddr, servers: &[SocketAddr]) -> Self {
        let dir = TestDir::new("moonbridge-nginx").unwrap();
        let front = SocketAddr::new(ip, free_port().unwrap());
        let d = dir.path().display();
        // Everything nginx writes stays in the test's directory (temporary files, pid, error log). One process
        // (no master), so that killing it stops nginx; the upstream logic is the same.
        let conf = format!(
            "daemon off;\nmaster_process off;\nworker_processes 1;\npid {d}/nginx.pid;\nerror_log {d}/error.log warn;\n\
             events {{\n    worker_connections 1024;\n}}\n\
             http {{\n    access_log off;\n    client_body_temp_path {d}/body;\n    proxy_temp_path {d}/proxy;\n\
             \x20   fastcgi_temp_path {d}/fastcgi;\n    uwsgi_temp_path {d}/uwsgi;\n    scgi_temp_path {d}/scgi;\n{}}}\n",
            http_block(servers, front)
        );
        let path = dir.path().join("nginx.conf");
        std::fs::write(&path, conf).unwrap();
        let child = Command::new("nginx")
            .arg("-p")
            .arg(dir.path())
            .arg("-c")
            .arg(&path)
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .expect("nginx runs (Debian package nginx; scripts/test-all.sh installs it)");
        let child = KillOnDrop(child);
        timeout(Duration::from_secs(20), async {
            while TcpStream::connect(front).await.is_err() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        })
        .await
        .unwrap_or_else(|_| {
            let log = std::fs::read_to_string(dir.path().join("error.log")).unwrap_or_default();
            panic!("nginx listens within 20 s; its error log:\n{log}")
        });
        Self { front, _child: child, _dir: dir }
    }
}
