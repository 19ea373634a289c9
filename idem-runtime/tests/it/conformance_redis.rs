//! The store conformance suite (contract S1–S12) on the Redis store, each test on a fresh
//! key prefix (`idem-test:<uuid>:`) so that runs never see each other's records; then what
//! only a shared server can show: two stores (two connections) on the same keys, the sync
//! path's typed error outside a runtime, typed connect errors, corrupt records; and, on the
//! store directly (`never_twice`), fencing tokens (F1), renewal (L1), unknown outcomes (U1),
//! Redis's key expiry judged by the caller's and the server's clocks (G1), and records of
//! layouts 1 and 2 (the store's own unit tests pin layouts 3 and 4: the history, the
//! not-applied state, no Redis expiry on records that are not completed); and (`index`) the
//! label fields of the record hash and the index that
//! serves listing, purging and counting (P1, P4, I3–I5), with `RedisStore::reindex`.
//!
//! The server is `IDEM_TEST_REDIS_URL` (default `redis://127.0.0.1:6379`). Every test
//! deletes the keys under its prefix when it ends.

#![cfg(feature = "redis")]

#[allow(unused_imports)]
use crate::conformance;
use crate::support;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use idem_runtime::{prepare, RedisConnectError, RedisStore, Store, StoreErrorKind, ToolError};
use support::{default_spec, refund, Harness, TestStore};

use crate::conformance::LABEL;

fn redis_url() -> String {
    std::env::var("IDEM_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".to_owned())
}

/// Deletes every key under its prefix when dropped (a sync connection: `Drop` cannot await).
struct Cleanup {
    prefix: String,
}

impl Drop for Cleanup {
    fn drop(&mut self) {
        let Ok(client) = ::redis::Client::open(redis_url()) else {
            return;
        };
        let Ok(mut conn) = client.get_connection() else {
            return;
        };
        let keys: Vec<String> = match ::redis::cmd("KEYS")
            .arg(format!("{}*", self.prefix))
            .query(&mut conn)
        {
            Ok(keys) => keys,
            Err(_) => return,
        };
        if !keys.is_empty() {
            let _: Result<usize, _> = ::redis::cmd("DEL").arg(&keys).query(&mut conn);
        }
    }
}

/// A fresh, never-used prefix and the guard that deletes its keys.
fn fresh_prefix() -> (String, Cleanup) {
    let prefix = format!("idem-test:{}:", uuid::Uuid::new_v4().simple());
    let cleanup = Cleanup {
        prefix: prefix.clone(),
    };
    (prefix, cleanup)
}

/// A store on a fresh prefix (connected lazily: the factory cannot await).
fn redis_store() -> TestStore {
    let (prefix, cleanup) = fresh_prefix();
    let store = RedisStore::connect_lazy(&redis_url())
        .expect("a Redis URL and a tokio runtime")
        .with_prefix(prefix);
    TestStore {
        store: Arc::new(store),
        keep: Some(Box::new(cleanup)),
    }
}

conformance_suite!(redis, super::redis_store, async_only);
decisions_suite!(redis_decisions, super::redis_store);
approvals_suite!(redis_approvals, super::redis_store);

// pins S2 (across connections, as across processes): two stores with their own connections,
// 32 tasks each, on the same 8 keys → exactly one execution per key, one shared outcome
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_server_run_each_key_once() {
    let (prefix, _cleanup) = fresh_prefix();
    let mut stores: Vec<Arc<dyn Store>> = Vec::new();
    for _ in 0..2 {
        let store = RedisStore::connect(&redis_url())
            .await
            .expect("connect")
            .with_prefix(prefix.clone());
        stores.push(Arc::new(store));
    }
    let stores: [Arc<dyn Store>; 2] = stores.try_into().map_err(|_| "two stores").unwrap();
    conformance::two_stores_run_each_key_once(stores).await;
}

// pins S10: a sync tool outside any runtime gets a typed Unsupported store error and its body
// never runs; on a runtime's blocking pool the same sync tool works
#[test]
fn sync_path_outside_a_runtime_is_a_typed_error() {
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .unwrap();
    let test_store = runtime.block_on(async { redis_store() });
    let store = test_store.store.clone();
    let h = Arc::new(Harness::on(test_store));
    let ctx = h.ctx("conv_sync");
    let ran = AtomicUsize::new(0);
    let p = prepare(default_spec(), Some(&ctx), |a| {
        a.key("order", &1u64).map(drop)
    })
    .unwrap();
    let out = p.run_blocking(|| {
        ran.fetch_add(1, Ordering::SeqCst);
        Ok::<u64, ToolError>(1)
    });
    match out {
        Err(ToolError::Idem(idem_runtime::Error::Store { source, .. })) => {
            assert_eq!(source.kind, StoreErrorKind::Unsupported, "{source}");
            assert!(source.message.contains("tokio runtime"), "{source}");
        }
        other => panic!("expected an Unsupported store error, got {other:?}"),
    }
    assert_eq!(ran.load(Ordering::SeqCst), 0);
    let h2 = h.clone();
    let out = runtime.block_on(async move {
        tokio::task::spawn_blocking(move || {
            let ctx = h2.ctx("conv_sync");
            let p = prepare(default_spec(), Some(&ctx), |a| {
                a.key("order", &1u64).map(drop)
            })
            .unwrap();
            p.run_blocking(|| Ok::<u64, ToolError>(7))
        })
        .await
        .unwrap()
    });
    assert_eq!(out, Ok(7));
    assert_eq!(store.backend(), "redis");
    runtime.block_on(async move { drop(h) });
}

// pins S10: connect errors are typed and name the URL without its password
#[tokio::test]
async fn connect_errors_are_typed_and_hide_the_password() {
    match RedisStore::connect("redis://:hunter2@127.0.0.1:1/0").await {
        Err(e @ RedisConnectError::Connect { .. }) => {
            let text = e.to_string();
            assert!(text.contains("127.0.0.1:1"), "{text}");
            assert!(!text.contains("hunter2"), "{text}");
            let store_error = idem_runtime::StoreError::from(e);
            assert_eq!(store_error.kind, StoreErrorKind::Unavailable);
        }
        other => panic!("expected a connect error, got {other:?}"),
    }
    match RedisStore::connect("http://:hunter2@example.invalid").await {
        Err(e @ RedisConnectError::InvalidUrl { .. }) => {
            assert!(!e.to_string().contains("hunter2"), "{e}")
        }
        other => panic!("expected an invalid URL error, got {other:?}"),
    }
    let lazy = RedisStore::connect_lazy("redis://127.0.0.1:1").unwrap();
    let key = idem_runtime::IdempotencyKey::from_hex(&"ab".repeat(32)).unwrap();
    let error = lazy
        .read(&key, idem_runtime::Timestamp::EPOCH)
        .await
        .unwrap_err();
    assert_eq!(error.kind, StoreErrorKind::Unavailable, "{error}");
    assert!(error.message.contains("127.0.0.1:1"), "{error}");
}

// pins S10: outside a runtime the lazy constructor refuses with a typed error
#[test]
fn connect_lazy_needs_a_runtime() {
    match RedisStore::connect_lazy(&redis_url()) {
        Err(e @ RedisConnectError::NoRuntime { .. }) => {
            let store_error = idem_runtime::StoreError::from(e);
            assert_eq!(store_error.kind, StoreErrorKind::Unsupported);
        }
        other => panic!("expected NoRuntime, got {other:?}"),
    }
}

