//! The configuration's unit tests: parsing, defaults, every check and its message.

use std::time::Duration;

use super::check::{check_host_port, check_session_server};
use super::*;

#[test]
fn ipv6_backend_addresses_need_brackets() {
    assert!(check_host_port("[2001:db8::10]:25566").is_ok());
    assert!(check_host_port("mc.example.com:25565").is_ok());
    assert!(check_host_port("2001:db8::1:2565").unwrap_err().contains("needs brackets"));
    assert!(check_host_port("[mc.example.com]:25565").unwrap_err().contains("not an IPv6 address"));
}

#[test]
fn empty_file_means_defaults() {
    let c = Config::from_toml("").unwrap();
    assert_eq!(c, Config::default());
    let s = c.settings().unwrap();
    assert_eq!(s.listeners[0].bind.to_string(), "0.0.0.0:25577");
    assert_eq!(s.listeners[0].transport(), Transport::Tcp);
    assert_eq!(s.listeners[1].transport(), Transport::Ws);
    assert_eq!(s.listeners[1].bind.to_string(), "0.0.0.0:8080");
    let ListenerKind::Ws(ws) = &s.listeners[1].kind else { panic!("ws") };
    assert_eq!(ws.path, "/mc");
    assert_eq!(ws.ping_interval, Some(Duration::from_secs(30)));
    assert_eq!(s.backends[s.routes.default_backend].name, "default");
    assert!(c.check().is_empty());
}

#[test]
fn full_tcp_config() {
    let c = Config::from_toml(
        r#"
        [[listener]]
        transport = "tcp"
        bind = "0.0.0.0:25565"
        proxy_protocol = false

        [[backend]]
        name = "survival"
        address = "127.0.0.1:25566"
        forwarding = "bungeecord"

        [routing]
        default_backend = "survival"
        [routing.hosts]
        "mc.example.com" = "survival"

        [auth]
        mode = "offline"

        [limits]
        max_connections = 100
        handshake_timeout_seconds = 3
        "#,
    )
    .unwrap();
    assert!(c.check().is_empty(), "{:?}", c.check());
    let s = c.settings().unwrap();
    assert_eq!(s.backends[0].forwarding, Forwarding::Bungeecord);
    assert_eq!(s.routes.hosts.get("mc.example.com"), Some(&0));
    assert!(matches!(s.listeners[0].kind, ListenerKind::Tcp { proxy_header: None }));
    assert_eq!(c.limits.max_connections, 100);
    assert_eq!(c.limits.max_handshaking, 1024);
    assert_eq!(c.limits.handshake_timeout(), Duration::from_secs(3));
}

#[test]
fn runtime_keys() {
    let c = Config::from_toml("").unwrap();
    assert_eq!(c.runtime.mode, RuntimeMode::ThreadPerCore);
    assert_eq!(c.runtime.workers, 0);
    assert!(c.runtime.worker_count() >= 1);
    let c = Config::from_toml("[runtime]\nmode = \"multi-thread\"\nworkers = 3\n").unwrap();
    assert_eq!(c.settings().unwrap().runtime, RuntimeConfig { mode: RuntimeMode::MultiThread, workers: 3 });
    assert_eq!(c.runtime.worker_count(), 3);
    let c = Config::from_toml("[runtime]\nmode = \"thread-per-core\"\nworkers = 1025\n").unwrap();
    assert_eq!(c.check().iter().map(|p| p.key.as_str()).collect::<Vec<_>>(), ["runtime.workers"]);
    let c = Config::from_toml("[compression]\nenabled = false\nlevel = 20\n").unwrap();
    assert!(!c.compression.enabled);
    assert_eq!(c.check().iter().map(|p| p.key.as_str()).collect::<Vec<_>>(), ["compression.level"]);
    assert_eq!(Config::default().compression, CompressionConfig { enabled: true, level: 1 });
    let e = Config::from_toml("[runtime]\nmode = \"green-threads\"\n").unwrap_err().to_string();
    assert!(e.contains("thread-per-core") && e.contains("multi-thread"), "{e}");
}

