//! The soak's shared state: the faults injected so far (which explain sessions that end early), what the harness
//! counts, the commands sent to players, and the proxies' listeners.

use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize};
use std::sync::Mutex;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;

use super::args::WRITE_STALL_S;
use crate::report::Failures;
use crate::workload;

/// A fault, and which sessions it may end.
#[derive(Clone, Debug)]
pub struct Fault {
    pub name: &'static str,
    pub start: Instant,
    pub end: Instant,
    /// `None`: any session; else these players only.
    pub players: Option<Vec<usize>>,
}

/// What the harness counts.
#[derive(Debug, Default)]
pub struct Counters {
    pub sessions: AtomicU64,
    pub logins: AtomicU64,
    pub ticks: AtomicU64,
    pub bytes_in: AtomicU64,
    /// Sessions ended early, explained by a fault, cleanly.
    pub hit_clean: AtomicU64,
    /// Logins refused with a Login Disconnect while a fault was active.
    pub refused_with_reason: AtomicU64,
    pub failures: Failures<50>,
}

impl Counters {
    pub fn fail(&self, what: String) {
        self.failures.push(what);
    }
}

pub struct Shared {
    pub faults: Mutex<Vec<Fault>>,
    pub counters: Counters,
    /// Per player: a pending command (0 none, 1 reset, 2 FIN, 3 stop reading).
    pub commands: Vec<AtomicUsize>,
    pub stop: CancellationToken,
    pub templates: Vec<Vec<workload::Spec>>,
    pub ca: PathBuf,
    /// When the run began: failures say how far into the run they happened.
    pub began: Instant,
}

impl Shared {
    /// True when a fault that may hit `player` was active within a few seconds of `at`.
    pub fn explained(&self, player: usize, at: Instant) -> Option<&'static str> {
        let slack = Duration::from_secs(WRITE_STALL_S + 6);
        let faults = self.faults.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        faults
            .iter()
            .find(|f| {
                f.start <= at + Duration::from_millis(200)
                    && at <= f.end + slack
                    && f.players.as_ref().is_none_or(|p| p.contains(&player))
            })
            .map(|f| f.name)
    }

    pub fn add_fault(&self, name: &'static str, start: Instant, end: Instant, players: Option<Vec<usize>>) {
        self.faults.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(Fault { name, start, end, players });
    }
}

/// A proxy's three listeners, and whether it runs in online mode.
#[derive(Clone, Copy, Debug)]
pub struct Listeners {
    pub ws: SocketAddr,
    pub wss: SocketAddr,
    pub tcp: SocketAddr,
    pub online: bool,
}
