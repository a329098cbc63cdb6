//! Test support for the MoonBridge cross-tests: the proxy in-process on ephemeral ports, real
//! node-minecraft-protocol peers (`tests/peers/`, installed with `npm ci`), and raw sockets that send the
//! byte sequences from the field cases.
//!
//! Every wait here is bounded by a timeout; nothing sleeps to synchronise.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    unreachable_pub
)]

use std::net::SocketAddr;
use std::path::PathBuf;
use std::process::Stdio;
use std::sync::{Arc, Mutex};
use std::time::Duration;

/// The 1.7.10 session driven through the client library (shared with the Windows run under Wine).
pub use moonbridge_client_scenarios as mc;
pub mod dns;
pub mod natives;
pub mod online;

pub use moonbridge_client_scenarios::{login_handshake, login_start, BURST_CHANNEL};

use moonbridge_proxy::config::Transport;
use moonbridge_proxy::{Config, Server, StatsHandle};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncReadExt, AsyncWriteExt, BufReader};
use tokio::net::{TcpListener, TcpStream};
use tokio::process::{Child, Command};
use tokio::sync::mpsc;
use tokio::task::JoinHandle;
use tokio::time::timeout;
use tokio_util::sync::CancellationToken;

/// Case file `HS`: handshake for `mc.example.com:25565`, next state login, with the Forge marker.
pub const HS: &[u8] = &[
    0x19, 0x00, 0x05, 0x13, b'm', b'c', b'.', b'e', b'x', b'a', b'm', b'p', b'l', b'e', b'.', b'c', b'o', b'm', 0x00,
    b'F', b'M', b'L', 0x00, 0x63, 0xdd, 0x02,
];
/// Case file `LS`: Login Start for `Steve`.
pub const LS: &[u8] = &[0x07, 0x00, 0x05, b'S', b't', b'e', b'v', b'e'];

/// Generous bound for any single step of a test.
pub const STEP: Duration = Duration::from_secs(20);

/// Raises this process's open-file limit (tests open thousands of sockets).
pub fn raise_fd_limit() {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
}

/// The proxy running in this process.
pub struct Proxy {
    pub addrs: Vec<(Transport, SocketAddr)>,
    pub stats: StatsHandle,
    stop: CancellationToken,
    task: JoinHandle<()>,
}

impl Proxy {
    /// Starts a proxy from TOML text. Every listener should bind `127.0.0.1:0`.
    pub async fn start(toml: &str) -> Self {
        let config = Config::from_toml(toml).expect("test config parses");
        Self::start_config(&config).await
    }

    pub async fn start_config(config: &Config) -> Self {
        let server = Server::bind(config).await.expect("proxy binds");
        let addrs = server.local_addrs();
        let stats = server.stats_handle();
        let stop = CancellationToken::new();
        let s = stop.clone();
        let task = tokio::spawn(async move { server.run(s.cancelled_owned()).await });
        Self { addrs, stats, stop, task }
    }

    /// The address of the first listener of `transport`.
    pub fn addr(&self, transport: Transport) -> SocketAddr {
        self.addrs.iter().find(|(t, _)| *t == transport).map(|(_, a)| *a).expect("listener of that transport")
    }

    /// Signals shutdown (as SIGTERM would) and waits for the server to return.
    pub async fn shutdown(self) {
        self.stop.cancel();
        timeout(Duration::from_secs(30), self.task).await.expect("proxy stops in time").expect("proxy task");
    }

    /// Waits until open connections drop to `n`.
    pub async fn wait_connections(&self, n: usize, within: Duration) {
        let stats = self.stats.clone();
        let ok = timeout(within, async {
            loop {
                if stats.stats().connections == n {
                    return;
                }
                tokio::time::sleep(Duration::from_millis(20)).await;
            }
        })
        .await;
        assert!(ok.is_ok(), "expected {n} open connections, have {:?}", self.stats.stats());
    }
}

