//! [`EntityIdSwap`]: the player's own entity id differs between the server the client first joined and the one
//! it plays on after a switch; every protocol 5 Play packet that carries entity ids is rewritten, both ways
//! (wiki.vg "Protocol" for 1.7.6–1.7.10; the 1.7.10 client's `NetHandlerPlayClient`, which packets it resolves
//! with `getEntityByID`).

use super::{fml, Direction};
use crate::codec::Reader;
use crate::error::DecodeError;
use crate::varint::VarInt;

/// Where a Play packet of protocol 5 carries entity ids.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Layout {
    /// Big-endian `i32` entity ids at these byte offsets of the body (after the packet id).
    Ints(&'static [usize]),
    /// A VarInt entity id first.
    VarIntFirst,
    /// S0E Spawn Object: `VarInt entity_id`, `i8 type`, `i32 x, y, z`, `i8 pitch, yaw`, `i32 data`, … where
    /// `data` is the shooter of an arrow (type 60) and the angler of a fishing float (type 90).
    SpawnObject,
    /// S13 Destroy Entities: `i8 count`, `i32 entity_ids[count]`.
    DestroyEntities,
    /// S2D Open Window: `u8 window_id`, `u8 type`, `String title`, `u8 slots`, `bool use_title`, then for a
    /// horse's inventory (type 11) `i32 entity_id`.
    OpenWindow,
    /// S3F Plugin Message on Forge's runtime channel `FML` ([`fml::RUNTIME_CHANNEL`]; Forge 1.7.10
    /// `FMLRuntimeCodec`, data after its length in any [`crate::array_length`] form): discriminator 2 EntitySpawnMessage (`i32 entity_id`,
    /// `String mod_id` as a VarInt-length UTF-8 string, `i32 type`, `i32 x, y, z`, `i8 yaw, pitch, head_yaw`,
    /// the DataWatcher list, `i32 thrower_id`, …) and 3 EntityAdjustMessage (`i32 entity_id`, `i32 x, y, z`).
    /// Other channels and discriminators carry none.
    ForgeEntity,
}

/// Forge's runtime message that spawns a mod entity (`FMLMessage.EntitySpawnMessage`).
const FML_ENTITY_SPAWN: u8 = 2;
/// Forge's runtime message that moves a mod entity (`FMLMessage.EntityAdjustMessage`).
const FML_ENTITY_ADJUST: u8 = 3;

/// Object types whose S0E `data` field is an entity id (1.7.10 `NetHandlerPlayClient.handleSpawnObject`).
const OWNER_OBJECT_TYPES: [i8; 2] = [60, 90];
/// Open Window type of a horse's inventory (it names the horse's entity id).
const HORSE_WINDOW: u8 = 11;

/// The entity-id fields of Play packet `id`, or `None` when it carries none.
///
/// Clientbound: S04 Entity Equipment, S0A Use Bed, S12 Entity Velocity, S14–S18 Entity (move, look,
/// teleport), S19 Entity Head Look, S1A Entity Status, S1C Entity Metadata, S1D Entity Effect, S1E Remove
/// Entity Effect, S20 Entity Properties (`i32` first); S0D Collect Item and S1B Attach Entity (two `i32`);
/// S0B Animation, S0C Spawn Player, S0F Spawn Mob, S10 Spawn Painting, S11 Spawn Experience Orb, S25 Block
/// Break Animation, S2C Spawn Global Entity (VarInt first); S0E, S13, S2D and S3F (Forge's entity messages)
/// as [`Layout`] says. Serverbound:
/// C02 Use Entity, C0A Animation, C0B Entity Action (`i32` first). S01 Join Game is not here: a proxy that
/// switches servers answers it itself.
fn layout(direction: Direction, id: i32) -> Option<Layout> {
    const FIRST: &[usize] = &[0];
    const TWO: &[usize] = &[0, 4];
    Some(match (direction, id) {
        (
            Direction::Clientbound,
            0x04 | 0x0a | 0x12 | 0x14 | 0x15 | 0x16 | 0x17 | 0x18 | 0x19 | 0x1a | 0x1c | 0x1d | 0x1e | 0x20,
        ) => Layout::Ints(FIRST),
        (Direction::Clientbound, 0x0d | 0x1b) => Layout::Ints(TWO),
        (Direction::Clientbound, 0x0b | 0x0c | 0x0f | 0x10 | 0x11 | 0x25 | 0x2c) => Layout::VarIntFirst,
        (Direction::Clientbound, 0x0e) => Layout::SpawnObject,
        (Direction::Clientbound, 0x13) => Layout::DestroyEntities,
        (Direction::Clientbound, 0x2d) => Layout::OpenWindow,
        (Direction::Clientbound, 0x3f) => Layout::ForgeEntity,
        (Direction::Serverbound, 0x02 | 0x0a | 0x0b) => Layout::Ints(FIRST),
        _ => return None,
    })
}

