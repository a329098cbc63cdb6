//! One player connection, from its first byte to its end, whatever the transport.
//!
//! Stages:
//! 1. **Handshake** (one deadline, `handshake_timeout_seconds`, and one `max_handshaking` slot): a legacy
//!    `0xFE` ping, or a handshake frame and — for login — the Login Start frame. Frames here are limited to the
//!    largest legal handshake and Login Start, so nothing bigger is ever buffered.
//! 2. **Route** by the handshake hostname (Forge marker and one trailing dot stripped, lowercased).
//! 3. **Online mode** only (`auth.mode = "online"`): Encryption Request, Encryption Response (within
//!    `login_timeout_seconds`), then AES-CFB8 on the player's stream and the session server's `hasJoined`
//!    check (see [`crate::auth`]). A failure is a Login Disconnect and no backend is contacted.
//! 4. **Backend**: connect (`backend_connect_timeout_seconds`), send the handshake (with forwarding applied),
//!    Login Start and every byte that followed, in one write; wait for the backend's first answer
//!    (`login_timeout_seconds`). Failures become a Login Disconnect with a clear reason.
//! 5. **Relay** bytes both ways (see [`crate::relay`]).

use std::io;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Instant;

use bytes::BytesMut;
use moonbridge_protocol::crypto::{server_hash, Cfb8Encryptor, SHARED_SECRET_LEN};
use moonbridge_protocol::forwarding::{bungeecord_address, forge_properties, offline_uuid, Property};
use moonbridge_protocol::frame::peek_packet_id;
use moonbridge_protocol::handshake::HostField;
use moonbridge_protocol::legacy::{self, LegacyDetect, LegacyPing, LegacyStatus};
use moonbridge_protocol::packets::{
    chat_text, EncryptionRequest, EncryptionResponse, Handshake, LoginDisconnect, LoginStart, NextState, Packet,
    PlayDisconnect, StatusPing, StatusRequest, StatusResponse, MAX_ENCRYPTION_RESPONSE_FRAME_LEN,
    MAX_HANDSHAKE_FRAME_LEN, MAX_LOGIN_START_FRAME_LEN, PROTOCOL_VERSION,
};
use moonbridge_protocol::{DecodeError, FrameDecoder, FrameError, FrameScanner};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::{timeout, timeout_at, Duration};
use tokio_util::sync::CancellationToken;
use tracing::{debug, info, warn};

use crate::auth::{OnlineAuth, Profile};
use crate::config::{AuthMode, Forwarding};
use crate::limits::HandshakeSlot;
use crate::relay::{ClientCipher, RelayEnd, RELAY_CHUNK};
use crate::server::{Backend, Shared};

/// How long a connection that sent only `FE` or `FE 01` may stay silent before it is answered as a legacy
/// ping (1.3–1.5 clients send nothing more and wait).
pub(crate) const LEGACY_SILENCE: Duration = Duration::from_millis(500);

/// Largest legacy ping accepted (a 1.6 `MC|PingHost` with a 255-character host is about 540 bytes).
const MAX_LEGACY_PING_BYTES: usize = 1024;

/// Largest legacy answer read from a backend (the `0xFF` text length is a `u16` of UTF-16 units).
const MAX_LEGACY_ANSWER_BYTES: usize = 3 + 2 * 65_535;

/// Shown to players when the proxy stops.
pub(crate) const SHUTDOWN_REASON: &str = "Proxy is restarting, please reconnect in a moment";

/// The transport-specific half of a session: how bytes reach the player and how the relay runs.
pub(crate) trait Player: Send {
    /// Reads more stream bytes into `buf` (appending, at most about `RELAY_CHUNK`); `Ok(0)` at end of stream.
    async fn read_some(&mut self, buf: &mut BytesMut) -> io::Result<usize>;
    /// Sends stream bytes to the player as one write (or one WebSocket message).
    async fn send(&mut self, bytes: &[u8]) -> io::Result<()>;
    /// Ends the connection orderly after the last `send`.
    async fn finish(&mut self, how: Finish);
    /// Relays until either side ends. `first` has already been sent to the player.
    async fn relay(&mut self, backend: TcpStream, relay: RelayStart<'_>) -> RelayReport;
    /// WebSocket messages received from and sent to the player, for WebSocket transports.
    fn message_counts(&self) -> Option<(u64, u64)> {
        None
    }
}

/// Why the proxy ends a connection (WebSocket close codes are chosen from it).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Finish {
    /// Normal end (WebSocket 1000).
    Normal,
    /// Proxy shutdown (1001).
    Shutdown,
    /// The player broke the protocol (1002).
    ProtocolError,
    /// The backend could not be reached (1011).
    BackendUnavailable,
}

