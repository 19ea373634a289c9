//! The store conformance suite (contract S1–S12) on the Redis store, each test on a fresh
//! key prefix (`idem-test:<uuid>:`) so that runs never see each other's records; then what
//! only a shared server can show: two stores (two connections) on the same keys, the sync
//! path's typed error outside a runtime, typed connect errors, corrupt records.
//!
//! The server is `IDEM_TEST_REDIS_URL` (default `redis://127.0.0.1:6379`). Every test
//! deletes the keys under its prefix when it ends.

#![cfg(feature = "redis")]

mod support;
#[macro_use]
mod conformance;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use idem_runtime::{prepare, RedisConnectError, RedisStore, Store, StoreErrorKind, ToolError};
use support::{default_spec, refund, Harness, TestStore};

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

conformance_suite!(redis, crate::redis_store, async_only);

// pins S2 (across connections, as across processes): two stores with their own connections,
// 32 tasks each, on the same 8 keys → exactly one execution per key, one shared outcome
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_on_one_server_run_each_key_once() {
    const KEYS: u64 = 8;
    const TASKS_PER_STORE: usize = 32;
    let (prefix, _cleanup) = fresh_prefix();
    let spec = support::spec("hammer", 86_400_000, 60_000, 30_000);
    let executions: Arc<Vec<AtomicUsize>> =
        Arc::new((0..KEYS).map(|_| AtomicUsize::new(0)).collect());
    let barrier = Arc::new(tokio::sync::Barrier::new(2 * TASKS_PER_STORE));
    let mut tasks = Vec::new();
    for s in 0..2 {
        let store = RedisStore::connect(&redis_url())
            .await
            .expect("connect")
            .with_prefix(prefix.clone());
        let h = Arc::new(Harness::on(TestStore {
            store: Arc::new(store),
            keep: None,
        }));
        for t in 0..TASKS_PER_STORE {
            let (h, executions, barrier) = (h.clone(), executions.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let ctx = h.ctx("conv_two_stores");
                barrier.wait().await;
                let mut seen = Vec::new();
                for i in 0..KEYS {
                    let order = (i + t as u64) % KEYS; // tasks start on different keys
                    let p =
                        prepare(spec, Some(&ctx), |a| a.key("order", &order).map(drop)).unwrap();
                    let executions = &executions;
                    let out = p
                        .run(async move {
                            let n = executions[order as usize].fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(std::time::Duration::from_millis(2)).await;
                            Ok::<_, ToolError>(format!("order {order}: store {s}, run {n}"))
                        })
                        .await;
                    seen.push((order, out.expect("every caller gets the outcome")));
                }
                seen
            }));
        }
    }
    let mut seen = Vec::new();
    for task in tasks {
        seen.extend(task.await.unwrap());
    }
    conformance::assert_one_execution_and_one_outcome_per_key(&executions, seen);
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