/// True when Play packet `id` going `direction` carries entity ids, so [`EntityIdSwap::rewrite`] may change
/// it; a relay parses only these.
pub fn carries_entity_ids(direction: Direction, id: i32) -> bool {
    layout(direction, id).is_some()
}

/// Swaps the player's entity id between the one the client knows and the one the current server uses.
///
/// After a switch the client still believes it is the entity of the first Join Game (`client`), while the new
/// server calls it `server`. Every entity id field equal to one is replaced by the other, in both directions:
/// the player's own id is translated, and an entity of the new server that happens to have the id `client`
/// gets `server` instead, so the client never takes it for itself (the swap is its own inverse).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct EntityIdSwap {
    client: i32,
    server: i32,
}

impl EntityIdSwap {
    /// The swap for a client that knows itself as `client` on a server that calls it `server`.
    pub fn new(client: i32, server: i32) -> Self {
        Self { client, server }
    }

    /// True when both ids are the same, so nothing needs rewriting.
    pub fn is_identity(&self) -> bool {
        self.client == self.server
    }

    /// One id through the swap.
    pub fn map(&self, id: i32) -> i32 {
        if id == self.client {
            self.server
        } else if id == self.server {
            self.client
        } else {
            id
        }
    }

    /// Rewrites the entity ids of Play packet `id` (its `body`, after the packet id) in place. Returns whether
    /// a byte changed; a VarInt id whose new value is longer or shorter changes the body's length, so the
    /// caller frames the body again.
    ///
    /// # Errors
    /// [`DecodeError`] when the body ends inside an entity id field (or a field before one), or S13's count is
    /// negative. The body is left unchanged then.
    pub fn rewrite(&self, direction: Direction, id: i32, body: &mut Vec<u8>) -> Result<bool, DecodeError> {
        let Some(layout) = layout(direction, id) else { return Ok(false) };
        if self.is_identity() {
            return Ok(false);
        }
        match layout {
            Layout::Ints(offsets) => self.swap_ints(body, offsets.iter().copied()),
            Layout::VarIntFirst => {
                let (old, n) = first_var_int(body)?;
                Ok(self.swap_var_int(body, old, n))
            }
            Layout::SpawnObject => {
                let (old, n) = first_var_int(body)?;
                let kind = *body.get(n).ok_or(DecodeError::UnexpectedEnd("type"))? as i8;
                // data: after type (1), x, y, z (12), pitch and yaw (2).
                let data = n + 15;
                let changed = OWNER_OBJECT_TYPES.contains(&kind) && self.swap_owner(body, data)?;
                // The owner sits after the VarInt, so swapping the VarInt last keeps `data` right.
                Ok(self.swap_var_int(body, old, n) | changed)
            }
            Layout::DestroyEntities => {
                let count = *body.first().ok_or(DecodeError::UnexpectedEnd("count"))? as i8;
                let count = usize::try_from(count)
                    .map_err(|_| DecodeError::InvalidValue { field: "count", reason: "negative" })?;
                self.swap_ints(body, (0..count).map(|k| 1 + 4 * k))
            }
            Layout::OpenWindow => {
                let mut r = Reader::new(body);
                r.u8("window id")?;
                let kind = r.u8("type")?;
                r.string(crate::packets::MAX_JSON_CHARS, "title")?;
                r.u8("slots")?;
                r.u8("use title")?;
                if kind != HORSE_WINDOW {
                    return Ok(false);
                }
                let at = body.len() - r.remaining().len();
                self.swap_ints(body, [at])
            }
            Layout::ForgeEntity => {
                let Some((entity, thrower)) = forge_entity_fields(body)? else { return Ok(false) };
                let mut changed = self.swap_ints(body, [entity])?;
                if let Some(at) = thrower.filter(|&at| i32_at(body, at).is_some_and(|v| v != 0)) {
                    // 0 means "no thrower" (no velocity follows), so it is never swapped.
                    changed |= self.swap_ints(body, [at])?;
                }
                Ok(changed)
            }
        }
    }

