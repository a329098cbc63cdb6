//! The committed C header must be exactly what cbindgen generates from the code (the CI drift check).
//! Regenerate it with `MOONBRIDGE_BLESS=1 cargo test -p moonbridge-client --test header`.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::panic)]

use std::path::Path;

#[test]
fn committed_header_matches_the_code() {
    let dir = Path::new(env!("CARGO_MANIFEST_DIR"));
    let config = cbindgen::Config::from_file(dir.join("cbindgen.toml")).unwrap();
    let mut generated = Vec::new();
    cbindgen::Builder::new()
        .with_config(config)
        .with_src(dir.join("src/ffi.rs"))
        .with_src(dir.join("src/error.rs"))
        .generate()
        .expect("cbindgen parses the FFI")
        .write(&mut generated);
    let path = dir.join("include/moonbridge_client.h");
    if std::env::var_os("MOONBRIDGE_BLESS").is_some() {
        std::fs::write(&path, &generated).unwrap();
        return;
    }
    let committed = std::fs::read(&path).unwrap_or_default();
    assert!(
        committed == generated,
        "{} drifted from the code; regenerate it with `MOONBRIDGE_BLESS=1 cargo test -p moonbridge-client --test header` \
         and commit it.\n--- generated ---\n{}",
        path.display(),
        String::from_utf8_lossy(&generated)
    );
}
