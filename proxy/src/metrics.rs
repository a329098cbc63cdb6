//! The proxy's Prometheus metrics (`docs/operations.md` lists each with its type, labels and meaning).
//!
//! Built on the `prometheus` crate (tikv/rust-prometheus) and exposed in the Prometheus text format 0.0.4 by
//! [`crate::ops`]. Label values are a small fixed set (transport, stage, reason, outcome, backend name,
//! direction, TLS version), so the number of series is bounded by the configuration, never by players.
//! Hot paths hold resolved children (one relaxed atomic add per relay batch); label lookups happen at most once
//! per connection.

use std::sync::atomic::{AtomicI64, AtomicU8, Ordering};
use std::sync::Arc;
use std::time::Duration;

use prometheus::{
    Encoder, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec, IntGauge, IntGaugeVec, Opts, Registry,
    TextEncoder,
};

use crate::labels::{
    DrainArrival, DrainMove, HandshakeFailure, LoginOutcome, RefusedReason, ResumeOutcome, StreamDirection, TlsVersion,
    TransferOutcome, Unfollowed,
};
use crate::transport::Transport;
use crate::unfollowed::UnfollowedCounter;

mod network;
pub(crate) use network::NetworkMetrics;

/// Buckets of `moonbridge_backend_connect_seconds`, in seconds: 0.5 ms to about 8 s, doubling.
const CONNECT_BUCKETS: [f64; 15] =
    [0.0005, 0.001, 0.002, 0.004, 0.008, 0.016, 0.032, 0.064, 0.128, 0.256, 0.512, 1.024, 2.048, 4.096, 8.192];

/// Every listener transport, in the order of [`Metrics::stages`].
const TRANSPORTS: [Transport; 3] = [Transport::Tcp, Transport::Ws, Transport::Wss];

/// Where a session is (the `stage` label of `moonbridge_sessions`).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub(crate) enum Stage {
    /// From accept to a complete handshake (and Login Start): PROXY header, TLS, HTTP upgrade included.
    Handshake = 0,
    /// A server-list status exchange or a legacy ping.
    Status = 1,
    /// Routing, online-mode authentication and the backend's login.
    Login = 2,
    /// Relaying between the player and the backend.
    Play = 3,
}

impl Stage {
    const ALL: [Stage; 4] = [Stage::Handshake, Stage::Status, Stage::Login, Stage::Play];

    fn label(self) -> &'static str {
        match self {
            Self::Handshake => "handshake",
            Self::Status => "status",
            Self::Login => "login",
            Self::Play => "play",
        }
    }
}

/// One backend's series, resolved once.
#[derive(Clone, Debug)]
pub(crate) struct BackendMetrics {
    /// Bytes from the player to the backend.
    pub(crate) to_backend: IntCounter,
    /// Bytes from the backend to the player.
    pub(crate) to_player: IntCounter,
    connect_seconds: Histogram,
    connect_failures: IntCounter,
    /// `moonbridge_unfollowed_streams_total`.
    pub(crate) unfollowed: UnfollowedCounter,
    /// `moonbridge_urgent_delay_seconds`.
    pub(crate) urgent_delay: Histogram,
    /// `moonbridge_lane_queued_bytes`.
    pub(crate) lane_queued: IntGauge,
}

impl BackendMetrics {
    /// Records one TCP connect attempt to this backend.
    pub(crate) fn connected(&self, took: Duration, ok: bool) {
        if ok {
            self.connect_seconds.observe(took.as_secs_f64());
        } else {
            self.connect_failures.inc();
        }
    }
}