    /// Swaps S0E's `data` at `at`. The three velocity shorts follow it only when it is positive
    /// (`S0EPacketSpawnObject.readPacketData`), so a swap across zero adds them (as zeros) or drops them.
    fn swap_owner(&self, body: &mut Vec<u8>, at: usize) -> Result<bool, DecodeError> {
        let old = i32_at(body, at).ok_or(DecodeError::UnexpectedEnd("data"))?;
        let new = self.map(old);
        if new == old {
            return Ok(false);
        }
        let velocity = at + 4;
        match (old > 0, new > 0) {
            (true, false) => {
                if body.len() < velocity + 6 {
                    return Err(DecodeError::UnexpectedEnd("velocity"));
                }
                body.drain(velocity..velocity + 6);
            }
            (false, true) => {
                body.splice(velocity..velocity, [0u8; 6]);
            }
            _ => {}
        }
        body.splice(at..velocity, new.to_be_bytes());
        Ok(true)
    }

    /// Swaps the `i32` at each offset; true when one changed.
    ///
    /// # Errors
    /// [`DecodeError::UnexpectedEnd`] when a field does not fit in the body; nothing is changed then.
    fn swap_ints(
        &self,
        body: &mut [u8],
        offsets: impl IntoIterator<Item = usize, IntoIter: Clone>,
    ) -> Result<bool, DecodeError> {
        let offsets = offsets.into_iter();
        if offsets.clone().any(|at| i32_at(body, at).is_none()) {
            return Err(DecodeError::UnexpectedEnd("entity id"));
        }
        let mut changed = false;
        for at in offsets {
            let Some(old) = i32_at(body, at) else { continue };
            let new = self.map(old);
            if let (true, Some(field)) = (new != old, body.get_mut(at..at.saturating_add(4))) {
                field.copy_from_slice(&new.to_be_bytes());
                changed = true;
            }
        }
        Ok(changed)
    }

    /// Swaps the VarInt `old`, `n` bytes long, at the start of `body`, re-encoding it (its length may change).
    fn swap_var_int(&self, body: &mut Vec<u8>, old: i32, n: usize) -> bool {
        let new = self.map(old);
        if new == old {
            return false;
        }
        let mut encoded = Vec::with_capacity(VarInt::MAX_SIZE);
        VarInt(new).encode(&mut encoded);
        body.splice(..n, encoded);
        true
    }
}

/// Where the entity id of a Forge entity message sits in an S3F body, and a spawn's thrower id; `None` for
/// another channel or message.
fn forge_entity_fields(body: &[u8]) -> Result<Option<(usize, Option<usize>)>, DecodeError> {
    let mut r = Reader::new(body);
    if r.string(crate::packets::MAX_CHANNEL_CHARS, "channel")? != fml::RUNTIME_CHANNEL {
        return Ok(None);
    }
    let data = crate::array_length::read_data(&mut r, "data")?;
    let start = body.len() - r.remaining().len() - data.len();
    let mut r = Reader::new(data);
    let discriminator = match r.u8("discriminator") {
        Ok(d) => d,
        Err(_) => return Ok(None),
    };
    let entity = start + 1;
    match discriminator {
        FML_ENTITY_ADJUST => Ok(Some((entity, None))),
        FML_ENTITY_SPAWN => {
            r.i32("entity id")?;
            r.string(crate::packets::MAX_CHANNEL_CHARS.max(64), "mod id")?;
            // type, x, y, z; yaw, pitch, head yaw.
            r.bytes(16 + 3, "position")?;
            skip_watchers(&mut r)?;
            Ok(Some((entity, Some(start + data.len() - r.remaining().len()))))
        }
        _ => Ok(None),
    }
}

