//! The Redis store: one server shared by every process that connects to it.
//!
//! Enabled by the `redis` cargo feature. Built on the [`redis`] crate (async, tokio,
//! [`ConnectionManager`], which reconnects after a dropped connection).
//!
//! # Key layout
//!
//! One hash per idempotency key, at `<prefix>rec:<key>`, where `<prefix>` is
//! [`DEFAULT_PREFIX`] (`idem:`) unless set with [`RedisStore::with_prefix`] and `<key>` is
//! the idempotency key's 64 lowercase hex digits. Scope values and tool names are hashed
//! into the key, so they can never inject a command or reach another key's namespace.
//!
//! | field          | in progress | completed | value                                    |
//! |----------------|-------------|-----------|------------------------------------------|
//! | `v`            | yes         | yes       | layout version, [`REDIS_LAYOUT_VERSION`] |
//! | `fingerprint`  | yes         | yes       | 64 hex digits (S9)                       |
//! | `created_at`   | yes         | yes       | ms since the Unix epoch                  |
//! | `expires_at`   | yes         | yes       | ms; live while now < `expires_at` (S8)   |
//! | `owner`        | yes         | no        | owner token, 32 hex digits (S6)          |
//! | `lease_until`  | yes         | no        | lease deadline, ms (S6)                  |
//! | `outcome`      | no          | yes       | the envelope JSON, verbatim (S11)        |
//! | `completed_at` | no          | yes       | ms                                       |
//!
//! Every instant is written as exactly 20 decimal digits (zero-padded `u64` milliseconds),
//! so the Lua scripts compare instants as equal-length strings: exact over the whole `u64`
//! range, where Lua's floating-point numbers would round above 2^53.
//!
//! # Operations (S2, S6, S8)
//!
//! - claim: one Lua script: if the hash is absent or its `expires_at <= now`, write a new
//!   in-progress record and answer "acquired"; otherwise answer the live record.
//! - take over, complete, release: one Lua compare-and-set script each, on the owner token
//!   (take over also on the lease deadline that was read, complete also on expiry).
//! - read: one `HMGET`.
//!
//! Expiry is always decided by comparing `expires_at` with the engine's `now` passed in,
//! never with the server's clock. Redis's own key expiry only collects garbage: a claim or
//! takeover sets `PEXPIRE` to `(expires_at − now) + `[`GC_MARGIN_MS`] (relative, so it does
//! not depend on the server's clock agreeing with the engine's), which is after the record
//! expired for any engine clock that drifts less than the margin from real time. A record
//! whose garbage deadline would lie more than [`GC_MAX_MS`] ahead is kept without a Redis
//! expiry. A live record is never evicted by idem; configure the server with a `noeviction`
//! (or `volatile-*`-free) `maxmemory-policy` so that Redis does not evict it either.
//!
//! # Round trips
//!
//! A claim is one round trip (`EVALSHA`), a completion one, a read one (`HMGET`). The
//! first time a server sees a script (after a restart or `SCRIPT FLUSH`) it answers
//! `NOSCRIPT` and the store sends `SCRIPT LOAD` and the `EVALSHA` again: three round
//! trips, once per script and server. [`Store::round_trips`] counts every command the
//! store sends (clones share the count), so a first execution counts 2 and a replay 1.
//!
//! # Outages (S10)
//!
//! Connecting and each command time out after 5 s, so a server that stops answering fails
//! a call with [`StoreErrorKind::Unavailable`] within 5 s. While the server is down, a
//! command fails as soon as the [`ConnectionManager`]'s reconnect attempts (two retries with
//! backoff, about 0.5 s) have failed; a command refused that way was never sent, and the
//! store sends it once more, which waits for the reconnect attempt the refusal started (so a
//! call during an outage fails after about 1 s, and the first call after the server is back
//! succeeds). A command that timed out may still be executed by the server later: a claim
//! may then be acquired by nobody, and the key stays in progress until its lease lapses
//! (S6), with no body run before then. What survives a crash of the server is what Redis
//! persisted: run it with `appendonly yes` and `appendfsync always`, so that every reply
//! the store saw is on disk.
//!
//! # Runtime and cancellation
//!
//! Every operation needs a tokio runtime context (the connection is driven by tokio). An
//! operation started outside one fails at once with [`StoreErrorKind::Unsupported`]: this is
//! what a sync tool (`run_blocking`) gets outside a runtime, instead of blocking a thread on
//! network I/O. From inside a runtime, call sync tools on the blocking pool
//! (`tokio::task::spawn_blocking`) or make them async.
//!
//! Claims and takeovers run as spawned tasks: if a caller drops the future after the script
//! was sent, and the script then acquired the claim, the store releases it (S7) rather than
//! leaving it in progress until its lease lapses. [`Store::release_on_drop`] spawns the
//! release on the current runtime (without one, the lease lapses). [`Store::watch`] returns
//! `None`: waiting duplicates poll with backoff (S5).

