//! The SQLite store: one file, survives restarts, shared by processes on one machine.
//!
//! Enabled by the `sqlite` cargo feature. Built on [`rusqlite`] 0.32 with its `bundled`
//! feature, which links `libsqlite3-sys` 0.30: the version sqlx 0.8 links, so this store
//! and sqlx's SQLite driver can sit in one build (cargo allows one `libsqlite3-sys`).
//!
//! # Schema (version 1)
//!
//! Created on first use, inside one `BEGIN IMMEDIATE` transaction, next to any tables the
//! file already holds (every name starts with `idem_`):
//!
//! ```sql
//! CREATE TABLE idem_meta (
//!     name  TEXT PRIMARY KEY NOT NULL,  -- 'schema_version'
//!     value INTEGER NOT NULL            -- 1
//! );
//! CREATE TABLE idem_records (
//!     key          TEXT PRIMARY KEY NOT NULL, -- the idempotency key (64 hex digits)
//!     fingerprint  TEXT NOT NULL,             -- 64 hex digits (S9)
//!     created_at   INTEGER NOT NULL,          -- ms since the Unix epoch
//!     expires_at   INTEGER NOT NULL,          -- ms; live while now < expires_at (S8)
//!     owner        TEXT,                      -- in progress: owner token, 32 hex digits
//!     lease_until  INTEGER,                   -- in progress: lease deadline, ms (S6)
//!     outcome      TEXT,                      -- completed: the envelope JSON, verbatim (S11)
//!     completed_at INTEGER,                   -- completed: ms
//!     CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
//!             AND outcome IS NULL AND completed_at IS NULL)
//!         OR (owner IS NULL AND lease_until IS NULL
//!             AND outcome IS NOT NULL AND completed_at IS NOT NULL))
//! );
//! CREATE INDEX idem_records_expires_at ON idem_records (expires_at);
//! ```
//!
//! A row is in progress when `owner` is set and completed when `outcome` is set. Times are
//! whole milliseconds since the Unix epoch, the unit of [`Timestamp`]; an instant at or
//! past `i64::MAX` ms (year 292 million, reached only by a saturated `now + ttl`) is
//! stored as `i64::MAX`, so such a record never expires for any `now` before that year
//! (instants at or past it compare equal). Keys, fingerprints and outcomes are bound
//! as parameters, never spliced into SQL.
//!
//! # Operations (S2, S6, S8)
//!
//! - claim: one `BEGIN IMMEDIATE` transaction runs
//!   `INSERT … ON CONFLICT(key) DO UPDATE … WHERE idem_records.expires_at <= now` (insert
//!   if absent or expired) and, when nothing was written, reads the live row.
//! - take over, complete, release: one compare-and-set statement each,
//!   `UPDATE/DELETE … WHERE key = ? AND owner = ? …`.
//! - expiry is compared with the `now` the engine passes in, never SQLite's clock; rows
//!   are deleted only once expired: every 1024 claims of a store at most 256 rows that
//!   expired more than [`GC_DRIFT_MARGIN_MS`](super::GC_DRIFT_MARGIN_MS) (one hour) before
//!   the claim's `now` (room for clock drift between callers), or by
//!   [`SqliteStore::collect_garbage`] all that expired at the `now` it is given.
//!
//! # Concurrency
//!
//! The file is opened in WAL mode with a 5 s busy timeout, so several stores (in one
//! process or in several) can share it: writes are serialised by SQLite's write lock, and
//! a writer waits for it up to the busy timeout before failing with
//! [`StoreErrorKind::Unavailable`]. Within one `SqliteStore` the single connection is
//! behind a mutex. `synchronous` stays at SQLite's default (`FULL`), so a saved outcome
//! survives a power loss once [`Store::complete`] returned.
//!
//! # Blocking
//!
//! SQLite calls block the calling thread. Inside a tokio runtime each operation runs on
//! the runtime's blocking pool (`tokio::task::spawn_blocking`), so an executor thread is
//! never blocked by a busy file; outside any tokio runtime the operation runs inline and
//! the returned future is ready at once, so sync tools (`run_blocking`) need no runtime.
//! If a caller drops a claim or takeover future while its statement is still running on
//! the blocking pool, and the statement then acquires the claim, the store releases it at
//! once on the runtime (S7) rather than leaving it in progress until its lease lapses.
//! [`Store::release_on_drop`] (a `Drop` cannot await) hands its one short statement to
//! the blocking pool inside a runtime, so dropping a call never blocks an executor thread
//! while another connection holds the write lock, and runs it inline outside one. [`Store::watch`] returns `None`: another process's change cannot be
//! signalled, so waiting duplicates poll with backoff (S5).

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use rusqlite::{params, Connection, ErrorCode, OptionalExtension, TransactionBehavior};

