//! The proxy configuration: a TOML file (see `docs/configuration.md`) or the built-in defaults.
//!
//! Two layers:
//! - [`Config`] is the file as written: every section and key optional, unknown keys errors, defaults from the
//!   `Default` impls (`#[serde(default)]`). Keys that only apply to some listener transports are `Option`s,
//!   because whether they were given matters (a `path` on a `tcp` listener is a mistake).
//! - [`Settings`] is what the proxy runs on: [`Config::settings`] checks every value and builds typed values
//!   (a `wss` listener carries its certificate and key, trusted proxies are parsed networks), reporting every
//!   problem at once, one per key, for `--check-config`. Nothing is re-derived or dropped after that.

//!
//! Files, bottom-up: `schema.rs` (the file as written), `errors.rs`, `settings.rs` (the checked settings),
//! `check.rs` (the checks that build them), and this file (reading and parsing).

use std::path::Path;

mod check;
mod errors;
mod limits;
mod schema;
mod settings;
#[cfg(test)]
mod tests;

pub use crate::transport::Transport;
pub use crate::trusted::RealIpHeader;
pub use errors::{ConfigError, ConfigProblem};
pub use limits::*;
pub use schema::*;
pub use settings::{BackendSettings, Listener, ListenerKind, RouteTable, Settings, TlsFiles, Tunables, WsSettings};

impl Config {
    /// Parses TOML text (no validation beyond types and unknown keys).
    ///
    /// # Errors
    /// [`ConfigError::Parse`] with the line and column of the first problem.
    pub fn from_toml(text: &str) -> Result<Self, ConfigError> {
        toml::from_str(text).map_err(|e| {
            let (line, col) = e.span().map_or((0, 0), |s| line_col(text, s.start));
            let message = e.message().replace('\n', " ");
            ConfigError::Parse(ConfigProblem::new(format!("line {line}, column {col}"), message))
        })
    }

    /// Reads and parses a file, and checks it ([`Config::settings`]).
    ///
    /// # Errors
    /// Any [`ConfigError`].
    pub fn load(path: &Path) -> Result<Self, ConfigError> {
        let text = std::fs::read_to_string(path)
            .map_err(|source| ConfigError::Read { path: path.display().to_string(), source })?;
        let config = Self::from_toml(&text)?;
        config.settings()?;
        Ok(config)
    }

    /// Checks every value and reference.
    ///
    /// # Errors
    /// [`ConfigError::Invalid`] with every problem found.
    pub fn validate(&self) -> Result<(), ConfigError> {
        self.settings().map(|_| ())
    }

    /// Every problem with the values, in file order (empty when valid).
    pub fn check(&self) -> Vec<ConfigProblem> {
        match self.settings() {
            Ok(_) => Vec::new(),
            Err(ConfigError::Invalid(p)) => p,
            Err(e) => vec![ConfigProblem::new("config", e.to_string())],
        }
    }
}

fn line_col(text: &str, offset: usize) -> (usize, usize) {
    let before = text.get(..offset).unwrap_or(text);
    let line = before.matches('\n').count() + 1;
    let col = before.rsplit('\n').next().map_or(0, |l| l.chars().count()) + 1;
    (line, col)
}
