//! The fake protocol-5 backend of the benchmark (in the harness process, on its own tokio runtime whose
//! threads are named `bench-backend`, so the harness can tell their CPU time from the clients').
//!
//! Per connection: read the handshake and Login Start, send Login Success, Join Game, Position And Look and
//! the login burst in one write, then answer the profile: echo every complete frame back (one write per read
//! batch), or answer every complete client tick with its template (one write per read batch).

use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use moonbridge_protocol::frame::encode_frame;
use moonbridge_protocol::packets::{LoginStart, LoginSuccess, Packet, PluginMessage};
use moonbridge_protocol::FrameDecoder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::workload::{self, Spec, BURST_CHANNEL, LOGIN_BURST};

/// Which answer the backend gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// Echo every frame.
    Echo,
    /// Answer each tick with its template.
    Modded,
}

/// Counters shared with the harness.
#[derive(Debug, Default)]
pub struct BackendStats {
    /// Protocol violations seen (each one fails the run).
    pub errors: AtomicU64,
}

/// The login answer: Login Success, Join Game, Position And Look and the burst, as one byte string. Only
/// Login Success depends on the name; the rest is built once (so the measured burst time is the transport's,
/// not the harness's).
pub fn login_answer(name: &str) -> Vec<u8> {
    static REST: std::sync::OnceLock<Vec<u8>> = std::sync::OnceLock::new();
    let rest = REST.get_or_init(login_answer_rest);
    let uuid = moonbridge_protocol::forwarding::offline_uuid(name).to_string();
    let mut b = bytes::BytesMut::new();
    let _ = LoginSuccess { uuid, name: name.into() }.encode_frame(&mut b);
    let mut out = Vec::with_capacity(b.len() + rest.len());
    out.extend_from_slice(&b);
    out.extend_from_slice(rest);
    out
}

/// Registry entries of the `--profile forge` login burst (about 2.1 MB, like the modded burst).
const FORGE_REGISTRY_ENTRIES: usize = 62_000;

fn login_answer_rest() -> Vec<u8> {
    let mut out = Vec::with_capacity(LOGIN_BURST.0 * (LOGIN_BURST.1 + 16) + 128);
    // Join Game (S01): entity id, game mode, dimension, difficulty, max players, level type.
    let mut join = Vec::new();
    join.extend_from_slice(&1i32.to_be_bytes());
    join.extend_from_slice(&[0, 0, 2, 20]);
    let _ = moonbridge_protocol::codec::put_string(&mut join, "default", 16, "level_type");
    let _ = encode_frame(&mut out, 0x01, &join);
    // Position And Look (S08): x, y, z doubles, yaw, pitch floats, on ground.
    let mut pos = Vec::new();
    for v in [0.0f64, 64.0, 0.0] {
        pos.extend_from_slice(&v.to_be_bytes());
    }
    pos.extend_from_slice(&0f32.to_be_bytes());
    pos.extend_from_slice(&0f32.to_be_bytes());
    pos.push(1);
    let _ = encode_frame(&mut out, 0x08, &pos);
    let burst: Vec<(String, Vec<u8>)> = if workload::FORGE.load(Ordering::Relaxed) {
        crate::forge::registry_burst(FORGE_REGISTRY_ENTRIES).into_iter().map(|(c, d)| (c.to_string(), d)).collect()
    } else {
        (0..LOGIN_BURST.0)
            .map(|n| (BURST_CHANNEL.to_string(), workload::login_burst_payload(n, LOGIN_BURST.1)))
            .collect()
    };
    for (channel, data) in burst {
        let p = PluginMessage { channel, data };
        let mut fields = Vec::new();
        let _ = p.encode_fields(&mut fields);
        let _ = encode_frame(&mut out, PluginMessage::CLIENTBOUND_ID, &fields);
    }
    out
}

