//! `[network]` on Redis Sentinel (docs/network.md, "Redis Sentinel"): a real master, replica and three
//! sentinels (Debian's `redis-server` and `redis-sentinel`), three instances with players on each, the master
//! killed mid-run. The instances follow the new master within one renewal of its promotion, write their
//! state there again, and lose no player; cross-instance resumes and the duplicate-login check work again.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::time::{Duration, Instant};

use moonbridge_client::Options;
use moonbridge_protocol::packets::{LoginDisconnect, LoginSuccess, Packet};
use moonbridge_proxy::config::Transport;
use serde_json::json;
use testbed::network::{instance_config, secret};
use testbed::sentinel::Sentinels;
use testbed::{node_backend, Proxy, TestDir};

use crate::network::{blocking, tcp_url, wait_metric, Player, LEASE_ENDS, NETWORK_SEES, RENEWAL};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_network_follows_a_sentinel_failover_and_loses_no_player() {
    let mut set = Sentinels::start().await;
    let old_master = set.master_port().unwrap();
    let (_node, backend) = node_backend(json!({ "burstCount": 0 })).await;
    let dir = TestDir::new("moonbridge-failover").unwrap();
    let key = secret(&dir);
    // `redis_url` names the first master; with sentinels only its scheme, credentials and database are used.
    let master = set.master.as_ref().unwrap();
    let config = format!(
        "{}{}[metrics]\nbind = \"127.0.0.1:0\"\n",
        instance_config(backend, master, &key, "refuse_new", None),
        set.network_keys()
    );
    let instances = [Proxy::start(&config).await, Proxy::start(&config).await, Proxy::start(&config).await];
    for p in &instances {
        wait_metric(p, "moonbridge_network_instances", 3.0, NETWORK_SEES).await;
    }
    let [a, b, c] = &instances;
    let mut players = Vec::new();
    for (p, name) in [(a, "Ann"), (b, "Ben"), (c, "Cid")] {
        let url = tcp_url(p);
        let (player, first) = blocking(move || Player::login(&url, Options::default(), name)).await;
        assert_eq!(first.id, LoginSuccess::ID);
        players.push(player);
    }
    // A carriage v2 session on C, whose connection dropped: C keeps it for a resume.
    let (ws, token, received) = testbed::v2_session(c.addr(Transport::Ws)).await;
    drop(ws);
    let resume = format!("resume {token} {received} {}", testbed::hs_ls().len());
    for p in &instances {
        wait_metric(p, "moonbridge_network_players", 4.0, NETWORK_SEES).await;
    }

    // The master dies; every instance notices at its next renewal. Cid leaves while there is none (his claim's
    // release waits for the new master).
    set.kill_master();
    let killed = Instant::now();
    let cid = players.pop().unwrap();
    drop(cid);
    for p in &instances {
        wait_metric(p, "moonbridge_network_redis_up", 0.0, RENEWAL).await;
    }
    let promoted = tokio::time::timeout(Duration::from_secs(30), async {
        loop {
            match set.master_port() {
                Some(port) if port != old_master => return Instant::now(),
                _ => tokio::time::sleep(Duration::from_millis(50)).await,
            }
        }
    })
    .await
    .expect("the sentinels promote the replica within 30 s");
    assert_eq!(set.master_port(), Some(set.replica.port));
    // What the new master holds of the instances' players is gone too (as if replication had lagged): the
    // instances must write it again.
    let hashes = set.replica.cli(&["KEYS", "moonbridge:test:players:*"]);
    for key in hashes.lines().filter(|k| !k.is_empty()) {
        set.replica.cli(&["DEL", key]);
    }

    // Within one renewal of the promotion every instance is back on the new master, its players written there
    // again (Cid's gone: 3, with the parked session).
    for p in &instances {
        wait_metric(p, "moonbridge_network_redis_up", 1.0, RENEWAL).await;
        wait_metric(p, "moonbridge_network_instances", 3.0, RENEWAL).await;
    }
    let back = promoted.elapsed();
    assert!(back < RENEWAL, "every instance back {back:?} after the promotion");
    for p in &instances {
        wait_metric(p, "moonbridge_network_players", 3.0, NETWORK_SEES).await;
    }
    println!(
        "failover: promoted {:.1} s after the kill; every instance back {:.1} s after the promotion",
        (promoted - killed).as_secs_f64(),
        back.as_secs_f64()
    );
    let hashes = set.replica.cli(&["KEYS", "moonbridge:test:players:*"]);
    assert_eq!(hashes.lines().filter(|k| !k.is_empty()).count(), 3, "each instance's players written again: {hashes}");

    // No player lost: both still play.
    let kept = blocking(move || {
        for p in &players {
            p.chat("after the failover");
        }
        players
    })
    .await;

    // The duplicate-login check works again: a second Ann at B is refused (refuse_new).
    let b_url = tcp_url(b);
    let (_second, first) = blocking(move || Player::login(&b_url, Options::default(), "Ann")).await;
    assert_eq!(first.id, LoginDisconnect::ID, "a second Ann is refused");
    // No stale lock: Cid, who left with no master, plays again at A (his claim released, or expired with its
    // lease).
    let deadline = Instant::now() + LEASE_ENDS;
    loop {
        let a_url = tcp_url(a);
        let (cid, first) = blocking(move || Player::login(&a_url, Options::default(), "Cid")).await;
        if first.id == LoginSuccess::ID {
            drop(cid);
            break;
        }
        assert!(Instant::now() < deadline, "Cid's name is still held {LEASE_ENDS:?} after the failover");
        tokio::time::sleep(Duration::from_millis(500)).await;
    }
    // A resume at A of the session C holds is carried to C over an instance link.
    let answer = testbed::try_resume(a.addr(Transport::Ws), &resume).await;
    assert!(answer.as_deref().is_ok_and(|t| t.starts_with("resumed")), "{answer:?}");
    drop(kept);
    let [a, b, c] = instances;
    for p in [a, b, c] {
        p.shutdown().await;
    }
}
