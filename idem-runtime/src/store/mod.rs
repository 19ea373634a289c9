//! The store: where claims and saved outcomes live (contract S1–S11).
//!
//! A store keeps one [`Record`] per idempotency key and moves it through
//! `absent → in progress → completed` (S1), with a side state `outcome unknown` (U1), using
//! operations that are each **one atomic step** (S2): [`Store::claim`] is
//! insert-if-absent; [`Store::take_over`], [`Store::renew`], [`Store::mark_unknown`],
//! [`Store::complete`] and [`Store::release`] are compare-and-set on the owner token. Every
//! claim and takeover carries a fencing token that strictly increases per key (F1). The
//! protocol that drives these steps lives in [`crate::call`]; stores only keep state.
//!
//! Methods return boxed `Send` futures so that network stores never block an executor
//! thread; in-process stores return futures that are ready at once, which is what lets
//! sync tools drive them without an async runtime.

pub mod history;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
mod in_flight;
mod inspect;
pub mod locator;
#[cfg(feature = "memory")]
mod memory;
mod record;
mod redact;
mod requests;
#[cfg(any(feature = "sqlite", feature = "postgres"))]
mod sql_row;
#[cfg(all(test, any(feature = "sqlite", feature = "postgres", feature = "redis")))]
pub(crate) mod transition_matrix;

pub use history::{
    DecisionKind, History, HistoryEntry, HistoryEvent, UnknownReason, HISTORY_LIMIT,
};
pub use inspect::{
    KeyedRecord, ListCursor, ListCursorError, ListPage, ListQuery, PurgeCounts, PurgeOutcome,
    StateCounts, StateFilter, StoreStats, LIST_LIMIT_MAX,
};
pub use locator::{StoreConfigError, StoreLocator, DEFAULT_POSTGRES_SCHEMA, DEFAULT_REDIS_PREFIX};
pub use record::{Denial, OutcomeSource, OwnerToken, Record, RecordState};
pub use requests::{
    Claim, ClaimRequest, CompleteRequest, Completion, MarkUnknownRequest, RenewRequest, Seen,
    TakeoverRequest, Target, TransitionRequest,
};

#[cfg(feature = "memory")]
pub use memory::MemoryStore;

#[cfg(feature = "sqlite")]
pub mod sqlite;

#[cfg(feature = "sqlite")]
pub use sqlite::{SqliteOpenError, SqliteStore, SQLITE_SCHEMA_VERSION};

#[cfg(feature = "postgres")]
pub mod postgres;

#[cfg(feature = "postgres")]
pub use postgres::{PostgresConnectError, PostgresStore, POSTGRES_SCHEMA_VERSION};
#[cfg(feature = "redis")]
pub mod redis;

#[cfg(feature = "redis")]
pub use self::redis::{RedisConnectError, RedisStore};

use std::fmt;
use std::future::Future;
use std::pin::Pin;

use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::key::IdempotencyKey;

/// How long, in milliseconds, after a record expired a store's background garbage
/// collection may delete it: room for clock drift between workers. One hour.
///
/// Garbage collection never deletes a live record (G1): only a completed record, once its
/// `expires_at` lies more than this margin in the past **by the deleting caller's clock and
/// by the store's own clock** — the server's for PostgreSQL and Redis, this machine's wall
/// clock for the memory and SQLite stores. A worker whose clock runs ahead, by an hour or
/// by a year, therefore deletes nothing that the store's clock still sees live. Reads are
/// not affected: they treat a record as absent as soon as it has expired by the reader's
/// (the engine's) clock (S8).
pub const GC_DRIFT_MARGIN_MS: u64 = 3_600_000;

/// The garbage cutoff of a background collection made by a caller whose clock reads `now`,
/// judged also by this machine's wall clock (`SystemTime`): completed records whose
/// `expires_at` is at or before it may be deleted (G1). `None` while either clock is within the margin of the epoch (nothing may be
/// deleted). For the stores without a clock of their own: memory and SQLite (a build with
/// neither, such as idem-k4's, has no caller outside tests).
#[cfg_attr(not(any(feature = "memory", feature = "sqlite")), allow(dead_code))]
pub(crate) fn gc_cutoff(now: Timestamp) -> Option<Timestamp> {
    gc_cutoff_by(now, crate::clock::system_now())
}

/// [`gc_cutoff`] by two given clocks: the caller's `now` and the store's `store_now`.
#[cfg_attr(not(any(feature = "memory", feature = "sqlite")), allow(dead_code))]
pub(crate) fn gc_cutoff_by(now: Timestamp, store_now: Timestamp) -> Option<Timestamp> {
    now.min(store_now)
        .as_millis()
        .checked_sub(GC_DRIFT_MARGIN_MS + 1)
        .map(Timestamp::from_millis)
}

