//! Carriage v2 resume in the client (`docs/carriage.md`): a WebSocket session that outlives its connections,
//! reconnecting to the same URL and presenting its token when a connection drops.

use std::time::{Duration, Instant};

use futures_util::{SinkExt, StreamExt};
use moonbridge_protocol::ws::v2::{self, Control};
use tokio::io::{AsyncRead, AsyncWrite};
use tokio_tungstenite::tungstenite::{Error as WsError, Message};
use tokio_tungstenite::WebSocketStream;

use super::tcp::run_tcp;
use super::wait::{close_expired, closing_flag, CLOSE_LINGER};
use super::ws::{feed_batch, run_ws, Resume, WsEnd, WsZstd};
use crate::connect::{establish, Stream};
use crate::error::ClientError;
use crate::shared::{bump, Shared};
use crate::target::Target;

/// Runs a WebSocket session: its connections one after another while a carriage v2 session resumes after
/// drops (new TCP, TLS and upgrade each time, within the proxy's window, with backoff).
pub(super) async fn run_ws_session(first: Stream, target: &Target, shared: &Shared) -> ClientError {
    let mut resume = Resume::new();
    let mut zstd = match WsZstd::for_stream(&first) {
        Ok(z) => z,
        Err(e) => return e,
    };
    let mut stream = first;
    // When a draining instance first sent this session on (close 4007), until the session starts somewhere.
    let mut sent_on_since: Option<Instant> = None;
    loop {
        if resume.token.is_some() {
            sent_on_since = None;
        }
        let v2 = stream.v2();
        let end = match &mut stream {
            Stream::Ws(ws, _) => run_ws(ws, shared, v2.then_some(&mut resume), &mut zstd).await,
            Stream::Wss(ws, _) => run_ws(ws, shared, v2.then_some(&mut resume), &mut zstd).await,
            Stream::Tcp(_) => {
                let Stream::Tcp(s) = stream else { return ClientError::Closed };
                return run_tcp(s, shared).await;
            }
        };
        let cause = match end {
            WsEnd::End(e) => return e,
            WsEnd::Move(ticket) => match attempt_move(target, shared, &mut resume, ticket).await {
                Ok(moved) => {
                    // The draining proxy expects this close: it ends the old connection quietly.
                    let _ = tokio::time::timeout(CLOSE_LINGER, close_old(&mut stream)).await;
                    (stream, zstd) = moved;
                    continue;
                }
                // The new proxy holds the session, but its connection failed right after `moved`: the old one is
                // done with, and the session resumes (with the new token) as after any drop.
                Err(MoveMiss::Lost(why)) => {
                    let _ = tokio::time::timeout(CLOSE_LINGER, close_old(&mut stream)).await;
                    ClientError::Io(format!("the connection after a move failed: {why}"))
                }
                // Refused or failed before `moved`: go on over the old connection; if that is gone too, resume as
                // after any drop.
                Err(MoveMiss::Stay) => match stay(&mut stream, shared).await {
                    Ok(()) => continue,
                    Err(e) if resume.token.is_some() => e,
                    Err(e) => return e,
                },
            },
            WsEnd::SentOn(e) => {
                let since = *sent_on_since.get_or_insert_with(Instant::now);
                let until = since.checked_add(SENT_ON_WINDOW).unwrap_or(since);
                (stream, zstd) = match start_again(target, shared, &mut resume, until, &e).await {
                    Ok(s) => s,
                    Err(e) => return e,
                };
                bump(&shared.counters.sent_on, 1);
                continue;
            }
            WsEnd::Lost(e) if !v2 || resume.token.is_none() => return e,
            WsEnd::Lost(e) => e,
        };
        (stream, zstd) = match reconnect(target, shared, &mut resume, &cause).await {
            Ok(s) => s,
            Err(e) => return e,
        };
    }
}

