//! `moonbridge`: the proxy daemon's command line.

use std::io::IsTerminal;
use std::path::PathBuf;
use std::process::ExitCode;

use anyhow::Context;
use clap::Parser;
use moonbridge_proxy::admin::{self, client::Client, client::CtlError, Reach};
use moonbridge_proxy::config::RuntimeMode;
use moonbridge_proxy::{Config, Server};
use tracing::{info, warn};

/// MoonBridge: Minecraft 1.7.10 proxy for players over TCP, ws:// and wss://.
///
/// Without arguments it runs on built-in defaults: a tcp listener on 0.0.0.0:25577 and a ws listener on
/// 0.0.0.0:8080 path /mc, routing every host to the backend at 127.0.0.1:25565, with no forwarding. Log level comes from RUST_LOG (default: info); logs go to
/// stderr. SIGTERM or Ctrl-C stop it gracefully; SIGHUP reloads the --config file (backends, routes,
/// forwarding, limits, status, rate limits and compression; listeners, [metrics], [auth] and [runtime] need a
/// restart).
#[derive(Debug, Parser)]
#[command(name = "moonbridge", version, about, long_about, args_conflicts_with_subcommands = true)]
struct Cli {
    /// Run with the TOML configuration in FILE (see docs/configuration.md).
    #[arg(short, long, value_name = "FILE", conflicts_with = "check_config")]
    config: Option<PathBuf>,

    /// Validate FILE and exit: 0 when valid, 1 with one line per problem naming the key.
    #[arg(long, value_name = "FILE")]
    check_config: Option<PathBuf>,

    /// Ask the [metrics] listener at ADDR (IP:port) for GET /healthz and exit: 0 when it answers 200 within
    /// 2 seconds, 1 otherwise (a container HEALTHCHECK: the image has no shell and no curl).
    #[arg(long, value_name = "ADDR", conflicts_with_all = ["config", "check_config"])]
    probe: Option<std::net::SocketAddr>,

    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Debug, clap::Subcommand)]
enum Command {
    /// Operate a running proxy (or its whole network) through its admin API ([metrics] admin_token_file).
    ///
    /// Exit codes: 0 done; 1 the API refused the request or found nothing, or an action did not reach everyone
    /// it was for (an instance could not be asked, the named player could not take it); 2 a usage error; 3 the
    /// token was refused; 4 the API could not be reached, was busy or did not answer as one.
    Ctl(Ctl),
}

#[derive(Debug, clap::Args)]
struct Ctl {
    /// The [metrics] listener of any instance, as http://HOST:PORT.
    #[arg(long, value_name = "URL", default_value = "http://127.0.0.1:9477", global = true)]
    url: String,
    /// The file holding the admin token (the same as metrics.admin_token_file).
    #[arg(long, value_name = "FILE", default_value = "/etc/moonbridge/admin.token", global = true)]
    token_file: PathBuf,
    /// Print the answer as JSON (players: an array of rows) instead of a table or a sentence.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    verb: Verb,
}

