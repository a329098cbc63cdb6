//! [`Cutter`]: a TLS-terminating intermediary between a WebSocket client and a `wss` listener, like a CDN edge,
//! that cuts the connection on command: by a TCP reset, by a FIN, by a WebSocket Close 1001 to both sides (at
//! frame boundaries, as an edge going away sends it), or by going silent (nothing forwarded any more, sockets
//! left open). A cut can wait until a given number of bytes went towards the client, so it lands in the
//! middle of a burst.

use std::net::SocketAddr;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::sync::broadcast;
use tokio::task::JoinHandle;

/// How a connection is cut.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum CutKind {
    /// TCP reset on both sockets (SO_LINGER 0, then close).
    Reset,
    /// TCP FIN on both sockets, mid-stream (no TLS close_notify).
    Fin,
    /// A WebSocket Close 1001 to each side at its next frame boundary, then FIN.
    Close1001,
    /// Nothing is forwarded any more; both sockets stay open (each side must notice by its keepalive).
    Silent,
}

#[derive(Clone, Copy, Debug)]
struct Cut {
    kind: CutKind,
    /// Cut once this many more bytes went towards the client (0: now).
    after_down_bytes: u64,
}

/// The intermediary. Cuts apply to every connection open when the cut is ordered.
pub struct Cutter {
    pub addr: SocketAddr,
    /// Connections accepted so far.
    pub accepted: Arc<AtomicUsize>,
    /// Cuts carried out so far.
    pub cuts: Arc<AtomicUsize>,
    /// Bytes carried from the proxy to the player so far, over every connection (the wire: WebSocket frames
    /// and the HTTP response heads, after TLS).
    pub down_bytes: Arc<std::sync::atomic::AtomicU64>,
    orders: broadcast::Sender<Cut>,
    target: Arc<std::sync::Mutex<SocketAddr>>,
    task: JoinHandle<()>,
}

/// Tracks WebSocket frame boundaries in one direction (RFC 6455 §5.2 headers, masked or not), after the
/// HTTP upgrade request or response head.
struct Frames {
    /// The last bytes of the HTTP head while it is being read (`None` once it ended with CRLF CRLF).
    http_tail: Option<u32>,
    header: Vec<u8>,
    payload_left: u64,
}

impl Default for Frames {
    fn default() -> Self {
        Self { http_tail: Some(0), header: Vec::new(), payload_left: 0 }
    }
}

impl Frames {
    fn at_boundary(&self) -> bool {
        self.http_tail.is_none() && self.header.is_empty() && self.payload_left == 0
    }

    /// Consumes at least one byte of `data` (never past the end of the current frame); returns how many.
    fn step(&mut self, data: &[u8]) -> usize {
        if let Some(tail) = &mut self.http_tail {
            *tail = (*tail << 8) | u32::from(data[0]);
            if *tail == u32::from_be_bytes(*b"\r\n\r\n") {
                self.http_tail = None;
            }
            return 1;
        }
        if self.payload_left > 0 {
            let k = (self.payload_left as usize).min(data.len());
            self.payload_left -= k as u64;
            return k;
        }
        self.header.push(data[0]);
        let h = &self.header;
        if h.len() >= 2 {
            let masked = h[1] & 0x80 != 0;
            let ext = match h[1] & 0x7f {
                126 => 2,
                127 => 8,
                _ => 0,
            };
            let total = 2 + ext + if masked { 4 } else { 0 };
            if h.len() == total {
                let len = match ext {
                    2 => u64::from(u16::from_be_bytes([h[2], h[3]])),
                    8 => u64::from_be_bytes(h[2..10].try_into().unwrap()),
                    _ => u64::from(h[1] & 0x7f),
                };
                self.header.clear();
                self.payload_left = len;
            }
        }
        1
    }
}

