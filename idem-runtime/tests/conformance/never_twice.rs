//! The conformance suite's "never twice" part (issue 7): lease renewal, fencing tokens,
//! unknown outcomes and reconciliation, cancellation after the body began, finishing after
//! the caller went away. Protocol tests run on the harness's manual clock, except where the
//! store's own tasks need real time to settle (bounded waits, never timing assertions).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::key::IdempotencyKey;
use idem_runtime::store::{
    Claim, MarkUnknownRequest, OwnerToken, Record, RecordState, RenewRequest, TakeoverRequest,
};
use idem_runtime::{
    current_attempt, prepare, AttemptInfo, CallContext, CallStatus, Error, OnCancel, Reconciled,
    Scope, ToolError, ToolSpec, UnknownCause,
};

use super::{at, claim_req, fingerprint, harness, test_key, Factory};
use crate::support::{key_of, rerun, Harness};

use super::LABEL;

/// A `'static` spec: 24 h TTL, the given lease and wait (ms), heartbeat default (a third of
/// the lease), and the given reconcile flag and cancellation rule.
fn spec(
    name: &'static str,
    lease_ms: u64,
    wait_ms: u64,
    reconcile: bool,
    on_cancel: OnCancel,
) -> &'static ToolSpec {
    Box::leak(Box::new(ToolSpec {
        scope: Scope::Conversation,
        ttl: Duration::from_secs(86_400),
        lease: Duration::from_millis(lease_ms),
        wait: Duration::from_millis(wait_ms),
        reconcile,
        on_cancel,
        ..ToolSpec::new(name)
    }))
}

/// Calls the refund tool for `order` with a body that counts its runs and returns the fence
/// it ran with.
async fn fenced_refund(
    spec: &'static ToolSpec,
    ctx: &CallContext,
    runs: &AtomicUsize,
    order: u64,
) -> Result<u64, ToolError> {
    let prepared = prepare(spec, Some(ctx), |a| a.key("order", &order).map(drop))?;
    prepared
        .run(async {
            runs.fetch_add(1, Ordering::SeqCst);
            Ok(current_attempt().expect("inside the body").fence())
        })
        .await
}

/// Runs the tool for `order` (the body must run) and returns the attempt its body saw.
async fn attempt_of_a_run(spec: &'static ToolSpec, ctx: &CallContext, order: u64) -> AttemptInfo {
    let seen = std::sync::Mutex::new(None);
    let p = prepare(spec, Some(ctx), |a| a.key("order", &order).map(drop)).unwrap();
    let outcome = p
        .run(async {
            *seen.lock().unwrap() = current_attempt();
            Ok::<u64, ToolError>(0)
        })
        .await;
    assert_eq!(outcome, Ok(0));
    let attempt = seen.lock().unwrap().take();
    attempt.expect("the body ran, inside an attempt")
}

/// The live record of `key` at the harness's now.
async fn record(h: &Harness, key: &IdempotencyKey) -> Option<Record> {
    h.store.read(key, h.now()).await.expect("read")
}

/// Waits, in real time and bounded (5 s), until `key`'s record satisfies `done`: the
/// store's own tasks (a detached write, a renewal in flight) need real time to land.
async fn eventually(
    h: &Harness,
    key: &IdempotencyKey,
    what: &str,
    done: impl Fn(Option<&Record>) -> bool,
) {
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    loop {
        let seen = record(h, key).await;
        if done(seen.as_ref()) {
            return;
        }
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: the record is still {seen:?}"
        );
        tokio::time::sleep(Duration::from_millis(5)).await;
    }
}

fn is_unknown(record: Option<&Record>) -> bool {
    matches!(
        record,
        Some(Record {
            state: RecordState::OutcomeUnknown { .. },
            ..
        })
    )
}

fn lease_until(record: Option<&Record>) -> Option<u64> {
    match record?.state {
        RecordState::InProgress { lease_until, .. } => Some(lease_until.as_millis()),
        _ => None,
    }
}

// pins L1, S5: a body running five leases long, its lease renewed every heartbeat, is never
// taken over by duplicates arriving every quarter lease (each gets InProgress with a
// retry-after hint), and runs once
pub async fn a_renewed_lease_is_never_taken_over(make: Factory) {
    let h = harness(make);
    let spec = spec("slow_report", 1_000, 0, false, OnCancel::Hold);
    let ctx = h.ctx("conv_slow");
    let key = key_of(spec, &ctx, 1);
    let runs = Arc::new(AtomicUsize::new(0));
    let gate = Arc::new(tokio::sync::Notify::new());
    let owner = {
        let (ctx, runs, gate) = (ctx.clone(), runs.clone(), gate.clone());
        tokio::spawn(async move {
            let p = prepare(spec, Some(&ctx), |a| a.key("order", &1u64).map(drop)).unwrap();
            p.run(async {
                runs.fetch_add(1, Ordering::SeqCst);
                gate.notified().await;
                Ok::<u64, ToolError>(100)
            })
            .await
        })
    };
    eventually(&h, &key, "the claim", |r| lease_until(r).is_some()).await;
    let dup_runs = AtomicUsize::new(0);
    for step in 1..=20u64 {
        h.clock.advance(Duration::from_millis(250));
        let now = h.now().as_millis();
        // Renewals are due every 333 ms: wait until the one due by now has landed.
        eventually(&h, &key, "the renewal", |r| {
            lease_until(r).is_some_and(|until| until + 333 >= now + 1_000)
        })
        .await;
        match fenced_refund(spec, &ctx, &dup_runs, 1).await {
            Err(ToolError::Idem(Error::InProgress { retry_after_ms, .. })) => {
                assert!(
                    (1..=333).contains(&retry_after_ms),
                    "step {step}: the hint is the next renewal at the latest, got {retry_after_ms} ms"
                );
            }
            other => panic!("step {step}: a live owner was not waited for: {other:?}"),
        }
    }
    gate.notify_one();
    assert_eq!(owner.await.unwrap(), Ok(100));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(
        dup_runs.load(Ordering::SeqCst),
        0,
        "no duplicate ran the body"
    );
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &1u64).map(drop)).unwrap();
    let replay = p.run(async { Ok::<u64, ToolError>(999) }).await;
    assert_eq!(replay, Ok(100));
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
}