#[derive(Debug, clap::Subcommand)]
enum Verb {
    /// List the network's players (name, instance, backend, address, transport, carriage, session age).
    Players {
        /// Only the players on this backend.
        #[arg(long, value_name = "BACKEND")]
        backend: Option<String>,
        /// Only the players on this instance (its 16-hex-digit id).
        #[arg(long, value_name = "ID")]
        instance: Option<String>,
    },
    /// Show one player, wherever in the network it plays.
    Find {
        /// The player's name (any case).
        name: String,
    },
    /// Disconnect a player, wherever in the network it plays.
    Kick {
        /// The player's name (any case).
        name: String,
        /// What its disconnect screen says.
        #[arg(long, default_value = "Kicked by an operator")]
        reason: String,
    },
    /// Switch a player, or every player on a backend (--from), to another backend.
    Send {
        /// The player's name (any case); omit with --from.
        #[arg(required_unless_present = "from", conflicts_with = "from")]
        name: Option<String>,
        /// Every player on this backend.
        #[arg(long, value_name = "BACKEND")]
        from: Option<String>,
        /// The backend to switch to.
        #[arg(long, value_name = "BACKEND")]
        to: String,
    },
    /// Send a chat line to every player of the network, or to the players on one backend.
    Message {
        /// Only the players on this backend.
        #[arg(long, value_name = "BACKEND")]
        backend: Option<String>,
        /// The text (words are joined with spaces).
        #[arg(required = true)]
        text: Vec<String>,
    },
    /// Show the delivery figures of the players on the instance at --url: bytes queued in each lane and the age
    /// of the oldest, the longest an urgent frame waited, and for paced players (the client library) the
    /// delivery rate, round trip, window and bytes in flight (docs/lanes.md).
    Delivery,
    /// Drain the instance at --url: what SIGTERM does (players move to the other instances).
    Drain {
        /// Keep the process up once drained (until SIGTERM), for maintenance.
        #[arg(long)]
        stay: bool,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    if let Some(Command::Ctl(ctl)) = cli.command {
        return match ctl_run(&ctl) {
            Ok((out, whole)) => {
                // A closed pipe (`ctl players | head`) is not an error of the call.
                let _ = std::io::Write::write_all(&mut std::io::stdout().lock(), out.as_bytes());
                if whole {
                    ExitCode::SUCCESS
                } else {
                    ExitCode::FAILURE
                }
            }
            Err(e) => {
                eprintln!("moonbridge ctl: {e}");
                ExitCode::from(e.exit_code())
            }
        };
    }
    if let Some(addr) = cli.probe {
        return match probe(addr) {
            Ok(()) => ExitCode::SUCCESS,
            Err(e) => {
                eprintln!("{addr}: {e}");
                ExitCode::FAILURE
            }
        };
    }
    if let Some(path) = cli.check_config {
        return match Config::load(&path) {
            Ok(c) => {
                println!("{}: OK ({} listener(s), {} backend(s))", path.display(), c.listeners.len(), c.backends.len());
                ExitCode::SUCCESS
            }
            Err(e) => {
                for line in e.problems() {
                    eprintln!("{}: {line}", path.display());
                }
                ExitCode::FAILURE
            }
        };
    }
    init_logging();
    match run(cli.config) {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            tracing::error!("{}", said_once(&e));
            ExitCode::FAILURE
        }
    }
}

/// `moonbridge ctl`: one call to the admin API; what to print, and whether the action reached everyone it was
/// for (false when an instance could not be asked, or a named player could not take it: exit 1).
fn ctl_run(ctl: &Ctl) -> Result<(String, bool), CtlError> {
    let client = Client::new(&ctl.url, &ctl.token_file)?;
    let reach = |what: &str, r: Reach| {
        let mut line = format!("{what}: {} player(s)", r.done);
        if r.missed > 0 {
            line.push_str(&format!(", {} could not take it (their backend cannot switch players)", r.missed));
        }
        if r.unreached > 0 {
            line.push_str(&format!(", {} instance(s) could not be asked", r.unreached));
        }
        line + "\n"
    };
    // An action's answer: whole when every instance was asked and, for one named player, it took it.
    let acted = |what: &str, r: Reach, named: bool| {
        let whole = r.unreached == 0 && (!named || r.done > 0);
        (as_json(ctl.json, &r).unwrap_or_else(|| reach(what, r)), whole)
    };
    Ok(match &ctl.verb {
        Verb::Players { backend, instance } => {
            let rows = client.players(backend.as_deref(), instance.as_deref())?;
            (as_json(ctl.json, &rows).unwrap_or_else(|| admin::client::table(&rows)), true)
        }
        Verb::Find { name } => {
            let row = client.find(name)?;
            (as_json(ctl.json, &row).unwrap_or_else(|| admin::client::table(std::slice::from_ref(&row))), true)
        }
        Verb::Kick { name, reason } => {
            let r = client.act("kick", &serde_json::json!({ "player": name, "reason": reason }))?;
            acted("kicked", r, true)
        }
        Verb::Send { name, from, to } => {
            let body = match (name, from) {
                (Some(n), _) => serde_json::json!({ "player": n, "to": to }),
                (None, f) => serde_json::json!({ "from": f, "to": to }),
            };
            let r = client.act("send", &body)?;
            acted(&format!("sent to {to}"), r, name.is_some())
        }
        Verb::Message { backend, text } => {
            let body = match backend {
                Some(b) => serde_json::json!({ "text": text.join(" "), "backend": b }),
                None => serde_json::json!({ "text": text.join(" ") }),
            };
            acted("messaged", client.act("message", &body)?, false)
        }
        Verb::Delivery => {
            let rows = client.delivery()?;
            (as_json(ctl.json, &rows).unwrap_or_else(|| admin::client::delivery_table(&rows)), true)
        }
        Verb::Drain { stay } => {
            let answer = client.drain(!stay)?;
            let said = as_json(ctl.json, &answer).unwrap_or_else(|| {
                let after = if *stay { "stays up afterwards (until SIGTERM)" } else { "exits afterwards" };
                format!("draining {}: players move to the other instances; the process {after}\n", ctl.url)
            });
            (said, true)
        }
    })
}

