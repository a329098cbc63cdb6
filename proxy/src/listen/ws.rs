//! A player on a WebSocket (`ws`, and `wss` after its TLS handshake): one setup for both over any stream
//! (the HTTP upgrade, the [`WsLink`], on carriage v2 the resume dispatch), and the session's view of the link
//! ([`Player`] over [`WsLink`]).

use std::future::Future;
use std::io;
use std::net::SocketAddr;
use std::time::Duration;

use bytes::BytesMut;
use moonbridge_protocol::ws as carriage;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_rustls::server::TlsStream;
use tracing::debug;

use super::carry::Carried;
use super::opened::Opening;
use super::upgrade::{accept_upgrade, Carriages, Peer, UpgradeError, Upgraded};
use crate::config::WsSettings;
use crate::labels::TlsVersion;
use crate::labels::{DrainMove, ResumeOutcome};
use crate::metrics::Metrics;
use crate::network::CarriedResume;
use crate::rate::Bucket;
use crate::relay::ws_resume::Delivered;
use crate::relay::ws_resume::{deliver_resumption, relay_resumable};
use crate::relay::{close_backend, BackendSide, RelayReport, RelayStart};
use crate::resume::{hex_id, PlayerStream, Refusal};
use crate::session::{Finish, Player};
use crate::state::{Live, ProxyState};
use crate::tls::Tls;
use crate::wire::PlayerGone;
use crate::ws_link::WsLink;

/// Why a WebSocket setup failed.
#[derive(Debug, thiserror::Error)]
pub(super) enum WsSetupError {
    #[error("TLS handshake failed: {0}")]
    Tls(io::Error),
    #[error("WebSocket upgrade refused: {0}")]
    Upgrade(#[from] UpgradeError),
    /// A carriage v2 connection's first message was a malformed or unexpected control message (closed 1002).
    #[error("resume request: bad_request")]
    BadRequest,
    /// A carriage v2 connection sent no first message before the handshake deadline (closed with 1008).
    #[error("no first message before the handshake deadline")]
    Deadline,
    /// A `resume` or `moving` request over the real address's connection rate (closed without a Close frame).
    #[error("rate_limits.connections_per_second reached by a resume or move request")]
    RateLimited,
    /// This instance is draining: a client that offered moves was sent on to connect again (close 4007, or a
    /// request closed without a Close frame).
    #[error("draining: sent on to another instance")]
    SentOn,
}

/// How long before the handshake deadline (which cuts the whole setup) a carriage v2 connection that has not
/// sent its first message is closed with 1008, so it reads why instead of losing the connection without a
/// Close: 250 ms.
const CLOSE_BEFORE_DEADLINE: Duration = Duration::from_millis(250);

/// What the WebSocket setup of one connection needs (the same for `ws` and `wss`).
pub(super) struct WsSetup<'a> {
    pub(super) ws: &'a WsSettings,
    /// A `wss` listener (the stream is TLS).
    pub(super) secure: bool,
    /// The TCP peer, or the client a balancer's PROXY header named (the real address comes from a trusted
    /// proxy's header, when there is one).
    pub(super) peer: Peer,
    /// The carriages this proxy offers (v2 when resume is on, zstd when `[compression]` is).
    pub(super) carriages: Carriages,
    pub(super) live: &'a Live,
    pub(super) state: &'a ProxyState,
    /// The handshake deadline of the connection.
    pub(super) deadline: Instant,
    /// The connection-rate limit was applied at accept (no trusted proxy in front): a `resume` or `moving`
    /// request is not checked again.
    pub(super) rate_checked: bool,
    /// Accepted while this instance drained: a client that offered moves is sent on to connect again.
    pub(super) draining: bool,
}

/// The TLS handshake of a `wss` connection (rustls), counted by version and logged at debug level with the
/// SNI, version and cipher suite.
///
/// # Errors
/// [`WsSetupError::Tls`] when the handshake fails.
pub(super) async fn tls_handshake(
    stream: TcpStream,
    tls: &Tls,
    metrics: &Metrics,
) -> Result<TlsStream<TcpStream>, WsSetupError> {
    let stream = tls.acceptor.accept(stream).await.map_err(WsSetupError::Tls)?;
    let (_, conn) = stream.get_ref();
    metrics.tls_handshake(match conn.protocol_version() {
        Some(rustls::ProtocolVersion::TLSv1_3) => TlsVersion::Tls13,
        Some(rustls::ProtocolVersion::TLSv1_2) => TlsVersion::Tls12,
        _ => TlsVersion::Other,
    });
    debug!(
        sni = conn.server_name().unwrap_or("-"),
        version = ?conn.protocol_version(),
        suite = ?conn.negotiated_cipher_suite().map(|s| s.suite()),
        "TLS established"
    );
    Ok(stream)
}

