//! Checks a built native client library for a platform of the mod jar: file format and architecture, every
//! exported function the C header and the JNI binding promise, and that it needs nothing outside the
//! platform's system libraries (so the jar's library loads on a player's machine as it is).
//!
//! Used by `examples/inspect_natives.rs` (the release build, `java-shim/build.sh release`) and by the test
//! `natives.rs` on the host library.

use std::collections::BTreeSet;
use std::path::Path;

use object::read::elf::{ElfFile64, FileHeader};
use object::read::macho::{LoadCommandVariant, MachHeader, MachOFile64};
use object::{Architecture, BinaryFormat, Endianness, Object, ObjectSymbol};

/// A jar platform (`linux-x86_64`, `macos-aarch64`, `windows-x86_64`, …) and what its library must be.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Platform {
    pub name: &'static str,
    pub format: BinaryFormat,
    pub arch: Architecture,
    /// The library's file name in `natives/<platform>/`.
    pub file: &'static str,
    /// macOS: the oldest release the library may require (Rust's minimum for the target; `java-shim/build.sh`
    /// sets `MACOSX_DEPLOYMENT_TARGET` to it). `None` elsewhere.
    pub macos_min: Option<(u32, u32)>,
}

/// The five platforms of the release jar.
pub const PLATFORMS: [Platform; 5] = [
    Platform {
        name: "linux-x86_64",
        format: BinaryFormat::Elf,
        arch: Architecture::X86_64,
        file: "libmoonbridge_client.so",
        macos_min: None,
    },
    Platform {
        name: "linux-aarch64",
        format: BinaryFormat::Elf,
        arch: Architecture::Aarch64,
        file: "libmoonbridge_client.so",
        macos_min: None,
    },
    Platform {
        name: "macos-x86_64",
        format: BinaryFormat::MachO,
        arch: Architecture::X86_64,
        file: "libmoonbridge_client.dylib",
        macos_min: Some((10, 12)),
    },
    Platform {
        name: "macos-aarch64",
        format: BinaryFormat::MachO,
        arch: Architecture::Aarch64,
        file: "libmoonbridge_client.dylib",
        macos_min: Some((11, 0)),
    },
    Platform {
        name: "windows-x86_64",
        format: BinaryFormat::Pe,
        arch: Architecture::X86_64,
        file: "moonbridge_client.dll",
        macos_min: None,
    },
];

/// The platform named `name`.
pub fn platform(name: &str) -> Option<Platform> {
    PLATFORMS.into_iter().find(|p| p.name == name)
}

/// Shared libraries a library may need on each system: the C library and its companions (Linux), libSystem
/// (macOS), and DLLs every Windows 10 has (Rust's standard library, sockets, the random number source; for route
/// discovery's DNS servers, hickory's `system-config` through the ipconfig crate: `iphlpapi.dll`'s
/// GetAdaptersAddresses, and `ktmw32.dll` and `oleaut32.dll` that its registry and string helpers link).
fn system_library(format: BinaryFormat, lib: &str) -> bool {
    let lower = lib.to_ascii_lowercase();
    match format {
        BinaryFormat::Elf => [
            "libc.so.6",
            "libm.so.6",
            "libgcc_s.so.1",
            "libpthread.so.0",
            "libdl.so.2",
            "librt.so.1",
            "ld-linux-x86-64.so.2",
            "ld-linux-aarch64.so.1",
        ]
        .contains(&lower.as_str()),
        BinaryFormat::MachO => [
            "/usr/lib/libsystem.b.dylib",
            "/usr/lib/libiconv.2.dylib",
            "/usr/lib/libcharset.1.dylib",
            "/usr/lib/libresolv.9.dylib",
        ]
        .contains(&lower.as_str()),
        BinaryFormat::Pe => {
            [
                "kernel32.dll",
                "ntdll.dll",
                "advapi32.dll",
                "bcrypt.dll",
                "bcryptprimitives.dll",
                "ws2_32.dll",
                "userenv.dll",
                "msvcrt.dll",
                "secur32.dll",
                "crypt32.dll",
                "iphlpapi.dll",
                "ktmw32.dll",
                "oleaut32.dll",
            ]
            .contains(&lower.as_str())
                || lower.starts_with("api-ms-win-")
        }
        _ => false,
    }
}

