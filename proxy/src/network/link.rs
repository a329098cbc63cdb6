//! Instance links: the authenticated TCP connections between the instances of a network (`[network]
//! peer_bind`). One link per request, no multiplexing.
//!
//! Opening (both ways bound by [`AUTH_TIMEOUT`]), after TLS when the link carries a `wss` player's resume:
//!
//! | who | bytes |
//! |---|---|
//! | dialler | [`MAGIC`] (8 bytes), its nonce (32 random bytes) |
//! | listener | its nonce (32), `HMAC-SHA-256(secret, "moonbridge link server" ‖ dialler nonce ‖ listener nonce ‖ binding)` |
//! | dialler | `HMAC-SHA-256(secret, "moonbridge link client" ‖ listener nonce ‖ dialler nonce ‖ binding ‖ length ‖ request)`, then the request: `u16` big-endian length (at most [`MAX_REQUEST_BYTES`]) and that much JSON ([`Request`]) |
//!
//! `binding` is 32 bytes of TLS keying material (RFC 5705 exporter, label [`EXPORTER_LABEL`]) on a TLS link,
//! and empty on a plain one: a relayed TLS link fails the check, so the certificate itself need not be trusted.
//! The dialler's MAC covers its request, so nobody on the path can change it. Each side checks the other's MAC
//! (constant time) before it acts on anything else; a link that fails is closed. After a `resume` request the
//! link carries the player's WebSocket bytes both ways, unchanged; after a `kick` or an `act` the listener
//! answers with one `u16`-prefixed JSON object (`{"kicked": bool}`, `{"done": n, "missed": n}`) followed by
//! `HMAC-SHA-256(secret, "moonbridge link answer" ‖ dialler nonce ‖ listener nonce ‖ binding ‖ length ‖ answer)`.

use std::net::SocketAddr;
use std::path::Path;

use aws_lc_rs::hmac;
use rand_core::{OsRng, RngCore};
use tokio::io::{AsyncRead, AsyncReadExt, AsyncWrite, AsyncWriteExt};
use tokio::net::TcpStream;

use super::{CarriedResume, LinkStream};
pub(crate) use super::{LinkError, NetworkError, AUTH_TIMEOUT, MAX_REQUEST_BYTES, MIN_SECRET_BYTES};
use crate::players::{Action, Reach};

/// The first bytes of a plain link (a TLS link starts with a TLS ClientHello, byte `0x16`).
pub(crate) const MAGIC: &[u8; 8] = b"MBLINK1\n";
/// The RFC 5705 exporter label that binds a TLS link's MACs to its TLS session.
pub(crate) const EXPORTER_LABEL: &[u8] = b"EXPORTER-moonbridge-instance-link";
const NONCE_LEN: usize = 32;
const MAC_LEN: usize = 32;

/// The network's shared secret, as an HMAC-SHA-256 key.
pub(crate) struct Secret(hmac::Key);

impl Secret {
    /// Reads `path`: its bytes, surrounding whitespace trimmed, at least [`MIN_SECRET_BYTES`].
    pub(crate) fn load(path: &Path) -> Result<Self, NetworkError> {
        let bytes = std::fs::read(path).map_err(|source| NetworkError::SecretRead { path: path.into(), source })?;
        let trimmed = bytes.trim_ascii();
        if trimmed.len() < MIN_SECRET_BYTES {
            return Err(NetworkError::SecretShort { path: path.into(), len: trimmed.len() });
        }
        Ok(Self::new(trimmed))
    }

    /// A key from the secret's bytes.
    pub(crate) fn new(secret: &[u8]) -> Self {
        Self(hmac::Key::new(hmac::HMAC_SHA256, secret))
    }

    /// The MAC of `parts`, in order.
    pub(super) fn mac(&self, parts: &[&[u8]]) -> hmac::Tag {
        let mut ctx = hmac::Context::with_key(&self.0);
        for part in parts {
            ctx.update(part);
        }
        ctx.sign()
    }

    /// Whether `tag` is the MAC of `parts` (compared in constant time).
    pub(super) fn verify(&self, parts: &[&[u8]], tag: &[u8]) -> bool {
        let data = parts.concat();
        hmac::verify(&self.0, &data, tag).is_ok()
    }
}

