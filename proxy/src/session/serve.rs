//! Runs a session's stages in order and logs how it ended.

use std::sync::Arc;
use std::time::Instant;

use moonbridge_protocol::ws::v2::Control;
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

/// Told to a player whose address opens connections faster than `[rate_limits]` allow.
pub(crate) const TOO_MANY_CONNECTIONS: &str =
    "Too many connections from your address; please wait a moment and try again";

use super::{arrive, login, opening, status};
use super::{within_handshake, ConnInfo, Finish, HandshakeCut, Player, Session, Summary};
use crate::labels::{HandshakeFailure, RefusedReason};
use crate::limits::HandshakeSlot;
use crate::metrics::{Stage, StageGauge};
use crate::state::{Live, ProxyState};

/// What an accepted connection brings to its session besides the player.
pub(crate) struct Accepted {
    pub(crate) info: ConnInfo,
    pub(crate) state: Arc<ProxyState>,
    /// The configuration snapshot taken at accept.
    pub(crate) live: Arc<Live>,
    pub(crate) slot: HandshakeSlot,
    pub(crate) shutdown: CancellationToken,
    /// Ends the handshake stage (it started at accept, so the transport setup before it counted too).
    pub(crate) deadline: tokio::time::Instant,
    pub(crate) stage: StageGauge,
}

/// Runs a whole session and logs its end: a new login, or with `moving` a player moving here from a draining
/// instance (its `moving` request).
pub(crate) async fn serve<P: Player>(mut player: P, accepted: Accepted, moving: Option<Box<Control>>) {
    let Accepted { info, state, live, slot, shutdown, deadline, stage } = accepted;
    let started = Instant::now();
    let summary = {
        let session = Session {
            player: &mut player,
            info: &info,
            state: &state,
            live: &live,
            shutdown: &shutdown,
            stage: &stage,
        };
        run(session, slot, deadline, moving).await
    };
    drop(stage);
    if let Some(outcome) = summary.outcome {
        state.metrics.login(outcome);
    }
    let secs = started.elapsed().as_secs_f64();
    let (messages_in, messages_out) = match player.message_counts() {
        Some((i, o)) => (i.to_string(), o.to_string()),
        None => ("-".to_string(), "-".to_string()),
    };
    info!(
        client = %info.client.ip(),
        player = summary.player.as_deref().unwrap_or("-"),
        backend = summary.backend.as_deref().unwrap_or("-"),
        bytes_up = summary.up,
        bytes_down = summary.down,
        ws_messages_in = %messages_in,
        ws_messages_out = %messages_out,
        duration_s = format_args!("{secs:.3}"),
        reason = %summary.reason,
        "session ended"
    );
}

async fn run<P: Player>(
    s: Session<'_, P>,
    slot: HandshakeSlot,
    deadline: tokio::time::Instant,
    moving: Option<Box<Control>>,
) -> Summary {
    // A player moving here from a draining instance: no handshake, its state comes from there.
    if let Some(moving) = moving {
        drop(slot);
        return Box::pin(arrive::arrive(s, *moving)).await;
    }
    let limit = s.live.tunables.limits.handshake_timeout_seconds;
    let opening = within_handshake(deadline, limit, &slot, s.shutdown, opening::read(&mut *s.player)).await;
    let metrics = &s.state.metrics;
    match &opening {
        Ok(Ok(_)) | Err(HandshakeCut::Shutdown) => {}
        Ok(Err(opening::OpeningError::Closed)) => metrics.handshake_failed(HandshakeFailure::Closed),
        Ok(Err(opening::OpeningError::BadLoginStart { .. })) => {
            metrics.handshake_failed(HandshakeFailure::BadLoginStart)
        }
        Ok(Err(_)) => metrics.handshake_failed(HandshakeFailure::BadFrame),
        Err(HandshakeCut::Timeout(_)) => metrics.handshake_failed(HandshakeFailure::Timeout),
        Err(HandshakeCut::Evicted) => metrics.handshake_failed(HandshakeFailure::Evicted),
    }
    let opening = match opening {
        Ok(Ok(o)) => o,
        Ok(Err(opening::OpeningError::Closed)) => return Summary::new("closed during handshake"),
        Ok(Err(opening::OpeningError::BadLoginStart { tell, detail })) => {
            // Told with a Login Disconnect, before any backend or session server hears of the player.
            login::login_disconnect(&mut *s.player, tell, None, Finish::Normal).await;
            return Summary::new(format!("bad Login Start: {detail}"));
        }
        Ok(Err(e)) => {
            if let Some(suppressed) = s.state.bad_input_log.allow() {
                info!(client = %s.info.client.ip(), suppressed, "closing connection: {e}");
            }
            s.player.finish(Finish::ProtocolError).await;
            return Summary::new(format!("bad input: {e}"));
        }
        Err(cut) => {
            let finish = match cut {
                HandshakeCut::Timeout(_) => {
                    if let Some(suppressed) = s.state.bad_input_log.allow() {
                        debug!(client = %s.info.client.ip(), suppressed, "closing connection: {cut}");
                    }
                    Finish::Policy
                }
                HandshakeCut::Evicted => Finish::Policy,
                HandshakeCut::Shutdown => Finish::Shutdown,
            };
            s.player.finish(finish).await;
            return Summary::new(match cut {
                HandshakeCut::Timeout(_) => "handshake timeout".to_string(),
                other => other.to_string(),
            });
        }
    };
    if s.info.rate_limited {
        s.state.metrics.refused(RefusedReason::RateLimit);
        if let Some(suppressed) = s.state.limit_log.allow() {
            warn!(client = %s.info.client.ip(), suppressed, "rate_limits.connections_per_second reached: refusing connection");
        }
        if matches!(opening, opening::Opening::Login { .. }) {
            login::login_disconnect(&mut *s.player, TOO_MANY_CONNECTIONS, None, Finish::Normal).await;
        } else {
            s.player.finish(Finish::Normal).await;
        }
        return Summary::new("rate limited: too many connections from this address");
    }
    // A draining instance keeps its listeners open (a balancer that finds them closed marks it failed); a login on
    // a connection accepted since is told the restart message (docs/network.md, "Drain"; a client that can move
    // was sent on before its session started).
    if s.info.draining && matches!(opening, opening::Opening::Login { .. }) {
        s.state.metrics.refused(RefusedReason::Draining);
        login::login_disconnect(&mut *s.player, crate::relay::SHUTDOWN_REASON, None, Finish::Shutdown).await;
        return Summary::new("draining: a new login told the restart message");
    }
    match opening {
        opening::Opening::Legacy { ping, raw } => {
            drop(slot);
            s.stage.set(Stage::Status);
            Box::pin(status::legacy_ping(s, ping, raw, deadline)).await
        }
        opening::Opening::Status { handshake, rest } => {
            drop(slot);
            s.stage.set(Stage::Status);
            Box::pin(status::status(s, handshake, rest)).await
        }
        // Online mode keeps the handshake slot until the Encryption Response is in: an unauthenticated
        // connection counts against `max_handshaking` until then.
        opening::Opening::Login { handshake, login, login_raw, rest } => {
            s.stage.set(Stage::Login);
            login::login(s, login::LoginRequest { handshake, login, login_raw, rest }, slot).await
        }
    }
}
