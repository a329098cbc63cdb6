//! The client library's cross-test scenarios: a real 1.7.10 session driven through [`moonbridge_client`]
//! against a live `moonbridge` proxy in front of the node-minecraft-protocol backend (`tests/peers/backend.js`),
//! over `tcp://`, `ws://` and `wss://`, plus the library's connect errors.
//!
//! The scenarios depend only on the client library, so the same code runs in-process in the Linux test suite
//! (`tests/tests/client_cross.rs`) and as a Windows executable (`client-cross.exe`) under Wine against the Linux
//! proxy (`tests/tests/client_windows.rs`). Each scenario panics with a message on the first wrong value.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

pub mod flood;

use std::path::PathBuf;
use std::time::{Duration, Instant};

use moonbridge_client::{ClientError, Connection, Options};
use moonbridge_protocol::codec::{put_string, Reader};
use moonbridge_protocol::packets::{
    ChatMessage, Handshake, KeepAlive, LoginStart, LoginSuccess, NextState, Packet, PluginMessage,
};
use moonbridge_protocol::{Frame, FrameDecoder, MAX_FRAME_LEN};

/// The plugin channel of the backend's login burst (`peers/common.js`).
pub const BURST_CHANNEL: &str = "MB|Burst";

/// Byte `i` of burst message `n`, as `peers/common.js` builds it.
pub fn burst_payload(n: usize, size: usize) -> Vec<u8> {
    (0..size).map(|i| ((n * 131 + i * 7 + (i >> 8)) & 0xff) as u8).collect()
}

/// A protocol 5 handshake frame for `host` (port 25565) with next state Login.
pub fn login_handshake(host: &str) -> Vec<u8> {
    Handshake { protocol_version: 5, server_address: host.into(), server_port: 25565, next_state: NextState::Login }
        .to_frame_bytes()
        .unwrap()
        .to_vec()
}

/// A Login Start frame for `name`.
pub fn login_start(name: &str) -> Vec<u8> {
    LoginStart { name: name.into() }.to_frame_bytes().unwrap().to_vec()
}

/// What a session saw.
#[derive(Debug, Default)]
pub struct SessionReport {
    pub joined: bool,
    pub burst_messages: usize,
    pub chat_echo: Option<String>,
    /// `recv` calls that returned data.
    pub recv_calls: usize,
    /// Time from the first burst byte to the last.
    pub burst_time: Duration,
}

/// Reads frames from a client connection.
pub struct FrameReader<'a> {
    conn: &'a Connection,
    dec: FrameDecoder,
    buf: Vec<u8>,
    pub recv_calls: usize,
}

impl<'a> FrameReader<'a> {
    pub fn new(conn: &'a Connection) -> Self {
        Self { conn, dec: FrameDecoder::new(MAX_FRAME_LEN), buf: vec![0; 1 << 20], recv_calls: 0 }
    }

    /// The next frame, or a panic after `within`.
    pub fn next(&mut self, within: Duration) -> Frame {
        let deadline = Instant::now() + within;
        loop {
            if let Some(f) = self.dec.try_next_frame().expect("valid frames") {
                return f;
            }
            let left = deadline.saturating_duration_since(Instant::now());
            assert!(!left.is_zero(), "no frame within {within:?}");
            match self.conn.recv(&mut self.buf, Some(left)) {
                Ok(0) => {}
                Ok(n) => {
                    self.recv_calls += 1;
                    self.dec.queue_slice(&self.buf[..n]);
                }
                Err(e) => panic!("connection ended: {e}"),
            }
        }
    }
}

fn frame(id: i32, fields: &[u8]) -> Vec<u8> {
    let mut out = Vec::new();
    moonbridge_protocol::frame::encode_frame(&mut out, id, fields).unwrap();
    out
}

/// The `text` of a clientbound Chat Message frame (S02: one JSON chat component); panics on another packet.
pub fn chat_message_text(f: &Frame) -> Option<String> {
    let chat: ChatMessage = f.decode().unwrap();
    let v: serde_json::Value = serde_json::from_str(&chat.json).unwrap();
    v["text"].as_str().map(str::to_owned)
}

/// A serverbound Chat Message frame (C01: one string of at most 100 characters).
pub fn chat_frame(message: &str) -> Vec<u8> {
    let mut fields = Vec::new();
    put_string(&mut fields, message, 100, "message").unwrap();
    frame(0x01, &fields)
}

