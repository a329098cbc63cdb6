//! The instance-link listener (`[network] peer_bind`): what other instances of the network ask of this one
//! ([`serve`]), and this instance's side of a resume that belongs elsewhere ([`forward_resume`]).
//!
//! A resume carried over a link becomes, at the owner, a WebSocket over the link: the owner's session adopts
//! it exactly as it adopts a player's new connection (`relay::ws_resume`), with the carriage the player
//! negotiated at the forwarding instance (v2, zstd and its level); the forwarding instance only copies bytes
//! (after TLS for a `wss` player, and the link is TLS too, so the two types of session stay apart as on one
//! instance). Pings, acks, replay and close codes all come from the owner.

use std::future::Future;
use std::net::SocketAddr;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use moonbridge_protocol::ws::v2::{Control, CLOSE_RESUME_OTHER_INSTANCE};
use moonbridge_protocol::ws::{self as carriage};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::link::{self, LinkError, Request, Unservable, AUTH_TIMEOUT};
use super::Network;
use crate::config::WsSettings;
use crate::labels::ResumeOutcome;
use crate::move_state::MoveAnswer;
use crate::relay::ws_resume::deliver_resumption;
use crate::resume::PlayerStream;
use crate::resume::Refusal;
use crate::state::ProxyState;
use crate::tls::Tls;
use crate::ws_link::WsLink;

/// Links being opened or answered at once by one instance, at most: 10,000. A link that carries a resumed
/// connection is counted here until the session it resumes has adopted it (then that session holds it). Past
/// it a new link is closed at once.
pub(crate) const MAX_LINKS: usize = 10_000;

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
    net: Arc<Network>,
    carriers: Arc<Carriers>,
    stop: CancellationToken,
) {
    let permits = Arc::new(Semaphore::new(MAX_LINKS));
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
        let Ok(permit) = Arc::clone(&permits).try_acquire_owned() else {
            if let Some(suppressed) = state.limit_log.allow() {
                info!(suppressed, "{MAX_LINKS} instance links open: closing a new one from {peer}");
            }
            continue;
        };
        let (state, net, carriers) = (Arc::clone(&state), Arc::clone(&net), Arc::clone(&carriers));
        tokio::spawn(async move {
            let _permit = permit;
            let _ = stream.set_nodelay(true);
            if let Err(e) = one(stream, peer, &state, &net, &carriers).await {
                if let Some(suppressed) = state.bad_input_log.allow() {
                    info!(peer = %peer, suppressed, "{e}");
                }
            }
        });
    }
}

