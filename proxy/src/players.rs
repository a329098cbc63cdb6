//! This proxy's players in Play ([`PlayerTable`]): what the `BungeeCord` plugin channel's requests are
//! answered from (`PlayerCount`, `PlayerList`, `UUIDOther`, `IPOther`, …) and how a request reaches another
//! player's session (`Message`, `KickPlayer`, `Forward`, `ForwardToPlayer`: a [`Command`] on that session's
//! channel).
//!
//! Every session registers once its backend accepted the login and leaves when it ends ([`Registration`]
//! removes it on drop). Names are matched without regard to case, as a Minecraft server matches them.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use tokio::sync::mpsc;

/// Commands a session may have waiting (a plugin that floods `Message` cannot grow a session's queue past
/// this; more are dropped).
pub(crate) const COMMAND_QUEUE: usize = 64;

/// What another session asks of a player's session.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) enum Command {
    /// A chat line (a JSON chat component) for the player.
    Chat(String),
    /// Disconnect the player with this reason (a JSON chat component).
    Kick(String),
    /// A `BungeeCord` Plugin Message (its payload: the plugin's channel, `i16` length, data) for the backend the
    /// player is on.
    Forward(Vec<u8>),
}

/// One player in the table.
#[derive(Debug)]
struct Entry {
    /// Which registration this is (a second session under the same name replaces the first).
    id: u64,
    name: String,
    /// 32 hex digits, no dashes.
    uuid: String,
    address: SocketAddr,
    /// The backend the player is on.
    server: String,
    /// The session's command channel, when it takes commands (a session whose backend cannot send players on
    /// does not).
    commands: Option<mpsc::Sender<Command>>,
}

/// This proxy's players in Play, by lower-case name.
#[derive(Debug, Default)]
pub(crate) struct PlayerTable {
    inner: Mutex<HashMap<String, Entry>>,
    next_id: AtomicU64,
}

/// A player's place in the table, removed on drop.
#[derive(Debug)]
pub(crate) struct Registration {
    table: Arc<PlayerTable>,
    key: String,
    id: u64,
}

/// What a player's session knows of a player in the table.
#[derive(Clone, Debug, PartialEq, Eq)]
pub(crate) struct Seen {
    pub(crate) name: String,
    pub(crate) uuid: String,
    pub(crate) address: SocketAddr,
    pub(crate) server: String,
}

impl PlayerTable {
    fn lock(&self) -> std::sync::MutexGuard<'_, HashMap<String, Entry>> {
        self.inner.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Adds a player on backend `server`; `commands` when the session takes [`Command`]s.
    pub(crate) fn register(self: &Arc<Self>, seen: Seen, commands: Option<mpsc::Sender<Command>>) -> Registration {
        let id = self.next_id.fetch_add(1, Ordering::Relaxed);
        let key = seen.name.to_lowercase();
        let Seen { name, uuid, address, server } = seen;
        self.lock().insert(key.clone(), Entry { id, name, uuid, address, server, commands });
        Registration { table: Arc::clone(self), key, id }
    }

    /// Players in Play on `server`, or on every backend for `None`.
    pub(crate) fn count(&self, server: Option<&str>) -> usize {
        self.lock().values().filter(|e| server.is_none_or(|s| e.server == s)).count()
    }

    /// The names of the players on `server` (every backend for `None`), sorted.
    pub(crate) fn names(&self, server: Option<&str>) -> Vec<String> {
        let mut names: Vec<String> =
            self.lock().values().filter(|e| server.is_none_or(|s| e.server == s)).map(|e| e.name.clone()).collect();
        names.sort_unstable();
        names
    }

    /// What the table knows of player `name`.
    pub(crate) fn find(&self, name: &str) -> Option<Seen> {
        self.lock().get(&name.to_lowercase()).map(|e| Seen {
            name: e.name.clone(),
            uuid: e.uuid.clone(),
            address: e.address,
            server: e.server.clone(),
        })
    }

    /// Queues `command` for player `name`; false when the player is not here, takes no commands, or has
    /// [`COMMAND_QUEUE`] waiting.
    pub(crate) fn send(&self, name: &str, command: Command) -> bool {
        let sender = self.lock().get(&name.to_lowercase()).and_then(|e| e.commands.clone());
        sender.is_some_and(|s| s.try_send(command).is_ok())
    }

