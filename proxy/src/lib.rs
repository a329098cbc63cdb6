//! # moonbridge-proxy
//!
//! The MoonBridge proxy daemon as a library: [`Config`] describes listeners (`tcp`, `ws`, `wss`), backends,
//! routing, authentication and limits; [`Server::bind`] checks it into [`config::Settings`], opens the
//! listeners, and [`Server::run`] serves players until a shutdown signal. The `moonbridge` binary is a thin
//! command line around these calls.
//!
//! # Layout
//!
//! Read top-down; each file imports only from files above it in this list (`tests/tests/layout.rs` checks
//! that no import cycle exists).
//!
//! | file | what |
//! |---|---|
//! | `config/` | the TOML file ([`Config`]) and the checked, typed [`config::Settings`] built from it |
//! | `trusted.rs` | trusted proxies, for the PROXY header and the real-IP HTTP header alike |
//! | `limits.rs` | the `max_handshaking` slots and rate-limited log lines |
//! | `rate.rs` | per-address rate limits (token buckets, a bounded table) |
//! | `metrics.rs` | the Prometheus metrics (one registry per proxy; resolved series on the hot paths) |
//! | `proxy_header.rs` | PROXY v1/v2 headers in (load balancers) and v2 out (`proxy-protocol` forwarding) |
//! | `tls.rs` | rustls for `wss`, certificate reload |
//! | `auth.rs` | online mode: the RSA key pair and the session server's `hasJoined` |
//! | `backend.rs` | a backend and connecting to it |
//! | `relay/` | the data path once logged in: the policy shared by all transports (`mod.rs`: counting, frame boundaries, CFB8, write stall, shutdown injection), the TCP loop (`tcp.rs`) and the WebSocket carriage (`ws.rs`) |
//! | `state.rs` | the proxy state every session shares: routes, backends, caps, log limiters, counters |
//! | `session/` | one connection's stages: `opening.rs` (handshake), `login.rs` (route, forwarding, backend), `online.rs` (encryption and `hasJoined`), `status.rs` (server-list pings); `mod.rs` holds what they share (the `Player` trait, the `Session` context), `serve.rs` runs them in order and logs the end |
//! | `tcp.rs` | a player on plain TCP (with the optional PROXY header) |
//! | `ws/` | WebSocket listeners: the HTTP upgrade and real address (`upgrade.rs`), the session's view of a WebSocket player (`player.rs`) |
//! | `ops.rs` | the `[metrics]` HTTP listener: `/metrics`, `/healthz`, `/readyz` |
//! | `server.rs` | listeners, accept loops, connection caps, graceful shutdown |
//!
//! # Data path
//!
//! 1. `server.rs` accepts a connection, takes a `max_connections` permit and a `max_handshaking` slot, and
//!    runs the transport setup under the handshake deadline: the PROXY header (`tcp.rs`), or TLS and the HTTP
//!    upgrade (`ws/upgrade.rs`), which also yield the player's real address (`trusted.rs`).
//! 2. `session/` reads the handshake through the `session::Player` trait: for a WebSocket player, the
//!    Binary messages' payloads are the stream (`relay/ws.rs` is where a message becomes stream bytes, in every
//!    stage). It routes by the handshake host, authenticates in online mode, connects the backend
//!    (`backend.rs`) with the handshake, Login Start and what followed in one write, and sends the backend's
//!    first answer to the player.
//! 3. `relay/` relays bytes both ways until either side ends: `relay/tcp.rs` for TCP players,
//!    `relay/ws.rs` for WebSocket players, both through the same `relay::Direction` (count, scan, CFB8),
//!    write-stall policy and shutdown injection.

mod auth;
mod backend;
pub mod config;
mod limits;
mod metrics;
mod ops;
mod proxy_header;
mod rate;
mod relay;
mod server;
mod session;
mod state;
mod tcp;
pub mod tls;
mod transfer;
pub mod trusted;
mod workers;
mod ws;

#[cfg(fuzzing)]
pub mod fuzz;

pub use auth::AuthError;
pub use config::Config;
pub use server::{ReloadError, ReloadHandle, Server, ServerError, ServerStats, StatsHandle};