/// The WebSocket setup on `stream` (TCP, or TLS over it): the HTTP upgrade, the link, and on carriage v2 a
/// first message that may be a resume or a move request. Returns what the connection opens.
///
/// # Errors
/// The upgrade was refused (or was a health check), the first message was bad, or none came in time.
pub(super) async fn websocket<S: PlayerStream>(
    mut stream: S,
    s: WsSetup<'_>,
) -> Result<Opening<WsLink<S>>, WsSetupError> {
    let up = accept_upgrade(&mut stream, s.ws, s.peer, s.carriages).await?;
    let limits = &s.live.tunables.limits;
    let counters = s.state.metrics.ws.clone();
    let link = WsLink::new(
        stream,
        &up.leftover,
        s.ws.ping_interval,
        limits.write_stall_timeout(),
        limits.max_ws_message_bytes,
        counters,
    );
    let told_at = s.deadline.checked_sub(CLOSE_BEFORE_DEADLINE).unwrap_or(s.deadline);
    resume_or_session(link, up, told_at, &s).await
}

/// On a carriage v2 connection, a first message that is a resume request is handed to its session (or
/// refused with its close code, or carried to the instance that holds it) and this connection's own setup
/// ends; a `moving` request starts a moved player's session; anything else starts a new session.
async fn resume_or_session<S: PlayerStream>(
    mut link: WsLink<S>,
    up: Upgraded,
    told_at: Instant,
    s: &WsSetup<'_>,
) -> Result<Opening<WsLink<S>>, WsSetupError> {
    let (state, secure) = (s.state, s.secure);
    if up.v2 {
        link.enable_v2();
        link.offer_moves(up.move_offered);
        link.set_paced(up.paced);
        if let Some(level) = up.zstd {
            link.enable_zstd(level);
        }
        let Ok(first) = tokio::time::timeout_at(told_at, link.first_control()).await else {
            link.close(carriage::CLOSE_POLICY_VIOLATION, "handshake deadline").await;
            return Err(WsSetupError::Deadline);
        };
        // Behind a trusted proxy the real address is known only now: a resume or a move is limited by it
        // before anything is carried, handed on or looked up (a new session is limited in `Conn::run`).
        let request =
            matches!(first, Ok(Some(carriage::v2::Control::Resume { .. } | carriage::v2::Control::Moving { .. })));
        if request
            && !s.rate_checked
            && !state.rate.allow(&s.live.tunables.rate_limits, up.client.ip(), Bucket::Connection)
        {
            // Closed without a Close frame, as a connection refused at accept is: every client library, older ones
            // too, reads that as a failed attempt and tries again with its backoff (a close code would end an
            // older one's session).
            drop(link);
            return Err(WsSetupError::RateLimited);
        }
        // A draining instance sends a client that can move on before anything of its session starts here: the
        // client connects to its URL again and the balancer picks a live instance. A resume of a session held
        // here is still served (the drain then moves it).
        if up.move_offered && s.draining {
            let held_here = matches!(&first, Ok(Some(carriage::v2::Control::Resume { token, .. }))
                if state.resume.is_own(&token.instance));
            if first.is_ok() && !held_here {
                state.metrics.drain_move(DrainMove::SentOn);
                if request {
                    // A `resume` or `moving` request: closed without a Close frame, which every client library,
                    // older ones too, reads as a failed try and tries again (an unknown close code would end an
                    // older one's session).
                    drop(link);
                } else {
                    link.close(carriage::v2::CLOSE_DRAINING, "instance draining: connect again").await;
                }
                return Err(WsSetupError::SentOn);
            }
        }
        match first {
            Ok(None) => {}
            // A player moving here from a draining instance: its session starts from the state fetched there.
            Ok(Some(control @ carriage::v2::Control::Moving { .. })) => {
                return Ok(Opening::Move(link, up.client, Box::new(control)));
            }
            Ok(Some(control)) => {
                // `[network]`: a resume whose token names another live instance is carried there.
                if let (Some(net), carriage::v2::Control::Resume { token, .. }) = (state.network(), &control) {
                    let owner = hex_id(&token.instance);
                    let resume = CarriedResume { secure, zstd: up.zstd, client: up.client, control: control.encode() };
                    if let Some(opening) = net.carry(&owner, resume) {
                        return Ok(carry(link, opening.await, up.client, &state.metrics).await);
                    }
                }
                let (table, metrics, log) = (&state.resume, &state.metrics, &state.bad_input_log);
                return match deliver_resumption(link, control, table, metrics, log).await {
                    Delivered::BadRequest => Err(WsSetupError::BadRequest),
                    _ => Ok(Opening::Resumed),
                };
            }
            Err(_) => {
                link.close(carriage::CLOSE_PROTOCOL_ERROR, "protocol error").await;
                return Err(WsSetupError::BadRequest);
            }
        }
    }
    Ok(Opening::Session(link, up.client))
}

