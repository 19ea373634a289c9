//! Setting up a file: the busy timeout, WAL mode, and the idem schema, created on first
//! use and migrated in place from older versions (see the module documentation).

use std::path::Path;
use std::time::{Duration, Instant};

use rusqlite::{Connection, ErrorCode, OptionalExtension, Transaction, TransactionBehavior};

use super::{SqliteOpenError, BACKEND};
use crate::store::{StoreError, StoreErrorKind};

/// The schema version this build writes, and the newest it reads; files of older versions
/// are migrated to it when opened (see the module documentation).
pub const SQLITE_SCHEMA_VERSION: i64 = 5;

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

/// Version 4's records table (U6, U7, S8), built under a temporary name by the 3 → 4
/// migration and then renamed: the columns of version 3 in their order, then `source`,
/// `decided_at` and the three history columns, and a table `CHECK` that admits the
/// not-applied state (no owner and no outcome), which version 1's forbids. SQLite cannot
/// change a table's `CHECK` in place, so the table is rebuilt.
const RECORDS_V4: &str = "
CREATE TABLE idem_records_v4 (
    key             TEXT PRIMARY KEY NOT NULL,
    fingerprint     TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    owner           TEXT,
    lease_until     INTEGER,
    outcome         TEXT,
    completed_at    INTEGER,
    fence           INTEGER NOT NULL DEFAULT 1 CHECK (fence >= 1),
    unknown_since   INTEGER,
    tool            TEXT,
    namespace       TEXT,
    scope           TEXT,
    key_args        TEXT,
    source          TEXT,
    decided_at      INTEGER,
    history         TEXT,
    history_len     INTEGER NOT NULL DEFAULT 0 CHECK (history_len >= 0),
    history_dropped INTEGER NOT NULL DEFAULT 0 CHECK (history_dropped >= 0),
    CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
            AND outcome IS NULL AND completed_at IS NULL
            AND source IS NULL AND decided_at IS NULL)
        OR (owner IS NULL AND lease_until IS NULL AND unknown_since IS NULL
            AND outcome IS NOT NULL AND completed_at IS NOT NULL
            AND decided_at IS NULL)
        OR (owner IS NULL AND lease_until IS NULL AND unknown_since IS NULL
            AND outcome IS NULL AND completed_at IS NULL
            AND source IS NULL AND decided_at IS NOT NULL))
);
";

/// Version 5's records table (A2, A3), built under a temporary name by the 4 → 5
/// migration and then renamed: the columns of version 4 in their order, then
/// `approval_at` and `approval_until`, and a table `CHECK` that also admits the two
/// approval states (no owner, no outcome, no decision, `approval_at` set), which version
/// 4's forbids; every other state requires both approval columns `NULL`. SQLite cannot
/// change a table's `CHECK` in place, so the table is rebuilt (adding the two columns
/// alone would leave version 4's `CHECK` refusing every approval).
const RECORDS_V5: &str = "
CREATE TABLE idem_records_v5 (
    key             TEXT PRIMARY KEY NOT NULL,
    fingerprint     TEXT NOT NULL,
    created_at      INTEGER NOT NULL,
    expires_at      INTEGER NOT NULL,
    owner           TEXT,
    lease_until     INTEGER,
    outcome         TEXT,
    completed_at    INTEGER,
    fence           INTEGER NOT NULL DEFAULT 1 CHECK (fence >= 1),
    unknown_since   INTEGER,
    tool            TEXT,
    namespace       TEXT,
    scope           TEXT,
    key_args        TEXT,
    source          TEXT,
    decided_at      INTEGER,
    history         TEXT,
    history_len     INTEGER NOT NULL DEFAULT 0 CHECK (history_len >= 0),
    history_dropped INTEGER NOT NULL DEFAULT 0 CHECK (history_dropped >= 0),
    approval_at     INTEGER,
    approval_until  INTEGER,
    CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
            AND outcome IS NULL AND completed_at IS NULL
            AND source IS NULL AND decided_at IS NULL
            AND approval_at IS NULL AND approval_until IS NULL)
        OR (owner IS NULL AND lease_until IS NULL AND unknown_since IS NULL
            AND outcome IS NOT NULL AND completed_at IS NOT NULL
            AND decided_at IS NULL AND approval_at IS NULL AND approval_until IS NULL)
        OR (owner IS NULL AND lease_until IS NULL AND unknown_since IS NULL
            AND outcome IS NULL AND completed_at IS NULL
            AND source IS NULL AND decided_at IS NOT NULL
            AND approval_at IS NULL AND approval_until IS NULL)
        OR (owner IS NULL AND lease_until IS NULL AND unknown_since IS NULL
            AND outcome IS NULL AND completed_at IS NULL
            AND source IS NULL AND decided_at IS NULL
            AND approval_at IS NOT NULL))
);
";

