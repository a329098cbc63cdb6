//! zstd parameters on the honest bytes of `--profile forge`: time per tick, bytes and the sender's context
//! memory, one line per parameter set, and the login burst (FML registry data, 64 KiB messages) for each.
//!
//! ```sh
//! cargo run --release -p moonbridge-bench --example zstd_params -- [channels] LEVEL:WLOG:HLOG:BLOCK:RAW:LIT ...
//! ```
//!
//! - `channels`: the ticks of `--profile forge-channels` (mod channel messages only) instead of `forge`;
//! - `LEVEL`: zstd level; `WLOG`: window log; `HLOG`: hash log (0: the level's own); `BLOCK`: largest block in
//!   bytes (0: the window); `RAW`: 1 to leave S21, S26 and S35 packets of 128 bytes or more out of zstd, as a
//!   carriage that carries them uncompressed would (the message still pays for the other packets' flushes);
//!   `LIT`: literal compression, 0 the level's choice, 1 on, 2 off.
//!
//! Each message is compressed with `ZSTD_e_flush` on one context kept across messages, as the carriage does
//! (`moonbridge_protocol::ws::compress`); 2,000 ticks, best of 3 runs.

#![allow(
    clippy::expect_used,
    clippy::indexing_slicing,
    clippy::panic,
    clippy::print_stdout,
    dead_code,
    unreachable_pub
)] // a measurement program

#[path = "../src/forge.rs"]
mod forge;
#[path = "../src/workload.rs"]
mod workload;

use std::time::Instant;

use zstd_safe::{CCtx, CParameter, InBuffer, OutBuffer, ParamSwitch};

/// `(start, end, packet id)` of each frame of `b` (whole frames, protocol 5 ids are one byte).
fn frames(b: &[u8]) -> Vec<(usize, usize, u8)> {
    let mut v = Vec::new();
    let mut i = 0;
    while i < b.len() {
        let (mut len, mut shift, mut j) = (0usize, 0, i);
        loop {
            let x = b[j];
            len |= usize::from(x & 0x7f) << shift;
            j += 1;
            shift += 7;
            if x & 0x80 == 0 {
                break;
            }
        }
        v.push((i, j + len, b[j]));
        i = j + len;
    }
    v
}

fn flush(c: &mut CCtx<'_>, input: &[u8], out: &mut Vec<u8>) {
    stream(c, input, out, zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_flush);
}

fn stream(c: &mut CCtx<'_>, input: &[u8], out: &mut Vec<u8>, end: zstd_safe::zstd_sys::ZSTD_EndDirective) {
    out.reserve(zstd_safe::compress_bound(input.len()) + 16);
    let mut src = InBuffer::around(input);
    loop {
        let pos = out.len();
        let mut dst = OutBuffer::around_pos(out, pos);
        let left = c.compress_stream2(&mut dst, &mut src, end).expect("zstd");
        if left == 0 && src.pos() == input.len() {
            return;
        }
        out.reserve(left.max(256));
    }
}

struct Params {
    level: i32,
    wlog: u32,
    hlog: u32,
    block: u32,
    raw: bool,
    independent: bool,
    lit: u32,
}

fn context(p: &Params) -> CCtx<'static> {
    let mut c = CCtx::create();
    c.set_parameter(CParameter::CompressionLevel(p.level)).expect("level");
    c.set_parameter(CParameter::WindowLog(p.wlog)).expect("window");
    c.set_parameter(CParameter::ChecksumFlag(false)).expect("checksum");
    if p.hlog > 0 {
        c.set_parameter(CParameter::HashLog(p.hlog)).expect("hash");
    }
    if p.block > 0 {
        c.set_parameter(CParameter::MaxBlockSize(p.block)).expect("block");
    }
    if p.lit > 0 {
        let mode = if p.lit == 1 { ParamSwitch::Enable } else { ParamSwitch::Disable };
        c.set_parameter(CParameter::LiteralCompressionMode(mode)).expect("literals");
    }
    c
}

fn main() {
    let args: Vec<String> = std::env::args().skip(1).collect();
    let channels = args.iter().any(|a| a == "channels");
    let templates = workload::forge_templates_of(channels);
    let ticks: Vec<Vec<u8>> = (0..2000u32)
        .map(|s| {
            let mut o = Vec::new();
            workload::encode_tick_answer(&templates, s, &mut o);
            o
        })
        .collect();
    let total: usize = ticks.iter().map(Vec::len).sum();
    let mut burst = Vec::new();
    for (_, d) in forge::registry_burst(62_000) {
        burst.extend_from_slice(&d);
    }
    println!("{} ticks of {} bytes on average; login burst {} bytes", ticks.len(), total / ticks.len(), burst.len());
    for spec in args.iter().filter(|a| a.contains(':')) {
        let f: Vec<i64> = spec.split(':').map(|x| x.parse().expect("LEVEL:WLOG:HLOG:BLOCK:RAW:LIT")).collect();
        let [level, wlog, hlog, block, raw, lit] = f[..] else { panic!("LEVEL:WLOG:HLOG:BLOCK:RAW:LIT") };
        let p = Params {
            level: level as i32,
            wlog: wlog as u32,
            hlog: hlog as u32,
            block: block as u32,
            raw: raw == 1,
            independent: raw == 2,
            lit: lit as u32,
        };
        let (mut best, mut wire, mut memory) = (f64::MAX, 0, 0);
        for _ in 0..3 {
            let mut c = context(&p);
            let mut out = Vec::with_capacity(1 << 17);
            wire = 0;
            let start = Instant::now();
            for tick in &ticks {
                out.clear();
                if p.raw {
                    let mut from = 0;
                    for (s, e, id) in frames(tick) {
                        if matches!(id, 0x21 | 0x26 | 0x35) && e - s >= 128 {
                            if s > from {
                                flush(&mut c, &tick[from..s], &mut out);
                            }
                            out.extend_from_slice(&tick[s..e]);
                            from = e;
                        }
                    }
                    if from < tick.len() {
                        flush(&mut c, &tick[from..], &mut out);
                    }
                } else if p.independent {
                    stream(&mut c, tick, &mut out, zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_end);
                } else {
                    flush(&mut c, tick, &mut out);
                }
                wire += out.len();
            }
            best = best.min(start.elapsed().as_nanos() as f64 / ticks.len() as f64);
            memory = c.sizeof();
        }
        let mut c = context(&p);
        let (mut out, mut burst_wire) = (Vec::new(), 0);
        for piece in burst.chunks(65_536) {
            out.clear();
            if p.independent {
                stream(&mut c, piece, &mut out, zstd_safe::zstd_sys::ZSTD_EndDirective::ZSTD_e_end);
            } else {
                flush(&mut c, piece, &mut out);
            }
            burst_wire += out.len();
        }
        println!(
            "{spec:22} {best:7.0} ns/tick  {:5} B/tick ({:.3})  burst {:.3}  context {} KiB",
            wire / ticks.len(),
            wire as f64 / total as f64,
            burst_wire as f64 / burst.len() as f64,
            memory / 1024
        );
    }
}
