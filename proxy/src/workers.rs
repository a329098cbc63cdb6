//! Thread-per-core mode (`[runtime] mode = "thread-per-core"`): session workers, each a single-threaded tokio
//! runtime on its own thread.
//!
//! The accept loops stay on the caller's runtime. Each accepted socket is taken out of the caller's reactor and
//! registered with the chosen worker's, and its whole session (upgrade, TLS, login, relay, backend socket) runs
//! there: relaying a frame wakes no other thread. The worker is the one with the fewest open connections,
//! ties taken in turn, so a burst of connections spreads evenly whatever the client ports hash to (unlike
//! `SO_REUSEPORT`). A carriage v2 resume that arrives on another worker hands its socket to the session's
//! worker, which then polls it across threads until the session ends (rare, and correct either way).

use std::future::Future;
use std::io;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::thread::JoinHandle;
use std::time::Duration;

use tokio::net::TcpStream;
use tokio::runtime::Handle;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::debug;

/// How long a stopping worker waits for its blocking work (a session-server call) before it is dropped.
const WORKER_STOP: Duration = Duration::from_secs(1);

/// The session workers of one server.
pub(crate) struct Workers {
    workers: Vec<Worker>,
    /// Where the next tie-break starts.
    turn: AtomicUsize,
    stop: CancellationToken,
    threads: std::sync::Mutex<Vec<JoinHandle<()>>>,
}

struct Worker {
    handle: Handle,
    /// Connections running on this worker (from dispatch to the end of the session).
    open: Arc<AtomicUsize>,
}

/// Decrements a worker's open count when a session ends (or its task is dropped).
struct Open(Arc<AtomicUsize>);

impl Drop for Open {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::Relaxed);
    }
}

impl Workers {
    /// Starts `count` worker threads (`moonbridge-worker-N`), each driving its own current-thread runtime.
    ///
    /// # Errors
    /// The OS refused a thread, or a runtime could not start (no epoll instance or timer).
    pub(crate) fn start(count: usize) -> io::Result<Self> {
        let stop = CancellationToken::new();
        // Threads started before a failure below end with it.
        let started = stop.clone().drop_guard();
        let mut workers = Vec::with_capacity(count);
        let mut threads = Vec::with_capacity(count);
        for i in 0..count {
            let (tx, rx) = std::sync::mpsc::sync_channel(1);
            let stopped = stop.clone();
            let thread = std::thread::Builder::new().name(format!("moonbridge-worker-{i}")).spawn(move || {
                let rt = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                    Ok(rt) => rt,
                    Err(e) => {
                        let _ = tx.send(Err(e));
                        return;
                    }
                };
                let _ = tx.send(Ok(rt.handle().clone()));
                rt.block_on(stopped.cancelled());
                rt.shutdown_timeout(WORKER_STOP);
            })?;
            threads.push(thread);
            // The thread answers at once (before it runs anything), so this blocks for microseconds.
            let handle = rx.recv().map_err(|_| io::Error::other("a worker thread ended before it started"))??;
            workers.push(Worker { handle, open: Arc::new(AtomicUsize::new(0)) });
        }
        started.disarm();
        Ok(Self { workers, turn: AtomicUsize::new(0), stop, threads: std::sync::Mutex::new(threads) })
    }

    /// The number of workers.
    pub(crate) fn len(&self) -> usize {
        self.workers.len()
    }

    /// Open connections per worker, in worker order.
    #[cfg(test)]
    pub(crate) fn load(&self) -> Vec<usize> {
        self.workers.iter().map(|w| w.open.load(Ordering::Relaxed)).collect()
    }

    /// Runs `serve(stream)` on the worker with the fewest open connections, with `stream` moved to that
    /// worker's reactor, tracked by `tracker` (so shutdown waits for it).
    pub(crate) fn spawn<F, Fut>(&self, tracker: &TaskTracker, stream: TcpStream, serve: F)
    where
        F: FnOnce(TcpStream) -> Fut + Send + 'static,
        Fut: Future<Output = ()> + Send + 'static,
    {
        let n = self.workers.len();
        let start = self.turn.fetch_add(1, Ordering::Relaxed) % n.max(1);
        // The first worker with the fewest open connections, counting from `start`.
        let Some(worker) =
            self.workers.iter().cycle().skip(start).take(n).min_by_key(|w| w.open.load(Ordering::Relaxed))
        else {
            return;
        };
        // Out of the accepting runtime's reactor (an epoll_ctl), into the worker's below.
        let socket = match stream.into_std() {
            Ok(s) => s,
            Err(e) => {
                debug!("cannot move an accepted connection to a worker: {e}");
                return;
            }
        };
        worker.open.fetch_add(1, Ordering::Relaxed);
        let open = Open(Arc::clone(&worker.open));
        worker.handle.spawn(tracker.track_future(async move {
            let _open = open;
            match TcpStream::from_std(socket) {
                Ok(stream) => serve(stream).await,
                Err(e) => debug!("cannot register an accepted connection with its worker: {e}"),
            }
        }));
    }

    /// Stops every worker (dropping what still runs on them) and waits for their threads, at most about
    /// [`WORKER_STOP`] each. Dropping [`Workers`] without this stops them too, without waiting.
    pub(crate) async fn stop(self) {
        self.stop.cancel();
        let threads = std::mem::take(&mut *self.threads.lock().unwrap_or_else(std::sync::PoisonError::into_inner));
        let _ = tokio::task::spawn_blocking(move || {
            for t in threads {
                let _ = t.join();
            }
        })
        .await;
    }
}

impl Drop for Workers {
    /// A server whose `run` was dropped (or never finished) still ends its worker threads.
    fn drop(&mut self) {
        self.stop.cancel();
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Connections go to the worker with the fewest open ones, and each session runs on its worker's thread.
    #[tokio::test]
    async fn sessions_spread_evenly_and_run_on_their_worker() {
        let workers = Workers::start(2).expect("workers");
        assert_eq!(workers.len(), 2);
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.expect("bind");
        let addr = listener.local_addr().expect("addr");
        let tracker = TaskTracker::new();
        let (names_tx, mut names_rx) = tokio::sync::mpsc::unbounded_channel();
        let release = CancellationToken::new();
        let mut clients = Vec::new();
        for _ in 0..6 {
            clients.push(tokio::net::TcpStream::connect(addr).await.expect("connect"));
            let (stream, _) = listener.accept().await.expect("accept");
            let (names, release) = (names_tx.clone(), release.clone());
            workers.spawn(&tracker, stream, move |_s| async move {
                let _ = names.send(std::thread::current().name().map(str::to_owned));
                release.cancelled().await;
            });
            // Wait until it runs, so the next dispatch sees its count (bounded).
            let name = tokio::time::timeout(Duration::from_secs(5), names_rx.recv()).await.expect("ran").flatten();
            assert!(name.as_deref().is_some_and(|n| n.starts_with("moonbridge-worker-")), "{name:?}");
        }
        assert_eq!(workers.load(), vec![3, 3]);
        release.cancel();
        tracker.close();
        tokio::time::timeout(Duration::from_secs(5), tracker.wait()).await.expect("sessions ended");
        assert_eq!(workers.load(), vec![0, 0]);
        tokio::time::timeout(Duration::from_secs(5), workers.stop()).await.expect("stopped");
    }
}
