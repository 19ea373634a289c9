//! The PostgreSQL store: one database shared by many processes on many machines.
//!
//! Enabled by the `postgres` cargo feature. Built on [`tokio_postgres`] 0.7 with a
//! [`deadpool_postgres`] 0.14 connection pool (16 connections, plain TCP without TLS).
//!
//! # Schema (version 5)
//!
//! Created on first use, inside one transaction holding a transaction-level advisory
//! lock (so that stores starting together do not race), in the schema given to
//! [`PostgresStore::with_schema`] (`idem` by default, see [`DEFAULT_SCHEMA`]):
//!
//! ```sql
//! CREATE SCHEMA IF NOT EXISTS idem;
//! CREATE TABLE idem.meta (
//!     name  TEXT PRIMARY KEY,               -- 'schema_version'
//!     value BIGINT NOT NULL                 -- 5
//! );
//! CREATE TABLE idem.records (
//!     key           TEXT PRIMARY KEY,        -- the idempotency key (64 hex digits)
//!     fingerprint   TEXT NOT NULL,           -- 64 hex digits (S9)
//!     created_at    BIGINT NOT NULL,         -- ms since the Unix epoch
//!     expires_at    BIGINT NOT NULL,         -- ms; completed: live while now < expires_at (S8)
//!     owner         TEXT,                    -- held: owner token, 32 hex digits
//!     lease_until   BIGINT,                  -- held: lease deadline, ms (S6, L1)
//!     outcome       TEXT,                    -- completed: the envelope JSON, verbatim (S11)
//!     completed_at  BIGINT,                  -- completed: ms
//!     fence         BIGINT NOT NULL DEFAULT 1, -- fencing token of the claim (F1)
//!     unknown_since BIGINT,                  -- outcome unknown since, ms (U1)
//!     CONSTRAINT records_fence_positive CHECK (fence >= 1),
//!     CONSTRAINT records_unknown_has_owner CHECK (unknown_since IS NULL OR owner IS NOT NULL),
//!     tool          TEXT,                    -- label (P1): the tool's name
//!     namespace     TEXT,                    -- label: the engine's namespace (K11), if any
//!     scope         TEXT COLLATE "C",        -- label: the scope path's text (`tenant=acme/…`)
//!     key_args      TEXT,                    -- label: audited key arguments (P2), if opted in
//!     source          TEXT,                  -- completed: executed, reconciled, resolved,
//!                                            --   denied (U6, A3)
//!     decided_at      BIGINT,                -- not applied: when decided, ms (U6)
//!     history         TEXT,                  -- the history's entries, one JSON line each (U7)
//!     history_len     INTEGER NOT NULL DEFAULT 0, -- how many lines `history` holds (≤ 32)
//!     history_dropped BIGINT NOT NULL DEFAULT 0,  -- how many older entries were dropped
//!     approval_at     BIGINT,                -- awaiting approval since / approved at, ms (A2, A3)
//!     approval_until  BIGINT,                -- approved: until when, ms (A3)
//!     CONSTRAINT records_state CHECK (
//!            (owner IS NOT NULL AND lease_until IS NOT NULL          -- held
//!             AND outcome IS NULL AND completed_at IS NULL AND decided_at IS NULL
//!             AND approval_at IS NULL AND approval_until IS NULL)
//!         OR (owner IS NULL AND lease_until IS NULL                  -- completed
//!             AND outcome IS NOT NULL AND completed_at IS NOT NULL AND decided_at IS NULL
//!             AND approval_at IS NULL AND approval_until IS NULL)
//!         OR (owner IS NULL AND lease_until IS NULL                  -- not applied
//!             AND outcome IS NULL AND completed_at IS NULL AND decided_at IS NOT NULL
//!             AND approval_at IS NULL AND approval_until IS NULL)
//!         OR (owner IS NULL AND lease_until IS NULL                  -- awaiting approval,
//!             AND outcome IS NULL AND completed_at IS NULL           --   approved
//!             AND decided_at IS NULL AND approval_at IS NOT NULL))
//! );
//! CREATE INDEX records_expires_at ON idem.records (expires_at);
//! CREATE INDEX records_created ON idem.records (created_at, key COLLATE "C");
//! CREATE INDEX records_tool_created ON idem.records (tool, created_at, key COLLATE "C");
//! CREATE INDEX records_scope ON idem.records (scope);
//! ```
//!
//! A row is in progress when `owner` is set and `unknown_since` is not, outcome unknown
//! when both are set (it keeps the owner and the lease that gave up), completed when
//! `outcome` is set (its `source` `NULL` in a row completed before version 4: executed),
//! not applied when only `decided_at` is set (U6: a person decided the effect did not
//! happen; the fence, fingerprint, label and history stay), awaiting approval when only
//! `approval_at` is set (A2: since then) and approved when `approval_at` (when decided)
//! and `approval_until` (until when) are (A3); every row written before version 5 has
//! both approval columns `NULL`. Only a completed row expires:
//! a row in any other state is live whatever its `expires_at` (S8), so every statement's
//! test of a live row is `(expires_at > $now OR outcome IS NULL)`. The label columns are
//! written by every claim and takeover (P1) and are all `NULL` in a row written before
//! version 3, which reads with no label (P4). Times are whole milliseconds since the Unix
//! epoch, the unit of [`Timestamp`]; an instant at or past `i64::MAX` ms is stored as
//! `i64::MAX` (as in the SQLite store), and so is a fence past `i64::MAX`. The outcome is
//! `TEXT`, not `JSONB`, so that it reads back byte for byte (S11). Keys, fingerprints,
//! owners, outcomes, times, fences and history entries are always bound as parameters; the
//! schema name is the only name in the SQL text, and it must be a plain lowercase
//! identifier (checked, then quoted).
//!
//! The history (U7) is kept in the row: `history` holds the entries' stored lines
//! ([`HistoryEntry::to_json`](crate::store::HistoryEntry::to_json)) oldest first, separated
//! by a newline (`chr(10)`, which a JSON line never holds unescaped), `history_len` how many
//! there are and `history_dropped` how many older ones were dropped. Every statement that
//! moves a row (claim, take over, mark unknown, complete, transition) appends its entry in
//! its own `SET`: when 32 ([`HISTORY_LIMIT`](crate::store::HISTORY_LIMIT)) are kept, the
//! first line (everything up to and including the first newline) is cut and
//! `history_dropped` grows by one. A claim over an expired record starts a new history;
//! renewals add nothing; a row written before version 4 has an empty history (`NULL`, 0, 0)
//! until its next transition.
//!
//! ## Upgrades from versions 1 to 4 (P4)
//!
//! Version 1 (this crate before fencing tokens) had no `fence` and no `unknown_since`;
//! version 2 (before labels) had neither the label columns nor the listing indexes;
//! version 3 (before decisions and histories) had no `source`, `decided_at` and history
//! columns, and an unnamed state check (`records_check`) that forbids a row with neither an
//! owner nor an outcome; version 4 (before approvals) had no `approval_at` and
//! `approval_until`, and a state check `records_state` without the approval states. A
//! store that finds one of them upgrades it in place to version 5,
//! in one batch inside the same transaction and under the same advisory lock as the
//! creation (so concurrent first uses upgrade once), taking the steps from its version on:
//!
//! ```sql
//! -- version 1 only:
//! ALTER TABLE idem.records
//!     ADD COLUMN fence BIGINT NOT NULL DEFAULT 1,
//!     ADD COLUMN unknown_since BIGINT,
//!     ADD CONSTRAINT records_fence_positive CHECK (fence >= 1) NOT VALID,
//!     ADD CONSTRAINT records_unknown_has_owner
//!         CHECK (unknown_since IS NULL OR owner IS NOT NULL) NOT VALID;
//! -- versions 1 and 2:
//! ALTER TABLE idem.records
//!     ADD COLUMN IF NOT EXISTS tool TEXT,
//!     ADD COLUMN IF NOT EXISTS namespace TEXT,
//!     ADD COLUMN IF NOT EXISTS scope TEXT COLLATE "C",
//!     ADD COLUMN IF NOT EXISTS key_args TEXT;
//! CREATE INDEX IF NOT EXISTS records_created ON idem.records (created_at, key COLLATE "C");
//! CREATE INDEX IF NOT EXISTS records_tool_created
//!     ON idem.records (tool, created_at, key COLLATE "C");
//! CREATE INDEX IF NOT EXISTS records_scope ON idem.records (scope);
//! -- versions 1, 2 and 3:
//! ALTER TABLE idem.records
//!     ADD COLUMN source TEXT,
//!     ADD COLUMN decided_at BIGINT,
//!     ADD COLUMN history TEXT,
//!     ADD COLUMN history_len INTEGER NOT NULL DEFAULT 0,
//!     ADD COLUMN history_dropped BIGINT NOT NULL DEFAULT 0,
//!     DROP CONSTRAINT records_check;
//! -- versions 1 to 4:
//! ALTER TABLE idem.records
//!     ADD COLUMN IF NOT EXISTS approval_at BIGINT,
//!     ADD COLUMN IF NOT EXISTS approval_until BIGINT,
//!     DROP CONSTRAINT IF EXISTS records_state,
//!     ADD CONSTRAINT records_state CHECK (…as above…) NOT VALID;
//! UPDATE idem.meta SET value = 5 WHERE name = 'schema_version' AND value IN (1, 2, 3, 4);
//! ```
//!
//! Every record is kept: in progress, outcome unknown and completed records read back and
//! replay as before, with no label (before version 3), fence 1 (before version 2), source
//! executed and an empty history (before version 4), and none is awaiting approval or
//! approved (before version 5). From PostgreSQL 11 on, adding the
//! columns rewrites and scans no row (a constant default or none; the checks hold for every
//! old row, so they are `NOT VALID`). Building the three indexes reads the table once and
//! blocks writes to it until the set-up commits: for a large table, build them beforehand
//! with `CREATE INDEX CONCURRENTLY` under these names (the upgrade keeps indexes that
//! exist). Stop the processes of the older build before the first process of this one
//! starts: an older build writes no history and no source, does not know the not-applied
//! or approval states, and its statements treat a record not completed whose `expires_at`
//! passed as expired (a version 3 build would claim over an undecided unknown outcome; a
//! version 4 build still running answers a row awaiting approval or approved as corrupt;
//! one started after the upgrade refuses version 5). A
//! schema of a version other than 1 to 5 is refused, and left untouched, with
//! [`StoreErrorKind::Unsupported`].
//!
//! ## Inspection without changes
//!
//! [`PostgresStore::connect_existing`] (the `idem` command's way in, through
//! [`StoreLocator::open_existing`](crate::store::StoreLocator::open_existing)) creates and
//! upgrades nothing: its first use checks with `to_regclass` that `meta` and `records`
//! exist and reads the version, and refuses a missing schema ("no idem schema `…` in the
//! PostgreSQL database …") or another version with [`StoreErrorKind::Unsupported`]. It takes
//! no lock and needs only `USAGE` on the schema and `SELECT` on its tables (`DELETE` to
//! purge, `UPDATE` to record decisions).
//!
//! # Operations (S2, S6, S8, F1, L1, U1, U6, U7, A2–A4)
//!
//! - claim: one statement,
//!   `WITH live AS (SELECT … FROM records WHERE key = $1 AND (expires_at > now OR outcome
//!   IS NULL)), upd AS (UPDATE records SET … owner, lease, fence + 1, decided_at = NULL,
//!   history = <append claimed> WHERE key = $1 AND decided_at IS NOT NULL AND fingerprint =
//!   $2 AND EXISTS (SELECT 1 FROM live WHERE <not applied, same fingerprint>) RETURNING
//!   fence), ins AS (INSERT … history = <claimed> WHERE NOT EXISTS (SELECT 1 FROM live) ON
//!   CONFLICT (key) DO UPDATE … fence + 1, history = <claimed>, history_len = 1,
//!   history_dropped = 0 WHERE records.outcome IS NOT NULL AND records.expires_at <= now
//!   RETURNING fence) SELECT TRUE, …, fence, …, FALSE FROM ins UNION ALL SELECT TRUE, …,
//!   fence, …, TRUE FROM upd UNION ALL SELECT FALSE, <the live row>, FALSE FROM live WHERE
//!   NOT <not applied, same fingerprint>`: inserts if the key is absent (fence 1) or
//!   replaces an expired completed row (its fence + 1, a new history); re-claims a row
//!   decided not applied with the caller's fingerprint (its fence + 1, the `claimed` entry
//!   appended to its history: [`Claim::Acquired`](crate::store::Claim::Acquired) with
//!   `reopened`); otherwise returns the live row (awaiting approval and approved included:
//!   only a transition moves those, A2, A4), in one round trip. The `claimed` entry is
//!   built by the SQL (`'{"at":' || now || ',"event":"claimed","fence":' || fence || …`),
//!   the line [`HistoryEntry::claimed`](crate::store::HistoryEntry::claimed) writes. When
//!   the statement's snapshot already shows a live row that is not to be re-claimed (a
//!   replay, a waiting duplicate, another fingerprint) neither write is attempted, so the
//!   statement writes nothing, takes no transaction id and its commit waits for no WAL
//!   flush: a replay is a plain read. The cases it cannot answer are races: a concurrent
//!   first claim of the same key committed after this statement's snapshot (the insert
//!   waited for it and wrote nothing, and the snapshot does not show the row), or a
//!   concurrent change of the not-applied row the snapshot showed (the update re-checks
//!   the row it finds and writes nothing). Then the store reads the row in a second
//!   statement (a new snapshot), and retries the claim if that row is gone again, or is
//!   again not applied with the caller's fingerprint, up to 8 times.
//! - take over, renew, mark unknown, complete, release: one compare-and-set statement
//!   each, `UPDATE/DELETE … WHERE key = $1 AND owner = $2 …` (a row with an owner is never
//!   expired). Take over also compares the seen lease and accepts a row in progress or
//!   outcome unknown, storing the caller's fence; renew, mark unknown, complete and release
//!   accept only a row in progress (`unknown_since IS NULL`). Take over, mark unknown and
//!   complete append the request's entry to the history in the same `UPDATE`; complete
//!   also stores the outcome's `source` (its name, `executed` too).
//! - transition (U2, U6, A2–A4): one statement, `UPDATE records SET <the target's
//!   columns>, <append entry> WHERE key = $1 AND fence = $2 AND (expires_at > now OR
//!   outcome IS NULL) AND <the state seen> AND <the target allowed from it>`: in progress
//!   with the owner seen (and the lease seen, if given), outcome unknown with the owner and
//!   lease seen, not applied (`decided_at IS NOT NULL`), awaiting approval (`approval_at IS
//!   NOT NULL AND approval_until IS NULL`) or approved (`approval_until IS NOT NULL`). Each
//!   target sets every state column, to its value or `NULL`:
//!   - outcome unknown (only from in progress) sets `unknown_since`, keeping owner and
//!     lease;
//!   - completed (from any state: a denial, source `denied`, from awaiting approval or
//!     approved) stores outcome, `completed_at` = now and source, and raises `expires_at`
//!     to the request's;
//!   - not applied (from any state) sets `decided_at` = now;
//!   - awaiting approval (from in progress or approved) sets `approval_at` = now;
//!   - approved (from awaiting approval or in progress) sets `approval_at` = `decided_at`
//!     and `approval_until` = `until`;
//!   - in progress (only from approved, the run an approval allows) sets owner, lease and
//!     the request's fence, `created_at` = now and `expires_at` = the request's.
//!
//!   Fence, fingerprint, label and history (but for the appended entry) stay, and so do the
//!   times but where said. A target not allowed from the state seen writes nothing.
//! - history: one statement, `SELECT history, history_dropped … WHERE key = $1 AND
//!   (expires_at > now OR outcome IS NULL)`.
//! - claim and take over write the label columns of the call (P1); every read decodes them.
//! - expiry is compared with the `now` the engine passes in, never the server's clock.
//! - garbage collection (G1) deletes completed rows only, judged by the caller's clock
//!   *and* the server's: a row is deleted only once it is completed and its `expires_at`
//!   lies at or before the cutoff `min(caller's now, server's statement_timestamp()) −
//!   margin`; a row in any other state (in progress, outcome unknown, not applied, awaiting
//!   approval, approved) is never collected,
//!   however old (S8, U2). Every 1024 claims of a store a background task deletes at most
//!   256 rows with the margin [`GC_DRIFT_MARGIN_MS`] (one hour) + 1 ms and the claim's
//!   `now`, so a caller whose clock runs ahead, even by a year, deletes nothing that the
//!   server's clock still sees live; [`PostgresStore::collect_garbage`] deletes all rows
//!   that are garbage at the `now` it is given, with no margin.
//!
//! Each statement is prepared once per pooled connection and then costs one round trip:
//! a first execution costs two (claim, complete: the history entries ride in the same
//! statements), a replay one (claim), a renewal (the heartbeat), a mark unknown, a
//! transition and a history read one each; a listing, a purge, a purge by filter and the
//! counts one each. [`Store::round_trips`] counts every statement
//! exchange, including each prepare of a statement that the connection has not prepared
//! yet and the schema set-up statements (`BEGIN`, advisory lock, creation batch, version
//! read and write, `COMMIT`; an upgrade counts as the creation batch, and a schema of the
//! current version skips both); the background collection's statement counts too;
//! opening and authenticating a pooled connection is not counted. Clones share the count.
//!
//! # Inspection (I3–I5, I7)
//!
//! [`Store::list`], [`Store::purge`], [`Store::purge_matching`] and [`Store::stats`] are one
//! statement each, and judge expiry and leases by the `now` passed in. A listing's
//! statement is built from the filters the query sets, with every value bound as a
//! parameter:
//!
//! ```sql
//! SELECT key, … FROM idem.records
//! WHERE (expires_at > $now OR outcome IS NULL)
//!   AND tool = $tool                                         -- if given
//!   AND namespace = $namespace                               -- if given
//!   AND (scope = $p OR (scope >= $p || '/' AND scope < $p || '0'))   -- a scope prefix
//!   AND outcome IS NOT NULL                                  -- or another state, below
//!   AND created_at >= $from AND created_at < $before         -- if given
//!   AND (created_at, key COLLATE "C") < ($cursor_created_at, $cursor_key)  -- next pages
//! ORDER BY created_at DESC, key COLLATE "C" DESC LIMIT $page_size + 1
//! ```
//!
//! Oldest first ([`ListQuery::oldest_first`](crate::store::ListQuery::oldest_first)) sorts
//! `ASC` and continues with `(created_at, key) > cursor`. The state filter is the state at
//! `now` (I7): in progress `owner IS NOT NULL AND unknown_since IS NULL AND lease_until >
//! $now`; outcome unknown `owner IS NOT NULL AND (unknown_since IS NOT NULL OR lease_until
//! <= $now)` (a lapsed lease is an unknown outcome); completed `outcome IS NOT NULL`; not
//! applied `decided_at IS NOT NULL`; awaiting approval `approval_at IS NOT NULL AND
//! approval_until IS NULL`; approved `approval_until IS NOT NULL` (A6: oldest first lists
//! the queue). The counts group by the same state at `now`, the approval states tested
//! before the lease (their rows have none).
//!
//! The scope prefix is matched on the path's text in byte order (`scope` is `COLLATE
//! "C"`): parts are joined by `/` and values percent-encode `/`, so the paths whose parts
//! begin with the prefix's are the prefix itself and the texts from `prefix/` up to, not
//! including, `prefix0` (`0` is the byte after `/`): an equality and a range of
//! `records_scope`, exact. No `LIKE`: a `_` or `%` in a scope value would be a wildcard
//! there. Without a scope, a listing walks `records_created` (or, with a tool,
//! `records_tool_created`) from the cursor (backwards, or forwards oldest first) and stops
//! after a page: its cost is the page, plus the rows the other filters skip. With a scope,
//! the matching rows are fetched from `records_scope` and sorted: its cost is the records
//! under the prefix. Each combination of filters set is one statement text, prepared once
//! per pooled connection; [`PostgresStore::explain_list`] shows the server's plan.
//!
//! A purge deletes one key's live row if completed, or with `force` (`DELETE …
//! RETURNING`), and answers the kept row (any state but completed) in
//! the same statement; an expired row is left to garbage collection. A purge by filter
//! deletes the matching live rows in one statement (completed ones only without `force`)
//! and counts the ones it kept from the same snapshot; the cursor and page size do not
//! apply. Counts are one `GROUP BY tool, state` over the live rows (a scan: cost in the
//! live records).
//!
//! # Outages and timeouts (S10)
//!
//! Connecting and waiting for a pooled connection time out after 5 s each, and every
//! operation (claim, take over, renew, mark unknown, complete, release, transition,
//! history, read, list, purge, counts; not a purge by filter, nor
//! [`PostgresStore::collect_garbage`]) fails with [`StoreErrorKind::Unavailable`] after
//! [`OPERATION_TIMEOUT`] (10 s) at most, also when the server stops answering without
//! closing its connections; then the idle pooled connections are closed so that the next
//! operation connects afresh. A server that is down (connection refused or closed) fails
//! an operation at once. Connections the server closed are dropped from the pool when next
//! taken (`RecyclingMethod::Fast` checks `is_closed`), so service resumes with the first
//! operation after the server is back. A claim whose answer never came may still have
//! been applied: the key is then in progress, owned by nobody, until its lease lapses
//! (S6), and no body runs before then.
//!
//! Errors the server reports carry its message, detail, hint and SQLSTATE code. Those that
//! retrying cannot fix are not transient: SQLSTATE classes `42` (syntax error or access
//! rule violation), `3F` (invalid schema name) and `0A` (feature not supported) are
//! [`StoreErrorKind::Unsupported`], class `22` (data exception) is
//! [`StoreErrorKind::Corrupt`]; the rest (shutdown, conflicts, resources) are
//! [`StoreErrorKind::Unavailable`].
//!
//! # Runtime
//!
//! Every operation runs as a task on the tokio runtime of the caller (it never blocks a
//! thread). Driven outside a tokio runtime (a sync tool's `run_blocking` with no runtime),
//! every operation fails at once with [`StoreErrorKind::Unsupported`]: use the SQLite or
//! memory store from sync tools, or call them inside a runtime. If a caller drops a claim
//! future while its statement is in flight, and the statement then acquires the claim of
//! an absent or expired key, the store releases it at once (S7); a re-claim of a key
//! decided not applied is not released that way (a release would delete the record and
//! its history): it stays in progress until its lease lapses. [`Store::watch`] returns
//! `None`: waiting duplicates poll with backoff (S5), so a record marked unknown is seen
//! at their next poll.
//!
//! # Modules
//!
//! `schema` (creation, version check, upgrades), `sql` (the operations' statements),
//! `ops` (connections, prepared statements, the claim, decoding rows and histories),
//! `store_impl` (the [`Store`] operations), `inspect` (listing, purging and counting: the
//! statements built from filters), `runtime` (each operation a task bounded in time) and
//! `errors` (typed errors).

