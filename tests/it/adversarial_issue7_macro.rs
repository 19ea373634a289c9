//! Adversarial review of issue 7 through the attribute: the lease while a reconcile function
//! runs (L1, U3).
//!
//! Run: `cargo test --test it adversarial_issue7_macro:: -- --include-ignored --test-threads=1`

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_agent::{
    idempotent, AttemptInfo, CallContext, Engine, MemoryStore, Reconciled, SystemClock, ToolError,
};

static SYNC_RUNS: AtomicUsize = AtomicUsize::new(0);
static SYNC_ASKED: AtomicUsize = AtomicUsize::new(0);
static ASYNC_RUNS: AtomicUsize = AtomicUsize::new(0);
static ASYNC_ASKED: AtomicUsize = AtomicUsize::new(0);

/// A sync reconcile fn that takes 1 s (a blocking HTTP client asking the payment API).
fn slow_sync_check(_order: &u64, _attempt: &AttemptInfo) -> Reconciled<u64, ToolError> {
    SYNC_ASKED.fetch_add(1, Ordering::SeqCst);
    std::thread::sleep(Duration::from_millis(1_000));
    Reconciled::Done(Ok(42))
}

#[idempotent(reconcile = slow_sync_check, lease = "300ms", wait = "1ms", dispatch = false)]
async fn refund_sync_check(order: u64) -> Result<u64, ToolError> {
    if SYNC_RUNS.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(ToolError::outcome_unknown("bank timed out"));
    }
    Ok(order)
}

/// The same, async: awaited alongside the heartbeat.
async fn slow_async_check(_order: &u64, _attempt: &AttemptInfo) -> Reconciled<u64, ToolError> {
    ASYNC_ASKED.fetch_add(1, Ordering::SeqCst);
    tokio::time::sleep(Duration::from_millis(1_000)).await;
    Reconciled::Done(Ok(42))
}

#[idempotent(reconcile = slow_async_check, lease = "300ms", wait = "1ms", dispatch = false)]
async fn refund_async_check(order: u64) -> Result<u64, ToolError> {
    if ASYNC_RUNS.fetch_add(1, Ordering::SeqCst) == 0 {
        return Err(ToolError::outcome_unknown("bank timed out"));
    }
    Ok(order)
}

fn ctx() -> CallContext {
    CallContext::new()
        .with_engine(Engine::new(MemoryStore::new(), SystemClock))
        .with_conversation("conv_adv7_macro")
}

// BUG (L1 "while a reconcile function runs … its owner extends the lease"; U3 "exactly once
// per takeover"): an async tool with a *sync* reconcile fn calls the fn directly, before
// `settle` polls the heartbeat alongside it. A reconcile fn slower than the lease (300 ms
// here, 1 s of blocking I/O) is never renewed: a duplicate 600 ms in takes the live
// reconciler over and reconciles a second time (two asks, and two runs of whatever the
// reconciler decides).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
#[ignore = "LIMITATION (L1, documented): an async tool's sync reconcile fn blocks its thread, and the inline heartbeat with it"]
async fn l1_sync_reconcile_fn_of_an_async_tool_is_not_renewed() {
    let c = ctx();
    let first = c.run(refund_sync_check(7)).await;
    assert!(
        matches!(first, Err(ToolError::OutcomeUnknown(_))),
        "{first:?}"
    );
    let c2 = c.clone();
    let reconciler = tokio::spawn(async move { c2.run(refund_sync_check(7)).await });
    tokio::time::sleep(Duration::from_millis(600)).await;
    let duplicate = c.run(refund_sync_check(7)).await;
    let reconciled = reconciler.await.unwrap();
    println!(
        "reconciler {reconciled:?}, duplicate {duplicate:?}, asked {}",
        SYNC_ASKED.load(Ordering::SeqCst)
    );
    assert_eq!(
        SYNC_ASKED.load(Ordering::SeqCst),
        1,
        "the live reconciler was taken over"
    );
}

// Held: the same with an async reconcile fn: renewed, the duplicate waits / gets InProgress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn held_async_reconcile_fn_is_renewed() {
    let c = ctx();
    let first = c.run(refund_async_check(7)).await;
    assert!(
        matches!(first, Err(ToolError::OutcomeUnknown(_))),
        "{first:?}"
    );
    let c2 = c.clone();
    let reconciler = tokio::spawn(async move { c2.run(refund_async_check(7)).await });
    tokio::time::sleep(Duration::from_millis(600)).await;
    let duplicate = c.run(refund_async_check(7)).await;
    let reconciled = reconciler.await.unwrap();
    println!("reconciler {reconciled:?}, duplicate {duplicate:?}");
    assert_eq!(ASYNC_ASKED.load(Ordering::SeqCst), 1);
    assert_eq!(reconciled, Ok(42));
    let _ = Arc::new(());
}
