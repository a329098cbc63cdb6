//! The two workloads, as the seed records describe them.
//!
//! - **echo**: the client writes `burst` PLAY frames of `payload` bytes at once; the backend echoes them in
//!   one flush. One round trip = one burst.
//! - **modded**: one round trip = one client tick of three packets (C17 plugin message, C04 position, C03
//!   on ground); the backend answers with that tick's clientbound mix drawn from 256 templates made with a
//!   fixed seed: 6–14 small packets (S3F on mod channels and S35 tile entity updates, 20–500 bytes), a 2–8 KiB
//!   payload on about one tick in three, and a 30–60 KiB S21 chunk on about one in twenty. Every clientbound
//!   packet carries the tick sequence, so the client checks every byte.
//!
//! - **gtnh** (`--profile gtnh`): the modded ticks, and on about one tick in eight a 40–500 KiB mod channel
//!   message, on about one in 64 a 3–8 MiB S26 Map Chunk Bulk: GT New Horizons' traffic (frames with 4-byte
//!   prefixes, S3F lengths in Forge's VarShort), checked byte for byte like the rest.
//!
//! Every profile writes the dialect's forms (`encode_wide_frame`, `ArrayLength`), which are vanilla's bytes for
//! vanilla sizes.
//!
//! Login (every profile): Login Success, Join Game and Position And Look, then the login burst of 70 S3F plugin
//! messages of 30,000 bytes (Forge registry sync sized).

use moonbridge_protocol::codec::put_string;
use moonbridge_protocol::frame::{encode_frame, encode_wide_frame};

/// GT New Horizons' frame limit (Hodgepodge's `packetSizeLimit`), what the answers are written under.
const GTNH_FRAME_LIMIT: usize = 256 << 20;

/// Number of modded tick templates.
pub const TEMPLATES: usize = 256;
/// Login burst: messages and bytes each.
pub const LOGIN_BURST: (usize, usize) = (70, 30_000);
/// Channel of the login burst.
pub const BURST_CHANNEL: &str = "FML|HS";
/// Fixed seed of the template generator.
const SEED: u64 = 0x6d6f_6f6e_6272_6467;

/// splitmix64: a tiny deterministic generator for the fixed-seed templates (not for security).
struct SplitMix(u64);

impl SplitMix {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn range(&mut self, lo: usize, hi: usize) -> usize {
        lo + (self.next() % (hi - lo + 1) as u64) as usize
    }
}

/// Kind of a clientbound packet in a template.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Kind {
    /// S3F plugin message on a mod channel.
    Plugin(u8),
    /// S35 tile entity update.
    TileEntity,
    /// S21 chunk data.
    Chunk,
    /// S26 Map Chunk Bulk of GT New Horizons' size (3–8 MiB).
    Bulk,
}

/// One clientbound packet of a template: its kind and payload length, and with `--profile forge` its body
/// (built once, see [`crate::forge`]).
#[derive(Clone, Debug)]
pub struct Spec {
    pub kind: Kind,
    pub len: usize,
    pub content: Option<std::sync::Arc<Vec<u8>>>,
}

/// Set once at start for `--profile forge`: the login burst is the FML handshake ([`crate::forge`]).
pub static FORGE: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Set once at start for `--profile gtnh`: the tick answers come from [`gtnh_templates`].
pub static GTNH: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// Set once at start for `--profile forge-channels`: [`forge_templates`] keeps only the mod channel messages.
pub static CHANNELS_ONLY: std::sync::atomic::AtomicBool = std::sync::atomic::AtomicBool::new(false);

/// The templates of `--profile forge` or, with [`CHANNELS_ONLY`] set, `--profile forge-channels`
/// ([`forge_templates_of`]).
pub fn forge_templates() -> Vec<Vec<Spec>> {
    forge_templates_of(CHANNELS_ONLY.load(std::sync::atomic::Ordering::Relaxed))
}