/// How long a move tries to reach an instance that takes it, from `move`: 10 seconds. A try that fails before
/// the other instance answers (the connection does not open, a balancer answers 502 or 503, or the connection
/// closes before an answer, as an instance that is draining too closes it) is tried again after a pause of 50 ms doubling
/// to 1 s, and counted in [`crate::Stats::move_retries`]; past the deadline the client stays on the draining
/// instance (`stay`), which waits 12 s for the move.
pub(super) const MOVE_CONNECT_TIMEOUT: Duration = Duration::from_secs(10);

/// How long a new session that draining instances send on (close 4007) tries to start at another instance:
/// 10 seconds from the first 4007, with the pause of [`MOVE_CONNECT_TIMEOUT`]'s tries. Past it the session
/// ends with the last error.
pub(super) const SENT_ON_WINDOW: Duration = Duration::from_secs(10);

/// The first pause between two tries of a resume, a move or a session sent on; it doubles up to [`RETRY_MAX`].
const RETRY_FIRST: Duration = Duration::from_millis(50);
/// The longest pause between two tries.
const RETRY_MAX: Duration = Duration::from_secs(1);

/// The longest the client waits for the new proxy's answer (`moved` or close 4006) once it sent `moving`:
/// 10 seconds, longer than the 8 s the proxy takes at most to fetch the state and log the player in again,
/// so the client never stays behind a move that then succeeds. Past it the client stays (`stay`).
pub(super) const MOVE_ANSWER_TIMEOUT: Duration = Duration::from_secs(10);

/// Closes the old connection of a session that moved (Close 1000, reason `moved`).
async fn close_old(stream: &mut Stream) {
    let frame = Some(super::ws::close_frame(moonbridge_protocol::ws::CLOSE_NORMAL, v2::CLOSE_REASON_MOVED));
    let _ = match stream {
        Stream::Ws(ws, _) => (**ws).close(frame).await,
        Stream::Wss(ws, _) => (**ws).close(frame).await,
        Stream::Tcp(_) => Ok(()),
    };
}

/// Tells the draining proxy that the move was refused: the session goes on over `stream`.
async fn stay(stream: &mut Stream, shared: &Shared) -> Result<(), ClientError> {
    let stay = Message::Text(Control::Stay.encode().into());
    let sent = match stream {
        Stream::Ws(ws, _) => super::wait::write_or_abandon(shared, ws.send(stay)).await,
        Stream::Wss(ws, _) => super::wait::write_or_abandon(shared, ws.send(stay)).await,
        Stream::Tcp(_) => Ok(()),
    };
    sent
}

/// How a move ended without a working new connection.
enum MoveMiss {
    /// Refused, or failed before the new proxy answered `moved`: the session goes on over the old connection
    /// (`stay`). The client library keeps no log; the draining proxy logs the outcome.
    Stay,
    /// The new proxy answered `moved` (it holds the session now), then its connection failed: the session
    /// resumes with the new token.
    Lost(String),
}

