//! A player moving here from a draining instance (docs/cluster.md, "Drain"): its connection's first message
//! was `moving <ticket> <received> <sent>`. The session's state comes from the ticket's instance over an
//! instance link; the player is logged in to the same backend again (the backend may kick the older
//! connection for the duplicate login: that connection is the draining instance's, and the kick never reaches
//! the player); then the session runs as after a server switch, on the switchboard. Anything that fails before
//! the second login succeeded closes this connection with 4006, and the player goes on with the draining
//! instance.

use std::sync::Arc;
use std::time::Duration;

use bytes::BytesMut;
use moonbridge_protocol::frame::{FrameDecoder, MAX_FRAME_LEN};
use moonbridge_protocol::packets::{JoinGame, Packet, PlayDisconnect, PluginMessage};
use moonbridge_protocol::transfer::{fml, is_channel};
use tokio::io::AsyncReadExt;

use moonbridge_protocol::ws::v2::Control;
use moonbridge_protocol::FrameScanner;
use tracing::info;

use super::login::duplicate;
use super::{Finish, Player, Session, Summary};
use crate::metrics::Stage;
use crate::network::moves::{fetch, MoveAnswer};
use crate::players::{Seen, Stop, COMMAND_QUEUE};
use crate::relay::resume::{hex_id, ResumeStart};
use crate::relay::{BackendSide, Follow, RelayStart};
use crate::transfer::{self, Arrival, MAX_HELD_BYTES};

/// Reads the new backend connection (keeping every byte in `early`) until its Join Game or, for a Forge
/// server, its first `FML|HS` message: the second login is then in play. A Play Disconnect first (a backend
/// that refuses a second login of a name in play), the connection's end, more than
/// [`MAX_HELD_BYTES`] before it, or `limit` passing is why not.
async fn until_play(stream: &mut tokio::net::TcpStream, early: &mut BytesMut, limit: Duration) -> Result<(), String> {
    let mut frames = FrameDecoder::new(MAX_FRAME_LEN);
    frames.queue_slice(early);
    let read = async {
        loop {
            while let Some(f) = frames.try_next_frame().map_err(|e| format!("it sent a bad frame: {e}"))? {
                match f.id {
                    JoinGame::ID => return Ok(()),
                    PluginMessage::CLIENTBOUND_ID if is_channel(&f.body, fml::CHANNEL) => return Ok(()),
                    PlayDisconnect::ID => {
                        let reason = f.decode::<PlayDisconnect>().map(|d| d.reason_json).unwrap_or_default();
                        return Err(format!("it disconnected the new connection: {reason}"));
                    }
                    _ => {}
                }
            }
            if early.len() > MAX_HELD_BYTES {
                return Err(format!("it sent over {MAX_HELD_BYTES} bytes before its Join Game"));
            }
            let mut chunk = BytesMut::with_capacity(16 * 1024);
            match stream.read_buf(&mut chunk).await {
                Ok(0) => return Err("it closed the new connection".to_string()),
                Ok(_) => {
                    frames.queue_slice(&chunk);
                    early.extend_from_slice(&chunk);
                }
                Err(e) => return Err(format!("read failed: {e}")),
            }
        }
    };
    tokio::time::timeout(limit, read).await.map_err(|_| format!("no Join Game within {}s", limit.as_secs()))?
}

/// Closes a refused move's connection with 4006 (the player goes on with the draining instance).
async fn refuse<P: Player>(player: &mut P, info: &super::ConnInfo, mut summary: Summary, why: String) -> Summary {
    info!(client = %info.client.ip(), "move refused: {why}");
    player.finish(Finish::MoveRefused).await;
    summary.reason = format!("move refused: {why}");
    summary
}