/// The modded templates with honest bodies (`--profile forge`): tile entities as gzipped NBT, mod channel
/// messages, deflated chunks; same kinds, counts and order as [`templates`]. With `channels_only`, only the
/// mod channel messages, with the same stored bodies (on the wire each packet is preceded by the tick sequence and
/// its index within the tick, as in every profile, so the indexes differ).
pub fn forge_templates_of(channels_only: bool) -> Vec<Vec<Spec>> {
    let mut rng = crate::forge::Rng::new(SEED ^ 0x0066_6f72_6765);
    templates()
        .into_iter()
        .enumerate()
        .map(|(t, specs)| {
            let mut specs: Vec<Spec> = specs
                .into_iter()
                .enumerate()
                .map(|(i, s)| {
                    let body = match s.kind {
                        Kind::Plugin(_) => crate::forge::mod_message(&mut rng, s.len),
                        Kind::TileEntity => crate::forge::tile_entity_nbt(&mut rng, s.len, t as i32, 64, i as i32),
                        Kind::Chunk | Kind::Bulk => crate::forge::chunk_data(&mut rng, s.len / 10_240),
                    };
                    Spec { kind: s.kind, len: body.len(), content: Some(std::sync::Arc::new(body)) }
                })
                .collect();
            if channels_only {
                // Every template has channel messages (6–14 packets, two in three on a channel; checked by a
                // test), so none is left empty.
                specs.retain(|s| matches!(s.kind, Kind::Plugin(_)));
            }
            specs
        })
        .collect()
}

const CHANNELS: [&str; 6] = ["IC2", "BuildCraft|TC", "ThermalExp", "appliedenergistics2", "TConstruct", "MB|Mod"];

/// The templates of `--profile gtnh`: [`templates`], with a 40–500 KiB mod channel message on about one in
/// eight and a 3–8 MiB S26 on about one in 64.
pub fn gtnh_templates() -> Vec<Vec<Spec>> {
    let mut rng = SplitMix(SEED ^ 0x6774_6e68);
    templates()
        .into_iter()
        .map(|mut t| {
            if rng.next().is_multiple_of(8) {
                let channel = (rng.next() % 6) as u8;
                t.push(Spec { kind: Kind::Plugin(channel), len: rng.range(40 * 1024, 500 * 1024), content: None });
            }
            if rng.next().is_multiple_of(64) {
                t.push(Spec { kind: Kind::Bulk, len: rng.range(3 << 20, 8 << 20), content: None });
            }
            t
        })
        .collect()
}

/// The 256 tick templates.
pub fn templates() -> Vec<Vec<Spec>> {
    let mut rng = SplitMix(SEED);
    (0..TEMPLATES)
        .map(|_| {
            let mut t = Vec::new();
            for _ in 0..rng.range(6, 14) {
                let len = rng.range(20, 500);
                let kind =
                    if rng.next().is_multiple_of(3) { Kind::TileEntity } else { Kind::Plugin((rng.next() % 6) as u8) };
                t.push(Spec { kind, len, content: None });
            }
            if rng.next().is_multiple_of(3) {
                t.push(Spec { kind: Kind::Plugin(5), len: rng.range(2048, 8192), content: None });
            }
            if rng.next().is_multiple_of(20) {
                t.push(Spec { kind: Kind::Chunk, len: rng.range(30_000, 60_000), content: None });
            }
            t
        })
        .collect()
}

/// Deterministic filler: byte `i` of packet `index` of tick `seq`.
fn filler(seq: u32, index: usize, len: usize, out: &mut Vec<u8>) {
    let base = seq.wrapping_mul(2_654_435_761).wrapping_add(index as u32 * 40_503);
    out.extend((0..len).map(|i| (base.wrapping_add(i as u32 * 31) >> 3) as u8));
}

