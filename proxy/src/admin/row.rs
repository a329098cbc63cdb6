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

/// One player's delivery figures as `GET /admin/delivery` lists them (docs/lanes.md): this instance's players
/// only, read from their relays at the time of the request.
#[derive(Clone, Debug, PartialEq, serde::Serialize, serde::Deserialize)]
#[non_exhaustive]
pub struct DeliveryRow {
    /// The player's name.
    pub name: String,
    /// How it reached the proxy.
    pub transport: Transport,
    /// How its stream is carried.
    pub carriage: Carriage,
    /// Its frames are sorted into lanes (`[lanes]` on and its Play stream followed).
    pub lanes: bool,
    /// Bytes queued in the urgent lane.
    pub urgent_bytes: u64,
    /// How long the oldest of them has waited, milliseconds.
    pub urgent_age_ms: f64,
    /// Bytes queued in the bulk lane.
    pub bulk_bytes: u64,
    /// How long the oldest of them has waited, milliseconds.
    pub bulk_age_ms: f64,
    /// The longest any urgent frame waited in the queue this session, milliseconds.
    pub urgent_max_wait_ms: f64,
    /// Carriage v2 paced: the highest delivery rate of the last 10 s, bytes per second (`null`: not measured).
    pub rate_bytes_per_second: Option<u64>,
    /// Carriage v2 paced: the lowest round trip of the last 10 s as the carriage sees it (from a message sent to
    /// the `ack` that covers it), milliseconds.
    pub rtt_ms: Option<f64>,
    /// Carriage v2 paced: the window of bytes in flight past the last `ack`, bytes.
    pub window_bytes: Option<u64>,
    /// Carriage v2 paced: bytes sent and not acknowledged.
    pub in_flight_bytes: Option<u64>,
}