use super::in_flight::{self, Undo};
use super::{
    gc_cutoff, Claim, ClaimRequest, Completion, OwnerToken, Record, RecordState, Store, StoreError,
    StoreErrorKind, StoreFuture, TakeoverRequest,
};
use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::{Fingerprint, IdempotencyKey};

/// The schema version this build writes and reads (see the module documentation).
pub const SQLITE_SCHEMA_VERSION: i64 = 1;

/// How long a statement waits for another connection's write lock before failing.
const BUSY_TIMEOUT: Duration = Duration::from_secs(5);

/// How many claims of one store between two garbage collections.
const COLLECT_EVERY: u64 = 1024;

/// How many expired rows one garbage collection during a claim deletes at most.
const COLLECT_BATCH: i64 = 256;

const BACKEND: &str = "sqlite";

const SCHEMA: &str = "
CREATE TABLE IF NOT EXISTS idem_records (
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
CREATE INDEX IF NOT EXISTS idem_records_expires_at ON idem_records (expires_at);
";

const CLAIM: &str = "
INSERT INTO idem_records (key, fingerprint, created_at, expires_at, owner, lease_until)
VALUES (?1, ?2, ?3, ?4, ?5, ?6)
ON CONFLICT (key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    created_at = excluded.created_at,
    expires_at = excluded.expires_at,
    owner = excluded.owner,
    lease_until = excluded.lease_until,
    outcome = NULL,
    completed_at = NULL
WHERE idem_records.expires_at <= ?3
";

const READ_LIVE: &str = "
SELECT fingerprint, created_at, expires_at, owner, lease_until, outcome, completed_at
FROM idem_records WHERE key = ?1 AND expires_at > ?2
";

const TAKE_OVER: &str = "
UPDATE idem_records SET owner = ?1, lease_until = ?2, created_at = ?3, expires_at = ?4
WHERE key = ?5 AND owner = ?6 AND lease_until = ?7 AND expires_at > ?3
";

const COMPLETE: &str = "
UPDATE idem_records SET owner = NULL, lease_until = NULL, outcome = ?1, completed_at = ?2
WHERE key = ?3 AND owner = ?4 AND expires_at > ?2
";

const RELEASE: &str = "DELETE FROM idem_records WHERE key = ?1 AND owner = ?2";

const COLLECT_SOME: &str = "
DELETE FROM idem_records WHERE key IN
    (SELECT key FROM idem_records WHERE expires_at <= ?1 LIMIT ?2)
";

const COLLECT_ALL: &str = "DELETE FROM idem_records WHERE expires_at <= ?1";

/// Why [`SqliteStore::open`] or [`SqliteStore::open_in_memory`] failed. Each variant
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
    /// The file opened, but setting WAL mode or creating the schema failed (for example
    /// the file is read-only, or another process held the write lock past the busy
    /// timeout).
    #[error("cannot set up the SQLite store at {path}: {message}")]
    Setup {
        /// The file.
        path: PathBuf,
        /// SQLite's message.
        message: String,
    },
    /// The file holds an idem schema of another version than this build's
    /// [`SQLITE_SCHEMA_VERSION`] (written by a newer build): it is left untouched.
    #[error(
        "the SQLite store at {path} has idem schema version {found}; this build reads version {supported}"
    )]
    UnsupportedSchema {
        /// The file.
        path: PathBuf,
        /// The version found in `idem_meta`.
        found: i64,
        /// The version this build reads.
        supported: i64,
    },
}

