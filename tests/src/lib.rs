//! `testbed`: the test bed of the MoonBridge cross-tests (the proxy in-process, real peers, raw backends and
//! players, fixtures), one module per job:
//!
//! - [`proxy`]: the proxy in-process on ephemeral ports, config builders;
//! - [`node`]: real node-minecraft-protocol 1.7.10 peers (`tests/peers/`, installed with `npm ci`);
//! - [`backend`]: a raw-socket backend that records every byte, login answers and decoders;
//! - [`ws`]: WebSocket and TLS client helpers; [`players`]: a player of any transport, as raw stream bytes;
//! - [`idle`]: a CDN-like intermediary that cuts idle connections; [`capped`]: one that caps WebSocket frames
//!   and messages;
//! - certificates: [`TestCert`] from the `moonbridge-test-certs` crate (rcgen), shared with the benchmark;
//! - [`gtnh`]: a GT New Horizons dialect peer (Hodgepodge's wide frames, Plugin Message lengths, Join Game);
//! - [`network`]: Redis and HAProxy for a network of instances; [`nginx`]: nginx as the WebSocket reverse proxy;
//!   [`prometheus`]: a real Prometheus scraping every second;
//! - [`dns`], [`online`], [`natives`]: a DNS server, online-mode login steps, native-library inspection.
//!
//! Every wait here is bounded by a timeout; nothing sleeps to synchronise.

#![allow(
    clippy::unwrap_used,
    clippy::expect_used,
    clippy::panic,
    clippy::indexing_slicing,
    missing_docs,
    unreachable_pub
)]

use std::time::Duration;

pub mod backend;
pub mod capped;
pub mod cutter;
pub mod dns;
pub mod forge;
pub mod gtnh;
pub mod idle;
/// The 1.7.10 session driven through the client library (shared with the Windows run under Wine).
pub use moonbridge_client_scenarios as mc;
pub mod natives;
pub mod network;
pub mod nginx;
pub mod node;
pub mod online;
pub mod players;
pub mod prometheus;
pub mod proxy;
pub mod sentinel;
pub mod shaped;
pub mod ws;

pub use backend::*;
pub use cutter::{CutKind, Cutter};
pub use idle::IdleCutter;
pub use moonbridge_client_scenarios::{login_handshake, login_start, BURST_CHANNEL};
pub use moonbridge_test_certs::{self_signed, KeyType, San, TestCert, TestDir};
pub use node::{node_backend, peers_dir, NodePeer};
pub use proxy::*;
pub use ws::*;

/// Case file `HS`: handshake for `mc.example.com:25565`, next state login, with the Forge marker.
pub const HS: &[u8] = &[
    0x19, 0x00, 0x05, 0x13, b'm', b'c', b'.', b'e', b'x', b'a', b'm', b'p', b'l', b'e', b'.', b'c', b'o', b'm', 0x00,
    b'F', b'M', b'L', 0x00, 0x63, 0xdd, 0x02,
];
/// Case file `LS`: Login Start for `Steve`.
pub const LS: &[u8] = &[0x07, 0x00, 0x05, b'S', b't', b'e', b'v', b'e'];

/// Generous bound for any single step of a test.
pub const STEP: Duration = Duration::from_secs(20);

/// The case files' handshake and Login Start, as one byte string (what a player sends first).
pub fn hs_ls() -> Vec<u8> {
    [HS, LS].concat()
}
