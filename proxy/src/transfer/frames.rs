//! What the switchboard does to each frame it looks into: the serverbound ones (Keep Alive answers, the
//! `BungeeCord` channel, the Forge handshake while it is routed or replayed, entity ids) and the clientbound
//! ones (Join Game, Play Disconnect, Keep Alive, the leftovers, the Plugin Messages it acts on), the rest pass
//! as they came (`common::inspected`).

use bytes::BytesMut;
use moonbridge_protocol::codec::Reader;
use moonbridge_protocol::packets::{JoinGame, KeepAlive, Packet, PlayDisconnect, PluginMessage};
use moonbridge_protocol::transfer::{fml, is_channel, BungeeRequest, Direction, Leftovers, BUNGEE_CHANNEL};
use moonbridge_protocol::FrameError;
use tokio::time::Instant;
use tracing::info;

use super::board::Switchboard;
use super::common::{chat_plain, encode, inspected, put_frame, End};
use super::switch::{Switch, SwitchStep, Trigger, FALLBACK_WINDOW, MAX_FALLBACKS};
use crate::labels::StreamDirection;

impl Switchboard {
    /// Handles the serverbound frames queued from the relay.
    pub(super) fn serverbound(&mut self) -> Result<(), End> {
        loop {
            let swapped = self.swap.is_some_and(|s| !s.is_identity());
            let forge = self.forge.replaying || self.forge_handshake_running();
            let passing =
                self.player.up.take_passing(|id, f| !inspected(Direction::Serverbound, id, f, true, swapped, forge));
            match passing {
                Ok(run) if self.current.is_some() => self.out.to_backend.extend_from_slice(&run),
                Ok(_) => {}
                Err(e) => return Err(self.unfollowed(StreamDirection::ToBackend, e)),
            }
            let frame = match self.player.up.try_next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return self.up_in_pieces(),
                Err(e) => return Err(self.unfollowed(StreamDirection::ToBackend, e)),
            };
            match frame.id {
                KeepAlive::ID => {
                    let Ok(k) = frame.decode::<KeepAlive>() else { continue };
                    if !self.keep_alive.answer_goes_on(k.id, self.swap.is_some()) {
                        continue;
                    }
                }
                Leftovers::SERVERBOUND_ID => self.leftovers.observe(Direction::Serverbound, frame.id, &frame.body),
                PluginMessage::SERVERBOUND_ID if self.forge.replaying && is_channel(&frame.body, fml::CHANNEL) => {
                    // The client's answers to the replayed handshake: the current backend finished its own long
                    // ago.
                    self.forge.swallow_answer(&frame.body);
                    continue;
                }
                PluginMessage::SERVERBOUND_ID if self.forge_handshake_running() && fml::is_handshake(&frame.body) => {
                    encode(&mut self.out.to_target, frame.id, &frame.body);
                    continue;
                }
                // The proxy's channel to server plugins: a player may not speak on it (as BungeeCord drops it).
                PluginMessage::SERVERBOUND_ID if is_channel(&frame.body, BUNGEE_CHANNEL) => continue,
                _ => {}
            }
            if self.current.is_some() {
                let swap = self.swap;
                put_frame(&mut self.out.to_backend, swap, Direction::Serverbound, frame, &mut Vec::new());
            }
        }
    }

    /// A stream the switchboard cannot follow (`e`): counted (`moonbridge_unfollowed_streams_total`), and the
    /// session ends with why (nothing after the bad frame reaches either side).
    fn unfollowed(&self, direction: StreamDirection, e: FrameError) -> End {
        self.ctx.metrics.unfollowed().lost(direction, e, crate::unfollowed::Afterwards::Closed);
        match (direction, &self.current) {
            (StreamDirection::ToPlayer, Some(link)) => {
                End::Closed(format!("backend {} sent a bad frame: {e}", link.backend.name))
            }
            _ => End::Closed(format!("player sent a bad frame: {e}")),
        }
    }

    /// True while a switch's Forge handshake runs (the client's `FML|HS` answers go to the new backend).
    pub(super) fn forge_handshake_running(&self) -> bool {
        matches!(&self.switch, Some(Switch { step: SwitchStep::Joining(_), reset_sent: true, .. }))
    }

    /// Handles the clientbound frames queued from the current backend.
    pub(super) fn clientbound(&mut self) -> Result<(), End> {
        let mut body = Vec::new();
        loop {
            if self.answers.over(&self.out) {
                // Backpressure: the rest waits, read no further, until the backend took what it was sent.
                self.answers.paused = true;
                return Ok(());
            }
            let joined = self.client_entity.is_some();
            let swapped = self.swap.is_some_and(|s| !s.is_identity());
            let Some(link) = &mut self.current else { return Ok(()) };
            // Frames nobody looks into go as a run, as they came.
            let passing =
                link.frames.take_passing(|id, f| !inspected(Direction::Clientbound, id, f, joined, swapped, false));
            match passing {
                Ok(run) => self.out.player().extend_from_slice(&run),
                Err(e) => return Err(self.unfollowed(StreamDirection::ToPlayer, e)),
            }
            let frame = match link.frames.try_next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => {
                    self.down_in_pieces();
                    return Ok(());
                }
                Err(e) => return Err(self.unfollowed(StreamDirection::ToPlayer, e)),
            };
            match frame.id {
                JoinGame::ID if self.client_entity.is_none() => {
                    if let Ok(join) = frame.decode::<JoinGame>() {
                        self.client_entity = Some(join.entity_id);
                    }
                }
                PluginMessage::CLIENTBOUND_ID if self.client_entity.is_none() && fml::is_handshake(&frame.body) => {
                    // The first backend's Forge handshake, kept for a replay.
                    fml::record(&mut self.forge.record, frame.id, &frame.body);
                }
                PluginMessage::CLIENTBOUND_ID if is_channel(&frame.body, BUNGEE_CHANNEL) => {
                    // Meant for the proxy, never for the client.
                    let mut r = Reader::new(&frame.body);
                    let request =
                        PluginMessage::decode_fields(&mut r).ok().and_then(|m| BungeeRequest::parse(&m.data).ok());
                    match request {
                        Some(BungeeRequest::Connect { server }) => {
                            self.request(&server, Trigger::Connect { operator: false })
                        }
                        Some(request) => self.answer(request),
                        None => {}
                    }
                    continue;
                }
                // (After a drain's hand-over the player may be on another instance: no fallback from here.)
                PlayDisconnect::ID if self.switch.is_none() && !self.handed_away => {
                    let from = link.backend.name.clone();
                    let now = Instant::now();
                    self.fallbacks.retain(|t| now.duration_since(*t) < FALLBACK_WINDOW);
                    let fallback = self.ctx.live.tunables.transfer.fallback.get(&from).cloned();
                    if let Some(to) = fallback.filter(|_| self.fallbacks.len() < MAX_FALLBACKS) {
                        self.fallbacks.push(now);
                        let reason =
                            frame.decode::<PlayDisconnect>().map(|d| chat_plain(&d.reason_json)).unwrap_or_default();
                        let mut disconnect = BytesMut::new();
                        encode(&mut disconnect, frame.id, &frame.body);
                        info!(player = %self.ctx.identity.name, from = %from, to = %to, "backend disconnected the player ({reason}): sending them to the fallback");
                        // The old backend is done with the player; nothing more is read from it.
                        self.current = None;
                        self.request(&to, Trigger::Fallback { from, disconnect, reason });
                        return Ok(());
                    }
                }
                PlayDisconnect::ID if self.switch.is_some() => {
                    // The old backend let the player go while a switch is under way: the switch decides.
                    self.current = None;
                    return Ok(());
                }
                PlayDisconnect::ID => {
                    // It reaches the player: the connection's end that follows is expected.
                    self.goodbye = true;
                }
                id if Leftovers::CLIENTBOUND_IDS.contains(&id) => {
                    self.leftovers.observe(Direction::Clientbound, id, &frame.body);
                }
                KeepAlive::ID if self.swap.is_some() => {
                    if let Ok(k) = frame.decode::<KeepAlive>() {
                        self.keep_alive.sent_by_backend(k.id).map_err(End::Closed)?;
                    }
                }
                _ => {}
            }
            put_frame(self.out.player(), self.swap, Direction::Clientbound, frame, &mut body);
        }
    }
}
