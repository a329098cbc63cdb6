//! [`PlayerRow`]: one player as the admin API lists it and `moonbridge ctl` reads it.

use std::net::SocketAddr;

use crate::transport::{Carriage, Transport};

/// One player as `GET /admin/players` lists it.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct PlayerRow {
    /// The player's name.
    pub name: String,
    /// Its UUID: 32 hex digits, no dashes.
    pub uuid: String,
    /// The id of the instance it plays on (16 hex digits); `null` outside a network.
    pub instance: Option<String>,
    /// The backend it is on.
    pub backend: String,
    /// Its real address; `null` when its instance runs a version before the admin API.
    pub address: Option<SocketAddr>,
    /// How it reached the proxy.
    pub transport: Option<Transport>,
    /// How its stream is carried.
    pub carriage: Option<Carriage>,
    /// Seconds since it logged in (a player moved between instances keeps its login's time).
    pub session_seconds: Option<u64>,
}