const SERVER_ROLE: &[u8] = b"moonbridge link server";
const CLIENT_ROLE: &[u8] = b"moonbridge link client";
const ANSWER_ROLE: &[u8] = b"moonbridge link answer";

/// What both ends of an opened link share: the two nonces and the binding, which an answer's MAC covers.
pub(crate) struct Opened {
    dialler: [u8; NONCE_LEN],
    listener: [u8; NONCE_LEN],
    binding: Vec<u8>,
}

/// What a link asks of the instance it reaches.
#[derive(Clone, Debug, PartialEq, Eq, serde::Serialize, serde::Deserialize)]
#[serde(tag = "op", rename_all = "snake_case", deny_unknown_fields)]
pub(crate) enum Request {
    /// A player's carriage v2 resume request, and from then on the player's WebSocket bytes both ways.
    Resume {
        /// The player reached the forwarding instance over `wss` (the link is then TLS too).
        secure: bool,
        /// `moonbridge.v2.zstd` was selected, at this level for what the owner sends.
        zstd: Option<i32>,
        /// The player's real address, for the owner's logs.
        client: SocketAddr,
        /// The resume request as the player sent it (`resume <token> <received> <sent>`).
        control: String,
    },
    /// End player `name`'s session with `reason` (a duplicate login elsewhere).
    Kick {
        /// The player's name (any case).
        name: String,
        /// The claim the session to end holds (`<instance>:<nonce>:<login ms>:<signature>`): a later login of the name
        /// there, which holds another, stays.
        claim: String,
        /// Plain text for the player's disconnect screen.
        reason: String,
    },
    /// An operator's action on the listener's players (the admin API); answered with one [`Reach`].
    Act {
        /// What to do.
        action: Action,
    },
    /// A player's `moving` request for a session of the listener's (docs/network.md, "Drain"); answered with
    /// one [`crate::network::moves::MoveAnswer`].
    Move {
        /// The ticket the player presented (`<instance>.<secret>`).
        ticket: String,
        /// The client's counts: bytes received from the draining instance and sent, in all.
        received: u64,
        sent: u64,
    },
}

/// The answer to [`Request::Kick`].
#[derive(Debug, serde::Serialize, serde::Deserialize)]
pub(crate) struct KickAnswer {
    /// The player was on that instance and was told to go.
    pub(crate) kicked: bool,
}

fn nonce() -> [u8; NONCE_LEN] {
    let mut n = [0u8; NONCE_LEN];
    OsRng.fill_bytes(&mut n);
    n
}

/// The dialler's side of the opening on `stream`, then `request`.
pub(crate) async fn open<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    secret: &Secret,
    binding: &[u8],
    request: &Request,
) -> Result<Opened, LinkError> {
    let json = serde_json::to_vec(request)?;
    let len = u16::try_from(json.len()).ok().filter(|l| usize::from(*l) <= MAX_REQUEST_BYTES);
    let len = len.ok_or(LinkError::TooLong(json.len()))?.to_be_bytes();
    let mine = nonce();
    let mut hello = Vec::with_capacity(MAGIC.len() + NONCE_LEN);
    hello.extend_from_slice(MAGIC);
    hello.extend_from_slice(&mine);
    stream.write_all(&hello).await?;
    let mut answer = [0u8; NONCE_LEN + MAC_LEN];
    stream.read_exact(&mut answer).await?;
    let (theirs, tag) = answer.split_at(NONCE_LEN);
    if !secret.verify(&[SERVER_ROLE, &mine, theirs, binding], tag) {
        return Err(LinkError::BadMac);
    }
    let mut out = Vec::with_capacity(MAC_LEN + 2 + json.len());
    out.extend_from_slice(secret.mac(&[CLIENT_ROLE, theirs, &mine, binding, &len, &json]).as_ref());
    out.extend_from_slice(&len);
    out.extend_from_slice(&json);
    stream.write_all(&out).await?;
    stream.flush().await?;
    let mut listener = [0u8; NONCE_LEN];
    listener.copy_from_slice(theirs);
    Ok(Opened { dialler: mine, listener, binding: binding.to_vec() })
}

