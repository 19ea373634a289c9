//! The PostgreSQL store: one database shared by many processes on many machines.
//!
//! Enabled by the `postgres` cargo feature. Built on [`tokio_postgres`] 0.7 with a
//! [`deadpool_postgres`] 0.14 connection pool (16 connections, plain TCP without TLS).
//!
//! # Schema (version 1)
//!
//! Created on first use, inside one transaction holding a transaction-level advisory
//! lock (so that stores starting together do not race), in the schema given to
//! [`PostgresStore::with_schema`] (`idem` by default, see [`DEFAULT_SCHEMA`]):
//!
//! ```sql
//! CREATE SCHEMA IF NOT EXISTS idem;
//! CREATE TABLE idem.meta (
//!     name  TEXT PRIMARY KEY,              -- 'schema_version'
//!     value BIGINT NOT NULL                -- 1
//! );
//! CREATE TABLE idem.records (
//!     key          TEXT PRIMARY KEY,        -- the idempotency key (64 hex digits)
//!     fingerprint  TEXT NOT NULL,           -- 64 hex digits (S9)
//!     created_at   BIGINT NOT NULL,         -- ms since the Unix epoch
//!     expires_at   BIGINT NOT NULL,         -- ms; live while now < expires_at (S8)
//!     owner        TEXT,                    -- in progress: owner token, 32 hex digits
//!     lease_until  BIGINT,                  -- in progress: lease deadline, ms (S6)
//!     outcome      TEXT,                    -- completed: the envelope JSON, verbatim (S11)
//!     completed_at BIGINT,                  -- completed: ms
//!     CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
//!             AND outcome IS NULL AND completed_at IS NULL)
//!         OR (owner IS NULL AND lease_until IS NULL
//!             AND outcome IS NOT NULL AND completed_at IS NOT NULL))
//! );
//! CREATE INDEX records_expires_at ON idem.records (expires_at);
//! ```
//!
//! A row is in progress when `owner` is set and completed when `outcome` is set. Times are
//! whole milliseconds since the Unix epoch, the unit of [`Timestamp`]; an instant at or
//! past `i64::MAX` ms is stored as `i64::MAX` (as in the SQLite store). The outcome is
//! `TEXT`, not `JSONB`, so that it reads back byte for byte (S11). Keys, fingerprints,
//! owners, outcomes and times are always bound as parameters; the schema name is the only
//! name in the SQL text, and it must be a plain lowercase identifier (checked, then
//! quoted).
//!
//! # Operations (S2, S6, S8)
//!
//! - claim: one statement,
//!   `WITH live AS (SELECT … FROM records WHERE key = $1 AND expires_at > now), ins AS
//!   (INSERT … SELECT … WHERE NOT EXISTS (SELECT 1 FROM live) ON CONFLICT (key) DO UPDATE
//!   … WHERE records.expires_at <= now RETURNING …) SELECT … FROM ins UNION ALL SELECT …
//!   FROM live WHERE NOT EXISTS (SELECT 1 FROM ins)`: inserts if the key is absent or
//!   expired, and otherwise returns the live row, in one round trip. When the statement's
//!   snapshot already shows a live row (a replay, a waiting duplicate) the insert is not
//!   attempted at all, so the statement writes nothing, takes no transaction id and its
//!   commit waits for no WAL flush: a replay is a plain read. The one case it
//!   cannot answer is a race with a concurrent first claim of the same key that committed
//!   after this statement's snapshot: the insert waited for it and wrote nothing, and the
//!   snapshot does not show the row. Then the store reads the row in a second statement
//!   (a new snapshot), and retries the claim if that row is gone again, up to 8 times.
//! - take over, complete, release: one compare-and-set statement each,
//!   `UPDATE/DELETE … WHERE key = $1 AND owner = $2 …`.
//! - expiry is compared with the `now` the engine passes in, never the server's clock;
//!   rows are deleted only once expired: every 1024 claims of a store a background task
//!   deletes at most 256 of those that expired more than
//!   [`GC_DRIFT_MARGIN_MS`](super::GC_DRIFT_MARGIN_MS) (one hour) before the claim's
//!   `now` (room for clock drift between callers), and
//!   [`PostgresStore::collect_garbage`] deletes all that expired at the `now` it is given.
//!
//! Each statement is prepared once per pooled connection and then costs one round trip:
//! a first execution costs two (claim, complete), a replay one (claim).
//! [`Store::round_trips`] counts every statement exchange, including each prepare of a
//! statement that the connection has not prepared yet and the schema set-up statements
//! (`BEGIN`, advisory lock, creation batch, version read and write, `COMMIT`); opening and
//! authenticating a pooled connection is not counted. Clones share the count.
//!
//! # Outages and timeouts (S10)
//!
//! Connecting and waiting for a pooled connection time out after 5 s each, and every
//! operation (claim, take over, complete, release, read) fails with
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
//! the claim, the store releases it at once (S7). [`Store::release_on_drop`] spawns the
//! release on the current tokio runtime, if there is one (otherwise the claim lapses with
//! its lease). [`Store::watch`] returns `None`: waiting duplicates poll with backoff (S5).

