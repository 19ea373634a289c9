//! The Redis store: one server shared by every process that connects to it.
//!
//! Enabled by the `redis` cargo feature. Built on the [`redis`] crate (async, tokio,
//! [`ConnectionManager`], which reconnects after a dropped connection). Needs Redis 5 or
//! later (scripts that read the server's clock and then write).
//!
//! # Key layout
//!
//! One hash per idempotency key, at `<prefix>rec:<key>`, where `<prefix>` is
//! [`DEFAULT_PREFIX`] (`idem:`) unless set with [`RedisStore::with_prefix`] and `<key>` is
//! the idempotency key's 64 lowercase hex digits. Scope values and tool names are hashed
//! into the key, so they can never inject a command or reach another key's namespace.
//!
//! | field           | in progress | unknown | completed | value                           |
//! |-----------------|-------------|---------|-----------|---------------------------------|
//! | `v`             | yes         | yes     | yes       | layout, [`REDIS_LAYOUT_VERSION`] |
//! | `fingerprint`   | yes         | yes     | yes       | 64 hex digits (S9)              |
//! | `created_at`    | yes         | yes     | yes       | ms since the Unix epoch         |
//! | `expires_at`    | yes         | yes     | yes       | ms; live while now < it (S8)    |
//! | `fence`         | yes         | yes     | yes       | fencing token (F1)              |
//! | `owner`         | yes         | yes     | no        | owner token, 32 hex digits (S6) |
//! | `lease_until`   | yes         | yes     | no        | lease deadline, ms (S6, L1)     |
//! | `unknown_since` | no          | yes     | no        | ms: outcome unknown since (U1)  |
//! | `outcome`       | no          | no      | yes       | the envelope JSON (S11)         |
//! | `completed_at`  | no          | no      | yes       | ms                              |
//! | `tool`          | yes         | yes     | yes       | the tool's name (P1)            |
//! | `scope`         | yes         | yes     | yes       | scope path text, `""`: global   |
//! | `namespace`     | if any      | if any  | if any    | the engine's namespace (K11)    |
//! | `key_args`      | if audited  | if audited | if audited | canonical key arguments (P2) |
//!
//! Every instant and fence is written as exactly 20 decimal digits (zero-padded `u64`), so
//! the Lua scripts compare instants and increment fences as equal-length strings: exact
//! over the whole `u64` range, where Lua's floating-point numbers would round above 2^53.
//! The scope is the text form of [`ScopePath`](crate::label::ScopePath) (`kind=value`
//! parts joined by `/`, with `%`, `/` and `=` in values percent-encoded); `namespace` and
//! `key_args` are absent when the label has none (P1, P2).
//!
//! ## Layouts (P4)
//!
//! Layout 1 (before fencing tokens and unknown outcomes) had no `fence` and no
//! `unknown_since`; layout 2 (before labels) had no `tool`, `scope`, `namespace` nor
//! `key_args`, and was not indexed. This build reads both, with no label
//! (`Record::label` is `None`); a layout-1 record reads as fence 1. A renewal, a marking as
//! unknown or a completion of a layout-1 record first makes it layout 2 with fence 1 (and
//! leaves a layout-2 record at layout 2); a takeover writes layout 3 with the taker's fence
//! and label, and a claim over an expired record of either layout gets the next fence
//! (2 over layout 1) and writes layout 3. So old records keep replaying and are migrated in
//! place as they are claimed or taken over; records written before the index existed are
//! not listed nor counted until then, or until [`RedisStore::reindex`] adds them (run it
//! once after the upgrade). A record of a layout this build does not know (one a newer
//! build wrote) is refused by every operation with
//! [`StoreErrorKind::Corrupt`](crate::StoreErrorKind::Corrupt) and left untouched. Upgrade
//! every process sharing a prefix together: a build of an earlier layout cannot read
//! records of a later one (it fails closed), but a build from before layout 2 would write
//! a layout-1 record, restarting the fence at 1, when it claims over an expired one, and a
//! build from before layout 3 would write records the index does not list.
//!
//! ## The index (I3)
//!
//! | key                             | type       | members                                   |
//! |---------------------------------|------------|-------------------------------------------|
//! | `<prefix>index`                 | sorted set | every indexed record's key, score `created_at` |
//! | `<prefix>index:tool:<hex>`      | sorted set | the same, for one tool                    |
//! | `<prefix>index:tools`           | set        | the tool names that have a set            |
//! | `<prefix>index:sweep`           | string     | the sweep's position in `<prefix>index`   |
//!
//! `<hex>` is the tool name's UTF-8 bytes in lower-case hex ([`RedisStore::tool_index_key`];
//! records without a label are under the tool `""`, whose set is `<prefix>index:tool:`),
//! so that no tool name can spell another key: the names stay apart from every prefix's
//! records and index. The claim and takeover scripts add the key to both sets (a takeover
//! re-scores it: `created_at` is the takeover's `now`) in the same atomic step that writes
//! the record; release and purge remove it in theirs. Scores are doubles: exact for
//! `created_at` below 2^53 ms (the year 287 000); the listing then filters on the record's
//! own `created_at`, exactly.
//!
//! When Redis deletes an expired record (its own key expiry, G1), its members stay behind
//! until something meets them: a listing, a purge by filter or a count forgets every member
//! whose record is gone that its batches read, and every claim that acquires a key checks
//! two members of `<prefix>index`, from a position that rotates through the set, and
//! forgets those whose record is gone. So the index holds the records Redis holds plus,
//! at most, those deleted since the sweep last passed: it does not grow without bound in
//! a deployment that never lists. Forgetting a member removes it from every tool's set (the
//! tool of a deleted record is not known): O(tools).
//!
//! The scripts derive the index keys from `<prefix>index` and read records of other keys
//! (the sweep, the listing): the store needs one Redis server (or primary), not Redis
//! Cluster.
//!
//! # Operations (S2, S6, S8, F1, L1, U1)
//!
//! Every operation but a read is one Lua script, run with `EVALSHA`:
//!
//! - claim: if the hash is absent or its `expires_at <= now`, write a new in-progress
//!   record with its label, with fence 1 if there was no hash and the expired record's
//!   fence + 1 if there was, index it, sweep two index members, and answer the fence;
//!   otherwise answer the live record.
//! - take over: compare-and-set on the owner and the lease deadline that were read, of a
//!   live record in progress or with an unknown outcome; writes the new owner, lease,
//!   `created_at`, expiry, the caller's fence and label, and re-scores the index members.
//! - renew, mark unknown, complete: compare-and-set on the owner of a live in-progress
//!   record. Renew sets the lease deadline; mark unknown adds `unknown_since` (keeping the
//!   owner and lease); complete replaces owner and lease with the outcome.
//! - release: compare-and-delete on the owner of an in-progress record, and its members.
//! - read: one `HMGET`.
//! - purge (I4): one script: absent (or expired: left to Redis's expiry, so G1 holds and the
//!   next claim continues the fence) → `Absent`; not completed and no `force` → `Kept`;
//!   else delete the record and its members → `Deleted` with the record as it was.
//!
//! Expiry is always decided by comparing `expires_at` with the engine's `now` passed in,
//! never with the server's clock.
//!
//! # Garbage collection (G1)
//!
//! Redis's own key expiry collects garbage; nothing else deletes a record but a release or
//! a purge (I4). A claim, takeover or renewal sets the key's time to live so that Redis
//! keeps the record until its garbage deadline, the later of `expires_at` and
//! `lease_until`, plus [`GC_MARGIN_MS`], has passed **both** by the writing caller's clock
//! (`now`) **and** by the server's clock (`TIME`, read inside the script):
//! `max(deadline − now, deadline − server time, 0) + GC_MARGIN_MS` ms. A caller whose
//! clock runs a year ahead therefore cannot make Redis delete anything early, and a caller
//! whose clock runs behind cannot either. A renewal only ever lengthens the time to live
//! (it covers the new lease); marking the outcome unknown and completing keep it. A record
//! whose garbage deadline lies more than [`GC_MAX_MS`] ahead is kept without a Redis
//! expiry. No operation changes the time to live of a record its caller does not own, and
//! a caller's claims of other keys touch only those keys' records (and the index, whose
//! members of records Redis deleted they forget). A live record is never evicted by idem;
//! configure the server with a `noeviction` (or `volatile-*`-free) `maxmemory-policy` so
//! that Redis does not evict it either.
//!
//! # Inspection and its cost (I3–I5)
//!
//! - [`list`](Store::list) walks the tool's set when the query names a tool, else
//!   `<prefix>index`, newest first (`ZREVRANGEBYSCORE`, whose members of equal score come in
//!   descending key order: the listing order), from the cursor (or `created_before`) down
//!   to `created_from`, in batches of `max(limit + 1, 100)` members (at most 1001). Each
//!   batch is one `EVALSHA` that reads the members' records in the same step; the store
//!   keeps the live ones that match the other filters ([`ListQuery::matches`]) until it
//!   has `limit + 1` (to know whether a next page exists) or the set is exhausted. Cost:
//!   O(log N + members read), where the members read equal the page when only tool and
//!   time filters are given, and can be far more when a namespace, scope or state filter
//!   is selective (each batch scans records that the filter then drops; a filter matching
//!   nothing reads the whole set). A cursor also skips, one by one, the records created in
//!   its millisecond that sort after it.
//! - [`purge`](Store::purge): one `EVALSHA`, O(log N).
//! - [`purge_matching`](Store::purge_matching): walks as a listing does, in batches of
//!   1000 members (outcomes left out), then one `EVALSHA` per matching record: O(members
//!   read + matches) round trips' worth, the purges one after another.
//! - [`stats`](Store::stats): walks all of `<prefix>index` in batches of 1000 members,
//!   outcomes left out: O(records), one `EVALSHA` per 1000 records.
//! - [`RedisStore::reindex`]: `SCAN` over the database's keys, see its documentation.
//!
//! A batch runs as one script on the server, which serves nothing else meanwhile: at most
//! 1001 records are read per batch. A listing is not a snapshot: a record claimed, taken
//! over or deleted between two batches or two pages may or may not appear, but no record
//! appears twice and no record left alone meanwhile is skipped (batches and pages resume
//! from a (`created_at`, key) position, not an offset).
//!
//! # Round trips
//!
//! Every record operation is one round trip: one `EVALSHA` (claim, take over, renew, mark
//! unknown, complete, release, purge) or one `HMGET` (read). The first time a server sees
//! a script (after a restart or `SCRIPT FLUSH`) it answers `NOSCRIPT` and the store sends
//! `SCRIPT LOAD` and the `EVALSHA` again: three round trips, once per script and server.
//! [`Store::round_trips`] counts every command the store sends (clones share the count), so
//! a first execution counts 2 and a replay 1; a listing counts one per batch.
//!
//! # Outages (S10)
//!
//! Connecting and each command time out after 5 s, so a server that stops answering fails
//! a call with [`StoreErrorKind::Unavailable`](crate::StoreErrorKind::Unavailable) within
//! 5 s. While the server is down, a command fails as soon as the [`ConnectionManager`]'s
//! reconnect attempts (two retries with backoff, about 0.5 s) have failed; a command
//! refused that way was never sent, and the store sends it once more, which waits for the
//! reconnect attempt the refusal started (so a call during an outage fails after about 1 s,
//! and the first call after the server is back succeeds). A command that timed out may
//! still be executed by the server later: a claim may then be acquired by nobody, and the
//! key stays in progress until its lease lapses (S6), with no body run before then. What
//! survives a crash of the server is what Redis persisted: run it with `appendonly yes` and
//! `appendfsync always`, so that every reply the store saw is on disk.
//!
//! # Runtime and cancellation
//!
//! Every operation needs a tokio runtime context (the connection is driven by tokio). An
//! operation started outside one fails at once with
//! [`StoreErrorKind::Unsupported`](crate::StoreErrorKind::Unsupported): this is what a sync
//! tool (`run_blocking`) gets outside a runtime, instead of blocking a thread on network
//! I/O. From inside a runtime, call sync tools on the blocking pool
//! (`tokio::task::spawn_blocking`) or make them async.
//!
//! Claims and takeovers run as spawned tasks: if a caller drops the future after the script
//! was sent, and the script then acquired the claim, the store releases it (S7) rather than
//! leaving it in progress until its lease lapses. [`Store::watch`] returns `None`: waiting
//! duplicates poll with backoff (S5), which also notices a record marked unknown.

