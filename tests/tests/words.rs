//! One word per concept: the glossary in `proxy/src/lib.rs` ("# Words") is what the code and `docs/` use.
//! Checked where the two overloaded words used to mix: "move" (a player taken to another instance) must not
//! mean a backend switch, and "network" (the instances on a Redis) must not mean the backends. In
//! `docs/servers.md` (switches) and in the comments of the switch code (`proxy/src/transfer/`, less the files
//! about moves), every "move"/"moved"/"moves"/"moving"/"network" outside code spans stands on a line that
//! also says which instance-level thing it means ("instance", "drain", `[network]`, `network.md`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};

fn root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR")).parent().unwrap().to_path_buf()
}

/// `text` without its Markdown code spans (`` `…` ``, across line breaks too), line breaks kept.
fn without_code_spans(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut inside = false;
    for c in text.chars() {
        match c {
            '`' => inside = !inside,
            '\n' => out.push('\n'),
            _ if inside => {}
            _ => out.push(c),
        }
    }
    out
}

/// The lines of `text` that use one of the overloaded words without saying it means the instance level.
fn offending(text: &str) -> Vec<String> {
    const WORDS: [&str; 5] = ["move", "moved", "moves", "moving", "network"];
    const MARKERS: [&str; 4] = ["instance", "drain", "[network]", "network.md"];
    text.lines()
        .filter(|line| {
            let lower = line.to_lowercase();
            let words = lower.split(|c: char| !c.is_ascii_alphanumeric() && c != '_');
            let uses = words.into_iter().any(|w| WORDS.contains(&w));
            uses && !MARKERS.iter().any(|m| lower.contains(m))
        })
        .map(str::to_owned)
        .collect()
}

#[test]
fn the_glossary_names_each_overloaded_word_once() {
    let lib = std::fs::read_to_string(root().join("proxy/src/lib.rs")).unwrap();
    let words = lib.split("//! # Words").nth(1).expect("lib.rs has a # Words section");
    let words = words.split("//! # Layout").next().unwrap();
    let rows: Vec<&str> = words.lines().filter(|l| l.starts_with("//! | ") && !l.contains("|---")).skip(1).collect();
    let names: Vec<&str> = rows.iter().map(|r| r.trim_start_matches("//! | ").split(" |").next().unwrap()).collect();
    for word in ["backend", "switch", "network", "instance", "move", "drain", "resume", "frame", "tick"] {
        assert_eq!(names.iter().filter(|n| **n == word).count(), 1, "glossary row for {word:?} in {names:?}");
    }
}

#[test]
fn the_switch_docs_say_switch_and_backends_not_move_and_network() {
    let servers = std::fs::read_to_string(root().join("docs/servers.md")).unwrap();
    let bad = offending(&without_code_spans(&servers));
    assert!(bad.is_empty(), "docs/servers.md uses \"move\" or \"network\" for backends:\n{}", bad.join("\n"));
    // The old name of the network's document is gone (it is docs/network.md).
    assert!(!root().join("docs/cluster.md").exists());
}

#[test]
fn the_switch_code_comments_say_switch_and_backends_not_move_and_network() {
    // moving.rs and requests.rs are where the switchboard takes part in a move: they say "move" for it.
    let dir = root().join("proxy/src/transfer");
    let mut bad = Vec::new();
    for entry in std::fs::read_dir(&dir).unwrap() {
        let path = entry.unwrap().path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name == "moving.rs" || name == "requests.rs" {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let comments: String =
            text.lines().map(str::trim_start).filter(|l| l.starts_with("//")).map(|l| format!("{l}\n")).collect();
        bad.extend(offending(&without_code_spans(&comments)).into_iter().map(|l| format!("{name}: {l}")));
    }
    assert!(bad.is_empty(), "switch code comments use \"move\" or \"network\" for backends:\n{}", bad.join("\n"));
}

#[test]
fn the_check_finds_a_switch_called_a_move() {
    assert_eq!(offending("the proxy moves the player to survival").len(), 1);
    assert!(offending("the drain moves the player").is_empty());
    assert_eq!(offending(&without_code_spans("`moved` and a network of backends")).len(), 1);
    assert!(offending(&without_code_spans("the log line `player moved to another backend`")).is_empty());
}
