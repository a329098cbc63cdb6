//! # moonbridge-client
//!
//! The MoonBridge client transport for Minecraft 1.7.10: one library, used from Rust ([`Connection`]), from
//! C (the `mb_*` functions, header `include/moonbridge_client.h`) and from the JVM
//! (`dev.moonbridge.client.NativeTransport`).
//!
//! - `tcp://host:port`: plain TCP with TCP_NODELAY.
//! - `ws://host[:port]/path` and `wss://host[:port]/path`: WebSocket carriage version 1 (binary messages
//!   carry the Minecraft byte stream), over TLS 1.2/1.3 with rustls (the *ring* provider, which cross-builds
//!   for every platform of the mod jar) for `wss`, offering subprotocol
//!   `moonbridge.v1`.
//! - Per-tick coalescing: bytes sent between two [`Connection::end_tick`] calls leave as one message.
//! - An I/O thread per connection does all network work, so a stalled game thread never stalls Pings.
//!
//! Options are a JSON object ([`Options`]); errors are [`ClientError`], each with a C return code.
//!
//! # Layout
//! - `connection.rs`: [`Connection`], the game-thread API (memory only, never the network);
//! - `shared.rs`: the state between the game thread and the I/O thread (batches, inbound bytes, counters);
//! - `io/`: the I/O thread (connect, write batches, read, keepalive, close): the shared waits (`wait.rs`), the
//!   `tcp://` loop (`tcp.rs`), the WebSocket loop (`ws.rs`) and carriage v2 resume (`resume.rs`);
//! - `connect.rs` and `target.rs`: DNS, TCP, TLS and the WebSocket upgrade; URL parsing;
//! - `registry.rs`: the handle registry shared by the two foreign boundaries, `ffi.rs` (C) and `jni.rs`
//!   (Java), each a thin wrapper with one panic boundary;
//! - `options.rs`, `error.rs`, `discovery.rs`: options JSON, errors and result codes, DNS TXT route
//!   discovery.

mod connect;
mod connection;
pub mod discovery;
pub mod error;
#[allow(unsafe_code)]
pub mod ffi;
mod io;
// The JNI exports are `pub extern` for the linker, not for Rust callers.
#[allow(unsafe_code, unreachable_pub)]
mod jni;
pub mod options;
mod registry;
mod shared;
pub mod target;

pub use connection::Connection;
pub use error::ClientError;
pub use io::{MAX_WS_MESSAGE_BYTES, WRITE_STALL_TIMEOUT};
pub use options::Options;
pub use shared::{Stats, MAX_INBOUND_BYTES};

/// The library version, as `NativeTransport.nativeVersion()` reports it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
