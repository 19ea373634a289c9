//! What lease renewal costs (issue 7, contract L1), counted in store round trips
//! (`Store::round_trips`) on every backend: a first call whose body lasts k × heartbeat
//! costs the claim and the completion (2) plus one renewal per whole heartbeat the call
//! spans; a replay costs 1 and never renews. Counts, not timings: nothing here is sampled
//! by criterion.
//!
//! Tools with a 300 ms lease and a 100 ms heartbeat (so 10 renewals per body-second; with
//! the default 60 s lease and heartbeat of a third of it, one per 20 s), an async body
//! (`tokio::time::sleep`) and a sync one (`std::thread::sleep`, its lease renewed from a
//! task of its own), bodies of 50 ms, 250 ms and 1 050 ms (expected: 0, 2 and 10 renewals),
//! the system clock, a two-worker tokio runtime. Each case runs `IDEM_BENCH_RENEWAL_REPS`
//! (default 3) times with fresh keys, after one warm-up call per backend and body kind (so
//! that PostgreSQL has prepared its statements and Redis knows its scripts), then a replay
//! of each key.
//!
//! Run: `cargo bench --bench renewal --features idem-agent/sqlite,idem-agent/redis,idem-agent/postgres`
//! (backends as in `benches/backends/mod.rs`; `IDEM_BENCH_STORES=memory,sqlite` keeps only
//! those). Exits with status 1 if any count differs from the expected one.

mod backends;

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::{Deserialize, Serialize};

use idem_agent::{idempotent, CallContext, CallStatus, Engine, SystemClock, ToolError};

use backends::{backends, Backend};

/// The tools' heartbeat (their lease is 300 ms).
const HEARTBEAT_MS: u64 = 100;
/// Body lengths, with the renewals each must cost.
const BODIES_MS: [(u64, u64); 3] = [(50, 0), (250, 2), (1_050, 10)];

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Receipt {
    refund_id: String,
    body_ms: u64,
}

#[idempotent(dispatch = false, ttl = "1h", lease = "300ms", heartbeat = "100ms")]
async fn slow_refund(
    ctx: &CallContext,
    order_id: &str,
    body_ms: u64,
) -> Result<Receipt, ToolError> {
    let _ = ctx;
    tokio::time::sleep(Duration::from_millis(body_ms)).await;
    Ok(Receipt {
        refund_id: format!("re_{order_id}"),
        body_ms,
    })
}

#[idempotent(dispatch = false, ttl = "1h", lease = "300ms", heartbeat = "100ms")]
fn slow_refund_sync(ctx: &CallContext, order_id: &str, body_ms: u64) -> Result<Receipt, ToolError> {
    let _ = ctx;
    std::thread::sleep(Duration::from_millis(body_ms));
    Ok(Receipt {
        refund_id: format!("re_{order_id}"),
        body_ms,
    })
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Body {
    Async,
    Sync,
}

impl Body {
    fn name(self) -> &'static str {
        match self {
            Body::Async => "async",
            Body::Sync => "sync",
        }
    }
}

/// An order id never used before in this process.
fn fresh_id() -> String {
    static NEXT: AtomicU64 = AtomicU64::new(0);
    format!("ord_{:012}", NEXT.fetch_add(1, Ordering::Relaxed))
}

/// One call of the tool (on a task of the runtime, as a sync tool would be called from async
/// code); returns its round trips, its status and its wall time.
async fn measured_call(
    backend: &Backend,
    ctx: &CallContext,
    body: Body,
    order_id: &str,
    body_ms: u64,
) -> (u64, CallStatus, Duration) {
    let before = backend.store.round_trips().expect("every store counts");
    let (ctx, order_id) = (ctx.clone(), order_id.to_owned());
    let start = Instant::now();
    let (receipt, status) = tokio::spawn(async move {
        let receipt = match body {
            Body::Async => slow_refund(&ctx, &order_id, body_ms).await,
            Body::Sync => slow_refund_sync(&ctx, &order_id, body_ms),
        };
        (receipt, ctx.last_outcome().expect("an outcome").status)
    })
    .await
    .expect("the call's task");
    let elapsed = start.elapsed();
    let receipt = receipt.expect("the store answers");
    assert_eq!(receipt.body_ms, body_ms);
    let after = backend.store.round_trips().expect("every store counts");
    (after - before, status, elapsed)
}

/// `min–max` of `values`, or the one value.
fn span(values: &[u64]) -> String {
    let (min, max) = (values.iter().min(), values.iter().max());
    match (min, max) {
        (Some(min), Some(max)) if min == max => min.to_string(),
        (Some(min), Some(max)) => format!("{min}–{max}"),
        _ => "–".to_owned(),
    }
}

fn main() {
    let reps: usize = std::env::var("IDEM_BENCH_RENEWAL_REPS")
        .ok()
        .and_then(|r| r.parse().ok())
        .unwrap_or(3);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .build()
        .expect("a tokio runtime");
    let backends = backends(&runtime);
    println!(
        "lease 300 ms, heartbeat {HEARTBEAT_MS} ms ({} renewals per body-second), {reps} calls per case",
        1_000 / HEARTBEAT_MS
    );
    println!(
        "| backend | body | body length | first call: round trips | of which renewals | expected | replay: round trips | first call wall time |"
    );
    println!("| --- | --- | --- | --- | --- | --- | --- | --- |");
    let mut unexpected = 0;
    runtime.block_on(async {
        for backend in &backends {
            let engine = Engine::from_shared(backend.store.clone(), Arc::new(SystemClock));
            let ctx = CallContext::new()
                .with_engine(engine)
                .with_conversation("conv_bench_renewal");
            for body in [Body::Async, Body::Sync] {
                // Warm-up: statements prepared, scripts loaded, connections open.
                let warm = fresh_id();
                measured_call(backend, &ctx, body, &warm, 250).await;
                measured_call(backend, &ctx, body, &warm, 250).await;
                for (body_ms, renewals) in BODIES_MS {
                    let (mut firsts, mut replays, mut walls) = (vec![], vec![], vec![]);
                    for _ in 0..reps {
                        let id = fresh_id();
                        let (first, status, wall) =
                            measured_call(backend, &ctx, body, &id, body_ms).await;
                        assert_eq!(status, CallStatus::Executed);
                        let (replay, status, _) =
                            measured_call(backend, &ctx, body, &id, body_ms).await;
                        assert_eq!(status, CallStatus::Replayed);
                        firsts.push(first);
                        replays.push(replay);
                        walls.push(wall.as_millis() as u64);
                    }
                    let expected = 2 + renewals;
                    unexpected += firsts.iter().filter(|&&f| f != expected).count();
                    unexpected += replays.iter().filter(|&&r| r != 1).count();
                    let renewed: Vec<u64> = firsts.iter().map(|f| f.saturating_sub(2)).collect();
                    println!(
                        "| {} | {} | {body_ms} ms | {} | {} | {expected} | {} | {} ms |",
                        backend.name,
                        body.name(),
                        span(&firsts),
                        span(&renewed),
                        span(&replays),
                        span(&walls),
                    );
                }
            }
        }
    });
    println!("counts other than expected: {unexpected}");
    // Clean up inside the runtime's lifetime (the stores' pools and connections).
    runtime.block_on(async move { drop(backends) });
    if unexpected > 0 {
        std::process::exit(1);
    }
}