use std::fmt;
use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::LazyLock;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, Script, ServerErrorKind, Value};

use std::sync::Arc;

use super::in_flight::{self, Undo};
use super::locator::redact_url as redact;
use super::{
    Claim, ClaimRequest, Completion, OwnerToken, Record, RecordState, Store, StoreError,
    StoreErrorKind, StoreFuture, TakeoverRequest,
};
use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::{Fingerprint, IdempotencyKey};

/// The key prefix used unless [`RedisStore::with_prefix`] sets another.
pub const DEFAULT_PREFIX: &str = "idem:";

/// The layout version written in each record's `v` field (see the module documentation).
pub const REDIS_LAYOUT_VERSION: u32 = 1;

/// How long (ms) after a record expired, by the engine's clock at write time, Redis may
/// delete it: room for clock drift between workers. One hour, the margin all stores keep
/// ([`GC_DRIFT_MARGIN_MS`](super::GC_DRIFT_MARGIN_MS)).
pub const GC_MARGIN_MS: u64 = super::GC_DRIFT_MARGIN_MS;

/// Garbage deadlines further ahead than this (ms, about 100 years) are not set at all: the
/// record is kept without a Redis expiry.
pub const GC_MAX_MS: u64 = 100 * 365 * 86_400_000;

const BACKEND: &str = "redis";

/// How long connecting, and each command, may take before failing as unavailable.
const TIMEOUT: Duration = Duration::from_secs(5);

/// The fields a read returns, in this order.
const FIELDS: [&str; 8] = [
    "v",
    "fingerprint",
    "created_at",
    "expires_at",
    "owner",
    "lease_until",
    "outcome",
    "completed_at",
];

// KEYS[1] record; ARGV: now, fingerprint, expires_at, owner, lease_until, pexpire ms ('' = none), v
static CLAIM: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local e = redis.call('HGET', KEYS[1], 'expires_at')
if (e and e > ARGV[1]) or ((not e) and redis.call('EXISTS', KEYS[1]) == 1) then
  return redis.call('HMGET', KEYS[1], 'v', 'fingerprint', 'created_at', 'expires_at',
    'owner', 'lease_until', 'outcome', 'completed_at')
end
redis.call('DEL', KEYS[1])
redis.call('HSET', KEYS[1], 'v', ARGV[7], 'fingerprint', ARGV[2], 'created_at', ARGV[1],
  'expires_at', ARGV[3], 'owner', ARGV[4], 'lease_until', ARGV[5])
if ARGV[6] ~= '' then redis.call('PEXPIRE', KEYS[1], ARGV[6]) end
return 1
",
    )
});

// KEYS[1]; ARGV: seen owner, seen lease_until, now, owner, lease_until, expires_at, pexpire ms
static TAKE_OVER: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local r = redis.call('HMGET', KEYS[1], 'owner', 'lease_until', 'expires_at')
if r[1] == ARGV[1] and r[2] == ARGV[2] and r[3] and r[3] > ARGV[3] then
  redis.call('HSET', KEYS[1], 'owner', ARGV[4], 'lease_until', ARGV[5], 'created_at', ARGV[3],
    'expires_at', ARGV[6])
  if ARGV[7] ~= '' then redis.call('PEXPIRE', KEYS[1], ARGV[7])
  else redis.call('PERSIST', KEYS[1]) end
  return 1
end
return 0
",
    )
});