/// Appends the frames of tick `seq` (template `seq % 256`) to `out`; returns how many frames.
pub fn encode_tick_answer(templates: &[Vec<Spec>], seq: u32, out: &mut Vec<u8>) -> usize {
    let template = &templates[seq as usize % templates.len()];
    let mut body = Vec::with_capacity(64 * 1024);
    for (i, spec) in template.iter().enumerate() {
        body.clear();
        let mut payload = Vec::with_capacity(spec.len + 8);
        match (&spec.content, spec.kind) {
            // Honest bodies: a plugin message starts with the sequence; tile entities and chunks carry it in
            // their x coordinate, their gzip/zlib data stays as built.
            (Some(c), Kind::Plugin(_)) => {
                payload.extend_from_slice(&seq.to_be_bytes());
                payload.extend_from_slice(&(i as u16).to_be_bytes());
                payload.extend_from_slice(c);
            }
            (Some(c), _) => payload.extend_from_slice(c),
            (None, _) => {
                payload.extend_from_slice(&seq.to_be_bytes());
                payload.extend_from_slice(&(i as u16).to_be_bytes());
                filler(seq, i, spec.len.saturating_sub(6), &mut payload);
            }
        }
        let id = match spec.kind {
            Kind::Plugin(ch) => {
                let _ = put_string(&mut body, CHANNELS[ch as usize], 20, "channel");
                moonbridge_protocol::array_length::put_data(&mut body, &payload);
                0x3f
            }
            Kind::TileEntity => {
                body.extend_from_slice(&(seq as i32).to_be_bytes()); // x
                body.extend_from_slice(&64i16.to_be_bytes()); // y
                body.extend_from_slice(&(i as i32).to_be_bytes()); // z
                body.push(1); // action
                body.extend_from_slice(&(payload.len() as i16).to_be_bytes());
                body.extend_from_slice(&payload);
                0x35
            }
            Kind::Chunk => {
                body.extend_from_slice(&(seq as i32).to_be_bytes()); // chunk x
                body.extend_from_slice(&0i32.to_be_bytes()); // chunk z
                body.push(1); // ground-up continuous
                body.extend_from_slice(&0xffffu16.to_be_bytes()); // primary bitmap
                body.extend_from_slice(&0u16.to_be_bytes()); // add bitmap
                body.extend_from_slice(&(payload.len() as i32).to_be_bytes());
                body.extend_from_slice(&payload);
                0x21
            }
            Kind::Bulk => {
                body.extend_from_slice(&1i16.to_be_bytes()); // chunk columns
                body.extend_from_slice(&(payload.len() as i32).to_be_bytes());
                body.push(1); // sky light
                body.extend_from_slice(&payload);
                body.extend_from_slice(&(seq as i32).to_be_bytes()); // chunk x
                body.extend_from_slice(&0i32.to_be_bytes()); // chunk z
                body.extend_from_slice(&[0xff, 0xff, 0, 0]); // bitmaps
                0x26
            }
        };
        let _ = encode_wide_frame(out, id, &body, GTNH_FRAME_LIMIT);
    }
    template.len()
}

/// A player's first bytes: Handshake (protocol 5, `host`, port 25565, next state Login) and Login Start.
///
/// # Errors
/// `host` over 255 characters or `name` over 16.
pub fn login_hello(host: &str, name: &str) -> Result<Vec<u8>, moonbridge_protocol::EncodeError> {
    use moonbridge_protocol::packets::{Handshake, LoginStart, NextState, Packet};
    let hs = Handshake {
        protocol_version: 5,
        server_address: host.into(),
        server_port: 25565,
        next_state: NextState::Login,
    };
    let mut hello = hs.to_frame_bytes()?.to_vec();
    hello.extend_from_slice(&LoginStart { name: name.into() }.to_frame_bytes()?);
    Ok(hello)
}

/// The client's three packets of tick `seq`: C17 plugin message, C04 position, C03 on ground.
pub fn encode_client_tick(seq: u32) -> [Vec<u8>; 3] {
    let mut c17 = Vec::new();
    let _ = put_string(&mut c17, "MB|Tick", 20, "channel");
    c17.extend_from_slice(&32i16.to_be_bytes());
    let mut data = seq.to_be_bytes().to_vec();
    filler(seq, 99, 28, &mut data);
    c17.extend_from_slice(&data);
    let mut c04 = Vec::new();
    for v in [f64::from(seq), 65.62, 64.0, 2.5] {
        c04.extend_from_slice(&v.to_be_bytes());
    }
    c04.push(1);
    let mut f = [Vec::new(), Vec::new(), Vec::new()];
    let _ = encode_frame(&mut f[0], 0x17, &c17);
    let _ = encode_frame(&mut f[1], 0x04, &c04);
    let _ = encode_frame(&mut f[2], 0x03, &[1]);
    f
}