/// The functions the library must export: every `mb_*` function of the committed C header and every
/// `Java_dev_moonbridge_*` function of the JNI binding (read from the sources, so the list cannot drift).
pub fn expected_exports(repo: &Path) -> BTreeSet<String> {
    let header = std::fs::read_to_string(repo.join("client-native/include/moonbridge_client.h")).expect("C header");
    let jni = std::fs::read_to_string(repo.join("client-native/src/jni.rs")).expect("jni.rs");
    let mut out = BTreeSet::new();
    for word in header.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("mb_") && header.contains(&format!("{word}(")) {
            out.insert(word.to_owned());
        }
    }
    for word in jni.split(|c: char| !(c.is_ascii_alphanumeric() || c == '_')) {
        if word.starts_with("Java_dev_moonbridge_") {
            out.insert(word.to_owned());
        }
    }
    out
}

/// What a library file turned out to be.
#[derive(Debug)]
pub struct Report {
    pub format: BinaryFormat,
    pub arch: Architecture,
    /// Exported function names (Mach-O names without the leading underscore).
    pub exports: BTreeSet<String>,
    /// Shared libraries it needs (DT_NEEDED, LC_LOAD_DYLIB, PE import directory).
    pub needs: BTreeSet<String>,
    /// ELF: the newest `GLIBC_2.x` version it requires.
    pub newest_glibc: Option<(u32, u32)>,
    /// Mach-O: undefined symbols not bound to a named library (flat or dynamic lookup).
    pub unbound: Vec<String>,
    /// Mach-O: the oldest macOS it loads on (LC_BUILD_VERSION's minos, or LC_VERSION_MIN_MACOSX).
    pub macos_min: Option<(u32, u32)>,
}

/// Reads and inspects a library.
///
/// # Errors
/// A message when the file cannot be read or parsed.
pub fn inspect(path: &Path) -> Result<Report, String> {
    let data = std::fs::read(path).map_err(|e| format!("{}: {e}", path.display()))?;
    let file = object::File::parse(&*data).map_err(|e| format!("{}: {e}", path.display()))?;
    let mut report = Report {
        format: file.format(),
        arch: file.architecture(),
        exports: BTreeSet::new(),
        needs: BTreeSet::new(),
        newest_glibc: None,
        unbound: Vec::new(),
        macos_min: None,
    };
    for e in file.exports().map_err(|e| e.to_string())? {
        let name = String::from_utf8_lossy(e.name()).into_owned();
        report.exports.insert(
            name.strip_prefix('_').filter(|_| file.format() == BinaryFormat::MachO).unwrap_or(&name).to_owned(),
        );
    }
    match file.format() {
        BinaryFormat::Elf => elf_needs(&data, &mut report)?,
        BinaryFormat::MachO => macho_needs(&data, &mut report)?,
        _ => {
            for i in file.imports().map_err(|e| e.to_string())? {
                report.needs.insert(String::from_utf8_lossy(i.library()).into_owned());
            }
        }
    }
    Ok(report)
}

fn elf_needs(data: &[u8], report: &mut Report) -> Result<(), String> {
    let elf = ElfFile64::<Endianness>::parse(data).map_err(|e| e.to_string())?;
    let endian = elf.endian();
    let sections = elf.elf_header().sections(endian, data).map_err(|e| e.to_string())?;
    if let Some((dynamic, link)) = sections.dynamic(endian, data).map_err(|e| e.to_string())? {
        let strings = sections.strings(endian, data, link).map_err(|e| e.to_string())?;
        for d in dynamic {
            if d.d_tag.get(endian) == u64::from(object::elf::DT_NEEDED) {
                let offset = u32::try_from(d.d_val.get(endian)).map_err(|e| e.to_string())?;
                let name = strings.get(offset).map_err(|_| "bad DT_NEEDED string".to_string())?;
                report.needs.insert(String::from_utf8_lossy(name).into_owned());
            }
        }
    }
    if let Some((mut needs, link)) = sections.gnu_verneed(endian, data).map_err(|e| e.to_string())? {
        let strings = sections.strings(endian, data, link).map_err(|e| e.to_string())?;
        while let Some((_, mut aux)) = needs.next().map_err(|e| e.to_string())? {
            while let Some(a) = aux.next().map_err(|e| e.to_string())? {
                let name = a.name(endian, strings).map_err(|e| e.to_string())?;
                if let Some(rest) = String::from_utf8_lossy(name).strip_prefix("GLIBC_") {
                    let mut parts = rest.split('.').map(|p| p.parse::<u32>().unwrap_or(0));
                    let version = (parts.next().unwrap_or(0), parts.next().unwrap_or(0));
                    report.newest_glibc = report.newest_glibc.max(Some(version));
                }
            }
        }
    }
    Ok(())
}

