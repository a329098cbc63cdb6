//! The operations listener (`[metrics] bind`): Prometheus metrics and health checks over HTTP/1.1.
//!
//! - `GET /metrics`: every metric in the Prometheus text format 0.0.4 ([`crate::metrics`]).
//! - `GET /healthz`: `200 ok` while the process serves (liveness).
//! - `GET /readyz`: `200 ready` when the proxy should receive players, else `503` with one line per reason
//!   (readiness). The rule: every player listener is bound (true once the listener runs), shutdown has not
//!   begun, and at least one backend answered its latest TCP connect (so one backend down does not take every
//!   replica out of a load balancer; its players still get the server list's offline message). The body names
//!   every unreachable backend either way, and with `[network]` a Redis it cannot reach, with the cause (the
//!   instance stays ready: it serves alone). A backend's latest connect is a player's, or one the check makes
//!   itself (closed without a byte, within [`PROBE_TIMEOUT`] at most) when the latest failed or is older than
//!   [`READY_PROBE_AFTER`]: a failed backend is probed again at every check, so readiness returns as soon as
//!   it does.
//! - `POST /drain`: `202 stopping`, and the proxy stops as on SIGTERM (with `[network]` and a live peer: a drain,
//!   docs/network.md); from a loopback address only (`403` otherwise), as the port may be reachable by a
//!   Prometheus server.
//!
//! - `/admin/…`: the admin API ([`crate::admin`]), with `[metrics] admin_token_file` (404 without).
//!
//! Other paths get 404, other methods 405. One request per connection (`Connection: close`); the request head
//! must fit in [`crate::http_head::MAX_REQUEST_HEAD`] bytes and [`crate::http_head::MAX_HEADERS`] headers, a
//! body (`Content-Length`) in [`MAX_BODY_BYTES`] (413 otherwise).
//!
//! The probes always answer, whatever other clients of the port do (a flood of slow connections cannot get a
//! pod restarted by failing its liveness probe):
//! - at most [`MAX_OPS_CONNECTIONS`] connections are served at once, each with [`REQUEST_TIMEOUT`] for its
//!   request head;
//! - a connection over that takes one of [`MAX_BUSY_CONNECTIONS`] busy slots, whose request head must arrive
//!   within [`BUSY_REQUEST_TIMEOUT`]: `/healthz` is answered there as usual and `/readyz` from what is known
//!   (no new backend probes), any other request gets `503 busy` once its head is read (so the client reads an
//!   answer, not a connection reset);
//! - beyond both, a connection gets `503 busy` at once, after what it already sent is read.

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::debug;

use crate::admin::{AdminToken, ApiRequest, MAX_BODY_BYTES};
use crate::http_head::parse_head;
use crate::state::ProxyState;

/// A backend whose latest connect is older than this is probed by `/readyz`, in seconds: 10.
pub(crate) const READY_PROBE_AFTER: Duration = Duration::from_secs(10);
/// Time allowed for writing an answer: 30 seconds (an admin API player list of a large network through a tunnel).
pub(crate) const WRITE_TIMEOUT: Duration = Duration::from_secs(30);
/// Time allowed for a request head to arrive: 2 seconds.
pub(crate) const REQUEST_TIMEOUT: Duration = Duration::from_secs(2);
/// Longest readiness probe of one backend: 3 seconds (or `backend_connect_timeout_seconds` when shorter).
pub(crate) const PROBE_TIMEOUT: Duration = Duration::from_secs(3);
/// Requests served at once: 256.
pub(crate) const MAX_OPS_CONNECTIONS: usize = 256;
/// Connections over [`MAX_OPS_CONNECTIONS`] that are still read, each for at most [`BUSY_REQUEST_TIMEOUT`]
/// (probes answered, other requests `503 busy`): 1,024.
pub(crate) const MAX_BUSY_CONNECTIONS: usize = 1024;
/// Time allowed for the request head of a connection in a busy slot: 500 ms (a probe sends its request in one
/// packet).
pub(crate) const BUSY_REQUEST_TIMEOUT: Duration = Duration::from_millis(500);

