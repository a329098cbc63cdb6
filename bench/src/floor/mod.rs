//! `session-bench floor-relay`: the floor a relay process reaches on this machine, run beside moonbridge as
//! `--peer floor` (issue 32, item 5). It does the least any relay must do and nothing else:
//!
//! - two threads per player connection (64 KiB stacks), blocking `read` and `write_all` on `std::net` sockets
//!   shared by both threads (`&TcpStream` reads and writes, so a player costs 2 file descriptors), with
//!   `TCP_NODELAY`, a 64 KiB buffer per direction; when either direction ends in an error both sockets are
//!   shut down, so the other thread ends too;
//! - `--transport tcp`: bytes copied as read, each read written at once;
//! - `--transport ws`: the RFC 6455 opening handshake (`Sec-WebSocket-Accept` from the key, no subprotocol,
//!   so the client speaks carriage v1), then each backend read leaves as one Binary frame (header written in
//!   front of the read in the same buffer: one `write` per read, no copy), and each client frame's payload is
//!   unmasked in place and written to the backend, one `write` per frame. A Close, or the backend's end, shuts
//!   both connections down (no Close frame is sent back); Ping, Pong and Text are skipped, so a client that
//!   pings and waits for the Pong takes the floor for dead after its own timeout.
//!
//! No Minecraft parsing, no limits beyond a 16 MiB frame and an 8 KiB handshake, no metrics, no shutdown: it
//! exists to be measured against.

use std::io::{self, ErrorKind, Read, Write};
use std::net::{Shutdown, SocketAddr, TcpListener, TcpStream};
use std::sync::Arc;

use anyhow::Context;
use moonbridge_protocol::ws::frame::{encode_header, MAX_SERVER_HEADER, OP_BINARY};

/// `session-bench floor-relay` arguments.
#[derive(clap::Args, Debug)]
pub struct FloorArgs {
    /// `tcp` or `ws` (the client's side; the backend is always plain TCP).
    #[arg(long, value_parser = ["tcp", "ws"])]
    pub transport: String,
    /// Where players connect.
    #[arg(long)]
    pub listen: SocketAddr,
    /// The Minecraft backend.
    #[arg(long)]
    pub backend: SocketAddr,
}

/// Bytes one read takes (either direction).
const BUFFER: usize = 64 * 1024;
/// The largest client frame payload taken, in bytes.
const MAX_FRAME: usize = 16 << 20;
/// The largest opening handshake taken, in bytes.
const MAX_HANDSHAKE: usize = 8 * 1024;

/// A thread's stack: the buffers are on the heap, so 64 KiB is plenty and thousands of players fit.
const STACK: usize = 64 * 1024;

/// Serves until killed (the benchmark kills it when its run ends).
pub fn main(args: &FloorArgs) -> anyhow::Result<()> {
    let listener = TcpListener::bind(args.listen).with_context(|| format!("cannot listen on {}", args.listen))?;
    let ws = args.transport == "ws";
    for player in listener.incoming() {
        let player = match player {
            Ok(p) => p,
            Err(e) => {
                // Out of file descriptors, say: wait instead of spinning a core (counted as the floor's CPU).
                eprintln!("floor-relay: accept: {e}");
                std::thread::sleep(std::time::Duration::from_millis(100));
                continue;
            }
        };
        let backend = args.backend;
        let spawned = std::thread::Builder::new().stack_size(STACK).spawn(move || match serve(player, backend, ws) {
            // A connection ended by either side (the benchmark's port probe and its last close included).
            Err(e)
                if matches!(
                    e.kind(),
                    ErrorKind::UnexpectedEof | ErrorKind::BrokenPipe | ErrorKind::ConnectionReset
                ) => {}
            Err(e) => eprintln!("floor-relay: {e}"),
            Ok(()) => {}
        });
        if let Err(e) = spawned {
            // The player's socket went with the closure: it is closed.
            eprintln!("floor-relay: cannot start a thread: {e}");
        }
    }
    Ok(())
}

