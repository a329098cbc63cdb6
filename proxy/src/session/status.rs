//! Server-list pings: the 1.7 status exchange (Status Request/Response, Ping/Pong) and legacy `0xFE` pings,
//! relayed to a backend, or answered by the proxy when the backend cannot be reached.

use bytes::BytesMut;
use moonbridge_protocol::handshake::HostField;
use moonbridge_protocol::legacy::{self, LegacyPing, LegacyStatus};
use moonbridge_protocol::packets::{Handshake, Packet, StatusPing, StatusRequest, StatusResponse, PROTOCOL_VERSION};
use moonbridge_protocol::FrameDecoder;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{timeout, timeout_at};
use tracing::debug;

use super::opening::{next_frame, OpeningError};
use super::{Finish, Player, Session, Summary};
use crate::relay::RelayStart;
use crate::state::ProxyState;

/// Largest legacy answer read from a backend (the `0xFF` text length is a `u16` of UTF-16 units).
const MAX_LEGACY_ANSWER_BYTES: usize = 3 + 2 * 65_535;

/// The status JSON the proxy answers with when the backend cannot.
fn fallback_status_json(message: &str) -> String {
    serde_json::json!({
        "version": { "name": "1.7.10", "protocol": PROTOCOL_VERSION },
        "players": { "max": 0, "online": 0 },
        "description": { "text": message },
    })
    .to_string()
}

/// A server-list status exchange, relayed to the routed backend (or answered here when it is unreachable).
pub(super) async fn status<P: Player>(s: Session<'_, P>, handshake: Handshake, rest: BytesMut) -> Summary {
    let (player, info, state, shutdown) = (s.player, s.info, s.state, s.shutdown);
    let host = HostField::parse(&handshake.server_address);
    let Some(backend) = state.route(&host.routing_key()) else {
        let msg = format!("Unknown server address {}", host.hostname);
        answer_status_locally(player, state, &msg, rest).await;
        return Summary::new(format!("status: no route for host {:?}", host.hostname));
    };
    let mut summary = Summary::new("");
    summary.backend = Some(backend.name.clone());
    let stream = match backend.connect(info.client, state.limits.backend_connect_timeout()).await {
        Ok(s) => s,
        Err(e) => {
            debug!(backend = %backend.name, "status: {e}");
            answer_status_locally(player, state, &format!("Server {} is unreachable", backend.name), rest).await;
            summary.reason = format!("status answered by proxy: {e}");
            return summary;
        }
    };
    let mut opening = BytesMut::new();
    if handshake.encode_frame(&mut opening).is_err() {
        summary.reason = "status handshake could not be re-encoded".into();
        return summary;
    }
    opening.extend_from_slice(&rest);
    let up = opening.len() as u64;
    let mut stream = stream;
    if let Err(e) = stream.write_all(&opening).await {
        summary.reason = format!("backend write failed: {e}");
        return summary;
    }
    // A status exchange is short: the whole of it gets `login_timeout_seconds`.
    let report = match timeout(
        state.limits.login_timeout(),
        player.relay(
            stream,
            RelayStart {
                shutdown,
                scanner: None,
                up,
                down: 0,
                write_stall: state.limits.write_stall_timeout(),
                cipher: None,
                metrics: &backend.metrics,
            },
        ),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => {
            player.finish(Finish::Normal).await;
            summary.reason = "status exchange timeout".into();
            return summary;
        }
    };
    summary.up = report.up;
    summary.down = report.down;
    summary.reason = format!("status: {}", report.end);
    summary
}

/// Answers Status Request and Ping itself, then closes.
async fn answer_status_locally<P: Player>(player: &mut P, state: &ProxyState, message: &str, rest: BytesMut) {
    let mut dec = FrameDecoder::new(64);
    dec.queue_bytes(rest);
    let json = fallback_status_json(message);
    let exchange = async {
        loop {
            let frame = next_frame(player, &mut dec).await?;
            let mut out = BytesMut::new();
            if frame.id == StatusRequest::ID {
                let _ = StatusResponse { json: json.clone() }.encode_frame(&mut out);
                player.send(&out).await?;
            } else {
                let ping: StatusPing = frame.decode()?;
                let _ = ping.encode_frame(&mut out);
                player.send(&out).await?;
                return Ok::<(), OpeningError>(());
            }
        }
    };
    let _ = timeout(state.limits.handshake_timeout(), exchange).await;
    player.finish(Finish::BackendUnavailable).await;
}

/// A legacy (pre-1.7) server-list ping, relayed to the default backend within the handshake deadline, or
/// answered here with the backend's unavailability.
pub(super) async fn legacy_ping<P: Player>(
    s: Session<'_, P>,
    ping: LegacyPing,
    raw: BytesMut,
    deadline: tokio::time::Instant,
) -> Summary {
    let (player, info, state) = (s.player, s.info, s.state);
    let Some(backend) = state.default_backend() else {
        player.finish(Finish::Normal).await;
        return Summary::new("legacy ping: no backend configured");
    };
    let relayed = timeout_at(deadline, async {
        let mut stream = backend.connect(info.client, state.limits.backend_connect_timeout()).await.ok()?;
        stream.write_all(&raw).await.ok()?;
        let mut answer = BytesMut::with_capacity(512);
        loop {
            if let Ok(Some((_, n))) = legacy::decode_kick(&answer) {
                answer.truncate(n);
                return Some(answer);
            }
            if answer.len() >= MAX_LEGACY_ANSWER_BYTES {
                return None;
            }
            if stream.read_buf(&mut answer).await.ok()? == 0 {
                return None;
            }
        }
    })
    .await
    .ok()
    .flatten();
    let (answer, how) = match relayed {
        Some(a) => (a.to_vec(), "legacy ping relayed"),
        None => {
            let status = LegacyStatus {
                protocol: 127,
                version: "1.7.10".into(),
                motd: format!("Server {} is unreachable", backend.name),
                online: 0,
                max: 0,
            };
            (legacy::encode_kick(&ping, &status), "legacy ping answered by proxy")
        }
    };
    let _ = player.send(&answer).await;
    player.finish(Finish::Normal).await;
    let mut summary = Summary::new(how);
    summary.backend = Some(backend.name.clone());
    summary
}
