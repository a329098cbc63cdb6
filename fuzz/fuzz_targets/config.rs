//! Arbitrary text as the proxy's TOML configuration: parsing and validation never panic. See
//! `moonbridge_proxy::fuzz::config`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moonbridge_proxy::fuzz::config(data));
