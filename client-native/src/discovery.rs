//! Route discovery: is a server the player typed reachable through MoonBridge?
//!
//! An operator publishes a DNS TXT record `_moonbridge.<host>` whose text is the server's MoonBridge URL
//! (`wss://host[:port]/path`, or `ws://…`), next to the usual A and SRV records. The mod asks this module for
//! the record of every host typed without a port (where vanilla would ask for `_minecraft._tcp.<host>`); a
//! record routes the player through MoonBridge, no record leaves the game vanilla.
//!
//! - The lookup uses the system's DNS servers through hickory-resolver: on Windows those of the network
//!   adapters (hickory's `system-config`, from `GetAdaptersAddresses`); everywhere else the `nameserver` lines
//!   of [`RESOLV_CONF`], read by [`name_servers_from_resolv_conf`]. macOS keeps that file up to date with its
//!   primary resolvers, and reading it needs no macOS SDK framework (hickory's macOS `system-config` links
//!   SystemConfiguration, which a cross-build of the mod jar cannot have). Tests name a DNS server on loopback
//!   instead ([`lookup`]'s `resolver`).
//! - It is bounded: one attempt per server, `timeout` in all; a timeout or any failure is "no route".
//! - Answers are cached for the record's TTL, "no record" (NXDOMAIN or an empty answer) for the negative TTL
//!   of the zone's SOA record, bounded to [`NEGATIVE_TTL_BOUNDS`], and a failed lookup (timeout, server
//!   failure) for [`FAILURE_TTL`], so a server list refresh costs no DNS traffic and no wait while the cache
//!   holds.
//! - A record's character-strings are joined (RFC 1035 §3.3.14: one TXT record may hold several); a record
//!   whose text is not a `ws://` or `wss://` URL is ignored, and the first valid one wins.

use std::collections::HashMap;
use std::net::{IpAddr, SocketAddr};
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use hickory_resolver::config::{NameServerConfig, ResolverConfig, ResolverOpts};
use hickory_resolver::net::runtime::TokioRuntimeProvider;
use hickory_resolver::proto::rr::{RData, RecordType};
use hickory_resolver::TokioResolver;

use crate::error::ClientError;
use crate::target::{Scheme, Target};

/// The label prepended to a host to find its MoonBridge URL.
pub const RECORD_PREFIX: &str = "_moonbridge.";

/// How long "no record" stays cached, at least and at most (the zone's SOA negative TTL within these bounds).
pub const NEGATIVE_TTL_BOUNDS: (Duration, Duration) = (Duration::from_secs(30), Duration::from_secs(3600));

/// How long a failed lookup (timeout, server failure) stays cached: the game does not wait for DNS again.
pub const FAILURE_TTL: Duration = Duration::from_secs(60);

/// The file whose `nameserver` lines name the system's DNS servers outside Windows (resolv.conf(5); on macOS
/// written by the system from its primary network service, see resolver(5)).
pub const RESOLV_CONF: &str = "/etc/resolv.conf";

/// Cached answers per resolver (the system's, or a test's DNS server).
const CACHE_ENTRIES: u64 = 256;

/// Most failed lookups remembered at once (the table is emptied when full).
const MAX_FAILURES: usize = 1024;

/// Resolvers by DNS server (`None`: the system's) and time bound.
type ResolverKey = (Option<SocketAddr>, Duration);

struct Discovery {
    runtime: tokio::runtime::Runtime,
    resolvers: Mutex<HashMap<ResolverKey, Arc<TokioResolver>>>,
    /// Failed lookups: (DNS server, record name) → when to try again.
    failures: Mutex<HashMap<(Option<SocketAddr>, String), std::time::Instant>>,
}

fn discovery() -> Result<&'static Discovery, ClientError> {
    static D: OnceLock<Result<Discovery, String>> = OnceLock::new();
    D.get_or_init(|| {
        // One small background thread serves every lookup of the process (and keeps the resolvers' caches).
        let runtime = tokio::runtime::Builder::new_multi_thread()
            .worker_threads(1)
            .thread_name("moonbridge-dns")
            .enable_all()
            .build()
            .map_err(|e| format!("cannot start the DNS runtime: {e}"))?;
        Ok(Discovery { runtime, resolvers: Mutex::new(HashMap::new()), failures: Mutex::new(HashMap::new()) })
    })
    .as_ref()
    .map_err(|e| ClientError::Io(e.clone()))
}

