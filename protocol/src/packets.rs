//! Protocol 5 (Minecraft 1.7.10) packets that MoonBridge reads or writes.
//!
//! Layouts follow the protocol 5 tables (wiki.vg "Protocol" page, revision for 1.7.6–1.7.10). Each type
//! documents its id, state and direction; fields are in wire order.

use bytes::BytesMut;

use crate::codec::{put_i16_bytes, put_string, Reader};
use crate::error::{DecodeError, EncodeError};
use crate::frame::encode_frame;
use crate::varint::VarInt;

impl crate::frame::Frame {
    /// Decodes the frame as packet `P`, checking the id and that no bytes are left over.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedPacketId`] or any field error of `P`.
    pub fn decode<P: Packet>(&self) -> Result<P, DecodeError> {
        if self.id != P::ID {
            return Err(DecodeError::UnexpectedPacketId { expected: P::ID, got: self.id });
        }
        let mut r = Reader::new(&self.body);
        let p = P::decode_body(&mut r)?;
        r.finish()?;
        Ok(p)
    }
}

/// Protocol version number of Minecraft 1.7.6 to 1.7.10.
pub const PROTOCOL_VERSION: i32 = 5;

/// Longest server address in a handshake, in UTF-16 units (the reference server's limit).
pub const MAX_HOST_CHARS: usize = 255;
/// Longest player name in Login Start, in UTF-16 units.
pub const MAX_NAME_CHARS: usize = 16;
/// Longest handshake address MoonBridge *writes*, in UTF-16 units. A BungeeCord-forwarded address carries the
/// player's IP, UUID and signed properties and is longer than 255; BungeeCord-aware servers (Spigot, Paper,
/// Sponge) read it with a 32,767 limit.
pub const MAX_FORWARDED_HOST_CHARS: usize = 32_767;
/// Longest JSON chat or status string, in UTF-16 units.
pub const MAX_JSON_CHARS: usize = 32_767;
/// Longest plugin channel name, in UTF-16 units.
pub const MAX_CHANNEL_CHARS: usize = 20;

/// Largest possible handshake frame body in bytes: id (1) + protocol VarInt (5) + host (3-byte length +
/// 255 × 4 bytes) + port (2) + next state VarInt (5). The handshake stage never buffers more than this.
pub const MAX_HANDSHAKE_FRAME_LEN: usize = 1 + 5 + 3 + MAX_HOST_CHARS * 4 + 2 + 5;
/// Largest possible Login Start frame body in bytes: id (1) + name (1-byte length + 16 × 4 bytes).
pub const MAX_LOGIN_START_FRAME_LEN: usize = 1 + 1 + MAX_NAME_CHARS * 4;

/// A packet with a fixed id in one state and direction.
pub trait Packet: Sized {
    /// The packet id.
    const ID: i32;
    /// Appends the fields (not the id) in wire order.
    ///
    /// # Errors
    /// When a field is over its limit.
    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError>;
    /// Reads the fields (the id already consumed).
    ///
    /// # Errors
    /// When a field is malformed or over its limit.
    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError>;

    /// Appends the packet as one complete frame (length, id, fields).
    ///
    /// # Errors
    /// As [`Packet::encode_body`], or [`EncodeError::FrameTooLarge`].
    fn encode_frame(&self, out: &mut BytesMut) -> Result<(), EncodeError> {
        let mut body = Vec::new();
        self.encode_body(&mut body)?;
        encode_frame(out, Self::ID, &body)
    }

    /// The packet as a standalone frame.
    ///
    /// # Errors
    /// As [`Packet::encode_frame`].
    fn to_frame_bytes(&self) -> Result<BytesMut, EncodeError> {
        let mut out = BytesMut::new();
        self.encode_frame(&mut out)?;
        Ok(out)
    }
}

/// The state a handshake asks to switch to.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum NextState {
    /// 1: server-list status.
    Status,
    /// 2: login.
    Login,
}

impl NextState {
    fn to_wire(self) -> i32 {
        match self {
            Self::Status => 1,
            Self::Login => 2,
        }
    }
}

/// Handshake, state Handshaking, id 0x00, serverbound.
///
/// `VarInt protocol_version`, `String server_address` (≤ 255), `u16 server_port`, `VarInt next_state`.
/// Forge 1.7.10 clients append `"\0FML\0"` to the address; see [`crate::handshake`]. Decoding enforces the
/// 255-character limit; encoding allows [`MAX_FORWARDED_HOST_CHARS`] so forwarded addresses fit.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Handshake {
    /// Protocol version the client speaks (5 for 1.7.10).
    pub protocol_version: i32,
    /// The address the player typed, possibly with a Forge marker or forwarding data after a NUL.
    pub server_address: String,
    /// The port the player typed.
    pub server_port: u16,
    /// Status or login.
    pub next_state: NextState,
}

