//! Setting up a file: the busy timeout, WAL mode, and the idem schema, created on first
//! use and migrated in place from older versions (see the module documentation).

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior};

use super::SqliteOpenError;

/// The schema version this build writes, and the newest it reads; files of older versions
/// are migrated to it when opened (see the module documentation).
pub const SQLITE_SCHEMA_VERSION: i64 = 3;

/// How long a statement waits for another connection's write lock before failing.
pub(super) const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// The version table: created first, read inside the set-up transaction.
const META: &str =
    "CREATE TABLE IF NOT EXISTS idem_meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);";

/// Version 1, as the first build created it. A new file is created as version 1 and then
/// migrated, so that new and migrated files have one and the same schema.
const SCHEMA_V1: &str = "
CREATE TABLE idem_records (
    key          TEXT PRIMARY KEY NOT NULL,
    fingerprint  TEXT NOT NULL,
    created_at   INTEGER NOT NULL,
    expires_at   INTEGER NOT NULL,
    owner        TEXT,
    lease_until  INTEGER,
    outcome      TEXT,
    completed_at INTEGER,
    CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
            AND outcome IS NULL AND completed_at IS NULL)
        OR (owner IS NULL AND lease_until IS NULL
            AND outcome IS NOT NULL AND completed_at IS NOT NULL))
);
CREATE INDEX idem_records_expires_at ON idem_records (expires_at);
";

/// `MIGRATIONS[i]` takes a file from version `i + 1` to version `i + 2`.
///
/// 1 → 2 (fencing tokens F1, the outcome-unknown state U1): two columns, added without
/// rewriting a row. Every existing record gets fence 1 (the column's default) and keeps its
/// state; `unknown_since` stays `NULL`, so no existing record becomes outcome-unknown.
/// SQLite checks the new columns' constraints against every existing row.
///
/// 2 → 3 (labels P1, inspection I3–I5): four nullable label columns, added without
/// rewriting a row, so every existing record reads back with no label (P4) and keeps
/// replaying; and the indexes that serve listing: `(created_at, key)` for the listing
/// order and cursor, `(tool, created_at, key)` for a tool filter, `(scope)` for a scope
/// prefix (`IF NOT EXISTS`: an index of that name the file already has is left as it is).
const MIGRATIONS: [&str; (SQLITE_SCHEMA_VERSION - 1) as usize] = [
    "
ALTER TABLE idem_records
    ADD COLUMN fence INTEGER NOT NULL DEFAULT 1 CHECK (fence >= 1);
ALTER TABLE idem_records
    ADD COLUMN unknown_since INTEGER CHECK (unknown_since IS NULL OR outcome IS NULL);
",
    "
ALTER TABLE idem_records ADD COLUMN tool TEXT;
ALTER TABLE idem_records ADD COLUMN namespace TEXT;
ALTER TABLE idem_records ADD COLUMN scope TEXT;
ALTER TABLE idem_records ADD COLUMN key_args TEXT;
CREATE INDEX IF NOT EXISTS idem_records_created_at ON idem_records (created_at, key);
CREATE INDEX IF NOT EXISTS idem_records_tool ON idem_records (tool, created_at, key);
CREATE INDEX IF NOT EXISTS idem_records_scope ON idem_records (scope);
",
];

/// `PRAGMA journal_mode = WAL`, retried while the file is busy, for up to [`BUSY_TIMEOUT`].
///
/// Switching to WAL mode takes a shared lock and then needs an exclusive one; when another
/// connection holds a write lock (another process creating the schema of a new file), SQLite
/// answers `SQLITE_BUSY` at once instead of calling the busy handler (waiting could
/// deadlock while this statement holds its shared lock). The failed statement drops its
/// lock, so trying again once the writer is done succeeds: without this, processes that
/// open a new file at the same moment fail now and then with "database is locked".
fn switch_to_wal(conn: &Connection) -> rusqlite::Result<String> {
    let deadline = Instant::now() + BUSY_TIMEOUT;
    let mut pause = Duration::from_millis(1);
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)) {
            Err(e)
                if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                    && Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            answer => return answer,
        }
    }
}