/// Whether a background collection with cutoff `cutoff` ([`gc_cutoff`]) may delete
/// `record` (G1): it is completed and expired at or before the cutoff. A record that is
/// not completed is never garbage (S8, U2).
#[cfg_attr(not(feature = "memory"), allow(dead_code))]
pub(crate) fn is_garbage(record: &Record, cutoff: Timestamp) -> bool {
    matches!(record.state, RecordState::Completed { .. }) && record.expires_at <= cutoff
}

/// A boxed `Send` future returning `Result<T, StoreError>`.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A boxed `Send` future that completes when a key's record may have changed.
pub type ChangeSignal = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// A store failure (S10). Serializable so that it can travel inside [`crate::Error`].
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[error("{backend} store: {kind}: {message}")]
pub struct StoreError {
    /// Which backend failed (`memory`, `sqlite`, `redis`, `postgres`, …).
    pub backend: String,
    /// What kind of failure.
    pub kind: StoreErrorKind,
    /// The backend's message.
    pub message: String,
}

/// Kinds of [`StoreError`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum StoreErrorKind {
    /// The store could not be reached or timed out: retrying later may succeed.
    Unavailable,
    /// A stored record could not be read back (corrupt or from an unknown format).
    Corrupt,
    /// The store cannot serve this call (for example a network store used from a sync
    /// tool inside an async runtime).
    Unsupported,
}

impl fmt::Display for StoreErrorKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            StoreErrorKind::Unavailable => "unavailable",
            StoreErrorKind::Corrupt => "corrupt record",
            StoreErrorKind::Unsupported => "unsupported",
        })
    }
}

impl StoreError {
    /// A new error.
    pub fn new(
        backend: impl Into<String>,
        kind: StoreErrorKind,
        message: impl Into<String>,
    ) -> Self {
        StoreError {
            backend: backend.into(),
            kind,
            message: message.into(),
        }
    }

    /// Whether retrying later may succeed ([`StoreErrorKind::Unavailable`]).
    pub fn is_transient(&self) -> bool {
        self.kind == StoreErrorKind::Unavailable
    }
}