mod connection;
mod inspect;
mod record;
mod scripts;

use std::fmt;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use redis::aio::ConnectionManager;
use redis::Value;

pub use connection::RedisConnectError;
pub use record::REDIS_LAYOUT_VERSION;

use super::in_flight::Undo;
use super::redact::redact_url as redact;
use super::{
    Claim, ClaimRequest, Completion, ListPage, ListQuery, MarkUnknownRequest, OwnerToken,
    PurgeCounts, PurgeOutcome, Record, RenewRequest, Store, StoreError, StoreFuture, StoreStats,
    TakeoverRequest,
};
use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::IdempotencyKey;
use crate::label::RecordLabel;
use connection::config;
use record::{number_arg, optional_arg, parse_number, FIELDS};
use scripts::as_flag;

/// The key prefix used unless [`RedisStore::with_prefix`] sets another.
pub const DEFAULT_PREFIX: &str = "idem:";

/// How long (ms) after a record's garbage deadline (the later of its expiry and its lease
/// deadline) Redis may delete it, by the writing caller's clock and by the server's: room for
/// clock drift between workers. One hour, the margin all stores keep
/// ([`GC_DRIFT_MARGIN_MS`](super::GC_DRIFT_MARGIN_MS)).
pub const GC_MARGIN_MS: u64 = super::GC_DRIFT_MARGIN_MS;

