//! The login stage: route by the handshake host, authenticate in online mode ([`super::online`]), forward the
//! player's identity, open the backend and wait for its first answer, then hand over to the relay.

use std::sync::Arc;

use bytes::BytesMut;
use moonbridge_protocol::crypto::Cfb8Encryptor;
use moonbridge_protocol::frame::peek_packet_id;
use moonbridge_protocol::handshake::HostField;
use moonbridge_protocol::packets::{
    chat_text, EncryptionRequest, Handshake, LoginDisconnect, LoginStart, LoginSuccess, Packet,
};
use moonbridge_protocol::transfer::watch::{ClientboundWatch, ServerboundFilter, Verdict};
use moonbridge_protocol::FrameScanner;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::time::timeout;
use tracing::warn;

use super::online::{authenticate, encryptor};
use super::{Finish, Player, PlayerGone, Session, Summary};
use crate::backend::Identity;
use crate::config::{AuthMode, DuplicateLogin};
use crate::labels::{LoginOutcome, StreamDirection};
use crate::limits::HandshakeSlot;
use crate::metrics::Stage;
use crate::network::{Admit, ALREADY_PLAYING, KICKED_ELSEWHERE};
use crate::players::{Duplicate, Seen, Stop, COMMAND_QUEUE};
use crate::rate::Bucket;
use crate::relay::{BackendSide, Follow, RelayStart, UpStart, Watching, SHUTDOWN_REASON};
use crate::resume::ResumeStart;
use crate::transfer::{self, Handed};
use crate::unfollowed::Afterwards;

/// Told to a player whose address logs in faster than `[rate_limits]` allow.
const TOO_MANY_LOGINS: &str = "Too many logins from your address; please wait a minute and try again";

/// Bytes read of the backend's first answer before the relay starts, in bytes.
const FIRST_ANSWER_READ: usize = 16 * 1024;

/// Why connecting to the backend and sending it the opening failed.
enum BackendWait {
    Connect(crate::backend::BackendError),
    Write(std::io::Error),
}

/// What the handshake stage read for a login.
pub(super) struct LoginRequest {
    pub(super) handshake: Handshake,
    pub(super) login: LoginStart,
    /// The Login Start frame as received.
    pub(super) login_raw: BytesMut,
    /// Bytes the player sent after Login Start.
    pub(super) rest: BytesMut,
}

/// Sends a Login Disconnect with `reason` (encrypted with `encrypt` once the player's stream is) and ends the
/// connection.
pub(super) async fn login_disconnect<P: Player>(
    player: &mut P,
    reason: &str,
    encrypt: Option<&mut Cfb8Encryptor>,
    finish: Finish,
) {
    if let Ok(mut frame) = (LoginDisconnect { reason_json: chat_text(reason) }).to_frame_bytes() {
        if let Some(e) = encrypt {
            e.apply(&mut frame);
        }
        let _ = player.send(&frame).await;
    }
    player.finish(finish).await;
}

/// What the player sent right after Login Start (`rest`, plaintext), for a session whose relay filters the
/// `BungeeCord` channel (`watched`): what may reach the backend with the opening, and the filter's state for the
/// relay (a frame under way, a head held back). Unwatched, `rest` goes as it is.
///
/// # Errors
/// The bytes are not Minecraft frames the filter can follow: the login is refused.
fn sent_ahead(
    rest: &mut BytesMut,
    watched: bool,
    max_frame_len: usize,
) -> Result<Option<Box<UpStart>>, moonbridge_protocol::FrameError> {
    if !watched || rest.is_empty() {
        return Ok(None);
    }
    let mut filter = ServerboundFilter::with_limit(max_frame_len);
    let kept = filter.filter(rest)?;
    let held = rest.get(kept.pass..kept.pass + kept.held).unwrap_or_default().to_vec();
    rest.truncate(kept.pass);
    Ok(Some(Box::new(UpStart { filter, held })))
}