/// Keeps idempotency records. Every method is one atomic step on one key (S2).
///
/// Implementations must treat a completed record with `expires_at <= now` as absent and
/// never expire one that is not completed ([`Record::is_live`], S8), must never
/// drop a live record early (no LRU eviction), and must compare owner tokens on
/// [`take_over`](Store::take_over), [`complete`](Store::complete) and
/// [`release`](Store::release) (S6).
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// Insert-if-absent: if the key is absent or expired (S8), store a new in-progress
    /// record owned by `req.owner` whose history is one `claimed` entry
    /// ([`HistoryEntry::claimed`]), and return [`Claim::Acquired`] (`reopened: false`). If
    /// the key is decided not applied (U6) with `req.fingerprint`, make it in progress
    /// likewise with the next fence, keeping and appending to its history, and return
    /// `Acquired` with `reopened: true`. Otherwise return the live record untouched as
    /// [`Claim::Existing`].
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim>;

    /// Compare-and-set: if the key's live record is still in progress or outcome unknown
    /// with `req.seen_owner` and `req.seen_lease_until`, make it in progress again, owned
    /// by `req.owner`, with the new lease, `created_at = req.now`, the new expiry and
    /// `req.fence`, append `req.entry` to its history, and return `true`; otherwise change
    /// nothing and return `false`. Whether a takeover is due (a lapsed lease, an unknown
    /// outcome) is the protocol's decision.
    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool>;

    /// Compare-and-set, the heartbeat (L1): if the key's live record is in progress and
    /// owned by `req.owner`, set its lease deadline to `req.lease_until`, raise its expiry
    /// to at least that deadline (a body running past the TTL stays live), and return
    /// `true`; otherwise (taken over, marked unknown, completed, released, expired, absent)
    /// change nothing and return `false`: the owner has lost the claim.
    fn renew<'a>(&'a self, req: RenewRequest<'a>) -> StoreFuture<'a, bool>;

    /// Compare-and-set (U1): if the key's live record is in progress and owned by
    /// `req.owner`, make it outcome unknown with the same owner and lease deadline and
    /// `since = req.since`, append `req.entry` to its history, and return `true`;
    /// otherwise change nothing and return `false`.
    fn mark_unknown<'a>(&'a self, req: MarkUnknownRequest<'a>) -> StoreFuture<'a, bool>;

    /// Compare-and-set: if the key's record is in progress and owned by `req.owner`, save
    /// `req.outcome` with `req.source` (keeping `created_at` and `expires_at`), append
    /// `req.entry` to its history and return [`Completion::Saved`]; otherwise change
    /// nothing and return [`Completion::Fenced`].
    fn complete<'a>(&'a self, req: CompleteRequest<'a>) -> StoreFuture<'a, Completion>;

    /// Compare-and-delete: if the key's record is in progress and owned by `owner`, remove
    /// it (with its history) and return `true`; otherwise change nothing and return
    /// `false` (S4, S7).
    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool>;

    /// Compare-and-set (U2, U6): if the key's live record has fence `req.fence` and is in
    /// the state `req.seen`, move it to `req.target`, append `req.entry` to its history and
    /// return `true`; otherwise change nothing and return `false`. One atomic step, like
    /// every other operation.
    ///
    /// # Errors
    /// The default, for a store that predates decisions:
    /// [`StoreErrorKind::Unsupported`]. The protocol then answers an unknown outcome as
    /// held without marking it (U2), and a decision fails with that error.
    fn transition<'a>(&'a self, req: TransitionRequest<'a>) -> StoreFuture<'a, bool> {
        let _ = req;
        inspect::unsupported(self.backend(), "recording transitions")
    }

    /// The history of `key`'s live record at `now` (U7), `None` without one.
    ///
    /// # Errors
    /// The default: [`StoreErrorKind::Unsupported`].
    fn history<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<History>> {
        let _ = (key, now);
        inspect::unsupported(self.backend(), "reading histories")
    }

    /// The live record of `key` at `now`, if any.
    fn read<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Record>>;

    /// Live records matching `query` at `now`, newest first, one page (I3). Each backend's
    /// rustdoc states what serves it and its cost.
    ///
    /// # Errors
    /// The default, for a store that does not list: [`StoreErrorKind::Unsupported`] (I6).
    fn list<'a>(&'a self, query: &'a ListQuery, now: Timestamp) -> StoreFuture<'a, ListPage> {
        let _ = (query, now);
        inspect::unsupported(self.backend(), "listing records")
    }

    /// Deletes `key`'s record (I4). A record that is not completed (in progress, or its
    /// outcome unknown) is deleted only with `force`; otherwise it is kept and returned as
    /// [`PurgeOutcome::Kept`]. A key without a live record at `now` is
    /// [`PurgeOutcome::Absent`] (an expired row may be deleted on the way).
    ///
    /// # Errors
    /// The default: [`StoreErrorKind::Unsupported`] (I6).
    fn purge<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeOutcome> {
        let _ = (key, force, now);
        inspect::unsupported(self.backend(), "purging records")
    }

    /// [`purge`](Store::purge) for every live record matching `query` (its `limit` and
    /// cursor are ignored): how many were deleted and how many kept for want of `force`.
    ///
    /// # Errors
    /// The default: [`StoreErrorKind::Unsupported`] (I6).
    fn purge_matching<'a>(
        &'a self,
        query: &'a ListQuery,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeCounts> {
        let _ = (query, force, now);
        inspect::unsupported(self.backend(), "purging records")
    }

    /// Counts of live records at `now`, by state and by tool (I5).
    ///
    /// # Errors
    /// The default: [`StoreErrorKind::Unsupported`] (I6).
    fn stats<'a>(&'a self, now: Timestamp) -> StoreFuture<'a, StoreStats> {
        let _ = now;
        inspect::unsupported(self.backend(), "counting records")
    }

    /// A signal that completes when `key`'s record may have changed after this call,
    /// so that waiting duplicates wake without polling (S5). `None` (the default): the
    /// caller polls with backoff instead.
    fn watch(&self, key: &IdempotencyKey) -> Option<ChangeSignal> {
        let _ = key;
        None
    }

    /// Whether this store's futures make progress only while a tokio runtime drives their
    /// I/O (network stores: PostgreSQL, Redis). A sync tool must then not wait for them on a
    /// thread that runtime needs; see [`PreparedCall::run_blocking`](crate::PreparedCall::run_blocking).
    /// The default, `false`, is right for stores whose futures are ready at once or
    /// completed by threads of their own.
    fn needs_runtime_io(&self) -> bool {
        false
    }

    /// The backend's name for errors and logs.
    fn backend(&self) -> &'static str;

    /// How many round trips this store has made to its backend since it was created, or
    /// `None` if the store does not count them (the default). Clones of a store share one
    /// counter. The count only grows (wrapping at `u64::MAX`); measure an operation as the
    /// difference of two readings.
    ///
    /// One round trip is, per backend:
    ///
    /// - **Redis**: one command sent on the connection and its reply. An operation is one
    ///   `EVALSHA` (a read and a history one `HMGET`, a purge and a transition one `EVALSHA`); when the server does not know
    ///   the script yet (`NOSCRIPT`, after a restart or `SCRIPT FLUSH`) the store sends
    ///   `SCRIPT LOAD` and the `EVALSHA` again: 3 round trips. A listing is one `EVALSHA` per
    ///   batch of `max(limit + 1, 100)` index members it reads (one for a page that the
    ///   first batch fills); a purge by filter one per 1000 members read plus one per
    ///   matching record; counts one per 1000 indexed records; `RedisStore::reindex` one per
    ///   `SCAN` call plus one `EVALSHA` per reply that names records. A command that fails
    ///   because the server cannot be reached counts too (it was attempted). Commands run
    ///   *inside* a script on the server are not round trips. Connecting (and reconnecting)
    ///   is not counted.
    /// - **PostgreSQL**: one statement exchange with the server (bind/execute/sync of a
    ///   prepared statement, or one simple-query batch), plus one for preparing a statement
    ///   the pooled connection has not prepared yet (each statement is prepared once per
    ///   connection). The schema set-up on a store's first use counts its statements
    ///   (`BEGIN`, the advisory lock, the creation or upgrade batch, the version read and
    ///   write, `COMMIT`). [`transition`](Store::transition) and [`history`](Store::history)
    ///   are one statement each. [`list`](Store::list), [`purge`](Store::purge),
    ///   [`purge_matching`](Store::purge_matching) and [`stats`](Store::stats) are one
    ///   statement each; a listing and a purge by filter are one statement text per
    ///   combination of filters set, each prepared once per connection. Opening and
    ///   authenticating pooled connections is not counted.
    /// - **SQLite**: one transaction or single statement against the file (a claim is one
    ///   `BEGIN IMMEDIATE` … `COMMIT` transaction; take over, renew, mark unknown, complete,
    ///   release, transition, read, history and `SqliteStore::collect_garbage` one statement
    ///   each; of the
    ///   inspection operations, [`list`](Store::list) and [`stats`](Store::stats) are one
    ///   statement each, [`purge`](Store::purge) and
    ///   [`purge_matching`](Store::purge_matching) one `BEGIN IMMEDIATE` transaction each).
    ///   Opening the file and creating or migrating the schema is not counted.
    /// - **memory**: one store operation (claim, take over, renew, mark unknown, complete,
    ///   release, transition, read), so that the protocol's counts compare across stores. Subscribing
    ///   to a key's change signal ([`watch`](Store::watch)) is not an operation.
    ///
    /// With any of these stores a first execution of a key costs 2 (claim, complete) and a
    /// replay 1 (claim), once scripts and statements are known to the server (S2, S3); a
    /// body that runs longer than its heartbeat adds 1 per renewal (L1). The history (U7) is
    /// written by the same request as each transition and adds nothing.
    fn round_trips(&self) -> Option<u64> {
        None
    }
}

