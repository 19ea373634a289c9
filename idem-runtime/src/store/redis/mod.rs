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
//! into the key, so they can never inject a command or reach another key's namespace. The
//! fields of a record of layout 5, the one this build writes, by state (in progress,
//! outcome unknown, completed, not applied, awaiting approval, approved):
//!
//! | field             | prog. | unkn. | compl. | n. a. | await. | appr. | value                          |
//! |-------------------|-------|-------|--------|-------|--------|-------|--------------------------------|
//! | `v`               | yes   | yes   | yes    | yes   | yes    | yes   | layout, [`REDIS_LAYOUT_VERSION`] |
//! | `fingerprint`     | yes   | yes   | yes    | yes   | yes    | yes   | 64 hex digits (S9)             |
//! | `created_at`      | yes   | yes   | yes    | yes   | yes    | yes   | ms since the Unix epoch        |
//! | `expires_at`      | yes   | yes   | yes    | yes   | yes    | yes   | ms; completed: live while now < it (S8) |
//! | `fence`           | yes   | yes   | yes    | yes   | yes    | yes   | fencing token (F1)             |
//! | `owner`           | yes   | yes   | no     | no    | no     | no    | owner token, 32 hex digits (S6) |
//! | `lease_until`     | yes   | yes   | no     | no    | no     | no    | lease deadline, ms (S6, L1)    |
//! | `unknown_since`   | no    | yes   | no     | no    | no     | no    | ms: outcome unknown since (U1) |
//! | `outcome`         | no    | no    | yes    | no    | no     | no    | the envelope JSON (S11)        |
//! | `completed_at`    | no    | no    | yes    | no    | no     | no    | ms                             |
//! | `source`          | no    | no    | yes    | no    | no     | no    | `executed`, `reconciled`, `resolved` (U6), `denied` (A3) |
//! | `decided_at`      | no    | no    | no     | yes   | no     | no    | ms: decided not applied (U6)   |
//! | `approval_at`     | no    | no    | no     | no    | yes    | yes   | ms: awaiting approval since (A2, A4), or approved at (A3) |
//! | `approval_until`  | no    | no    | no     | no    | no     | yes   | ms: the approval is valid until (A3, A4) |
//! | `tool`            | yes   | yes   | yes    | yes   | yes    | yes   | the tool's name (P1)           |
//! | `scope`           | yes   | yes   | yes    | yes   | yes    | yes   | scope path text, `""`: global  |
//! | `namespace`       | if any | if any | if any | if any | if any | if any | the engine's namespace (K11) |
//! | `key_args`        | if audited | if audited | if audited | if audited | if audited | if audited | canonical key arguments (P2) |
//! | `history`         | yes   | yes   | yes    | yes   | yes    | yes   | the history's entries (U7)     |
//! | `history_len`     | yes   | yes   | yes    | yes   | yes    | yes   | how many entries `history` holds |
//! | `history_dropped` | if any | if any | if any | if any | if any | if any | how many older entries were dropped |
//!
//! Every instant and fence is written as exactly 20 decimal digits (zero-padded `u64`), so
//! the Lua scripts compare instants and increment fences as equal-length strings: exact
//! over the whole `u64` range, where Lua's floating-point numbers would round above 2^53.
//! The scope is the text form of [`ScopePath`](crate::label::ScopePath) (`kind=value`
//! parts joined by `/`, with `%`, `/` and `=` in values percent-encoded); `namespace` and
//! `key_args` are absent when the label has none (P1, P2); all four are absent from a record
//! that reached layout 4 or 5 in place from layout 1 or 2 (see below).
//!
//! The history (U7) is the entries' JSON lines
//! ([`HistoryEntry::to_json`](crate::store::HistoryEntry::to_json)) joined by `\n`, oldest
//! first; `history_len` (a plain decimal count) is how many lines it holds, at most
//! [`HISTORY_LIMIT`](crate::store::HISTORY_LIMIT) (32): appending to a full history drops its
//! first line and adds one to `history_dropped` (a plain decimal count, absent while none
//! was dropped). The scripts append an entry in the same script that writes the transition
//! it tells of; a claim builds its `claimed` line itself, with the fence and the time
//! written without leading zeros (string patterns, not Lua's doubles), byte for byte what
//! [`HistoryEntry::claimed`](crate::store::HistoryEntry::claimed) writes.
//!
//! ## Layouts (P4)
//!
//! Layout 1 (before fencing tokens and unknown outcomes) had no `fence` and no
//! `unknown_since`; layout 2 (before labels) had no `tool`, `scope`, `namespace` nor
//! `key_args`, and was not indexed; layout 3 (before decisions and histories) had no
//! `source`, `decided_at` nor history fields, and set a Redis expiry on every record; layout
//! 4 (before approvals) had no `approval_at` nor `approval_until` and no source `denied`.
//! This build reads all four: layouts 1 and 2 with no label (`Record::label` is `None`), a
//! layout-1 record as fence 1, a record of layouts 1 to 3 with an empty history and,
//! completed, the source `executed`, and a record of layout 4 as that build read it (an
//! approval field or the source `denied` in a record of layouts 1 to 4 is refused as
//! corrupt). A renewal of a layout-1 record makes it layout 2 with fence 1 (a renewal
//! leaves other layouts as they are); every write that appends to the history (a claim, a
//! takeover, a marking as unknown, a completion, a transition) writes layout 5, with fence
//! 1 if the record had none; claims (over an expired record, or of a key decided not
//! applied, of layout 4 or 5) and takeovers write the label. A record of layout 1 or 2 that
//! reaches layout 5 by a marking, a completion or a transition keeps no label. So old
//! records keep replaying and are migrated in place as they are written; records written
//! before the index existed are not listed nor counted until they are claimed or taken
//! over, or until [`RedisStore::reindex`] adds them, and records of layouts 1 to 3 that are
//! not completed keep the Redis expiry their build set (G1 would have it removed) until
//! they are written again or `reindex` removes it: run it once after the upgrade. A record
//! of a layout this build does not know (one a newer build wrote) is refused by every
//! operation with [`StoreErrorKind::Corrupt`](crate::StoreErrorKind::Corrupt) and left
//! untouched. Upgrade every process sharing a prefix together: a build of an earlier layout
//! cannot read records of a later one (it fails closed), but a build from before layout 2
//! would write a layout-1 record, restarting the fence at 1, when it claims over an expired
//! one, a build from before layout 3 would write records the index does not list, a build
//! from before layout 4 would set Redis expiries on records that are not completed, and a
//! build of layout 4 refuses (as corrupt) every record of layout 5, including the layout-4
//! records this build moved on.
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
//! records and index. The claim and takeover scripts add the key to both sets (a takeover,
//! a claim of a key decided not applied, and the transition that starts the run of an
//! approved key, re-score it: `created_at` is their `now`) in the same atomic step that
//! writes the record; release and purge remove it in theirs. Scores are doubles: exact for
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
//! # Operations (S2, S6, S8, F1, L1, U1, U2, U6, U7, A2–A5)
//!
//! A completed record is live while the caller's `now` is before its `expires_at`; a
//! record in any other state (in progress, outcome unknown, not applied, awaiting approval,
//! approved) is live whatever its `expires_at` (S8). Every operation but a read and a
//! history read is one Lua script, run with `EVALSHA`; each one that moves a record appends
//! the entry of that move to its history in the same script (U7):
//!
//! - claim: if the hash is absent or completed and expired (`expires_at <= now`), write a
//!   new in-progress record with its label, with fence 1 if there was no hash and the
//!   expired record's fence + 1 if there was, whose history is one `claimed` entry, index
//!   it, sweep two index members, and answer the fence. If the record is not applied (U6)
//!   with the claim's fingerprint, make it in progress (owner, lease, `created_at = now`,
//!   the new expiry and label, `decided_at` removed) with its fence + 1, append the
//!   `claimed` entry to its history, re-score its index members, and answer the fence as
//!   reopened (writing layout 5 over a layout-4 record). Otherwise answer the live record:
//!   a record awaiting approval or approved is never acquired nor reopened by a claim (A2,
//!   A4); the engine moves it by a transition.
//! - take over: compare-and-set on the owner and the lease deadline that were read, of a
//!   record in progress or with an unknown outcome; writes the new owner, lease,
//!   `created_at`, expiry, the caller's fence and label, re-scores the index members and
//!   appends the caller's entry.
//! - renew, mark unknown, complete: compare-and-set on the owner of an in-progress record.
//!   Renew sets the lease deadline (and raises `expires_at` to it), with no history entry;
//!   mark unknown adds `unknown_since` (keeping the owner and lease); complete replaces
//!   owner and lease with the outcome, `completed_at` and `source`. Both append the
//!   caller's entry.
//! - release: compare-and-delete on the owner of an in-progress record, and its members;
//!   the history goes with it.
//! - transition (U2, U6, A2–A5): compare-and-set on the fence and the state the caller saw
//!   (in progress with that owner and, if given, lease; outcome unknown with that owner and
//!   lease; not applied; awaiting approval; approved, whatever its `approval_until`); moves
//!   the record to
//!   - outcome unknown (only from in progress);
//!   - completed (`expires_at` raised to the caller's; `decided_at`, `approval_at` and
//!     `approval_until` removed; a denial is this move from awaiting approval, source
//!     `denied`);
//!   - not applied (`decided_at = now`; owner, lease, unknown mark, outcome and approval
//!     fields removed);
//!   - awaiting approval (only from in progress or approved: `approval_at = now`; owner,
//!     lease and `approval_until` removed);
//!   - approved (only from awaiting approval or in progress: `approval_at` and
//!     `approval_until` the decision's; owner and lease removed);
//!   - in progress (only from approved, the run an approval allows: owner, lease, the
//!     caller's fence, `created_at = now`, its expiry; the approval fields removed; the
//!     index members re-scored);
//!
//!   keeps the fence (but in the move to in progress), and appends the caller's entry. A
//!   completed record is never moved.
//! - read: one `HMGET`; history: one `HMGET` of the record's fields and its history
//!   (`None` without a live record).
//! - purge (I4): one script: absent (or completed and expired: left to Redis's expiry, so
//!   G1 holds and the next claim continues the fence) → `Absent`; not completed and no
//!   `force` → `Kept`; else delete the record, its history and its members → `Deleted`
//!   with the record as it was.
//!
//! Expiry is always decided by comparing `expires_at` with the engine's `now` passed in,
//! never with the server's clock.
//!
//! # Garbage collection (G1)
//!
//! Redis's own key expiry collects garbage, and only of completed records; nothing else
//! deletes a record but a release or a purge (I4). A record that is not completed carries
//! no Redis expiry: the claim writes a new key without one, and the scripts that leave or
//! make a record not completed (claim of a not-applied key, takeover, renewal, marking as
//! unknown, transition to outcome unknown, not applied, awaiting approval, approved or in
//! progress) remove any (`PERSIST`), so such a
//! record waits for a call, a decision or a purge however old it is (S8, U2). A completion
//! (and a transition to completed) sets the key's time to live so that Redis keeps the
//! record until its `expires_at` plus [`GC_MARGIN_MS`] has passed **both** by the writing
//! caller's clock (`now`) **and** by the server's clock (`TIME`, read inside the script):
//! `max(expires_at − now, expires_at − server time, 0) + GC_MARGIN_MS` ms. A caller whose
//! clock runs a year ahead therefore cannot make Redis delete anything early, and a caller
//! whose clock runs behind cannot either. A completed record whose deadline lies more than
//! [`GC_MAX_MS`] ahead is kept without a Redis expiry. No operation changes the time to
//! live of a record its caller does not own (or, for a transition, did not see), and a
//! caller's claims of other keys touch only those keys' records (and the index, whose
//! members of records Redis deleted they forget). A live record is never evicted by idem;
//! configure the server with a `noeviction` (or `volatile-*`-free) `maxmemory-policy` so
//! that Redis does not evict it either.
//!
//! # Inspection and its cost (I3–I5, I7)
//!
//! Inspection sees the live records (a completed record until its expiry, any other
//! whatever its expiry) each in its effective state at `now` ([`StateFilter::at`](crate::store::StateFilter::at)): an
//! in-progress record whose lease lapsed at or before `now` is filtered and counted as
//! outcome unknown (I7); a record awaiting approval or approved (no owner, no lease) is
//! filtered and counted in its own state, whatever its `approval_until` (A6).
//!
//! - [`list`](crate::Store::list) walks the tool's set when the query names a tool, else
//!   `<prefix>index`: newest first (`ZREVRANGEBYSCORE`, whose members of equal score come in
//!   descending key order: the listing order), from the cursor (or `created_before`) down
//!   to `created_from`; or, with [`ListQuery::oldest_first`](crate::store::ListQuery::oldest_first), oldest first
//!   (`ZRANGEBYSCORE`, equal scores in ascending key order), from the cursor (or
//!   `created_from`) up to `created_before`. It reads batches of `max(limit + 1, 100)`
//!   members (at most 1001). Each batch is one `EVALSHA` that reads the members' records in
//!   the same step; the store keeps the live ones that match the other filters
//!   ([`ListQuery::matches`](crate::store::ListQuery::matches)) until it has `limit + 1` (to know whether a next page exists)
//!   or the set is exhausted. Cost: O(log N + members read), where the members read equal
//!   the page when only tool and time filters are given, and can be far more when a
//!   namespace, scope or state filter is selective (each batch scans records that the
//!   filter then drops; a filter matching nothing reads the whole set). A cursor also skips,
//!   one by one, the records created in its millisecond that come before it.
//! - [`purge`](crate::Store::purge): one `EVALSHA`, O(log N).
//! - [`purge_matching`](crate::Store::purge_matching): walks as a listing does, in batches of
//!   1000 members (outcomes left out), then one `EVALSHA` per matching record: O(members
//!   read + matches) round trips' worth, the purges one after another.
//! - [`stats`](crate::Store::stats): walks all of `<prefix>index` in batches of 1000 members,
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
//! unknown, complete, release, transition, purge) or one `HMGET` (read, history). Writing
//! the history adds none: each entry is appended by the script of its transition. The
//! first time a server sees a script (after a restart or `SCRIPT FLUSH`) it answers
//! `NOSCRIPT` and the store sends `SCRIPT LOAD` and the `EVALSHA` again: three round trips,
//! once per script and server. [`Store::round_trips`](crate::Store::round_trips) counts every command the store sends
//! (clones share the count), so a first execution counts 2 and a replay 1; a listing
//! counts one per batch.
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
//! was sent, and the script then acquired a first claim, the store releases it (S7) rather
//! than leaving it in progress until its lease lapses. A claim that reopened a key decided
//! not applied is not released that way (a release would delete the decision and the
//! history): it lapses with its lease, and the key is then an unknown outcome (U1).
//! [`Store::watch`](crate::Store::watch) returns `None`: waiting duplicates poll with
//! backoff (S5), which also notices a record marked unknown.