/// One link: the opening (after TLS when it starts with a ClientHello), then its request.
async fn one(
    stream: TcpStream,
    peer: SocketAddr,
    state: &ProxyState,
    net: &Network,
    carriers: &Carriers,
) -> Result<(), LinkError> {
    // One deadline for the whole opening: the first byte, TLS and the challenge-response.
    let deadline = tokio::time::Instant::now() + AUTH_TIMEOUT;
    let mut first = [0u8; 1];
    tokio::time::timeout_at(deadline, stream.peek(&mut first)).await.map_err(|_| LinkError::Timeout)??;
    if first[0] == TLS_HANDSHAKE {
        let Some((ws, tls)) = &carriers.wss else { return Err(LinkError::NoWssListener) };
        let opened = tokio::time::timeout_at(deadline, async {
            let mut stream = tls.acceptor.accept(stream).await?;
            let binding = link::binding(stream.get_ref().1)?;
            let (request, opened) = link::accept(&mut stream, &net.secret, &binding).await?;
            Ok::<_, LinkError>((stream, request, opened))
        });
        let (stream, request, opened) = opened.await.map_err(|_| LinkError::Timeout)??;
        answer(stream, true, Some(ws), (request, opened), peer, state, net).await
    } else {
        let mut stream = stream;
        let request = tokio::time::timeout_at(deadline, link::accept(&mut stream, &net.secret, &[]))
            .await
            .map_err(|_| LinkError::Timeout)??;
        answer(stream, false, carriers.ws.as_ref(), request, peer, state, net).await
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
    net: &Network,
) -> Result<(), LinkError> {
    match request {
        Request::Kick { name, claim, reason } => {
            let kicked = state.players.kick_claim(&name.to_lowercase(), &claim, &reason);
            info!(player = %name, kicked, via = %peer, "duplicate login on another instance: {}", if kicked { "ending this session" } else { "not here" });
            link::write_answer(&mut stream, &net.secret, &opened, &link::KickAnswer { kicked }, link::SMALL_ANSWER)
                .await
        }
        Request::Move { ticket, received, sent } => {
            let session = match ticket.parse::<moonbridge_protocol::ws::v2::ResumeToken>() {
                Ok(token) => state.resume.take_ticket(&token).map_err(|r| r.reason),
                Err(_) => Err("malformed ticket"),
            };
            let answer = super::moves::answer(&mut stream, &net.secret, &opened, session, (received, sent)).await?;
            let outcome = match answer {
                MoveAnswer::State(_) => "handed over".to_string(),
                MoveAnswer::Refused { why } => format!("refused: {why}"),
            };
            info!(via = %peer, "a player's move to another instance: {outcome}");
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
            info!(client = %client, via = %peer, %outcome, "resume carried over an instance link");
            Ok(())
        }
    }
}

/// What [`forward_resume`] needs of the player's connection.
pub(crate) struct Forwarded {
    /// The player reached this instance over `wss`.
    pub(crate) secure: bool,
    /// `moonbridge.v2.zstd` was selected, at this level.
    pub(crate) zstd: Option<i32>,
    /// The player's real address.
    pub(crate) client: SocketAddr,
}

/// Longest wait for bytes from either side of a carried resume before the carrier ends it: 12 s, three of
/// carriage v2's longest ping intervals ([`moonbridge_protocol::ws::v2::MAX_PING_INTERVAL`]): the owner pings
/// the player and the player pings back through the copy, so a live pair is never this quiet.
pub(crate) const CARRIED_IDLE: Duration = Duration::from_secs(12);

/// A resumed session carried to its owner: the copy both ways, run by the player's connection task once its
/// setup is over, so it stays counted in `max_connections` and leaves its handshake slot. It ends when either
/// side ends, when a side sends nothing for [`CARRIED_IDLE`], when a write makes no progress for
/// `write_stall_timeout_seconds`, or at once on shutdown.
pub(crate) struct Carried(Pin<Box<dyn Future<Output = ()> + Send>>);

impl std::fmt::Debug for Carried {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("Carried")
    }
}

impl Carried {
    /// Copies until the carried session ends.
    pub(crate) async fn run(self) {
        self.0.await;
    }
}

/// Carries the resume `control` (whose token names instance `owner`, reached at `peer`) to that instance:
/// opens the instance link and returns the copy to run ([`Carried`]), or closes the player with 4002 and
/// returns the refusal's outcome when the owner cannot be reached (as when the owner is gone). Either outcome
/// is counted in `moonbridge_resumes_total` (`resumes`) before the player hears of it.
pub(crate) async fn forward_resume<S: PlayerStream>(
    mut player: WsLink<S>,
    control: &Control,
    peer: String,
    how: Forwarded,
    net: &Arc<Network>,
    resumes: &crate::metrics::Metrics,
) -> Result<Carried, ResumeOutcome> {
    let request = Request::Resume { secure: how.secure, zstd: how.zstd, client: how.client, control: control.encode() };
    let opened = tokio::time::timeout(AUTH_TIMEOUT, async {
        let mut tcp = link::dial(&peer).await?;
        if how.secure {
            let connector = tokio_rustls::TlsConnector::from(link::tls_client()?);
            let name = rustls::pki_types::ServerName::try_from("moonbridge-instance-link")?;
            let mut tls = connector.connect(name, tcp).await?;
            let binding = link::binding(tls.get_ref().1)?;
            link::open(&mut tls, &net.secret, &binding, &request).await?;
            Ok::<_, LinkError>(Peer::Tls(Box::new(tls)))
        } else {
            link::open(&mut tcp, &net.secret, &[], &request).await?;
            Ok(Peer::Tcp(tcp))
        }
    });
    let to_owner = match opened.await.map_err(|_| LinkError::Timeout).and_then(|r| r) {
        Ok(s) => s,
        Err(e) => {
            info!(client = %how.client, peer = %peer, "resume for another instance: {e}");
            let refusal = Refusal::OTHER_INSTANCE;
            resumes.resume(refusal.outcome);
            player.close(CLOSE_RESUME_OTHER_INSTANCE, refusal.reason).await;
            return Err(refusal.outcome);
        }
    };
    resumes.resume(ResumeOutcome::Forwarded);
    let stall = player.write_stall();
    let (stream, leftover) = player.into_raw();
    let net = Arc::clone(net);
    Ok(Carried(Box::pin(async move {
        let metrics = &net.metrics;
        metrics.link_sessions.inc();
        let (mut up, mut down) = (0u64, 0u64);
        let ended = tokio::select! {
            r = pipe(stream, &leftover, to_owner, stall, (&mut up, &mut down)) => r,
            () = net.stop.cancelled() => Ok(()),
        };
        metrics.link_sessions.dec();
        metrics.link_bytes_to_peer.inc_by(up);
        metrics.link_bytes_from_peer.inc_by(down);
        match ended {
            Ok(()) => debug!(client = %how.client, up, down, "instance link for a resumed session closed"),
            Err(e) => debug!(client = %how.client, up, down, "instance link for a resumed session ended: {e}"),
        }
    })))
}