// pins S10: a record that is not a valid record is a typed Corrupt error, not a panic or a replay
#[tokio::test]
async fn corrupt_records_are_typed_errors() {
    let (prefix, _cleanup) = fresh_prefix();
    let store = RedisStore::connect(&redis_url())
        .await
        .unwrap()
        .with_prefix(prefix);
    let h = Harness::on(TestStore {
        store: Arc::new(store.clone()),
        keep: None,
    });
    let ctx = h.ctx("conv_corrupt");
    assert_eq!(refund(default_spec(), &ctx, &h.log, 1).await, Ok(100));
    let key = ctx.last_outcome().unwrap().key;
    let record = store.record_key(&key);
    let client = ::redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    for (field, value) in [
        ("fingerprint", "not hex"),
        ("created_at", "-1"),
        ("v", "99"),
        ("owner", "00"),
        ("fence", "1"),
        ("unknown_since", "00000000000000000000"),
    ] {
        let saved: Option<String> = ::redis::cmd("HGET")
            .arg(&record)
            .arg(field)
            .query_async(&mut conn)
            .await
            .unwrap();
        let _: () = ::redis::cmd("HSET")
            .arg(&record)
            .arg(field)
            .arg(value)
            .query_async(&mut conn)
            .await
            .unwrap();
        let error = h.store.read(&key, h.now()).await.unwrap_err();
        assert_eq!(error.kind, StoreErrorKind::Corrupt, "{field}: {error}");
        assert!(error.message.contains(&record), "{error}");
        let out = refund(default_spec(), &ctx, &h.log, 1).await;
        assert!(
            matches!(out, Err(ToolError::Idem(idem_runtime::Error::Store { .. }))),
            "{field}: {out:?}"
        );
        let mut restore = ::redis::cmd("HSET");
        restore.arg(&record).arg(field);
        match saved {
            Some(saved) => {
                restore.arg(saved);
                let _: () = restore.query_async(&mut conn).await.unwrap();
            }
            None => {
                let _: () = ::redis::cmd("HDEL")
                    .arg(&record)
                    .arg(field)
                    .query_async(&mut conn)
                    .await
                    .unwrap();
            }
        }
    }
    assert_eq!(refund(default_spec(), &ctx, &h.log, 1).await, Ok(100));
    assert_eq!(h.log.len(), 1, "the body never ran on a corrupt record");
}

// pins S8: Redis's own expiry is garbage collection set after expires_at (+ margin), never
// before; and the records live under `<prefix>rec:<key>`
#[tokio::test]
async fn redis_expiry_is_set_after_the_record_expires() {
    let (prefix, _cleanup) = fresh_prefix();
    let store = RedisStore::connect(&redis_url())
        .await
        .unwrap()
        .with_prefix(prefix.clone());
    let h = Harness::on(TestStore {
        store: Arc::new(store.clone()),
        keep: None,
    });
    let spec = support::spec("short", 10_000, 5_000, 0);
    let ctx = h.ctx("conv_gc");
    assert_eq!(refund(spec, &ctx, &h.log, 1).await, Ok(100));
    let key = ctx.last_outcome().unwrap().key;
    assert_eq!(
        store.record_key(&key),
        format!("{prefix}rec:{}", key.as_str())
    );
    let client = ::redis::Client::open(redis_url()).unwrap();
    let mut conn = client.get_multiplexed_async_connection().await.unwrap();
    let pttl: i64 = ::redis::cmd("PTTL")
        .arg(store.record_key(&key))
        .query_async(&mut conn)
        .await
        .unwrap();
    let margin = idem_runtime::store::redis::GC_MARGIN_MS as i64;
    assert!(pttl > margin, "garbage deadline after expiry: pttl {pttl}");
    assert!(pttl <= 10_000 + margin, "pttl {pttl}");
}

// ---------------------------------------------------------------------------------------
// Fencing tokens, renewal, unknown outcomes, garbage collection by both clocks, and the
// records of layout 1 (issue 7), on the store directly.
// ---------------------------------------------------------------------------------------

mod never_twice {
    use std::time::Duration;

    use idem_runtime::store::redis::{GC_MARGIN_MS, GC_MAX_MS, REDIS_LAYOUT_VERSION};
    use idem_runtime::store::{
        Claim, ClaimRequest, Completion, MarkUnknownRequest, OwnerToken, Record, RecordState,
        RenewRequest, TakeoverRequest,
    };
    use idem_runtime::{
        Envelope, Fingerprint, IdempotencyKey, RedisStore, Store, StoreErrorKind, Timestamp,
    };

    use super::{fresh_prefix, redis_url, Cleanup};
    use crate::conformance::{mark_unknown, read, renew};

    const DAY_MS: u64 = 86_400_000;
    const YEAR_MS: u64 = 365 * DAY_MS;
    /// Room for the time a test takes between a write and its `PTTL` check (ms).
    const SLACK_MS: u64 = 60_000;

    /// A store on a fresh prefix, a raw connection to the same server, and the cleanup.
    pub(super) async fn setup() -> (RedisStore, Raw, Cleanup) {
        let (prefix, cleanup) = fresh_prefix();
        let store = RedisStore::connect(&redis_url())
            .await
            .expect("connect")
            .with_prefix(prefix);
        let client = ::redis::Client::open(redis_url()).unwrap();
        let conn = client.get_multiplexed_async_connection().await.unwrap();
        (store, Raw(conn), cleanup)
    }

    /// Plain commands on the server, beside the store.
    pub(super) struct Raw(::redis::aio::MultiplexedConnection);

    impl Raw {
        pub(super) async fn cmd<T: ::redis::FromRedisValue>(&mut self, args: &[&str]) -> T {
            let mut cmd = ::redis::cmd(args[0]);
            for arg in &args[1..] {
                cmd.arg(*arg);
            }
            cmd.query_async(&mut self.0).await.unwrap()
        }

        async fn pttl(&mut self, record: &str) -> i64 {
            self.cmd(&["PTTL", record]).await
        }

        pub(super) async fn field(&mut self, record: &str, field: &str) -> Option<String> {
            self.cmd(&["HGET", record, field]).await
        }

        /// The server's clock (`TIME`): the clock of a correct-clock worker in these tests.
        async fn server_now(&mut self) -> Timestamp {
            let (seconds, micros): (u64, u64) = self.cmd(&["TIME"]).await;
            Timestamp::from_millis(seconds * 1_000 + micros / 1_000)
        }

        pub(super) async fn hash(&mut self, record: &str) -> Vec<(String, String)> {
            let mut fields: Vec<(String, String)> = self.cmd(&["HGETALL", record]).await;
            fields.sort();
            fields
        }
    }

    pub(super) fn key(n: u32) -> IdempotencyKey {
        IdempotencyKey::from_hex(&format!("{n:08x}").repeat(8)).unwrap()
    }

    pub(super) fn fp(n: u8) -> Fingerprint {
        Fingerprint::from_hex(&format!("{n:02x}").repeat(32)).unwrap()
    }

    pub(super) fn plus(t: Timestamp, ms: u64) -> Timestamp {
        t.saturating_add(Duration::from_millis(ms))
    }

    fn minus(t: Timestamp, ms: u64) -> Timestamp {
        Timestamp::from_millis(t.as_millis() - ms)
    }

    pub(super) fn digits(n: u64) -> String {
        format!("{n:020}")
    }

    pub(super) async fn claim(
        store: &RedisStore,
        key: &IdempotencyKey,
        owner: OwnerToken,
        now: Timestamp,
        lease_ms: u64,
        ttl_ms: u64,
    ) -> Claim {
        let fingerprint = fp(1);
        store
            .claim(ClaimRequest {
                key,
                fingerprint: &fingerprint,
                owner,
                now,
                lease_until: plus(now, lease_ms),
                expires_at: plus(now, ttl_ms),
                label: &super::LABEL,
            })
            .await
            .unwrap()
    }

    /// Takes `key` over from the in-progress or unknown `seen` record at `now`.
    pub(super) async fn take_over(
        store: &RedisStore,
        key: &IdempotencyKey,
        seen: &Record,
        owner: OwnerToken,
        now: Timestamp,
        fence: u64,
    ) -> bool {
        let (RecordState::InProgress {
            owner: seen_owner,
            lease_until: seen_lease_until,
        }
        | RecordState::OutcomeUnknown {
            owner: seen_owner,
            lease_until: seen_lease_until,
            ..
        }) = seen.state
        else {
            panic!("not in progress: {seen:?}");
        };
        store
            .take_over(TakeoverRequest {
                key,
                seen_owner,
                seen_lease_until,
                owner,
                now,
                lease_until: plus(now, 1_000),
                expires_at: plus(now, 10_000),
                fence,
                label: &super::LABEL,
                entry: crate::support::takeover_entry(),
            })
            .await
            .unwrap()
    }

    pub(super) fn outcome() -> Envelope {
        Envelope::encode_ok(&100u64).unwrap()
    }