/// The listener's side of the opening on `stream` (whose [`MAGIC`] is still unread): the dialler's request.
pub(crate) async fn accept<S: AsyncRead + AsyncWrite + Unpin>(
    stream: &mut S,
    secret: &Secret,
    binding: &[u8],
) -> Result<(Request, Opened), LinkError> {
    let mut hello = [0u8; 8 + NONCE_LEN];
    stream.read_exact(&mut hello).await?;
    let (magic, theirs) = hello.split_at(MAGIC.len());
    if magic != MAGIC {
        return Err(LinkError::BadMagic);
    }
    let mine = nonce();
    let mut answer = Vec::with_capacity(NONCE_LEN + MAC_LEN);
    answer.extend_from_slice(&mine);
    answer.extend_from_slice(secret.mac(&[SERVER_ROLE, theirs, &mine, binding]).as_ref());
    stream.write_all(&answer).await?;
    stream.flush().await?;
    let mut proof = [0u8; MAC_LEN + 2];
    stream.read_exact(&mut proof).await?;
    let (tag, len_bytes) = proof.split_at(MAC_LEN);
    let len = usize::from(u16::from_be_bytes([
        len_bytes.first().copied().unwrap_or(0),
        len_bytes.get(1).copied().unwrap_or(0),
    ]));
    if len > MAX_REQUEST_BYTES {
        return Err(LinkError::TooLong(len));
    }
    // At most MAX_REQUEST_BYTES read before the MAC over them is checked.
    let mut json = vec![0u8; len];
    stream.read_exact(&mut json).await?;
    if !secret.verify(&[CLIENT_ROLE, &mine, theirs, binding, len_bytes, &json], tag) {
        return Err(LinkError::BadMac);
    }
    let request = serde_json::from_slice(&json)?;
    let mut dialler = [0u8; NONCE_LEN];
    dialler.copy_from_slice(theirs);
    Ok((request, Opened { dialler, listener: mine, binding: binding.to_vec() }))
}

/// Dials instance `peer` (`host:port`) within [`AUTH_TIMEOUT`].
pub(crate) async fn dial(peer: &str) -> Result<TcpStream, LinkError> {
    let stream =
        tokio::time::timeout(AUTH_TIMEOUT, TcpStream::connect(peer)).await.map_err(|_| LinkError::Timeout)??;
    let _ = stream.set_nodelay(true);
    Ok(stream)
}

/// Asks instance `peer` to end the session of player `name` that holds `claim`, with `reason`; whether it had
/// that session.
pub(crate) async fn kick(
    peer: &str,
    secret: &Secret,
    name: &str,
    claim: &str,
    reason: &str,
) -> Result<bool, LinkError> {
    let request = Request::Kick { name: name.to_string(), claim: claim.to_string(), reason: reason.to_string() };
    ask::<KickAnswer>(peer, secret, &request).await.map(|a| a.kicked)
}

/// Asks instance `peer` to carry out an operator's `action` on its players: what it came to there.
pub(crate) async fn act(peer: &str, secret: &Secret, action: &Action) -> Result<Reach, LinkError> {
    ask(peer, secret, &Request::Act { action: action.clone() }).await
}

/// Sends `request` to instance `peer` on a new plain link and reads its one small answer, all within
/// [`AUTH_TIMEOUT`].
async fn ask<A: serde::de::DeserializeOwned>(peer: &str, secret: &Secret, request: &Request) -> Result<A, LinkError> {
    tokio::time::timeout(AUTH_TIMEOUT, async {
        let mut stream = dial(peer).await?;
        let opened = open(&mut stream, secret, &[], request).await?;
        read_answer(&mut stream, secret, &opened, SMALL_ANSWER).await
    })
    .await
    .map_err(|_| LinkError::Timeout)?
}

/// How an answer's length is written on a link: its width in bytes (2 or 4, big-endian) and the most it may
/// say, in bytes of JSON (checked before anything is buffered).
#[derive(Clone, Copy, Debug)]
pub(crate) struct AnswerSize {
    /// Bytes of the length field: 2 or 4.
    pub(crate) width: usize,
    /// The largest JSON body, in bytes.
    pub(crate) max: usize,
}

