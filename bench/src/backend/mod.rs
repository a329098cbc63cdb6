//! The fake protocol-5 backend every command runs, with a profile per use:
//!
//! - [`Profile::Echo`] and [`Profile::Modded`] (the session benchmark, on its own tokio runtime whose threads
//!   are named `bench-backend`, so the harness can tell their CPU time from the clients'): Login Success, Join
//!   Game, Position And Look and the login burst in one write, then every frame echoed, or every client tick
//!   answered with its template (one write per read batch). Server transfers (`--mode post-transfer`): a
//!   serverbound Plugin Message on [`login::SWITCH_CHANNEL`] naming a backend is answered with BungeeCord's
//!   `Connect` for it; a login whose name already has a connection open here is the proxy switching that
//!   player, and gets Join Game (entity id [`login::SWITCHED_ENTITY_ID`]) and Position And Look without the
//!   burst.
//! - [`Profile::Checked`] (the soak): Login Success and a small burst, then every client tick checked byte for
//!   byte before its answer; it can be killed (every socket reset, like a crash) and restarted.
//! - [`Profile::Capacity`] (the capacity run's backend process): Login Success and Join Game, a Keep Alive
//!   every 2 s, and an answer per tick ([`Load`]).

mod answer;
mod login;
mod profile;

pub use login::{join_game, login_answer, read_login, soak_login_answer, switch_answer, switch_request};
pub use profile::{Load, Profile};

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use moonbridge_protocol::packets::{KeepAlive, Packet};
use moonbridge_protocol::FrameDecoder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_util::sync::CancellationToken;

use crate::workload::Spec;
use answer::Answerer;
use profile::KEEP_ALIVE_S;

/// Counters shared with the harness.
#[derive(Debug, Default)]
pub struct BackendStats {
    /// Sessions that ended in an error (a protocol violation, bytes other than the player sent).
    pub errors: AtomicU64,
}

/// Told each session's error (after it is counted).
pub type OnError = Box<dyn Fn(&anyhow::Error) + Send + Sync>;

/// A listening backend.
pub struct Backend {
    pub addr: SocketAddr,
    pub stats: Arc<BackendStats>,
    profile: Profile,
    templates: Vec<Vec<Spec>>,
    /// Cancelled by [`Backend::kill`].
    alive: Mutex<CancellationToken>,
    on_error: Option<OnError>,
}

impl Backend {
    /// Listens on `bind` (port 0 for any) and serves on the current runtime.
    pub async fn listen(bind: SocketAddr, profile: Profile, on_error: Option<OnError>) -> anyhow::Result<Arc<Self>> {
        let listener = TcpListener::bind(bind).await?;
        let b = Arc::new(Self {
            addr: listener.local_addr()?,
            stats: Arc::default(),
            profile,
            templates: profile.templates(),
            alive: Mutex::new(CancellationToken::new()),
            on_error,
        });
        b.serve(listener);
        Ok(b)
    }

    fn token(&self) -> CancellationToken {
        self.alive.lock().unwrap_or_else(PoisonError::into_inner).clone()
    }

    fn serve(self: &Arc<Self>, listener: TcpListener) {
        let token = self.token();
        let b = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                let accepted = tokio::select! {
                    r = listener.accept() => r,
                    () = token.cancelled() => return,
                };
                let s = match accepted {
                    Ok((s, _)) => s,
                    Err(e) => match b.profile {
                        Profile::Echo | Profile::Modded => return,
                        Profile::Checked => continue,
                        Profile::Capacity(_) => {
                            // Out of file descriptors, say: wait instead of spinning a core.
                            eprintln!("capacity backend: accept: {e}");
                            tokio::time::sleep(Duration::from_millis(100)).await;
                            continue;
                        }
                    },
                };
                let _ = s.set_nodelay(true);
                let (t, b) = (token.clone(), Arc::clone(&b));
                tokio::spawn(async move {
                    let r = if b.profile == Profile::Checked {
                        tokio::select! {
                            r = session(s, &b) => r,
                            () = t.cancelled() => Ok(()), // the socket is dropped with linger 0
                        }
                    } else {
                        session(s, &b).await
                    };
                    if let Err(e) = r {
                        b.stats.errors.fetch_add(1, Ordering::Relaxed);
                        if let Some(report) = &b.on_error {
                            report(&e);
                        }
                    }
                });
            }
        });
    }

    /// Kills the backend like a crash (every socket of a killable profile reset, the listener closed).
    pub fn kill(&self) {
        self.token().cancel();
    }

    /// Starts listening again on the same port.
    pub async fn restart(self: &Arc<Self>) -> anyhow::Result<()> {
        *self.alive.lock().unwrap_or_else(PoisonError::into_inner) = CancellationToken::new();
        let listener = TcpListener::bind(self.addr).await?;
        self.serve(listener);
        Ok(())
    }
}

