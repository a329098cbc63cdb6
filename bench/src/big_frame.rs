//! `session-bench big-frame`: one huge Minecraft frame through the proxy, and what it costs the proxy in memory
//! (issue 47: a GT New Horizons frame of 256 MiB must raise the proxy's RSS by no more than a few MiB, because
//! frames pass in pieces, docs/modpacks.md).
//!
//! A backend of this process logs the player in (Login Success, Join Game) and then sends one frame of
//! `--size` bytes (a 5-byte prefix for 256 MiB; pseudo-random contents, so zstd has nothing to shrink), written
//! in 1 MiB pieces as it is generated (never held whole), and a Chat Message after it. The player, over each of
//! `--transports` (tcp: a raw socket; ws and wss: the client library with its default carriage, v2 + zstd),
//! reads and counts the bytes and checks the Chat Message arrives whole after them. Meanwhile the proxy's RSS
//! (VmRSS) is read every 10 ms: the report gives it after the login and at its peak while the frame crossed.
//! The proxy runs with `[transfer]` on, so the relay follows the stream with the transfer watch and filter.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::PathBuf;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use moonbridge_client::{Connection, Options};
use moonbridge_protocol::packets::{ChatMessage, Handshake, LoginStart, LoginSuccess, NextState, Packet};
use moonbridge_protocol::VarInt;
use moonbridge_test_certs::{KeyType, TestCert};
use serde::Serialize;

use crate::metrics::rss_kib;
use crate::process::{spawn_moonbridge, wait_for_port, Output};

/// `session-bench big-frame` arguments.
#[derive(clap::Args, Debug)]
pub struct BigFrameArgs {
    /// Body bytes of the frame (the packet id included): 268435456 is GT New Horizons' limit.
    #[arg(long, default_value_t = 256 << 20)]
    pub size: usize,
    /// Comma-separated: tcp, ws, wss.
    #[arg(long, default_value = "tcp,ws,wss", value_delimiter = ',')]
    pub transports: Vec<String>,
    /// The moonbridge binary.
    #[arg(long, default_value = "target/release/moonbridge")]
    pub proxy_bin: PathBuf,
    /// Print one JSON object per transport instead of text.
    #[arg(long)]
    pub json: bool,
}

/// One transport's result.
#[derive(Debug, Serialize)]
struct Crossing {
    transport: String,
    frame_bytes: usize,
    seconds: f64,
    mib_per_s: f64,
    rss_after_login_kib: u64,
    rss_peak_kib: u64,
    rss_rise_kib: u64,
}

/// The Chat Message that follows the big frame.
const AFTER: &str = "\"after the big frame\"";

