//! Starting the capacity run's processes: the file limits checked first, then the backend process and the
//! proxies (or the peer), each logging to its own file in the run's directory.

use std::net::SocketAddr;
use std::path::Path;

use anyhow::{bail, Context};
use moonbridge_test_certs::{free_port, TestCert};

use super::args::{CapacityArgs, SPARE_FDS};
use crate::backend::Load;
use crate::peers::{PeerArg, TransportArg};
use crate::process::{self, Child, Output, Process};

/// Raises this process's file limit and fails when `players` (`per_proxy` of them per proxy) cannot fit (see
/// docs/operations.md, "Many players").
pub fn check_file_limits(players: usize, per_proxy: usize) -> anyhow::Result<()> {
    let own = rlimit::increase_nofile_limit(u64::MAX).unwrap_or(0);
    let (_, hard) = rlimit::getrlimit(rlimit::Resource::NOFILE)?;
    if players as u64 + SPARE_FDS > own {
        bail!(
            "{players} players need {} file descriptors in this process, and its limit is {own}; raise the hard \
             limit (docs/operations.md, \"Many players\")",
            players as u64 + SPARE_FDS
        );
    }
    let per_proxy_fds = 2 * per_proxy as u64 + SPARE_FDS;
    if per_proxy_fds > hard {
        let fit = (hard.saturating_sub(SPARE_FDS) / 2).max(1) as usize;
        bail!(
            "{per_proxy} players per proxy need {per_proxy_fds} file descriptors in each proxy process (a player \
             socket and a backend socket each), and the hard limit here is {hard}: raise it (docs/operations.md, \
             \"Many players\") or pass --proxies {}",
            players.div_ceil(fit)
        );
    }
    Ok(())
}

/// Starts the backend process (`session-bench capacity-backend`, logging to `backend.log` in `dir`); returns
/// it and the address it listens on.
pub async fn start_backend(dir: &Path, load: Load) -> anyhow::Result<(Child, String)> {
    let load_name = match load {
        Load::Modded => "modded",
        Load::Light => "light",
        Load::Forge => "forge",
    };
    let mut backend = std::process::Command::new(std::env::current_exe()?)
        .args(["capacity-backend", "--load", load_name])
        .stdin(std::process::Stdio::piped())
        .stdout(std::process::Stdio::piped())
        .stderr(std::fs::File::create(dir.join("backend.log"))?)
        .spawn()
        .context("cannot start the backend process")?;
    let stdout = backend.stdout.take().context("no backend stdout")?;
    let backend = Child(backend);
    let first = tokio::task::spawn_blocking(move || {
        let mut line = String::new();
        std::io::BufRead::read_line(&mut std::io::BufReader::new(stdout), &mut line).map(|_| line)
    })
    .await??;
    let backend_addr = first.trim().strip_prefix("listening ").context("the backend did not start")?.to_owned();
    Ok((backend, backend_addr))
}

/// Starts `args.proxies` moonbridge processes (or the peer) in front of `backend_addr`, each for `per_proxy`
/// players, logging to `proxy-N.log` in `dir`; returns them and their ports.
pub async fn start_proxies(
    args: &CapacityArgs,
    peer: Option<PeerArg>,
    dir: &Path,
    cert: &TestCert,
    backend_addr: &str,
    per_proxy: usize,
) -> anyhow::Result<(Vec<Process>, Vec<u16>)> {
    let mut proxies = Vec::new();
    let mut ports = Vec::new();
    let listener = match args.transport {
        TransportArg::Tcp => "transport = \"tcp\"".to_owned(),
        TransportArg::Ws => "transport = \"ws\"".to_owned(),
        TransportArg::Wss => {
            format!("transport = \"wss\"\ntls_cert = \"{}\"\ntls_key = \"{}\"", cert.cert.display(), cert.key.display())
        }
    };
    for p in 0..args.proxies {
        let port = free_port()?;
        let log = dir.join(format!("proxy-{p}.log"));
        if let Some(peer) = peer {
            let listen = SocketAddr::from(([127, 0, 0, 1], port));
            let mut command =
                peer.command(args.peer_bin.as_deref(), listen, backend_addr.parse()?, args.transport, per_proxy, dir)?;
            proxies.push(process::spawn(&mut command, Output::File(&log), || peer.missing().to_string())?);
            process::wait_listening(listen, &format!("proxy {p}"), Some(&log)).await?;
            ports.push(port);
            continue;
        }
        let runtime = if args.proxy_workers > 0 {
            format!("[runtime]\nworkers = {}\n", args.proxy_workers)
        } else {
            String::new()
        };
        let config = dir.join(format!("capacity-{p}.toml"));
        std::fs::write(
            &config,
            format!(
                "[[listener]]\n{listener}\nbind = \"127.0.0.1:{port}\"\n\n\
                 [[backend]]\nname = \"capacity\"\naddress = \"{backend_addr}\"\n\n[auth]\nmode = \"offline\"\n\n\
                 [limits]\nmax_connections = {}\n\n[rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n\n\
                 {runtime}",
                per_proxy + 100,
            ),
        )?;
        // Handshake timeouts are logged at debug (rate-limited), so a failed join can be explained.
        let rust_log = "warn,moonbridge_proxy::listen=info,moonbridge_proxy::session::serve=debug";
        proxies.push(process::spawn_moonbridge(&args.proxy_bin, &config, rust_log, Output::File(&log))?);
        let addr = SocketAddr::from(([127, 0, 0, 1], port));
        process::wait_listening(addr, &format!("proxy {p}"), Some(&log)).await?;
        ports.push(port);
    }
    Ok((proxies, ports))
}
