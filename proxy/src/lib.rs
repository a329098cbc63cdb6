//! # moonbridge-proxy
//!
//! The MoonBridge proxy daemon as a library: [`Config`] describes listeners (`tcp`, `ws`, `wss`), backends,
//! routing, authentication and limits; [`Server::bind`] checks it into [`config::Settings`], opens the
//! listeners, and [`Server::run`] serves players until a shutdown signal. The `moonbridge` binary is a thin
//! command line around these calls.
//!
//! # Words
//!
//! One word per concept, in the code and in `docs/` alike:
//!
//! | word | means | not |
//! |---|---|---|
//! | backend | a 1.7.10 server behind the proxy (`[[backends]]`) | "server" alone, which is ambiguous |
//! | switch | sending a player from one backend to another inside one instance (a server transfer: `transfer/`, `docs/servers.md`) | move |
//! | network | the MoonBridge instances that share a Redis (`[network]`, `network/`, `docs/network.md`) | the backends |
//! | instance | one `moonbridge` process of a network | node, peer (the instance link's other end is a "peer instance") |
//! | move | taking a player from a draining instance to another instance (carriage `move`/`moving`/`moved`) | switch |
//! | drain | an instance that stops by moving its players away first (`network/moves.rs`) | shutdown (which only disconnects) |
//! | resume | a carriage v2 session going on over a new WebSocket after a lost one | reconnect |
//! | frame | one length-prefixed Minecraft packet on the stream (a WebSocket frame is always called so) | message (a WebSocket message) |
//! | tick | the game's 50 ms step; one client-library WebSocket message per tick | batch (the proxy's read batch) |
//! | lane | one of the two queues of a player's clientbound frames: urgent or bulk (`relay/lanes.rs`, `docs/lanes.md`) | priority, class |
//! | window | carriage v2's bound on bytes sent past the client's last `ack` (`moonbridge_protocol::pace`) | congestion window (the kernel's) |
//!
//! `tests/tests/words.rs` checks the table and that the switch docs and code never say "move" or "network" for
//! a switch or the backends.
//!
//! # Layout
//!
//! Every file, bottom-up: each uses only files listed above it (`tests/tests/layout.rs` reads this table and
//! fails on a file missing from it or a use of a file listed below).
//!
//! | file | what |
//! |---|---|
//! | `transport.rs` | [`config::Transport`]: how players reach a listener (`tcp`, `ws`, `wss`); `Carriage`: how a WebSocket carries their stream |
//! | `trusted.rs` | trusted proxies and the real-IP header, for the PROXY header and the HTTP header alike |
//! | `http_head.rs` | the one HTTP/1.1 request-head reader, for the WebSocket upgrade and the operations listener |
//! | `proxy_header.rs` | PROXY v1/v2 headers in (load balancers) and v2 out (`proxy-protocol` forwarding) |
//! | `limits.rs` | the `max_handshaking` slots and rate-limited log lines |
//! | `workers.rs` | the thread-per-core runtime: worker threads, each session on the least-loaded one |
//! | `wire.rs` | what every stage does to a socket alike: read sizes, the write-stall bound, linger, scratch reads |
//! | `labels.rs` | the metrics' label values, one closed enum per label (a value outside its set does not compile) |
//! | `unfollowed.rs` | Play streams the proxy stopped following: their counter and one rate-limited line each |
//! | `metrics.rs` | the Prometheus metrics (one registry per proxy; resolved series on the hot paths) |
//! | `metrics/network.rs` | `[network]`'s metrics (`moonbridge_network_*`), registered when the instance joins a network |
//! | `delivery.rs` | a player's delivery figures: its lanes' queues, carriage v2's measured rate, round trip and window |
//! | `tls.rs` | rustls for `wss`, certificate reload |
//! | `config/limits.rs` | `[limits]`: what one process allows, with defaults |
//! | `config/schema.rs` | the TOML file ([`Config`]) as written: every section and key, defaults |
//! | `config/errors.rs` | [`config::ConfigProblem`] (one per key) and [`config::ConfigError`] |
//! | `config/settings.rs` | the checked, typed [`config::Settings`]; the sections used as checked, once ([`config::Tunables`]) |
//! | `config/check.rs` | the checks that build the settings, every problem reported at once |
//! | `config/mod.rs` | reading and parsing a file |
//! | `config/tests.rs` | the configuration's unit tests |
//! | `rate.rs` | per-address rate limits (token buckets, a bounded table) |
//! | `auth.rs` | online mode: the RSA key pair and the session server's `hasJoined` |
//! | `backend.rs` | a backend and connecting to it |
//! | `move_state.rs` | a move's state from end to end (`MoveState`), the ticket's request (`Take`) and the answer |
//! | `ws_link/state.rs` | the link's state, one enum: its closing handshake, a fault's close code, a broken stream |
//! | `ws_link/mod.rs` | the player's WebSocket (`WsLink`, a closed type): its events, carriage v2 control, keepalive, close, counts |
//! | `ws_link/codec.rs` | its codec: frames in (decode, inflate, close codes for bad input), whole frames out |
//! | `ws_link/stage.rs` | the link before the relay: stream reads, waits that keep the player's WebSocket alive |
//! | `ws_link/tests.rs` | the link's unit tests: its events with real frames through an in-memory stream |
//! | `resume.rs` | carriage v2 resume: the table of resumable sessions and move tickets (single-use tokens, typed entries), a new link handed to its session |
//! | `players.rs` | this proxy's players in Play (`BungeeCord` requests' counts and lists, the network's as last read) and commands between their sessions |
//! | `players/action.rs` | an operator's action on players (`Action`: kick, send, message), carried out here |
//! | `players/tests.rs` | the player table's unit tests |
//! | `network.rs` | `[network]` as the core sees it: the `Network` interface (admit a name, carry a resume, fetch a move's state), claims, link errors |
//! | `state.rs` | the proxy state every session shares: routes, backends, caps, log limiters, counters |
//! | `transfer/common.rs` | the switchboard's context, what a relay hands over (`Handed`), outbox and framing helpers, which frames it looks into |
//! | `transfer/forge.rs` | the Forge handshake across a switch: steps, record, replay |
//! | `transfer/keep_alive.rs` | whose Keep Alive an answer is; the proxy's own while no backend serves the player |
//! | `transfer/backend.rs` | a backend connection in Play; dialling and logging in a new one |
//! | `transfer/switch.rs` | a switch in progress |
//! | `transfer/board.rs` | the switchboard, run inside the relay: frame by frame, runs of frames passed whole |
//! | `transfer/frames.rs` | what the switchboard does to the frames it looks into, each direction |
//! | `transfer/cutover.rs` | a switch's course: request, joining, cutover, failure |
//! | `transfer/pieces.rs` | frames that pass the switchboard in pieces (however large), and what waits behind them |
//! | `transfer/moving.rs` | a player moved between instances: what a draining switchboard hands over, the switchboard a moved player starts with |
//! | `transfer/requests.rs` | the `BungeeCord` channel's requests besides `Connect`, commands from other sessions |
//! | `transfer/mod.rs` | whether a session can be moved; the `Ticket` a movable relay keeps for its switchboard |
//! | `relay/lanes.rs` | the relay's clientbound queue (`Outbox`): urgent and bulk lanes, their bound, carriage v2's window, the figures |
//! | `relay/flow.rs` | a relay direction (`relay::Flow`: counting, frame boundaries, the transfer watch, CFB8) and the batch read |
//! | `relay/handover.rs` | the relay's backend side: the backend connection, or the switchboard in its place |
//! | `relay/mod.rs` | how a relay ends, the shutdown step shared by all transports, and the backend's close after it |
//! | `relay/tcp.rs` | the TCP relay loop |
//! | `relay/v2.rs` | what carriage v2 adds to the WebSocket relay loop: retention, acks, the resume registration |
//! | `relay/ws.rs` | the one WebSocket relay loop, for carriage v1 and v2 |
//! | `relay/move_out.rs` | the draining side of a move: `move`, the hand-over of the state, `stay` or the end |
//! | `relay/ws_resume.rs` | the carriage v2 session over links: connected stretches, parking, resumes, takeover |
//! | `relay/flow/tests.rs` | a relay direction's unit tests |
//! | `session/mod.rs` | what a connection's stages share: the `Player` trait, the `Session` context |
//! | `session/opening.rs` | the handshake |
//! | `session/online.rs` | online mode: encryption and `hasJoined` |
//! | `session/status.rs` | server-list pings |
//! | `session/login.rs` | route, forwarding, backend, the hand-over to the relay |
//! | `session/arrive.rs` | a player moving here from a draining instance: the state fetched, the second login |
//! | `session/serve.rs` | runs the stages in order and logs the session's end |
//! | `listen/upgrade.rs` | the HTTP upgrade and the player's real address |
//! | `listen/tcp.rs` | a player on plain TCP: the optional PROXY header, the session's view of the socket |
//! | `listen/carry.rs` | a resume carried to the instance that holds its session: the copy over the opened instance link |
//! | `listen/opened.rs` | what a connection's transport setup opens (`Opening`: a session, a move's arrival, a resume), dispatched in `listen/conn.rs` |
//! | `listen/ws.rs` | a player on a WebSocket: TLS for `wss`, one WebSocket setup for `ws` and `wss`, resume dispatch |
//! | `listen/conn.rs` | an accepted connection: its transport setup under the handshake deadline, then the session |
//! | `listen/mod.rs` | player listeners, accept loops, connection caps |
//! | `network/claims.rs` | one session per name: the scripts that release and renew the logins' claims in Redis |
//! | `network/link.rs` | `[network]`'s instance links: the mutually authenticated opening, requests, the TLS client, a carried resume's link |
//! | `network/entries.rs` | what an instance reads back from Redis, checked: signed instance entries (`IP:port` only), bounded player records, bad entries counted and logged |
//! | `network/moves.rs` | moving a player off a draining instance: the drain's pacing, the state over an instance link |
//! | `network/dial.rs` | how an instance reaches Redis: `redis_url`'s host, or the master Redis Sentinel names; what a failed round trip's error means |
//! | `network/redis.rs` | `RedisNetwork`: leases in Redis, the other instances' players, one session per name |
//! | `network/claimed.rs` | what an instance does about its players' name claims: renews them, obeys a login of the network, takes back forged ones |
//! | `network/renewal.rs` | one lease renewal: this instance's entries written, the others' read entry by entry |
//! | `network/openings.rs` | what a connection to `peer_bind` may hold before it authenticates: pending openings bounded per source and in all |
//! | `network/peer.rs` | the instance-link listener: kicks, operators' actions, resumes carried here, move requests; the address others dial |
//! | `memory.rs` | freed memory back to the operating system after sessions end (glibc `malloc_trim`) |
//! | `admin/token.rs` | the admin API's bearer token: read once, compared in constant time |
//! | `admin/row.rs` | one player as the admin API lists it (`PlayerRow`) |
//! | `admin/client.rs` | `moonbridge ctl`'s client of the admin API, and its table of players |
//! | `admin.rs` | the admin API: the network's players, kick, send, message, drain (JSON) |
//! | `ops.rs` | the `[metrics]` HTTP listener: `/metrics`, `/healthz`, `/readyz`, the admin API under `/admin/` |
//! | `server.rs` | the server's lifecycle: binding, graceful shutdown, reload, stats |
//! | `fuzz.rs` | entry points for the cargo-fuzz targets (`--cfg fuzzing` only) |
//! | `main.rs` | the `moonbridge` binary: command line, logging, signals |
//!
//! # Data path
//!
//! 1. `listen/` accepts a connection, takes a `max_connections` permit and a `max_handshaking` slot, and
//!    runs the transport setup under the handshake deadline (`listen/conn.rs`): the PROXY header
//!    (`listen/tcp.rs`), or TLS and the HTTP upgrade (`listen/ws.rs`, `listen/upgrade.rs`), which also yield
//!    the player's real address (`trusted.rs`). What the setup opened (`listen/opened.rs`: a new session, a
//!    player moving here, a resume handed to its session or carried to another instance) is dispatched in
//!    one place, `listen/conn.rs`.
//! 2. `session/` reads the handshake through the `session::Player` trait: for a WebSocket player, the
//!    Binary messages' payloads are the stream (`ws_link/` is where a message becomes stream bytes, in every
//!    stage). It routes by the handshake host, authenticates in online mode, connects the backend
//!    (`backend.rs`) with the handshake, Login Start and what followed in one write, and sends the backend's
//!    first answer to the player.
//! 3. `relay/` relays bytes both ways until either side ends: `relay/tcp.rs` for TCP players,
//!    `relay/ws.rs` (one loop, with carriage v2's part from `relay/v2.rs`) for WebSocket players, both through
//!    the same `relay::Flow` (count, scan, CFB8), write-stall policy and shutdown injection.
//! 4. `transfer/` takes over a session whose backend sends the player on (BungeeCord `Connect`, a fallback, a
//!    failover when the backend is lost) or asks the proxy something (the `BungeeCord` channel's requests): the
//!    relay's backend side becomes the switchboard, on the same sockets.
//!
//! `[network]` stands on top of this path, not in it: the core asks the `network::Network` port (`network.rs`,
//! an optional handle in the state) to admit a name, carry a resume or fetch a move's state; the Redis leases,
//! the instance links and the drain (`network/`) are opened by `server.rs` alone.

pub mod admin;
mod auth;
mod backend;
pub mod config;
mod delivery;
mod http_head;
mod labels;
mod limits;
mod listen;
mod memory;
mod metrics;
mod move_state;
mod network;
mod ops;
mod players;
mod proxy_header;
mod rate;
mod relay;
mod resume;
mod server;
mod session;
mod state;
pub mod tls;
mod transfer;
mod transport;
pub mod trusted;
mod unfollowed;
mod wire;
mod workers;
mod ws_link;

#[cfg(fuzzing)]
pub mod fuzz;

pub use auth::AuthError;
pub use config::Config;
pub use network::NetworkError;
pub use server::{ReloadError, ReloadHandle, Server, ServerError, ServerStats, StatsHandle};