/// Runs the measurement (see the module documentation).
pub fn main(args: &BigFrameArgs) -> anyhow::Result<()> {
    let dir = std::env::temp_dir().join(format!("session-bench-big-frame-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cert = TestCert::generate_in(dir.clone(), "localhost", KeyType::Ec)?;
    let backend = TcpListener::bind("127.0.0.1:0")?;
    let backend_addr = backend.local_addr()?;
    let size = args.size;
    std::thread::spawn(move || {
        for conn in backend.incoming().flatten() {
            std::thread::spawn(move || serve(conn, size));
        }
    });
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect::<anyhow::Result<_>>()?;
    let config = dir.join("moonbridge.toml");
    std::fs::write(
        &config,
        format!(
            "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:{}\"\n\
             [[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:{}\"\npath = \"/mc\"\n\
             [[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:{}\"\npath = \"/mc\"\ntls_cert = {:?}\ntls_key = {:?}\n\
             [[backend]]\nname = \"survival\"\naddress = \"{backend_addr}\"\n\
             [[backend]]\nname = \"lobby\"\naddress = \"{backend_addr}\"\n\
             [transfer]\ntargets = [\"lobby\"]\n",
            ports[0], ports[1], ports[2], cert.cert, cert.key
        ),
    )?;
    let proxy = spawn_moonbridge(&args.proxy_bin, &config, "warn", Output::Echo("moonbridge: "))?;
    for p in &ports {
        wait_for_port(SocketAddr::from(([127, 0, 0, 1], *p)), "the proxy")?;
    }
    let pid = proxy.id();
    for transport in &args.transports {
        let port = match transport.as_str() {
            "tcp" => ports[0],
            "ws" => ports[1],
            "wss" => ports[2],
            other => bail!("unknown transport {other:?} (tcp, ws, wss)"),
        };
        let c = cross(transport, port, size, pid, &cert.ca)?;
        crate::report::emit(args.json, &c, |c| {
            println!(
                "{:>4}: {} MiB in {:.2} s ({:.0} MiB/s); proxy RSS {} KiB after login, {} KiB at peak: +{} KiB",
                c.transport,
                c.frame_bytes >> 20,
                c.seconds,
                c.mib_per_s,
                c.rss_after_login_kib,
                c.rss_peak_kib,
                c.rss_rise_kib
            );
        })?;
    }
    drop(proxy);
    let _ = std::fs::remove_dir_all(&dir);
    Ok(())
}

fn free_port() -> anyhow::Result<u16> {
    Ok(TcpListener::bind("127.0.0.1:0")?.local_addr()?.port())
}

/// The backend's side of one player: the login answer once the proxy sent the handshake and Login Start, then
/// the big frame in pieces and the Chat Message; then it reads until the proxy closes.
fn serve(mut conn: TcpStream, size: usize) {
    let mut buf = vec![0u8; 64 * 1024];
    if !matches!(conn.read(&mut buf), Ok(n) if n > 0) {
        return;
    }
    let mut out = bytes::BytesMut::new();
    let uuid = moonbridge_protocol::forwarding::offline_uuid("Big").to_string();
    let _ = LoginSuccess { uuid, name: "Big".into() }.encode_frame(&mut out);
    let _ = crate::backend::join_game(1).encode_frame(&mut out);
    // The frame: its prefix and packet id (S26 Map Chunk Bulk), then `size - 1` pseudo-random bytes.
    VarInt(i32::try_from(size).unwrap_or(i32::MAX)).encode(&mut out);
    out.extend_from_slice(&[0x26]);
    if conn.write_all(&out).is_err() {
        return;
    }
    let mut left = size - 1;
    let mut state = 0x9e37_79b9_7f4a_7c15u64;
    let mut piece = vec![0u8; 1 << 20];
    while left > 0 {
        let n = left.min(piece.len());
        for chunk in piece[..n].chunks_mut(8) {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            let bytes = state.to_le_bytes();
            chunk.copy_from_slice(&bytes[..chunk.len()]);
        }
        if conn.write_all(&piece[..n]).is_err() {
            return;
        }
        left -= n;
    }
    let chat = ChatMessage { json: AFTER.into() }.to_frame_bytes().map(|b| b.to_vec()).unwrap_or_default();
    if conn.write_all(&chat).is_err() {
        return;
    }
    while matches!(conn.read(&mut buf), Ok(n) if n > 0) {}
}

/// Bytes the player reads in all: Login Success and Join Game (their sizes are fixed for the name `Big`),
/// the frame with its prefix, the Chat Message.
fn expected_bytes(size: usize) -> (usize, usize) {
    let mut login = bytes::BytesMut::new();
    let uuid = moonbridge_protocol::forwarding::offline_uuid("Big").to_string();
    let _ = LoginSuccess { uuid, name: "Big".into() }.encode_frame(&mut login);
    let _ = crate::backend::join_game(1).encode_frame(&mut login);
    let frame = VarInt(i32::try_from(size).unwrap_or(i32::MAX)).written_size() + size;
    let chat = ChatMessage { json: AFTER.into() }.to_frame_bytes().map(|b| b.len()).unwrap_or_default();
    (login.len(), frame + chat)
}

/// A player's read: stream bytes into the buffer, how many.
type Reads = dyn FnMut(&mut [u8]) -> anyhow::Result<usize>;

/// One player over `transport`: login, then the frame, with the proxy's RSS sampled meanwhile.
fn cross(transport: &str, port: u16, size: usize, pid: u32, ca: &std::path::Path) -> anyhow::Result<Crossing> {
    let mut hello = bytes::BytesMut::new();
    let handshake = Handshake {
        protocol_version: 5,
        server_address: "localhost".into(),
        server_port: port,
        next_state: NextState::Login,
    };
    handshake.encode_frame(&mut hello)?;
    LoginStart { name: "Big".into() }.encode_frame(&mut hello)?;
    let (login, rest) = expected_bytes(size);
    let mut player: Box<Reads> = if transport == "tcp" {
        let mut s = TcpStream::connect(("127.0.0.1", port))?;
        s.set_read_timeout(Some(Duration::from_secs(60)))?;
        s.write_all(&hello)?;
        Box::new(move |buf| Ok(s.read(buf)?))
    } else {
        let scheme = if transport == "wss" { "wss" } else { "ws" };
        let options = serde_json::json!({ "ca_file": ca, "server_name": "localhost" }).to_string();
        let conn =
            Connection::connect(&format!("{scheme}://127.0.0.1:{port}/mc"), Options::from_json(Some(&options))?)?;
        conn.send(&hello)?;
        conn.end_tick()?;
        Box::new(move |buf| Ok(conn.recv(buf, Some(Duration::from_secs(60)))?))
    };
    let mut buf = vec![0u8; 1 << 20];
    let mut got = 0;
    let mut tail = Vec::new();
    while got < login {
        got += player(&mut buf).context("login")?;
    }
    // Any of the frame read with the login stays counted.
    let mut read = got - login;
    let before = rss_kib(pid).unwrap_or(0);
    let peak = Arc::new(AtomicU64::new(before));
    let done = Arc::new(AtomicBool::new(false));
    let sampler = {
        let (peak, done) = (Arc::clone(&peak), Arc::clone(&done));
        std::thread::spawn(move || {
            while !done.load(Ordering::Relaxed) {
                peak.fetch_max(rss_kib(pid).unwrap_or(0), Ordering::Relaxed);
                std::thread::sleep(Duration::from_millis(10));
            }
        })
    };
    let started = Instant::now();
    while read < rest {
        let n = player(&mut buf).context("the big frame")?;
        if n == 0 {
            bail!("{transport}: the connection ended after {read} of {rest} bytes");
        }
        read += n;
        tail.extend_from_slice(&buf[..n]);
        let keep = tail.len().saturating_sub(64);
        tail.drain(..keep);
    }
    let seconds = started.elapsed().as_secs_f64();
    done.store(true, Ordering::Relaxed);
    let _ = sampler.join();
    if read != rest || !tail.ends_with(AFTER.as_bytes()) {
        bail!("{transport}: {read} bytes instead of {rest}, or the Chat Message after the frame is not whole");
    }
    let peak = peak.load(Ordering::Relaxed);
    Ok(Crossing {
        transport: transport.to_string(),
        frame_bytes: size,
        seconds,
        mib_per_s: size as f64 / 1048576.0 / seconds,
        rss_after_login_kib: before,
        rss_peak_kib: peak,
        rss_rise_kib: peak.saturating_sub(before),
    })
}
