//! Sans-IO pieces of a server transfer: what a proxy needs to move a connected 1.7.10 player from one backend
//! to another without a reconnect (1.7.10 has no transfer packet, so the client must believe it is still on
//! one server).
//!
//! One file per piece:
//!
//! - [`EntityIdSwap`] (`entity_ids.rs`): the player's own entity id differs between the server the client first joined and the
//!   one it plays on after a switch; every Play packet that carries entity ids is rewritten, both ways.
//! - [`BungeeRequest`] and [`BungeeAnswer`] (`bungeecord.rs`): the `BungeeCord` plugin channel through which server plugins
//!   ask a proxy to move a player (`Connect`) and ask about the network (`PlayerCount`, `UUID`, …).
//! - [`fml`] (`fml.rs`): the Forge 1.7.10 handshake channel `FML|HS`, and the HandshakeReset that makes the client run
//!   the handshake again with the new server.
//! - [`world_reset`] (here, with [`Direction`]): the two Respawn packets that clear the client's world before the new server's.
//! - [`Leftovers`] (`leftovers.rs`): the old server's scoreboard objectives, teams, tab-list entries and open window, removed
//!   so the new server starts clean.
//! - [`watch`] (`watch.rs`): what a relay looks at before any switch (a frame head each), so only a player's first switch
//!   brings in the layer that parses every packet.
//!
//! Wire facts: the protocol 5 packet tables (wiki.vg "Protocol" for 1.7.6–1.7.10, and minecraft-data's
//! `pc/1.7/protocol.json`, which the node-minecraft-protocol peers in `tests/peers` use), the 1.7.10 client's
//! `NetHandlerPlayClient` (which packets it resolves to an entity with `getEntityByID`), and Forge 1.7.10's
//! `FMLHandshakeCodec`.

mod bungeecord;
mod entity_ids;
pub mod fml;
mod leftovers;
pub mod watch;

pub use bungeecord::{
    bungee_registration, is_channel, starts_with_channel, BungeeAnswer, BungeeRequest, BUNGEE_CHANNEL, CHANNEL_HEAD,
};
pub use entity_ids::{carries_entity_ids, EntityIdSwap};
pub use leftovers::{Leftovers, MAX_LEFTOVERS};

use crate::packets::{JoinGame, Respawn};

/// Which way a Play packet travels.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Direction {
    /// Server to client (S packets).
    Clientbound,
    /// Client to server (C packets).
    Serverbound,
}

/// The two Respawn packets that clear the client's world before the new server's Join Game takes over: the
/// 1.7.10 client only drops its world (chunks, entities, the old server's leftovers) when a Respawn names
/// another dimension (the new server's Join Game dimension, its trailing `i32` in GT New Horizons), so the first goes to a different vanilla dimension (the nether, or the overworld when
/// the target is the nether) and the second to the new server's.
pub fn world_reset(join: &JoinGame) -> [Respawn; 2] {
    let target = join.dimension;
    let detour = if target == -1 { 0 } else { -1 };
    let respawn = |dimension| Respawn {
        dimension,
        difficulty: join.difficulty,
        game_mode: join.game_mode & 0x07,
        level_type: join.level_type.clone(),
    };
    [respawn(detour), respawn(target)]
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fml_reset_and_world_reset() {
        let reset = fml::handshake_reset();
        let mut fields = Vec::new();
        reset.encode_fields(&mut fields).unwrap();
        // "FML|HS" (6), length 1, 0xFE.
        assert_eq!(fields, [6, b'F', b'M', b'L', b'|', b'H', b'S', 0, 1, 0xfe]);
        assert_eq!(fml::discriminator(&reset.data), Some(fml::HANDSHAKE_RESET));
        assert_eq!(fml::discriminator(&[]), None);

        let join = JoinGame {
            entity_id: 300,
            game_mode: 0x08 | 1,
            dimension: 0,
            difficulty: 2,
            max_players: 50,
            level_type: "default".into(),
            trailing_dimension: false,
        };
        let [first, second] = world_reset(&join);
        assert_eq!((first.dimension, second.dimension), (-1, 0));
        assert_eq!((second.game_mode, second.difficulty, second.level_type.as_str()), (1, 2, "default"));
        // To the nether: the detour is the overworld; a mod's dimension 7 detours through the nether.
        assert_eq!(world_reset(&JoinGame { dimension: -1, ..join.clone() }).map(|r| r.dimension), [0, -1]);
        assert_eq!(world_reset(&JoinGame { dimension: 7, ..join.clone() }).map(|r| r.dimension), [-1, 7]);
        // GT New Horizons' dimension 1000 (Join Game's trailing int): the Respawn carries 1000, not its byte.
        let gtnh = JoinGame { dimension: 1000, trailing_dimension: true, ..join };
        assert_eq!(world_reset(&gtnh).map(|r| r.dimension), [-1, 1000]);
    }
}
