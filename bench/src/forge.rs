//! Honest bytes for `--profile forge`: the modded profile's traffic shape (same templates, packet kinds, counts
//! and timing) with payloads built the way 1.7.10 Forge and its mods build them, so that what compression does
//! to them means something. Generated once per template with a fixed seed; each packet still carries the tick
//! sequence outside its body (see `workload::encode_tick_answer`).
//!
//! - **S35 Update Tile Entity** (protocol 5: x int, y short, z int, action byte, NBT as a short length and the
//!   compound gzip-compressed, as 1.7.10's `PacketBuffer.writeNBTTagCompoundToBuffer` does with
//!   `CompressedStreamTools.compress`): a machine's compound (`id`, `x`, `y`, `z`, an `Items` list of slot,
//!   id, count and damage, energy, facing, owner), gzip at Java's default level (6).
//! - **S3F plugin messages on mod channels**: what `SimpleNetworkWrapper` messages carry: a discriminator byte,
//!   block coordinates, small integers as VarInts, registry names and fluid names as strings, counts, floats.
//! - **S21 Chunk Data**: 16×16×16 sections of block ids, metadata, block light and sky light (stone with ores
//!   below, dirt and grass, air above) and the biome array, zlib-deflated at the default level as 1.7.10's
//!   `S21PacketChunkData` does: already compressed, so zstd must not make it larger.
//! - **Login burst**: the FML handshake's server side on `FML|HS`: ServerHello (discriminator 0), ModList
//!   (discriminator 2: mod ids and versions) and ModIdData (discriminator 3: every block and item registry
//!   name with its id, as `string` + VarInt, then the blocked ids), about 2.1 MB for a large pack. A payload over
//!   the S3F limit is split into `FML|MP` parts of at most 32,000 bytes (the first part carries the part count
//!   and total length), as `FMLProxyPacket` splits large payloads.

use std::io::Write;

use moonbridge_protocol::codec::put_string;

/// splitmix64 with its own seed (deterministic content, not for security).
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        Self(seed)
    }

    pub fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        z ^ (z >> 31)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n.max(1) as u64) as usize
    }

    fn pick<'a>(&mut self, from: &[&'a str]) -> &'a str {
        from.get(self.below(from.len())).copied().unwrap_or("")
    }
}

const MODS: [&str; 24] = [
    "minecraft",
    "IC2",
    "BuildCraft|Core",
    "ThermalExpansion",
    "ThermalFoundation",
    "appliedenergistics2",
    "TConstruct",
    "Railcraft",
    "Forestry",
    "BiomesOPlenty",
    "EnderIO",
    "Mekanism",
    "gregtech",
    "Thaumcraft",
    "Botania",
    "ExtraUtilities",
    "OpenComputers",
    "ComputerCraft",
    "BigReactors",
    "ImmersiveEngineering",
    "Natura",
    "MineFactoryReloaded",
    "chisel",
    "CarpentersBlocks",
];
const NOUNS: [&str; 32] = [
    "machine",
    "cable",
    "pipe",
    "ingot",
    "dust",
    "plate",
    "gear",
    "ore",
    "block",
    "log",
    "planks",
    "sapling",
    "conduit",
    "tank",
    "cell",
    "circuit",
    "wrench",
    "hammer",
    "drill",
    "furnace",
    "generator",
    "battery",
    "frame",
    "glass",
    "slab",
    "stairs",
    "wall",
    "fence",
    "door",
    "chest",
    "crystal",
    "seed",
];
const MATERIALS: [&str; 20] = [
    "Copper",
    "Tin",
    "Bronze",
    "Iron",
    "Gold",
    "Steel",
    "Lead",
    "Silver",
    "Nickel",
    "Invar",
    "Electrum",
    "Signalum",
    "Lumium",
    "Enderium",
    "Platinum",
    "Aluminium",
    "Titanium",
    "Tungsten",
    "Osmium",
    "Certus",
];
const FLUIDS: [&str; 10] =
    ["water", "lava", "steam", "oil", "fuel", "ic2coolant", "ic2hotcoolant", "redstone", "glowstone", "ender"];
const OWNERS: [&str; 6] = ["Steve", "Alex", "Notch", "jeb_", "Dinnerbone", "Herobrine"];

/// A registry name such as `ThermalFoundation:ingotCopper`.
fn registry_name(rng: &mut Rng) -> String {
    format!("{}:{}{}", rng.pick(&MODS), rng.pick(&NOUNS), rng.pick(&MATERIALS))
}

fn put_varint(out: &mut Vec<u8>, mut v: u32) {
    loop {
        let b = (v & 0x7f) as u8;
        v >>= 7;
        if v == 0 {
            out.push(b);
            return;
        }
        out.push(b | 0x80);
    }
}