impl From<SqliteOpenError> for StoreError {
    /// A schema of another version is [`StoreErrorKind::Unsupported`]; every other open
    /// failure is [`StoreErrorKind::Unavailable`].
    fn from(error: SqliteOpenError) -> Self {
        let kind = match error {
            SqliteOpenError::UnsupportedSchema { .. } => StoreErrorKind::Unsupported,
            _ => StoreErrorKind::Unavailable,
        };
        StoreError::new(BACKEND, kind, error.to_string())
    }
}

/// A [`Store`] in one SQLite file (or an in-memory database), for one machine: records
/// survive restarts, and every process that opens the same file shares them (S2 across
/// processes). See the [module documentation](self) for the schema, the statements and
/// how blocking calls are kept off async executor threads.
///
/// Cheap to clone: clones share one connection.
///
/// ```
/// # extern crate idem_runtime as idem;
/// use idem::{Engine, SqliteStore, SystemClock};
/// // `SqliteStore::open("agent.sqlite3")` for a file that survives restarts.
/// let store = SqliteStore::open_in_memory()?;
/// let engine = Engine::new(store, SystemClock);
/// assert_eq!(engine.store().backend(), "sqlite");
/// # Ok::<(), idem::SqliteOpenError>(())
/// ```
#[derive(Clone)]
pub struct SqliteStore {
    inner: Arc<Inner>,
}

struct Inner {
    conn: Mutex<Connection>,
    path: PathBuf,
    claims: AtomicU64,
    /// Transactions and statements run against the file ([`Store::round_trips`]).
    round_trips: AtomicU64,
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
    let deadline = std::time::Instant::now() + BUSY_TIMEOUT;
    let mut pause = Duration::from_millis(1);
    loop {
        match conn.query_row("PRAGMA journal_mode = WAL", [], |row| row.get(0)) {
            Err(e)
                if e.sqlite_error_code() == Some(ErrorCode::DatabaseBusy)
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(pause);
                pause = (pause * 2).min(Duration::from_millis(50));
            }
            answer => return answer,
        }
    }
}

impl SqliteStore {
    /// Opens (creating it if absent) the store in the file at `path`: WAL mode, a 5 s busy
    /// timeout, and the schema created on first use.
    ///
    /// # Errors
    /// [`SqliteOpenError::Open`] when the file cannot be opened or created,
    /// [`SqliteOpenError::Setup`] when WAL mode or the schema cannot be set up,
    /// [`SqliteOpenError::UnsupportedSchema`] when the file holds another schema version.
    pub fn open(path: impl AsRef<Path>) -> Result<Self, SqliteOpenError> {
        let path = path.as_ref().to_path_buf();
        let conn = Connection::open(&path).map_err(|e| SqliteOpenError::Open {
            path: path.clone(),
            message: e.to_string(),
        })?;
        Self::set_up(conn, path, true)
    }

    /// A store in a private in-memory database, forgotten when the store is dropped: for
    /// tests. Its path is reported as `:memory:`.
    ///
    /// # Errors
    /// As [`open`](Self::open).
    pub fn open_in_memory() -> Result<Self, SqliteOpenError> {
        let path = PathBuf::from(":memory:");
        let conn = Connection::open_in_memory().map_err(|e| SqliteOpenError::Open {
            path: path.clone(),
            message: e.to_string(),
        })?;
        Self::set_up(conn, path, false)
    }