mod errors;
mod inspect;
mod ops;
mod runtime;
mod schema;
#[cfg(test)]
mod server_tests;
mod sql;
mod store_impl;
#[cfg(test)]
mod tests;
mod tls;

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::OnceCell;

use super::redact::redact_url as redact;
#[cfg(doc)]
use super::{Store, StoreErrorKind};
use super::{StoreError, GC_DRIFT_MARGIN_MS};
use crate::clock::Timestamp;

pub use errors::PostgresConnectError;
use ops::to_sql;
pub use schema::POSTGRES_SCHEMA_VERSION;
use schema::{valid_schema, SchemaSql};
use sql::Statements;

/// The schema [`PostgresStore::connect`] uses.
pub const DEFAULT_SCHEMA: &str = "idem";

/// Connections per store.
const POOL_SIZE: usize = 16;

/// How long connecting, or waiting for a free pooled connection, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one operation (claim, take over, renew, mark unknown, complete, release,
/// transition, history, read, list, purge, counts: waiting for a pooled connection, connecting, and its
/// statements) may take before it fails with [`StoreErrorKind::Unavailable`]: 10 s.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// How many claims of one store between two garbage collections.
const COLLECT_EVERY: u64 = 1024;

/// How many garbage rows one background garbage collection deletes at most.
const COLLECT_BATCH: i64 = 256;

