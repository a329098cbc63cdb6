//! `[network]`'s metrics (`moonbridge_network_*`), registered in the instance's registry only when it joins a
//! network (docs/operations.md lists them).

use prometheus::{IntCounter, IntCounterVec, IntGauge};

use super::{counter_vec, reg, Metrics};
use crate::labels::{BadEntry, DuplicateAction, LeaseResult, LinkOutcome, LinkRefused, LinkRequest, RedisCause};

/// `[network]`'s metrics (registered only when the instance is part of a network).
#[derive(Clone, Debug)]
pub(crate) struct NetworkMetrics {
    /// `moonbridge_network_instances`: live instances of the network this one sees, itself included.
    pub(crate) instances: IntGauge,
    /// `moonbridge_network_players`: players in Play on the whole network.
    pub(crate) players: IntGauge,
    /// `moonbridge_network_redis_up`: 1 when Redis answered the last renewal.
    pub(crate) redis_up: IntGauge,
    leases: IntCounterVec,
    duplicates: IntCounterVec,
    link_requests: IntCounterVec,
    links_refused: IntCounterVec,
    bad_entries: IntCounterVec,
    redis_errors: IntCounterVec,
    /// `moonbridge_network_link_sessions`: resumed sessions this instance carries to their owner now.
    pub(crate) link_sessions: IntGauge,
    /// `moonbridge_network_link_bytes_total{direction="to_owner"}`.
    pub(crate) link_bytes_to_peer: IntCounter,
    /// `moonbridge_network_link_bytes_total{direction="from_owner"}`.
    pub(crate) link_bytes_from_peer: IntCounter,
}

impl NetworkMetrics {
    /// Counts a lease renewal.
    pub(crate) fn lease(&self, result: LeaseResult) {
        self.leases.with_label_values(&[result.as_str()]).inc();
    }

    /// Counts a duplicate login.
    pub(crate) fn duplicate(&self, action: DuplicateAction) {
        self.duplicates.with_label_values(&[action.as_str()]).inc();
    }

    /// Counts a request another instance made over a link.
    pub(crate) fn link_request(&self, request: LinkRequest, outcome: LinkOutcome) {
        self.link_requests.with_label_values(&[request.as_str(), outcome.as_str()]).inc();
    }

    /// Counts a connection to `peer_bind` closed before its opening was read.
    pub(crate) fn link_refused(&self, reason: LinkRefused) {
        self.links_refused.with_label_values(&[reason.as_str()]).inc();
    }

    /// Counts a lease renewal that failed, by why.
    pub(crate) fn redis_error(&self, cause: RedisCause) {
        self.redis_errors.with_label_values(&[cause.as_str()]).inc();
    }

    /// Counts an entry read from Redis that was skipped.
    pub(crate) fn bad_entry(&self, kind: BadEntry) {
        self.bad_entries.with_label_values(&[kind.as_str()]).inc();
    }
}

impl Metrics {
    /// Registers `[network]`'s metrics (once, when the instance joins a network).
    pub(crate) fn network(&self) -> prometheus::Result<NetworkMetrics> {
        let r = &self.registry;
        let gauge = |name: &str, help: &str| reg(r, IntGauge::new(name, help)?);
        let leases = counter_vec(
            r,
            "moonbridge_network_leases_total",
            "Lease renewals in Redis (every 2 s), by result (renewed, missed).",
            &["result"],
        )?;
        let duplicates = counter_vec(
            r,
            "moonbridge_network_duplicate_logins_total",
            "Logins of a name already playing on the network, by action (kicked_existing, refused_new).",
            &["action"],
        )?;
        let bytes = counter_vec(
            r,
            "moonbridge_network_link_bytes_total",
            "Bytes of resumed sessions carried over instance links to their owner, by direction (to_owner, \
             from_owner).",
            &["direction"],
        )?;
        let link_requests = counter_vec(
            r,
            "moonbridge_network_link_requests_total",
            "Requests other instances made over instance links, by request (kick, move, resume) and outcome \
             (done, refused).",
            &["request", "outcome"],
        )?;
        let links_refused = counter_vec(
            r,
            "moonbridge_network_links_refused_total",
            "Connections to peer_bind closed before their opening was read, by reason (per_source, openings, \
             links).",
            &["reason"],
        )?;
        let bad_entries = counter_vec(
            r,
            "moonbridge_network_bad_entries_total",
            "Entries read from Redis that were skipped, by kind (unsigned_instance, malformed_instance, \
             wrong_type_players, malformed_player, wrong_type_claim, wrong_type_index, unsigned_claim, oversized).",
            &["kind"],
        )?;
        for request in LinkRequest::TEXTS {
            for outcome in LinkOutcome::TEXTS {
                let _ = link_requests.with_label_values(&[request, outcome]);
            }
        }
        for v in LinkRefused::TEXTS {
            let _ = links_refused.with_label_values(&[v]);
        }
        let redis_errors = counter_vec(
            r,
            "moonbridge_network_redis_errors_total",
            "Lease renewals that failed, by cause (auth, tls, timeout, connection_refused, io, out_of_memory, \
             read_only, no_permission, other).",
            &["cause"],
        )?;
        for v in RedisCause::TEXTS {
            let _ = redis_errors.with_label_values(&[v]);
        }
        for v in BadEntry::TEXTS {
            let _ = bad_entries.with_label_values(&[v]);
        }
        for v in LeaseResult::TEXTS {
            let _ = leases.with_label_values(&[v]);
        }
        for v in DuplicateAction::TEXTS {
            let _ = duplicates.with_label_values(&[v]);
        }
        Ok(NetworkMetrics {
            instances: gauge("moonbridge_network_instances", "Live instances of the network seen, this one included.")?,
            players: gauge("moonbridge_network_players", "Players in Play on the whole network.")?,
            redis_up: gauge("moonbridge_network_redis_up", "1 when Redis answered the last lease renewal, else 0.")?,
            link_sessions: gauge(
                "moonbridge_network_link_sessions",
                "Resumed sessions this instance carries over instance links to the instance that holds them.",
            )?,
            link_bytes_to_peer: bytes.with_label_values(&["to_owner"]),
            link_bytes_from_peer: bytes.with_label_values(&["from_owner"]),
            leases,
            duplicates,
            link_requests,
            links_refused,
            bad_entries,
            redis_errors,
        })
    }
}