/// Serves the operations endpoints on `listener` until `stop` is cancelled (see the module documentation for
/// the slots).
pub(crate) async fn serve(
    listener: TcpListener,
    state: Arc<ProxyState>,
    admin: Option<Arc<AdminToken>>,
    stop: CancellationToken,
) {
    let slots = Arc::new(Semaphore::new(MAX_OPS_CONNECTIONS));
    let busy_slots = Arc::new(Semaphore::new(MAX_BUSY_CONNECTIONS));
    loop {
        let accepted = tokio::select! {
            a = listener.accept() => a,
            () = stop.cancelled() => return,
        };
        let Ok((stream, peer)) = accepted else {
            // Out of descriptors, most likely: the player listeners log that; wait and try again.
            tokio::time::sleep(Duration::from_millis(100)).await;
            continue;
        };
        let (permit, busy) = match Arc::clone(&slots).try_acquire_owned() {
            Ok(p) => (p, false),
            Err(_) => match Arc::clone(&busy_slots).try_acquire_owned() {
                Ok(p) => (p, true),
                Err(_) => {
                    refuse_now(&stream);
                    continue;
                }
            },
        };
        let (state, admin) = (Arc::clone(&state), admin.clone());
        tokio::spawn(async move {
            let _permit = permit;
            let head_within = if busy { BUSY_REQUEST_TIMEOUT } else { REQUEST_TIMEOUT };
            let mut stream = stream;
            let served = answer(&mut stream, &state, admin.as_deref(), head_within, busy, peer);
            let reply = match tokio::time::timeout(REQUEST_TIMEOUT * 2, served).await {
                Ok(reply) => reply,
                Err(e) => {
                    debug!(%peer, "operations request abandoned: {e}");
                    return;
                }
            };
            // The answer on its own deadline: a player list of many MiB through an SSH tunnel takes a while.
            let write = async {
                stream.write_all(&reply.bytes).await?;
                stream.shutdown().await
            };
            if tokio::time::timeout(WRITE_TIMEOUT, write).await.is_ok() && reply.unread_body {
                // What the client still sends is read and dropped (briefly), so closing does not reset the
                // connection under the answer (413).
                let mut sink = [0u8; 4096];
                let drain = async { while matches!(stream.read(&mut sink).await, Ok(n) if n > 0) {} };
                let _ = tokio::time::timeout(BUSY_REQUEST_TIMEOUT, drain).await;
            }
        });
    }
}

/// `503 busy` for a connection over every slot, after reading (and dropping) what it already sent, so closing
/// does not reset the connection under the answer. Plain non-blocking syscalls on the socket: a socket just
/// accepted has no readiness recorded yet, so tokio's `try_read`/`try_write` would not even try.
fn refuse_now(stream: &TcpStream) {
    use std::io::{Read, Write};
    let sock = socket2::SockRef::from(stream);
    let mut sink = [0u8; 1024];
    while matches!((&*sock).read(&mut sink), Ok(n) if n > 0) {}
    let _ = (&*sock).write(&busy());
}

/// The `503 busy` answer.
fn busy() -> Vec<u8> {
    response(503, "Service Unavailable", "text/plain", "busy\n")
}

/// A whole answer, and whether the client may still be sending a body the listener did not read.
struct Reply {
    bytes: Vec<u8>,
    unread_body: bool,
}

impl From<Vec<u8>> for Reply {
    fn from(bytes: Vec<u8>) -> Self {
        Self { bytes, unread_body: false }
    }
}

