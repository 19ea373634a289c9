//! Adversarial probes of the store backends through the attribute (issue 3). Each test names
//! the contract rules it pins. The store-level probes are in
//! `idem-runtime/tests/it/adversarial_stores.rs`.

#![cfg(feature = "redis")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_agent::testkit::ManualClock;
use idem_agent::{idempotent, CallContext, Engine, RedisStore, ToolError};

static RUNS: AtomicUsize = AtomicUsize::new(0);

/// A sync tool, as a user writes one: the attribute drives it with `run_blocking`.
#[idempotent(scope = "global", name = "adversarial_sync_refund")]
fn sync_refund(order: u64) -> Result<u64, ToolError> {
    RUNS.fetch_add(1, Ordering::SeqCst);
    Ok(order * 100)
}

// pins S10 and issue 3 item 1 ("using a network store from a sync tool is either supported
// without blocking an async runtime or a clear error"): a sync `#[idempotent]` tool whose
// engine is a Redis store, called from async code on a current-thread runtime (the default
// `#[tokio::test]`, `#[tokio::main(flavor = "current_thread")]`), must answer: run, or fail
// with a typed store error. Nothing reaches Redis if it hangs (the claim task never runs),
// so there is nothing to clean up.
#[test]
fn sync_tool_with_redis_on_a_current_thread_runtime_answers() {
    let url =
        std::env::var("IDEM_TEST_REDIS_URL").unwrap_or_else(|_| "redis://127.0.0.1:6379".into());
    let prefix = format!(
        "idem-adv-attr:{:032x}:",
        idem_agent::store::OwnerToken::random().as_u128()
    );
    let (tx, rx) = std::sync::mpsc::channel();
    std::thread::spawn(move || {
        let runtime = tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap();
        let out = runtime.block_on(async move {
            let store = RedisStore::connect_lazy(&url).unwrap().with_prefix(prefix);
            let engine = Engine::from_shared(Arc::new(store), Arc::new(ManualClock::new()));
            let ctx = CallContext::new().with_engine(engine);
            ctx.enter(|| sync_refund(1))
        });
        let _ = tx.send(out);
    });
    match rx.recv_timeout(Duration::from_secs(15)) {
        Ok(Ok(100)) => assert_eq!(RUNS.load(Ordering::SeqCst), 1),
        Ok(Err(ToolError::Idem(idem_agent::Error::Store { .. }))) => {
            assert_eq!(RUNS.load(Ordering::SeqCst), 0)
        }
        Ok(other) => panic!("unexpected {other:?}"),
        Err(_) => panic!("the sync tool never answered (15 s): the thread is blocked for good"),
    }
}