// pins L1, F1, U2a: with `on_unknown = "rerun"`, an owner that stops renewing (its process
// died: no guard ran) is taken over exactly when its last renewal's lease lapses, not a
// millisecond before; the new run knows it is a takeover of a lapsed lease and has the next
// fence
pub async fn rerun_a_dead_owner_is_taken_over_one_lease_after_its_last_renewal(make: Factory) {
    let h = harness(make);
    let spec = rerun(spec("dead_owner", 900, 0, false, OnCancel::Hold));
    let ctx = h.ctx("conv_dead");
    let key = key_of(spec, &ctx, 2);
    let first_claim = h.now();
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &2u64).map(drop)).unwrap();
    let mut owner = Box::pin(p.run(std::future::pending::<Result<u64, ToolError>>()));
    assert!(futures_util::poll!(&mut owner).is_pending());
    eventually(&h, &key, "the claim", |r| lease_until(r).is_some()).await;
    // One renewal (due at +300 ms), driven by polling the owner.
    h.clock.advance(Duration::from_millis(300));
    let renewed_at = h.now().as_millis();
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while lease_until(record(&h, &key).await.as_ref()) != Some(renewed_at + 900) {
        assert!(std::time::Instant::now() < deadline, "no renewal");
        assert!(futures_util::poll!(&mut owner).is_pending());
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    // The process dies: nothing of the owner runs any more.
    std::mem::forget(owner);
    let runs = AtomicUsize::new(0);
    h.clock.advance(Duration::from_millis(899));
    assert!(matches!(
        fenced_refund(spec, &ctx, &runs, 2).await,
        Err(ToolError::Idem(Error::InProgress { .. }))
    ));
    h.clock.advance(Duration::from_millis(1));
    let attempt = attempt_of_a_run(spec, &ctx, 2).await;
    assert!(attempt.is_takeover());
    let previous = attempt.previous().unwrap();
    assert_eq!(previous.cause, UnknownCause::LeaseLapsed);
    assert_eq!(previous.claimed_at, first_claim);
    assert_eq!((previous.fence, attempt.fence()), (1, 2));
    assert_eq!(attempt.key(), &key);
    let outcome = ctx.last_outcome().unwrap();
    assert!(outcome.takeover && outcome.recorded);
    assert_eq!(outcome.fence, 2);
}

