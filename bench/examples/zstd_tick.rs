//! Cost of compressing one tick's worth of bytes with the carriage's zstd streams, per message:
//! `cargo run --release -p moonbridge-bench --example zstd_tick -- [LEVEL] [BYTES]`.

#![allow(clippy::expect_used, clippy::indexing_slicing)] // a measurement program: a failure should stop it
use std::time::Instant;

use moonbridge_protocol::ws::compress::{Compressor, Decompressor};

fn main() {
    let mut args = std::env::args().skip(1);
    let level: i32 = args.next().and_then(|a| a.parse().ok()).unwrap_or(1);
    let size: usize = args.next().and_then(|a| a.parse().ok()).unwrap_or(4700);
    // Mixed content: half text-like, half noise (like gzipped NBT and deflated chunks).
    let mut x = 0x1234_5678_9abc_def0u64;
    let data: Vec<u8> = (0..size * 64)
        .map(|i| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            if (i / 512) % 2 == 0 {
                b"IC2:machineCopper "[i % 18]
            } else {
                x as u8
            }
        })
        .collect();
    let mut c = Compressor::new(level).expect("zstd");
    let mut out = Vec::with_capacity(size * 2);
    let n = 20_000;
    let started = Instant::now();
    let mut wire = 0;
    for k in 0..n {
        let at = (k * 997) % (data.len() - size);
        out.clear();
        c.compress(&data[at..at + size], &mut out).expect("compress");
        wire += out.len();
    }
    let per = started.elapsed() / n as u32;
    println!("level {level}: {size} bytes per message -> {} on the wire, {per:?} per message", wire / n);
    // Memory of both ends after use (one connection holds one of each), on a new stream.
    let mut c = Compressor::new(level).expect("zstd");
    let mut d = Decompressor::new().expect("zstd");
    let mut plain = Vec::new();
    for k in 0..200 {
        let at = (k * 997) % (data.len() - size);
        out.clear();
        c.compress(&data[at..at + size], &mut out).expect("compress");
        d.queue(&out);
        while d.has_output() {
            plain.clear();
            d.inflate(&mut plain, 1 << 20, 1 << 20).expect("inflate");
        }
        d.end_message();
    }
    println!("memory: compressor {} KiB, decompressor {} KiB", c.memory() / 1024, d.memory() / 1024);
}