/// Reads one request (within `head_within`) and makes its answer; in a busy slot only the probes are answered,
/// other paths get `503 busy`.
async fn answer(
    stream: &mut TcpStream,
    state: &ProxyState,
    admin: Option<&AdminToken>,
    head_within: Duration,
    busy_slot: bool,
    peer: SocketAddr,
) -> Reply {
    let local = peer.ip().is_loopback();
    let request = match read_request(stream, head_within).await {
        Ok(r) => r,
        Err(ReadError::TooLarge) => {
            let bytes = response(413, "Content Too Large", "text/plain", "body too large\n");
            return Reply { bytes, unread_body: true };
        }
        Err(ReadError::Bad) => return response(400, "Bad Request", "text/plain", "bad request\n").into(),
    };
    let (method, path) = (request.method.as_str(), request.path.as_str());
    let reply = match (method, path) {
        ("GET", "/healthz") => response(200, "OK", "text/plain", "ok\n"),
        ("GET", "/readyz") => {
            // In a busy slot from what is known, without connecting to backends (a flood must not turn into
            // backend probes).
            let (reasons, unreachable) = readiness(state, !busy_slot).await;
            let details: String = unreachable.iter().map(|u| format!("{u}\n")).collect();
            if reasons.is_empty() {
                response(200, "OK", "text/plain", &format!("ready\n{details}"))
            } else {
                response(503, "Service Unavailable", "text/plain", &format!("{}\n{details}", reasons.join("\n")))
            }
        }
        _ if busy_slot => busy(),
        // The same stop as SIGTERM (with `[network]` and a live peer, a drain): from this host only.
        ("POST", "/drain") if local => {
            state.stop_requested.cancel();
            response(202, "Accepted", "text/plain", "stopping\n")
        }
        ("POST", "/drain") => response(403, "Forbidden", "text/plain", "from this host only\n"),
        (_, "/drain") => response(405, "Method Not Allowed", "text/plain", "POST only\n"),
        ("GET", "/metrics") => response(200, "OK", "text/plain; version=0.0.4; charset=utf-8", &state.metrics.render()),
        (_, p) if p.starts_with("/admin/") => match admin {
            None => {
                response(404, "Not Found", "text/plain", "not found: the admin API is off (metrics.admin_token_file)\n")
            }
            Some(token) => {
                let query = form_urlencoded::parse(request.query.as_bytes()).into_owned().collect();
                let authorization = request.authorization.as_deref();
                let api = ApiRequest { method, path, query, authorization, body: &request.body, peer };
                let a = crate::admin::answer(state, token, api).await;
                // RFC 6750 §3: a 401 names the scheme the client must use.
                let extra = if a.status == 401 { "WWW-Authenticate: Bearer\r\n" } else { "" };
                response_with(a.status, a.reason, "application/json", extra, &a.body)
            }
        },
        (_, "/metrics" | "/healthz" | "/readyz") => response(405, "Method Not Allowed", "text/plain", "GET only\n"),
        _ => response(
            404,
            "Not Found",
            "text/plain",
            "not found: try /metrics, /healthz, /readyz, POST /drain or /admin/\n",
        ),
    };
    reply.into()
}

/// A request as the listener read it.
struct Request {
    method: String,
    /// The path without the query.
    path: String,
    /// What follows `?`, or empty.
    query: String,
    authorization: Option<Vec<u8>>,
    /// At most [`MAX_BODY_BYTES`] (`Content-Length`).
    body: Vec<u8>,
}

/// Why a request could not be read.
enum ReadError {
    /// Malformed, too large a head, closed or late.
    Bad,
    /// A `Content-Length` over [`MAX_BODY_BYTES`].
    TooLarge,
}

/// A request head and its body (`Content-Length`, at most [`MAX_BODY_BYTES`]), read within `within` and the
/// limits of [`parse_head`].
async fn read_request(stream: &mut TcpStream, within: Duration) -> Result<Request, ReadError> {
    let mut buf = Vec::with_capacity(1024);
    let read = async {
        let mut chunk = [0u8; 1024];
        let mut head: Option<(Request, usize, usize)> = None;
        loop {
            if let Some((_, start, len)) = &head {
                if buf.len() >= start + len {
                    let (mut request, start, len) = head.take().ok_or(ReadError::Bad)?;
                    request.body = buf.get(start..start + len).ok_or(ReadError::Bad)?.to_vec();
                    return Ok(request);
                }
            }
            let n = stream.read(&mut chunk).await.map_err(|_| ReadError::Bad)?;
            if n == 0 {
                return Err(ReadError::Bad);
            }
            buf.extend_from_slice(chunk.get(..n).ok_or(ReadError::Bad)?);
            if head.is_none() {
                match parse_head(&buf, read_head) {
                    Ok(Some(Ok(whole))) => head = Some(whole),
                    Ok(Some(Err(e))) => return Err(e),
                    Ok(None) => {}
                    Err(_) => return Err(ReadError::Bad),
                }
            }
        }
    };
    tokio::time::timeout(within, read).await.map_err(|_| ReadError::Bad)?
}