fn macho_needs(data: &[u8], report: &mut Report) -> Result<(), String> {
    let macho = MachOFile64::<Endianness>::parse(data).map_err(|e| e.to_string())?;
    let endian = macho.endian();
    let mut commands = macho.macho_header().load_commands(endian, data, 0).map_err(|e| e.to_string())?;
    // A version is xxxx.yy.zz in nibbles: major in the high 16 bits, minor in the next 8.
    let version = |v: u32| (v >> 16, (v >> 8) & 0xff);
    while let Some(command) = commands.next().map_err(|e| e.to_string())? {
        match command.variant().map_err(|e| e.to_string())? {
            LoadCommandVariant::Dylib(d) if command.cmd() != object::macho::LC_ID_DYLIB => {
                let name = command.string(endian, d.dylib.name).map_err(|e| e.to_string())?;
                report.needs.insert(String::from_utf8_lossy(name).into_owned());
            }
            LoadCommandVariant::BuildVersion(b) => report.macos_min = Some(version(b.minos.get(endian))),
            LoadCommandVariant::VersionMin(v) if command.cmd() == object::macho::LC_VERSION_MIN_MACOSX => {
                report.macos_min = Some(version(v.version.get(endian)));
            }
            _ => {}
        }
    }
    // Two-level namespace: each undefined symbol names the library it comes from (its ordinal in n_desc).
    for s in macho.symbols() {
        if s.is_undefined() {
            let ordinal = (s.macho_symbol().n_desc.get(endian) >> 8) & 0xff;
            if ordinal == 0 || ordinal >= 0xfe {
                report.unbound.push(s.name().unwrap_or("?").to_owned());
            }
        }
    }
    Ok(())
}

/// Every problem with `report` for `platform`, given the exports it must have and, for Linux, the newest
/// glibc version it may require (`None`: any).
pub fn problems(
    platform: Platform,
    report: &Report,
    expected: &BTreeSet<String>,
    max_glibc: Option<(u32, u32)>,
) -> Vec<String> {
    let mut p = Vec::new();
    if report.format != platform.format {
        p.push(format!("format {:?}, not {:?}", report.format, platform.format));
    }
    if report.arch != platform.arch {
        p.push(format!("architecture {:?}, not {:?}", report.arch, platform.arch));
    }
    let missing: Vec<&String> = expected.difference(&report.exports).collect();
    if !missing.is_empty() {
        p.push(format!("does not export {missing:?}"));
    }
    for lib in &report.needs {
        if !system_library(platform.format, lib) {
            p.push(format!("needs {lib}, which is not a system library"));
        }
    }
    if let Some((max_major, max_minor)) = platform.macos_min {
        match report.macos_min {
            Some((major, minor)) if (major, minor) > (max_major, max_minor) => {
                p.push(format!("needs macOS {major}.{minor}, newer than {max_major}.{max_minor}"))
            }
            Some(_) => {}
            None => p.push("names no minimum macOS version".into()),
        }
    }
    if let (Some((major, minor)), Some((max_major, max_minor))) = (report.newest_glibc, max_glibc) {
        if (major, minor) > (max_major, max_minor) {
            p.push(format!("needs GLIBC_{major}.{minor}, newer than {max_major}.{max_minor}"));
        }
    }
    if !report.unbound.is_empty() {
        p.push(format!("undefined symbols not bound to a library: {:?}", report.unbound));
    }
    p
}