/// Starts a backend on `bind` (port 0 for any) on its own runtime with `threads` worker threads, named
/// `bench-backend`.
pub fn start(
    bind: SocketAddr,
    profile: Profile,
    threads: usize,
) -> anyhow::Result<(SocketAddr, Arc<BackendStats>, tokio::runtime::Runtime)> {
    let rt = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(threads.max(1))
        .thread_name("bench-backend")
        .enable_all()
        .build()?;
    let b = rt.block_on(Backend::listen(bind, profile, None))?;
    Ok((b.addr, Arc::clone(&b.stats), rt))
}

/// One player's connection: the login, then the answers (and the capacity profile's Keep Alive).
async fn session(mut s: TcpStream, b: &Backend) -> anyhow::Result<()> {
    if b.profile == Profile::Checked {
        // Dropping the socket resets it (what a crashed process's sockets do).
        let _ = socket2::SockRef::from(&s).set_linger(Some(Duration::ZERO));
    }
    let (first, more) = b.profile.read_buffer();
    let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
    let mut buf = bytes::BytesMut::with_capacity(first);
    let Some((login, mut extra)) = read_login(&mut s, &mut dec, &mut buf).await? else {
        return Ok(());
    };
    // A name logged in here twice is a switch (the session benchmark's profiles only).
    let here = matches!(b.profile, Profile::Echo | Profile::Modded).then(|| login::Here::new(&login.name));
    let answer = match b.profile {
        Profile::Echo | Profile::Modded if here.as_ref().is_some_and(|h| h.switched) => {
            login::switched_login_answer(&login.name)
        }
        Profile::Echo | Profile::Modded => login_answer(&login.name),
        Profile::Checked => soak_login_answer(&login.name),
        Profile::Capacity(_) => {
            // Players send nothing behind Login Start before they have joined.
            extra.clear();
            login::capacity_login_answer(&login.name, 1000)?
        }
    };
    s.write_all(&answer).await?;
    let mut keep_alive = matches!(b.profile, Profile::Capacity(_)).then(|| {
        let every = Duration::from_secs(KEEP_ALIVE_S);
        let mut t = tokio::time::interval_at(tokio::time::Instant::now() + every, every);
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        t
    });
    let mut ka_id = 0i32;
    let mut answerer = Answerer::new(b.profile, &login.name);
    let mut out = Vec::with_capacity(first);
    for f in extra {
        answerer.frame(&b.templates, &f, &mut out)?;
    }
    loop {
        while let Some(f) = dec.try_next_frame()? {
            answerer.frame(&b.templates, &f, &mut out)?;
        }
        answerer.batch_done(&b.templates, &mut out)?;
        if !out.is_empty() {
            s.write_all(&out).await?;
            out.clear();
        }
        buf.reserve(more);
        let read = match keep_alive.as_mut() {
            None => s.read_buf(&mut buf).await?,
            Some(ka) => tokio::select! {
                _ = ka.tick() => {
                    ka_id = ka_id.wrapping_add(1);
                    s.write_all(&KeepAlive { id: ka_id }.to_frame_bytes()?).await?;
                    continue;
                }
                r = s.read_buf(&mut buf) => r?,
            },
        };
        if read == 0 {
            return Ok(());
        }
        dec.queue_bytes(buf.split());
    }
}