impl Packet for Handshake {
    const ID: i32 = 0x00;

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        VarInt(self.protocol_version).encode(out);
        put_string(out, &self.server_address, MAX_FORWARDED_HOST_CHARS, "server_address")?;
        out.extend_from_slice(&self.server_port.to_be_bytes());
        VarInt(self.next_state.to_wire()).encode(out);
        Ok(())
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let protocol_version = r.var_int("protocol_version")?;
        let server_address = r.string(MAX_HOST_CHARS, "server_address")?.to_owned();
        let server_port = r.u16("server_port")?;
        let next_state = match r.var_int("next_state")? {
            1 => NextState::Status,
            2 => NextState::Login,
            other => return Err(DecodeError::InvalidNextState(other)),
        };
        Ok(Self { protocol_version, server_address, server_port, next_state })
    }
}

/// Login Start, state Login, id 0x00, serverbound: `String name` (≤ 16).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginStart {
    /// The player name.
    pub name: String,
}

impl Packet for LoginStart {
    const ID: i32 = 0x00;

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        put_string(out, &self.name, MAX_NAME_CHARS, "name")
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let name = r.string(MAX_NAME_CHARS, "name")?;
        if name.is_empty() {
            return Err(DecodeError::InvalidValue { field: "name", reason: "empty player name" });
        }
        Ok(Self { name: name.to_owned() })
    }
}

/// True for a legal player name: 1 to 16 characters, each an ASCII letter, digit or underscore (what the
/// session server issues and servers accept; Login Start itself only caps the length).
pub fn is_valid_player_name(name: &str) -> bool {
    (1..=MAX_NAME_CHARS).contains(&name.len()) && name.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'_')
}

/// Login Disconnect, state Login, id 0x00, clientbound: `String reason` (JSON chat, ≤ 32767).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginDisconnect {
    /// The reason as a JSON chat component; build it with [`chat_text`].
    pub reason_json: String,
}

impl Packet for LoginDisconnect {
    const ID: i32 = 0x00;

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        put_string(out, &self.reason_json, MAX_JSON_CHARS, "reason")
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { reason_json: r.string(MAX_JSON_CHARS, "reason")?.to_owned() })
    }
}

/// Login Success, state Login, id 0x02, clientbound: `String uuid` (36, with dashes), `String name` (≤ 16).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct LoginSuccess {
    /// The player UUID in its dashed form.
    pub uuid: String,
    /// The player name.
    pub name: String,
}

impl Packet for LoginSuccess {
    const ID: i32 = 0x02;

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        put_string(out, &self.uuid, 36, "uuid")?;
        put_string(out, &self.name, MAX_NAME_CHARS, "name")
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let uuid = r.string(36, "uuid")?.to_owned();
        let name = r.string(MAX_NAME_CHARS, "name")?.to_owned();
        Ok(Self { uuid, name })
    }
}

/// Encryption Request, state Login, id 0x01, clientbound: `String server_id` (≤ 20), `i16` length + public
/// key (X.509 SubjectPublicKeyInfo DER), `i16` length + verify token. Protocol 5 uses `i16` lengths here.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncryptionRequest {
    /// The server id hashed into the server hash (empty for modern servers).
    pub server_id: String,
    /// The server's RSA public key, DER.
    pub public_key: Vec<u8>,
    /// Random bytes the client must send back encrypted.
    pub verify_token: Vec<u8>,
}

impl Packet for EncryptionRequest {
    const ID: i32 = 0x01;

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        put_string(out, &self.server_id, 20, "server_id")?;
        put_i16_bytes(out, &self.public_key, "public_key")?;
        put_i16_bytes(out, &self.verify_token, "verify_token")
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            server_id: r.string(20, "server_id")?.to_owned(),
            public_key: r.i16_bytes("public_key")?.to_vec(),
            verify_token: r.i16_bytes("verify_token")?.to_vec(),
        })
    }
}

/// Encryption Response, state Login, id 0x01, serverbound: `i16` length + RSA-encrypted shared secret,
/// `i16` length + RSA-encrypted verify token (PKCS#1 v1.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EncryptionResponse {
    /// The shared secret, encrypted with the server's public key.
    pub shared_secret: Vec<u8>,
    /// The verify token, encrypted with the server's public key.
    pub verify_token: Vec<u8>,
}

impl Packet for EncryptionResponse {
    const ID: i32 = 0x01;

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        put_i16_bytes(out, &self.shared_secret, "shared_secret")?;
        put_i16_bytes(out, &self.verify_token, "verify_token")
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            shared_secret: r.i16_bytes("shared_secret")?.to_vec(),
            verify_token: r.i16_bytes("verify_token")?.to_vec(),
        })
    }
}

