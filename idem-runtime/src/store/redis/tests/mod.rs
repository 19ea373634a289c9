//! The Redis store's own tests: the URL redaction, the record decoding (`decode`, no
//! server), and on a server (`IDEM_TEST_REDIS_URL`, default `redis://127.0.0.1:6379`, each
//! test under a fresh prefix whose keys it deletes when it ends) layouts 4 and 5: records
//! of layouts 3 and 4 written as those builds wrote them (`decisions`, `layout_4`), the
//! history's bound, the not-applied state, the approval states (`approvals`: every
//! transition against the memory store; `approval_queue`: a record's way through them), the
//! Redis expiry of records that are and are not completed, and the effective state and
//! oldest-first order of the listing.

use std::time::Duration;

use redis::aio::MultiplexedConnection;

use super::{redact, RedisStore};
use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::label::{RecordLabel, ScopePath};
use crate::store::OutcomeSource;
use crate::store::{
    Claim, ClaimRequest, CompleteRequest, Completion, DecisionKind, History, HistoryEntry,
    HistoryEvent, ListQuery, MarkUnknownRequest, OwnerToken, Record, RecordState, RenewRequest,
    Seen, StateFilter, Store, TakeoverRequest, Target, TransitionRequest, UnknownReason,
};

mod approval_queue;
mod approvals;
mod decisions;
mod decode;
mod expiry;
mod layout_4;

// pins S10: a URL's password never shows in errors and logs
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

const DAY_MS: u64 = 86_400_000;
const YEAR_MS: u64 = 365 * DAY_MS;
/// Room for the time a test takes between a write and its `PTTL` check (ms).
const SLACK_MS: u64 = 60_000;

