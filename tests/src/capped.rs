//! [`FrameCap`]: a WebSocket intermediary with the frame and message caps real ones have (Apache APISIX takes
//! frames of at most 65,535 bytes, Cloudflare Workers and Kong close at 1 MiB messages). It passes the HTTP
//! upgrade and then every byte unchanged, reading the frame headers both ways (RFC 6455 §5.2); a frame or a
//! message over its cap cuts the connection, as those intermediaries do, and is recorded.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;

use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

/// What a [`FrameCap`] saw in one direction.
#[derive(Debug, Default)]
pub struct Seen {
    /// The largest frame payload, in bytes.
    pub largest_frame: AtomicUsize,
    /// The largest message (its frames' payloads together), in bytes.
    pub largest_message: AtomicUsize,
    /// Frames read.
    pub frames: AtomicUsize,
    /// A frame or a message went over the cap (the connection was cut).
    pub over: AtomicBool,
}

/// A capped WebSocket intermediary in front of `target` (see the module documentation).
pub struct FrameCap {
    pub addr: SocketAddr,
    /// Client to server, and server to client.
    pub up: Arc<Seen>,
    pub down: Arc<Seen>,
    task: JoinHandle<()>,
}

impl FrameCap {
    /// Caps frames at `max_frame` payload bytes and messages at `max_message` bytes.
    pub async fn start(target: SocketAddr, max_frame: usize, max_message: usize) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let (up, down) = (Arc::new(Seen::default()), Arc::new(Seen::default()));
        let (u, d) = (Arc::clone(&up), Arc::clone(&down));
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let (u, d) = (Arc::clone(&u), Arc::clone(&d));
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else { return };
                    let (cr, cw) = client.into_split();
                    let (sr, sw) = server.into_split();
                    tokio::select! {
                        () = pass(cr, sw, &u, max_frame, max_message) => {}
                        () = pass(sr, cw, &d, max_frame, max_message) => {}
                    }
                });
            }
        });
        Self { addr, up, down, task }
    }
}

impl Drop for FrameCap {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// Passes the HTTP head (up to the blank line), then frames, byte for byte, until either end or a cap.
async fn pass(
    mut from: impl AsyncRead + Unpin,
    mut to: impl AsyncWrite + Unpin,
    seen: &Seen,
    max_frame: usize,
    max_message: usize,
) {
    let mut head = Vec::new();
    while !head.ends_with(b"\r\n\r\n") {
        let Ok(b) = from.read_u8().await else { return };
        head.push(b);
    }
    if to.write_all(&head).await.is_err() {
        return;
    }
    let mut message = 0;
    loop {
        let mut h = [0u8; 2];
        if from.read_exact(&mut h).await.is_err() {
            return;
        }
        let mut header = h.to_vec();
        let len = match h[1] & 0x7f {
            126 => {
                let mut l = [0u8; 2];
                let Ok(_) = from.read_exact(&mut l).await else { return };
                header.extend_from_slice(&l);
                usize::from(u16::from_be_bytes(l))
            }
            127 => {
                let mut l = [0u8; 8];
                let Ok(_) = from.read_exact(&mut l).await else { return };
                header.extend_from_slice(&l);
                usize::try_from(u64::from_be_bytes(l)).unwrap()
            }
            n => usize::from(n),
        };
        if h[1] & 0x80 != 0 {
            let mut mask = [0u8; 4];
            let Ok(_) = from.read_exact(&mut mask).await else { return };
            header.extend_from_slice(&mask);
        }
        let (opcode, fin) = (h[0] & 0x0f, h[0] & 0x80 != 0);
        seen.frames.fetch_add(1, Ordering::Relaxed);
        if opcode < 0x8 {
            // A data frame (Binary, Text or Continuation): part of a message.
            message += len;
            seen.largest_frame.fetch_max(len, Ordering::Relaxed);
            seen.largest_message.fetch_max(message, Ordering::Relaxed);
            if len > max_frame || message > max_message {
                seen.over.store(true, Ordering::Relaxed);
                return;
            }
            if fin {
                message = 0;
            }
        }
        let mut payload = vec![0u8; len];
        if from.read_exact(&mut payload).await.is_err() {
            return;
        }
        header.extend_from_slice(&payload);
        if to.write_all(&header).await.is_err() {
            return;
        }
    }
}
