//! The admin API and `moonbridge ctl` (docs/operations.md, "Admin API") on a real network of three instances
//! (a real `redis-server`, node-minecraft-protocol 1.7.10 backends, players through the client library): every
//! verb asked at one instance acts where the players are.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use moonbridge_client::Options;
use moonbridge_protocol::packets::{LoginSuccess, Packet};
use moonbridge_proxy::admin::PlayerRow;
use serde_json::json;
use testbed::mc::chat_message_text;
use testbed::network::{instance_config, secret, Redis};
use testbed::{moonbridge_bin, node_backend, raw_http, Proxy, TestDir, STEP};

use crate::network::{blocking, tcp_url, Player, NETWORK_SEES};

/// `moonbridge ctl --url <instance's metrics> --token-file <token> args…`: exit code, stdout, stderr.
async fn ctl(p: &Proxy, token: &std::path::Path, args: &[&str]) -> (i32, String, String) {
    let url = format!("http://{}", p.metrics.unwrap());
    let mut all = vec!["ctl".to_string(), "--url".into(), url, "--token-file".into(), token.display().to_string()];
    all.extend(args.iter().map(|a| a.to_string()));
    let out = blocking(move || std::process::Command::new(moonbridge_bin()).args(all).output().unwrap()).await;
    let text = |b: Vec<u8>| String::from_utf8(b).unwrap();
    (out.status.code().unwrap_or(-1), text(out.stdout), text(out.stderr))
}

/// `ctl --json players` at `p`, by name.
async fn players(p: &Proxy, token: &std::path::Path, filter: &[&str]) -> BTreeMap<String, PlayerRow> {
    let mut args = vec!["--json", "players"];
    args.extend_from_slice(filter);
    let (code, out, err) = ctl(p, token, &args).await;
    assert_eq!(code, 0, "{err}");
    let rows: Vec<PlayerRow> = serde_json::from_str(&out).unwrap();
    let by_name: BTreeMap<String, PlayerRow> = rows.into_iter().map(|r| (r.name.clone(), r)).collect();
    by_name
}

