//! A soak player: an async task that plays sessions back to back until the soak ends (over ws, wss or tcp, in
//! online mode through the second proxy), checks every byte it receives against the backend's answers, obeys
//! the fault schedule's commands (cut, stop reading), and counts how each session ended.

use std::collections::VecDeque;
use std::path::Path;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use anyhow::bail;
use moonbridge_protocol::crypto::{Cfb8Decryptor, Cfb8Encryptor};
use moonbridge_protocol::packets::{EncryptionRequest, EncryptionResponse, Packet};
use moonbridge_protocol::FrameDecoder;
use rsa::pkcs8::DecodePublicKey;
use tokio_tungstenite::tungstenite::error::ProtocolError;

use super::args::{TICKS_PER_S, WRITE_STALL_S};
use super::state::{Listeners, Shared};
use crate::peers::TransportArg;
use crate::player::{tls_connector, Incoming, Link, Reach};
use crate::workload;

/// How a session's stream ended.
enum End {
    /// A WebSocket Close with this code and reason, or a TCP FIN.
    Clean(Option<(u16, String)>),
    /// A reset or another I/O error.
    Broken(String),
}

impl std::fmt::Display for End {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            Self::Clean(Some((code, reason))) => write!(f, "WebSocket Close {code} {reason:?}"),
            Self::Clean(None) => f.write_str("FIN"),
            Self::Broken(e) => write!(f, "broken: {e}"),
        }
    }
}

/// Connects over `t` to the proxy `l` (wss trusting the CA certificates in `ca`), offering no subprotocol.
async fn open(t: TransportArg, l: Listeners, ca: &Path) -> anyhow::Result<Link> {
    let addr = match t {
        TransportArg::Ws => l.ws,
        TransportArg::Wss => l.wss,
        TransportArg::Tcp => l.tcp,
    };
    let tls = if t == TransportArg::Wss { Some(tls_connector(ca)?) } else { None };
    Link::connect(addr, &Reach { transport: t, tls, offer: None, read_chunk: 16 * 1024 }).await
}

/// The next bytes, appended to `buf`, or how the stream ended.
async fn recv(link: &mut Link, buf: &mut Vec<u8>) -> Result<(), End> {
    loop {
        return match link.next().await {
            Ok(Incoming::Data(b)) => {
                buf.extend_from_slice(&b);
                Ok(())
            }
            Ok(Incoming::Close(f)) => {
                Err(End::Clean(Some(f.map_or((1005, String::new()), |f| (u16::from(f.code), f.reason.to_string())))))
            }
            Ok(Incoming::Other) => continue,
            Ok(Incoming::Ended) => Err(End::Clean(None)),
            // A FIN without a Close (a proxy that could not send one through a full socket buffer).
            Err(e) => match e.downcast_ref::<tokio_tungstenite::tungstenite::Error>() {
                Some(tokio_tungstenite::tungstenite::Error::Protocol(ProtocolError::ResetWithoutClosingHandshake)) => {
                    Err(End::Clean(None))
                }
                _ => Err(End::Broken(e.to_string())),
            },
        };
    }
}

/// What one session of a player came to.
enum SessionEnd {
    /// Played until the soak ended.
    Completed,
    /// Ended early, at this moment, this way (Disconnect reason or how the stream ended).
    Early(Instant, String, bool),
}

