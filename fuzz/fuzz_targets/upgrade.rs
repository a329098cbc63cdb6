//! Arbitrary bytes as the HTTP upgrade request of a `ws`/`wss` listener (every real-IP header, trusted and
//! untrusted peers). See `moonbridge_proxy::fuzz::upgrade`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moonbridge_proxy::fuzz::upgrade(data));