/// Skips a 1.7.10 DataWatcher list (`DataWatcher.writeWatchedListToPacketBuffer`): per entry a byte
/// `type << 5 | index`, then the value (0 `i8`, 1 `i16`, 2 `i32`, 3 `f32`, 4 a VarInt-length string, 5 an
/// item stack: `i16 id`, and when not negative `i8 count`, `i16 damage`, an `i16`-length NBT blob (-1: none),
/// 6 three `i32`), until the byte 0x7f.
fn skip_watchers(r: &mut Reader<'_>) -> Result<(), DecodeError> {
    loop {
        let head = r.u8("metadata")?;
        if head == 0x7f {
            return Ok(());
        }
        match head >> 5 {
            0 => drop(r.bytes(1, "metadata")?),
            1 => drop(r.bytes(2, "metadata")?),
            2 | 3 => drop(r.bytes(4, "metadata")?),
            4 => drop(r.string(32_767, "metadata")?),
            5 => {
                if r.i16("item id")? >= 0 {
                    r.bytes(3, "item")?;
                    let nbt = r.i16("item nbt")?;
                    if let Ok(n) = usize::try_from(nbt) {
                        r.bytes(n, "item nbt")?;
                    }
                }
            }
            6 => drop(r.bytes(12, "metadata")?),
            _ => return Err(DecodeError::InvalidValue { field: "metadata", reason: "unknown type" }),
        }
    }
}

/// The VarInt entity id at the start of `body`, and its length in bytes.
fn first_var_int(body: &[u8]) -> Result<(i32, usize), DecodeError> {
    VarInt::decode_partial(body).map_err(|source| DecodeError::VarInt { field: "entity id", source })
}

/// The big-endian `i32` at `at`, if it fits.
fn i32_at(body: &[u8], at: usize) -> Option<i32> {
    let field = body.get(at..at.checked_add(4)?)?;
    Some(i32::from_be_bytes(<[u8; 4]>::try_from(field).ok()?))
}

#[cfg(test)]
mod tests {
    use super::*;

    const SWAP: EntityIdSwap = EntityIdSwap { client: 7, server: 300 };

    fn rewrite(direction: Direction, id: i32, body: &[u8]) -> (Result<bool, DecodeError>, Vec<u8>) {
        let mut b = body.to_vec();
        let r = SWAP.rewrite(direction, id, &mut b);
        (r, b)
    }

    #[test]
    fn the_swap_is_its_own_inverse() {
        assert_eq!(SWAP.map(7), 300);
        assert_eq!(SWAP.map(300), 7);
        assert_eq!(SWAP.map(8), 8);
        for v in [7, 300, 8, -1, i32::MIN] {
            assert_eq!(SWAP.map(SWAP.map(v)), v);
        }
        assert!(EntityIdSwap::new(5, 5).is_identity());
    }

