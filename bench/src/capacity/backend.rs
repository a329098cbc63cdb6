//! `session-bench capacity-backend --load L`: the capacity run's backend process (the fake backend's capacity
//! profile), so that it has its own file limit and its own CPU account.

use std::net::SocketAddr;

use crate::backend::{Backend, Load, OnError, Profile};

/// Listens on 127.0.0.1, prints `listening ADDR` and serves until its standard input ends (its parent exited).
pub fn backend_main(load: Load) -> anyhow::Result<()> {
    let _ = rlimit::increase_nofile_limit(u64::MAX);
    std::thread::spawn(|| {
        let mut sink = Vec::new();
        let _ = std::io::Read::read_to_end(&mut std::io::stdin(), &mut sink);
        std::process::exit(0);
    });
    let rt = tokio::runtime::Builder::new_current_thread().enable_all().build()?;
    rt.block_on(async move {
        let on_error: OnError = Box::new(|e| eprintln!("capacity backend: {e:#}"));
        let backend =
            Backend::listen(SocketAddr::from(([127, 0, 0, 1], 0)), Profile::Capacity(load), Some(on_error)).await?;
        println!("listening {}", backend.addr);
        std::future::pending::<anyhow::Result<()>>().await
    })
}
