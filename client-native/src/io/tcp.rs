//! The I/O loop of a `tcp://` connection: each batch one write, reads in large chunks.

use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

use super::wait::CLOSE_LINGER;
use super::wait::{aged_cutoff, closing_flag, sleep_until, wait_for_space, write_or_abandon, Scanners, Wake};
use crate::error::ClientError;
use crate::shared::{bump, Shared};

/// Largest single TCP read, in bytes.
pub(super) const TCP_READ_CHUNK: usize = 256 * 1024;

pub(super) async fn run_tcp(mut stream: TcpStream, shared: &Shared) -> ClientError {
    let mut scanners = Scanners::new();
    let mut read_buf = BytesMut::with_capacity(TCP_READ_CHUNK);
    loop {
        let delay = shared.delay_deadline();
        let paused = shared.is_paused();
        let wake = tokio::select! {
            () = shared.out_ready.notified() => Wake::Outbound,
            () = sleep_until(delay) => Wake::Delay,
            () = wait_for_space(shared), if paused => Wake::Space,
            r = stream.read_buf(&mut read_buf), if !paused => {
                match r {
                    Ok(0) => return ClientError::ClosedByPeer { code: None, reason: String::new() },
                    Ok(n) => {
                        bump(&shared.counters.messages_in, 1);
                        bump(&shared.counters.bytes_in, n as u64);
                        Scanners::count(&mut scanners.inb, &read_buf, &shared.counters.frames_in);
                        shared.deliver(&read_buf);
                        read_buf.clear();
                        if read_buf.capacity() < TCP_READ_CHUNK {
                            read_buf.reserve(TCP_READ_CHUNK);
                        }
                        continue;
                    }
                    Err(e) => return ClientError::Io(e.to_string()),
                }
            }
        };
        let aged = aged_cutoff(&wake, shared);
        let (batches, closing) = shared.take_ready(closing_flag(shared), aged);
        let mut written = 0;
        for b in &batches {
            if let Err(e) = write_or_abandon(shared, stream.write_all(b)).await {
                return e;
            }
            written += b.len();
            bump(&shared.counters.messages_out, 1);
            bump(&shared.counters.bytes_out, b.len() as u64);
            Scanners::count(&mut scanners.out, b, &shared.counters.frames_out);
        }
        shared.written(written);
        if closing {
            let _ = write_or_abandon(shared, stream.shutdown()).await;
            let _ = tokio::time::timeout(CLOSE_LINGER, async {
                while matches!(stream.read_buf(&mut read_buf).await, Ok(n) if n > 0) {
                    read_buf.clear();
                }
            })
            .await;
            return ClientError::Closed;
        }
    }
}
