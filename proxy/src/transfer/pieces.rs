//! Frames that pass the switchboard in pieces: a frame nobody looks into goes on as it arrives, however large
//! (`limits.max_play_frame_bytes`, docs/modpacks.md), instead of being queued whole. The start of such a frame
//! may sit in a queue when a read ended inside its head; once the head is there, what is queued goes on and the
//! rest of the body follows straight through (clientbound: `Outbox::player_owed`; serverbound:
//! `PlayerEnd::tail`). A player's `BungeeCord` message is dropped the same way, piece by piece. A frame the
//! switchboard must look into from a player is held only up to vanilla's 2 MiB; from a backend up to the limit.

use moonbridge_protocol::frame::{frame_head, MAX_FRAME_LEN};
use moonbridge_protocol::packets::PluginMessage;
use moonbridge_protocol::transfer::watch::HEAD_LEN;
use moonbridge_protocol::transfer::{starts_with_channel, Direction, BUNGEE_CHANNEL};

use super::board::Switchboard;
use super::common::{inspected, End};

impl Switchboard {
    /// The player's queued bytes are the start of one frame (every whole one was handled): when its head
    /// says it passes, what is queued goes to the backend and the rest follows as it arrives; a `BungeeCord`
    /// message is dropped the same way; another frame the switchboard looks into must fit 2 MiB.
    pub(super) fn up_in_pieces(&mut self) -> Result<(), End> {
        if self.player.tail.0 > 0 {
            return Ok(());
        }
        let limit = self.ctx.live.tunables.limits.max_play_frame_bytes;
        let swapped = self.swap.is_some_and(|s| !s.is_identity());
        let forge = self.forge.replaying || self.forge_handshake_running();
        let queued = self.player.up_buffered();
        let Some(h) = frame_head(queued, limit, HEAD_LEN).ok().flatten() else { return Ok(()) };
        let owed = h.total().saturating_sub(queued.len());
        if owed == 0 {
            return Ok(());
        }
        let bungee = h.id == PluginMessage::SERVERBOUND_ID && starts_with_channel(h.fields, BUNGEE_CHANNEL);
        let looked_into = inspected(Direction::Serverbound, h.id, h.fields, true, swapped, forge);
        if looked_into && !bungee {
            if h.len > MAX_FRAME_LEN {
                return Err(End::Closed(format!(
                    "player sent a frame of {} bytes (id 0x{:02x}) that the proxy must read, over {MAX_FRAME_LEN}",
                    h.len, h.id
                )));
            }
            return Ok(());
        }
        let start = self.player.up.take_buffered();
        if !bungee && self.current.is_some() {
            self.out.to_backend.extend_from_slice(&start);
        }
        self.player.tail = (owed, bungee);
        Ok(())
    }

    /// The current backend's queued bytes are the start of one frame (every whole one was handled): when its
    /// head says it passes, what is queued goes to the player and the rest follows as it arrives (a switch under
    /// way reads its new backend only once that frame is whole).
    pub(super) fn down_in_pieces(&mut self) {
        if self.out.player_owed > 0 {
            return;
        }
        let limit = self.ctx.live.tunables.limits.max_play_frame_bytes;
        let (joined, swapped) = (self.client_entity.is_some(), self.swap.is_some_and(|s| !s.is_identity()));
        let Some(link) = &mut self.current else { return };
        let queued = link.frames.buffered();
        let Some(h) = frame_head(queued, limit, HEAD_LEN).ok().flatten() else { return };
        let owed = h.total().saturating_sub(queued.len());
        if owed == 0 || inspected(Direction::Clientbound, h.id, h.fields, joined, swapped, false) {
            return;
        }
        let start = link.frames.take_buffered();
        self.out.player().extend_from_slice(&start);
        self.out.player_owed = owed;
    }
}