/// Times to live longer than this (ms, about 100 years) are not set at all: the record is
/// kept without a Redis expiry.
pub const GC_MAX_MS: u64 = 100 * 365 * 86_400_000;

const BACKEND: &str = "redis";

/// A [`Store`] on a Redis server, shared by every process that connects to it with the same
/// key prefix (S2 across processes). See the [module documentation](self) for the key
/// layout, the scripts, expiry and the runtime requirement.
///
/// Cheap to clone: clones share one multiplexed connection.
///
/// ```no_run
/// # extern crate idem_runtime as idem_agent;
/// # async fn demo() -> Result<(), idem_agent::RedisConnectError> {
/// use idem_agent::{Engine, RedisStore, SystemClock};
/// let store = RedisStore::connect("redis://127.0.0.1:6379").await?.with_prefix("billing:");
/// let engine = Engine::new(store, SystemClock);
/// assert_eq!(engine.store().backend(), "redis");
/// # Ok(()) }
/// ```
#[derive(Clone)]
pub struct RedisStore {
    conn: ConnectionManager,
    prefix: String,
    url: String,
    /// Commands sent ([`Store::round_trips`]), shared by clones.
    round_trips: Arc<AtomicU64>,
}

impl RedisStore {
    /// Connects to the server at `url` (`redis://[user[:password]@]host[:port][/db]`) and
    /// waits until the connection is up. Connecting and each later command time out after
    /// 5 s. The prefix is [`DEFAULT_PREFIX`].
    ///
    /// # Errors
    /// [`RedisConnectError::InvalidUrl`] for a malformed URL, [`RedisConnectError::Connect`]
    /// when the server cannot be reached or refuses the connection,
    /// [`RedisConnectError::NoRuntime`] outside a tokio runtime context.
    pub async fn connect(url: &str) -> Result<Self, RedisConnectError> {
        let (client, redacted) = Self::client(url)?;
        let conn = ConnectionManager::new_with_config(client, config())
            .await
            .map_err(|e| RedisConnectError::Connect {
                url: redacted.clone(),
                message: e.to_string(),
            })?;
        Ok(Self::from_parts(conn, redacted))
    }

