//! What the fake backend answers a player's frames with, per profile: the echo or the tick answers of the
//! session benchmark (with the server-transfer requests of `--mode post-transfer`), the soak's byte-for-byte
//! check of every client tick before its answer, and the capacity run's answer per tick (modded or light).

use anyhow::{anyhow, bail, Context};
use moonbridge_protocol::frame::encode_frame;
use moonbridge_protocol::packets::PluginMessage;
use moonbridge_protocol::Frame;

use super::login::switch_target;
use super::profile::{Load, Profile};
use crate::workload::{self, Spec};

/// Payload of a `--load light` answer, in bytes.
const LIGHT_BYTES: usize = 64;

/// One connection's answering state.
pub enum Answerer {
    /// The session benchmark: echo every frame, or answer each client tick (C17, C04, C03) with its template.
    Bench {
        echo: bool,
        /// The tick under way and how many of its three packets came.
        pending: Option<(u32, u8)>,
    },
    /// The soak: every client tick compared byte for byte with what the player must have sent, then answered.
    Checked {
        name: String,
        expected_seq: u32,
        /// The bytes of tick `expected_seq` (empty until built).
        tick_bytes: Vec<u8>,
        /// Bytes received and not yet matched.
        got: Vec<u8>,
    },
    /// The capacity run: a tick's C17 gives its number, its C03 is answered.
    Capacity { load: Load, tick: Option<u32> },
}

impl Answerer {
    /// The state for `profile`, for the player `name`.
    pub fn new(profile: Profile, name: &str) -> Self {
        match profile {
            Profile::Echo => Self::Bench { echo: true, pending: None },
            Profile::Modded => Self::Bench { echo: false, pending: None },
            Profile::Checked => {
                Self::Checked { name: name.to_string(), expected_seq: 0, tick_bytes: Vec::new(), got: Vec::new() }
            }
            Profile::Capacity(load) => Self::Capacity { load, tick: None },
        }
    }

    /// Takes one frame from the player; what it answers goes to `out`.
    pub fn frame(&mut self, templates: &[Vec<Spec>], f: &Frame, out: &mut Vec<u8>) -> anyhow::Result<()> {
        match self {
            Self::Bench { echo, pending } => bench(*echo, templates, f, pending, out),
            Self::Checked { got, .. } => Ok(encode_frame(got, f.id, &f.body)?),
            Self::Capacity { load, tick } => capacity(*load, templates, f, tick, out),
        }
    }

    /// After a batch of frames: the soak's check of the ticks received whole (the others answer per frame).
    pub fn batch_done(&mut self, templates: &[Vec<Spec>], out: &mut Vec<u8>) -> anyhow::Result<()> {
        let Self::Checked { name, expected_seq, tick_bytes, got } = self else { return Ok(()) };
        loop {
            if tick_bytes.is_empty() {
                *tick_bytes = workload::encode_client_tick(*expected_seq).concat();
            }
            if got.len() < tick_bytes.len() {
                return Ok(());
            }
            if got.get(..tick_bytes.len()) != Some(&tick_bytes[..]) {
                bail!("player {name} tick {expected_seq}: bytes differ from what it sent");
            }
            got.drain(..tick_bytes.len());
            tick_bytes.clear();
            workload::encode_tick_answer(templates, *expected_seq, out);
            *expected_seq += 1;
        }
    }
}

/// The session benchmark's answer to one frame; any frame out of place is a protocol violation.
fn bench(
    echo: bool,
    templates: &[Vec<Spec>],
    f: &Frame,
    pending: &mut Option<(u32, u8)>,
    out: &mut Vec<u8>,
) -> anyhow::Result<()> {
    let violation = || anyhow!("protocol violation");
    if f.id == PluginMessage::SERVERBOUND_ID && f.body.get(1..).is_some_and(|b| b.starts_with(b"REGISTER")) {
        // The proxy's registration of the BungeeCord channel (a proxy with `[transfer] targets`): no answer.
        return Ok(());
    }
    if let Some(target) = switch_target(f) {
        let data = moonbridge_protocol::transfer::BungeeRequest::connect_payload(&target)?;
        let mut fields = Vec::new();
        PluginMessage { channel: moonbridge_protocol::transfer::BUNGEE_CHANNEL.into(), data }
            .encode_fields(&mut fields)?;
        let _ = encode_frame(out, PluginMessage::CLIENTBOUND_ID, &fields);
        return Ok(());
    }
    if echo {
        let _ = encode_frame(out, f.id, &f.body);
        return Ok(());
    }
    match (f.id, pending.as_mut()) {
        (0x17, None) => *pending = Some((workload::client_tick_seq(f.id, &f.body).ok_or_else(violation)?, 1)),
        (0x04, Some((_, n @ 1))) | (0x03, Some((_, n @ 2))) => {
            *n += 1;
            if *n == 3 {
                let (seq, _) = pending.take().ok_or_else(violation)?;
                workload::encode_tick_answer(templates, seq, out);
            }
        }
        (0x00, _) => {} // Keep Alive
        _ => return Err(violation()),
    }
    Ok(())
}

/// The capacity run's answer to one frame: a tick's C03 is answered with its template (or a light message).
fn capacity(
    load: Load,
    templates: &[Vec<Spec>],
    f: &Frame,
    tick: &mut Option<u32>,
    out: &mut Vec<u8>,
) -> anyhow::Result<()> {
    match f.id {
        0x17 => *tick = workload::client_tick_seq(f.id, &f.body),
        0x03 => {
            let seq = tick.take().context("C03 without its tick's C17")?;
            match load {
                Load::Modded | Load::Forge => {
                    workload::encode_tick_answer(templates, seq, out);
                }
                Load::Light => {
                    let mut data = seq.to_be_bytes().to_vec();
                    data.resize(LIGHT_BYTES, 0x5a);
                    let p = PluginMessage { channel: "MB|Light".into(), data };
                    let mut fields = Vec::new();
                    p.encode_fields(&mut fields)?;
                    encode_frame(out, PluginMessage::CLIENTBOUND_ID, &fields)?;
                }
            }
        }
        _ => {} // C04, and C00 Keep Alive answers
    }
    Ok(())
}
