//! The `BungeeCord` plugin channel's requests besides `Connect`, answered as BungeeCord's `DownstreamBridge`
//! answers them (field layouts: [`BungeeRequest`]): to the backend that asked, as a serverbound Plugin Message
//! (C17) on the `BungeeCord` channel through the same player's connection. Counts and lists are of this
//! proxy's players ([`crate::players::PlayerTable`]). What reaches other players (`Message`, `MessageRaw`,
//! `KickPlayer`, `ForwardToPlayer`, `Forward`) goes as a [`Command`] to their sessions; a session on a backend
//! whose players cannot be switched takes none (its relay does not watch for the channel).

use moonbridge_protocol::packets::{chat_text, ChatMessage, Packet, PlayDisconnect, PluginMessage};
use moonbridge_protocol::transfer::{BungeeAnswer, BungeeRequest, BUNGEE_CHANNEL};
use tracing::debug;

use super::board::Switchboard;
use super::common::{chat_plain, encode, End};
use super::switch::Trigger;
use crate::players::{Command, PlayerTable};

/// The server name that means every server (or every player) in a request.
const ALL: &str = "ALL";
/// `Forward`'s target for every other server with players.
const ONLINE: &str = "ONLINE";

impl Switchboard {
    /// Answers a request of the current backend, or passes it on to the sessions it is for.
    pub(super) fn answer(&mut self, request: BungeeRequest) {
        let Some(here) = self.current.as_ref().map(|l| l.backend.name.clone()) else { return };
        if let BungeeRequest::PlayerList { server } = &request {
            if let Some(payload) = self.answers.list_for(server).map(<[u8]>::to_vec) {
                self.send_to_current(&payload);
                return;
            }
        }
        let empty = std::sync::Arc::new(PlayerTable::default());
        let table = self.ctx.registration.as_ref().map_or(&empty, |r| r.table()).clone();
        let live = &self.ctx.live;
        let known = |server: &str| server == ALL || live.backend_named(server).is_some();
        let scope = |server: &str| (server != ALL).then_some(server.to_string());
        let answer = (|| -> Option<BungeeAnswer> {
            Some(match &request {
                BungeeRequest::GetServers => {
                    let names: Vec<&str> = live.backends().iter().map(|b| b.name.as_str()).collect();
                    let mut a = BungeeAnswer::new("GetServers").ok()?;
                    a.utf(&names.join(", ")).ok()?;
                    a
                }
                BungeeRequest::GetServer => {
                    let mut a = BungeeAnswer::new("GetServer").ok()?;
                    a.utf(&here).ok()?;
                    a
                }
                BungeeRequest::PlayerCount { server } if known(server) => {
                    let count = table.count(scope(server).as_deref());
                    let mut a = BungeeAnswer::new("PlayerCount").ok()?;
                    a.utf(server).ok()?.int(i32::try_from(count).unwrap_or(i32::MAX));
                    a
                }
                BungeeRequest::PlayerList { server } if known(server) => {
                    let names = table.names(scope(server).as_deref());
                    let mut a = BungeeAnswer::new("PlayerList").ok()?;
                    a.utf(server).ok()?.utf(&names.join(", ")).ok()?;
                    a
                }
                BungeeRequest::Uuid => {
                    let mut a = BungeeAnswer::new("UUID").ok()?;
                    a.utf(&self.ctx.identity.uuid().simple().to_string()).ok()?;
                    a
                }
                BungeeRequest::UuidOther { player } => {
                    let seen = table.find(player)?;
                    let mut a = BungeeAnswer::new("UUIDOther").ok()?;
                    a.utf(&seen.name).ok()?.utf(&seen.uuid).ok()?;
                    a
                }
                BungeeRequest::Ip => {
                    let client = self.ctx.identity.client;
                    let mut a = BungeeAnswer::new("IP").ok()?;
                    a.utf(&client.ip().to_string()).ok()?.int(i32::from(client.port()));
                    a
                }
                BungeeRequest::IpOther { player } => {
                    let seen = table.find(player)?;
                    let mut a = BungeeAnswer::new("IPOther").ok()?;
                    a.utf(&seen.name).ok()?.utf(&seen.address.ip().to_string()).ok()?;
                    a.int(i32::from(seen.address.port()));
                    a
                }
                BungeeRequest::ServerIp { server } => {
                    let backend = live.backend_named(server)?;
                    let (host, port) = backend.address.rsplit_once(':')?;
                    let host = host.trim_start_matches('[').trim_end_matches(']');
                    let mut a = BungeeAnswer::new("ServerIP").ok()?;
                    a.utf(server).ok()?.utf(host).ok()?.short(port.parse().ok()?);
                    a
                }
                BungeeRequest::Message { player, text } => {
                    deliver(&table, player, Command::Chat(chat_text(text)));
                    return None;
                }
                BungeeRequest::MessageRaw { player, json } => {
                    // A component the client cannot parse would disconnect it: only well-formed JSON goes on.
                    if serde_json::from_str::<serde_json::Value>(json).is_ok() {
                        deliver(&table, player, Command::Chat(json.clone()));
                    }
                    return None;
                }
                BungeeRequest::KickPlayer { player, reason } => {
                    table.send(player, Command::Kick(chat_text(reason)));
                    return None;
                }
                BungeeRequest::ForwardToPlayer { player, channel, data } => {
                    let mut a = BungeeAnswer::new(channel).ok()?;
                    a.short_bytes(data).ok()?;
                    table.send(player, Command::Forward(a.finish()));
                    return None;
                }
                BungeeRequest::Forward { server, channel, data } => {
                    let mut a = BungeeAnswer::new(channel).ok()?;
                    a.short_bytes(data).ok()?;
                    let payload = a.finish();
                    let servers: Vec<String> = match server.as_str() {
                        ALL => live.backends().iter().map(|b| b.name.clone()).collect(),
                        ONLINE => table.servers(),
                        one => vec![one.to_string()],
                    };
                    let everywhere = server == ALL || server == ONLINE;
                    for s in servers.iter().filter(|s| !everywhere || **s != here) {
                        table.send_to_server(s, Command::Forward(payload.clone()));
                    }
                    return None;
                }
                other => {
                    debug!(player = %self.ctx.identity.name, "BungeeCord request dropped: {other:?}");
                    return None;
                }
            })
        })();
        if let Some(answer) = answer {
            let payload = answer.finish();
            self.send_to_current(&payload);
            if let BungeeRequest::PlayerList { server } = request {
                self.answers.keep_list(server, payload);
            }
        }
    }

