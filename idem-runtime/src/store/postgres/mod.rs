//! The PostgreSQL store: one database shared by many processes on many machines.
//!
//! Enabled by the `postgres` cargo feature. Built on [`tokio_postgres`] 0.7 with a
//! [`deadpool_postgres`] 0.14 connection pool (16 connections, plain TCP without TLS).
//!
//! # Schema (version 3)
//!
//! Created on first use, inside one transaction holding a transaction-level advisory
//! lock (so that stores starting together do not race), in the schema given to
//! [`PostgresStore::with_schema`] (`idem` by default, see [`DEFAULT_SCHEMA`]):
//!
//! ```sql
//! CREATE SCHEMA IF NOT EXISTS idem;
//! CREATE TABLE idem.meta (
//!     name  TEXT PRIMARY KEY,               -- 'schema_version'
//!     value BIGINT NOT NULL                 -- 3
//! );
//! CREATE TABLE idem.records (
//!     key           TEXT PRIMARY KEY,        -- the idempotency key (64 hex digits)
//!     fingerprint   TEXT NOT NULL,           -- 64 hex digits (S9)
//!     created_at    BIGINT NOT NULL,         -- ms since the Unix epoch
//!     expires_at    BIGINT NOT NULL,         -- ms; live while now < expires_at (S8)
//!     owner         TEXT,                    -- held: owner token, 32 hex digits
//!     lease_until   BIGINT,                  -- held: lease deadline, ms (S6, L1)
//!     outcome       TEXT,                    -- completed: the envelope JSON, verbatim (S11)
//!     completed_at  BIGINT,                  -- completed: ms
//!     fence         BIGINT NOT NULL DEFAULT 1, -- fencing token of the claim (F1)
//!     unknown_since BIGINT,                  -- outcome unknown since, ms (U1)
//!     CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
//!             AND outcome IS NULL AND completed_at IS NULL)
//!         OR (owner IS NULL AND lease_until IS NULL
//!             AND outcome IS NOT NULL AND completed_at IS NOT NULL)),
//!     CONSTRAINT records_fence_positive CHECK (fence >= 1),
//!     CONSTRAINT records_unknown_has_owner CHECK (unknown_since IS NULL OR owner IS NOT NULL),
//!     tool          TEXT,                    -- label (P1): the tool's name
//!     namespace     TEXT,                    -- label: the engine's namespace (K11), if any
//!     scope         TEXT COLLATE "C",        -- label: the scope path's text (`tenant=acme/…`)
//!     key_args      TEXT                     -- label: audited key arguments (P2), if opted in
//! );
//! CREATE INDEX records_expires_at ON idem.records (expires_at);
//! CREATE INDEX records_created ON idem.records (created_at, key COLLATE "C");
//! CREATE INDEX records_tool_created ON idem.records (tool, created_at, key COLLATE "C");
//! CREATE INDEX records_scope ON idem.records (scope);
//! ```
//!
//! A row is in progress when `owner` is set and `unknown_since` is not, outcome unknown
//! when both are set (it keeps the owner and the lease that gave up), and completed when
//! `outcome` is set. The label columns are written by every claim and takeover (P1) and are
//! all `NULL` in a row written before version 3, which reads with no label (P4). Times are
//! whole milliseconds since the Unix epoch, the unit of
//! [`Timestamp`]; an instant at or past `i64::MAX` ms is stored as `i64::MAX` (as in the
//! SQLite store), and so is a fence past `i64::MAX`. The outcome is `TEXT`, not `JSONB`, so
//! that it reads back byte for byte (S11). Keys, fingerprints, owners, outcomes, times and
//! fences are always bound as parameters; the schema name is the only name in the SQL
//! text, and it must be a plain lowercase identifier (checked, then quoted).
//!
//! ## Upgrades from versions 1 and 2 (P4)
//!
//! Version 1 (this crate before fencing tokens) had no `fence` and no `unknown_since`;
//! version 2 (before labels) had neither the label columns nor the listing indexes. A
//! store that finds either upgrades it in place to version 3, in one batch inside the same
//! transaction and under the same advisory lock as the creation (so concurrent first uses
//! upgrade once), version 1 first taking the step to version 2:
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
//! UPDATE idem.meta SET value = 3 WHERE name = 'schema_version' AND value IN (1, 2);
//! ```
//!
//! Every record is kept: in progress, outcome unknown and completed records read back and
//! replay as before, with no label (and, from version 1, fence 1). From PostgreSQL 11 on,
//! adding the columns rewrites and scans no row (a constant default or none; the checks
//! hold for every old row, so they are `NOT VALID`). Building the three indexes reads the
//! table once and blocks writes to it until the set-up commits: for a large table, build
//! them beforehand with `CREATE INDEX CONCURRENTLY` under these names (the upgrade keeps
//! indexes that exist). Stop the processes of the older build before the first process of
//! this one starts: the older build does not write labels (its records would list without
//! one) and a version 1 build knows no fence. A schema of a version other than 1, 2 or 3
//! is refused, and left untouched, with [`StoreErrorKind::Unsupported`].
//!
//! ## Inspection without changes
//!
//! [`PostgresStore::connect_existing`] (the `idem` command's way in, through
//! [`StoreLocator::open_existing`](crate::store::StoreLocator::open_existing)) creates and
//! upgrades nothing: its first use checks with `to_regclass` that `meta` and `records`
//! exist and reads the version, and refuses a missing schema ("no idem schema `…` in the
//! PostgreSQL database …") or another version with [`StoreErrorKind::Unsupported`]. It takes
//! no lock and needs only `USAGE` on the schema and `SELECT` on its tables (`DELETE` to
//! purge).
//!
//! # Operations (S2, S6, S8, F1, L1, U1)
//!
//! - claim: one statement,
//!   `WITH live AS (SELECT … FROM records WHERE key = $1 AND expires_at > now), ins AS
//!   (INSERT … SELECT … WHERE NOT EXISTS (SELECT 1 FROM live) ON CONFLICT (key) DO UPDATE
//!   … WHERE records.expires_at <= now RETURNING fence) SELECT … FROM ins UNION ALL
//!   SELECT … FROM live WHERE NOT EXISTS (SELECT 1 FROM ins)`: inserts if the key is absent
//!   (fence 1) or expired (the expired row's fence + 1), and otherwise returns the live
//!   row, in one round trip. When the statement's snapshot already shows a live row (a
//!   replay, a waiting duplicate) the insert is not attempted at all, so the statement
//!   writes nothing, takes no transaction id and its commit waits for no WAL flush: a
//!   replay is a plain read. The one case it cannot answer is a race with a concurrent
//!   first claim of the same key that committed after this statement's snapshot: the
//!   insert waited for it and wrote nothing, and the snapshot does not show the row. Then
//!   the store reads the row in a second statement (a new snapshot), and retries the claim
//!   if that row is gone again, up to 8 times.
//! - take over, renew, mark unknown, complete, release: one compare-and-set statement
//!   each, `UPDATE/DELETE … WHERE key = $1 AND owner = $2 …`. Take over also compares the
//!   seen lease and accepts a row in progress or outcome unknown, storing the caller's
//!   fence; renew, mark unknown, complete and release accept only a row in progress
//!   (`unknown_since IS NULL`).
//! - claim and take over write the label columns of the call (P1); every read decodes them.
//! - expiry is compared with the `now` the engine passes in, never the server's clock.
//! - garbage collection (G1) is judged by the caller's clock *and* the server's: a row is
//!   deleted only once its `expires_at` and, unless completed, its `lease_until` lie at or
//!   before the cutoff `min(caller's now, server's statement_timestamp()) − margin`.
//!   Every 1024 claims of a store a background task deletes at most 256 rows with the
//!   margin [`GC_DRIFT_MARGIN_MS`] (one hour) + 1 ms and the
//!   claim's `now`, so a caller whose clock runs ahead, even by a year, deletes nothing
//!   that the server's clock still sees live; [`PostgresStore::collect_garbage`] deletes
//!   all rows that are garbage at the `now` it is given, with no margin.
//!
//! Each statement is prepared once per pooled connection and then costs one round trip:
//! a first execution costs two (claim, complete), a replay one (claim), a renewal (the
//! heartbeat) and a mark unknown one each; a listing, a purge, a purge by filter and the
//! counts one each. [`Store::round_trips`] counts every statement
//! exchange, including each prepare of a statement that the connection has not prepared
//! yet and the schema set-up statements (`BEGIN`, advisory lock, creation batch, version
//! read and write, `COMMIT`; an upgrade counts as the creation batch, and a schema of the
//! current version skips both); the background collection's statement counts too;
//! opening and authenticating a pooled connection is not counted. Clones share the count.
//!
//! # Inspection (I3–I5)
//!
//! [`Store::list`], [`Store::purge`], [`Store::purge_matching`] and [`Store::stats`] are one
//! statement each, and judge expiry by the `now` passed in. A listing's statement is built
//! from the filters the query sets, with every value bound as a parameter:
//!
//! ```sql
//! SELECT key, … FROM idem.records
//! WHERE expires_at > $now
//!   AND tool = $tool                                         -- if given
//!   AND namespace = $namespace                               -- if given
//!   AND (scope = $p OR (scope >= $p || '/' AND scope < $p || '0'))   -- a scope prefix
//!   AND outcome IS NOT NULL                                  -- or the other states
//!   AND created_at >= $from AND created_at < $before         -- if given
//!   AND (created_at, key COLLATE "C") < ($cursor_created_at, $cursor_key)  -- next pages
//! ORDER BY created_at DESC, key COLLATE "C" DESC LIMIT $page_size + 1
//! ```
//!
//! The scope prefix is matched on the path's text in byte order (`scope` is `COLLATE
//! "C"`): parts are joined by `/` and values percent-encode `/`, so the paths whose parts
//! begin with the prefix's are the prefix itself and the texts from `prefix/` up to, not
//! including, `prefix0` (`0` is the byte after `/`): an equality and a range of
//! `records_scope`, exact. No `LIKE`: a `_` or `%` in a scope value would be a wildcard
//! there. Without a scope, a listing walks `records_created` (or, with a tool,
//! `records_tool_created`) backwards from the cursor and stops after a page: its cost is
//! the page, plus the rows the other filters skip. With a scope, the matching rows are
//! fetched from `records_scope` and sorted: its cost is the records under the
//! prefix. Each combination of filters set is one statement text, prepared once per
//! pooled connection; [`PostgresStore::explain_list`] shows the server's plan.
//!
//! A purge deletes one key's live row if completed, or with `force` (`DELETE …
//! RETURNING`), and answers the kept row in the same statement; an expired row is left to
//! garbage collection. A purge by filter deletes the matching live rows in one statement
//! (completed ones only without `force`) and counts the ones it kept from the same
//! snapshot; the cursor and page size do not apply. Counts are one `GROUP BY tool, state`
//! over the live rows (a scan: cost in the live records).
//!
//! # Outages and timeouts (S10)
//!
//! Connecting and waiting for a pooled connection time out after 5 s each, and every
//! operation (claim, take over, renew, mark unknown, complete, release, read, list, purge,
//! counts; not a purge by filter, nor [`PostgresStore::collect_garbage`]) fails with
//! [`StoreErrorKind::Unavailable`] after [`OPERATION_TIMEOUT`] (10 s) at most, also when the
//! server stops answering without closing its connections; then the idle pooled
//! connections are closed so that the next operation connects afresh. A server that is down
//! (connection refused or closed) fails an operation at once. Connections the server closed
//! are dropped from the pool when next taken (`RecyclingMethod::Fast` checks
//! `is_closed`), so service resumes with the first operation after the server is back.
//! A claim whose answer never came may still have been applied: the key is then in
//! progress, owned by nobody, until its lease lapses (S6), and no body runs before then.
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
//! or takeover future while its statement is in flight, and the statement then acquires
//! the claim, the store releases it at once (S7). [`Store::watch`] returns `None`: waiting
//! duplicates poll with backoff (S5), so a record marked unknown is seen at their next
//! poll.
//!
//! # Modules
//!
//! `schema` (creation, version check, upgrades), `sql` (the operations' statements),
//! `ops` (connections, prepared statements, the claim, decoding rows), `inspect` (listing,
//! purging and counting: the statements built from filters), `runtime` (each operation a
//! task bounded in time) and `errors` (typed errors).

