//! The fake backend's logins: reading a player's Handshake and Login Start, and what each profile answers
//! (Login Success, then Join Game, Position And Look and the login burst for the session benchmark; a smaller
//! burst for the soak; Join Game only for the capacity run); and the server-transfer pieces of
//! `--mode post-transfer` (a switch request, the answer a switched player sees, the names logged in here).

use std::collections::HashMap;
use std::sync::atomic::Ordering;
use std::sync::{Mutex, OnceLock, PoisonError};

use moonbridge_protocol::frame::encode_frame;
use moonbridge_protocol::packets::{LoginStart, LoginSuccess, Packet, PluginMessage};
use moonbridge_protocol::FrameDecoder;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;

use crate::workload::{self, BURST_CHANNEL, LOGIN_BURST};

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
pub fn join_game(entity_id: i32) -> moonbridge_protocol::packets::JoinGame {
    moonbridge_protocol::packets::JoinGame {
        entity_id,
        game_mode: 0,
        dimension: 0,
        difficulty: 2,
        max_players: 20,
        level_type: "default".into(),
        trailing_dimension: false,
    }
}

/// Position And Look (S08): x, y, z doubles, yaw, pitch floats, on ground.
pub fn position(out: &mut Vec<u8>) {
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

/// The login answer: Login Success, Join Game, Position And Look and the burst, as one byte string. Only
/// Login Success depends on the name; the rest is built once (so the measured burst time is the transport's,
/// not the harness's).
pub fn login_answer(name: &str) -> Vec<u8> {
    static REST: OnceLock<Vec<u8>> = OnceLock::new();
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

/// Login burst of the soak backend: messages and bytes each (smaller than the benchmark's, so 1,000 logins do
/// not dominate the run).
const SOAK_BURST: (usize, usize) = (4, 30_000);

/// The soak backend's login answer: Login Success and a small burst (no Join Game).
pub fn soak_login_answer(name: &str) -> Vec<u8> {
    let uuid = moonbridge_protocol::forwarding::offline_uuid(name).to_string();
    let mut out = LoginSuccess { uuid, name: name.into() }.to_frame_bytes().map(|b| b.to_vec()).unwrap_or_default();
    for n in 0..SOAK_BURST.0 {
        let p = PluginMessage {
            channel: workload::BURST_CHANNEL.into(),
            data: workload::login_burst_payload(n, SOAK_BURST.1),
        };
        let mut fields = Vec::new();
        let _ = p.encode_fields(&mut fields);
        let _ = moonbridge_protocol::frame::encode_frame(&mut out, PluginMessage::CLIENTBOUND_ID, &fields);
    }
    out
}

/// The capacity backend's login answer: Login Success and Join Game (S01: entity id, game mode, dimension,
/// difficulty, max players, level type).
pub fn capacity_login_answer(name: &str, entity_id: i32) -> anyhow::Result<Vec<u8>> {
    let uuid = moonbridge_protocol::forwarding::offline_uuid(name).to_string();
    let mut out = LoginSuccess { uuid, name: name.into() }.to_frame_bytes()?.to_vec();
    let mut join = entity_id.to_be_bytes().to_vec();
    join.extend_from_slice(&[0, 0, 2, 100]);
    moonbridge_protocol::codec::put_string(&mut join, "default", 16, "level type")?;
    encode_frame(&mut out, 0x01, &join)?;
    Ok(out)
}

/// A switched login's answer (the proxy switching a player here): Login Success, Join Game with
/// [`SWITCHED_ENTITY_ID`] and Position And Look, without the burst.
pub fn switched_login_answer(name: &str) -> Vec<u8> {
    let mut answer = bytes::BytesMut::new();
    let uuid = moonbridge_protocol::forwarding::offline_uuid(name).to_string();
    let _ = LoginSuccess { uuid, name: name.to_string() }.encode_frame(&mut answer);
    let _ = join_game(SWITCHED_ENTITY_ID).encode_frame(&mut answer);
    let mut answer = answer.to_vec();
    position(&mut answer);
    answer
}

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

/// A player's connection counted in [`live_names`] while it lasts.
pub struct Here {
    name: String,
    /// Another connection of this name was open: the proxy is switching the player here.
    pub switched: bool,
}

impl Here {
    pub fn new(name: &str) -> Self {
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
pub fn switch_target(f: &moonbridge_protocol::Frame) -> Option<String> {
    if f.id != PluginMessage::SERVERBOUND_ID
        || !f.body.get(1..).is_some_and(|b| b.starts_with(SWITCH_CHANNEL.as_bytes()))
    {
        return None;
    }
    let p = PluginMessage::decode_fields(&mut moonbridge_protocol::codec::Reader::new(&f.body)).ok()?;
    (p.channel == SWITCH_CHANNEL).then(|| String::from_utf8_lossy(&p.data).into_owned())
}