/// How far, in ms, a background collection's cutoff lies before the earlier of the
/// caller's and the server's clock: more than the drift margin (G1, as `gc_cutoff_by`).
const MARGIN_PAST_CUTOFF: i64 = GC_DRIFT_MARGIN_MS as i64 + 1;

const BACKEND: &str = "postgres";

/// A [`Store`] in a PostgreSQL database, shared by every process that connects to it
/// with the same schema name: one execution per key across processes and machines (S2),
/// records that survive restarts of the agents. See the [module documentation](self)
/// for the schema, the statements and the runtime requirements.
///
/// Cheap to clone: clones share one connection pool.
///
/// ```no_run
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::{Engine, PostgresStore, SystemClock};
/// let store = PostgresStore::connect("postgres://agent:secret@db.internal/agents")?;
/// let engine = Engine::new(store, SystemClock);
/// assert_eq!(engine.store().backend(), "postgres");
/// # Ok::<(), idem_agent::PostgresConnectError>(())
/// ```
#[derive(Clone)]
pub struct PostgresStore {
    inner: Arc<Inner>,
}

struct Inner {
    pool: Pool,
    url: String,
    schema: String,
    sql: Statements,
    schema_sql: SchemaSql,
    /// Whether the first use creates or upgrades the schema ([`PostgresStore::with_schema`]),
    /// or only checks it ([`PostgresStore::connect_existing`]).
    create: bool,
    ready: OnceCell<()>,
    claims: AtomicU64,
    /// Statement exchanges with the server ([`Store::round_trips`]).
    round_trips: AtomicU64,
}