mod errors;
mod inspect;
mod ops;
mod runtime;
mod schema;
mod sql;

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use tokio::sync::OnceCell;
use tokio_postgres::NoTls;

use super::in_flight::Undo;
use super::redact::redact_url as redact;
use super::sql_row::SqlLabel;
#[cfg(doc)]
use super::StoreErrorKind;
use super::{
    Claim, ClaimRequest, Completion, ListPage, ListQuery, MarkUnknownRequest, OwnerToken,
    PurgeCounts, PurgeOutcome, Record, RenewRequest, Store, StoreError, StoreFuture, StoreStats,
    TakeoverRequest, GC_DRIFT_MARGIN_MS,
};
use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::IdempotencyKey;

pub use errors::PostgresConnectError;
use ops::{fence_to_sql, owner_to_sql, to_sql};
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
/// read, list, purge, counts: waiting for a pooled connection, connecting, and its
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
    /// # Errors
    /// [`PostgresConnectError::InvalidUrl`] when `url` cannot be parsed,
    /// [`PostgresConnectError::Pool`] when the pool cannot be built.
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
        let mut config = tokio_postgres::Config::from_str(url).map_err(|e| {
            PostgresConnectError::InvalidUrl {
                url: shown.clone(),
                message: e.to_string(),
            }
        })?;
        config.connect_timeout(CONNECT_TIMEOUT);
        let manager = Manager::from_config(
            config,
            NoTls,
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
    /// returns how many: a record that expired at or before `now`, and, unless completed,
    /// whose lease lapsed at or before `now` too — judged also by the server's clock, so
    /// that a `now` ahead of the server deletes nothing the server still sees live (G1).
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

impl Store for PostgresStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        self.collect_now_and_then(req.now);
        let key = req.key.as_str().to_owned();
        let fingerprint = req.fingerprint.as_str().to_owned();
        let owner = owner_to_sql(req.owner);
        let times = [
            to_sql(req.now),
            to_sql(req.lease_until),
            to_sql(req.expires_at),
        ];
        let label = SqlLabel::of(req.label);
        let undo = Undo {
            key: req.key.clone(),
            owner: req.owner,
            acquired: |claim: &Claim| matches!(claim, Claim::Acquired { .. }),
        };
        self.run(
            move |inner| async move {
                inner
                    .claim(&key, &fingerprint, &owner, times, &label)
                    .await
            },
            Some(undo),
        )
    }

    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool> {
        let key = req.key.as_str().to_owned();
        let (owner, seen_owner) = (owner_to_sql(req.owner), owner_to_sql(req.seen_owner));
        let times = [
            to_sql(req.lease_until),
            to_sql(req.now),
            to_sql(req.expires_at),
            to_sql(req.seen_lease_until),
        ];
        let fence = fence_to_sql(req.fence);
        let label = SqlLabel::of(req.label);
        self.run(
            move |inner| async move {
                let [lease_until, now, expires_at, seen_lease_until] = times;
                inner
                    .execute(
                        "take over",
                        &inner.sql.take_over,
                        &[
                            &owner,
                            &lease_until,
                            &now,
                            &expires_at,
                            &key,
                            &seen_owner,
                            &seen_lease_until,
                            &fence,
                            &label.tool,
                            &label.namespace,
                            &label.scope,
                            &label.key_args,
                        ],
                    )
                    .await
                    .map(|updated| updated == 1)
            },
            // No undo: a takeover whose caller went away must not delete the record, whose
            // outcome is unknown (U2); the claim lapses with its lease instead.
            None,
        )
    }

    fn renew<'a>(&'a self, req: RenewRequest<'a>) -> StoreFuture<'a, bool> {
        let key = req.key.as_str().to_owned();
        let owner = owner_to_sql(req.owner);
        let (lease_until, now) = (to_sql(req.lease_until), to_sql(req.now));
        self.run(
            move |inner| async move {
                inner
                    .execute(
                        "renew",
                        &inner.sql.renew,
                        &[&lease_until, &key, &owner, &now],
                    )
                    .await
                    .map(|updated| updated == 1)
            },
            None,
        )
    }

    fn mark_unknown<'a>(&'a self, req: MarkUnknownRequest<'a>) -> StoreFuture<'a, bool> {
        let key = req.key.as_str().to_owned();
        let owner = owner_to_sql(req.owner);
        let (since, now) = (to_sql(req.since), to_sql(req.now));
        self.run(
            move |inner| async move {
                inner
                    .execute(
                        "mark the outcome unknown",
                        &inner.sql.mark_unknown,
                        &[&since, &key, &owner, &now],
                    )
                    .await
                    .map(|updated| updated == 1)
            },
            None,
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
        let outcome = outcome.as_str().to_owned();
        let owner = owner_to_sql(owner);
        self.run(
            move |inner| async move {
                inner
                    .execute(
                        "complete",
                        &inner.sql.complete,
                        &[&outcome, &to_sql(now), &key, &owner],
                    )
                    .await
                    .map(|updated| {
                        if updated == 1 {
                            Completion::Saved
                        } else {
                            Completion::Fenced
                        }
                    })
            },
            None,
        )
    }

    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool> {
        let key = key.as_str().to_owned();
        let owner = owner_to_sql(owner);
        self.run(
            move |inner| async move {
                inner
                    .execute("release", &inner.sql.release, &[&key, &owner])
                    .await
                    .map(|deleted| deleted == 1)
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
        self.run(
            move |inner| async move { inner.read(&key, to_sql(now)).await },
            None,
        )
    }

    /// One statement (see [Inspection](self#inspection-i3i5)), served by an index walked
    /// backwards: `records_created`, or `records_tool_created` with a tool; cost about a
    /// page (plus rows the other filters skip). With a scope prefix, an equality and a range
    /// of `records_scope`, then a sort: cost in the records under the prefix. One round
    /// trip, two on a connection's first listing with this combination of filters.
    fn list<'a>(&'a self, query: &'a ListQuery, now: Timestamp) -> StoreFuture<'a, ListPage> {
        let query = query.clone();
        self.run(
            move |inner| async move { inner.list(&query, to_sql(now)).await },
            None,
        )
    }

    /// One statement, `DELETE … WHERE key = $1 … RETURNING` with the kept row in the same
    /// statement, served by the primary key; one round trip (two on a connection's first
    /// purge). An expired row is not deleted (`Absent`): garbage collection removes it,
    /// judged by the server's clock too (G1).
    fn purge<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeOutcome> {
        let key = key.as_str().to_owned();
        self.run(
            move |inner| async move { inner.purge(&key, force, to_sql(now)).await },
            None,
        )
    }

    /// One statement, a `DELETE` of the matching live rows that also counts those kept,
    /// served by the indexes a listing with these filters uses: cost in the matching
    /// records, deleted in one transaction. One round trip (two on a connection's first
    /// purge with this combination of filters). Not bounded by [`OPERATION_TIMEOUT`], as
    /// [`PostgresStore::collect_garbage`]: a large purge may take longer.
    fn purge_matching<'a>(
        &'a self,
        query: &'a ListQuery,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeCounts> {
        let query = query.clone();
        self.spawn(
            move |inner| async move { inner.purge_matching(&query, force, to_sql(now)).await },
            None,
            None,
        )
    }

    /// One statement, `GROUP BY tool, state` over the live rows: a scan of the table (or of
    /// the `expires_at` index's live range), cost in the live records. One round trip (two
    /// on a connection's first count).
    fn stats<'a>(&'a self, now: Timestamp) -> StoreFuture<'a, StoreStats> {
        self.run(
            move |inner| async move { inner.stats(to_sql(now)).await },
            None,
        )
    }

    fn needs_runtime_io(&self) -> bool {
        true
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn round_trips(&self) -> Option<u64> {
        Some(self.inner.round_trips.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::{redact, MARGIN_PAST_CUTOFF};
    use crate::clock::Timestamp;
    use crate::store::{gc_cutoff_by, GC_DRIFT_MARGIN_MS};

    // pins G1: the background collection's SQL cutoff, min(caller's now, server's now) −
    // MARGIN_PAST_CUTOFF, is the shared rule's `gc_cutoff_by`, and deletes nothing (a
    // negative cutoff) where that rule allows nothing
    #[test]
    fn the_collection_cutoff_is_the_shared_rule() {
        let margin = GC_DRIFT_MARGIN_MS;
        let year = 365 * 86_400_000;
        for (now, server) in [
            (0, 0),
            (margin, 10 * margin),
            (margin + 1, 10 * margin),
            (10 * margin, margin + 1),
            (1_796_000_000_000 + year, 1_796_000_000_000),
            (1_796_000_000_000, 1_796_000_000_000 + year),
        ] {
            let sql = i64::try_from(u64::min(now, server)).unwrap() - MARGIN_PAST_CUTOFF;
            match gc_cutoff_by(Timestamp::from_millis(now), Timestamp::from_millis(server)) {
                Some(cutoff) => assert_eq!(sql, cutoff.as_millis() as i64, "{now} {server}"),
                None => assert!(sql < 0, "{now} {server}: no row has a negative time"),
            }
        }
    }

    #[test]
    fn passwords_are_redacted() {
        assert_eq!(
            redact("postgres://agent:s3cr:et@db:5432/x?sslmode=disable"),
            "postgres://agent:***@db:5432/x?sslmode=disable"
        );
        assert_eq!(redact("postgres://agent@db/x"), "postgres://agent@db/x");
        assert_eq!(redact("postgresql://db/x"), "postgresql://db/x");
        assert_eq!(
            redact("host=db user=agent password=hunter2 dbname=x"),
            "host=db user=agent password=*** dbname=x"
        );
    }
}