use std::fmt;
use std::str::FromStr;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use deadpool_postgres::{Manager, ManagerConfig, Pool, RecyclingMethod, Runtime};
use futures_util::future::{select, Either};
use tokio::sync::OnceCell;
use tokio_postgres::types::ToSql;
use tokio_postgres::{NoTls, Row, SimpleQueryMessage};

use super::in_flight::{self, Undo};
use super::locator::redact_url as redact;
use super::{
    gc_cutoff, Claim, ClaimRequest, Completion, OwnerToken, Record, RecordState, Store, StoreError,
    StoreErrorKind, StoreFuture, TakeoverRequest,
};
use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::{Fingerprint, IdempotencyKey};

/// The schema version this build writes and reads (see the module documentation).
pub const POSTGRES_SCHEMA_VERSION: i64 = 1;

/// The schema [`PostgresStore::connect`] uses.
pub const DEFAULT_SCHEMA: &str = "idem";

/// Connections per store.
const POOL_SIZE: usize = 16;

/// How long connecting, or waiting for a free pooled connection, may take.
const CONNECT_TIMEOUT: Duration = Duration::from_secs(5);

/// How long one operation (claim, take over, complete, release, read: waiting for a
/// pooled connection, connecting, and its statements) may take before it fails with
/// [`StoreErrorKind::Unavailable`]: 10 s.
pub const OPERATION_TIMEOUT: Duration = Duration::from_secs(10);

/// How many claims of one store between two garbage collections.
const COLLECT_EVERY: u64 = 1024;

/// How many expired rows one background garbage collection deletes at most.
const COLLECT_BATCH: i64 = 256;

/// How many times a claim retries after racing with a concurrent claim and release.
const CLAIM_ATTEMPTS: usize = 8;

const BACKEND: &str = "postgres";

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

/// A [`Store`] in a PostgreSQL database, shared by every process that connects to it
/// with the same schema name: one execution per key across processes and machines (S2),
/// records that survive restarts of the agents. See the [module documentation](self)
/// for the schema, the statements and the runtime requirements.
///
/// Cheap to clone: clones share one connection pool.
///
/// ```no_run
/// # extern crate idem_runtime as idem;
/// use idem::{Engine, PostgresStore, SystemClock};
/// let store = PostgresStore::connect("postgres://agent:secret@db.internal/agents")?;
/// let engine = Engine::new(store, SystemClock);
/// assert_eq!(engine.store().backend(), "postgres");
/// # Ok::<(), idem::PostgresConnectError>(())
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
    ready: OnceCell<()>,
    claims: AtomicU64,
    /// Statement exchanges with the server ([`Store::round_trips`]).
    round_trips: AtomicU64,
}

/// The statements, with the schema name spliced in once.
struct Statements {
    setup_meta: String,
    read_version: String,
    create_records: String,
    lock: String,
    write_version: String,
    claim: String,
    read_live: String,
    take_over: String,
    complete: String,
    release: String,
    collect_some: String,
    collect_all: String,
}

