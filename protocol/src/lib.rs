//! # moonbridge-protocol
//!
//! Sans-IO building blocks shared by the MoonBridge proxy and client library: no sockets, no runtime, no
//! clocks. Everything here takes bytes and returns values or bytes, so it is tested with byte-exact vectors.
//!
//! - [`varint`]: VarInt / VarLong with distinct "incomplete" and "too long" errors.
//! - [`frame`]: the 1.7.10 frame decoder (length-checked before buffering), encoder and boundary scanner.
//! - [`array_length`]: the Plugin Message data length in its vanilla, Forge and Hodgepodge forms.
//! - [`packets`]: the protocol 5 packets MoonBridge reads or writes (handshake, login, status, a few play).
//! - [`handshake`]: the Forge marker and the routing key of a handshake address.
//! - [`legacy`]: pre-1.7 `0xFE` server-list pings and their `0xFF` answers.
//! - [`forwarding`]: offline UUIDs and BungeeCord IP forwarding.
//! - [`crypto`]: the login server hash and the AES-128-CFB8 stream cipher.
//! - [`transfer`]: moving a player between backends: entity-id rewriting, the BungeeCord `Connect` request,
//!   the Forge `FML|HS` HandshakeReset and the world reset.
//! - [`lanes`]: the clientbound urgent and bulk lanes: which frames may overtake, the per-player queue.
//! - [`pace`]: carriage v2's window: bytes in flight past the client's last `ack`, sized from the measured
//!   delivery rate and round trip.
//! - [`ws`]: WebSocket carriage rules: close codes, subprotocol, the keepalive schedule; [`ws::frame`], the
//!   server side of RFC 6455 framing (streaming, bounded).
//!
//! The wire facts come from the protocol 5 (1.7.6–1.7.10) packet tables.

pub mod array_length;
pub mod codec;
pub mod crypto;
pub mod error;
pub mod forwarding;
pub mod frame;
pub mod handshake;
pub mod lanes;
pub mod legacy;
pub mod pace;
pub mod packets;
pub mod transfer;
pub mod varint;
pub mod ws;

pub use error::{DecodeError, EncodeError, FrameError};
pub use frame::{Frame, FrameDecoder, FrameScanner, MAX_FRAME_LEN};
pub use varint::{VarInt, VarIntDecodeError, VarLong};

#[cfg(test)]
pub(crate) mod tests {
    /// Case file `HS`: handshake for `mc.example.com:25565`, next state login, with the Forge marker.
    pub(crate) const HS: &[u8] = &[
        0x19, 0x00, 0x05, 0x13, b'm', b'c', b'.', b'e', b'x', b'a', b'm', b'p', b'l', b'e', b'.', b'c', b'o', b'm',
        0x00, b'F', b'M', b'L', 0x00, 0x63, 0xdd, 0x02,
    ];
    /// Case file `LS`: Login Start for `Steve`.
    pub(crate) const LS: &[u8] = &[0x07, 0x00, 0x05, b'S', b't', b'e', b'v', b'e'];
}