/// Runs the session of a player who presented a move ticket.
pub(super) async fn arrive<P: Player>(s: Session<'_, P>, moving: Control) -> Summary {
    let Control::Moving { ticket, received, sent } = moving else { return Summary::new("not a move request") };
    let state = Arc::clone(s.state);
    let live = Arc::clone(s.live);
    let mut summary = Summary::new("");
    let Some(net) = state.network() else {
        return refuse(s.player, s.info, summary, "this instance is in no network".into()).await;
    };
    let owner = hex_id(&ticket.instance);
    let Some(peer) = net.peer_of(&owner).filter(|_| owner != net.id) else {
        return refuse(s.player, s.info, summary, format!("instance {owner} is not a live peer")).await;
    };
    let Some(window) = live.tunables.limits.resume_window() else {
        return refuse(s.player, s.info, summary, "resume is off here (resume_window_seconds = 0)".into()).await;
    };
    let fetched = tokio::select! {
        r = s.player.during(fetch(&peer, &net.secret, &ticket, received, sent)) => r,
        () = s.shutdown.cancelled() => return refuse(s.player, s.info, summary, "this instance is shutting down".into()).await,
    };
    let st = match fetched {
        Ok(Ok(MoveAnswer::State(st))) => st,
        Ok(Ok(MoveAnswer::Refused { why })) => {
            return refuse(s.player, s.info, summary, format!("{owner} refused: {why}")).await
        }
        Ok(Err(e)) => return refuse(s.player, s.info, summary, e.to_string()).await,
        Err(gone) => return refuse(s.player, s.info, summary, gone.to_string()).await,
    };
    summary.player = Some(st.name.clone());
    if st.received != sent || st.sent != received {
        return refuse(s.player, s.info, summary, "the counts do not match the draining instance's".into()).await;
    }
    let Some(backend) = live.backend_named(&st.backend).cloned() else {
        return refuse(s.player, s.info, summary, format!("no backend named {} here", st.backend)).await;
    };
    summary.backend = Some(backend.name.clone());
    let identity = st.identity();
    let connect_timeout = live.tunables.limits.backend_connect_timeout();
    let login = transfer::log_in_again(backend.clone(), identity.clone(), connect_timeout);
    let logged_in = tokio::select! {
        r = s.player.during(login) => r,
        () = s.shutdown.cancelled() => return refuse(s.player, s.info, summary, "this instance is shutting down".into()).await,
    };
    let (mut stream, mut early) = match logged_in {
        Ok(Ok(v)) => v,
        Ok(Err(why)) => {
            return refuse(s.player, s.info, summary, format!("{} refused the second login: {why}", backend.name)).await
        }
        Err(gone) => return refuse(s.player, s.info, summary, gone.to_string()).await,
    };
    // In play there: its Join Game (or, for Forge, its handshake's first message) came, not a Play Disconnect.
    let limit = live.tunables.transfer.switch_timeout();
    let played = tokio::select! {
        r = s.player.during(until_play(&mut stream, &mut early, limit)) => r,
        () = s.shutdown.cancelled() => return refuse(s.player, s.info, summary, "this instance is shutting down".into()).await,
    };
    match played {
        Ok(Ok(())) => {}
        Ok(Err(why)) => {
            return refuse(s.player, s.info, summary, format!("{} refused the second login: {why}", backend.name)).await
        }
        Err(gone) => return refuse(s.player, s.info, summary, gone.to_string()).await,
    }
    s.stage.set(Stage::Play);
    let stop = Stop::child_of(s.shutdown);
    let (tx, rx) = tokio::sync::mpsc::channel(COMMAND_QUEUE);
    let seen = Seen {
        name: identity.name.clone(),
        uuid: identity.uuid().simple().to_string(),
        address: identity.client,
        server: backend.name.clone(),
        movable: s.player.can_move(),
    };
    let registration =
        state.players.register(seen, Some(tx), Some(Arc::clone(&stop)), st.claim.clone(), duplicate(&state));
    let ticket = transfer::Ticket {
        live: Arc::clone(&live),
        identity,
        metrics: Arc::clone(&state.metrics),
        backend: backend.clone(),
        registration: Some(registration),
        movable: s.player.can_move(),
    };
    let st = *st;
    let arrival = Arrival {
        stream,
        early,
        client_entity: st.client_entity,
        forge_record: st.forge_record,
        clear: st.clear,
        partial: st.partial,
        commands: Some(rx),
    };
    info!(player = %st.name, from = %owner, backend = %backend.name, "player moved here from a draining instance");
    s.player.continue_counts(sent, received);
    let start = RelayStart {
        shutdown: &stop,
        follow: Follow::Frames(FrameScanner::new()),
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
    };
    let report = s.player.relay(BackendSide::Board(ticket.arrived(arrival)), start).await;
    summary.up = report.up;
    summary.down = report.down;
    summary.reason = match stop.kicked() {
        Some(reason) => format!("kicked: {reason}"),
        None => report.end.to_string(),
    };
    if let Some(visited) = report.visited {
        summary.backend = Some(visited.join(","));
    }
    summary
}
