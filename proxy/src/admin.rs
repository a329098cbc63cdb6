//! The admin API on the operations listener (`[metrics] admin_token_file`; docs/operations.md, "Admin API"),
//! and `moonbridge ctl`'s client of it ([`client`]).
//!
//! Every request carries `Authorization: Bearer <token>` (compared in constant time; a missing or wrong one
//! gets `401` and one rate-limited log line). Answers are JSON; errors are `{"error": "<text>"}`.
//!
//! | request | body | answer |
//! |---|---|---|
//! | `GET /admin/players[?backend=B&instance=I]` | | `200 {"players": [`[`PlayerRow`]`, …]}`, the whole network's, by name |
//! | `GET /admin/players/<name>` | | `200` one [`PlayerRow`], or `404` |
//! | `GET /admin/delivery` | | `200 {"players": [`[`DeliveryRow`]`, …]}`: this instance's players' lanes, rate, round trip and window |
//! | `POST /admin/kick` | `{"player": N, "reason": T}` | `200` [`Reach`], or `404` when no instance holds the player |
//! | `POST /admin/send` | `{"player": N, "to": B}` or `{"from": B, "to": B}` | `200` [`Reach`]; `400` for an unknown `to` |
//! | `POST /admin/message` | `{"text": T}` or `{"text": T, "backend": B}` | `200` [`Reach`] |
//! | `POST /admin/drain` | `{"exit": bool}` (default `true`) | `202 {"draining": true}`: what SIGTERM does; with `"exit": false` the process stays up afterwards |
//!
//! Actions on players of other instances go over the instance links ([`crate::network::Network::act`]), which
//! are authenticated with the network's secret: one instance's token acts on the whole network.

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::LazyLock;
use std::time::Duration;

use tracing::warn;

pub mod client;
mod row;
mod token;

pub use row::{DeliveryRow, PlayerRow};
pub(crate) use token::AdminToken;
pub use token::TokenError;

use crate::limits::LogLimiter;
use crate::players::now_ms;
pub use crate::players::{Action, ActionError, Reach, MAX_NAME_BYTES, MAX_TEXT_BYTES};
use crate::state::ProxyState;
pub use crate::transport::{Carriage, Transport};

/// Longest request body the admin API reads, in bytes: 8,192 (an action is at most about 1.2 KiB).
pub const MAX_BODY_BYTES: usize = 8192;

/// How long an action waits for each other instance's answer over its link: 1.5 seconds (the instances are
/// asked at once; the operations listener gives a request 4 seconds in all, its head included).
pub const ASK_TIMEOUT: Duration = Duration::from_millis(1500);

/// Instances an action could not ask: 5 lines per 10 seconds, each with the count suppressed.
static ASK_LOG: LazyLock<LogLimiter> = LazyLock::new(|| LogLimiter::new(5, Duration::from_secs(10)));

/// Refused admin requests (no token, a wrong one): 5 lines per 10 seconds, each with the count suppressed.
static REFUSED_LOG: LazyLock<LogLimiter> = LazyLock::new(|| LogLimiter::new(5, Duration::from_secs(10)));

/// A request to the admin API, as the operations listener read it.
pub(crate) struct ApiRequest<'a> {
    pub(crate) method: &'a str,
    /// The path, without the query.
    pub(crate) path: &'a str,
    /// The query string's pairs (percent-decoded).
    pub(crate) query: HashMap<String, String>,
    /// The `Authorization` header's value.
    pub(crate) authorization: Option<&'a [u8]>,
    pub(crate) body: &'a [u8],
    pub(crate) peer: SocketAddr,
}

/// An answer: the status, its reason phrase and the JSON body.
pub(crate) struct ApiAnswer {
    pub(crate) status: u16,
    pub(crate) reason: &'static str,
    pub(crate) body: String,
}

impl ApiAnswer {
    fn json(status: u16, reason: &'static str, body: &impl serde::Serialize) -> Self {
        let body = serde_json::to_string(body).unwrap_or_else(|_| "{}".into());
        Self { status, reason, body: body + "\n" }
    }

    fn error(status: u16, reason: &'static str, text: &str) -> Self {
        Self::json(status, reason, &serde_json::json!({ "error": text }))
    }
}

