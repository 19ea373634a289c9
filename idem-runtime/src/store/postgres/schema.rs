//! The PostgreSQL store's schema: created on a store's first use under an advisory lock,
//! its version checked, and older versions upgraded in place (see the module
//! documentation of [`super`]).

use tokio_postgres::SimpleQueryMessage;

use super::{Inner, BACKEND};
use crate::store::{StoreError, StoreErrorKind};

/// The schema version this build writes and reads: 5 (see the module documentation).
/// A schema of version 1, 2, 3 or 4 is upgraded to it in place on a store's first use; a
/// schema of any other version is refused with [`StoreErrorKind::Unsupported`].
pub const POSTGRES_SCHEMA_VERSION: i64 = 5;

/// Version 1: no fencing tokens, no "outcome unknown" state.
const VERSION_1: i64 = 1;

/// Version 2: no labels (P1) and no listing indexes (I3).
const VERSION_2: i64 = 2;

/// Version 3: no history (U7), no outcome source and no "not applied" state (U6).
const VERSION_3: i64 = 3;

/// Version 4: no approval states (A2, A3).
const VERSION_4: i64 = 4;

/// The check of a row's state from version 5 on (S1, U1, U6, A2, A3): in progress or
/// outcome unknown (owner and lease), completed (outcome and its time), not applied (only
/// `decided_at`), or awaiting approval (only `approval_at`) or approved (`approval_at` and
/// `approval_until`); the approval columns are `NULL` in every other state.
const STATE_CHECK: &str = "CHECK (
        (owner IS NOT NULL AND lease_until IS NOT NULL
         AND outcome IS NULL AND completed_at IS NULL AND decided_at IS NULL
         AND approval_at IS NULL AND approval_until IS NULL)
     OR (owner IS NULL AND lease_until IS NULL
         AND outcome IS NOT NULL AND completed_at IS NOT NULL AND decided_at IS NULL
         AND approval_at IS NULL AND approval_until IS NULL)
     OR (owner IS NULL AND lease_until IS NULL
         AND outcome IS NULL AND completed_at IS NULL AND decided_at IS NOT NULL
         AND approval_at IS NULL AND approval_until IS NULL)
     OR (owner IS NULL AND lease_until IS NULL
         AND outcome IS NULL AND completed_at IS NULL AND decided_at IS NULL
         AND approval_at IS NOT NULL))";

/// The label columns and the listing indexes of version 3, added to a version 2 table
/// (also right after the version 1 → 2 step). Every statement is `IF NOT EXISTS`, so that
/// indexes built beforehand (`CREATE INDEX CONCURRENTLY` under these names, for a large
/// table) are kept; the columns are nullable without a default, so adding them rewrites
/// no row. `{s}` is the quoted schema name.
fn labels_and_listing_indexes(s: &str) -> String {
    format!(
        "ALTER TABLE {s}.records
            ADD COLUMN IF NOT EXISTS tool TEXT,
            ADD COLUMN IF NOT EXISTS namespace TEXT,
            ADD COLUMN IF NOT EXISTS scope TEXT COLLATE \"C\",
            ADD COLUMN IF NOT EXISTS key_args TEXT;
         {indexes}",
        indexes = listing_indexes(s)
    )
}

/// Version 3 → 4 (U6, U7): the outcome's source, the decision time of a record not
/// applied, and the history (its text, how many entries it keeps and how many it
/// dropped); the state check that versions 1 to 3 created without a name
/// (`records_check`, which forbids a row with neither owner nor outcome) is dropped: the
/// 4 → 5 step that always follows ([`approvals`], in the same batch and transaction) adds
/// `records_state` in its place. Adding nullable columns, or columns with a constant
/// default, rewrites no row (PostgreSQL 11 and later). One `ALTER TABLE`: all or nothing.
fn history_and_decisions(s: &str) -> String {
    format!(
        "ALTER TABLE {s}.records
            ADD COLUMN source TEXT,
            ADD COLUMN decided_at BIGINT,
            ADD COLUMN history TEXT,
            ADD COLUMN history_len INTEGER NOT NULL DEFAULT 0,
            ADD COLUMN history_dropped BIGINT NOT NULL DEFAULT 0,
            DROP CONSTRAINT records_check;"
    )
}