/// WebSocket counters the relay bumps.
#[derive(Clone, Debug)]
pub(crate) struct WsMetrics {
    /// Binary messages received from players.
    pub(crate) messages_in: IntCounter,
    /// Binary messages sent to players.
    pub(crate) messages_out: IntCounter,
    /// Bytes of WebSocket frames read from and written to players (headers and payloads, before TLS).
    pub(crate) bytes_in: IntCounter,
    pub(crate) bytes_out: IntCounter,
    /// Keepalive Pings sent.
    pub(crate) pings_sent: IntCounter,
    /// Players closed (1001) after three ping intervals without receiving anything.
    pub(crate) silent_closed: IntCounter,
    /// zstd contexts freed after a quiet spell (`moonbridge.v2.zstd`, docs/carriage.md "Quiet spells").
    pub(crate) zstd_freed: IntCounter,
}

/// Every metric of one proxy instance, in its own registry.
#[derive(Debug)]
pub(crate) struct Metrics {
    registry: Registry,
    accepted: IntCounterVec,
    refused: IntCounterVec,
    /// `moonbridge_sessions` of each transport and [`Stage`], at `transport_index * 4 + stage`.
    stages: Vec<IntGauge>,
    /// An unregistered gauge [`StageGauge`] falls back to if an index were ever out of range.
    stage_fallback: IntGauge,
    handshake_failures: IntCounterVec,
    logins: IntCounterVec,
    bytes: IntCounterVec,
    connect_seconds: HistogramVec,
    connect_failures: IntCounterVec,
    tls_handshakes: IntCounterVec,
    resumes: IntCounterVec,
    transfers: IntCounterVec,
    drain_moves: IntCounterVec,
    drain_arrivals: IntCounterVec,
    /// Connections accepted while the instance drained that are in the handshake or login stage (not exposed).
    late_logging_in: AtomicI64,
    unfollowed: IntCounterVec,
    /// `moonbridge_transfer_seconds`: from a transfer's request to the new backend's Join Game.
    pub(crate) transfer_seconds: Histogram,
    urgent_delay: Histogram,
    lane_queued: IntGauge,
    /// `moonbridge_transfer_handovers_total`: sessions whose relay called in the transfer layer.
    pub(crate) transfer_handovers: IntCounter,
    pub(crate) tls_reloads_ok: IntCounter,
    pub(crate) tls_reloads_kept: IntCounter,
    pub(crate) ws: WsMetrics,
}

/// Registers `c` in `r` and returns it.
fn reg<C: prometheus::core::Collector + Clone + 'static>(r: &Registry, c: C) -> prometheus::Result<C> {
    r.register(Box::new(c.clone()))?;
    Ok(c)
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> prometheus::Result<IntCounterVec> {
    reg(r, IntCounterVec::new(Opts::new(name, help), labels)?)
}