fn serve(mut player: TcpStream, backend: SocketAddr, ws: bool) -> io::Result<()> {
    player.set_nodelay(true)?;
    let mut ahead = Vec::new();
    if ws {
        ahead = handshake(&mut player)?;
    }
    let server = TcpStream::connect(backend)?;
    server.set_nodelay(true)?;
    let (player, server) = (Arc::new(player), Arc::new(server));
    let (p, s) = (Arc::clone(&player), Arc::clone(&server));
    let down = std::thread::Builder::new().stack_size(STACK).spawn(move || {
        let r = if ws { down_ws(&s, &p) } else { copy(&s, &p) };
        end_both(&p, &s, r.is_err());
        r
    })?;
    let up = if ws { up_ws(&player, &server, ahead) } else { copy(&player, &server) };
    end_both(&player, &server, up.is_err());
    let down = down.join().unwrap_or_else(|_| Err(io::Error::other("the down thread panicked")));
    up.and(down)
}

/// After a direction failed, shuts both sockets down so the other direction's thread ends too.
fn end_both(player: &TcpStream, server: &TcpStream, failed: bool) {
    if failed {
        let _ = player.shutdown(Shutdown::Both);
        let _ = server.shutdown(Shutdown::Both);
    }
}

/// Copies `from` to `to` read by read; at the end, shuts `to`'s write side.
fn copy(mut from: &TcpStream, mut to: &TcpStream) -> io::Result<()> {
    let mut buf = vec![0u8; BUFFER];
    loop {
        let n = from.read(&mut buf)?;
        if n == 0 {
            return to.shutdown(Shutdown::Write);
        }
        to.write_all(buf.get(..n).unwrap_or_default())?;
    }
}

/// Reads the client's opening handshake and answers 101; returns the bytes read past it.
fn handshake(player: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut req = Vec::new();
    let mut buf = [0u8; 1024];
    let end = loop {
        if let Some(at) = req.windows(4).position(|w| w == b"\r\n\r\n") {
            break at + 4;
        }
        if req.len() > MAX_HANDSHAKE {
            return Err(io::Error::other("handshake too long"));
        }
        let n = player.read(&mut buf)?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        req.extend_from_slice(buf.get(..n).unwrap_or_default());
    };
    let head = String::from_utf8_lossy(req.get(..end).unwrap_or_default()).into_owned();
    let key = head
        .lines()
        .find_map(|l| l.split_once(':').filter(|(k, _)| k.trim().eq_ignore_ascii_case("sec-websocket-key")))
        .map(|(_, v)| v.trim().to_owned())
        .ok_or_else(|| io::Error::other("no Sec-WebSocket-Key"))?;
    let accept = tokio_tungstenite::tungstenite::handshake::derive_accept_key(key.as_bytes());
    player.write_all(
        format!(
            "HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\
             Sec-WebSocket-Accept: {accept}\r\n\r\n"
        )
        .as_bytes(),
    )?;
    Ok(req.split_off(end))
}

/// Backend → player: each read leaves as one Binary frame, its header written into the room kept in front; at
/// the backend's end, the player's connection is shut down.
fn down_ws(mut server: &TcpStream, mut player: &TcpStream) -> io::Result<()> {
    let mut buf = vec![0u8; MAX_SERVER_HEADER + BUFFER];
    loop {
        let n = server.read(buf.get_mut(MAX_SERVER_HEADER..).unwrap_or_default())?;
        if n == 0 {
            return player.shutdown(Shutdown::Both);
        }
        let (h, hn) = encode_header(OP_BINARY, n);
        let start = MAX_SERVER_HEADER - hn;
        if let (Some(dst), Some(src)) = (buf.get_mut(start..MAX_SERVER_HEADER), h.get(..hn)) {
            dst.copy_from_slice(src);
        }
        player.write_all(buf.get(start..MAX_SERVER_HEADER + n).unwrap_or_default())?;
    }
}