fn resolver(d: &Discovery, server: Option<SocketAddr>, timeout: Duration) -> Result<Arc<TokioResolver>, ClientError> {
    let mut map = d.resolvers.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(r) = map.get(&(server, timeout)) {
        return Ok(Arc::clone(r));
    }
    let mut builder = match server {
        Some(addr) => builder_for(&[(addr.ip(), addr.port())]),
        // Windows: the network adapters' DNS servers, as hickory's `system-config` reads them.
        #[cfg(windows)]
        None => {
            TokioResolver::builder_tokio().map_err(|e| ClientError::Io(format!("system DNS configuration: {e}")))?
        }
        #[cfg(not(windows))]
        None => builder_for(&system_name_servers()?),
    };
    let opts: &mut ResolverOpts = builder.options_mut();
    opts.timeout = timeout;
    opts.attempts = 1;
    opts.cache_size = CACHE_ENTRIES;
    opts.negative_min_ttl = Some(NEGATIVE_TTL_BOUNDS.0);
    opts.negative_max_ttl = Some(NEGATIVE_TTL_BOUNDS.1);
    let r = Arc::new(builder.build().map_err(|e| ClientError::Io(format!("DNS resolver: {e}")))?);
    map.insert((server, timeout), Arc::clone(&r));
    Ok(r)
}

/// The system's DNS servers outside Windows: [`RESOLV_CONF`]'s, each at port 53.
///
/// # Errors
/// [`ClientError::Io`] when [`RESOLV_CONF`] cannot be read or names no server.
#[cfg(not(windows))]
fn system_name_servers() -> Result<Vec<(IpAddr, u16)>, ClientError> {
    read_resolv_conf(std::path::Path::new(RESOLV_CONF))
}

/// The DNS servers (address, port 53) of the resolv.conf(5) file at `path` ([`name_servers_from_resolv_conf`]).
///
/// # Errors
/// [`ClientError::Io`] naming the file when it cannot be read or names no server.
#[cfg_attr(windows, allow(dead_code))]
fn read_resolv_conf(path: &std::path::Path) -> Result<Vec<(IpAddr, u16)>, ClientError> {
    let io = |e: String| ClientError::Io(format!("{}: {e}", path.display()));
    let text = std::fs::read(path).map_err(|e| io(format!("cannot read it: {e}")))?;
    let servers = name_servers_from_resolv_conf(&text).map_err(|_| io("names no DNS server".into()))?;
    Ok(servers.into_iter().map(|ip| (ip, 53)).collect())
}

/// A resolver builder that asks these DNS servers (address, port), over UDP and then TCP.
fn builder_for(servers: &[(IpAddr, u16)]) -> hickory_resolver::ResolverBuilder<TokioRuntimeProvider> {
    let name_servers = servers
        .iter()
        .map(|&(ip, port)| {
            let mut ns = NameServerConfig::udp_and_tcp(ip);
            for c in &mut ns.connections {
                c.port = port;
            }
            ns
        })
        .collect();
    TokioResolver::builder_with_config(ResolverConfig::from_name_servers(name_servers), TokioRuntimeProvider::default())
}

/// The DNS servers a resolv.conf(5) text names: its `nameserver` lines, in order, at most three (resolv.conf's
/// `MAXNS`, which glibc and macOS's libresolv both honour). An IPv6 address's zone (`fe80::1%en0`) is dropped.
/// Lines the parser does not understand are skipped, as the C resolvers skip them; `search`, `domain` and
/// `options` do not matter here, since the lookup asks for a fully qualified name once per server.
///
/// # Errors
/// [`ClientError::Io`] when the text names no DNS server (glibc would then ask 127.0.0.1; macOS writes a file
/// without `nameserver` lines while it has no network, and there the lookup has nowhere to go).
pub fn name_servers_from_resolv_conf(text: &[u8]) -> Result<Vec<IpAddr>, ClientError> {
    /// resolv.conf's MAXNS.
    const MAX_NAME_SERVERS: usize = 3;
    let (config, _skipped) = resolv_conf::Config::parse_with_errors(text);
    let servers: Vec<IpAddr> = config.nameservers.iter().take(MAX_NAME_SERVERS).map(IpAddr::from).collect();
    if servers.is_empty() {
        return Err(ClientError::Io("resolv.conf names no DNS server".into()));
    }
    Ok(servers)
}

