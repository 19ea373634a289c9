//! The PostgreSQL store's schema: created on a store's first use under an advisory lock,
//! and its version checked (see the module documentation of [`super`]).

use tokio_postgres::SimpleQueryMessage;

use super::{Inner, BACKEND};
use crate::store::{StoreError, StoreErrorKind};

/// The schema version this build writes and reads (see the module documentation).
pub const POSTGRES_SCHEMA_VERSION: i64 = 1;

/// The schema set-up statements, with the schema name spliced in once.
pub(super) struct SchemaSql {
    pub(super) setup_meta: String,
    pub(super) read_version: String,
    pub(super) create_records: String,
    pub(super) lock: String,
    pub(super) write_version: String,
}

impl SchemaSql {
    pub(super) fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        SchemaSql {
            setup_meta: format!(
                "CREATE SCHEMA IF NOT EXISTS {s};
                 CREATE TABLE IF NOT EXISTS {s}.meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL);"
            ),
            read_version: format!("SELECT value FROM {s}.meta WHERE name = 'schema_version'"),
            create_records: format!(
                "CREATE TABLE IF NOT EXISTS {s}.records (
                    key          TEXT PRIMARY KEY,
                    fingerprint  TEXT NOT NULL,
                    created_at   BIGINT NOT NULL,
                    expires_at   BIGINT NOT NULL,
                    owner        TEXT,
                    lease_until  BIGINT,
                    outcome      TEXT,
                    completed_at BIGINT,
                    CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
                            AND outcome IS NULL AND completed_at IS NULL)
                        OR (owner IS NULL AND lease_until IS NULL
                            AND outcome IS NOT NULL AND completed_at IS NOT NULL))
                 );
                 CREATE INDEX IF NOT EXISTS records_expires_at ON {s}.records (expires_at);"
            ),
            lock: format!("SELECT pg_advisory_xact_lock(hashtext('idem schema {schema}'))"),
            write_version: format!(
                "INSERT INTO {s}.meta (name, value) VALUES ('schema_version', {POSTGRES_SCHEMA_VERSION})"
            ),
        }
    }
}

impl Inner {
    /// Creates the schema if absent, checks its version (see the module documentation).
    pub(super) async fn set_up(
        &self,
        client: &mut deadpool_postgres::Client,
    ) -> Result<(), StoreError> {
        // Simple queries only (the schema name is a checked identifier, the version a
        // constant): one round trip each, no one-off prepared statements.
        let failed = |e| self.db_error("create the schema", e);
        self.count();
        let tx = client.transaction().await.map_err(failed)?;
        // Serialises concurrent first uses of one schema name, across processes.
        self.count();
        tx.batch_execute(&self.schema_sql.lock)
            .await
            .map_err(failed)?;
        self.count();
        tx.batch_execute(&self.schema_sql.setup_meta)
            .await
            .map_err(failed)?;
        self.count();
        let version = tx
            .simple_query(&self.schema_sql.read_version)
            .await
            .map_err(failed)?
            .into_iter()
            .find_map(|message| match message {
                SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_owned)),
                _ => None,
            });
        let found = match version {
            None => None,
            Some(text) => Some(
                text.as_deref()
                    .and_then(|text| text.parse::<i64>().ok())
                    .ok_or_else(|| {
                        StoreError::new(
                            BACKEND,
                            StoreErrorKind::Corrupt,
                            format!(
                                "the PostgreSQL store at {} has an unreadable schema version \
                                 {text:?} in schema {}",
                                self.url, self.schema
                            ),
                        )
                    })?,
            ),
        };
        match found {
            None => {
                self.count();
                tx.batch_execute(&self.schema_sql.create_records)
                    .await
                    .map_err(failed)?;
                self.count();
                tx.batch_execute(&self.schema_sql.write_version)
                    .await
                    .map_err(failed)?;
            }
            Some(POSTGRES_SCHEMA_VERSION) => {}
            Some(found) => {
                return Err(StoreError::new(
                    BACKEND,
                    StoreErrorKind::Unsupported,
                    format!(
                        "the PostgreSQL store at {} has idem schema version {found} in schema {}; \
                         this build reads version {POSTGRES_SCHEMA_VERSION}",
                        self.url, self.schema
                    ),
                ))
            }
        }
        self.count();
        tx.commit().await.map_err(failed)
    }
}

/// Whether `schema` is a plain lowercase identifier (safe to quote into SQL) that
/// PostgreSQL accepts for a new schema (`pg_…` names are reserved for the system).
pub(super) fn valid_schema(schema: &str) -> bool {
    let mut chars = schema.chars();
    matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && schema.len() <= 63
        && !schema.starts_with("pg_")
}

#[cfg(test)]
mod tests {
    use super::valid_schema;

    #[test]
    fn schema_names_are_plain_identifiers() {
        for ok in ["idem", "_x", "idem_test_0af3", &"a".repeat(63)] {
            assert!(valid_schema(ok), "{ok}");
        }
        for bad in ["", "9x", "Idem", "a-b", "a\"b", "x; DROP", &"a".repeat(64)] {
            assert!(!valid_schema(bad), "{bad}");
        }
    }

    // pins S10: a schema name PostgreSQL reserves is refused up front
    #[test]
    fn reserved_schema_names_are_refused() {
        for bad in ["pg_idem", "pg_", "pg_catalog", "pg_toast"] {
            assert!(!valid_schema(bad), "{bad}");
        }
        for ok in ["pgx", "pg", "idem_pg_", "_pg_x"] {
            assert!(valid_schema(ok), "{ok}");
        }
    }
}
