//! What an operator asks of players ([`Action`], the admin API's `kick`, `send` and `message`), carried out on
//! this instance's players ([`PlayerTable::act`]). The admin API asks every instance that holds players it
//! names, over the instance links (`crate::network`), with the same JSON.

use moonbridge_protocol::packets::chat_text;

use super::{Command, PlayerTable};

/// Longest kick reason or chat message an operator may send, in bytes: 1,024 (a chat line longer than the
/// client's 100 characters wraps; a disconnect screen shows a few lines).
pub const MAX_TEXT_BYTES: usize = 1024;

/// Longest player or backend name in an action, in bytes: 255 (a player name has at most 16 characters; a
/// backend name is the operator's).
pub const MAX_NAME_BYTES: usize = 255;

/// An operator's action on players, as the admin API's request bodies and the instance links carry it
/// (JSON, `"action"` naming the variant).
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "action", rename_all = "snake_case", deny_unknown_fields)]
#[non_exhaustive]
pub enum Action {
    /// Disconnect `player` with `reason` (plain text on the disconnect screen).
    Kick {
        /// The player's name (any case).
        player: String,
        /// Plain text, at most [`MAX_TEXT_BYTES`] bytes.
        reason: String,
    },
    /// Switch `player`, or every player on backend `from`, to backend `to` (the switch a `BungeeCord`
    /// `Connect` starts, to any configured backend). Exactly one of `player` and `from`.
    Send {
        /// One player (any case).
        #[serde(default, skip_serializing_if = "Option::is_none")]
        player: Option<String>,
        /// Every player on this backend.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        from: Option<String>,
        /// The backend to switch to (a `[[backend]]` name).
        to: String,
    },
    /// A chat line (`text`, plain) for every player, or for the players on `backend`.
    Message {
        /// Plain text, at most [`MAX_TEXT_BYTES`] bytes.
        text: String,
        /// Only the players on this backend.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        backend: Option<String>,
    },
}

/// Why an [`Action`] cannot be carried out as written.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ActionError {
    /// A name longer than [`MAX_NAME_BYTES`], empty, or with a control character.
    #[error("a player or backend name must have 1 to {MAX_NAME_BYTES} bytes and no control characters")]
    Name,
    /// A text longer than [`MAX_TEXT_BYTES`], or with a control character (a line break included).
    #[error("a reason or message has at most {MAX_TEXT_BYTES} bytes and no control characters")]
    Text,
    /// `send` with both or neither of `player` and `from`.
    #[error("send takes exactly one of player and from")]
    SendWhom,
}

impl Action {
    /// Checks the bounds.
    ///
    /// # Errors
    /// [`ActionError`] for an action out of them.
    pub fn check(&self) -> Result<(), ActionError> {
        let name = |n: &str| {
            let fits = (1..=MAX_NAME_BYTES).contains(&n.len()) && !n.chars().any(char::is_control);
            fits.then_some(()).ok_or(ActionError::Name)
        };
        // No control characters: useless on a chat line or a disconnect screen, and JSON would write each as six
        // bytes (the instance link takes 4 KiB).
        let text = |t: &str| {
            let fits = t.len() <= MAX_TEXT_BYTES && !t.chars().any(char::is_control);
            fits.then_some(()).ok_or(ActionError::Text)
        };
        match self {
            Self::Kick { player, reason } => name(player).and(text(reason)),
            Self::Send { player: Some(p), from: None, to } => name(p).and(name(to)),
            Self::Send { player: None, from: Some(f), to } => name(f).and(name(to)),
            Self::Send { .. } => Err(ActionError::SendWhom),
            Self::Message { text: t, backend } => text(t).and(backend.as_deref().map_or(Ok(()), name)),
        }
    }

    /// The action's name: `kick`, `send` or `message`.
    pub fn verb(&self) -> &'static str {
        match self {
            Self::Kick { .. } => "kick",
            Self::Send { .. } => "send",
            Self::Message { .. } => "message",
        }
    }

    /// The one player the action is for, when it names one.
    pub fn player(&self) -> Option<&str> {
        match self {
            Self::Kick { player, .. } | Self::Send { player: Some(player), .. } => Some(player),
            _ => None,
        }
    }
}

/// What an [`Action`] came to on one instance (the link's answer) or on the whole network (the API's).
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct Reach {
    /// Players who got it (kicked, a switch started, the chat line queued).
    pub done: u32,
    /// Players it was for who could not take it: their session takes no commands (its backend cannot
    /// switch players: docs/operations.md, "Admin API"), or has 64 commands waiting.
    pub missed: u32,
    /// Instances that could not be asked (the admin API's answer; always 0 in a link's answer).
    #[serde(default)]
    pub unreached: u32,
}

impl Reach {
    /// Both counts added.
    #[must_use]
    pub fn and(self, other: Self) -> Self {
        Self {
            done: self.done.saturating_add(other.done),
            missed: self.missed.saturating_add(other.missed),
            unreached: self.unreached.saturating_add(other.unreached),
        }
    }
}