/// A one-backend proxy config with a TCP listener on an ephemeral port. `extra` is appended verbatim.
pub fn tcp_config(backend: SocketAddr, extra: &str) -> String {
    format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\n[[backend]]\nname = \"survival\"\naddress = \"{backend}\"\n{extra}\n"
    )
}

/// The directory holding the node peers (`package.json`, `package-lock.json`, scripts).
pub fn peers_dir() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("peers")
}

/// A running node peer script that prints one JSON object per line.
pub struct NodePeer {
    child: Child,
    lines: mpsc::UnboundedReceiver<Value>,
}

impl NodePeer {
    /// Runs `node peers/<script> '<opts>'`.
    pub async fn spawn(script: &str, opts: &Value) -> Self {
        let dir = peers_dir();
        assert!(
            dir.join("node_modules/minecraft-protocol").is_dir(),
            "node peers are not installed: run `npm ci` in {}",
            dir.display()
        );
        let mut child = Command::new("node")
            .arg(script)
            .arg(opts.to_string())
            .current_dir(&dir)
            .stdout(Stdio::piped())
            .stderr(Stdio::inherit())
            .kill_on_drop(true)
            .spawn()
            .expect("node runs");
        let stdout = child.stdout.take().expect("stdout piped");
        let (tx, lines) = mpsc::unbounded_channel();
        tokio::spawn(async move {
            let mut r = BufReader::new(stdout).lines();
            while let Ok(Some(line)) = r.next_line().await {
                match serde_json::from_str::<Value>(&line) {
                    Ok(v) => {
                        let _ = tx.send(v);
                    }
                    Err(_) => eprintln!("[node] {line}"),
                }
            }
        });
        Self { child, lines }
    }

    /// The next line whose `event` is `name` (earlier other lines are returned by [`Self::take_seen`]).
    pub async fn event(&mut self, name: &str, within: Duration) -> Value {
        let got = timeout(within, async {
            while let Some(v) = self.lines.recv().await {
                if v["event"] == name {
                    return Some(v);
                }
            }
            None
        })
        .await;
        match got {
            Ok(Some(v)) => v,
            Ok(None) => panic!("node peer exited before event {name:?}"),
            Err(_) => panic!("no {name:?} event within {within:?}"),
        }
    }

    /// The next `n` lines, whatever their events.
    pub async fn next_lines(&mut self, n: usize, within: Duration) -> Vec<Value> {
        let mut seen = Vec::new();
        let got = timeout(within, async {
            while seen.len() < n {
                match self.lines.recv().await {
                    Some(v) => seen.push(v),
                    None => return false,
                }
            }
            true
        })
        .await;
        match got {
            Ok(true) => seen,
            Ok(false) => panic!("node peer exited after {seen:?}"),
            Err(_) => panic!("fewer than {n} lines within {within:?}: {seen:?}"),
        }
    }

    /// Every line whose `event` is `name` until the peer prints `done`, plus the `done` line.
    pub async fn collect_until_done(&mut self, name: &str, within: Duration) -> (Vec<Value>, Value) {
        let mut seen = Vec::new();
        let got = timeout(within, async {
            while let Some(v) = self.lines.recv().await {
                if v["event"] == "done" {
                    return Some(v);
                }
                if v["event"] == name {
                    seen.push(v);
                }
            }
            None
        })
        .await;
        match got {
            Ok(Some(done)) => (seen, done),
            Ok(None) => panic!("node peer exited without a done line; saw {seen:?}"),
            Err(_) => panic!("node peer not done within {within:?}; saw {seen:?}"),
        }
    }

    /// Waits for the process to exit and returns its status code.
    pub async fn wait(mut self, within: Duration) -> Option<i32> {
        timeout(within, self.child.wait()).await.expect("node peer exits in time").expect("wait").code()
    }
}

