//! The fake protocol-5 backend of the benchmark (in the harness process, on its own tokio runtime whose
//! threads are named `bench-backend`, so the harness can tell their CPU time from the clients').
//!
//! Per connection: read the handshake and Login Start, send Login Success, Join Game, Position And Look and
//! the login burst in one write, then answer the profile: echo every complete frame back (one write per read
//! batch), or answer every complete client tick with its template (one write per read batch).
//!
//! Server transfers (`--mode post-transfer`): a serverbound Plugin Message on [`SWITCH_CHANNEL`] naming a
//! backend is answered with BungeeCord's `Connect` for it; a login whose name already has a connection open
//! here is the proxy switching that player, and gets Join Game (entity id [`SWITCHED_ENTITY_ID`]) and Position
//! And Look without the burst.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};

use moonbridge_protocol::frame::encode_frame;
use moonbridge_protocol::packets::{LoginStart, LoginSuccess, Packet, PluginMessage};
use moonbridge_protocol::FrameDecoder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};

use crate::workload::{self, Spec, BURST_CHANNEL, LOGIN_BURST};

/// The serverbound plugin channel on which a benchmark client asks to be switched (data: the backend's name).
pub const SWITCH_CHANNEL: &str = "MB|Switch";

/// The player's entity id in a switched login's Join Game (the first login's is 1): every later packet goes
/// through the proxy's entity-id swap.
pub const SWITCHED_ENTITY_ID: i32 = 2;

/// Open connections per player name: a login under a name that is already here is a switch.
fn live_names() -> &'static Mutex<HashMap<String, usize>> {
    static LIVE: OnceLock<Mutex<HashMap<String, usize>>> = OnceLock::new();
    LIVE.get_or_init(Mutex::default)
}

/// Join Game (S01) with `entity_id`: game mode 0, dimension 0, difficulty 2, 20 players, level type default.
fn join_game(entity_id: i32) -> moonbridge_protocol::packets::JoinGame {
    moonbridge_protocol::packets::JoinGame {
        entity_id,
        game_mode: 0,
        dimension: 0,
        difficulty: 2,
        max_players: 20,
        level_type: "default".into(),
    }
}

/// Position And Look (S08): x, y, z doubles, yaw, pitch floats, on ground.
fn position(out: &mut Vec<u8>) {
    let mut pos = Vec::new();
    for v in [0.0f64, 64.0, 0.0] {
        pos.extend_from_slice(&v.to_be_bytes());
    }
    pos.extend_from_slice(&0f32.to_be_bytes());
    pos.extend_from_slice(&0f32.to_be_bytes());
    pos.push(1);
    let _ = encode_frame(out, 0x08, &pos);
}

/// What a client receives after a switch to this backend: the proxy's world reset (two Respawns, from
/// `moonbridge_protocol::transfer::world_reset`) in place of the Join Game, then Position And Look.
pub fn switch_answer() -> Vec<u8> {
    let mut out = bytes::BytesMut::new();
    for r in moonbridge_protocol::transfer::world_reset(&join_game(SWITCHED_ENTITY_ID)) {
        let _ = r.encode_frame(&mut out);
    }
    let mut out = out.to_vec();
    position(&mut out);
    out
}

/// The serverbound Plugin Message that asks this backend to switch the player to `backend`.
pub fn switch_request(backend: &str) -> Vec<u8> {
    let mut fields = Vec::new();
    let _ =
        PluginMessage { channel: SWITCH_CHANNEL.into(), data: backend.as_bytes().to_vec() }.encode_fields(&mut fields);
    let mut out = Vec::new();
    let _ = encode_frame(&mut out, PluginMessage::SERVERBOUND_ID, &fields);
    out
}

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
    let mut join = bytes::BytesMut::new();
    let _ = join_game(1).encode_frame(&mut join);
    out.extend_from_slice(&join);
    position(&mut out);
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
    let here = Here::new(&login.name);
    if here.switched {
        let mut answer = bytes::BytesMut::new();
        let uuid = moonbridge_protocol::forwarding::offline_uuid(&login.name).to_string();
        let _ = LoginSuccess { uuid, name: login.name.clone() }.encode_frame(&mut answer);
        let _ = join_game(SWITCHED_ENTITY_ID).encode_frame(&mut answer);
        let mut answer = answer.to_vec();
        position(&mut answer);
        stream.write_all(&answer).await?;
    } else {
        stream.write_all(&login_answer(&login.name)).await?;
    }
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

/// A player's connection counted in [`live_names`] while it lasts.
struct Here {
    name: String,
    /// Another connection of this name was open: the proxy is switching the player here.
    switched: bool,
}

impl Here {
    fn new(name: &str) -> Self {
        let mut live = live_names().lock().unwrap_or_else(PoisonError::into_inner);
        let n = live.entry(name.to_string()).or_insert(0);
        *n += 1;
        Self { name: name.to_string(), switched: *n > 1 }
    }
}

impl Drop for Here {
    fn drop(&mut self) {
        let mut live = live_names().lock().unwrap_or_else(PoisonError::into_inner);
        if let Some(n) = live.get_mut(&self.name) {
            *n -= 1;
            if *n == 0 {
                live.remove(&self.name);
            }
        }
    }
}

/// A [`SWITCH_CHANNEL`] request's target backend, if `f` is one.
fn switch_target(f: &moonbridge_protocol::Frame) -> Option<String> {
    if f.id != PluginMessage::SERVERBOUND_ID
        || !f.body.get(1..).is_some_and(|b| b.starts_with(SWITCH_CHANNEL.as_bytes()))
    {
        return None;
    }
    let p = PluginMessage::decode_fields(&mut moonbridge_protocol::codec::Reader::new(&f.body)).ok()?;
    (p.channel == SWITCH_CHANNEL).then(|| String::from_utf8_lossy(&p.data).into_owned())
}

fn answer(
    profile: Profile,
    templates: &[Vec<Spec>],
    f: &moonbridge_protocol::Frame,
    pending: &mut Option<(u32, u8)>,
    out: &mut Vec<u8>,
) -> Result<(), Violation> {
    if f.id == PluginMessage::SERVERBOUND_ID && f.body.get(1..).is_some_and(|b| b.starts_with(b"REGISTER")) {
        // The proxy's registration of the BungeeCord channel (a proxy with `[transfer] targets`): no answer.
        return Ok(());
    }
    if let Some(target) = switch_target(f) {
        let data = moonbridge_protocol::transfer::BungeeRequest::connect_payload(&target).map_err(|_| Violation)?;
        let mut fields = Vec::new();
        PluginMessage { channel: moonbridge_protocol::transfer::BUNGEE_CHANNEL.into(), data }
            .encode_fields(&mut fields)
            .map_err(|_| Violation)?;
        let _ = encode_frame(out, PluginMessage::CLIENTBOUND_ID, &fields);
        return Ok(());
    }
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