/// Largest Encryption Response frame body in bytes: id (1) + two `i16`-prefixed arrays of at most 512 bytes
/// each (RSA-1024 and RSA-4096 ciphertexts are 128 and 512 bytes).
pub const MAX_ENCRYPTION_RESPONSE_FRAME_LEN: usize = 1 + 2 * (2 + 512);

/// Status Request, state Status, id 0x00, serverbound: no fields.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusRequest;

impl Packet for StatusRequest {
    const ID: i32 = 0x00;

    fn encode_body(&self, _out: &mut Vec<u8>) -> Result<(), EncodeError> {
        Ok(())
    }

    fn decode_body(_r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self)
    }
}

/// Status Response, state Status, id 0x00, clientbound: `String json` (≤ 32767).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StatusResponse {
    /// The server-list JSON (`version`, `players`, `description`).
    pub json: String,
}

impl Packet for StatusResponse {
    const ID: i32 = 0x00;

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        put_string(out, &self.json, MAX_JSON_CHARS, "json")
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { json: r.string(MAX_JSON_CHARS, "json")?.to_owned() })
    }
}

/// Status Ping (serverbound) and Pong (clientbound), state Status, id 0x01: `i64 payload`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusPing {
    /// Echoed unchanged by the server.
    pub payload: i64,
}

impl Packet for StatusPing {
    const ID: i32 = 0x01;

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        out.extend_from_slice(&self.payload.to_be_bytes());
        Ok(())
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { payload: r.i64("payload")? })
    }
}

/// Keep Alive, state Play, id 0x00, both directions: `i32 id`.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct KeepAlive {
    /// Echoed unchanged by the client.
    pub id: i32,
}

impl Packet for KeepAlive {
    const ID: i32 = 0x00;

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        out.extend_from_slice(&self.id.to_be_bytes());
        Ok(())
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { id: r.i32("id")? })
    }
}

/// Play Disconnect (S40), state Play, id 0x40, clientbound: `String reason` (JSON chat).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlayDisconnect {
    /// The reason as a JSON chat component.
    pub reason_json: String,
}

impl Packet for PlayDisconnect {
    const ID: i32 = 0x40;

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        put_string(out, &self.reason_json, MAX_JSON_CHARS, "reason")
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { reason_json: r.string(MAX_JSON_CHARS, "reason")?.to_owned() })
    }
}

/// Chat Message (S02), state Play, id 0x02, clientbound: `String json` (a JSON chat component, ≤ 32,767
/// characters). Protocol 5 has no position byte (1.8 added it); the client shows the text in its chat.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChatMessage {
    /// The message as a JSON chat component ([`chat_text`] builds one for plain text).
    pub json: String,
}

impl Packet for ChatMessage {
    const ID: i32 = 0x02;

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        put_string(out, &self.json, MAX_JSON_CHARS, "json")
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self { json: r.string(MAX_JSON_CHARS, "json")?.to_owned() })
    }
}

/// Plugin Message, state Play: clientbound S3F (id 0x3F) and serverbound C17 (id 0x17) share the layout
/// `String channel` (≤ 20), data length, `byte[length] data`. The length is an `i16` in vanilla 1.7.10 (data ≤
/// 32,767 bytes; Forge 1.7.10 keeps it for C17), Forge's 3-byte VarShort in its S3F (≤ 2,097,050), and
/// Hodgepodge's extended form in GT New Horizons (a VarInt behind a marker): [`crate::array_length`] reads all
/// three and writes the shortest.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PluginMessage {
    /// Channel name, such as `FML|HS`.
    pub channel: String,
    /// Payload.
    pub data: Vec<u8>,
}

impl PluginMessage {
    /// Packet id of the clientbound form (S3F).
    pub const CLIENTBOUND_ID: i32 = 0x3f;
    /// Packet id of the serverbound form (C17).
    pub const SERVERBOUND_ID: i32 = 0x17;

    /// Appends the fields (without the id); the data length in its shortest form (an `i16` up to 32,767, as
    /// vanilla writes it).
    ///
    /// # Errors
    /// Channel over 20 characters.
    pub fn encode_fields(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        put_string(out, &self.channel, MAX_CHANNEL_CHARS, "channel")?;
        crate::array_length::put_data(out, &self.data);
        Ok(())
    }

    /// Reads the fields (id already consumed).
    ///
    /// # Errors
    /// Malformed or over-long fields.
    pub fn decode_fields(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let channel = r.string(MAX_CHANNEL_CHARS, "channel")?.to_owned();
        let data = crate::array_length::read_data(r, "data")?.to_vec();
        Ok(Self { channel, data })
    }
}

