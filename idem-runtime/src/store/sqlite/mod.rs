//! The SQLite store: one file, survives restarts, shared by processes on one machine.
//!
//! Enabled by the `sqlite` cargo feature. Built on [`rusqlite`] 0.32 with its `bundled`
//! feature, which links `libsqlite3-sys` 0.30: the version sqlx 0.8 links, so this store
//! and sqlx's SQLite driver can sit in one build (cargo allows one `libsqlite3-sys`).
//!
//! # Schema (version 5)
//!
//! Created on first use, inside one `BEGIN IMMEDIATE` transaction, next to any tables the
//! file already holds (every name starts with `idem_`). The file then holds:
//!
//! ```sql
//! CREATE TABLE idem_meta (
//!     name  TEXT PRIMARY KEY NOT NULL,  -- 'schema_version'
//!     value INTEGER NOT NULL            -- 5
//! );
//! CREATE TABLE "idem_records" (
//!     key             TEXT PRIMARY KEY NOT NULL, -- the idempotency key (64 hex digits)
//!     fingerprint     TEXT NOT NULL,             -- 64 hex digits (S9)
//!     created_at      INTEGER NOT NULL,          -- ms since the Unix epoch
//!     expires_at      INTEGER NOT NULL,          -- ms; a completed row is live while
//!                                                -- now < expires_at (S8)
//!     owner           TEXT,     -- in progress or outcome unknown: owner token, 32 hex digits
//!     lease_until     INTEGER,  -- in progress or outcome unknown: lease deadline, ms (S6, L1)
//!     outcome         TEXT,     -- completed: the envelope JSON, verbatim (S11)
//!     completed_at    INTEGER,  -- completed: ms
//!     fence           INTEGER NOT NULL DEFAULT 1 CHECK (fence >= 1),  -- fencing token (F1)
//!     unknown_since   INTEGER,  -- outcome unknown: when that run claimed the key, ms (U1)
//!     -- the label (P1), written by every claim and takeover; all NULL in a row written
//!     -- before version 3 (P4):
//!     tool            TEXT,     -- the tool's name
//!     namespace       TEXT,     -- the engine's namespace (K11); NULL: none
//!     scope           TEXT,     -- the scope path's text: `kind=value` parts joined by `/`
//!                               -- ('' for global)
//!     key_args        TEXT,     -- audited tools only: the canonical JSON of the key
//!                               -- arguments (P2); NULL otherwise
//!     source          TEXT,     -- completed: 'executed', 'reconciled', 'resolved' (U6) or
//!                               -- 'denied' (A3);
//!                               -- NULL in a row completed before version 4: executed
//!     decided_at      INTEGER,  -- not applied: when a person decided so, ms (U6)
//!     -- the history (U7): NULL / 0 / 0 in a row written before version 4
//!     history         TEXT,     -- the entries' JSON lines joined by '\n', oldest first
//!     history_len     INTEGER NOT NULL DEFAULT 0 CHECK (history_len >= 0),  -- lines held
//!     history_dropped INTEGER NOT NULL DEFAULT 0 CHECK (history_dropped >= 0), -- dropped
//!     -- the approval (A2, A3): NULL in a row written before version 5
//!     approval_at     INTEGER,  -- awaiting approval: since when; approved: when, ms
//!     approval_until  INTEGER,  -- approved: when the approval expires, ms
//!     CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL               -- in progress,
//!             AND outcome IS NULL AND completed_at IS NULL                -- outcome unknown
//!             AND source IS NULL AND decided_at IS NULL
//!             AND approval_at IS NULL AND approval_until IS NULL)
//!         OR (owner IS NULL AND lease_until IS NULL AND unknown_since IS NULL  -- completed
//!             AND outcome IS NOT NULL AND completed_at IS NOT NULL
//!             AND decided_at IS NULL AND approval_at IS NULL AND approval_until IS NULL)
//!         OR (owner IS NULL AND lease_until IS NULL AND unknown_since IS NULL  -- not applied
//!             AND outcome IS NULL AND completed_at IS NULL
//!             AND source IS NULL AND decided_at IS NOT NULL
//!             AND approval_at IS NULL AND approval_until IS NULL)
//!         OR (owner IS NULL AND lease_until IS NULL AND unknown_since IS NULL  -- awaiting
//!             AND outcome IS NULL AND completed_at IS NULL               -- approval,
//!             AND source IS NULL AND decided_at IS NULL                  -- approved
//!             AND approval_at IS NOT NULL))
//! );
//! -- garbage (G1): completed rows only, the only ones that expire
//! CREATE INDEX idem_records_expires_at ON idem_records (expires_at) WHERE outcome IS NOT NULL;
//! CREATE INDEX idem_records_created_at ON idem_records (created_at, key);   -- listing (I3)
//! CREATE INDEX idem_records_tool ON idem_records (tool, created_at, key);   -- by tool (I3)
//! CREATE INDEX idem_records_scope ON idem_records (scope);                  -- by scope (I3)
//! ```
//!
//! A row is in progress when `owner` is set and `unknown_since` is not, outcome unknown
//! when both are set, completed when `outcome` is set, not applied when `decided_at` is
//! set, awaiting approval when `approval_at` is set and `approval_until` is not, and
//! approved when both are set. Times are whole milliseconds since the Unix epoch, the unit of [`Timestamp`];
//! an instant at or past `i64::MAX` ms (year 292 million, reached only by a saturated
//! `now + ttl`) is stored as `i64::MAX`, so such a record never expires for any `now`
//! before that year (instants at or past it compare equal). Fences are stored as integers
//! too, saturating at `i64::MAX`. Keys, fingerprints, outcomes and history entries are
//! bound as parameters, never spliced into SQL.
//!
//! The history (U7) is the entries' stored lines
//! ([`HistoryEntry::to_json`](super::HistoryEntry::to_json)) joined by `\n`, oldest
//! first, with `history_len` the number of lines and `history_dropped` the number of
//! earlier ones dropped: an append to a history of [`HISTORY_LIMIT`](super::HISTORY_LIMIT)
//! (32) lines drops the first line (up to and including the first `\n`) and counts it.
//! Each statement that moves a row appends its entry in its own `SET` clause: the history
//! adds no statement and no round trip.
//!
//! # Versions and migration
//!
//! `idem_meta` holds the schema version. Opening a file of an older version migrates it
//! in place, inside the set-up transaction, so it is all or nothing and happens once when
//! several processes open the file together. Version 1 (no `fence`, no `unknown_since`)
//! becomes version 2 by `ALTER TABLE idem_records ADD COLUMN` of the two columns, without
//! rewriting a row: every stored record keeps its state and reads back with fence 1.
//! Version 2 becomes version 3 by adding the four label columns the same way and creating
//! the three listing indexes (`CREATE INDEX IF NOT EXISTS`; building them reads every row
//! once): every stored record keeps its state and fence, keeps replaying, and reads back
//! with no label (P4); it is listed and counted under the tool `""`, and matches a scope
//! filter only when the filter is empty.
//! Version 3 becomes version 4 by rebuilding the table, since version 1's `CHECK` forbids
//! the not-applied state (no owner and no outcome) and SQLite cannot change a `CHECK` in
//! place. The documented way
//! ([lang_altertable.html#otheralter](https://www.sqlite.org/lang_altertable.html#otheralter)):
//! create the new table as `idem_records_v4`, copy every row with `INSERT … SELECT`, drop
//! the old table, rename the new one, create the four indexes, and re-create any other
//! index or trigger on the table as it was. Every stored record keeps its state, fence and
//! label, keeps replaying, counts its outcome as executed (`source` NULL) and has an empty
//! history until its next transition (P4). The rebuild reads and writes every row once
//! while holding the file's write lock; a row the new `CHECK` refuses (only one that broke
//! version 3's) fails the whole set-up and leaves the file as it was.
//! Version 4 becomes version 5 by the same rebuild (into `idem_records_v5`, copying the
//! version-4 columns), since version 4's `CHECK` forbids the approval states (no owner, no
//! outcome, no decision); adding `approval_at` and `approval_until` with `ALTER TABLE`
//! alone would leave it in force. Every stored record keeps its state, fence, label,
//! source and history, and keeps replaying (P4); both approval columns are `NULL`.
//! An older file runs every step from its version in the one transaction. A new file is
//! created as version 1 and migrated by the same steps, so new and migrated files have one
//! schema. A file of a newer version (or of a version no build wrote) is refused with
//! [`SqliteOpenError::UnsupportedSchema`] and left untouched; so is a migrated file by a
//! build of an older version, whose processes therefore cannot open it. Processes of such a
//! build that already had the file open when it was migrated must be stopped (they would
//! treat records that are not completed as expiring): upgrade every process that shares a
//! file together.
//!
//! # Operations (S2, S6, S8, F1, L1, U1, U6, U7, A2–A4)
//!
//! A row is live while it is completed and `expires_at > now`, or not completed, whatever
//! its `expires_at` (S8): `(expires_at > :now OR outcome IS NULL)` in every statement that
//! asks. Each operation is one statement or one transaction, one round trip
//! ([`Store::round_trips`]):
//!
//! - claim: one `BEGIN IMMEDIATE` transaction runs
//!   `INSERT … ON CONFLICT(key) DO UPDATE … WHERE outcome IS NOT NULL AND expires_at <= now
//!   RETURNING fence` (insert if absent, with fence 1, or over an expired completed row,
//!   with its fence + 1; the history becomes one `claimed` entry, built in SQL since only
//!   the statement knows the fence) and, when nothing was written, reads the live row; if
//!   that row is not applied with the claim's fingerprint (U6), an `UPDATE … RETURNING
//!   fence` makes it in progress with its fence + 1 and appends the `claimed` entry
//!   ([`Claim::Acquired`] with `reopened: true`). Otherwise the row is returned untouched
//!   ([`Claim::Existing`]), a row awaiting approval or approved included (A2, A4).
//! - take over, renew, mark unknown, complete, release: one compare-and-set statement
//!   each, `UPDATE/DELETE … WHERE key = ? AND owner = ? …` (a row with an owner is never
//!   completed, hence always live). Take over also matches the seen lease deadline and
//!   accepts a row in progress or outcome unknown; the others accept only a row in progress
//!   (`unknown_since IS NULL`). Take over, mark unknown and complete append their entry;
//!   complete also writes `source`; renew writes no entry.
//! - transition ([`Store::transition`], U2, U6, A2–A4): one `UPDATE … WHERE key = ? AND
//!   fence = ? AND <live> AND <the seen state>` that sets the target state's columns and
//!   appends the entry (one statement text per pair of seen state and target). Awaiting
//!   approval (from in progress or approved) sets `approval_at` to the request's now;
//!   approved (from awaiting approval or in progress) sets `approval_at` and
//!   `approval_until`; both clear owner and lease and keep the fence. In progress (only
//!   from approved) sets owner, lease, the given fence, `created_at` and `expires_at`.
//!   Every other target, completed (also a denial, from awaiting approval) and not applied
//!   included, clears both approval columns.
//! - history ([`Store::history`], U7): one `SELECT` of the history columns of the live row.
//! - claim and take over write the label columns (P1); a claim over an expired row and a
//!   takeover replace them, so a takeover of a row written before version 3 labels it.
//! - expiry is compared with the `now` the engine passes in, never SQLite's clock.
//!
//! # Inspection (I3–I5, I7)
//!
//! [`Store::list`] is one `SELECT` whose `WHERE` clause holds every filter (tool,
//! namespace, scope prefix, state, creation time, the cursor, liveness), ordered
//! `created_at DESC, key DESC` (or `ASC, ASC` with
//! [`ListQuery::oldest_first`](super::ListQuery::oldest_first), the cursor then bounding
//! from below) and limited to the page size + 1 (the extra row says whether a next page
//! exists). The state filter and the counts use the effective state at `now` (I7): a row
//! in progress whose `lease_until <= now` is outcome unknown; one awaiting approval or
//! approved is in that state whatever its `approval_until` (A6). A scope prefix with text `P`
//! selects `scope = P` and the range `P/ <= scope < P0` (`0` is the byte after `/`):
//! exactly the scopes whose parts begin with the prefix's, never a `LIKE`. A tool filter is
//! served by the `(tool, created_at, key)` index, which also yields the order; a scope
//! prefix by two ranges of the `(scope)` index; an unfiltered listing by the
//! `(created_at, key)` index, read from the cursor. [`Store::purge`] is one transaction (a
//! `DELETE … RETURNING` by key, and a read when it deleted nothing; without `force` only a
//! completed row is deleted); [`Store::purge_matching`] one transaction (a count of the
//! kept rows, a `DELETE` of the rest); [`Store::stats`] one `GROUP BY tool, state`. Each
//! method's documentation states its cost.
//!
//! # Garbage collection (G1)
//!
//! Reads treat an expired completed row as absent at once; rows are deleted later, and
//! never while live. A row that is not completed (in progress, outcome unknown, not
//! applied, awaiting approval, approved) is never deleted by collection: it waits for a
//! call, a decision or a purge.
//! Every 1024 claims of a store, the claim's transaction deletes at most 256 completed
//! rows whose `expires_at` is at or before the cutoff
//! `min(claim's now, this machine's wall clock) − GC_DRIFT_MARGIN_MS − 1 ms`
//! ([`GC_DRIFT_MARGIN_MS`](super::GC_DRIFT_MARGIN_MS) is one hour, room for drift between
//! callers), found by the partial `expires_at` index of completed rows. The wall clock is
//! the store's own clock: every process sharing the file runs on this machine, so an
//! engine whose clock runs ahead, by an hour or by a year, deletes nothing that this
//! machine still sees live. [`SqliteStore::collect_garbage`] deletes, on demand, every row
//! that is garbage at the `now` it is given (also capped by the wall clock, without the
//! margin).
//!
//! # Concurrency
//!
//! The file is opened in WAL mode with a 5 s busy timeout, so several stores (in one
//! process or in several) can share it: writes are serialised by SQLite's write lock, and
//! a writer waits for it up to the busy timeout before failing with
//! [`StoreErrorKind::Unavailable`](super::StoreErrorKind::Unavailable). Within one
//! `SqliteStore` the single connection is behind a mutex. `synchronous` stays at SQLite's
//! default (`FULL`), so a saved outcome survives a power loss once [`Store::complete`]
//! returned.
//!
//! # Blocking
//!
//! SQLite calls block the calling thread. Inside a tokio runtime each operation runs on
//! the runtime's blocking pool (`tokio::task::spawn_blocking`), so an executor thread is
//! never blocked by a busy file; outside any tokio runtime the operation runs inline and
//! the returned future is ready at once, so sync tools (`run_blocking`) need no runtime.
//! If a caller drops a claim or takeover future while its statement is still running on
//! the blocking pool, and the statement then acquires the claim, the store releases it at
//! once on the runtime (S7) rather than leaving it in progress until its lease lapses;
//! except a claim that reopened a key decided not applied (U6), which a release would
//! delete with its decision and history: it stays in progress until its lease lapses, and
//! then counts as an unknown outcome (U1).
//! [`Store::watch`] returns `None`: another process's change cannot be signalled, so
//! waiting duplicates poll with backoff (S5), after a completion or a mark-unknown alike.