#[test]
fn unknown_keys_are_named_with_their_line() {
    let e = Config::from_toml("[[listener]]\ntransport = \"tcp\"\nbindd = \"0.0.0.0:1\"\n").unwrap_err();
    let s = e.to_string();
    assert!(s.contains("bindd"), "{s}");
    assert!(s.contains("line 3"), "{s}");
    let e = Config::from_toml("[limits]\nmax_conections = 5\n").unwrap_err();
    assert!(e.to_string().contains("max_conections"), "{e}");
    let e = Config::from_toml("[[listener]]\ntransport = \"udp\"\nbind = \"0.0.0.0:1\"\n").unwrap_err();
    assert!(e.to_string().contains("udp"), "{e}");
}

#[test]
fn websocket_listener_keys() {
    let c = Config::from_toml(
        r#"
        [[listener]]
        transport = "ws"
        bind = "127.0.0.1:8080"
        path = "/play"
        ping_interval_seconds = 0
        trusted_proxies = ["127.0.0.1", "10.0.0.0/8", "2001:db8::/32"]
        real_ip_header = "X-Forwarded-For"
        [[listener]]
        transport = "tcp"
        bind = "127.0.0.1:25565"
        proxy_protocol = true
        [[listener]]
        transport = "tcp"
        bind = "127.0.0.1:25566"
        proxy_protocol = true
        trusted_proxies = ["10.0.0.1"]
        [[backend]]
        name = "b"
        address = "127.0.0.1:1"
        forwarding = "proxy-protocol"
        "#,
    )
    .unwrap();
    let s = c.settings().unwrap();
    let ListenerKind::Ws(ws) = &s.listeners[0].kind else { panic!("ws") };
    assert_eq!(ws.path, "/play");
    assert_eq!(ws.ping_interval, None);
    assert_eq!(ws.real_ip_header, RealIpHeader::XForwardedFor);
    assert_eq!(ws.trusted.len(), 3);
    assert!(ws.trusted.contains("127.0.0.1".parse().unwrap()));
    assert!(ws.trusted.contains("::ffff:10.1.2.3".parse().unwrap()), "IPv4-mapped peers match");
    assert!(!ws.trusted.contains("192.0.2.1".parse().unwrap()));
    assert!(matches!(s.listeners[1].kind, ListenerKind::Tcp { proxy_header: Some(None) }), "any peer");
    let ListenerKind::Tcp { proxy_header: Some(Some(t)) } = &s.listeners[2].kind else { panic!("tcp") };
    assert!(t.contains("10.0.0.1".parse().unwrap()) && !t.contains("10.0.0.2".parse().unwrap()));
    assert_eq!(s.backends[0].forwarding, Forwarding::ProxyProtocol);
}

#[test]
fn transport_specific_keys_are_checked() {
    let c = Config::from_toml(
        r#"
        [[listener]]
        transport = "tcp"
        bind = "127.0.0.1:1"
        path = "/mc"
        trusted_proxies = ["1.2.3.4"]
        [[listener]]
        transport = "ws"
        bind = "127.0.0.1:2"
        proxy_protocol = true
        tls_cert = "x.pem"
        path = "mc"
        ping_interval_seconds = 7200
        trusted_proxies = ["not-an-ip"]
        [[listener]]
        transport = "wss"
        bind = "127.0.0.1:3"
        tls_key = "/nonexistent/key.pem"
        "#,
    )
    .unwrap();
    let problems = c.check();
    let keys: Vec<&str> = problems.iter().map(|p| p.key.as_str()).collect();
    assert_eq!(
        keys,
        [
            "listener[0].path",
            "listener[0].trusted_proxies",
            "listener[1].tls_cert",
            "listener[1].path",
            "listener[1].ping_interval_seconds",
            "listener[1].trusted_proxies",
            "listener[2].tls_cert",
            "listener[2].tls_key",
        ]
    );
    assert!(problems[5].message.contains("\"not-an-ip\""), "{}", problems[5]);
    // A PROXY header in front of a WebSocket listener (a TCP balancer passing TLS through).
    let c = Config::from_toml(
        "[[listener]]\ntransport = \"ws\"\nbind = \"127.0.0.1:2\"\nproxy_protocol = true\ntrusted_proxies = [\"10.0.0.2\"]\n",
    )
    .unwrap();
    let s = c.settings().unwrap();
    let ListenerKind::Ws(ws) = &s.listeners[0].kind else { panic!("ws") };
    assert!(ws.proxy_header && ws.trusted.contains("10.0.0.2".parse().unwrap()));
    // Without the balancers' addresses, anyone could name any address.
    let c = Config::from_toml("[[listener]]\ntransport = \"wss\"\nbind = \"127.0.0.1:2\"\nproxy_protocol = true\n")
        .unwrap();
    let problems: Vec<String> = c.check().iter().map(ToString::to_string).collect();
    assert!(
        problems.iter().any(|p| p.starts_with("listener[0].proxy_protocol: ") && p.contains("trusted_proxies")),
        "{problems:?}"
    );
}