mod connection;
mod index_scripts;
mod inspect;
mod ops;
mod record;
mod scripts;
#[cfg(test)]
mod tests;
mod tls;

use std::fmt;
use std::sync::atomic::AtomicU64;
use std::sync::Arc;

use redis::aio::ConnectionManager;

pub use connection::RedisConnectError;
pub use record::REDIS_LAYOUT_VERSION;

use super::redact::redact_url as redact;
use crate::key::IdempotencyKey;
use connection::config;

/// The key prefix used unless [`RedisStore::with_prefix`] sets another.
pub const DEFAULT_PREFIX: &str = "idem:";

/// How long (ms) after a completed record's expiry Redis may delete it, by the completing
/// caller's clock and by the server's: room for clock drift between workers (a record that
/// is not completed carries no Redis expiry at all). One hour, the margin all stores keep
/// ([`GC_DRIFT_MARGIN_MS`](super::GC_DRIFT_MARGIN_MS)).
pub const GC_MARGIN_MS: u64 = super::GC_DRIFT_MARGIN_MS;

/// Times to live longer than this (ms, about 100 years) are not set at all: the completed
/// record is kept without a Redis expiry.
pub const GC_MAX_MS: u64 = 100 * 365 * 86_400_000;

const BACKEND: &str = "redis";