// pins F1, U2a: the fence strictly increases across claim → takeover → takeover (dead owners
// taken over under `on_unknown = "rerun"`), and a later claim over the expired record
// continues from it
pub async fn the_fence_strictly_increases_across_takeovers(make: Factory) {
    let h = harness(make);
    let spec = rerun(spec("fenced", 1_000, 0, false, OnCancel::Hold));
    let ctx = h.ctx("conv_fence");
    let key = key_of(spec, &ctx, 3);
    let mut fences = Vec::new();
    for _ in 0..3 {
        let p = prepare(spec, Some(&ctx), |a| a.key("order", &3u64).map(drop)).unwrap();
        let fence = Arc::new(AtomicUsize::new(0));
        let seen = fence.clone();
        let mut owner = Box::pin(p.run(async move {
            seen.store(
                current_attempt().unwrap().fence() as usize,
                Ordering::SeqCst,
            );
            std::future::pending::<Result<u64, ToolError>>().await
        }));
        // Polled until its body began (the store's claim may take a few polls).
        let deadline = std::time::Instant::now() + Duration::from_secs(5);
        while fence.load(Ordering::SeqCst) == 0 {
            assert!(std::time::Instant::now() < deadline, "the body never began");
            assert!(futures_util::poll!(&mut owner).is_pending());
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
        fences.push(fence.load(Ordering::SeqCst) as u64);
        std::mem::forget(owner); // dies without a trace
        h.clock.advance(Duration::from_millis(1_000));
    }
    assert_eq!(fences, [1, 2, 3]);
    let runs = AtomicUsize::new(0);
    assert_eq!(fenced_refund(spec, &ctx, &runs, 3).await, Ok(4));
    assert_eq!(record(&h, &key).await.unwrap().fence, 4);
    // Past the TTL the record expires; a new claim over it continues from its fence.
    h.clock.advance(Duration::from_secs(86_400));
    assert_eq!(fenced_refund(spec, &ctx, &runs, 3).await, Ok(5));
    assert_eq!(runs.load(Ordering::SeqCst), 2);
}

// pins U1, U2a: a body that ends with "outcome unknown" leaves the key unknown: the caller gets
// its error; with `on_unknown = "rerun"`, later calls get OutcomeUnknown (typed, not retryable,
// not held, with since and when to retry) until the lease lapses; then one call runs the body
// again, knowing it is a takeover
pub async fn rerun_an_unknown_outcome_holds_the_key_until_its_lease_lapses(make: Factory) {
    let h = harness(make);
    let spec = rerun(spec("pay", 10_000, 0, false, OnCancel::Hold));
    let ctx = h.ctx("conv_unknown");
    let key = key_of(spec, &ctx, 4);
    let claimed = h.now();
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &4u64).map(drop)).unwrap();
    let first = p
        .run(async { Err::<u64, _>(ToolError::outcome_unknown("the bank timed out")) })
        .await;
    assert_eq!(first, Err(ToolError::outcome_unknown("the bank timed out")));
    assert!(!ctx.last_outcome().unwrap().recorded);
    eventually(&h, &key, "the unknown mark", is_unknown).await;
    let runs = AtomicUsize::new(0);
    h.clock.advance(Duration::from_millis(4_000));
    match fenced_refund(spec, &ctx, &runs, 4).await {
        Err(ToolError::Idem(error @ Error::OutcomeUnknown { .. })) => {
            assert!(!error.is_transient());
            let Error::OutcomeUnknown {
                since,
                retry_after_ms,
                held,
                ..
            } = &error
            else {
                unreachable!()
            };
            assert_eq!(*since, claimed);
            assert_eq!(*retry_after_ms, Some(6_000));
            assert!(
                !held,
                "under `on_unknown = \"rerun\"` the key is not held for a person"
            );
            let text = error.to_string();
            assert!(
                text.contains(&format!(
                    "is unknown since {}: a run that claimed it",
                    claimed.to_rfc3339()
                )),
                "{error}"
            );
            assert!(text.contains("the key is held for 6000 ms more"), "{error}");
        }
        other => panic!("expected OutcomeUnknown, got {other:?}"),
    }
    assert_eq!(runs.load(Ordering::SeqCst), 0);
    h.clock.advance(Duration::from_millis(6_000));
    let attempt = attempt_of_a_run(spec, &ctx, 4).await;
    let previous = attempt.previous().expect("a takeover");
    assert_eq!(previous.cause, UnknownCause::GaveUp);
    assert_eq!(previous.unknown_since, claimed);
    assert_eq!(attempt.fence(), 2);
}

/// Drops `call` as a timeout around it would, once its body's effect landed (`effects` moved
/// from 0), whatever the store's first round trips cost (bounded: 10 s).
async fn timeout_after_the_effect<F: std::future::Future>(call: F, effects: &AtomicUsize) {
    let landed = async {
        while effects.load(Ordering::SeqCst) == 0 {
            tokio::time::sleep(Duration::from_millis(1)).await;
        }
    };
    tokio::select! {
        _ = call => panic!("the call finished; it should still be running"),
        _ = tokio::time::timeout(Duration::from_secs(10), landed) => {}
    }
    assert_eq!(
        effects.load(Ordering::SeqCst),
        1,
        "the effect landed before the timeout"
    );
}

// pins U4, S7, U2a: a body cancelled after it began (a timeout around the call, after the effect)
// holds the key as unknown: a retry does not run the effect again before the lease lapses (with
// `on_unknown = "rerun"`, it is told when the held claim lapses)
pub async fn a_cancelled_body_holds_the_key_as_unknown(make: Factory) {
    let h = harness(make);
    let spec = rerun(spec("cancelled", 30_000, 0, false, OnCancel::Hold));
    let ctx = h.ctx("conv_cancel");
    let key = key_of(spec, &ctx, 5);
    let effects = Arc::new(AtomicUsize::new(0));
    let call = |effects: Arc<AtomicUsize>| {
        let p = prepare(spec, Some(&ctx), |a| a.key("order", &5u64).map(drop)).unwrap();
        p.run(async move {
            effects.fetch_add(1, Ordering::SeqCst);
            std::future::pending::<Result<u64, ToolError>>().await
        })
    };
    timeout_after_the_effect(call(effects.clone()), &effects).await;
    assert_eq!(effects.load(Ordering::SeqCst), 1);
    eventually(&h, &key, "the unknown mark", is_unknown).await;
    let retry = tokio::time::timeout(Duration::from_secs(5), call(effects.clone()))
        .await
        .expect("answered at once");
    assert!(
        matches!(retry, Err(ToolError::Idem(Error::OutcomeUnknown { retry_after_ms: Some(ms), .. })) if ms <= 30_000),
        "{retry:?}"
    );
    assert_eq!(effects.load(Ordering::SeqCst), 1, "one effect");
}

// pins U4, S7: `on_cancel = "release"` releases a cancelled body's claim at once (at least
// once: the next call runs the body again)
pub async fn on_cancel_release_releases_at_once(make: Factory) {
    let h = harness(make);
    let spec = spec("released", 30_000, 0, false, OnCancel::Release);
    let ctx = h.ctx("conv_release");
    let key = key_of(spec, &ctx, 6);
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &6u64).map(drop)).unwrap();
    let (entered_tx, entered_rx) = tokio::sync::oneshot::channel();
    let task = tokio::spawn(p.run(async move {
        entered_tx.send(()).unwrap();
        std::future::pending::<Result<u64, ToolError>>().await
    }));
    entered_rx.await.unwrap();
    task.abort();
    assert!(task.await.unwrap_err().is_cancelled());
    eventually(&h, &key, "the release", |r| r.is_none()).await;
    let runs = AtomicUsize::new(0);
    assert_eq!(fenced_refund(spec, &ctx, &runs, 6).await, Ok(1));
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