#[test]
fn transfer_names_backends_and_bounds_its_deadlines() {
    let c = Config::from_toml(
        r#"
        [[backend]]
        name = "survival"
        address = "127.0.0.1:25566"
        [[backend]]
        name = "lobby"
        address = "127.0.0.1:25567"
        [transfer]
        targets = ["lobby", "creative"]
        switch_timeout_seconds = 0
        forge_handshake_timeout_seconds = 301
        [transfer.fallback]
        "survival" = "lobby"
        "lobby" = "lobby"
        "hub" = "void"
        "#,
    )
    .unwrap();
    let problems = c.check();
    let got: Vec<String> = problems.iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            "transfer.targets[1]: no [[backend]] is named \"creative\"",
            "transfer.fallback.\"hub\": no [[backend]] is named \"hub\"",
            "transfer.fallback.\"hub\": no [[backend]] is named \"void\"",
            "transfer.fallback.\"lobby\": a backend cannot be its own fallback",
            "transfer.switch_timeout_seconds: must be between 1 and 300 seconds",
            "transfer.forge_handshake_timeout_seconds: must be between 1 and 300 seconds",
        ]
    );
    let ok = Config::from_toml(
        "[[backend]]\nname = \"a\"\naddress = \"h:1\"\n[[backend]]\nname = \"b\"\naddress = \"h:2\"\n\
         [transfer]\ntargets = [\"b\"]\n[transfer.fallback]\n\"a\" = \"b\"\n",
    )
    .unwrap();
    let t = ok.settings().unwrap().tunables.transfer;
    assert_eq!(t.fallback.get("a").map(String::as_str), Some("b"));
    assert_eq!((t.switch_timeout_seconds, t.forge_handshake_timeout_seconds), (15, 30));
}

#[test]
fn every_problem_is_reported() {
    let c = Config::from_toml(
        r#"
        [[backend]]
        name = "a"
        address = "nohost"
        forwarding = "bungeecord"
        [[backend]]
        name = "a"
        address = "h:0"
        [routing]
        default_backend = "zzz"
        [routing.hosts]
        "X.com" = "a"
        "x.com." = "missing"
        [limits]
        max_connections = 0
        max_ws_message_bytes = 10
        max_play_frame_bytes = 2097150
        "#,
    )
    .unwrap();
    let keys: Vec<String> = c.check().into_iter().map(|p| p.key).collect();
    assert_eq!(
        keys,
        [
            "backend[0].address",
            "backend[0].forwarding",
            "backend[1].name",
            "backend[1].address",
            "routing.default_backend",
            "routing.hosts.\"x.com.\"",
            "routing.hosts.\"x.com.\"",
            "limits.max_connections",
            "limits.max_ws_message_bytes",
            "limits.max_play_frame_bytes",
        ]
    );
    // Vanilla's limit and a Java int are the bounds; the default is GT New Horizons' 256 MiB.
    for (value, ok) in [(2_097_151u64, true), (268_435_456, true), (2_147_483_647, true), (2_147_483_648, false)] {
        let c = Config::from_toml(&format!("[limits]\nmax_play_frame_bytes = {value}\n")).unwrap();
        assert_eq!(c.check().is_empty(), ok, "{value}");
    }
    assert_eq!(Config::default().limits.max_play_frame_bytes, 256 << 20);
}

