//! Arbitrary text as the client library's URL and options JSON (what a mod config or a C caller passes):
//! parsing never panics, and a parsed URL has one of the three schemes (case-insensitive, RFC 3986 §3.1).
#![no_main]

use libfuzzer_sys::fuzz_target;
use moonbridge_client::target::Target;
use moonbridge_client::Options;

fuzz_target!(|data: &[u8]| {
    let Ok(text) = std::str::from_utf8(data) else { return };
    if let Ok(t) = Target::parse(text) {
        let lower = text.trim_start().to_ascii_lowercase();
        assert!(lower.starts_with("tcp://") || lower.starts_with("ws://") || lower.starts_with("wss://"), "{t:?}");
    }
    let _ = Options::from_json(Some(text));
});