    /// Asserts that Redis keeps `record` at least `ms` more (minus the test's slack).
    async fn assert_kept_for(raw: &mut Raw, record: &str, ms: u64, what: &str) {
        let pttl = raw.pttl(record).await;
        assert!(
            pttl == -1 || pttl as u64 + SLACK_MS >= ms,
            "{what}: pttl {pttl} < {ms} ms"
        );
    }

    // pins F1, S8: the fence strictly increases: claim → takeover → takeover, a takeover of
    // an unknown outcome, and a claim over the expired completed record the store still
    // holds (carrying decimal digits exactly, saturating at u64::MAX); an in-progress record
    // past its expiry is not claimed over
    #[tokio::test]
    async fn fences_strictly_increase() {
        let (store, mut raw, _cleanup) = setup().await;
        let k = key(1);
        let t0 = Timestamp::from_millis(1_000_000);
        let (a, b, c, d) = (
            OwnerToken::random(),
            OwnerToken::random(),
            OwnerToken::random(),
            OwnerToken::random(),
        );
        assert_eq!(
            claim(&store, &k, a, t0, 100, 10_000).await,
            Claim::Acquired {
                fence: 1,
                reopened: false
            }
        );
        let first = read(&store, &k, t0).await;
        assert_eq!(first.fence, 1);
        let t1 = plus(t0, 100);
        assert!(take_over(&store, &k, &first, b, t1, first.fence + 1).await);
        let second = read(&store, &k, t1).await;
        assert_eq!(second.fence, 2);
        assert_eq!(
            second.state,
            RecordState::InProgress {
                owner: b,
                lease_until: plus(t1, 1_000)
            }
        );
        assert!(!take_over(&store, &k, &first, c, t1, 3).await, "stale view");
        let t2 = plus(t1, 1_000);
        assert!(take_over(&store, &k, &second, c, t2, second.fence + 1).await);
        let third = read(&store, &k, t2).await;
        assert_eq!(third.fence, 3);
        // An unknown outcome is taken over with the next fence too.
        assert!(mark_unknown(&store, &k, c, t2, t2).await);
        let unknown = read(&store, &k, t2).await;
        assert!(take_over(&store, &k, &unknown, d, t2, unknown.fence + 1).await);
        let fourth = read(&store, &k, t2).await;
        assert_eq!(fourth.fence, 4);
        assert_eq!(
            store
                .complete(crate::support::complete_request(&k, d, &outcome(), t2))
                .await
                .unwrap(),
            Completion::Saved
        );
        assert_eq!(read(&store, &k, t2).await.fence, 4, "completion keeps it");
        // Expired but still held: the next claim carries the fence on.
        let expired = plus(t2, 10_000);
        assert_eq!(store.read(&k, expired).await.unwrap(), None);
        assert_eq!(
            claim(&store, &k, a, expired, 100, 10_000).await,
            Claim::Acquired {
                fence: 5,
                reopened: false
            }
        );
        assert_eq!(read(&store, &k, expired).await.fence, 5);
        // Increments carry across decimal digits, exactly, up to u64::MAX, and saturate.
        let mut now = expired;
        for (fence, next) in [
            (9, 10),
            (199, 200),
            (9_007_199_254_740_993, 9_007_199_254_740_994), // 2^53 + 1: beyond a double
            (10_999_999_999_999_999_999, 11_000_000_000_000_000_000),
            (u64::MAX - 1, u64::MAX),
            (u64::MAX, u64::MAX),
        ] {
            let seen = read(&store, &k, now).await;
            assert!(take_over(&store, &k, &seen, a, now, fence).await, "{fence}");
            assert_eq!(read(&store, &k, now).await.fence, fence);
            assert_eq!(
                raw.field(&store.record_key(&k), "fence").await,
                Some(digits(fence))
            );
            assert_eq!(
                store
                    .complete(crate::support::complete_request(&k, a, &outcome(), now))
                    .await
                    .unwrap(),
                Completion::Saved
            );
            now = plus(now, 10_000);
            assert_eq!(
                claim(&store, &k, a, now, 100, 10_000).await,
                Claim::Acquired {
                    fence: next,
                    reopened: false
                },
                "after {fence}"
            );
        }
        // In progress past its expiry: live (S8), not claimed over.
        let overdue = plus(now, 10_000);
        assert!(matches!(
            claim(&store, &k, b, overdue, 100, 10_000).await,
            Claim::Existing(Record {
                fence: u64::MAX,
                state: RecordState::InProgress { .. },
                ..
            })
        ));
        // A key the store does not hold starts at 1 again: released.
        let owner = match read(&store, &k, now).await.state {
            RecordState::InProgress { owner, .. } => owner,
            other => panic!("{other:?}"),
        };
        assert!(store.release(&k, owner).await.unwrap());
        assert_eq!(
            claim(&store, &k, a, now, 100, 10_000).await,
            Claim::Acquired {
                fence: 1,
                reopened: false
            }
        );
    }

    // pins L1, S8: only the owner of an in-progress record renews it (one round trip), past
    // its expiry too (raising the expiry to the lease); a stranger, an owner that was taken
    // over, a record marked unknown, completed or absent is not renewed and nothing changes
    #[tokio::test]
    async fn renew_is_a_compare_and_set_on_the_live_owner() {
        let (store, mut raw, _cleanup) = setup().await;
        let t0 = Timestamp::from_millis(5_000_000);
        let (owner, stranger, taker) = (
            OwnerToken::random(),
            OwnerToken::random(),
            OwnerToken::random(),
        );
        let k = key(2);
        claim(&store, &k, owner, t0, 100, 10_000).await;
        let before = store.round_trips().unwrap();
        assert!(renew(&store, &k, owner, plus(t0, 50), plus(t0, 500)).await);
        assert_eq!(store.round_trips().unwrap(), before + 1, "one round trip");
        let renewed = read(&store, &k, t0).await;
        assert_eq!(
            renewed.state,
            RecordState::InProgress {
                owner,
                lease_until: plus(t0, 500)
            }
        );
        assert_eq!(
            (renewed.created_at, renewed.expires_at),
            (t0, plus(t0, 10_000))
        );
        // A renewal after the lease lapsed still renews while nobody took over.
        assert!(renew(&store, &k, owner, plus(t0, 600), plus(t0, 700)).await);
        let hash = raw.hash(&store.record_key(&k)).await;
        assert!(!renew(&store, &k, stranger, plus(t0, 600), plus(t0, 9_000)).await);
        assert_eq!(raw.hash(&store.record_key(&k)).await, hash, "stranger");
        // Taken over: the old owner has lost the claim.
        let seen = read(&store, &k, plus(t0, 700)).await;
        assert!(take_over(&store, &k, &seen, taker, plus(t0, 700), 2).await);
        let hash = raw.hash(&store.record_key(&k)).await;
        assert!(!renew(&store, &k, owner, plus(t0, 800), plus(t0, 9_000)).await);
        assert_eq!(raw.hash(&store.record_key(&k)).await, hash, "taken over");
        // Marked unknown: not even its owner renews it.
        assert!(mark_unknown(&store, &k, taker, plus(t0, 800), plus(t0, 700)).await);
        let hash = raw.hash(&store.record_key(&k)).await;
        assert!(!renew(&store, &k, taker, plus(t0, 900), plus(t0, 9_000)).await);
        assert_eq!(raw.hash(&store.record_key(&k)).await, hash, "unknown");
        // Completed.
        let k2 = key(3);
        claim(&store, &k2, owner, t0, 100, 10_000).await;
        assert_eq!(
            store
                .complete(crate::support::complete_request(&k2, owner, &outcome(), t0))
                .await
                .unwrap(),
            Completion::Saved
        );
        let hash = raw.hash(&store.record_key(&k2)).await;
        assert!(!renew(&store, &k2, owner, t0, plus(t0, 9_000)).await);
        assert_eq!(raw.hash(&store.record_key(&k2)).await, hash, "completed");
        // Past its expiry by the renewing caller's clock: still live (S8), renewed, and the
        // expiry raised to the new lease.
        let k3 = key(4);
        claim(&store, &k3, owner, t0, 100, 10_000).await;
        assert!(renew(&store, &k3, owner, plus(t0, 10_000), plus(t0, 20_000)).await);
        assert_eq!(
            read(&store, &k3, plus(t0, 10_000)).await.expires_at,
            plus(t0, 20_000)
        );
        // Absent: nothing is created.
        let k4 = key(5);
        assert!(!renew(&store, &k4, owner, t0, plus(t0, 100)).await);
        assert_eq!(raw.cmd::<i64>(&["EXISTS", &store.record_key(&k4)]).await, 0);
    }

