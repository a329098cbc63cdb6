//! The Forge 1.7.10 handshake across a switch: the server's steps as the client sees them, the current
//! backend's recorded handshake, and its replay when a switch fails after the client's handshake was reset.

use bytes::BytesMut;
use moonbridge_protocol::codec::Reader;
use moonbridge_protocol::frame::{FrameDecoder, MAX_FRAME_LEN};
use moonbridge_protocol::transfer::{fml, is_channel};

use super::common::encode;

/// The server's messages of a Forge 1.7.10 handshake, in order (`FMLHandshakeServerState`: ServerHello,
/// ModList, ModIdData (or its `FML|MP` parts), then HandshakeAck 2 and 3). The client's state follows from the
/// last one it received (`FMLHandshakeClientState`): after ServerHello it waits for a ModList, after ModList for
/// the ModIdData; once a ModIdData is in, the new server's registry is applied.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord)]
pub(super) enum ServerStep {
    None,
    ServerHello,
    ModList,
    Registry,
    Acks,
}

impl ServerStep {
    /// The step of a server `FML|HS` or `FML|MP` message (`body`: the Plugin Message fields).
    pub(super) fn of(body: &[u8]) -> Self {
        if is_channel(body, "FML|MP") {
            return Self::Registry;
        }
        match fml_data(body).and_then(|d| d.first().copied()) {
            Some(fml::SERVER_HELLO) => Self::ServerHello,
            Some(fml::MOD_LIST) => Self::ModList,
            Some(fml::MOD_ID_DATA) => Self::Registry,
            Some(fml::HANDSHAKE_ACK) => Self::Acks,
            _ => Self::None,
        }
    }
}

/// The current backend's Forge handshake and whether a replay of it runs.
pub(super) struct Forge {
    /// The current backend's Forge handshake (its `FML|HS`, `FML|MP` and `REGISTER` messages before its Join
    /// Game, at most [`fml::MAX_RECORD_BYTES`]): replayed to the client when a switch fails after the client's
    /// handshake was reset, so it can stay. `None` when it was too large.
    pub(super) record: Option<BytesMut>,
    /// A replay runs: the client's `FML|HS` answers are the proxy's to swallow, up to its final HandshakeAck.
    pub(super) replaying: bool,
}

impl Forge {
    /// A client's `FML|HS` answer during a replay (`body`: the Plugin Message fields): its final HandshakeAck
    /// (phase COMPLETE) ends the replay.
    pub(super) fn swallow_answer(&mut self, body: &[u8]) {
        if fml_ack_phase(body) == Some(FML_CLIENT_COMPLETE) {
            self.replaying = false;
        }
    }

    /// After a reset, the client runs the new server's handshake. It can stay only if it has not applied the
    /// new registry yet (`delivered`: the last server step it got): it then gets the rest of the current
    /// server's handshake, from the message its state waits for. `None` when it cannot be brought back.
    pub(super) fn rest_after(&self, delivered: ServerStep) -> Option<BytesMut> {
        let record = self.record.as_ref()?;
        match delivered {
            ServerStep::ServerHello => replay_from(record, ServerStep::ModList),
            ServerStep::ModList => replay_from(record, ServerStep::Registry),
            _ => None,
        }
    }
}

/// Ordinal of the Forge 1.7.10 client's `COMPLETE` state (`FMLHandshakeClientState`: START 0, HELLO 1,
/// WAITINGSERVERDATA 2, WAITINGSERVERCOMPLETE 3, PENDINGCOMPLETE 4, COMPLETE 5): the phase of its last
/// HandshakeAck.
const FML_CLIENT_COMPLETE: u8 = 5;

/// The data of a Plugin Message (`body`: its fields), if it parses.
fn fml_data(body: &[u8]) -> Option<&[u8]> {
    let mut r = Reader::new(body);
    r.string(moonbridge_protocol::packets::MAX_CHANNEL_CHARS, "channel").ok()?;
    moonbridge_protocol::array_length::read_data(&mut r, "data").ok()
}

/// The frames of a recorded handshake from the first message of step `from` on (`REGISTER` left out), or
/// `None` when the record has no such message.
fn replay_from(record: &BytesMut, from: ServerStep) -> Option<BytesMut> {
    let mut frames = FrameDecoder::new(MAX_FRAME_LEN);
    frames.queue_slice(record);
    let mut out = BytesMut::new();
    while let Ok(Some(f)) = frames.try_next_frame() {
        if is_channel(&f.body, "REGISTER") || (out.is_empty() && ServerStep::of(&f.body) != from) {
            continue;
        }
        encode(&mut out, f.id, &f.body);
    }
    (!out.is_empty()).then_some(out)
}

/// The phase of an `FML|HS` HandshakeAck (discriminator 0xFF, then the sender's state ordinal), if the body is
/// one.
fn fml_ack_phase(body: &[u8]) -> Option<u8> {
    match fml_data(body)? {
        [fml::HANDSHAKE_ACK, phase, ..] => Some(*phase),
        _ => None,
    }
}

/// The fields of the `FML|HS` HandshakeReset Plugin Message.
pub(super) fn handshake_reset_fields() -> Vec<u8> {
    let mut fields = Vec::with_capacity(10);
    let _ = fml::handshake_reset().encode_fields(&mut fields);
    fields
}