/// Version 4 → 5 (A2, A3): the approval columns `approval_at` and `approval_until`
/// (nullable, no default: adding them rewrites no row), and the state check
/// `records_state` of version 4 (if any: a table coming from version 3 has none, see
/// [`history_and_decisions`]) replaced by [`STATE_CHECK`], which also allows the two
/// approval states. Every old row meets it (no approval column set, and the old check, or
/// version 3's, held), so it is added `NOT VALID`: no scan. One `ALTER TABLE`: all or
/// nothing.
fn approvals(s: &str) -> String {
    format!(
        "ALTER TABLE {s}.records
            ADD COLUMN IF NOT EXISTS approval_at BIGINT,
            ADD COLUMN IF NOT EXISTS approval_until BIGINT,
            DROP CONSTRAINT IF EXISTS records_state,
            ADD CONSTRAINT records_state {STATE_CHECK} NOT VALID;"
    )
}

/// The listing indexes (I3): newest first over every record, per tool, and by scope text in
/// byte order (the `scope` column's collation is `"C"`) for prefix ranges.
fn listing_indexes(s: &str) -> String {
    format!(
        "CREATE INDEX IF NOT EXISTS records_created ON {s}.records (created_at, key COLLATE \"C\");
         CREATE INDEX IF NOT EXISTS records_tool_created
             ON {s}.records (tool, created_at, key COLLATE \"C\");
         CREATE INDEX IF NOT EXISTS records_scope ON {s}.records (scope);"
    )
}

/// The schema set-up statements, with the schema name spliced in once.
pub(super) struct SchemaSql {
    /// Creates the schema and the version table if absent.
    setup_meta: String,
    /// The stored schema version, if any.
    read_version: String,
    /// Creates the records table of version 5 and its indexes.
    create_records: String,
    /// Takes the transaction-level advisory lock of this schema name.
    lock: String,
    /// Whether the tables exist and, if they do, the stored version; reads only, and needs
    /// no privilege on a schema that does not exist.
    check_existing: String,
    /// Records version 5 in a new schema.
    write_version: String,
    /// Upgrades a records table of version 1 to version 5 in place.
    upgrade_from_1: String,
    /// Upgrades a records table of version 2 to version 5 in place.
    upgrade_from_2: String,
    /// Upgrades a records table of version 3 to version 5 in place.
    upgrade_from_3: String,
    /// Upgrades a records table of version 4 to version 5 in place.
    upgrade_from_4: String,
    /// Records that a schema of version 1, 2, 3 or 4 is now of version 5.
    update_version: String,
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
            check_existing: format!(
                "SELECT to_regclass('{s}.meta') IS NOT NULL AND to_regclass('{s}.records') IS NOT NULL"
            ),
            // The same table as a version 1, 2, 3 or 4 table after its upgrade (same columns in
            // the same order, defaults, checks and indexes; only the upgrades add their
            // checks NOT VALID), so that stores created by any path behave alike.
            create_records: format!(
                "CREATE TABLE IF NOT EXISTS {s}.records (
                    key           TEXT PRIMARY KEY,
                    fingerprint   TEXT NOT NULL,
                    created_at    BIGINT NOT NULL,
                    expires_at    BIGINT NOT NULL,
                    owner         TEXT,
                    lease_until   BIGINT,
                    outcome       TEXT,
                    completed_at  BIGINT,
                    fence         BIGINT NOT NULL DEFAULT 1,
                    unknown_since BIGINT,
                    CONSTRAINT records_fence_positive CHECK (fence >= 1),
                    CONSTRAINT records_unknown_has_owner
                        CHECK (unknown_since IS NULL OR owner IS NOT NULL),
                    tool          TEXT,
                    namespace     TEXT,
                    scope         TEXT COLLATE \"C\",
                    key_args      TEXT,
                    source          TEXT,
                    decided_at      BIGINT,
                    history         TEXT,
                    history_len     INTEGER NOT NULL DEFAULT 0,
                    history_dropped BIGINT NOT NULL DEFAULT 0,
                    approval_at     BIGINT,
                    approval_until  BIGINT,
                    CONSTRAINT records_state {STATE_CHECK}
                 );
                 CREATE INDEX IF NOT EXISTS records_expires_at ON {s}.records (expires_at);
                 {indexes}",
                indexes = listing_indexes(&s)
            ),
            lock: format!("SELECT pg_advisory_xact_lock(hashtext('idem schema {schema}'))"),
            write_version: format!(
                "INSERT INTO {s}.meta (name, value) VALUES ('schema_version', {POSTGRES_SCHEMA_VERSION})"
            ),
            // Version 1 → 2: adding a column with a constant default rewrites no row
            // (PostgreSQL 11 and later), and every version 1 row meets the new checks (fence
            // 1, no `unknown_since`), so they are added NOT VALID: no scan of the table
            // either. New and changed rows are checked all the same. Then 2 → 3, 3 → 4 and
            // 4 → 5, in the same batch (one round trip).
            upgrade_from_1: format!(
                "ALTER TABLE {s}.records
                    ADD COLUMN fence BIGINT NOT NULL DEFAULT 1,
                    ADD COLUMN unknown_since BIGINT,
                    ADD CONSTRAINT records_fence_positive CHECK (fence >= 1) NOT VALID,
                    ADD CONSTRAINT records_unknown_has_owner
                        CHECK (unknown_since IS NULL OR owner IS NOT NULL) NOT VALID;
                 {labels}
                 {history}
                 {approvals}",
                labels = labels_and_listing_indexes(&s),
                history = history_and_decisions(&s),
                approvals = approvals(&s)
            ),
            upgrade_from_2: format!(
                "{labels}
                 {history}
                 {approvals}",
                labels = labels_and_listing_indexes(&s),
                history = history_and_decisions(&s),
                approvals = approvals(&s)
            ),
            upgrade_from_3: format!(
                "{history}
                 {approvals}",
                history = history_and_decisions(&s),
                approvals = approvals(&s)
            ),
            upgrade_from_4: approvals(&s),
            update_version: format!(
                "UPDATE {s}.meta SET value = {POSTGRES_SCHEMA_VERSION}
                 WHERE name = 'schema_version'
                   AND value IN ({VERSION_1}, {VERSION_2}, {VERSION_3}, {VERSION_4})"
            ),
        }
    }
}

