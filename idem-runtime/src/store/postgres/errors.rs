//! The PostgreSQL store's errors: bad arguments ([`PostgresConnectError`]), and failed
//! statements as [`StoreError`]s typed by SQLSTATE.

#[cfg(doc)]
use super::PostgresStore;
use super::{Inner, BACKEND};
use crate::store::{StoreError, StoreErrorKind};

/// Why [`PostgresStore::connect`] or [`PostgresStore::with_schema`] failed. Each variant
/// names the URL with its password replaced by `***`.
///
/// Connecting is lazy: these errors are about the arguments. A server that cannot be
/// reached, or a schema of another version, is reported by the first operation as a
/// [`StoreError`] (of kind [`StoreErrorKind::Unavailable`] or
/// [`StoreErrorKind::Unsupported`]) that names the URL the same way.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum PostgresConnectError {
    /// The URL is not a PostgreSQL connection string.
    #[error("invalid PostgreSQL URL {url}: {message}")]
    InvalidUrl {
        /// The URL, password redacted.
        url: String,
        /// Why it was refused.
        message: String,
    },
    /// The schema name is not 1 to 63 characters of `a-z`, `0-9` and `_` starting with a
    /// letter or `_`, or starts with `pg_` (reserved by PostgreSQL for system schemas).
    #[error("invalid schema name {schema:?} for the PostgreSQL store at {url}: use 1 to 63 of a-z, 0-9 and _, not starting with a digit or pg_")]
    InvalidSchema {
        /// The URL, password redacted.
        url: String,
        /// The refused name.
        schema: String,
    },
    /// The TLS settings cannot be used: a certificate or key file that cannot be read or
    /// holds none, no system root certificates for `verify-ca`/`verify-full` without
    /// `sslrootcert`.
    #[error("cannot set up TLS for the PostgreSQL store at {url}: {message}")]
    Tls {
        /// The URL, password redacted.
        url: String,
        /// What is wrong, naming the parameter and the file.
        message: String,
    },
    /// The connection pool could not be built.
    #[error("cannot set up the connection pool for the PostgreSQL store at {url}: {message}")]
    Pool {
        /// The URL, password redacted.
        url: String,
        /// The pool's message.
        message: String,
    },
}

impl From<PostgresConnectError> for StoreError {
    /// Every connect error is [`StoreErrorKind::Unsupported`]: retrying cannot fix it.
    fn from(error: PostgresConnectError) -> Self {
        StoreError::new(BACKEND, StoreErrorKind::Unsupported, error.to_string())
    }
}

impl Inner {
    /// A failed statement as a store error: its kind by SQLSTATE ([`error_kind`]), its
    /// message the server's ([`error_text`]).
    pub(super) fn db_error(&self, op: &str, e: tokio_postgres::Error) -> StoreError {
        StoreError::new(
            BACKEND,
            error_kind(&e),
            format!(
                "{op} on {} (schema {}): {}",
                self.url,
                self.schema,
                error_text(&e)
            ),
        )
    }

    pub(super) fn corrupt(&self, key: &str, what: &str) -> StoreError {
        StoreError::new(
            BACKEND,
            StoreErrorKind::Corrupt,
            format!(
                "record {key} on {} (schema {}): {what}",
                self.url, self.schema
            ),
        )
    }
}

/// The kind of a failed statement: server errors that retrying cannot fix are
/// [`StoreErrorKind::Unsupported`] (SQLSTATE classes `42` syntax error or access rule
/// violation, `3F` invalid schema name, `0A` feature not supported) or
/// [`StoreErrorKind::Corrupt`] (class `22` data exception: a stored value this build
/// cannot read); every other error (connection lost, server shutting down, lock or
/// serialization conflicts, resources) is [`StoreErrorKind::Unavailable`].
fn error_kind(e: &tokio_postgres::Error) -> StoreErrorKind {
    match e.as_db_error().map(|db| db.code().code()) {
        Some(code) => sqlstate_kind(code),
        None => StoreErrorKind::Unavailable,
    }
}

/// The kind of a server error with SQLSTATE `code` (see [`error_kind`]).
fn sqlstate_kind(code: &str) -> StoreErrorKind {
    match code.get(..2) {
        Some("42" | "3F" | "0A") => StoreErrorKind::Unsupported,
        Some("22") => StoreErrorKind::Corrupt,
        _ => StoreErrorKind::Unavailable,
    }
}

/// The text of a failed statement: for a server error its message, detail and hint and
/// its SQLSTATE code (tokio-postgres's own `Display` says only `db error`); otherwise the
/// client error with its causes.
pub(super) fn error_text(e: &tokio_postgres::Error) -> String {
    let Some(db) = e.as_db_error() else {
        let mut text = e.to_string();
        let mut source = std::error::Error::source(e);
        while let Some(cause) = source {
            text.push_str(": ");
            text.push_str(&cause.to_string());
            source = cause.source();
        }
        return text;
    };
    let mut text = format!("{}: {}", db.severity(), db.message());
    if let Some(detail) = db.detail() {
        text.push_str(&format!(" (detail: {detail})"));
    }
    if let Some(hint) = db.hint() {
        text.push_str(&format!(" (hint: {hint})"));
    }
    if db.message().contains("no encryption") {
        // pg_hba.conf has only `hostssl` lines for this connection.
        text.push_str(" (the server takes this connection only over TLS: add `sslmode=require`, or `sslmode=verify-full` with `sslrootcert=CA_FILE`, to the URL)");
    }
    text.push_str(&format!(" [SQLSTATE {}]", db.code().code()));
    text
}

#[cfg(test)]
mod tests {
    use super::sqlstate_kind;
    use crate::store::StoreErrorKind;

    // pins S10: server errors that retrying cannot fix are not transient
    #[test]
    fn sqlstate_classes_map_to_kinds() {
        for (code, kind) in [
            ("42P07", StoreErrorKind::Unsupported), // duplicate table
            ("42501", StoreErrorKind::Unsupported), // insufficient privilege
            ("42703", StoreErrorKind::Unsupported), // undefined column
            ("42939", StoreErrorKind::Unsupported), // reserved name
            ("3F000", StoreErrorKind::Unsupported), // invalid schema name
            ("0A000", StoreErrorKind::Unsupported), // feature not supported
            ("22P02", StoreErrorKind::Corrupt),     // invalid text representation
            ("22003", StoreErrorKind::Corrupt),     // numeric value out of range
            ("40001", StoreErrorKind::Unavailable), // serialization failure
            ("40P01", StoreErrorKind::Unavailable), // deadlock detected
            ("57P01", StoreErrorKind::Unavailable), // admin shutdown
            ("53300", StoreErrorKind::Unavailable), // too many connections
            ("08006", StoreErrorKind::Unavailable), // connection failure
            ("", StoreErrorKind::Unavailable),
        ] {
            assert_eq!(sqlstate_kind(code), kind, "{code}");
        }
    }
}
