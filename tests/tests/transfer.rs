//! Server transfer (docs/servers.md) against real node-minecraft-protocol 1.7.10 backends: a player moved by
//! its backend's BungeeCord `Connect` message (a node client over tcp, and the client library over ws), the
//! fallback when a backend disconnects a player, and the failure paths (a backend that refuses the login, one
//! that never answers, an unknown name), after which the player is still on its first backend.
//!
//! What reaches the player is checked packet by packet: the world reset (two Respawns), the player's entity id
//! as the client first learned it in every packet the new backend sends about the player (and the swap for a
//! new-backend entity that has the client's id), the chat round trip on the new backend.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::time::Duration;

use moonbridge_client::{Connection, Options};
use moonbridge_protocol::forwarding::offline_uuid;
use moonbridge_protocol::packets::{
    chat_text, JoinGame, KeepAlive, LoginDisconnect, LoginSuccess, Packet, PlayDisconnect, PluginMessage, Respawn,
};
use moonbridge_protocol::transfer::BungeeAnswer;
use moonbridge_proxy::config::Transport;
use serde_json::{json, Value};
use testbed::mc::{chat_frame, chat_message_text, send_login, FrameReader};
use testbed::{node_backend, NodePeer, Proxy, RawBackend, RawBehaviour, STEP};

/// The player's entity id on the first backend ("survival") and on the second ("lobby").
const FIRST_ID: i64 = 1;
const LOBBY_ID: i64 = 42;

struct Network {
    survival: NodePeer,
    lobby: NodePeer,
    lobby_addr: std::net::SocketAddr,
    proxy: Proxy,
}

/// Two node backends (survival, where players land, and lobby) behind a proxy with tcp and ws listeners,
/// transfers allowed to both, `extra_backends` and `transfer_extra` added to the configuration.
async fn network(extra_backends: &str, transfer_extra: &str) -> Network {
    let (survival, a) = node_backend(json!({ "burstCount": 0, "label": "survival", "entityId": FIRST_ID })).await;
    let (lobby, b) =
        node_backend(json!({ "burstCount": 0, "label": "lobby", "entityId": LOBBY_ID, "otherEntityId": FIRST_ID }))
            .await;
    let proxy = Proxy::start(&format!(
        "[metrics]\nbind = \"127.0.0.1:0\"\n\
         [[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\
         [[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:0\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{a}\"\n\
         [[backend]]\nname = \"lobby\"\naddress = \"{b}\"\n{extra_backends}\n\
         [transfer]\n{transfer_extra}\n"
    ))
    .await;
    Network { survival, lobby, lobby_addr: b, proxy }
}

/// Runs the scripted node client against the proxy's tcp listener and returns its transcript line.
async fn scripted(proxy: &Proxy, name: &str, steps: Value) -> Value {
    let port = proxy.addr(Transport::Tcp).port();
    let mut client =
        NodePeer::spawn("scripted-client.js", &json!({ "port": port, "username": name, "steps": steps })).await;
    let line = client.next_lines(1, Duration::from_secs(40)).await.remove(0);
    assert_eq!(line["event"], "transcript", "{line}");
    assert_eq!(line["entityId"], FIRST_ID, "the client joined the first backend");
    line
}

/// A transcript's packets as (name, data).
fn packets(transcript: &Value) -> Vec<(String, Value)> {
    transcript["packets"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| (p["name"].as_str().unwrap().to_string(), p["data"].clone()))
        .collect()
}

fn chat_of(data: &Value) -> String {
    let v: Value = serde_json::from_str(data["message"].as_str().unwrap()).unwrap();
    v["text"].as_str().unwrap().to_string()
}