/// A [`Store`](crate::Store) on a Redis server, shared by every process that connects to it with the same
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
    /// Commands sent ([`Store::round_trips`](crate::Store::round_trips)), shared by clones.
    round_trips: Arc<AtomicU64>,
}

impl RedisStore {
    /// Connects to the server at `url` (`redis://[user[:password]@]host[:port][/db]`) and
    /// waits until the connection is up. Connecting and each later command time out after
    /// 5 s. The prefix is [`DEFAULT_PREFIX`].
    ///
    /// `rediss://` connects over TLS (contract N1), checking the server's certificate
    /// against the system's roots, or the PEM file named by the URL parameter
    /// `ssl_ca_certs`; `ssl_certfile` and `ssl_keyfile` name a client certificate and its
    /// key.
    ///
    /// # Errors
    /// [`RedisConnectError::InvalidUrl`] for a malformed URL (also: a TLS parameter on a
    /// `redis://` URL, or a file it names that cannot be read), [`RedisConnectError::Connect`]
    /// when the server cannot be reached or refuses the connection,
    /// [`RedisConnectError::NoRuntime`] outside a tokio runtime context.
    pub async fn connect(url: &str) -> Result<Self, RedisConnectError> {
        let (client, redacted) = Self::client(url)?;
        let conn = ConnectionManager::new_with_config(client, config())
            .await
            .map_err(|e| RedisConnectError::Connect {
                message: format!("{e}{}", connection::tls_hint(&redacted, &e)),
                url: redacted.clone(),
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
        let invalid = |message: String| RedisConnectError::InvalidUrl {
            url: redacted.clone(),
            message,
        };
        let (library_url, certificates) = tls::split(url).map_err(invalid)?;
        if library_url.starts_with("rediss://") {
            tls::ensure_crypto_provider();
        }
        let client = match certificates {
            None => redis::Client::open(library_url),
            Some(certificates) => redis::Client::build_with_tls(library_url, certificates),
        }
        .map_err(|e| invalid(e.to_string()))?;
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
