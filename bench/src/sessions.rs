//! A stand-in session server for the `moonbridge-online` variant: it answers every
//! `GET /session/minecraft/hasJoined?username=NAME&serverId=…` with 200 and the profile `NAME` (its offline
//! UUID, no properties), over HTTP/1.1 keep-alive. It vouches for everyone: the real session server cannot be
//! reached here, and the benchmark measures the proxy's work, not Mojang's.

use std::io::{BufRead, BufReader, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

/// Starts the stand-in on an ephemeral port and returns its address.
pub fn start() -> anyhow::Result<SocketAddr> {
    start_with_delay(Arc::new(AtomicU64::new(0)))
}

/// Like [`start`]; every answer waits `delay_ms` milliseconds first (read at each request), to play a slow
/// session server.
pub fn start_with_delay(delay_ms: Arc<AtomicU64>) -> anyhow::Result<SocketAddr> {
    let listener = TcpListener::bind("127.0.0.1:0")?;
    let addr = listener.local_addr()?;
    std::thread::Builder::new().name("bench-sessions".into()).spawn(move || {
        for stream in listener.incoming().map_while(Result::ok) {
            let delay = Arc::clone(&delay_ms);
            let _ = std::thread::Builder::new().name("bench-sessions".into()).spawn(move || serve(stream, &delay));
        }
    })?;
    Ok(addr)
}

fn serve(stream: TcpStream, delay_ms: &AtomicU64) -> std::io::Result<()> {
    let mut reader = BufReader::new(stream.try_clone()?);
    let mut out = stream;
    loop {
        let mut request_line = String::new();
        if reader.read_line(&mut request_line)? == 0 {
            return Ok(());
        }
        // Skip the headers (a GET has no body).
        loop {
            let mut line = String::new();
            if reader.read_line(&mut line)? == 0 {
                return Ok(());
            }
            if line == "\r\n" || line == "\n" {
                break;
            }
        }
        let wait = delay_ms.load(Ordering::Relaxed);
        if wait > 0 {
            std::thread::sleep(std::time::Duration::from_millis(wait));
        }
        let name = request_line
            .split_whitespace()
            .nth(1)
            .and_then(|target| target.split_once('?'))
            .and_then(|(_, query)| query.split('&').find_map(|kv| kv.strip_prefix("username=")))
            .unwrap_or("")
            .to_string();
        let body = serde_json::json!({
            "id": moonbridge_protocol::forwarding::offline_uuid(&name).simple().to_string(),
            "name": name,
            "properties": [],
        })
        .to_string();
        write!(
            out,
            "HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
            body.len()
        )?;
    }
}