/// The node backend's next event line of kind `name` for `player`.
async fn event_for(peer: &mut NodePeer, name: &str, player: &str) -> Value {
    loop {
        let e = peer.event(name, STEP).await;
        if e["username"] == player {
            return e;
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_moves_a_tcp_player_with_its_entity_id_and_a_clean_world() {
    let mut net = network("", "targets = [\"lobby\", \"survival\"]").await;
    let transcript = scripted(
        &net.proxy,
        "Mover",
        json!([
            { "say": "decorate", "until": "chat" },
            { "say": "connect lobby", "until": "respawn", "count": 2 },
            { "say": "entity", "until": "chat" },
            { "say": "hello", "until": "chat" },
        ]),
    )
    .await;
    let mut got = packets(&transcript);
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(
        names,
        [
            "position",
            "scoreboard_objective",
            "scoreboard_team",
            "player_info",
            "open_window",
            "chat",
            "close_window",
            "scoreboard_objective",
            "scoreboard_team",
            "player_info",
            "respawn",
            "respawn",
            "position",
            "entity_metadata",
            "animation",
            "entity_velocity",
            "entity_velocity",
            "chat",
            "chat"
        ],
        "{transcript}"
    );
    // Survival's Player Position And Look after its Join Game, what "decorate" made it leave, the echo.
    got.drain(..5);
    assert_eq!(chat_of(&got[0].1), "[survival] echo:decorate");
    // Before the world reset, all of it is removed.
    assert_eq!(got[1].1, json!({ "windowId": 5 }));
    assert_eq!(got[2].1, json!({ "name": "obj_survival", "displayText": "", "action": 1 }));
    assert_eq!(got[3].1["team"], "team_survival");
    assert_eq!(got[3].1["mode"], 1);
    assert_eq!(got[4].1, json!({ "playerName": "Ghost_survival", "online": false, "ping": 0 }));
    got.drain(1..5);
    // The world reset: first another dimension (the nether), then the lobby's (the overworld).
    assert_eq!(got[1].1["dimension"], -1);
    assert_eq!(got[2].1["dimension"], 0);
    assert_eq!(got[2].1["levelType"], "default");
    // The lobby calls the player 42; the client still knows itself as 1, in every packet about it.
    assert_eq!(got[4].1["entityId"], FIRST_ID);
    assert_eq!(got[5].1["entityId"], FIRST_ID);
    assert_eq!(got[6].1["entityId"], FIRST_ID);
    assert_eq!(got[6].1["velocity"], json!({ "x": 1, "y": 2, "z": 3 }));
    // The lobby's own entity 1 is not the player: the client sees it as 42.
    assert_eq!(got[7].1["entityId"], LOBBY_ID);
    assert_eq!(got[7].1["velocity"], json!({ "x": 4, "y": 5, "z": 6 }));
    assert_eq!(chat_of(&got[8].1), "[lobby] echo:entity");
    assert_eq!(chat_of(&got[9].1), "[lobby] echo:hello");

    // Both backends got the BungeeCord channel registered for the player (Bukkit servers need it to let a
    // plugin send Connect). Survival heard the player until the Connect, then lost it; the lobby logged it in
    // and heard the rest.
    assert_eq!(event_for(&mut net.survival, "register", "Mover").await["channels"], json!(["BungeeCord"]));
    assert_eq!(event_for(&mut net.survival, "chat", "Mover").await["message"], "decorate");
    assert_eq!(event_for(&mut net.survival, "chat", "Mover").await["message"], "connect lobby");
    event_for(&mut net.survival, "left", "Mover").await;
    event_for(&mut net.lobby, "login", "Mover").await;
    assert_eq!(event_for(&mut net.lobby, "register", "Mover").await["channels"], json!(["BungeeCord"]));
    assert_eq!(event_for(&mut net.lobby, "chat", "Mover").await["message"], "entity");
    assert_eq!(event_for(&mut net.lobby, "chat", "Mover").await["message"], "hello");
    net.proxy.wait_connections(0, STEP).await;
    net.proxy.shutdown().await;
}

/// Players who never switch stay on the direct relay (the transfer layer is called in only at a player's first
/// switch, `moonbridge_transfer_handovers_total`), and their scoreboard, window and chat work as before.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn only_a_switch_calls_in_the_transfer_layer() {
    let mut net = network("", "targets = [\"lobby\", \"survival\"]").await;
    let handovers = "moonbridge_transfer_handovers_total";
    let stayer = scripted(
        &net.proxy,
        "Stayer",
        json!([{ "say": "decorate", "until": "chat" }, { "say": "hello", "until": "chat" }]),
    )
    .await;
    let got = packets(&stayer);
    assert_eq!(chat_of(&got.last().unwrap().1), "[survival] echo:hello", "{stayer}");
    assert_eq!(event_for(&mut net.survival, "chat", "Stayer").await["message"], "decorate");
    assert_eq!(net.proxy.metric(handovers).await, Some(0.0), "a player who did not switch");
    scripted(&net.proxy, "Mover", json!([{ "say": "connect lobby", "until": "respawn", "count": 2 }])).await;
    event_for(&mut net.lobby, "login", "Mover").await;
    assert_eq!(net.proxy.metric(handovers).await, Some(1.0), "the switch");
    assert_eq!(net.proxy.metric("moonbridge_transfers_total{outcome=\"moved\"}").await, Some(1.0));
    // From the switch on, bytes count under the backend they came from or went to: the lobby's Login Success
    // and Join Game; the handshake, Login Start and REGISTER it was sent.
    let bytes = |backend: &str, direction: &str| {
        format!("moonbridge_relayed_bytes_total{{backend=\"{backend}\",direction=\"{direction}\"}}")
    };
    for direction in ["to_player", "to_backend"] {
        let lobby = net.proxy.metric(&bytes("lobby", direction)).await.unwrap_or(0.0);
        assert!(lobby > 40.0, "lobby {direction}: {lobby} bytes");
    }
    net.proxy.shutdown().await;
}

/// The next frame that is not a Keep Alive (answered on the way, as the client does).
fn next_frame(conn: &Connection, r: &mut FrameReader<'_>) -> moonbridge_protocol::frame::Frame {
    loop {
        let f = r.next(STEP);
        if f.id != KeepAlive::ID {
            return f;
        }
        let ka: KeepAlive = f.decode().unwrap();
        conn.send(&ka.to_frame_bytes().unwrap()).unwrap();
        conn.end_tick().unwrap();
    }
}

fn say(conn: &Connection, message: &str) {
    conn.send(&chat_frame(message)).unwrap();
    conn.end_tick().unwrap();
}

fn chat_text_of(f: &moonbridge_protocol::frame::Frame) -> String {
    chat_message_text(f).expect("a text component")
}

fn i32_at(body: &[u8], at: usize) -> i32 {
    i32::from_be_bytes(body[at..at + 4].try_into().unwrap())
}

/// The client library's player over ws: the same move, checked frame by frame.
fn library_player(url: &str) {
    let conn = Connection::connect(url, Options::from_json(None).unwrap()).unwrap();
    let mut r = FrameReader::new(&conn);
    send_login(&conn, "Walker", false);
    let success: LoginSuccess = r.next(STEP).decode().expect("Login Success");
    assert_eq!(success.name, "Walker");
    let join: JoinGame = next_frame(&conn, &mut r).decode().expect("Join Game");
    assert_eq!(i64::from(join.entity_id), FIRST_ID);
    assert_eq!(next_frame(&conn, &mut r).id, 0x08, "Player Position And Look");
    say(&conn, "connect lobby");
    let first: Respawn = next_frame(&conn, &mut r).decode().expect("Respawn");
    let second: Respawn = next_frame(&conn, &mut r).decode().expect("Respawn");
    assert_eq!((first.dimension, second.dimension), (-1, 0));
    assert_eq!(next_frame(&conn, &mut r).id, 0x08, "the lobby's Player Position And Look");
    say(&conn, "entity");
    let metadata = next_frame(&conn, &mut r);
    assert_eq!((metadata.id, i64::from(i32_at(&metadata.body, 0))), (0x1c, FIRST_ID));
    let animation = next_frame(&conn, &mut r);
    assert_eq!(animation.id, 0x0b);
    assert_eq!(&animation.body[..], &[FIRST_ID as u8, 0], "VarInt entity id 1, animation 0");
    let own = next_frame(&conn, &mut r);
    assert_eq!((own.id, i64::from(i32_at(&own.body, 0))), (0x12, FIRST_ID));
    let other = next_frame(&conn, &mut r);
    assert_eq!((other.id, i64::from(i32_at(&other.body, 0))), (0x12, LOBBY_ID));
    assert_eq!(chat_text_of(&next_frame(&conn, &mut r)), "[lobby] echo:entity");
    // Forge's own entity message (FML channel, EntityAdjustMessage) names the player as the client knows it.
    say(&conn, "fmlentity");
    let adjust = next_frame(&conn, &mut r);
    assert_eq!(adjust.id, 0x3f);
    assert_eq!(&adjust.body[..6], b"\x03FML\x00\x11", "channel FML, 17 bytes");
    assert_eq!((adjust.body[6], i64::from(i32_at(&adjust.body, 7))), (3, FIRST_ID));
    assert_eq!(chat_text_of(&next_frame(&conn, &mut r)), "[lobby] echo:fmlentity");
    say(&conn, "hello");
    assert_eq!(chat_text_of(&next_frame(&conn, &mut r)), "[lobby] echo:hello");
    conn.close();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn connect_moves_a_client_library_player_over_ws() {
    let mut net = network("", "targets = [\"lobby\"]").await;
    let url = format!("ws://127.0.0.1:{}/mc", net.proxy.addr(Transport::Ws).port());
    tokio::time::timeout(Duration::from_secs(60), tokio::task::spawn_blocking(move || library_player(&url)))
        .await
        .expect("the player's script ends in time")
        .expect("the player's checks pass");
    event_for(&mut net.survival, "left", "Walker").await;
    assert_eq!(event_for(&mut net.lobby, "chat", "Walker").await["message"], "entity");
    net.proxy.wait_connections(0, STEP).await;
    net.proxy.shutdown().await;
}

/// A player on survival (whose fallback is the lobby) says `command`, which ends survival's side; they must land
/// on the lobby having read `why` in chat, and the metric `moonbridge_transfers_total{outcome}` count 1.
async fn lands_on_the_fallback(player: &str, command: &str, why: &str, outcome: &str) {
    let mut net = network("", "[transfer.fallback]\n\"survival\" = \"lobby\"").await;
    let transcript =
        scripted(&net.proxy, player, json!([{ "say": command, "until": "chat" }, { "say": "hello", "until": "chat" }]))
            .await;
    let got = packets(&transcript);
    let names: Vec<&str> = got.iter().map(|(n, _)| n.as_str()).collect();
    assert_eq!(names, ["position", "respawn", "respawn", "chat", "position", "chat"], "{transcript}");
    assert_eq!(chat_of(&got[3].1), why);
    assert_eq!(chat_of(&got[5].1), "[lobby] echo:hello");
    event_for(&mut net.lobby, "login", player).await;
    let series = format!("moonbridge_transfers_total{{outcome=\"{outcome}\"}}");
    assert_eq!(net.proxy.metric(&series).await, Some(1.0), "{series}");
    net.proxy.wait_connections(0, STEP).await;
    net.proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_disconnected_player_lands_on_the_fallback_with_the_reason() {
    lands_on_the_fallback("Faller", "kick Server restarting", "survival disconnected you: Server restarting", "moved")
        .await;
}

/// A backend whose connection is reset with no Play Disconnect (a crash, a kill: `resetAndDestroy`, an RST)
/// sends its players to its fallback, who read why in chat; the metric's outcome says it was a failover.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_crashes_sends_its_players_to_the_fallback() {
    lands_on_the_fallback("Survivor", "crash", "survival closed the connection unexpectedly", "failover").await;
}

/// The same for a connection closed (FIN) with no Play Disconnect, as when the server's process is killed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_backend_that_vanishes_sends_its_players_to_the_fallback() {
    lands_on_the_fallback("Vanisher", "vanish", "survival closed the connection unexpectedly", "failover").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_switch_leaves_the_player_where_it_was_with_the_reason() {
    let refusal = LoginDisconnect { reason_json: chat_text("You are not whitelisted") }.to_frame_bytes().unwrap();
    let refuser = RawBackend::start(RawBehaviour::ReplyAfter { after: 1, reply: refusal.to_vec() }).await;
    let silent = RawBackend::start(RawBehaviour::Silent).await;
    let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let extra = format!(
        "[[backend]]\nname = \"refuser\"\naddress = \"{}\"\n[[backend]]\nname = \"silent\"\naddress = \"{}\"\n\
         [[backend]]\nname = \"down\"\naddress = \"{closed}\"\n",
        refuser.addr, silent.addr
    );
    let mut net = network(&extra, "targets = [\"refuser\", \"silent\", \"down\"]\nswitch_timeout_seconds = 2").await;
    let transcript = scripted(
        &net.proxy,
        "Stayer",
        json!([
            { "say": "connect refuser", "until": "chat" },
            { "say": "connect silent", "until": "chat" },
            { "say": "connect down", "until": "chat" },
            { "say": "connect lobby", "until": "chat" },
            { "say": "connect nowhere", "until": "chat" },
            { "say": "hello", "until": "chat" },
        ]),
    )
    .await;
    let mut got = packets(&transcript);
    assert_eq!(got.remove(0).0, "position", "survival's, after its Join Game");
    let got: Vec<String> = got.iter().map(|(n, d)| format!("{n}: {}", chat_of(d))).collect();
    assert_eq!(
        got,
        [
            "chat: Could not connect you to refuser: it refused the login: You are not whitelisted",
            "chat: Could not connect you to silent: it did not finish within 2s",
            "chat: Could not connect you to down: it is unreachable",
            "chat: Server lobby is not available",
            "chat: Server nowhere is not available",
            "chat: [survival] echo:hello",
        ]
    );
    // The refused and the silent connections were opened with the player's login, and closed.
    let (_, login) = testbed::forwarded_login(&silent.wait_frames(0, 2, STEP).await);
    assert_eq!(login.name, "Stayer");
    silent.wait_closed(0, STEP).await;
    refuser.wait_closed(0, STEP).await;
    assert_eq!(event_for(&mut net.survival, "chat", "Stayer").await["message"], "connect refuser");
    net.proxy.wait_connections(0, STEP).await;
    net.proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn fallbacks_are_capped_so_two_backends_cannot_bounce_a_player_forever() {
    let net = network("", "[transfer.fallback]\n\"survival\" = \"lobby\"\n\"lobby\" = \"survival\"").await;
    let port = net.proxy.addr(Transport::Tcp).port();
    let steps = json!([
        { "say": "kick one", "until": "chat" },
        { "say": "kick two", "until": "chat" },
        { "say": "kick three", "until": "chat" },
        { "say": "kick four", "until": "chat" },
    ]);
    let mut client =
        NodePeer::spawn("scripted-client.js", &json!({ "port": port, "username": "Bouncer", "steps": steps })).await;
    let line = client.next_lines(1, Duration::from_secs(40)).await.remove(0);
    // Three fallbacks (survival, lobby, survival, lobby), then the fourth disconnect reaches the player.
    assert_eq!(line["event"], "failed", "{line}");
    assert!(line["error"].as_str().unwrap().contains("four"), "{line}");
    let chats: Vec<String> = packets(&line).iter().filter(|(n, _)| n == "chat").map(|(_, d)| chat_of(d)).collect();
    assert_eq!(
        chats,
        ["survival disconnected you: one", "lobby disconnected you: two", "survival disconnected you: three"]
    );
    net.proxy.wait_connections(0, STEP).await;
    net.proxy.shutdown().await;
}

/// Online mode with BungeeCord forwarding: both backends check the forwarded identity (UUID, signed textures,
/// bungeeguard token) and kick on a mismatch, so a switch that lost any of it would fail. The session server
/// is the stand-in `peers/session-server.js` (the real one cannot be reached from here).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn online_identity_and_forwarding_carry_over_to_the_new_backend() {
    use testbed::online::{profiles, session_server};
    const TOKEN: &str = "bungeeguard-secret-0123456789";
    let profiles = profiles(&["Alice"]);
    let profile = profiles[0].clone();
    let (_sessions, url) = session_server(json!({ "profiles": profiles })).await;
    let expect =
        json!({ "Alice": { "uuid": profile["id"], "textures": profile["properties"][0]["value"], "token": TOKEN } });
    let (mut survival, a) =
        node_backend(json!({ "burstCount": 0, "label": "survival", "expectForwarded": expect })).await;
    let (mut lobby, b) =
        node_backend(json!({ "burstCount": 0, "label": "lobby", "entityId": LOBBY_ID, "expectForwarded": expect }))
            .await;
    let forwarding = format!("forwarding = \"bungeecord\"\nforwarding_secret = \"{TOKEN}\"");
    let proxy = Proxy::start(&format!(
        "[metrics]\nbind = \"127.0.0.1:0\"\n\
         [[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{a}\"\n{forwarding}\n\
         [[backend]]\nname = \"lobby\"\naddress = \"{b}\"\n{forwarding}\n\
         [auth]\nmode = \"online\"\nsession_server = \"{url}\"\n\
         [transfer]\ntargets = [\"lobby\"]\n"
    ))
    .await;
    let opts = json!({
        "port": proxy.addr(Transport::Tcp).port(),
        "online": { "sessionServer": url, "profile": profile },
        "steps": [
            { "say": "connect lobby", "until": "respawn", "count": 2 },
            { "say": "hello", "until": "chat" },
        ],
    });
    let mut client = NodePeer::spawn("scripted-client.js", &opts).await;
    let line = client.next_lines(1, Duration::from_secs(40)).await.remove(0);
    assert_eq!(line["event"], "transcript", "{line}");
    let got = packets(&line);
    assert_eq!(chat_of(&got.last().unwrap().1), "[lobby] echo:hello", "{line}");
    for backend in [&mut survival, &mut lobby] {
        let login = event_for(backend, "login", "Alice").await;
        let f = &login["forwarded"];
        assert_eq!((&f["uuid"], &f["ip"]), (&profile["id"], &json!("127.0.0.1")), "{login}");
        let props = f["properties"].as_array().unwrap();
        let textures = props.iter().find(|x| x["name"] == "textures").unwrap();
        assert_eq!(textures, &profile["properties"][0], "textures with their signature");
    }
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

/// The transfer layer under carriage v2: a player switched to the lobby over `wss` loses its connection (a
/// FIN mid-session) and resumes it; the session, the lobby and the entity-id swap carry on.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switched_player_resumes_a_dropped_websocket() {
    use std::sync::atomic::Ordering;
    use std::sync::Arc;
    use testbed::{CutKind, Cutter, KeyType, TestCert};
    let cert = TestCert::generate("transfer-resume", KeyType::Ec).unwrap();
    let (_survival, a) = node_backend(json!({ "burstCount": 0, "label": "survival", "entityId": FIRST_ID })).await;
    let (mut lobby, b) = node_backend(json!({ "burstCount": 0, "label": "lobby", "entityId": LOBBY_ID })).await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:0\"\nping_interval_seconds = 1\n\
         tls_cert = \"{}\"\ntls_key = \"{}\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{a}\"\n\
         [[backend]]\nname = \"lobby\"\naddress = \"{b}\"\n\
         [transfer]\ntargets = [\"lobby\"]\n",
        cert.cert.display(),
        cert.key.display()
    ))
    .await;
    let cutter = Arc::new(Cutter::start(proxy.addr(Transport::Wss), &cert).await);
    let url = format!("wss://localhost:{}/mc", cutter.addr.port());
    let options =
        Options::from_json(Some(&json!({ "ca_file": cert.ca, "ping_interval_ms": 500 }).to_string())).unwrap();
    let c = Arc::clone(&cutter);
    let resumes = tokio::time::timeout(
        Duration::from_secs(60),
        tokio::task::spawn_blocking(move || {
            let conn = Connection::connect(&url, options).unwrap();
            let mut r = FrameReader::new(&conn);
            send_login(&conn, "Resumer", false);
            let _: LoginSuccess = r.next(STEP).decode().expect("Login Success");
            let join: JoinGame = next_frame(&conn, &mut r).decode().expect("Join Game");
            assert_eq!(i64::from(join.entity_id), FIRST_ID);
            assert_eq!(next_frame(&conn, &mut r).id, 0x08);
            say(&conn, "connect lobby");
            let first: Respawn = next_frame(&conn, &mut r).decode().expect("Respawn");
            let second: Respawn = next_frame(&conn, &mut r).decode().expect("Respawn");
            assert_eq!((first.dimension, second.dimension), (-1, 0));
            assert_eq!(next_frame(&conn, &mut r).id, 0x08, "the lobby's Player Position And Look");
            c.cut(CutKind::Fin);
            let deadline = std::time::Instant::now() + STEP;
            while c.cuts.load(Ordering::SeqCst) < 1 {
                assert!(std::time::Instant::now() < deadline, "the cut was not carried out");
                std::thread::yield_now();
            }
            say(&conn, "entity");
            let metadata = next_frame(&conn, &mut r);
            assert_eq!((metadata.id, i64::from(i32_at(&metadata.body, 0))), (0x1c, FIRST_ID));
            for _ in 0..2 {
                next_frame(&conn, &mut r);
            }
            assert_eq!(chat_text_of(&next_frame(&conn, &mut r)), "[lobby] echo:entity");
            let resumes = conn.stats().resumes;
            conn.close();
            resumes
        }),
    )
    .await
    .expect("the player's script ends in time")
    .expect("the player's checks pass");
    assert_eq!(resumes, 1, "the client resumed once");
    assert_eq!(cutter.accepted.load(Ordering::SeqCst), 2, "one new connection for the resume, no new login");
    assert_eq!(event_for(&mut lobby, "chat", "Resumer").await["message"], "entity");
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

/// A `BungeeCord` payload: the subchannel, then `writeUTF` strings.
fn bungee(parts: &[&str]) -> BungeeAnswer {
    let mut a = BungeeAnswer::new(parts[0]).unwrap();
    for p in &parts[1..] {
        a.utf(p).unwrap();
    }
    a
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

/// Logs a library player in over `url` and reads up to its first Player Position And Look.
fn joined(url: &str, name: &str) -> (Connection, ()) {
    let conn = Connection::connect(url, Options::from_json(None).unwrap()).unwrap();
    send_login(&conn, name, false);
    {
        let mut r = FrameReader::new(&conn);
        let success: LoginSuccess = r.next(STEP).decode().expect("Login Success");
        assert_eq!(success.name, name);
        let _: JoinGame = next_frame(&conn, &mut r).decode().expect("Join Game");
        assert_eq!(next_frame(&conn, &mut r).id, 0x08, "Player Position And Look");
    }
    (conn, ())
}

/// Says `message` and reads up to the backend's echo of it (the frames before it, returned, are what the
/// proxy delivered meanwhile).
fn say_until_echo(
    conn: &Connection,
    r: &mut FrameReader<'_>,
    message: &str,
    label: &str,
) -> Vec<moonbridge_protocol::frame::Frame> {
    say(conn, message);
    let mut before = Vec::new();
    loop {
        let f = next_frame(conn, r);
        if f.id == 0x02 && chat_message_text(&f).is_some_and(|t| t == format!("[{label}] echo:{message}")) {
            return before;
        }
        before.push(f);
    }
}

/// Every request of BungeeCord's plugin channel that a server plugin asks a proxy is answered in BungeeCord's
/// layout to the backend that asked (over tcp, node-minecraft-protocol backends, two players); `Message`,
/// `ForwardToPlayer` and `KickPlayer` reach the other player's session; a player's own serverbound message on
/// the channel never reaches the backend.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bungeecord_requests_are_answered_and_players_cannot_speak_on_the_channel() {
    let mut net = network("", "targets = [\"lobby\"]").await;
    let url = format!("tcp://127.0.0.1:{}", net.proxy.addr(Transport::Tcp).port());
    let lobby_addr = net.lobby_addr;
    let requests: Vec<(Vec<&str>, Option<BungeeAnswer>)> = vec![
        (vec!["GetServers"], Some(bungee(&["GetServers", "survival, lobby"]))),
        (vec!["GetServer"], Some(bungee(&["GetServer", "survival"]))),
        (
            vec!["PlayerCount", "ALL"],
            Some({
                let mut a = bungee(&["PlayerCount", "ALL"]);
                a.int(2);
                a
            }),
        ),
        (
            vec!["PlayerCount", "lobby"],
            Some({
                let mut a = bungee(&["PlayerCount", "lobby"]);
                a.int(0);
                a
            }),
        ),
        (vec!["PlayerCount", "nowhere"], None),
        (vec!["PlayerList", "ALL"], Some(bungee(&["PlayerList", "ALL", "Asker, Other"]))),
        (vec!["PlayerList", "survival"], Some(bungee(&["PlayerList", "survival", "Asker, Other"]))),
        (vec!["UUID"], Some(bungee(&["UUID", &offline_uuid("Asker").simple().to_string()]))),
        (
            vec!["UUIDOther", "other"],
            Some(bungee(&["UUIDOther", "Other", &offline_uuid("Other").simple().to_string()])),
        ),
        (vec!["IP"], Some(bungee(&["IP", "127.0.0.1"]))),
        (vec!["IPOther", "Other"], Some(bungee(&["IPOther", "Other", "127.0.0.1"]))),
        (
            vec!["ServerIP", "lobby"],
            Some({
                let mut a = bungee(&["ServerIP", "lobby", &lobby_addr.ip().to_string()]);
                a.short(lobby_addr.port());
                a
            }),
        ),
        (vec!["ConnectOther", "Other", "lobby"], None),
    ];
    let asked: Vec<Vec<String>> = requests.iter().map(|(r, _)| r.iter().map(|s| s.to_string()).collect()).collect();
    let script = tokio::task::spawn_blocking(move || {
        let (other, ()) = joined(&url, "Other");
        // A client forging the proxy's voice: dropped before the backend, the chat after it arrives.
        let mut fields = Vec::new();
        PluginMessage { channel: "BungeeCord".into(), data: bungee(&["KickPlayer", "Asker", "forged"]).finish() }
            .encode_fields(&mut fields)
            .unwrap();
        let mut forged = bytes::BytesMut::new();
        moonbridge_protocol::frame::encode_frame(&mut forged, 0x17, &fields).unwrap();
        let mut ro = FrameReader::new(&other);
        other.send(&forged).unwrap();
        say_until_echo(&other, &mut ro, "after forging", "survival");
        let (asker, ()) = joined(&url, "Asker");
        let mut ra = FrameReader::new(&asker);
        for parts in &asked {
            let refs: Vec<&str> = parts.iter().map(String::as_str).collect();
            let passed =
                say_until_echo(&asker, &mut ra, &format!("bungee {}", hex(&bungee(&refs).finish())), "survival");
            assert!(passed.iter().all(|f| f.id != 0x3f), "no BungeeCord message reaches the client: {passed:?}");
        }
        // Message: a chat line at the other player.
        say_until_echo(
            &asker,
            &mut ra,
            &format!("bungee {}", hex(&bungee(&["Message", "Other", "hi there"]).finish())),
            "survival",
        );
        assert_eq!(chat_text_of(&next_frame(&other, &mut ro)), "hi there");
        // The message brought the switchboard into Other's session: a forged message is dropped there too.
        other.send(&forged).unwrap();
        say_until_echo(&other, &mut ro, "after forging again", "survival");
        // MessageRaw: a JSON component, as it came; one that is not JSON is dropped.
        let raw = bungee(&["MessageRaw", "Other", "not json"]).finish();
        say_until_echo(&asker, &mut ra, &format!("bungee {}", hex(&raw)), "survival");
        let raw = bungee(&["MessageRaw", "Other", r#"{"text":"raw line"}"#]).finish();
        say_until_echo(&asker, &mut ra, &format!("bungee {}", hex(&raw)), "survival");
        assert_eq!(chat_text_of(&next_frame(&other, &mut ro)), "raw line");
        // ForwardToPlayer: the plugin's bytes reach the server the other player is on, through its connection.
        let mut fwd = bungee(&["ForwardToPlayer", "Other", "MyPlugin"]);
        fwd.short_bytes(&[1, 2, 3]).unwrap();
        say_until_echo(&asker, &mut ra, &format!("bungee {}", hex(&fwd.finish())), "survival");
        // KickPlayer: the other player reads the reason.
        say_until_echo(
            &asker,
            &mut ra,
            &format!("bungee {}", hex(&bungee(&["KickPlayer", "Other", "Bye now"]).finish())),
            "survival",
        );
        let kick: PlayDisconnect = next_frame(&other, &mut ro).decode().expect("Play Disconnect");
        assert!(kick.reason_json.contains("Bye now"), "{}", kick.reason_json);
        // Forward to a server: through one of its players (only the asker is left on survival).
        let mut fwd = bungee(&["Forward", "survival", "MyPlugin"]);
        fwd.short_bytes(&[4, 5]).unwrap();
        say_until_echo(&asker, &mut ra, &format!("bungee {}", hex(&fwd.finish())), "survival");
        asker.close();
        other.close();
    });
    tokio::time::timeout(Duration::from_secs(60), script)
        .await
        .expect("the script ends in time")
        .expect("its checks pass");
    for (parts, want) in &requests {
        let Some(want) = want else { continue };
        let got = event_for(&mut net.survival, "bungee", "Asker").await;
        let got = got["data"].as_str().unwrap();
        let want = hex(&want.clone().finish());
        if parts[0].starts_with("IP") {
            // The player's port follows as an i32.
            assert!(got.starts_with(&want) && got.len() == want.len() + 8, "{parts:?}: {got} against {want}");
        } else {
            assert_eq!(got, want, "{parts:?}");
        }
    }
    // The first BungeeCord message the backend hears over Other's connection is the forwarded one: the forged
    // message never arrived.
    let mut forwarded = bungee(&["MyPlugin"]);
    forwarded.short_bytes(&[1, 2, 3]).unwrap();
    assert_eq!(event_for(&mut net.survival, "bungee", "Other").await["data"], hex(&forwarded.finish()));
    let mut forwarded = bungee(&["MyPlugin"]);
    forwarded.short_bytes(&[4, 5]).unwrap();
    assert_eq!(event_for(&mut net.survival, "bungee", "Asker").await["data"], hex(&forwarded.finish()));
    net.proxy.wait_connections(0, STEP).await;
    net.proxy.shutdown().await;
}

/// After a switch the proxy holds exactly the player's socket and the new backend's (`ss -tnp`: no socket
/// pair inside the proxy), and the session's end line names both backends in order.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_switched_player_costs_two_sockets_and_its_end_line_names_each_backend() {
    let (_survival, a) = node_backend(json!({ "burstCount": 0, "label": "survival", "entityId": FIRST_ID })).await;
    let (_lobby, b) = node_backend(json!({ "burstCount": 0, "label": "lobby", "entityId": LOBBY_ID })).await;
    let port = moonbridge_test_certs::free_port().unwrap();
    let dir = testbed::TestDir::new("moonbridge-switched-sockets").unwrap();
    let config = dir.join("moonbridge.toml");
    std::fs::write(
        &config,
        format!(
            "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:{port}\"\n\
             [[backend]]\nname = \"survival\"\naddress = \"{a}\"\n[[backend]]\nname = \"lobby\"\naddress = \"{b}\"\n\
             [transfer]\ntargets = [\"lobby\"]\n"
        ),
    )
    .unwrap();
    let log = moonbridge_test_certs::ChildLog::spawn(
        std::process::Command::new(testbed::moonbridge_bin()).arg("--config").arg(&config).env("RUST_LOG", "info"),
    )
    .unwrap();
    assert!(log.wait_line("listening", Duration::from_secs(20)).is_some(), "the proxy starts");
    let pid = log.id();
    let url = format!("tcp://127.0.0.1:{port}");
    let established = move || {
        let out = std::process::Command::new("ss").args(["-tnpH", "state", "established"]).output().unwrap();
        String::from_utf8_lossy(&out.stdout).lines().filter(|l| l.contains(&format!("pid={pid},"))).count()
    };
    let counted = tokio::task::spawn_blocking(move || {
        let (conn, ()) = joined(&url, "Counted");
        say(&conn, "connect lobby");
        let mut r = FrameReader::new(&conn);
        let first: Respawn = next_frame(&conn, &mut r).decode().expect("Respawn");
        let second: Respawn = next_frame(&conn, &mut r).decode().expect("Respawn");
        assert_eq!((first.dimension, second.dimension), (-1, 0));
        say_until_echo(&conn, &mut r, "still here", "lobby");
        let n = established();
        conn.close();
        n
    });
    let n = tokio::time::timeout(Duration::from_secs(60), counted).await.unwrap().unwrap();
    assert_eq!(n, 2, "the player's socket and the lobby's, nothing else");
    let end = log.wait_line("session ended", Duration::from_secs(20)).expect("the session's end line");
    assert!(end.contains("backend=\"survival,lobby\""), "{end}");
}
