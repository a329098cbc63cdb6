//! The modpack dialects end to end (docs/modpacks.md), with a GT New Horizons dialect peer
//! (`testbed::gtnh`: Hodgepodge's rules, no GTNH server runs here) as backend and player:
//!
//! - frames of 3 and 20 MiB (4-byte prefixes) each way arrive byte for byte through tcp, ws carriage v1 (a
//!   plain WebSocket client), ws carriage v2 + zstd and wss carriage v2 (the client library);
//! - `BungeeCord` requests of 40 KiB (Forge's 3-byte VarShort), 3 MiB and 9 MiB (Hodgepodge's marker and
//!   VarInt) are read and answered, and a 20 MiB frame after them passes the switchboard in pieces;
//! - a transfer into dimension 1000 (Join Game's trailing int) sends the Respawn for 1000;
//! - after a frame the proxy cannot follow, a player's `BungeeCord` message never reaches the backend, the
//!   session ends, and `moonbridge_unfollowed_streams_total` says why; a backend's stream that stops parsing is
//!   relayed on.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::sync::Arc;
use std::time::Duration;

use moonbridge_protocol::codec::Reader;
use moonbridge_protocol::packets::{Packet, PluginMessage, Respawn};
use moonbridge_proxy::config::Transport;
use testbed::players::{until_contains, until_ends_with, Player, Way, EVERY_WAY};
use testbed::{gtnh, hs_ls, login_success, KeyType, Proxy, RawBackend, RawBehaviour, TestCert, STEP};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;

/// Time for one 20 MiB frame to cross (debug builds, two cores, every carriage).
const BIG: Duration = Duration::from_secs(60);

/// [`proxy_with`] (the name the tests read best).
async fn proxy(cert: &TestCert, survival: &RawBackend, lobby: std::net::SocketAddr, extra: &str) -> Proxy {
    proxy_with(cert, survival, lobby, extra).await
}

/// A proxy with tcp, ws and wss listeners in front of `survival` (and `lobby`, a transfer target, so the
/// relay watches the stream and filters the player's `BungeeCord` messages), with `[metrics]` and `extra`.
async fn proxy_with(cert: &TestCert, survival: &RawBackend, lobby: std::net::SocketAddr, extra: &str) -> Proxy {
    Proxy::start(&format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\
         [[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\npath = \"/mc\"\n\
         [[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\npath = \"/mc\"\ntls_cert = \"{}\"\ntls_key = \"{}\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{}\"\n\
         [[backend]]\nname = \"lobby\"\naddress = \"{lobby}\"\n\
         [transfer]\ntargets = [\"lobby\"]\n\
         [metrics]\nbind = \"127.0.0.1:0\"\n{extra}",
        cert.cert.display(),
        cert.key.display(),
        survival.addr,
    ))
    .await
}

/// A backend that completes every login with Login Success for `Steve`, and then GT New Horizons' Join Game
/// for entity 7 in `dimension`.
async fn gtnh_backend(dimension: i32) -> RawBackend {
    let reply = [login_success("Steve"), gtnh::join_game(7, dimension)].concat();
    RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply }).await
}

