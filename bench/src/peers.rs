//! The third-party peers and the floor relay that `session-bench` and `session-bench capacity` run beside
//! moonbridge (`--peer`), and the transports both speak (`--transport`).

use std::net::SocketAddr;
use std::path::Path;
use std::process::{Command, Stdio};

use anyhow::bail;
use clap::ValueEnum;

/// The players' transport to the proxy under test.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum TransportArg {
    Tcp,
    Ws,
    Wss,
}

/// A relay measured beside moonbridge.
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum PeerArg {
    /// HAProxy in TCP mode (transport tcp).
    Haproxy,
    /// websocat as a WebSocket-to-TCP bridge (transport ws).
    Websocat,
    /// The floor: a minimal relay of this program (`session-bench floor-relay`, bench/src/floor/), two
    /// blocking threads per connection, no parsing (transport tcp or ws).
    Floor,
}

impl PeerArg {
    /// Its name in reports.
    pub fn name(self) -> &'static str {
        match self {
            Self::Haproxy => "haproxy",
            Self::Websocat => "websocat",
            Self::Floor => "floor",
        }
    }

    /// Fails unless the peer serves `transport`.
    pub fn check(self, transport: TransportArg) -> anyhow::Result<()> {
        let fits = match self {
            Self::Haproxy => transport == TransportArg::Tcp,
            Self::Websocat => transport == TransportArg::Ws,
            Self::Floor => transport != TransportArg::Wss,
        };
        if !fits {
            let want = match self {
                Self::Haproxy => "tcp",
                Self::Websocat => "ws",
                Self::Floor => "tcp or ws",
            };
            bail!("--peer {} runs with --transport {want}", self.name());
        }
        Ok(())
    }

    /// The command that runs the peer on `listen` in front of `backend` for at most `conns` players (files it
    /// needs go to `dir`), its standard output discarded; `bin` replaces the peer's program. HAProxy is looked
    /// for on `PATH`, then as `/usr/sbin/haproxy` (Debian's place, outside a non-root user's `PATH`).
    pub fn command(
        self,
        bin: Option<&Path>,
        listen: SocketAddr,
        backend: SocketAddr,
        transport: TransportArg,
        conns: usize,
        dir: &Path,
    ) -> anyhow::Result<Command> {
        self.check(transport)?;
        let mut c = match self {
            Self::Haproxy => {
                // Two descriptors per connection: HAProxy refuses to start when its limit cannot cover maxconn.
                let maxconn = conns + 64;
                let cfg = dir.join("haproxy.cfg");
                std::fs::write(
                    &cfg,
                    format!(
                        "global\n  maxconn {maxconn}\ndefaults\n  mode tcp\n  timeout connect 5s\n  timeout client 1h\n  \
                         timeout server 1h\nfrontend mc\n  bind {listen}\n  default_backend bench\nbackend bench\n  \
                         server b {backend}\n"
                    ),
                )?;
                let on_path = std::env::var_os("PATH")
                    .is_some_and(|p| std::env::split_paths(&p).any(|d| d.join("haproxy").is_file()));
                let default = if on_path { Path::new("haproxy") } else { Path::new("/usr/sbin/haproxy") };
                let mut c = Command::new(bin.unwrap_or(default));
                c.args(["-db", "-f"]).arg(&cfg);
                c
            }
            Self::Websocat => {
                let mut c = Command::new(bin.unwrap_or(Path::new("websocat")));
                c.args(["--binary", "-E", &format!("ws-l:{listen}"), &format!("tcp:{backend}")]);
                c
            }
            Self::Floor => {
                let me = std::env::current_exe()?;
                let mut c = Command::new(bin.unwrap_or(&me));
                let t = if transport == TransportArg::Ws { "ws" } else { "tcp" };
                c.args(["floor-relay", "--transport", t, "--listen", &listen.to_string()]);
                c.args(["--backend", &backend.to_string()]);
                c
            }
        };
        c.stdout(Stdio::null());
        Ok(c)
    }

    /// What to say when the peer's program cannot start.
    pub fn missing(self) -> &'static str {
        match self {
            Self::Haproxy => "cannot start haproxy (bench/peers.sh installs it)",
            Self::Websocat => "cannot start websocat (bench/peers.sh installs it)",
            Self::Floor => "cannot start the floor relay",
        }
    }
}