    #[test]
    fn fixed_int_packets_byte_exact() {
        // S12 Entity Velocity of the player on the new server (300 = 0x12c), velocity 1, 2, 3.
        let (r, b) = rewrite(Direction::Clientbound, 0x12, &[0, 0, 1, 0x2c, 0, 1, 0, 2, 0, 3]);
        assert_eq!(r, Ok(true));
        assert_eq!(b, [0, 0, 0, 7, 0, 1, 0, 2, 0, 3]);
        // Every `i32`-first clientbound packet: S1C Entity Metadata (entity 300, metadata end 0x7f).
        for id in [0x04, 0x0a, 0x12, 0x14, 0x15, 0x16, 0x17, 0x18, 0x19, 0x1a, 0x1c, 0x1d, 0x1e, 0x20] {
            let (r, b) = rewrite(Direction::Clientbound, id, &[0, 0, 1, 0x2c, 0x7f]);
            assert_eq!((r, b), (Ok(true), vec![0, 0, 0, 7, 0x7f]), "packet 0x{id:02x}");
        }
        // Another entity's id is left alone.
        assert_eq!(rewrite(Direction::Clientbound, 0x12, &[0, 0, 0, 9, 0, 0, 0, 0, 0, 0]).0, Ok(false));
        // An entity of the new server that has the client's id (7) becomes 300.
        let (_, b) = rewrite(Direction::Clientbound, 0x14, &[0, 0, 0, 7]);
        assert_eq!(b, [0, 0, 1, 0x2c]);
        // S0D Collect Item: item 300? no: item 9 collected by the player (300).
        let (r, b) = rewrite(Direction::Clientbound, 0x0d, &[0, 0, 0, 9, 0, 0, 1, 0x2c]);
        assert_eq!((r, b), (Ok(true), vec![0, 0, 0, 9, 0, 0, 0, 7]));
        // S1B Attach Entity: the player (300) rides entity 7 of the new server, leash false.
        let (_, b) = rewrite(Direction::Clientbound, 0x1b, &[0, 0, 1, 0x2c, 0, 0, 0, 7, 0]);
        assert_eq!(b, [0, 0, 0, 7, 0, 0, 1, 0x2c, 0]);
        // Serverbound C0A Animation and C0B Entity Action from the client (7) go out as 300.
        let (_, b) = rewrite(Direction::Serverbound, 0x0a, &[0, 0, 0, 7, 1]);
        assert_eq!(b, [0, 0, 1, 0x2c, 1]);
        let (_, b) = rewrite(Direction::Serverbound, 0x0b, &[0, 0, 0, 7, 1, 0, 0, 0, 0]);
        assert_eq!(b, [0, 0, 1, 0x2c, 1, 0, 0, 0, 0]);
        // C02 Use Entity on entity 300 of the server (which the client knows as 7's swap).
        let (_, b) = rewrite(Direction::Serverbound, 0x02, &[0, 0, 0, 7, 0]);
        assert_eq!(b, [0, 0, 1, 0x2c, 0]);
    }

    /// An S3F body on channel `channel` with `data`.
    fn plugin(channel: &str, data: &[u8]) -> Vec<u8> {
        let mut body = Vec::new();
        crate::packets::PluginMessage { channel: channel.into(), data: data.to_vec() }
            .encode_fields(&mut body)
            .unwrap();
        body
    }

    #[test]
    fn forge_entity_messages_byte_exact() {
        // EntityAdjustMessage (3): entity 300, x y z.
        let mut adjust = vec![3, 0, 0, 1, 0x2c];
        adjust.extend_from_slice(&[0, 0, 0, 1, 0, 0, 0, 2, 0, 0, 0, 3]);
        let (r, b) = rewrite(Direction::Clientbound, 0x3f, &plugin("FML", &adjust));
        let mut want = adjust.clone();
        want[1..5].copy_from_slice(&7i32.to_be_bytes());
        assert_eq!((r, b), (Ok(true), plugin("FML", &want)));
        // EntitySpawnMessage (2): entity 9, mod id "mod", type 1, x y z, yaw pitch head, watchers (a byte, a
        // string, an item stack with NBT, a position), thrower 300, velocity.
        let mut spawn = vec![2, 0, 0, 0, 9, 3, b'm', b'o', b'd'];
        spawn.extend_from_slice(&[0; 16 + 3]);
        spawn.extend_from_slice(&[0x00, 5, 0x81, 2, b'h', b'i', 0xa2, 0, 1, 4, 0, 0, 0, 2, 0xaa, 0xbb, 0xc3]);
        spawn.extend_from_slice(&[0; 12]);
        spawn.push(0x7f);
        let thrower = spawn.len();
        spawn.extend_from_slice(&300i32.to_be_bytes());
        spawn.extend_from_slice(&[0; 12]);
        let (r, b) = rewrite(Direction::Clientbound, 0x3f, &plugin("FML", &spawn));
        let mut want = spawn.clone();
        want[thrower..thrower + 4].copy_from_slice(&7i32.to_be_bytes());
        assert_eq!((r, b), (Ok(true), plugin("FML", &want)), "the thrower after the watcher list");
        // A thrower of 0 means none: a swap with 0 leaves it.
        let zero = EntityIdSwap::new(0, 9);
        let mut none = spawn.clone();
        none[thrower..thrower + 4].copy_from_slice(&0i32.to_be_bytes());
        let mut b = plugin("FML", &none);
        assert_eq!(zero.rewrite(Direction::Clientbound, 0x3f, &mut b), Ok(true));
        none[1..5].copy_from_slice(&0i32.to_be_bytes());
        assert_eq!(b, plugin("FML", &none));
        // OpenGui (1), other channels, and an empty message carry none.
        for body in [plugin("FML", &[1, 0, 0, 1, 0x2c]), plugin("FML|HS", &[3, 0, 0, 1, 0x2c]), plugin("FML", &[])] {
            assert_eq!(rewrite(Direction::Clientbound, 0x3f, &body), (Ok(false), body.clone()));
        }
        // A spawn cut inside its watcher list is an error, and nothing changes.
        let cut = plugin("FML", &spawn[..30]);
        assert!(rewrite(Direction::Clientbound, 0x3f, &cut).0.is_err());
    }

