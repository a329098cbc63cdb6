//! The cross-tests: one test binary (`cargo test -p moonbridge-tests --test cross`), one module per subject.
//! One binary links the proxy, the client library and the test bed once, not once per file (about 35 MB of
//! disk and a link each); run one subject with a filter, e.g.
//! `cargo test -p moonbridge-tests --test cross network_attacks::`.

mod admin;
mod balancers;
mod cases_tcp;
mod client_c_and_errors;
mod client_cross;
mod client_ipv6;
mod client_windows;
mod compression;
mod dialects;
mod discovery;
mod failover;
mod hardening;
mod lanes;
mod layout;
mod memory;
mod natives;
mod network;
mod network_attacks;
mod online_auth;
mod operations;
mod redis_causes;
mod relay_policy;
mod relay_tcp;
mod reload;
mod resume;
mod rolling;
mod status_cache;
mod tcp_cross;
mod transfer;
mod transfer_forge;
mod transfer_vectors;
mod words;
mod ws_cases;
mod ws_cross;
