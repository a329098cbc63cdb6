//! Online mode (`auth.mode = "online"`): the proxy runs the protocol 5 encryption handshake, checks the player
//! with the session server and forwards the verified identity with BungeeCord forwarding.
//!
//! The session server is `peers/session-server.js`, a local STAND-IN: the real sessionserver.mojang.com cannot
//! be reached from the test machines. It implements `join` and `hasJoined` with the real server-hash check (the
//! hash the client joined with must equal the one the proxy asks about). Its texture signatures are opaque
//! test strings (only Mojang's key can make real ones; the proxy passes them through unread).
//!
//! Players are real node-minecraft-protocol 1.7.10 clients (`auth: 'mojang'` against the stand-in); the
//! failure cases use a raw client in `testbed::online` that can misbehave on purpose.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::time::{Duration, Instant};

use moonbridge_protocol::crypto::{Cfb8Decryptor, Cfb8Encryptor};
use moonbridge_protocol::packets::{EncryptionRequest, EncryptionResponse, Packet, PlayDisconnect};
use moonbridge_proxy::config::Transport;
use serde_json::{json, Value};
use testbed::online::{profiles, rsa_encrypt, session_server, start_online_login};
use testbed::{
    frames, login_handshake, login_start, login_success, node_backend, read_to_close, tcp_config, ws_connect, KeyType,
    Message, NodePeer, Proxy, RawBackend, RawBehaviour, TestCert, STEP,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpListener;

const TOKEN: &str = "bungeeguard-secret-0123456789";

fn online_auth_toml(session_server: &str, extra: &str) -> String {
    format!("\n[auth]\nmode = \"online\"\nsession_server = \"{session_server}\"\n{extra}")
}

/// Real clients log in through `listener` (TOML of one listener) with online mode and bungeecord forwarding
/// to a backend that checks the forwarded UUID, signed textures and token, then play: the 70 × 30,000-byte
/// burst checked byte for byte and a chat round trip, over the encrypted player stream.
async fn online_players(transport: Transport, names: &[&str]) {
    let profiles = profiles(names);
    let (mut sessions, session_url) = session_server(json!({ "profiles": profiles })).await;
    let expect: serde_json::Map<String, Value> = profiles
        .iter()
        .map(|p| {
            (
                p["name"].as_str().unwrap().to_string(),
                json!({ "uuid": p["id"], "textures": p["properties"][0]["value"], "token": TOKEN }),
            )
        })
        .collect();
    let (mut backend, backend_addr) = node_backend(json!({ "expectForwarded": expect })).await;
    let cert = TestCert::generate("online-wss", KeyType::Ec).unwrap();
    let listener = if transport == Transport::Wss {
        format!("transport = \"wss\"\ntls_cert = \"{}\"\ntls_key = \"{}\"", cert.cert.display(), cert.key.display())
    } else {
        format!("transport = \"{transport}\"")
    };
    let proxy = Proxy::start(&format!(
        "[[listener]]\n{listener}\nbind = \"127.0.0.1:0\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{backend_addr}\"\nforwarding = \"bungeecord\"\n\
         forwarding_secret = \"{TOKEN}\"\n{}",
        online_auth_toml(&session_url, "")
    ))
    .await;
    let port = proxy.addr(transport).port();
    let mut opts = json!({
        "port": port, "count": names.len(), "forge": "alternate",
        "online": { "sessionServer": session_url, "profiles": profiles },
    });
    if transport == Transport::Wss {
        opts["url"] = json!(format!("wss://127.0.0.1:{port}/mc"));
        opts["ca"] = json!(cert.ca);
        opts["servername"] = json!("localhost");
    }
    let mut clients = NodePeer::spawn("client.js", &opts).await;
    let (results, done) = clients.collect_until_done("client", Duration::from_secs(120)).await;
    assert_eq!(done["ok"], names.len(), "{results:?}");
    for r in &results {
        assert_eq!(
            (r["ok"].clone(), r["burst"].clone(), r["chat"].clone()),
            (json!(true), json!(70), json!(true)),
            "{r}"
        );
    }
    assert_eq!(clients.wait(STEP).await, Some(0));

    // The session server saw each client join and the proxy ask with the same server hash.
    let calls = sessions.next_lines(3 * names.len(), STEP).await; // join, hasJoinedReceived, hasJoined
    for name in names {
        let call =
            |event: &str| calls.iter().find(|c| c["event"] == event && (c["name"] == *name || c["username"] == *name));
        let (join, has_joined) = (call("join").expect("joined"), call("hasJoined").expect("checked"));
        assert_eq!((join["ok"].as_bool(), has_joined["ok"].as_bool()), (Some(true), Some(true)), "{calls:?}");
        assert_eq!(join["serverId"], has_joined["serverId"]);
    }
    // The backend got each verified identity (it kicks on a mismatch, so the clients above would have failed).
    for _ in names {
        let login = backend.event("login", STEP).await;
        let p = profiles.iter().find(|p| p["name"] == login["username"]).expect("a known player");
        let f = &login["forwarded"];
        assert_eq!(f["host"], "mc.example.com");
        assert_eq!(f["ip"], "127.0.0.1");
        assert_eq!(f["uuid"], p["id"]);
        let props = f["properties"].as_array().unwrap();
        let textures = props.iter().find(|x| x["name"] == "textures").unwrap();
        assert_eq!(textures, &p["properties"][0], "textures forwarded with their signature");
        let token = props.iter().find(|x| x["name"] == "bungeeguard-token").unwrap();
        assert_eq!(token["value"], TOKEN);
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_players_over_tcp() {
    online_players(Transport::Tcp, &["Alice", "Bob", "Carol"]).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_players_over_wss() {
    online_players(Transport::Wss, &["Dave", "Erin", "Frank"]).await;
}

/// A proxy in online mode in front of a backend that must never be contacted.
async fn failing_proxy(session_server: &str, extra: &str) -> (Proxy, RawBackend, SocketAddr) {
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let toml =
        tcp_config(backend.addr, &format!("forwarding = \"bungeecord\"\n{}", online_auth_toml(session_server, extra)));
    let proxy = Proxy::start(&toml).await;
    let addr = proxy.addr(Transport::Tcp);
    (proxy, backend, addr)
}

const SECRET: [u8; 16] = *b"moonbridge-test!";

/// Logs in with a correct Encryption Response but without joining the session server first.
async fn correct_response(addr: SocketAddr) -> testbed::online::OnlineStart {
    let mut login = start_online_login(addr, "Mallory").await;
    assert_eq!(login.request.server_id, "");
    assert_eq!(login.request.verify_token.len(), 4);
    let token = login.request.verify_token.clone();
    login.respond(&SECRET, &token).await;
    login
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_server_down() {
    // Port 1 (tcpmux): nothing listens there, so the connect is refused.
    let (proxy, backend, addr) = failing_proxy("http://127.0.0.1:1", "").await;
    let mut login = correct_response(addr).await;
    let reason = login.disconnect_reason(Some(&SECRET), STEP).await;
    assert_eq!(reason.as_deref(), Some("Authentication servers are down. Please try again later, sorry!"));
    assert_eq!(backend.accepted(), 0);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_server_timeout() {
    // Accepts connections and never answers.
    let silent = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let url = format!("http://{}", silent.local_addr().unwrap());
    let hold = tokio::spawn(async move {
        let mut held = Vec::new();
        while let Ok((s, _)) = silent.accept().await {
            held.push(s);
        }
    });
    let (proxy, backend, addr) = failing_proxy(&url, "session_timeout_seconds = 1\n").await;
    let mut login = correct_response(addr).await;
    let started = Instant::now();
    let reason = login.disconnect_reason(Some(&SECRET), STEP).await;
    assert_eq!(reason.as_deref(), Some("Authentication servers are down. Please try again later, sorry!"));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_secs(10), "{waited:?}");
    assert_eq!(backend.accepted(), 0);
    hold.abort();
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn player_not_verified() {
    let (mut sessions, url) = session_server(json!({ "profiles": profiles(&["Alice"]) })).await;
    let (proxy, backend, addr) = failing_proxy(&url, "").await;
    let mut login = correct_response(addr).await;
    let reason = login.disconnect_reason(Some(&SECRET), STEP).await;
    assert_eq!(reason.as_deref(), Some("Failed to verify username!"));
    let asked = sessions.event("hasJoined", STEP).await;
    assert_eq!((asked["username"].as_str(), asked["ok"].as_bool()), (Some("Mallory"), Some(false)));
    // The proxy asked with the real server hash of this login.
    let expected = moonbridge_protocol::crypto::server_hash("", &SECRET, &login.request.public_key);
    assert_eq!(asked["serverId"], expected);
    assert_eq!(backend.accepted(), 0);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_server_names_someone_else() {
    let (_sessions, url) =
        session_server(json!({ "answerAs": { "id": "0123456789abcdef0123456789abcdef", "name": "Alice" } })).await;
    let (proxy, backend, addr) = failing_proxy(&url, "").await;
    let mut login = correct_response(addr).await;
    let reason = login.disconnect_reason(Some(&SECRET), STEP).await;
    assert_eq!(reason.as_deref(), Some("Failed to verify username!"));
    assert_eq!(backend.accepted(), 0);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bad_verify_token() {
    let (_sessions, url) = session_server(json!({})).await;
    let (proxy, backend, addr) = failing_proxy(&url, "").await;
    let mut login = start_online_login(addr, "Mallory").await;
    let mut token = login.request.verify_token.clone();
    token[0] ^= 0xff;
    login.respond(&SECRET, &token).await;
    // The secret is not even decrypted (one RSA operation per bad response), so the answer is plaintext.
    let reason = login.disconnect_reason(None, STEP).await;
    assert_eq!(reason.as_deref(), Some("Invalid verify token"));
    assert_eq!(backend.accepted(), 0);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn wrong_secret_length() {
    let (_sessions, url) = session_server(json!({})).await;
    let (proxy, backend, addr) = failing_proxy(&url, "").await;
    for len in [15usize, 32] {
        let mut login = start_online_login(addr, "Mallory").await;
        let token = login.request.verify_token.clone();
        login.respond(&vec![7u8; len], &token).await;
        // No usable key, so the answer is plaintext.
        let reason = login.disconnect_reason(None, STEP).await;
        assert_eq!(reason.as_deref(), Some("Invalid shared secret"), "secret of {len} bytes");
    }
    // A secret that does not decrypt with the proxy's key at all (128 random-looking bytes).
    let mut login = start_online_login(addr, "Mallory").await;
    let token = rsa_encrypt(&login.request.public_key, &login.request.verify_token.clone());
    let garbage = EncryptionResponse { shared_secret: vec![0x5a; 128], verify_token: token };
    login.stream.write_all(&garbage.to_frame_bytes().unwrap()).await.unwrap();
    assert_eq!(login.disconnect_reason(None, STEP).await.as_deref(), Some("Invalid shared secret"));
    assert_eq!(backend.accepted(), 0);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_an_encryption_response() {
    let (_sessions, url) = session_server(json!({})).await;
    let (proxy, backend, addr) = failing_proxy(&url, "").await;
    let mut login = start_online_login(addr, "Mallory").await;
    // A second Login Start where the Encryption Response belongs.
    tokio::io::AsyncWriteExt::write_all(&mut login.stream, &[0x07, 0x00, 0x05, b'S', b't', b'e', b'v', b'e'])
        .await
        .unwrap();
    let reason = login.disconnect_reason(None, STEP).await;
    assert_eq!(reason.as_deref(), Some("Invalid Encryption Response"));
    assert_eq!(backend.accepted(), 0);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn client_stalls_in_the_encryption_handshake() {
    let (_sessions, url) = session_server(json!({})).await;
    let (proxy, backend, addr) = failing_proxy(&url, "[limits]\nlogin_timeout_seconds = 1\n").await;
    let mut login = start_online_login(addr, "Mallory").await;
    let started = Instant::now();
    // Send nothing: the login deadline ends it with a plaintext Login Disconnect.
    let reason = login.disconnect_reason(None, STEP).await;
    assert_eq!(reason.as_deref(), Some("Took too long to log in"));
    let waited = started.elapsed();
    assert!(waited >= Duration::from_millis(900) && waited < Duration::from_secs(10), "{waited:?}");
    assert_eq!(backend.accepted(), 0);
    proxy.shutdown().await;
}

/// A stand-in that vouches for `Mallory` (the raw client does not call `join`).
async fn vouching_session_server() -> (NodePeer, String) {
    session_server(json!({ "answerAs": { "id": "0123456789abcdef0123456789abcdef", "name": "Mallory" } })).await
}

/// A Chat Message frame (Play, serverbound 0x01, `String message`) the raw client pipelines right behind its
/// Encryption Response.
fn pipelined_chat() -> Vec<u8> {
    [&[11u8, 0x01, 9][..], b"pipelined"].concat()
}

/// Encryption Response plus `extra` encrypted with `SECRET`, as one write; returns the client's ciphers.
fn response_and(request: &EncryptionRequest, extra: &[u8]) -> (Vec<u8>, Cfb8Decryptor) {
    let response = EncryptionResponse {
        shared_secret: rsa_encrypt(&request.public_key, &SECRET),
        verify_token: rsa_encrypt(&request.public_key, &request.verify_token),
    };
    let mut out = response.to_frame_bytes().unwrap().to_vec();
    let mut sealed = extra.to_vec();
    Cfb8Encryptor::new(&SECRET).apply(&mut sealed);
    out.extend_from_slice(&sealed);
    (out, Cfb8Decryptor::new(&SECRET))
}

/// Checks what the player read after a shutdown: the (decrypted) Login Success, then a Play Disconnect.
fn assert_success_then_disconnect(plain: &[u8]) {
    let f = frames(plain);
    assert_eq!(f.len(), 2, "{plain:02x?}");
    assert_eq!(f[0].0, 0x02, "Login Success first");
    assert_eq!(f[1].0, PlayDisconnect::ID);
    let reason = PlayDisconnect::decode_body(&mut moonbridge_protocol::codec::Reader::new(&f[1].1)).unwrap();
    assert!(reason.reason_json.contains("restarting"), "{}", reason.reason_json);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_stream_over_tcp_pipelining_and_shutdown() {
    let (_sessions, url) = vouching_session_server().await;
    let backend = RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply: login_success("Mallory") }).await;
    let proxy = Proxy::start(&tcp_config(backend.addr, &online_auth_toml(&url, ""))).await;
    let mut login = start_online_login(proxy.addr(Transport::Tcp), "Mallory").await;
    let chat = pipelined_chat();
    let (bytes, mut dec) = response_and(&login.request, &chat);
    login.stream.write_all(&bytes).await.unwrap();

    // The backend gets plain handshake, Login Start and the pipelined chat, decrypted, in order.
    let hello = [login_handshake("mc.example.com"), login_start("Mallory")].concat();
    let rx = backend.wait_received(0, hello.len() + chat.len(), STEP).await;
    assert_eq!(rx, [hello, chat].concat());
    // The player gets the backend's Login Success encrypted.
    let expected = login_success("Mallory");
    let mut got = vec![0u8; expected.len()];
    tokio::time::timeout(STEP, login.stream.read_exact(&mut got)).await.unwrap().unwrap();
    dec.apply(&mut got);
    assert_eq!(got, expected);

    // Shutdown: the inserted Play Disconnect continues the same cipher stream.
    let stop = tokio::spawn(proxy.shutdown());
    let (mut rest, closed) = read_to_close(&mut login.stream, STEP).await;
    assert!(closed);
    dec.apply(&mut rest);
    assert_success_then_disconnect(&[got, rest].concat());
    tokio::time::timeout(STEP, stop).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn encrypted_stream_over_ws_pipelining_and_shutdown() {
    let (_sessions, url) = vouching_session_server().await;
    let backend = RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply: login_success("Mallory") }).await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\n[[backend]]\nname = \"survival\"\naddress = \"{}\"\n{}",
        backend.addr,
        online_auth_toml(&url, "")
    ))
    .await;
    let addr = proxy.addr(Transport::Ws);
    let (mut ws, _) = ws_connect(addr, &format!("ws://{addr}/mc"), &[], None).await.unwrap();
    use futures_util::{SinkExt, StreamExt};
    let hello = [login_handshake("mc.example.com"), login_start("Mallory")].concat();
    ws.send(Message::Binary(hello.clone().into())).await.unwrap();
    let mut received = Vec::new();
    let request = tokio::time::timeout(STEP, async {
        loop {
            if let Some((id, body)) = frames(&received).into_iter().next() {
                assert_eq!(id, 0x01);
                return EncryptionRequest::decode_body(&mut moonbridge_protocol::codec::Reader::new(&body)).unwrap();
            }
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => received.extend_from_slice(&b),
                other => panic!("expected Encryption Request, got {other:?}"),
            }
        }
    })
    .await
    .unwrap();
    let chat = pipelined_chat();
    let (bytes, mut dec) = response_and(&request, &chat);
    ws.send(Message::Binary(bytes.into())).await.unwrap();
    let rx = backend.wait_received(0, hello.len() + chat.len(), STEP).await;
    assert_eq!(rx, [hello, chat].concat());

    // Read until Login Success has arrived, then shut down and read to the close.
    let expected = login_success("Mallory");
    let mut plain = Vec::new();
    tokio::time::timeout(STEP, async {
        while plain.len() < expected.len() {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => {
                    let mut b = b.to_vec();
                    dec.apply(&mut b);
                    plain.extend_from_slice(&b);
                }
                other => panic!("expected Login Success, got {other:?}"),
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(plain[..expected.len()], expected[..]);
    let stop = tokio::spawn(proxy.shutdown());
    let close = tokio::time::timeout(STEP, async {
        loop {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => {
                    let mut b = b.to_vec();
                    dec.apply(&mut b);
                    plain.extend_from_slice(&b);
                }
                Some(Ok(Message::Close(c))) => return c.map(|c| u16::from(c.code)),
                Some(Ok(_)) => {}
                Some(Err(_)) | None => return None,
            }
        }
    })
    .await
    .unwrap();
    assert_eq!(close, Some(1001));
    assert_success_then_disconnect(&plain);
    tokio::time::timeout(STEP, stop).await.unwrap().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn failures_after_authentication_are_encrypted() {
    let (_sessions, url) = vouching_session_server().await;
    // A backend in online mode answers with its own Encryption Request.
    let request = EncryptionRequest { server_id: String::new(), public_key: vec![0x30; 162], verify_token: vec![1; 4] };
    let online_backend =
        RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply: request.to_frame_bytes().unwrap().to_vec() })
            .await;
    let proxy = Proxy::start(&tcp_config(online_backend.addr, &online_auth_toml(&url, ""))).await;
    let mut login = start_online_login(proxy.addr(Transport::Tcp), "Mallory").await;
    let (bytes, _) = response_and(&login.request, &[]);
    login.stream.write_all(&bytes).await.unwrap();
    assert_eq!(
        login.disconnect_reason(Some(&SECRET), STEP).await.as_deref(),
        Some("Server survival is misconfigured (online mode behind an online-mode proxy)")
    );
    proxy.shutdown().await;

    // An unreachable backend (port 1: connection refused).
    let proxy = Proxy::start(&tcp_config("127.0.0.1:1".parse().unwrap(), &online_auth_toml(&url, ""))).await;
    let mut login = start_online_login(proxy.addr(Transport::Tcp), "Mallory").await;
    let (bytes, _) = response_and(&login.request, &[]);
    login.stream.write_all(&bytes).await.unwrap();
    assert_eq!(login.disconnect_reason(Some(&SECRET), STEP).await.as_deref(), Some("Server survival is unreachable"));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c27_not_joined_answers() {
    // 204 with a JSON Content-Type and no body, and 200 with Content-Length 0: "not verified". 200 `{}` (no
    // readable profile): the session server is broken, so "servers are down". Never a backend connection.
    for (mode, expected) in [
        ("noContentJson", "Failed to verify username!"),
        ("emptyOk", "Failed to verify username!"),
        ("emptyObject", "Authentication servers are down. Please try again later, sorry!"),
    ] {
        let (mut sessions, url) = session_server(json!({ "hasJoined": mode })).await;
        let (proxy, backend, addr) = failing_proxy(&url, "").await;
        let mut login = correct_response(addr).await;
        let reason = login.disconnect_reason(Some(&SECRET), STEP).await;
        assert_eq!(reason.as_deref(), Some(expected), "{mode}");
        assert_eq!(sessions.event("hasJoined", STEP).await["username"], "Mallory");
        assert_eq!(backend.accepted(), 0, "{mode}");
        proxy.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c28_malformed_encryption_responses() {
    let (mut sessions, url) = session_server(json!({})).await;
    let (proxy, backend, addr) = failing_proxy(&url, "").await;
    // Both arrays empty; a secret length of 128 with 4 bytes present; a length of -1 (protocol 5 arrays carry
    // 2-byte big-endian lengths).
    let empty = vec![0x05, 0x01, 0x00, 0x00, 0x00, 0x00];
    let short = vec![0x07, 0x01, 0x00, 0x80, 0x00, 0x00, 0x00, 0x00];
    let negative = vec![0x05, 0x01, 0xff, 0xff, 0x00, 0x00];
    for (what, frame) in [("empty arrays", empty.clone()), ("a short secret", short), ("length -1", negative)] {
        let mut login = start_online_login(addr, "Mallory").await;
        login.stream.write_all(&frame).await.unwrap();
        let reason = login.disconnect_reason(None, STEP).await.unwrap_or_else(|| panic!("{what}: a Login Disconnect"));
        assert!(reason.starts_with("Invalid"), "{what}: {reason}");
    }
    // A well-formed response whose token is someone else's: a block for another login's token.
    let other = start_online_login(addr, "Other").await;
    let mut login = start_online_login(addr, "Mallory").await;
    let foreign_token = rsa_encrypt(&login.request.public_key, &other.request.verify_token);
    let secret = rsa_encrypt(&login.request.public_key, &SECRET);
    let response = EncryptionResponse { shared_secret: secret, verify_token: foreign_token };
    login.stream.write_all(&response.to_frame_bytes().unwrap()).await.unwrap();
    assert_eq!(login.disconnect_reason(None, STEP).await.as_deref(), Some("Invalid verify token"));
    // An Encryption Response right after the handshake, before Login Start.
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    s.write_all(&[login_handshake("mc.example.com"), empty].concat()).await.unwrap();
    let (got, closed) = read_to_close(&mut s, STEP).await;
    assert!(closed);
    let reason = testbed::login_disconnect_reason(&got).expect("a Login Disconnect");
    assert_eq!(reason, "Expected Login Start");
    drop(other);
    // Every session has ended, so a request it made would already be on its way.
    proxy.wait_connections(0, STEP).await;
    assert_eq!(backend.accepted(), 0);
    assert!(
        tokio::time::timeout(Duration::from_millis(300), sessions.event("hasJoinedReceived", STEP)).await.is_err(),
        "no hasJoined request"
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c29_a_hanging_session_server_fails_every_login_in_time_and_leaks_no_slot() {
    testbed::raise_fd_limit();
    for mode in ["hang", "drip"] {
        let (mut sessions, url) = session_server(json!({ "hasJoined": mode })).await;
        let (proxy, backend, addr) = failing_proxy(&url, "session_timeout_seconds = 3\n").await;
        // 70 players at once: more than the 64 check slots, so some wait for one; that wait counts.
        let started = Instant::now();
        let logins: Vec<_> = (0..70).map(|_| tokio::spawn(async move { correct_response(addr).await })).collect();
        let mut waits = Vec::new();
        for l in logins {
            let mut login = l.await.unwrap();
            let reason = login.disconnect_reason(Some(&SECRET), STEP).await;
            assert_eq!(reason.as_deref(), Some("Authentication servers are down. Please try again later, sorry!"));
            waits.push(started.elapsed());
        }
        let slowest = waits.iter().max().unwrap();
        // session_timeout_seconds plus 1 s of slack (and half a second for 70 encryption handshakes here).
        assert!(*slowest < Duration::from_millis(4500), "{mode}: slowest answer after {slowest:?}");
        assert_eq!(backend.accepted(), 0);
        // Once the stand-in answers properly, a new login gets its verdict (no check slot leaked).
        let client = control(&url, json!({ "hasJoined": null }).to_string()).await;
        assert!(client.starts_with("HTTP/1.1 204"), "{client}");
        let mut login = correct_response(addr).await;
        let reason = login.disconnect_reason(Some(&SECRET), STEP).await;
        assert_eq!(reason.as_deref(), Some("Failed to verify username!"), "{mode}");
        let _ = sessions.event("control", STEP).await;
        proxy.shutdown().await;
    }
}

/// POSTs `body` to the stand-in's `/control` over a raw socket and returns the response.
async fn control(url: &str, body: String) -> String {
    let addr = url.trim_start_matches("http://").to_string();
    let mut s = tokio::net::TcpStream::connect(&addr).await.unwrap();
    let req = format!(
        "POST /control HTTP/1.1\r\nHost: {addr}\r\nContent-Type: application/json\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    s.write_all(req.as_bytes()).await.unwrap();
    let (got, _) = read_to_close(&mut s, STEP).await;
    String::from_utf8_lossy(&got).into_owned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c30_the_session_server_hears_the_hash_and_never_a_proxy_address() {
    let (mut sessions, url) = session_server(json!({})).await;
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let cert = TestCert::generate("c30", KeyType::Ec).unwrap();
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\
         trusted_proxies = [\"127.0.0.1\"]\nreal_ip_header = \"CF-Connecting-IP\"\n\n\
         [[backend]]\nname = \"survival\"\naddress = \"{}\"\nforwarding = \"bungeecord\"\n{}",
        cert.cert.display(),
        cert.key.display(),
        backend.addr,
        online_auth_toml(&url, "")
    ))
    .await;
    let addr = proxy.addr(Transport::Wss);
    let url_ws = format!("wss://localhost:{}/mc", addr.port());
    let (mut ws, _) = ws_connect(addr, &url_ws, &[("CF-Connecting-IP", "203.0.113.50")], Some(&cert.ca)).await.unwrap();
    use futures_util::{SinkExt, StreamExt};
    ws.send(Message::Binary([login_handshake("mc.example.com"), login_start("Mallory")].concat().into()))
        .await
        .unwrap();
    let request: EncryptionRequest = loop {
        match tokio::time::timeout(STEP, ws.next()).await.unwrap() {
            Some(Ok(Message::Binary(b))) => {
                let mut d = moonbridge_protocol::FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
                d.queue_slice(&b);
                break d.try_next_frame().unwrap().unwrap().decode().unwrap();
            }
            Some(Ok(_)) => {}
            other => panic!("{other:?}"),
        }
    };
    let response = EncryptionResponse {
        shared_secret: rsa_encrypt(&request.public_key, &SECRET),
        verify_token: rsa_encrypt(&request.public_key, &request.verify_token),
    };
    ws.send(Message::Binary(response.to_frame_bytes().unwrap().to_vec().into())).await.unwrap();
    let asked = sessions.event("hasJoined", STEP).await;
    let hash = moonbridge_protocol::crypto::server_hash("", &SECRET, &request.public_key);
    let query = asked["query"].as_str().unwrap().to_string();
    let params: Vec<&str> = query.split('&').collect();
    assert_eq!(params[0], "username=Mallory");
    assert_eq!(params[1], format!("serverId={hash}"));
    for p in &params[2..] {
        assert_eq!(*p, "ip=203.0.113.50", "an ip parameter, if any, is the player's: {query}");
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c31_an_online_name_with_url_characters_never_reaches_the_session_server() {
    let (mut sessions, url) = session_server(json!({})).await;
    let (proxy, backend, addr) = failing_proxy(&url, "").await;
    let mut s = tokio::net::TcpStream::connect(addr).await.unwrap();
    let login = [&[0x0e, 0x00, 0x0c][..], b"a&serverId=x"].concat();
    s.write_all(&[login_handshake("mc.example.com"), login].concat()).await.unwrap();
    let (got, closed) = read_to_close(&mut s, STEP).await;
    assert!(closed);
    let reason = testbed::login_disconnect_reason(&got).expect("a plaintext Login Disconnect");
    assert!(reason.contains("Invalid player name"), "{reason}");
    proxy.wait_connections(0, STEP).await;
    assert!(
        tokio::time::timeout(Duration::from_millis(300), sessions.event("hasJoinedReceived", STEP)).await.is_err(),
        "the session server never hears of it"
    );
    assert_eq!(backend.accepted(), 0);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c35_a_player_leaving_while_the_session_server_thinks_opens_no_backend() {
    // The stand-in takes 2 s to answer (and would vouch); the player leaves as soon as the request is there.
    let (mut sessions, url) = vouching_session_server().await;
    let (proxy, backend, addr) = failing_proxy(&url, "").await;
    let _ = control(&url, json!({ "delayMs": 2000 }).to_string()).await;
    let _ = sessions.event("control", STEP).await;
    let login = correct_response(addr).await;
    let _ = sessions.event("hasJoinedReceived", STEP).await;
    let left = std::time::Instant::now();
    drop(login);
    // The session (and with it the abandoned check) is gone, so nothing can open a backend connection later.
    proxy.wait_connections(0, STEP).await;
    assert!(left.elapsed() < Duration::from_secs(1), "the session ended {:?} after the player left", left.elapsed());
    assert_eq!(backend.accepted(), 0);
    proxy.shutdown().await;
}