    #[test]
    fn var_int_ids_change_length() {
        // S0B Animation of the player: VarInt 300 (ac 02) becomes 7 (07); animation 0 (swing arm).
        let (r, b) = rewrite(Direction::Clientbound, 0x0b, &[0xac, 0x02, 0]);
        assert_eq!((r, b), (Ok(true), vec![0x07, 0]));
        // And back: an entity 7 of the new server grows to ac 02.
        let (_, b) = rewrite(Direction::Clientbound, 0x0b, &[0x07, 0]);
        assert_eq!(b, [0xac, 0x02, 0]);
        for id in [0x0c, 0x0f, 0x10, 0x11, 0x25, 0x2c] {
            assert_eq!(rewrite(Direction::Clientbound, id, &[0xac, 0x02, 0x55]).1, [0x07, 0x55], "0x{id:02x}");
        }
    }

    #[test]
    fn spawn_object_rewrites_the_owner_of_arrows_and_fishing_floats() {
        // S0E: entity 20, type, x y z, pitch yaw, data = 300 (the shooter), velocity 0 0 0.
        let body = |kind: u8| {
            let mut b = vec![20, kind];
            b.extend_from_slice(&[0; 12]);
            b.extend_from_slice(&[0, 0]);
            b.extend_from_slice(&300i32.to_be_bytes());
            b.extend_from_slice(&[0; 6]);
            b
        };
        for kind in [60u8, 90] {
            let (r, b) = rewrite(Direction::Clientbound, 0x0e, &body(kind));
            assert_eq!(r, Ok(true));
            assert_eq!(&b[16..20], &7i32.to_be_bytes(), "type {kind}");
            assert_eq!(b.len(), body(kind).len());
        }
        // A minecart's data (its kind) is not an entity id.
        assert_eq!(rewrite(Direction::Clientbound, 0x0e, &body(10)), (Ok(false), body(10)));
        // The object's own id shrinks from ac 02 to 07 with the owner rewritten too.
        let mut own = body(60);
        own.splice(..1, [0xac, 0x02]);
        let (r, b) = rewrite(Direction::Clientbound, 0x0e, &own);
        assert_eq!(r, Ok(true));
        assert_eq!(b[0], 0x07);
        assert_eq!(&b[16..20], &7i32.to_be_bytes());
    }

    #[test]
    fn an_owner_swapped_across_zero_adds_or_drops_the_velocity() {
        // The client knows itself as entity 0 (the first entity of its first server); the new server calls it 5.
        let swap = EntityIdSwap::new(0, 5);
        // An arrow shot by the player (data 5, so velocity 1, 2, 3 follows).
        let mut shot = vec![20, 60];
        shot.extend_from_slice(&[0; 14]);
        shot.extend_from_slice(&5i32.to_be_bytes());
        shot.extend_from_slice(&[0, 1, 0, 2, 0, 3]);
        let mut b = shot.clone();
        assert_eq!(swap.rewrite(Direction::Clientbound, 0x0e, &mut b), Ok(true));
        // data 0: no velocity follows.
        assert_eq!(&b[16..], &[0, 0, 0, 0]);
        // And back: data 5 with a zero velocity.
        assert_eq!(swap.rewrite(Direction::Clientbound, 0x0e, &mut b), Ok(true));
        assert_eq!(&b[16..], &[0, 0, 0, 5, 0, 0, 0, 0, 0, 0]);
        // A positive owner without its velocity is cut off: an error, nothing changed.
        let mut cut = shot[..20].to_vec();
        assert_eq!(swap.rewrite(Direction::Clientbound, 0x0e, &mut cut), Err(DecodeError::UnexpectedEnd("velocity")));
        assert_eq!(cut, &shot[..20]);
    }

