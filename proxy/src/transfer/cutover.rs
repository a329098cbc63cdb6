//! A switch's course: the request (or why not), the new backend's frames up to its Join Game, the cutover,
//! or the failure and what the player is told.

use bytes::BytesMut;
use moonbridge_protocol::frame::FrameDecoder;
use moonbridge_protocol::packets::{JoinGame, KeepAlive, Packet, PlayDisconnect, PluginMessage};
use moonbridge_protocol::transfer::{fml, is_channel, world_reset, Direction, EntityIdSwap, Leftovers, BUNGEE_CHANNEL};
use tokio::time::Instant;
use tracing::info;

use crate::labels::TransferOutcome;

use super::backend::dial;
use super::board::Switchboard;
use super::common::{chat_plain, encode, put_frame, End};
use super::forge::{handshake_reset_fields, ServerStep};
use super::keep_alive::OWN_KEEP_ALIVE_INTERVAL;
use super::switch::{Switch, SwitchStep, Trigger, CONNECT_WINDOW, MAX_CONNECTS, MAX_HELD_BYTES, MAX_SHOWN_NAME};
use crate::limits::LogLimiter;

/// The "transfer refused" lines of all sessions: 10 per 10 seconds, each with the count suppressed before it.
static REFUSED_LOG: std::sync::LazyLock<LogLimiter> =
    std::sync::LazyLock::new(|| LogLimiter::new(10, std::time::Duration::from_secs(10)));

impl Switchboard {
    /// Starts a switch to backend `name`, or tells the player why not.
    pub(super) fn request(&mut self, name: &str, trigger: Trigger) {
        let name = if name.chars().count() > MAX_SHOWN_NAME { "(a name too long)" } else { name };
        let transfer = &self.ctx.live.tunables.transfer;
        let operator = matches!(trigger, Trigger::Connect { operator: true });
        let allowed = trigger.is_fallback() || operator || transfer.targets.iter().any(|t| t == name);
        let now = Instant::now();
        self.connects.retain(|t| now.duration_since(*t) < CONNECT_WINDOW);
        let too_often = matches!(trigger, Trigger::Connect { operator: false }) && self.connects.len() >= MAX_CONNECTS;
        let refusal = if self.handed_away {
            Some("You are moving to another proxy instance".to_string())
        } else if self.switch.is_some() || self.forge.replaying {
            Some("You are already being moved to another server".to_string())
        } else if self.current.as_ref().is_some_and(|l| l.backend.name == name) {
            Some("You are already connected to this server".to_string())
        } else if !allowed || self.ctx.live.backend_named(name).is_none() {
            Some(format!("Server {name} is not available"))
        } else if self.client_entity.is_none() {
            Some("You cannot be moved before you have joined".to_string())
        } else if too_often {
            Some("You are switching servers too often".to_string())
        } else {
            None
        };
        let target = self.ctx.live.backend_named(name).cloned();
        let (Some(target), None) = (target, refusal.as_ref()) else {
            let refusal = refusal.unwrap_or_default();
            // A backend can ask for thousands in one write: through the limiter (each one is counted).
            if let Some(suppressed) = REFUSED_LOG.allow() {
                info!(player = %self.ctx.identity.name, to = %name, suppressed, "transfer refused: {refusal}");
            }
            self.ctx.metrics.transfer(TransferOutcome::Refused);
            self.out.chat(&refusal);
            match trigger {
                Trigger::Fallback { disconnect, .. } => self.out.player().extend_from_slice(&disconnect),
                Trigger::Lost { from, why } => self.out.disconnect(&format!("{from} {why}")),
                Trigger::Connect { .. } | Trigger::Arrived => {}
            }
            return;
        };
        if matches!(trigger, Trigger::Connect { operator: false }) {
            self.connects.push(now);
        }
        let started = now;
        let deadline = started + transfer.switch_timeout();
        let dial =
            dial(target.clone(), self.ctx.identity.clone(), self.ctx.live.tunables.limits.backend_connect_timeout());
        self.switch = Some(Switch {
            target,
            trigger,
            started,
            deadline,
            step: SwitchStep::Dialing(Box::pin(dial)),
            reset_sent: false,
            delivered: ServerStep::None,
            held: BytesMut::new(),
            record: Some(BytesMut::new()),
        });
        self.keep_alive.own_at = started + OWN_KEEP_ALIVE_INTERVAL;
    }