/// A resume for another instance: the copy over the opened link, or (no link) the player closed with 4002.
/// Either outcome is counted in `moonbridge_resumes_total` before the player hears of it.
async fn carry<S: PlayerStream>(
    mut link: WsLink<S>,
    opened: Result<crate::network::Carrier, crate::network::LinkError>,
    client: SocketAddr,
    metrics: &Metrics,
) -> Opening<WsLink<S>> {
    match opened {
        Ok(carrier) => {
            metrics.resume(ResumeOutcome::Forwarded);
            let stall = link.write_stall();
            let (stream, leftover) = link.into_raw();
            Opening::Carried(Carried::new(stream, leftover, carrier, stall, client))
        }
        Err(_) => {
            // The network logged why (with the owner's address).
            let refusal = Refusal::OTHER_INSTANCE;
            metrics.resume(refusal.outcome);
            link.close(refusal.code, refusal.reason).await;
            Opening::Resumed
        }
    }
}

impl<S: PlayerStream> Player for WsLink<S> {
    async fn read_some(&mut self, buf: &mut BytesMut) -> io::Result<usize> {
        self.read_stream(buf).await
    }

    async fn send(&mut self, bytes: &[u8]) -> io::Result<()> {
        self.send_binary(bytes).await
    }

    async fn during<T>(&mut self, work: impl Future<Output = T>) -> Result<T, PlayerGone> {
        WsLink::during(self, work).await
    }

    async fn finish(&mut self, how: Finish) {
        let (code, reason) = match how {
            Finish::Normal => (carriage::CLOSE_NORMAL, ""),
            Finish::Shutdown => (carriage::CLOSE_GOING_AWAY, "proxy shutting down"),
            Finish::ProtocolError => (carriage::CLOSE_PROTOCOL_ERROR, "protocol error"),
            Finish::Policy => (carriage::CLOSE_POLICY_VIOLATION, "handshake limit"),
            Finish::BackendUnavailable => (carriage::CLOSE_INTERNAL_ERROR, "server unavailable"),
            Finish::MoveRefused => (carriage::v2::CLOSE_MOVE_REFUSED, "move refused"),
        };
        // A fault earned by bad input takes precedence (WsLink::close).
        self.close(code, reason).await;
    }

    fn message_counts(&self) -> Option<(u64, u64)> {
        Some(WsLink::message_counts(self))
    }

    fn carriage(&self) -> crate::transport::Carriage {
        WsLink::carriage(self)
    }

    fn can_move(&self) -> bool {
        WsLink::can_move(self)
    }

    fn continue_counts(&mut self, received: u64, sent: u64) {
        WsLink::continue_counts(self, received, sent);
    }

    async fn relay(&mut self, mut backend: BackendSide, mut start: RelayStart<'_>) -> RelayReport {
        let mut report = match start.resume.take() {
            // Carriage v2 with resume on: the relay that survives a dropped connection.
            Some(resume) if self.is_v2() => Box::pin(relay_resumable(self, &mut backend, start, *resume)).await,
            _ => crate::relay::ws::relay(self, &mut backend, start).await,
        };
        report.visited = backend.visited().map(<[String]>::to_vec);
        Box::pin(close_backend(&mut backend, &report.end)).await;
        report
    }
}
