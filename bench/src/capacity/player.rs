//! A capacity player: an async task that joins at its turn (connect, the carriage's login, Join Game), then
//! plays one tick per 50 ms (active) or only answers the backend's Keep Alive (idle) until the run stops, and
//! records its tick round trips (from when each tick was due) while the run measures.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use anyhow::bail;
use moonbridge_protocol::frame::encode_frame;
use moonbridge_protocol::packets::{KeepAlive, Packet};
use moonbridge_protocol::FrameDecoder;
use tokio_util::sync::CancellationToken;

use super::args::{MAX_IN_FLIGHT, TICK_MS};
use crate::player::carriage::{Carriage, Carrier};
use crate::player::{Incoming, Link, Reach};
use crate::report::Failures;
use crate::workload;

/// What the players share with the run.
#[derive(Default)]
pub struct Shared {
    pub in_play: AtomicU64,
    pub joined: AtomicU64,
    pub failed_to_join: AtomicU64,
    pub dropped: AtomicU64,
    /// Set while the round trips count.
    pub measuring: AtomicBool,
    /// Round trips of ticks sent while measuring, in microseconds.
    pub rtt_us: Mutex<Vec<u32>>,
    /// How late the tick timer fired, in microseconds: the load generator's own lag.
    pub late_us: Mutex<Vec<u32>>,
    pub ticks_sent: AtomicU64,
    pub ticks_answered: AtomicU64,
    /// Counted ticks still without an answer when the players stopped.
    pub ticks_unanswered: AtomicU64,
    /// Players in play through each proxy.
    pub in_play_per_proxy: Vec<AtomicU64>,
    pub failures: Failures<20>,
}

/// Connects with `reach`, then logs in with `carrier`'s carriage; returns the link once Join Game has arrived,
/// with what followed it in `dec`.
async fn join(
    port: u16,
    name: &str,
    reach: &Reach,
    carrier: &mut Carrier,
    dec: &mut FrameDecoder,
) -> anyhow::Result<Link> {
    let mut link = Link::connect(SocketAddr::from(([127, 0, 0, 1], port)), reach).await?;
    link.send_binary(carrier.wrap(workload::login_hello("localhost", name)?)?).await?;
    let mut seen = 0;
    while seen < 2 {
        match link.next().await? {
            Incoming::Data(b) => carrier.unwrap_into(&b, dec)?,
            Incoming::Other => continue,
            closed => bail!("closed during the login: {}", why(&closed)),
        }
        while seen < 2 {
            let Some(f) = dec.try_next_frame()? else { break };
            match (seen, f.id) {
                (0, 0x02) | (1, 0x01) => seen += 1,
                (0, 0x00) => bail!("Login Disconnect: {}", String::from_utf8_lossy(&f.body)),
                (_, id) => bail!("packet 0x{id:02x} during the login"),
            }
        }
    }
    Ok(link)
}

