//! The key after any call (contract S13): `CallContext::last_key()` and `Error::key()`
//! whatever the call ended with, and each call's own outcome when calls run concurrently
//! on clones of one context (`CallContext::outcome_of`).

use crate::support;

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::{prepare, CallStatus, Engine, Error, ToolError};
use support::{key_of, refund, spec, FaultyStore, Harness};

// pins S13: a Mismatch leaves the key on the context and on the error
#[tokio::test]
async fn mismatch_publishes_the_key() {
    let h = Harness::new();
    let ctx = h.ctx("c1");
    let tool = spec("send_refund", 86_400_000, 60_000, 0);
    let call = |amount: u64| {
        let ctx = ctx.clone();
        async move {
            let prepared = prepare(tool, Some(&ctx), |a| {
                a.key("order", &1u64)?;
                a.fingerprint("amount", &amount).map(drop)
            })?;
            prepared.run(async { Ok::<_, ToolError>(amount) }).await
        }
    };
    assert_eq!(call(5).await, Ok(5));
    let key = ctx.last_key().expect("the executed call's key");
    assert_eq!(ctx.last_outcome().unwrap().key, key);
    match call(6).await {
        Err(ToolError::Idem(error @ Error::Mismatch { .. })) => {
            assert_eq!(error.key(), Some(key.clone()));
        }
        other => panic!("expected Mismatch, got {other:?}"),
    }
    assert_eq!(ctx.last_key(), Some(key.clone()));
    assert_eq!(ctx.last_outcome(), None, "no outcome for the mismatch");
    assert_eq!(ctx.outcome_of(&key), None, "the mismatch had no outcome");
}

// pins S13: an InProgress leaves the key on the context and on the error
#[tokio::test]
async fn in_progress_publishes_the_key() {
    let h = Harness::new();
    let ctx = h.ctx("c1");
    let tool = spec("send_refund", 86_400_000, 60_000, 0);
    let held = prepare(tool, Some(&ctx), |a| a.key("order", &1u64).map(drop))
        .unwrap()
        .claim::<u64, ToolError>()
        .await
        .expect("claimed");
    let duplicate = h.ctx("c1");
    match refund(tool, &duplicate, &h.log, 1).await {
        Err(ToolError::Idem(error @ Error::InProgress { .. })) => {
            assert_eq!(error.key(), duplicate.last_key());
            assert_eq!(error.key(), Some(key_of(tool, &h.ctx("c1"), 1)));
        }
        other => panic!("expected InProgress, got {other:?}"),
    }
    drop(held);
}

// pins S13: a store error after the key was derived carries it; one before does not, and
// errors before derivation leave no key
#[tokio::test]
async fn store_errors_and_early_errors() {
    let h = Harness::new();
    let faulty = Arc::new(FaultyStore::default());
    faulty.fail_claim.store(true, Ordering::SeqCst);
    let engine = Engine::from_shared(faulty.clone(), Arc::new(h.clock.clone()));
    let ctx = idem_runtime::CallContext::new()
        .with_engine(engine)
        .with_conversation("c1");
    let tool = spec("send_refund", 86_400_000, 60_000, 0);
    match refund(tool, &ctx, &h.log, 1).await {
        Err(ToolError::Idem(error @ Error::Store { .. })) => {
            assert!(error.key().is_some());
            assert_eq!(error.key(), ctx.last_key());
        }
        other => panic!("expected a store error, got {other:?}"),
    }
    // MissingScope: no key derived, and the previous call's key is gone.
    let no_scope = ctx.clone().with_conversation("");
    let same_slot = no_scope.clone();
    match refund(tool, &no_scope, &h.log, 1).await {
        Err(ToolError::Idem(error @ Error::MissingScope { .. })) => assert_eq!(error.key(), None),
        other => panic!("expected MissingScope, got {other:?}"),
    }
    assert_eq!(same_slot.last_key(), None);
    // The serialized form of a store error without a key is unchanged.
    let early = Error::Store {
        tool: "t".into(),
        source: idem_runtime::StoreError::new(
            "memory",
            idem_runtime::StoreErrorKind::Unavailable,
            "down",
        ),
        key: None,
    };
    let json = serde_json::to_value(&early).unwrap();
    assert!(json.get("key").is_none(), "{json}");
    assert_eq!(serde_json::from_value::<Error>(json).unwrap(), early);
}

// pins S13, K9: a carried key is published as soon as the call takes it
#[tokio::test]
async fn carried_key_is_published() {
    let h = Harness::new();
    let tool = spec("send_refund", 86_400_000, 60_000, 0);
    let attempt = idem_runtime::AttemptRecord::new("send_refund");
    let first = h.ctx("c1").with_attempt(attempt.clone());
    refund(tool, &first, &h.log, 1).await.unwrap();
    let key = first.last_key().unwrap();
    let retry = h.ctx("c2").with_attempt(attempt);
    refund(tool, &retry, &h.log, 1).await.unwrap();
    assert_eq!(retry.last_key(), Some(key.clone()));
    assert_eq!(retry.outcome_of(&key).unwrap().status, CallStatus::Replayed);
}

// pins S13: 16 calls running at once on clones of one context each find their own
// outcome, whatever the others did since; last_outcome is one of them
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn concurrent_calls_on_clones_each_find_their_own_outcome() {
    const CALLS: usize = 16;
    let h = Harness::new();
    let ctx = h.ctx("c1");
    let tool = spec("send_refund", 86_400_000, 60_000, 5_000);
    let all_running = Arc::new(tokio::sync::Barrier::new(CALLS));
    let all_done = Arc::new(tokio::sync::Barrier::new(CALLS));
    let mut tasks = Vec::new();
    for order in 0..CALLS as u64 {
        let (ctx, all_running, all_done) = (ctx.clone(), all_running.clone(), all_done.clone());
        tasks.push(tokio::spawn(async move {
            let prepared = prepare(tool, Some(&ctx), |a| a.key("order", &order).map(drop)).unwrap();
            let key = prepared.key().clone();
            let value = prepared
                .run(async {
                    // Every body runs at once; they finish in whatever order.
                    all_running.wait().await;
                    tokio::time::sleep(Duration::from_millis(order % 4)).await;
                    Ok::<_, ToolError>(order)
                })
                .await
                .unwrap();
            all_done.wait().await;
            let own = ctx.outcome_of(&key).expect("this call's outcome");
            (order, value, key, own)
        }));
    }
    let mut keys = Vec::new();
    for task in tasks {
        let (order, value, key, own) = task.await.unwrap();
        assert_eq!(value, order);
        assert_eq!(own.key, key);
        assert_eq!(own.status, CallStatus::Executed);
        keys.push(key);
    }
    keys.sort();
    keys.dedup();
    assert_eq!(keys.len(), CALLS);
    let last = ctx.last_outcome().expect("the latest to finish");
    assert!(keys.contains(&last.key));
}