impl Inner {
    /// Creates the schema if absent, upgrades it from version 1, 2, 3 or 4, checks its version
    /// (see the module documentation): one transaction holding the schema name's advisory
    /// lock, so that stores starting together, in any process, neither race nor upgrade
    /// twice.
    pub(super) async fn set_up(
        &self,
        client: &mut deadpool_postgres::Client,
    ) -> Result<(), StoreError> {
        // Simple queries only (the schema name is a checked identifier, the versions
        // constants): one round trip each, no one-off prepared statements.
        let failed = |e| self.db_error("set up the schema", e);
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
        let (create, record_version) = match found {
            None => (
                &self.schema_sql.create_records,
                &self.schema_sql.write_version,
            ),
            Some(from @ (VERSION_1 | VERSION_2 | VERSION_3 | VERSION_4)) => {
                let (url, schema) = (&self.url, &self.schema);
                tracing::info!(%url, %schema, "upgrading the idem schema from version {from} to {POSTGRES_SCHEMA_VERSION}");
                let upgrade = match from {
                    VERSION_1 => &self.schema_sql.upgrade_from_1,
                    VERSION_2 => &self.schema_sql.upgrade_from_2,
                    VERSION_3 => &self.schema_sql.upgrade_from_3,
                    _ => &self.schema_sql.upgrade_from_4,
                };
                (upgrade, &self.schema_sql.update_version)
            }
            Some(POSTGRES_SCHEMA_VERSION) => {
                // Nothing to change: commit the empty transaction (releases the lock).
                self.count();
                return tx.commit().await.map_err(failed);
            }
            Some(found) => {
                return Err(StoreError::new(
                    BACKEND,
                    StoreErrorKind::Unsupported,
                    format!(
                        "the PostgreSQL store at {} has idem schema version {found} in schema {}; \
                         this build reads version {POSTGRES_SCHEMA_VERSION} (and upgrades \
                         versions {VERSION_1}, {VERSION_2}, {VERSION_3} and {VERSION_4})",
                        self.url, self.schema
                    ),
                ))
            }
        };
        self.count();
        tx.batch_execute(create).await.map_err(failed)?;
        self.count();
        tx.batch_execute(record_version).await.map_err(failed)?;
        self.count();
        tx.commit().await.map_err(failed)
    }
}

