//! # moonbridge-proxy
//!
//! The MoonBridge proxy daemon as a library: [`Config`] describes listeners (`tcp`, `ws`, `wss`), backends,
//! routing, authentication and limits; [`Server::bind`] checks it into [`config::Settings`], opens the
//! listeners, and [`Server::run`] serves players until a shutdown signal. The `moonbridge` binary is a thin
//! command line around these calls.
//!
//! # Layout
//!
//! Every file, bottom-up: each uses only files listed above it (`tests/tests/layout.rs` reads this table and
//! fails on a file missing from it or a use of a file listed below).
//!
//! | file | what |
//! |---|---|
//! | `transport.rs` | [`config::Transport`]: how players reach a listener (`tcp`, `ws`, `wss`) |
//! | `trusted.rs` | trusted proxies and the real-IP header, for the PROXY header and the HTTP header alike |
//! | `http_head.rs` | the one HTTP/1.1 request-head reader, for the WebSocket upgrade and the operations listener |
//! | `proxy_header.rs` | PROXY v1/v2 headers in (load balancers) and v2 out (`proxy-protocol` forwarding) |
//! | `limits.rs` | the `max_handshaking` slots and rate-limited log lines |
//! | `workers.rs` | the thread-per-core runtime: worker threads, each session on the least-loaded one |
//! | `metrics.rs` | the Prometheus metrics (one registry per proxy; resolved series on the hot paths) |
//! | `tls.rs` | rustls for `wss`, certificate reload |
//! | `config/mod.rs` | the TOML file ([`Config`]) as written: every section and key, defaults |
//! | `config/settings.rs` | the checked, typed [`config::Settings`] built from it, every problem reported at once |
//! | `rate.rs` | per-address rate limits (token buckets, a bounded table) |
//! | `auth.rs` | online mode: the RSA key pair and the session server's `hasJoined` |
//! | `backend.rs` | a backend and connecting to it |
//! | `relay/resume.rs` | carriage v2 resume: the table of resumable sessions (single-use tokens), a new link handed to its session |
//! | `relay/mod.rs` | the data path once logged in: the policy shared by all transports (counting, frame boundaries, CFB8, write stall, shutdown injection) |
//! | `relay/tcp.rs` | the TCP relay loop |
//! | `relay/ws.rs` | the WebSocket link (`WsLink`: the codec used from the first byte) and the carriage v1 relay loop |
//! | `relay/ws_resume.rs` | the carriage v2 relay: acks, retention, resume and takeover |
//! | `state.rs` | the proxy state every session shares: routes, backends, caps, log limiters, counters |
//! | `transfer.rs` | server transfers: the switchboard behind a loopback hop (BungeeCord `Connect`, fallback) |
//! | `session/mod.rs` | what a connection's stages share: the `Player` trait, the `Session` context |
//! | `session/opening.rs` | the handshake |
//! | `session/online.rs` | online mode: encryption and `hasJoined` |
//! | `session/status.rs` | server-list pings |
//! | `session/login.rs` | route, forwarding, backend, the hand-over to the relay |
//! | `session/serve.rs` | runs the stages in order and logs the session's end |
//! | `tcp.rs` | a player on plain TCP (with the optional PROXY header) |
//! | `ws/mod.rs` | WebSocket listeners |
//! | `ws/upgrade.rs` | the HTTP upgrade and the player's real address |
//! | `ws/player.rs` | the session's view of a WebSocket player |
//! | `ops.rs` | the `[metrics]` HTTP listener: `/metrics`, `/healthz`, `/readyz` |
//! | `server.rs` | listeners, accept loops, connection caps, graceful shutdown, reload, stats |
//! | `fuzz.rs` | entry points for the cargo-fuzz targets (`--cfg fuzzing` only) |
//! | `main.rs` | the `moonbridge` binary: command line, logging, signals |
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
//!    `relay/ws.rs` for WebSocket players, both through the same `relay::Flow` (count, scan, CFB8),
//!    write-stall policy and shutdown injection.

mod auth;
mod backend;
pub mod config;
mod http_head;
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
mod transport;
pub mod trusted;
mod workers;
mod ws;

#[cfg(fuzzing)]
pub mod fuzz;

pub use auth::AuthError;
pub use config::Config;
pub use server::{ReloadError, ReloadHandle, Server, ServerError, ServerStats, StatsHandle};