mod error;
mod history;
mod inspect;
mod schema;
mod statements;
mod values;

use std::fmt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use rusqlite::Connection;

pub use self::error::SqliteOpenError;
pub(crate) use self::schema::check_existing;
pub use self::schema::SQLITE_SCHEMA_VERSION;

use self::history::TransitionValues;
use self::statements::{
    ClaimValues, CompleteValues, MarkUnknownValues, RenewValues, TakeoverValues,
};
use super::in_flight::{self, Undo};
use super::{
    gc_cutoff, Claim, ClaimRequest, CompleteRequest, Completion, History, ListPage, ListQuery,
    MarkUnknownRequest, OwnerToken, PurgeCounts, PurgeOutcome, Record, RenewRequest, Store,
    StoreError, StoreFuture, StoreStats, TakeoverRequest, TransitionRequest,
};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;

/// How many claims of one store between two garbage collections.
const COLLECT_EVERY: u64 = 1024;

/// How many garbage rows one garbage collection during a claim deletes at most.
const COLLECT_BATCH: i64 = 256;

/// How many prepared statements a connection keeps: every operation's (12) and the 21
/// transitions', with room to spare, so that none is prepared again (rusqlite keeps 16).
const STATEMENT_CACHE: usize = 48;

const BACKEND: &str = "sqlite";

