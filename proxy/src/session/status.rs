//! Server-list pings: the 1.7 status exchange (Status Request/Response, Ping/Pong), answered by the proxy
//! with the backend's cached Status Response, and legacy `0xFE` pings, relayed to the default backend with
//! its answer cached; both answered with the offline message when the backend cannot be reached.

use bytes::BytesMut;
use moonbridge_protocol::handshake::HostField;
use moonbridge_protocol::legacy::{self, LegacyPing, LegacyStatus};
use moonbridge_protocol::packets::{Handshake, Packet, StatusPing, StatusRequest, StatusResponse, PROTOCOL_VERSION};
use moonbridge_protocol::FrameDecoder;
use std::net::SocketAddr;
use std::time::{Duration, Instant};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::{timeout, timeout_at};
use tracing::debug;

use super::opening::{next_frame, OpeningError};
use super::{Finish, Player, Session, Summary};
use crate::backend::{Backend, CachedLegacy, CachedStatus};
use crate::state::Live;

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

/// Largest Status Response frame read from a backend, in bytes: the JSON string's limit (32,767 characters,
/// at most 3 bytes each in UTF-8) with its length prefixes and packet id. A favicon within the protocol's limit
/// passes intact.
const MAX_STATUS_FRAME: usize = 3 * 32_767 + 8;

/// Longest status fetch from a backend (connect and exchange): 3 seconds, or less when
/// `backend_connect_timeout_seconds` / `login_timeout_seconds` are shorter. A ping that finds a fetch under
/// way waits at most this long (plus a second) for it, then gets the offline answer: a hung backend costs a
/// server-list ping a few seconds, never `login_timeout_seconds`.
const STATUS_FETCH_TIMEOUT: Duration = Duration::from_secs(3);

/// What the server list shows for `backend` when it cannot be reached: `[status] offline_message`, or
/// "Server NAME is unreachable".
fn offline_message(live: &Live, backend: &Backend) -> String {
    live.tunables.status.offline_message.clone().unwrap_or_else(|| format!("Server {} is unreachable", backend.name))
}

/// A server-list status exchange: the proxy answers the player's Status Request with the routed backend's
/// Status Response (cached for `[status] cache_seconds`, fetched with the player's handshake when stale) or,
/// when the backend cannot be reached, with the offline message; it answers Ping with Pong itself.
pub(super) async fn status<P: Player>(s: Session<'_, P>, handshake: Handshake, rest: BytesMut) -> Summary {
    let (player, info, live) = (s.player, s.info, s.live);
    let host = HostField::parse(&handshake.server_address);
    let Some(backend) = live.route(&host.routing_key()) else {
        let msg = format!("Unknown server address {}", host.hostname);
        answer_status(player, live, &fallback_status_json(&msg), rest).await;
        return Summary::new(format!("status: no route for host {:?}", host.hostname));
    };
    let mut summary = Summary::new("");
    summary.backend = Some(backend.name.clone());
    let (json, how) = backend_status(backend, &handshake, info.client, live).await;
    let json = match json {
        Ok(json) => {
            summary.reason = format!("status answered ({how})");
            json
        }
        Err(e) => {
            debug!(backend = %backend.name, "status: {e}");
            summary.reason = format!("status answered by proxy ({how}): {e}");
            fallback_status_json(&offline_message(live, backend))
        }
    };
    // `[network]`: the server list shows the network's players, not the one backend's.
    let json = match s.state.network() {
        Some(_) => with_online(&json, s.state.players.count(None)),
        None => json,
    };
    answer_status(player, live, &json, rest).await;
    summary
}

/// `json` (a Status Response) with `players.online` set to `online`; unchanged when it has no `players`
/// object (or is not JSON).
fn with_online(json: &str, online: usize) -> String {
    let Ok(mut value) = serde_json::from_str::<serde_json::Value>(json) else { return json.to_string() };
    match value.get_mut("players").and_then(serde_json::Value::as_object_mut) {
        Some(players) => {
            players.insert("online".into(), online.into());
            value.to_string()
        }
        None => json.to_string(),
    }
}

/// The backend's Status Response JSON, from the cache or fetched now, and which of the two.
async fn backend_status(
    backend: &Backend,
    handshake: &Handshake,
    client: SocketAddr,
    live: &Live,
) -> (Result<String, String>, &'static str) {
    let ttl = Duration::from_secs(live.tunables.status.cache_seconds);
    if ttl.is_zero() {
        return (fetch_status(backend, handshake, client, live).await, "fetched");
    }
    // One fetch at a time per backend: pings that arrive meanwhile wait for it (bounded) and share its answer.
    let Ok(mut cached) = timeout(STATUS_FETCH_TIMEOUT + Duration::from_secs(1), backend.status.lock()).await else {
        return (Err("a status fetch from this backend is taking too long".into()), "waited");
    };
    if let Some(c) = cached.as_ref().filter(|c| c.at.elapsed() < ttl) {
        return (c.json.clone(), "cached");
    }
    let json = fetch_status(backend, handshake, client, live).await;
    *cached = Some(CachedStatus { at: Instant::now(), json: json.clone() });
    (json, "fetched")
}