#[test]
fn online_mode_keys() {
    let c = Config::from_toml(
        r#"
        [[backend]]
        name = "a"
        address = "127.0.0.1:25565"
        forwarding = "bungeecord"
        forwarding_secret = "0123456789abcdef"
        [auth]
        mode = "online"
        session_server = "http://127.0.0.1:8081"
        session_timeout_seconds = 3
        "#,
    )
    .unwrap();
    assert!(c.check().is_empty(), "{:?}", c.check());
    assert_eq!(c.auth.mode, AuthMode::Online);
    assert_eq!(c.auth.session_timeout_seconds, 3);
    assert_eq!(c.backends[0].forwarding_secret.as_deref(), Some("0123456789abcdef"));
    assert_eq!(Config::default().auth.session_timeout_seconds, 10);
    assert_eq!(Config::default().auth.session_server, "https://sessionserver.mojang.com");
    for ok in ["https://sessionserver.mojang.com", "http://127.0.0.1:8081", "http://[::1]:80/x", "http://localhost"] {
        assert_eq!(check_session_server(ok), Ok(()), "{ok}");
    }
    for bad in ["http://sessionserver.mojang.com", "http://10.0.0.1", "ftp://x", "https://", "sessionserver.mojang.com"]
    {
        assert!(check_session_server(bad).is_err(), "{bad}");
    }

    let bad = Config::from_toml(
        r#"
        [[backend]]
        name = "a"
        address = "127.0.0.1:25565"
        forwarding = "bungeecord"
        forwarding_secret = "short"
        [[backend]]
        name = "b"
        address = "127.0.0.1:25566"
        forwarding_secret = "0123456789abcdef"
        [auth]
        mode = "online"
        session_server = "sessionserver.mojang.com"
        session_timeout_seconds = 0
        "#,
    )
    .unwrap();
    let keys: Vec<String> = bad.check().into_iter().map(|p| p.key).collect();
    assert_eq!(
        keys,
        [
            "backend[0].forwarding_secret",
            "backend[1].forwarding_secret",
            "auth.session_server",
            "auth.session_timeout_seconds",
        ]
    );
}

#[test]
fn the_configurations_own_spelling() {
    assert_eq!(Forwarding::None.to_string(), "none");
    assert_eq!(Forwarding::ProxyProtocol.to_string(), "proxy-protocol");
    assert_eq!(AuthMode::Passthrough.to_string(), "passthrough");
    assert_eq!(Transport::Wss.to_string(), "wss");
}

#[test]
fn network_keys_defaults_and_checks() {
    let key = std::env::temp_dir().join(format!("moonbridge-config-test-{}.key", std::process::id()));
    let with_secret = |secret: &str| {
        std::fs::write(&key, secret).unwrap();
        let toml = format!(
            "[network]\nredis_url = \"redis://10.0.0.2:6379/0\"\npeer_bind = \"0.0.0.0:25600\"\nsecret_file = \"{}\"\n",
            key.display()
        );
        Config::from_toml(&toml).unwrap()
    };
    let c = with_secret("0123456789abcdef0123456789abcdef\n");
    assert!(c.check().is_empty(), "{:?}", c.check());
    let n = c.settings().unwrap().network.unwrap();
    assert_eq!((n.name.as_str(), n.duplicate_login, n.peer_address), ("main", DuplicateLogin::KickExisting, None));
    // The secret file is read as the start reads it.
    let short: Vec<String> = with_secret("  short  ").check().iter().map(ToString::to_string).collect();
    assert_eq!(short.len(), 1, "{short:?}");
    assert!(short[0].starts_with("network.secret_file: ") && short[0].contains("holds 5 bytes"), "{short:?}");
    let _ = std::fs::remove_file(&key);
    let gone: Vec<String> = c.check().iter().map(ToString::to_string).collect();
    assert!(gone.len() == 1 && gone[0].contains("cannot read"), "{gone:?}");

    let c = Config::from_toml(
        "[[listener]]\ntransport = \"tcp\"\nbind = \"0.0.0.0:25565\"\n\
         [network]\nredis_url = \"http://r:6379\"\nname = \"two words\"\npeer_bind = \"0.0.0.0:25565\"\n\
         peer_address = \"10.0.0.5\"\nsecret_file = \"\"\nduplicate_login = \"refuse_new\"\n",
    )
    .unwrap();
    let got: Vec<String> = c.check().iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            "network.redis_url: must start with redis:// or rediss://",
            "network.name: must be 1 to 64 characters of A-Z a-z 0-9 - _ .",
            "network.peer_bind: 0.0.0.0:25565 is used by a [[listener]]",
            "network.peer_address: \"10.0.0.5\" is not host:port",
            "network.secret_file: must name a file",
        ]
    );
    let err = Config::from_toml("[network]\nredis_url = \"redis://r\"\npeer_bind = \"1.2.3.4:1\"\nsecret_file = \"k\"\nduplicate_login = \"both\"\n")
        .unwrap_err()
        .to_string();
    assert!(err.contains("kick_existing") && err.contains("refuse_new"), "{err}");
}

