//! Online-mode helpers: the test profiles and the session server STAND-IN (`peers/session-server.js`: the real
//! sessionserver.mojang.com cannot be reached from the test machines), and a raw online-mode client for the
//! failure tests: the protocol 5 encryption handshake done by hand, so a test can send a wrong verify token, a
//! secret of the wrong length, or nothing at all.

use std::net::SocketAddr;
use std::time::Duration;

use moonbridge_protocol::crypto::Cfb8Decryptor;
use moonbridge_protocol::packets::{EncryptionRequest, EncryptionResponse, Packet};
use moonbridge_protocol::FrameDecoder;
use rsa::pkcs8::DecodePublicKey;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

use serde_json::{json, Value};

use crate::{login_disconnect_reason, read_to_close, NodePeer, STEP};

/// A connection that has sent handshake and Login Start and received the proxy's Encryption Request.
pub struct OnlineStart {
    pub stream: TcpStream,
    pub request: EncryptionRequest,
}

/// Connects to a `tcp` listener, logs in as `name` and reads the Encryption Request.
pub async fn start_online_login(addr: SocketAddr, name: &str) -> OnlineStart {
    let mut stream = TcpStream::connect(addr).await.unwrap();
    let hello = [crate::login_handshake("mc.example.com"), crate::login_start(name)].concat();
    stream.write_all(&hello).await.unwrap();
    let mut dec = FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
    let request = timeout(STEP, async {
        let mut buf = [0u8; 4096];
        loop {
            if let Some(f) = dec.try_next_frame().unwrap() {
                return f.decode::<EncryptionRequest>().unwrap();
            }
            let n = stream.read(&mut buf).await.unwrap();
            assert!(n > 0, "proxy closed before Encryption Request");
            dec.queue_slice(&buf[..n]);
        }
    })
    .await
    .expect("Encryption Request in time");
    OnlineStart { stream, request }
}

/// RSA PKCS#1 v1.5 encryption with the public key of an Encryption Request (what a client does).
pub fn rsa_encrypt(public_key_der: &[u8], data: &[u8]) -> Vec<u8> {
    let key = rsa::RsaPublicKey::from_public_key_der(public_key_der).unwrap();
    key.encrypt(&mut rand_core::OsRng, rsa::Pkcs1v15Encrypt, data).unwrap()
}

impl OnlineStart {
    /// Sends an Encryption Response carrying `secret` and `token`, each RSA-encrypted.
    pub async fn respond(&mut self, secret: &[u8], token: &[u8]) {
        let key = &self.request.public_key;
        let response =
            EncryptionResponse { shared_secret: rsa_encrypt(key, secret), verify_token: rsa_encrypt(key, token) };
        self.stream.write_all(&response.to_frame_bytes().unwrap()).await.unwrap();
    }

    /// Reads until the proxy closes and returns the Login Disconnect reason, decrypting with `secret` when the
    /// stream is expected to be encrypted.
    pub async fn disconnect_reason(&mut self, secret: Option<&[u8; 16]>, within: Duration) -> Option<String> {
        let (mut bytes, closed) = read_to_close(&mut self.stream, within).await;
        assert!(closed, "proxy did not close the connection within {within:?}");
        if let Some(s) = secret {
            Cfb8Decryptor::new(s).apply(&mut bytes);
        }
        login_disconnect_reason(&bytes)
    }
}

/// Test profiles: name, UUID (32 hex digits), access token and a textures property (with a stand-in
/// signature: only Mojang's key can make real ones).
pub fn profiles(names: &[&str]) -> Vec<Value> {
    names
        .iter()
        .enumerate()
        .map(|(i, name)| {
            json!({
                "name": name,
                "id": format!("{:08x}1234412389ab{:012x}", 0x5eed_0000 + i, i + 1),
                "accessToken": format!("access-token-{name}"),
                "properties": [{
                    "name": "textures",
                    "value": format!("dGV4dHVyZXMgb2Yg{name}"),
                    "signature": format!("c3RhbmQtaW4tc2lnbmF0dXJl{name}")
                }]
            })
        })
        .collect()
}

/// Starts the session server stand-in with `opts` and returns it with its URL.
pub async fn session_server(opts: Value) -> (NodePeer, String) {
    let mut peer = NodePeer::spawn("session-server.js", &opts).await;
    let port = peer.event("listening", STEP).await["port"].as_u64().unwrap();
    (peer, format!("http://127.0.0.1:{port}"))
}
