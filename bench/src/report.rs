//! What the commands share in reporting: the failures a run collects from its tasks, a report printed as one
//! JSON object or as text, percentiles in milliseconds, and the lines of a process's log for a failed run.

use std::path::Path;
use std::sync::Mutex;

use crate::metrics;

/// What went wrong in a run, from any task: the first `KEEP` messages.
#[derive(Debug, Default)]
pub struct Failures<const KEEP: usize>(Mutex<Vec<String>>);

impl<const KEEP: usize> Failures<KEEP> {
    pub fn push(&self, what: String) {
        let mut f = self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner);
        if f.len() < KEEP {
            f.push(what);
        }
    }

    pub fn list(&self) -> Vec<String> {
        self.0.lock().unwrap_or_else(std::sync::PoisonError::into_inner).clone()
    }
}

/// Prints `report`: one JSON object with `json`, else as `text` prints it.
pub fn emit<T: serde::Serialize>(json: bool, report: &T, text: impl FnOnce(&T)) -> anyhow::Result<()> {
    if json {
        println!("{}", serde_json::to_string(report)?);
    } else {
        text(report);
    }
    Ok(())
}

/// The nearest-rank percentile `p` of sorted microseconds ([`metrics::percentile`]), in milliseconds.
pub fn percentile_ms(sorted: &[u32], p: f64) -> f64 {
    f64::from(metrics::percentile(sorted, p)) / 1000.0
}

/// The lines of the log at `path` (none when it cannot be read), for a failed run to show.
pub fn log_lines(path: &Path) -> Vec<String> {
    std::fs::read_to_string(path).unwrap_or_default().lines().map(str::to_owned).collect()
}
