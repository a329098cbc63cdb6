//! `inspect_natives STAGING PLATFORM...`: checks the native libraries staged for the mod jar
//! (`java-shim/target/natives-staging/natives/<platform>/<library>`), one line per platform, and exits 1 on
//! any problem. Run by `java-shim/build.sh release`.

use std::path::PathBuf;
use std::process::ExitCode;

use testbed::natives::{expected_exports, inspect, platform, problems};

fn main() -> ExitCode {
    let mut args = std::env::args().skip(1);
    let Some(staging) = args.next().map(PathBuf::from) else {
        eprintln!("usage: inspect_natives STAGING PLATFORM...");
        return ExitCode::from(2);
    };
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let expected = expected_exports(&repo);
    let mut ok = true;
    for name in args {
        let Some(p) = platform(&name) else {
            eprintln!("{name}: not a platform of the jar");
            ok = false;
            continue;
        };
        let path = staging.join(p.name).join(p.file);
        match inspect(&path) {
            Ok(report) => {
                // The release build links the Linux libraries against glibc 2.17 (java-shim/build.sh).
                let found = problems(p, &report, &expected, Some((2, 17)));
                let size = std::fs::metadata(&path).map(|m| m.len()).unwrap_or(0);
                if found.is_empty() {
                    println!(
                        "{}: ok, {:?} {:?}, {} bytes, {} of {} exports, needs {:?}{}{}",
                        p.name,
                        report.format,
                        report.arch,
                        size,
                        expected.len(),
                        expected.len(),
                        report.needs,
                        report.newest_glibc.map(|(a, b)| format!(", GLIBC {a}.{b}")).unwrap_or_default(),
                        report.macos_min.map(|(a, b)| format!(", macOS {a}.{b}+")).unwrap_or_default()
                    );
                } else {
                    ok = false;
                    for problem in found {
                        eprintln!("{}: {problem}", p.name);
                    }
                }
            }
            Err(e) => {
                ok = false;
                eprintln!("{}: {e}", p.name);
            }
        }
    }
    if ok {
        ExitCode::SUCCESS
    } else {
        ExitCode::FAILURE
    }
}