// KEYS[1]; ARGV: owner, now, outcome
static COMPLETE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local r = redis.call('HMGET', KEYS[1], 'owner', 'expires_at')
if r[1] == ARGV[1] and r[2] and r[2] > ARGV[2] then
  redis.call('HDEL', KEYS[1], 'owner', 'lease_until')
  redis.call('HSET', KEYS[1], 'outcome', ARGV[3], 'completed_at', ARGV[2])
  return 1
end
return 0
",
    )
});

// KEYS[1]; ARGV: owner
const RELEASE_SOURCE: &str = r"
if redis.call('HGET', KEYS[1], 'owner') == ARGV[1] then
  redis.call('DEL', KEYS[1])
  return 1
end
return 0
";

static RELEASE: LazyLock<Script> = LazyLock::new(|| Script::new(RELEASE_SOURCE));

/// Why [`RedisStore::connect`] or [`RedisStore::connect_lazy`] failed. Each variant names
/// the URL with any password replaced by `***`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum RedisConnectError {
    /// The URL is not a Redis URL (`redis://[user[:password]@]host[:port][/db]`).
    #[error("invalid Redis URL {url}: {message}")]
    InvalidUrl {
        /// The URL, password redacted.
        url: String,
        /// The client's message.
        message: String,
    },
    /// The server could not be reached, refused the connection or the credentials, or did
    /// not answer within 5 s.
    #[error("cannot connect to the Redis store at {url}: {message}")]
    Connect {
        /// The URL, password redacted.
        url: String,
        /// The client's message.
        message: String,
    },
    /// Called outside a tokio runtime context: the connection needs one.
    #[error("the Redis store at {url} needs a tokio runtime context")]
    NoRuntime {
        /// The URL, password redacted.
        url: String,
    },
}

impl From<RedisConnectError> for StoreError {
    /// An invalid URL or a missing runtime is [`StoreErrorKind::Unsupported`]; a failed
    /// connection is [`StoreErrorKind::Unavailable`].
    fn from(error: RedisConnectError) -> Self {
        let kind = match error {
            RedisConnectError::Connect { .. } => StoreErrorKind::Unavailable,
            _ => StoreErrorKind::Unsupported,
        };
        StoreError::new(BACKEND, kind, error.to_string())
    }
}

