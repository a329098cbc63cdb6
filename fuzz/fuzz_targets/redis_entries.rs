//! Arbitrary bytes as a player record, an instance entry and a name claim read from Redis. See
//! `moonbridge_proxy::fuzz::redis_entries`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moonbridge_proxy::fuzz::redis_entries(data));