// pins U4, S7: a call dropped while its claim may still be in flight leaves no claim once the
// store settled if its body never began; if the body began, the key is held as unknown
pub async fn future_dropped_during_the_claim_leaves_no_claim(make: Factory) {
    let h = harness(make);
    let spec = spec("dropped_early", 60_000, 5_000, false, OnCancel::Hold);
    let ctx = h.ctx("conv_cancel_early");
    let key = key_of(spec, &ctx, 11);
    let began = Arc::new(AtomicUsize::new(0));
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &11u64).map(drop)).unwrap();
    let seen = began.clone();
    let mut call = Box::pin(p.run(async move {
        seen.fetch_add(1, Ordering::SeqCst);
        std::future::pending::<Result<u64, ToolError>>().await
    }));
    assert!(futures_util::poll!(&mut call).is_pending());
    drop(call);
    if began.load(Ordering::SeqCst) == 0 {
        eventually(&h, &key, "the abandoned claim", |r| r.is_none()).await;
        let runs = AtomicUsize::new(0);
        assert_eq!(fenced_refund(spec, &ctx, &runs, 11).await, Ok(1));
    } else {
        eventually(&h, &key, "the unknown mark", is_unknown).await;
    }
}

// pins U4, S7: a panicking body holds the key as unknown (sync path, no runtime); with
// `on_cancel = "release"` it releases and the next call runs the body
pub fn a_panicking_body_holds_the_key_as_unknown(make: Factory) {
    let h = harness(make);
    for (on_cancel, order) in [(OnCancel::Hold, 7u64), (OnCancel::Release, 8)] {
        let spec = spec("panics", 60_000, 0, false, on_cancel);
        let ctx = h.ctx("conv_panic");
        let key = key_of(spec, &ctx, order);
        let result = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
            let p = prepare(spec, Some(&ctx), |a| a.key("order", &order).map(drop)).unwrap();
            p.run_blocking(|| -> Result<u64, ToolError> { panic!("tool bug") })
        }));
        assert!(result.is_err());
        let stored = pollster::block_on(h.store.read(&key, h.now())).unwrap();
        let runs = AtomicUsize::new(0);
        let next = pollster::block_on(fenced_refund(spec, &ctx, &runs, order));
        match on_cancel {
            OnCancel::Hold => {
                assert!(is_unknown(stored.as_ref()), "{stored:?}");
                assert!(
                    matches!(next, Err(ToolError::Idem(Error::OutcomeUnknown { .. }))),
                    "{next:?}"
                );
            }
            OnCancel::Release => {
                assert_eq!(stored, None);
                assert_eq!(next, Ok(1));
            }
        }
    }
}

/// Leaves `order`'s key unknown: a body that ends with "outcome unknown".
async fn leave_unknown(h: &Harness, spec: &'static ToolSpec, ctx: &CallContext, order: u64) {
    let p = prepare(spec, Some(ctx), |a| a.key("order", &order).map(drop)).unwrap();
    let first = p
        .run(async { Err::<u64, _>(ToolError::outcome_unknown("timed out")) })
        .await;
    assert!(first.is_err());
    eventually(h, &key_of(spec, ctx, order), "the unknown mark", is_unknown).await;
}

// pins U3: a tool with a reconcile function reconciles an unknown outcome at once (without
// waiting for the held lease), exactly once; "done" is saved and replayed without the body
pub async fn reconcile_done_is_saved_and_replayed(make: Factory) {
    let h = harness(make);
    let spec = spec("reconciled", 60_000, 0, true, OnCancel::Hold);
    let ctx = h.ctx("conv_reconcile_done");
    leave_unknown(&h, spec, &ctx, 9).await;
    let (reconciles, runs) = (AtomicUsize::new(0), AtomicUsize::new(0));
    for call in 0..3 {
        let p = prepare(spec, Some(&ctx), |a| a.key("order", &9u64).map(drop)).unwrap();
        let outcome: Result<u64, ToolError> = match p.claim().await {
            Err(answered) => answered,
            Ok(claimed) => {
                assert!(claimed.needs_reconcile(), "call {call}");
                let attempt = claimed.attempt();
                assert_eq!(attempt.previous().unwrap().cause, UnknownCause::GaveUp);
                reconciles.fetch_add(1, Ordering::SeqCst);
                match claimed.settle(Reconciled::Done(Ok(900))).await {
                    Err(answered) => answered,
                    Ok(claimed) => {
                        claimed
                            .run(async {
                                runs.fetch_add(1, Ordering::SeqCst);
                                Ok(0)
                            })
                            .await
                    }
                }
            }
        };
        assert_eq!(outcome, Ok(900), "call {call}");
        let status = ctx.last_outcome().unwrap().status;
        let expected = if call == 0 {
            CallStatus::Reconciled
        } else {
            CallStatus::Replayed
        };
        assert_eq!(status, expected, "call {call}");
    }
    assert_eq!(reconciles.load(Ordering::SeqCst), 1, "reconciled once");
    assert_eq!(runs.load(Ordering::SeqCst), 0, "the body never ran again");
}