impl Statements {
    fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        let row = "fingerprint, created_at, expires_at, owner, lease_until, outcome, completed_at";
        Statements {
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
            claim: format!(
                "WITH live AS (
                    SELECT {row} FROM {s}.records WHERE key = $1 AND expires_at > $3
                 ),
                 ins AS (
                    INSERT INTO {s}.records AS r
                        (key, fingerprint, created_at, expires_at, owner, lease_until)
                    SELECT $1::TEXT, $2::TEXT, $3::BIGINT, $4::BIGINT, $5::TEXT, $6::BIGINT
                    WHERE NOT EXISTS (SELECT 1 FROM live)
                    ON CONFLICT (key) DO UPDATE SET
                        fingerprint = EXCLUDED.fingerprint,
                        created_at = EXCLUDED.created_at,
                        expires_at = EXCLUDED.expires_at,
                        owner = EXCLUDED.owner,
                        lease_until = EXCLUDED.lease_until,
                        outcome = NULL,
                        completed_at = NULL
                    WHERE r.expires_at <= $3
                    RETURNING 1
                 )
                 SELECT TRUE AS acquired, NULL::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::TEXT,
                        NULL::BIGINT, NULL::TEXT, NULL::BIGINT
                 FROM ins
                 UNION ALL
                 SELECT FALSE, {row} FROM live WHERE NOT EXISTS (SELECT 1 FROM ins)"
            ),
            read_live: format!(
                "SELECT FALSE, {row} FROM {s}.records WHERE key = $1 AND expires_at > $2"
            ),
            take_over: format!(
                "UPDATE {s}.records SET owner = $1, lease_until = $2, created_at = $3, expires_at = $4
                 WHERE key = $5 AND owner = $6 AND lease_until = $7 AND expires_at > $3"
            ),
            complete: format!(
                "UPDATE {s}.records
                 SET owner = NULL, lease_until = NULL, outcome = $1, completed_at = $2
                 WHERE key = $3 AND owner = $4 AND expires_at > $2"
            ),
            release: format!("DELETE FROM {s}.records WHERE key = $1 AND owner = $2"),
            collect_some: format!(
                "DELETE FROM {s}.records WHERE key IN
                    (SELECT key FROM {s}.records WHERE expires_at <= $1 LIMIT $2)
                 AND expires_at <= $1"
            ),
            collect_all: format!("DELETE FROM {s}.records WHERE expires_at <= $1"),
        }
    }
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

    /// Deletes every record that is expired at `now` (ms since the Unix epoch; S8: live
    /// records are never deleted) and returns how many. No drift margin is applied: `now`
    /// is trusted, so pass a time no later than every caller's clock (for example
    /// `now − GC_DRIFT_MARGIN_MS`) when callers' clocks may differ. Not bounded by
    /// [`OPERATION_TIMEOUT`]: a large backlog may take longer.
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
                    .execute(&stmt, &[&to_sql(now)])
                    .await
                    .map_err(|e| inner.db_error("collect garbage", e))
            },
            None,
            None,
        )
        .await
    }

    /// Runs `op` as a task on the caller's tokio runtime, failing it with
    /// [`StoreErrorKind::Unavailable`] after [`OPERATION_TIMEOUT`]; fails with
    /// [`StoreErrorKind::Unsupported`] outside a runtime.
    ///
    /// `undo` is for operations that may acquire a claim (claim, take over): if the caller
    /// drops the future before `op` finished, and `op` then reports (by `undo.acquired`)
    /// that it acquired the claim, the claim is released at once (S7).
    fn run<T, F, Fut>(&self, op: F, undo: Option<Undo<T>>) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        self.spawn(op, undo, Some(OPERATION_TIMEOUT))
    }

    /// As [`run`](Self::run), with the time bound `limit` (none: unbounded).
    fn spawn<T, F, Fut>(
        &self,
        op: F,
        undo: Option<Undo<T>>,
        limit: Option<Duration>,
    ) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: FnOnce(Arc<Inner>) -> Fut,
        Fut: std::future::Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Box::pin(std::future::ready(Err(StoreError::new(
                BACKEND,
                StoreErrorKind::Unsupported,
                format!(
                    "the PostgreSQL store at {} needs a tokio runtime: call it from async code \
                     inside one (sync tools without a runtime need the memory or SQLite store)",
                    self.inner.url
                ),
            ))));
        };
        let op = op(Arc::clone(&self.inner));
        let task = match limit {
            None => runtime.spawn(op),
            Some(limit) => runtime.spawn(bounded(Arc::clone(&self.inner), op, limit)),
        };
        in_flight::awaited(
            task,
            runtime,
            Arc::new(self.clone()),
            undo,
            BACKEND,
            "a PostgreSQL call",
        )
    }
}