/// One player: joins at `start`, then plays (or idles) until `stop`.
#[allow(clippy::too_many_arguments)]
pub async fn player(
    i: usize,
    (proxy, port): (usize, u16),
    active: bool,
    start: tokio::time::Instant,
    gate: Arc<tokio::sync::Semaphore>,
    (reach, carriage): (Reach, Carriage),
    answers: Arc<Vec<usize>>,
    shared: Arc<Shared>,
    stop: CancellationToken,
) {
    tokio::time::sleep_until(start).await;
    let name = format!("cap{i:05}");
    let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
    let mut carrier = Carrier::new(carriage);
    let joined = {
        let Ok(_permit) = gate.acquire().await else { return };
        let joining = join(port, &name, &reach, &mut carrier, &mut dec);
        tokio::select! {
            r = tokio::time::timeout(Duration::from_secs(30), joining) => r,
            () = stop.cancelled() => return,
        }
    };
    let mut link = match joined {
        Ok(Ok(link)) => link,
        Ok(Err(e)) => {
            shared.failed_to_join.fetch_add(1, Ordering::Relaxed);
            shared.failures.push(format!("{name} could not join: {e:#}"));
            return;
        }
        Err(_) => {
            shared.failed_to_join.fetch_add(1, Ordering::Relaxed);
            shared.failures.push(format!("{name} could not join within 30 s"));
            return;
        }
    };
    shared.joined.fetch_add(1, Ordering::Relaxed);
    shared.in_play.fetch_add(1, Ordering::Relaxed);
    shared.in_play_per_proxy[proxy].fetch_add(1, Ordering::Relaxed);
    let mut ticker = active.then(|| {
        let mut t = tokio::time::interval(Duration::from_millis(TICK_MS));
        // A late tick is still sent (as a game catches up), and its round trip counts from when it was due, so
        // a busy load generator shows up in the round trips instead of in ticks that were never sent.
        t.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Burst);
        t
    });
    // Ticks in flight: (packets of the answer still to come, when it was due, counted).
    let mut in_flight: std::collections::VecDeque<(usize, tokio::time::Instant, bool)> =
        std::collections::VecDeque::new();
    let (mut rtt, mut late) = (Vec::new(), Vec::new());
    let (mut sent, mut answered) = (0u64, 0u64);
    let mut seq = 0u32;
    let mut out = Vec::new();
    let ended: Option<String> = loop {
        let next_tick = async {
            match ticker.as_mut() {
                Some(t) => t.tick().await,
                None => std::future::pending().await,
            }
        };
        tokio::select! {
            () = stop.cancelled() => break None,
            due = next_tick => {
                let measuring = shared.measuring.load(Ordering::Relaxed);
                if measuring {
                    late.push(u32::try_from(due.elapsed().as_micros()).unwrap_or(u32::MAX));
                    sent += 1;
                }
                if in_flight.len() >= MAX_IN_FLIGHT {
                    break Some(format!("{MAX_IN_FLIGHT} ticks without an answer"));
                }
                let msg = match carrier.wrap(workload::encode_client_tick(seq).concat()) {
                    Ok(m) => m,
                    Err(e) => break Some(format!("compress: {e}")),
                };
                let frames = answers.get(seq as usize % answers.len().max(1)).copied().unwrap_or(1);
                in_flight.push_back((frames, due, measuring));
                seq = seq.wrapping_add(1);
                if let Err(e) = link.send_binary(msg).await {
                    break Some(format!("send: {e}"));
                }
            }
            m = link.next() => {
                match m {
                    Ok(Incoming::Data(b)) => {
                        if let Err(e) = carrier.unwrap_into(&b, &mut dec) {
                            break Some(format!("bad message from the proxy: {e}"));
                        }
                    }
                    Ok(Incoming::Other) => continue,
                    Ok(closed) => break Some(why(&closed)),
                    Err(e) => break Some(format!("{e:#}")),
                }
                out.clear();
                let mut fault = None;
                let mut keep_alive = false;
                loop {
                    let f = match dec.try_next_frame() {
                        Ok(Some(f)) => f,
                        Ok(None) => break,
                        Err(e) => {
                            fault = Some(format!("bad frame from the proxy: {e}"));
                            break;
                        }
                    };
                    if f.id == KeepAlive::ID {
                        if let Ok(k) = f.decode::<KeepAlive>() {
                            let _ = encode_frame(&mut out, KeepAlive::ID, &k.id.to_be_bytes());
                        }
                        keep_alive = true;
                        continue;
                    }
                    if let Some(front) = in_flight.front_mut() {
                        front.0 = front.0.saturating_sub(1);
                        if front.0 == 0 {
                            if let Some((_, at, counted)) = in_flight.pop_front() {
                                if counted {
                                    answered += 1;
                                    rtt.push(u32::try_from(at.elapsed().as_micros()).unwrap_or(u32::MAX));
                                }
                            }
                        }
                    }
                }
                if let Some(f) = fault {
                    break Some(f);
                }
                if let Some(ack) = carrier.ack(keep_alive) {
                    if let Err(e) = link.send_text(ack).await {
                        break Some(format!("send: {e}"));
                    }
                }
                if !out.is_empty() {
                    let msg = match carrier.wrap(std::mem::take(&mut out)) {
                        Ok(m) => m,
                        Err(e) => break Some(format!("compress: {e}")),
                    };
                    if let Err(e) = link.send_binary(msg).await {
                        break Some(format!("send: {e}"));
                    }
                }
            }
        }
    };
    shared.in_play.fetch_sub(1, Ordering::Relaxed);
    shared.in_play_per_proxy[proxy].fetch_sub(1, Ordering::Relaxed);
    // Counted ticks still unanswered count with their age so far (a lower bound), not as if they were fast.
    let mut unanswered = 0u64;
    for (_, due, counted) in in_flight {
        if counted {
            unanswered += 1;
            rtt.push(u32::try_from(due.elapsed().as_micros()).unwrap_or(u32::MAX));
        }
    }
    if let Some(why) = ended {
        shared.dropped.fetch_add(1, Ordering::Relaxed);
        shared.failures.push(format!("{name} ({}) lost its connection: {why}", if active { "active" } else { "idle" }));
    } else {
        let _ = tokio::time::timeout(Duration::from_secs(2), link.close()).await;
    }
    shared.ticks_sent.fetch_add(sent, Ordering::Relaxed);
    shared.ticks_answered.fetch_add(answered, Ordering::Relaxed);
    shared.ticks_unanswered.fetch_add(unanswered, Ordering::Relaxed);
    shared.rtt_us.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(rtt);
    shared.late_us.lock().unwrap_or_else(std::sync::PoisonError::into_inner).extend(late);
}

/// Why the link ended, as the report says it (a WebSocket Close, or the end of the stream).
fn why(closed: &Incoming) -> String {
    match closed {
        Incoming::Close(c) => format!("closed: {c:?}"),
        _ => "the connection ended".into(),
    }
}