impl PostgresStore {
    /// A store in the database at `url` (`postgres://user:password@host:port/database`
    /// or the `key=value` form), in the schema [`DEFAULT_SCHEMA`] (`idem`).
    ///
    /// Does not connect: the pool connects on first use (5 s connect timeout), and the
    /// first operation creates the schema if absent.
    ///
    /// TLS (contract N1) follows libpq's URL parameters: `sslmode` (`disable`, `prefer` —
    /// the default: TLS when the server offers it —, `require`, `verify-ca`,
    /// `verify-full`), `sslrootcert` (a PEM file of CA certificates, or `system`; the
    /// system's roots by default), `sslcert` and `sslkey` (a client certificate and its
    /// key). `prefer` and `require` do not check the server's certificate (unless
    /// `sslrootcert` is given to `require`), as in libpq.
    ///
    /// # Errors
    /// [`PostgresConnectError::InvalidUrl`] when `url` cannot be parsed or its TLS
    /// parameters are wrong (an unknown `sslmode`, `sslcert` without `sslkey`),
    /// [`PostgresConnectError::Tls`] when a certificate or key file cannot be read or holds
    /// none, [`PostgresConnectError::Pool`] when the pool cannot be built.
    pub fn connect(url: &str) -> Result<Self, PostgresConnectError> {
        Self::with_schema(url, DEFAULT_SCHEMA)
    }

