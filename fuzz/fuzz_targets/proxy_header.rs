//! Arbitrary bytes as a PROXY v1/v2 header from a load balancer. See `moonbridge_proxy::fuzz::proxy_header`.
#![no_main]

libfuzzer_sys::fuzz_target!(|data: &[u8]| moonbridge_proxy::fuzz::proxy_header(data));