/// A [`Store`] in one SQLite file (or an in-memory database), for one machine: records
/// survive restarts, and every process that opens the same file shares them (S2 across
/// processes). See the [module documentation](self) for the schema and its migration, the
/// statements, garbage collection and how blocking calls are kept off async executor
/// threads.
///
/// Cheap to clone: clones share one connection.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::{Engine, SqliteStore, SystemClock};
/// // `SqliteStore::open("agent.sqlite3")` for a file that survives restarts.
/// let store = SqliteStore::open_in_memory()?;
/// let engine = Engine::new(store, SystemClock);
/// assert_eq!(engine.store().backend(), "sqlite");
/// # Ok::<(), idem_agent::SqliteOpenError>(())
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

impl SqliteStore {
    /// Opens (creating it if absent) the store in the file at `path`: WAL mode, a 5 s busy
    /// timeout, and the schema created on first use or migrated from an older version.
    ///
    /// # Errors
    /// [`SqliteOpenError::Open`] when the file cannot be opened or created,
    /// [`SqliteOpenError::Setup`] when WAL mode or the schema cannot be set up (or an older
    /// schema cannot be migrated; the file is then left as it was),
    /// [`SqliteOpenError::UnsupportedSchema`] when the file holds a newer schema version.
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
        schema::set_up(&mut conn, &path, wal)?;
        conn.set_prepared_statement_cache_capacity(STATEMENT_CACHE);
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