#[test]
fn sentinel_keys_come_together_and_name_host_ports() {
    let net = |extra: &str| {
        let toml = format!(
            "[network]\nredis_url = \"redis://:pw@10.0.0.2:6379/0\"\npeer_bind = \"10.0.0.5:25600\"\n\
             secret_file = \"\"\n{extra}"
        );
        let c = Config::from_toml(&toml).unwrap();
        let got: Vec<String> =
            c.check().iter().map(ToString::to_string).filter(|p| !p.contains("secret_file")).collect();
        got
    };
    assert!(net("redis_sentinels = [\"10.0.0.21:26379\", \"s2:26379\"]\nredis_master_name = \"mymaster\"\n").is_empty());
    assert_eq!(
        net("redis_sentinels = [\"10.0.0.21:26379\"]\n"),
        ["network.redis_master_name: is required with redis_sentinels"]
    );
    assert_eq!(net("redis_master_name = \"m\"\n"), ["network.redis_master_name: needs redis_sentinels"]);
    assert_eq!(
        net("redis_sentinels = [\"10.0.0.21\"]\nredis_master_name = \"m\"\n"),
        ["network.redis_sentinels: 10.0.0.21: \"10.0.0.21\" is not host:port"]
    );
    let seventeen: Vec<String> = (0..17).map(|i| format!("\"10.0.0.{i}:26379\"")).collect();
    let many = net(&format!("redis_sentinels = [{}]\nredis_master_name = \"m\"\n", seventeen.join(", ")));
    assert_eq!(many, ["network.redis_sentinels: lists more than 16 sentinels"]);
}

#[test]
fn lanes_keys_and_the_player_queue_bound() {
    let c = Config::from_toml(
        r#"
        [limits]
        player_queue_bytes = 1000
        [lanes]
        urgent_channels = ["MyChatMod", "", "a-channel-name-past-twenty"]
        "#,
    )
    .unwrap();
    let got: Vec<String> = c.check().iter().map(ToString::to_string).collect();
    assert_eq!(
        got,
        [
            "limits.player_queue_bytes: must be between 262144 and 1073741824 bytes",
            "lanes.urgent_channels: \"\": a channel name is 1 to 20 bytes, no control characters",
            "lanes.urgent_channels: \"a-channel-name-past-twenty\": a channel name is 1 to 20 bytes, no control characters",
        ]
    );
    let t = Config::from_toml("").unwrap().settings().unwrap().tunables;
    assert!(t.lanes.on(), "on by default");
    assert_eq!(t.limits.player_queue_bytes, 8 * 1024 * 1024);
    let on = Config::from_toml("[lanes]\nenabled = true\nurgent_channels = [\"MyChatMod\"]\n").unwrap();
    let t = on.settings().unwrap().tunables;
    assert!(t.lanes.on());
    assert_eq!(t.lanes.urgent_channels, ["MyChatMod"]);
    let off = Config::from_toml("[lanes]\nenabled = false\n").unwrap();
    assert!(!off.settings().unwrap().tunables.lanes.on());
}
