//! The player table's unit tests.

use super::*;

fn seen(name: &str, server: &str) -> Seen {
    Seen {
        name: name.into(),
        uuid: format!("{:032x}", name.len()),
        address: ([10, 0, 0, 1], 5).into(),
        transport: Transport::Ws,
        carriage: Carriage::V2,
        server: server.into(),
        movable: false,
    }
}

/// A record as an older version wrote it: only name, UUID and backend.
fn seen_record() -> Record {
    serde_json::from_str(r#"{"name":"x","uuid":"","server":"s"}"#).unwrap()
}

#[test]
fn records_of_other_versions_read() {
    let old = seen_record();
    assert_eq!((old.address, old.transport, old.carriage, old.since_ms), (None, None, None, None));
    // A later version's transport and carriage: unknown values read as none, the player still counts.
    let later: Record = serde_json::from_str(
        r#"{"name":"x","uuid":"","server":"s","address":"10.0.0.1:5","transport":"quic","carriage":"v3","since_ms":7}"#,
    )
    .unwrap();
    assert_eq!((later.transport, later.carriage, later.since_ms), (None, None, Some(7)));
    assert_eq!(later.address, Some(([10, 0, 0, 1], 5).into()));
}

#[test]
fn counts_lists_and_commands_follow_registrations() {
    let table = Arc::new(PlayerTable::default());
    let (tx, mut rx) = mpsc::channel(COMMAND_QUEUE);
    let a = table.register(seen("Alex", "lobby"), Some(tx), None, None, Duplicate::Replace);
    let b = table.register(seen("Steve", "survival"), None, None, None, Duplicate::Replace);
    assert_eq!((table.count(None), table.count(Some("lobby")), table.count(Some("x"))), (2, 1, 0));
    assert_eq!(table.names(None), ["Alex", "Steve"]);
    assert_eq!(table.find("alex").map(|s| s.server), Some("lobby".into()));
    assert!(table.send("ALEX", Command::Chat("\"hi\"".into())));
    assert_eq!(rx.try_recv().ok(), Some(Command::Chat("\"hi\"".into())));
    assert!(!table.send("Steve", Command::Kick("\"x\"".into())), "no command channel");
    assert!(!table.send_to_server("survival", Command::Forward(vec![1])));
    assert!(table.send_to_server("lobby", Command::Forward(vec![1])));
    a.moved_to("survival");
    assert_eq!(table.names(Some("survival")), ["Alex", "Steve"]);
    assert_eq!(table.servers(), ["survival"]);
    // A second session under the same name replaces the first; the first's end does not remove it.
    let again = table.register(seen("alex", "lobby"), None, None, None, Duplicate::Replace);
    drop(a);
    assert_eq!(table.find("Alex").map(|s| s.server), Some("lobby".into()));
    drop((again, b));
    assert_eq!(table.count(None), 0);
}

#[test]
fn a_drain_takes_each_player_once_and_the_ones_registered_later() {
    let table = Arc::new(PlayerTable::default());
    let (tx, _rx) = mpsc::channel(COMMAND_QUEUE);
    let mover = Seen { movable: true, ..seen("Mover", "s") };
    let _a = table.register(mover, Some(tx), None, None, Duplicate::Replace);
    let stop = Stop::child_of(&tokio_util::sync::CancellationToken::new());
    let _b = table.register(seen("Tcp", "s"), None, Some(stop), None, Duplicate::Replace);
    let (movers, others) = table.drain_split();
    assert_eq!((movers.len(), others.len()), (1, 1));
    let (movers, others) = table.drain_split();
    assert_eq!((movers.len(), others.len()), (0, 0), "each player once");
    let (tx, _rx2) = mpsc::channel(COMMAND_QUEUE);
    let _c = table.register(Seen { movable: true, ..seen("Late", "s") }, Some(tx), None, None, Duplicate::Replace);
    let (movers, others) = table.drain_split();
    assert_eq!((movers.len(), others.len()), (1, 0), "a player registered since");
}

#[test]
fn a_full_queue_drops_commands() {
    let table = Arc::new(PlayerTable::default());
    let (tx, _rx) = mpsc::channel(COMMAND_QUEUE);
    let _a = table.register(seen("A", "s"), Some(tx), None, None, Duplicate::Replace);
    let sent = (0..COMMAND_QUEUE + 5).filter(|_| table.send("A", Command::Chat(String::new()))).count();
    assert_eq!(sent, COMMAND_QUEUE);
    assert_eq!(table.send_all(&Command::Chat(String::new())), 0);
}

#[test]
fn kicks_stop_one_session_and_the_network_sees_every_change() {
    let table = Arc::new(PlayerTable::default());
    let (tx, mut rx) = mpsc::channel(2);
    let overflowed = Arc::new(AtomicBool::new(false));
    table.send_updates_to(Updates { tx, overflowed: Arc::clone(&overflowed) });
    let shutdown = CancellationToken::new();
    let (one, two) = (Stop::child_of(&shutdown), Stop::child_of(&shutdown));
    let a = table.register(
        seen("Alex", "lobby"),
        None,
        Some(Arc::clone(&one)),
        Some("i:1:1000:s".into()),
        Duplicate::Replace,
    );
    let b = table.register(seen("Steve", "lobby"), None, Some(Arc::clone(&two)), None, Duplicate::Replace);
    // The record says where and how the player plays, and since when (its claim's login time).
    let alex = |server: &str| Record {
        name: "Alex".into(),
        uuid: format!("{:032x}", 4),
        server: server.into(),
        address: Some(([10, 0, 0, 1], 5).into()),
        transport: Some(Transport::Ws),
        carriage: Some(Carriage::V2),
        since_ms: Some(1000),
    };
    let update = |change: Change| Update { key: "alex".into(), change, claim: Some("i:1:1000:s".into()) };
    assert_eq!(rx.try_recv().ok(), Some(update(Change::Plays(alex("lobby")))));
    assert_eq!(rx.try_recv().map(|u| (u.key, u.claim)).ok(), Some(("steve".into(), None)));
    assert_eq!(table.changes(), 2);
    assert!(!table.kick_claim("alex", "i:2", "x"), "another login's claim");
    let steve = table.records().into_iter().find(|(k, _, _)| k == "steve").and_then(|(_, r, _)| r.since_ms);
    assert!(steve.is_some_and(|t| t.abs_diff(now_ms()) < 60_000), "without a claim: registered now ({steve:?})");
    assert!(table.kick("ALEX", "You logged in from another location"));
    assert!(one.token.is_cancelled() && !two.token.is_cancelled() && !shutdown.is_cancelled());
    assert_eq!(one.kicked(), Some("You logged in from another location"));
    assert!(!table.kick("nobody", "x"));
    // The queue holds 2: the third change overflows and asks for a full rewrite.
    a.moved_to("survival");
    drop(a);
    assert!(!overflowed.load(Ordering::Relaxed));
    drop(b);
    assert!(overflowed.load(Ordering::Relaxed));
    assert_eq!(rx.try_recv().ok(), Some(update(Change::Plays(alex("survival")))));
    // The player left: the release names the claim it held.
    assert_eq!(rx.try_recv().ok(), Some(update(Change::Left)));
    assert_eq!(table.changes(), 5, "the change that did not fit is counted too");
    // Shutdown stops every session, without a kick reason.
    shutdown.cancel();
    assert!(two.token.is_cancelled() && two.kicked().is_none());
}

/// Two sessions of one name here: the policy keeps the later or the earlier login by their claims' times,
/// whatever order they register in (as the network's renewal decides between instances).
#[test]
fn two_logins_of_a_name_here_leave_the_one_the_policy_keeps() {
    let kick_existing = Duplicate::Keep { later: true, reason: "elsewhere" };
    let refuse_new = Duplicate::Keep { later: false, reason: "already" };
    // Claims as the network makes them (a signature last); their nonces run against their times, so an order
    // by anything but the login time would keep the wrong session.
    let (t1, t2, t3) = ("b:03:1700000000001:aa", "a:02:1700000000002:bb", "a:01:1700000000003:cc");
    let table = Arc::new(PlayerTable::default());
    let shutdown = CancellationToken::new();
    let stops: Vec<Arc<Stop>> = (0..4).map(|_| Stop::child_of(&shutdown)).collect();
    let register = |i: usize, claim: &str, duplicate| {
        table.register(seen("Alex", "lobby"), None, Some(Arc::clone(&stops[i])), Some(claim.into()), duplicate)
    };
    let claims = || table.records().into_iter().map(|(_, _, c)| c.unwrap_or_default()).collect::<Vec<_>>();
    // kick_existing, in login order: the later login stays, the earlier is told to go.
    let first = register(0, t2, kick_existing);
    let second = register(1, t3, kick_existing);
    assert_eq!((stops[0].kicked(), stops[1].kicked(), claims()), (Some("elsewhere"), None, vec![t3.to_string()]));
    // A login that began earlier but registers last goes itself.
    let late = register(2, t1, kick_existing);
    assert_eq!((stops[2].kicked(), stops[1].kicked(), claims()), (Some("elsewhere"), None, vec![t3.to_string()]));
    // refuse_new: a later login goes, the earlier stays.
    let refused = register(3, "c:00:1700000000004:dd", refuse_new);
    assert_eq!((stops[3].kicked(), claims()), (Some("already"), vec![t3.to_string()]));
    // Ends of sessions not in the table leave it alone; only the current claim kicks.
    drop((first, late, refused));
    assert_eq!(claims(), [t3]);
    assert!(!table.kick_claim("alex", t2, "x"));
    assert!(table.kick_claim("alex", t3, "other"));
    assert_eq!(stops[1].kicked(), Some("other"));
    drop(second);
    assert_eq!(table.local_count(), 0);
    assert_eq!(claim_order("a:b"), (0, "a:b"), "a value without a time is the earliest");
}

#[test]
fn the_network_counts_and_lists_join_the_local_ones() {
    let table = Arc::new(PlayerTable::default());
    let _a = table.register(seen("Alex", "lobby"), None, None, None, Duplicate::Replace);
    let other = |name: &str, server: &str| {
        let Record { address, transport, carriage, since_ms, .. } = seen_record();
        let (name, uuid, server) = (name.into(), String::new(), server.into());
        ("i2".to_string(), Record { name, uuid, server, address, transport, carriage, since_ms })
    };
    table.set_others(vec![other("Zed", "lobby"), other("Bo", "survival")]);
    assert_eq!((table.count(None), table.count(Some("lobby")), table.local_count()), (3, 2, 1));
    assert_eq!(table.names(None), ["Alex", "Bo", "Zed"]);
    assert_eq!(table.names(Some("survival")), ["Bo"]);
    assert!(table.find("Zed").is_none(), "find is local");
    // A moving player is read at two instances, or here and at its draining instance: it counts once.
    let twice = [("Zed", "lobby"), ("zed", "lobby"), ("ALEX", "lobby"), ("Bo", "survival")];
    table.set_others(twice.iter().map(|(n, s)| other(n, s)).collect());
    assert_eq!((table.count(None), table.count(Some("lobby"))), (3, 2));
    // The whole network by name, each once: the one held here as this instance's.
    let everyone: Vec<(Option<String>, String)> = table.everyone().into_iter().map(|(i, r)| (i, r.name)).collect();
    let i2 = Some("i2".to_string());
    assert_eq!(everyone, [(None, "Alex".into()), (i2.clone(), "Bo".into()), (i2, "Zed".into())]);
    table.set_others(Vec::new());
    assert_eq!(table.count(None), 1);
}
