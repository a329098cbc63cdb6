//! The listening room: player listeners, the accept loops, the connection cap and the handshake slots; each
//! accepted connection goes to [`conn`] (its transport setup under the handshake deadline), whose transports
//! are [`tcp`] (the PROXY header), [`ws`] (TLS for `wss`, the one WebSocket setup for `ws` and `wss`, resume
//! dispatch) and [`upgrade`] (the HTTP upgrade and the player's real address).

use std::net::SocketAddr;
use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use prometheus::IntCounter;
use tokio::net::TcpListener;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tracing::{info_span, warn, Instrument};

use crate::config::{Listener, ListenerKind, Transport};
use crate::labels::RefusedReason;
use crate::rate::Bucket;
use crate::state::ProxyState;
use crate::tls::{TLS_LIBRARY, TLS_VERSIONS};
use crate::workers::Workers;

mod carry;
mod conn;
mod opened;
pub(crate) mod tcp;
pub(crate) mod upgrade;
mod ws;

pub(crate) use conn::Accept;
use conn::Conn;

/// Listen backlog of every listener (players, metrics, instance links), in connections: the kernel queues this
/// many completed handshakes the proxy has not accepted yet (a reconnect storm after a restart, a flood of slow
/// clients on the metrics port), capped by `net.core.somaxconn`. Past it the kernel drops SYNs and a client
/// retries only after 1 s, longer than a liveness probe waits. Rust's standard library and tokio's
/// `TcpListener::bind` ask for 128.
pub(crate) const LISTEN_BACKLOG: u32 = 1024;

/// A listener on `addr` with [`LISTEN_BACKLOG`] (and `SO_REUSEADDR` on Unix, as `TcpListener::bind`
/// sets it, so a restart can bind while old connections are in TIME_WAIT).
pub(crate) fn listen(addr: SocketAddr) -> std::io::Result<TcpListener> {
    let socket = if addr.is_ipv4() { tokio::net::TcpSocket::new_v4()? } else { tokio::net::TcpSocket::new_v6()? };
    #[cfg(unix)]
    socket.set_reuseaddr(true)?;
    socket.bind(addr)?;
    socket.listen(LISTEN_BACKLOG)
}

/// Pause after a failed `accept` (for example out of file descriptors) before trying again.
const ACCEPT_RETRY: Duration = Duration::from_millis(100);

/// A bound player listener and how it accepts.
pub(crate) struct BoundListener {
    pub(crate) transport: Transport,
    pub(crate) listener: TcpListener,
    pub(crate) accept: Arc<Accept>,
    pub(crate) banner: String,
    /// `moonbridge_connections_accepted_total` of this transport.
    pub(crate) accepted: IntCounter,
}

/// The startup line of a listener, in the configuration's own terms.
pub(crate) fn banner(l: &Listener, addr: SocketAddr) -> String {
    let mut b = format!("listening {} {addr}", l.transport());
    match &l.kind {
        ListenerKind::Tcp { proxy_header } => {
            if proxy_header.is_some() {
                b.push_str(" proxy_protocol=v1,v2");
            }
        }
        ListenerKind::Ws(ws) | ListenerKind::Wss(ws, _) => {
            b.push_str(&format!(" path={}", ws.path));
            if ws.proxy_header {
                b.push_str(" proxy_protocol=v1,v2");
            }
            if matches!(l.kind, ListenerKind::Wss(..)) {
                b.push_str(&format!(" tls={TLS_LIBRARY} versions={TLS_VERSIONS} alpn=http/1.1"));
            }
            match ws.ping_interval {
                Some(i) => b.push_str(&format!(" ping={}s", i.as_secs())),
                None => b.push_str(" ping=off"),
            }
            if !ws.trusted.is_empty() {
                b.push_str(&format!(" real_ip={} trusted={}", ws.real_ip_header.name(), ws.trusted));
            }
        }
    }
    b
}