/// Starts the node-minecraft-protocol 1.7.10 backend and returns it with its address.
pub async fn node_backend(opts: Value) -> (NodePeer, SocketAddr) {
    let mut peer = NodePeer::spawn("backend.js", &opts).await;
    let ev = peer.event("listening", STEP).await;
    let port = u16::try_from(ev["port"].as_u64().expect("port")).expect("port fits");
    (peer, SocketAddr::from(([127, 0, 0, 1], port)))
}

/// What a [`RawBackend`] connection received and how it ended.
#[derive(Clone, Debug, Default)]
pub struct RawConn {
    pub received: Vec<u8>,
    pub closed: bool,
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
                let rec = Arc::new(Mutex::new(RawConn::default()));
                c.lock().unwrap().push(Arc::clone(&rec));
                let behaviour = behaviour.clone();
                tokio::spawn(async move {
                    let mut replied = false;
                    let mut buf = vec![0u8; 65536];
                    loop {
                        match s.read(&mut buf).await {
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

    pub fn accepted(&self) -> usize {
        self.conns.lock().unwrap().len()
    }
}

impl Drop for RawBackend {
    fn drop(&mut self) {
        self.task.abort();
    }
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

// ---------------------------------------------------------------------------------------------------------
// WebSocket and TLS helpers
// ---------------------------------------------------------------------------------------------------------

pub use tokio_tungstenite::tungstenite::Message;
pub use tokio_tungstenite::WebSocketStream;

/// A test CA and a leaf certificate for `localhost` and `127.0.0.1` signed by it, made by the real `openssl`
/// command line. `cert` is the chain (leaf, then CA) a server loads; `ca` is what clients trust.
pub struct TestCert {
    pub dir: PathBuf,
    pub cert: PathBuf,
    pub key: PathBuf,
    pub ca: PathBuf,
    ca_key: PathBuf,
    key_type: String,
}

fn openssl(args: &[&std::ffi::OsStr]) {
    let out = std::process::Command::new("openssl")
        .args(args)
        .output()
        .expect("openssl is installed (scripts/test-all.sh installs it)");
    assert!(out.status.success(), "openssl {args:?} failed: {}", String::from_utf8_lossy(&out.stderr));
}

fn newkey_args(key_type: &str) -> Vec<&'static str> {
    match key_type {
        "rsa" => vec!["-newkey", "rsa:2048"],
        _ => vec!["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"],
    }
}

impl TestCert {
    /// Generates a CA and a leaf for `localhost` in a fresh directory. `key_type` is `"ec"` (P-256) or
    /// `"rsa"` (2048 bits).
    pub fn generate(name: &str, key_type: &str) -> Self {
        let dir = std::env::temp_dir().join(format!("moonbridge-cert-{}-{name}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let ca = dir.join("ca.pem");
        let ca_key = dir.join("ca.key");
        let mut args: Vec<std::ffi::OsString> = vec!["req".into(), "-x509".into(), "-nodes".into()];
        args.extend(["-days", "2", "-subj", "/CN=MoonBridge Test CA"].map(Into::into));
        args.extend(newkey_args(key_type).into_iter().map(Into::into));
        args.extend(["-keyout".into(), ca_key.clone().into(), "-out".into(), ca.clone().into()]);
        openssl(&args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>());
        let t = Self {
            cert: dir.join("fullchain.pem"),
            key: dir.join("privkey.pem"),
            dir,
            ca,
            ca_key,
            key_type: key_type.into(),
        };
        t.issue(&t.cert, &t.key, name);
        t
    }

    /// Issues a new leaf (CN `cn`) from this CA into `cert` (leaf + CA chain) and `key`, valid for `localhost`,
    /// `127.0.0.1` and `::1`.
    pub fn issue(&self, cert: &std::path::Path, key: &std::path::Path, cn: &str) {
        self.issue_for(cert, key, cn, "DNS:localhost,IP:127.0.0.1,IP:::1");
    }

    /// Issues a new leaf (CN `cn`) with the subject alternative names `sans` (OpenSSL syntax).
    pub fn issue_for(&self, cert: &std::path::Path, key: &std::path::Path, cn: &str, sans: &str) {
        let csr = self.dir.join("leaf.csr");
        let leaf = self.dir.join("leaf.pem");
        let ext = self.dir.join("leaf.ext");
        std::fs::write(&ext, format!("subjectAltName={sans}\nbasicConstraints=CA:FALSE\n")).unwrap();
        let mut args: Vec<std::ffi::OsString> = vec!["req".into(), "-new".into(), "-nodes".into(), "-subj".into()];
        args.push(format!("/CN={cn}").into());
        args.extend(newkey_args(&self.key_type).into_iter().map(Into::into));
        args.extend(["-keyout".into(), key.into(), "-out".into(), csr.clone().into()]);
        openssl(&args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>());
        let args: Vec<std::ffi::OsString> = vec![
            "x509".into(),
            "-req".into(),
            "-days".into(),
            "2".into(),
            "-in".into(),
            csr.into(),
            "-CA".into(),
            self.ca.clone().into(),
            "-CAkey".into(),
            self.ca_key.clone().into(),
            "-CAcreateserial".into(),
            "-extfile".into(),
            ext.into(),
            "-out".into(),
            leaf.clone().into(),
        ];
        openssl(&args.iter().map(|a| a.as_os_str()).collect::<Vec<_>>());
        let chain = [std::fs::read(&leaf).unwrap(), std::fs::read(&self.ca).unwrap()].concat();
        std::fs::write(cert, chain).unwrap();
    }
}

/// A TLS client configuration that trusts exactly `ca` (a PEM file), offering `versions`.
pub fn tls_client_config(
    ca: &std::path::Path,
    versions: &[&'static rustls::SupportedProtocolVersion],
) -> Arc<rustls::ClientConfig> {
    use rustls::pki_types::pem::PemObject;
    let mut roots = rustls::RootCertStore::empty();
    for c in rustls::pki_types::CertificateDer::pem_file_iter(ca).unwrap() {
        roots.add(c.unwrap()).unwrap();
    }
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let mut config = rustls::ClientConfig::builder_with_provider(provider)
        .with_protocol_versions(versions)
        .unwrap()
        .with_root_certificates(roots)
        .with_no_client_auth();
    config.alpn_protocols = vec![b"http/1.1".to_vec()];
    Arc::new(config)
}

/// Any byte stream a WebSocket client can run on.
pub trait Io: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send {}
impl<T: tokio::io::AsyncRead + tokio::io::AsyncWrite + Unpin + Send> Io for T {}

/// Opens a WebSocket to `url` (`ws://127.0.0.1:port/path` or `wss://localhost:port/path`) over a TCP
/// connection to `addr`, with extra request headers. For `wss` the server is verified against `ca`.
pub async fn ws_connect(
    addr: SocketAddr,
    url: &str,
    headers: &[(&str, &str)],
    ca: Option<&std::path::Path>,
) -> Result<
    (WebSocketStream<Box<dyn Io>>, tokio_tungstenite::tungstenite::handshake::client::Response),
    tokio_tungstenite::tungstenite::Error,
> {
    use tokio_tungstenite::tungstenite::client::IntoClientRequest;
    let mut req = url.into_client_request()?;
    for (k, v) in headers {
        req.headers_mut().insert(
            tokio_tungstenite::tungstenite::http::HeaderName::from_bytes(k.as_bytes()).unwrap(),
            v.parse().unwrap(),
        );
    }
    let tcp = TcpStream::connect(addr).await.map_err(tokio_tungstenite::tungstenite::Error::Io)?;
    tcp.set_nodelay(true).unwrap();
    let io: Box<dyn Io> = if url.starts_with("wss://") {
        let config =
            tls_client_config(ca.expect("wss needs a CA"), &[&rustls::version::TLS13, &rustls::version::TLS12]);
        let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
        let tls = tokio_rustls::TlsConnector::from(config)
            .connect(name, tcp)
            .await
            .map_err(tokio_tungstenite::tungstenite::Error::Io)?;
        Box::new(tls)
    } else {
        Box::new(tcp)
    };
    tokio_tungstenite::client_async(req, io).await
}

/// Reads messages until a Close arrives (or the stream ends) and returns its code, answering Pings.
pub async fn ws_close_code<S: Io>(ws: &mut WebSocketStream<S>, within: Duration) -> Option<u16> {
    use futures_util::StreamExt;
    timeout(within, async {
        while let Some(m) = ws.next().await {
            match m {
                Ok(Message::Close(f)) => return f.map(|f| u16::from(f.code)),
                Ok(_) => {}
                Err(_) => return None,
            }
        }
        None
    })
    .await
    .expect("close within the time limit")
}

/// Reads binary messages until `n` bytes arrived; returns them and how many messages carried them.
pub async fn ws_read_bytes<S: Io>(ws: &mut WebSocketStream<S>, n: usize, within: Duration) -> (Vec<u8>, usize) {
    use futures_util::StreamExt;
    let mut out = Vec::new();
    let mut messages = 0;
    timeout(within, async {
        while out.len() < n {
            match ws.next().await {
                Some(Ok(Message::Binary(b))) => {
                    messages += 1;
                    out.extend_from_slice(&b);
                }
                Some(Ok(Message::Close(f))) => panic!("closed while reading: {f:?}"),
                Some(Ok(_)) => {}
                Some(Err(e)) => panic!("read error: {e}"),
                None => panic!("stream ended after {} bytes", out.len()),
            }
        }
    })
    .await
    .unwrap_or_else(|_| panic!("{n} bytes not received within {within:?}"));
    (out, messages)
}

/// Sends a raw HTTP request and returns the response head (up to the blank line) and whether the
/// connection was closed afterwards.
pub async fn raw_http(addr: SocketAddr, request: &str) -> String {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(request.as_bytes()).await.unwrap();
    let (got, _) = read_to_close(&mut s, STEP).await;
    String::from_utf8_lossy(&got).into_owned()
}

/// A TCP intermediary that cuts a connection after it carried no byte in either direction for `idle`, the
/// way a CDN cuts idle WebSockets (scaled down for tests).
pub struct IdleCutter {
    pub addr: SocketAddr,
    pub cuts: Arc<std::sync::atomic::AtomicUsize>,
    task: JoinHandle<()>,
}

impl IdleCutter {
    pub async fn start(target: SocketAddr, idle: Duration) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let cuts = Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let c = Arc::clone(&cuts);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                let c = Arc::clone(&c);
                tokio::spawn(async move {
                    let Ok(server) = TcpStream::connect(target).await else { return };
                    let (mut cr, mut cw) = client.into_split();
                    let (mut sr, mut sw) = server.into_split();
                    let (mut b1, mut b2) = (vec![0u8; 65536], vec![0u8; 65536]);
                    loop {
                        tokio::select! {
                            r = cr.read(&mut b1) => match r {
                                Ok(0) | Err(_) => return,
                                Ok(n) => if sw.write_all(&b1[..n]).await.is_err() { return },
                            },
                            r = sr.read(&mut b2) => match r {
                                Ok(0) | Err(_) => return,
                                Ok(n) => if cw.write_all(&b2[..n]).await.is_err() { return },
                            },
                            () = tokio::time::sleep(idle) => {
                                c.fetch_add(1, std::sync::atomic::Ordering::SeqCst);
                                return; // dropping both halves closes both connections
                            }
                        }
                    }
                });
            }
        });
        Self { addr, cuts, task }
    }
}

impl Drop for IdleCutter {
    fn drop(&mut self) {
        self.task.abort();
    }
}