/// The answers of kicks and the like: a `u16` length, at most [`MAX_REQUEST_BYTES`].
pub(crate) const SMALL_ANSWER: AnswerSize = AnswerSize { width: 2, max: MAX_REQUEST_BYTES };

/// Reads the listener's answer on an opened link: one length-prefixed JSON object (`size`) and its MAC
/// (module documentation).
///
/// # Errors
/// [`LinkError::TooLong`] past `size.max` (before buffering), [`LinkError::BadMac`], a bad JSON object, or
/// the stream's error.
pub(crate) async fn read_answer<T: serde::de::DeserializeOwned, S: AsyncRead + Unpin>(
    stream: &mut S,
    secret: &Secret,
    opened: &Opened,
    size: AnswerSize,
) -> Result<T, LinkError> {
    let mut field = [0u8; 4];
    let field = field.get_mut(..size.width).ok_or(LinkError::TooLong(size.width))?;
    stream.read_exact(field).await?;
    let n = field.iter().fold(0usize, |n, b| n << 8 | usize::from(*b));
    if n > size.max {
        return Err(LinkError::TooLong(n));
    }
    let mut json = vec![0u8; n];
    stream.read_exact(&mut json).await?;
    let mut tag = [0u8; MAC_LEN];
    stream.read_exact(&mut tag).await?;
    let parts: [&[u8]; 6] = [ANSWER_ROLE, &opened.dialler, &opened.listener, &opened.binding, field, &json];
    if !secret.verify(&parts, &tag) {
        return Err(LinkError::BadMac);
    }
    Ok(serde_json::from_slice(&json)?)
}

/// Writes the listener's answer on an opened link: one length-prefixed JSON object (`size`) and its MAC.
///
/// # Errors
/// [`LinkError::TooLong`] when the JSON is over `size.max`, or the stream's error.
pub(crate) async fn write_answer<T: serde::Serialize, S: AsyncWrite + Unpin>(
    stream: &mut S,
    secret: &Secret,
    opened: &Opened,
    value: &T,
    size: AnswerSize,
) -> Result<(), LinkError> {
    let json = serde_json::to_vec(value)?;
    // At most `size.max`, and what the length field's width can say.
    let fits = size.width >= 4 || json.len() >> (8 * size.width) == 0;
    let n = u32::try_from(json.len()).ok().filter(|_| fits && json.len() <= size.max);
    let n = n.ok_or(LinkError::TooLong(json.len()))?.to_be_bytes();
    let field = n.get(4usize.saturating_sub(size.width)..).unwrap_or_default();
    let tag = secret.mac(&[ANSWER_ROLE, &opened.dialler, &opened.listener, &opened.binding, field, &json]);
    let mut out = Vec::with_capacity(field.len() + json.len() + MAC_LEN);
    out.extend_from_slice(field);
    out.extend_from_slice(&json);
    out.extend_from_slice(tag.as_ref());
    stream.write_all(&out).await?;
    stream.flush().await?;
    Ok(())
}

/// The TLS client configuration of links that carry a `wss` player: the listener's certificate is not
/// checked (the MACs, bound to the TLS session, authenticate both ends), so any certificate a `wss`
/// listener has serves.
pub(crate) fn tls_client() -> Result<std::sync::Arc<rustls::ClientConfig>, LinkError> {
    let provider = std::sync::Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let verifier = std::sync::Arc::new(AnyCertificate(std::sync::Arc::clone(&provider)));
    let config = rustls::ClientConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()?
        .dangerous()
        .with_custom_certificate_verifier(verifier)
        .with_no_client_auth();
    Ok(std::sync::Arc::new(config))
}

/// Accepts any certificate chain; checks the handshake signatures with the provider's algorithms.
#[derive(Debug)]
struct AnyCertificate(std::sync::Arc<rustls::crypto::CryptoProvider>);

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(message, cert, dss, &self.0.signature_verification_algorithms)
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        self.0.signature_verification_algorithms.supported_schemes()
    }
}

/// The TLS binding of a link: 32 bytes of exported keying material.
pub(crate) fn binding<D>(conn: &rustls::ConnectionCommon<D>) -> Result<[u8; 32], LinkError> {
    Ok(conn.export_keying_material([0u8; 32], EXPORTER_LABEL, None)?)
}

