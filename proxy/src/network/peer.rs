//! The instance-link listener (`[network] peer_bind`): what other instances of the network ask of this one
//! ([`serve`]). The dialler's side of a link that carries a resume is `super::link::open_carrier`.
//!
//! A resume carried over a link becomes, at the owner, a WebSocket over the link: the owner's session adopts
//! it exactly as it adopts a player's new connection (`relay::ws_resume`), with the carriage the player
//! negotiated at the forwarding instance (v2, zstd and its level); the forwarding instance only copies bytes
//! (`listen/carry.rs`; after TLS for a `wss` player, and the link is TLS too, so the two types of session stay
//! apart as on one instance). Pings, acks, replay and close codes all come from the owner.

use std::net::SocketAddr;
use std::sync::Arc;

use moonbridge_protocol::ws::v2::Control;
use moonbridge_protocol::ws::{self as carriage};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::link::{self, Request};
use super::openings::{Opening, Openings, MAX_OPENINGS, MAX_OPENINGS_PER_SOURCE};
use super::redis::RedisNetwork;
use super::{LinkError, NetworkError, Unservable, AUTH_TIMEOUT};
use crate::config::WsSettings;
use crate::labels::{LinkOutcome, LinkRefused, LinkRequest};
use crate::move_state::MoveAnswer;
use crate::relay::ws_resume::{deliver_resumption, Delivered};
use crate::resume::PlayerStream;
use crate::state::ProxyState;
use crate::tls::Tls;
use crate::ws_link::WsLink;

/// Links being opened or answered at once by one instance, at most: 10,000. A link that carries a resumed
/// connection is counted here until the session it resumes has adopted it (then that session holds it). Past
/// it a new link is closed at once.
pub(crate) const MAX_LINKS: usize = 10_000;

/// The lines about what other instances asked (kicks, moves, carried resumes): 10 per 10 seconds, each with the
/// count suppressed before it (`moonbridge_network_link_requests_total` counts every one).
static LINK_LOG: std::sync::LazyLock<crate::limits::LogLimiter> =
    std::sync::LazyLock::new(|| crate::limits::LogLimiter::new(10, std::time::Duration::from_secs(10)));

/// The first byte of a TLS ClientHello record (a link that carries a `wss` player).
const TLS_HANDSHAKE: u8 = 0x16;

/// The listeners whose settings a resume carried here runs with: the first `ws` and the first `wss` one.
pub(crate) struct Carriers {
    pub(crate) ws: Option<WsSettings>,
    pub(crate) wss: Option<(WsSettings, Tls)>,
}

/// Serves instance links on `listener` until `stop`.
pub(crate) async fn serve(
    listener: TcpListener,
    state: Arc<ProxyState>,
    net: Arc<RedisNetwork>,
    carriers: Arc<Carriers>,
    stop: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(MAX_LINKS));
    let openings = Arc::new(Openings::default());
    loop {
        let (stream, peer) = tokio::select! {
            r = listener.accept() => match r {
                Ok(v) => v,
                Err(e) => {
                    if let Some(suppressed) = state.limit_log.allow() {
                        info!(suppressed, "instance link accept failed: {e}");
                    }
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                    continue;
                }
            },
            () = stop.cancelled() => return,
        };
        let admitted = openings.open(peer.ip(), net.is_instance_ip(peer.ip())).and_then(|opening| {
            let permit = Arc::clone(&permits).try_acquire_owned().map_err(|_| LinkRefused::Links)?;
            Ok((opening, permit))
        });
        let (opening, permit) = match admitted {
            Ok(v) => v,
            Err(reason) => {
                net.metrics.link_refused(reason);
                if let Some(suppressed) = state.limit_log.allow() {
                    info!(suppressed, %peer, "instance link closed before its opening: {}", refusal_text(reason));
                }
                continue;
            }
        };
        let (state, net, carriers) = (Arc::clone(&state), Arc::clone(&net), Arc::clone(&carriers));
        tokio::spawn(async move {
            let _permit = permit;
            let _ = stream.set_nodelay(true);
            // Boxed: a pending opening holds only this small future; what an authenticated link needs is
            // allocated once it is one.
            if let Err(e) = Box::pin(one(stream, peer, opening, &state, &net, &carriers)).await {
                if let Some(suppressed) = state.bad_input_log.allow() {
                    info!(peer = %peer, suppressed, "{e}");
                }
            }
            state.links_ended.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        });
    }
}

