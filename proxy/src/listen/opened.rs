//! What a connection's transport setup opens ([`Opening`]), which one place (`listen/conn.rs`) dispatches.

use std::net::SocketAddr;

use moonbridge_protocol::ws::v2::Control;

use super::carry::Carried;

/// What an accepted connection turned out to be once its transport setup (PROXY header, TLS, HTTP upgrade,
/// carriage v2's first message) was done.
pub(crate) enum Opening<P> {
    /// A new session: the player's handshake comes next. With the player's real address.
    Session(P, SocketAddr),
    /// A player moving here from a draining instance (its `moving` request): the session starts from the state
    /// fetched there (docs/network.md, "Drain").
    Move(P, SocketAddr, Box<Control>),
    /// A resume request, handed to its session here or refused (closed with its code, counted): nothing more
    /// for this connection.
    Resumed,
    /// A resume carried to the instance that holds its session: the copy to run.
    Carried(Carried),
}
