//! The session benchmark's variants: `direct` (clients straight to the backend), each moonbridge process the
//! options ask for (`--online`, `--also-runtime`, `--mode post-transfer`, `--mode network`), a peer, or an
//! external `--target`; and the processes behind them.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Duration;

use anyhow::{bail, Context};
use moonbridge_client::Options;
use moonbridge_test_certs::free_port;

use super::args::{ModeArg, RuntimeArg, SessionArgs};
use crate::peers::{PeerArg, TransportArg};
use crate::process::{self, Output, Process};

/// A process under test (the proxy or a peer), killed on drop.
pub struct Spawned {
    pub child: Process,
    pub addr: SocketAddr,
    /// The proxy's `[metrics]` listener.
    pub metrics: Option<SocketAddr>,
}

/// Starts a moonbridge in front of `backend` with one listener, `[metrics]` and `runtime` (more sections).
fn spawn_proxy(
    bin: &Path,
    transport: TransportArg,
    backend: SocketAddr,
    dir: &Path,
    cert: Option<&(PathBuf, PathBuf, PathBuf)>,
    session_server: Option<&str>,
    runtime: &str,
) -> anyhow::Result<Spawned> {
    let port = free_port()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let metrics: SocketAddr = format!("127.0.0.1:{}", free_port()?).parse()?;
    let listener = match (transport, cert) {
        (TransportArg::Tcp, _) => format!("transport = \"tcp\"\nbind = \"{addr}\"\n"),
        (TransportArg::Ws, _) => format!("transport = \"ws\"\nbind = \"{addr}\"\n"),
        (TransportArg::Wss, Some((c, k, _))) => {
            format!(
                "transport = \"wss\"\nbind = \"{addr}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n",
                c.display(),
                k.display()
            )
        }
        (TransportArg::Wss, None) => bail!("wss needs a certificate"),
    };
    let auth = match session_server {
        Some(url) => format!("[auth]\nmode = \"online\"\nsession_server = \"{url}\"\n"),
        None => String::new(),
    };
    let config = dir.join(format!("moonbridge-{port}.toml"));
    std::fs::write(
        &config,
        // Every benchmark connection comes from 127.0.0.1: the per-address rate limits are off.
        format!(
            "[[listener]]\n{listener}\n[[backend]]\nname = \"bench\"\naddress = \"{backend}\"\n{auth}\n\
             [rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n{runtime}\
             [metrics]\nbind = \"{metrics}\"\n"
        ),
    )?;
    // Its warnings are shown as they come.
    let child = process::spawn_moonbridge(bin, &config, "warn", Output::Echo("[moonbridge] "))?;
    let s = Spawned { child, addr, metrics: Some(metrics) };
    process::wait_for_port(addr, "moonbridge")?;
    Ok(s)
}

/// The `[runtime]` and `[compression]` sections for the flags given, and nothing for those left out, so
/// `--proxy-bin` can run a proxy older than those sections.
fn runtime_toml(mode: Option<RuntimeArg>, workers: usize, zstd_level: Option<i32>) -> String {
    let mut t = String::new();
    if mode.is_some() || workers > 0 {
        t.push_str("[runtime]\n");
        if let Some(r) = mode {
            t.push_str(&format!("mode = \"{}\"\n", r.name()));
        }
        if workers > 0 {
            t.push_str(&format!("workers = {workers}\n"));
        }
    }
    if let Some(level) = zstd_level {
        t.push_str(&format!("[compression]\nlevel = {level}\n"));
    }
    t
}

/// Starts `peer` in front of `backend`.
fn spawn_peer(
    peer: PeerArg,
    bin: Option<&Path>,
    backend: SocketAddr,
    dir: &Path,
    transport: TransportArg,
) -> anyhow::Result<Spawned> {
    let port = free_port()?;
    let addr: SocketAddr = format!("127.0.0.1:{port}").parse()?;
    let mut command = peer.command(bin, addr, backend, transport, 4096, dir)?;
    let prefix = format!("[{}] ", peer.name());
    let child = process::spawn(&mut command, Output::Echo(&prefix), || peer.missing().to_string())?;
    let s = Spawned { child, addr, metrics: None };
    process::wait_for_port(addr, "the peer")?;
    Ok(s)
}

