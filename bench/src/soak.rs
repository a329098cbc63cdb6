//! `session-bench soak`: many players over ws, wss and tcp, in online mode, at the game's 20 ticks per second
//! with the modded mix, for a while, while faults are injected on a schedule:
//!
//! - the backend killed (its sockets reset, like a crash) and restarted 3 s later;
//! - player connections cut by a reset and by a FIN;
//! - players that stop reading (the proxy's write-stall limit must end them);
//! - the session server slow (answers 2 s late, under `session_timeout_seconds`) and too slow (5 s, over it).
//!
//! Every byte is checked both ways: the backend compares each client tick with the bytes the player must have
//! sent, and the player compares everything it receives with the backend's deterministic answers. A session
//! that ends before the soak does must be explained by a fault that could hit it, and must end with a
//! Disconnect (Login or Play, with a reason) or a clean close (WebSocket Close with a code, TCP FIN); at the
//! end, the proxy's open file descriptors, threads and memory are compared with the start, and no socket of the
//! proxy may be left in CLOSE_WAIT.
//!
//! Players are async tasks speaking the real protocols (tokio-tungstenite for ws/wss, raw TCP, RSA and
//! AES-CFB8 for the login), so a test can cut their sockets; the session server is the harness's stand-in.

use std::collections::VecDeque;
use std::net::SocketAddr;
use std::path::PathBuf;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use anyhow::{bail, Context};
use bytes::BytesMut;
use clap::Parser;
use futures_util::{SinkExt, StreamExt};
use moonbridge_protocol::crypto::{Cfb8Decryptor, Cfb8Encryptor};
use moonbridge_protocol::packets::{EncryptionRequest, EncryptionResponse, Packet};
use moonbridge_protocol::FrameDecoder;
use moonbridge_test_certs::{free_port, KeyType, TestCert, TestDir};
use rsa::pkcs8::DecodePublicKey;
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio_tungstenite::tungstenite::Message;
use tokio_util::sync::CancellationToken;

use crate::workload;

/// `session-bench soak`: players with injected faults (see the module documentation).
#[derive(Parser, Debug)]
#[command(name = "session-bench soak", about = "Soak the proxy with players and injected faults")]
pub struct SoakArgs {
    /// How long the players play, in seconds.
    #[arg(long, default_value_t = 600)]
    pub seconds: u64,
    /// Players at once (40% ws, 40% wss, 20% tcp).
    #[arg(long, default_value_t = 1000)]
    pub players: usize,
    /// Seconds between two injected faults.
    #[arg(long, default_value_t = 10)]
    pub fault_every: u64,
    /// Instances of a network on Redis (2 or more: the network soak of bench/src/soak_network.rs, with
    /// client-library players over ws and wss behind a round-robin balancer that cuts every connection every
    /// `--fault-every` seconds; needs `redis-server`). 1: one proxy with the faults listed above.
    #[arg(long, default_value_t = 1)]
    pub instances: usize,
    /// The moonbridge binary.
    #[arg(long, default_value = "target/release/moonbridge")]
    pub proxy_bin: PathBuf,
    /// Print one JSON object instead of text.
    #[arg(long)]
    pub json: bool,
}

/// The proxy's `limits.write_stall_timeout_seconds` in the soak.
const WRITE_STALL_S: u64 = 4;
/// The proxy's `auth.session_timeout_seconds` in the soak.
const SESSION_TIMEOUT_S: u64 = 3;
/// Login burst of the soak backend: messages and bytes each (smaller than the benchmark's, so 1,000 logins do
/// not dominate the run).
const SOAK_BURST: (usize, usize) = (4, 30_000);
/// Ticks a game client runs per second.
const TICKS_PER_S: u64 = 20;

/// A fault, and which sessions it may end.
#[derive(Clone, Debug)]
struct Fault {
    name: &'static str,
    start: Instant,
    end: Instant,
    /// `None`: any session; else these players only.
    players: Option<Vec<usize>>,
}