    // pins U1, S8: mark_unknown is a compare-and-set on the owner (one round trip); the
    // unknown record keeps owner and lease, is neither completed, released, renewed nor
    // marked again, a claim answers it, and a takeover with the seen owner and lease works;
    // an in-progress record past its expiry is marked too
    #[tokio::test]
    async fn mark_unknown_then_take_over() {
        let (store, mut raw, _cleanup) = setup().await;
        let t0 = Timestamp::from_millis(7_000_000);
        let (owner, stranger, taker) = (
            OwnerToken::random(),
            OwnerToken::random(),
            OwnerToken::random(),
        );
        let k = key(6);
        claim(&store, &k, owner, t0, 1_000, 10_000).await;
        let record = store.record_key(&k);
        let hash = raw.hash(&record).await;
        assert!(!mark_unknown(&store, &k, stranger, t0, t0).await);
        assert_eq!(raw.hash(&record).await, hash, "stranger");
        let before = store.round_trips().unwrap();
        assert!(mark_unknown(&store, &k, owner, plus(t0, 10), t0).await);
        assert_eq!(store.round_trips().unwrap(), before + 1, "one round trip");
        let unknown = read(&store, &k, plus(t0, 10)).await;
        assert_eq!(
            unknown.state,
            RecordState::OutcomeUnknown {
                owner,
                lease_until: plus(t0, 1_000),
                since: t0
            }
        );
        assert_eq!(unknown.fence, 1);
        let hash = raw.hash(&record).await;
        assert!(!mark_unknown(&store, &k, owner, plus(t0, 20), plus(t0, 20)).await);
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    &k,
                    owner,
                    &outcome(),
                    plus(t0, 20)
                ))
                .await
                .unwrap(),
            Completion::Fenced
        );
        assert!(!store.release(&k, owner).await.unwrap());
        assert_eq!(raw.hash(&record).await, hash, "unknown stays unknown");
        let fingerprint = fp(1);
        let seen = store
            .claim(ClaimRequest {
                key: &k,
                fingerprint: &fingerprint,
                owner: taker,
                now: plus(t0, 30),
                lease_until: plus(t0, 130),
                expires_at: plus(t0, 10_030),
                label: &super::LABEL,
            })
            .await
            .unwrap();
        assert_eq!(seen, Claim::Existing(unknown.clone()));
        // A takeover that saw another lease deadline fails; the seen one succeeds, at once
        // (the lease has not lapsed: a reconciling tool may take over).
        let mut wrong = unknown.clone();
        wrong.state = RecordState::OutcomeUnknown {
            owner,
            lease_until: plus(t0, 999),
            since: t0,
        };
        assert!(!take_over(&store, &k, &wrong, taker, plus(t0, 40), 2).await);
        assert!(take_over(&store, &k, &unknown, taker, plus(t0, 40), 2).await);
        let taken = read(&store, &k, plus(t0, 40)).await;
        assert_eq!(
            taken.state,
            RecordState::InProgress {
                owner: taker,
                lease_until: plus(t0, 1_040)
            }
        );
        assert_eq!((taken.fence, taken.created_at), (2, plus(t0, 40)));
        assert_eq!(raw.field(&record, "unknown_since").await, None);
        // The new owner finishes as usual; the one that gave up cannot.
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    &k,
                    owner,
                    &outcome(),
                    plus(t0, 50)
                ))
                .await
                .unwrap(),
            Completion::Fenced
        );
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    &k,
                    taker,
                    &outcome(),
                    plus(t0, 50)
                ))
                .await
                .unwrap(),
            Completion::Saved
        );
        // Past its expiry an in-progress record is still live (S8): marked.
        let k2 = key(7);
        claim(&store, &k2, owner, t0, 100, 1_000).await;
        assert!(mark_unknown(&store, &k2, owner, plus(t0, 1_000), t0).await);
        assert!(matches!(
            read(&store, &k2, plus(t0, 1_000)).await.state,
            RecordState::OutcomeUnknown { .. }
        ));
    }

    // pins G1, S8: a caller whose clock runs a year ahead claims many other keys (the Redis
    // store's collection is the server's key expiry, which completions set for their own
    // keys only) and tries every compare-and-set on a correct-clock worker's records: the
    // worker's in-progress claim (without a Redis expiry) and, later, its completed outcome
    // survive and read back, the outcome's time to live unshortened; the fast caller's
    // completed records are kept until the server's clock too passes their deadline, a slow
    // caller's until its own clock does
    #[tokio::test]
    async fn a_year_ahead_caller_deletes_nothing_live() {
        let (store, mut raw, _cleanup) = setup().await;
        let (worker, fast) = (OwnerToken::random(), OwnerToken::random());
        let ttl = DAY_MS;
        let now = raw.server_now().await;
        let (running, done) = (key(0x100), key(0x101));
        assert_eq!(
            claim(&store, &running, worker, now, 60_000, ttl).await,
            Claim::Acquired {
                fence: 1,
                reopened: false
            }
        );
        assert_eq!(
            claim(&store, &done, worker, now, 60_000, ttl).await,
            Claim::Acquired {
                fence: 1,
                reopened: false
            }
        );
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    &done,
                    worker,
                    &outcome(),
                    now
                ))
                .await
                .unwrap(),
            Completion::Saved
        );
        assert_eq!(
            raw.pttl(&store.record_key(&running)).await,
            -1,
            "in progress"
        );
        let done_pttl = raw.pttl(&store.record_key(&done)).await;
        assert!(
            done_pttl > 0 && done_pttl as u64 <= ttl + GC_MARGIN_MS,
            "{done_pttl}"
        );
        assert_kept_for(
            &mut raw,
            &store.record_key(&done),
            ttl + GC_MARGIN_MS,
            "done",
        )
        .await;
        let ahead = plus(now, YEAR_MS);
        for n in 0..2_000 {
            let k = key(0x10_000 + n);
            assert_eq!(
                claim(&store, &k, fast, ahead, 60_000, ttl).await,
                Claim::Acquired {
                    fence: 1,
                    reopened: false
                }
            );
        }
        // Every compare-and-set of the fast caller on the worker's records fails.
        let running_record = read(&store, &running, now).await;
        assert!(!renew(&store, &running, fast, ahead, plus(ahead, 60_000)).await);
        assert!(!mark_unknown(&store, &running, fast, ahead, ahead).await);
        assert!(!store.release(&running, fast).await.unwrap());
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    &running,
                    fast,
                    &outcome(),
                    now
                ))
                .await
                .unwrap(),
            Completion::Fenced
        );
        assert!(!store.release(&done, fast).await.unwrap());
        assert!(!renew(&store, &done, worker, ahead, plus(ahead, 60_000)).await);
        // Both records read back, and Redis keeps them as long as before.
        assert_eq!(read(&store, &running, now).await, running_record);
        assert!(matches!(
            read(&store, &done, now).await.state,
            RecordState::Completed { .. }
        ));
        assert_eq!(raw.pttl(&store.record_key(&running)).await, -1);
        let after = raw.pttl(&store.record_key(&done)).await;
        assert!(
            after > 0 && after + (SLACK_MS as i64) >= done_pttl,
            "{after} < {done_pttl}"
        );
        // Later the worker completes its running claim; the outcome is kept as long.
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    &running,
                    worker,
                    &outcome(),
                    plus(now, 1_000)
                ))
                .await
                .unwrap(),
            Completion::Saved
        );
        assert!(matches!(
            read(&store, &running, plus(now, 1_000)).await.state,
            RecordState::Completed { .. }
        ));
        let pttl = raw.pttl(&store.record_key(&running)).await;
        assert!(pttl > 0 && pttl as u64 <= ttl + GC_MARGIN_MS, "{pttl}");
        assert_kept_for(
            &mut raw,
            &store.record_key(&running),
            ttl + GC_MARGIN_MS,
            "completed",
        )
        .await;
        // The fast caller's records, in progress, carry no Redis expiry; completed, they live
        // until the server's clock passes their deadline too (a year and a day ahead), not
        // just a day as its own clock would have it.
        let (fast_key, fast_record) = (key(0x10_000), store.record_key(&key(0x10_000)));
        assert_eq!(raw.pttl(&fast_record).await, -1);
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    &fast_key,
                    fast,
                    &outcome(),
                    ahead
                ))
                .await
                .unwrap(),
            Completion::Saved
        );
        assert_kept_for(&mut raw, &fast_record, YEAR_MS + ttl + GC_MARGIN_MS, "fast").await;
        assert!(raw.pttl(&fast_record).await as u64 <= YEAR_MS + ttl + GC_MARGIN_MS);
        // A caller a year behind completes records the server's clock sees expired long ago:
        // they are kept until its own clock passes their deadline.
        let behind = minus(now, YEAR_MS);
        let slow = key(0x102);
        claim(&store, &slow, worker, behind, 60_000, ttl).await;
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    &slow,
                    worker,
                    &outcome(),
                    behind
                ))
                .await
                .unwrap(),
            Completion::Saved
        );
        let pttl = raw.pttl(&store.record_key(&slow)).await;
        assert!(pttl > 0 && pttl as u64 <= ttl + GC_MARGIN_MS, "{pttl}");
        assert_kept_for(
            &mut raw,
            &store.record_key(&slow),
            ttl + GC_MARGIN_MS,
            "slow",
        )
        .await;
    }

    // pins L1, G1, S8: an in-progress record carries no Redis expiry however its lease and
    // expiry move (a claim, renewals past the expiry, which raise it to the lease, a shorter
    // lease, which lowers nothing); its completion sets one from the raised expiry plus the
    // margin, by the completing caller's clock and the server's; a completed record whose
    // deadline lies past GC_MAX_MS is kept without one
    #[tokio::test]
    async fn in_progress_records_carry_no_redis_expiry_and_completions_set_it() {
        let (store, mut raw, _cleanup) = setup().await;
        let owner = OwnerToken::random();
        let now = raw.server_now().await;
        let k = key(8);
        let record = store.record_key(&k);
        claim(&store, &k, owner, now, 5_000, 10_000).await;
        assert_eq!(raw.pttl(&record).await, -1, "claimed");
        // A lease past the expiry (three days, for a record that expires in 10 s).
        let long = plus(now, 3 * DAY_MS);
        assert!(renew(&store, &k, owner, plus(now, 1_000), long).await);
        assert_eq!(raw.pttl(&record).await, -1, "renewed");
        assert_eq!(
            read(&store, &k, now).await.expires_at,
            long,
            "covers the lease"
        );
        // A shorter lease shortens nothing.
        assert!(renew(&store, &k, owner, plus(now, 1_500), plus(now, 2_000)).await);
        assert_eq!(
            read(&store, &k, now).await.expires_at,
            long,
            "shorter lease"
        );
        assert_eq!(raw.pttl(&record).await, -1, "renewed again");
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    &k,
                    owner,
                    &outcome(),
                    plus(now, 2_000)
                ))
                .await
                .unwrap(),
            Completion::Saved
        );
        let pttl = raw.pttl(&record).await as u64;
        assert!(pttl <= 3 * DAY_MS + GC_MARGIN_MS, "{pttl}");
        assert_kept_for(&mut raw, &record, 3 * DAY_MS + GC_MARGIN_MS, "completed").await;
        // A renewal and a completion by a caller a year ahead (the record must be live by
        // that clock: one with a long expiry): kept until the later deadline of both clocks.
        let k2 = key(9);
        let record2 = store.record_key(&k2);
        claim(&store, &k2, owner, now, 5_000, 2 * YEAR_MS).await;
        let ahead = plus(now, YEAR_MS);
        assert!(renew(&store, &k2, owner, ahead, plus(ahead, 60_000)).await);
        assert_eq!(raw.pttl(&record2).await, -1, "renewed ahead");
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    &k2,
                    owner,
                    &outcome(),
                    ahead
                ))
                .await
                .unwrap(),
            Completion::Saved
        );
        assert_kept_for(
            &mut raw,
            &record2,
            2 * YEAR_MS + GC_MARGIN_MS,
            "completed ahead",
        )
        .await;
        assert!(raw.pttl(&record2).await as u64 <= 2 * YEAR_MS + GC_MARGIN_MS);
        // Past the largest time to live Redis keeps a completed record without expiry.
        let k3 = key(10);
        let record3 = store.record_key(&k3);
        claim(&store, &k3, owner, now, 5_000, 10_000).await;
        assert!(renew(&store, &k3, owner, now, plus(now, GC_MAX_MS)).await);
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    &k3,
                    owner,
                    &outcome(),
                    now
                ))
                .await
                .unwrap(),
            Completion::Saved
        );
        assert_eq!(raw.pttl(&record3).await, -1);
    }

    // pins F1, S10, P4, S8: records written by a build of layout 1 (no fence, no unknown
    // state) or layout 2 (no label) are found, replayed and written by this build (layout 1
    // reads with fence 1 and becomes layout 2 when renewed; a marking or a completion makes
    // it layout 5 with fence 1 and no label; claims over them and takeovers write layout 5
    // with the label; both read with no label; in progress past their expiry they stay
    // live); a record of a newer layout is refused with a typed error and left untouched
    #[tokio::test]
    async fn layout_1_and_2_records_are_found_and_migrated_in_place() {
        let (store, mut raw, _cleanup) = setup().await;
        assert_eq!(REDIS_LAYOUT_VERSION, 5);
        let t0 = Timestamp::from_millis(9_000_000);
        let owner = OwnerToken::random();
        let fingerprint = fp(1);
        // Six in-progress records and a completed one, as layout 1 wrote them.
        let (created_at, expires_at, lease_until) = (
            digits(t0.as_millis()),
            digits(t0.as_millis() + 10_000),
            digits(t0.as_millis() + 1_000),
        );
        for n in 20..26 {
            let _: i64 = raw
                .cmd(&[
                    "HSET",
                    &store.record_key(&key(n)),
                    "v",
                    "1",
                    "fingerprint",
                    fingerprint.as_str(),
                    "created_at",
                    &created_at,
                    "expires_at",
                    &expires_at,
                    "owner",
                    &owner.to_hex(),
                    "lease_until",
                    &lease_until,
                ])
                .await;
        }
        let outcome_text = outcome().as_str().to_owned();
        let done = store.record_key(&key(26));
        let _: i64 = raw
            .cmd(&[
                "HSET",
                &done,
                "v",
                "1",
                "fingerprint",
                fingerprint.as_str(),
                "created_at",
                &created_at,
                "expires_at",
                &expires_at,
                "outcome",
                &outcome_text,
                "completed_at",
                &digits(t0.as_millis() + 5),
            ])
            .await;
        // Read, and answered to a claim, with fence 1.
        let in_progress = read(&store, &key(20), t0).await;
        assert_eq!(in_progress.fence, 1);
        assert_eq!(
            in_progress.state,
            RecordState::InProgress {
                owner,
                lease_until: plus(t0, 1_000)
            }
        );
        assert_eq!(
            (in_progress.created_at, in_progress.expires_at),
            (t0, plus(t0, 10_000))
        );
        let replay = claim(&store, &key(26), OwnerToken::random(), t0, 100, 10_000).await;
        match replay {
            Claim::Existing(Record {
                fence: 1,
                state: RecordState::Completed { outcome, .. },
                ..
            }) => assert_eq!(outcome.as_str(), outcome_text),
            other => panic!("expected the completed layout-1 record, got {other:?}"),
        }
        assert_eq!(
            raw.field(&done, "v").await.as_deref(),
            Some("1"),
            "a read writes nothing"
        );
        assert_eq!(in_progress.label, None, "written before labels existed");
        // Written in place: layout 2, fence 1 (renew); layout 5, fence 1, no label (mark
        // unknown, complete); layout 5 with the taker's fence and the label (take over).
        assert!(renew(&store, &key(20), owner, t0, plus(t0, 2_000)).await);
        assert!(mark_unknown(&store, &key(21), owner, t0, t0).await);
        assert_eq!(
            store
                .complete(crate::support::complete_request(
                    &key(22),
                    owner,
                    &outcome(),
                    t0
                ))
                .await
                .unwrap(),
            Completion::Saved
        );
        let seen = read(&store, &key(23), t0).await;
        assert!(take_over(&store, &key(23), &seen, OwnerToken::random(), t0, 2).await);
        for (n, fence, layout) in [(20, 1, "2"), (21, 1, "5"), (22, 1, "5"), (23, 2, "5")] {
            let record = store.record_key(&key(n));
            assert_eq!(
                raw.field(&record, "v").await.as_deref(),
                Some(layout),
                "{n}"
            );
            assert_eq!(
                raw.field(&record, "fence").await,
                Some(digits(fence)),
                "{n}"
            );
            let label = read(&store, &key(n), t0).await.label;
            assert_eq!(label.is_some(), n == 23, "{n}: {label:?}");
            assert_eq!(read(&store, &key(n), t0).await.fence, fence, "{n}");
        }
        // Released as before; in progress past its expiry, still live (S8); the completed
        // one claimed over once expired, with the next fence.
        assert!(store.release(&key(24), owner).await.unwrap());
        let later = plus(t0, 10_000);
        assert!(matches!(
            claim(&store, &key(25), OwnerToken::random(), later, 100, 10_000).await,
            Claim::Existing(Record {
                fence: 1,
                state: RecordState::InProgress { .. },
                ..
            })
        ));
        assert_eq!(
            claim(&store, &key(26), OwnerToken::random(), later, 100, 10_000).await,
            Claim::Acquired {
                fence: 2,
                reopened: false
            }
        );
        assert_eq!(
            read(&store, &key(26), later).await.label.as_ref(),
            Some(&*super::LABEL)
        );
        // Layout 2 (fence, unknown outcomes, no label): an in-progress record, a completed
        // one, an unknown outcome.
        let layout_2 = |n: u32, fence: u64, state: &[(&'static str, String)]| {
            let mut fields = vec![
                ("v", "2".to_owned()),
                ("fingerprint", fingerprint.as_str().to_owned()),
                ("created_at", created_at.clone()),
                ("expires_at", expires_at.clone()),
                ("fence", digits(fence)),
            ];
            fields.extend_from_slice(state);
            (store.record_key(&key(n)), fields)
        };
        let running = [
            ("owner", owner.to_hex()),
            ("lease_until", lease_until.clone()),
        ];
        let unknown = [
            ("owner", owner.to_hex()),
            ("lease_until", lease_until.clone()),
            ("unknown_since", created_at.clone()),
        ];
        let completed = [
            ("outcome", outcome_text.clone()),
            ("completed_at", digits(t0.as_millis() + 5)),
        ];
        for (record, fields) in [
            layout_2(30, 5, &running),
            layout_2(31, 3, &completed),
            layout_2(32, 4, &unknown),
        ] {
            let mut args = vec!["HSET", record.as_str()];
            for (name, value) in &fields {
                args.extend([*name, value.as_str()]);
            }
            let _: i64 = raw.cmd(&args).await;
        }
        let running_2 = read(&store, &key(30), t0).await;
        assert_eq!((running_2.fence, running_2.label), (5, None));
        match claim(&store, &key(31), OwnerToken::random(), t0, 100, 10_000).await {
            Claim::Existing(Record {
                fence: 3,
                state: RecordState::Completed { outcome, .. },
                label: None,
                ..
            }) => assert_eq!(outcome.as_str(), outcome_text),
            other => panic!("expected the completed layout-2 record, got {other:?}"),
        }
        assert!(renew(&store, &key(30), owner, t0, plus(t0, 3_000)).await);
        let renewed = store.record_key(&key(30));
        assert_eq!(raw.field(&renewed, "v").await.as_deref(), Some("2"));
        assert_eq!(
            raw.field(&renewed, "tool").await,
            None,
            "a renewal writes no label"
        );
        let seen = read(&store, &key(32), t0).await;
        assert!(take_over(&store, &key(32), &seen, OwnerToken::random(), t0, 5).await);
        let taken = store.record_key(&key(32));
        assert_eq!(raw.field(&taken, "v").await.as_deref(), Some("5"));
        assert_eq!(raw.field(&taken, "unknown_since").await, None);
        let taken = read(&store, &key(32), t0).await;
        assert_eq!(
            (taken.fence, taken.label.as_ref()),
            (5, Some(&*super::LABEL))
        );
        assert_eq!(
            claim(&store, &key(31), OwnerToken::random(), later, 100, 10_000).await,
            Claim::Acquired {
                fence: 4,
                reopened: false
            },
            "a claim over an expired layout-2 record continues its fence"
        );
        assert_eq!(
            raw.field(&store.record_key(&key(31)), "v").await.as_deref(),
            Some("5")
        );
        // A record of a newer layout: every operation refuses it, typed, and changes nothing.
        let newer = store.record_key(&key(27));
        let _: i64 = raw
            .cmd(&[
                "HSET",
                &newer,
                "v",
                "6",
                "fingerprint",
                fingerprint.as_str(),
                "expires_at",
                &digits(t0.as_millis() + 10_000),
                "owner",
                &owner.to_hex(),
                "lease_until",
                &digits(t0.as_millis() + 1_000),
                "fence",
                &digits(1),
                "epoch",
                "7",
            ])
            .await;
        let hash = raw.hash(&newer).await;
        let k = key(27);
        let seen = Record {
            fingerprint: fingerprint.clone(),
            created_at: t0,
            expires_at: plus(t0, 10_000),
            fence: 1,
            state: RecordState::InProgress {
                owner,
                lease_until: plus(t0, 1_000),
            },
            label: Some(super::LABEL.clone()),
        };
        let errors = [
            store.read(&k, t0).await.map(drop),
            store
                .claim(ClaimRequest {
                    key: &k,
                    fingerprint: &fingerprint,
                    owner,
                    now: later,
                    lease_until: later,
                    expires_at: plus(later, 10_000),
                    label: &super::LABEL,
                })
                .await
                .map(drop),
            store
                .take_over(TakeoverRequest {
                    key: &k,
                    seen_owner: owner,
                    seen_lease_until: plus(t0, 1_000),
                    owner: OwnerToken::random(),
                    now: t0,
                    lease_until: t0,
                    expires_at: plus(t0, 10_000),
                    fence: seen.fence + 1,
                    label: &super::LABEL,
                    entry: crate::support::takeover_entry(),
                })
                .await
                .map(drop),
            store
                .renew(RenewRequest {
                    key: &k,
                    owner,
                    now: t0,
                    lease_until: plus(t0, 5_000),
                })
                .await
                .map(drop),
            store
                .mark_unknown(MarkUnknownRequest {
                    key: &k,
                    owner,
                    now: t0,
                    since: t0,
                    entry: crate::support::unknown_entry(),
                })
                .await
                .map(drop),
            store
                .complete(crate::support::complete_request(&k, owner, &outcome(), t0))
                .await
                .map(drop),
            store.release(&k, owner).await.map(drop),
        ];
        for (n, result) in errors.into_iter().enumerate() {
            let error = result.expect_err("a newer layout is refused");
            assert_eq!(error.kind, StoreErrorKind::Corrupt, "{n}: {error}");
            assert!(error.message.contains(&newer), "{n}: {error}");
            assert!(error.message.contains("layout version 6"), "{n}: {error}");
        }
        assert_eq!(raw.hash(&newer).await, hash, "left untouched");
        // An expired completed record whose fence is not a number is not claimed over (F1
        // cannot continue from it): a typed error.
        let bad = store.record_key(&key(28));
        let _: i64 = raw
            .cmd(&[
                "HSET",
                &bad,
                "v",
                "2",
                "fingerprint",
                fingerprint.as_str(),
                "created_at",
                &digits(0),
                "expires_at",
                &digits(1),
                "outcome",
                &outcome_text,
                "completed_at",
                &digits(1),
                "fence",
                "x",
            ])
            .await;
        let error = store
            .claim(ClaimRequest {
                key: &key(28),
                fingerprint: &fingerprint,
                owner,
                now: t0,
                lease_until: t0,
                expires_at: plus(t0, 10),
                label: &super::LABEL,
            })
            .await
            .expect_err("a fence that is not a number");
        assert_eq!(error.kind, StoreErrorKind::Corrupt, "{error}");
        assert!(error.message.contains("fence"), "{error}");
        assert_eq!(raw.field(&bad, "fence").await.as_deref(), Some("x"));
    }
}