// pins U3: "not done" runs the body with the same key and the new fence; "unknown" answers
// OutcomeUnknown, keeps the key unknown, and the next call reconciles again
pub async fn reconcile_not_done_runs_the_body_and_unknown_asks_again(make: Factory) {
    let h = harness(make);
    let spec = spec("reconciled_again", 60_000, 0, true, OnCancel::Hold);
    let ctx = h.ctx("conv_reconcile_again");
    let key = key_of(spec, &ctx, 10);
    leave_unknown(&h, spec, &ctx, 10).await;
    let verdicts = [
        Reconciled::Unknown,
        Reconciled::Unknown,
        Reconciled::NotDone,
    ];
    let runs = AtomicUsize::new(0);
    for (n, verdict) in verdicts.into_iter().enumerate() {
        let p = prepare(spec, Some(&ctx), |a| a.key("order", &10u64).map(drop)).unwrap();
        let claimed = match p.claim::<u64, ToolError>().await {
            Ok(claimed) => claimed,
            Err(answered) => panic!("call {n}: not reconciled: {answered:?}"),
        };
        assert!(claimed.needs_reconcile());
        assert_eq!(claimed.attempt().fence(), n as u64 + 2);
        let outcome = match claimed.settle(verdict).await {
            Err(answered) => answered,
            Ok(claimed) => {
                claimed
                    .run(async {
                        runs.fetch_add(1, Ordering::SeqCst);
                        Ok(current_attempt().unwrap().fence())
                    })
                    .await
            }
        };
        if n < 2 {
            assert!(
                matches!(
                    outcome,
                    Err(ToolError::Idem(Error::OutcomeUnknown {
                        retry_after_ms: None,
                        ..
                    }))
                ),
                "call {n}: {outcome:?}"
            );
            eventually(&h, &key, "still unknown", is_unknown).await;
        } else {
            assert_eq!(
                outcome,
                Ok(4),
                "the body ran with the third takeover's fence"
            );
        }
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
}

// pins U5: a call dropped right after its body returned still saves the outcome; the retry
// replays it
pub async fn finishing_survives_a_dropped_caller(make: Factory) {
    let h = harness(make);
    let spec = spec("finish", 60_000, 5_000, false, OnCancel::Hold);
    let ctx = h.ctx("conv_finish");
    let key = key_of(spec, &ctx, 12);
    let runs = Arc::new(AtomicUsize::new(0));
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &12u64).map(drop)).unwrap();
    let seen = runs.clone();
    let mut call = Box::pin(p.run(async move {
        seen.fetch_add(1, Ordering::SeqCst);
        Ok::<u64, ToolError>(1_200)
    }));
    // Poll until the body has run; then drop the call wherever its finishing is.
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    let mut finished = false;
    while runs.load(Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "the body never ran");
        if futures_util::poll!(&mut call).is_ready() {
            finished = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    if !finished {
        drop(call);
    }
    eventually(&h, &key, "the saved outcome", |r| {
        matches!(
            r,
            Some(Record {
                state: RecordState::Completed { .. },
                ..
            })
        )
    })
    .await;
    let again = AtomicUsize::new(0);
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &12u64).map(drop)).unwrap();
    let replay = p
        .run(async {
            again.fetch_add(1, Ordering::SeqCst);
            Ok::<u64, ToolError>(0)
        })
        .await;
    assert_eq!(replay, Ok(1_200));
    assert_eq!(again.load(Ordering::SeqCst), 0);
}