/// Longest level type in Join Game and Respawn, in UTF-16 units (the reference client reads 16).
pub const MAX_LEVEL_TYPE_CHARS: usize = 16;

/// Join Game (S01), state Play, id 0x01, clientbound: `i32 entity_id`, `u8 game_mode` (bit 3: hardcore),
/// `i8 dimension` (-1 nether, 0 overworld, 1 end, others from mods), `u8 difficulty`, `u8 max_players`,
/// `String level_type` (≤ 16). The first packet of Play; `entity_id` is the player's own entity id on that
/// server.
///
/// GT New Horizons' Hodgepodge (`fixLoginDimensionIDOverflow`, on by default) appends an `i32` dimension after
/// the level type, because its dimension ids do not fit the byte; its reader takes the `i32` when at least 4
/// bytes remain, and so does this one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct JoinGame {
    /// The player's entity id on this server.
    pub entity_id: i32,
    /// Game mode; bit 3 (0x08) is hardcore.
    pub game_mode: u8,
    /// Dimension id: the trailing `i32` when there is one, otherwise the byte (an `i32` in Respawn too).
    pub dimension: i32,
    /// Difficulty, 0 (peaceful) to 3 (hard).
    pub difficulty: u8,
    /// What the tab list is sized for.
    pub max_players: u8,
    /// `default`, `flat`, `largeBiomes`, `amplified`, `default_1_1`, or a mod's.
    pub level_type: String,
    /// The dimension also travels as Hodgepodge's trailing `i32` (written whenever the dimension does not fit
    /// the byte, whose value is then the low 8 bits).
    pub trailing_dimension: bool,
}

impl Packet for JoinGame {
    const ID: i32 = 0x01;

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        out.extend_from_slice(&self.entity_id.to_be_bytes());
        out.push(self.game_mode);
        // The low 8 bits, as Java's `(byte)` cast writes them.
        out.push(self.dimension.to_be_bytes()[3]);
        out.extend_from_slice(&[self.difficulty, self.max_players]);
        put_string(out, &self.level_type, MAX_LEVEL_TYPE_CHARS, "level type")?;
        if self.trailing_dimension || i8::try_from(self.dimension).is_err() {
            out.extend_from_slice(&self.dimension.to_be_bytes());
        }
        Ok(())
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        let entity_id = r.i32("entity id")?;
        let game_mode = r.u8("game mode")?;
        let byte = i8::from_be_bytes([r.u8("dimension")?]);
        let difficulty = r.u8("difficulty")?;
        let max_players = r.u8("max players")?;
        let level_type = r.string(MAX_LEVEL_TYPE_CHARS, "level type")?.to_owned();
        let trailing = r.remaining().len() >= 4;
        let dimension = if trailing { r.i32("trailing dimension")? } else { i32::from(byte) };
        Ok(Self { entity_id, game_mode, dimension, difficulty, max_players, level_type, trailing_dimension: trailing })
    }
}

/// Respawn (S07), state Play, id 0x07, clientbound: `i32 dimension`, `u8 difficulty`, `u8 game_mode`,
/// `String level_type` (≤ 16). The 1.7.10 client builds a new world when the dimension differs from the
/// current one, and keeps the old one (entities, chunks) when it is the same.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Respawn {
    /// Dimension id.
    pub dimension: i32,
    /// Difficulty, 0 to 3.
    pub difficulty: u8,
    /// Game mode (without the hardcore bit).
    pub game_mode: u8,
    /// As in [`JoinGame`].
    pub level_type: String,
}

impl Packet for Respawn {
    const ID: i32 = 0x07;

    fn encode_body(&self, out: &mut Vec<u8>) -> Result<(), EncodeError> {
        out.extend_from_slice(&self.dimension.to_be_bytes());
        out.extend_from_slice(&[self.difficulty, self.game_mode]);
        put_string(out, &self.level_type, MAX_LEVEL_TYPE_CHARS, "level type")
    }

    fn decode_body(r: &mut Reader<'_>) -> Result<Self, DecodeError> {
        Ok(Self {
            dimension: r.i32("dimension")?,
            difficulty: r.u8("difficulty")?,
            game_mode: r.u8("game mode")?,
            level_type: r.string(MAX_LEVEL_TYPE_CHARS, "level type")?.to_owned(),
        })
    }
}

/// Builds a JSON chat component holding plain `text`: `{"text":"..."}` with JSON escaping.
pub fn chat_text(text: &str) -> String {
    serde_json::json!({ "text": text }).to_string()
}

#[cfg(test)]
mod tests;