/// Tick sequence of a client C17 frame body (after its id), if it is one.
pub fn client_tick_seq(id: i32, body: &[u8]) -> Option<u32> {
    if id != 0x17 {
        return None;
    }
    // "MB|Tick": 1 + 7 bytes of string, 2 bytes of length, then the sequence.
    let seq = body.get(10..14)?;
    Some(u32::from_be_bytes(seq.try_into().ok()?))
}

/// An echo frame: id 0x3F (or 0x17 upstream), body = sequence, index and filler up to `payload` bytes.
pub fn encode_echo_frame(seq: u32, index: usize, payload: usize, out: &mut Vec<u8>) {
    let mut body = Vec::with_capacity(payload);
    body.extend_from_slice(&seq.to_be_bytes());
    body.extend_from_slice(&(index as u16).to_be_bytes());
    filler(seq, index, payload.saturating_sub(6), &mut body);
    let _ = encode_frame(out, 0x17, &body);
}

/// The burst message `n` of the login burst.
pub fn login_burst_payload(n: usize, size: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(size);
    filler(0xffff_0000 + n as u32, n, size, &mut out);
    out
}

/// Averages of the templates: (packets per tick, bytes per tick).
pub fn template_averages(templates: &[Vec<Spec>]) -> (f64, f64) {
    let packets: usize = templates.iter().map(Vec::len).sum();
    let bytes: usize = templates.iter().flat_map(|t| t.iter().map(|s| s.len)).sum();
    (packets as f64 / templates.len() as f64, bytes as f64 / templates.len() as f64)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn templates_match_the_seed_shape() {
        let t = templates();
        assert_eq!(t.len(), 256);
        let (packets, bytes) = template_averages(&t);
        assert!((8.0..=12.0).contains(&packets), "{packets} packets per tick");
        assert!((5_000.0..=8_000.0).contains(&bytes), "{bytes} bytes per tick");
        assert!(t.iter().all(|t| t.len() >= 6));
        // Deterministic.
        let again = templates();
        assert!(t.iter().zip(&again).all(|(a, b)| a.len() == b.len()));
    }

    /// `--profile forge-channels` is `--profile forge` without its tile entities and chunks: the same stored mod
    /// channel bodies, byte for byte, in the same order, and no tick left without packets.
    #[test]
    fn forge_channels_keep_the_forge_profiles_channel_messages() {
        let all = forge_templates_of(false);
        let channels = forge_templates_of(true);
        assert_eq!(all.len(), channels.len());
        for (a, c) in all.iter().zip(&channels) {
            // A tick without packets would measure nothing.
            assert!(!c.is_empty());
            assert!(c.iter().all(|s| matches!(s.kind, Kind::Plugin(_))));
            let kept: Vec<_> = a.iter().filter(|s| matches!(s.kind, Kind::Plugin(_))).collect();
            assert_eq!(kept.len(), c.len());
            assert!(kept.iter().zip(c).all(|(k, c)| k.content == c.content && k.len == c.len));
        }
        // Tile entities and chunks were there to drop.
        assert!(all.iter().flatten().any(|s| s.kind == Kind::TileEntity));
        assert!(all.iter().flatten().any(|s| s.kind == Kind::Chunk));
    }

    #[test]
    fn client_ticks_carry_their_sequence() {
        let f = encode_client_tick(123_456);
        let mut dec = moonbridge_protocol::FrameDecoder::new(1 << 20);
        dec.queue_slice(&f[0]);
        let frame = dec.try_next_frame().unwrap().unwrap();
        assert_eq!(client_tick_seq(frame.id, &frame.body), Some(123_456));
    }
}
