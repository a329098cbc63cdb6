//! Scripted Forge 1.7.10 peers at the byte level, from Forge 1.7.10's sources (`FMLHandshakeMessage`,
//! `FMLHandshakeClientState`, `FMLHandshakeServerState`): no Forge client or server can run here (they need the
//! game's jars), so these scripts stand in for them and follow their state machines message for message.
//!
//! Server ([`forge_server`]): REGISTER and ServerHello; on the client's ModList its ModList; on the client's
//! HandshakeAck(2) ModIdData and HandshakeAck(2) (WAITINGCACK); on HandshakeAck(3) HandshakeAck(3) (COMPLETE)
//! and Join Game. Client ([`ForgeClient`]): on ServerHello REGISTER, ClientHello, ModList; on ModList
//! HandshakeAck(2); on ModIdData HandshakeAck(3); on the server's HandshakeAck(2) HandshakeAck(4), on its
//! HandshakeAck(3) HandshakeAck(5); on HandshakeReset back to HELLO.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing, missing_docs)]

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use moonbridge_protocol::codec::{put_string, Reader};
use moonbridge_protocol::frame::{encode_frame, Frame, FrameDecoder, MAX_FRAME_LEN};
use moonbridge_protocol::packets::{chat_text, ChatMessage, JoinGame, LoginSuccess, Packet, PluginMessage, Respawn};
use moonbridge_protocol::transfer::BungeeRequest;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::time::timeout;

use crate::mc::chat_message_text;
use crate::{login_handshake, login_start, STEP};

/// A Minecraft connection of the scripts: whole frames in and out.
pub struct Wire {
    pub stream: TcpStream,
    pub frames: FrameDecoder,
}

impl Wire {
    pub fn new(stream: TcpStream) -> Self {
        Self { stream, frames: FrameDecoder::new(MAX_FRAME_LEN) }
    }

    /// The next frame, `None` at EOF.
    pub async fn next(&mut self) -> Option<Frame> {
        let mut buf = vec![0; 65536];
        loop {
            if let Some(f) = self.frames.try_next_frame().unwrap() {
                return Some(f);
            }
            let n = self.stream.read(&mut buf).await.unwrap_or(0);
            if n == 0 {
                return None;
            }
            self.frames.queue_slice(&buf[..n]);
        }
    }

    pub async fn send(&mut self, id: i32, body: &[u8]) {
        let mut out = Vec::new();
        encode_frame(&mut out, id, body).unwrap();
        self.stream.write_all(&out).await.unwrap();
    }

    pub async fn plugin(&mut self, id: i32, channel: &str, data: &[u8]) {
        let mut body = Vec::new();
        PluginMessage { channel: channel.into(), data: data.to_vec() }.encode_fields(&mut body).unwrap();
        self.send(id, &body).await;
    }
}

pub fn plugin_of(f: &Frame) -> PluginMessage {
    PluginMessage::decode_fields(&mut Reader::new(&f.body)).unwrap()
}

/// `FML|HS` ModList (discriminator 2): VarInt count, then (mod id, version) strings.
pub fn mod_list() -> Vec<u8> {
    let mut d = vec![2, 1];
    put_string(&mut d, "Forge", 64, "id").unwrap();
    put_string(&mut d, "10.13.4.1614", 64, "version").unwrap();
    d
}

/// `FML|HS` ModIdData (discriminator 3): VarInt count, (name, VarInt id) entries, then the block and item
/// substitution lists (VarInt counts, here empty). One entry naming the server, so the client's registry
/// shows whose handshake it ran.
pub fn mod_id_data(label: &str) -> Vec<u8> {
    let mut d = vec![3, 1];
    put_string(&mut d, &format!("\u{1}minecraft:stone_{label}"), 64, "name").unwrap();
    d.extend_from_slice(&[1, 0, 0]);
    d
}

/// What a scripted Forge server heard, in order: `FML|HS` messages from the client, chats, and its close.
pub type Log = Arc<Mutex<Vec<String>>>;