/// Handshake + Login Start for `name`, Forge marker optional, as one tick.
pub fn send_login(conn: &Connection, name: &str, forge: bool) {
    let host = if forge { "mc.example.com\0FML\0" } else { "mc.example.com" };
    conn.send(&login_handshake(host)).unwrap();
    conn.send(&login_start(name)).unwrap();
    conn.end_tick().unwrap();
}

/// A whole session against the node backend: login, Join Game, `burst_count` plugin messages of
/// `burst_size` bytes checked byte for byte, then a chat message and its echo. Keep Alives are answered.
pub fn play(conn: &Connection, name: &str, forge: bool, burst_count: usize, burst_size: usize) -> SessionReport {
    let step = Duration::from_secs(30);
    let mut report = SessionReport::default();
    let mut r = FrameReader::new(conn);
    send_login(conn, name, forge);
    let f = r.next(step);
    let success: LoginSuccess = f.decode().expect("Login Success");
    assert_eq!(success.name, name);
    let mut burst_started = None;
    loop {
        let f = r.next(step);
        match f.id {
            0x00 => {
                let ka: KeepAlive = f.decode().unwrap();
                conn.send(&ka.to_frame_bytes().unwrap()).unwrap();
                conn.end_tick().unwrap();
            }
            0x01 => report.joined = true,
            0x02 if report.burst_messages == burst_count => {
                report.chat_echo = chat_message_text(&f);
                break;
            }
            0x3f => {
                let p = PluginMessage::decode_fields(&mut Reader::new(&f.body)).unwrap();
                if p.channel != BURST_CHANNEL {
                    continue;
                }
                burst_started.get_or_insert_with(Instant::now);
                assert_eq!(
                    p.data,
                    burst_payload(report.burst_messages, burst_size),
                    "burst message {}",
                    report.burst_messages
                );
                report.burst_messages += 1;
                if report.burst_messages == burst_count {
                    report.burst_time = burst_started.map(|t| t.elapsed()).unwrap_or_default();
                    conn.send(&chat_frame(&format!("hello from {name}"))).unwrap();
                    conn.end_tick().unwrap();
                }
            }
            _ => {}
        }
    }
    report.recv_calls = r.recv_calls;
    report
}

/// Where the scenarios connect: a proxy with a tcp, a ws and a wss listener in front of the node backend.
#[derive(Clone, Debug)]
pub struct Endpoints {
    /// `tcp://127.0.0.1:<port>`.
    pub tcp: String,
    /// `ws://127.0.0.1:<port>/mc`.
    pub ws: String,
    /// `wss://localhost:<port>/mc`, with a certificate for `localhost` signed by `ca`.
    pub wss: String,
    /// The PEM file of the test CA.
    pub ca: PathBuf,
    /// A loopback port nothing listens on.
    pub dead_port: u16,
}

impl Endpoints {
    /// Reads `--tcp URL --ws URL --wss URL --ca FILE --dead-port N` (the `client-cross` command line).
    ///
    /// # Errors
    /// A message naming the missing or bad argument.
    pub fn from_args(args: impl IntoIterator<Item = String>) -> Result<Self, String> {
        let mut map = std::collections::HashMap::new();
        let mut it = args.into_iter();
        while let Some(k) = it.next() {
            let v = it.next().ok_or_else(|| format!("{k} needs a value"))?;
            map.insert(k, v);
        }
        let mut take = |k: &str| map.remove(k).ok_or_else(|| format!("missing {k}"));
        Ok(Self {
            tcp: take("--tcp")?,
            ws: take("--ws")?,
            wss: take("--wss")?,
            ca: PathBuf::from(take("--ca")?),
            dead_port: take("--dead-port")?.parse().map_err(|e| format!("--dead-port: {e}"))?,
        })
    }

    /// The options JSON trusting the test CA, with `extra` keys added.
    pub fn options(&self, extra: serde_json::Value) -> Options {
        let mut o = serde_json::json!({ "ca_file": self.ca });
        o.as_object_mut().unwrap().extend(extra.as_object().unwrap().clone());
        Options::from_json(Some(&o.to_string())).unwrap()
    }
}