    /// Handles the frames of the backend being switched to, up to its Join Game; none while a frame of the
    /// current backend passes to the player in pieces (they wait queued).
    pub(super) fn joining_frames(&mut self) -> Result<(), End> {
        if self.out.player_owed > 0 {
            return Ok(());
        }
        let forge = self.ctx.identity.is_forge();
        loop {
            let Some(Switch {
                step: SwitchStep::Joining(link),
                reset_sent,
                held,
                started,
                deadline,
                record,
                delivered,
                ..
            }) = &mut self.switch
            else {
                return Ok(());
            };
            let frame = match link.frames.try_next_frame() {
                Ok(Some(f)) => f,
                Ok(None) => return Ok(()),
                Err(e) => return self.fail(&format!("it sent a bad frame: {e}")),
            };
            match frame.id {
                KeepAlive::ID => {
                    // Answered by the proxy: the client is still on the old backend.
                    encode(&mut self.out.to_target, frame.id, &frame.body);
                }
                PluginMessage::CLIENTBOUND_ID if forge && fml::is_handshake(&frame.body) => {
                    if !*reset_sent && is_channel(&frame.body, fml::CHANNEL) {
                        // The new server starts its handshake: the client must forget the old one's first.
                        *reset_sent = true;
                        *deadline = *started + self.ctx.live.tunables.transfer.forge_handshake_timeout();
                        encode(self.out.player(), PluginMessage::CLIENTBOUND_ID, &handshake_reset_fields());
                    }
                    fml::record(record, frame.id, &frame.body);
                    if !is_channel(&frame.body, "REGISTER") {
                        *delivered = (*delivered).max(ServerStep::of(&frame.body));
                    }
                    encode(self.out.player(), frame.id, &frame.body);
                }
                JoinGame::ID => {
                    let join = match frame.decode::<JoinGame>() {
                        Ok(j) => j,
                        Err(e) => return self.fail(&format!("its Join Game is malformed: {e}")),
                    };
                    return self.cutover(&join);
                }
                PlayDisconnect::ID => {
                    let reason =
                        frame.decode::<PlayDisconnect>().map(|d| chat_plain(&d.reason_json)).unwrap_or_default();
                    return self.fail(&format!("it disconnected you: {reason}"));
                }
                _ => {
                    if held.len() + frame.body.len() > MAX_HELD_BYTES {
                        return self.fail(&format!("it sent over {MAX_HELD_BYTES} bytes before Join Game"));
                    }
                    encode(held, frame.id, &frame.body);
                }
            }
        }
    }

