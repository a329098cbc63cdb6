//! AES-128-CFB8 throughput of the protocol crate's stream cipher, on one core:
//! `cargo run --release -p moonbridge-bench --example cfb8_throughput`.

#![allow(clippy::unwrap_used, missing_docs)]

use std::time::Instant;

use moonbridge_protocol::crypto::{Cfb8Decryptor, Cfb8Encryptor};

fn main() {
    let secret = *b"moonbridge-key!!";
    let total = 64 * 1024 * 1024;
    let mut buf = vec![0x5au8; 64 * 1024];
    let aes_ni = std::arch::is_x86_feature_detected!("aes");
    for (name, decrypt) in [("encrypt", false), ("decrypt", true)] {
        let mut enc = Cfb8Encryptor::new(&secret);
        let mut dec = Cfb8Decryptor::new(&secret);
        let t = Instant::now();
        let mut done = 0;
        while done < total {
            if decrypt {
                dec.apply(&mut buf);
            } else {
                enc.apply(&mut buf);
            }
            done += buf.len();
        }
        let ns = t.elapsed().as_nanos() as f64 / total as f64;
        println!(
            "AES-128-CFB8 {name}: {ns:.2} ns/byte ({:.0} MB/s) on one core, AES-NI {}",
            1000.0 / ns,
            if aes_ni { "on" } else { "off" }
        );
    }
}