    /// As [`connect`](Self::connect), but returns at once: the connection is made by the
    /// first operation, whose error reports an unreachable server. For code that cannot
    /// await, such as a store factory; still needs a tokio runtime context.
    ///
    /// # Errors
    /// [`RedisConnectError::InvalidUrl`] for a malformed URL,
    /// [`RedisConnectError::NoRuntime`] outside a tokio runtime context.
    pub fn connect_lazy(url: &str) -> Result<Self, RedisConnectError> {
        let (client, redacted) = Self::client(url)?;
        let conn = ConnectionManager::new_lazy_with_config(client, config()).map_err(|e| {
            RedisConnectError::Connect {
                url: redacted.clone(),
                message: e.to_string(),
            }
        })?;
        Ok(Self::from_parts(conn, redacted))
    }

    fn client(url: &str) -> Result<(redis::Client, String), RedisConnectError> {
        let redacted = redact(url);
        let client = redis::Client::open(url).map_err(|e| RedisConnectError::InvalidUrl {
            url: redacted.clone(),
            message: e.to_string(),
        })?;
        if tokio::runtime::Handle::try_current().is_err() {
            return Err(RedisConnectError::NoRuntime { url: redacted });
        }
        Ok((client, redacted))
    }

    fn from_parts(conn: ConnectionManager, url: String) -> Self {
        RedisStore {
            conn,
            prefix: DEFAULT_PREFIX.to_owned(),
            url,
            round_trips: Arc::new(AtomicU64::new(0)),
        }
    }