    /// The new backend's Join Game: reset the client's world, cut over, drop the old backend.
    fn cutover(&mut self, join: &JoinGame) -> Result<(), End> {
        let Some(switch) = self.switch.take() else { return Ok(()) };
        let SwitchStep::Joining(link) = switch.step else { return Ok(()) };
        // The rest of a frame begun with the old backend must not reach the new one, nor what waited behind it.
        self.player.tail.1 = true;
        self.out.backend_waiting.clear();
        let client = self.client_entity.unwrap_or(join.entity_id);
        let swap = EntityIdSwap::new(client, join.entity_id);
        // What the old server left (scoreboard, teams, tab list, an open window) goes first, then the world.
        let _ = self.leftovers.clear(self.out.player());
        for respawn in world_reset(join) {
            // Cannot fail: the level type was read within the same limit it is written with.
            let _ = respawn.encode_frame(self.out.player());
        }
        // Frames held before the Join Game, now through the swap.
        let mut held = FrameDecoder::new(self.ctx.live.tunables.limits.max_play_frame_bytes);
        held.queue_bytes(switch.held);
        let mut body = Vec::new();
        while let Ok(Some(frame)) = held.try_next_frame() {
            if Leftovers::CLIENTBOUND_IDS.contains(&frame.id) {
                self.leftovers.observe(Direction::Clientbound, frame.id, &frame.body);
            }
            if frame.id == PluginMessage::CLIENTBOUND_ID && is_channel(&frame.body, BUNGEE_CHANNEL) {
                continue;
            }
            put_frame(self.out.player(), Some(swap), Direction::Clientbound, frame, &mut body);
        }
        let from = match (&switch.trigger, &self.current) {
            (Trigger::Fallback { from, .. } | Trigger::Lost { from, .. }, _) => from.clone(),
            (Trigger::Connect { .. }, Some(old)) => old.backend.name.clone(),
            (Trigger::Connect { .. }, None) => "-".into(),
            (Trigger::Arrived, _) => "another instance".into(),
        };
        let ms = switch.started.elapsed().as_secs_f64() * 1000.0;
        info!(
            player = %self.ctx.identity.name,
            from = %from,
            to = %link.backend.name,
            ms = format_args!("{ms:.1}"),
            "player moved to another backend"
        );
        match switch.trigger {
            // Counted by the draining instance (moonbridge_drain_moves_total).
            Trigger::Arrived => {}
            Trigger::Lost { .. } => self.ctx.metrics.transfer(TransferOutcome::Failover),
            _ => self.ctx.metrics.transfer(TransferOutcome::Switched),
        }
        if !matches!(switch.trigger, Trigger::Arrived) {
            self.ctx.metrics.transfer_seconds.observe(ms / 1000.0);
        }
        match &switch.trigger {
            Trigger::Fallback { from, reason, .. } => self.out.chat(&format!("{from} disconnected you: {reason}")),
            Trigger::Lost { from, why } => self.out.chat(&format!("{from} {why}")),
            Trigger::Connect { .. } | Trigger::Arrived => {}
        }
        self.visited.push(link.backend.name.clone());
        if let Some(r) = &self.ctx.registration {
            r.moved_to(&link.backend.name);
        }
        // The rest of what the new backend sent, still in its decoder, is relayed as the current backend's.
        // Keep Alive answers queued for the new backend go out with its other traffic now; what was still queued
        // for the old one (answers to its requests in this same step) goes nowhere.
        self.out.to_backend.clear();
        let answers = std::mem::take(&mut self.out.to_target);
        self.out.to_backend.extend_from_slice(&answers);
        self.current = Some(*link);
        self.forge.record = switch.record;
        self.forge.replaying = false;
        self.swap = Some(swap);
        self.keep_alive.backend.clear();
        self.clientbound()
    }

    /// A switch failed: the player stays (with a chat message saying why), or, when the old backend is gone or
    /// the Forge handshake was reset, is disconnected with the reason.
    pub(super) fn fail(&mut self, why: &str) -> Result<(), End> {
        let Some(switch) = self.switch.take() else { return Ok(()) };
        let target = switch.target.name.clone();
        let message = format!("Could not connect you to {target}: {why}");
        info!(player = %self.ctx.identity.name, to = %target, "transfer failed: {why}");
        // After a reset the client runs the new server's handshake. It can stay only if it has not applied the new
        // registry yet: it then gets the rest of the current server's handshake, from the message its state waits
        // for (a 1.7.10 client takes a HandshakeReset only once its handshake is done, so none is sent now).
        let replay = if switch.reset_sent { self.forge.rest_after(switch.delivered).map(Some) } else { Some(None) };
        match switch.trigger {
            Trigger::Fallback { .. } => self.ctx.metrics.transfer(TransferOutcome::FallbackFailed),
            Trigger::Lost { .. } => self.ctx.metrics.transfer(TransferOutcome::FailoverFailed),
            Trigger::Connect { .. } => self.ctx.metrics.transfer(TransferOutcome::Failed),
            Trigger::Arrived => {}
        }
        if let (true, Some(replay)) = (self.current.is_some(), replay) {
            if let Some(rest) = replay {
                self.out.player().extend_from_slice(&rest);
                self.forge.replaying = true;
            }
            self.out.chat(&message);
            return Ok(());
        }
        match switch.trigger {
            Trigger::Fallback { disconnect, reason, .. } => {
                self.out.chat(&message);
                self.out.player().extend_from_slice(&disconnect);
                Err(End::Closed(format!("disconnected by the backend ({reason}); fallback {target} failed: {why}")))
            }
            Trigger::Lost { from, why: lost } => {
                self.out.chat(&format!("{from} {lost}"));
                self.out.disconnect(&message);
                Err(End::Closed(format!("{from} {lost}; fallback {target} failed: {why}")))
            }
            Trigger::Connect { .. } | Trigger::Arrived => {
                self.out.disconnect(&message);
                Err(End::Closed(message))
            }
        }
    }
}