/// `op`, or an [`StoreErrorKind::Unavailable`] error once `limit` has passed without an
/// answer: a server that hangs, or a network that drops packets, never hangs the caller.
///
/// The timer is [`futures_timer`]'s, so that a runtime built without tokio's time driver
/// does not panic here. On timeout, `op` is dropped (its connection goes back to the pool,
/// its statement may still reach the server: a claim may then be acquired by nobody and
/// lapse with its lease, S6, S10), and every idle pooled connection is closed, so that the
/// next operation connects afresh instead of queueing behind a connection that does not
/// answer.
async fn bounded<T>(
    inner: Arc<Inner>,
    op: impl std::future::Future<Output = Result<T, StoreError>>,
    limit: Duration,
) -> Result<T, StoreError> {
    match select(Box::pin(op), futures_timer::Delay::new(limit)).await {
        Either::Left((result, _)) => result,
        Either::Right(((), op)) => {
            // Dropping `op` first returns its connection to the pool, to be closed below.
            drop(op);
            let closed = inner.pool.retain(|_, _| false).removed.len();
            tracing::warn!(url = %inner.url, closed, "no answer from the PostgreSQL server; closed the idle pooled connections");
            Err(StoreError::new(
                BACKEND,
                StoreErrorKind::Unavailable,
                format!(
                    "no answer from {} (schema {}) within {} ms",
                    inner.url,
                    inner.schema,
                    limit.as_millis()
                ),
            ))
        }
    }
}

impl Inner {
    /// Counts one statement exchange ([`Store::round_trips`]).
    fn count(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    /// A pooled connection, creating the schema first if this store has not yet.
    async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        let mut client = self.pool.get().await.map_err(|e| {
            StoreError::new(
                BACKEND,
                StoreErrorKind::Unavailable,
                match &e {
                    deadpool_postgres::PoolError::Backend(e) => {
                        format!("cannot connect to {}: {}", self.url, error_text(e))
                    }
                    e => format!("cannot connect to {}: {e}", self.url),
                },
            )
        })?;
        self.ready
            .get_or_try_init(|| self.set_up(&mut client))
            .await?;
        Ok(client)
    }