/// True for a host worth a lookup: a DNS name with a dot, not an IP address or `localhost`, at most 253
/// characters.
pub fn is_candidate(host: &str) -> bool {
    let h = host.trim_end_matches('.');
    !h.is_empty()
        && h.len() <= 253
        && h.contains('.')
        && h.parse::<std::net::IpAddr>().is_err()
        && !h.eq_ignore_ascii_case("localhost")
        && h.bytes().all(|b| b.is_ascii_alphanumeric() || b == b'-' || b == b'.' || b == b'_')
}

/// The MoonBridge URL in one TXT record's text, if it is one (`ws://` or `wss://`, valid per [`Target`]).
pub fn url_from_txt(text: &str) -> Option<String> {
    let t = text.trim();
    match Target::parse(t) {
        Ok(target) if matches!(target.scheme, Scheme::Ws | Scheme::Wss) => Some(t.to_owned()),
        _ => None,
    }
}

/// Looks up `_moonbridge.<host>` and returns the MoonBridge URL it names, or `None` when there is no such
/// record, none holds a URL, or `host` is not a candidate ([`is_candidate`]).
///
/// `resolver` names the DNS server to ask (tests run one on loopback); `None` uses the system's. The whole
/// lookup takes at most about `timeout`.
///
/// # Errors
/// [`ClientError::Io`] when the lookup itself failed (timeout, no DNS server, a server failure); callers treat
/// it like `None` and fall back to vanilla.
pub fn lookup(host: &str, resolver_addr: Option<SocketAddr>, timeout: Duration) -> Result<Option<String>, ClientError> {
    if !is_candidate(host) {
        return Ok(None);
    }
    let d = discovery()?;
    let name = format!("{RECORD_PREFIX}{}.", host.trim_end_matches('.').to_ascii_lowercase());
    let failure_key = (resolver_addr, name.clone());
    let failed_until = d.failures.lock().unwrap_or_else(PoisonError::into_inner).get(&failure_key).copied();
    if failed_until.is_some_and(|t| std::time::Instant::now() < t) {
        return Err(ClientError::Io(format!("DNS lookup of {name} failed recently; not retried yet")));
    }
    let r = resolver(d, resolver_addr, timeout)?;
    let looked_up = d.runtime.block_on(async {
        // One bound over the whole exchange, whatever the resolver does internally.
        tokio::time::timeout(timeout + Duration::from_millis(100), r.lookup(name.as_str(), RecordType::TXT)).await
    });
    let failure = |reason: String| {
        let mut f = d.failures.lock().unwrap_or_else(PoisonError::into_inner);
        if f.len() >= MAX_FAILURES {
            f.clear();
        }
        f.insert(failure_key.clone(), std::time::Instant::now() + FAILURE_TTL);
        ClientError::Io(reason)
    };
    let lookup = match looked_up {
        Err(_) => return Err(failure(format!("DNS lookup of {name} timed out after {} ms", timeout.as_millis()))),
        Ok(Err(e)) if e.is_no_records_found() => return Ok(None),
        Ok(Err(e)) => return Err(failure(format!("DNS lookup of {name} failed: {e}"))),
        Ok(Ok(l)) => l,
    };
    for record in lookup.answers() {
        if let RData::TXT(txt) = &record.data {
            let text: String = txt.txt_data.iter().map(|s| String::from_utf8_lossy(s)).collect();
            if let Some(url) = url_from_txt(&text) {
                return Ok(Some(url));
            }
        }
    }
    Ok(None)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn candidates() {
        for h in ["mc.example.com", "mc.example.com.", "play.some-pack.net", "a.b"] {
            assert!(is_candidate(h), "{h}");
        }
        for h in
            ["localhost", "127.0.0.1", "::1", "2001:db8::1", "server", "", "mc example.com", "mc.example.com:25565"]
        {
            assert!(!is_candidate(h), "{h}");
        }
        assert!(!is_candidate(&format!("{}.com", "a".repeat(260))));
    }

    /// The macOS path (and every Unix one): resolv.conf as macOS's configd writes it, and the shapes around it.
    #[test]
    fn resolv_conf_name_servers() {
        let macos = b"#\n# macOS Notice\n#\n# This file is not consulted for DNS hostname resolution, address\n\
            # resolution, or the DNS query routing mechanism used by most processes on\n# this system.\n#\n\
            search lan\nnameserver 192.168.1.1\nnameserver fe80::1%en0\nnameserver 2001:db8::53\n";
        let want: Vec<IpAddr> = vec![
            IpAddr::from([192, 168, 1, 1]),
            IpAddr::from(std::net::Ipv6Addr::new(0xfe80, 0, 0, 0, 0, 0, 0, 1)),
            IpAddr::from(std::net::Ipv6Addr::new(0x2001, 0xdb8, 0, 0, 0, 0, 0, 0x53)),
        ];
        assert_eq!(name_servers_from_resolv_conf(macos).ok(), Some(want));
        // systemd-resolved's stub, options and a line the parser does not know (skipped, as libc skips it).
        let linux = b"nameserver 127.0.0.53\noptions edns0 trust-ad\nbogus line\nsearch -- lan\n";
        assert_eq!(name_servers_from_resolv_conf(linux).ok(), Some(vec![IpAddr::from([127, 0, 0, 53])]));
        // At most three servers (MAXNS), in order.
        let many = b"nameserver 10.0.0.1\nnameserver 10.0.0.2\nnameserver 10.0.0.3\nnameserver 10.0.0.4\n";
        let got = name_servers_from_resolv_conf(many).ok();
        assert_eq!(
            got,
            Some(vec![IpAddr::from([10, 0, 0, 1]), IpAddr::from([10, 0, 0, 2]), IpAddr::from([10, 0, 0, 3])])
        );
        // macOS with no network: no nameserver line at all, an error (no route), not 127.0.0.1.
        for empty in [&b""[..], b"# macOS Notice\nsearch lan\n", b"nameserver not-an-address\n"] {
            let e = name_servers_from_resolv_conf(empty);
            assert!(
                matches!(&e, Err(ClientError::Io(m)) if m.contains("names no DNS server")),
                "{:?}: {e:?}",
                String::from_utf8_lossy(empty)
            );
        }
    }

    /// The file the system path reads: its servers at port 53, and a missing or empty file named in the error.
    #[test]
    fn resolv_conf_file() {
        let dir = std::env::temp_dir().join(format!("moonbridge-resolv-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let file = dir.join("resolv.conf");
        std::fs::write(&file, "nameserver 127.0.0.1\nnameserver ::1\n").unwrap();
        let got = read_resolv_conf(&file).unwrap();
        assert_eq!(got, vec![(IpAddr::from([127, 0, 0, 1]), 53), (IpAddr::from(std::net::Ipv6Addr::LOCALHOST), 53)]);
        std::fs::write(&file, "search lan\n").unwrap();
        let e = read_resolv_conf(&file).unwrap_err().to_string();
        assert!(e.contains("resolv.conf: names no DNS server"), "{e}");
        std::fs::remove_file(&file).unwrap();
        let e = read_resolv_conf(&file).unwrap_err().to_string();
        assert!(e.contains("resolv.conf: cannot read it"), "{e}");
        std::fs::remove_dir(&dir).unwrap();
    }

    #[test]
    fn only_moonbridge_urls_count() {
        assert_eq!(url_from_txt(" wss://mc.example.com/mc "), Some("wss://mc.example.com/mc".into()));
        assert_eq!(url_from_txt("ws://[2001:db8::1]:8080/mc"), Some("ws://[2001:db8::1]:8080/mc".into()));
        for t in ["tcp://mc.example.com:25565", "v=spf1 -all", "https://mc.example.com/", "wss://", ""] {
            assert_eq!(url_from_txt(t), None, "{t}");
        }
    }
}
