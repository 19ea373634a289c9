//! The store's errors: why opening a file failed, and how a failed statement or a row that
//! is not a valid record becomes a [`StoreError`] (S10).

use std::path::{Path, PathBuf};

use rusqlite::ErrorCode;

use super::BACKEND;
use crate::store::{StoreError, StoreErrorKind};

/// Why [`SqliteStore::open`](super::SqliteStore::open) or
/// [`SqliteStore::open_in_memory`](super::SqliteStore::open_in_memory) failed. Each variant
/// names the file (`:memory:` for an in-memory database).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum SqliteOpenError {
    /// The file could not be opened or created (missing directory, no permission, not a
    /// database).
    #[error("cannot open the SQLite store at {path}: {message}")]
    Open {
        /// The file.
        path: PathBuf,
        /// SQLite's message.
        message: String,
    },
    /// The file opened, but setting WAL mode, creating the schema or migrating an older
    /// schema failed (for example the file is read-only, or another process held the write
    /// lock past the busy timeout). A failed migration leaves the file as it was.
    #[error("cannot set up the SQLite store at {path}: {message}")]
    Setup {
        /// The file.
        path: PathBuf,
        /// SQLite's message.
        message: String,
    },
    /// The file holds an idem schema of a version this build cannot read: newer than this
    /// build's [`SQLITE_SCHEMA_VERSION`](super::SQLITE_SCHEMA_VERSION) (written by a newer
    /// build), or not a version any build wrote. The file is left untouched. Older versions
    /// are migrated, not refused.
    #[error(
        "the SQLite store at {path} has idem schema version {found}; this build reads versions 1 to {supported}"
    )]
    UnsupportedSchema {
        /// The file.
        path: PathBuf,
        /// The version found in `idem_meta`.
        found: i64,
        /// The newest version this build reads (and the one it writes).
        supported: i64,
    },
}

impl From<SqliteOpenError> for StoreError {
    /// A schema of an unsupported version is [`StoreErrorKind::Unsupported`]; every other
    /// open failure is [`StoreErrorKind::Unavailable`].
    fn from(error: SqliteOpenError) -> Self {
        let kind = match error {
            SqliteOpenError::UnsupportedSchema { .. } => StoreErrorKind::Unsupported,
            _ => StoreErrorKind::Unavailable,
        };
        StoreError::new(BACKEND, kind, error.to_string())
    }
}

/// A failed statement `op` on the file at `path`: [`StoreErrorKind::Corrupt`] when SQLite
/// says the file is damaged or not a database, [`StoreErrorKind::Unavailable`] otherwise
/// (a busy write lock past the timeout, an I/O error).
pub(super) fn db_error(path: &Path, op: &str, e: rusqlite::Error) -> StoreError {
    let kind = match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreErrorKind::Corrupt,
        _ => StoreErrorKind::Unavailable,
    };
    StoreError::new(BACKEND, kind, format!("{op} on {}: {e}", path.display()))
}

/// The row of `key` in the file at `path` is not a valid record: `what` says why.
pub(super) fn corrupt(path: &Path, key: &str, what: &str) -> StoreError {
    StoreError::new(
        BACKEND,
        StoreErrorKind::Corrupt,
        format!("record {key} in {}: {what}", path.display()),
    )
}
