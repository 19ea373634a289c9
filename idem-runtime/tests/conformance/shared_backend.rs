//! What only a backend shared by several stores can show, written once for every backend that
//! is one (a SQLite file, a PostgreSQL schema, a Redis key prefix): two stores on the same keys
//! run each key once (S2 across connections, as across processes), and a new store replays
//! what an old one saved (S3, S8: a restart). Each backend's module passes its own stores.
//!
//! Also the thin store requests (`read`, `renew`, `mark_unknown`) that the backends'
//! store-level tests send with every field spelled out.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Barrier};
use std::time::Duration;

use idem_runtime::key::IdempotencyKey;
use idem_runtime::store::{MarkUnknownRequest, OwnerToken, Record, RenewRequest, Store};
use idem_runtime::{prepare, CallContext, CallStatus, Engine, Timestamp, ToolError, ToolSpec};

use crate::support::{default_spec, refund, spec, Harness, TestStore};

/// How many keys the two-store hammer claims, and how many callers each store serves.
const KEYS: u64 = 8;
const CALLERS_PER_STORE: usize = 32;

fn hammer_spec() -> &'static ToolSpec {
    spec("hammer", 86_400_000, 60_000, 30_000)
}

fn harness(store: Arc<dyn Store>) -> Arc<Harness> {
    Arc::new(Harness::on(TestStore { store, keep: None }))
}

/// One body of the hammer: counts its run for `order` and names the store and the run.
fn hammer_body(executions: &[AtomicUsize], order: u64, store: usize) -> String {
    let n = executions[order as usize].fetch_add(1, Ordering::SeqCst);
    format!("order {order}: store {store}, run {n}")
}

/// pins S2: `stores` (two stores on one backend), 32 async tasks each on the caller's runtime
/// (run it multi-threaded), on the same 8 keys → exactly one execution per key, and every
/// caller gets that execution's outcome.
pub async fn two_stores_run_each_key_once(stores: [Arc<dyn Store>; 2]) {
    let executions: Arc<Vec<AtomicUsize>> =
        Arc::new((0..KEYS).map(|_| AtomicUsize::new(0)).collect());
    let barrier = Arc::new(tokio::sync::Barrier::new(2 * CALLERS_PER_STORE));
    let mut tasks = Vec::new();
    for (s, store) in stores.into_iter().enumerate() {
        let h = harness(store);
        for t in 0..CALLERS_PER_STORE {
            let (h, executions, barrier) = (h.clone(), executions.clone(), barrier.clone());
            tasks.push(tokio::spawn(async move {
                let ctx = h.ctx("conv_two_stores");
                barrier.wait().await;
                let mut seen = Vec::new();
                for i in 0..KEYS {
                    let order = (i + t as u64) % KEYS; // callers start on different keys
                    let p = prepare(hammer_spec(), Some(&ctx), |a| {
                        a.key("order", &order).map(drop)
                    })
                    .unwrap();
                    let executions = executions.clone();
                    let out = p
                        .run(async move {
                            let out = hammer_body(&executions, order, s);
                            tokio::time::sleep(Duration::from_millis(2)).await;
                            Ok::<_, ToolError>(out)
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
    super::assert_one_execution_and_one_outcome_per_key(&executions, seen);
}

/// pins S2 through the sync path: the same hammer as [`two_stores_run_each_key_once`] with
/// 32 OS threads per store, each calling `run_blocking` outside any runtime.
pub fn two_stores_run_each_key_once_on_threads(stores: [Arc<dyn Store>; 2]) {
    let executions: Arc<Vec<AtomicUsize>> =
        Arc::new((0..KEYS).map(|_| AtomicUsize::new(0)).collect());
    let barrier = Arc::new(Barrier::new(2 * CALLERS_PER_STORE));
    let mut threads = Vec::new();
    for (s, store) in stores.into_iter().enumerate() {
        let h = harness(store);
        for t in 0..CALLERS_PER_STORE {
            let (h, executions, barrier) = (h.clone(), executions.clone(), barrier.clone());
            threads.push(std::thread::spawn(move || {
                let ctx = h.ctx("conv_two_stores");
                barrier.wait();
                let mut seen = Vec::new();
                for i in 0..KEYS {
                    let order = (i + t as u64) % KEYS; // callers start on different keys
                    let p = prepare(hammer_spec(), Some(&ctx), |a| {
                        a.key("order", &order).map(drop)
                    })
                    .unwrap();
                    let out = p.run_blocking(|| {
                        let out = hammer_body(&executions, order, s);
                        std::thread::sleep(Duration::from_millis(2));
                        Ok::<_, ToolError>(out)
                    });
                    seen.push((order, out.expect("every caller gets the outcome")));
                }
                seen
            }));
        }
    }
    let mut seen = Vec::new();
    for t in threads {
        seen.extend(t.join().unwrap());
    }
    super::assert_one_execution_and_one_outcome_per_key(&executions, seen);
}

/// pins S3, S8: a key completed through `first` replays through the store `reopen` makes
/// afterwards on the same backend (a restarted process: a new file handle, pool or
/// connection), with the body never run again. `first` is dropped before `reopen` is called.
pub async fn completed_keys_replay_through_a_new_store(
    first: Arc<dyn Store>,
    reopen: impl FnOnce() -> Arc<dyn Store>,
) {
    let h = Harness::on(TestStore {
        store: first,
        keep: None,
    });
    let ctx = h.ctx("conv_restart");
    assert_eq!(refund(default_spec(), &ctx, &h.log, 1).await, Ok(100));
    drop(ctx);
    let clock = h.clock.clone();
    drop(h);
    let engine = Engine::from_shared(reopen(), Arc::new(clock));
    let ctx = CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_restart");
    let p = prepare(default_spec(), Some(&ctx), |a| {
        a.key("order", &1u64).map(drop)
    })
    .unwrap();
    let out: Result<u64, ToolError> = p.run(async { panic!("must replay") }).await;
    assert_eq!(out, Ok(100));
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
}

/// The live record of `key` at `now` (panics when there is none or the read fails).
pub async fn read<S: Store + ?Sized>(store: &S, key: &IdempotencyKey, now: Timestamp) -> Record {
    store
        .read(key, now)
        .await
        .expect("read")
        .expect("a live record")
}

/// Renews `owner`'s lease on `key` to `lease_until` (L1); whether the store renewed it.
pub async fn renew<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    owner: OwnerToken,
    now: Timestamp,
    lease_until: Timestamp,
) -> bool {
    store
        .renew(RenewRequest {
            key,
            owner,
            now,
            lease_until,
        })
        .await
        .expect("renew")
}

/// Marks `owner`'s claim on `key` unknown since `since` (U1); whether the store marked it.
pub async fn mark_unknown<S: Store + ?Sized>(
    store: &S,
    key: &IdempotencyKey,
    owner: OwnerToken,
    now: Timestamp,
    since: Timestamp,
) -> bool {
    store
        .mark_unknown(MarkUnknownRequest {
            key,
            owner,
            now,
            since,
            entry: crate::support::unknown_entry(),
        })
        .await
        .expect("mark unknown")
}