/// What the harness counts.
#[derive(Debug, Default)]
struct Counters {
    sessions: AtomicU64,
    logins: AtomicU64,
    ticks: AtomicU64,
    bytes_in: AtomicU64,
    /// Sessions ended early, explained by a fault, cleanly.
    hit_clean: AtomicU64,
    /// Logins refused with a Login Disconnect while a fault was active.
    refused_with_reason: AtomicU64,
    failures: Failures<50>,
}

impl Counters {
    fn fail(&self, what: String) {
        self.failures.push(what);
    }
}

/// What went wrong in a run, from any task: the first `KEEP` messages.
#[derive(Debug, Default)]
pub(crate) struct Failures<const KEEP: usize>(Mutex<Vec<String>>);

impl<const KEEP: usize> Failures<KEEP> {
    pub(crate) fn push(&self, what: String) {
        let mut f = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if f.len() < KEEP {
            f.push(what);
        }
    }

    pub(crate) fn list(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

struct Shared {
    faults: Mutex<Vec<Fault>>,
    counters: Counters,
    /// Per player: a pending command (0 none, 1 reset, 2 FIN, 3 stop reading).
    commands: Vec<AtomicUsize>,
    stop: CancellationToken,
    templates: Vec<Vec<workload::Spec>>,
    ca: PathBuf,
    /// When the run began: failures say how far into the run they happened.
    began: Instant,
}

impl Shared {
    /// True when a fault that may hit `player` was active within a few seconds of `at`.
    fn explained(&self, player: usize, at: Instant) -> Option<&'static str> {
        let slack = Duration::from_secs(WRITE_STALL_S + 6);
        let faults = self.faults.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        faults
            .iter()
            .find(|f| {
                f.start <= at + Duration::from_millis(200)
                    && at <= f.end + slack
                    && f.players.as_ref().is_none_or(|p| p.contains(&player))
            })
            .map(|f| f.name)
    }

    fn add_fault(&self, name: &'static str, start: Instant, end: Instant, players: Option<Vec<usize>>) {
        self.faults.lock().unwrap_or_else(std::sync::PoisonError::into_inner).push(Fault { name, start, end, players });
    }
}

// ------------------------------------------------------------------------------------------------------------
// The backend: deterministic, checks every byte, can be killed and restarted.
// ------------------------------------------------------------------------------------------------------------

struct Backend {
    addr: SocketAddr,
    alive: Mutex<CancellationToken>,
    errors: AtomicU64,
}

impl Backend {
    async fn start(shared: Arc<Shared>) -> anyhow::Result<Arc<Self>> {
        let listener = TcpListener::bind("127.0.0.1:0").await?;
        let b = Arc::new(Self {
            addr: listener.local_addr()?,
            alive: Mutex::new(CancellationToken::new()),
            errors: AtomicU64::new(0),
        });
        b.serve(listener, shared);
        Ok(b)
    }

    fn token(&self) -> CancellationToken {
        self.alive.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }

    fn serve(self: &Arc<Self>, listener: TcpListener, shared: Arc<Shared>) {
        let token = self.token();
        let b = Arc::clone(self);
        tokio::spawn(async move {
            loop {
                tokio::select! {
                    r = listener.accept() => {
                        let Ok((s, _)) = r else { continue };
                        let _ = s.set_nodelay(true);
                        let (t, b, shared) = (token.clone(), Arc::clone(&b), Arc::clone(&shared));
                        tokio::spawn(async move {
                            tokio::select! {
                                r = backend_session(s, &shared) => {
                                    if let Err(e) = r {
                                        b.errors.fetch_add(1, Ordering::Relaxed);
                                        shared.counters.fail(format!("backend: {e}"));
                                    }
                                }
                                () = t.cancelled() => {} // the socket is dropped with linger 0 below
                            }
                        });
                    }
                    () = token.cancelled() => return,
                }
            }
        });
    }

    /// Kills the backend like a crash (every socket reset, the listener closed).
    fn kill(&self) {
        self.token().cancel();
    }