/// One move (`docs/carriage.md`, "Moving to another instance"): tries until [`MOVE_CONNECT_TIMEOUT`] to reach
/// an instance that takes the ticket (see there), then takes the `moved` answer within [`MOVE_ANSWER_TIMEOUT`]
/// (the new proxy then holds every byte sent; anything past its count is sent again).
async fn attempt_move(
    target: &Target,
    shared: &Shared,
    resume: &mut Resume,
    ticket: v2::ResumeToken,
) -> Result<(Stream, Option<WsZstd>), MoveMiss> {
    let deadline = Instant::now().checked_add(MOVE_CONNECT_TIMEOUT).unwrap_or_else(Instant::now);
    let mut pause = RETRY_FIRST;
    loop {
        match try_move(target, shared, resume, ticket, deadline).await {
            Ok(moved) => return Ok(moved),
            Err(MoveTry::Miss(miss)) => return Err(miss),
            Err(MoveTry::Again) => {}
        }
        let left = deadline.saturating_duration_since(Instant::now());
        if left.is_zero() || closing_flag(shared) {
            return Err(MoveMiss::Stay);
        }
        bump(&shared.counters.move_retries, 1);
        tokio::select! {
            () = tokio::time::sleep(pause.min(left)) => {}
            () = close_expired(shared) => return Err(MoveMiss::Stay),
        }
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// How one try of a move ended without a working new connection.
enum MoveTry {
    /// Nothing of the move happened at an instance that takes it: try again while the deadline lasts.
    Again,
    /// The move is over without a new connection.
    Miss(MoveMiss),
}

/// One try of a move: the new connection (opened before `deadline`), `moving` with the counts, the answer.
async fn try_move(
    target: &Target,
    shared: &Shared,
    resume: &mut Resume,
    ticket: v2::ResumeToken,
    deadline: Instant,
) -> Result<(Stream, Option<WsZstd>), MoveTry> {
    let opened = tokio::time::timeout_at(deadline.into(), establish(target, &shared.options)).await;
    let Ok(Ok(mut stream)) = opened else { return Err(MoveTry::Again) };
    if !stream.v2() {
        return Err(MoveTry::Again);
    }
    let mut zstd = WsZstd::for_stream(&stream).map_err(|_| MoveTry::Again)?;
    let request = Control::Moving { ticket, received: resume.received, sent: resume.sent() };
    let answered = match &mut stream {
        Stream::Ws(ws, _) => tokio::time::timeout(MOVE_ANSWER_TIMEOUT, ask(ws, request)).await,
        Stream::Wss(ws, _) => tokio::time::timeout(MOVE_ANSWER_TIMEOUT, ask(ws, request)).await,
        Stream::Tcp(_) => return Err(MoveTry::Again),
    };
    let (received, token) = match answered {
        Ok(Ok(answer)) => answer,
        // Closed before an answer (as a draining instance closes it): no instance took the ticket.
        Ok(Err(Attempt::Failed(_))) => return Err(MoveTry::Again),
        // Refused (4006), or no answer in time (the other instance may be taking the state: not tried twice).
        Ok(Err(Attempt::Refused(_))) | Err(_) => return Err(MoveTry::Miss(MoveMiss::Stay)),
    };
    let taken = match &mut stream {
        Stream::Ws(ws, _) => take_over(ws, shared, resume, &mut zstd, received, token).await,
        Stream::Wss(ws, _) => take_over(ws, shared, resume, &mut zstd, received, token).await,
        Stream::Tcp(_) => Ok(()),
    };
    match taken {
        Ok(()) => Ok((stream, zstd)),
        Err(Attempt::Refused(_)) => Err(MoveTry::Miss(MoveMiss::Stay)),
        Err(Attempt::Failed(why)) => Err(MoveTry::Miss(MoveMiss::Lost(why))),
    }
}

/// A new session that a draining instance sent on (close 4007, before anything of it started there): connects
/// again until `until`, with backoff, and sends everything the game sent so far again (nothing was received).
async fn start_again(
    target: &Target,
    shared: &Shared,
    resume: &mut Resume,
    until: Instant,
    cause: &ClientError,
) -> Result<(Stream, Option<WsZstd>), ClientError> {
    let mut pause = RETRY_FIRST;
    let mut last;
    loop {
        if closing_flag(shared) {
            return Err(ClientError::Closed);
        }
        match tokio::time::timeout_at(until.into(), again(target, shared, resume)).await {
            Ok(Ok(started)) => return Ok(started),
            Ok(Err(why)) => last = why,
            Err(_) => last = "timed out".into(),
        }
        let left = until.saturating_duration_since(Instant::now());
        if left.is_zero() {
            return Err(ClientError::Io(format!(
                "draining instances sent the session on for {} s ({cause}; last try: {last})",
                SENT_ON_WINDOW.as_secs()
            )));
        }
        tokio::select! {
            () = tokio::time::sleep(pause.min(left)) => {}
            () = close_expired(shared) => return Err(ClientError::Closed),
        }
        pause = (pause * 2).min(RETRY_MAX);
    }
}

/// One try of [`start_again`]: a new connection on carriage v2, and the game's bytes so far written on it.
async fn again(target: &Target, shared: &Shared, resume: &mut Resume) -> Result<(Stream, Option<WsZstd>), String> {
    let mut stream = establish(target, &shared.options).await.map_err(|e| e.to_string())?;
    if !stream.v2() {
        return Err("the server no longer offers carriage v2".into());
    }
    let mut zstd = WsZstd::for_stream(&stream).map_err(|e| e.to_string())?;
    let replay = resume.retained.resume_from(0).map_err(|e| e.to_string())?;
    let written = match &mut stream {
        Stream::Ws(ws, _) => replay_all(ws, replay, &mut zstd, shared).await,
        Stream::Wss(ws, _) => replay_all(ws, replay, &mut zstd, shared).await,
        Stream::Tcp(_) => return Err("not a WebSocket".into()),
    };
    written.map(|()| (stream, zstd))
}

/// Writes `batches` on `ws` and flushes.
async fn replay_all<'a, S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    batches: impl Iterator<Item = &'a bytes::Bytes>,
    zstd: &mut Option<WsZstd>,
    shared: &Shared,
) -> Result<(), String> {
    for batch in batches {
        feed_batch(ws, batch, zstd, shared).await.map_err(|e| e.to_string())?;
    }
    ws.flush().await.map_err(|e| e.to_string())
}

/// Why one resume attempt did not work.
pub(super) enum Attempt {
    /// The proxy refused (4001–4004, or no v2 any more): give up.
    Refused(String),
    /// Connecting or the exchange failed: try again while the window lasts.
    Failed(String),
}

/// Reconnects and resumes within the window, with backoff (50 ms doubling to 1 s between attempts).
pub(super) async fn reconnect(
    target: &Target,
    shared: &Shared,
    resume: &mut Resume,
    cause: &ClientError,
) -> Result<(Stream, Option<WsZstd>), ClientError> {
    let deadline = Instant::now().checked_add(resume.window).unwrap_or_else(Instant::now);
    let failed = |reason: String| ClientError::ResumeFailed { cause: cause.to_string(), reason };
    let mut backoff = RETRY_FIRST;
    let mut last = String::from("no attempt finished");
    loop {
        if closing_flag(shared) {
            return Err(ClientError::Closed);
        }
        let now = Instant::now();
        let Some(left) = deadline.checked_duration_since(now).filter(|d| !d.is_zero()) else {
            return Err(failed(format!(
                "not resumed within the proxy's {} s window (last attempt: {last})",
                resume.window.as_secs()
            )));
        };
        let attempt = tokio::select! {
            r = tokio::time::timeout(left, attempt(target, shared, resume)) => r,
            () = close_expired(shared) => return Err(ClientError::Closed),
        };
        match attempt {
            Ok(Ok(stream)) => {
                bump(&shared.counters.resumes, 1);
                shared
                    .counters
                    .last_resume_us
                    .store(now.elapsed().as_micros() as u64, std::sync::atomic::Ordering::Relaxed);
                return Ok(stream);
            }
            Ok(Err(Attempt::Refused(reason))) => return Err(failed(reason)),
            Ok(Err(Attempt::Failed(reason))) => last = reason,
            Err(_) => last = "timed out".into(),
        }
        let pause = backoff.min(deadline.saturating_duration_since(Instant::now()));
        tokio::select! {
            () = tokio::time::sleep(pause) => {}
            () = close_expired(shared) => return Err(ClientError::Closed),
        }
        backoff = (backoff * 2).min(RETRY_MAX);
    }
}

/// One resume attempt: connect, `resume`, then the proxy's `resumed` and the replay of what it lacks
/// (compressed when the new connection selected `moonbridge.v2.zstd`; each connection starts new streams).
pub(super) async fn attempt(
    target: &Target,
    shared: &Shared,
    resume: &mut Resume,
) -> Result<(Stream, Option<WsZstd>), Attempt> {
    let mut stream = establish(target, &shared.options).await.map_err(|e| Attempt::Failed(e.to_string()))?;
    if !stream.v2() {
        return Err(Attempt::Refused("the server no longer offers carriage v2".into()));
    }
    let mut zstd = WsZstd::for_stream(&stream).map_err(|e| Attempt::Failed(e.to_string()))?;
    match &mut stream {
        Stream::Ws(ws, _) => resume_on(ws, shared, resume, &mut zstd).await?,
        Stream::Wss(ws, _) => resume_on(ws, shared, resume, &mut zstd).await?,
        Stream::Tcp(_) => return Err(Attempt::Refused("not a WebSocket".into())),
    }
    Ok((stream, zstd))
}

/// The resume exchange on a new WebSocket (`docs/carriage.md`).
pub(super) async fn resume_on<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    shared: &Shared,
    resume: &mut Resume,
    zstd: &mut Option<WsZstd>,
) -> Result<(), Attempt> {
    let token = resume.token.ok_or_else(|| Attempt::Refused("no resume token".into()))?;
    let request = Control::Resume { token, received: resume.received, sent: resume.sent() };
    let (received, token) = ask(ws, request).await?;
    take_over(ws, shared, resume, zstd, received, token).await
}