impl Metrics {
    /// Creates every metric, with the process collector (CPU, memory, file descriptors, threads).
    ///
    /// # Errors
    /// Only for an invalid or duplicate metric definition (constants here, checked by a unit test).
    pub(crate) fn new() -> prometheus::Result<Self> {
        let r = Registry::new();
        r.register(Box::new(prometheus::process_collector::ProcessCollector::for_self()))?;
        let accepted = counter_vec(
            &r,
            "moonbridge_connections_accepted_total",
            "Player connections accepted, by listener transport.",
            &["transport"],
        )?;
        let refused = counter_vec(
            &r,
            "moonbridge_connections_refused_total",
            "Player connections refused, by reason (max_connections, untrusted_proxy_peer, rate_limit).",
            &["reason"],
        )?;
        let sessions = reg(
            &r,
            IntGaugeVec::new(
                Opts::new(
                    "moonbridge_sessions",
                    "Open player connections, by listener transport and stage (handshake, status, login, play).",
                ),
                &["transport", "stage"],
            )?,
        )?;
        let stages = TRANSPORTS
            .iter()
            .flat_map(|t| Stage::ALL.map(|s| sessions.with_label_values(&[&t.to_string(), s.label()])))
            .collect();
        let handshake_failures = counter_vec(
            &r,
            "moonbridge_handshake_failures_total",
            "Connections that ended before a complete handshake, by reason.",
            &["reason"],
        )?;
        let logins = counter_vec(&r, "moonbridge_logins_total", "Login attempts, by outcome.", &["outcome"])?;
        let bytes = counter_vec(
            &r,
            "moonbridge_relayed_bytes_total",
            "Minecraft stream bytes relayed, by backend and direction (to_backend, to_player).",
            &["backend", "direction"],
        )?;
        let connect_seconds = reg(
            &r,
            HistogramVec::new(
                HistogramOpts::new("moonbridge_backend_connect_seconds", "Time to open a TCP connection to a backend.")
                    .buckets(CONNECT_BUCKETS.to_vec()),
                &["backend"],
            )?,
        )?;
        let connect_failures = counter_vec(
            &r,
            "moonbridge_backend_connect_failures_total",
            "Failed TCP connections to a backend (refused, unreachable, timed out).",
            &["backend"],
        )?;
        let tls_handshakes = counter_vec(
            &r,
            "moonbridge_tls_handshakes_total",
            "Completed TLS handshakes on wss listeners, by protocol version.",
            &["version"],
        )?;
        let resumes = counter_vec(
            &r,
            "moonbridge_resumes_total",
            "Carriage v2 resumes after a dropped WebSocket, by outcome (resumed, refused_*, expired).",
            &["outcome"],
        )?;
        let transfers = counter_vec(
            &r,
            "moonbridge_transfers_total",
            "Server transfers, by outcome (moved, refused, failed, fallback_failed).",
            &["outcome"],
        )?;
        let drain_moves = counter_vec(
            &r,
            "moonbridge_drain_moves_total",
            "Players a draining instance moved to another instance of the network, by outcome (moved, failed, \
             not_movable, sent_on).",
            &["outcome"],
        )?;
        let drain_arrivals = counter_vec(
            &r,
            "moonbridge_drain_arrivals_total",
            "Players who came here from a draining instance, by outcome (moved, refused); counted where they arrive.",
            &["outcome"],
        )?;
        let transfer_seconds = reg(
            &r,
            Histogram::with_opts(
                HistogramOpts::new(
                    "moonbridge_transfer_seconds",
                    "Server transfers that moved the player: from the request to the new backend's Join Game.",
                )
                .buckets(vec![0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0]),
            )?,
        )?;
        let urgent_delay = reg(
            &r,
            Histogram::with_opts(
                HistogramOpts::new(
                    "moonbridge_urgent_delay_seconds",
                    "How long urgent-lane frames waited in the proxy's queue (per write that carried some).",
                )
                .buckets(vec![0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 10.0]),
            )?,
        )?;
        let lane_queued = reg(
            &r,
            IntGauge::new("moonbridge_lane_queued_bytes", "Backend bytes queued in the players' lanes, all players.")?,
        )?;
        let transfer_handovers = reg(
            &r,
            IntCounter::new(
                "moonbridge_transfer_handovers_total",
                "Sessions whose relay handed the backend connection to the transfer layer (at their first switch).",
            )?,
        )?;
        let reloads = counter_vec(
            &r,
            "moonbridge_tls_certificate_reloads_total",
            "Certificate reloads after the files changed, by result (ok, kept_previous).",
            &["result"],
        )?;
        let ws = counter_vec(
            &r,
            "moonbridge_ws_messages_total",
            "WebSocket Binary messages, by direction (from_player, to_player).",
            &["direction"],
        )?;
        let ws_bytes = counter_vec(
            &r,
            "moonbridge_ws_bytes_total",
            "Bytes of WebSocket frames (headers and payloads, compressed or not, before TLS), by direction \
             (from_player, to_player).",
            &["direction"],
        )?;
        let pings = reg(&r, IntCounter::new("moonbridge_ws_pings_sent_total", "Keepalive Pings sent to players.")?)?;
        let silent = reg(
            &r,
            IntCounter::new(
                "moonbridge_ws_silent_peers_closed_total",
                "WebSocket players closed (1001) after three ping intervals without receiving anything.",
            )?,
        )?;
        let zstd_freed = reg(
            &r,
            IntCounter::new(
                "moonbridge_ws_zstd_contexts_freed_total",
                "zstd contexts (moonbridge.v2.zstd) freed after a quiet spell, both directions.",
            )?,
        )?;
        let unfollowed = counter_vec(
            &r,
            "moonbridge_unfollowed_streams_total",
            "Play streams whose frames the proxy stopped following, by direction and reason (docs/modpacks.md).",
            &["direction", "reason"],
        )?;
        for d in StreamDirection::TEXTS {
            for reason in Unfollowed::TEXTS {
                let _ = unfollowed.with_label_values(&[d, reason]);
            }
        }
        // Known label values start at 0, so every series exists from the first scrape (rates and dashboards
        // need no special case for "never happened").
        for t in TRANSPORTS {
            let _ = accepted.with_label_values(&[&t.to_string()]);
        }
        for (family, values) in [
            (&refused, RefusedReason::TEXTS),
            (&handshake_failures, HandshakeFailure::TEXTS),
            (&logins, LoginOutcome::TEXTS),
            (&tls_handshakes, TlsVersion::TEXTS),
            (&resumes, ResumeOutcome::TEXTS),
            (&transfers, TransferOutcome::TEXTS),
            (&drain_moves, DrainMove::TEXTS),
            (&drain_arrivals, DrainArrival::TEXTS),
        ] {
            for v in values {
                let _ = family.with_label_values(&[v]);
            }
        }
        Ok(Self {
            accepted,
            refused,
            stages,
            stage_fallback: IntGauge::new("moonbridge_unused", "-")?,
            handshake_failures,
            logins,
            bytes,
            connect_seconds,
            connect_failures,
            tls_handshakes,
            resumes,
            transfers,
            drain_moves,
            drain_arrivals,
            late_logging_in: AtomicI64::new(0),
            unfollowed,
            transfer_seconds,
            urgent_delay,
            lane_queued,
            transfer_handovers,
            tls_reloads_ok: reloads.with_label_values(&["ok"]),
            tls_reloads_kept: reloads.with_label_values(&["kept_previous"]),
            ws: WsMetrics {
                messages_in: ws.with_label_values(&["from_player"]),
                messages_out: ws.with_label_values(&["to_player"]),
                bytes_in: ws_bytes.with_label_values(&["from_player"]),
                bytes_out: ws_bytes.with_label_values(&["to_player"]),
                pings_sent: pings,
                silent_closed: silent,
                zstd_freed,
            },
            registry: r,
        })
    }