/// What the log says about a link refused before its opening.
fn refusal_text(reason: LinkRefused) -> String {
    match reason {
        LinkRefused::PerSource => format!("{MAX_OPENINGS_PER_SOURCE} openings from this address are pending"),
        LinkRefused::Openings => format!("{MAX_OPENINGS} openings are pending"),
        LinkRefused::Links => format!("{MAX_LINKS} instance links are open"),
    }
}

/// One link: the opening (after TLS when it starts with a ClientHello), then its request. `opening` ends
/// once the link is authenticated.
async fn one(
    stream: TcpStream,
    peer: SocketAddr,
    opening: Opening,
    state: &ProxyState,
    net: &RedisNetwork,
    carriers: &Carriers,
) -> Result<(), LinkError> {
    // One deadline for the whole opening: the first byte, TLS and the challenge-response.
    let deadline = tokio::time::Instant::now() + AUTH_TIMEOUT;
    let mut first = [0u8; 1];
    tokio::time::timeout_at(deadline, stream.peek(&mut first)).await.map_err(|_| LinkError::Timeout)??;
    if first[0] == TLS_HANDSHAKE {
        let Some((ws, tls)) = &carriers.wss else { return Err(LinkError::NoWssListener) };
        let opened = Box::pin(tokio::time::timeout_at(deadline, async {
            let mut stream = tls.acceptor.accept(stream).await?;
            let binding = link::binding(stream.get_ref().1)?;
            let (request, opened) = link::accept(&mut stream, &net.secret, &binding).await?;
            Ok::<_, LinkError>((stream, request, opened))
        }));
        let (stream, request, opened) = opened.await.map_err(|_| LinkError::Timeout)??;
        drop(opening);
        Box::pin(answer(stream, true, Some(ws), (request, opened), peer, state, net)).await
    } else {
        let mut stream = stream;
        let request = tokio::time::timeout_at(deadline, link::accept(&mut stream, &net.secret, &[]))
            .await
            .map_err(|_| LinkError::Timeout)??;
        drop(opening);
        Box::pin(answer(stream, false, carriers.ws.as_ref(), request, peer, state, net)).await
    }
}

/// Carries out an authenticated request.
async fn answer<S: PlayerStream>(
    mut stream: S,
    tls: bool,
    ws: Option<&WsSettings>,
    (request, opened): (Request, link::Opened),
    peer: SocketAddr,
    state: &ProxyState,
    net: &RedisNetwork,
) -> Result<(), LinkError> {
    match request {
        Request::Kick { name, claim, reason } => {
            let kicked = state.players.kick_claim(&name.to_lowercase(), &claim, &reason);
            let outcome = if kicked { LinkOutcome::Done } else { LinkOutcome::Refused };
            net.metrics.link_request(LinkRequest::Kick, outcome);
            if let Some(suppressed) = LINK_LOG.allow() {
                info!(player = %name, kicked, via = %peer, suppressed, "duplicate login on another instance: {}", if kicked { "ending this session" } else { "not here" });
            }
            link::write_answer(&mut stream, &net.secret, &opened, &link::KickAnswer { kicked }, link::SMALL_ANSWER)
                .await
        }
        Request::Act { action } => {
            // Authenticated, yet checked as the admin API checks it; a switch to a backend unknown here is not
            // started (each such player counts as missed).
            if let Err(e) = action.check() {
                net.metrics.link_request(LinkRequest::Act, LinkOutcome::Refused);
                return Err(LinkError::BadRequest(Unservable::MalformedAction(e)));
            }
            let unknown =
                matches!(&action, crate::players::Action::Send { to, .. } if state.live().backend_named(to).is_none());
            let reach = if unknown { state.players.act_nothing(&action) } else { state.players.act(&action) };
            let outcome = if unknown { LinkOutcome::Refused } else { LinkOutcome::Done };
            net.metrics.link_request(LinkRequest::Act, outcome);
            if let Some(suppressed) = LINK_LOG.allow() {
                info!(via = %peer, suppressed, done = reach.done, missed = reach.missed, "an operator's {} from another instance", action.verb());
            }
            link::write_answer(&mut stream, &net.secret, &opened, &reach, link::SMALL_ANSWER).await
        }
        Request::Move { ticket, received, sent } => {
            let session = match ticket.parse::<moonbridge_protocol::ws::v2::ResumeToken>() {
                Ok(token) => state.resume.take_ticket(&token).map_err(|r| r.reason),
                Err(_) => Err("malformed ticket"),
            };
            let answer = super::moves::answer(&mut stream, &net.secret, &opened, session, (received, sent)).await?;
            let (outcome, text) = match &answer {
                MoveAnswer::State(_) => (LinkOutcome::Done, "handed over".to_string()),
                MoveAnswer::Refused { why } => (LinkOutcome::Refused, format!("refused: {why}")),
            };
            net.metrics.link_request(LinkRequest::Move, outcome);
            // A client presenting tickets can cause one per request: through the limiter (each is counted).
            if let Some(suppressed) = LINK_LOG.allow() {
                info!(via = %peer, suppressed, "a player's move to another instance: {text}");
            }
            Ok(())
        }
        Request::Resume { secure, zstd, client, control } => {
            if secure != tls {
                return Err(LinkError::BadRequest(Unservable::TransportMismatch));
            }
            let Some(ws) = ws else { return Err(LinkError::BadRequest(Unservable::NoListener)) };
            let live = state.live();
            let limits = &live.tunables.limits;
            let mut link = WsLink::new(
                stream,
                &[],
                ws.ping_interval,
                limits.write_stall_timeout(),
                limits.max_ws_message_bytes,
                state.metrics.ws.clone(),
            );
            link.enable_v2();
            if let Some(level) = zstd {
                link.enable_zstd(level);
            }
            let Ok(control) = Control::parse(control.as_bytes()) else {
                link.close(carriage::CLOSE_PROTOCOL_ERROR, "malformed control message").await;
                return Err(LinkError::BadRequest(Unservable::MalformedResume));
            };
            let outcome = deliver_resumption(link, control, &state.resume, &state.metrics, &state.bad_input_log).await;
            let done = if matches!(outcome, Delivered::HandedOver) { LinkOutcome::Done } else { LinkOutcome::Refused };
            net.metrics.link_request(LinkRequest::Resume, done);
            // A client guessing tokens can cause one per request: through the limiter (each is counted).
            if let Some(suppressed) = LINK_LOG.allow() {
                info!(client = %client, via = %peer, suppressed, outcome = outcome.as_str(), "resume carried over an instance link");
            }
            Ok(())
        }
    }
}