    /// The same connection with every key under `prefix` instead (records live at
    /// `<prefix>rec:<key>`). Stores with different prefixes never see each other's records.
    pub fn with_prefix(mut self, prefix: impl Into<String>) -> Self {
        self.prefix = prefix.into();
        self
    }

    /// The key prefix.
    pub fn prefix(&self) -> &str {
        &self.prefix
    }

    /// The server URL, password replaced by `***`.
    pub fn url(&self) -> &str {
        &self.url
    }

    /// The Redis key holding `key`'s record: `<prefix>rec:<key>`.
    pub fn record_key(&self, key: &IdempotencyKey) -> String {
        format!("{}rec:{}", self.prefix, key.as_str())
    }
}

impl fmt::Debug for RedisStore {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("RedisStore")
            .field("url", &self.url)
            .field("prefix", &self.prefix)
            .finish()
    }
}

/// The script arguments of a label (P1): tool, scope (its text form), namespace, key_args.
fn label_args(label: &RecordLabel) -> [String; 4] {
    [
        label.tool.clone(),
        label.scope.to_string(),
        optional_arg(label.namespace.as_deref()),
        optional_arg(label.key_args.as_deref()),
    ]
}

/// A compare-and-set script's answer, or a corrupt-record error naming `what` answered.
fn flag(
    store: &RedisStore,
    key: &IdempotencyKey,
    what: &str,
    reply: &Value,
) -> Result<bool, StoreError> {
    as_flag(reply).ok_or_else(|| store.corrupt(key, &format!("unexpected {what} reply")))
}