    #[test]
    fn destroy_entities_and_the_horse_window() {
        // S13: 3 entities: 9, 300, 7.
        let mut body = vec![3];
        for v in [9i32, 300, 7] {
            body.extend_from_slice(&v.to_be_bytes());
        }
        let (r, b) = rewrite(Direction::Clientbound, 0x13, &body);
        assert_eq!(r, Ok(true));
        assert_eq!(b, [3, 0, 0, 0, 9, 0, 0, 0, 7, 0, 0, 1, 0x2c]);
        // A count over what follows, or negative, is an error and changes nothing.
        assert_eq!(
            rewrite(Direction::Clientbound, 0x13, &[2, 0, 0, 0, 9]).0,
            Err(DecodeError::UnexpectedEnd("entity id"))
        );
        assert!(rewrite(Direction::Clientbound, 0x13, &[0xff]).0.is_err());
        // S2D: window 1, horse (11), title "Horse", 2 slots, use title, entity 300.
        let mut horse = vec![1, 11, 5, b'H', b'o', b'r', b's', b'e', 2, 1];
        horse.extend_from_slice(&300i32.to_be_bytes());
        let (r, b) = rewrite(Direction::Clientbound, 0x2d, &horse);
        assert_eq!(r, Ok(true));
        assert_eq!(&b[10..], &[0, 0, 0, 7]);
        // A chest (0) has no entity id.
        assert_eq!(rewrite(Direction::Clientbound, 0x2d, &[1, 0, 1, b'C', 27, 0]).0, Ok(false));
    }

    #[test]
    fn packets_without_entity_ids_and_bad_bodies() {
        // S01 Join Game, S3F plugin messages and serverbound C04 position are not touched.
        assert!(!carries_entity_ids(Direction::Clientbound, 0x01));
        assert!(carries_entity_ids(Direction::Clientbound, 0x3f));
        assert!(!carries_entity_ids(Direction::Clientbound, 0x3e));
        assert!(!carries_entity_ids(Direction::Serverbound, 0x04));
        assert!(!carries_entity_ids(Direction::Serverbound, 0x12));
        assert!(carries_entity_ids(Direction::Clientbound, 0x12));
        assert_eq!(rewrite(Direction::Clientbound, 0x3f, &[0, 0, 1, 0x2c]), (Ok(false), vec![0, 0, 1, 0x2c]));
        // Cut-off bodies are errors, never panics, and stay as they were.
        for (id, body) in [(0x12, &[0u8, 0, 1][..]), (0x0d, &[0, 0, 1, 0x2c, 0]), (0x0b, &[0xac]), (0x0e, &[20, 60, 0])]
        {
            let (r, b) = rewrite(Direction::Clientbound, id, body);
            assert!(r.is_err(), "0x{id:02x}");
            assert_eq!(b, body);
        }
        // Any bytes at all: no panic (a deterministic sweep of short bodies through every layout).
        let mut x = 0x9e37_79b9_u32;
        for _ in 0..20_000 {
            x ^= x << 13;
            x ^= x >> 17;
            x ^= x << 5;
            let len = (x % 24) as usize;
            let body: Vec<u8> = (0..len).map(|i| (x >> (i % 4 * 8)) as u8 ^ i as u8).collect();
            for id in [0x0b, 0x0d, 0x0e, 0x12, 0x13, 0x2d] {
                let _ = rewrite(Direction::Clientbound, id, &body);
            }
        }
        // The identity swap changes nothing.
        let mut b = vec![0, 0, 1, 0x2c];
        assert_eq!(EntityIdSwap::new(300, 300).rewrite(Direction::Clientbound, 0x12, &mut b), Ok(false));
    }
}
