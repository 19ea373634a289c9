//! The store: where claims and saved outcomes live (contract S1–S11).
//!
//! A store keeps one [`Record`] per idempotency key and moves it through
//! `absent → in progress → completed` (S1) with operations that are each **one atomic
//! step** (S2): [`Store::claim`] is insert-if-absent, [`Store::take_over`] and
//! [`Store::complete`] are compare-and-set on the owner token. The protocol that drives
//! these steps lives in [`crate::call`]; stores only keep state.
//!
//! Methods return boxed `Send` futures so that network stores never block an executor
//! thread; in-process stores return futures that are ready at once, which is what lets
//! sync tools drive them without an async runtime.

#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
mod in_flight;
pub mod locator;
#[cfg(feature = "memory")]
mod memory;

pub use locator::{StoreConfigError, StoreLocator, DEFAULT_POSTGRES_SCHEMA, DEFAULT_REDIS_PREFIX};

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
use crate::envelope::Envelope;
use crate::key::{Fingerprint, IdempotencyKey};

/// How long, in milliseconds, after a record expired by the clock of the caller that
/// triggers a garbage collection a store may delete it: room for clock drift between
/// workers. One hour.
///
/// Every store's background garbage collection keeps this margin (the memory store's
/// sweep, SQLite's and PostgreSQL's collection during claims, Redis's `PEXPIRE`), so a
/// caller whose clock runs ahead by less than the margin never deletes another caller's
/// live record (S8). Reads are not affected: they treat a record as absent as soon as it
/// has expired by the reader's clock.
pub const GC_DRIFT_MARGIN_MS: u64 = 3_600_000;

/// The garbage cutoff of a background collection at `now`: records whose `expires_at` is
/// at or before it expired more than [`GC_DRIFT_MARGIN_MS`] before `now` and may be
/// deleted. `None` while `now` is within the margin of the epoch (nothing may be deleted).
pub(crate) fn gc_cutoff(now: Timestamp) -> Option<Timestamp> {
    now.as_millis()
        .checked_sub(GC_DRIFT_MARGIN_MS + 1)
        .map(Timestamp::from_millis)
}

/// A boxed `Send` future returning `Result<T, StoreError>`.
pub type StoreFuture<'a, T> = Pin<Box<dyn Future<Output = Result<T, StoreError>> + Send + 'a>>;

/// A boxed `Send` future that completes when a key's record may have changed.
pub type ChangeSignal = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The random token that identifies one claim's owner; fences stale owners (S6).
#[derive(Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct OwnerToken(u128);

impl OwnerToken {
    /// A fresh random token (122 random bits, UUID v4).
    pub fn random() -> Self {
        OwnerToken(uuid::Uuid::new_v4().as_u128())
    }

    /// The token as a number, for stores that keep it in a column.
    pub fn as_u128(self) -> u128 {
        self.0
    }

    /// A token read back from a store.
    pub fn from_u128(raw: u128) -> Self {
        OwnerToken(raw)
    }

    /// The token's stored text: exactly 32 lower-case hex digits.
    pub fn to_hex(self) -> String {
        format!("{:032x}", self.0)
    }

    /// Decodes a token stored as text, strictly: exactly 32 lower-case hex digits (the
    /// form [`to_hex`](Self::to_hex) writes), so that the decoded token written back
    /// compares equal to the stored text. Anything else (upper case, a sign, other
    /// lengths) is `None`, which stores report as a corrupt record (S10).
    pub fn from_hex(text: &str) -> Option<Self> {
        let canonical = text.len() == 32
            && text
                .bytes()
                .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
        canonical
            .then(|| u128::from_str_radix(text, 16).ok())
            .flatten()
            .map(OwnerToken)
    }
}

impl fmt::Debug for OwnerToken {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "OwnerToken({:032x})", self.0)
    }
}

/// One key's stored state (S1). A record whose `expires_at` is at or before "now" is
/// expired and behaves as absent (S8).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Record {
    /// Fingerprint of the arguments that claimed the key (S9).
    pub fingerprint: Fingerprint,
    /// When the execution that owns (or owned) the record claimed it.
    pub created_at: Timestamp,
    /// `created_at + ttl`: live while now < `expires_at`, expired from that instant (S8).
    pub expires_at: Timestamp,
    /// In progress or completed.
    pub state: RecordState,
}

/// The two live states of a record (S1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordState {
    /// A caller holds the claim and is running the body.
    InProgress {
        /// Who holds the claim.
        owner: OwnerToken,
        /// When the claim lapses: from this instant another caller may take over (S6).
        lease_until: Timestamp,
    },
    /// The body ran and its outcome is saved.
    Completed {
        /// The saved outcome (S11).
        outcome: Envelope,
        /// When the outcome was saved.
        completed_at: Timestamp,
    },
}