    /// As [`connect`](Self::connect), with the tables in the schema `schema`: stores with
    /// different schema names on one database never see each other's records.
    ///
    /// # Errors
    /// As [`connect`](Self::connect), and [`PostgresConnectError::InvalidSchema`] when
    /// `schema` is not 1 to 63 characters of `a-z`, `0-9` and `_` starting with a letter
    /// or `_`, or starts with `pg_` (reserved by PostgreSQL).
    pub fn with_schema(url: &str, schema: &str) -> Result<Self, PostgresConnectError> {
        Self::build(url, schema, true)
    }

    /// As [`with_schema`](Self::with_schema), for inspection: the store never creates or
    /// upgrades anything. Its first operation checks, with one read-only statement, that the
    /// schema holds idem's tables at version [`POSTGRES_SCHEMA_VERSION`]; then every
    /// operation runs as with [`with_schema`](Self::with_schema). Reading (`read`, `list`,
    /// `stats`) needs only `USAGE` on the schema and `SELECT` on its tables; purging needs
    /// `DELETE` too. The `idem` command opens stores this way, so that a mistyped schema
    /// name is reported instead of created empty, and a read-only role can inspect.
    ///
    /// # Errors
    /// As [`with_schema`](Self::with_schema). The first operation fails with
    /// [`StoreErrorKind::Unsupported`] when the schema or its tables do not exist ("no idem
    /// schema `…` in this database"), or hold a schema version other than this build's
    /// (an older one is not upgraded here: running an agent of this build once upgrades it
    /// in place, P4).
    pub fn connect_existing(url: &str, schema: &str) -> Result<Self, PostgresConnectError> {
        Self::build(url, schema, false)
    }

