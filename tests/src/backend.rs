//! A backend of bare sockets that records every byte ([`RawBackend`]), the login answers it sends, and
//! decoders for what it receives (frames, forwarded handshake fields, Login Disconnect reasons).

use std::net::SocketAddr;
use std::sync::{Arc, Mutex};
use std::time::Duration;

use moonbridge_protocol::packets::{Handshake, LoginStart, Packet};
use serde_json::Value;
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;
use tokio::time::timeout;

/// What a [`RawBackend`] connection received and how it ended.
#[derive(Clone, Debug, Default)]
pub struct RawConn {
    pub received: Vec<u8>,
    pub closed: bool,
    /// Bytes for the connection to send ([`RawBackend::send`]).
    pub outbox: Option<tokio::sync::mpsc::UnboundedSender<Vec<u8>>>,
}

/// A backend made of bare sockets that records every byte it receives. `on_accept` decides what it sends.
pub struct RawBackend {
    pub addr: SocketAddr,
    pub conns: Arc<Mutex<Vec<Arc<Mutex<RawConn>>>>>,
    task: JoinHandle<()>,
}

/// What a [`RawBackend`] does with each connection.
#[derive(Clone, Debug)]
pub enum RawBehaviour {
    /// Read forever, never answer (case C12).
    Silent,
    /// After `after` bytes arrived, send `reply`, then keep reading.
    ReplyAfter { after: usize, reply: Vec<u8> },
}