/// The owner's end of a forwarding link.
enum Peer {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// Copies `player` ⇄ `owner` (the player's bytes read ahead first) until either side ends or fails (see
/// [`Carried`]), counting the bytes each way into `counts` (to the owner, from the owner).
async fn pipe<S: AsyncRead + AsyncWrite + Unpin>(
    player: S,
    leftover: &[u8],
    owner: Peer,
    stall: Duration,
    counts: (&mut u64, &mut u64),
) -> std::io::Result<()> {
    async fn both<A: AsyncRead + AsyncWrite + Unpin, B: AsyncRead + AsyncWrite + Unpin>(
        player: A,
        leftover: &[u8],
        mut owner: B,
        stall: Duration,
        (up, down): (&mut u64, &mut u64),
    ) -> std::io::Result<()> {
        within(stall, owner.write_all(leftover)).await?;
        *up += leftover.len() as u64;
        let (mut player_rx, mut player_tx) = tokio::io::split(player);
        let (mut owner_rx, mut owner_tx) = tokio::io::split(owner);
        // The first direction to end ends both: a WebSocket has no half-close (its Close is in band).
        tokio::select! {
            r = one_way(&mut player_rx, &mut owner_tx, stall, up) => r,
            r = one_way(&mut owner_rx, &mut player_tx, stall, down) => r,
        }
    }
    match owner {
        Peer::Tcp(s) => both(player, leftover, s, stall, counts).await,
        Peer::Tls(s) => both(player, leftover, *s, stall, counts).await,
    }
}

/// Copies `from` to `to` until `from` ends: each read within [`CARRIED_IDLE`], each write (and its flush)
/// within `stall`; counts the bytes into `count`.
async fn one_way<R: AsyncRead + Unpin, W: AsyncWrite + Unpin>(
    from: &mut R,
    to: &mut W,
    stall: Duration,
    count: &mut u64,
) -> std::io::Result<()> {
    let mut buf = vec![0u8; 16 * 1024];
    loop {
        let n = within(CARRIED_IDLE, from.read(&mut buf)).await?;
        if n == 0 {
            return Ok(());
        }
        let data = buf.get(..n).unwrap_or_default();
        within(stall, async {
            to.write_all(data).await?;
            to.flush().await
        })
        .await?;
        *count += n as u64;
    }
}

/// `io` within `limit`, a timeout being an error of kind `TimedOut`.
async fn within<T>(limit: Duration, io: impl Future<Output = std::io::Result<T>>) -> std::io::Result<T> {
    tokio::time::timeout(limit, io)
        .await
        .map_err(|_| std::io::Error::new(std::io::ErrorKind::TimedOut, format!("no progress for {limit:?}")))?
}