/// Sets up a freshly opened connection to the file at `path`: the busy timeout, WAL mode
/// (when `wal`; an in-memory database has no WAL), and the schema of
/// [`SQLITE_SCHEMA_VERSION`], created or migrated inside one `BEGIN IMMEDIATE` transaction.
/// That transaction holds the write lock from the version read to the commit, so processes
/// that open one file at the same moment create or migrate it once; a failure rolls the
/// whole set-up back.
pub(super) fn set_up(conn: &mut Connection, path: &Path, wal: bool) -> Result<(), SqliteOpenError> {
    let setup = |e: rusqlite::Error| match e.sqlite_error_code() {
        Some(ErrorCode::NotADatabase | ErrorCode::CannotOpen) => SqliteOpenError::Open {
            path: path.to_path_buf(),
            message: e.to_string(),
        },
        _ => SqliteOpenError::Setup {
            path: path.to_path_buf(),
            message: e.to_string(),
        },
    };
    conn.busy_timeout(BUSY_TIMEOUT).map_err(setup)?;
    if wal {
        let mode = switch_to_wal(conn).map_err(setup)?;
        if !mode.eq_ignore_ascii_case("wal") {
            return Err(SqliteOpenError::Setup {
                path: path.to_path_buf(),
                message: format!("the file cannot use WAL mode (journal mode {mode})"),
            });
        }
    }
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(setup)?;
    tx.execute_batch(META).map_err(setup)?;
    let found: Option<i64> = tx
        .query_row(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .optional()
        .map_err(setup)?;
    let from = match found {
        None => {
            tx.execute_batch(SCHEMA_V1).map_err(setup)?;
            1
        }
        Some(version @ 1..=SQLITE_SCHEMA_VERSION) => version,
        Some(found) => {
            return Err(SqliteOpenError::UnsupportedSchema {
                path: path.to_path_buf(),
                found,
                supported: SQLITE_SCHEMA_VERSION,
            })
        }
    };
    if found != Some(SQLITE_SCHEMA_VERSION) {
        migrate(&tx, from).map_err(setup)?;
    }
    tx.commit().map_err(setup)
}

/// Runs the migrations from version `from` to [`SQLITE_SCHEMA_VERSION`] and records the
/// version, inside the caller's transaction.
fn migrate(tx: &Transaction<'_>, from: i64) -> rusqlite::Result<()> {
    for migration in MIGRATIONS.iter().skip((from - 1) as usize) {
        tx.execute_batch(migration)?;
    }
    tx.execute(
        "INSERT INTO idem_meta (name, value) VALUES ('schema_version', ?1)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        [SQLITE_SCHEMA_VERSION],
    )?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use rusqlite::Connection;

    use super::{set_up, META, MIGRATIONS, SCHEMA_V1, SQLITE_SCHEMA_VERSION};
    use crate::store::sqlite::SqliteOpenError;

    /// The idem tables and indexes of `conn`, as SQLite keeps their definitions.
    fn idem_schema(conn: &Connection) -> Vec<(String, String)> {
        let mut statement = conn
            .prepare("SELECT name, sql FROM sqlite_master WHERE name LIKE 'idem%' ORDER BY name")
            .unwrap();
        let rows = statement
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap();
        rows.collect::<Result<_, _>>().unwrap()
    }

    fn version(conn: &Connection) -> i64 {
        conn.query_row(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .unwrap()
    }

    /// A database as a build of version 1 left it.
    fn version_1() -> Connection {
        let conn = Connection::open_in_memory().unwrap();
        conn.execute_batch(META).unwrap();
        conn.execute_batch(SCHEMA_V1).unwrap();
        conn.execute(
            "INSERT INTO idem_meta (name, value) VALUES ('schema_version', 1)",
            [],
        )
        .unwrap();
        conn
    }

    /// A database as a build of version 2 left it.
    fn version_2() -> Connection {
        let conn = version_1();
        conn.execute_batch(MIGRATIONS[0]).unwrap();
        conn.execute(
            "UPDATE idem_meta SET value = 2 WHERE name = 'schema_version'",
            [],
        )
        .unwrap();
        conn
    }

    // pins S11, P4: a new file and files migrated from versions 1 and 2 end with one and the
    // same schema (the label columns and the listing indexes included), and setting up a
    // current file again changes nothing
    #[test]
    fn new_and_migrated_files_have_one_schema() {
        let path = Path::new(":memory:");
        let mut new = Connection::open_in_memory().unwrap();
        set_up(&mut new, path, false).unwrap();
        assert_eq!(version(&new), SQLITE_SCHEMA_VERSION);
        let schema = idem_schema(&new);
        let table = &schema
            .iter()
            .find(|(name, _)| name == "idem_records")
            .unwrap()
            .1;
        for column in ["unknown_since", "tool", "namespace", "scope", "key_args"] {
            assert!(table.contains(column), "{column}: {table}");
        }
        for index in [
            "idem_records_created_at",
            "idem_records_tool",
            "idem_records_scope",
        ] {
            assert!(schema.iter().any(|(name, _)| name == index), "{index}");
        }
        for (from, mut migrated) in [(1, version_1()), (2, version_2())] {
            assert_eq!(version(&migrated), from);
            set_up(&mut migrated, path, false).unwrap();
            assert_eq!(version(&migrated), SQLITE_SCHEMA_VERSION);
            assert_eq!(idem_schema(&migrated), schema, "from version {from}");
        }
        set_up(&mut new, path, false).unwrap();
        assert_eq!(idem_schema(&new), schema);
    }

    // pins S10: versions no build wrote are refused and left as they are
    #[test]
    fn unknown_versions_are_refused() {
        for found in [0, -1, SQLITE_SCHEMA_VERSION + 1] {
            let mut conn = version_1();
            conn.execute(
                "UPDATE idem_meta SET value = ?1 WHERE name = 'schema_version'",
                [found],
            )
            .unwrap();
            let before = idem_schema(&conn);
            match set_up(&mut conn, Path::new(":memory:"), false) {
                Err(SqliteOpenError::UnsupportedSchema {
                    found: f,
                    supported: SQLITE_SCHEMA_VERSION,
                    ..
                }) => assert_eq!(f, found),
                other => panic!("version {found}: {other:?}"),
            }
            assert_eq!(idem_schema(&conn), before);
            assert_eq!(version(&conn), found);
        }
    }
}
