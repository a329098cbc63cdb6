//! The Forge 1.7.10 handshake channel `FML|HS`: a discriminator byte, then the message
//! (`cpw.mods.fml.common.network.handshake.FMLHandshakeCodec`).

use crate::packets::PluginMessage;

/// The channel.
pub const CHANNEL: &str = "FML|HS";
/// Forge's runtime channel (`FMLRuntimeCodec`: CompleteHandshake, OpenGui, EntitySpawnMessage,
/// EntityAdjustMessage).
pub const RUNTIME_CHANNEL: &str = "FML";
/// ServerHello (server to client): FML protocol version, then the dimension override.
pub const SERVER_HELLO: u8 = 0;
/// ClientHello (client to server): FML protocol version.
pub const CLIENT_HELLO: u8 = 1;
/// ModList (both ways): the mods and their versions.
pub const MOD_LIST: u8 = 2;
/// ModIdData (server to client): the item and block id registry.
pub const MOD_ID_DATA: u8 = 3;
/// HandshakeAck (both ways, `(byte) -1`): the sender's phase.
pub const HANDSHAKE_ACK: u8 = 0xff;
/// HandshakeReset (to the client, `(byte) -2`): start the handshake again, as for a new server.
pub const HANDSHAKE_RESET: u8 = 0xfe;

/// The discriminator of an `FML|HS` payload, if it has one.
pub fn discriminator(data: &[u8]) -> Option<u8> {
    data.first().copied()
}

/// Most bytes of a backend's Forge handshake a proxy keeps for a replay (a large modpack's ModIdData is a
/// few hundred KiB); a larger handshake is not kept.
pub const MAX_RECORD_BYTES: usize = 2 * 1024 * 1024;

/// Whether a Plugin Message (`fields`: after the packet id) belongs to Forge's handshake: `FML|HS`,
/// `FML|MP` (its multipart carrier for messages over 32 KiB, such as a large ModIdData) or `REGISTER` (the
/// channel list sent with it).
pub fn is_handshake(fields: &[u8]) -> bool {
    [CHANNEL, "FML|MP", "REGISTER"].iter().any(|c| super::is_channel(fields, c))
}

/// Appends a handshake frame (packet `id`, `fields` after it) to `record`, dropping the record when it would
/// pass [`MAX_RECORD_BYTES`].
pub fn record(record: &mut Option<bytes::BytesMut>, id: i32, fields: &[u8]) {
    if let Some(r) = record {
        if r.len() + fields.len() + 8 > MAX_RECORD_BYTES || crate::frame::encode_frame(r, id, fields).is_err() {
            *record = None;
        }
    }
}

/// The HandshakeReset message: `FML|HS` with the single byte 0xFE (the message has no fields).
pub fn handshake_reset() -> PluginMessage {
    PluginMessage { channel: CHANNEL.into(), data: vec![HANDSHAKE_RESET] }
}