/// A [`Store`] on a Redis server, shared by every process that connects to it with the same
/// key prefix (S2 across processes). See the [module documentation](self) for the key
/// layout, the scripts, expiry and the runtime requirement.
///
/// Cheap to clone: clones share one multiplexed connection.
///
/// ```no_run
/// # extern crate idem_runtime as idem;
/// # async fn demo() -> Result<(), idem::RedisConnectError> {
/// use idem::{Engine, RedisStore, SystemClock};
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

    /// Runs one script invocation on the connection: `EVALSHA`, and on `NOSCRIPT`
    /// `SCRIPT LOAD` and `EVALSHA` again, counting each command sent as a round trip.
    /// `what` names the operation in errors.
    fn eval(
        &self,
        what: &'static str,
        script: &'static Script,
        redis_key: String,
        args: Vec<String>,
    ) -> impl Future<Output = Result<Value, StoreError>> + Send + 'static {
        let mut conn = self.conn.clone();
        let url = self.url.clone();
        let round_trips = Arc::clone(&self.round_trips);
        async move {
            let mut evalsha = redis::cmd("EVALSHA");
            evalsha
                .arg(script.get_hash())
                .arg(1)
                .arg(redis_key)
                .arg(args);
            match send(&mut conn, &evalsha, &round_trips).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    round_trips.fetch_add(1, Ordering::Relaxed);
                    script
                        .load_async(&mut conn)
                        .await
                        .map_err(|e| redis_error(&url, what, e))?;
                    send(&mut conn, &evalsha, &round_trips)
                        .await
                        .map_err(|e| redis_error(&url, what, e))
                }
                result => result.map_err(|e| redis_error(&url, what, e)),
            }
        }
    }

    /// Runs `op`, failing with [`StoreErrorKind::Unsupported`] outside a tokio runtime.
    /// With `undo`, `op` runs as a spawned task, and a result that acquired a claim nobody
    /// awaits any more is released (S7).
    fn run<T, F>(&self, op: F, undo: Option<Undo<T>>) -> StoreFuture<'static, T>
    where
        T: Send + 'static,
        F: Future<Output = Result<T, StoreError>> + Send + 'static,
    {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            return Box::pin(std::future::ready(Err(self.no_runtime())));
        };
        let Some(undo) = undo else {
            return Box::pin(op);
        };
        let task = runtime.spawn(op);
        in_flight::awaited(
            task,
            runtime,
            Arc::new(self.clone()),
            Some(undo),
            BACKEND,
            "a Redis call",
        )
    }

    fn no_runtime(&self) -> StoreError {
        StoreError::new(
            BACKEND,
            StoreErrorKind::Unsupported,
            format!(
                "the Redis store at {} needs a tokio runtime context; a sync tool must run on \
                 a runtime's blocking pool (tokio::task::spawn_blocking) or be made async",
                self.url
            ),
        )
    }

    fn corrupt(&self, key: &IdempotencyKey, what: &str) -> StoreError {
        StoreError::new(
            BACKEND,
            StoreErrorKind::Corrupt,
            format!(
                "record {}rec:{} at {}: {what}",
                self.prefix,
                key.as_str(),
                self.url
            ),
        )
    }

    /// Decodes the fields of [`FIELDS`] as returned by `HMGET`; `None` when the hash is
    /// absent (every field nil).
    fn decode(&self, key: &IdempotencyKey, value: Value) -> Result<Option<Record>, StoreError> {
        let Value::Array(items) = value else {
            return Err(self.corrupt(key, "unexpected reply shape"));
        };
        if items.len() != FIELDS.len() {
            return Err(self.corrupt(key, "unexpected number of fields"));
        }
        let mut fields: Vec<Option<String>> = Vec::with_capacity(FIELDS.len());
        for (item, name) in items.into_iter().zip(FIELDS) {
            fields.push(match item {
                Value::Nil => None,
                Value::BulkString(bytes) => Some(
                    String::from_utf8(bytes)
                        .map_err(|_| self.corrupt(key, &format!("{name} is not UTF-8")))?,
                ),
                _ => return Err(self.corrupt(key, &format!("{name} is not a string"))),
            });
        }
        if fields.iter().all(Option::is_none) {
            return Ok(None);
        }
        let mut it = fields.into_iter();
        let mut next = || it.next().flatten();
        let (v, fingerprint, created_at, expires_at) = (next(), next(), next(), next());
        let (owner, lease_until, outcome, completed_at) = (next(), next(), next(), next());
        if v.as_deref() != Some(REDIS_LAYOUT_VERSION.to_string().as_str()) {
            return Err(self.corrupt(key, &format!("unknown layout version {v:?}")));
        }
        let time = |value: Option<String>, name: &str| {
            value
                .filter(|s| s.len() == 20 && s.bytes().all(|b| b.is_ascii_digit()))
                .and_then(|s| s.parse::<u64>().ok())
                .map(Timestamp::from_millis)
                .ok_or_else(|| self.corrupt(key, &format!("{name} is not 20 decimal digits")))
        };
        let fingerprint = fingerprint
            .as_deref()
            .and_then(Fingerprint::from_hex)
            .ok_or_else(|| self.corrupt(key, "fingerprint is not 64 lowercase hex digits"))?;
        let state = match (owner, lease_until, outcome, completed_at) {
            (Some(owner), lease_until @ Some(_), None, None) => RecordState::InProgress {
                owner: OwnerToken::from_hex(&owner)
                    .ok_or_else(|| self.corrupt(key, "owner is not 32 lower-case hex digits"))?,
                lease_until: time(lease_until, "lease_until")?,
            },
            (None, None, Some(outcome), completed_at @ Some(_)) => RecordState::Completed {
                outcome: Envelope::from_stored(outcome),
                completed_at: time(completed_at, "completed_at")?,
            },
            _ => return Err(self.corrupt(key, "neither in progress nor completed")),
        };
        Ok(Some(Record {
            fingerprint,
            created_at: time(created_at, "created_at")?,
            expires_at: time(expires_at, "expires_at")?,
            state,
        }))
    }
}

