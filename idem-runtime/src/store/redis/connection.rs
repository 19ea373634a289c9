//! The connection: connect errors, the [`ConnectionManager`]'s timeouts and retries,
//! sending a command or a script (counting round trips), running an operation on the tokio
//! runtime, and turning the client's errors into [`StoreError`]s (S10).

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use redis::aio::{ConnectionManager, ConnectionManagerConfig};
use redis::{ErrorKind, Script, ServerErrorKind, Value};

use super::scripts::CORRUPT_CODE;
use super::{RedisStore, BACKEND};
use crate::key::IdempotencyKey;
use crate::store::in_flight::{self, Undo};
use crate::store::{StoreError, StoreErrorKind, StoreFuture};

/// How long connecting, and each command, may take before failing as unavailable.
const TIMEOUT: Duration = Duration::from_secs(5);

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

/// The connection manager's settings: connecting and each command time out after 5 s; a
/// dropped connection is retried twice with backoff.
pub(super) fn config() -> ConnectionManagerConfig {
    ConnectionManagerConfig::new()
        .set_connection_timeout(Some(TIMEOUT))
        .set_response_timeout(Some(TIMEOUT))
        .set_number_of_retries(2)
}

impl RedisStore {
    /// Runs one record script on the connection (`KEYS`: the record, the prefix's index):
    /// `EVALSHA`, and on `NOSCRIPT` `SCRIPT LOAD` and `EVALSHA` again, counting each command
    /// sent as a round trip. `what` names the operation in errors.
    pub(super) fn eval(
        &self,
        what: &'static str,
        script: &'static Script,
        key: &IdempotencyKey,
        args: Vec<String>,
    ) -> impl Future<Output = Result<Value, StoreError>> + Send + 'static {
        let keys = vec![self.record_key(key), self.index_key()];
        self.eval_on(script, keys, args, self.failure(what, key))
    }

    /// Runs one script with `keys` as `KEYS` (as [`eval`](Self::eval)); `fail` names what
    /// failed.
    pub(super) fn eval_on(
        &self,
        script: &'static Script,
        keys: Vec<String>,
        args: Vec<String>,
        fail: Failure,
    ) -> impl Future<Output = Result<Value, StoreError>> + Send + 'static {
        let mut conn = self.conn.clone();
        let round_trips = Arc::clone(&self.round_trips);
        let mut evalsha = redis::cmd("EVALSHA");
        evalsha
            .arg(script.get_hash())
            .arg(keys.len())
            .arg(keys)
            .arg(args);
        async move {
            match send(&mut conn, &evalsha, &round_trips).await {
                Err(e) if e.kind() == ErrorKind::Server(ServerErrorKind::NoScript) => {
                    round_trips.fetch_add(1, Ordering::Relaxed);
                    script
                        .load_async(&mut conn)
                        .await
                        .map_err(|e| fail.error(e))?;
                    send(&mut conn, &evalsha, &round_trips)
                        .await
                        .map_err(|e| fail.error(e))
                }
                result => result.map_err(|e| fail.error(e)),
            }
        }
    }

    /// Sends one plain command (one round trip); `fail` names what failed.
    pub(super) fn command(
        &self,
        cmd: redis::Cmd,
        fail: Failure,
    ) -> impl Future<Output = Result<Value, StoreError>> + Send + 'static {
        let mut conn = self.conn.clone();
        let round_trips = Arc::clone(&self.round_trips);
        async move {
            send(&mut conn, &cmd, &round_trips)
                .await
                .map_err(|e| fail.error(e))
        }
    }

    /// Reads `key`'s record fields: one `HMGET` of `fields`.
    pub(super) fn hmget(
        &self,
        key: &IdempotencyKey,
        fields: &[&str],
    ) -> impl Future<Output = Result<Value, StoreError>> + Send + 'static {
        let mut cmd = redis::cmd("HMGET");
        cmd.arg(self.record_key(key)).arg(fields);
        self.command(cmd, self.failure("read", key))
    }

    /// Runs `op`, failing with [`StoreErrorKind::Unsupported`] outside a tokio runtime.
    /// With `undo`, `op` runs as a spawned task, and a result that acquired a claim nobody
    /// awaits any more is released (S7).
    pub(super) fn run<T, F>(&self, op: F, undo: Option<Undo<T>>) -> StoreFuture<'static, T>
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

    /// A [`StoreErrorKind::Corrupt`] error about `key`'s record: `what` is wrong with it.
    pub(super) fn corrupt(&self, key: &IdempotencyKey, what: &str) -> StoreError {
        StoreError::new(
            BACKEND,
            StoreErrorKind::Corrupt,
            format!("record {} at {}: {what}", self.record_key(key), self.url),
        )
    }

    fn failure(&self, what: &'static str, key: &IdempotencyKey) -> Failure {
        self.failure_at(what, format!("record {}", self.record_key(key)))
    }

    /// What to name when `what` fails on `subject` (`record <key>`, `index <key>`, …).
    pub(super) fn failure_at(&self, what: &'static str, subject: String) -> Failure {
        Failure {
            what,
            url: self.url.clone(),
            subject,
        }
    }
}

/// What to name in the error of a failed command: the operation, the server, the record (or
/// index) it was about.
pub(super) struct Failure {
    what: &'static str,
    url: String,
    subject: String,
}

impl Failure {
    /// A failed command as a store error: a `WRONGTYPE` reply (a value of another type at a
    /// record's key) or a script's refusal of a record it cannot read ([`CORRUPT_CODE`]),
    /// which no retry can fix, is [`StoreErrorKind::Corrupt`]; anything else (connection
    /// lost, timeout, server busy) is [`StoreErrorKind::Unavailable`].
    fn error(&self, e: redis::RedisError) -> StoreError {
        let (what, url, subject) = (self.what, &self.url, &self.subject);
        match e.code() {
            Some(CORRUPT_CODE) => StoreError::new(
                BACKEND,
                StoreErrorKind::Corrupt,
                format!(
                    "{what} on {url}: {subject}: {}",
                    e.detail().unwrap_or_default()
                ),
            ),
            Some("WRONGTYPE") => StoreError::new(
                BACKEND,
                StoreErrorKind::Corrupt,
                format!("{what} on {url}: {subject}: {e}"),
            ),
            _ => StoreError::new(
                BACKEND,
                StoreErrorKind::Unavailable,
                format!("{what} on {url}: {e}{}", tls_hint(url, &e)),
            ),
        }
    }
}

/// For a plain-text URL whose connection the server dropped or reset (what a TLS-only
/// port does to a client that does not start a TLS handshake): a hint to write `rediss://`.
pub(super) fn tls_hint(url: &str, e: &redis::RedisError) -> &'static str {
    let dropped = e.is_connection_dropped()
        || e.is_unrecoverable_error()
        || matches!(e.kind(), ErrorKind::Io | ErrorKind::Parse);
    if url.starts_with("redis://") && dropped {
        " (if the server takes only TLS connections, write rediss:// instead of redis://)"
    } else {
        ""
    }
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
