//! What can be wrong with a configuration: one problem naming its key ([`ConfigProblem`]), and why a
//! configuration could not be used ([`ConfigError`]).

/// One thing wrong with a configuration, naming the key.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("{key}: {message}")]
#[non_exhaustive]
pub struct ConfigProblem {
    /// The key path, such as `listener[1].bind` or `routing.hosts."mc.example.com"`.
    pub key: String,
    /// What is wrong.
    pub message: String,
}

impl ConfigProblem {
    pub(crate) fn new(key: impl Into<String>, message: impl Into<String>) -> Self {
        Self { key: key.into(), message: message.into() }
    }
}

/// Why a configuration could not be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum ConfigError {
    /// The file could not be read.
    #[error("cannot read {path}: {source}")]
    Read {
        /// The path given.
        path: String,
        /// The I/O error.
        source: std::io::Error,
    },
    /// The file is not valid TOML or has unknown keys or wrong types (one problem, with its line).
    #[error("{0}")]
    Parse(ConfigProblem),
    /// The file parsed, but values are invalid or inconsistent.
    #[error("{} problem(s): {}", .0.len(), .0.iter().map(ToString::to_string).collect::<Vec<_>>().join("; "))]
    Invalid(Vec<ConfigProblem>),
}

impl ConfigError {
    /// Every problem, one per line for `--check-config`.
    pub fn problems(&self) -> Vec<String> {
        match self {
            Self::Read { .. } | Self::Parse(_) => vec![self.to_string()],
            Self::Invalid(p) => p.iter().map(ToString::to_string).collect(),
        }
    }
}