/// One thing the clients are measured through, in every repeat.
#[derive(Clone)]
pub struct Variant {
    pub name: String,
    /// Server transfers per player before the warmup.
    pub switches: usize,
    pub url: String,
    pub options: Options,
    pub pid: Option<u32>,
    pub online: bool,
    /// The proxy's `[metrics]` listener (WebSocket bytes on the wire).
    pub metrics: Option<SocketAddr>,
    /// A second proxy process whose CPU counts with `pid`'s (`--mode network`: the other instance).
    pub also_pid: Option<u32>,
    /// `--mode network`, `moonbridge-linked`: players moved onto an instance link after their login.
    pub relink: Option<crate::network::Relink>,
}

/// `--mode network`'s processes: Redis, the two instances, and the owner's and the linked variant's switches.
type Network = (crate::network::Redis, Vec<Spawned>, Arc<crate::network::Switch>, Arc<crate::network::Switch>);

/// The processes behind the variants, kept until the run ends (the network's first: dropped first).
#[derive(Default)]
pub struct Processes {
    network: Vec<Network>,
    proxies: Vec<Spawned>,
}

/// The URL of `addr` over `t` (wss names `localhost`, the certificate's name).
fn url(t: TransportArg, addr: SocketAddr) -> String {
    match t {
        TransportArg::Tcp => format!("tcp://{addr}"),
        TransportArg::Ws => format!("ws://{addr}/mc"),
        TransportArg::Wss => format!("wss://localhost:{}/mc", addr.port()),
    }
}

