//! Arbitrary text as a real-IP header value (CF-Connecting-IP, X-Forwarded-For, X-Real-IP). See
//! `moonbridge_proxy::fuzz::real_ip`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moonbridge_proxy::fuzz::real_ip(data));
