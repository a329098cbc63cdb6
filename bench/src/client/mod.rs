//! The benchmark clients: one thread per connection (named `bench-client`), each driving a
//! `moonbridge-client` connection, so the library's cost is part of what is measured.
//!
//! Verification needs no parsing: the client knows the exact bytes the backend must answer to each round
//! trip (the echo of what it sent, or the tick's template answer), in order, and compares the stream with
//! them byte for byte.

mod driver;
mod spec;

pub use spec::{ClientResult, ClientSpec, Sync, SWITCH_TARGETS};

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use moonbridge_client::Connection;

use crate::backend::login_answer;
use crate::workload::Spec;
use driver::{log_in, subtract, BusyDone, Driver};

/// What one soak player (`session-bench soak --instances`) did.
#[derive(Debug, Default)]
pub struct SoakPlayer {
    /// Round trips whose every byte was checked.
    pub round_trips: u64,
    /// Carriage v2 resumes the client library made.
    pub resumes: u64,
}

/// A soak player: logs in (counted in `logged_in`), then plays one round trip per `spec.pace` (the game's
/// tick), checking every byte it receives, until `playing` is 0; then closes.
///
/// # Errors
/// The first failure: the connection lost for good, an answer that is late (30 s) or differs by one byte.
pub fn run_soak_player(
    spec: &ClientSpec,
    templates: &[Vec<Spec>],
    logged_in: &AtomicUsize,
    playing: &AtomicUsize,
) -> anyhow::Result<SoakPlayer> {
    let conn = Connection::connect(&spec.url, spec.options.clone())?;
    let mut buf = vec![0u8; 1 << 20];
    let (link, got) = log_in(&conn, spec, &mut buf)?;
    if got != login_answer(&spec.name) {
        anyhow::bail!("login answer differs from what the backend sent");
    }
    logged_in.fetch_add(1, Ordering::Relaxed);
    let mut driver = Driver::new(link, spec, templates, buf);
    let mut record = ClientResult::default();
    driver.run_paced(spec.pace.unwrap_or(Duration::from_millis(50)), playing, &mut record)?;
    let resumes = conn.stats().resumes;
    conn.close();
    Ok(SoakPlayer { round_trips: record.round_trips, resumes })
}

/// Runs one client through login, warmup and the timed phase, meeting the harness at each barrier (also
/// after a failure, so the harness never waits forever).
pub fn run_client(spec: ClientSpec, templates: Arc<Vec<Vec<Spec>>>, sync: Arc<Sync>) -> ClientResult {
    let mut result = ClientResult::default();
    let mut stage = 0;
    let mut announced = false;
    let outcome = (|| -> anyhow::Result<()> {
        let busy = spec.pace.is_none().then(|| BusyDone(&sync.busy_left));
        let conn = Connection::connect(&spec.url, spec.options.clone())?;
        let turn = sync.login_turn.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        let started = Instant::now();
        let mut buf = vec![0u8; 1 << 20];
        let (mut link, got) = log_in(&conn, &spec, &mut buf)?;
        result.login_burst = started.elapsed();
        drop(turn);
        sync.logged_in.fetch_add(1, Ordering::Relaxed);
        announced = true;
        sync.logged.wait();
        stage = 1;
        if got != login_answer(&spec.name) {
            anyhow::bail!("login answer differs from what the backend sent");
        }
        if spec.switches > 0 {
            let expected = crate::backend::switch_answer();
            for k in 0..spec.switches {
                let to = if k % 2 == 0 { SWITCH_TARGETS[1] } else { SWITCH_TARGETS[0] };
                let asked = Instant::now();
                link.send(&crate::backend::switch_request(to))?;
                link.end_tick()?;
                let mut seen = Vec::with_capacity(expected.len());
                while seen.len() < expected.len() {
                    let n = link.recv(&mut buf, Duration::from_secs(30))?;
                    if n == 0 {
                        anyhow::bail!("switch {k} to {to} not done within 30 s");
                    }
                    seen.extend_from_slice(buf.get(..n).unwrap_or_default());
                }
                if seen != expected {
                    anyhow::bail!("switch {k} to {to}: the client saw other bytes than the world reset");
                }
                result.switch_times.push(asked.elapsed());
            }
        }
        let mut driver = Driver::new(link, &spec, &templates, vec![0u8; 256 * 1024]);
        driver.run(spec.warmup, None)?;
        stage = 2;
        sync.warmed.wait();
        sync.go.wait();
        stage = 3;
        let before = conn.stats();
        match spec.pace {
            None => driver.run(spec.messages, Some(&mut result))?,
            Some(tick) => driver.run_paced(tick, &sync.busy_left, &mut result)?,
        }
        result.stats = subtract(conn.stats(), before);
        drop(busy);
        stage = 4;
        sync.done.wait();
        sync.release.wait();
        stage = 5;
        conn.close();
        Ok(())
    })();
    if let Err(e) = outcome {
        result.error = Some(format!("{}: {e:#}", spec.name));
    }
    if !announced {
        sync.logged_in.fetch_add(1, Ordering::Relaxed);
    }
    // Meet the barriers not reached yet, so the harness and the other clients go on.
    if stage < 1 {
        sync.logged.wait();
    }
    if stage < 2 {
        sync.warmed.wait();
    }
    if stage < 3 {
        sync.go.wait();
    }
    if stage < 4 {
        sync.done.wait();
    }
    if stage < 5 {
        sync.release.wait();
    }
    result
}