/// Starts what `args` asks for and returns the variants in their first order, and the processes to keep.
pub fn build(
    args: &SessionArgs,
    backend_addr: SocketAddr,
    dir: &Path,
    cert: Option<&(PathBuf, PathBuf, PathBuf)>,
    options: &Options,
    direct_options: Options,
) -> anyhow::Result<(Vec<Variant>, Processes)> {
    let mut variants = vec![Variant {
        name: "direct".into(),
        switches: 0,
        url: url(TransportArg::Tcp, backend_addr),
        options: direct_options,
        pid: None,
        online: false,
        metrics: None,
        also_pid: None,
        relink: None,
    }];
    let mut keep = Processes::default();
    match args.target.as_str() {
        "direct" => {}
        "proxy" => {
            let bin = match &args.proxy_bin {
                Some(b) => b.clone(),
                None => std::env::current_exe()?.with_file_name("moonbridge"),
            };
            // Each moonbridge variant: its own process, config and name.
            let mut add_proxy =
                |name: String, session_server: Option<&str>, runtime: Option<RuntimeArg>, extra: &str| {
                    // The `[runtime]` sections, then the variant's own (a second backend, `[transfer]`).
                    let runtime = runtime_toml(runtime, args.proxy_workers, args.proxy_zstd_level) + extra;
                    let p = spawn_proxy(&bin, args.transport, backend_addr, dir, cert, session_server, &runtime)?;
                    variants.push(Variant {
                        name,
                        switches: 0,
                        url: url(args.transport, p.addr),
                        options: options.clone(),
                        pid: Some(p.child.id()),
                        online: session_server.is_some(),
                        metrics: p.metrics,
                        also_pid: None,
                        relink: None,
                    });
                    keep.proxies.push(p);
                    anyhow::Ok(())
                };
            add_proxy("moonbridge".into(), None, args.proxy_runtime, "")?;
            if let Some(runtime) = args.also_runtime {
                add_proxy(format!("moonbridge-{}", runtime.name()), None, Some(runtime), "")?;
            }
            if args.online {
                let url = format!("http://{}", crate::sessions::start()?);
                add_proxy("moonbridge-online".into(), Some(&url), args.proxy_runtime, "")?;
            }
            if args.mode == ModeArg::PostTransfer {
                // One proxy with the transfer layer on, measured with players who never switch and with players
                // switched before their warmup: the second backend is the same fake backend.
                let [first, second] = crate::client::SWITCH_TARGETS;
                let extra = format!(
                    "[[backend]]\nname = \"{second}\"\naddress = \"{backend_addr}\"\n\
                     [transfer]\ntargets = [\"{first}\", \"{second}\"]\n"
                );
                add_proxy("moonbridge-transfer".into(), None, args.proxy_runtime, &extra)?;
                let mut switched = variants.last().map(|v| Variant {
                    name: "moonbridge-switched".into(),
                    switches: args.switches.max(1),
                    ..v.clone()
                });
                variants.extend(switched.take());
            }
            if args.mode == ModeArg::Network {
                if args.transport == TransportArg::Tcp {
                    bail!("--mode network measures a resumed WebSocket: use --transport ws or wss");
                }
                let redis = crate::network::Redis::start()?;
                let secret = crate::network::write_secret(dir)?;
                let mut instances = Vec::new();
                for _ in 0..2 {
                    let extra = crate::network::network_toml(&redis, &secret);
                    let runtime = runtime_toml(args.proxy_runtime, args.proxy_workers, args.proxy_zstd_level) + &extra;
                    instances.push(spawn_proxy(&bin, args.transport, backend_addr, dir, cert, None, &runtime)?);
                }
                for p in &instances {
                    let m = p.metrics.context("the instances have metrics")?;
                    crate::network::wait_metric(m, "moonbridge_network_instances", 2.0, Duration::from_secs(20))?;
                }
                let (a, b) = (&instances[0], &instances[1]);
                let owner = crate::network::Switch::start(vec![a.addr])?;
                let linked = crate::network::Switch::start(vec![a.addr, b.addr])?;
                for (name, switch, relink) in
                    [("moonbridge-owner", &owner, false), ("moonbridge-linked", &linked, true)]
                {
                    variants.push(Variant {
                        name: name.into(),
                        switches: 0,
                        url: url(args.transport, switch.addr),
                        options: options.clone(),
                        pid: Some(a.child.id()),
                        online: false,
                        metrics: a.metrics,
                        also_pid: Some(b.child.id()),
                        relink: relink.then(|| crate::network::Relink {
                            switch: Arc::clone(switch),
                            carrier_metrics: b.metrics.unwrap_or(a.addr),
                        }),
                    });
                }
                keep.network.push((redis, instances, owner, linked));
            }
            if let Some(peer) = args.peer {
                peer.check(args.transport)?;
                let p = spawn_peer(peer, args.peer_bin.as_deref(), backend_addr, dir, args.transport)?;
                let mut o = options.clone();
                o.subprotocol = false; // plain bridges do not echo moonbridge.v1
                variants.push(Variant {
                    name: peer.name().into(),
                    switches: 0,
                    url: url(args.transport, p.addr),
                    options: o,
                    pid: Some(p.child.id()),
                    online: false,
                    metrics: p.metrics,
                    also_pid: None,
                    relink: None,
                });
                keep.proxies.push(p);
            }
        }
        other => {
            use std::net::ToSocketAddrs;
            let bad = || format!("--target {other:?} is not proxy, direct or HOST:PORT");
            // Checked here, so a typo fails before any phase runs.
            other.to_socket_addrs().with_context(bad)?.next().with_context(bad)?;
            let url = match args.transport {
                // The host as given, so TLS checks the name the endpoint's certificate carries.
                TransportArg::Tcp => format!("tcp://{other}"),
                TransportArg::Ws => format!("ws://{other}/mc"),
                TransportArg::Wss => format!("wss://{other}/mc"),
            };
            let mut target_options = options.clone();
            target_options.ca_file = args.ca_file.clone();
            target_options.server_name = args.server_name.clone();
            variants.push(Variant {
                name: "target".into(),
                switches: 0,
                url,
                options: target_options,
                pid: args.target_pid,
                online: false,
                metrics: None,
                also_pid: None,
                relink: None,
            });
        }
    }
    Ok((variants, keep))
}