/// A parsed head: the request without its body, where the body starts and its length.
fn read_head(req: &httparse::Request<'_, '_>, head_len: usize) -> Result<(Request, usize, usize), ReadError> {
    let header = |name: &str| req.headers.iter().find(|h| h.name.eq_ignore_ascii_case(name)).map(|h| h.value);
    let length = match header("content-length") {
        None => 0,
        Some(v) => std::str::from_utf8(v).ok().and_then(|v| v.trim().parse::<usize>().ok()).ok_or(ReadError::Bad)?,
    };
    if length > MAX_BODY_BYTES {
        return Err(ReadError::TooLarge);
    }
    let (path, query) = req.path.ok_or(ReadError::Bad)?.split_once('?').unwrap_or((req.path.unwrap_or("/"), ""));
    let request = Request {
        method: req.method.ok_or(ReadError::Bad)?.to_string(),
        path: path.to_string(),
        query: query.to_string(),
        authorization: header("authorization").map(<[u8]>::to_vec),
        body: Vec::new(),
    };
    Ok((request, head_len, length))
}

/// Why the proxy is not ready (empty when it is) and the unreachable backends (reported either way); with
/// `probe`, stale backends are probed first.
async fn readiness(state: &ProxyState, probe: bool) -> (Vec<String>, Vec<String>) {
    let mut reasons = Vec::new();
    if state.draining.load(Ordering::Relaxed) {
        reasons.push("shutting down".to_string());
    }
    let live = state.live();
    let timeout = live.tunables.limits.backend_connect_timeout().min(PROBE_TIMEOUT);
    let stale =
        |b: &crate::backend::Backend| b.reach().is_none_or(|r| r.error.is_some() || r.at.elapsed() > READY_PROBE_AFTER);
    // Concurrently: a handful of backends, each within the connect timeout.
    let mut probes = tokio::task::JoinSet::new();
    for b in live.backends().iter().filter(|b| probe && stale(b)) {
        let b = b.clone();
        probes.spawn(async move { b.probe(timeout).await });
    }
    while probes.join_next().await.is_some() {}
    let mut unreachable = Vec::new();
    for b in live.backends() {
        match b.reach() {
            Some(r) if r.error.is_none() => {}
            Some(r) => unreachable.push(format!(
                "backend {}: {} ({}s ago)",
                b.name,
                r.error.unwrap_or_default(),
                Instant::now().saturating_duration_since(r.at).as_secs()
            )),
            None => unreachable.push(format!("backend {}: not probed", b.name)),
        }
    }
    if unreachable.len() == live.backends().len() {
        reasons.push("no backend is reachable".to_string());
    }
    // Degraded, not down: said, without taking the instance out of the balancer.
    if let Some(why) = state.network().and_then(|n| n.trouble()) {
        unreachable.push(format!("network: Redis unreachable ({why}); serving with this instance's state only"));
    }
    (reasons, unreachable)
}

/// A whole HTTP/1.1 response with `Connection: close`.
fn response(code: u16, reason: &str, content_type: &str, body: &str) -> Vec<u8> {
    response_with(code, reason, content_type, "", body)
}

/// A whole HTTP/1.1 response with `Connection: close` and `extra` header lines (each ending in CRLF).
fn response_with(code: u16, reason: &str, content_type: &str, extra: &str, body: &str) -> Vec<u8> {
    format!(
        "HTTP/1.1 {code} {reason}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nCache-Control: no-store\r\n{extra}Connection: close\r\n\r\n{body}",
        body.len()
    )
    .into_bytes()
}