fn config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(TIMEOUT))
        .set_response_timeout(Some(TIMEOUT))
        .set_number_of_retries(2)
}

/// Whether `e` says the connection could not be made, so the command was never sent and
/// sending it again is safe. The connection manager answers the first command after an
/// outage with the failure of its last reconnect attempt (made while the server was down)
/// and starts a new attempt; the store then sends the command once more, which waits for
/// that attempt: service resumes with the first call after the server is back.
fn never_sent(e: &redis::RedisError) -> bool {
    e.is_connection_refusal()
}

/// Sends `cmd`, and once more if the connection manager refused it without sending it
/// ([`never_sent`]); counts each command that reached the server's connection as one round
/// trip.
async fn send(
    conn: &mut ConnectionManager,
    cmd: &redis::Cmd,
    round_trips: &AtomicU64,
) -> redis::RedisResult<Value> {
    let mut reply = cmd.query_async::<Value>(conn).await;
    if matches!(&reply, Err(e) if never_sent(e)) {
        reply = cmd.query_async::<Value>(conn).await;
    }
    if !matches!(&reply, Err(e) if never_sent(e)) {
        round_trips.fetch_add(1, Ordering::Relaxed);
    }
    reply
}

/// A failed command as a store error: a `WRONGTYPE` reply (a value of another type at a
/// record's key, which no retry can fix) is [`StoreErrorKind::Corrupt`]; anything else
/// (connection lost, timeout, server busy) is [`StoreErrorKind::Unavailable`].
fn redis_error(url: &str, what: &str, e: redis::RedisError) -> StoreError {
    let kind = if e.code() == Some("WRONGTYPE") {
        StoreErrorKind::Corrupt
    } else {
        StoreErrorKind::Unavailable
    };
    StoreError::new(BACKEND, kind, format!("{what} on {url}: {e}"))
}

/// An instant as 20 zero-padded decimal digits (see the module documentation).
fn time_arg(t: Timestamp) -> String {
    format!("{:020}", t.as_millis())
}

fn owner_hex(owner: OwnerToken) -> String {
    owner.to_hex()
}

/// The relative garbage deadline (ms) of a record expiring at `expires_at`, written at
/// `now`; empty when it would lie more than [`GC_MAX_MS`] ahead (no Redis expiry).
fn gc_arg(now: Timestamp, expires_at: Timestamp) -> String {
    let ms = expires_at
        .as_millis()
        .saturating_sub(now.as_millis())
        .saturating_add(GC_MARGIN_MS);
    if ms > GC_MAX_MS {
        String::new()
    } else {
        ms.to_string()
    }
}

