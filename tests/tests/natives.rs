//! The host's native client library (what `java-shim/build.sh` puts in the jar for this machine) exports every
//! function the C header and the JNI binding promise and needs only system libraries. The release build checks
//! the five platforms' libraries the same way (`examples/inspect_natives.rs`).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::PathBuf;

use testbed::natives::{expected_exports, inspect, platform, problems};

#[test]
fn the_host_library_exports_every_c_and_jni_function() {
    let repo = PathBuf::from(env!("CARGO_MANIFEST_DIR")).join("..");
    let expected = expected_exports(&repo);
    assert!(expected.contains("mb_connect") && expected.contains("mb_last_error"), "{expected:?}");
    assert!(expected.contains("Java_dev_moonbridge_client_NativeTransport_nativeOpen"), "{expected:?}");
    assert!(expected.len() >= 14, "{expected:?}");
    let lib = repo.join("target/debug/libmoonbridge_client.so");
    assert!(lib.is_file(), "{} is not built: run `cargo build -p moonbridge-client`", lib.display());
    let report = inspect(&lib).unwrap();
    let host = platform(if cfg!(target_arch = "aarch64") { "linux-aarch64" } else { "linux-x86_64" }).unwrap();
    assert_eq!(problems(host, &report, &expected, None), Vec::<String>::new(), "{report:?}");
    assert!(report.needs.contains("libc.so.6"), "{report:?}");
    // A library of another platform is refused with its reasons.
    let wrong = platform("macos-aarch64").unwrap();
    let found = problems(wrong, &report, &expected, None);
    assert!(found.iter().any(|p| p.starts_with("format Elf")), "{found:?}");
    assert!(found.iter().any(|p| p.contains("needs libc.so.6")), "{found:?}");
    assert!(found.iter().any(|p| p == "names no minimum macOS version"), "{found:?}");
}