/// Arguments of [`Store::claim`].
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    /// The key to claim.
    pub key: &'a IdempotencyKey,
    /// Fingerprint to store with a new claim.
    pub fingerprint: &'a Fingerprint,
    /// Owner of the new claim.
    pub owner: OwnerToken,
    /// The engine clock's "now": decides expiry.
    pub now: Timestamp,
    /// Lease deadline of the new claim.
    pub lease_until: Timestamp,
    /// Expiry of the new record (`now + ttl`).
    pub expires_at: Timestamp,
}

/// What [`Store::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Claim {
    /// The key was absent or expired: a new in-progress record now belongs to the caller.
    Acquired,
    /// A live record exists (in progress or completed, any fingerprint); nothing changed.
    Existing(Record),
}

/// Arguments of [`Store::take_over`]: replace an in-progress record whose lease lapsed.
#[derive(Debug, Clone)]
pub struct TakeoverRequest<'a> {
    /// The key.
    pub key: &'a IdempotencyKey,
    /// The owner seen in the lapsed record: the compare-and-set succeeds only if the
    /// record is still in progress with this owner and this lease deadline.
    pub seen_owner: OwnerToken,
    /// The lease deadline seen in the lapsed record.
    pub seen_lease_until: Timestamp,
    /// The new owner.
    pub owner: OwnerToken,
    /// The engine clock's "now".
    pub now: Timestamp,
    /// The new lease deadline.
    pub lease_until: Timestamp,
    /// The new expiry (`now + ttl`).
    pub expires_at: Timestamp,
}

/// What [`Store::complete`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// The outcome is saved.
    Saved,
    /// The record no longer belongs to this owner (its lease lapsed and another caller
    /// took over, or it expired): nothing was written (fencing, S6).
    Fenced,
}

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
/// Implementations must treat a record with `expires_at <= now` as absent (S8), must never
/// drop a live record early (no LRU eviction), and must compare owner tokens on
/// [`take_over`](Store::take_over), [`complete`](Store::complete) and
/// [`release`](Store::release) (S6).
pub trait Store: Send + Sync + fmt::Debug + 'static {
    /// Insert-if-absent: if the key is absent or expired, store a new in-progress record
    /// owned by `req.owner` and return [`Claim::Acquired`]; otherwise return the live
    /// record untouched as [`Claim::Existing`].
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim>;

    /// Compare-and-set: if the key's record is still in progress with
    /// `req.seen_owner` and `req.seen_lease_until`, make `req.owner` its owner with the
    /// new lease and expiry and return `true`; otherwise change nothing and return `false`.
    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool>;

    /// Compare-and-set: if the key's record is in progress and owned by `owner`, save
    /// `outcome` (keeping `created_at` and `expires_at`) and return [`Completion::Saved`];
    /// otherwise change nothing and return [`Completion::Fenced`].
    fn complete<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        owner: OwnerToken,
        outcome: &'a Envelope,
        now: Timestamp,
    ) -> StoreFuture<'a, Completion>;

    /// Compare-and-delete: if the key's record is in progress and owned by `owner`, remove
    /// it and return `true`; otherwise change nothing and return `false` (S4, S7).
    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool>;

    /// The live record of `key` at `now`, if any.
    fn read<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Record>>;

    /// Best-effort release from a `Drop` guard, which cannot await (S7). In-process
    /// stores release at once; network stores may spawn the release or do nothing and
    /// let the lease lapse. The default does nothing.
    fn release_on_drop(&self, key: &IdempotencyKey, owner: OwnerToken) {
        let _ = (key, owner);
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
    ///   `EVALSHA` (a read one `HMGET`); when the server does not know the script yet
    ///   (`NOSCRIPT`, after a restart or `SCRIPT FLUSH`) the store sends `SCRIPT LOAD` and
    ///   the `EVALSHA` again: 3 round trips. A command that fails because the server cannot
    ///   be reached counts too (it was attempted). Commands run *inside* a script on the
    ///   server are not round trips. Connecting (and reconnecting) is not counted.
    /// - **PostgreSQL**: one statement exchange with the server (bind/execute/sync of a
    ///   prepared statement, or one simple-query batch), plus one for preparing a statement
    ///   the pooled connection has not prepared yet (each statement is prepared once per
    ///   connection). The schema set-up on a store's first use counts its statements
    ///   (`BEGIN`, the advisory lock, the creation batch, the version read and write,
    ///   `COMMIT`). Opening and authenticating pooled connections is not counted.
    /// - **SQLite**: one transaction or single statement against the file (a claim is one
    ///   `BEGIN IMMEDIATE` … `COMMIT` transaction; take over, complete, release, read and
    ///   `SqliteStore::collect_garbage` one statement each). Opening the file and creating
    ///   the schema is not counted.
    /// - **memory**: one store operation (claim, take over, complete, release, read, or a
    ///   release on drop), so that the protocol's counts compare across stores. Subscribing
    ///   to a key's change signal ([`watch`](Store::watch)) is not an operation.
    ///
    /// With any of these stores a first execution of a key costs 2 (claim, complete) and a
    /// replay 1 (claim), once scripts and statements are known to the server (S2, S3).
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
