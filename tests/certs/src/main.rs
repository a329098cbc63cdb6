//! `test-certs DIR [NAME]`: writes a throwaway test CA and a leaf for `localhost`, `127.0.0.1` and `::1`
//! (common name NAME, default `localhost`, ECDSA P-256) into DIR: `ca.pem`, `fullchain.pem` (leaf + CA) and
//! `privkey.pem`. For test suites outside Rust (the Java shim's); never for real servers.

use std::path::PathBuf;
use std::process::ExitCode;

use moonbridge_test_certs::{KeyType, TestCert};

fn main() -> ExitCode {
    let mut args = std::env::args_os().skip(1);
    let Some(dir) = args.next().map(PathBuf::from) else {
        eprintln!("usage: test-certs DIR [NAME]");
        return ExitCode::from(2);
    };
    let name = args.next().and_then(|n| n.into_string().ok()).unwrap_or_else(|| "localhost".into());
    if let Err(e) = std::fs::create_dir_all(&dir) {
        eprintln!("test-certs: cannot create {}: {e}", dir.display());
        return ExitCode::FAILURE;
    }
    match TestCert::generate_in(dir, &name, KeyType::Ec) {
        Ok(c) => {
            println!("{}\n{}\n{}", c.ca.display(), c.cert.display(), c.key.display());
            ExitCode::SUCCESS
        }
        Err(e) => {
            eprintln!("test-certs: {e}");
            ExitCode::FAILURE
        }
    }
}
