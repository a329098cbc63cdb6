//! A GT New Horizons dialect peer, built from the dialect's public rules: no GTNH server or client runs here
//! (they need the modpack, Forge and the Minecraft jars), and no node-minecraft-protocol serializer speaks it.
//! GTNH ships Hodgepodge, whose defaults (`FixesConfig`: `increasePacketSizeLimit`, `packetSizeLimit` =
//! 256 MiB, `fixLoginDimensionIDOverflow`) make the server and the client write:
//!
//! - frame length prefixes as wide as the length needs, up to 5 bytes (frames up to 256 MiB);
//! - Plugin Message (S3F) data lengths as Forge's VarShort (3 bytes past 32,767), and past `0x7FFFFE` a
//!   `FF FF FF` marker and a VarInt (`PacketSerializationHelper`);
//! - Join Game (S01) with a trailing `int` dimension after the level type.
//!
//! The helpers here write exactly that; a [`crate::RawBackend`] sends it as a backend, a raw socket, a
//! WebSocket or the client library carries it as a player.

use moonbridge_protocol::frame::{encode_wide_frame, FrameDecoder};
use moonbridge_protocol::packets::{JoinGame, Packet, PluginMessage};
use moonbridge_protocol::transfer::BungeeAnswer;

/// Hodgepodge's default `packetSizeLimit`: 256 MiB.
pub const PACKET_SIZE_LIMIT: usize = 256 << 20;

/// One frame as the dialect writes it (the shortest prefix, up to 5 bytes).
pub fn frame(id: i32, fields: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(fields.len() + 6);
    encode_wide_frame(&mut out, id, fields, PACKET_SIZE_LIMIT).unwrap();
    out
}

/// A frame of packet `id` whose body is `len` bytes in all (the id included), filled with a pattern that
/// differs per `seed` and per position, so a byte lost, doubled or moved shows.
pub fn bulk(id: i32, len: usize, seed: u8) -> Vec<u8> {
    let fields: Vec<u8> =
        (0..len - 1).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed) ^ (i >> 16) as u8).collect();
    frame(id, &fields)
}

/// Join Game (S01) for `entity`, in `dimension`, with Hodgepodge's trailing `int`.
pub fn join_game(entity: i32, dimension: i32) -> Vec<u8> {
    let join = JoinGame {
        entity_id: entity,
        game_mode: 0,
        dimension,
        difficulty: 1,
        max_players: 20,
        level_type: "default".into(),
        trailing_dimension: true,
    };
    join.to_frame_bytes().unwrap().to_vec()
}

/// A clientbound Plugin Message (S3F) on `channel`, its data length in the shortest of the dialect's forms.
pub fn plugin(channel: &str, data: &[u8]) -> Vec<u8> {
    let mut fields = Vec::with_capacity(data.len() + 32);
    PluginMessage { channel: channel.into(), data: data.to_vec() }.encode_fields(&mut fields).unwrap();
    frame(PluginMessage::CLIENTBOUND_ID, &fields)
}

/// A `BungeeCord` request from a server plugin: `subchannel` and its string arguments, then `padding` bytes
/// (a plugin's message as large as a modpack's; BungeeCord reads only the fields it needs).
pub fn bungee_request(subchannel: &str, args: &[&str], padding: usize) -> Vec<u8> {
    let mut data = BungeeAnswer::new(subchannel).unwrap();
    for a in args {
        data.utf(a).unwrap();
    }
    let mut data = data.finish();
    data.resize(data.len() + padding, 0x5a);
    plugin("BungeeCord", &data)
}

/// The frames of a dialect stream (id and fields), read with the 256 MiB limit.
pub fn frames(bytes: &[u8]) -> Vec<(i32, Vec<u8>)> {
    let mut dec = FrameDecoder::new(PACKET_SIZE_LIMIT);
    dec.queue_slice(bytes);
    let mut out = Vec::new();
    while let Some(f) = dec.try_next_frame().unwrap() {
        out.push((f.id, f.body.to_vec()));
    }
    out
}