impl RawBackend {
    pub async fn start(behaviour: RawBehaviour) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let conns: Arc<Mutex<Vec<Arc<Mutex<RawConn>>>>> = Arc::default();
        let c = Arc::clone(&conns);
        let task = tokio::spawn(async move {
            while let Ok((mut s, _)) = listener.accept().await {
                let (tx, mut outbox) = tokio::sync::mpsc::unbounded_channel::<Vec<u8>>();
                let rec = Arc::new(Mutex::new(RawConn { outbox: Some(tx), ..RawConn::default() }));
                c.lock().unwrap().push(Arc::clone(&rec));
                let behaviour = behaviour.clone();
                tokio::spawn(async move {
                    let mut replied = false;
                    let mut buf = vec![0u8; 65536];
                    loop {
                        let read = tokio::select! {
                            r = s.read(&mut buf) => r,
                            Some(out) = outbox.recv() => {
                                if s.write_all(&out).await.is_err() {
                                    break;
                                }
                                continue;
                            }
                        };
                        match read {
                            Ok(0) | Err(_) => break,
                            Ok(n) => {
                                let total = {
                                    let mut r = rec.lock().unwrap();
                                    r.received.extend_from_slice(&buf[..n]);
                                    r.received.len()
                                };
                                if let RawBehaviour::ReplyAfter { after, reply } = &behaviour {
                                    if !replied && total >= *after {
                                        replied = true;
                                        if s.write_all(reply).await.is_err() {
                                            break;
                                        }
                                    }
                                }
                            }
                        }
                    }
                    rec.lock().unwrap().closed = true;
                });
            }
        });
        Self { addr, conns, task }
    }

    /// The `i`-th accepted connection, once it has received at least `bytes` bytes.
    pub async fn wait_received(&self, i: usize, bytes: usize, within: Duration) -> Vec<u8> {
        let r = timeout(within, async {
            loop {
                if let Some(c) = self.conns.lock().unwrap().get(i) {
                    let c = c.lock().unwrap();
                    if c.received.len() >= bytes {
                        return c.received.clone();
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        r.unwrap_or_else(|_| panic!("backend connection {i} did not receive {bytes} bytes within {within:?}"))
    }

    /// The `i`-th accepted connection, once it has received at least `n` complete frames.
    pub async fn wait_frames(&self, i: usize, n: usize, within: Duration) -> Vec<u8> {
        let r = timeout(within, async {
            loop {
                if let Some(c) = self.conns.lock().unwrap().get(i) {
                    let c = c.lock().unwrap();
                    if frames(&c.received).len() >= n {
                        return c.received.clone();
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        r.unwrap_or_else(|_| panic!("backend connection {i} did not receive {n} frames within {within:?}"))
    }

    /// Waits until the `i`-th connection was closed by the proxy.
    pub async fn wait_closed(&self, i: usize, within: Duration) {
        let r = timeout(within, async {
            loop {
                if let Some(c) = self.conns.lock().unwrap().get(i) {
                    if c.lock().unwrap().closed {
                        return;
                    }
                }
                tokio::time::sleep(Duration::from_millis(10)).await;
            }
        })
        .await;
        assert!(r.is_ok(), "backend connection {i} still open after {within:?}");
    }

    /// Makes the `i`-th connection send `bytes` (it must exist).
    pub async fn send(&self, i: usize, bytes: &[u8]) {
        let tx = self.conns.lock().unwrap()[i].lock().unwrap().outbox.clone().unwrap();
        tx.send(bytes.to_vec()).unwrap();
    }

    pub fn accepted(&self) -> usize {
        self.conns.lock().unwrap().len()
    }
}

impl Drop for RawBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// One status ping as a 1.7.10 client sends it to `addr`: handshake (next state 1), Status Request, Ping
/// (protocol 5, status state). Returns the Status Response JSON, after checking that the Pong echoes the payload,
/// that nothing else follows, and that the proxy closes.
///
/// # Panics
/// On any of those checks, or when the answer does not come within [`crate::STEP`].
pub async fn status_ping(addr: SocketAddr) -> String {
    use moonbridge_protocol::packets::{NextState, StatusPing, StatusRequest, StatusResponse};
    use moonbridge_protocol::{FrameDecoder, MAX_FRAME_LEN};
    let mut s = TcpStream::connect(addr).await.unwrap();
    let hs = Handshake {
        protocol_version: 5,
        server_address: "mc.example.com".into(),
        server_port: 25565,
        next_state: NextState::Status,
    };
    let mut out = hs.to_frame_bytes().unwrap().to_vec();
    out.extend_from_slice(&StatusRequest.to_frame_bytes().unwrap());
    out.extend_from_slice(&StatusPing { payload: 42 }.to_frame_bytes().unwrap());
    s.write_all(&out).await.unwrap();
    let (got, closed) = read_to_close(&mut s, crate::STEP).await;
    assert!(closed, "the proxy closes after the Pong");
    let mut dec = FrameDecoder::new(MAX_FRAME_LEN);
    dec.queue_slice(&got);
    let response: StatusResponse = dec.try_next_frame().unwrap().expect("a Status Response").decode().unwrap();
    let pong: StatusPing = dec.try_next_frame().unwrap().expect("a Pong").decode().unwrap();
    assert_eq!(pong.payload, 42, "the Pong echoes the payload");
    assert!(dec.buffered().is_empty(), "nothing else");
    response.json
}

/// Reads until the peer closes (or `within` passes) and returns everything read, and whether EOF was seen.
pub async fn read_to_close(s: &mut TcpStream, within: Duration) -> (Vec<u8>, bool) {
    let mut out = Vec::new();
    let mut buf = [0u8; 8192];
    let r = timeout(within, async {
        loop {
            match s.read(&mut buf).await {
                Ok(0) | Err(_) => return,
                Ok(n) => out.extend_from_slice(&buf[..n]),
            }
        }
    })
    .await;
    (out, r.is_ok())
}

/// Decodes every complete frame in `bytes` as (packet id, body).
pub fn frames(bytes: &[u8]) -> Vec<(i32, Vec<u8>)> {
    let mut dec = moonbridge_protocol::FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
    dec.queue_slice(bytes);
    let mut out = Vec::new();
    while let Ok(Some(f)) = dec.try_next_frame() {
        out.push((f.id, f.body.to_vec()));
    }
    out
}

/// The JSON reason of a Login Disconnect frame at the start of `bytes`.
pub fn login_disconnect_reason(bytes: &[u8]) -> Option<String> {
    let (id, body) = frames(bytes).into_iter().next()?;
    if id != 0 {
        return None;
    }
    let mut r = moonbridge_protocol::codec::Reader::new(&body);
    let json = r.string(32767, "reason").ok()?;
    let v: Value = serde_json::from_str(json).ok()?;
    v["text"].as_str().map(str::to_owned)
}

/// A Login Success frame for `name` (what a backend sends to complete the login).
pub fn login_success(name: &str) -> Vec<u8> {
    use moonbridge_protocol::packets::{LoginSuccess, Packet};
    let uuid = moonbridge_protocol::forwarding::offline_uuid(name).to_string();
    LoginSuccess { uuid, name: name.into() }.to_frame_bytes().unwrap().to_vec()
}

/// A backend that completes the login with Login Success for `Steve` once it has the handshake and Login Start
/// (the proxy connects only once it has both, and sends them in one write).
pub async fn login_backend() -> RawBackend {
    RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply: login_success("Steve") }).await
}

/// The forwarded login at the start of `received` (what a BungeeCord-forwarding proxy sends a backend): the
/// `\0`-separated fields of the handshake's server address (host, player IP, UUID and, for Forge, the properties
/// JSON) and the Login Start after it. The server address is read with the 32767-character limit of a
/// BungeeCord-aware server, not the vanilla 255. Panics when the bytes are not a login handshake and a Login
/// Start.
pub fn forwarded_login(received: &[u8]) -> (Vec<String>, LoginStart) {
    let mut dec = moonbridge_protocol::FrameDecoder::new(moonbridge_protocol::MAX_FRAME_LEN);
    dec.queue_slice(received);
    let hs = dec.try_next_frame().unwrap().expect("a handshake frame");
    assert_eq!(hs.id, Handshake::ID, "the first frame is the handshake");
    let mut r = moonbridge_protocol::codec::Reader::new(&hs.body);
    assert_eq!(r.var_int("protocol_version").unwrap(), 5);
    let fields = r.string(32767, "server_address").unwrap().split('\0').map(str::to_owned).collect();
    r.u16("server_port").unwrap();
    assert_eq!(r.var_int("next_state").unwrap(), 2, "next state Login");
    r.finish().unwrap();
    let login: LoginStart = dec.try_next_frame().unwrap().expect("a Login Start frame").decode().unwrap();
    (fields, login)
}

/// The forwarded handshake fields of [`forwarded_login`].
pub fn forwarded_fields(received: &[u8]) -> Vec<String> {
    forwarded_login(received).0
}