/// Starts the backend on `bind` (port 0 for any) on a runtime with `threads` worker threads.
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
    let listener = rt.block_on(TcpListener::bind(bind))?;
    let addr = listener.local_addr()?;
    let stats = Arc::new(BackendStats::default());
    let templates = Arc::new(if workload::FORGE.load(Ordering::Relaxed) {
        workload::forge_templates()
    } else {
        workload::templates()
    });
    let s = Arc::clone(&stats);
    rt.spawn(async move {
        while let Ok((stream, _)) = listener.accept().await {
            let _ = stream.set_nodelay(true);
            let s = Arc::clone(&s);
            let t = Arc::clone(&templates);
            tokio::spawn(async move {
                if serve(stream, profile, &t).await.is_err() {
                    s.errors.fetch_add(1, Ordering::Relaxed);
                }
            });
        }
    });
    Ok((addr, stats, rt))
}

/// Reads a player's Handshake and Login Start at a backend, with `dec` and `buf` kept for what follows.
/// Returns `None` when the connection ends first, else Login Start and the frames that arrived behind it.
///
/// # Errors
/// A read error, a frame the decoder refuses, or a second frame that is not a Login Start.
pub async fn read_login(
    s: &mut TcpStream,
    dec: &mut FrameDecoder,
    buf: &mut bytes::BytesMut,
) -> anyhow::Result<Option<(LoginStart, Vec<moonbridge_protocol::Frame>)>> {
    let mut frames = Vec::new();
    while frames.len() < 2 {
        if s.read_buf(buf).await? == 0 {
            return Ok(None);
        }
        dec.queue_bytes(buf.split());
        while let Some(f) = dec.try_next_frame()? {
            frames.push(f);
        }
    }
    let extra = frames.split_off(2);
    let login: LoginStart = frames.get(1).ok_or_else(|| anyhow::anyhow!("no Login Start"))?.decode()?;
    Ok(Some((login, extra)))
}

#[derive(Debug)]
struct Violation;

impl From<std::io::Error> for Violation {
    fn from(_: std::io::Error) -> Self {
        Violation
    }
}

async fn serve(mut stream: TcpStream, profile: Profile, templates: &[Vec<Spec>]) -> Result<(), Violation> {
    let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
    let mut buf = bytes::BytesMut::with_capacity(256 * 1024);
    let Some((login, frames)) = read_login(&mut stream, &mut dec, &mut buf).await.map_err(|_| Violation)? else {
        return Ok(());
    };
    stream.write_all(&login_answer(&login.name)).await?;
    let mut pending_tick: Option<(u32, u8)> = None;
    let mut out = Vec::with_capacity(256 * 1024);
    let mut extra = frames.into_iter();
    loop {
        out.clear();
        for f in extra.by_ref() {
            answer(profile, templates, &f, &mut pending_tick, &mut out)?;
        }
        while let Some(f) = dec.try_next_frame().map_err(|_| Violation)? {
            answer(profile, templates, &f, &mut pending_tick, &mut out)?;
        }
        if !out.is_empty() {
            stream.write_all(&out).await?;
        }
        buf.reserve(64 * 1024);
        if stream.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
        dec.queue_bytes(buf.split());
    }
}

fn answer(
    profile: Profile,
    templates: &[Vec<Spec>],
    f: &moonbridge_protocol::Frame,
    pending: &mut Option<(u32, u8)>,
    out: &mut Vec<u8>,
) -> Result<(), Violation> {
    match profile {
        Profile::Echo => {
            let _ = encode_frame(out, f.id, &f.body);
        }
        Profile::Modded => match (f.id, pending.as_mut()) {
            (0x17, None) => *pending = Some((workload::client_tick_seq(f.id, &f.body).ok_or(Violation)?, 1)),
            (0x04, Some((_, n @ 1))) | (0x03, Some((_, n @ 2))) => {
                *n += 1;
                if *n == 3 {
                    let (seq, _) = pending.take().ok_or(Violation)?;
                    workload::encode_tick_answer(templates, seq, out);
                }
            }
            (0x00, _) => {} // Keep Alive
            _ => return Err(Violation),
        },
    }
    Ok(())
}