// ---------------------------------------------------------------------------------------
// Labels in the record hash and the index that serves list, purge and stats (P1, P4,
// I3–I5), on the store directly.
// ---------------------------------------------------------------------------------------

mod index {
    use idem_runtime::store::{
        Claim, ClaimRequest, ListQuery, OwnerToken, PurgeOutcome, Record, RecordState, StateFilter,
    };
    use idem_runtime::{IdempotencyKey, RecordLabel, RedisStore, ScopePath, Store, Timestamp};

    use super::never_twice::{claim, digits, fp, key, outcome, plus, setup, take_over, Raw};
    use crate::conformance::read;

    /// Claims `key` at `now` with `label` (lease 1 s, TTL 10 s).
    async fn claim_labelled(
        store: &RedisStore,
        key: &IdempotencyKey,
        now: Timestamp,
        label: &RecordLabel,
    ) -> OwnerToken {
        let (owner, fingerprint) = (OwnerToken::random(), fp(1));
        let claim = store
            .claim(ClaimRequest {
                key,
                fingerprint: &fingerprint,
                owner,
                now,
                lease_until: plus(now, 1_000),
                expires_at: plus(now, 10_000),
                label,
            })
            .await
            .unwrap();
        assert!(matches!(claim, Claim::Acquired { .. }), "{claim:?}");
        owner
    }

