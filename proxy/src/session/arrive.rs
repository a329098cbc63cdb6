//! A player moving here from a draining instance (docs/network.md, "Drain"): its connection's first message
//! was `moving <ticket> <received> <sent>`. The session's state comes from the ticket's instance over an
//! instance link; the player is logged in to the same backend again (the backend may kick the older
//! connection for the duplicate login: that connection is the draining instance's, and the kick never reaches
//! the player); then the session runs as after a server switch, on the switchboard. Anything that fails before
//! the second login succeeded (all of it within [`ARRIVAL_TIMEOUT`], shorter than the client's wait for the
//! answer) closes this connection with 4006, and the player goes on with the draining instance.

use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use moonbridge_protocol::frame::FrameDecoder;
use moonbridge_protocol::packets::{JoinGame, Packet, PlayDisconnect, PluginMessage};
use moonbridge_protocol::transfer::{fml, is_channel};
use moonbridge_protocol::ws::v2::Control;
use moonbridge_protocol::FrameScanner;
use tokio::io::AsyncReadExt;
use tokio::net::TcpStream;
use tokio::time::Instant;
use tokio_util::sync::CancellationToken;
use tracing::info;

use super::login::duplicate;
use super::{Finish, Player, PlayerGone, Session, Summary};
use crate::backend::Backend;
use crate::labels::DrainArrival;
use crate::metrics::Stage;
use crate::move_state::{MoveAnswer, MoveState, ARRIVAL_TIMEOUT};
use crate::players::{Seen, Stop, COMMAND_QUEUE};
use crate::relay::{BackendSide, Follow, RelayStart};
use crate::resume::{hex_id, ResumeStart};
use crate::transfer::{self, Arrival, MAX_HELD_BYTES};