    /// The series of backend `name`.
    pub(crate) fn backend(&self, name: &str) -> BackendMetrics {
        BackendMetrics {
            to_backend: self.bytes.with_label_values(&[name, "to_backend"]),
            to_player: self.bytes.with_label_values(&[name, "to_player"]),
            connect_seconds: self.connect_seconds.with_label_values(&[name]),
            connect_failures: self.connect_failures.with_label_values(&[name]),
            unfollowed: UnfollowedCounter(self.unfollowed.clone()),
            urgent_delay: self.urgent_delay.clone(),
            lane_queued: self.lane_queued.clone(),
        }
    }

    /// The accepted-connections counter of a listener transport.
    pub(crate) fn accepted(&self, transport: Transport) -> IntCounter {
        self.accepted.with_label_values(&[&transport.to_string()])
    }

    /// `moonbridge_unfollowed_streams_total`.
    pub(crate) fn unfollowed(&self) -> UnfollowedCounter {
        UnfollowedCounter(self.unfollowed.clone())
    }

    /// Counts a connection refused before any protocol.
    pub(crate) fn refused(&self, reason: RefusedReason) {
        self.refused.with_label_values(&[reason.as_str()]).inc();
    }

    /// Counts a connection that ended in the handshake stage.
    pub(crate) fn handshake_failed(&self, reason: HandshakeFailure) {
        self.handshake_failures.with_label_values(&[reason.as_str()]).inc();
    }