#[cfg(test)]
mod tests {
    use super::{gc_cutoff, OwnerToken, GC_DRIFT_MARGIN_MS};
    use crate::clock::Timestamp;

    // pins S8: background collection keeps the drift margin
    #[test]
    fn gc_cutoff_keeps_the_drift_margin() {
        assert_eq!(gc_cutoff(Timestamp::from_millis(0)), None);
        assert_eq!(gc_cutoff(Timestamp::from_millis(GC_DRIFT_MARGIN_MS)), None);
        // a record that expired at 5 is collected from 5 + margin + 1 on, not before
        assert_eq!(
            gc_cutoff(Timestamp::from_millis(5 + GC_DRIFT_MARGIN_MS)),
            Some(Timestamp::from_millis(4))
        );
        assert_eq!(
            gc_cutoff(Timestamp::from_millis(5 + GC_DRIFT_MARGIN_MS + 1)),
            Some(Timestamp::from_millis(5))
        );
    }

    // pins S6, S10: owner tokens round-trip through their text, and only the canonical text
    // (32 lower-case hex digits) decodes
    #[test]
    fn owner_tokens_decode_strictly() {
        let token = OwnerToken::random();
        assert_eq!(OwnerToken::from_hex(&token.to_hex()), Some(token));
        let hex = OwnerToken::from_u128(0xabc).to_hex();
        assert_eq!(hex, "00000000000000000000000000000abc");
        for bad in [
            "00000000000000000000000000000ABC".to_owned(),
            format!("+{}", &hex[1..]),
            format!("-{}", &hex[1..]),
            hex[1..].to_owned(),
            format!("{hex}0"),
            format!(" {}", &hex[1..]),
            String::new(),
            "0000000000000000000000000000000é".to_owned(),
        ] {
            assert_eq!(OwnerToken::from_hex(&bad), None, "{bad:?}");
        }
    }
}