// pins L1, L2, U1, F1, S8: renew and mark_unknown are compare-and-sets on the owner of a live
// claim in progress; an unknown record is taken over with the seen owner and lease, and
// neither completed nor released by its old owner; a claim past its expires_at is still live
pub async fn store_renew_and_mark_unknown_compare_the_owner(make: Factory) {
    let h = harness(make);
    let store = &h.store;
    let (key, fp) = (test_key(20), fingerprint(20));
    let (owner, stranger, next) = (
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
    );
    let renew = |owner, now: u64, until: u64| RenewRequest {
        key: &key,
        owner,
        now: at(now),
        lease_until: at(until),
    };
    assert_eq!(
        store
            .claim(claim_req(&key, &fp, owner, at(0), at(100), at(10_000)))
            .await
            .unwrap(),
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    );
    assert!(!store.renew(renew(stranger, 50, 150)).await.unwrap());
    assert!(store.renew(renew(owner, 50, 150)).await.unwrap());
    let read = store.read(&key, at(50)).await.unwrap().unwrap();
    assert_eq!(
        read.state,
        RecordState::InProgress {
            owner,
            lease_until: at(150)
        }
    );
    let mark = |owner, now: u64| MarkUnknownRequest {
        key: &key,
        owner,
        now: at(now),
        since: at(0),
        entry: crate::support::unknown_entry(),
    };
    assert!(!store.mark_unknown(mark(stranger, 60)).await.unwrap());
    assert!(store.mark_unknown(mark(owner, 60)).await.unwrap());
    let read = store.read(&key, at(60)).await.unwrap().unwrap();
    assert_eq!(
        read.state,
        RecordState::OutcomeUnknown {
            owner,
            lease_until: at(150),
            since: at(0)
        }
    );
    assert_eq!(read.fence, 1);
    // An unknown record is not renewed, marked again, completed or released.
    assert!(!store.renew(renew(owner, 70, 170)).await.unwrap());
    assert!(!store.mark_unknown(mark(owner, 70)).await.unwrap());
    let envelope =
        idem_runtime::envelope::Envelope::from_stored("{\"ok\":1,\"version\":1}".to_owned());
    assert_eq!(
        store
            .complete(crate::support::complete_request(
                &key,
                owner,
                &envelope,
                at(70)
            ))
            .await
            .unwrap(),
        idem_runtime::store::Completion::Fenced
    );
    assert!(!store.release(&key, owner).await.unwrap());
    // It is taken over (before its lease lapsed: the protocol decides) with the seen state.
    let takeover = |seen_owner, seen_lease_until| TakeoverRequest {
        key: &key,
        seen_owner,
        seen_lease_until,
        owner: next,
        now: at(80),
        lease_until: at(180),
        expires_at: at(10_080),
        fence: 2,
        label: &LABEL,
        entry: crate::support::takeover_entry(),
    };
    assert!(!store.take_over(takeover(owner, at(149))).await.unwrap());
    assert!(store.take_over(takeover(owner, at(150))).await.unwrap());
    let read = store.read(&key, at(80)).await.unwrap().unwrap();
    assert_eq!(read.fence, 2);
    assert_eq!(
        read.state,
        RecordState::InProgress {
            owner: next,
            lease_until: at(180)
        }
    );
    // The old owner renews nothing; the new one does, even past the record's expires_at: a
    // record in progress does not expire (S8), and the renewal raises its expiry (L1).
    assert!(!store.renew(renew(owner, 90, 190)).await.unwrap());
    assert!(store.renew(renew(next, 90, 190)).await.unwrap());
    let read = store
        .read(&key, at(10_080))
        .await
        .unwrap()
        .expect("overdue, still live");
    assert!(read.is_overdue(at(10_080)));
    assert!(!store.renew(renew(owner, 10_080, 10_180)).await.unwrap());
    assert!(store.renew(renew(next, 10_080, 10_180)).await.unwrap());
    let read = store.read(&key, at(10_080)).await.unwrap().unwrap();
    assert_eq!(read.expires_at, at(10_180));
    // Overdue again, it is still marked unknown by its owner only, and stays live unknown.
    assert!(!store.mark_unknown(mark(owner, 10_500)).await.unwrap());
    assert!(store.mark_unknown(mark(next, 10_500)).await.unwrap());
    let read = store
        .read(&key, at(86_400_000))
        .await
        .unwrap()
        .expect("an unknown outcome does not expire");
    assert_eq!(
        (read.fence, read.state),
        (
            2,
            RecordState::OutcomeUnknown {
                owner: next,
                lease_until: at(10_180),
                since: at(0)
            }
        )
    );
    // A renewal past the record's expiry raises the expiry to the new lease deadline: a body
    // running past its TTL stays live (L1).
    let short = test_key(21);
    assert_eq!(
        store
            .claim(claim_req(&short, &fp, owner, at(0), at(100), at(150)))
            .await
            .unwrap(),
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    );
    let past_ttl = RenewRequest {
        key: &short,
        owner,
        now: at(90),
        lease_until: at(190),
    };
    assert!(store.renew(past_ttl).await.unwrap());
    let read = store
        .read(&short, at(160))
        .await
        .unwrap()
        .expect("still live");
    assert_eq!(read.expires_at, at(190));
}

/// An engine over `h`'s store on the wall clock (real time, for the hammers below).
fn wall_clock_ctx(h: &Harness, conversation: &str) -> CallContext {
    let engine =
        idem_runtime::Engine::from_shared(h.store.clone(), Arc::new(idem_runtime::SystemClock));
    CallContext::new()
        .with_engine(engine)
        .with_conversation(conversation.to_owned())
}