    /// Creates the schema if absent, checks its version (see the module documentation).
    async fn set_up(&self, client: &mut deadpool_postgres::Client) -> Result<(), StoreError> {
        // Simple queries only (the schema name is a checked identifier, the version a
        // constant): one round trip each, no one-off prepared statements.
        let failed = |e| self.db_error("create the schema", e);
        self.count();
        let tx = client.transaction().await.map_err(failed)?;
        // Serialises concurrent first uses of one schema name, across processes.
        self.count();
        tx.batch_execute(&self.sql.lock).await.map_err(failed)?;
        self.count();
        tx.batch_execute(&self.sql.setup_meta)
            .await
            .map_err(failed)?;
        self.count();
        let version = tx
            .simple_query(&self.sql.read_version)
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
                tx.batch_execute(&self.sql.create_records)
                    .await
                    .map_err(failed)?;
                self.count();
                tx.batch_execute(&self.sql.write_version)
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

    async fn prepare(
        &self,
        client: &deadpool_postgres::Client,
        sql: &str,
    ) -> Result<tokio_postgres::Statement, StoreError> {
        // A cached statement costs nothing; otherwise preparing is one round trip (the
        // statements use built-in types only, so no type lookups follow). A cache lookup
        // cannot fail, so an error means a prepare was attempted.
        let cached = client.statement_cache.size();
        let prepared = client.prepare_cached(sql).await;
        if prepared.is_err() || client.statement_cache.size() != cached {
            self.count();
        }
        prepared.map_err(|e| self.db_error("prepare a statement", e))
    }

    async fn execute(
        &self,
        op: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let stmt = self.prepare(&client, sql).await?;
        self.count();
        client
            .execute(&stmt, params)
            .await
            .map_err(|e| self.db_error(op, e))
    }

    async fn claim(
        &self,
        key: &str,
        fingerprint: &str,
        owner: &str,
        times: [i64; 3],
    ) -> Result<Claim, StoreError> {
        let [now, lease_until, expires_at] = times;
        let client = self.client().await?;
        let claim = self.prepare(&client, &self.sql.claim).await?;
        for _ in 0..CLAIM_ATTEMPTS {
            self.count();
            let rows = client
                .query(
                    &claim,
                    &[&key, &fingerprint, &now, &expires_at, &owner, &lease_until],
                )
                .await
                .map_err(|e| self.db_error("claim", e))?;
            if let Some(row) = rows.first() {
                return self.decode_claim(key, row);
            }
            // Raced with a concurrent first claim committed after the snapshot: read it.
            let read = self.prepare(&client, &self.sql.read_live).await?;
            self.count();
            let rows = client
                .query(&read, &[&key, &now])
                .await
                .map_err(|e| self.db_error("claim", e))?;
            if let Some(row) = rows.first() {
                return self.decode_claim(key, row);
            }
        }
        Err(StoreError::new(
            BACKEND,
            StoreErrorKind::Unavailable,
            format!(
                "claim of {key} on {}: the key kept changing under {CLAIM_ATTEMPTS} attempts",
                self.url
            ),
        ))
    }

    fn decode_claim(&self, key: &str, row: &Row) -> Result<Claim, StoreError> {
        let acquired: bool = row
            .try_get(0)
            .map_err(|e| self.db_error("read a claim", e))?;
        if acquired {
            Ok(Claim::Acquired)
        } else {
            self.decode(key, row).map(Claim::Existing)
        }
    }

    async fn read(&self, key: &str, now: i64) -> Result<Option<Record>, StoreError> {
        let client = self.client().await?;
        let stmt = self.prepare(&client, &self.sql.read_live).await?;
        self.count();
        let row = client
            .query_opt(&stmt, &[&key, &now])
            .await
            .map_err(|e| self.db_error("read", e))?;
        row.map(|row| self.decode(key, &row)).transpose()
    }

    /// A row of `read_live` (or the live branch of `claim`), columns 1 to 7.
    fn decode(&self, key: &str, row: &Row) -> Result<Record, StoreError> {
        let bad = |e: tokio_postgres::Error| self.corrupt(key, &e.to_string());
        let fingerprint: String = row.try_get(1).map_err(bad)?;
        let created_at: i64 = row.try_get(2).map_err(bad)?;
        let expires_at: i64 = row.try_get(3).map_err(bad)?;
        let owner: Option<String> = row.try_get(4).map_err(bad)?;
        let lease_until: Option<i64> = row.try_get(5).map_err(bad)?;
        let outcome: Option<String> = row.try_get(6).map_err(bad)?;
        let completed_at: Option<i64> = row.try_get(7).map_err(bad)?;
        let time = |value: i64, column: &str| {
            u64::try_from(value)
                .map(Timestamp::from_millis)
                .map_err(|_| self.corrupt(key, &format!("negative {column} {value}")))
        };
        let fingerprint = Fingerprint::from_hex(&fingerprint)
            .ok_or_else(|| self.corrupt(key, "fingerprint is not 64 lowercase hex digits"))?;
        let state = match (owner, lease_until, outcome, completed_at) {
            (Some(owner), Some(lease_until), None, None) => {
                let owner = OwnerToken::from_hex(&owner)
                    .ok_or_else(|| self.corrupt(key, "owner is not 32 lower-case hex digits"))?;
                RecordState::InProgress {
                    owner,
                    lease_until: time(lease_until, "lease_until")?,
                }
            }
            (None, None, Some(outcome), Some(completed_at)) => RecordState::Completed {
                outcome: Envelope::from_stored(outcome),
                completed_at: time(completed_at, "completed_at")?,
            },
            _ => return Err(self.corrupt(key, "neither in progress nor completed")),
        };
        Ok(Record {
            fingerprint,
            created_at: time(created_at, "created_at")?,
            expires_at: time(expires_at, "expires_at")?,
            state,
        })
    }

    /// A failed statement as a store error: its kind by SQLSTATE ([`error_kind`]), its
    /// message the server's ([`error_text`]).
    fn db_error(&self, op: &str, e: tokio_postgres::Error) -> StoreError {
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

    fn corrupt(&self, key: &str, what: &str) -> StoreError {
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

impl fmt::Debug for PostgresStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("PostgresStore")
            .field("url", &self.inner.url)
            .field("schema", &self.inner.schema)
            .finish()
    }
}

/// Whether `schema` is a plain lowercase identifier (safe to quote into SQL) that
/// PostgreSQL accepts for a new schema (`pg_…` names are reserved for the system).
fn valid_schema(schema: &str) -> bool {
    let mut chars = schema.chars();
    matches!(chars.next(), Some('a'..='z' | '_'))
        && chars.all(|c| matches!(c, 'a'..='z' | '0'..='9' | '_'))
        && schema.len() <= 63
        && !schema.starts_with("pg_")
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
fn error_text(e: &tokio_postgres::Error) -> String {
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
    text.push_str(&format!(" [SQLSTATE {}]", db.code().code()));
    text
}

/// A timestamp as a BIGINT (ms), saturating at `i64::MAX`.
fn to_sql(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

fn owner_to_sql(owner: OwnerToken) -> String {
    owner.to_hex()
}

impl Store for PostgresStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        let key = req.key.as_str().to_owned();
        let fingerprint = req.fingerprint.as_str().to_owned();
        let owner = owner_to_sql(req.owner);
        let times = [
            to_sql(req.now),
            to_sql(req.lease_until),
            to_sql(req.expires_at),
        ];
        let collect =
            self.inner.claims.fetch_add(1, Ordering::Relaxed) % COLLECT_EVERY == COLLECT_EVERY - 1;
        // Only rows that expired more than the drift margin before this caller's `now`.
        if let Some(cutoff) = gc_cutoff(req.now).filter(|_| collect) {
            let inner = Arc::clone(&self.inner);
            let now = to_sql(cutoff);
            if let Ok(runtime) = tokio::runtime::Handle::try_current() {
                drop(runtime.spawn(async move {
                    let sql = &inner.sql.collect_some;
                    if let Err(error) = inner
                        .execute("collect garbage", sql, &[&now, &COLLECT_BATCH])
                        .await
                    {
                        tracing::warn!(%error, "could not collect expired records");
                    }
                }));
            }
        }
        let undo = Undo {
            key: req.key.clone(),
            owner: req.owner,
            acquired: |claim: &Claim| matches!(claim, Claim::Acquired),
        };
        self.run(
            move |inner| async move { inner.claim(&key, &fingerprint, &owner, times).await },
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
        let undo = Undo {
            key: req.key.clone(),
            owner: req.owner,
            acquired: |taken: &bool| *taken,
        };
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
                        ],
                    )
                    .await
                    .map(|updated| updated == 1)
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

    fn release_on_drop(&self, key: &IdempotencyKey, owner: OwnerToken) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %key, "no tokio runtime to release the claim on; it lapses with its lease");
            return;
        };
        let store = self.clone();
        let key = key.clone();
        drop(runtime.spawn(async move {
            if let Err(error) = store.release(&key, owner).await {
                tracing::warn!(key = %key, %error, "could not release the claim; it lapses with its lease");
            }
        }));
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
    use super::{redact, valid_schema};

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

    #[test]
    fn schema_names_are_plain_identifiers() {
        for ok in ["idem", "_x", "idem_test_0af3", &"a".repeat(63)] {
            assert!(valid_schema(ok), "{ok}");
        }
        for bad in ["", "9x", "Idem", "a-b", "a\"b", "x; DROP", &"a".repeat(64)] {
            assert!(!valid_schema(bad), "{bad}");
        }
    }
}

#[cfg(test)]
mod error_kind_tests {
    use super::{sqlstate_kind, valid_schema};
    use crate::store::StoreErrorKind;

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
