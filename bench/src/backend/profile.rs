//! The fake backend's profiles (which answers it gives: the session benchmark's echo or ticks, the soak's
//! checked ticks, the capacity run's) and the capacity run's tick answers (`--load`).

use std::sync::atomic::Ordering;

use clap::ValueEnum;

use crate::workload::{self, Spec};

/// Which answers the backend gives.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Profile {
    /// Echo every frame.
    Echo,
    /// Answer each tick with its template.
    Modded,
    /// The soak's: check each tick byte for byte, then answer it.
    Checked,
    /// The capacity run's: Keep Alive every 2 s, each tick answered as `Load` says.
    Capacity(Load),
}

/// What the backend answers an active player's tick with (`session-bench capacity --load`).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
#[serde(rename_all = "lowercase")]
pub enum Load {
    /// The modded mix of `session-bench --profile modded`: about 6.5 KB in 6–16 packets per tick.
    Modded,
    /// One S3F plugin message of 64 bytes per tick.
    Light,
    /// The modded mix with honest bytes (`session-bench --profile forge`): gzipped NBT, mod channel messages,
    /// deflated chunks, as 1.7.10 Forge builds them.
    Forge,
}

impl Load {
    /// The tick answers' templates (`--load light` answers one packet of its own).
    pub fn templates(self) -> Vec<Vec<Spec>> {
        match self {
            Self::Forge => workload::forge_templates(),
            Self::Modded | Self::Light => workload::templates(),
        }
    }
}

/// Seconds between two Keep Alive from the capacity backend (a 1.7.10 server sends one every 40 ticks).
pub const KEEP_ALIVE_S: u64 = 2;

impl Profile {
    /// The tick answers' templates.
    pub fn templates(self) -> Vec<Vec<Spec>> {
        match self {
            Self::Echo | Self::Modded if workload::FORGE.load(Ordering::Relaxed) => workload::forge_templates(),
            Self::Echo | Self::Modded if workload::GTNH.load(Ordering::Relaxed) => workload::gtnh_templates(),
            Self::Echo | Self::Modded | Self::Checked => workload::templates(),
            Self::Capacity(load) => load.templates(),
        }
    }

    /// A connection's read buffer: its first capacity, and the room made before each read.
    pub fn read_buffer(self) -> (usize, usize) {
        match self {
            Self::Echo | Self::Modded => (256 * 1024, 64 * 1024),
            Self::Checked => (16 * 1024, 16 * 1024),
            Self::Capacity(_) => (4096, 4096),
        }
    }
}