    fn set_up(mut conn: Connection, path: PathBuf, wal: bool) -> Result<Self, SqliteOpenError> {
        let setup = |e: rusqlite::Error| match e.sqlite_error_code() {
            Some(ErrorCode::NotADatabase | ErrorCode::CannotOpen) => SqliteOpenError::Open {
                path: path.clone(),
                message: e.to_string(),
            },
            _ => SqliteOpenError::Setup {
                path: path.clone(),
                message: e.to_string(),
            },
        };
        conn.busy_timeout(BUSY_TIMEOUT).map_err(setup)?;
        if wal {
            let mode = switch_to_wal(&conn).map_err(setup)?;
            if !mode.eq_ignore_ascii_case("wal") {
                return Err(SqliteOpenError::Setup {
                    path,
                    message: format!("the file cannot use WAL mode (journal mode {mode})"),
                });
            }
        }
        let tx = conn
            .transaction_with_behavior(TransactionBehavior::Immediate)
            .map_err(setup)?;
        tx.execute_batch(
            "CREATE TABLE IF NOT EXISTS idem_meta (name TEXT PRIMARY KEY NOT NULL, value INTEGER NOT NULL);",
        )
        .map_err(setup)?;
        let found: Option<i64> = tx
            .query_row(
                "SELECT value FROM idem_meta WHERE name = 'schema_version'",
                [],
                |row| row.get(0),
            )
            .optional()
            .map_err(setup)?;
        match found {
            None => {
                tx.execute_batch(SCHEMA).map_err(setup)?;
                tx.execute(
                    "INSERT INTO idem_meta (name, value) VALUES ('schema_version', ?1)",
                    [SQLITE_SCHEMA_VERSION],
                )
                .map_err(setup)?;
            }
            Some(SQLITE_SCHEMA_VERSION) => {}
            Some(found) => {
                return Err(SqliteOpenError::UnsupportedSchema {
                    path,
                    found,
                    supported: SQLITE_SCHEMA_VERSION,
                })
            }
        }
        tx.commit().map_err(setup)?;
        Ok(SqliteStore {
            inner: Arc::new(Inner {
                conn: Mutex::new(conn),
                path,
                claims: AtomicU64::new(0),
                round_trips: AtomicU64::new(0),
            }),
        })
    }

    /// The file this store opened (`:memory:` for an in-memory database).
    pub fn path(&self) -> &Path {
        &self.inner.path
    }

    /// Deletes every record that is expired at `now` (ms since the Unix epoch; S8: live
    /// records are never deleted) and returns how many. No drift margin is applied: `now`
    /// is trusted, so pass a time no later than every caller's clock (for example
    /// `now − GC_DRIFT_MARGIN_MS`) when callers' clocks may differ. Runs inline: call it
    /// from a blocking context.
    ///
    /// # Errors
    /// [`StoreError`] when the statement fails (for example the write lock stayed busy
    /// past the busy timeout).
    pub fn collect_garbage(&self, now: Timestamp) -> Result<usize, StoreError> {
        self.inner.with(|conn, path| {
            conn.execute(COLLECT_ALL, [to_sql(now)])
                .map_err(|e| db_error(path, "collect garbage", e))
        })
    }

    /// Runs `op` on the connection: on the tokio blocking pool inside a tokio runtime,
    /// inline otherwise (see the module documentation).
    ///
    /// `undo` is for operations that may acquire a claim (claim, take over): if the caller
    /// drops the future while `op` is still running on the blocking pool, and `op` then
    /// reports (by `undo.acquired`) that it acquired the claim of `undo.key`, the claim is released
    /// at once instead of staying in progress until its lease lapses (S7).
    fn run<T, F>(&self, op: F, undo: Option<Undo<T>>) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(&mut Connection, &Path) -> Result<T, StoreError> + Send + 'static,
    {
        let inner = Arc::clone(&self.inner);
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Box::pin(std::future::ready(inner.with(op)));
        };
        let task = runtime.spawn_blocking(move || inner.with(op));
        in_flight::awaited(
            task,
            runtime,
            Arc::new(self.clone()),
            undo,
            BACKEND,
            "a SQLite call",
        )
    }

    fn release_inline(&self, key: &IdempotencyKey, owner: OwnerToken) -> Result<bool, StoreError> {
        let key = key.as_str();
        self.inner.with(|conn, path| {
            conn.execute(RELEASE, params![key, owner_to_sql(owner)])
                .map(|deleted| deleted == 1)
                .map_err(|e| db_error(path, "release", e))
        })
    }
}