/// The columns of version 3, which the 3 → 4 migration copies row by row.
const COLUMNS_V3: &str = "key, fingerprint, created_at, expires_at, owner, lease_until, outcome, \
     completed_at, fence, unknown_since, tool, namespace, scope, key_args";

/// The columns of version 4, which the 4 → 5 migration copies row by row.
const COLUMNS_V4: &str = "key, fingerprint, created_at, expires_at, owner, lease_until, outcome, \
     completed_at, fence, unknown_since, tool, namespace, scope, key_args, source, decided_at, \
     history, history_len, history_dropped";

/// The indexes of versions 4 and 5, created on each rebuilt table. Garbage collection
/// deletes only completed rows (G1), so the expiry index holds only those: rows that are
/// not completed never expire (S8) and would otherwise pile up at the front of the index
/// it scans.
const INDEXES: &str = "
CREATE INDEX idem_records_expires_at ON idem_records (expires_at) WHERE outcome IS NOT NULL;
CREATE INDEX idem_records_created_at ON idem_records (created_at, key);
CREATE INDEX idem_records_tool ON idem_records (tool, created_at, key);
CREATE INDEX idem_records_scope ON idem_records (scope);
";

/// The names of [`INDEXES`]: every other index or trigger on the records table is
/// someone else's, which a rebuild re-creates as it was.
const OWN_INDEXES: [&str; 4] = [
    "idem_records_expires_at",
    "idem_records_created_at",
    "idem_records_tool",
    "idem_records_scope",
];

/// One migration step, inside the set-up transaction.
type Migration = fn(&Transaction<'_>) -> rusqlite::Result<()>;

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
///
/// 3 → 4 (the not-applied state and the outcome's source U6, the history U7, S8, G1): the
/// table is rebuilt ([`rebuild`] into [`RECORDS_V4`]), since its `CHECK` must change.
///
/// 4 → 5 (the approval states A2, A3): the table is rebuilt again ([`rebuild`] into
/// [`RECORDS_V5`]) with the two columns `approval_at` and `approval_until`, `NULL` in every
/// copied row, since the `CHECK` must admit the approval states. Every record keeps its
/// state, fence, label, source and history.
const MIGRATIONS: [Migration; (SQLITE_SCHEMA_VERSION - 1) as usize] = [
    |tx| tx.execute_batch(V1_TO_V2),
    |tx| tx.execute_batch(V2_TO_V3),
    |tx| rebuild(tx, RECORDS_V4, "idem_records_v4", COLUMNS_V3),
    |tx| rebuild(tx, RECORDS_V5, "idem_records_v5", COLUMNS_V4),
];

/// The 1 → 2 step (see [`MIGRATIONS`]).
const V1_TO_V2: &str = "
ALTER TABLE idem_records
    ADD COLUMN fence INTEGER NOT NULL DEFAULT 1 CHECK (fence >= 1);
ALTER TABLE idem_records
    ADD COLUMN unknown_since INTEGER CHECK (unknown_since IS NULL OR outcome IS NULL);
";

/// The 2 → 3 step (see [`MIGRATIONS`]).
const V2_TO_V3: &str = "
ALTER TABLE idem_records ADD COLUMN tool TEXT;
ALTER TABLE idem_records ADD COLUMN namespace TEXT;
ALTER TABLE idem_records ADD COLUMN scope TEXT;
ALTER TABLE idem_records ADD COLUMN key_args TEXT;
CREATE INDEX IF NOT EXISTS idem_records_created_at ON idem_records (created_at, key);
CREATE INDEX IF NOT EXISTS idem_records_tool ON idem_records (tool, created_at, key);
CREATE INDEX IF NOT EXISTS idem_records_scope ON idem_records (scope);
";

/// The 3 → 4 and 4 → 5 steps, SQLite's documented way of changing a table's constraints
/// (<https://www.sqlite.org/lang_altertable.html#otheralter>), inside the caller's
/// transaction: note the indexes and triggers on `idem_records` that are not idem's own;
/// create the new table by `create` as `temp`; copy every row (`INSERT … SELECT` of
/// `columns`, the old version's: each keeps its state, fence, label and, from version 4 on,
/// its source and history; the new columns get their defaults: no source, which reads as
/// executed, an empty history, no approval); drop the old table (and with it its indexes
/// and triggers); rename the new one (with `legacy_alter_table` on, so that a view of
/// someone else's that names `idem_records` is neither rewritten nor checked, and names
/// the new table afterwards); create [`INDEXES`]; re-create the noted indexes and
/// triggers. A row the new `CHECK` refuses (only a row that broke the old one) fails the
/// copy, and with it the whole set-up: the file is left as it was. Reads and writes every
/// row once, holding the file's write lock.
fn rebuild(tx: &Transaction<'_>, create: &str, temp: &str, columns: &str) -> rusqlite::Result<()> {
    let foreign: Vec<String> = {
        let mut statement = tx.prepare(
            "SELECT name, sql FROM sqlite_master
             WHERE tbl_name = 'idem_records' AND type IN ('index', 'trigger') AND sql IS NOT NULL",
        )?;
        let rows = statement.query_map([], |row| {
            Ok((row.get::<_, String>(0)?, row.get::<_, String>(1)?))
        })?;
        let mut foreign = Vec::new();
        for row in rows {
            let (name, sql) = row?;
            if !OWN_INDEXES.contains(&name.as_str()) {
                foreign.push(sql);
            }
        }
        foreign
    };
    tx.execute_batch(create)?;
    tx.execute_batch(&format!(
        "INSERT INTO {temp} ({columns}) SELECT {columns} FROM idem_records;
         DROP TABLE idem_records;
         PRAGMA legacy_alter_table = ON;
         ALTER TABLE {temp} RENAME TO idem_records;
         PRAGMA legacy_alter_table = OFF;"
    ))?;
    tx.execute_batch(INDEXES)?;
    for sql in foreign {
        tx.execute_batch(&sql)?;
    }
    Ok(())
}

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
        migration(tx)?;
    }
    tx.execute(
        "INSERT INTO idem_meta (name, value) VALUES ('schema_version', ?1)
         ON CONFLICT (name) DO UPDATE SET value = excluded.value",
        [SQLITE_SCHEMA_VERSION],
    )?;
    Ok(())
}

