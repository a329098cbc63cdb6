//! Server transfer with a Forge 1.7.10 client: the `FML|HS` handshake is reset and run again with the new
//! server, in the right order and phases; when the new server's handshake stalls, the switch fails after
//! `forge_handshake_timeout_seconds` and the old server's handshake is replayed, so the player stays.
//!
//! The peers are scripted at the byte level ([`testbed::forge`]): no Forge client or server can run here.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::net::SocketAddr;
use std::time::Duration;

use moonbridge_proxy::config::Transport;
use testbed::forge::{forge_server, handshake, server_heard, wait_log, ClientState, ForgeClient};
use testbed::{Proxy, STEP};

async fn proxy_for(survival: SocketAddr, lobby: SocketAddr) -> Proxy {
    Proxy::start(&format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{survival}\"\n\
         [[backend]]\nname = \"lobby\"\naddress = \"{lobby}\"\n\
         [transfer]\ntargets = [\"lobby\"]\nforge_handshake_timeout_seconds = 2\n"
    ))
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_forge_handshake_is_reset_and_run_again_with_the_new_server() {
    let (a, survival_log) = forge_server("survival", 1, false).await;
    let (b, lobby_log) = forge_server("lobby", 42, false).await;
    let proxy = proxy_for(a, b).await;
    let mut client = ForgeClient::connect(proxy.addr(Transport::Tcp), "Forger").await;
    client.until(|seen| seen.iter().any(|s| s.starts_with("JoinGame"))).await;
    let mut want = handshake("survival");
    want.push("JoinGame 1".into());
    assert_eq!(client.seen, want);
    client.say("connect lobby").await;
    client.until(|seen| seen.iter().filter(|s| s.starts_with("Respawn")).count() == 2).await;
    // The reset first, then the lobby's whole handshake, then the world reset (no second Join Game).
    let mut after = vec!["Reset".to_string()];
    after.extend(handshake("lobby"));
    after.extend(["Respawn -1".to_string(), "Respawn 0".to_string()]);
    assert_eq!(client.seen[want.len()..], after[..]);
    assert_eq!(client.state, ClientState::Done, "the client finished the lobby's handshake");
    client.say("hello").await;
    client.until(|seen| seen.last().is_some_and(|s| s.starts_with("Chat"))).await;
    assert_eq!(client.seen.last().unwrap(), "Chat [lobby] echo:hello");
    // Each server heard one whole handshake in its phases, the survival server nothing of the second.
    let mut lobby = server_heard();
    lobby.push("chat hello".into());
    wait_log(&lobby_log, &lobby).await;
    let mut survival = server_heard();
    survival.extend(["chat connect lobby".to_string(), "closed".to_string()]);
    wait_log(&survival_log, &survival).await;
    assert_eq!(survival_log.lock().unwrap().len(), survival.len());
    drop(client);
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stalled_forge_handshake_fails_in_time_and_the_player_stays() {
    let (a, survival_log) = forge_server("survival", 1, false).await;
    let (b, lobby_log) = forge_server("lobby", 42, true).await;
    let proxy = proxy_for(a, b).await;
    let mut client = ForgeClient::connect(proxy.addr(Transport::Tcp), "Stuck").await;
    client.until(|seen| seen.iter().any(|s| s.starts_with("JoinGame"))).await;
    let joined = client.seen.len();
    client.say("connect lobby").await;
    let started = std::time::Instant::now();
    client.until(|seen| seen.last().is_some_and(|s| s.starts_with("Chat"))).await;
    let waited = started.elapsed();
    // The lobby said hello and stalled; 2 s later the client, waiting for a ModList, gets the rest of the
    // survival server's recorded handshake from its ModList on (no second Reset: the client is not done).
    let mut after = vec!["Reset".to_string(), "ServerHello".to_string()];
    after.extend(handshake("survival").into_iter().skip(1));
    after.push("Chat Could not connect you to lobby: it did not finish within 2s".into());
    assert_eq!(client.seen[joined..], after[..]);
    assert!(waited >= Duration::from_secs(2) && waited < Duration::from_secs(10), "failed after {waited:?}");
    assert_eq!(client.state, ClientState::Done, "the replayed handshake completed");
    // Still on the survival server, which heard the chats and none of the replay's answers.
    client.say("hello").await;
    client.until(|seen| seen.last().is_some_and(|s| s.contains("echo"))).await;
    assert_eq!(client.seen.last().unwrap(), "Chat [survival] echo:hello");
    let mut survival = server_heard();
    survival.extend(["chat connect lobby".to_string(), "chat hello".to_string()]);
    wait_log(&survival_log, &survival).await;
    assert_eq!(survival_log.lock().unwrap().len(), survival.len());
    // The lobby heard the client's hello and mod list, and its connection was closed.
    wait_log(&lobby_log, &["ClientHello".to_string(), "ModList".to_string(), "closed".to_string()]).await;
    drop(client);
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

/// After a switch, the client's answer to a Keep Alive of the old server never reaches the new one; answers to
/// the new server's own Keep Alives do.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keep_alive_answers_reach_only_the_server_that_asked() {
    let (a, _) = forge_server("survival", 1, false).await;
    let (b, lobby_log) = forge_server("lobby", 42, false).await;
    let proxy = proxy_for(a, b).await;
    let mut client = ForgeClient::connect(proxy.addr(Transport::Tcp), "Pinger").await;
    client.until(|seen| seen.iter().any(|s| s.starts_with("JoinGame"))).await;
    // The survival server asks; the client answers only after the switch (as a busy client may).
    client.say("keepalive 77").await;
    client.until(|seen| seen.last().is_some_and(|s| s == "KeepAlive 77")).await;
    client.say("connect lobby").await;
    client.until(|seen| seen.iter().filter(|s| s.starts_with("Respawn")).count() == 2).await;
    client.answer_keep_alive(77).await;
    client.say("keepalive 88").await;
    client.until(|seen| seen.last().is_some_and(|s| s == "KeepAlive 88")).await;
    client.answer_keep_alive(88).await;
    client.say("hello").await;
    client.until(|seen| seen.last().is_some_and(|s| s.contains("echo"))).await;
    let mut lobby = server_heard();
    // An answer 77 reaching the lobby would stand before "chat keepalive 88".
    lobby.extend(["chat keepalive 88".to_string(), "KeepAlive 88".to_string(), "chat hello".to_string()]);
    wait_log(&lobby_log, &lobby).await;
    drop(client);
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}
