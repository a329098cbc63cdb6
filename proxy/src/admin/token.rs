//! The admin API's bearer token (`[metrics] admin_token_file`): read once at start, compared in constant time.

use std::path::{Path, PathBuf};

use crate::config::MIN_ADMIN_TOKEN_BYTES;

/// The admin API's token, kept as its SHA-256 digest: a given token's digest is compared with it in constant
/// time, so neither its bytes nor its length show in the time an answer takes.
pub(crate) struct AdminToken(aws_lc_rs::digest::Digest);

impl std::fmt::Debug for AdminToken {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("AdminToken(..)")
    }
}

/// Why the token file cannot be used.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum TokenError {
    /// The file cannot be read.
    #[error("metrics.admin_token_file {path}: {source}")]
    Read {
        /// The file.
        path: PathBuf,
        /// Why.
        source: std::io::Error,
    },
    /// The token is shorter than [`MIN_ADMIN_TOKEN_BYTES`].
    #[error("metrics.admin_token_file {path} holds {len} bytes; the token needs at least {MIN_ADMIN_TOKEN_BYTES}")]
    Short {
        /// The file.
        path: PathBuf,
        /// Its length, surrounding whitespace not counted.
        len: usize,
    },
}

impl AdminToken {
    /// Reads `path`: its bytes, surrounding whitespace trimmed, at least [`MIN_ADMIN_TOKEN_BYTES`]; and whether
    /// the file is readable by other users than its owner and group (Unix mode `o+r`), which the caller warns
    /// about.
    ///
    /// # Errors
    /// [`TokenError`] when the file cannot be read or the token is too short.
    pub(crate) fn load(path: &Path) -> Result<(Self, bool), TokenError> {
        let bytes = std::fs::read(path).map_err(|source| TokenError::Read { path: path.into(), source })?;
        let token = bytes.trim_ascii();
        if token.len() < MIN_ADMIN_TOKEN_BYTES {
            return Err(TokenError::Short { path: path.into(), len: token.len() });
        }
        Ok((Self(digest(token)), world_readable(path)))
    }

    /// Whether an `Authorization` header's value is `Bearer <this token>` (the scheme in any case, RFC 7235
    /// §2.1; the token compared by digest in constant time).
    pub(crate) fn admits(&self, authorization: Option<&[u8]>) -> bool {
        let Some(value) = authorization else { return false };
        let (scheme, given) = value.split_at(value.len().min(7));
        if !scheme.eq_ignore_ascii_case(b"bearer ") {
            return false;
        }
        let given = digest(given.trim_ascii());
        aws_lc_rs::constant_time::verify_slices_are_equal(given.as_ref(), self.0.as_ref()).is_ok()
    }
}

fn digest(token: &[u8]) -> aws_lc_rs::digest::Digest {
    aws_lc_rs::digest::digest(&aws_lc_rs::digest::SHA256, token)
}

#[cfg(unix)]
fn world_readable(path: &Path) -> bool {
    use std::os::unix::fs::PermissionsExt;
    std::fs::metadata(path).is_ok_and(|m| m.permissions().mode() & 0o004 != 0)
}

#[cfg(not(unix))]
fn world_readable(_: &Path) -> bool {
    false
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_token_is_read_trimmed_and_compared_whole() {
        let dir = std::env::temp_dir().join(format!("moonbridge-token-{}", std::process::id()));
        std::fs::create_dir_all(&dir).unwrap();
        let path = dir.join("token");
        std::fs::write(&path, format!("{}\n", "a".repeat(32))).unwrap();
        let (token, _) = AdminToken::load(&path).unwrap();
        assert!(token.admits(Some(format!("Bearer {}", "a".repeat(32)).as_bytes())));
        assert!(!token.admits(Some(format!("Bearer {}", "a".repeat(31)).as_bytes())));
        assert!(!token.admits(Some(format!("Bearer {}b", "a".repeat(32)).as_bytes())));
        assert!(!token.admits(Some(format!("Basic {}", "a".repeat(32)).as_bytes())));
        assert!(token.admits(Some(format!("bearer {}", "a".repeat(32)).as_bytes())), "the scheme in any case");
        assert!(!token.admits(Some(b"Bear")));
        assert!(!token.admits(None));
        std::fs::write(&path, "short").unwrap();
        assert!(matches!(AdminToken::load(&path), Err(TokenError::Short { len: 5, .. })));
        std::fs::remove_dir_all(&dir).unwrap();
    }
}
