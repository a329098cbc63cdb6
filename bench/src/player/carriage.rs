//! The WebSocket carriage a raw player speaks (docs/carriage.md): v1 (plain Binary messages), v2 (resumable,
//! acknowledged) or v2 with zstd, which compresses each message with the client library's own code
//! (`moonbridge_protocol::ws::compress::Contexts`).

use clap::ValueEnum;
use moonbridge_protocol::FrameDecoder;

/// The WebSocket carriage the players speak (docs/carriage.md).
#[derive(Clone, Copy, Debug, PartialEq, Eq, ValueEnum, serde::Serialize)]
pub enum Carriage {
    /// `moonbridge.v1`: plain Binary messages (what a WebSocket bridge speaks).
    #[value(name = "v1")]
    #[serde(rename = "v1")]
    V1,
    /// `moonbridge.v2`: resumable, acknowledged, not compressed (the client library with `compress: false`).
    #[value(name = "v2")]
    #[serde(rename = "v2")]
    V2,
    /// `moonbridge.v2.zstd`: carriage v2 with zstd (the client library's defaults).
    #[value(name = "v2.zstd")]
    #[serde(rename = "v2.zstd")]
    V2Zstd,
}

impl Carriage {
    /// The subprotocol offered.
    pub fn subprotocol(self) -> &'static str {
        match self {
            Self::V1 => "moonbridge.v1",
            Self::V2 => "moonbridge.v2",
            Self::V2Zstd => moonbridge_protocol::ws::compress::SUBPROTOCOL_V2_ZSTD,
        }
    }
}

/// A player's side of the carriage: wraps stream bytes into Binary payloads and back, and says when to
/// acknowledge (v2).
pub struct Carrier {
    v2: bool,
    zstd: Option<moonbridge_protocol::ws::compress::Contexts>,
    /// Stream bytes received, and acknowledged, so far.
    received: u64,
    acked: u64,
    inflated: Vec<u8>,
}

/// Acknowledge after this many stream bytes (the client library's rule).
const ACK_EVERY: u64 = 64 * 1024;
/// The most stream bytes one received message may inflate to (the client library's limit: 16 MiB).
const MAX_INFLATED: usize = 16 << 20;

impl Carrier {
    pub fn new(carriage: Carriage) -> Self {
        let zstd = (carriage == Carriage::V2Zstd).then(|| {
            moonbridge_protocol::ws::compress::Contexts::new(moonbridge_protocol::ws::compress::DEFAULT_LEVEL)
        });
        Self { v2: carriage != Carriage::V1, zstd, received: 0, acked: 0, inflated: Vec::new() }
    }

    /// The Binary payload that carries `stream`.
    pub fn wrap(&mut self, stream: Vec<u8>) -> anyhow::Result<Vec<u8>> {
        let Some(z) = self.zstd.as_mut() else { return Ok(stream) };
        let mut out = Vec::with_capacity(stream.len() / 2 + 16);
        z.compress(&stream, &mut out)?;
        Ok(out)
    }

    /// The stream bytes a received Binary payload carries, queued into `dec`.
    pub fn unwrap_into(&mut self, payload: &[u8], dec: &mut FrameDecoder) -> anyhow::Result<()> {
        let n = match self.zstd.as_mut() {
            None => {
                dec.queue_slice(payload);
                payload.len()
            }
            Some(z) => {
                self.inflated.clear();
                z.queue(payload)?;
                while z.has_output() {
                    z.inflate(&mut self.inflated, MAX_INFLATED, MAX_INFLATED)?;
                }
                z.end_message();
                dec.queue_slice(&self.inflated);
                self.inflated.len()
            }
        };
        self.received += n as u64;
        Ok(())
    }

    /// The `ack` to send now, if any: every [`ACK_EVERY`] bytes, or on `tick` when the count moved (v2).
    pub fn ack(&mut self, tick: bool) -> Option<String> {
        let due = self.received - self.acked >= ACK_EVERY || (tick && self.received > self.acked);
        (self.v2 && due).then(|| {
            self.acked = self.received;
            format!("ack {}", self.received)
        })
    }
}
