//! The instance-link listener (`[network] peer_bind`): what other instances of the network ask of this one
//! ([`serve`]), and this instance's side of a resume that belongs elsewhere ([`forward_resume`]).
//!
//! A resume carried over a link becomes, at the owner, a WebSocket over the link: the owner's session adopts
//! it exactly as it adopts a player's new connection (`relay::ws_resume`), with the carriage the player
//! negotiated at the forwarding instance (v2, zstd and its level); the forwarding instance only copies bytes
//! (after TLS for a `wss` player, and the link is TLS too, so the two types of session stay apart as on one
//! instance). Pings, acks, replay and close codes all come from the owner.

use std::net::SocketAddr;
use std::sync::Arc;

use moonbridge_protocol::ws::v2::{Control, CLOSE_RESUME_OTHER_INSTANCE};
use moonbridge_protocol::ws::{self as carriage};
use tokio::io::{AsyncRead, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::Semaphore;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info};

use super::link::{self, LinkError, Request, AUTH_TIMEOUT};
use super::Network;
use crate::config::WsSettings;
use crate::relay::resume::Refusal;
use crate::relay::ws_resume::deliver_resumption;
use crate::state::ProxyState;
use crate::tls::Tls;
use crate::ws_link::WsLink;

/// Links served at once by one instance, at most: 10,000 (each carries one player's resumed connection, or
/// one short request). Past it a new link is closed at once.
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
    let mut first = [0u8; 1];
    tokio::time::timeout(AUTH_TIMEOUT, stream.peek(&mut first)).await.map_err(|_| LinkError::Timeout)??;
    if first[0] == TLS_HANDSHAKE {
        let Some((ws, tls)) = &carriers.wss else { return Err(LinkError::Tls("no wss listener here".into())) };
        let opened = tokio::time::timeout(AUTH_TIMEOUT, async {
            let mut stream = tls.acceptor.accept(stream).await?;
            let binding = link::binding(stream.get_ref().1)?;
            let request = link::accept(&mut stream, &net.secret, &binding).await?;
            Ok::<_, LinkError>((stream, request))
        });
        let (stream, request) = opened.await.map_err(|_| LinkError::Timeout)??;
        answer(stream, true, Some(ws), request, peer, state).await
    } else {
        let mut stream = stream;
        let request = tokio::time::timeout(AUTH_TIMEOUT, link::accept(&mut stream, &net.secret, &[]))
            .await
            .map_err(|_| LinkError::Timeout)??;
        answer(stream, false, carriers.ws.as_ref(), request, peer, state).await
    }
}

/// Carries out an authenticated request.
async fn answer<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    mut stream: S,
    tls: bool,
    ws: Option<&WsSettings>,
    request: Request,
    peer: SocketAddr,
    state: &ProxyState,
) -> Result<(), LinkError> {
    match request {
        Request::Kick { name, reason } => {
            let kicked = state.players.kick(&name, &reason);
            info!(player = %name, kicked, via = %peer, "duplicate login on another instance: {}", if kicked { "ending this session" } else { "not here" });
            link::write_json(&mut stream, &link::KickAnswer { kicked }).await
        }
        Request::Resume { secure, zstd, client, control } => {
            if secure != tls {
                return Err(LinkError::BadRequest("a wss resume must come over TLS, a ws one without".into()));
            }
            let Some(ws) = ws else { return Err(LinkError::BadRequest("no listener of that transport here".into())) };
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
                return Err(LinkError::BadRequest("malformed resume request".into()));
            };
            let outcome = deliver_resumption(link, control, &state.resume, &state.metrics, &state.bad_input_log).await;
            info!(client = %client, via = %peer, outcome, "resume carried over an instance link");
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

/// Carries the resume `control` (whose token names instance `owner`, reached at `peer`) to that instance and
/// copies the player's connection to it and back, on a task of the network's own (it outlives this
/// connection's setup; it ends when either side closes, or at once on shutdown, when the player resumes
/// elsewhere). Returns the resume outcome for the metrics: `forwarded`, or the refusal's when the owner
/// cannot be reached (4002, as when the owner is gone).
pub(crate) async fn forward_resume<S: AsyncRead + AsyncWrite + Unpin + Send + 'static>(
    mut player: WsLink<S>,
    control: &Control,
    peer: String,
    how: Forwarded,
    net: &Arc<Network>,
) -> &'static str {
    let request = Request::Resume { secure: how.secure, zstd: how.zstd, client: how.client, control: control.encode() };
    let opened = tokio::time::timeout(AUTH_TIMEOUT, async {
        let mut tcp = link::dial(&peer).await?;
        if how.secure {
            let connector = tokio_rustls::TlsConnector::from(link::tls_client()?);
            let name = rustls::pki_types::ServerName::try_from("moonbridge-instance-link")
                .map_err(|e| LinkError::Tls(e.to_string()))?;
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
            player.close(CLOSE_RESUME_OTHER_INSTANCE, refusal.reason).await;
            return refusal.outcome;
        }
    };
    let (stream, leftover) = player.into_raw();
    let net2 = Arc::clone(net);
    net.pipes.spawn(async move {
        let metrics = &net2.metrics;
        metrics.link_sessions.inc();
        let stop = net2.stop.clone();
        let copied = tokio::select! {
            r = pipe(stream, leftover, to_owner) => r,
            () = stop.cancelled() => Ok((0, 0)),
        };
        metrics.link_sessions.dec();
        match copied {
            Ok((up, down)) => {
                metrics.link_bytes_to_peer.inc_by(up);
                metrics.link_bytes_from_peer.inc_by(down);
                debug!(client = %how.client, up, down, "instance link for a resumed session closed");
            }
            Err(e) => debug!(client = %how.client, "instance link for a resumed session ended: {e}"),
        }
    });
    "forwarded"
}

/// The owner's end of a forwarding link.
enum Peer {
    Tcp(TcpStream),
    Tls(Box<tokio_rustls::client::TlsStream<TcpStream>>),
}

/// Copies `player` ⇄ `owner` (the player's bytes read ahead first); bytes each way.
async fn pipe<S: AsyncRead + AsyncWrite + Unpin>(
    mut player: S,
    leftover: bytes::BytesMut,
    owner: Peer,
) -> std::io::Result<(u64, u64)> {
    async fn both<A: AsyncRead + AsyncWrite + Unpin, B: AsyncRead + AsyncWrite + Unpin>(
        player: &mut A,
        leftover: &[u8],
        owner: &mut B,
    ) -> std::io::Result<(u64, u64)> {
        owner.write_all(leftover).await?;
        let (up, down) = tokio::io::copy_bidirectional(player, owner).await?;
        Ok((up + leftover.len() as u64, down))
    }
    match owner {
        Peer::Tcp(mut s) => both(&mut player, &leftover, &mut s).await,
        Peer::Tls(mut s) => both(&mut player, &leftover, &mut *s).await,
    }
}
