//! Route discovery in the client library (`moonbridge_client::discovery`) against a real DNS server on loopback
//! (dnsmasq): the URL of a `_moonbridge.<host>` TXT record, no record, records that are not URLs, the record's
//! TTL as the cache lifetime, and a bounded wait on a silent server.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::time::{Duration, Instant};

use moonbridge_client::discovery::lookup;
use testbed::dns::DnsServer;

const TIMEOUT: Duration = Duration::from_secs(2);

async fn blocking<T: Send + 'static>(f: impl FnOnce() -> T + Send + 'static) -> T {
    tokio::time::timeout(Duration::from_secs(30), tokio::task::spawn_blocking(f)).await.expect("in time").unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_txt_record_names_the_moonbridge_url_and_is_cached_for_its_ttl() {
    let dns = DnsServer::start(&[
        "--txt-record=_moonbridge.mc.example.com,wss://edge.example.com/mc".into(),
        // One record of two character-strings.
        "--txt-record=_moonbridge.split.example.com,wss://edge.example.com,/split".into(),
        "--txt-record=_moonbridge.notaurl.example.com,v=spf1 -all".into(),
        "--txt-record=_moonbridge.tcp.example.com,tcp://play.example.com:25565".into(),
    ])
    .await;
    let server = Some(dns.addr);
    let found = blocking(move || lookup("mc.example.com", server, TIMEOUT)).await.unwrap();
    assert_eq!(found.as_deref(), Some("wss://edge.example.com/mc"));
    assert_eq!(dns.queries("TXT", "_moonbridge.mc.example.com").await, 1);
    // Within the record's TTL the answer comes from the cache: no second query.
    let again = blocking(move || lookup("MC.example.com.", server, TIMEOUT)).await.unwrap();
    assert_eq!(again.as_deref(), Some("wss://edge.example.com/mc"));
    assert_eq!(dns.queries("TXT", "_moonbridge.mc.example.com").await, 1, "served from the cache");
    // A record split into several character-strings is one text.
    let split = blocking(move || lookup("split.example.com", server, TIMEOUT)).await.unwrap();
    assert_eq!(split.as_deref(), Some("wss://edge.example.com/split"));
    // Texts that are not ws:// or wss:// URLs route nothing.
    assert_eq!(blocking(move || lookup("notaurl.example.com", server, TIMEOUT)).await.unwrap(), None);
    assert_eq!(blocking(move || lookup("tcp.example.com", server, TIMEOUT)).await.unwrap(), None);
    // No record (NXDOMAIN): no route, and the negative answer is cached too.
    assert_eq!(blocking(move || lookup("vanilla.example.com", server, TIMEOUT)).await.unwrap(), None);
    assert_eq!(blocking(move || lookup("vanilla.example.com", server, TIMEOUT)).await.unwrap(), None);
    assert_eq!(dns.queries("TXT", "_moonbridge.vanilla.example.com").await, 1, "negative answer cached");
    // IP addresses and single-label names are never looked up.
    assert_eq!(blocking(move || lookup("127.0.0.1", server, TIMEOUT)).await.unwrap(), None);
    assert_eq!(blocking(move || lookup("localhost", server, TIMEOUT)).await.unwrap(), None);
    assert_eq!(dns.queries("TXT", "_moonbridge.127.0.0.1").await, 0);
    dns.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_silent_dns_server_costs_the_timeout_once() {
    // A UDP socket that never answers stands for a DNS server that is down or filtered.
    let silent = std::net::UdpSocket::bind("127.0.0.1:0").unwrap();
    let server = Some(silent.local_addr().unwrap());
    let t = Instant::now();
    let r = blocking(move || lookup("slow.example.com", server, Duration::from_millis(500))).await;
    let took = t.elapsed();
    assert!(r.is_err(), "{r:?}");
    assert!(took >= Duration::from_millis(450) && took < Duration::from_millis(1500), "the lookup took {took:?}");
    // The failure is remembered: the next server-list refresh does not wait again.
    let t = Instant::now();
    let again = blocking(move || lookup("slow.example.com", server, Duration::from_millis(500))).await;
    assert!(again.unwrap_err().to_string().contains("failed recently"));
    assert!(t.elapsed() < Duration::from_millis(100), "waited {:?}", t.elapsed());
    drop(silent);
}