/// A scripted Forge 1.7.10 server. `stall`: it sends REGISTER and ServerHello, then never answers.
pub async fn forge_server(label: &'static str, entity_id: i32, stall: bool) -> (SocketAddr, Log) {
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let addr = listener.local_addr().unwrap();
    let log: Log = Arc::default();
    let l = Arc::clone(&log);
    tokio::spawn(async move {
        while let Ok((s, _)) = listener.accept().await {
            let log = Arc::clone(&l);
            tokio::spawn(async move {
                let mut w = Wire::new(s);
                let _handshake = w.next().await;
                let Some(login) = w.next().await else { return };
                let name = Reader::new(&login.body).string(16, "name").unwrap().to_string();
                let success = LoginSuccess { uuid: "00000000-0000-3000-8000-000000000000".into(), name };
                w.stream.write_all(&success.to_frame_bytes().unwrap()).await.unwrap();
                w.plugin(0x3f, "REGISTER", b"FML|HS\0FML\0FML|MP\0FORGE").await;
                // ServerHello: FML protocol version 2, dimension override 0.
                w.plugin(0x3f, "FML|HS", &[0, 2, 0, 0, 0, 0]).await;
                while let Some(f) = w.next().await {
                    match f.id {
                        0x17 => {
                            let p = plugin_of(&f);
                            if p.channel != "FML|HS" {
                                continue;
                            }
                            let line = match p.data.as_slice() {
                                [1, ..] => "ClientHello".to_string(),
                                [2, ..] => "ModList".to_string(),
                                [0xff, phase] => format!("Ack {phase}"),
                                other => format!("unexpected {other:?}"),
                            };
                            log.lock().unwrap().push(line);
                            if stall {
                                continue;
                            }
                            match p.data.as_slice() {
                                [2, ..] => w.plugin(0x3f, "FML|HS", &mod_list()).await,
                                [0xff, 2] => {
                                    w.plugin(0x3f, "FML|HS", &mod_id_data(label)).await;
                                    w.plugin(0x3f, "FML|HS", &[0xff, 2]).await;
                                }
                                [0xff, 3] => {
                                    w.plugin(0x3f, "FML|HS", &[0xff, 3]).await;
                                    let join = JoinGame {
                                        entity_id,
                                        game_mode: 0,
                                        dimension: 0,
                                        difficulty: 1,
                                        max_players: 20,
                                        level_type: "default".into(),
                                        trailing_dimension: false,
                                    };
                                    w.stream.write_all(&join.to_frame_bytes().unwrap()).await.unwrap();
                                }
                                _ => {}
                            }
                        }
                        0x00 => {
                            let id = i32::from_be_bytes(f.body[..4].try_into().unwrap());
                            log.lock().unwrap().push(format!("KeepAlive {id}"));
                        }
                        0x01 => {
                            let message = Reader::new(&f.body).string(100, "message").unwrap().to_string();
                            log.lock().unwrap().push(format!("chat {message}"));
                            if let Some(id) = message.strip_prefix("keepalive ") {
                                let id: i32 = id.parse().unwrap();
                                w.send(0x00, &id.to_be_bytes()).await;
                            } else if let Some(target) = message.strip_prefix("connect ") {
                                let data = BungeeRequest::connect_payload(target).unwrap();
                                w.plugin(0x3f, "BungeeCord", &data).await;
                            } else {
                                let echo = ChatMessage { json: chat_text(&format!("[{label}] echo:{message}")) };
                                w.stream.write_all(&echo.to_frame_bytes().unwrap()).await.unwrap();
                            }
                        }
                        _ => {}
                    }
                }
                log.lock().unwrap().push("closed".into());
            });
        }
    });
    (addr, log)
}

/// The scripted Forge 1.7.10 client's handshake state (`FMLHandshakeClientState`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum ClientState {
    Hello,
    WaitingServerData,
    WaitingServerComplete,
    PendingComplete,
    Complete,
    Done,
}

/// A scripted Forge 1.7.10 client: what it saw, in order.
pub struct ForgeClient {
    pub w: Wire,
    pub state: ClientState,
    pub seen: Vec<String>,
}

impl ForgeClient {
    pub async fn connect(proxy: SocketAddr, name: &str) -> Self {
        Self::over(TcpStream::connect(proxy).await.unwrap(), name).await
    }

    /// Logs in as `name` over `stream` (a proxy's TCP listener, or [`through_client_library`]).
    pub async fn over(stream: TcpStream, name: &str) -> Self {
        let mut w = Wire::new(stream);
        w.stream.write_all(&[login_handshake("mc.example.com\0FML\0"), login_start(name)].concat()).await.unwrap();
        let success: LoginSuccess = timeout(STEP, w.next()).await.unwrap().unwrap().decode().unwrap();
        assert_eq!(success.name, name);
        Self { w, state: ClientState::Hello, seen: Vec::new() }
    }

    /// Reads and answers until `done(seen)` holds; fails after `STEP`.
    pub async fn until(&mut self, done: impl Fn(&[String]) -> bool) {
        let r = timeout(STEP, async {
            while !done(&self.seen) {
                let f = self.w.next().await.expect("the proxy keeps the connection open");
                self.handle(f).await;
            }
        })
        .await;
        assert!(r.is_ok(), "the client saw only {:?}", self.seen);
    }