/// Every transport, coalescing on and off, and `wss` with TLS 1.3 and pinned to 1.2: eight whole sessions
/// (login, Join Game, the 2.1 MB burst byte for byte, a chat round trip). Returns one line per session.
pub fn every_transport(ep: &Endpoints) -> Vec<String> {
    let mut lines = Vec::new();
    let mut i = 0;
    for (transport, url) in [("tcp", &ep.tcp), ("ws", &ep.ws), ("wss", &ep.wss)] {
        let pins: &[Option<&str>] = if transport == "wss" { &[None, Some("1.2")] } else { &[None] };
        for pin in pins {
            for coalesce in ["tick", "off"] {
                let mut extra = serde_json::json!({ "coalesce": coalesce });
                if let Some(v) = pin {
                    extra["tls_versions"] = serde_json::json!([v]);
                }
                let name = format!("Client{i}");
                let conn = Connection::connect(url, ep.options(extra)).unwrap();
                match (transport, pin) {
                    ("wss", Some("1.2")) => assert_eq!(conn.tls_version(), Some("1.2")),
                    ("wss", _) => assert_eq!(conn.tls_version(), Some("1.3")),
                    _ => assert_eq!(conn.tls_version(), None),
                }
                let report = play(&conn, &name, i % 2 == 0, 70, 30_000);
                let stats = conn.stats();
                conn.close();
                assert!(report.joined, "{transport}/{coalesce}: Join Game");
                assert_eq!(report.burst_messages, 70);
                assert_eq!(report.chat_echo.as_deref(), Some(format!("echo:hello from {name}").as_str()));
                assert!(stats.frames_in >= 72, "{stats:?}");
                assert!(stats.bytes_in > 2_100_000, "{stats:?}");
                lines.push(format!("{transport} tls={pin:?} coalesce={coalesce}: {report:?} {stats:?}"));
                i += 1;
            }
        }
    }
    assert_eq!(i, 8);
    lines
}

/// The 2.1 MB login burst over `wss` arrives in few large reads (at most 200 `recv` calls, 400 messages).
pub fn burst_in_few_reads(ep: &Endpoints) -> String {
    let conn = Connection::connect(&ep.wss, ep.options(serde_json::json!({}))).unwrap();
    let report = play(&conn, "Burst", true, 70, 30_000);
    let stats = conn.stats();
    conn.close();
    assert_eq!(report.burst_messages, 70);
    assert!(report.recv_calls < 200, "{} recv calls for a 2.1 MB burst", report.recv_calls);
    assert!(stats.messages_in < 400, "{stats:?}");
    format!(
        "wss burst: 2.1 MB in {:?}, {} recv calls, {} messages",
        report.burst_time, report.recv_calls, stats.messages_in
    )
}

/// Connect failures each name their reason and carry their C code: refused, unknown issuer, name mismatch,
/// upgrade refused with its HTTP status.
pub fn connect_errors(ep: &Endpoints) -> String {
    use moonbridge_client::error::{MB_ERR_CONNECT, MB_ERR_HANDSHAKE, MB_ERR_TLS};
    let err = |url: &str, o: Options| Connection::connect(url, o).expect_err("connect must fail");
    let e = err(&format!("tcp://127.0.0.1:{}", ep.dead_port), Options::default());
    assert!(matches!(e, ClientError::Refused { .. }), "{e}");
    assert_eq!(e.code(), MB_ERR_CONNECT);
    let e = err(&ep.wss, Options::default());
    assert!(matches!(e, ClientError::Tls { ref reason, .. } if reason.contains("unknown issuer")), "{e}");
    assert_eq!(e.code(), MB_ERR_TLS);
    let e = err(&ep.wss, ep.options(serde_json::json!({ "server_name": "other.example.com" })));
    assert!(matches!(e, ClientError::Tls { ref reason, .. } if reason.contains("name mismatch")), "{e}");
    let wrong_path = ep.ws.trim_end_matches("/mc").to_owned() + "/wrong-path";
    let e = err(&wrong_path, Options::default());
    assert_eq!(e, ClientError::UpgradeRefused { status: 404 });
    assert_eq!(e.code(), MB_ERR_HANDSHAKE);
    "refused, unknown issuer, name mismatch and 404 reported".into()
}

/// Runs every scenario in order, printing `ok <name>: <details>` for each.
pub fn run_all(ep: &Endpoints) {
    for line in every_transport(ep) {
        println!("ok every_transport: {line}");
    }
    println!("ok burst_in_few_reads: {}", burst_in_few_reads(ep));
    println!("ok connect_errors: {}", connect_errors(ep));
}