/// What the relay stage starts with.
pub(crate) struct RelayStart<'a> {
    pub(crate) shutdown: &'a CancellationToken,
    /// Clientbound frame boundaries, when the clientbound stream is plaintext Play.
    pub(crate) scanner: Option<FrameScanner>,
    /// Bytes already counted in each direction (handshake, Login Start, first answer).
    pub(crate) up: u64,
    pub(crate) down: u64,
    /// `limits.write_stall_timeout_seconds`.
    pub(crate) write_stall: Duration,
    /// Online mode: the player's AES-CFB8 stream (the backend link stays plaintext). Boxed: the AES key
    /// schedules are about 1.5 KiB, which would otherwise size every session's task.
    pub(crate) cipher: Option<Box<ClientCipher>>,
}

/// What the relay stage reports.
pub(crate) struct RelayReport {
    pub(crate) up: u64,
    pub(crate) down: u64,
    pub(crate) end: RelayEnd,
}

/// Who a connection is.
#[derive(Clone, Debug)]
pub(crate) struct ConnInfo {
    /// The player's real address (TCP peer, or the one a trusted proxy vouched for).
    pub(crate) client: SocketAddr,
}

/// What the first bytes of a connection turned out to be.
enum Opening {
    Legacy { ping: LegacyPing, raw: BytesMut },
    Status { handshake: Handshake, rest: BytesMut },
    Login { handshake: Handshake, login: LoginStart, login_raw: BytesMut, rest: BytesMut },
}