    pub async fn handle(&mut self, f: Frame) {
        match f.id {
            // Keep Alive: noted, answered when the test says so.
            0x00 => self.seen.push(format!("KeepAlive {}", i32::from_be_bytes(f.body[..4].try_into().unwrap()))),
            0x01 => {
                let join: JoinGame = f.decode().unwrap();
                self.seen.push(format!("JoinGame {}", join.entity_id));
            }
            0x07 => {
                let respawn: Respawn = f.decode().unwrap();
                self.seen.push(format!("Respawn {}", respawn.dimension));
            }
            0x02 => self.seen.push(format!("Chat {}", chat_message_text(&f).unwrap())),
            0x3f => {
                let p = plugin_of(&f);
                if p.channel != "FML|HS" {
                    return;
                }
                let (line, state) = match (p.data.as_slice(), self.state) {
                    // Forge 1.7.10 takes a HandshakeReset only in DONE; in any other state the message is cast to
                    // the one that state waits for, which fails and disconnects the client.
                    ([0xfe, ..], ClientState::Done) => ("Reset".to_string(), ClientState::Hello),
                    ([0, ..], ClientState::Hello) => {
                        self.w.plugin(0x17, "REGISTER", b"FML|HS\0FML\0FML|MP\0FORGE").await;
                        self.w.plugin(0x17, "FML|HS", &[1, 2]).await;
                        self.w.plugin(0x17, "FML|HS", &mod_list()).await;
                        ("ServerHello".to_string(), ClientState::WaitingServerData)
                    }
                    ([2, ..], ClientState::WaitingServerData) => {
                        self.w.plugin(0x17, "FML|HS", &[0xff, 2]).await;
                        ("ModList".to_string(), ClientState::WaitingServerComplete)
                    }
                    ([3, ..], ClientState::WaitingServerComplete) => {
                        self.w.plugin(0x17, "FML|HS", &[0xff, 3]).await;
                        let mut r = Reader::new(&p.data[2..]);
                        let name = r.string(64, "name").unwrap().trim_start_matches('\u{1}').to_string();
                        (format!("ModIdData {name}"), ClientState::PendingComplete)
                    }
                    ([0xff, phase], ClientState::PendingComplete) => {
                        self.w.plugin(0x17, "FML|HS", &[0xff, 4]).await;
                        (format!("Ack {phase}"), ClientState::Complete)
                    }
                    ([0xff, phase], ClientState::Complete) => {
                        self.w.plugin(0x17, "FML|HS", &[0xff, 5]).await;
                        (format!("Ack {phase}"), ClientState::Done)
                    }
                    (data, state) => panic!("FML|HS {data:?} in state {state:?}; saw {:?}", self.seen),
                };
                self.seen.push(line);
                self.state = state;
            }
            _ => {}
        }
    }

    pub async fn say(&mut self, message: &str) {
        let mut body = Vec::new();
        put_string(&mut body, message, 100, "message").unwrap();
        self.w.send(0x01, &body).await;
    }
}

/// The handshake a client sees from a server labelled `label`, up to its Join Game (`join`: with it).
pub fn handshake(label: &str) -> Vec<String> {
    ["ServerHello", "ModList", &format!("ModIdData minecraft:stone_{label}"), "Ack 2", "Ack 3"]
        .iter()
        .map(ToString::to_string)
        .collect()
}

/// What a server hears from a client through one whole handshake.
pub fn server_heard() -> Vec<String> {
    ["ClientHello", "ModList", "Ack 2", "Ack 3", "Ack 4", "Ack 5"].iter().map(ToString::to_string).collect()
}

pub async fn wait_log(log: &Log, want: &[String]) {
    let r = timeout(STEP, async {
        loop {
            if log.lock().unwrap().len() >= want.len() {
                return;
            }
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await;
    assert!(r.is_ok(), "the server heard only {:?}", log.lock().unwrap());
    assert_eq!(&log.lock().unwrap()[..want.len()], want);
}

impl ForgeClient {
    pub async fn answer_keep_alive(&mut self, id: i32) {
        self.w.send(0x00, &id.to_be_bytes()).await;
    }
}

/// A TCP stream whose bytes the client library carries: `url` is connected with `options`, and two threads copy
/// between the library's connection and the stream's other end (each write one tick, so a batch per write).
/// The connection closes when the stream does.
pub async fn through_client_library(url: &str, options: moonbridge_client::Options) -> TcpStream {
    let (url, listener) = (url.to_string(), std::net::TcpListener::bind("127.0.0.1:0").unwrap());
    let addr = listener.local_addr().unwrap();
    let near = TcpStream::connect(addr).await.unwrap();
    let (far, _) = listener.accept().unwrap();
    let conn = Arc::new(
        tokio::task::spawn_blocking(move || moonbridge_client::Connection::connect(&url, options))
            .await
            .unwrap()
            .unwrap(),
    );
    let (up_conn, mut up) = (Arc::clone(&conn), far.try_clone().unwrap());
    std::thread::spawn(move || {
        use std::io::Read;
        let mut buf = vec![0u8; 1 << 16];
        while let Ok(n) = up.read(&mut buf) {
            if n == 0 || up_conn.send(&buf[..n]).and_then(|()| up_conn.end_tick()).is_err() {
                break;
            }
        }
        up_conn.close();
    });
    let mut down = far;
    std::thread::spawn(move || {
        use std::io::Write;
        let mut buf = vec![0u8; 1 << 16];
        loop {
            match conn.recv(&mut buf, Some(Duration::from_millis(200))) {
                Ok(n) if down.write_all(&buf[..n]).is_ok() => {}
                _ => break,
            }
        }
        let _ = down.shutdown(std::net::Shutdown::Write);
    });
    near
}