/// Opens the instance link that carries a resume to its owner at `peer`: TLS when the player came over `wss`
/// (so the two kinds of session stay apart at the owner as on one instance), the opening with the `resume`
/// request, all within [`AUTH_TIMEOUT`].
///
/// # Errors
/// [`LinkError`] when the link cannot be opened (the player's token is then refused with 4002).
pub(crate) async fn open_carrier(peer: &str, secret: &Secret, resume: CarriedResume) -> Result<LinkStream, LinkError> {
    let CarriedResume { secure, zstd, client, control } = resume;
    let request = Request::Resume { secure, zstd, client, control };
    let opened = tokio::time::timeout(AUTH_TIMEOUT, async {
        let mut tcp = dial(peer).await?;
        if secure {
            let connector = tokio_rustls::TlsConnector::from(tls_client()?);
            let name = rustls::pki_types::ServerName::try_from("moonbridge-instance-link")?;
            let mut tls = connector.connect(name, tcp).await?;
            let binding = binding(tls.get_ref().1)?;
            open(&mut tls, secret, &binding, &request).await?;
            Ok::<_, LinkError>(LinkStream::Tls(Box::new(tls)))
        } else {
            open(&mut tcp, secret, &[], &request).await?;
            Ok(LinkStream::Tcp(tcp))
        }
    });
    opened.await.map_err(|_| LinkError::Timeout)?
}

#[cfg(test)]
mod tests {
    use super::*;