/// One player: sessions back to back until the soak ends. Every tenth player goes through the online-mode proxy.
pub async fn player(i: usize, proxies: [Listeners; 2], shared: Arc<Shared>) {
    let l = if i % 10 == 9 { proxies[1] } else { proxies[0] };
    let transport = match i % 5 {
        0 | 1 => TransportArg::Ws,
        2 | 3 => TransportArg::Wss,
        _ => TransportArg::Tcp,
    };
    let name = format!("p{i:05}");
    while !shared.stop.is_cancelled() {
        shared.counters.sessions.fetch_add(1, Ordering::Relaxed);
        let end = match session(i, transport, &name, l, &shared).await {
            Ok(e) => e,
            Err(e) => SessionEnd::Early(Instant::now(), format!("error: {e:#}"), false),
        };
        match end {
            SessionEnd::Completed => return,
            SessionEnd::Early(at, how, clean) => {
                match shared.explained(i, at) {
                    Some(_) if clean => {
                        shared.counters.hit_clean.fetch_add(1, Ordering::Relaxed);
                    }
                    Some(fault) => shared.counters.fail(format!(
                        "player {name} ({transport:?}) hit by {fault} ended uncleanly at {:.1} s: {how}",
                        at.duration_since(shared.began).as_secs_f64()
                    )),
                    None => shared.counters.fail(format!(
                        "player {name} ({transport:?}) ended with no fault to explain it at {:.1} s: {how}",
                        at.duration_since(shared.began).as_secs_f64()
                    )),
                }
                tokio::select! {
                    () = tokio::time::sleep(Duration::from_secs(1)) => {}
                    () = shared.stop.cancelled() => return,
                }
            }
        }
    }
}

/// Reads until `want` bytes are buffered (decrypting with `dec`), or the stream ends.
async fn fill(conn: &mut Link, buf: &mut Vec<u8>, dec: &mut Option<Cfb8Decryptor>, want: usize) -> Result<(), End> {
    while buf.len() < want {
        let before = buf.len();
        tokio::time::timeout(Duration::from_secs(20), recv(conn, buf))
            .await
            .map_err(|_| End::Broken("nothing received for 20 s".into()))??;
        if let Some(d) = dec {
            if let Some(fresh) = buf.get_mut(before..) {
                d.apply(fresh);
            }
        }
    }
    Ok(())
}

/// The Login Disconnect or Play Disconnect reason at the start of `buf`, if that is what it holds.
fn disconnect_reason(buf: &[u8], play: bool) -> Option<String> {
    let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
    dec.queue_slice(buf);
    let f = dec.try_next_frame().ok()??;
    let id = if play { moonbridge_protocol::packets::PlayDisconnect::ID } else { 0x00 };
    (f.id == id).then(|| String::from_utf8_lossy(&f.body).into_owned())
}