/// Answers `request` (a path under `/admin/`) once `token` admits it.
pub(crate) async fn answer(state: &ProxyState, token: &AdminToken, request: ApiRequest<'_>) -> ApiAnswer {
    if !token.admits(request.authorization) {
        if let Some(suppressed) = REFUSED_LOG.allow() {
            let given = if request.authorization.is_some() { "a wrong token" } else { "no token" };
            warn!(peer = %request.peer, suppressed, "admin API request refused: {given}");
        }
        return ApiAnswer::error(401, "Unauthorized", "a bearer token is needed (metrics.admin_token_file)");
    }
    let verb = request.path.strip_prefix("/admin/").unwrap_or_default();
    match (request.method, verb) {
        ("GET", "players") => players(state, &request.query),
        ("GET", name) if name.starts_with("players/") => {
            let name = name.strip_prefix("players/").unwrap_or_default();
            let name = percent_encoding::percent_decode_str(name).decode_utf8_lossy();
            match rows(state).into_iter().find(|r| r.name.eq_ignore_ascii_case(&name)) {
                Some(row) => ApiAnswer::json(200, "OK", &row),
                None => ApiAnswer::error(404, "Not Found", &format!("no player named {name} in the network")),
            }
        }
        ("GET", "delivery") => delivery(state),
        ("POST", "drain") => drain(state, request.body),
        ("POST", verb @ ("kick" | "send" | "message")) => match action(verb, request.body) {
            Ok(action) => act(state, &action).await,
            Err(why) => ApiAnswer::error(400, "Bad Request", &why),
        },
        (_, "players" | "delivery" | "drain" | "kick" | "send" | "message") => {
            ApiAnswer::error(405, "Method Not Allowed", "players, delivery: GET; kick, send, message, drain: POST")
        }
        _ => ApiAnswer::error(404, "Not Found", "try /admin/players, delivery, kick, send, message or drain"),
    }
}

/// Every player of the network as last known (this instance's now, the others' as of the last renewal).
fn rows(state: &ProxyState) -> Vec<PlayerRow> {
    let here = state.network().map(|n| n.id().to_string());
    let now = now_ms();
    state
        .players
        .everyone()
        .into_iter()
        .map(|(instance, r)| PlayerRow {
            name: r.name,
            uuid: r.uuid,
            instance: instance.or_else(|| here.clone()),
            backend: r.server,
            address: r.address,
            transport: r.transport,
            carriage: r.carriage,
            session_seconds: r.since_ms.map(|t| now.saturating_sub(t) / 1000),
        })
        .collect()
}

/// This instance's players' delivery figures.
fn delivery(state: &ProxyState) -> ApiAnswer {
    let now = std::time::Instant::now();
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let rows: Vec<DeliveryRow> = state
        .players
        .local_stops()
        .into_iter()
        .map(|(name, transport, carriage, stop)| {
            let d = &stop.delivery;
            let (urgent_bytes, urgent_age) = d.urgent.read(now);
            let (bulk_bytes, bulk_age) = d.bulk.read(now);
            let window = d.window.load(Ordering::Relaxed);
            let paced = |v: u64| (window > 0).then_some(v);
            DeliveryRow {
                name,
                transport,
                carriage,
                lanes: d.lanes.load(Ordering::Relaxed),
                urgent_bytes,
                urgent_age_ms: ms(urgent_age),
                bulk_bytes,
                bulk_age_ms: ms(bulk_age),
                urgent_max_wait_ms: d.urgent_max_us.load(Ordering::Relaxed) as f64 / 1000.0,
                rate_bytes_per_second: paced(d.rate.load(Ordering::Relaxed)),
                rtt_ms: paced(d.rtt_us.load(Ordering::Relaxed)).map(|us| us as f64 / 1000.0),
                window_bytes: paced(window),
                in_flight_bytes: paced(d.in_flight.load(Ordering::Relaxed)),
            }
        })
        .collect();
    ApiAnswer::json(200, "OK", &serde_json::json!({ "players": rows }))
}

fn players(state: &ProxyState, query: &HashMap<String, String>) -> ApiAnswer {
    let (backend, instance) = (query.get("backend"), query.get("instance"));
    let rows: Vec<PlayerRow> = rows(state)
        .into_iter()
        .filter(|r| backend.is_none_or(|b| &r.backend == b))
        .filter(|r| instance.is_none_or(|i| r.instance.as_ref() == Some(i)))
        .collect();
    ApiAnswer::json(200, "OK", &serde_json::json!({ "players": rows }))
}