/// One status exchange with the backend: the player's handshake and a Status Request, then its Status
/// Response (within `login_timeout_seconds`); no Ping is sent.
async fn fetch_status(
    backend: &Backend,
    handshake: &Handshake,
    client: SocketAddr,
    live: &Live,
) -> Result<String, String> {
    let connect_timeout = live.tunables.limits.backend_connect_timeout().min(STATUS_FETCH_TIMEOUT);
    let mut stream = backend.connect(client, connect_timeout).await.map_err(|e| e.to_string())?;
    let mut out = BytesMut::new();
    // Always as a 1.7.10 client asks (protocol 5), whatever the pinging client said: the answer is shared.
    let handshake = Handshake { protocol_version: PROTOCOL_VERSION, ..handshake.clone() };
    handshake.encode_frame(&mut out).map_err(|e| format!("status handshake: {e}"))?;
    StatusRequest.encode_frame(&mut out).map_err(|e| format!("status request: {e}"))?;
    backend.metrics.to_backend.inc_by(out.len() as u64);
    let exchange = async {
        stream.write_all(&out).await.map_err(|e| format!("backend write failed: {e}"))?;
        let mut dec = FrameDecoder::new(MAX_STATUS_FRAME);
        loop {
            if let Some(frame) = dec.try_next_frame().map_err(|e| format!("bad status answer: {e}"))? {
                let response: StatusResponse = frame.decode().map_err(|e| format!("bad Status Response: {e}"))?;
                return Ok(response.json);
            }
            let mut buf = BytesMut::with_capacity(8 * 1024);
            match stream.read_buf(&mut buf).await {
                Ok(0) => return Err("backend closed before its Status Response".to_string()),
                Ok(n) => backend.metrics.to_player.inc_by(n as u64),
                Err(e) => return Err(format!("backend read failed: {e}")),
            }
            dec.queue_bytes(buf);
        }
    };
    let within = live.tunables.limits.login_timeout().min(STATUS_FETCH_TIMEOUT);
    match timeout(within, exchange).await {
        Ok(r) => r,
        Err(_) => Err(format!("no Status Response within {} ms", within.as_millis())),
    }
}

/// Answers the player's Status Request with `json` and its Ping with Pong (within `handshake_timeout_seconds`),
/// then closes.
async fn answer_status<P: Player>(player: &mut P, live: &Live, json: &str, rest: BytesMut) {
    let mut dec = FrameDecoder::new(64);
    dec.queue_bytes(rest);
    let exchange = async {
        loop {
            let frame = next_frame(player, &mut dec).await?;
            let mut out = BytesMut::new();
            if frame.id == StatusRequest::ID {
                let _ = StatusResponse { json: json.to_string() }.encode_frame(&mut out);
                player.send(&out).await?;
            } else {
                let ping: StatusPing = frame.decode()?;
                let _ = ping.encode_frame(&mut out);
                player.send(&out).await?;
                return Ok::<(), OpeningError>(());
            }
        }
    };
    let _ = timeout(live.tunables.limits.handshake_timeout(), exchange).await;
    player.finish(Finish::Normal).await;
}

/// A legacy (pre-1.7) server-list ping, relayed to the default backend within the handshake deadline, or
/// answered here with the backend's unavailability.
pub(super) async fn legacy_ping<P: Player>(
    s: Session<'_, P>,
    ping: LegacyPing,
    raw: BytesMut,
    deadline: tokio::time::Instant,
) -> Summary {
    let (player, info, live) = (s.player, s.info, s.live);
    let Some(backend) = live.default_backend() else {
        player.finish(Finish::Normal).await;
        return Summary::new("legacy ping: no backend configured");
    };
    let ask = async {
        let mut stream = backend.connect(info.client, live.tunables.limits.backend_connect_timeout()).await.ok()?;
        stream.write_all(&raw).await.ok()?;
        let mut answer = BytesMut::with_capacity(512);
        loop {
            if let Ok(Some((_, n))) = legacy::decode_kick(&answer) {
                answer.truncate(n);
                return Some(answer.to_vec());
            }
            if answer.len() >= MAX_LEGACY_ANSWER_BYTES {
                return None;
            }
            if stream.read_buf(&mut answer).await.ok()? == 0 {
                return None;
            }
        }
    };
    let relayed = timeout_at(deadline, async {
        let ttl = Duration::from_secs(live.tunables.status.cache_seconds);
        if ttl.is_zero() {
            return ask.await;
        }
        // Cached per answer format, like the status: one exchange per interval, whoever asks.
        let slot = usize::from(!matches!(ping, LegacyPing::V1_3));
        let mut cached = backend.legacy.lock().await;
        if let Some(c) = cached.get(slot).and_then(Option::as_ref).filter(|c| c.at.elapsed() < ttl) {
            return c.answer.clone();
        }
        let answer = ask.await;
        if let Some(c) = cached.get_mut(slot) {
            *c = Some(CachedLegacy { at: Instant::now(), answer: answer.clone() });
        }
        answer
    })
    .await
    .ok()
    .flatten();
    let (answer, how) = match relayed {
        Some(a) => (a, "legacy ping answered with the backend's answer"),
        None => {
            let status = LegacyStatus {
                protocol: 127,
                version: "1.7.10".into(),
                motd: offline_message(live, backend),
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_network_count_replaces_the_backends() {
        let backend = r#"{"version":{"name":"1.7.10","protocol":5},"players":{"max":20,"online":1},"description":"x"}"#;
        let v: serde_json::Value = serde_json::from_str(&with_online(backend, 7)).unwrap();
        assert_eq!((v["players"]["online"].as_u64(), v["players"]["max"].as_u64()), (Some(7), Some(20)));
        assert_eq!(v["description"], "x");
        assert_eq!(with_online(r#"{"description":"x"}"#, 7), r#"{"description":"x"}"#);
        assert_eq!(with_online("not json", 7), "not json");
    }
}