    /// Queues `command` for every player that takes commands; how many got it.
    pub(crate) fn send_all(&self, command: &Command) -> usize {
        let senders: Vec<_> = self.lock().values().filter_map(|e| e.commands.clone()).collect();
        senders.iter().filter(|s| s.try_send(command.clone()).is_ok()).count()
    }

    /// Queues `command` for one player on `server` that takes commands (a message for the server itself goes
    /// through any of its players, as BungeeCord sends it); false when none does.
    pub(crate) fn send_to_server(&self, server: &str, command: Command) -> bool {
        let senders: Vec<_> = self
            .lock()
            .values()
            .filter(|e| e.server == server)
            .filter_map(|e| e.commands.clone())
            .filter(|s| !s.is_closed())
            .collect();
        senders.iter().any(|s| s.try_send(command.clone()).is_ok())
    }

    /// The backends with at least one player.
    pub(crate) fn servers(&self) -> Vec<String> {
        let mut servers: Vec<String> = self.lock().values().map(|e| e.server.clone()).collect();
        servers.sort_unstable();
        servers.dedup();
        servers
    }
}

impl Registration {
    /// The player is on backend `server` now (after a switch).
    pub(crate) fn moved_to(&self, server: &str) {
        if let Some(e) = self.table.lock().get_mut(&self.key).filter(|e| e.id == self.id) {
            e.server = server.to_string();
        }
    }

    /// The table this registration is in.
    pub(crate) fn table(&self) -> &Arc<PlayerTable> {
        &self.table
    }
}

impl Drop for Registration {
    fn drop(&mut self) {
        let mut table = self.table.lock();
        if table.get(&self.key).is_some_and(|e| e.id == self.id) {
            table.remove(&self.key);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn seen(name: &str, server: &str) -> Seen {
        Seen {
            name: name.into(),
            uuid: format!("{:032x}", name.len()),
            address: ([10, 0, 0, 1], 5).into(),
            server: server.into(),
        }
    }

    #[test]
    fn counts_lists_and_commands_follow_registrations() {
        let table = Arc::new(PlayerTable::default());
        let (tx, mut rx) = mpsc::channel(COMMAND_QUEUE);
        let a = table.register(seen("Alex", "lobby"), Some(tx));
        let b = table.register(seen("Steve", "survival"), None);
        assert_eq!((table.count(None), table.count(Some("lobby")), table.count(Some("x"))), (2, 1, 0));
        assert_eq!(table.names(None), ["Alex", "Steve"]);
        assert_eq!(table.find("alex").map(|s| s.server), Some("lobby".into()));
        assert!(table.send("ALEX", Command::Chat("\"hi\"".into())));
        assert_eq!(rx.try_recv().ok(), Some(Command::Chat("\"hi\"".into())));
        assert!(!table.send("Steve", Command::Kick("\"x\"".into())), "no command channel");
        assert!(!table.send_to_server("survival", Command::Forward(vec![1])));
        assert!(table.send_to_server("lobby", Command::Forward(vec![1])));
        a.moved_to("survival");
        assert_eq!(table.names(Some("survival")), ["Alex", "Steve"]);
        assert_eq!(table.servers(), ["survival"]);
        // A second session under the same name replaces the first; the first's end does not remove it.
        let again = table.register(seen("alex", "lobby"), None);
        drop(a);
        assert_eq!(table.find("Alex").map(|s| s.server), Some("lobby".into()));
        drop((again, b));
        assert_eq!(table.count(None), 0);
    }

    #[test]
    fn a_full_queue_drops_commands() {
        let table = Arc::new(PlayerTable::default());
        let (tx, _rx) = mpsc::channel(COMMAND_QUEUE);
        let _a = table.register(seen("A", "s"), Some(tx));
        let sent = (0..COMMAND_QUEUE + 5).filter(|_| table.send("A", Command::Chat(String::new()))).count();
        assert_eq!(sent, COMMAND_QUEUE);
        assert_eq!(table.send_all(&Command::Chat(String::new())), 0);
    }
}
