//! What a benchmark client is told (its spec), what it measures, and the barriers that hold a phase's clients
//! and the harness together.

use std::sync::atomic::AtomicUsize;
use std::sync::{Arc, Barrier};
use std::time::Duration;

use moonbridge_client::{Options, Stats};

use crate::backend::Profile;

/// What one client does.
#[derive(Clone, Debug)]
pub struct ClientSpec {
    pub url: String,
    pub options: Options,
    pub profile: Profile,
    pub warmup: usize,
    pub messages: usize,
    pub window: usize,
    pub payload: usize,
    pub burst: usize,
    /// End the tick after each round trip's packets (one message per tick).
    pub end_ticks: bool,
    pub name: String,
    /// Do the online-mode login (Encryption Request/Response), then encrypt the stream with AES-CFB8.
    pub online: bool,
    /// A light player: in the timed phase, one round trip per `pace` (a game tick) for as long as any busy
    /// client is still in its timed phase, instead of `messages` round trips as fast as the window allows.
    pub pace: Option<Duration>,
    /// Server transfers before the warmup (`--mode post-transfer`): each asks the backend to switch the player
    /// to the other of the proxy's two backends and waits for the proxy's world reset.
    pub switches: usize,
}

/// The proxy's two backend names in `--mode post-transfer` (both the same fake backend).
pub const SWITCH_TARGETS: [&str; 2] = ["bench", "bench2"];

/// What one client measured.
#[derive(Debug, Default)]
pub struct ClientResult {
    pub login_burst: Duration,
    /// Round-trip latencies of the timed phase.
    pub latencies: Vec<Duration>,
    /// Frames both ways in the timed phase.
    pub frames: u64,
    /// Round trips completed in the timed phase.
    pub round_trips: u64,
    /// Library counters over the timed phase.
    pub stats: Stats,
    /// Each switch, from the request to the last byte of the world reset.
    pub switch_times: Vec<Duration>,
    pub error: Option<String>,
}

/// The barrier points of a phase: after warmup, start of the timed phase, end of the timed phase.
pub struct Sync {
    /// Held during a login: connections log in one at a time, so the login burst time is one player's, not
    /// four players' competing for two cores.
    pub login_turn: std::sync::Mutex<()>,
    /// Every client has logged in (before its warmup): the login window ends.
    pub logged: Barrier,
    pub warmed: Barrier,
    pub go: Barrier,
    pub done: Barrier,
    pub release: Barrier,
    /// Clients that have finished their login (or failed before it): the harness can connect clients one at
    /// a time, in an order it chooses.
    pub logged_in: AtomicUsize,
    /// Busy clients still in (or before) their timed phase; light clients stop when it reaches 0.
    pub busy_left: AtomicUsize,
}

impl Sync {
    pub fn new(clients: usize, busy: usize) -> Arc<Self> {
        Arc::new(Self {
            logged_in: AtomicUsize::new(0),
            busy_left: AtomicUsize::new(busy),
            login_turn: std::sync::Mutex::new(()),
            logged: Barrier::new(clients + 1),
            warmed: Barrier::new(clients + 1),
            go: Barrier::new(clients + 1),
            done: Barrier::new(clients + 1),
            release: Barrier::new(clients + 1),
        })
    }
}
