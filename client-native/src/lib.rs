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

mod connect;
mod connection;
pub mod discovery;
pub mod error;
#[allow(unsafe_code)]
pub mod ffi;
// The JNI exports are `pub extern` for the linker, not for Rust callers.
#[allow(unsafe_code, unreachable_pub)]
mod jni;
pub mod options;
pub mod target;

pub use connection::{Connection, Stats, MAX_INBOUND_BYTES, MAX_WS_MESSAGE_BYTES, WRITE_STALL_TIMEOUT};
pub use error::ClientError;
pub use options::Options;

/// The library version, as `NativeTransport.nativeVersion()` reports it.
pub const VERSION: &str = env!("CARGO_PKG_VERSION");