/// The login stage, from the route to the end of the relay.
pub(super) async fn login<P: Player>(mut s: Session<'_, P>, req: LoginRequest, slot: HandshakeSlot) -> Summary {
    let LoginRequest { handshake, login, login_raw, rest } = req;
    let mut summary = Summary::new("");
    summary.player = Some(login.name.clone());
    let state = Arc::clone(s.state);
    let live = Arc::clone(s.live);
    if !state.rate.allow(&live.tunables.rate_limits, s.info.client.ip(), Bucket::Login) {
        if let Some(suppressed) = state.limit_log.allow() {
            warn!(client = %s.info.client.ip(), suppressed, "rate_limits.logins_per_minute reached: refusing login");
        }
        login_disconnect(s.player, TOO_MANY_LOGINS, None, Finish::Normal).await;
        summary.reason = "rate limited: too many logins from this address".into();
        summary.outcome = Some(LoginOutcome::RateLimited);
        return summary;
    }
    let host = HostField::parse(&handshake.server_address);
    let Some(backend) = live.route(&host.routing_key()) else {
        login_disconnect(s.player, &format!("Unknown server address {}", host.hostname), None, Finish::Normal).await;
        summary.reason = format!("no route for host {:?}", host.hostname);
        summary.outcome = Some(LoginOutcome::UnknownHost);
        return summary;
    };
    summary.backend = Some(backend.name.clone());

    // Online mode: authenticate before any backend is contacted.
    let (verified, mut cipher, rest) = match &state.online {
        // Boxed, like the status and legacy paths: a session's task is sized by its largest state, and an idle
        // player should not carry the encryption handshake's.
        Some(auth) => match Box::pin(authenticate(&mut s, auth, &login.name, rest, slot)).await {
            Ok(v) => (Some(v.profile), Some(v.cipher), v.rest),
            Err(mut f) => {
                if let Some(message) = f.message {
                    login_disconnect(s.player, message, encryptor(&mut f.cipher), f.finish).await;
                } else {
                    s.player.finish(f.finish).await;
                }
                summary.reason = format!("online mode: {}", f.reason);
                summary.outcome = Some(f.outcome());
                return summary;
            }
        },
        None => {
            drop(slot);
            (None, None, rest)
        }
    };

    if let Some(profile) = &verified {
        summary.player = Some(profile.name.clone());
    }
    // `[network]`: one session per name on the whole network (`duplicate_login`). The name's claim is held for
    // the session (released when the player leaves, or at once when the login does not get in).
    let mut claim = None;
    if let Some(net) = state.network() {
        let name = verified.as_ref().map_or(login.name.as_str(), |p| p.name.as_str());
        let admit = net.admit(name).await;
        if let Admit::Go(c) = admit {
            // Boxed: it is held across the backend's login and would otherwise size every session task.
            claim = Some(Box::new(c));
        } else {
            login_disconnect(s.player, ALREADY_PLAYING, encryptor(&mut cipher), Finish::Normal).await;
            summary.reason =
                "refused: the name is already playing on the network (duplicate_login = refuse_new)".into();
            summary.outcome = Some(LoginOutcome::DuplicateRefused);
            return summary;
        }
    }
    // The session's stop signal: the proxy's shutdown, or a kick of this session (a duplicate login).
    let stop = Stop::child_of(s.shutdown);
    // Boxed: it waits across the whole session (for the transfer layer) and would otherwise size every task.
    let identity =
        Box::new(Identity { handshake, login_raw, name: login.name, client: s.info.client, profile: verified });
    // A session whose relay will filter the `BungeeCord` channel filters what the player sent right after Login
    // Start too (it reaches the backend with the opening): the filter's state goes on into the relay.
    let can_move = s.player.can_move()
        && cipher.is_none()
        && state.network().is_some()
        && live.tunables.limits.resume_window().is_some();
    let watched = transfer::applies(&live, backend) || can_move;
    let mut rest = rest;
    let ahead = sent_ahead(&mut rest, watched, live.tunables.limits.max_play_frame_bytes);
    let (up_start, opening) = match (ahead, identity.opening(backend, &rest)) {
        (Ok(up_start), Ok(opening)) => (up_start, opening),
        (ahead, _) => {
            let (shown, reason) = match ahead {
                Err(e) => {
                    backend.metrics.unfollowed.lost(StreamDirection::ToBackend, e, Afterwards::Closed);
                    ("Protocol error", format!("unreadable frames after Login Start: {e}"))
                }
                Ok(_) => ("Handshake could not be forwarded", "forwarded handshake too long".to_string()),
            };
            login_disconnect(s.player, shown, encryptor(&mut cipher), Finish::ProtocolError).await;
            summary.reason = reason;
            summary.outcome = Some(LoginOutcome::BadHandshake);
            return summary;
        }
    };
    drop(rest);
    let up = opening.len() as u64;

    let unreachable = format!("Server {} is unreachable", backend.name);
    // Connect, send the opening, and wait for the backend's first answer (Login Success, Encryption Request or
    // Login Disconnect) while the player is watched: kept alive, and the wait abandoned if the player leaves.
    let login_timeout = live.tunables.limits.login_timeout();
    let client = s.info.client;
    let connect_timeout = live.tunables.limits.backend_connect_timeout();
    let wait = async {
        let mut stream = backend.connect(client, connect_timeout).await.map_err(BackendWait::Connect)?;
        stream.write_all(&opening).await.map_err(BackendWait::Write)?;
        // The first read only has to show the first packet; the relay carries the rest. A small buffer keeps a
        // thousand simultaneous logins from each holding a relay-sized one.
        let mut first = BytesMut::with_capacity(FIRST_ANSWER_READ);
        let answered = timeout(login_timeout, stream.read_buf(&mut first)).await;
        Ok::<_, BackendWait>((stream, first, answered))
    };
    let waited = tokio::select! {
        r = s.player.during(wait) => r,
        () = s.shutdown.cancelled() => {
            login_disconnect(s.player, SHUTDOWN_REASON, encryptor(&mut cipher), Finish::Shutdown).await;
            summary.reason = "proxy shutdown".into();
            summary.outcome = Some(LoginOutcome::Shutdown);
            return summary;
        }
    };
    let (mut stream, mut first, answered) = match waited {
        Ok(Ok(v)) => v,
        Ok(Err(BackendWait::Connect(e))) => {
            warn!(backend = %backend.name, "{e}");
            login_disconnect(s.player, &unreachable, encryptor(&mut cipher), Finish::BackendUnavailable).await;
            summary.reason = e.to_string();
            summary.outcome = Some(LoginOutcome::BackendUnreachable);
            return summary;
        }
        Ok(Err(BackendWait::Write(e))) => {
            login_disconnect(s.player, &unreachable, encryptor(&mut cipher), Finish::BackendUnavailable).await;
            summary.reason = format!("backend write failed: {e}");
            summary.outcome = Some(LoginOutcome::BackendUnreachable);
            return summary;
        }
        Err(gone) => {
            // Either way the transport is closed properly (an answered Close is not sent twice).
            let finish = Finish::after(&gone);
            s.player.finish(finish).await;
            summary.reason = format!("{gone} (while waiting for the backend)");
            summary.outcome = Some(if matches!(gone, PlayerGone::Fault(_)) {
                LoginOutcome::ProtocolError
            } else {
                LoginOutcome::PlayerLeft
            });
            return summary;
        }
    };
    let failed = match answered {
        Ok(Ok(n)) if n > 0 => None,
        Ok(Ok(_)) => Some((
            format!("Server {} closed the connection during login", backend.name),
            "backend closed during login".to_string(),
            LoginOutcome::BackendClosed,
        )),
        Ok(Err(e)) => {
            Some((unreachable.clone(), format!("backend read failed: {e}"), LoginOutcome::BackendUnreachable))
        }
        Err(_) => {
            warn!(backend = %backend.name, "backend did not answer the login within {}s", live.tunables.limits.login_timeout_seconds);
            Some((
                format!("Server {} did not answer the login in time", backend.name),
                "backend login timeout".into(),
                LoginOutcome::BackendTimeout,
            ))
        }
    };
    let first_id = peek_packet_id(&first);
    let failed = failed.or_else(|| match first_id {
        // An online-mode backend behind an online-mode proxy would ask the player to encrypt a second time.
        Ok(Some(id)) if id == EncryptionRequest::ID && cipher.is_some() => {
            warn!(backend = %backend.name, "backend sent Encryption Request: with auth.mode = \"online\" backends must run in offline mode");
            Some((
                format!("Server {} is misconfigured (online mode behind an online-mode proxy)", backend.name),
                "backend is in online mode".into(),
                LoginOutcome::BackendMisconfigured,
            ))
        }
        _ => None,
    });
    if let Some((message, reason, outcome)) = failed {
        login_disconnect(s.player, &message, encryptor(&mut cipher), Finish::BackendUnavailable).await;
        summary.reason = reason;
        summary.outcome = Some(outcome);
        return summary;
    }
    let logged_in = matches!(first_id, Ok(Some(id)) if id == LoginSuccess::ID);
    // In play (and logged in) from here: counted, with the bytes so far, before the player can see its Login
    // Success.
    let refused = matches!(first_id, Ok(Some(id)) if id == LoginDisconnect::ID);
    if refused {
        // The backend turned the player away (whitelist, ban, full): relayed as it is, counted as refused.
        summary.outcome = Some(LoginOutcome::BackendRefused);
    } else {
        // Counted now, not when the session ends: a login succeeded when play begins.
        state.metrics.login(match state.auth {
            AuthMode::Passthrough => LoginOutcome::PassthroughOk,
            AuthMode::Offline => LoginOutcome::OfflineOk,
            AuthMode::Online => LoginOutcome::OnlineOk,
        });
    }
    backend.metrics.to_backend.inc_by(up);
    let write_stall = live.tunables.limits.write_stall_timeout();
    let metrics = &backend.metrics;
    let resume = live.tunables.limits.resume_window().map(|window| {
        Box::new(ResumeStart {
            table: Arc::clone(&s.state.resume),
            window,
            buffer: live.tunables.limits.resume_buffer_bytes,
            metrics: Arc::clone(&s.state.metrics),
            moved: false,
        })
    });
    // Login Success means the clientbound stream stays plaintext Minecraft: follow its frames so a shutdown can
    // insert a Disconnect between two of them, and, for a player who can be moved, watch for the frames that
    // start a switch (the transfer layer takes over only then: crate::transfer). Anything else (backend
    // encryption) is relayed opaquely.
    // Every player in Play is in this proxy's player table (what `BungeeCord` requests are answered from); a
    // movable one takes commands from other sessions too.
    // In a network, a player whose client follows a drain's `move` (carriage v2, offline mode) is watched as a
    // switchable one is: a drain moves it to another instance through the switchboard (`can_move` above).
    let seen = logged_in.then(|| Seen {
        name: identity.name.clone(),
        uuid: identity.uuid().simple().to_string(),
        address: identity.client,
        transport: s.info.transport,
        carriage: s.player.carriage(),
        server: backend.name.clone(),
        movable: can_move,
    });
    let mut registration = None;
    let mut board = None;
    let follow = if !logged_in || !watched {
        registration = seen.map(|seen| {
            let claim = claim.take().and_then(|c| c.take());
            state.players.register(seen, None, Some(Arc::clone(&stop)), claim, duplicate(&state))
        });
        drop(identity);
        let mut scanner = FrameScanner::with_limit(live.tunables.limits.max_play_frame_bytes);
        if logged_in && scanner.scan(&first).is_ok() {
            Follow::Frames(scanner)
        } else {
            Follow::Nothing
        }
    } else {
        let registration = transfer::registration(&live);
        if let Err(e) = stream.write_all(&registration).await {
            login_disconnect(s.player, &unreachable, encryptor(&mut cipher), Finish::BackendUnavailable).await;
            summary.reason = format!("backend write failed: {e}");
            return summary;
        }
        let (tx, rx) = tokio::sync::mpsc::channel(COMMAND_QUEUE);
        let fallback = transfer::has_fallback(&live, backend);
        let mut watch = ClientboundWatch::new(fallback, live.tunables.limits.max_play_frame_bytes);
        let ticket = Box::new(transfer::Ticket {
            live: Arc::clone(&live),
            identity: *identity,
            metrics: Arc::clone(&state.metrics),
            backend: backend.clone(),
            movable: can_move,
            registration: seen.map(|seen| {
                let claim = claim.take().and_then(|c| c.take());
                state.players.register(seen, Some(tx), Some(Arc::clone(&stop)), claim, duplicate(&state))
            }),
        });
        match watch.scan(&first, 0) {
            Ok(Verdict::Pass) => Follow::Watch(Box::new(Watching::new(watch, Some(ticket), fallback, Some(rx)))),
            Ok(Verdict::Hold(k)) => {
                let mut watching = Watching::new(watch, Some(ticket), fallback, Some(rx));
                watching.first_held = first.split_off(k).to_vec();
                Follow::Watch(Box::new(watching))
            }
            Ok(Verdict::Handover(k)) => {
                // A switch asked for in the backend's very first bytes: the switchboard from the start.
                let rest = first.split_off(k).to_vec();
                let handed = Handed {
                    rest,
                    watched: watch.finish(0),
                    tail: (0, false),
                    lost: None,
                    command: None,
                    commands: Some(rx),
                };
                board = Some((ticket, handed));
                Follow::Frames(FrameScanner::with_limit(live.tunables.limits.max_play_frame_bytes))
            }
            Err(e) => {
                // The backend's first bytes already cannot be followed: relayed unparsed, said once; the
                // ticket keeps the player registered.
                backend.metrics.unfollowed.lost(StreamDirection::ToPlayer, e, Afterwards::UnparsedUnswitchable);
                Follow::Lost { _kept: ticket }
            }
        }
    };
    if !refused {
        // In play from here, once registered: a drain never sees the player in neither stage nor table.
        s.stage.set(Stage::Play);
    }
    let down = first.len() as u64;
    if let Some(e) = encryptor(&mut cipher) {
        e.apply(&mut first);
    }
    backend.metrics.to_player.inc_by(down);
    // Empty when the watch held back the head of the first frame.
    if let Err(e) = if first.is_empty() { Ok(()) } else { s.player.send(&first).await } {
        summary.reason = format!("player write failed: {e}");
        return summary;
    }
    drop(first);
    let max_frame_len = live.tunables.limits.max_play_frame_bytes;
    let lanes = crate::relay::lanes::LaneStart::from_tunables(&live.tunables);
    let start = RelayStart {
        shutdown: &stop,
        follow,
        up,
        down,
        write_stall,
        cipher,
        metrics,
        resume,
        max_frame_len,
        up_start,
        lanes,
    };
    let side = match board {
        Some((ticket, handed)) => BackendSide::Board((*ticket).board(stream, handed)),
        None => BackendSide::new(stream),
    };
    let report = s.player.relay(side, start).await;
    drop(registration);
    summary.relay_ended(report, &stop);
    summary
}

/// What the player table does with two sessions of one name registered here at once: in a network,
/// `duplicate_login` decides; without one, both stay, as before (the backends decide).
pub(super) fn duplicate(state: &crate::state::ProxyState) -> Duplicate {
    match state.network().map(|n| n.duplicate_login()) {
        None => Duplicate::Replace,
        Some(DuplicateLogin::KickExisting) => Duplicate::Keep { later: true, reason: KICKED_ELSEWHERE },
        Some(DuplicateLogin::RefuseNew) => Duplicate::Keep { later: false, reason: ALREADY_PLAYING },
    }
}