    async fn score(raw: &mut Raw, set: &str, key: &IdempotencyKey) -> Option<u64> {
        let score: Option<String> = raw.cmd(&["ZSCORE", set, key.as_str()]).await;
        score.map(|s| s.parse().unwrap())
    }

    async fn tools(raw: &mut Raw, store: &RedisStore) -> Vec<String> {
        let mut tools: Vec<String> = raw
            .cmd(&["SMEMBERS", &format!("{}:tools", store.index_key())])
            .await;
        tools.sort();
        tools
    }

    fn conversation(id: &str) -> ScopePath {
        ScopePath::new().with("conversation", id)
    }

    // pins P1, I3, I4: a claim writes the label fields (namespace and key_args only when
    // present) and indexes the key in the prefix's set and its tool's set, scored by
    // created_at; a takeover re-scores it; a release and a purge remove it; one page of a
    // listing and one purge are one round trip each
    #[tokio::test]
    async fn claims_write_the_label_and_index_the_record() {
        let (store, mut raw, _cleanup) = setup().await;
        let t0 = Timestamp::from_millis(5_000_000);
        let index = store.index_key();
        assert_eq!(index, format!("{}index", store.prefix()));
        let plain = RecordLabel::new("send_refund", conversation("c/1"));
        let owner = claim_labelled(&store, &key(1), t0, &plain).await;
        let record = store.record_key(&key(1));
        assert_eq!(raw.field(&record, "v").await.as_deref(), Some("5"));
        assert_eq!(
            raw.field(&record, "tool").await.as_deref(),
            Some("send_refund")
        );
        assert_eq!(
            raw.field(&record, "scope").await.as_deref(),
            Some("conversation=c%2F1")
        );
        assert_eq!(raw.field(&record, "namespace").await, None);
        assert_eq!(raw.field(&record, "key_args").await, None);
        let odd_tool = "a:b/é";
        let full = RecordLabel {
            namespace: Some("tenant-a".to_owned()),
            key_args: Some(r#"{"order":1}"#.to_owned()),
            ..RecordLabel::new(odd_tool, ScopePath::new())
        };
        claim_labelled(&store, &key(2), plus(t0, 1), &full).await;
        assert_eq!(read(&store, &key(2), t0).await.label, Some(full.clone()));
        assert_eq!(
            raw.field(&store.record_key(&key(2)), "scope")
                .await
                .as_deref(),
            Some(""),
            "global: an empty scope"
        );

        let refunds = store.tool_index_key("send_refund");
        let odd = store.tool_index_key(odd_tool);
        assert_eq!(odd, format!("{index}:tool:613a622fc3a9"), "the tool in hex");
        assert_eq!(score(&mut raw, &index, &key(1)).await, Some(t0.as_millis()));
        assert_eq!(
            score(&mut raw, &refunds, &key(1)).await,
            Some(t0.as_millis())
        );
        assert_eq!(
            score(&mut raw, &odd, &key(2)).await,
            Some(t0.as_millis() + 1)
        );
        assert_eq!(score(&mut raw, &refunds, &key(2)).await, None);
        assert_eq!(tools(&mut raw, &store).await, [odd_tool, "send_refund"]);

        // A takeover re-scores the record (its created_at is the takeover's now), and moves
        // it to the set of the tool it writes (here the suite's label, `conformance`).
        let seen = read(&store, &key(1), t0).await;
        let t1 = plus(t0, 5_000);
        assert!(take_over(&store, &key(1), &seen, OwnerToken::random(), t1, 2).await);
        assert_eq!(score(&mut raw, &index, &key(1)).await, Some(t1.as_millis()));
        assert_eq!(score(&mut raw, &refunds, &key(1)).await, None);
        let conformance = store.tool_index_key("conformance");
        assert_eq!(
            score(&mut raw, &conformance, &key(1)).await,
            Some(t1.as_millis())
        );
        assert!(!store.release(&key(1), owner).await.unwrap(), "fenced");

        // A release removes the members.
        let released = claim_labelled(&store, &key(3), t1, &plain).await;
        assert_eq!(score(&mut raw, &index, &key(3)).await, Some(t1.as_millis()));
        assert!(store.release(&key(3), released).await.unwrap());
        assert_eq!(score(&mut raw, &index, &key(3)).await, None);
        assert_eq!(score(&mut raw, &refunds, &key(3)).await, None);

        // Listing by tool reads that tool's set: one round trip for a small page.
        let by_tool = ListQuery::new().tool(odd_tool);
        store.list(&by_tool, t1).await.unwrap(); // loads the script
        let before = store.round_trips().unwrap();
        let page = store.list(&by_tool, t1).await.unwrap();
        assert_eq!(store.round_trips().unwrap() - before, 1);
        assert_eq!(page.records.len(), 1);
        assert_eq!(page.records[0].key, key(2));

        // Purge: kept without force (in progress), deleted with it; members removed, and
        // the tool without records leaves the registry.
        assert!(matches!(
            store.purge(&key(2), false, t1).await.unwrap(),
            PurgeOutcome::Kept(_)
        ));
        let before = store.round_trips().unwrap();
        let purged = store.purge(&key(2), true, t1).await.unwrap();
        assert_eq!(store.round_trips().unwrap() - before, 1);
        assert!(
            matches!(purged, PurgeOutcome::Deleted(ref r) if r.label == Some(full.clone())),
            "{purged:?}"
        );
        assert_eq!(score(&mut raw, &index, &key(2)).await, None);
        assert_eq!(score(&mut raw, &odd, &key(2)).await, None);
        assert_eq!(tools(&mut raw, &store).await, ["conformance"]);

        // A completed record is purged without force; an expired one is left to Redis's
        // expiry (absent, G1), keeping its fence for the next claim (F1); one in progress
        // past its expiry is live (S8): kept without force.
        let t2 = plus(t1, 1);
        let done = claim_labelled(&store, &key(4), t2, &plain).await;
        store
            .complete(crate::support::complete_request(
                &key(4),
                done,
                &outcome(),
                t2,
            ))
            .await
            .unwrap();
        assert!(matches!(
            store.purge(&key(4), false, t2).await.unwrap(),
            PurgeOutcome::Deleted(ref r) if matches!(r.state, RecordState::Completed { .. })
        ));
        let finished = claim_labelled(&store, &key(5), t2, &plain).await;
        store
            .complete(crate::support::complete_request(
                &key(5),
                finished,
                &outcome(),
                t2,
            ))
            .await
            .unwrap();
        let expired = plus(t2, 10_000);
        assert_eq!(
            store.purge(&key(5), true, expired).await.unwrap(),
            PurgeOutcome::Absent
        );
        assert_eq!(
            raw.field(&store.record_key(&key(5)), "fence").await,
            Some(digits(1))
        );
        assert!(matches!(
            store.purge(&key(1), false, expired).await.unwrap(),
            PurgeOutcome::Kept(Record { fence: 2, .. })
        ));
    }

    // pins I3: a member whose record Redis deleted (its key expired) is forgotten, from the
    // prefix's set and its tool's, by the listing that meets it, and by the sweep of later
    // claims when no listing does
    #[tokio::test]
    async fn members_of_records_redis_deleted_are_forgotten() {
        let (store, mut raw, _cleanup) = setup().await;
        let t0 = Timestamp::from_millis(7_000_000);
        let label = RecordLabel::new("send_refund", conversation("c-1"));
        let (index, refunds) = (store.index_key(), store.tool_index_key("send_refund"));
        for n in 1..=4 {
            claim_labelled(&store, &key(n), plus(t0, n.into()), &label).await;
        }
        for n in [1, 2] {
            let _: i64 = raw.cmd(&["DEL", &store.record_key(&key(n))]).await;
        }
        let page = store.list(&ListQuery::new(), t0).await.unwrap();
        let listed: Vec<_> = page.records.iter().map(|r| r.key.clone()).collect();
        assert_eq!(listed, [key(4), key(3)]);
        for n in [1, 2] {
            assert_eq!(score(&mut raw, &index, &key(n)).await, None, "{n}");
            assert_eq!(score(&mut raw, &refunds, &key(n)).await, None, "{n}");
        }

        // No listing: the claims that follow sweep the index.
        for n in [3, 4] {
            let _: i64 = raw.cmd(&["DEL", &store.record_key(&key(n))]).await;
        }
        let mut claims = 0;
        while score(&mut raw, &index, &key(3)).await.is_some()
            || score(&mut raw, &index, &key(4)).await.is_some()
        {
            claims += 1;
            assert!(claims <= 10, "the sweep never reached the deleted records");
            claim_labelled(&store, &key(100 + claims), plus(t0, 10), &label).await;
        }
        for n in [3, 4] {
            assert_eq!(score(&mut raw, &refunds, &key(n)).await, None, "{n}");
        }
        let zcard: u64 = raw.cmd(&["ZCARD", &index]).await;
        assert_eq!(zcard, u64::from(claims), "only the live records remain");
    }

    // pins I3: records created in the same millisecond, more than a batch of them, page in
    // key order, each once, with and without a selective filter
    #[tokio::test]
    async fn records_of_one_millisecond_page_by_key() {
        let (store, _raw, _cleanup) = setup().await;
        let t0 = Timestamp::from_millis(8_000_000);
        let mut all = Vec::new();
        for n in 0..250u32 {
            let conv = if n % 5 == 0 { "c-rare" } else { "c-1" };
            let label = RecordLabel::new("send_refund", conversation(conv));
            claim_labelled(&store, &key(1_000 + n), t0, &label).await;
            all.push((key(1_000 + n), conv));
        }
        all.sort_by(|a, b| b.0.cmp(&a.0));
        for (query, wanted) in [
            (ListQuery::new().limit(7), all.clone()),
            (
                ListQuery::new().scope(conversation("c-rare")).limit(3),
                all.iter()
                    .filter(|(_, c)| *c == "c-rare")
                    .cloned()
                    .collect(),
            ),
        ] {
            let mut seen = Vec::new();
            let mut query = query;
            loop {
                let page = store.list(&query, t0).await.unwrap();
                seen.extend(page.records.iter().map(|r| r.key.clone()));
                match page.next {
                    Some(cursor) => query = query.after(cursor),
                    None => break,
                }
            }
            let wanted: Vec<_> = wanted.into_iter().map(|(k, _)| k).collect();
            assert_eq!(seen, wanted);
        }
        let stats = store.stats(t0).await.unwrap();
        assert_eq!(stats.total.in_progress, 250);
        let rare = ListQuery::new().scope(conversation("c-rare"));
        let counts = store.purge_matching(&rare, true, t0).await.unwrap();
        assert_eq!((counts.deleted, counts.kept), (50, 0));
        assert_eq!(store.stats(t0).await.unwrap().total.in_progress, 200);
    }

    // pins P4, I3, I5: records written before the index existed (layouts 1 and 2) replay but
    // are not listed or counted until `reindex` adds them; then they list and count with no
    // label (tool ""); a second reindex adds nothing; keys that are not records are skipped
    #[tokio::test]
    async fn records_of_older_layouts_are_listed_after_reindex() {
        let (store, mut raw, _cleanup) = setup().await;
        let t0 = Timestamp::from_millis(6_000_000);
        let fingerprint = fp(1);
        let (created_at, expires_at) = (digits(t0.as_millis()), digits(t0.as_millis() + 10_000));
        let owner = OwnerToken::random();
        let _: i64 = raw
            .cmd(&[
                "HSET",
                &store.record_key(&key(40)),
                "v",
                "1",
                "fingerprint",
                fingerprint.as_str(),
                "created_at",
                &created_at,
                "expires_at",
                &expires_at,
                "outcome",
                outcome().as_str(),
                "completed_at",
                &created_at,
            ])
            .await;
        let _: i64 = raw
            .cmd(&[
                "HSET",
                &store.record_key(&key(41)),
                "v",
                "2",
                "fingerprint",
                fingerprint.as_str(),
                "created_at",
                &digits(t0.as_millis() + 1),
                "expires_at",
                &expires_at,
                "owner",
                &owner.to_hex(),
                "lease_until",
                &expires_at,
                "fence",
                &digits(3),
            ])
            .await;
        let _: () = raw
            .cmd(&["SET", &format!("{}rec:not-a-key", store.prefix()), "x"])
            .await;
        claim(
            &store,
            &key(42),
            OwnerToken::random(),
            plus(t0, 2),
            1_000,
            10_000,
        )
        .await;
        let listed = |store: &RedisStore, query: ListQuery| {
            let store = store.clone();
            async move {
                let page = store.list(&query, t0).await.unwrap();
                page.records
                    .into_iter()
                    .map(|r| (r.key, r.record.label.map(|l| l.tool)))
                    .collect::<Vec<_>>()
            }
        };
        assert_eq!(
            listed(&store, ListQuery::new()).await,
            [(key(42), Some("conformance".to_owned()))]
        );
        assert_eq!(store.stats(t0).await.unwrap().total.total(), 1);
        assert!(matches!(
            claim(&store, &key(40), OwnerToken::random(), t0, 1_000, 10_000).await,
            Claim::Existing(_)
        ));

        assert_eq!(store.reindex().await.unwrap(), 2);
        assert_eq!(store.reindex().await.unwrap(), 0, "nothing more to add");
        assert_eq!(
            listed(&store, ListQuery::new()).await,
            [
                (key(42), Some("conformance".to_owned())),
                (key(41), None),
                (key(40), None)
            ]
        );
        assert_eq!(
            listed(&store, ListQuery::new().tool("")).await,
            [(key(41), None), (key(40), None)]
        );
        assert_eq!(
            listed(&store, ListQuery::new().state(StateFilter::InProgress))
                .await
                .len(),
            2
        );
        let stats = store.stats(t0).await.unwrap();
        assert_eq!(stats.total.total(), 3);
        assert_eq!(stats.by_tool[""].completed, 1);
        assert_eq!(stats.by_tool[""].in_progress, 1);
        // Purged like any other record: the members go with it.
        assert!(matches!(
            store.purge(&key(40), false, t0).await.unwrap(),
            PurgeOutcome::Deleted(ref r) if r.label.is_none() && r.fence == 1
        ));
        assert_eq!(score(&mut raw, &store.index_key(), &key(40)).await, None);
        assert_eq!(
            score(&mut raw, &store.tool_index_key(""), &key(40)).await,
            None
        );
    }
}
