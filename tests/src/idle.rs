//! [`IdleCutter`]: a TCP intermediary that cuts idle connections, as a CDN does.

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::{TcpListener, TcpStream};
use tokio::task::JoinHandle;

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