/// Sends `request` (`resume` or `moving`) as the first message of `ws` and reads the answer (`resumed` or
/// `moved`): the proxy's count and the next token.
async fn ask<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    request: Control,
) -> Result<(u64, v2::ResumeToken), Attempt> {
    let failed = |e: WsError| Attempt::Failed(e.to_string());
    let moving = matches!(request, Control::Moving { .. });
    ws.send(Message::Text(request.encode().into())).await.map_err(failed)?;
    loop {
        match ws.next().await {
            Some(Ok(Message::Text(t))) => match (Control::parse(t.as_bytes()), moving) {
                (Ok(Control::Resumed { received, token }), false) | (Ok(Control::Moved { received, token }), true) => {
                    return Ok((received, token))
                }
                _ => return Err(Attempt::Refused("unexpected answer to the resume request".into())),
            },
            Some(Ok(Message::Close(frame))) => {
                let code = frame.as_ref().map(|f| u16::from(f.code));
                return Err(match code {
                    Some(v2::CLOSE_MOVE_REFUSED) => Attempt::Refused("the move was refused (close 4006)".into()),
                    // A draining instance: the next try reaches another.
                    Some(v2::CLOSE_DRAINING) => Attempt::Failed("the instance reached is draining (close 4007)".into()),
                    Some(c) if v2::is_resume_refusal(c) => {
                        Attempt::Refused(format!("{} (close {c})", v2::refusal_text(c)))
                    }
                    Some(c) => Attempt::Refused(format!("the proxy closed with {c}")),
                    None => Attempt::Failed("closed".into()),
                });
            }
            Some(Ok(_)) => {}
            Some(Err(e)) => return Err(failed(e)),
            None => return Err(Attempt::Failed("connection closed".into())),
        }
    }
}

/// After the proxy's answer: the new token, an `ack`, and what the proxy lacks (past its count `received`)
/// sent again. `Refused` when the count is wrong; `Failed` when the new connection fails.
async fn take_over<S: AsyncRead + AsyncWrite + Unpin>(
    ws: &mut WebSocketStream<S>,
    shared: &Shared,
    resume: &mut Resume,
    zstd: &mut Option<WsZstd>,
    received: u64,
    token: v2::ResumeToken,
) -> Result<(), Attempt> {
    let failed = |e: WsError| Attempt::Failed(e.to_string());
    let replay = resume
        .retained
        .resume_from(received)
        .map_err(|e| Attempt::Refused(format!("the proxy's count is wrong: {e}")))?;
    resume.token = Some(token);
    // Tells the proxy at once that the new token arrived (the old one is then spent).
    let ack = Control::Ack(resume.received).encode();
    ws.feed(Message::Text(ack.into())).await.map_err(failed)?;
    for batch in replay {
        feed_batch(ws, batch, zstd, shared).await.map_err(|e| Attempt::Failed(e.to_string()))?;
    }
    ws.flush().await.map_err(failed)
}
