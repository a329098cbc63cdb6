//! [`Leftovers`]: the old server's scoreboard objectives, teams, tab-list entries and open window, followed on
//! the Play stream and removed byte for byte so the new server starts clean.

use super::Direction;
use crate::codec::{put_string, Reader};
use crate::error::EncodeError;

/// Most entries [`Leftovers`] keeps per kind (objectives, teams, tab-list names); a server that creates more
/// has the rest left on the client after a switch.
pub const MAX_LEFTOVERS: usize = 4096;

/// Longest name [`Leftovers`] reads (objective, team, tab-list name), in UTF-16 units: the 1.7.10 client reads
/// 16 (objective, team, player list) and 32 (display name); longer ones are not tracked.
const MAX_LEFTOVER_NAME: usize = 64;

/// What a server left on the client that the next server would not know to remove: scoreboard objectives
/// (S3B), teams (S3E), tab-list entries (S38) and the open window (S2D, closed by S2E or the client's C0D).
/// [`Leftovers::observe`] follows the Play stream; [`Leftovers::clear`] writes the frames that remove
/// everything (protocol 5: S3B mode 1, S3E mode 1, S38 with `online` false, S2E) and forgets it. Malformed
/// packets are ignored (the client will complain about them itself).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Leftovers {
    objectives: std::collections::BTreeSet<String>,
    teams: std::collections::BTreeSet<String>,
    tab_list: std::collections::BTreeSet<String>,
    window: Option<u8>,
}

impl Leftovers {
    /// Packet ids [`Leftovers::observe`] looks at, clientbound.
    pub const CLIENTBOUND_IDS: [i32; 5] = [0x3b, 0x3e, 0x38, 0x2d, 0x2e];
    /// Packet id [`Leftovers::observe`] looks at, serverbound (C0D Close Window).
    pub const SERVERBOUND_ID: i32 = 0x0d;

    /// Follows one Play packet (`body` after the packet id).
    pub fn observe(&mut self, direction: Direction, id: i32, body: &[u8]) {
        let mut r = Reader::new(body);
        let name = |r: &mut Reader<'_>| r.string(MAX_LEFTOVER_NAME, "name").map(str::to_owned);
        let track = |set: &mut std::collections::BTreeSet<String>, name: String, present: bool| {
            if !present {
                set.remove(&name);
            } else if set.len() < MAX_LEFTOVERS {
                set.insert(name);
            }
        };
        // S3B and S3E modes: 0 creates, 1 removes, the others change what exists.
        let created = |mode: u8| match mode {
            0 => Some(true),
            1 => Some(false),
            _ => None,
        };
        match (direction, id) {
            // S3B: String name (16), String display (32), i8 mode (0 create, 1 remove, 2 update).
            (Direction::Clientbound, 0x3b) => {
                if let (Ok(n), Ok(_), Ok(mode)) = (name(&mut r), r.string(MAX_LEFTOVER_NAME, "display"), r.u8("mode")) {
                    if let Some(present) = created(mode) {
                        track(&mut self.objectives, n, present);
                    }
                }
            }
            // S3E: String team (16), i8 mode (0 create, 1 remove, 2 update, 3/4 players), then mode's fields.
            (Direction::Clientbound, 0x3e) => {
                if let (Ok(n), Ok(mode)) = (name(&mut r), r.u8("mode")) {
                    if let Some(present) = created(mode) {
                        track(&mut self.teams, n, present);
                    }
                }
            }
            // S38: String name, bool online, i16 ping.
            (Direction::Clientbound, 0x38) => {
                if let (Ok(n), Ok(online)) = (name(&mut r), r.u8("online")) {
                    track(&mut self.tab_list, n, online != 0);
                }
            }
            // S2D: u8 window id, then the window's type and title.
            (Direction::Clientbound, 0x2d) => self.window = r.u8("window id").ok().or(self.window),
            // S2E (clientbound) and C0D (serverbound): the window id that closed.
            (Direction::Clientbound, 0x2e) | (Direction::Serverbound, 0x0d) => self.window = None,
            _ => {}
        }
    }