    /// Deletes every record that is garbage at `now` (ms since the Unix epoch) and returns
    /// how many: completed and expired at or before `now`; a record that is not completed
    /// is never garbage (G1). `now` is capped by this machine's wall clock, so a `now` ahead
    /// of it deletes nothing the wall clock still sees live (G1). No drift margin is
    /// applied: pass a time no later than every caller's clock (for example
    /// `now − GC_DRIFT_MARGIN_MS`) when callers' clocks may lag this machine's. Live
    /// records are never deleted (S8). One statement; runs inline: call it from a
    /// blocking context.
    ///
    /// # Errors
    /// [`StoreError`] when the statement fails (for example the write lock stayed busy
    /// past the busy timeout).
    pub fn collect_garbage(&self, now: Timestamp) -> Result<usize, StoreError> {
        let cutoff = now.min(crate::clock::system_now());
        self.inner
            .with(|conn, path| statements::collect(conn, path, cutoff, -1))
    }

    /// Runs `op` on the connection: on the tokio blocking pool inside a tokio runtime,
    /// inline otherwise (see the module documentation).
    ///
    /// `undo` is for operations that may acquire a claim (claim, take over): if the caller
    /// drops the future while `op` is still running on the blocking pool, and `op` then
    /// reports (by `undo.acquired`) that it acquired the claim of `undo.key`, the claim is
    /// released at once instead of staying in progress until its lease lapses (S7).
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

impl Store for SqliteStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        let values = ClaimValues::of(&req);
        let due =
            self.inner.claims.fetch_add(1, Ordering::Relaxed) % COLLECT_EVERY == COLLECT_EVERY - 1;
        // G1: judged by the claim's clock and this machine's, with the drift margin.
        let collect = due
            .then(|| gc_cutoff(req.now))
            .flatten()
            .map(|cutoff| (cutoff, COLLECT_BATCH));
        // Abandoned by its caller, the claim is given back: released, or returned to not
        // applied when it reopened a key decided so (U4, U6).
        let undo = Undo {
            key: req.key.clone(),
            owner: req.owner,
            now: req.now,
            acquired: in_flight::claimed,
        };
        self.run(
            move |conn, path| statements::claim(conn, path, &values, collect),
            Some(undo),
        )
    }

    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool> {
        let values = TakeoverValues::of(&req);
        self.run(
            move |conn, path| statements::take_over(conn, path, &values),
            // No undo: a takeover whose caller went away must not delete the record, whose
            // outcome is unknown (U2); the claim lapses with its lease instead.
            None,
        )
    }

    fn renew<'a>(&'a self, req: RenewRequest<'a>) -> StoreFuture<'a, bool> {
        let values = RenewValues::of(&req);
        self.run(
            move |conn, path| statements::renew(conn, path, &values),
            None,
        )
    }

    /// No waiter is woken by a signal ([`Store::watch`] is `None`): waiters poll.
    fn mark_unknown<'a>(&'a self, req: MarkUnknownRequest<'a>) -> StoreFuture<'a, bool> {
        let values = MarkUnknownValues::of(&req);
        self.run(
            move |conn, path| statements::mark_unknown(conn, path, &values),
            None,
        )
    }

    fn complete<'a>(&'a self, req: CompleteRequest<'a>) -> StoreFuture<'a, Completion> {
        let values = CompleteValues::of(&req);
        self.run(
            move |conn, path| statements::complete(conn, path, &values),
            None,
        )
    }

    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool> {
        let key = key.as_str().to_owned();
        self.run(
            move |conn, path| statements::release(conn, path, &key, owner),
            None,
        )
    }

    /// One `UPDATE` (one round trip): a compare-and-set by the primary key on the fence
    /// and the seen state, which moves the row and appends the entry to its history:
    /// O(log rows).
    fn transition<'a>(&'a self, req: TransitionRequest<'a>) -> StoreFuture<'a, bool> {
        let values = TransitionValues::of(&req);
        self.run(
            move |conn, path| history::transition(conn, path, &values),
            None,
        )
    }

    /// One `SELECT` of the history columns by the primary key (one round trip): O(log
    /// rows).
    fn history<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<History>> {
        let key = key.as_str().to_owned();
        self.run(
            move |conn, path| history::history(conn, path, &key, now),
            None,
        )
    }

    fn read<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Record>> {
        let key = key.as_str().to_owned();
        self.run(
            move |conn, path| statements::read_live(conn, path, &key, now),
            None,
        )
    }

    /// One `SELECT` (one round trip) of at most the page size + 1 rows, newest first
    /// (`ORDER BY created_at DESC, key DESC`; `ASC, ASC` oldest first), every filter in its
    /// `WHERE` clause, no `LIKE`. What serves it, by the filters given:
    ///
    /// - a tool: an index range scan on `(tool, created_at, key)`, which also gives the
    ///   listing order, then a filter on the other conditions: O(rows of the tool read
    ///   until the page is full), at most O(the tool's rows);
    /// - a scope prefix (without a tool): two index ranges on `(scope)` (the scope itself,
    ///   and the texts that begin with it and `/`), then a filter on the other conditions
    ///   (the cursor included) and a sort of the matches: O(m log m) for the m rows in the
    ///   scope and below it, on every page;
    /// - neither: a scan of the `(created_at, key)` index from the cursor (or from the
    ///   newest row, backwards; from the oldest, forwards, oldest first), filtering as it
    ///   goes, stopping when the page is full:
    ///   O(rows read until the page is full), at most O(rows held) for a filter that
    ///   matches little (a namespace, a state, a creation time range alone).
    ///
    /// With a tool or without filters, the cursor `(created_at, key) < (…)` (`>` oldest
    /// first) is a bound of the index range, not a skip, so a later page costs no more than
    /// the first. Expired completed rows are filtered out (`expires_at > now OR outcome IS
    /// NULL`), and the effective state (I7) is compared with `now`, neither served by an
    /// index.
    fn list<'a>(&'a self, query: &'a ListQuery, now: Timestamp) -> StoreFuture<'a, ListPage> {
        let query = query.clone();
        self.run(
            move |conn, path| inspect::list(conn, path, &query, now),
            None,
        )
    }

    /// One `BEGIN IMMEDIATE` transaction (one round trip): `DELETE … WHERE key = ? AND
    /// <live> AND (force OR completed) RETURNING …` by the primary key, and, when it
    /// deleted nothing, a read of the row by the primary key to tell a kept record (not
    /// completed: in progress, outcome unknown, not applied, awaiting approval or approved)
    /// from an absent one: O(log rows). An expired completed row is not deleted here but left to garbage collection,
    /// which judges by this machine's clock too (G1).
    fn purge<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeOutcome> {
        let key = key.as_str().to_owned();
        self.run(
            move |conn, path| inspect::purge(conn, path, &key, force, now),
            None,
        )
    }

    /// One `BEGIN IMMEDIATE` transaction (one round trip), with [`list`](Store::list)'s
    /// filters and indexes (its limit and cursor do not apply): without `force` a
    /// `SELECT COUNT(*)` of the matching rows that are not completed (kept) and a `DELETE`
    /// of the completed ones; with `force` one `DELETE` of every matching row.
    /// O(matching rows) (O(rows held) when no tool or scope narrows them), holding the
    /// file's write lock meanwhile.
    fn purge_matching<'a>(
        &'a self,
        query: &'a ListQuery,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeCounts> {
        let query = query.clone();
        self.run(
            move |conn, path| inspect::purge_matching(conn, path, &query, force, now),
            None,
        )
    }

    /// One `SELECT … GROUP BY tool, state` (one round trip), the state being the effective
    /// state at `now` (I7): a scan of the `(tool, created_at, key)` index and the rows,
    /// skipping expired completed ones, then a sort by state within each tool: O(rows
    /// held), expired rows not yet collected included.
    fn stats<'a>(&'a self, now: Timestamp) -> StoreFuture<'a, StoreStats> {
        self.run(move |conn, path| inspect::stats(conn, path, now), None)
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn round_trips(&self) -> Option<u64> {
        Some(self.inner.round_trips.load(Ordering::Relaxed))
    }
}