/// NBT (the Minecraft binary tag format): a named tag's header.
fn nbt_name(out: &mut Vec<u8>, tag: u8, name: &str) {
    out.push(tag);
    out.extend_from_slice(&(name.len() as u16).to_be_bytes());
    out.extend_from_slice(name.as_bytes());
}

fn nbt_string(out: &mut Vec<u8>, name: &str, value: &str) {
    nbt_name(out, 8, name);
    out.extend_from_slice(&(value.len() as u16).to_be_bytes());
    out.extend_from_slice(value.as_bytes());
}

fn nbt_int(out: &mut Vec<u8>, name: &str, v: i32) {
    nbt_name(out, 3, name);
    out.extend_from_slice(&v.to_be_bytes());
}

fn nbt_short(out: &mut Vec<u8>, name: &str, v: i16) {
    nbt_name(out, 2, name);
    out.extend_from_slice(&v.to_be_bytes());
}

fn nbt_byte(out: &mut Vec<u8>, name: &str, v: i8) {
    nbt_name(out, 1, name);
    out.push(v as u8);
}

fn gzip(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::GzEncoder::new(Vec::new(), flate2::Compression::new(6));
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

fn zlib(data: &[u8]) -> Vec<u8> {
    let mut e = flate2::write::ZlibEncoder::new(Vec::new(), flate2::Compression::new(6));
    let _ = e.write_all(data);
    e.finish().unwrap_or_default()
}

/// The gzip-compressed NBT of a machine's tile entity at (x, y, z), with item slots until the uncompressed
/// compound is about `len` bytes.
pub fn tile_entity_nbt(rng: &mut Rng, len: usize, x: i32, y: i32, z: i32) -> Vec<u8> {
    let mut n = Vec::with_capacity(len + 64);
    nbt_name(&mut n, 10, "");
    let id = format!("{}:{}", rng.pick(&MODS), rng.pick(&NOUNS));
    nbt_string(&mut n, "id", &id);
    nbt_int(&mut n, "x", x);
    nbt_int(&mut n, "y", y);
    nbt_int(&mut n, "z", z);
    nbt_int(&mut n, "energy", rng.below(1_000_000) as i32);
    nbt_short(&mut n, "facing", rng.below(6) as i16);
    nbt_byte(&mut n, "active", (rng.below(2)) as i8);
    nbt_string(&mut n, "owner", rng.pick(&OWNERS));
    // Items: a list of compounds {Slot, id, Count, Damage}, 25 bytes each.
    let slots = len.saturating_sub(n.len() + 16) / 25;
    nbt_name(&mut n, 9, "Items");
    n.push(10);
    n.extend_from_slice(&(slots as i32).to_be_bytes());
    for slot in 0..slots {
        nbt_byte(&mut n, "Slot", slot as i8);
        nbt_short(&mut n, "id", (256 + rng.below(4000)) as i16);
        nbt_byte(&mut n, "Count", (1 + rng.below(64)) as i8);
        nbt_short(&mut n, "Damage", if rng.below(3) == 0 { rng.below(16) as i16 } else { 0 });
        n.push(0);
    }
    n.push(0);
    gzip(&n)
}

/// A mod channel message of about `len` bytes: a discriminator and records of what mods sync.
pub fn mod_message(rng: &mut Rng, len: usize) -> Vec<u8> {
    let mut m = vec![rng.below(8) as u8];
    while m.len() < len {
        match rng.below(4) {
            0 => {
                // A tank: coordinates, fluid id and name, amount, capacity.
                for v in [rng.below(4096) as i32 - 2048, 5 + rng.below(60) as i32, rng.below(4096) as i32 - 2048] {
                    m.extend_from_slice(&v.to_be_bytes());
                }
                put_varint(&mut m, rng.below(40) as u32);
                let _ = put_string(&mut m, rng.pick(&FLUIDS), 64, "fluid");
                m.extend_from_slice(&((rng.below(16) * 1000) as i32).to_be_bytes());
                m.extend_from_slice(&16_000i32.to_be_bytes());
            }
            1 => {
                // A machine's progress and energy.
                m.extend_from_slice(&(rng.below(200) as i16).to_be_bytes());
                m.extend_from_slice(&200i16.to_be_bytes());
                put_varint(&mut m, rng.below(100_000) as u32);
                m.extend_from_slice(&(rng.below(100) as f32 / 10.0).to_be_bytes());
            }
            2 => {
                // An item stack by registry name.
                let _ = put_string(&mut m, &registry_name(rng), 128, "item");
                m.push((1 + rng.below(64)) as u8);
                m.extend_from_slice(&(rng.below(16) as i16).to_be_bytes());
                m.push(0); // no NBT
            }
            _ => {
                // Small integers (an entity's state).
                put_varint(&mut m, rng.below(100_000) as u32);
                for _ in 0..4 {
                    put_varint(&mut m, rng.below(300) as u32);
                }
            }
        }
    }
    m.truncate(len);
    m
}

/// The deflated data of a chunk column with `sections` 16×16×16 sections from the bottom (protocol 5 S21
/// layout: every section's block ids, then metadata, block light, sky light nibbles, then 256 biome bytes).
pub fn chunk_data(rng: &mut Rng, sections: usize) -> Vec<u8> {
    let surface = sections * 16 - 8 + rng.below(6);
    let mut ids = Vec::with_capacity(sections * 4096);
    let mut meta = Vec::with_capacity(sections * 2048);
    let mut sky = Vec::with_capacity(sections * 2048);
    for s in 0..sections {
        for i in 0..4096 {
            let y = s * 16 + i / 256;
            let id = if y + 4 < surface {
                match rng.below(100) {
                    0 => 14 + rng.below(3) as u8, // gold, iron, coal ore
                    1 => 56,                      // diamond ore
                    2..=4 => 13,                  // gravel
                    5..=7 => 3,                   // dirt
                    _ => 1,                       // stone
                }
            } else if y < surface {
                3
            } else if y == surface {
                2
            } else {
                0
            };
            ids.push(id);
        }
        for i in 0..2048 {
            let y = s * 16 + (i * 2) / 256;
            meta.push(if y + 4 < surface && rng.below(20) == 0 { 0x10 } else { 0 });
            sky.push(if y > surface { 0xff } else { 0 });
        }
    }
    let mut raw = ids;
    raw.extend_from_slice(&meta);
    raw.extend(std::iter::repeat_n(0u8, sections * 2048)); // block light
    raw.extend_from_slice(&sky);
    raw.extend((0..256).map(|_| [1u8, 1, 4, 18][rng.below(4)])); // plains, forest, forest hills
    zlib(&raw)
}

/// The FML handshake's server side as S3F bodies (channel, data): `FML|HS` ServerHello and ModList, then the
/// ModIdData registry of `entries` names, split into `FML|MP` parts over 32,000 bytes.
pub fn registry_burst(entries: usize) -> Vec<(&'static str, Vec<u8>)> {
    let mut rng = Rng::new(0x666d_6c68_735f_6d69);
    let mut out = Vec::new();
    out.push(("FML|HS", vec![0u8, 2, 0, 0, 0, 0])); // ServerHello: protocol 2, dimension 0
    let mut list = vec![2u8];
    put_varint(&mut list, MODS.len() as u32);
    for m in MODS {
        let _ = put_string(&mut list, m, 64, "modid");
        let _ =
            put_string(&mut list, &format!("1.7.10-{}.{}.{}", rng.below(5), rng.below(20), rng.below(300)), 64, "v");
    }
    out.push(("FML|HS", list));
    let mut ids = vec![3u8];
    put_varint(&mut ids, entries as u32);
    let mut seen = std::collections::HashSet::new();
    let mut id = 1u32;
    while seen.len() < entries {
        // Blocks are prefixed with \u{1}, items with \u{2}, as FML's GameData names them.
        let name =
            format!("{}{}_{}", if id < 4096 { '\u{1}' } else { '\u{2}' }, registry_name(&mut rng), seen.len() % 97);
        if seen.insert(name.clone()) {
            let _ = put_string(&mut ids, &name, 256, "name");
            put_varint(&mut ids, id);
            id += 1;
        }
    }
    put_varint(&mut ids, 0); // no blocked ids
    const PART: usize = 32_000;
    let parts = ids.len().div_ceil(PART);
    let mut first = vec![0xfe_u8, parts as u8];
    first.extend_from_slice(&(ids.len() as i32).to_be_bytes());
    out.push(("FML|MP", first));
    for chunk in ids.chunks(PART) {
        out.push(("FML|MP", chunk.to_vec()));
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn deflated_parts_are_what_1_7_10_sends() {
        let mut rng = Rng::new(1);
        let te = tile_entity_nbt(&mut rng, 400, 1, 64, 2);
        assert_eq!(&te[..2], &[0x1f, 0x8b], "gzip");
        let chunk = chunk_data(&mut rng, 5);
        assert_eq!(chunk[0], 0x78, "zlib");
        assert!((1_000..40_000).contains(&chunk.len()), "{}", chunk.len());
        let burst = registry_burst(70_000);
        let total: usize = burst.iter().map(|(_, d)| d.len()).sum();
        assert!((1_800_000..2_600_000).contains(&total), "{total}");
        assert!(burst.iter().all(|(_, d)| d.len() <= 32_000));
    }
}