    /// True when nothing is left to remove.
    pub fn is_empty(&self) -> bool {
        self.objectives.is_empty() && self.teams.is_empty() && self.tab_list.is_empty() && self.window.is_none()
    }

    /// Appends the frames that remove every leftover, in the order close window, objectives, teams, tab
    /// list, and forgets them.
    ///
    /// # Errors
    /// Never for names read by [`Leftovers::observe`] (they are within the string limits); kept for the frame
    /// encoder's contract.
    pub fn clear(&mut self, out: &mut impl bytes::BufMut) -> Result<(), EncodeError> {
        let mut body = Vec::new();
        if let Some(window) = self.window.take() {
            crate::frame::encode_frame(out, 0x2e, &[window])?;
        }
        for n in std::mem::take(&mut self.objectives) {
            body.clear();
            put_string(&mut body, &n, MAX_LEFTOVER_NAME, "name")?;
            put_string(&mut body, "", MAX_LEFTOVER_NAME, "display")?;
            body.push(1);
            crate::frame::encode_frame(out, 0x3b, &body)?;
        }
        for n in std::mem::take(&mut self.teams) {
            body.clear();
            put_string(&mut body, &n, MAX_LEFTOVER_NAME, "team")?;
            body.push(1);
            crate::frame::encode_frame(out, 0x3e, &body)?;
        }
        for n in std::mem::take(&mut self.tab_list) {
            body.clear();
            put_string(&mut body, &n, MAX_LEFTOVER_NAME, "name")?;
            body.extend_from_slice(&[0, 0, 0]);
            crate::frame::encode_frame(out, 0x38, &body)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn leftovers_follow_the_stream_and_clear_byte_for_byte() {
        let mut l = Leftovers::default();
        let s = |v: &str| {
            let mut b = Vec::new();
            put_string(&mut b, v, 64, "s").unwrap();
            b
        };
        // S3B create "kills" then "deaths", remove "deaths"; S3E create "red", update "red", create "blue",
        // remove "blue"; S38 add "Alice", "Bob", remove "Bob"; S2D window 5 (after window 3 was closed by C0D).
        for (mode, name) in [(0u8, "kills"), (0, "deaths"), (1, "deaths")] {
            l.observe(Direction::Clientbound, 0x3b, &[s(name), s("Display"), vec![mode]].concat());
        }
        for (mode, name) in [(0u8, "red"), (2, "red"), (0, "blue"), (1, "blue")] {
            l.observe(Direction::Clientbound, 0x3e, &[s(name), vec![mode]].concat());
        }
        for (online, name) in [(1u8, "Alice"), (1, "Bob"), (0, "Bob")] {
            l.observe(Direction::Clientbound, 0x38, &[s(name), vec![online, 0, 10]].concat());
        }
        l.observe(Direction::Clientbound, 0x2d, &[3, 0]);
        l.observe(Direction::Serverbound, 0x0d, &[3]);
        l.observe(Direction::Clientbound, 0x2d, &[5, 0]);
        // Malformed packets change nothing.
        l.observe(Direction::Clientbound, 0x3b, &[0x05, b'x']);
        let mut out = Vec::new();
        l.clear(&mut out).unwrap();
        let want: Vec<u8> = [
            vec![0x02, 0x2e, 5],
            vec![0x09, 0x3b, 5, b'k', b'i', b'l', b'l', b's', 0, 1],
            vec![0x06, 0x3e, 3, b'r', b'e', b'd', 1],
            vec![0x0a, 0x38, 5, b'A', b'l', b'i', b'c', b'e', 0, 0, 0],
        ]
        .concat();
        assert_eq!(out, want);
        assert!(l.is_empty());
        out.clear();
        l.clear(&mut out).unwrap();
        assert!(out.is_empty(), "cleared once");
    }

    #[test]
    fn leftovers_are_bounded() {
        let mut l = Leftovers::default();
        for i in 0..MAX_LEFTOVERS + 10 {
            let name = format!("t{i}");
            let mut b = Vec::new();
            put_string(&mut b, &name, 64, "s").unwrap();
            b.push(0);
            l.observe(Direction::Clientbound, 0x3e, &b);
        }
        assert_eq!(l.teams.len(), MAX_LEFTOVERS);
    }
}