    /// Carries out a command from another session (or this one).
    pub(super) fn command(&mut self, command: Command) -> Result<(), End> {
        match command {
            Command::Chat(json) => {
                let _ = (ChatMessage { json }).encode_frame(self.out.player());
                Ok(())
            }
            Command::Kick(reason_json) => {
                let reason = chat_plain(&reason_json);
                let _ = (PlayDisconnect { reason_json }).encode_frame(self.out.player());
                Err(End::Closed(format!("kicked by a server plugin: {reason}")))
            }
            Command::Forward(payload) => {
                self.send_to_current(&payload);
                Ok(())
            }
            Command::Switch(backend) => {
                self.request(&backend, Trigger::Connect { operator: true });
                Ok(())
            }
            Command::Move if self.ctx.movable => {
                self.move_asked = true;
                Ok(())
            }
            // The drain sends `Move` only to players who can move; a stray one is ignored here (a relay that
            // cannot send `move` would otherwise wake up for it again and again).
            Command::Move => Ok(()),
        }
    }

    /// Queues a `BungeeCord` Plugin Message (serverbound C17) with `payload` for the current backend. C17 keeps
    /// vanilla's `i16` data length in Forge 1.7.10 (docs/modpacks.md), so a payload over 32,767 bytes is not
    /// sent (as before: BungeeCord's answers are names and counts).
    fn send_to_current(&mut self, payload: &[u8]) {
        if payload.len() > moonbridge_protocol::array_length::MAX_SHORT {
            return;
        }
        let mut fields = Vec::with_capacity(payload.len() + 16);
        let message = PluginMessage { channel: BUNGEE_CHANNEL.into(), data: payload.to_vec() };
        if self.current.is_some() && message.encode_fields(&mut fields).is_ok() {
            encode(self.for_current(), PluginMessage::SERVERBOUND_ID, &fields);
        }
    }
}

/// Sends `command` to player `name`, or to every player for `ALL`.
fn deliver(table: &PlayerTable, name: &str, command: Command) {
    if name == ALL {
        table.send_all(&command);
    } else {
        table.send(name, command);
    }
}
