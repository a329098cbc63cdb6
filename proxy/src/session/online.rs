//! Online mode at the proxy (`auth.mode = "online"`, protocol 5): Encryption Request with this process's
//! RSA-1024 key, the player's Encryption Response (within `login_timeout_seconds`), AES-CFB8 on the player's
//! stream, and the session server's `hasJoined` (see [`crate::auth`]). A failure is a Login Disconnect with
//! vanilla's text, and no backend is contacted.

use std::io;
use std::sync::Arc;

use bytes::BytesMut;
use moonbridge_protocol::crypto::{server_hash, Cfb8Encryptor, SHARED_SECRET_LEN};
use moonbridge_protocol::packets::{EncryptionRequest, EncryptionResponse, Packet, MAX_ENCRYPTION_RESPONSE_FRAME_LEN};
use moonbridge_protocol::FrameDecoder;
use tokio::time::timeout;
use tracing::warn;

use super::opening::{next_frame, OpeningError};
use super::{Finish, Player, Session};
use crate::auth::{OnlineAuth, Profile};
use crate::labels::LoginOutcome;
use crate::limits::HandshakeSlot;
use crate::relay::{ClientCipher, SHUTDOWN_REASON};

/// Vanilla's texts for online-mode failures (`NetHandlerLoginServer`), so players see what they know.
pub(super) const TOOK_TOO_LONG: &str = "Took too long to log in";
pub(super) const NOT_VERIFIED: &str = "Failed to verify username!";
pub(super) const AUTH_SERVERS_DOWN: &str = "Authentication servers are down. Please try again later, sorry!";

/// A player the session server vouched for.
pub(super) struct Verified {
    pub(super) profile: Profile,
    pub(super) cipher: Box<ClientCipher>,
    /// Serverbound bytes that followed Encryption Response, decrypted.
    pub(super) rest: BytesMut,
}

/// Why an online-mode login failed.
pub(super) struct AuthFailure {
    /// What the player is told (`None` when the player is already gone).
    pub(super) message: Option<&'static str>,
    /// The player's ciphers when the stream was already encrypted at the failure.
    pub(super) cipher: Option<Box<ClientCipher>>,
    pub(super) finish: Finish,
    /// For the session log.
    pub(super) reason: String,
}

impl AuthFailure {
    fn new(message: Option<&'static str>, finish: Finish, reason: impl Into<String>) -> Self {
        Self { message, cipher: None, finish, reason: reason.into() }
    }

    /// The `outcome` label of `moonbridge_logins_total` for this failure (`online_` and what went wrong).
    pub(super) fn outcome(&self) -> LoginOutcome {
        match self.message {
            None => LoginOutcome::OnlinePlayerLeft,
            Some(m) if m == SHUTDOWN_REASON => LoginOutcome::Shutdown,
            Some(m) if m == TOOK_TOO_LONG => LoginOutcome::OnlineEncryptionTimeout,
            Some(m) if m == NOT_VERIFIED => LoginOutcome::OnlineNotVerified,
            Some(m) if m == AUTH_SERVERS_DOWN => LoginOutcome::OnlineSessionServerUnavailable,
            Some(_) => LoginOutcome::OnlineBadEncryptionResponse,
        }
    }

    fn encrypted(mut self, cipher: Box<ClientCipher>) -> Self {
        self.cipher = Some(cipher);
        self
    }
}

/// The online-mode login (protocol 5): Encryption Request, Encryption Response, AES-CFB8 on, `hasJoined`.
/// `slot` (the connection's `max_handshaking` slot) is released once the Encryption Response is in.
pub(super) async fn authenticate<P: Player>(
    s: &mut Session<'_, P>,
    auth: &Arc<OnlineAuth>,
    name: &str,
    rest: BytesMut,
    slot: HandshakeSlot,
) -> Result<Verified, AuthFailure> {
    let (player, state, shutdown) = (&mut *s.player, s.state, s.shutdown);
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
    let login_timeout = s.live.tunables.limits.login_timeout_seconds;
    let frame = tokio::select! {
        r = timeout(s.live.tunables.limits.login_timeout(), next_frame(&mut *player, &mut dec)) => r,
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
    // The session server may take a while: the player is kept alive meanwhile, and if it leaves, the check
    // is abandoned and no backend is ever contacted.
    let checked = tokio::select! {
        r = player.during(auth.check(name, hash)) => match r {
            Ok(r) => r,
            Err(gone) => {
                let finish = Finish::after(&gone);
                return Err(AuthFailure::new(None, finish, format!("{gone} (while the session server was asked)"))
                    .encrypted(cipher));
            }
        },
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
            if let Some(suppressed) = state.session_server_log.allow() {
                warn!(suppressed, "online mode: {e}");
            }
            Err(AuthFailure::new(Some(AUTH_SERVERS_DOWN), Finish::BackendUnavailable, e.to_string()).encrypted(cipher))
        }
    }
}

/// The player's encryptor, when online mode switched it on.
pub(super) fn encryptor(cipher: &mut Option<Box<ClientCipher>>) -> Option<&mut Cfb8Encryptor> {
    cipher.as_mut().map(|c| &mut c.encrypt)
}