/// For [`StoreLocator::open_existing`](crate::store::StoreLocator::open_existing): that the file at
/// `path` exists and holds idem's tables at this build's schema version (or a newer one,
/// which opening refuses), checked through a read-only connection that changes nothing: a
/// file without them is not made an idem store, and an older one is not upgraded.
pub(crate) fn check_existing(path: &Path) -> Result<(), StoreError> {
    let unusable = |what: String| {
        StoreError::new(
            BACKEND,
            StoreErrorKind::Unsupported,
            format!("{} {what}", path.display()),
        )
    };
    if !path.exists() {
        return Err(unusable(
            "does not exist, and idem does not create it when inspecting".to_owned(),
        ));
    }
    let conn = Connection::open_with_flags(path, rusqlite::OpenFlags::SQLITE_OPEN_READ_ONLY)
        .map_err(|e| unusable(format!("cannot be opened: {e}")))?;
    let tables: i64 = conn
        .query_row(
            "SELECT count(*) FROM sqlite_master WHERE type = 'table' \
             AND name IN ('idem_meta', 'idem_records')",
            [],
            |row| row.get(0),
        )
        .map_err(|e| unusable(format!("cannot be read as an SQLite database: {e}")))?;
    if tables != 2 {
        return Err(unusable(
            "holds no idem store (no idem_meta and idem_records tables); nothing was created"
                .to_owned(),
        ));
    }
    let version: Option<i64> = conn
        .query_row(
            "SELECT value FROM idem_meta WHERE name = 'schema_version'",
            [],
            |row| row.get(0),
        )
        .ok();
    match version {
        Some(version) if version < SQLITE_SCHEMA_VERSION => Err(unusable(format!(
            "holds an idem store of schema version {version}, older than this build's \
             {SQLITE_SCHEMA_VERSION}: it is not upgraded when inspecting; run an agent of \
             this build once to upgrade it in place"
        ))),
        // The current version, or a newer one (which opening reports, S11).
        _ => Ok(()),
    }
}

#[cfg(test)]
mod tests;
