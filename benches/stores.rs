//! First call and replay latency per store backend, through an async `#[idempotent]` tool
//! with an explicit `&CallContext` and the system clock (issue 3, item 11), and the store
//! round trips each costs (issue 3, item 4), printed once per backend.
//!
//! Memory always; SQLite (a file in a temporary directory), Redis and PostgreSQL when the
//! root package's features `sqlite`, `redis`, `postgres` are on (see `backends/mod.rs`:
//! servers, fresh key prefix / schema per run, deleted at the end).
//!
//! Run: `cargo bench --bench stores --features idem-agent/sqlite,idem-agent/redis,idem-agent/postgres`.
//! `IDEM_BENCH_STORES=redis,postgres` keeps only the named backends (all by default).

use std::hint::black_box;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use criterion::{criterion_group, criterion_main, Criterion};
use serde::{Deserialize, Serialize};
use tokio::runtime::Runtime;

use idem_agent::{idempotent, CallContext, Engine, Store, SystemClock, ToolError};

mod backends;

use backends::{backends, Backend};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Receipt {
    refund_id: String,
    amount_cents: u64,
}

#[idempotent(dispatch = false)]
async fn send_refund(
    ctx: &CallContext,
    order_id: &str,
    amount_cents: u64,
    currency: &str,
) -> Result<Receipt, ToolError> {
    let _ = (ctx, currency);
    Ok(Receipt {
        refund_id: format!("re_{order_id}"),
        amount_cents,
    })
}

async fn call(ctx: &CallContext, order_id: &str) -> Receipt {
    send_refund(ctx, order_id, 129_900, "EUR")
        .await
        .expect("the store answers")
}

/// Order ids never used before in this process.
fn fresh_ids(n: u64) -> Vec<String> {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    let start = NEXT.fetch_add(n, Ordering::Relaxed);
    (start..start + n).map(|i| format!("ord_{i:012}")).collect()
}

fn context(store: &Arc<dyn Store>) -> CallContext {
    let engine = Engine::from_shared(store.clone(), Arc::new(SystemClock));
    CallContext::new()
        .with_engine(engine)
        .with_conversation("conv_bench_stores")
}

/// The round trips of one first call and one replay of a new key, after a warm-up call.
fn round_trips_per_call(runtime: &Runtime, backend: &Backend) -> Option<(u64, u64)> {
    let ctx = context(&backend.store);
    runtime.block_on(async {
        let [warm, id] = <[String; 2]>::try_from(fresh_ids(2)).ok()?;
        call(&ctx, &warm).await;
        call(&ctx, &warm).await;
        let before = backend.store.round_trips()?;
        call(&ctx, &id).await;
        let after_first = backend.store.round_trips()?;
        call(&ctx, &id).await;
        let after_replay = backend.store.round_trips()?;
        Some((after_first - before, after_replay - after_first))
    })
}

fn stores(c: &mut Criterion) {
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let backends: Vec<Backend> = backends(&runtime);
    for backend in &backends {
        match round_trips_per_call(&runtime, backend) {
            Some((first, replay)) => println!(
                "round trips per call, {}: first call {first}, replay {replay}",
                backend.name
            ),
            None => println!("round trips per call, {}: not counted", backend.name),
        }
    }
    let mut group = c.benchmark_group("store_first_call");
    for backend in &backends {
        let ctx = context(&backend.store);
        group.bench_function(backend.name, |b| {
            b.iter_custom(|iters| {
                let ids = fresh_ids(iters);
                runtime.block_on(async {
                    let start = Instant::now();
                    for id in &ids {
                        black_box(call(&ctx, id).await);
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
    let mut group = c.benchmark_group("store_replay");
    for backend in &backends {
        let ctx = context(&backend.store);
        let [id] = <[String; 1]>::try_from(fresh_ids(1)).expect("one id");
        runtime.block_on(call(&ctx, &id));
        group.bench_function(backend.name, |b| {
            b.iter_custom(|iters| {
                runtime.block_on(async {
                    let start = Instant::now();
                    for _ in 0..iters {
                        black_box(call(&ctx, black_box(&id)).await);
                    }
                    start.elapsed()
                })
            })
        });
    }
    group.finish();
    // Clean up inside the runtime's lifetime (the stores' pools and connections).
    runtime.block_on(async move { drop(backends) });
}

criterion_group! {
    name = benches;
    config = Criterion::default().measurement_time(Duration::from_secs(3)).warm_up_time(Duration::from_secs(1));
    targets = stores
}
criterion_main!(benches);
