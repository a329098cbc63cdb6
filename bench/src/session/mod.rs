//! `session-bench` (no subcommand): the seed benchmark re-created. A fake protocol-5 backend and the clients
//! run here; the proxy (and any peer) runs as its own process. Direct phases (clients straight to the backend
//! over TCP) and proxy phases alternate with the order rotated. One line per phase; a summary with median and
//! [min–max] at the end. See docs/benchmarks.md.

mod args;
mod phase;
mod report;
mod variants;

pub use args::SessionArgs;

use std::net::SocketAddr;
use std::sync::Arc;

use anyhow::bail;
use moonbridge_client::Options;
use moonbridge_test_certs::{KeyType, TestCert};

use crate::peers::TransportArg;
use crate::{metrics, workload};
use args::ProfileArg;

/// Runs the session benchmark; fails when a phase saw errors.
pub fn run(args: SessionArgs) -> anyhow::Result<()> {
    if args.profile == ProfileArg::Flood {
        let mut flood = crate::flood::FloodArgs::defaults();
        flood.json = args.json;
        if let Some(bin) = args.proxy_bin {
            flood.proxy_bin = bin;
        }
        return crate::flood::main(&flood);
    }
    let ticks_per_s = metrics::clock_ticks_per_second();
    let profile = args.profile.backend();
    // Before the first login answer is built.
    let forge = matches!(args.profile, ProfileArg::Forge | ProfileArg::ForgeChannels);
    workload::FORGE.store(forge, std::sync::atomic::Ordering::Relaxed);
    workload::CHANNELS_ONLY.store(args.profile == ProfileArg::ForgeChannels, std::sync::atomic::Ordering::Relaxed);
    let gtnh = args.profile == ProfileArg::Gtnh;
    workload::GTNH.store(gtnh, std::sync::atomic::Ordering::Relaxed);
    let (backend_addr, backend_stats, _rt) =
        crate::backend::start(SocketAddr::from(([127, 0, 0, 1], args.backend_port)), profile, 1)?;
    if !args.json {
        println!("# fake backend at {backend_addr}");
    }
    let templates = Arc::new(if forge {
        workload::forge_templates()
    } else if gtnh {
        workload::gtnh_templates()
    } else {
        workload::templates()
    });
    if args.profile != ProfileArg::Echo && !args.json {
        let (p, b) = workload::template_averages(&templates);
        let name = format!("{:?}", args.profile).to_lowercase();
        println!("# {name} templates: {p:.1} clientbound packets and {b:.0} payload bytes per tick on average");
    }
    let dir = std::env::temp_dir().join(format!("session-bench-{}", std::process::id()));
    std::fs::create_dir_all(&dir)?;
    let cert = if args.transport == TransportArg::Wss {
        let c = TestCert::generate_in(dir.clone(), "localhost", KeyType::Ec)?;
        Some((c.cert, c.key, c.ca))
    } else {
        None
    };
    let coalesce = if args.client_coalesce == 1 { "tick" } else { "off" };
    let mut options = serde_json::json!({
        "coalesce": coalesce,
        "ping_interval_ms": 0,
        "resume": args.client_resume == 1,
        "compress": args.client_compress == 1,
    });
    if let Some((_, _, ca)) = &cert {
        options["ca_file"] = serde_json::json!(ca);
    }
    let options = Options::from_json(Some(&options.to_string()))?;
    let direct_options = Options::from_json(Some(&serde_json::json!({ "coalesce": coalesce }).to_string()))?;
    let (variants, _processes) = variants::build(&args, backend_addr, &dir, cert.as_ref(), &options, direct_options)?;

    let names: Vec<String> = variants.iter().map(|v| v.name.clone()).collect();
    let mut results = Vec::new();
    let mut failed = false;
    for repeat in 1..=args.repeats.max(1) {
        let n = variants.len();
        for k in 0..n {
            let v = &variants[(k + repeat - 1) % n];
            let r = phase::run_phase(&args, repeat, v, &templates, ticks_per_s, &backend_stats)?;
            failed |= r.errors > 0;
            report::print_phase(&r, args.json);
            results.push(r);
        }
    }
    report::summary(&results, &names, args.json);
    let _ = std::fs::remove_dir_all(&dir);
    if failed {
        bail!("errors during the run (see above)");
    }
    Ok(())
}