impl PlayerTable {
    /// What `action` would reach here, each player counted as missed and nothing done (a switch to a backend
    /// this instance does not know).
    pub(crate) fn act_nothing(&self, action: &Action) -> Reach {
        let n = match action {
            Action::Send { player: Some(p), .. } => usize::from(self.find(p).is_some()),
            Action::Send { player: None, from: Some(f), .. } => self.local_names(Some(f)).len(),
            _ => 0,
        };
        Reach { missed: u32::try_from(n).unwrap_or(u32::MAX), ..Reach::default() }
    }

    /// Carries out `action` on this instance's players.
    pub(crate) fn act(&self, action: &Action) -> Reach {
        let mut reach = Reach::default();
        let mut count = |ok: bool| if ok { reach.done += 1 } else { reach.missed += 1 };
        match action {
            Action::Kick { player, reason } => {
                if self.find(player).is_some() {
                    count(self.kick(player, reason));
                }
            }
            Action::Send { player: Some(player), to, .. } => {
                if self.find(player).is_some() {
                    count(self.send(player, Command::Switch(to.clone())));
                }
            }
            Action::Send { player: None, from: Some(from), to } => {
                for name in self.local_names(Some(from)) {
                    count(self.send(&name, Command::Switch(to.clone())));
                }
            }
            // Refused by `check`.
            Action::Send { .. } => {}
            Action::Message { text, backend } => {
                let line = Command::Chat(chat_text(text));
                for name in self.local_names(backend.as_deref()) {
                    count(self.send(&name, line.clone()));
                }
            }
        }
        reach
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use tokio::sync::mpsc;

    use super::*;
    use crate::players::{Duplicate, Seen, COMMAND_QUEUE};
    use crate::transport::{Carriage, Transport};

    fn seen(name: &str, server: &str) -> Seen {
        Seen {
            name: name.into(),
            uuid: "0".repeat(32),
            address: ([10, 0, 0, 1], 5).into(),
            transport: Transport::Tcp,
            carriage: Carriage::None,
            server: server.into(),
            movable: false,
        }
    }

    #[test]
    fn actions_are_bounded_and_reach_whom_they_name() {
        let long = "x".repeat(MAX_TEXT_BYTES + 1);
        let kick = |player: &str, reason: &str| Action::Kick { player: player.into(), reason: reason.into() };
        assert_eq!(kick("Alex", "bye").check(), Ok(()));
        assert_eq!(kick("", "bye").check(), Err(ActionError::Name));
        assert_eq!(kick("Alex", &long).check(), Err(ActionError::Text));
        assert_eq!(kick("Alex", "two\nlines").check(), Err(ActionError::Text));
        // The longest action fits one instance-link request (4 KiB of JSON).
        let longest =
            Action::Message { text: "\u{fffd}".repeat(MAX_TEXT_BYTES / 3), backend: Some("b".repeat(MAX_NAME_BYTES)) };
        assert_eq!(longest.check(), Ok(()));
        assert!(serde_json::to_vec(&longest).unwrap().len() < 4096);
        let both = Action::Send { player: Some("a".into()), from: Some("b".into()), to: "c".into() };
        assert_eq!(both.check(), Err(ActionError::SendWhom));
        let json = r#"{"action":"send","from":"survival","to":"lobby"}"#;
        let send: Action = serde_json::from_str(json).unwrap();
        assert_eq!(serde_json::to_string(&send).unwrap(), json, "the link carries the same JSON");
        assert!(serde_json::from_str::<Action>(r#"{"action":"kick","player":"a","reason":"b","x":1}"#).is_err());

        let table = Arc::new(PlayerTable::default());
        let (tx, mut alex_rx) = mpsc::channel(COMMAND_QUEUE);
        let _alex = table.register(seen("Alex", "survival"), Some(tx), None, None, Duplicate::Replace);
        let (tx, mut bo_rx) = mpsc::channel(COMMAND_QUEUE);
        let _bo = table.register(seen("Bo", "lobby"), Some(tx), None, None, Duplicate::Replace);
        // A session that takes no commands (an opaque relay) counts as missed.
        let _cy = table.register(seen("Cy", "survival"), None, None, None, Duplicate::Replace);
        let reach = table.act(&send);
        assert_eq!((reach.done, reach.missed, reach.unreached), (1, 1, 0));
        assert_eq!(alex_rx.try_recv().ok(), Some(Command::Switch("lobby".into())));
        assert!(bo_rx.try_recv().is_err(), "Bo is not on survival");
        let message = Action::Message { text: "Restart".into(), backend: None };
        assert_eq!(table.act(&message).done, 2);
        assert_eq!(bo_rx.try_recv().ok(), Some(Command::Chat(chat_text("Restart"))));
        // Nobody of that name here: nothing done, nothing missed (the admin API asks the instance that holds it).
        assert_eq!(table.act(&kick("Zed", "bye")), Reach::default());
        assert_eq!(table.act(&kick("cy", "bye")).missed, 1, "Cy has no stop signal here");
    }
}