impl Cutter {
    /// Listens on loopback; each connection is TLS-terminated with `cert` and carried to `target` (a `wss`
    /// listener) over a new TLS connection verified against `cert.ca`.
    pub async fn start(target: SocketAddr, cert: &crate::TestCert) -> Self {
        let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let acceptor = tokio_rustls::TlsAcceptor::from(server_config(cert));
        let connector = tokio_rustls::TlsConnector::from(crate::tls_client_config(
            &cert.ca,
            &[&rustls::version::TLS13, &rustls::version::TLS12],
        ));
        let (orders, _) = broadcast::channel(16);
        let accepted = Arc::new(AtomicUsize::new(0));
        let cuts = Arc::new(AtomicUsize::new(0));
        let down_bytes = Arc::new(std::sync::atomic::AtomicU64::new(0));
        let (o, a, c, d) = (orders.clone(), Arc::clone(&accepted), Arc::clone(&cuts), Arc::clone(&down_bytes));
        let target = Arc::new(std::sync::Mutex::new(target));
        let t = Arc::clone(&target);
        let task = tokio::spawn(async move {
            while let Ok((client, _)) = listener.accept().await {
                a.fetch_add(1, Ordering::SeqCst);
                let rx = o.subscribe();
                let target = *t.lock().unwrap();
                let (acceptor, connector, c, d) = (acceptor.clone(), connector.clone(), Arc::clone(&c), Arc::clone(&d));
                tokio::spawn(async move {
                    let _ = pair(client, target, acceptor, connector, rx, c, d).await;
                });
            }
        });
        Self { addr, accepted, cuts, down_bytes, orders, target, task }
    }

    /// Sends new connections to `target` from now on (another proxy instance, a restarted one, a dead port).
    pub fn retarget(&self, target: SocketAddr) {
        *self.target.lock().unwrap() = target;
    }

    /// Cuts every open connection now.
    pub fn cut(&self, kind: CutKind) {
        let _ = self.orders.send(Cut { kind, after_down_bytes: 0 });
    }

    /// Cuts every open connection once `bytes` more went towards the client.
    pub fn cut_after(&self, kind: CutKind, bytes: u64) {
        let _ = self.orders.send(Cut { kind, after_down_bytes: bytes });
    }