/// Accepts on one listener until `token` is cancelled (the listening socket closes then); each connection's
/// session runs on `workers` when there are (thread-per-core), else on this runtime, and stops with `sessions`.
pub(crate) async fn accept_loop(
    l: BoundListener,
    state: Arc<ProxyState>,
    (token, sessions): (CancellationToken, CancellationToken),
    tracker: TaskTracker,
    workers: Option<Arc<Workers>>,
) {
    loop {
        let accepted = tokio::select! {
            r = l.listener.accept() => r,
            () = token.cancelled() => return,
        };
        let (stream, peer) = match accepted {
            Ok(a) => a,
            Err(e) => {
                if let Some(suppressed) = state.limit_log.allow() {
                    warn!(suppressed, "accept failed: {e}");
                }
                tokio::select! {
                    () = tokio::time::sleep(ACCEPT_RETRY) => continue,
                    () = token.cancelled() => return,
                }
            }
        };
        l.accepted.inc();
        let Some(permit) = state.conn_limit.try_acquire() else {
            state.metrics.refused(RefusedReason::MaxConnections);
            if let Some(suppressed) = state.limit_log.allow() {
                warn!(suppressed, client = %peer.ip(), "max_connections ({}) reached: closing new connection", state.live().tunables.limits.max_connections);
            }
            continue;
        };
        // A WebSocket player that connects directly (not through a trusted proxy, no PROXY header) is
        // rate-limited by its TCP address here, before the TLS handshake and the upgrade it would otherwise cost;
        // players behind a trusted proxy or a balancer's PROXY header are limited by their real address once it
        // is known, and TCP players after their handshake (so they read why in a Login Disconnect).
        let live = state.live();
        let checked = match &*l.accept {
            Accept::Ws(ws) | Accept::Wss(ws, _) => !ws.proxy_header && !ws.trusted.contains(peer.ip()),
            Accept::Tcp { .. } => false,
        };
        if checked && !state.rate.allow(&live.tunables.rate_limits, peer.ip(), Bucket::Connection) {
            state.metrics.refused(RefusedReason::RateLimit);
            if let Some(suppressed) = state.limit_log.allow() {
                warn!(suppressed, client = %peer.ip(), "rate_limits.connections_per_second reached: closing new connection before its handshake");
            }
            continue;
        }
        let _ = stream.set_nodelay(true);
        if live.tunables.lanes.on() {
            crate::wire::bound_unsent(&stream);
        }
        let (slot, evicted) = state.handshaking.enter();
        if evicted {
            if let Some(suppressed) = state.limit_log.allow() {
                warn!(
                    suppressed,
                    "max_handshaking ({}) reached: closed the connection waiting longest in the handshake",
                    state.live().tunables.limits.max_handshaking
                );
            }
        }
        let id = state.next_id.fetch_add(1, Ordering::Relaxed);
        let span = info_span!("conn", id, peer = %peer, via = %l.transport);
        let draining = state.draining.load(Ordering::Relaxed);
        let stage = state.metrics.stage(l.transport, draining);
        let conn = Conn {
            state: Arc::clone(&state),
            slot,
            token: sessions.clone(),
            peer,
            stage,
            live,
            rate_checked: checked,
            draining,
        };
        let accept = Arc::clone(&l.accept);
        let session = move |stream| {
            async move {
                let _permit = permit;
                conn.serve(stream, &accept).await;
            }
            .instrument(span)
        };
        match &workers {
            Some(w) => w.spawn(&tracker, stream, session),
            None => {
                tracker.spawn(session(stream));
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The backlog the kernel reports for a player listener (`ss`, from iproute2: a listening socket's Send-Q
    /// is its backlog) is [`LISTEN_BACKLOG`], or `net.core.somaxconn` when that is lower.
    #[tokio::test]
    async fn player_listeners_ask_for_the_documented_backlog() {
        let l = listen("127.0.0.1:0".parse().unwrap()).unwrap();
        let port = l.local_addr().unwrap().port();
        let out = std::process::Command::new("ss")
            .args(["-Hltn", &format!("sport = :{port}")])
            .output()
            .expect("ss (iproute2) runs");
        let text = String::from_utf8_lossy(&out.stdout);
        // State, Recv-Q, Send-Q, local address, peer address.
        let backlog: u32 = text.split_whitespace().nth(2).and_then(|v| v.parse().ok()).expect("a listener line");
        let somaxconn: u32 = std::fs::read_to_string("/proc/sys/net/core/somaxconn").unwrap().trim().parse().unwrap();
        assert_eq!(backlog, LISTEN_BACKLOG.min(somaxconn), "ss said: {text}");
        assert!(backlog > 128, "more than the standard library's 128 (somaxconn {somaxconn})");
    }
}