    /// Starts listening again on the same port.
    async fn restart(self: &Arc<Self>, shared: Arc<Shared>) -> anyhow::Result<()> {
        *self.alive.lock().unwrap_or_else(std::sync::PoisonError::into_inner) = CancellationToken::new();
        let listener = TcpListener::bind(self.addr).await?;
        self.serve(listener, shared);
        Ok(())
    }
}

/// Sets linger 0 so dropping the socket resets it (what a crashed process's sockets do).
fn reset_on_drop(s: &TcpStream) {
    let _ = socket2::SockRef::from(s).set_linger(Some(Duration::ZERO));
}

async fn backend_session(mut s: TcpStream, shared: &Shared) -> anyhow::Result<()> {
    reset_on_drop(&s);
    let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
    let mut buf = BytesMut::with_capacity(16 * 1024);
    let Some((login, frames)) = crate::backend::read_login(&mut s, &mut dec, &mut buf).await? else {
        return Ok(());
    };
    s.write_all(&login_answer(&login.name)).await?;
    // Then every client tick (3 frames) is checked byte for byte and answered.
    let mut expected_seq = 0u32;
    let mut tick_bytes: Vec<u8> = Vec::new();
    let mut got: Vec<u8> = Vec::new();
    for f in frames {
        moonbridge_protocol::frame::encode_frame(&mut got, f.id, &f.body)?;
    }
    let mut out = Vec::with_capacity(64 * 1024);
    loop {
        while let Some(f) = dec.try_next_frame()? {
            moonbridge_protocol::frame::encode_frame(&mut got, f.id, &f.body)?;
        }
        loop {
            if tick_bytes.is_empty() {
                tick_bytes = workload::encode_client_tick(expected_seq).concat();
            }
            if got.len() < tick_bytes.len() {
                break;
            }
            if got.get(..tick_bytes.len()) != Some(&tick_bytes[..]) {
                bail!("player {} tick {expected_seq}: bytes differ from what it sent", login.name);
            }
            got.drain(..tick_bytes.len());
            tick_bytes.clear();
            workload::encode_tick_answer(&shared.templates, expected_seq, &mut out);
            expected_seq += 1;
        }
        if !out.is_empty() {
            s.write_all(&out).await?;
            out.clear();
        }
        buf.reserve(16 * 1024);
        if s.read_buf(&mut buf).await? == 0 {
            return Ok(());
        }
        dec.queue_bytes(buf.split());
    }
}

fn login_answer(name: &str) -> Vec<u8> {
    use moonbridge_protocol::packets::{LoginSuccess, PluginMessage};
    let uuid = moonbridge_protocol::forwarding::offline_uuid(name).to_string();
    let mut out = LoginSuccess { uuid, name: name.into() }.to_frame_bytes().map(|b| b.to_vec()).unwrap_or_default();
    for n in 0..SOAK_BURST.0 {
        let p = PluginMessage {
            channel: workload::BURST_CHANNEL.into(),
            data: workload::login_burst_payload(n, SOAK_BURST.1),
        };
        let mut fields = Vec::new();
        let _ = p.encode_fields(&mut fields);
        let _ = moonbridge_protocol::frame::encode_frame(&mut out, PluginMessage::CLIENTBOUND_ID, &fields);
    }
    out
}

// ------------------------------------------------------------------------------------------------------------
// Players.
// ------------------------------------------------------------------------------------------------------------

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Transport {
    Ws,
    Wss,
    Tcp,
}

/// A proxy's three listeners, and whether it runs in online mode.
#[derive(Clone, Copy, Debug)]
struct Listeners {
    ws: SocketAddr,
    wss: SocketAddr,
    tcp: SocketAddr,
    online: bool,
}

/// A player's connection, whatever the transport: whole-byte-stream reads and writes.
enum Conn {
    Ws(Box<tokio_tungstenite::WebSocketStream<Box<dyn Io>>>, TcpHandle),
    Tcp(TcpStream),
}

/// The raw socket under a WebSocket, for cutting it.
struct TcpHandle(std::os::fd::RawFd);

trait Io: AsyncRead + AsyncWrite + Unpin + Send {}
impl<T: AsyncRead + AsyncWrite + Unpin + Send> Io for T {}

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

impl Conn {
    async fn open(t: Transport, l: Listeners, ca: &std::path::Path) -> anyhow::Result<Self> {
        let addr = match t {
            Transport::Ws => l.ws,
            Transport::Wss => l.wss,
            Transport::Tcp => l.tcp,
        };
        let tcp = TcpStream::connect(addr).await?;
        tcp.set_nodelay(true)?;
        if t == Transport::Tcp {
            return Ok(Self::Tcp(tcp));
        }
        use std::os::fd::AsRawFd;
        let fd = TcpHandle(tcp.as_raw_fd());
        let io: Box<dyn Io> = if t == Transport::Wss {
            Box::new(tls_connector(ca)?.connect(rustls::pki_types::ServerName::try_from("localhost")?, tcp).await?)
        } else {
            Box::new(tcp)
        };
        let url = format!("{}://localhost:{}/mc", if t == Transport::Wss { "wss" } else { "ws" }, addr.port());
        let (ws, _) = tokio_tungstenite::client_async(url, io).await?;
        Ok(Self::Ws(Box::new(ws), fd))
    }