/// Player → backend: each masked frame's payload, unmasked in place, written whole; what was used is dropped from
/// the buffer once per read.
fn up_ws(mut player: &TcpStream, mut server: &TcpStream, mut buf: Vec<u8>) -> io::Result<()> {
    let mut read = vec![0u8; BUFFER];
    loop {
        // Every whole frame buffered.
        let mut used = 0;
        while let Some((opcode, start, len)) = frame_at(buf.get(used..).unwrap_or_default())? {
            let (start, end) = (used + start, used + start + len);
            if let Some(key) = buf.get(start - 4..start).and_then(|k| <[u8; 4]>::try_from(k).ok()) {
                for (i, b) in buf.get_mut(start..end).unwrap_or_default().iter_mut().enumerate() {
                    *b ^= key[i % 4];
                }
            }
            match opcode {
                0x0 | 0x2 => server.write_all(buf.get(start..end).unwrap_or_default())?,
                0x8 => {
                    let _ = player.shutdown(Shutdown::Both);
                    return server.shutdown(Shutdown::Write);
                }
                _ => {}
            }
            used = end;
        }
        buf.drain(..used);
        let n = player.read(&mut read)?;
        if n == 0 {
            return server.shutdown(Shutdown::Write);
        }
        buf.extend_from_slice(read.get(..n).unwrap_or_default());
    }
}

/// The first buffered frame when it is whole: opcode, where its payload starts (after the 4-byte mask key) and
/// its length (RFC 6455 §5.2). A client frame must be masked.
fn frame_at(buf: &[u8]) -> io::Result<Option<(u8, usize, usize)>> {
    let (Some(&b0), Some(&b1)) = (buf.first(), buf.get(1)) else { return Ok(None) };
    if b1 & 0x80 == 0 {
        return Err(io::Error::other("unmasked client frame"));
    }
    let (len, at) = match b1 & 0x7f {
        126 => match buf.get(2..4) {
            Some(l) => (usize::from(u16::from_be_bytes(l.try_into().unwrap_or_default())), 4),
            None => return Ok(None),
        },
        127 => match buf.get(2..10) {
            Some(l) => {
                (usize::try_from(u64::from_be_bytes(l.try_into().unwrap_or_default())).unwrap_or(usize::MAX), 10)
            }
            None => return Ok(None),
        },
        short => (usize::from(short), 2),
    };
    if len > MAX_FRAME {
        return Err(io::Error::other("frame over 16 MiB"));
    }
    let start = at + 4;
    Ok((buf.len() >= start + len).then_some((b0 & 0x0f, start, len)))
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A masked client frame (RFC 6455 §5.2) with `len` payload bytes, header and mask key included.
    fn masked(opcode: u8, payload: &[u8]) -> Vec<u8> {
        let mut f = vec![0x80 | opcode];
        match payload.len() {
            n if n < 126 => f.push(0x80 | n as u8),
            n if n <= 0xffff => {
                f.push(0x80 | 126);
                f.extend_from_slice(&(n as u16).to_be_bytes());
            }
            n => {
                f.push(0x80 | 127);
                f.extend_from_slice(&(n as u64).to_be_bytes());
            }
        }
        let key = [1, 2, 3, 4];
        f.extend_from_slice(&key);
        f.extend(payload.iter().enumerate().map(|(i, b)| b ^ key[i % 4]));
        f
    }

    #[test]
    fn frames_are_found_whole_at_every_length_form() {
        for len in [0, 125, 126, 65_535, 65_536] {
            let f = masked(0x2, &vec![7u8; len]);
            let at = f.len() - len;
            assert_eq!(frame_at(&f).unwrap(), Some((0x2, at, len)), "payload of {len}");
            // One byte short: not yet.
            assert_eq!(frame_at(&f[..f.len() - 1]).unwrap(), None, "payload of {len}, one byte short");
        }
        assert_eq!(frame_at(&[0x82]).unwrap(), None);
    }

    #[test]
    fn an_unmasked_or_oversized_frame_is_refused() {
        assert!(frame_at(&[0x82, 0x01, 0x00]).is_err(), "unmasked");
        let mut big = vec![0x82, 0x80 | 127];
        big.extend_from_slice(&((MAX_FRAME as u64) + 1).to_be_bytes());
        assert!(frame_at(&big).is_err(), "over 16 MiB");
    }
}