async fn session(i: usize, t: TransportArg, name: &str, l: Listeners, shared: &Shared) -> anyhow::Result<SessionEnd> {
    let mut conn = open(t, l, &shared.ca).await?;
    conn.send_binary(workload::login_hello("localhost", name)?).await?;
    let mut buf = Vec::new();
    let mut dec: Option<Cfb8Decryptor> = None;
    let mut enc: Option<Cfb8Encryptor> = None;
    if l.online {
        // Online mode: the Encryption Request, or a Login Disconnect (backend or session server down).
        let request = loop {
            let mut d = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
            d.queue_slice(&buf);
            if let Ok(Some(f)) = d.try_next_frame() {
                if f.id == EncryptionRequest::ID && buf.first() != Some(&0x00) {
                    buf.drain(..buf.len() - d.buffered().len());
                    break f.decode::<EncryptionRequest>()?;
                }
                let reason = String::from_utf8_lossy(&f.body).into_owned();
                return Ok(SessionEnd::Early(
                    Instant::now(),
                    format!("Login Disconnect before encryption: {reason}"),
                    true,
                ));
            }
            let want = buf.len() + 1;
            if let Err(end) = fill(&mut conn, &mut buf, &mut dec, want).await {
                return Ok(SessionEnd::Early(
                    Instant::now(),
                    format!("{end} before encryption"),
                    matches!(end, End::Clean(_)),
                ));
            }
        };
        let key = rsa::RsaPublicKey::from_public_key_der(&request.public_key)?;
        let mut secret = [0u8; 16];
        rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut secret);
        let response = EncryptionResponse {
            shared_secret: key.encrypt(&mut rand_core::OsRng, rsa::Pkcs1v15Encrypt, &secret)?,
            verify_token: key.encrypt(&mut rand_core::OsRng, rsa::Pkcs1v15Encrypt, &request.verify_token)?,
        };
        conn.send_binary(response.to_frame_bytes()?.to_vec()).await?;
        enc = Some(Cfb8Encryptor::new(&secret));
        dec = Some(Cfb8Decryptor::new(&secret));
    }
    // Login Success and the burst (or a Login Disconnect: session server or backend trouble).
    let answer = crate::backend::soak_login_answer(name);
    if let Err(end) = fill(&mut conn, &mut buf, &mut dec, 1).await {
        return Ok(SessionEnd::Early(Instant::now(), format!("{end} after encryption"), matches!(end, End::Clean(_))));
    }
    loop {
        if let Some(reason) = disconnect_reason(&buf, false) {
            return Ok(SessionEnd::Early(Instant::now(), format!("Login Disconnect: {reason}"), true));
        }
        if buf.len() >= answer.len() {
            break;
        }
        if let Err(end) = fill(&mut conn, &mut buf, &mut dec, answer.len()).await {
            return Ok(SessionEnd::Early(
                Instant::now(),
                format!("{end} during the login burst"),
                matches!(end, End::Clean(_)),
            ));
        }
    }
    if buf.get(..answer.len()) != Some(&answer[..]) {
        bail!("player {name}: the login answer differs from the backend's");
    }
    buf.drain(..answer.len());
    shared.counters.logins.fetch_add(1, Ordering::Relaxed);

    // Play: a tick every 50 ms; every answer checked byte for byte.
    let mut ticker = tokio::time::interval(Duration::from_millis(1000 / TICKS_PER_S));
    ticker.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut seq = 0u32;
    let mut expected: VecDeque<u8> = VecDeque::new();
    let mut next_answer = 0u32;
    let mut stopped_reading_until: Option<Instant> = None;
    let mut chunk = Vec::new();
    let end = loop {
        let reading = stopped_reading_until.is_none_or(|t| Instant::now() >= t);
        tokio::select! {
            () = shared.stop.cancelled() => break None,
            _ = ticker.tick() => {
                match shared.commands[i].swap(0, Ordering::Relaxed) {
                    1 => { conn.cut(true); return Ok(SessionEnd::Early(Instant::now(), "cut by a reset".into(), true)); }
                    2 => { conn.cut(false); }
                    3 => stopped_reading_until = Some(Instant::now() + Duration::from_secs(WRITE_STALL_S * 3)),
                    _ => {}
                }
                let mut tick = workload::encode_client_tick(seq).concat();
                if let Some(e) = &mut enc {
                    e.apply(&mut tick);
                }
                if tokio::time::timeout(Duration::from_secs(WRITE_STALL_S * 3), conn.send_binary(tick)).await.map_or(true, |r| r.is_err()) {
                    break Some((Instant::now(), "send failed".to_string(), true));
                }
                seq += 1;
                shared.counters.ticks.fetch_add(1, Ordering::Relaxed);
            }
            r = recv(&mut conn, &mut chunk), if reading => {
                if let Err(end) = r {
                    let clean = matches!(end, End::Clean(_));
                    break Some((Instant::now(), format!("{end}"), clean));
                }
                if let Some(d) = &mut dec {
                    d.apply(&mut chunk);
                }
                shared.counters.bytes_in.fetch_add(chunk.len() as u64, Ordering::Relaxed);
                buf.append(&mut chunk);
                // Compare with the answers to the ticks sent so far.
                while expected.len() < buf.len() && next_answer < seq {
                    let mut a = Vec::new();
                    workload::encode_tick_answer(&shared.templates, next_answer, &mut a);
                    expected.extend(a);
                    next_answer += 1;
                }
                let n = buf.len().min(expected.len());
                if !buf.iter().take(n).eq(expected.iter().take(n)) {
                    if let Some(reason) = disconnect_reason(&buf, true) {
                        break Some((Instant::now(), format!("Play Disconnect: {reason}"), true));
                    }
                    bail!("player {name}: received bytes differ from the backend's answers");
                }
                expected.drain(..n);
                buf.drain(..n);
                if buf.len() > 1 << 20 {
                    bail!("player {name}: a megabyte more than the backend sent");
                }
            }
        }
    };
    match end {
        None => {
            conn.close_and_drain().await;
            Ok(SessionEnd::Completed)
        }
        Some((at, how, clean)) => Ok(SessionEnd::Early(at, how, clean)),
    }
}