/// With `--json`, `answer` as one line of JSON.
fn as_json<T: serde::Serialize>(on: bool, answer: &T) -> Option<String> {
    on.then(|| serde_json::to_string(answer).unwrap_or_default() + "\n")
}

/// How long `--probe` waits for the connection and the answer, in all.
const PROBE_TIMEOUT: std::time::Duration = std::time::Duration::from_secs(2);

/// `--probe`: `GET /healthz` on the metrics listener at `addr`; `Ok` on a 200 answer, all within
/// [`PROBE_TIMEOUT`].
fn probe(addr: std::net::SocketAddr) -> anyhow::Result<()> {
    use std::io::{Read, Write};
    let deadline = std::time::Instant::now() + PROBE_TIMEOUT;
    // What is left of the deadline, for the next step (an error once it passed).
    let left = || {
        deadline
            .checked_duration_since(std::time::Instant::now())
            .filter(|d| !d.is_zero())
            .ok_or_else(|| anyhow::anyhow!("no answer within {} s", PROBE_TIMEOUT.as_secs()))
    };
    let mut s = std::net::TcpStream::connect_timeout(&addr, left()?)?;
    s.set_write_timeout(Some(left()?))?;
    s.write_all(b"GET /healthz HTTP/1.1\r\nHost: moonbridge\r\nConnection: close\r\n\r\n")?;
    // The status line is all that is needed: at most 64 bytes, each read within what is left of the deadline.
    let mut head = Vec::with_capacity(64);
    let mut buf = [0u8; 64];
    while head.len() < 64 && !head.contains(&b'\n') {
        s.set_read_timeout(Some(left()?))?;
        let n = s.read(&mut buf)?;
        if n == 0 {
            break;
        }
        head.extend(buf.iter().take(n));
    }
    let line = String::from_utf8_lossy(&head);
    let status = line.lines().next().unwrap_or_default();
    anyhow::ensure!(status.starts_with("HTTP/1.1 200 "), "/healthz answered {status:?}, not 200");
    Ok(())
}

/// `e` and its causes, each said once: a cause whose text the message so far already ends with (the library's
/// errors name their cause last) is not repeated.
fn said_once(e: &anyhow::Error) -> String {
    let mut out = String::new();
    for cause in e.chain() {
        let text = cause.to_string();
        if out.ends_with(&text) {
            continue;
        }
        if !out.is_empty() {
            out.push_str(": ");
        }
        out.push_str(&text);
    }
    out
}

fn init_logging() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(std::io::stderr)
        .with_ansi(std::io::stderr().is_terminal())
        .init();
}

