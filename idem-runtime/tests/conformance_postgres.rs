//! The store conformance suite (contract S1–S12) on the PostgreSQL store, then what only a
//! shared server can show: two stores (two pools) on one schema, a new store replaying what
//! an old one saved, garbage collection, the schema version, typed errors, and the sync path
//! without a runtime refused.
//!
//! The server is `IDEM_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`).
//! Every store made here lives in a fresh schema `idem_test_<32 hex digits>`, dropped when
//! the test is done, so runs (and tests within a run) never see each other's records.

#![cfg(feature = "postgres")]

mod support;
#[macro_use]
mod conformance;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::store::{OwnerToken, RecordState, POSTGRES_SCHEMA_VERSION};
use idem_runtime::{
    prepare, CallContext, Engine, PostgresConnectError, PostgresStore, Store, StoreErrorKind,
    ToolError,
};
use support::{default_spec, refund, Harness, TestStore};

fn url() -> String {
    std::env::var("IDEM_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A schema name no other test or run uses; dropped (with its tables) when this is dropped.
struct Schema {
    name: String,
}

impl Schema {
    fn fresh() -> Self {
        Schema {
            name: format!("idem_test_{:032x}", OwnerToken::random().as_u128()),
        }
    }

    fn store(&self) -> PostgresStore {
        PostgresStore::with_schema(&url(), &self.name).expect("a valid URL and schema")
    }

    /// Runs `sql` (with this schema's name for `{schema}`) on a connection of its own, on a
    /// thread of its own with its own runtime, so it works from sync code, async code and
    /// `Drop` alike.
    fn try_admin(&self, sql: &str) -> Result<(), String> {
        let (url, sql) = (
            url(),
            sql.replace("{schema}", &format!("\"{}\"", self.name)),
        );
        std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let (client, connection) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(connection);
                client
                    .batch_execute(&sql)
                    .await
                    .map_err(|e| format!("{sql:?}: {e}"))
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the admin thread panicked".to_owned()))
    }

    fn admin(&self, sql: &str) {
        if let Err(e) = self.try_admin(sql) {
            panic!("admin statement: {e}");
        }
    }
}

impl Drop for Schema {
    /// Drops the schema, also when the test failed (then a failure to drop is only printed).
    fn drop(&mut self) {
        if let Err(e) = self.try_admin("DROP SCHEMA IF EXISTS {schema} CASCADE") {
            if std::thread::panicking() {
                eprintln!("could not drop the test schema {}: {e}", self.name);
            } else {
                panic!("could not drop the test schema {}: {e}", self.name);
            }
        }
    }
}

/// A fresh store in a fresh schema, the schema dropped with the harness.
fn postgres() -> TestStore {
    let schema = Schema::fresh();
    TestStore {
        store: Arc::new(schema.store()),
        keep: Some(Box::new(schema)),
    }
}

conformance_suite!(postgres, crate::postgres, async_only);

// pins S2 (across pools, as across processes): two stores with a pool each, 32 tasks each, on
// the same 8 keys → exactly one execution per key, and every caller gets that execution's outcome
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_stores_run_each_key_once() {
    const KEYS: u64 = 8;
    const TASKS_PER_STORE: usize = 32;
    let schema = Schema::fresh();
    let stores = [schema.store(), schema.store()];
    let spec = support::spec("hammer", 86_400_000, 60_000, 30_000);
    let executions: Arc<Vec<AtomicUsize>> =
        Arc::new((0..KEYS).map(|_| AtomicUsize::new(0)).collect());
    let barrier = Arc::new(tokio::sync::Barrier::new(2 * TASKS_PER_STORE));
    let mut tasks = Vec::new();
    for (s, store) in stores.iter().enumerate() {
        let h = Arc::new(Harness::on(TestStore {
            store: Arc::new(store.clone()),
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
                    let executions = executions.clone();
                    let out = p
                        .run(async move {
                            let n = executions[order as usize].fetch_add(1, Ordering::SeqCst);
                            tokio::time::sleep(Duration::from_millis(2)).await;
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

// pins S3, S8: a completed key replays through a new store (a new pool: a restarted process)
#[tokio::test]
async fn completed_keys_replay_through_a_new_store() {
    let schema = Schema::fresh();
    let h = Harness::on(TestStore {
        store: Arc::new(schema.store()),
        keep: None,
    });
    let ctx = h.ctx("conv_restart");
    assert_eq!(refund(default_spec(), &ctx, &h.log, 1).await, Ok(100));
    drop(ctx);
    let clock = h.clock.clone();
    drop(h);
    let engine = Engine::from_shared(Arc::new(schema.store()), Arc::new(clock));
    let ctx = CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_restart");
    let p = prepare(default_spec(), Some(&ctx), |a| {
        a.key("order", &1u64).map(drop)
    })
    .unwrap();
    let out: Result<u64, ToolError> = p.run(async { panic!("must replay") }).await;
    assert_eq!(out, Ok(100));
    assert_eq!(
        ctx.last_outcome().unwrap().status,
        idem_runtime::CallStatus::Replayed
    );
}

// pins S7: a body that panics inside a task releases its claim (spawned on the runtime); the
// next call runs the body
#[tokio::test]
async fn panicking_async_body_releases_the_claim() {
    let h = Harness::on(postgres());
    let spec = default_spec();
    let ctx = h.ctx("conv_panic");
    let key = support::key_of(spec, &ctx, 6);
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &6u64).map(drop)).unwrap();
    async fn buggy_tool() -> Result<u64, ToolError> {
        panic!("tool bug")
    }
    let task = tokio::spawn(p.run(buggy_tool()));
    assert!(task.await.unwrap_err().is_panic());
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while h.store.read(&key, h.now()).await.unwrap().is_some() {
        assert!(std::time::Instant::now() < deadline, "claim still held");
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
    assert_eq!(refund(spec, &ctx, &h.log, 6).await, Ok(600));
    assert_eq!(h.log.len(), 1);
}

// pins S10: outside a tokio runtime every operation is a clear Unsupported error, and a sync
// tool's body never runs without a claim
#[test]
fn the_sync_path_without_a_runtime_is_unsupported() {
    let h = Harness::on(postgres());
    let ctx = h.ctx("conv_sync");
    let key = support::key_of(default_spec(), &ctx, 3);
    let error = pollster::block_on(h.store.read(&key, h.now())).unwrap_err();
    assert_eq!(error.kind, StoreErrorKind::Unsupported, "{error}");
    assert!(error.message.contains("tokio runtime"), "{error}");
    let p = prepare(default_spec(), Some(&ctx), |a| {
        a.key("order", &3u64).map(drop)
    })
    .unwrap();
    let out = p.run_blocking(|| {
        h.log.record("sync", "must not run");
        Ok::<_, ToolError>(1u64)
    });
    match out {
        Err(ToolError::Idem(idem_runtime::Error::Store { .. })) => {}
        other => panic!("expected a store error, got {other:?}"),
    }
    assert_eq!(h.log.len(), 0);
}

// pins S8: garbage collection deletes expired rows only
#[tokio::test]
async fn garbage_collection_deletes_only_expired_rows() {
    let schema = Schema::fresh();
    let store = schema.store();
    let h = Harness::on(TestStore {
        store: Arc::new(store.clone()),
        keep: None,
    });
    let short = support::spec("short", 1_000, 500, 0);
    let long = support::spec("long", 10_000, 500, 0);
    let ctx = h.ctx("conv_gc");
    assert_eq!(refund(short, &ctx, &h.log, 1).await, Ok(100));
    assert_eq!(refund(long, &ctx, &h.log, 1).await, Ok(100));
    let long_key = ctx.last_outcome().unwrap().key;
    assert_eq!(
        store.collect_garbage(h.now()).await.unwrap(),
        0,
        "both live"
    );
    h.clock.advance(Duration::from_millis(999));
    assert_eq!(
        store.collect_garbage(h.now()).await.unwrap(),
        0,
        "live at ttl − 1 ms"
    );
    h.clock.advance(Duration::from_millis(1));
    assert_eq!(
        store.collect_garbage(h.now()).await.unwrap(),
        1,
        "expired at ttl"
    );
    let record = store.read(&long_key, h.now()).await.unwrap().unwrap();
    assert!(matches!(record.state, RecordState::Completed { .. }));
}

// pins S10: bad arguments are typed connect errors naming the URL without its password; an
// unreachable server is a transient store error naming it the same way
#[tokio::test]
async fn errors_are_typed_and_name_the_url_without_its_password() {
    match PostgresStore::connect("postgres://agent:hunter2@db/x?connect_timeout=nope") {
        Err(e @ PostgresConnectError::InvalidUrl { .. }) => {
            let text = e.to_string();
            assert!(text.contains("agent:***@db/x"), "{text}");
            assert!(!text.contains("hunter2"), "{text}");
            let store_error = idem_runtime::StoreError::from(e);
            assert_eq!(store_error.kind, StoreErrorKind::Unsupported);
        }
        other => panic!("expected InvalidUrl, got {other:?}"),
    }
    for schema in ["", "Idem", "x\"; DROP TABLE y; --", "9lives"] {
        match PostgresStore::with_schema(&url(), schema) {
            Err(PostgresConnectError::InvalidSchema { schema: got, .. }) => {
                assert_eq!(got, schema)
            }
            other => panic!("expected InvalidSchema for {schema:?}, got {other:?}"),
        }
    }
    let store = PostgresStore::connect("postgres://agent:hunter2@127.0.0.1:1/x").unwrap();
    assert_eq!(store.url(), "postgres://agent:***@127.0.0.1:1/x");
    assert_eq!(store.schema(), "idem");
    let h = Harness::on(TestStore {
        store: Arc::new(store),
        keep: None,
    });
    let ctx = h.ctx("conv_down");
    let key = support::key_of(default_spec(), &ctx, 1);
    let error = h.store.read(&key, h.now()).await.unwrap_err();
    assert_eq!(error.kind, StoreErrorKind::Unavailable, "{error}");
    assert!(error.message.contains("agent:***@127.0.0.1:1"), "{error}");
    assert!(!error.message.contains("hunter2"), "{error}");
    let out = refund(default_spec(), &ctx, &h.log, 1).await;
    assert!(
        matches!(out, Err(ToolError::Idem(idem_runtime::Error::Store { .. }))),
        "{out:?}"
    );
    assert_eq!(h.log.len(), 0, "no body runs without a claim");
}

// pins S10: a schema of another version is refused (Unsupported), not touched
#[tokio::test]
async fn another_schema_version_is_refused() {
    let schema = Schema::fresh();
    let h = Harness::on(TestStore {
        store: Arc::new(schema.store()),
        keep: None,
    });
    let ctx = h.ctx("conv_version");
    assert_eq!(refund(default_spec(), &ctx, &h.log, 1).await, Ok(100));
    assert_eq!(POSTGRES_SCHEMA_VERSION, 1);
    schema.admin("UPDATE {schema}.meta SET value = 99 WHERE name = 'schema_version'");
    let newer = schema.store();
    let key = ctx.last_outcome().unwrap().key;
    let error = newer.read(&key, h.now()).await.unwrap_err();
    assert_eq!(error.kind, StoreErrorKind::Unsupported, "{error}");
    assert!(error.message.contains("version 99"), "{error}");
    assert!(error.message.contains(&schema.name), "{error}");
    assert!(h.store.read(&key, h.now()).await.unwrap().is_some());
}

// pins S10: a row that is not a valid record is a typed Corrupt error, not a panic or a replay
#[tokio::test]
async fn corrupt_rows_are_typed_errors() {
    let schema = Schema::fresh();
    let h = Harness::on(TestStore {
        store: Arc::new(schema.store()),
        keep: None,
    });
    let ctx = h.ctx("conv_corrupt");
    assert_eq!(refund(default_spec(), &ctx, &h.log, 1).await, Ok(100));
    let key = ctx.last_outcome().unwrap().key;
    let k = key.as_str();
    for (corrupt, restore) in [
        (
            format!("UPDATE {{schema}}.records SET fingerprint = 'not hex' WHERE key = '{k}'"),
            format!(
                "UPDATE {{schema}}.records SET fingerprint = '{}' WHERE key = '{k}'",
                "0".repeat(64)
            ),
        ),
        (
            format!("UPDATE {{schema}}.records SET created_at = -1 WHERE key = '{k}'"),
            format!("UPDATE {{schema}}.records SET created_at = 0 WHERE key = '{k}'"),
        ),
    ] {
        schema.admin(&corrupt);
        let error = h.store.read(&key, h.now()).await.unwrap_err();
        assert_eq!(error.kind, StoreErrorKind::Corrupt, "{corrupt}: {error}");
        assert!(error.message.contains(&schema.name), "{error}");
        let out = refund(default_spec(), &ctx, &h.log, 1).await;
        assert!(
            matches!(out, Err(ToolError::Idem(idem_runtime::Error::Store { .. }))),
            "{corrupt}: {out:?}"
        );
        schema.admin(&restore);
    }
    assert!(h.store.read(&key, h.now()).await.unwrap().is_some());
    assert_eq!(h.log.len(), 1, "the body never ran on a corrupt record");
}