    fn build(url: &str, schema: &str, create: bool) -> Result<Self, PostgresConnectError> {
        let shown = redact(url);
        if !valid_schema(schema) {
            return Err(PostgresConnectError::InvalidSchema {
                url: shown,
                schema: schema.to_owned(),
            });
        }
        let (library_url, tls) =
            tls::split(url).map_err(|message| PostgresConnectError::InvalidUrl {
                url: shown.clone(),
                message,
            })?;
        let mut config = tokio_postgres::Config::from_str(&library_url).map_err(|e| {
            PostgresConnectError::InvalidUrl {
                url: shown.clone(),
                message: e.to_string(),
            }
        })?;
        config.connect_timeout(CONNECT_TIMEOUT);
        let connector = tls::connector(&tls).map_err(|message| PostgresConnectError::Tls {
            url: shown.clone(),
            message,
        })?;
        let manager = Manager::from_config(
            config,
            connector,
            ManagerConfig {
                recycling_method: RecyclingMethod::Fast,
            },
        );
        let pool = Pool::builder(manager)
            .max_size(POOL_SIZE)
            .runtime(Runtime::Tokio1)
            .create_timeout(Some(CONNECT_TIMEOUT))
            .wait_timeout(Some(CONNECT_TIMEOUT))
            .build()
            .map_err(|e| PostgresConnectError::Pool {
                url: shown.clone(),
                message: e.to_string(),
            })?;
        Ok(PostgresStore {
            inner: Arc::new(Inner {
                pool,
                url: shown,
                schema: schema.to_owned(),
                sql: Statements::new(schema),
                schema_sql: SchemaSql::new(schema),
                create,
                ready: OnceCell::new(),
                claims: AtomicU64::new(0),
                round_trips: AtomicU64::new(0),
            }),
        })
    }

