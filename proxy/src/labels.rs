//! The label values of the proxy's metrics, one closed enum per label (`docs/operations.md` lists them with
//! their meaning). A metric is counted with a variant, never with a string, so a label value that is not in
//! its set does not compile; each enum's `TEXTS` is what [`crate::metrics::Metrics`] exposes at 0 from the start.

/// Declares a label enum: its variants, their label text ([`as_str`](RefusedReason::as_str)) and `TEXTS`.
macro_rules! labels {
    ($(#[$doc:meta])* $name:ident { $($(#[$vdoc:meta])* $variant:ident => $text:literal,)+ }) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
        pub(crate) enum $name {
            $($(#[$vdoc])* $variant,)+
        }

        impl $name {
            /// Every value's label text, in the order they are declared.
            pub(crate) const TEXTS: &'static [&'static str] = &[$($text,)+];

            /// The label value as Prometheus shows it.
            pub(crate) const fn as_str(self) -> &'static str {
                match self {
                    $(Self::$variant => $text,)+
                }
            }
        }

        impl std::fmt::Display for $name {
            fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

labels! {
    /// The `reason` of `moonbridge_connections_refused_total`: why a connection was refused before any
    /// protocol.
    RefusedReason {
        /// `limits.max_connections` reached.
        MaxConnections => "max_connections",
        /// A PROXY header from a peer outside `trusted_proxies`.
        UntrustedProxyPeer => "untrusted_proxy_peer",
        /// `[rate_limits]` of the player's address.
        RateLimit => "rate_limit",
        /// A login at a draining instance from a client that cannot move (TCP, carriage v1, no `MoonBridge-Move`):
        /// told the restart message (docs/network.md, "Drain").
        Draining => "draining",
    }
}

labels! {
    /// The `reason` of `moonbridge_handshake_failures_total`: how a connection ended before its login.
    HandshakeFailure {
        /// `limits.handshake_timeout_seconds` passed.
        Timeout => "timeout",
        /// Its `max_handshaking` slot was taken by a newer connection.
        Evicted => "evicted",
        /// The peer closed.
        Closed => "closed",
        /// The TLS handshake failed.
        Tls => "tls",
        /// The HTTP upgrade was refused.
        BadUpgrade => "bad_upgrade",
        /// A malformed PROXY header.
        BadProxyHeader => "bad_proxy_header",
        /// A malformed frame (Minecraft or WebSocket).
        BadFrame => "bad_frame",
        /// A malformed Login Start.
        BadLoginStart => "bad_login_start",
    }
}

labels! {
    /// The `outcome` of `moonbridge_logins_total`: how a login ended (the `_ok` ones when play began).
    LoginOutcome {
        /// Play began, `auth.mode = "passthrough"`.
        PassthroughOk => "passthrough_ok",
        /// The name is playing elsewhere on the network (`duplicate_login = "refuse_new"`).
        DuplicateRefused => "duplicate_refused",
        /// Play began, `auth.mode = "offline"`.
        OfflineOk => "offline_ok",
        /// Play began, `auth.mode = "online"`.
        OnlineOk => "online_ok",
        /// No route for the handshake's host.
        UnknownHost => "unknown_host",
        /// The handshake could not be forwarded.
        BadHandshake => "bad_handshake",
        /// The backend could not be reached (or written to).
        BackendUnreachable => "backend_unreachable",
        /// The backend closed during the login.
        BackendClosed => "backend_closed",
        /// The backend did not answer within `limits.login_timeout_seconds`.
        BackendTimeout => "backend_timeout",
        /// An online-mode backend behind an online-mode proxy.
        BackendMisconfigured => "backend_misconfigured",
        /// The backend answered with a Login Disconnect.
        BackendRefused => "backend_refused",
        /// The player left during the login.
        PlayerLeft => "player_left",
        /// The player broke the protocol during the login.
        ProtocolError => "protocol_error",
        /// The proxy shut down during the login.
        Shutdown => "shutdown",
        /// `rate_limits.logins_per_minute` of the player's address.
        RateLimited => "rate_limited",
        /// Online mode: the session server did not verify the player.
        OnlineNotVerified => "online_not_verified",
        /// Online mode: the session server could not be asked.
        OnlineSessionServerUnavailable => "online_session_server_unavailable",
        /// Online mode: no Encryption Response in time.
        OnlineEncryptionTimeout => "online_encryption_timeout",
        /// Online mode: a malformed Encryption Response.
        OnlineBadEncryptionResponse => "online_bad_encryption_response",
        /// Online mode: the player left during the encryption.
        OnlinePlayerLeft => "online_player_left",
    }
}

labels! {
    /// The `outcome` of `moonbridge_resumes_total` (carriage v2).
    ResumeOutcome {
        /// The session went on over the new link.
        Resumed => "resumed",
        /// The resume was carried to its owner over an instance link.
        Forwarded => "forwarded",
        /// 4001: no such session.
        RefusedUnknown => "refused_unknown",
        /// 4002: the session's instance is gone (or out of reach).
        RefusedOtherInstance => "refused_other_instance",
        /// 4003: the count is outside the retained bytes.
        RefusedOutOfRange => "refused_out_of_range",
        /// 4004: the token was used already.
        RefusedUsed => "refused_used",
        /// The resume window passed without a resume.
        Expired => "expired",
    }
}

labels! {
    /// The `outcome` of `moonbridge_transfers_total`: how a server transfer (a switch between backends,
    /// `docs/servers.md`) ended.
    TransferOutcome {
        /// The player plays on the new backend (the label keeps its published name).
        Switched => "moved",
        /// The request named no backend of this proxy.
        Refused => "refused",
        /// The new backend did not take the player (`Connect`).
        Failed => "failed",
        /// The fallback did not take a kicked player.
        FallbackFailed => "fallback_failed",
        /// A lost backend's player plays on the fallback.
        Failover => "failover",
        /// The fallback did not take a lost backend's player.
        FailoverFailed => "failover_failed",
    }
}

labels! {
    /// The `outcome` of `moonbridge_drain_moves_total` (players moved off a draining instance,
    /// `docs/network.md`, "Drain").
    DrainMove {
        /// The player plays on through another instance.
        Moved => "moved",
        /// The move was refused or timed out: the player stays until the grace ends.
        Failed => "failed",
        /// A player who cannot be moved: TCP, carriage v1, a client that did not offer moves, online mode.
        NotMovable => "not_movable",
        /// A client that offered moves reached the draining instance (a new session, a `moving` request the
        /// balancer sent back, a resume of a session held elsewhere) and was sent on to connect again (close 4007
        /// for a new session; a request closed without a Close frame) before anything of it started here.
        SentOn => "sent_on",
    }
}

labels! {
    /// The `outcome` of `moonbridge_drain_arrivals_total`: players who came from a draining instance (their
    /// `moving` request), counted on the instance they reach, which lives on (docs/network.md, "Drain").
    DrainArrival {
        /// The player plays on here.
        Moved => "moved",
        /// The move was refused here (close 4006): the player stays on the draining instance.
        Refused => "refused",
    }
}

labels! {
    /// The `result` of `moonbridge_network_leases_total`: a lease renewal in Redis.
    LeaseResult {
        /// Redis answered: the leases live on.
        Renewed => "renewed",
        /// Redis did not answer in time.
        Missed => "missed",
    }
}

labels! {
    /// The `cause` of `moonbridge_network_redis_errors_total`: why a lease renewal failed.
    RedisCause {
        /// Redis refused the password or user (`NOAUTH`, `WRONGPASS`).
        Auth => "auth",
        /// The TLS handshake failed (an untrusted or expired certificate, a name that does not match).
        Tls => "tls",
        /// No answer within the round trip's bound (1 s).
        Timeout => "timeout",
        /// The TCP connection was refused (nothing listens there).
        ConnectionRefused => "connection_refused",
        /// Another I/O failure (the connection dropped, no route).
        Io => "io",
        /// Redis is over `maxmemory` and refuses writes (`OOM`).
        OutOfMemory => "out_of_memory",
        /// A replica that refuses writes (`READONLY`, after a failover).
        ReadOnly => "read_only",
        /// The user may not run a command the network needs (`NOPERM`).
        NoPermission => "no_permission",
        /// Anything else.
        Other => "other",
    }
}

labels! {
    /// The `request` of `moonbridge_network_link_requests_total`: what another instance asked over a link.
    LinkRequest {
        /// End a session whose name logged in elsewhere (`kick_existing`).
        Kick => "kick",
        /// Hand over a drain's player (a `moving` request at the other instance).
        Move => "move",
        /// Serve a resume carried from the instance the player reconnected to.
        Resume => "resume",
        /// Carry out an operator's action (admin API: kick, send, message) on this instance's players.
        Act => "act",
    }
}

labels! {
    /// The `outcome` of `moonbridge_network_link_requests_total`.
    LinkOutcome {
        /// Carried out (the session ended, was handed over or resumed).
        Done => "done",
        /// Refused: no such session here, a bad ticket or token, wrong counts.
        Refused => "refused",
    }
}

labels! {
    /// The `reason` of `moonbridge_network_links_refused_total`: why a connection to `peer_bind` was closed
    /// before its opening was read.
    LinkRefused {
        /// `MAX_OPENINGS_PER_SOURCE` openings from its address were pending.
        PerSource => "per_source",
        /// `MAX_OPENINGS` openings were pending in all.
        Openings => "openings",
        /// `MAX_LINKS` links were open.
        Links => "links",
    }
}

labels! {
    /// The `kind` of `moonbridge_network_bad_entries_total`: an entry in Redis that is not what the network
    /// writes (skipped, and logged through a limiter).
    BadEntry {
        /// An instance entry whose signature does not verify with the network's secret (none, another secret, or
        /// its time passed: a copy of a dead instance's).
        UnsignedInstance => "unsigned_instance",
        /// An instance entry that is not the JSON an instance writes, or whose peer is not `IP:port`.
        MalformedInstance => "malformed_instance",
        /// An instance's player hash holds another Redis type.
        WrongTypePlayers => "wrong_type_players",
        /// A player entry that is not the JSON an instance writes.
        MalformedPlayer => "malformed_player",
        /// A name claim holds another Redis type (it is replaced by the claim being renewed).
        WrongTypeClaim => "wrong_type_claim",
        /// The index of instance ids holds another Redis type (it is deleted; the renewals write it again).
        WrongTypeIndex => "wrong_type_index",
        /// A name claim whose holder is not signed with the network's secret (it is replaced, no session ends).
        UnsignedClaim => "unsigned_claim",
        /// More than is read: over `MAX_INSTANCES` instances, `MAX_PLAYERS_READ` players of one instance, or an
        /// instance entry over `MAX_ENTRY_BYTES`.
        Oversized => "oversized",
    }
}

labels! {
    /// The `action` of `moonbridge_network_duplicate_logins_total`: what `duplicate_login` did.
    DuplicateAction {
        /// The older session was told to go (`kick_existing`).
        KickedExisting => "kicked_existing",
        /// The new login was refused (`refuse_new`).
        RefusedNew => "refused_new",
    }
}

labels! {
    /// The `version` of `moonbridge_tls_handshakes_total`.
    TlsVersion {
        /// TLS 1.2.
        Tls12 => "TLSv1.2",
        /// TLS 1.3.
        Tls13 => "TLSv1.3",
        /// Anything else rustls negotiated.
        Other => "other",
    }
}

labels! {
    /// The `direction` of `moonbridge_unfollowed_streams_total`: which way the stream went that the proxy
    /// stopped following.
    StreamDirection {
        /// The player's stream to the backend.
        ToBackend => "to_backend",
        /// The backend's stream to the player.
        ToPlayer => "to_player",
    }
}

labels! {
    /// The `reason` of `moonbridge_unfollowed_streams_total`: why a Play stream's frames could not be followed
    /// (`docs/modpacks.md`).
    Unfollowed {
        /// A length prefix wider than `limits.max_play_frame_bytes` allows.
        WidePrefix => "wide_prefix",
        /// A frame over `limits.max_play_frame_bytes` (or a Join Game over what the proxy records).
        TooLarge => "too_large",
        /// A frame of length 0.
        Empty => "empty",
        /// A frame whose body does not start with a packet id.
        BadPacketId => "bad_packet_id",
    }
}

impl Unfollowed {
    /// The reason of a framing error.
    pub(crate) fn of(e: moonbridge_protocol::FrameError) -> Self {
        use moonbridge_protocol::FrameError;
        match e {
            FrameError::LengthPrefixTooLong => Self::WidePrefix,
            FrameError::Empty => Self::Empty,
            FrameError::BadPacketId => Self::BadPacketId,
            _ => Self::TooLarge,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn label_texts_are_distinct_within_each_label() {
        fn distinct(texts: &[&str]) {
            let set: std::collections::HashSet<_> = texts.iter().collect();
            assert_eq!(set.len(), texts.len(), "{texts:?}");
        }
        distinct(RefusedReason::TEXTS);
        distinct(HandshakeFailure::TEXTS);
        distinct(LoginOutcome::TEXTS);
        distinct(ResumeOutcome::TEXTS);
        distinct(TransferOutcome::TEXTS);
        distinct(DrainMove::TEXTS);
        distinct(DrainArrival::TEXTS);
        distinct(TlsVersion::TEXTS);
        distinct(LeaseResult::TEXTS);
        distinct(DuplicateAction::TEXTS);
        distinct(LinkRequest::TEXTS);
        distinct(RedisCause::TEXTS);
        distinct(LinkOutcome::TEXTS);
        distinct(LinkRefused::TEXTS);
        distinct(BadEntry::TEXTS);
        distinct(StreamDirection::TEXTS);
        distinct(Unfollowed::TEXTS);
        assert_eq!(LoginOutcome::TEXTS[0], LoginOutcome::PassthroughOk.as_str());
        assert_eq!(TransferOutcome::Switched.as_str(), "moved", "the published label value");
        assert_eq!(LoginOutcome::TEXTS.len(), 20);
        assert_eq!(DrainMove::Failed.to_string(), "failed");
    }
}