impl Store for RedisStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        let key = req.key.clone();
        let mut args = vec![
            number_arg(req.now.as_millis()),
            req.fingerprint.as_str().to_owned(),
            number_arg(req.expires_at.as_millis()),
            req.owner.to_hex(),
            number_arg(req.lease_until.as_millis()),
        ];
        args.extend(label_args(req.label));
        let eval = self.eval("claim", &scripts::CLAIM, &key, args);
        let store = self.clone();
        let undo = Undo {
            key: key.clone(),
            owner: req.owner,
            acquired: |claim: &Claim| matches!(claim, Claim::Acquired { .. }),
        };
        self.run(
            async move {
                match eval.await? {
                    Value::BulkString(fence) => std::str::from_utf8(&fence)
                        .ok()
                        .and_then(parse_number)
                        .map(|fence| Claim::Acquired { fence })
                        .ok_or_else(|| store.corrupt(&key, "the claim answered a bad fence")),
                    reply => match record::decode(reply).map_err(|e| store.corrupt(&key, &e))? {
                        Some(record) => Ok(Claim::Existing(record)),
                        None => Err(store.corrupt(&key, "claim conflicted with an empty record")),
                    },
                }
            },
            Some(undo),
        )
    }

    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool> {
        let mut args = vec![
            req.seen_owner.to_hex(),
            number_arg(req.seen_lease_until.as_millis()),
            number_arg(req.now.as_millis()),
            req.owner.to_hex(),
            number_arg(req.lease_until.as_millis()),
            number_arg(req.expires_at.as_millis()),
            number_arg(req.fence),
        ];
        args.extend(label_args(req.label));
        let eval = self.eval("take over", &scripts::TAKE_OVER, req.key, args);
        let (store, key) = (self.clone(), req.key.clone());
        self.run(
            async move { flag(&store, &key, "takeover", &eval.await?) },
            // No undo: a takeover whose caller went away must not delete the record, whose
            // outcome is unknown (U2); the claim lapses with its lease instead.
            None,
        )
    }

    fn renew<'a>(&'a self, req: RenewRequest<'a>) -> StoreFuture<'a, bool> {
        let args = vec![
            req.owner.to_hex(),
            number_arg(req.now.as_millis()),
            number_arg(req.lease_until.as_millis()),
        ];
        let eval = self.eval("renew", &scripts::RENEW, req.key, args);
        let (store, key) = (self.clone(), req.key.clone());
        self.run(
            async move { flag(&store, &key, "renewal", &eval.await?) },
            None,
        )
    }

    fn mark_unknown<'a>(&'a self, req: MarkUnknownRequest<'a>) -> StoreFuture<'a, bool> {
        let args = vec![
            req.owner.to_hex(),
            number_arg(req.now.as_millis()),
            number_arg(req.since.as_millis()),
        ];
        let eval = self.eval("mark unknown", &scripts::MARK_UNKNOWN, req.key, args);
        let (store, key) = (self.clone(), req.key.clone());
        self.run(
            async move { flag(&store, &key, "mark-unknown", &eval.await?) },
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
        let args = vec![
            owner.to_hex(),
            number_arg(now.as_millis()),
            outcome.as_str().to_owned(),
        ];
        let eval = self.eval("complete", &scripts::COMPLETE, key, args);
        let (store, key) = (self.clone(), key.clone());
        self.run(
            async move {
                Ok(match flag(&store, &key, "completion", &eval.await?)? {
                    true => Completion::Saved,
                    false => Completion::Fenced,
                })
            },
            None,
        )
    }

    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool> {
        let eval = self.eval("release", &scripts::RELEASE, key, vec![owner.to_hex()]);
        let (store, key) = (self.clone(), key.clone());
        self.run(
            async move { flag(&store, &key, "release", &eval.await?) },
            None,
        )
    }

    fn read<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Record>> {
        let hmget = self.hmget(key, &FIELDS);
        let (store, key) = (self.clone(), key.clone());
        self.run(
            async move {
                let record = record::decode(hmget.await?).map_err(|e| store.corrupt(&key, &e))?;
                Ok(record.filter(|record| record.expires_at > now))
            },
            None,
        )
    }

    /// Walks the prefix's index (or the tool's) newest first, in batches of
    /// `max(limit + 1, 100)` members, one `EVALSHA` each; see the
    /// [module documentation](self) for the cost.
    fn list<'a>(&'a self, query: &'a ListQuery, now: Timestamp) -> StoreFuture<'a, ListPage> {
        let (store, query) = (self.clone(), query.clone());
        self.run(async move { store.list_page(&query, now).await }, None)
    }

    /// One `EVALSHA`: compares the state, then deletes the record and its index members.
    fn purge<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeOutcome> {
        let (store, key) = (self.clone(), key.clone());
        self.run(async move { store.purge_key(&key, force, now).await }, None)
    }

    /// Walks the index as [`list`](Store::list) does (batches of 1000 members), then one
    /// `EVALSHA` per matching record.
    fn purge_matching<'a>(
        &'a self,
        query: &'a ListQuery,
        force: bool,
        now: Timestamp,
    ) -> StoreFuture<'a, PurgeCounts> {
        let (store, query) = (self.clone(), query.clone());
        self.run(
            async move { store.purge_all(&query, force, now).await },
            None,
        )
    }

    /// Walks the whole index (batches of 1000 members, outcomes left out): O(records).
    fn stats<'a>(&'a self, now: Timestamp) -> StoreFuture<'a, StoreStats> {
        let store = self.clone();
        self.run(async move { store.count(now).await }, None)
    }

    fn needs_runtime_io(&self) -> bool {
        true
    }

    fn backend(&self) -> &'static str {
        BACKEND
    }

    fn round_trips(&self) -> Option<u64> {
        Some(self.round_trips.load(Ordering::Relaxed))
    }
}

#[cfg(test)]
mod tests {
    use super::redact;

    #[test]
    fn urls_are_redacted() {
        assert_eq!(
            redact("redis://user:secret@host:6379/0"),
            "redis://user:***@host:6379/0"
        );
        assert_eq!(redact("redis://:secret@host"), "redis://:***@host");
        assert_eq!(redact("redis://host:6379"), "redis://host:6379");
        assert_eq!(redact("redis://user@host"), "redis://user@host");
    }
}