// pins L1, S2: 100 bodies each running five leases (lease 1 s, heartbeat 333 ms, body 5 s of
// real time), with a duplicate of each from another client every quarter lease: every body
// runs once, every duplicate is refused with InProgress until the outcome exists, then replays
pub async fn slow_bodies_under_duplicates_run_once(make: Factory) {
    const TRIALS: u64 = 100;
    let h = harness(make);
    let spec = spec("five_leases", 1_000, 0, false, OnCancel::Hold);
    let owners = wall_clock_ctx(&h, "conv_hammer");
    let others = wall_clock_ctx(&h, "conv_hammer");
    let runs: Arc<Vec<AtomicUsize>> = Arc::new((0..TRIALS).map(|_| AtomicUsize::new(0)).collect());
    let mut tasks = Vec::new();
    for order in 0..TRIALS {
        let (ctx, runs) = (owners.clone(), runs.clone());
        tasks.push(tokio::spawn(async move {
            let p = prepare(spec, Some(&ctx), |a| a.key("order", &order).map(drop)).unwrap();
            p.run(async {
                runs[order as usize].fetch_add(1, Ordering::SeqCst);
                tokio::time::sleep(Duration::from_secs(5)).await;
                Ok::<u64, ToolError>(order)
            })
            .await
        }));
    }
    // Every owner's body has begun before the first duplicate comes.
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while runs.iter().map(|r| r.load(Ordering::SeqCst)).sum::<usize>() < TRIALS as usize {
        assert!(
            std::time::Instant::now() < deadline,
            "the owners never all began"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    let mut duplicates = Vec::new();
    for order in 0..TRIALS {
        let (ctx, runs) = (others.clone(), runs.clone());
        duplicates.push(tokio::spawn(async move {
            let mut refused = 0u32;
            loop {
                let p = prepare(spec, Some(&ctx), |a| a.key("order", &order).map(drop)).unwrap();
                let out = p
                    .run(async {
                        runs[order as usize].fetch_add(1, Ordering::SeqCst);
                        Ok::<u64, ToolError>(u64::MAX)
                    })
                    .await;
                match out {
                    Err(ToolError::Idem(Error::InProgress { .. })) => refused += 1,
                    Ok(value) => return (value, refused),
                    Err(other) => panic!("order {order}: {other:?}"),
                }
                tokio::time::sleep(Duration::from_millis(250)).await;
            }
        }));
    }
    for (order, task) in tasks.into_iter().enumerate() {
        assert_eq!(task.await.unwrap(), Ok(order as u64));
    }
    for (order, duplicate) in duplicates.into_iter().enumerate() {
        let (value, refused) = duplicate.await.unwrap();
        assert_eq!(
            value, order as u64,
            "the duplicate replayed the owner's outcome"
        );
        assert!(
            refused >= 10,
            "order {order}: refused {refused} times while the body ran"
        );
    }
    for (order, count) in runs.iter().enumerate() {
        assert_eq!(count.load(Ordering::SeqCst), 1, "order {order} ran once");
    }
}

// pins U5, U4, S7: 1,000 calls of a body of 0–3 ms, each aborted at a random instant of its
// first 5 ms: once the store settled, no key is left in progress (each is absent, completed,
// or held as unknown if its body was cut off mid-way)
pub async fn random_aborts_leave_no_key_in_progress(make: Factory) {
    const TRIALS: u64 = 1_000;
    let h = harness(make);
    let spec = spec("aborted", 60_000, 0, false, OnCancel::Hold);
    let ctx = wall_clock_ctx(&h, "conv_aborts");
    let mut keys = Vec::new();
    let mut tasks = Vec::new();
    for order in 0..TRIALS {
        keys.push(key_of(spec, &ctx, order));
        let ctx = ctx.clone();
        let body_ms = fastrand::u64(0..=3);
        let task = tokio::spawn(async move {
            let p = prepare(spec, Some(&ctx), |a| a.key("order", &order).map(drop)).unwrap();
            p.run(async move {
                tokio::time::sleep(Duration::from_millis(body_ms)).await;
                Ok::<u64, ToolError>(order)
            })
            .await
        });
        let abort_after = Duration::from_micros(fastrand::u64(0..5_000));
        tasks.push(tokio::spawn(async move {
            tokio::time::sleep(abort_after).await;
            task.abort();
            let _ = task.await;
        }));
    }
    for task in tasks {
        task.await.unwrap();
    }
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    let mut left: Vec<u64>;
    loop {
        left = Vec::new();
        for (order, key) in keys.iter().enumerate() {
            let now = idem_runtime::Clock::now(&idem_runtime::SystemClock);
            if let Some(Record {
                state: RecordState::InProgress { .. },
                ..
            }) = h.store.read(key, now).await.unwrap()
            {
                left.push(order as u64);
            }
        }
        if left.is_empty() || std::time::Instant::now() > deadline {
            break;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    assert!(left.is_empty(), "keys left in progress: {left:?}");
}

// pins G1: a worker whose clock runs a year ahead, claiming thousands of other keys (enough
// to run every store's garbage collection several times), deletes neither a live claim of a
// correct-clock worker nor, afterwards, its saved outcome
pub async fn a_year_ahead_worker_deletes_nothing_live(make: Factory) {
    const CLAIMS: u64 = 4_200;
    let h = harness(make);
    let now = idem_runtime::Clock::now(&idem_runtime::SystemClock);
    let correct = idem_runtime::testkit::ManualClock::starting_at(now);
    let ahead = idem_runtime::testkit::ManualClock::starting_at(
        now.saturating_add(Duration::from_secs(366 * 86_400)),
    );
    let on = |clock: &idem_runtime::testkit::ManualClock, conversation: &str| {
        CallContext::new()
            .with_engine(idem_runtime::Engine::from_shared(
                h.store.clone(),
                Arc::new(clock.clone()),
            ))
            .with_conversation(conversation.to_owned())
    };
    let spec = spec("gc_victim", 60_000, 0, false, OnCancel::Hold);
    let fast = spec_for_fast_worker();
    let (live, fast_ctx) = (on(&correct, "conv_live"), on(&ahead, "conv_fast"));
    let key = key_of(spec, &live, 1);
    let gate = Arc::new(tokio::sync::Notify::new());
    let owner = {
        let (live, gate) = (live.clone(), gate.clone());
        tokio::spawn(async move {
            let p = prepare(spec, Some(&live), |a| a.key("order", &1u64).map(drop)).unwrap();
            p.run(async {
                gate.notified().await;
                Ok::<u64, ToolError>(7)
            })
            .await
        })
    };
    let read_live = || async { h.store.read(&key, correct_now(&correct)).await.unwrap() };
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while read_live().await.is_none() {
        assert!(std::time::Instant::now() < deadline, "no claim");
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let runs = AtomicUsize::new(0);
    for order in 0..CLAIMS {
        fenced_refund(fast, &fast_ctx, &runs, order).await.unwrap();
    }
    assert!(
        matches!(
            read_live().await.map(|r| r.state),
            Some(RecordState::InProgress { .. })
        ),
        "the live claim survived"
    );
    gate.notify_one();
    assert_eq!(owner.await.unwrap(), Ok(7));
    for order in CLAIMS..2 * CLAIMS {
        fenced_refund(fast, &fast_ctx, &runs, order).await.unwrap();
    }
    let p = prepare(spec, Some(&live), |a| a.key("order", &1u64).map(drop)).unwrap();
    assert_eq!(p.run(async { Ok::<u64, ToolError>(0) }).await, Ok(7));
    assert_eq!(live.last_outcome().unwrap().status, CallStatus::Replayed);
}

fn spec_for_fast_worker() -> &'static ToolSpec {
    Box::leak(Box::new(ToolSpec {
        ttl: Duration::from_secs(3_600),
        lease: Duration::from_secs(1),
        ..ToolSpec::new("fast_worker")
    }))
}

fn correct_now(clock: &idem_runtime::testkit::ManualClock) -> idem_runtime::Timestamp {
    idem_runtime::Clock::now(clock)
}

// pins U3, U4: a body cancelled after its effect (a timeout around the call) leaves the
// outcome unknown; with a reconcile function the retry reconciles at once and replays the
// effect's outcome without running the body
pub async fn a_cancelled_body_is_reconciled_on_retry(make: Factory) {
    let h = harness(make);
    let spec = spec("cancelled_reconciled", 30_000, 0, true, OnCancel::Hold);
    let ctx = h.ctx("conv_cancel_reconcile");
    let key = key_of(spec, &ctx, 13);
    let effects = Arc::new(AtomicUsize::new(0));
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &13u64).map(drop)).unwrap();
    let seen = effects.clone();
    let call = p.run(async move {
        seen.fetch_add(1, Ordering::SeqCst);
        std::future::pending::<Result<u64, ToolError>>().await
    });
    timeout_after_the_effect(call, &effects).await;
    eventually(&h, &key, "the unknown mark", is_unknown).await;
    let reconciles = AtomicUsize::new(0);
    for call in 0..2 {
        let p = prepare(spec, Some(&ctx), |a| a.key("order", &13u64).map(drop)).unwrap();
        let outcome: Result<u64, ToolError> = match p.claim().await {
            Err(answered) => answered,
            Ok(claimed) => {
                assert!(claimed.needs_reconcile());
                reconciles.fetch_add(1, Ordering::SeqCst);
                // The downstream system says the effect happened.
                match claimed.settle(Reconciled::Done(Ok(1_300))).await {
                    Err(answered) => answered,
                    Ok(_) => panic!("done is not run"),
                }
            }
        };
        assert_eq!(outcome, Ok(1_300), "call {call}");
    }
    assert_eq!(reconciles.load(Ordering::SeqCst), 1);
    assert_eq!(effects.load(Ordering::SeqCst), 1, "one effect");
}

// pins F2, L2, S6, U2a: an owner cut off from the store past its lease is taken over (under
// `on_unknown = "rerun"`); the new owner writes downstream with its larger fence; the stale
// owner's late write, guarded by `fence < $fence` as F2 prescribes, changes nothing, and its
// outcome is not saved
pub async fn a_stale_owners_late_write_is_refused_by_the_fence(make: Factory) {
    let (h, faulty) = super::faulty_harness(make);
    faulty
        .fail_renew
        .store(true, std::sync::atomic::Ordering::SeqCst);
    let spec = rerun(spec("fenced_write", 1_000, 0, false, OnCancel::Hold));
    let ctx = h.ctx("conv_fenced_write");
    // The downstream row: (fence, writer), written only when `fence < $fence`.
    let row = Arc::new(std::sync::Mutex::new((0u64, "")));
    let write = |row: &std::sync::Mutex<(u64, &'static str)>, fence: u64, who: &'static str| {
        let mut row = row.lock().unwrap();
        let lands = row.0 < fence;
        if lands {
            *row = (fence, who);
        }
        lands
    };
    let (go, wait) = tokio::sync::oneshot::channel::<()>();
    let began = Arc::new(AtomicUsize::new(0));
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &30u64).map(drop)).unwrap();
    let (stale_row, stale_began) = (row.clone(), began.clone());
    let mut stale = Box::pin(p.run(async move {
        let attempt = current_attempt().unwrap();
        stale_began.store(attempt.fence() as usize, Ordering::SeqCst);
        let _ = wait.await; // a pause longer than the lease
        Ok::<bool, ToolError>(write(&stale_row, attempt.fence(), "stale"))
    }));
    let deadline = std::time::Instant::now() + Duration::from_secs(5);
    while began.load(Ordering::SeqCst) == 0 {
        assert!(std::time::Instant::now() < deadline, "the body never began");
        assert!(futures_util::poll!(&mut stale).is_pending());
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    assert_eq!(began.load(Ordering::SeqCst), 1);
    h.clock.advance(Duration::from_millis(1_000));
    let p = prepare(spec, Some(&ctx), |a| a.key("order", &30u64).map(drop)).unwrap();
    let newer = p
        .run(async {
            let attempt = current_attempt().unwrap();
            assert_eq!(attempt.fence(), 2);
            Ok::<bool, ToolError>(write(&row, attempt.fence(), "newer"))
        })
        .await;
    assert_eq!(newer, Ok(true));
    let _ = go.send(());
    assert_eq!(
        stale.await,
        Ok(false),
        "the stale owner's late write changed nothing"
    );
    assert!(
        !ctx.last_outcome().unwrap().recorded,
        "its outcome is fenced out"
    );
    assert_eq!(*row.lock().unwrap(), (2, "newer"));
}