    /// Counts a resume attempt (or a session whose window passed) by outcome.
    pub(crate) fn resume(&self, outcome: ResumeOutcome) {
        self.resumes.with_label_values(&[outcome.as_str()]).inc();
    }

    /// Connections accepted before the instance began draining that are in the handshake or login stage: a
    /// drain waits for their logins (docs/network.md, "Drain").
    pub(crate) fn early_logging_in(&self) -> i64 {
        self.logging_in() - self.late_logging_in.load(Ordering::Relaxed)
    }

    /// Connections in the handshake or login stage, every transport's.
    pub(crate) fn logging_in(&self) -> i64 {
        let stages = Stage::ALL.len();
        let counted = |i: &usize| [Stage::Handshake as usize, Stage::Login as usize].contains(&(i % stages));
        self.stages.iter().enumerate().filter(|(i, _)| counted(i)).map(|(_, g)| g.get()).sum()
    }

    /// Counts a drain move by outcome.
    pub(crate) fn drain_move(&self, outcome: DrainMove) {
        self.drain_moves.with_label_values(&[outcome.as_str()]).inc();
    }

    /// Counts a player who came here from a draining instance, by outcome.
    pub(crate) fn drain_arrival(&self, outcome: DrainArrival) {
        self.drain_arrivals.with_label_values(&[outcome.as_str()]).inc();
    }

    /// Counts a server transfer by outcome.
    pub(crate) fn transfer(&self, outcome: TransferOutcome) {
        self.transfers.with_label_values(&[outcome.as_str()]).inc();
    }

    /// Counts a login by outcome.
    pub(crate) fn login(&self, outcome: LoginOutcome) {
        self.logins.with_label_values(&[outcome.as_str()]).inc();
    }

    /// Counts a completed TLS handshake.
    pub(crate) fn tls_handshake(&self, version: TlsVersion) {
        self.tls_handshakes.with_label_values(&[version.as_str()]).inc();
    }

    /// A new connection's stage gauge on a `transport` listener, starting in [`Stage::Handshake`]; `late`: the
    /// connection was accepted while the instance drained (a drain does not wait for its handshake or login:
    /// [`Metrics::early_logging_in`]).
    pub(crate) fn stage(self: &Arc<Self>, transport: Transport, late: bool) -> StageGauge {
        let base = TRANSPORTS.iter().position(|t| *t == transport).unwrap_or(0) * Stage::ALL.len();
        let current = AtomicU8::new(Stage::Handshake as u8);
        let g = StageGauge { metrics: Arc::clone(self), base, current, late };
        g.gauge(Stage::Handshake as u8).inc();
        if late {
            self.late_logging_in.fetch_add(1, Ordering::Relaxed);
        }
        g
    }

    /// The exposition in the Prometheus text format 0.0.4.
    pub(crate) fn render(&self) -> String {
        let mut out = Vec::with_capacity(16 * 1024);
        let _ = TextEncoder::new().encode(&self.registry.gather(), &mut out);
        String::from_utf8(out).unwrap_or_default()
    }
}

/// A connection's place in `moonbridge_sessions`: counted in one stage at a time, and in none once dropped.
#[derive(Debug)]
pub(crate) struct StageGauge {
    metrics: Arc<Metrics>,
    /// The first of its transport's gauges in [`Metrics::stages`].
    base: usize,
    current: AtomicU8,
    /// Accepted while the instance drained: also counted in [`Metrics::late_logging_in`] while in the
    /// handshake or login stage.
    late: bool,
}

impl StageGauge {
    fn gauge(&self, stage: u8) -> &IntGauge {
        // The index is always in range (transport position × 4 + a stage below 4); the fallback is unused.
        self.metrics.stages.get(self.base + usize::from(stage)).unwrap_or(&self.metrics.stage_fallback)
    }