    async fn send(&mut self, data: Vec<u8>) -> anyhow::Result<()> {
        match self {
            Self::Ws(ws, _) => ws.send(Message::Binary(data.into())).await?,
            Self::Tcp(s) => s.write_all(&data).await?,
        }
        Ok(())
    }

    /// The next bytes, or how the stream ended.
    async fn recv(&mut self, buf: &mut Vec<u8>) -> Result<(), End> {
        match self {
            Self::Ws(ws, _) => loop {
                match ws.next().await {
                    Some(Ok(Message::Binary(b))) => {
                        buf.extend_from_slice(&b);
                        return Ok(());
                    }
                    Some(Ok(Message::Close(f))) => {
                        return Err(End::Clean(Some(
                            f.map_or((1005, String::new()), |f| (u16::from(f.code), f.reason.to_string())),
                        )))
                    }
                    Some(Ok(_)) => {}
                    // A FIN without a Close (a proxy that could not send one through a full socket buffer).
                    Some(Err(tokio_tungstenite::tungstenite::Error::Protocol(
                        tokio_tungstenite::tungstenite::error::ProtocolError::ResetWithoutClosingHandshake,
                    )))
                    | None => return Err(End::Clean(None)),
                    Some(Err(e)) => return Err(End::Broken(e.to_string())),
                }
            },
            Self::Tcp(s) => {
                let mut chunk = [0u8; 16 * 1024];
                match s.read(&mut chunk).await {
                    Ok(0) => Err(End::Clean(None)),
                    Ok(n) => {
                        buf.extend_from_slice(&chunk[..n]);
                        Ok(())
                    }
                    Err(e) => Err(End::Broken(e.to_string())),
                }
            }
        }
    }

    /// Cuts the TCP connection: a reset (linger 0, then close) or a FIN.
    fn cut(&mut self, reset: bool) {
        let fd = match self {
            Self::Ws(_, TcpHandle(fd)) => *fd,
            Self::Tcp(s) => {
                use std::os::fd::AsRawFd;
                s.as_raw_fd()
            }
        };
        // SAFETY-free: the fd belongs to this connection and stays open while `self` lives.
        let raw = BorrowedRaw(fd);
        let sock = socket2::SockRef::from(&raw);
        if reset {
            let _ = sock.set_linger(Some(Duration::ZERO));
            let _ = sock.shutdown(std::net::Shutdown::Both);
        } else {
            let _ = sock.shutdown(std::net::Shutdown::Write);
        }
    }

    async fn close(&mut self) {
        match self {
            Self::Ws(ws, _) => {
                let _ = tokio::time::timeout(
                    Duration::from_secs(2),
                    tokio_tungstenite::WebSocketStream::close(&mut **ws, None),
                )
                .await;
                let _ =
                    tokio::time::timeout(Duration::from_secs(2), async { while let Some(Ok(_)) = ws.next().await {} })
                        .await;
            }
            Self::Tcp(s) => {
                let _ = s.shutdown().await;
            }
        }
    }
}

/// A raw fd for `SockRef` (borrowed; never closed here).
struct BorrowedRaw(std::os::fd::RawFd);

impl std::os::fd::AsFd for BorrowedRaw {
    fn as_fd(&self) -> std::os::fd::BorrowedFd<'_> {
        // The fd is owned by a live connection for as long as this value is used.
        #[allow(unsafe_code)]
        // SAFETY: `Conn::cut` only builds this from the fd of a connection it holds, and uses it at once.
        unsafe {
            std::os::fd::BorrowedFd::borrow_raw(self.0)
        }
    }
}