impl Inner {
    fn with<T>(
        &self,
        op: impl FnOnce(&mut Connection, &Path) -> Result<T, StoreError>,
    ) -> Result<T, StoreError> {
        // A panic while the lock was held cannot leave a half-applied change: every write
        // is one statement or one transaction, which SQLite rolls back if not committed.
        let mut conn = self.conn.lock().unwrap_or_else(PoisonError::into_inner);
        // Every `op` is one transaction or one statement: one round trip.
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        op(&mut conn, &self.path)
    }
}

impl fmt::Debug for SqliteStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("SqliteStore")
            .field("path", &self.inner.path)
            .finish()
    }
}

/// A timestamp as an SQLite integer (ms), saturating at `i64::MAX`.
fn to_sql(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

fn owner_to_sql(owner: OwnerToken) -> String {
    owner.to_hex()
}

fn db_error(path: &Path, op: &str, e: rusqlite::Error) -> StoreError {
    let kind = match e.sqlite_error_code() {
        Some(ErrorCode::DatabaseCorrupt | ErrorCode::NotADatabase) => StoreErrorKind::Corrupt,
        _ => StoreErrorKind::Unavailable,
    };
    StoreError::new(BACKEND, kind, format!("{op} on {}: {e}", path.display()))
}

fn corrupt(path: &Path, key: &str, what: &str) -> StoreError {
    StoreError::new(
        BACKEND,
        StoreErrorKind::Corrupt,
        format!("record {key} in {}: {what}", path.display()),
    )
}

/// The columns of [`READ_LIVE`], as stored.
type RawRow = (
    String,
    i64,
    i64,
    Option<String>,
    Option<i64>,
    Option<String>,
    Option<i64>,
);

fn read_live(
    conn: &Connection,
    path: &Path,
    key: &str,
    now: Timestamp,
) -> Result<Option<Record>, StoreError> {
    let raw: Option<RawRow> = conn
        .query_row(READ_LIVE, params![key, to_sql(now)], |row| {
            Ok((
                row.get(0)?,
                row.get(1)?,
                row.get(2)?,
                row.get(3)?,
                row.get(4)?,
                row.get(5)?,
                row.get(6)?,
            ))
        })
        .optional()
        .map_err(|e| db_error(path, "read", e))?;
    raw.map(|raw| decode(path, key, raw)).transpose()
}

fn decode(path: &Path, key: &str, raw: RawRow) -> Result<Record, StoreError> {
    let (fingerprint, created_at, expires_at, owner, lease_until, outcome, completed_at) = raw;
    let time = |value: i64, column: &str| {
        u64::try_from(value)
            .map(Timestamp::from_millis)
            .map_err(|_| corrupt(path, key, &format!("negative {column} {value}")))
    };
    let fingerprint = Fingerprint::from_hex(&fingerprint)
        .ok_or_else(|| corrupt(path, key, "fingerprint is not 64 lowercase hex digits"))?;
    let state = match (owner, lease_until, outcome, completed_at) {
        (Some(owner), Some(lease_until), None, None) => {
            let owner = OwnerToken::from_hex(&owner)
                .ok_or_else(|| corrupt(path, key, "owner is not 32 lower-case hex digits"))?;
            RecordState::InProgress {
                owner,
                lease_until: time(lease_until, "lease_until")?,
            }
        }
        (None, None, Some(outcome), Some(completed_at)) => RecordState::Completed {
            outcome: Envelope::from_stored(outcome),
            completed_at: time(completed_at, "completed_at")?,
        },
        _ => return Err(corrupt(path, key, "neither in progress nor completed")),
    };
    Ok(Record {
        fingerprint,
        created_at: time(created_at, "created_at")?,
        expires_at: time(expires_at, "expires_at")?,
        state,
    })
}

impl Store for SqliteStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        let key = req.key.as_str().to_owned();
        let fingerprint = req.fingerprint.as_str().to_owned();
        let (owner, now) = (owner_to_sql(req.owner), req.now);
        let (lease_until, expires_at) = (to_sql(req.lease_until), to_sql(req.expires_at));
        let collect =
            self.inner.claims.fetch_add(1, Ordering::Relaxed) % COLLECT_EVERY == COLLECT_EVERY - 1;
        let undo = Undo {
            key: req.key.clone(),
            owner: req.owner,
            acquired: |claim: &Claim| matches!(claim, Claim::Acquired),
        };
        self.run(
            move |conn, path| {
                let failed = |e| db_error(path, "claim", e);
                let tx = conn
                    .transaction_with_behavior(TransactionBehavior::Immediate)
                    .map_err(failed)?;
                let written = tx
                    .execute(
                        CLAIM,
                        params![
                            key,
                            fingerprint,
                            to_sql(now),
                            expires_at,
                            owner,
                            lease_until
                        ],
                    )
                    .map_err(failed)?;
                let claim = if written == 1 {
                    Claim::Acquired
                } else {
                    let record = read_live(&tx, path, &key, now)?.ok_or_else(|| {
                        corrupt(path, &key, "claim conflicted with a row that is not live")
                    })?;
                    Claim::Existing(record)
                };
                // Only rows that expired more than the drift margin before `now`.
                if let Some(cutoff) = gc_cutoff(now).filter(|_| collect) {
                    tx.execute(COLLECT_SOME, params![to_sql(cutoff), COLLECT_BATCH])
                        .map_err(failed)?;
                }
                tx.commit().map_err(failed)?;
                Ok(claim)
            },
            Some(undo),
        )
    }

    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool> {
        let key = req.key.as_str().to_owned();
        let values = (
            owner_to_sql(req.owner),
            to_sql(req.lease_until),
            to_sql(req.now),
            to_sql(req.expires_at),
            owner_to_sql(req.seen_owner),
            to_sql(req.seen_lease_until),
        );
        let undo = Undo {
            key: req.key.clone(),
            owner: req.owner,
            acquired: |taken: &bool| *taken,
        };
        self.run(
            move |conn, path| {
                let (owner, lease_until, now, expires_at, seen_owner, seen_lease_until) = values;
                conn.execute(
                    TAKE_OVER,
                    params![
                        owner,
                        lease_until,
                        now,
                        expires_at,
                        key,
                        seen_owner,
                        seen_lease_until
                    ],
                )
                .map(|updated| updated == 1)
                .map_err(|e| db_error(path, "take over", e))
            },
            Some(undo),
        )
    }

    fn complete<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        owner: OwnerToken,
        outcome: &'a Envelope,
        now: Timestamp,
    ) -> StoreFuture<'a, Completion> {
        let key = key.as_str().to_owned();
        let outcome = outcome.clone();
        let owner = owner_to_sql(owner);
        self.run(
            move |conn, path| {
                conn.execute(COMPLETE, params![outcome.as_str(), to_sql(now), key, owner])
                    .map(|updated| {
                        if updated == 1 {
                            Completion::Saved
                        } else {
                            Completion::Fenced
                        }
                    })
                    .map_err(|e| db_error(path, "complete", e))
            },
            None,
        )
    }

    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool> {
        let key = key.as_str().to_owned();
        let owner = owner_to_sql(owner);
        self.run(
            move |conn, path| {
                conn.execute(RELEASE, params![key, owner])
                    .map(|deleted| deleted == 1)
                    .map_err(|e| db_error(path, "release", e))
            },
            None,
        )
    }

    fn read<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Record>> {
        let key = key.as_str().to_owned();
        self.run(move |conn, path| read_live(conn, path, &key, now), None)
    }

    /// Inside a tokio runtime the release runs on its blocking pool (the guard's `Drop`
    /// never waits for the write lock on an executor thread); outside one it runs inline.
    fn release_on_drop(&self, key: &IdempotencyKey, owner: OwnerToken) {
        let release = move |store: &SqliteStore, key: &IdempotencyKey| {
            if let Err(error) = store.release_inline(key, owner) {
                tracing::warn!(key = %key, %error, "could not release the claim; it lapses with its lease");
            }
        };
        match tokio::runtime::Handle::try_current() {
            Ok(runtime) => {
                let (store, key) = (self.clone(), key.clone());
                drop(runtime.spawn_blocking(move || release(&store, &key)));
            }
            Err(_) => release(self, key),
        }
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn round_trips(&self) -> Option<u64> {
        Some(self.inner.round_trips.load(Ordering::Relaxed))
    }
}