    /// Waits until `n` cuts were carried out.
    pub async fn wait_cuts(&self, n: usize, within: Duration) {
        tokio::time::timeout(within, async {
            while self.cuts.load(Ordering::SeqCst) < n {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
        })
        .await
        .unwrap_or_else(|_| panic!("{n} cuts within {within:?}"));
    }
}

impl Drop for Cutter {
    fn drop(&mut self) {
        self.task.abort();
    }
}

fn server_config(cert: &crate::TestCert) -> Arc<rustls::ServerConfig> {
    use rustls::pki_types::pem::PemObject;
    use rustls::pki_types::{CertificateDer, PrivateKeyDer};
    let chain: Vec<CertificateDer<'static>> =
        CertificateDer::pem_file_iter(&cert.cert).unwrap().map(|c| c.unwrap()).collect();
    let key = PrivateKeyDer::from_pem_file(&cert.key).unwrap();
    let provider = Arc::new(rustls::crypto::aws_lc_rs::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .unwrap()
        .with_no_client_auth()
        .with_single_cert(chain, key)
        .unwrap();
    Arc::new(config)
}

/// A masked client Close frame with `code` (towards the proxy).
fn client_close(code: u16) -> Vec<u8> {
    let mask = [0x11, 0x22, 0x33, 0x44];
    let body = code.to_be_bytes();
    let mut f = vec![0x88, 0x80 | 2];
    f.extend_from_slice(&mask);
    f.extend(body.iter().enumerate().map(|(i, b)| b ^ mask[i % 4]));
    f
}

/// An unmasked server Close frame with `code` (towards the client).
fn server_close(code: u16) -> Vec<u8> {
    let mut f = vec![0x88, 2];
    f.extend_from_slice(&code.to_be_bytes());
    f
}

async fn pair(
    client: TcpStream,
    target: SocketAddr,
    acceptor: tokio_rustls::TlsAcceptor,
    connector: tokio_rustls::TlsConnector,
    mut orders: broadcast::Receiver<Cut>,
    cuts: Arc<AtomicUsize>,
    down_bytes: Arc<std::sync::atomic::AtomicU64>,
) -> std::io::Result<()> {
    client.set_nodelay(true)?;
    let client_raw = socket2::Socket::from(client.into_std()?.try_clone()?);
    let client = TcpStream::from_std(client_raw.try_clone()?.into())?;
    let server = TcpStream::connect(target).await?;
    server.set_nodelay(true)?;
    let server_raw = socket2::Socket::from(server.into_std()?);
    let server = TcpStream::from_std(server_raw.try_clone()?.into())?;
    let client = acceptor.accept(client).await?;
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let server = connector.connect(name, server).await?;
    let (mut cr, mut cw) = tokio::io::split(client);
    let (mut sr, mut sw) = tokio::io::split(server);
    let (mut up, mut down) = (Frames::default(), Frames::default());
    let (mut b1, mut b2) = (vec![0u8; 65536], vec![0u8; 65536]);
    let mut armed: Option<(Cut, u64)> = None;
    let mut down_total: u64 = 0;
    // The cut being carried out once its byte count is reached.
    let kind = 'relay: loop {
        if let Some((cut, at)) = armed {
            if down_total >= at && (cut.kind != CutKind::Close1001 || (down.at_boundary() && up.at_boundary())) {
                break cut.kind;
            }
        }
        tokio::select! {
            o = orders.recv() => match o {
                Ok(cut) => armed = Some((cut, down_total + cut.after_down_bytes)),
                Err(_) => return Ok(()),
            },
            r = cr.read(&mut b1) => {
                let n = match r { Ok(0) | Err(_) => return Ok(()), Ok(n) => n };
                let mut off = 0;
                while off < n {
                    off += up.step(&b1[off..n]);
                }
                // One write per read: a byte-at-a-time forward would turn into one TLS record per byte.
                sw.write_all(&b1[..n]).await?;
                sw.flush().await?;
            }
            r = sr.read(&mut b2) => {
                let n = match r { Ok(0) | Err(_) => return Ok(()), Ok(n) => n };
                let mut off = 0;
                while off < n {
                    let mut end = n;
                    if let Some((cut, at)) = armed {
                        if down_total >= at
                            && (cut.kind != CutKind::Close1001 || (down.at_boundary() && up.at_boundary()))
                        {
                            // The rest of this read is lost with the connection.
                            cw.flush().await?;
                            break 'relay cut.kind;
                        }
                        if down_total < at {
                            end = off + ((at - down_total) as usize).min(n - off);
                        }
                    }
                    let start = off;
                    while off < end {
                        off += down.step(&b2[off..end]);
                        let here = down_total + (off - start) as u64;
                        if armed.is_some_and(|(c, at)| c.kind == CutKind::Close1001 && here >= at)
                            && down.at_boundary()
                            && up.at_boundary()
                        {
                            break;
                        }
                    }
                    cw.write_all(&b2[start..off]).await?;
                    down_total += (off - start) as u64;
                    down_bytes.fetch_add((off - start) as u64, Ordering::SeqCst);
                }
                cw.flush().await?;
            }
        }
    };
    cuts.fetch_add(1, Ordering::SeqCst);
    match kind {
        CutKind::Reset => {
            client_raw.set_linger(Some(Duration::ZERO))?;
            server_raw.set_linger(Some(Duration::ZERO))?;
            drop((cr, cw, sr, sw));
        }
        CutKind::Fin => fin(client_raw, server_raw, cr, sr).await,
        CutKind::Close1001 => {
            // Both directions are at a frame boundary here.
            let _ = sw.write_all(&client_close(1001)).await;
            let _ = sw.flush().await;
            let _ = cw.write_all(&server_close(1001)).await;
            let _ = cw.flush().await;
            fin(client_raw, server_raw, cr, sr).await;
        }
        CutKind::Silent => {
            // Hold both connections open, forwarding nothing, until both sides have given up on them.
            tokio::time::sleep(Duration::from_secs(30)).await;
            drop((cr, cw, sr, sw));
        }
    }
    Ok(())
}

/// FIN on both sockets, then read and drop what still arrives for a while (a close with unread data would
/// turn into a reset).
async fn fin<R: tokio::io::AsyncRead + Unpin>(
    client_raw: socket2::Socket,
    server_raw: socket2::Socket,
    mut cr: R,
    mut sr: impl tokio::io::AsyncRead + Unpin,
) {
    let _ = client_raw.shutdown(std::net::Shutdown::Write);
    let _ = server_raw.shutdown(std::net::Shutdown::Write);
    let (mut b1, mut b2) = (vec![0u8; 65536], vec![0u8; 65536]);
    let _ = tokio::time::timeout(Duration::from_secs(5), async {
        let (mut a, mut b) = (false, false);
        while !(a && b) {
            tokio::select! {
                r = cr.read(&mut b1), if !a => a = !matches!(r, Ok(n) if n > 0),
                r = sr.read(&mut b2), if !b => b = !matches!(r, Ok(n) if n > 0),
            }
        }
    })
    .await;
}
