//! WebSocket listeners (`ws`, `wss`): the HTTP upgrade and the player's real address ([`upgrade`]), and the
//! session's view of a WebSocket player ([`player`]). The carriage itself, where messages become stream bytes,
//! is [`crate::relay::ws`].

pub(crate) mod player;
pub(crate) mod upgrade;