/// Why the handshake stage failed (bad input is reported at a rate-limited debug level).
#[derive(Debug, thiserror::Error)]
enum OpeningError {
    #[error("connection closed during the handshake")]
    Closed,
    #[error("read error during the handshake: {0}")]
    Io(#[from] io::Error),
    #[error("bad frame: {0}")]
    Frame(#[from] FrameError),
    #[error("bad packet: {0}")]
    Decode(#[from] DecodeError),
    #[error("legacy ping longer than {MAX_LEGACY_PING_BYTES} bytes")]
    LegacyTooLong,
}

/// The summary logged when a session ends.
struct Summary {
    player: Option<String>,
    backend: Option<String>,
    up: u64,
    down: u64,
    reason: String,
}

impl Summary {
    fn new(reason: impl Into<String>) -> Self {
        Self { player: None, backend: None, up: 0, down: 0, reason: reason.into() }
    }
}

/// Runs a whole session and logs its end. `deadline` ends the handshake stage (it started at accept, so the
/// transport setup before it counted too).
pub(crate) async fn serve<P: Player>(
    mut player: P,
    info: ConnInfo,
    shared: Arc<Shared>,
    slot: HandshakeSlot,
    shutdown: CancellationToken,
    deadline: tokio::time::Instant,
) {
    let started = Instant::now();
    let summary = run(&mut player, &info, &shared, slot, &shutdown, deadline).await;
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
    player: &mut P,
    info: &ConnInfo,
    shared: &Arc<Shared>,
    slot: HandshakeSlot,
    shutdown: &CancellationToken,
    deadline: tokio::time::Instant,
) -> Summary {
    let opening = tokio::select! {
        r = timeout_at(deadline, read_opening(player)) => match r {
            Ok(Ok(o)) => o,
            Ok(Err(OpeningError::Closed)) => return Summary::new("closed during handshake"),
            Ok(Err(e)) => {
                if let Some(suppressed) = shared.bad_input_log.allow() {
                    info!(client = %info.client.ip(), suppressed, "closing connection: {e}");
                }
                player.finish(Finish::ProtocolError).await;
                return Summary::new(format!("bad input: {e}"));
            }
            Err(_) => {
                if let Some(suppressed) = shared.bad_input_log.allow() {
                    debug!(client = %info.client.ip(), suppressed, "closing connection: handshake not complete within {}s", shared.limits.handshake_timeout_seconds);
                }
                player.finish(Finish::ProtocolError).await;
                return Summary::new("handshake timeout");
            }
        },
        () = slot.evicted() => {
            player.finish(Finish::ProtocolError).await;
            return Summary::new("evicted: too many connections in the handshake stage");
        }
        () = shutdown.cancelled() => {
            player.finish(Finish::Shutdown).await;
            return Summary::new("proxy shutdown");
        }
    };
    match opening {
        Opening::Legacy { ping, raw } => {
            drop(slot);
            Box::pin(legacy_ping(player, info, shared, ping, raw, deadline)).await
        }
        Opening::Status { handshake, rest } => {
            drop(slot);
            Box::pin(status(player, info, shared, handshake, rest, shutdown)).await
        }
        // Online mode keeps the handshake slot until the Encryption Response is in: an unauthenticated
        // connection counts against `max_handshaking` until then.
        Opening::Login { handshake, login, login_raw, rest } => {
            login_session(player, info, shared, handshake, login, login_raw, rest, slot, shutdown).await
        }
    }
}

/// Reads until a whole frame is decoded.
async fn next_frame<P: Player>(
    player: &mut P,
    dec: &mut FrameDecoder,
) -> Result<moonbridge_protocol::Frame, OpeningError> {
    loop {
        if let Some(f) = dec.try_next_frame()? {
            return Ok(f);
        }
        let mut chunk = BytesMut::with_capacity(dec.bytes_wanted()?.clamp(64, 2048));
        if player.read_some(&mut chunk).await? == 0 {
            return Err(OpeningError::Closed);
        }
        dec.queue_bytes(chunk);
    }
}

async fn read_opening<P: Player>(player: &mut P) -> Result<Opening, OpeningError> {
    let mut buf = BytesMut::with_capacity(256);
    loop {
        match legacy::detect(&buf)? {
            LegacyDetect::Modern => break,
            LegacyDetect::Legacy { ping, len } => return Ok(Opening::Legacy { ping, raw: buf.split_to(len) }),
            LegacyDetect::NeedMore { if_silent } => {
                if buf.len() > MAX_LEGACY_PING_BYTES {
                    return Err(OpeningError::LegacyTooLong);
                }
                let read = match &if_silent {
                    Some(_) => timeout(LEGACY_SILENCE, player.read_some(&mut buf)).await,
                    None => Ok(player.read_some(&mut buf).await),
                };
                match (read, if_silent) {
                    (Err(_silent), Some(ping)) => return Ok(Opening::Legacy { ping, raw: buf }),
                    (Ok(Ok(0)), _) => return Err(OpeningError::Closed),
                    (Ok(Ok(_)), _) | (Err(_), None) => {}
                    (Ok(Err(e)), _) => return Err(e.into()),
                }
            }
        }
    }
    let mut dec = FrameDecoder::new(MAX_HANDSHAKE_FRAME_LEN);
    dec.queue_bytes(buf);
    let handshake: Handshake = next_frame(player, &mut dec).await?.decode()?;
    match handshake.next_state {
        NextState::Status => Ok(Opening::Status { handshake, rest: dec.take_buffered() }),
        NextState::Login => {
            dec.set_max_frame_len(MAX_LOGIN_START_FRAME_LEN);
            let frame = next_frame(player, &mut dec).await?;
            let login: LoginStart = frame.decode()?;
            let login_raw = login
                .to_frame_bytes()
                .map_err(|_| DecodeError::InvalidValue { field: "name", reason: "cannot be re-encoded" })?;
            Ok(Opening::Login { handshake, login, login_raw, rest: dec.take_buffered() })
        }
    }
}

/// Sends a Login Disconnect with `reason` (encrypted with `encrypt` once the player's stream is) and ends the
/// connection.
async fn login_disconnect<P: Player>(
    player: &mut P,
    reason: &str,
    encrypt: Option<&mut Cfb8Encryptor>,
    finish: Finish,
) {
    if let Ok(mut frame) = (LoginDisconnect { reason_json: chat_text(reason) }).to_frame_bytes() {
        if let Some(e) = encrypt {
            e.apply(&mut frame);
        }
        if player.send(&frame).await.is_ok() {
            player.finish(finish).await;
            return;
        }
    }
    player.finish(finish).await;
}

/// Connects to a backend within the configured timeout, with TCP_NODELAY, and sends the PROXY v2 header
/// first when the backend uses `proxy-protocol` forwarding.
async fn connect_backend(shared: &Shared, backend: &Backend, info: &ConnInfo) -> Result<TcpStream, String> {
    let mut s = match timeout(shared.limits.backend_connect_timeout(), TcpStream::connect(&backend.address)).await {
        Ok(Ok(s)) => s,
        Ok(Err(e)) => return Err(format!("connect to {} failed: {e}", backend.address)),
        Err(_) => {
            return Err(format!(
                "connect to {} timed out after {}s",
                backend.address, shared.limits.backend_connect_timeout_seconds
            ))
        }
    };
    let _ = s.set_nodelay(true);
    if backend.forwarding == Forwarding::ProxyProtocol {
        let destination = s.peer_addr().map_err(|e| format!("backend {} vanished: {e}", backend.address))?;
        let header = crate::proxy_header::v2_header(info.client, destination);
        s.write_all(&header).await.map_err(|e| format!("write to {} failed: {e}", backend.address))?;
    }
    Ok(s)
}

/// Vanilla's texts for online-mode failures (`NetHandlerLoginServer`), so players see what they know.
const TOOK_TOO_LONG: &str = "Took too long to log in";
const NOT_VERIFIED: &str = "Failed to verify username!";
const AUTH_SERVERS_DOWN: &str = "Authentication servers are down. Please try again later, sorry!";

/// The name of the property BungeeGuard-style backends check against their configured token.
const BUNGEEGUARD_PROPERTY: &str = "bungeeguard-token";

/// A player the session server vouched for.
struct Verified {
    profile: Profile,
    cipher: Box<ClientCipher>,
    /// Serverbound bytes that followed Encryption Response, decrypted.
    rest: BytesMut,
}

/// Why an online-mode login failed.
struct AuthFailure {
    /// What the player is told (`None` when the player is already gone).
    message: Option<&'static str>,
    /// The player's ciphers when the stream was already encrypted at the failure.
    cipher: Option<Box<ClientCipher>>,
    finish: Finish,
    /// For the session log.
    reason: String,
}

impl AuthFailure {
    fn new(message: Option<&'static str>, finish: Finish, reason: impl Into<String>) -> Self {
        Self { message, cipher: None, finish, reason: reason.into() }
    }

    fn encrypted(mut self, cipher: Box<ClientCipher>) -> Self {
        self.cipher = Some(cipher);
        self
    }
}

/// The online-mode login (protocol 5): Encryption Request, Encryption Response, AES-CFB8 on, `hasJoined`.
/// `slot` (the connection's `max_handshaking` slot) is released once the Encryption Response is in.
#[allow(clippy::too_many_arguments)]
async fn authenticate<P: Player>(
    player: &mut P,
    shared: &Shared,
    auth: &Arc<OnlineAuth>,
    name: &str,
    rest: BytesMut,
    slot: HandshakeSlot,
    shutdown: &CancellationToken,
) -> Result<Verified, AuthFailure> {
    let mut token = [0u8; 4];
    rand_core::RngCore::fill_bytes(&mut rand_core::OsRng, &mut token);
    let request = EncryptionRequest {
        server_id: String::new(),
        public_key: auth.public_key_der().to_vec(),
        verify_token: token.to_vec(),
    };
    let sent = match request.to_frame_bytes() {
        Ok(frame) => player.send(&frame).await,
        Err(e) => Err(io::Error::other(e.to_string())),
    };
    if let Err(e) = sent {
        return Err(AuthFailure::new(None, Finish::Normal, format!("player write failed: {e}")));
    }

    // The player's Encryption Response, within the login deadline.
    let mut dec = FrameDecoder::new(MAX_ENCRYPTION_RESPONSE_FRAME_LEN);
    dec.queue_bytes(rest);
    let login_timeout = shared.limits.login_timeout_seconds;
    let frame = tokio::select! {
        r = timeout(shared.limits.login_timeout(), next_frame(player, &mut dec)) => r,
        () = slot.evicted() => {
            return Err(AuthFailure::new(
                None,
                Finish::ProtocolError,
                "evicted: too many connections in the handshake stage",
            ));
        }
        () = shutdown.cancelled() => {
            return Err(AuthFailure::new(Some(SHUTDOWN_REASON), Finish::Shutdown, "proxy shutdown"));
        }
    };
    drop(slot);
    let frame = match frame {
        Ok(Ok(f)) => f,
        Ok(Err(OpeningError::Closed)) => {
            return Err(AuthFailure::new(None, Finish::Normal, "closed during the encryption handshake"))
        }
        Ok(Err(e)) => {
            return Err(AuthFailure::new(
                Some("Invalid Encryption Response"),
                Finish::ProtocolError,
                format!("bad Encryption Response: {e}"),
            ))
        }
        Err(_) => {
            return Err(AuthFailure::new(
                Some(TOOK_TOO_LONG),
                Finish::ProtocolError,
                format!("no Encryption Response within {login_timeout}s (limits.login_timeout_seconds)"),
            ))
        }
    };
    let response: EncryptionResponse = match frame.decode() {
        Ok(r) => r,
        Err(e) => {
            return Err(AuthFailure::new(
                Some("Invalid Encryption Response"),
                Finish::ProtocolError,
                format!("expected Encryption Response: {e}"),
            ))
        }
    };

    // RSA decryption (blinded, a fraction of a millisecond each) runs off the runtime's workers. The verify
    // token goes first, so a garbage response costs one private-key operation, not two.
    let key = Arc::clone(auth);
    let EncryptionResponse { shared_secret, verify_token } = response;
    let decrypted = tokio::select! {
        r = tokio::task::spawn_blocking(move || {
            let token_ok = key.decrypt(&verify_token).is_some_and(|t| t == token);
            (token_ok, if token_ok { key.decrypt(&shared_secret) } else { None })
        }) => r,
        () = shutdown.cancelled() => {
            return Err(AuthFailure::new(Some(SHUTDOWN_REASON), Finish::Shutdown, "proxy shutdown"));
        }
    };
    let Ok((token_ok, secret)) = decrypted else {
        return Err(AuthFailure::new(Some(NOT_VERIFIED), Finish::ProtocolError, "RSA decryption task failed"));
    };
    if !token_ok {
        // Plaintext: the secret is not even looked at.
        return Err(AuthFailure::new(
            Some("Invalid verify token"),
            Finish::ProtocolError,
            "verify token does not decrypt or does not match",
        ));
    }
    let secret: [u8; SHARED_SECRET_LEN] = match secret.map(<[u8; SHARED_SECRET_LEN]>::try_from) {
        Some(Ok(s)) => s,
        Some(Err(v)) => {
            return Err(AuthFailure::new(
                Some("Invalid shared secret"),
                Finish::ProtocolError,
                format!("shared secret is {} bytes, not {SHARED_SECRET_LEN}", v.len()),
            ))
        }
        None => {
            return Err(AuthFailure::new(
                Some("Invalid shared secret"),
                Finish::ProtocolError,
                "shared secret does not decrypt with the proxy's key",
            ))
        }
    };
    // From here the client encrypts and decrypts everything (it switched after sending the response).
    let mut cipher = Box::new(ClientCipher::new(&secret));
    let mut rest = dec.take_buffered();
    cipher.decrypt.apply(&mut rest);

    let hash = server_hash("", &secret, auth.public_key_der());
    let checked = tokio::select! {
        r = auth.check(name, hash) => r,
        () = shutdown.cancelled() => {
            return Err(AuthFailure::new(Some(SHUTDOWN_REASON), Finish::Shutdown, "proxy shutdown").encrypted(cipher));
        }
    };
    match checked {
        Ok(Some(profile)) if profile.name == name => Ok(Verified { profile, cipher, rest }),
        Ok(Some(profile)) => Err(AuthFailure::new(
            Some(NOT_VERIFIED),
            Finish::Normal,
            format!("session server returned the name {:?}", profile.name),
        )
        .encrypted(cipher)),
        Ok(None) => Err(AuthFailure::new(Some(NOT_VERIFIED), Finish::Normal, "not verified by the session server")
            .encrypted(cipher)),
        Err(e) => {
            if let Some(suppressed) = shared.session_server_log.allow() {
                warn!(suppressed, "online mode: {e}");
            }
            Err(AuthFailure::new(Some(AUTH_SERVERS_DOWN), Finish::BackendUnavailable, e.to_string()).encrypted(cipher))
        }
    }
}

/// The player's encryptor, when online mode switched it on.
fn encryptor(cipher: &mut Option<Box<ClientCipher>>) -> Option<&mut Cfb8Encryptor> {
    cipher.as_mut().map(|c| &mut c.encrypt)
}

#[allow(clippy::too_many_arguments)]
async fn login_session<P: Player>(
    player: &mut P,
    info: &ConnInfo,
    shared: &Arc<Shared>,
    handshake: Handshake,
    login: LoginStart,
    login_raw: BytesMut,
    rest: BytesMut,
    slot: HandshakeSlot,
    shutdown: &CancellationToken,
) -> Summary {
    let mut summary = Summary::new("");
    summary.player = Some(login.name.clone());
    let host = HostField::parse(&handshake.server_address);
    let Some(backend) = shared.route(&host.routing_key()) else {
        login_disconnect(player, &format!("Unknown server address {}", host.hostname), None, Finish::Normal).await;
        summary.reason = format!("no route for host {:?}", host.hostname);
        return summary;
    };
    summary.backend = Some(backend.name.clone());

    // Online mode: authenticate before any backend is contacted.
    let (verified, mut cipher, rest) = match &shared.online {
        // Boxed, like the status and legacy paths: a session's task is sized by its largest state, and an idle
        // player should not carry the encryption handshake's.
        Some(auth) => match Box::pin(authenticate(player, shared, auth, &login.name, rest, slot, shutdown)).await {
            Ok(v) => (Some(v.profile), Some(v.cipher), v.rest),
            Err(mut f) => {
                if let Some(message) = f.message {
                    login_disconnect(player, message, encryptor(&mut f.cipher), f.finish).await;
                } else {
                    player.finish(f.finish).await;
                }
                summary.reason = format!("online mode: {}", f.reason);
                return summary;
            }
        },
        None => {
            drop(slot);
            (None, None, rest)
        }
    };

    let server_address = match backend.forwarding {
        Forwarding::None | Forwarding::ProxyProtocol => handshake.server_address.clone(),
        Forwarding::Bungeecord => {
            let mut props: Vec<Property> = Vec::new();
            let uuid = match (&verified, shared.auth) {
                (Some(profile), _) => {
                    props.extend(profile.properties.iter().cloned());
                    profile.id
                }
                // Passthrough with bungeecord is refused by config validation; never reached.
                (None, AuthMode::Offline | AuthMode::Passthrough | AuthMode::Online) => offline_uuid(&login.name),
            };
            if let Some(marker) = host.marker.filter(|_| host.is_forge()) {
                props.extend(forge_properties(marker));
            }
            if let Some(secret) = &backend.forwarding_secret {
                props.push(Property { name: BUNGEEGUARD_PROPERTY.into(), value: secret.clone(), signature: None });
            }
            bungeecord_address(host.hostname, info.client.ip(), uuid, &props)
        }
    };
    let mut opening = BytesMut::with_capacity(server_address.len() + login_raw.len() + rest.len() + 16);
    if (Handshake { server_address, ..handshake }).encode_frame(&mut opening).is_err() {
        login_disconnect(player, "Handshake could not be forwarded", encryptor(&mut cipher), Finish::ProtocolError)
            .await;
        summary.reason = "forwarded handshake too long".into();
        return summary;
    }
    opening.extend_from_slice(&login_raw);
    opening.extend_from_slice(&rest);
    let up = opening.len() as u64;

    let unreachable = format!("Server {} is unreachable", backend.name);
    let mut stream = match connect_backend(shared, backend, info).await {
        Ok(s) => s,
        Err(e) => {
            warn!(backend = %backend.name, "{e}");
            login_disconnect(player, &unreachable, encryptor(&mut cipher), Finish::BackendUnavailable).await;
            summary.reason = e;
            return summary;
        }
    };
    if let Err(e) = stream.write_all(&opening).await {
        login_disconnect(player, &unreachable, encryptor(&mut cipher), Finish::BackendUnavailable).await;
        summary.reason = format!("backend write failed: {e}");
        return summary;
    }

    // Wait for the backend's first answer (Login Success, Encryption Request or Login Disconnect).
    let mut first = BytesMut::with_capacity(RELAY_CHUNK);
    let answered = tokio::select! {
        r = timeout(shared.limits.login_timeout(), stream.read_buf(&mut first)) => r,
        () = shutdown.cancelled() => {
            login_disconnect(player, SHUTDOWN_REASON, encryptor(&mut cipher), Finish::Shutdown).await;
            summary.reason = "proxy shutdown".into();
            return summary;
        }
    };
    let failed = match answered {
        Ok(Ok(n)) if n > 0 => None,
        Ok(Ok(_)) => Some((
            format!("Server {} closed the connection during login", backend.name),
            "backend closed during login".to_string(),
        )),
        Ok(Err(e)) => Some((unreachable.clone(), format!("backend read failed: {e}"))),
        Err(_) => {
            warn!(backend = %backend.name, "backend did not answer the login within {}s", shared.limits.login_timeout_seconds);
            Some((format!("Server {} did not answer the login in time", backend.name), "backend login timeout".into()))
        }
    };
    let first_id = peek_packet_id(&first);
    let failed = failed.or_else(|| match first_id {
        // An online-mode backend behind an online-mode proxy would ask the player to encrypt a second time.
        Ok(Some(0x01)) if cipher.is_some() => {
            warn!(backend = %backend.name, "backend sent Encryption Request: with auth.mode = \"online\" backends must run in offline mode");
            Some((
                format!("Server {} is misconfigured (online mode behind an online-mode proxy)", backend.name),
                "backend is in online mode".into(),
            ))
        }
        _ => None,
    });
    if let Some((message, reason)) = failed {
        login_disconnect(player, &message, encryptor(&mut cipher), Finish::BackendUnavailable).await;
        summary.reason = reason;
        return summary;
    }
    if let Some(profile) = &verified {
        summary.player = Some(profile.name.clone());
    }
    // Login Success (0x02) means the clientbound stream stays plaintext Minecraft: follow its frames so a
    // shutdown can insert a Disconnect between two of them. Anything else (backend encryption) is relayed
    // opaquely.
    let scanner = match first_id {
        Ok(Some(0x02)) => {
            let mut s = FrameScanner::new();
            s.scan(&first).ok().map(|_| s)
        }
        _ => None,
    };
    let down = first.len() as u64;
    if let Some(e) = encryptor(&mut cipher) {
        e.apply(&mut first);
    }
    if let Err(e) = player.send(&first).await {
        summary.reason = format!("player write failed: {e}");
        return summary;
    }
    drop(first);
    let write_stall = shared.limits.write_stall_timeout();
    let report = player.relay(stream, RelayStart { shutdown, scanner, up, down, write_stall, cipher }).await;
    summary.up = report.up;
    summary.down = report.down;
    summary.reason = report.end.to_string();
    summary
}

/// The status JSON the proxy answers with when the backend cannot.
fn fallback_status_json(message: &str) -> String {
    serde_json::json!({
        "version": { "name": "1.7.10", "protocol": PROTOCOL_VERSION },
        "players": { "max": 0, "online": 0 },
        "description": { "text": message },
    })
    .to_string()
}

async fn status<P: Player>(
    player: &mut P,
    info: &ConnInfo,
    shared: &Arc<Shared>,
    handshake: Handshake,
    rest: BytesMut,
    shutdown: &CancellationToken,
) -> Summary {
    let host = HostField::parse(&handshake.server_address);
    let Some(backend) = shared.route(&host.routing_key()) else {
        let msg = format!("Unknown server address {}", host.hostname);
        answer_status_locally(player, shared, &msg, rest).await;
        return Summary::new(format!("status: no route for host {:?}", host.hostname));
    };
    let mut summary = Summary::new("");
    summary.backend = Some(backend.name.clone());
    let stream = match connect_backend(shared, backend, info).await {
        Ok(s) => s,
        Err(e) => {
            debug!(backend = %backend.name, "status: {e}");
            answer_status_locally(player, shared, &format!("Server {} is unreachable", backend.name), rest).await;
            summary.reason = format!("status answered by proxy: {e}");
            return summary;
        }
    };
    let mut opening = BytesMut::new();
    if handshake.encode_frame(&mut opening).is_err() {
        summary.reason = "status handshake could not be re-encoded".into();
        return summary;
    }
    opening.extend_from_slice(&rest);
    let up = opening.len() as u64;
    let mut stream = stream;
    if let Err(e) = stream.write_all(&opening).await {
        summary.reason = format!("backend write failed: {e}");
        return summary;
    }
    // A status exchange is short: the whole of it gets `login_timeout_seconds`.
    let report = match timeout(
        shared.limits.login_timeout(),
        player.relay(
            stream,
            RelayStart {
                shutdown,
                scanner: None,
                up,
                down: 0,
                write_stall: shared.limits.write_stall_timeout(),
                cipher: None,
            },
        ),
    )
    .await
    {
        Ok(r) => r,
        Err(_) => {
            player.finish(Finish::Normal).await;
            summary.reason = "status exchange timeout".into();
            return summary;
        }
    };
    summary.up = report.up;
    summary.down = report.down;
    summary.reason = format!("status: {}", report.end);
    summary
}

/// Answers Status Request and Ping itself, then closes.
async fn answer_status_locally<P: Player>(player: &mut P, shared: &Shared, message: &str, rest: BytesMut) {
    let mut dec = FrameDecoder::new(64);
    dec.queue_bytes(rest);
    let json = fallback_status_json(message);
    let exchange = async {
        loop {
            let frame = next_frame(player, &mut dec).await?;
            let mut out = BytesMut::new();
            if frame.id == StatusRequest::ID {
                let _ = StatusResponse { json: json.clone() }.encode_frame(&mut out);
                player.send(&out).await?;
            } else {
                let ping: StatusPing = frame.decode()?;
                let _ = ping.encode_frame(&mut out);
                player.send(&out).await?;
                return Ok::<(), OpeningError>(());
            }
        }
    };
    let _ = timeout(shared.limits.handshake_timeout(), exchange).await;
    player.finish(Finish::BackendUnavailable).await;
}

async fn legacy_ping<P: Player>(
    player: &mut P,
    info: &ConnInfo,
    shared: &Arc<Shared>,
    ping: LegacyPing,
    raw: BytesMut,
    deadline: tokio::time::Instant,
) -> Summary {
    let Some(backend) = shared.default_backend() else {
        player.finish(Finish::Normal).await;
        return Summary::new("legacy ping: no backend configured");
    };
    let relayed = timeout_at(deadline, async {
        let mut stream = connect_backend(shared, backend, info).await.ok()?;
        stream.write_all(&raw).await.ok()?;
        let mut answer = BytesMut::with_capacity(512);
        loop {
            if let Ok(Some((_, n))) = legacy::decode_kick(&answer) {
                answer.truncate(n);
                return Some(answer);
            }
            if answer.len() >= MAX_LEGACY_ANSWER_BYTES {
                return None;
            }
            if stream.read_buf(&mut answer).await.ok()? == 0 {
                return None;
            }
        }
    })
    .await
    .ok()
    .flatten();
    let (answer, how) = match relayed {
        Some(a) => (a.to_vec(), "legacy ping relayed"),
        None => {
            let status = LegacyStatus {
                protocol: 127,
                version: "1.7.10".into(),
                motd: format!("Server {} is unreachable", backend.name),
                online: 0,
                max: 0,
            };
            (legacy::encode_kick(&ping, &status), "legacy ping answered by proxy")
        }
    };
    let _ = player.send(&answer).await;
    player.finish(Finish::Normal).await;
    let mut s = Summary::new(how);
    s.backend = Some(backend.name.clone());
    s
}

/// The Play Disconnect frame sent to players on shutdown.
pub(crate) fn shutdown_disconnect_frame() -> Vec<u8> {
    (PlayDisconnect { reason_json: chat_text(SHUTDOWN_REASON) })
        .to_frame_bytes()
        .map(|b| b.to_vec())
        .unwrap_or_default()
}