/// The action `verb` with the body's fields, checked.
fn action(verb: &str, body: &[u8]) -> Result<Action, String> {
    let mut fields: serde_json::Map<String, serde_json::Value> =
        serde_json::from_slice(body).map_err(|e| format!("the body must be a JSON object: {e}"))?;
    fields.insert("action".into(), verb.into());
    let action: Action = serde_json::from_value(fields.into()).map_err(|e| format!("{verb}: {e}"))?;
    action.check().map_err(|e| e.to_string())?;
    Ok(action)
}

/// Carries out `action` here and on the instances that hold the players it is for.
async fn act(state: &ProxyState, action: &Action) -> ApiAnswer {
    if let Action::Send { to, .. } = action {
        if state.live().backend_named(to).is_none() {
            return ApiAnswer::error(400, "Bad Request", &format!("no backend named {to}"));
        }
    }
    let mut reach = state.players.act(action);
    let net = state.network();
    match (action.player(), net) {
        // Here: done (a name is held by one instance).
        (Some(_), _) if reach.done + reach.missed > 0 => {}
        (Some(name), None) => return not_found(name),
        (Some(name), Some(net)) => {
            let everyone = state.players.everyone();
            let holder = everyone.into_iter().find(|(_, r)| r.name.eq_ignore_ascii_case(name)).and_then(|(i, _)| i);
            let Some(id) = holder else { return not_found(name) };
            reach = reach.and(ask(net.as_ref(), &id, action).await);
        }
        (None, Some(net)) => {
            // Every other instance at once, each bounded by the link's deadline.
            let mut asks = tokio::task::JoinSet::new();
            for id in net.peers() {
                let (net, action) = (std::sync::Arc::clone(net), action.clone());
                asks.spawn(async move { ask(net.as_ref(), &id, &action).await });
            }
            while let Some(r) = asks.join_next().await {
                reach = reach.and(r.unwrap_or(Reach { unreached: 1, ..Reach::default() }));
            }
        }
        (None, None) => {}
    }
    ApiAnswer::json(200, "OK", &reach)
}

fn not_found(name: &str) -> ApiAnswer {
    ApiAnswer::error(404, "Not Found", &format!("no player named {name} in the network"))
}

/// Asks instance `id` within [`ASK_TIMEOUT`]; one it cannot ask counts as unreached.
async fn ask(net: &dyn crate::network::Network, id: &str, action: &Action) -> Reach {
    let Some(asked) = net.act(id, action) else { return Reach { unreached: 1, ..Reach::default() } };
    match tokio::time::timeout(ASK_TIMEOUT, asked).await {
        Ok(Ok(reach)) => reach,
        failed => {
            let why = match failed {
                Ok(Err(e)) => e.to_string(),
                _ => format!("no answer within {} ms", ASK_TIMEOUT.as_millis()),
            };
            if let Some(suppressed) = ASK_LOG.allow() {
                warn!(instance = %id, suppressed, "admin {}: the instance could not be asked ({why})", action.verb());
            }
            Reach { unreached: 1, ..Reach::default() }
        }
    }
}

/// `POST /admin/drain`.
fn drain(state: &ProxyState, body: &[u8]) -> ApiAnswer {
    #[derive(serde::Deserialize)]
    #[serde(deny_unknown_fields)]
    struct Drain {
        #[serde(default = "yes")]
        exit: bool,
    }
    fn yes() -> bool {
        true
    }
    let body = if body.trim_ascii().is_empty() { b"{}".as_slice() } else { body };
    let Ok(Drain { exit }) = serde_json::from_slice(body) else {
        return ApiAnswer::error(400, "Bad Request", "drain takes {\"exit\": true|false}");
    };
    // The latest request decides, until the drain ends (a drain already under way after SIGTERM exits anyway).
    state.stay_after_drain.store(!exit, Ordering::Relaxed);
    state.stop_requested.cancel();
    ApiAnswer::json(202, "Accepted", &serde_json::json!({ "draining": true, "exit": exit }))
}