/// Why a move here was refused (the player goes on with the draining instance); the text is the log's.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum ArrivalError {
    /// The first message was not `moving`.
    #[error("not a move request")]
    NotAMoveRequest,
    /// No `[network]` here.
    #[error("this instance is in no network")]
    NoNetwork,
    /// The ticket names no live peer of this instance.
    #[error("instance {0} is not a live peer")]
    NotALivePeer(String),
    /// `limits.resume_window_seconds = 0` here.
    #[error("resume is off here (resume_window_seconds = 0)")]
    ResumeOff,
    /// The state could not be fetched over the instance link.
    #[error("{0}")]
    Fetch(#[from] crate::network::LinkError),
    /// The ticket's instance refused.
    #[error("{owner} refused: {why}")]
    RefusedThere {
        /// The ticket's instance.
        owner: String,
        /// Its reason.
        why: String,
    },
    /// The `moving` counts are not the draining instance's.
    #[error("the counts do not match the draining instance's")]
    CountsDiffer,
    /// The player's backend is not configured here.
    #[error("no backend named {0} here")]
    NoBackend(String),
    /// The backend did not take the second login.
    #[error("{backend} refused the second login: {why}")]
    SecondLogin {
        /// The backend's name.
        backend: String,
        /// Why.
        why: SecondLogin,
    },
    /// The player left or broke the protocol during the arrival.
    #[error("{0}")]
    Player(#[from] PlayerGone),
    /// [`ARRIVAL_TIMEOUT`] passed.
    #[error("not done within the move's {} s", ARRIVAL_TIMEOUT.as_secs())]
    Deadline,
    /// This instance began to shut down.
    #[error("this instance is shutting down")]
    ShuttingDown,
}

/// Why the second login to the same backend did not reach play.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub(crate) enum SecondLogin {
    /// It did not log in.
    #[error("{0}")]
    Dial(#[from] crate::transfer::DialError),
    /// A frame that does not parse.
    #[error("it sent a bad frame: {0}")]
    BadFrame(#[from] moonbridge_protocol::FrameError),
    /// A Play Disconnect, with its reason (chat JSON).
    #[error("it disconnected the new connection: {0}")]
    Disconnected(String),
    /// Over [`MAX_HELD_BYTES`] before its Join Game.
    #[error("it sent over {MAX_HELD_BYTES} bytes before its Join Game")]
    TooMuch,
    /// The connection ended.
    #[error("it closed the new connection")]
    Closed,
    /// A read failed.
    #[error("read failed: {0}")]
    Read(#[source] std::io::Error),
    /// No Join Game within the switch timeout (seconds).
    #[error("no Join Game within {0}s")]
    NoJoinGame(u64),
}

/// Reads the new backend connection (keeping every byte in `early`) until its Join Game or, for a Forge
/// server, its first `FML|HS` message: the second login is then in play. A Play Disconnect first (a backend
/// that refuses a second login of a name in play), the connection's end, more than
/// [`MAX_HELD_BYTES`] before it, or `limit` passing is why not. Frames may be `max_frame_len` bytes long
/// (`limits.max_play_frame_bytes`; what is kept is bounded by [`MAX_HELD_BYTES`] all the same).
async fn until_play(
    stream: &mut TcpStream,
    early: &mut BytesMut,
    limit: Duration,
    max_frame_len: usize,
) -> Result<(), SecondLogin> {
    let mut frames = FrameDecoder::new(max_frame_len);
    frames.queue_slice(early);
    let read = async {
        loop {
            while let Some(f) = frames.try_next_frame()? {
                match f.id {
                    JoinGame::ID => return Ok(()),
                    PluginMessage::CLIENTBOUND_ID if is_channel(&f.body, fml::CHANNEL) => return Ok(()),
                    PlayDisconnect::ID => {
                        let reason = f.decode::<PlayDisconnect>().map(|d| d.reason_json).unwrap_or_default();
                        return Err(SecondLogin::Disconnected(reason));
                    }
                    _ => {}
                }
            }
            if early.len() > MAX_HELD_BYTES {
                return Err(SecondLogin::TooMuch);
            }
            let mut chunk = BytesMut::with_capacity(16 * 1024);
            match stream.read_buf(&mut chunk).await {
                Ok(0) => return Err(SecondLogin::Closed),
                Ok(_) => {
                    frames.queue_slice(&chunk);
                    early.extend_from_slice(&chunk);
                }
                Err(e) => return Err(SecondLogin::Read(e)),
            }
        }
    };
    tokio::time::timeout(limit, read).await.map_err(|_| SecondLogin::NoJoinGame(limit.as_secs()))?
}

/// Closes a refused move's connection with 4006 (the player goes on with the draining instance).
async fn refuse<P: Player>(
    player: &mut P,
    info: &super::ConnInfo,
    metrics: &crate::metrics::Metrics,
    mut summary: Summary,
    why: ArrivalError,
) -> Summary {
    info!(client = %info.client.ip(), "move refused: {why}");
    metrics.drain_arrival(DrainArrival::Refused);
    player.finish(Finish::MoveRefused).await;
    summary.reason = format!("move refused: {why}");
    summary
}

/// One step of an arrival: `work` while watching the player, until the arrival's `deadline` or the instance's
/// shutdown, whichever comes first; why not as the refusal's reason.
async fn step<P: Player, T>(
    player: &mut P,
    shutdown: &CancellationToken,
    deadline: Instant,
    work: impl Future<Output = T>,
) -> Result<T, ArrivalError> {
    tokio::select! {
        r = tokio::time::timeout_at(deadline, player.during(work)) => match r {
            Ok(Ok(v)) => Ok(v),
            Ok(Err(gone)) => Err(gone.into()),
            Err(_) => Err(ArrivalError::Deadline),
        },
        () = shutdown.cancelled() => Err(ArrivalError::ShuttingDown),
    }
}

/// What an arrival has once the second login is in play: the state, the backend and its new connection.
struct Landed {
    state: MoveState,
    backend: Backend,
    stream: TcpStream,
    early: BytesMut,
    /// The resume window here.
    window: Duration,
}

/// The arrival up to the second login in play (all of it within [`ARRIVAL_TIMEOUT`] of the `moving`
/// message): the state fetched from the ticket's instance, the counts checked, the same backend logged in
/// again and its Join Game read. Why not, as the refusal's reason.
async fn land<P: Player>(
    s: &mut Session<'_, P>,
    moving: Control,
    summary: &mut Summary,
) -> Result<Landed, ArrivalError> {
    let deadline = Instant::now() + ARRIVAL_TIMEOUT;
    let Control::Moving { ticket, received, sent } = moving else { return Err(ArrivalError::NotAMoveRequest) };
    let net = s.state.network().ok_or(ArrivalError::NoNetwork)?;
    let owner = hex_id(&ticket.instance);
    let fetch = net.fetch_move(&ticket, received, sent).ok_or_else(|| ArrivalError::NotALivePeer(owner.clone()))?;
    let window = s.live.tunables.limits.resume_window().ok_or(ArrivalError::ResumeOff)?;
    let fetched = step(s.player, s.shutdown, deadline, fetch).await?;
    let state = match fetched? {
        MoveAnswer::State(st) => *st,
        MoveAnswer::Refused { why } => return Err(ArrivalError::RefusedThere { owner, why }),
    };
    summary.player = Some(state.name.clone());
    if state.received != sent || state.sent != received {
        return Err(ArrivalError::CountsDiffer);
    }
    let backend =
        s.live.backend_named(&state.backend).cloned().ok_or_else(|| ArrivalError::NoBackend(state.backend.clone()))?;
    summary.backend = Some(backend.name.clone());
    let connect_timeout = s.live.tunables.limits.backend_connect_timeout();
    let login = transfer::log_in_again(backend.clone(), state.identity(), connect_timeout);
    let refused = |why: SecondLogin| ArrivalError::SecondLogin { backend: backend.name.clone(), why };
    let (mut stream, mut early) = step(s.player, s.shutdown, deadline, login).await?.map_err(|e| refused(e.into()))?;
    // In play there: its Join Game (or, for Forge, its handshake's first message) came, not a Play Disconnect.
    let limit = s.live.tunables.transfer.switch_timeout();
    let max_frame_len = s.live.tunables.limits.max_play_frame_bytes;
    let in_play = until_play(&mut stream, &mut early, limit, max_frame_len);
    step(s.player, s.shutdown, deadline, in_play).await?.map_err(refused)?;
    info!(player = %state.name, from = %owner, backend = %backend.name, "player moved here from a draining instance");
    s.state.metrics.drain_arrival(DrainArrival::Moved);
    Ok(Landed { state, backend, stream, early, window })
}

/// Runs the session of a player who presented a move ticket.
pub(super) async fn arrive<P: Player>(mut s: Session<'_, P>, moving: Control) -> Summary {
    let mut summary = Summary::new("");
    let landed = match land(&mut s, moving, &mut summary).await {
        Ok(l) => l,
        Err(why) => return refuse(s.player, s.info, &s.state.metrics, summary, why).await,
    };
    let Landed { state: st, backend, stream, early, window } = landed;
    let (state, live) = (s.state, s.live);
    let identity = st.identity();
    let stop = Stop::child_of(s.shutdown);
    let (tx, rx) = tokio::sync::mpsc::channel(COMMAND_QUEUE);
    let seen = Seen {
        name: identity.name.clone(),
        uuid: identity.uuid().simple().to_string(),
        address: identity.client,
        transport: s.info.transport,
        carriage: s.player.carriage(),
        server: backend.name.clone(),
        movable: s.player.can_move(),
    };
    let registration =
        state.players.register(seen, Some(tx), Some(Arc::clone(&stop)), st.claim.clone(), duplicate(state));
    s.stage.set(Stage::Play);
    let ticket = transfer::Ticket {
        live: Arc::clone(live),
        identity,
        metrics: Arc::clone(&state.metrics),
        backend: backend.clone(),
        registration: Some(registration),
        movable: s.player.can_move(),
    };
    // The counts go on from the draining instance's (received from the player, sent to it).
    s.player.continue_counts(st.received, st.sent);
    let arrival = Arrival { stream, early, state: st, commands: Some(rx) };
    let start = RelayStart {
        shutdown: &stop,
        follow: Follow::Frames(FrameScanner::with_limit(live.tunables.limits.max_play_frame_bytes)),
        up: 0,
        down: 0,
        write_stall: live.tunables.limits.write_stall_timeout(),
        cipher: None,
        metrics: &backend.metrics,
        resume: Some(Box::new(ResumeStart {
            table: Arc::clone(&state.resume),
            window,
            buffer: live.tunables.limits.resume_buffer_bytes,
            metrics: Arc::clone(&state.metrics),
            moved: true,
        })),
        max_frame_len: live.tunables.limits.max_play_frame_bytes,
        up_start: None,
        lanes: crate::relay::lanes::LaneStart::from_tunables(&live.tunables),
    };
    let report = s.player.relay(BackendSide::Board(ticket.arrived(arrival)), start).await;
    summary.relay_ended(report, &stop);
    summary
}