fn run(config_path: Option<PathBuf>) -> anyhow::Result<()> {
    let config = match &config_path {
        Some(p) => Config::load(p).with_context(|| format!("invalid configuration {}", p.display()))?,
        None => Config::default(),
    };
    let settings = config.settings().context("invalid configuration")?;
    // A session holds the player's socket and the backend's, and a third while a switch logs the player in to
    // the next backend when `[transfer]` can move players (docs/configuration.md).
    let transfers = !settings.tunables.transfer.targets.is_empty() || !settings.tunables.transfer.fallback.is_empty();
    let per_connection = if transfers { 3 } else { 2 };
    match rlimit::increase_nofile_limit(u64::MAX) {
        Ok(n) if (n as usize) < settings.tunables.limits.max_connections * per_connection => warn!(
            "open file limit is {n}: fewer than {per_connection} per allowed connection (limits.max_connections = {})",
            settings.tunables.limits.max_connections
        ),
        Ok(_) => {}
        Err(e) => warn!("cannot raise the open file limit: {e}"),
    }
    // Thread-per-core: this runtime only accepts connections, serves [metrics] and handles signals; the
    // server starts its own session workers. Multi-thread: tokio's workers run everything.
    let mut builder = match settings.runtime.mode {
        RuntimeMode::MultiThread => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            if settings.runtime.workers > 0 {
                b.worker_threads(settings.runtime.workers);
            }
            b
        }
        _ => tokio::runtime::Builder::new_current_thread(),
    };
    let runtime = builder.enable_all().build().context("cannot start the runtime")?;
    let result = runtime.block_on(async {
        match &config_path {
            Some(p) => info!("moonbridge {} starting with {}", env!("CARGO_PKG_VERSION"), p.display()),
            None => info!("moonbridge {} starting with built-in defaults (no --config)", env!("CARGO_PKG_VERSION")),
        }
        for b in &settings.backends {
            info!("backend {} at {} forwarding={}", b.name, b.address, b.forwarding);
        }
        let default_backend = settings.backends.get(settings.routes.default_backend).map_or("-", |b| b.name.as_str());
        info!(
            "routing: {} host route(s), default backend {default_backend}; auth mode {}",
            settings.routes.hosts.len(),
            settings.auth.mode
        );
        // SIGHUP, SIGTERM and Ctrl-C are caught from here on (before binding): a signal right after start is
        // handled, never the default action that would end the process.
        #[cfg(unix)]
        let hup = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::hangup());
        let shutdown = shutdown_signal();
        let server = Server::bind(&config).await?;
        #[cfg(unix)]
        match hup {
            Ok(hup) => {
                tokio::spawn(reload_on_sighup(hup, server.reload_handle(), config_path.clone()));
            }
            Err(e) => warn!("cannot listen for SIGHUP, reloading is unavailable: {e}"),
        }
        server.run(shutdown).await;
        anyhow::Ok(())
    });
    // Sessions have ended; do not wait for blocking work still in flight (a session-server call).
    runtime.shutdown_timeout(std::time::Duration::from_secs(1));
    result
}

/// Reloads the configuration file at every SIGHUP; a file that does not load, does not validate or changes
/// what needs a restart is refused with the reason, and the running configuration stays.
#[cfg(unix)]
async fn reload_on_sighup(
    mut hup: tokio::signal::unix::Signal,
    handle: moonbridge_proxy::ReloadHandle,
    path: Option<PathBuf>,
) {
    while hup.recv().await.is_some() {
        let Some(path) = &path else {
            warn!("SIGHUP received, but there is no --config file to reload (running on built-in defaults)");
            continue;
        };
        let loaded = Config::load(path);
        match loaded.map_err(anyhow::Error::from).and_then(|c| Ok(handle.reload(&c)?)) {
            Ok(summary) => info!("SIGHUP: reloaded {}: {summary}", path.display()),
            Err(e) => {
                warn!(
                    "SIGHUP: reload of {} refused, the running configuration stays: {}",
                    path.display(),
                    said_once(&e)
                )
            }
        }
    }
}

/// Completes on SIGTERM or Ctrl-C (SIGINT). The handlers are installed when this is called, not when the future
/// is first polled, so a signal that arrives right after the listeners are announced is never lost (the default
/// action would end the process without the graceful shutdown).
fn shutdown_signal() -> impl std::future::Future<Output = ()> {
    #[cfg(unix)]
    let (int, term) = {
        use tokio::signal::unix::{signal, SignalKind};
        (signal(SignalKind::interrupt()), signal(SignalKind::terminate()))
    };
    async move {
        #[cfg(unix)]
        {
            let wait = |s: std::io::Result<tokio::signal::unix::Signal>| async move {
                match s {
                    Ok(mut s) => {
                        s.recv().await;
                    }
                    Err(_) => std::future::pending::<()>().await,
                }
            };
            tokio::select! {
                () = wait(int) => info!("Ctrl-C received"),
                () = wait(term) => info!("SIGTERM received"),
            }
        }
        #[cfg(not(unix))]
        {
            if tokio::signal::ctrl_c().await.is_err() {
                std::future::pending::<()>().await;
            }
            info!("Ctrl-C received");
        }
    }
}