    /// The URL this store connects to, with its password replaced by `***`.
    pub fn url(&self) -> &str {
        &self.inner.url
    }

    /// The schema holding this store's tables.
    pub fn schema(&self) -> &str {
        &self.inner.schema
    }

    /// Deletes every record that is garbage at `now` (ms since the Unix epoch) and
    /// returns how many: a completed record that expired at or before `now` — judged also
    /// by the server's clock, so that a `now` ahead of the server deletes nothing the
    /// server still sees live (G1). A record that is not completed (in progress, outcome
    /// unknown, not applied, awaiting approval, approved) is never deleted, however old (S8).
    /// No drift margin is applied: pass a time no later than every caller's clock (for
    /// example `now − GC_DRIFT_MARGIN_MS`) when callers' clocks may lag the server's. Not
    /// bounded by [`OPERATION_TIMEOUT`]: a large backlog may take longer.
    ///
    /// # Errors
    /// [`StoreErrorKind::Unavailable`] when the server cannot be reached or the statement
    /// fails; [`StoreErrorKind::Unsupported`] outside a tokio runtime or when the schema
    /// has another version.
    pub async fn collect_garbage(&self, now: Timestamp) -> Result<u64, StoreError> {
        self.spawn(
            move |inner| async move {
                let client = inner.client().await?;
                let stmt = inner.prepare(&client, &inner.sql.collect_all).await?;
                inner.count();
                client
                    .execute(&stmt, &[&to_sql(now), &0i64])
                    .await
                    .map_err(|e| inner.db_error("collect garbage", e))
            },
            None,
            None,
        )
        .await
    }

    /// Every [`COLLECT_EVERY`] claims of this store: deletes at most [`COLLECT_BATCH`]
    /// garbage records, by the cutoff [`GC_DRIFT_MARGIN_MS`] before the earlier of the
    /// claiming caller's `now` and the server's clock (G1), as a task of its own on the
    /// current tokio runtime (none: no collection). The claim does not wait for it.
    fn collect_now_and_then(&self, now: Timestamp) {
        let claims = self.inner.claims.fetch_add(1, Ordering::Relaxed);
        if claims % COLLECT_EVERY != COLLECT_EVERY - 1 {
            return;
        }
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return;
        };
        let inner = Arc::clone(&self.inner);
        let (now, margin) = (to_sql(now), MARGIN_PAST_CUTOFF);
        drop(runtime.spawn(async move {
            let sql = &inner.sql.collect_some;
            if let Err(error) = inner
                .execute("collect garbage", sql, &[&now, &margin, &COLLECT_BATCH])
                .await
            {
                tracing::warn!(%error, "could not collect expired records");
            }
        }));
    }
}

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.inner.url)
            .field("schema", &self.inner.schema)
            .finish()
    }
}