    #[tokio::test]
    async fn both_ends_prove_the_secret_and_the_request_arrives() {
        let (mut a, mut b) = tokio::io::duplex(4096);
        let secret = Secret::new(&[7u8; 32]);
        let request = Request::Kick { name: "Alex".into(), claim: "a:b:1".into(), reason: "bye".into() };
        let (opened, accepted) =
            tokio::join!(open(&mut a, &secret, b"bind", &request), accept(&mut b, &secret, b"bind"));
        let opened = opened.unwrap();
        let (got, at_listener) = accepted.unwrap();
        assert_eq!(got, request);
        // The answer arrives with its MAC; the same answer under another link's nonces is refused.
        write_answer(&mut b, &secret, &at_listener, &KickAnswer { kicked: true }, SMALL_ANSWER).await.unwrap();
        let answer: KickAnswer = read_answer(&mut a, &secret, &opened, SMALL_ANSWER).await.unwrap();
        assert!(answer.kicked);
        let other = Opened { dialler: [1; NONCE_LEN], listener: [2; NONCE_LEN], binding: b"bind".to_vec() };
        write_answer(&mut b, &secret, &other, &KickAnswer { kicked: false }, SMALL_ANSWER).await.unwrap();
        let forged = read_answer::<KickAnswer, _>(&mut a, &secret, &opened, SMALL_ANSWER).await;
        assert!(matches!(forged, Err(LinkError::BadMac)));
        // Over the limit (or past what a 2-byte length can say) is refused on both sides, before buffering.
        let long = "x".repeat(MAX_REQUEST_BYTES);
        let over = write_answer(&mut b, &secret, &at_listener, &long, SMALL_ANSWER).await;
        assert!(matches!(over, Err(LinkError::TooLong(n)) if n == MAX_REQUEST_BYTES + 2), "{over:?}");
        let wide = AnswerSize { width: 2, max: usize::MAX };
        let over = write_answer(&mut b, &secret, &at_listener, &"x".repeat(70_000), wide).await;
        assert!(matches!(over, Err(LinkError::TooLong(_))), "{over:?}");
        use tokio::io::AsyncWriteExt;
        b.write_all(&u16::try_from(MAX_REQUEST_BYTES + 1).unwrap().to_be_bytes()).await.unwrap();
        let over = read_answer::<KickAnswer, _>(&mut a, &secret, &opened, SMALL_ANSWER).await;
        assert!(matches!(over, Err(LinkError::TooLong(n)) if n == MAX_REQUEST_BYTES + 1), "{over:?}");

        // A request changed on the path (after the dialler's MAC) is refused: "Alex" becomes "Blex".
        let (mut dial_end, mut relay_in) = tokio::io::duplex(4096);
        let (mut relay_out, mut listen_end) = tokio::io::duplex(4096);
        let relay = async move {
            let mut hello = [0u8; MAGIC.len() + NONCE_LEN];
            relay_in.read_exact(&mut hello).await.unwrap();
            relay_out.write_all(&hello).await.unwrap();
            let mut answer = [0u8; NONCE_LEN + MAC_LEN];
            relay_out.read_exact(&mut answer).await.unwrap();
            relay_in.write_all(&answer).await.unwrap();
            let mut proof = [0u8; MAC_LEN + 2];
            relay_in.read_exact(&mut proof).await.unwrap();
            let mut json = vec![0u8; usize::from(u16::from_be_bytes([proof[MAC_LEN], proof[MAC_LEN + 1]]))];
            relay_in.read_exact(&mut json).await.unwrap();
            let at = json.windows(4).position(|w| w == b"Alex").unwrap();
            json[at] = b'B';
            relay_out.write_all(&proof).await.unwrap();
            relay_out.write_all(&json).await.unwrap();
            (relay_in, relay_out)
        };
        let (opened, accepted, _ends) =
            tokio::join!(open(&mut dial_end, &secret, &[], &request), accept(&mut listen_end, &secret, &[]), relay);
        assert!(opened.is_ok(), "the dialler cannot tell");
        assert!(matches!(accepted, Err(LinkError::BadMac)));

        // A dialler without the secret is refused before any request is read; and it refuses the listener.
        let (mut a, mut b) = tokio::io::duplex(4096);
        let wrong = Secret::new(&[8u8; 32]);
        // The dialler hangs up once it has refused, as `dial` does by dropping its stream.
        let request_ref = &request;
        let dialler = async move {
            let opened = open(&mut a, &wrong, &[], request_ref).await;
            drop(a);
            opened
        };
        let (opened, accepted) = tokio::join!(dialler, accept(&mut b, &secret, &[]));
        assert!(matches!(opened, Err(LinkError::BadMac)));
        assert!(accepted.is_err());

        // The same secret over a different binding (a relayed TLS link) fails too.
        let (mut a, mut b) = tokio::io::duplex(4096);
        let secret_ref = &secret;
        let dialler = async move {
            let opened = open(&mut a, secret_ref, b"one", request_ref).await;
            drop(a);
            opened
        };
        let (opened, accepted) = tokio::join!(dialler, accept(&mut b, &secret, b"two"));
        assert!(matches!(opened, Err(LinkError::BadMac)));
        assert!(accepted.is_err());
    }

    #[tokio::test]
    async fn bad_openings_are_refused() {
        let secret = Secret::new(&[7u8; 32]);
        let (mut a, mut b) = tokio::io::duplex(4096);
        a.write_all(b"GET / HTTP/1.1\r\n\r\nxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxxx").await.unwrap();
        assert!(matches!(accept(&mut b, &secret, &[]).await, Err(LinkError::BadMagic)));
        let json = br#"{"op":"kick","name":"a","claim":"c","reason":"b","extra":1}"#;
        assert!(serde_json::from_slice::<Request>(json).is_err(), "unknown fields are refused");
        let resume = Request::Resume {
            secure: true,
            zstd: Some(1),
            client: ([10, 0, 0, 1], 5).into(),
            control: "resume x 1 2".into(),
        };
        let text = serde_json::to_string(&resume).unwrap();
        assert_eq!(text, r#"{"op":"resume","secure":true,"zstd":1,"client":"10.0.0.1:5","control":"resume x 1 2"}"#);
    }

    #[test]
    fn short_secrets_are_refused() {
        let dir = std::env::temp_dir().join(format!("mb-secret-{}", std::process::id()));
        std::fs::write(&dir, "  short secret \n").unwrap();
        assert!(matches!(Secret::load(&dir), Err(NetworkError::SecretShort { len: 12, .. })));
        std::fs::write(&dir, format!("{}\n", "k".repeat(32))).unwrap();
        assert!(Secret::load(&dir).is_ok());
        let _ = std::fs::remove_file(&dir);
    }
}