fn url() -> String {
    std::env::var("IDEM_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// A store on a fresh prefix and a plain connection beside it; deletes the prefix's keys
/// when dropped.
struct Server {
    store: RedisStore,
    raw: MultiplexedConnection,
    prefix: String,
}

impl Drop for Server {
    fn drop(&mut self) {
        let Ok(client) = redis::Client::open(url()) else {
            return;
        };
        let Ok(mut conn) = client.get_connection() else {
            return;
        };
        let keys: Vec<String> = redis::cmd("KEYS")
            .arg(format!("{}*", self.prefix))
            .query(&mut conn)
            .unwrap_or_default();
        if !keys.is_empty() {
            let _: Result<usize, _> = redis::cmd("DEL").arg(&keys).query(&mut conn);
        }
    }
}

async fn server() -> Server {
    let prefix = format!("idem-test:{}:", uuid::Uuid::new_v4().simple());
    let store = RedisStore::connect(&url())
        .await
        .expect("a Redis server at IDEM_TEST_REDIS_URL")
        .with_prefix(prefix.clone());
    let raw = redis::Client::open(url())
        .unwrap()
        .get_multiplexed_async_connection()
        .await
        .unwrap();
    Server { store, raw, prefix }
}

impl Server {
    async fn cmd<T: redis::FromRedisValue>(&mut self, args: &[&str]) -> T {
        let mut cmd = redis::cmd(args[0]);
        for arg in &args[1..] {
            cmd.arg(*arg);
        }
        cmd.query_async(&mut self.raw).await.unwrap()
    }

    async fn pttl(&mut self, key: &IdempotencyKey) -> i64 {
        let record = self.store.record_key(key);
        self.cmd(&["PTTL", &record]).await
    }

    async fn field(&mut self, key: &IdempotencyKey, field: &str) -> Option<String> {
        let record = self.store.record_key(key);
        self.cmd(&["HGET", &record, field]).await
    }

    /// Sets a Redis expiry on `key`'s record, as a build before layout 4 did on every one.
    async fn old_expiry(&mut self, key: &IdempotencyKey) {
        let record = self.store.record_key(key);
        let set: i64 = self.cmd(&["PEXPIRE", &record, "86400000"]).await;
        assert_eq!(set, 1);
    }

    /// The server's clock (`TIME`).
    async fn server_now(&mut self) -> Timestamp {
        let (seconds, micros): (u64, u64) = self.cmd(&["TIME"]).await;
        Timestamp::from_millis(seconds * 1_000 + micros / 1_000)
    }

    fn round_trips(&self) -> u64 {
        self.store.round_trips().unwrap()
    }
}

fn key(n: u32) -> IdempotencyKey {
    IdempotencyKey::from_hex(&format!("{n:08x}").repeat(8)).unwrap()
}

fn fp(n: u8) -> Fingerprint {
    Fingerprint::from_hex(&format!("{n:02x}").repeat(32)).unwrap()
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}

fn plus(t: Timestamp, ms: u64) -> Timestamp {
    t.saturating_add(Duration::from_millis(ms))
}

fn digits(n: u64) -> String {
    format!("{n:020}")
}

fn label() -> RecordLabel {
    RecordLabel::new("send_refund", ScopePath::new().with("conversation", "c-1"))
}

fn outcome() -> Envelope {
    Envelope::encode_ok(&100u64).unwrap()
}

/// Claims `key` with fingerprint `fp(n)` at `now`: lease 1 s, expiry `now + ttl_ms`.
async fn claim(
    store: &impl Store,
    key: &IdempotencyKey,
    n: u8,
    owner: OwnerToken,
    now: Timestamp,
    ttl_ms: u64,
) -> Claim {
    store
        .claim(ClaimRequest {
            key,
            fingerprint: &fp(n),
            owner,
            now,
            lease_until: plus(now, 1_000),
            expires_at: plus(now, ttl_ms),
            label: &label(),
        })
        .await
        .unwrap()
}

async fn mark_unknown(
    store: &impl Store,
    key: &IdempotencyKey,
    owner: OwnerToken,
    now: Timestamp,
    fence: u64,
) -> bool {
    let entry = HistoryEntry::new(
        now,
        HistoryEvent::Unknown {
            cause: UnknownReason::Error,
        },
        fence,
    );
    store
        .mark_unknown(MarkUnknownRequest {
            key,
            owner,
            now,
            since: now,
            entry,
        })
        .await
        .unwrap()
}

/// Takes over the record `seen` (in progress or unknown) at `now` with `seen.fence + 1`.
async fn take_over(
    store: &impl Store,
    key: &IdempotencyKey,
    seen: &Record,
    owner: OwnerToken,
    now: Timestamp,
) -> bool {
    let (RecordState::InProgress {
        owner: seen_owner,
        lease_until,
    }
    | RecordState::OutcomeUnknown {
        owner: seen_owner,
        lease_until,
        ..
    }) = seen.state
    else {
        panic!("not in progress: {seen:?}");
    };
    let fence = seen.fence + 1;
    let entry = HistoryEntry::new(
        now,
        HistoryEvent::TakenOver {
            cause: UnknownReason::Marked,
        },
        fence,
    )
    .with_owner(owner);
    store
        .take_over(TakeoverRequest {
            key,
            seen_owner,
            seen_lease_until: lease_until,
            owner,
            now,
            lease_until: plus(now, 1_000),
            expires_at: plus(now, 10_000),
            fence,
            label: &label(),
            entry,
        })
        .await
        .unwrap()
}

async fn complete(
    store: &impl Store,
    key: &IdempotencyKey,
    owner: OwnerToken,
    now: Timestamp,
    fence: u64,
) -> Completion {
    let entry = HistoryEntry::new(
        now,
        HistoryEvent::Completed {
            source: OutcomeSource::Executed,
        },
        fence,
    );
    store
        .complete(CompleteRequest {
            key,
            owner,
            outcome: &outcome(),
            source: OutcomeSource::Executed,
            now,
            entry,
        })
        .await
        .unwrap()
}

/// A person's decision `decision` on the record of `fence`, seen in `seen`, moving it to
/// `target` at `now`.
async fn decide(
    store: &impl Store,
    key: &IdempotencyKey,
    fence: u64,
    seen: Seen,
    target: Target<'_>,
    now: Timestamp,
    expires_at: Timestamp,
) -> bool {
    let decision = match target {
        Target::NotApplied => DecisionKind::NotApplied,
        _ => DecisionKind::Applied,
    };
    let entry = HistoryEntry::new(now, HistoryEvent::Resolved { decision }, fence)
        .with_actor("ana", Some("bank says \"no\"\nline two".to_owned()));
    store
        .transition(TransitionRequest {
            key,
            fence,
            seen,
            target,
            now,
            expires_at,
            entry,
        })
        .await
        .unwrap()
}

async fn read(store: &impl Store, key: &IdempotencyKey, now: Timestamp) -> Record {
    store.read(key, now).await.unwrap().expect("a live record")
}

async fn history(store: &impl Store, key: &IdempotencyKey, now: Timestamp) -> History {
    store
        .history(key, now)
        .await
        .unwrap()
        .expect("a live record")
}

fn events(history: &History) -> Vec<(&'static str, u64)> {
    history
        .entries
        .iter()
        .map(|e| {
            let name = match e.event {
                HistoryEvent::Claimed => "claimed",
                HistoryEvent::TakenOver { .. } => "taken_over",
                HistoryEvent::Unknown { .. } => "unknown",
                HistoryEvent::Completed { .. } => "completed",
                HistoryEvent::Resolved { .. } => "resolved",
                HistoryEvent::Released => "released",
                HistoryEvent::ApprovalRequested => "approval_requested",
                HistoryEvent::Approved { .. } => "approved",
                HistoryEvent::Denied => "denied",
                HistoryEvent::ApprovalExpired => "approval_expired",
                _ => "unreadable",
            };
            (name, e.fence)
        })
        .collect()
}

/// Writes `key`'s record as a build of layout `v` (3 or 4) did: `fields` after the layout,
/// the fingerprint `fp(1)` and the label, in the index; with a Redis expiry where that
/// build set one (layout 3: on every record; layout 4: on completed ones).
async fn write_layout(
    s: &mut Server,
    v: &str,
    key: &IdempotencyKey,
    created_at: u64,
    fields: &[(&str, String)],
) {
    let record = s.store.record_key(key);
    let fingerprint = fp(1);
    let mut args = vec![
        "HSET".to_owned(),
        record.clone(),
        "v".to_owned(),
        v.to_owned(),
        "fingerprint".to_owned(),
        fingerprint.as_str().to_owned(),
        "created_at".to_owned(),
        digits(created_at),
        "tool".to_owned(),
        "send_refund".to_owned(),
        "scope".to_owned(),
        "conversation=c-1".to_owned(),
    ];
    for (name, value) in fields {
        args.push((*name).to_owned());
        args.push(value.clone());
    }
    let args: Vec<&str> = args.iter().map(String::as_str).collect();
    let _: i64 = s.cmd(&args).await;
    if v == "3" || fields.iter().any(|(name, _)| *name == "outcome") {
        s.old_expiry(key).await;
    }
    let (index, tool) = (s.store.index_key(), s.store.tool_index_key("send_refund"));
    let score = created_at.to_string();
    for set in [&index, &tool] {
        let _: i64 = s.cmd(&["ZADD", set, &score, key.as_str()]).await;
    }
    let tools = format!("{index}:tools");
    let _: i64 = s.cmd(&["SADD", &tools, "send_refund"]).await;
}

/// A snapshot of the record's hash, sorted by field (`HGETALL` keeps no order).
async fn hash(s: &mut Server, key: &IdempotencyKey) -> Vec<(String, String)> {
    let record = s.store.record_key(key);
    let mut fields: Vec<(String, String)> = s.cmd(&["HGETALL", &record]).await;
    fields.sort();
    fields
}
