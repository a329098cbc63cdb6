//! The I/O thread of a connection: one thread per connection running a single-threaded tokio runtime. It
//! connects, then does all socket work: writes each batch as one WebSocket message (or one TCP write),
//! flushes batches that waited `max_delay_ms`, reads in large chunks, answers Pings at once and sends its
//! own keepalive Pings ([`Keepalive`](moonbridge_protocol::ws::Keepalive), the schedule the proxy uses too).
//! Every write is bounded by [`WRITE_STALL_TIMEOUT`] and by the close grace period, so the thread never blocks
//! forever.
//!
//! - `mod.rs`: the thread itself ([`start`]);
//! - `wait.rs`: what the loops share: frame counting, the tick and close deadlines, bounded writes, and the
//!   limits every loop keeps;
//! - `tcp.rs`: the `tcp://` loop;
//! - `ws.rs`: the WebSocket loop, carriage v1 and v2 (acks, retention, zstd, the v2 state kept across
//!   connections);
//! - `resume.rs`: carriage v2 resume: reconnecting and presenting the token when a connection drops.

mod resume;
mod tcp;
mod wait;
mod ws;

use std::sync::Arc;
use std::thread::JoinHandle;

use crate::connect::{establish, Stream};
use crate::error::ClientError;
use crate::shared::Shared;
use crate::target::Target;
use resume::run_ws_session;
use tcp::run_tcp;
pub(crate) use wait::CLOSE_LINGER;
pub use wait::{MAX_WS_MESSAGE_BYTES, WRITE_STALL_TIMEOUT};

/// Starts the I/O thread of a new connection and waits until it has connected to `target` (or failed, at
/// most `connect_timeout_ms`). Returns the thread and the negotiated TLS version (`wss://` only).
///
/// # Errors
/// The connect errors of [`crate::Connection::connect`]; [`ClientError::Io`] when the thread or its runtime
/// cannot start.
pub(crate) fn start(
    target: Target,
    shared: Arc<Shared>,
) -> Result<(JoinHandle<()>, Option<&'static str>), ClientError> {
    let (tx, rx) = std::sync::mpsc::sync_channel(1);
    let handle = std::thread::Builder::new()
        .name("moonbridge-io".into())
        .spawn(move || {
            let runtime = match tokio::runtime::Builder::new_current_thread().enable_all().build() {
                Ok(r) => r,
                Err(e) => {
                    let _ = tx.send(Err(ClientError::Io(format!("cannot start the I/O runtime: {e}"))));
                    return;
                }
            };
            // Whatever happens on this thread (even a panic), the connection ends visibly.
            let guard = EndGuard(Arc::clone(&shared));
            runtime.block_on(async move {
                match establish(&target, &shared.options).await {
                    Ok(stream) => {
                        let _ = tx.send(Ok(stream.tls_version()));
                        let end = match stream {
                            Stream::Tcp(s) => run_tcp(s, &shared).await,
                            ws => run_ws_session(ws, &target, &shared).await,
                        };
                        shared.finish(end);
                    }
                    Err(e) => {
                        let _ = tx.send(Err(e));
                    }
                }
            });
            drop(guard);
            // Do not wait for a resolver still stuck in getaddrinfo after a connect timeout.
            runtime.shutdown_background();
        })
        .map_err(|e| ClientError::Io(format!("cannot start the I/O thread: {e}")))?;
    match rx.recv() {
        Ok(Ok(tls_version)) => Ok((handle, tls_version)),
        Ok(Err(e)) => {
            let _ = handle.join();
            Err(e)
        }
        Err(_) => {
            let _ = handle.join();
            Err(ClientError::Io("the I/O thread stopped while connecting".into()))
        }
    }
}

/// Marks the connection ended when the I/O thread exits for any reason, including a panic.
struct EndGuard(Arc<Shared>);

impl Drop for EndGuard {
    fn drop(&mut self) {
        self.0.finish(ClientError::Io("the I/O thread ended".into()));
    }
}