fn as_flag(value: &Value) -> Option<bool> {
    match value {
        Value::Int(1) => Some(true),
        Value::Int(0) => Some(false),
        _ => None,
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

impl Store for RedisStore {
    fn claim<'a>(&'a self, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        let key = req.key.clone();
        let args = vec![
            time_arg(req.now),
            req.fingerprint.as_str().to_owned(),
            time_arg(req.expires_at),
            owner_hex(req.owner),
            time_arg(req.lease_until),
            gc_arg(req.now, req.expires_at),
            REDIS_LAYOUT_VERSION.to_string(),
        ];
        let eval = self.eval("claim", &CLAIM, self.record_key(&key), args);
        let store = self.clone();
        let undo = Undo {
            key: key.clone(),
            owner: req.owner,
            acquired: |claim: &Claim| matches!(claim, Claim::Acquired),
        };
        self.run(
            async move {
                let reply = eval.await?;
                if as_flag(&reply) == Some(true) {
                    return Ok(Claim::Acquired);
                }
                match store.decode(&key, reply)? {
                    Some(record) => Ok(Claim::Existing(record)),
                    None => Err(store.corrupt(&key, "claim conflicted with an empty record")),
                }
            },
            Some(undo),
        )
    }

    fn take_over<'a>(&'a self, req: TakeoverRequest<'a>) -> StoreFuture<'a, bool> {
        let args = vec![
            owner_hex(req.seen_owner),
            time_arg(req.seen_lease_until),
            time_arg(req.now),
            owner_hex(req.owner),
            time_arg(req.lease_until),
            time_arg(req.expires_at),
            gc_arg(req.now, req.expires_at),
        ];
        let eval = self.eval("take over", &TAKE_OVER, self.record_key(req.key), args);
        let (store, key) = (self.clone(), req.key.clone());
        let undo = Undo {
            key: req.key.clone(),
            owner: req.owner,
            acquired: |taken: &bool| *taken,
        };
        self.run(
            async move {
                let reply = eval.await?;
                as_flag(&reply).ok_or_else(|| store.corrupt(&key, "unexpected takeover reply"))
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
        let args = vec![owner_hex(owner), time_arg(now), outcome.as_str().to_owned()];
        let eval = self.eval("complete", &COMPLETE, self.record_key(key), args);
        let (store, key) = (self.clone(), key.clone());
        self.run(
            async move {
                match as_flag(&eval.await?) {
                    Some(true) => Ok(Completion::Saved),
                    Some(false) => Ok(Completion::Fenced),
                    None => Err(store.corrupt(&key, "unexpected completion reply")),
                }
            },
            None,
        )
    }

    fn release<'a>(&'a self, key: &'a IdempotencyKey, owner: OwnerToken) -> StoreFuture<'a, bool> {
        let eval = self.eval(
            "release",
            &RELEASE,
            self.record_key(key),
            vec![owner_hex(owner)],
        );
        let (store, key) = (self.clone(), key.clone());
        self.run(
            async move {
                as_flag(&eval.await?).ok_or_else(|| store.corrupt(&key, "unexpected release reply"))
            },
            None,
        )
    }

    fn read<'a>(
        &'a self,
        key: &'a IdempotencyKey,
        now: Timestamp,
    ) -> StoreFuture<'a, Option<Record>> {
        let mut conn = self.conn.clone();
        let store = self.clone();
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.record_key(key)).arg(&FIELDS[..]);
        let key = key.clone();
        let round_trips = Arc::clone(&self.round_trips);
        self.run(
            async move {
                let reply = send(&mut conn, &cmd, &round_trips)
                    .await
                    .map_err(|e| redis_error(&store.url, "read", e))?;
                Ok(store
                    .decode(&key, reply)?
                    .filter(|record| record.expires_at > now))
            },
            None,
        )
    }

    /// Sends the release (`EVAL` of the release script, so no `NOSCRIPT` retry can reorder
    /// it) on the connection before returning, so that any later command of this store
    /// sees the key released; the reply is awaited by a task spawned on the current
    /// runtime. Without a runtime the claim lapses with its lease.
    fn release_on_drop(&self, key: &IdempotencyKey, owner: OwnerToken) {
        let Ok(runtime) = tokio::runtime::Handle::try_current() else {
            tracing::warn!(key = %key, "no tokio runtime to release the claim on; it lapses with its lease");
            return;
        };
        let mut cmd = redis::cmd("EVAL");
        cmd.arg(RELEASE_SOURCE)
            .arg(1)
            .arg(self.record_key(key))
            .arg(owner_hex(owner));
        let (mut conn, key) = (self.conn.clone(), key.clone());
        self.round_trips.fetch_add(1, Ordering::Relaxed);
        let mut release = Box::pin(async move {
            if let Err(error) = cmd.query_async::<Value>(&mut conn).await {
                tracing::warn!(key = %key, %error, "could not release the claim; it lapses with its lease");
            }
        });
        // The first poll writes the command into the connection's queue, in order.
        let waker = futures_util::task::noop_waker();
        let mut cx = std::task::Context::from_waker(&waker);
        if release.as_mut().poll(&mut cx).is_pending() {
            drop(runtime.spawn(release));
        }
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
    use super::*;

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

    #[test]
    fn instants_compare_as_strings() {
        let (a, b) = (Timestamp::from_millis(9), Timestamp::from_millis(u64::MAX));
        assert!(time_arg(a) < time_arg(b));
        assert_eq!(time_arg(b).len(), 20);
        assert_eq!(gc_arg(a, b), "");
        assert_eq!(gc_arg(a, Timestamp::from_millis(10)), "3600001");
        assert_eq!(gc_arg(b, a), GC_MARGIN_MS.to_string());
    }
}