/// The address this host advertises when `peer_bind` is unspecified and `peer_address` is not set: the local
/// IP its route to the Redis host uses (a UDP socket connected there; nothing is sent), with `port`.
///
/// # Errors
/// [`NetworkError::PeerAddress`] when the Redis URL names a Unix socket, its host does not resolve, or no
/// route leads there.
pub(crate) fn route_to_redis(redis_url: &str, port: u16) -> Result<String, NetworkError> {
    let fail = |why: String| NetworkError::PeerAddress(why);
    let info = redis::IntoConnectionInfo::into_connection_info(redis_url).map_err(|e| fail(e.to_string()))?;
    let (host, redis_port) = match info.addr() {
        redis::ConnectionAddr::Tcp(h, p) | redis::ConnectionAddr::TcpTls { host: h, port: p, .. } => (h.clone(), *p),
        _ => return Err(fail("the Redis URL names a Unix socket".into())),
    };
    let target = std::net::ToSocketAddrs::to_socket_addrs(&(host.as_str(), redis_port))
        .map_err(|e| fail(format!("{host}: {e}")))?
        .next()
        .ok_or_else(|| fail(format!("{host} has no address")))?;
    let any: std::net::SocketAddr =
        if target.is_ipv4() { ([0, 0, 0, 0], 0).into() } else { (std::net::Ipv6Addr::UNSPECIFIED, 0).into() };
    let socket = std::net::UdpSocket::bind(any).map_err(|e| fail(e.to_string()))?;
    socket.connect(target).map_err(|e| fail(format!("no route to {target}: {e}")))?;
    let local = socket.local_addr().map_err(|e| fail(e.to_string()))?;
    Ok(std::net::SocketAddr::new(local.ip(), port).to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_advertised_address_follows_the_route_to_redis() {
        assert_eq!(route_to_redis("redis://127.0.0.1:6379/0", 25600).ok().as_deref(), Some("127.0.0.1:25600"));
        assert_eq!(route_to_redis("rediss://[::1]:6380/", 7).ok().as_deref(), Some("[::1]:7"));
        let unix = route_to_redis("redis+unix:///run/redis.sock", 25600);
        assert!(matches!(unix, Err(NetworkError::PeerAddress(ref m)) if m.contains("Unix socket")), "{unix:?}");
    }
}