    /// Moves the connection to `stage`.
    pub(crate) fn set(&self, stage: Stage) {
        let old = self.current.swap(stage as u8, Ordering::Relaxed);
        if old != stage as u8 {
            self.gauge(old).dec();
            self.gauge(stage as u8).inc();
            if self.late {
                let change = i64::from(logging_in(stage as u8)) - i64::from(logging_in(old));
                self.metrics.late_logging_in.fetch_add(change, Ordering::Relaxed);
            }
        }
    }
}

/// True for the stages a drain waits for: handshake and login.
fn logging_in(stage: u8) -> bool {
    stage == Stage::Handshake as u8 || stage == Stage::Login as u8
}

impl Drop for StageGauge {
    fn drop(&mut self) {
        let current = self.current.load(Ordering::Relaxed);
        self.gauge(current).dec();
        if self.late && logging_in(current) {
            self.metrics.late_logging_in.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_metric_registers_and_renders() {
        let m = Arc::new(Metrics::new().unwrap());
        let b = m.backend("survival");
        b.connected(Duration::from_millis(3), true);
        b.connected(Duration::from_millis(3), false);
        b.to_backend.inc_by(10);
        m.login(LoginOutcome::PassthroughOk);
        let stage = m.stage(Transport::Ws, false);
        stage.set(Stage::Play);
        let text = m.render();
        for line in [
            "moonbridge_sessions{stage=\"play\",transport=\"ws\"} 1",
            "moonbridge_sessions{stage=\"handshake\",transport=\"ws\"} 0",
            "moonbridge_relayed_bytes_total{backend=\"survival\",direction=\"to_backend\"} 10",
            "moonbridge_backend_connect_failures_total{backend=\"survival\"} 1",
            "moonbridge_backend_connect_seconds_count{backend=\"survival\"} 1",
            "moonbridge_logins_total{outcome=\"passthrough_ok\"} 1",
            "moonbridge_connections_accepted_total{transport=\"wss\"} 0",
            "moonbridge_ws_pings_sent_total 0",
        ] {
            assert!(text.lines().any(|l| l == line), "{line} missing in:\n{text}");
        }
        assert!(text.contains("process_open_fds "), "process metrics: {text}");
        drop(stage);
        assert!(m.render().lines().any(|l| l == "moonbridge_sessions{stage=\"play\",transport=\"ws\"} 0"));
    }

    /// A drain waits for the logins it began with: connections accepted while draining are not counted, in any
    /// stage (a status ping or a carried session of theirs does not stand in for an early login either).
    #[test]
    fn early_logging_in_leaves_out_connections_accepted_while_draining() {
        let m = Arc::new(Metrics::new().unwrap());
        let early = m.stage(Transport::Tcp, false);
        let late: Vec<_> = [Transport::Ws, Transport::Wss].map(|t| m.stage(t, true)).into();
        assert_eq!((m.logging_in(), m.early_logging_in()), (3, 1));
        late[0].set(Stage::Status);
        late[1].set(Stage::Play);
        assert_eq!((m.logging_in(), m.early_logging_in()), (1, 1), "the early login is still waited for");
        late[1].set(Stage::Login);
        assert_eq!(m.early_logging_in(), 1);
        early.set(Stage::Play);
        assert_eq!(m.early_logging_in(), 0);
        drop(late);
        drop(early);
        assert_eq!((m.logging_in(), m.early_logging_in()), (0, 0));
    }

    #[test]
    fn logging_in_counts_the_handshake_and_login_stages_of_every_transport() {
        let m = Arc::new(Metrics::new().unwrap());
        let gauges: Vec<_> = [Transport::Tcp, Transport::Ws, Transport::Wss].map(|t| m.stage(t, false)).into();
        assert_eq!(m.logging_in(), 3, "a new connection is in its handshake");
        gauges[0].set(Stage::Login);
        gauges[1].set(Stage::Status);
        assert_eq!(m.logging_in(), 2);
        gauges[2].set(Stage::Play);
        gauges[0].set(Stage::Play);
        assert_eq!(m.logging_in(), 0, "status and play are not logins");
        drop(gauges);
        assert_eq!(m.logging_in(), 0);
    }
}