/// Logs a player in: the first bytes it reads are Login Success and the GTNH Join Game.
async fn log_in(player: &mut Player, dimension: i32) {
    player.send(&hs_ls()).await;
    let expected = [login_success("Steve"), gtnh::join_game(7, dimension)].concat();
    assert_eq!(player.read(expected.len(), STEP).await, expected, "Login Success, then Join Game as sent");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn gtnh_frames_of_3_and_20_mib_cross_every_transport_and_carriage_byte_for_byte() {
    let cert = TestCert::generate("dialects", KeyType::Ec).unwrap();
    let survival = gtnh_backend(-1000).await;
    let lobby = gtnh_backend(0).await;
    let proxy = proxy(&cert, &survival, lobby.addr, "").await;
    // Chunk data (S26 Map Chunk Bulk) as GTNH sends it, a big AE2 terminal's window items (S30), a chat line.
    let down = [gtnh::bulk(0x26, 3 << 20, 1), gtnh::bulk(0x30, 20 << 20, 2), gtnh::frame(0x02, b"\x04\"ok\"")].concat();
    assert_eq!(&down[..4], &[0x80, 0x80, 0xc0, 0x01], "a 4-byte prefix");
    // A client's 3 MiB frame (C10 Creative Inventory Action with a huge NBT item), then a chat line.
    let up = [gtnh::bulk(0x10, 3 << 20, 3), gtnh::frame(0x01, b"\x02hi")].concat();
    for (i, way) in EVERY_WAY.into_iter().enumerate() {
        let mut player = Player::open(way, &proxy, &cert).await;
        log_in(&mut player, -1000).await;
        let before = survival.wait_received(i, 1, STEP).await.len();
        survival.send(i, &down).await;
        assert!(player.read(down.len(), BIG).await == down, "{way:?}: clientbound bytes differ");
        player.send(&up).await;
        let got = until_ends_with(&survival, i, &up, BIG).await;
        assert!(got.len() >= before + up.len(), "{way:?}");
        // The proxy still knows where frames end both ways: a request after them is answered.
        survival.send(i, &gtnh::bungee_request("GetServer", &[], 0)).await;
        until_answered(&survival, i, 1).await;
    }
    for direction in ["to_player", "to_backend"] {
        for reason in ["wide_prefix", "too_large", "empty", "bad_packet_id"] {
            let series =
                format!("moonbridge_unfollowed_streams_total{{direction=\"{direction}\",reason=\"{reason}\"}}");
            assert_eq!(proxy.metric(&series).await, Some(0.0), "{series}");
        }
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_carriage_crosses_an_intermediary_that_caps_frames_at_64_kib_and_messages_at_1_mib() {
    use moonbridge_protocol::ws::{MAX_SENT_FRAME_PAYLOAD, MAX_SENT_MESSAGE};
    use std::sync::atomic::Ordering::Relaxed;
    use testbed::capped::FrameCap;
    let cert = TestCert::generate("dialects-capped", KeyType::Ec).unwrap();
    let survival = gtnh_backend(0).await;
    let lobby = gtnh_backend(0).await;
    let proxy = proxy(&cert, &survival, lobby.addr, "").await;
    let cap = FrameCap::start(proxy.addr(Transport::Ws), MAX_SENT_FRAME_PAYLOAD, MAX_SENT_MESSAGE).await;
    let down = [gtnh::bulk(0x26, 20 << 20, 5), gtnh::frame(0x02, b"\x04\"ok\"")].concat();
    let up = [gtnh::bulk(0x10, 3 << 20, 6), gtnh::frame(0x01, b"\x02hi")].concat();
    // Carriage v1, v2, v2 + zstd.
    for (i, options) in [r#"{"resume":false}"#, r#"{"compress":false}"#, "{}"].into_iter().enumerate() {
        let mut player = Player::library(format!("ws://{}/mc", cap.addr), options.to_string()).await;
        log_in(&mut player, 0).await;
        survival.send(i, &down).await;
        assert!(player.read(down.len(), BIG).await == down, "{options}: clientbound bytes differ");
        player.send(&up).await;
        until_ends_with(&survival, i, &up, BIG).await;
    }
    for (way, seen) in [("to the proxy", &cap.up), ("to the player", &cap.down)] {
        assert!(!seen.over.load(Relaxed), "{way}: over a cap");
        assert!(seen.largest_frame.load(Relaxed) <= MAX_SENT_FRAME_PAYLOAD, "{way}: {seen:?}");
        assert!(seen.largest_message.load(Relaxed) <= MAX_SENT_MESSAGE, "{way}: {seen:?}");
    }
    // The client's 3 MiB went as messages of several frames each.
    assert!(cap.up.largest_message.load(Relaxed) > MAX_SENT_FRAME_PAYLOAD, "{:?}", cap.up);
    proxy.shutdown().await;
}

/// Waits until the `i`-th connection of `backend` received `n` `BungeeCord` answers.
async fn until_answered(backend: &RawBackend, i: usize, n: usize) -> Vec<u8> {
    tokio::time::timeout(BIG, async {
        loop {
            let got = backend.wait_received(i, 1, STEP).await;
            if answers(&got).len() >= n {
                return got;
            }
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await
    .unwrap_or_else(|_| panic!("connection {i}: {n} answers"))
}

/// The `BungeeCord` answers (serverbound C17 frames) in a backend's `received` bytes: their subchannels.
fn answers(received: &[u8]) -> Vec<String> {
    // Skip the handshake and Login Start (vanilla frames), then read the dialect.
    gtnh::frames(received)
        .into_iter()
        .filter(|(id, _)| *id == PluginMessage::SERVERBOUND_ID)
        .filter_map(|(_, body)| PluginMessage::decode_fields(&mut Reader::new(&body)).ok())
        .filter(|m| m.channel == "BungeeCord")
        .map(|m| {
            let mut r = Reader::new(&m.data);
            let len = usize::from(r.u16("subchannel").unwrap());
            String::from_utf8(r.bytes(len, "subchannel").unwrap().to_vec()).unwrap()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn forge_and_hodgepodge_plugin_lengths_are_read_and_answered() {
    let cert = TestCert::generate("dialects-bungee", KeyType::Ec).unwrap();
    let survival = gtnh_backend(0).await;
    let lobby = gtnh_backend(0).await;
    let proxy = proxy(&cert, &survival, lobby.addr, "").await;
    let requests = [
        gtnh::bungee_request("PlayerCount", &["ALL"], 40 * 1024),
        gtnh::bungee_request("GetServers", &[], 3 << 20),
        gtnh::bungee_request("GetServer", &[], 9 << 20),
    ];
    // The data lengths in Forge's 3-byte VarShort (40 KiB, 3 MiB) and Hodgepodge's marker and VarInt (9 MiB).
    // (After the prefix, the id and the channel: 3 + 1 + 11 and 4 + 1 + 11 bytes.)
    assert_eq!(&requests[0][15..18], &[0xa0, 0x12, 0x01], "40,978 bytes");
    assert_eq!(&requests[2][16..19], &[0xff, 0xff, 0xff], "the marker");
    for (i, way) in [Way::Tcp, Way::WsV2Zstd].into_iter().enumerate() {
        let mut player = Player::open(way, &proxy, &cert).await;
        log_in(&mut player, 0).await;
        // After the requests (the switchboard took over at the first), a 20 MiB frame passes in pieces.
        let after = [gtnh::bulk(0x26, 20 << 20, 4), gtnh::frame(0x02, b"\x04\"ok\"")].concat();
        survival.send(i, &requests.concat()).await;
        survival.send(i, &after).await;
        assert!(player.read(after.len(), BIG).await == after, "{way:?}: the requests never reach the player");
        let received = until_answered(&survival, i, 3).await;
        assert_eq!(answers(&received), ["PlayerCount", "GetServers", "GetServer"], "{way:?}");
    }
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transfer_into_dimension_1000_sends_the_respawn_for_1000() {
    let cert = TestCert::generate("dialects-transfer", KeyType::Ec).unwrap();
    let survival = gtnh_backend(0).await;
    let lobby = gtnh_backend(1000).await;
    let proxy = proxy(&cert, &survival, lobby.addr, "").await;
    let mut player = Player::open(Way::Tcp, &proxy, &cert).await;
    log_in(&mut player, 0).await;
    survival.send(0, &gtnh::bungee_request("Connect", &["lobby"], 0)).await;
    // The world reset: a detour through the nether, then the lobby's dimension from its trailing int.
    let mut got = Vec::new();
    let Player::Tcp(s) = &mut player else { unreachable!() };
    let respawns = tokio::time::timeout(STEP, async {
        let mut buf = vec![0u8; 65536];
        loop {
            let n = s.read(&mut buf).await.unwrap();
            assert!(n > 0, "the session ended");
            got.extend_from_slice(&buf[..n]);
            let respawns: Vec<i32> = gtnh::frames(&got)
                .into_iter()
                .filter(|(id, _)| *id == 0x07)
                .map(|(_, b)| Respawn::decode_body(&mut Reader::new(&b)).unwrap().dimension)
                .collect();
            if respawns.len() >= 2 {
                return respawns;
            }
        }
    })
    .await
    .expect("two Respawns");
    assert_eq!(respawns, [-1, 1000]);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn after_a_frame_the_proxy_cannot_follow_no_bungeecord_message_reaches_the_backend() {
    let cert = TestCert::generate("dialects-unfollowed", KeyType::Ec).unwrap();
    let survival = gtnh_backend(0).await;
    let lobby = gtnh_backend(0).await;
    // A 4 MiB limit: the 6 MiB frame below is over it.
    let proxy = proxy(&cert, &survival, lobby.addr, "[limits]\nmax_play_frame_bytes = 4194304\n").await;
    let mut forged_fields = Vec::new();
    let kick = b"\x00\x0aKickPlayer\x00\x05Other\x00\x10forged-by-player";
    PluginMessage { channel: "BungeeCord".into(), data: kick.to_vec() }.encode_fields(&mut forged_fields).unwrap();
    let forged = gtnh::frame(PluginMessage::SERVERBOUND_ID, &forged_fields);
    let chat = gtnh::frame(0x01, b"\x02hi");
    // Once in the relay's filter, once in the switchboard (after a request handed the session over).
    for (i, (way, handed)) in
        [(Way::Tcp, false), (Way::WsV1, false), (Way::Tcp, true), (Way::WsV2Zstd, true)].into_iter().enumerate()
    {
        let mut player = Player::open(way, &proxy, &cert).await;
        log_in(&mut player, 0).await;
        if handed {
            survival.send(i, &gtnh::bungee_request("PlayerCount", &["ALL"], 0)).await;
            // Answered: the switchboard runs.
            until_answered(&survival, i, 1).await;
        }
        player.send(&chat).await;
        let with_chat = until_ends_with(&survival, i, &chat, STEP).await.len();
        // A 6 MiB prefix (over the limit), and a forged request right behind it.
        player.send(&[&[0x80, 0x80, 0x80, 0x03, 0x17][..], &forged].concat()).await;
        assert!(player.ended(STEP).await, "{way:?}: the session ends");
        survival.wait_closed(i, STEP).await;
        let got = survival.wait_received(i, 1, STEP).await;
        assert_eq!(got.len(), with_chat, "{way:?}: nothing after the chat line reached the backend");
        assert!(!got.windows(16).any(|w| w == b"forged-by-player"), "{way:?}");
    }
    let series = "moonbridge_unfollowed_streams_total{direction=\"to_backend\",reason=\"too_large\"}";
    assert_eq!(proxy.metric(series).await, Some(4.0));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_stream_that_stops_parsing_is_relayed_on_and_counted() {
    let cert = TestCert::generate("dialects-opaque", KeyType::Ec).unwrap();
    let survival = gtnh_backend(0).await;
    let lobby = gtnh_backend(0).await;
    let proxy = proxy(&cert, &survival, lobby.addr, "[limits]\nmax_play_frame_bytes = 4194304\n").await;
    let mut player = Player::open(Way::Tcp, &proxy, &cert).await;
    log_in(&mut player, 0).await;
    // A 6 MiB frame from the backend: over the limit, so the proxy no longer knows where frames end; the
    // bytes still reach the player as they came.
    let big = gtnh::bulk(0x26, 6 << 20, 9);
    survival.send(0, &big).await;
    assert!(player.read(big.len(), BIG).await == big);
    let series = "moonbridge_unfollowed_streams_total{direction=\"to_player\",reason=\"too_large\"}";
    assert_eq!(proxy.metric(series).await, Some(1.0));
    // A Connect now would land inside what the proxy cannot follow: it passes to the client untouched.
    let connect = gtnh::bungee_request("Connect", &["lobby"], 0);
    survival.send(0, &connect).await;
    assert_eq!(player.read(connect.len(), STEP).await, connect);
    assert_eq!(lobby.accepted(), 0, "no switch for a stream the proxy does not follow");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_drain_moves_a_gtnh_player_into_dimension_1000_with_the_respawn_for_1000() {
    use testbed::network::{Haproxy, Redis};
    let redis = Redis::start().await;
    let dir = testbed::TestDir::new("moonbridge-dialects-drain").unwrap();
    let key = dir.path().join("network.key");
    std::fs::write(&key, "0123456789abcdef0123456789abcdef-dialects\n").unwrap();
    // Every login (the first, and the second one the move makes) lands in GT New Horizons' dimension 1000.
    let backend = gtnh_backend(1000).await;
    let config = format!(
        "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\nping_interval_seconds = 1\n\
         [[backend]]\nname = \"survival\"\naddress = \"{}\"\n\
         [network]\nredis_url = \"{}\"\nname = \"dialects\"\npeer_bind = \"127.0.0.1:0\"\nsecret_file = \"{}\"\n\
         [metrics]\nbind = \"127.0.0.1:0\"\n[limits]\nshutdown_grace_seconds = 10\n",
        backend.addr,
        redis.url(),
        key.display()
    );
    let (mut a, mut b) = (Proxy::start(&config).await, Proxy::start(&config).await);
    for p in [&a, &b] {
        tokio::time::timeout(Duration::from_secs(10), async {
            while p.metric("moonbridge_network_instances").await != Some(2.0) {
                tokio::time::sleep(Duration::from_millis(100)).await;
            }
        })
        .await
        .expect("both instances see each other");
    }
    // The move reconnects to the same address: a balancer in front, as in production.
    let haproxy = Haproxy::start(&[("ws", vec![a.addr(Transport::Ws), b.addr(Transport::Ws)])]).await;
    let mut player = Player::library(format!("ws://{}/mc", haproxy.fronts[0]), "{}".into()).await;
    log_in(&mut player, 1000).await;
    if a.stats.stats().connections != 1 {
        std::mem::swap(&mut a, &mut b);
    }
    assert_eq!(a.stats.stats().connections, 1, "the player is on one instance");
    let stopping = tokio::spawn(a.shutdown());
    let Player::Library(conn) = &player else { unreachable!() };
    let conn = Arc::clone(conn);
    let respawns = tokio::task::spawn_blocking(move || {
        let mut got = Vec::new();
        let mut buf = vec![0u8; 1 << 20];
        let deadline = std::time::Instant::now() + STEP;
        loop {
            let respawns: Vec<i32> = gtnh::frames(&got)
                .into_iter()
                .filter(|(id, _)| *id == 0x07)
                .map(|(_, b)| Respawn::decode_body(&mut Reader::new(&b)).unwrap().dimension)
                .collect();
            if respawns.len() >= 2 || std::time::Instant::now() > deadline {
                return respawns;
            }
            let n = conn.recv(&mut buf, Some(Duration::from_secs(1))).unwrap();
            got.extend_from_slice(&buf[..n]);
        }
    })
    .await
    .unwrap();
    assert_eq!(respawns, [-1, 1000], "the world reset of the move names the int dimension");
    tokio::time::timeout(STEP, stopping).await.expect("the drained instance exits").unwrap();
    assert_eq!(b.stats.stats().connections, 1, "the player plays on at the other instance");
    drop(player);
    b.shutdown().await;
}

/// A serverbound Plugin Message (C17) on the `BungeeCord` channel asking to kick `Other`, with the channel's
/// length written as `length` (the one-byte VarInt, or a padded form a 1.7.10 server reads the same).
fn forged(length: &[u8]) -> Vec<u8> {
    let mut fields = length.to_vec();
    fields.extend_from_slice(b"BungeeCord");
    let kick = b"\x00\x0aKickPlayer\x00\x05Other\x00\x10forged-by-player";
    moonbridge_protocol::array_length::put_data(&mut fields, kick);
    gtnh::frame(PluginMessage::SERVERBOUND_ID, &fields)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_bungeecord_message_never_reaches_the_backend_sent_ahead_padded_or_after_a_lost_stream() {
    let cert = TestCert::generate("dialects-forged", KeyType::Ec).unwrap();
    let survival = gtnh_backend(0).await;
    let lobby = gtnh_backend(0).await;
    let proxy = proxy(&cert, &survival, lobby.addr, "").await;
    let chat = gtnh::frame(0x01, b"\x02hi");
    // Sent ahead in the same write as the login (tcp and ws), and with a padded channel length (`8A 00`, `8A 80
    // 00`) in play, before and after the switchboard took over: dropped, and the chat line behind it goes on.
    for (i, way) in [Way::Tcp, Way::WsV1].into_iter().enumerate() {
        let mut player = Player::open(way, &proxy, &cert).await;
        player.send(&[hs_ls(), forged(&[10]), forged(&[0x8a, 0x00]), chat.clone()].concat()).await;
        let expected = [login_success("Steve"), gtnh::join_game(7, 0)].concat();
        assert_eq!(player.read(expected.len(), STEP).await, expected);
        // (Sent ahead, the chat line reaches the backend with the login, before the proxy's registration.)
        let got = until_contains(&survival, i, &chat).await;
        assert!(!got.windows(16).any(|w| w == b"forged-by-player"), "{way:?}: sent ahead");
        for handed in [false, true] {
            if handed {
                survival.send(i, &gtnh::bungee_request("GetServer", &[], 0)).await;
                until_answered(&survival, i, 1).await;
            }
            let line = gtnh::frame(0x01, if handed { b"\x02h2" } else { b"\x02h1" });
            player.send(&[forged(&[0x8a, 0x80, 0x00]), forged(&[0x8a, 0x00]), line.clone()].concat()).await;
            let got = until_ends_with(&survival, i, &line, STEP).await;
            assert!(!got.windows(16).any(|w| w == b"forged-by-player"), "{way:?}: padded, handed {handed}");
        }
    }
    proxy.shutdown().await;

    // A backend whose first bytes after Login Success cannot be followed (a 6 MiB frame, over a 4 MiB limit):
    // relayed unparsed, and the player's `BungeeCord` messages are still dropped.
    let big = gtnh::bulk(0x26, 6 << 20, 7);
    let reply = [login_success("Steve"), big.clone()].concat();
    let survival = RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply: reply.clone() }).await;
    let proxy = proxy_with(&cert, &survival, lobby.addr, "[limits]\nmax_play_frame_bytes = 4194304\n").await;
    let mut player = Player::open(Way::Tcp, &proxy, &cert).await;
    player.send(&hs_ls()).await;
    assert!(player.read(reply.len(), BIG).await == reply, "relayed as it came");
    player.send(&[forged(&[10]), chat.clone()].concat()).await;
    let got = until_ends_with(&survival, 0, &chat, STEP).await;
    assert!(!got.windows(16).any(|w| w == b"forged-by-player"), "after a lost stream");
    let series = "moonbridge_unfollowed_streams_total{direction=\"to_player\",reason=\"too_large\"}";
    assert_eq!(proxy.metric(series).await, Some(1.0));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_lost_inside_a_frame_during_a_switch_ends_the_session_at_once() {
    use tokio::net::TcpListener;
    let cert = TestCert::generate("dialects-lost-mid-frame", KeyType::Ec).unwrap();
    // The switch's target accepts and never answers: the switch waits (up to its 60 s timeout).
    let lobby = RawBackend::start(RawBehaviour::Silent).await;
    let listener = TcpListener::bind("127.0.0.1:0").await.unwrap();
    let survival_addr = listener.local_addr().unwrap();
    let (close_tx, close_rx) = tokio::sync::oneshot::channel::<()>();
    let survival = tokio::spawn(async move {
        let (mut s, _) = listener.accept().await.unwrap();
        let mut buf = vec![0u8; 65536];
        let _ = s.read(&mut buf).await.unwrap();
        s.write_all(&[login_success("Steve"), gtnh::join_game(7, 0)].concat()).await.unwrap();
        s.write_all(&gtnh::bungee_request("Connect", &["lobby"], 0)).await.unwrap();
        // Half of a 20 MiB frame, then the connection ends when the test says so.
        let frame = gtnh::bulk(0x26, 20 << 20, 8);
        s.write_all(&frame[..10 << 20]).await.unwrap();
        let _ = close_rx.await;
        let _ = s.shutdown().await;
    });
    let config = format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{survival_addr}\"\n\
         [[backend]]\nname = \"lobby\"\naddress = \"{}\"\n\
         [transfer]\ntargets = [\"lobby\"]\nswitch_timeout_seconds = 60\n",
        lobby.addr
    );
    let proxy = Proxy::start(&config).await;
    let mut player = Player::open(Way::Tcp, &proxy, &cert).await;
    log_in(&mut player, 0).await;
    // The switch is under way (the target accepted) while the frame passes in pieces.
    tokio::time::timeout(STEP, async {
        while lobby.accepted() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
    })
    .await
    .expect("the switch dials the lobby");
    let Player::Tcp(p) = &mut player else { unreachable!() };
    let mut seen = 0;
    let mut buf = vec![0u8; 1 << 20];
    while seen < 5 << 20 {
        seen += tokio::time::timeout(STEP, p.read(&mut buf)).await.unwrap().unwrap();
    }
    let lost = std::time::Instant::now();
    close_tx.send(()).unwrap();
    survival.await.unwrap();
    assert!(player.ended(Duration::from_secs(10)).await, "the session ends, not after the switch's 60 s");
    assert!(lost.elapsed() < Duration::from_secs(10));
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_log_says_once_which_stream_the_proxy_stopped_following_and_why() {
    // The moonbridge binary, so its log is read as an operator reads it.
    let survival = gtnh_backend(0).await;
    let port = moonbridge_test_certs::free_port().unwrap();
    let dir = testbed::TestDir::new("moonbridge-dialects-log").unwrap();
    let config = dir.join("moonbridge.toml");
    std::fs::write(
        &config,
        format!(
            "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:{port}\"\n\
             [[backend]]\nname = \"survival\"\naddress = \"{}\"\n[[backend]]\nname = \"lobby\"\naddress = \"{}\"\n\
             [transfer]\ntargets = [\"lobby\"]\n[limits]\nmax_play_frame_bytes = 4194304\n",
            survival.addr, survival.addr
        ),
    )
    .unwrap();
    let log = moonbridge_test_certs::ChildLog::spawn(
        std::process::Command::new(testbed::moonbridge_bin()).arg("--config").arg(&config).env("RUST_LOG", "info"),
    )
    .unwrap();
    assert!(log.wait_line("listening", Duration::from_secs(20)).is_some(), "the proxy starts");
    let mut player = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    player.write_all(&hs_ls()).await.unwrap();
    let expected = [login_success("Steve"), gtnh::join_game(7, 0)].concat();
    let mut got = vec![0u8; expected.len()];
    tokio::time::timeout(STEP, player.read_exact(&mut got)).await.unwrap().unwrap();
    // A 6 MiB frame over the 4 MiB limit, and a forged request behind it.
    player.write_all(&[&[0x80, 0x80, 0x80, 0x03, 0x17][..], &forged(&[10])].concat()).await.unwrap();
    let line = tokio::task::spawn_blocking(move || log.wait_line("stopped following", STEP)).await.unwrap();
    let line = line.expect("a line says what happened");
    assert!(line.contains("the player's stream: the session is closed"), "{line}");
    assert!(line.contains("over the limit of 4194304 bytes"), "{line}");
    assert!(line.contains("max_play_frame_bytes"), "{line}");
}