/// Waits until `ctl players` at `p` satisfies `done`; the last listing.
async fn players_until(
    p: &Proxy,
    token: &std::path::Path,
    what: &str,
    done: impl Fn(&BTreeMap<String, PlayerRow>) -> bool,
) -> BTreeMap<String, PlayerRow> {
    let deadline = Instant::now() + NETWORK_SEES;
    loop {
        let rows = players(p, token, &[]).await;
        if done(&rows) {
            return rows;
        }
        assert!(Instant::now() < deadline, "{what}: not within {NETWORK_SEES:?}: {rows:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// Reads `player`'s frames (answering Keep Alives) until a chat line whose text is `text`.
fn chat_line(player: &Player, text: &str) {
    loop {
        let f = player.next(STEP);
        match f.id {
            0x00 => player.answer_keep_alive(&f),
            0x02 if chat_message_text(&f).as_deref() == Some(text) => return,
            0x40 => panic!("disconnected while waiting for {text:?}"),
            _ => {}
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ctl_lists_kicks_sends_messages_and_drains_across_three_instances() {
    let redis = Redis::start().await;
    let (_survival_node, survival) = node_backend(json!({ "burstCount": 0 })).await;
    let (_lobby_node, lobby) = node_backend(json!({ "burstCount": 0 })).await;
    let dir = TestDir::new("moonbridge-admin").unwrap();
    let key = secret(&dir);
    let token = dir.join("admin.token");
    std::fs::write(&token, format!("{}\n", "c0ffee".repeat(8))).unwrap();
    #[cfg(unix)]
    {
        use std::os::unix::fs::PermissionsExt;
        std::fs::set_permissions(&token, std::fs::Permissions::from_mode(0o600)).unwrap();
    }
    // `[transfer] targets`: the sessions follow their frames, so they take chat lines and switches.
    let config = format!(
        "{}[[backend]]\nname = \"lobby\"\naddress = \"{lobby}\"\n[transfer]\ntargets = [\"lobby\", \"survival\"]\n\
         [metrics]\nbind = \"127.0.0.1:0\"\nadmin_token_file = \"{}\"\n",
        instance_config(survival, &redis, &key, "kick_existing", None),
        token.display()
    );
    let instances = [Proxy::start(&config).await, Proxy::start(&config).await, Proxy::start(&config).await];
    let names = [["Ann", "Ava"], ["Ben", "Bea"], ["Cid", "Cat"]];
    let mut online = BTreeMap::new();
    for (p, pair) in instances.iter().zip(names) {
        for name in pair {
            let url = tcp_url(p);
            let (player, first) = blocking(move || Player::login(&url, Options::default(), name)).await;
            assert_eq!(first.id, LoginSuccess::ID);
            online.insert(name, player);
        }
    }
    let [a, b, c] = &instances;

    // Every player once, each pair on its own instance, asked at any instance.
    let rows = players_until(a, &token, "six players", |r| r.len() == 6).await;
    let ids: Vec<String> = names.iter().map(|pair| rows[pair[0]].instance.clone().unwrap()).collect();
    for (pair, id) in names.iter().zip(&ids) {
        for name in pair {
            let r = &rows[*name];
            assert_eq!((r.instance.as_ref(), r.backend.as_str()), (Some(id), "survival"), "{r:?}");
            assert_eq!(r.address.map(|a| a.ip().to_string()).as_deref(), Some("127.0.0.1"));
            let how = (r.transport.map(|t| t.to_string()), r.carriage.map(|c| c.to_string()));
            assert_eq!(how, (Some("tcp".into()), Some("none".into())));
            assert!(r.session_seconds.is_some_and(|s| s < 120) && r.uuid.len() == 32, "{r:?}");
        }
    }
    assert!(ids[0] != ids[1] && ids[1] != ids[2] && ids[0] != ids[2], "{ids:?}");
    // Every instance lists the same network (each read the others at its own renewal).
    for p in [b, c] {
        let same = players_until(p, &token, "six players", |r| r.len() == 6).await;
        let instances = |r: &BTreeMap<String, PlayerRow>| r.values().map(|p| p.instance.clone()).collect::<Vec<_>>();
        assert_eq!(instances(&same), instances(&rows));
    }
    let only_b = players(c, &token, &["--instance", &ids[1]]).await;
    assert_eq!(only_b.keys().collect::<Vec<_>>(), ["Bea", "Ben"]);
    let (code, table, _) = ctl(b, &token, &["find", "cid"]).await;
    assert_eq!(code, 0);
    assert!(table.lines().nth(1).is_some_and(|l| l.starts_with("Cid ") && l.contains(&ids[2])), "{table}");

    // Kick, asked at A, of a player on C.
    let (code, out, err) = ctl(a, &token, &["kick", "Cat", "--reason", "Server maintenance"]).await;
    assert_eq!((code, out.as_str()), (0, "kicked: 1 player(s)\n"), "{err}");
    let cat = online.remove("Cat").unwrap();
    let reason = blocking(move || cat.disconnected()).await;
    assert!(reason.contains("Server maintenance"), "{reason}");
    players_until(b, &token, "Cat gone", |r| r.len() == 5 && !r.contains_key("Cat")).await;

    // Send one player (on B, asked at C), then a whole backend (asked at B: players on all three).
    let (code, out, err) = ctl(c, &token, &["--json", "send", "Ben", "--to", "lobby"]).await;
    assert_eq!((code, out.as_str()), (0, "{\"done\":1,\"missed\":0,\"unreached\":0}\n"), "{err}");
    players_until(a, &token, "Ben on lobby", |r| r["Ben"].backend == "lobby").await;
    let (code, out, err) = ctl(b, &token, &["send", "--from", "survival", "--to", "lobby"]).await;
    assert_eq!((code, out.as_str()), (0, "sent to lobby: 4 player(s)\n"), "{err}");
    let rows = players_until(c, &token, "all on lobby", |r| r.values().all(|p| p.backend == "lobby")).await;
    assert_eq!(rows.len(), 5);

    // A chat line for every player on lobby, asked at A: each of the five reads it.
    let (code, out, err) = ctl(a, &token, &["message", "--backend", "lobby", "Restart", "in", "5", "minutes"]).await;
    assert_eq!((code, out.as_str()), (0, "messaged: 5 player(s)\n"), "{err}");
    let mut kept = BTreeMap::new();
    for (name, player) in std::mem::take(&mut online) {
        let player = blocking(move || {
            chat_line(&player, "Restart in 5 minutes");
            player
        })
        .await;
        kept.insert(name, player);
    }

    // Drain C and stay up: its player is told the restart message, C leaves the network (after its sessions
    // ended: a drain that exits stops its operations listener before that), and its operations listener still
    // answers while its player listener is closed, until it is stopped.
    let (code, out, err) = ctl(c, &token, &["drain", "--stay"]).await;
    assert_eq!(code, 0, "{err}");
    assert!(out.contains("the process stays up afterwards"), "{out}");
    let cid = kept.remove("Cid").unwrap();
    let reason = blocking(move || cid.disconnected()).await;
    assert!(reason.contains("Proxy is restarting"), "{reason}");
    players_until(a, &token, "C's player gone", |r| r.len() == 4 && !r.contains_key("Cid")).await;
    let m = c.metrics.unwrap();
    let c_tcp = c.addr(moonbridge_proxy::config::Transport::Tcp);
    crate::network::wait_metric(a, "moonbridge_network_instances", 2.0, NETWORK_SEES).await;
    assert!(players(a, &token, &["--instance", &ids[2]]).await.is_empty());
    assert!(raw_http(m, "GET /healthz HTTP/1.1\r\nHost: x\r\n\r\n").await.starts_with("HTTP/1.1 200 "));
    assert!(raw_http(m, "GET /readyz HTTP/1.1\r\nHost: x\r\n\r\n").await.starts_with("HTTP/1.1 503 "));
    assert!(tokio::net::TcpStream::connect(c_tcp).await.is_err(), "C's player listener is closed");
    // Drained, C lists only itself: none.
    assert!(players(c, &token, &[]).await.is_empty());
    let [a, b, c] = instances;
    c.shutdown().await;
    a.shutdown().await;
    b.shutdown().await;
}