impl Inner {
    /// For a store opened for inspection
    /// ([`PostgresStore::connect_existing`](super::PostgresStore::connect_existing)):
    /// checks, creating and upgrading nothing, that the schema holds the tables of this
    /// build's version. Two reads in one round trip each, needing only `SELECT` on `meta`.
    pub(super) async fn check_existing(
        &self,
        client: &deadpool_postgres::Client,
    ) -> Result<(), StoreError> {
        let failed = |e| self.db_error("check the schema", e);
        self.count();
        let exists = first_value(
            client
                .simple_query(&self.schema_sql.check_existing)
                .await
                .map_err(failed)?,
        );
        if exists.as_deref() != Some("t") {
            return Err(StoreError::new(
                BACKEND,
                StoreErrorKind::Unsupported,
                format!(
                    "no idem schema `{}` in the PostgreSQL database at {}: the schema or its \
                     tables do not exist (check the schema name, `idem_schema`); opened for \
                     inspection, nothing was created",
                    self.schema, self.url
                ),
            ));
        }
        self.count();
        let version = first_value(
            client
                .simple_query(&self.schema_sql.read_version)
                .await
                .map_err(failed)?,
        );
        match version.as_deref().map(str::parse::<i64>) {
            Some(Ok(POSTGRES_SCHEMA_VERSION)) => Ok(()),
            Some(Ok(found @ (VERSION_1 | VERSION_2 | VERSION_3 | VERSION_4))) => {
                Err(StoreError::new(
                    BACKEND,
                    StoreErrorKind::Unsupported,
                    format!(
                        "the PostgreSQL store at {} has idem schema version {found} in schema {}; \
                         this build reads version {POSTGRES_SCHEMA_VERSION}: opened for \
                         inspection, it is not upgraded here: run an agent of this build once \
                         (it upgrades the schema in place, keeping every record)",
                        self.url, self.schema
                    ),
                ))
            }
            other => Err(StoreError::new(
                BACKEND,
                StoreErrorKind::Unsupported,
                format!(
                    "the PostgreSQL store at {} has idem schema version {} in schema {}; this \
                     build reads version {POSTGRES_SCHEMA_VERSION}",
                    self.url,
                    match other {
                        Some(Ok(found)) => found.to_string(),
                        _ => format!("{version:?} (unreadable)"),
                    },
                    self.schema
                ),
            )),
        }
    }
}

/// The first column of the first row of a simple query, if any.
fn first_value(messages: Vec<SimpleQueryMessage>) -> Option<String> {
    messages.into_iter().find_map(|message| match message {
        SimpleQueryMessage::Row(row) => row.get(0).map(str::to_owned),
        _ => None,
    })
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