pub(crate) fn tls_connector(ca: &std::path::Path) -> anyhow::Result<tokio_rustls::TlsConnector> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca)? {
        roots.add(c?)?;
    }
    let config = rustls::ClientConfig::builder_with_provider(Arc::new(rustls::crypto::aws_lc_rs::default_provider()))
        .with_safe_default_protocol_versions()?
        .with_root_certificates(roots)
        .with_no_client_auth();
    Ok(tokio_rustls::TlsConnector::from(Arc::new(config)))
}

/// What one session of a player came to.
enum SessionEnd {
    /// Played until the soak ended.
    Completed,
    /// Ended early, at this moment, this way (Disconnect reason or how the stream ended).
    Early(Instant, String, bool),
}

/// One player: sessions back to back until the soak ends. Every tenth player goes through the online-mode proxy.
async fn player(i: usize, proxies: [Listeners; 2], shared: Arc<Shared>) {
    let l = if i % 10 == 9 { proxies[1] } else { proxies[0] };
    let transport = match i % 5 {
        0 | 1 => Transport::Ws,
        2 | 3 => Transport::Wss,
        _ => Transport::Tcp,
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
async fn fill(conn: &mut Conn, buf: &mut Vec<u8>, dec: &mut Option<Cfb8Decryptor>, want: usize) -> Result<(), End> {
    while buf.len() < want {
        let before = buf.len();
        tokio::time::timeout(Duration::from_secs(20), conn.recv(buf))
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

async fn session(i: usize, t: Transport, name: &str, l: Listeners, shared: &Shared) -> anyhow::Result<SessionEnd> {
    let mut conn = Conn::open(t, l, &shared.ca).await?;
    conn.send(workload::login_hello("localhost", name)?).await?;
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
        conn.send(response.to_frame_bytes()?.to_vec()).await?;
        enc = Some(Cfb8Encryptor::new(&secret));
        dec = Some(Cfb8Decryptor::new(&secret));
    }
    // Login Success and the burst (or a Login Disconnect: session server or backend trouble).
    let answer = login_answer(name);
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
                if tokio::time::timeout(Duration::from_secs(WRITE_STALL_S * 3), conn.send(tick)).await.map_or(true, |r| r.is_err()) {
                    break Some((Instant::now(), "send failed".to_string(), true));
                }
                seq += 1;
                shared.counters.ticks.fetch_add(1, Ordering::Relaxed);
            }
            r = conn.recv(&mut chunk), if reading => {
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
            conn.close().await;
            Ok(SessionEnd::Completed)
        }
        Some((at, how, clean)) => Ok(SessionEnd::Early(at, how, clean)),
    }
}

// ------------------------------------------------------------------------------------------------------------
// The proxy process and what it holds.
// ------------------------------------------------------------------------------------------------------------

/// What the proxy process holds at one moment (Linux `/proc`).
#[derive(Clone, Copy, Debug, Default, serde::Serialize)]
struct Held {
    fds: usize,
    threads: usize,
    rss_kib: u64,
    /// The proxy's TCP sockets in CLOSE_WAIT (the peer closed, the proxy never did).
    close_wait: usize,
    /// The proxy's TCP sockets in any state.
    sockets: usize,
}

/// What process `pid` holds; sockets connected to `ignore_port` (the session server, whose HTTP client keeps a
/// few idle keep-alive connections by design) are not counted.
fn held(pid: u32, ignore_port: u16) -> Held {
    let mut h = Held::default();
    let mut inodes = std::collections::HashSet::new();
    if let Ok(dir) = std::fs::read_dir(format!("/proc/{pid}/fd")) {
        for e in dir.flatten() {
            h.fds += 1;
            if let Ok(target) = std::fs::read_link(e.path()) {
                let t = target.to_string_lossy();
                if let Some(inode) = t.strip_prefix("socket:[").and_then(|r| r.strip_suffix(']')) {
                    inodes.insert(inode.to_string());
                }
            }
        }
    }
    let status = std::fs::read_to_string(format!("/proc/{pid}/status")).unwrap_or_default();
    for line in status.lines() {
        if let Some(v) = line.strip_prefix("Threads:") {
            h.threads = v.trim().parse().unwrap_or(0);
        }
        if let Some(v) = line.strip_prefix("VmRSS:") {
            h.rss_kib = v.trim().trim_end_matches("kB").trim().parse().unwrap_or(0);
        }
    }
    for table in ["tcp", "tcp6"] {
        let text = std::fs::read_to_string(format!("/proc/{pid}/net/{table}")).unwrap_or_default();
        for line in text.lines().skip(1) {
            let cols: Vec<&str> = line.split_whitespace().collect();
            let remote_port =
                cols.get(2).and_then(|r| r.rsplit_once(':')).and_then(|(_, p)| u16::from_str_radix(p, 16).ok());
            if let (Some(state), Some(inode)) = (cols.get(3), cols.get(9)) {
                if inodes.contains(*inode) && remote_port != Some(ignore_port) {
                    h.sockets += 1;
                    if *state == "08" {
                        h.close_wait += 1;
                    }
                }
            }
        }
    }
    h
}

/// A proxy process, killed when dropped.
pub(crate) struct Child(pub(crate) std::process::Child);

impl Drop for Child {
    fn drop(&mut self) {
        let _ = self.0.kill();
        let _ = self.0.wait();
    }
}

/// What the soak reports.
#[derive(Debug, serde::Serialize)]
struct Report {
    seconds: u64,
    players: usize,
    sessions: u64,
    logins: u64,
    ticks: u64,
    bytes_to_players: u64,
    faults: usize,
    sessions_hit_and_ended_cleanly: u64,
    backend_errors: u64,
    failures: Vec<String>,
    proxy_start: Held,
    proxy_peak: Held,
    proxy_end: Held,
}

/// Runs the soak (see the module documentation); fails when a check fails.
pub fn main(args: SoakArgs) -> anyhow::Result<()> {
    if args.instances > 1 {
        return crate::soak_network::run(&args);
    }
    let rt = tokio::runtime::Builder::new_multi_thread().enable_all().thread_name("soak").build()?;
    rt.block_on(run(args))
}

async fn run(args: SoakArgs) -> anyhow::Result<()> {
    let dir = TestDir::new("moonbridge-soak")?;
    let cert = TestCert::generate_in(dir.path().to_owned(), "localhost", KeyType::Ec)?;
    let delay = Arc::new(AtomicU64::new(0));
    let sessions = crate::sessions::start_with_delay(Arc::clone(&delay))?;
    let shared = Arc::new(Shared {
        faults: Mutex::new(Vec::new()),
        counters: Counters::default(),
        commands: (0..args.players).map(|_| AtomicUsize::new(0)).collect(),
        stop: CancellationToken::new(),
        templates: workload::templates(),
        ca: cert.ca.clone(),
        began: Instant::now(),
    });
    let backend = Backend::start(Arc::clone(&shared)).await?;
    let mut proxies = Vec::new();
    let mut children = Vec::new();
    for online in [false, true] {
        let (ws, wss, tcp) = (free_port()?, free_port()?, free_port()?);
        let auth = if online {
            format!("[auth]\nmode = \"online\"\nsession_server = \"http://{sessions}\"\nsession_timeout_seconds = {SESSION_TIMEOUT_S}\n")
        } else {
            "[auth]\nmode = \"offline\"\n".to_string()
        };
        let config = dir.join(format!("soak-{}.toml", if online { "online" } else { "offline" }));
        std::fs::write(
            &config,
            format!(
                "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:{ws}\"\nping_interval_seconds = 5\n\n\
                 [[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:{wss}\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\
                 ping_interval_seconds = 5\n\n\
                 [[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:{tcp}\"\n\n\
                 [[backend]]\nname = \"soak\"\naddress = \"{}\"\n\n{auth}\n\
                 [limits]\nwrite_stall_timeout_seconds = {WRITE_STALL_S}\nlogin_timeout_seconds = 10\n\
                 max_connections = {}\n\n\
                 [rate_limits]\nconnections_per_second = 0\nlogins_per_minute = 0\n",
                cert.cert.display(),
                cert.key.display(),
                backend.addr,
                args.players * 2 + 100
            ),
        )?;
        // The proxy's warnings go to a file beside its config (kept with MOONBRIDGE_KEEP_TEST_FILES=1).
        let log = std::fs::File::create(dir.join(format!("proxy-{}.log", if online { "online" } else { "offline" })))?;
        let child = std::process::Command::new(&args.proxy_bin)
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "warn")
            .stdout(std::process::Stdio::null())
            .stderr(log)
            .spawn()
            .with_context(|| format!("cannot start {}", args.proxy_bin.display()))?;
        children.push(Child(child));
        let l = Listeners {
            ws: SocketAddr::from(([127, 0, 0, 1], ws)),
            wss: SocketAddr::from(([127, 0, 0, 1], wss)),
            tcp: SocketAddr::from(([127, 0, 0, 1], tcp)),
            online,
        };
        let deadline = Instant::now() + Duration::from_secs(20);
        while TcpStream::connect(l.tcp).await.is_err() {
            if Instant::now() > deadline {
                bail!("the proxy did not listen within 20 s");
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        proxies.push(l);
    }
    let proxies = [proxies[0], proxies[1]];
    let pids: Vec<u32> = children.iter().map(|c| c.0.id()).collect();
    let held_all = || {
        let (a, b) = (held(pids[0], sessions.port()), held(pids[1], sessions.port()));
        Held {
            fds: a.fds + b.fds,
            threads: a.threads + b.threads,
            rss_kib: a.rss_kib + b.rss_kib,
            close_wait: a.close_wait + b.close_wait,
            sockets: a.sockets + b.sockets,
        }
    };
    // What the proxy holds with no player (after a probe connection has come and gone).
    tokio::time::sleep(Duration::from_millis(300)).await;
    let start = held_all();
    if !args.json {
        println!(
            "# soak: {} players for {} s (every tenth in online mode, through a second proxy), a fault every {} s; \
             proxies at start: {start:?}",
            args.players, args.seconds, args.fault_every
        );
    }

    // Players join over the first tenth of the run (at most 20 s).
    let ramp = Duration::from_secs((args.seconds / 10).clamp(1, 20));
    let mut tasks = Vec::new();
    for i in 0..args.players {
        let shared = Arc::clone(&shared);
        let wait = ramp.mul_f64(i as f64 / args.players as f64);
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            player(i, proxies, shared).await;
        }));
    }

    // The fault schedule.
    let began = Instant::now();
    let end_at = began + Duration::from_secs(args.seconds);
    let mut peak = start;
    let mut n = 0usize;
    let mut rng = 0x5eed_u64;
    let mut pick = |k: usize| -> Vec<usize> {
        (0..k)
            .map(|_| {
                rng ^= rng << 13;
                rng ^= rng >> 7;
                rng ^= rng << 17;
                (rng % args.players as u64) as usize
            })
            .collect()
    };
    let mut next_fault = began + ramp + Duration::from_secs(args.fault_every);
    while Instant::now() < end_at {
        tokio::time::sleep(Duration::from_millis(250)).await;
        let h = held_all();
        if h.rss_kib > peak.rss_kib {
            peak = h;
        }
        if Instant::now() < next_fault || Instant::now() + Duration::from_secs(8) > end_at {
            continue;
        }
        next_fault += Duration::from_secs(args.fault_every);
        let now = Instant::now();
        let kind = n % 6;
        n += 1;
        match kind {
            0 => {
                // Recorded before it happens: a player that sees the fault at once finds it explained.
                shared.add_fault("backend killed", now, now + Duration::from_secs(3), None);
                backend.kill();
                tokio::time::sleep(Duration::from_secs(3)).await;
                backend.restart(Arc::clone(&shared)).await?;
            }
            1 | 2 => {
                let players = pick(5);
                let name = if kind == 1 { "connection reset" } else { "connection FIN" };
                shared.add_fault(name, now, now + Duration::from_secs(1), Some(players.clone()));
                for &p in &players {
                    shared.commands[p].store(kind, Ordering::Relaxed);
                }
            }
            3 => {
                let players = pick(3);
                shared.add_fault(
                    "player stops reading",
                    now,
                    now + Duration::from_secs(WRITE_STALL_S * 3 + 2),
                    Some(players.clone()),
                );
                for &p in &players {
                    shared.commands[p].store(3, Ordering::Relaxed);
                }
            }
            4 => {
                // Slow but in time: logins take 2 s longer and succeed.
                delay.store(2000, Ordering::Relaxed);
                tokio::time::sleep(Duration::from_secs(5)).await;
                delay.store(0, Ordering::Relaxed);
            }
            _ => {
                // Too slow: logins meanwhile fail with "servers are down".
                delay.store(SESSION_TIMEOUT_S * 1000 + 2000, Ordering::Relaxed);
                shared.add_fault(
                    "session server too slow",
                    now,
                    now + Duration::from_secs(5 + SESSION_TIMEOUT_S),
                    None,
                );
                tokio::time::sleep(Duration::from_secs(5)).await;
                delay.store(0, Ordering::Relaxed);
            }
        }
    }
    shared.stop.cancel();
    for t in tasks {
        let _ = tokio::time::timeout(Duration::from_secs(30), t).await;
    }
    // Everything the players opened must be released.
    let deadline = Instant::now() + Duration::from_secs(30);
    let mut end = held_all();
    while (end.sockets > start.sockets || end.close_wait > 0) && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(200)).await;
        end = held_all();
    }
    drop(children);

    let c = &shared.counters;
    let failures = c.failures.list();
    let report = Report {
        seconds: args.seconds,
        players: args.players,
        sessions: c.sessions.load(Ordering::Relaxed),
        logins: c.logins.load(Ordering::Relaxed),
        ticks: c.ticks.load(Ordering::Relaxed),
        bytes_to_players: c.bytes_in.load(Ordering::Relaxed),
        faults: n,
        sessions_hit_and_ended_cleanly: c.hit_clean.load(Ordering::Relaxed),
        backend_errors: backend.errors.load(Ordering::Relaxed),
        failures,
        proxy_start: start,
        proxy_peak: peak,
        proxy_end: end,
    };
    let _ = c.refused_with_reason.load(Ordering::Relaxed);
    if args.json {
        println!("{}", serde_json::to_string(&report)?);
    } else {
        println!("{report:#?}");
    }
    let mut problems = report.failures.clone();
    // File descriptors: the sockets above, plus the session server's keep-alive connections (at most a few).
    if end.fds > start.fds + 4 {
        problems.push(format!("open file descriptors {} at the end, {} at the start", end.fds, start.fds));
    }
    if end.close_wait > 0 {
        problems.push(format!("{} proxy sockets left in CLOSE_WAIT", end.close_wait));
    }
    if end.sockets > start.sockets {
        problems.push(format!("{} proxy sockets at the end, {} at the start", end.sockets, start.sockets));
    }
    if end.threads > start.threads + 2 {
        problems.push(format!("{} threads at the end, {} at the start", end.threads, start.threads));
    }
    // Memory: freed sessions go back to the allocator, which keeps some of it; the margin is documented.
    let margin = (start.rss_kib / 2).max(32 * 1024);
    if end.rss_kib > start.rss_kib + margin {
        problems.push(format!(
            "RSS {} KiB at the end, {} KiB at the start (margin {margin} KiB)",
            end.rss_kib, start.rss_kib
        ));
    }
    if report.logins < args.players as u64 {
        problems.push(format!("only {} logins for {} players", report.logins, args.players));
    }
    if !problems.is_empty() {
        // The proxies' warnings, to explain what their players saw.
        for side in ["offline", "online"] {
            let log = std::fs::read_to_string(dir.join(format!("proxy-{side}.log"))).unwrap_or_default();
            let lines: Vec<&str> = log.lines().collect();
            eprintln!("--- the {side} proxy's last warnings ({} lines in all) ---", lines.len());
            for l in &lines[lines.len().saturating_sub(40)..] {
                eprintln!("{l}");
            }
        }
        bail!("soak failed:\n  {}", problems.join("\n  "));
    }
    Ok(())
}
