//! Field cases C2, C3, C4, C6, C9, C10 and C12 (`../shared/cases/README.md`) against the `tcp` listener, with
//! raw sockets sending the exact bytes of each case.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::time::{Duration, Instant};

use moonbridge_protocol::forwarding::offline_uuid;
use moonbridge_protocol::legacy;
use moonbridge_protocol::packets::{Handshake, NextState, Packet};
use moonbridge_proxy::config::Transport;
use testbed::{
    forwarded_fields, forwarded_login, frames, hs_ls, login_backend, login_disconnect_reason, login_handshake,
    login_success, raise_fd_limit, read_to_close, tcp_config, Proxy, RawBackend, RawBehaviour, HS, LS, STEP,
};
use tokio::io::{AsyncReadExt, AsyncWriteExt};
use tokio::net::TcpStream;
use tokio::time::timeout;

/// Connects, sends `bytes`, and expects Login Success back.
async fn log_in(addr: std::net::SocketAddr, bytes: &[u8]) -> TcpStream {
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(bytes).await.unwrap();
    let expected = login_success("Steve");
    let mut got = vec![0u8; expected.len()];
    timeout(STEP, s.read_exact(&mut got)).await.expect("login answered in time").unwrap();
    assert_eq!(got, expected);
    s
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c2_wide_frame_lengths_close_only_that_connection_at_once() {
    let backend = login_backend().await;
    // A long handshake deadline proves the close comes from the length check, not the deadline.
    let proxy = Proxy::start(&tcp_config(backend.addr, "[limits]\nhandshake_timeout_seconds = 60\n")).await;
    let addr = proxy.addr(Transport::Tcp);

    // A healthy player, in Play before and after the bad input.
    let mut good = log_in(addr, &hs_ls()).await;

    for bad in [&[0x80, 0x80, 0x80, 0x01][..], &[0xff, 0xff, 0xff, 0xff, 0x0f]] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(HS).await.unwrap();
        s.write_all(bad).await.unwrap();
        let started = Instant::now();
        let (got, closed) = read_to_close(&mut s, Duration::from_secs(5)).await;
        assert!(closed, "connection sending {bad:02x?} was not closed");
        assert!(got.is_empty(), "nothing is sent back: {got:02x?}");
        assert!(started.elapsed() < Duration::from_secs(2), "closed at once, not by a deadline");
    }

    // An endless stream of FF: the proxy closes while we are still writing.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(HS).await.unwrap();
    let chunk = [0xffu8; 4096];
    let mut written = 0usize;
    let ended = timeout(Duration::from_secs(5), async {
        loop {
            match s.write_all(&chunk).await {
                Ok(()) => written += chunk.len(),
                Err(_) => return,
            }
            if written > 64 * 1024 * 1024 {
                panic!("proxy kept reading an endless FF stream");
            }
        }
    })
    .await;
    assert!(ended.is_ok(), "endless FF stream not cut");

    // Only the connections that sent bad lengths were affected: the first player still relays.
    good.write_all(&[0x05, 0x00, 0x00, 0x00, 0x00, 0x07]).await.unwrap();
    let rx = backend.wait_received(0, HS.len() + LS.len() + 6, STEP).await;
    assert_eq!(&rx[HS.len() + LS.len()..], &[0x05, 0x00, 0x00, 0x00, 0x00, 0x07]);
    // The bad connections never reached a backend.
    assert_eq!(backend.accepted(), 1);
    drop(good);
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c3_forge_marker_routes_by_hostname_and_reaches_the_backend() {
    let routed = login_backend().await;
    let other = login_backend().await;
    let config = format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\n\
         [[backend]]\nname = \"other\"\naddress = \"{}\"\n\
         [[backend]]\nname = \"survival\"\naddress = \"{}\"\n\
         [routing]\ndefault_backend = \"other\"\n[routing.hosts]\n\"MC.example.com\" = \"survival\"\n",
        other.addr, routed.addr
    );
    let proxy = Proxy::start(&config).await;
    let addr = proxy.addr(Transport::Tcp);

    // With the marker: routed by `mc.example.com`, and the backend gets the handshake marker intact.
    let _p = log_in(addr, &hs_ls()).await;
    let rx = routed.wait_received(0, HS.len() + LS.len(), STEP).await;
    assert_eq!(rx, hs_ls(), "backend receives the handshake with \\0FML\\0 and Login Start unchanged");

    // Without the marker (and with a trailing dot and other case): forwarded without one.
    let plain = login_handshake("Mc.Example.com.");
    let bytes = [&plain[..], LS].concat();
    let _q = log_in(addr, &bytes).await;
    let rx = routed.wait_received(1, bytes.len(), STEP).await;
    assert_eq!(rx, bytes);
    let fr = frames(&rx);
    let hs: Handshake = {
        let mut dec = moonbridge_protocol::FrameDecoder::new(2048);
        dec.queue_slice(&rx);
        dec.try_next_frame().unwrap().unwrap().decode().unwrap()
    };
    assert!(!hs.server_address.contains('\0'));
    assert_eq!(fr.len(), 2);
    assert_eq!(other.accepted(), 0, "no connection went to the default backend");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c4_bungeecord_forwarding_carries_forge_as_properties() {
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let proxy = Proxy::start(&tcp_config(
        backend.addr,
        "forwarding = \"bungeecord\"\n[auth]\nmode = \"offline\"\n[limits]\nlogin_timeout_seconds = 60\n",
    ))
    .await;
    let addr = proxy.addr(Transport::Tcp);

    let mut forge = TcpStream::connect(addr).await.unwrap();
    forge.write_all(&hs_ls()).await.unwrap();
    let rx = backend.wait_frames(0, 2, STEP).await;
    let (fields, login) = forwarded_login(&rx);
    assert_eq!(login.name, "Steve");
    assert_eq!(fields.len(), 4, "host, IP, UUID, properties: {fields:?}");
    assert_eq!(fields[0], "mc.example.com");
    assert_eq!(fields[1], "127.0.0.1");
    assert_eq!(fields[2], offline_uuid("Steve").simple().to_string());
    let props: serde_json::Value = serde_json::from_str(&fields[3]).unwrap();
    assert_eq!(props[0]["name"], "forgeClient");
    assert_eq!(props[0]["value"], "true");
    assert_eq!(props[1]["name"], "extraData");
    assert_eq!(props[1]["value"], "\u{1}FML\u{1}");
    assert!(!fields.iter().any(|f| f == "FML"), "the marker is not spliced between the fields");

    // A vanilla client: exactly three fields.
    let plain = login_handshake("mc.example.com");
    let mut vanilla = TcpStream::connect(addr).await.unwrap();
    vanilla.write_all(&[&plain[..], LS].concat()).await.unwrap();
    let rx = backend.wait_frames(1, 2, STEP).await;
    let fields = forwarded_fields(&rx);
    assert_eq!(fields.len(), 3, "{fields:?}");
    assert_eq!(fields[2], "5627dd98e6be3c21b8a8e92344183641");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c6_legacy_pings_are_answered_when_the_backend_cannot() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let proxy = Proxy::start(&tcp_config(dead, "")).await;
    let addr = proxy.addr(Transport::Tcp);

    // FE alone: the 1.3 form `motd§online§max`.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0xfe]).await.unwrap();
    let (got, closed) = read_to_close(&mut s, STEP).await;
    assert!(closed);
    let (text, n) = legacy::decode_kick(&got).unwrap().expect("a complete FF kick packet");
    assert_eq!(n, got.len());
    assert_eq!(text, "Server survival is unreachable§0§0");

    // FE 01 alone: the 1.4+ form, starting with §1 and NUL-separated.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[0xfe, 0x01]).await.unwrap();
    let (got, _) = read_to_close(&mut s, STEP).await;
    let (text, _) = legacy::decode_kick(&got).unwrap().expect("a complete FF kick packet");
    assert_eq!(
        text.split('\0').collect::<Vec<_>>(),
        ["§1", "127", "1.7.10", "Server survival is unreachable", "0", "0"]
    );
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c6_legacy_pings_are_relayed_to_the_backend() {
    let status = legacy::LegacyStatus {
        protocol: 78,
        version: "1.6.4".into(),
        motd: "from the backend".into(),
        online: 3,
        max: 9,
    };
    let kick = legacy::encode_kick(&legacy::LegacyPing::V1_4, &status);
    let backend = RawBackend::start(RawBehaviour::ReplyAfter { after: 2, reply: kick.clone() }).await;
    let proxy = Proxy::start(&tcp_config(backend.addr, "")).await;
    let mut s = TcpStream::connect(proxy.addr(Transport::Tcp)).await.unwrap();
    s.write_all(&[0xfe, 0x01]).await.unwrap();
    let (got, closed) = read_to_close(&mut s, STEP).await;
    assert!(closed);
    assert_eq!(got, kick, "the backend's own answer, byte for byte");
    assert_eq!(backend.wait_received(0, 2, STEP).await, [0xfe, 0x01]);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_254_byte_handshake_starting_fe_01_is_not_a_legacy_ping() {
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let proxy = Proxy::start(&tcp_config(backend.addr, "[limits]\nlogin_timeout_seconds = 60\n")).await;
    // id (1) + protocol (1) + host length (2) + host + port (2) + next state (1) = 254.
    let hs = Handshake {
        protocol_version: 5,
        server_address: "h".repeat(247),
        server_port: 25565,
        next_state: NextState::Login,
    }
    .to_frame_bytes()
    .unwrap();
    assert_eq!(&hs[..3], &[0xfe, 0x01, 0x00]);
    let bytes = [&hs[..], LS].concat();
    let mut s = TcpStream::connect(proxy.addr(Transport::Tcp)).await.unwrap();
    s.write_all(&bytes).await.unwrap();
    assert_eq!(backend.wait_received(0, bytes.len(), STEP).await, bytes);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c9_split_and_merged_handshakes_lose_no_byte() {
    let backend = login_backend().await;
    let proxy = Proxy::start(&tcp_config(backend.addr, "")).await;
    let addr = proxy.addr(Transport::Tcp);
    let next = [0x05u8, 0x00, 0x01, 0x02, 0x03, 0x04]; // a 5-byte Keep Alive after login

    // (a) HS one byte per TCP segment, 50 ms apart (this pacing is the input under test).
    let mut a = TcpStream::connect(addr).await.unwrap();
    a.set_nodelay(true).unwrap();
    for b in HS {
        a.write_all(&[*b]).await.unwrap();
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    a.write_all(LS).await.unwrap();
    let expected = login_success("Steve");
    let mut got = vec![0u8; expected.len()];
    timeout(STEP, a.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(got, expected);
    assert_eq!(backend.wait_received(0, HS.len() + LS.len(), STEP).await, hs_ls());

    // (b) HS + LS in one write.
    let _b = log_in(addr, &hs_ls()).await;
    assert_eq!(backend.wait_received(1, HS.len() + LS.len(), STEP).await, hs_ls());

    // (c) HS + LS + the first 3 bytes of the next frame in one write, the rest later.
    let mut c = TcpStream::connect(addr).await.unwrap();
    c.write_all(&[&hs_ls()[..], &next[..3]].concat()).await.unwrap();
    let mut got = vec![0u8; expected.len()];
    timeout(STEP, c.read_exact(&mut got)).await.unwrap().unwrap();
    assert_eq!(got, expected);
    c.write_all(&next[3..]).await.unwrap();
    let all = [&hs_ls()[..], &next[..]].concat();
    assert_eq!(backend.wait_received(2, all.len(), STEP).await, all, "every byte, in order");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c10_slow_clients_share_one_deadline_and_a_capped_stage() {
    raise_fd_limit();
    let backend = login_backend().await;
    // Scaled down: a 3 s deadline and one byte per second (26 s for the whole handshake) show that the
    // deadline is not reset per byte.
    let proxy = Proxy::start(&tcp_config(backend.addr, "[limits]\nhandshake_timeout_seconds = 3\n")).await;
    let addr = proxy.addr(Transport::Tcp);

    let mut slow: Vec<TcpStream> = Vec::with_capacity(2000);
    for _ in 0..2000 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&[0x19]).await.unwrap();
        slow.push(s);
    }
    let opened = Instant::now();

    // The handshaking stage stays capped at max_handshaking (1024 by default).
    let stats = proxy.stats.stats();
    assert!(stats.handshaking <= 1024, "{stats:?}");

    // One byte per second on another connection.
    let trickle = tokio::spawn(async move {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.set_nodelay(true).unwrap();
        let started = Instant::now();
        for b in HS {
            if s.write_all(&[*b]).await.is_err() {
                break;
            }
            let mut probe = [0u8; 1];
            // Wait for the next byte slot, or notice the close.
            if let Ok(Ok(0)) = timeout(Duration::from_secs(1), s.read(&mut probe)).await {
                return started.elapsed();
            }
        }
        let (_, closed) = read_to_close(&mut s, Duration::from_secs(30)).await;
        assert!(closed);
        started.elapsed()
    });

    // A player logging in meanwhile is unaffected.
    let login_started = Instant::now();
    let _player = log_in(addr, &hs_ls()).await;
    assert!(login_started.elapsed() < Duration::from_secs(2), "player delayed by {:?}", login_started.elapsed());

    let trickle_closed_after = timeout(Duration::from_secs(30), trickle).await.unwrap().unwrap();
    assert!(
        trickle_closed_after >= Duration::from_millis(2500) && trickle_closed_after < Duration::from_secs(6),
        "one deadline for the whole handshake: closed after {trickle_closed_after:?}"
    );

    // Every slow socket is closed by the deadline (or was evicted earlier).
    for s in &mut slow {
        let (_, closed) = read_to_close(s, Duration::from_secs(10)).await;
        assert!(closed);
    }
    assert!(opened.elapsed() < Duration::from_secs(15));
    drop(slow);
    proxy.wait_connections(1, STEP).await;
    assert_eq!(proxy.stats.stats().handshaking, 0);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c10_a_full_handshake_stage_evicts_the_oldest_connection() {
    // A long deadline, so only eviction can close them: 20 slow sockets against 10 slots.
    let backend = login_backend().await;
    let proxy =
        Proxy::start(&tcp_config(backend.addr, "[limits]\nhandshake_timeout_seconds = 60\nmax_handshaking = 10\n"))
            .await;
    let addr = proxy.addr(Transport::Tcp);
    let mut slow = Vec::new();
    for _ in 0..20 {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&[0x19]).await.unwrap();
        slow.push(s);
    }
    // The ten oldest are closed at once; the ten newest wait.
    for (i, s) in slow.iter_mut().enumerate() {
        let (_, closed) = read_to_close(s, Duration::from_millis(if i < 10 { 3000 } else { 300 })).await;
        assert_eq!(closed, i < 10, "socket {i}");
    }
    assert_eq!(proxy.stats.stats().handshaking, 10);
    // A player still gets in (evicting the oldest remaining slow socket).
    let _p = log_in(addr, &hs_ls()).await;
    let (_, closed) = read_to_close(&mut slow[10], Duration::from_secs(3)).await;
    assert!(closed, "the oldest waiting socket made room for the player");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c12_backend_that_never_answers_gets_a_login_disconnect() {
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let proxy = Proxy::start(&tcp_config(backend.addr, "[limits]\nlogin_timeout_seconds = 2\n")).await;
    let mut s = TcpStream::connect(proxy.addr(Transport::Tcp)).await.unwrap();
    s.write_all(&hs_ls()).await.unwrap();
    let (got, closed) = read_to_close(&mut s, STEP).await;
    assert!(closed);
    assert_eq!(login_disconnect_reason(&got).as_deref(), Some("Server survival did not answer the login in time"));
    backend.wait_closed(0, STEP).await;
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unreachable_backend_gets_a_login_disconnect() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let proxy = Proxy::start(&tcp_config(dead, "")).await;
    let mut s = TcpStream::connect(proxy.addr(Transport::Tcp)).await.unwrap();
    s.write_all(&hs_ls()).await.unwrap();
    let (got, closed) = read_to_close(&mut s, STEP).await;
    assert!(closed);
    assert_eq!(login_disconnect_reason(&got).as_deref(), Some("Server survival is unreachable"));
    proxy.wait_connections(0, STEP).await;
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c37_a_1_6_ping_without_its_tail_is_answered_within_a_second() {
    let dead = std::net::TcpListener::bind("127.0.0.1:0").unwrap().local_addr().unwrap();
    let proxy = Proxy::start(&tcp_config(dead, "")).await;
    let addr = proxy.addr(Transport::Tcp);
    let expected = ["§1", "127", "1.7.10", "Server survival is unreachable", "0", "0"];

    // `FE 01 FA` and nothing more, then the client waits (up to 3 s in the status library).
    let mut s = TcpStream::connect(addr).await.unwrap();
    let sent = Instant::now();
    s.write_all(&[0xfe, 0x01, 0xfa]).await.unwrap();
    let (got, closed) = read_to_close(&mut s, Duration::from_secs(3)).await;
    assert!(closed, "answered and closed within 3 s");
    assert!(sent.elapsed() < Duration::from_secs(1), "answered after {:?}", sent.elapsed());
    let (text, n) = legacy::decode_kick(&got).unwrap().expect("one complete FF kick packet");
    assert_eq!(n, got.len(), "exactly one answer");
    assert_eq!(text.split('\0').collect::<Vec<_>>(), expected);

    // The full 1.6 ping, its tail split across segments (100 ms apart, under the silence wait): one answer.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.set_nodelay(true).unwrap();
    let full = legacy::encode_ping(&legacy::LegacyPing::V1_6 { protocol: 78, host: "localhost".into(), port: 25565 });
    for chunk in full.chunks(7) {
        s.write_all(chunk).await.unwrap();
        // Pacing is the input under test (segments arriving apart), not synchronisation.
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let (got, closed) = read_to_close(&mut s, STEP).await;
    assert!(closed);
    let (text, n) = legacy::decode_kick(&got).unwrap().expect("one complete FF kick packet");
    assert_eq!(n, got.len(), "exactly one answer, never two");
    assert_eq!(text.split('\0').collect::<Vec<_>>(), expected);
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c31_illegal_player_names_are_refused_before_any_backend() {
    let backend = login_backend().await;
    let proxy = Proxy::start(&tcp_config(backend.addr, "")).await;
    let addr = proxy.addr(Transport::Tcp);
    let hs = login_handshake("mc.example.com");
    let seventeen = [&[0x13, 0x00, 0x11][..], &[b'a'; 17]].concat();
    let mut japanese = vec![0x32, 0x00, 0x30]; // 16 × の: 48 bytes, 16 characters
    for _ in 0..16 {
        japanese.extend_from_slice("の".as_bytes());
    }
    for (what, login) in [
        ("a newline", vec![0x07, 0x00, 0x05, 0x61, 0x62, 0x0a, 0x63, 0x64]),
        ("empty", vec![0x02, 0x00, 0x00]),
        ("17 characters", seventeen),
        ("16 × の", japanese),
    ] {
        let mut s = TcpStream::connect(addr).await.unwrap();
        s.write_all(&[&hs[..], &login].concat()).await.unwrap();
        let (got, closed) = read_to_close(&mut s, STEP).await;
        assert!(closed, "{what}");
        let reason =
            login_disconnect_reason(&got).unwrap_or_else(|| panic!("{what}: a Login Disconnect, got {got:02x?}"));
        assert!(reason.contains("Invalid player name"), "{what}: {reason}");
    }
    assert_eq!(backend.accepted(), 0, "no backend heard of them");
    // A 16-character ASCII name is fine.
    let mut s = TcpStream::connect(addr).await.unwrap();
    s.write_all(&[&hs[..], &testbed::login_start("Abcdefghij_12345")].concat()).await.unwrap();
    let (_, login) = forwarded_login(&backend.wait_frames(0, 2, STEP).await);
    assert_eq!(login.name, "Abcdefghij_12345");
    proxy.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn c32_ipv6_players_are_forwarded_in_rfc_5952_text_and_ipv4_stays_ipv4() {
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let bungee = "forwarding = \"bungeecord\"\n[auth]\nmode = \"offline\"\n[limits]\nlogin_timeout_seconds = 60\n";
    // A PROXY v2 header for source 2001:db8::7, then HS + LS.
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"127.0.0.1:0\"\nproxy_protocol = true\n\n\
         [[backend]]\nname = \"survival\"\naddress = \"{}\"\n{bungee}",
        backend.addr
    ))
    .await;
    let mut header =
        vec![0x0d, 0x0a, 0x0d, 0x0a, 0x00, 0x0d, 0x0a, 0x51, 0x55, 0x49, 0x54, 0x0a, 0x21, 0x21, 0x00, 0x24];
    header.extend_from_slice(&"2001:db8::7".parse::<std::net::Ipv6Addr>().unwrap().octets());
    header.extend_from_slice(&"2001:db8::1".parse::<std::net::Ipv6Addr>().unwrap().octets());
    header.extend_from_slice(&[0x9c, 0x40, 0x63, 0xdd]);
    let mut s = TcpStream::connect(proxy.addr(Transport::Tcp)).await.unwrap();
    s.write_all(&[&header[..], &hs_ls()].concat()).await.unwrap();
    let (fields, login) = forwarded_login(&backend.wait_frames(0, 2, STEP).await);
    assert_eq!(login.name, "Steve");
    assert_eq!(fields[0], "mc.example.com");
    assert_eq!(fields[1], "2001:db8::7", "no brackets, port or zone");
    assert_eq!(fields[2], offline_uuid("Steve").simple().to_string());
    let props: serde_json::Value = serde_json::from_str(&fields[3]).unwrap();
    assert_eq!(props[0]["name"], "forgeClient");
    proxy.shutdown().await;

    // An IPv4 player on a listener bound to [::] is forwarded as plain IPv4, never ::ffff:….
    let backend = RawBackend::start(RawBehaviour::Silent).await;
    let proxy = Proxy::start(&format!(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"[::]:0\"\n\n[[backend]]\nname = \"survival\"\naddress = \"{}\"\n{bungee}",
        backend.addr
    ))
    .await;
    let port = proxy.addr(Transport::Tcp).port();
    let mut s = TcpStream::connect(("127.0.0.1", port)).await.unwrap();
    s.write_all(&hs_ls()).await.unwrap();
    let fields = forwarded_fields(&backend.wait_frames(0, 2, STEP).await);
    assert_eq!(fields[1], "127.0.0.1");
    proxy.shutdown().await;
}
