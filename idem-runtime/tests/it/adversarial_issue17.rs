//! Adversarial checks of issue 17 (held unknown outcomes, decisions, approvals) against
//! docs/CONTRACT.md U1–U7 and A1–A6, on the memory store with a manual clock.
//!
//! Tests marked `#[ignore = "finding N: …"]` reproduce a break of the contract; the others
//! pin an edge that holds.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::approval::Approval;
use idem_runtime::resolve::{Decision, Resolution, ResolveError, Resolved};
use idem_runtime::store::{
    ClaimRequest, HistoryEvent, OwnerToken, RecordState, Seen, StateFilter, StoreFuture, Target,
    TransitionRequest, UnknownReason,
};
use idem_runtime::testkit::EffectLog;
use idem_runtime::{
    prepare, CallContext, Error, MemoryStore, OnCancel, OnUnknown, Scope, Store, ToolError,
    ToolSpec,
};

use idem_runtime::Timestamp;

use crate::support::{awaiting, events, is_held, Harness, Intercept, Intercepted};

const LEASE_MS: u64 = 1_000;
const VALID_MS: u64 = 60_000;
const DAY_MS: u64 = 86_400_000;

fn approval_spec(
    name: &'static str,
    on_cancel: OnCancel,
    on_unknown: OnUnknown,
    wait_ms: u64,
) -> &'static ToolSpec {
    Box::leak(Box::new(ToolSpec {
        scope: Scope::Conversation,
        ttl: Duration::from_millis(DAY_MS),
        lease: Duration::from_millis(LEASE_MS),
        wait: Duration::from_millis(wait_ms),
        on_cancel,
        on_unknown,
        approval: Some(Duration::from_millis(VALID_MS)),
        ..ToolSpec::new(name)
    }))
}

fn held(name: &'static str) -> &'static ToolSpec {
    approval_spec(name, OnCancel::Hold, OnUnknown::Hold, 0)
}

/// What the body does after recording its effect (or before, for `Retry`).
#[derive(Clone, Copy, Debug)]
enum Body {
    Ok,
    /// The effect did not happen: not saved, released.
    Retry,
    /// Records the effect, then says its outcome is unknown.
    Unknown,
    /// Records the effect and never returns.
    Hang,
    /// Records the effect and panics.
    Panic,
}

async fn pay_with(
    spec: &'static ToolSpec,
    ctx: &CallContext,
    log: &EffectLog,
    order: u64,
    amount: u64,
    body: Body,
) -> Result<u64, ToolError> {
    let prepared = prepare(spec, Some(ctx), |a| {
        a.key("order", &order)?;
        a.fingerprint("amount", &amount).map(drop)
    })?;
    let log = log.clone();
    prepared
        .run(async move {
            match body {
                Body::Retry => return Err(ToolError::retryable("bank unreachable")),
                _ => log.record(spec.name, order.to_string()),
            }
            match body {
                Body::Ok | Body::Retry => Ok(order * 100 + amount),
                Body::Unknown => Err(ToolError::outcome_unknown("bank timed out")),
                Body::Hang => futures_util::future::pending().await,
                Body::Panic => panic!("the body panics after its effect"),
            }
        })
        .await
}

async fn pay(
    spec: &'static ToolSpec,
    ctx: &CallContext,
    log: &EffectLog,
    order: u64,
) -> Result<u64, ToolError> {
    pay_with(spec, ctx, log, order, 40, Body::Ok).await
}

fn key_of(spec: &'static ToolSpec, ctx: &CallContext, order: u64) -> idem_runtime::IdempotencyKey {
    prepare(spec, Some(ctx), |a| {
        a.key("order", &order)?;
        a.fingerprint("amount", &40u64).map(drop)
    })
    .unwrap()
    .key()
    .clone()
}

fn ana() -> Approval {
    Approval::new("ana").unwrap().note("checked")
}

async fn state_of(h: &Harness, key: &idem_runtime::IdempotencyKey) -> Option<RecordState> {
    h.store.read(key, h.now()).await.unwrap().map(|r| r.state)
}

/// Waits (real time, bounded) for a detached write to move `key` into a state `want` accepts.
async fn wait_for(
    h: &Harness,
    key: &idem_runtime::IdempotencyKey,
    want: impl Fn(&Option<RecordState>) -> bool,
) -> Option<RecordState> {
    for _ in 0..500 {
        let state = state_of(h, key).await;
        if want(&state) {
            return state;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    let state = state_of(h, key).await;
    panic!("the record never reached the wanted state: {state:?}");
}

/// A call of `spec` (order 5) spawned, with its approved body hanging after its effect, and
/// aborted once the effect is recorded.
async fn abort_during_body(h: &Harness, spec: &'static ToolSpec, ctx: &CallContext, order: u64) {
    let (log, ctx) = (h.log.clone(), ctx.clone());
    let before = h.log.len();
    let call = tokio::spawn(async move { pay_with(spec, &ctx, &log, order, 40, Body::Hang).await });
    while h.log.len() == before {
        tokio::task::yield_now().await;
    }
    call.abort();
    let _ = call.await;
}

// ---------------------------------------------------------------------------------------
// A store whose recording of an approval request never answers: the worker that made the
// first claim dies (or its caller goes away) between the claim and the request (A2).

#[derive(Debug, Default)]
struct StallRequest {
    stall: AtomicBool,
    stalled: AtomicUsize,
}

impl Intercept for StallRequest {
    fn transition<'a>(
        &'a self,
        inner: &'a dyn Store,
        req: TransitionRequest<'a>,
    ) -> StoreFuture<'a, bool> {
        let request = matches!(req.target, Target::AwaitingApproval)
            && matches!(req.seen, Seen::InProgress { .. });
        if request && self.stall.load(Ordering::SeqCst) {
            self.stalled.fetch_add(1, Ordering::SeqCst);
            return Box::pin(futures_util::future::pending());
        }
        inner.transition(req)
    }
}

/// A harness whose store stalls approval requests while `stall` is set.
fn stalling() -> (Harness, Arc<Intercepted<StallRequest>>) {
    let store = Arc::new(Intercepted::new(
        Arc::new(MemoryStore::new()),
        StallRequest::default(),
    ));
    store.stall.store(true, Ordering::SeqCst);
    let h = Harness::on(crate::support::TestStore {
        store: store.clone(),
        keep: None,
    });
    (h, store)
}

/// The first call of `order` claims the key and dies before its approval request lands.
async fn die_before_the_request(
    h: &Harness,
    store: &Intercepted<StallRequest>,
    spec: &'static ToolSpec,
    ctx: &CallContext,
    order: u64,
) {
    let (log, ctx2) = (h.log.clone(), ctx.clone());
    let call = tokio::spawn(async move { pay(spec, &ctx2, &log, order).await });
    while store.stalled.load(Ordering::SeqCst) == 0 {
        tokio::task::yield_now().await;
    }
    call.abort();
    let _ = call.await;
    store.stall.store(false, Ordering::SeqCst);
}

// finding 1 (A1, A2, U6), fixed: a call that died between the claim and the approval
// request, and a key a person decided not applied, both lead to a new request, never to a
// run nobody approved. (The dropped call's claim is now given back at once, finding 3; a
// claim whose lease lapses instead is held, and a decision "not applied" asks again.)
#[tokio::test]
async fn f1_a_request_never_recorded_then_not_applied_runs_without_approval() {
    let (h, store) = stalling();
    let spec = held("f1_never_requested");
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 5);
    die_before_the_request(&h, &store, spec, &ctx, 5).await;
    h.clock.advance(Duration::from_millis(LEASE_MS));
    let answer = pay(spec, &ctx, &h.log, 5).await;
    assert!(
        is_held(&answer) || awaiting(&answer, false),
        "A2: held for a person, or asked again: {answer:?}"
    );
    if is_held(&answer) {
        let not_applied = Resolution::new(Decision::not_applied(), "ana").unwrap();
        h.engine.resolve(&key, &not_applied).await.unwrap();
    }
    let answer = pay(spec, &ctx, &h.log, 5).await;
    assert_eq!(
        h.log.len(),
        0,
        "nobody approved this call, yet the tool ran: {answer:?}"
    );
    assert!(awaiting(&answer, false), "{answer:?}");
}

// finding 2 (A2 "never a run", A1): with `on_unknown = "rerun"` the same crash is taken
// over once the lease lapses and the body runs with no approval at all, no person involved.
#[tokio::test]
async fn f2_a_rerun_tool_crashing_before_its_request_runs_without_approval() {
    let (h, store) = stalling();
    let spec = approval_spec("f2_rerun", OnCancel::Hold, OnUnknown::Rerun, 0);
    let ctx = h.ctx("c-1");
    die_before_the_request(&h, &store, spec, &ctx, 6).await;
    h.clock.advance(Duration::from_millis(LEASE_MS));
    let answer = pay(spec, &ctx, &h.log, 6).await;
    assert_eq!(h.log.len(), 0, "ran without approval: {answer:?}");
    assert!(answer.is_err(), "{answer:?}");
}

// finding 2b (A2, U3): the same with a reconcile function (answering NotDone through
// `run`): the takeover runs the body, never approved.
#[tokio::test]
async fn f2b_a_reconcile_tool_crashing_before_its_request_runs_without_approval() {
    let (h, store) = stalling();
    let spec: &'static ToolSpec = Box::leak(Box::new(ToolSpec {
        reconcile: true,
        ..*held("f2b_reconcile")
    }));
    let ctx = h.ctx("c-1");
    die_before_the_request(&h, &store, spec, &ctx, 7).await;
    h.clock.advance(Duration::from_millis(LEASE_MS));
    let answer = pay(spec, &ctx, &h.log, 7).await;
    assert_eq!(h.log.len(), 0, "ran without approval: {answer:?}");
}

// finding 3 (U4): a call dropped while its approval request is being written has not begun
// its body, so U4 says it releases its claim; instead the claim is left in progress, lapses
// and becomes an unknown outcome held for a person (with the consequences of finding 1).
#[tokio::test]
async fn f3_a_call_dropped_during_its_request_releases_its_claim() {
    let (h, store) = stalling();
    let spec = held("f3_dropped_request");
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 8);
    die_before_the_request(&h, &store, spec, &ctx, 8).await;
    tokio::time::sleep(Duration::from_millis(50)).await;
    h.clock.advance(Duration::from_millis(LEASE_MS));
    let state = state_of(&h, &key).await;
    assert!(
        state.is_none() || matches!(state, Some(RecordState::AwaitingApproval { .. })),
        "U4: dropped before its body began, the claim is released: {state:?}"
    );
}

// finding 4 (A3, A4): approving again an approval that expired (no call used it yet) is
// answered `AlreadyDecided` — success, exit 0 — and writes nothing; the next call then finds
// it expired and waits again. The operator's approval is silently lost.
// Fixed when the approval expired by the approver's own validity (`Approval::valid_for`);
// (and by the tool's shorter validity, which the request records: finding 5, fixed).
#[tokio::test]
async fn f4_reapproving_an_expired_approval_lets_the_call_run() {
    let h = Harness::new();
    let spec = held("f4_reapprove");
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 9);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 9).await, false));
    let short = ana().valid_for(Duration::from_millis(VALID_MS));
    h.engine.approve(&key, &short).await.unwrap();
    h.clock.advance(Duration::from_millis(2 * VALID_MS));
    let again = h.engine.approve(&key, &short).await;
    let answer = pay(spec, &ctx, &h.log, 9).await;
    assert_eq!(
        h.log.len(),
        1,
        "approved again just now, yet the call waits: approve answered {again:?}, call {answer:?}"
    );
}

// finding 5 (A3, A6): an approval is valid until the earlier of the approver's validity and
// the tool's, but the record (what `approve` answers and `idem show` prints as "until") keeps
// the approver's: 10 minutes asked on a tool valid 1 minute shows 10 minutes.
#[tokio::test]
async fn f5_the_shown_until_is_capped_by_the_tool() {
    let h = Harness::new();
    let spec = held("f5_until");
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 10);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 10).await, false));
    let decided_at = h.now();
    let long = ana().valid_for(Duration::from_secs(600));
    let answered = h.engine.approve(&key, &long).await.unwrap();
    let want = decided_at.saturating_add(Duration::from_millis(VALID_MS));
    assert!(
        matches!(answered.record().state, RecordState::Approved { until, .. } if until == want),
        "{:?}",
        answered.record().state
    );
}

// finding 6 (A3, U6): approving (or denying) a key whose outcome is unknown is refused, but
// the refusal does not say what to do: it tells the operator only a call of a tool that
// requires approval asks for it, never `idem resolve`.
#[tokio::test]
async fn f6_approving_an_unknown_outcome_points_to_resolve() {
    let h = Harness::new();
    let spec = held("f6_unknown");
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 11);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 11).await, false));
    h.engine.approve(&key, &ana()).await.unwrap();
    let _ = pay_with(spec, &ctx, &h.log, 11, 40, Body::Unknown).await;
    for answer in [
        h.engine.approve(&key, &ana()).await,
        h.engine.deny(&key, &ana()).await,
    ] {
        let message = answer.unwrap_err().to_string();
        assert!(message.contains("resolve"), "{message}");
    }
}

// ---------------------------------------------------------------------------------------
// Edges that hold.

// pins A4, S2, S5: after one approval, 24 concurrent calls on a multi-thread runtime run the
// body once; every other call waits for its outcome and replays it
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_calls_after_one_approval_run_once() {
    let h = Harness::new();
    let spec = approval_spec(
        "concurrent_approved",
        OnCancel::Hold,
        OnUnknown::Hold,
        30_000,
    );
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 12);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 12).await, false));
    h.engine.approve(&key, &ana()).await.unwrap();
    let running = Arc::new(AtomicUsize::new(0));
    let calls: Vec<_> = (0..24)
        .map(|_| {
            let (ctx, log, running) = (ctx.clone(), h.log.clone(), running.clone());
            tokio::spawn(async move {
                let prepared = prepare(spec, Some(&ctx), |a| {
                    a.key("order", &12u64)?;
                    a.fingerprint("amount", &40u64).map(drop)
                })
                .unwrap();
                prepared
                    .run(async {
                        assert_eq!(running.fetch_add(1, Ordering::SeqCst), 0, "two bodies");
                        log.record(spec.name, "12");
                        tokio::time::sleep(Duration::from_millis(20)).await;
                        running.fetch_sub(1, Ordering::SeqCst);
                        Ok::<u64, ToolError>(1_240)
                    })
                    .await
            })
        })
        .collect();
    for call in calls {
        assert_eq!(call.await.unwrap().unwrap(), 1_240);
    }
    assert_eq!(h.log.len(), 1, "one approval, one run");
}

// pins A3, A5, S2: a denial racing approved calls that are starting: either the denial wins
// (nothing runs, every call gets Denied) or a call took the approval first (the denial is
// refused as changed/not decidable, the body ran once); never both, never two runs
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deny_racing_approved_calls_is_one_or_the_other() {
    let h = Harness::new();
    let spec = approval_spec("deny_race", OnCancel::Hold, OnUnknown::Hold, 30_000);
    let ctx = h.ctx("c-1");
    for order in 100..160u64 {
        let key = key_of(spec, &ctx, order);
        assert!(awaiting(&pay(spec, &ctx, &h.log, order).await, false));
        h.engine.approve(&key, &ana()).await.unwrap();
        let before = h.log.len();
        let calls: Vec<_> = (0..3)
            .map(|_| {
                let (ctx, log) = (ctx.clone(), h.log.clone());
                tokio::spawn(async move { pay(spec, &ctx, &log, order).await })
            })
            .collect();
        let engine = h.engine.clone();
        let denial =
            tokio::spawn(async move { engine.deny(&key, &Approval::new("bo").unwrap()).await });
        let denial = denial.await.unwrap();
        let mut answers = Vec::new();
        for call in calls {
            answers.push(call.await.unwrap());
        }
        let ran = h.log.len() - before;
        match denial {
            Ok(Resolved::Decided(_)) => {
                assert_eq!(ran, 0, "denied, yet ran: {answers:?}");
                for answer in &answers {
                    assert!(
                        matches!(answer, Err(ToolError::Idem(Error::Denied { .. }))),
                        "{answer:?}"
                    );
                }
            }
            Err(ResolveError::Changed { .. } | ResolveError::NotDecidable { .. }) => {
                assert_eq!(ran, 1, "{answers:?}");
                for answer in &answers {
                    assert_eq!(answer.as_ref().ok(), Some(&(order * 100 + 40)));
                }
            }
            other => panic!("{other:?}"),
        }
    }
}

// pins A3, A4: the approval is valid up to `until` exclusive: 1 ms before, the call runs;
// the tool's own validity caps a longer approver's validity at exactly the same boundary
#[tokio::test]
async fn approval_validity_boundaries() {
    let h = Harness::new();
    let spec = held("validity_edges");
    let ctx = h.ctx("c-1");
    // approver 30 s (shorter than the tool's 60 s): runs at 30 s − 1 ms
    let k1 = key_of(spec, &ctx, 1);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
    let short = ana().valid_for(Duration::from_millis(30_000));
    h.engine.approve(&k1, &short).await.unwrap();
    h.clock.advance(Duration::from_millis(29_999));
    assert_eq!(pay(spec, &ctx, &h.log, 1).await.unwrap(), 140);
    // approver 30 s: at 30 s exactly it expired
    let k2 = key_of(spec, &ctx, 2);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 2).await, false));
    h.engine.approve(&k2, &short).await.unwrap();
    h.clock.advance(Duration::from_millis(30_000));
    assert!(awaiting(&pay(spec, &ctx, &h.log, 2).await, true));
    // approver 10 min, tool 60 s: runs at 60 s − 1 ms, expired at 60 s
    let long = ana().valid_for(Duration::from_secs(600));
    let k3 = key_of(spec, &ctx, 3);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 3).await, false));
    h.engine.approve(&k3, &long).await.unwrap();
    h.clock.advance(Duration::from_millis(VALID_MS - 1));
    assert_eq!(pay(spec, &ctx, &h.log, 3).await.unwrap(), 340);
    let k4 = key_of(spec, &ctx, 4);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 4).await, false));
    h.engine.approve(&k4, &long).await.unwrap();
    h.clock.advance(Duration::from_millis(VALID_MS));
    assert!(awaiting(&pay(spec, &ctx, &h.log, 4).await, true));
    assert_eq!(h.log.len(), 2);
    // a zero validity approves nothing that can run
    let k5 = key_of(spec, &ctx, 5);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 5).await, false));
    h.engine
        .approve(&k5, &ana().valid_for(Duration::ZERO))
        .await
        .unwrap();
    assert!(awaiting(&pay(spec, &ctx, &h.log, 5).await, true));
    assert_eq!(h.log.len(), 2);
}

// pins A4, S8: a clock set back after an approval expired (the record back to awaiting)
// does not revive the approval; and a clock set back before the decision still runs only
// within the approval, once
#[tokio::test]
async fn a_clock_going_backwards_revives_no_approval() {
    let h = Harness::new();
    let spec = held("clock_back");
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 1);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
    let start = h.now();
    h.engine.approve(&key, &ana()).await.unwrap();
    h.clock.advance(Duration::from_millis(VALID_MS));
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, true));
    h.clock.set(start);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
    assert_eq!(h.log.len(), 0);
    // approved, then the clock goes back an hour: the call runs once, and replays
    h.engine.approve(&key, &ana()).await.unwrap();
    h.clock
        .set(Timestamp::from_millis(start.as_millis() - 3_600_000));
    assert_eq!(pay(spec, &ctx, &h.log, 1).await.unwrap(), 140);
    assert_eq!(pay(spec, &ctx, &h.log, 1).await.unwrap(), 140);
    assert_eq!(h.log.len(), 1);
}

// pins A3, U6: deciding every state refuses what it must, and the refusal names the state;
// repeating the decision in force writes nothing; an approved key re-approved extends
// nothing; `resolve` on awaiting/approved records points to approve/deny
#[tokio::test]
async fn decisions_on_every_state() {
    let h = Harness::new();
    let spec = held("every_state");
    let ctx = h.ctx("c-1");
    let not_applied = Resolution::new(Decision::not_applied(), "ana").unwrap();
    // absent
    let absent = key_of(spec, &ctx, 99);
    assert!(matches!(
        h.engine.approve(&absent, &ana()).await,
        Err(ResolveError::NotFound { .. })
    ));
    // awaiting: resolve refused, naming approve / deny
    let k = key_of(spec, &ctx, 1);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
    let refused = h.engine.resolve(&k, &not_applied).await.unwrap_err();
    assert!(refused.to_string().contains("idem approve"), "{refused}");
    // approved: resolve refused; approve again is AlreadyDecided and extends nothing
    let first = h.engine.approve(&k, &ana()).await.unwrap();
    let RecordState::Approved { until, .. } = first.record().state else {
        panic!("{first:?}")
    };
    h.clock.advance(Duration::from_millis(10));
    let again = h
        .engine
        .approve(&k, &ana().valid_for(Duration::from_secs(3_600)))
        .await
        .unwrap();
    assert!(matches!(again, Resolved::AlreadyDecided(_)), "{again:?}");
    assert!(
        matches!(state_of(&h, &k).await, Some(RecordState::Approved { until: u, .. }) if u == until)
    );
    assert!(matches!(
        h.engine.resolve(&k, &not_applied).await,
        Err(ResolveError::NotDecidable {
            state: StateFilter::Approved,
            ..
        })
    ));
    // wrong expected fence: named, nothing written
    match h.engine.deny(&k, &ana().expect_fence(7)).await {
        Err(ResolveError::FenceChanged {
            expected: 7,
            found: 1,
            ..
        }) => {}
        other => panic!("{other:?}"),
    }
    // in progress with a live lease (the approved run's body hangs): every decision refused
    let call = {
        let (log, ctx) = (h.log.clone(), ctx.clone());
        tokio::spawn(async move { pay_with(spec, &ctx, &log, 1, 40, Body::Hang).await })
    };
    while h.log.is_empty() {
        tokio::task::yield_now().await;
    }
    for answer in [
        h.engine.approve(&k, &ana()).await,
        h.engine.deny(&k, &ana()).await,
        h.engine.resolve(&k, &not_applied).await,
    ] {
        assert!(
            matches!(
                answer,
                Err(ResolveError::NotDecidable {
                    state: StateFilter::InProgress,
                    ..
                })
            ),
            "{answer:?}"
        );
    }
    // lapsed (the run is forgotten): approve/deny refused, resolve decides
    call.abort();
    let _ = call.await;
    wait_for(&h, &k, |s| {
        matches!(s, Some(RecordState::OutcomeUnknown { .. }))
    })
    .await;
    assert!(matches!(
        h.engine.approve(&k, &ana()).await,
        Err(ResolveError::NotDecidable {
            state: StateFilter::OutcomeUnknown,
            ..
        })
    ));
    h.engine.resolve(&k, &not_applied).await.unwrap();
    // not applied: approve/deny refused
    for answer in [
        h.engine.approve(&k, &ana()).await,
        h.engine.deny(&k, &ana()).await,
    ] {
        assert!(
            matches!(
                answer,
                Err(ResolveError::NotDecidable {
                    state: StateFilter::NotApplied,
                    ..
                })
            ),
            "{answer:?}"
        );
    }
    // completed (executed): approve, deny, resolve refused
    let done = key_of(spec, &ctx, 2);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 2).await, false));
    h.engine.approve(&done, &ana()).await.unwrap();
    pay(spec, &ctx, &h.log, 2).await.unwrap();
    for answer in [
        h.engine.approve(&done, &ana()).await,
        h.engine.deny(&done, &ana()).await,
        h.engine.resolve(&done, &not_applied).await,
    ] {
        assert!(
            matches!(
                answer,
                Err(ResolveError::NotDecidable {
                    state: StateFilter::Completed,
                    ..
                })
            ),
            "{answer:?}"
        );
    }
    // denied: deny again AlreadyDecided; approve refused naming purge; resolve refused
    let denied = key_of(spec, &ctx, 3);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 3).await, false));
    h.engine.deny(&denied, &ana()).await.unwrap();
    assert!(matches!(
        h.engine.deny(&denied, &Approval::new("bo").unwrap()).await,
        Ok(Resolved::AlreadyDecided(_))
    ));
    let refused = h.engine.approve(&denied, &ana()).await.unwrap_err();
    assert!(refused.to_string().contains("purge"), "{refused}");
    assert!(h.engine.resolve(&denied, &not_applied).await.is_err());
}

// pins A4, U4: an approved call dropped before its body began gives the approval back
// under on_cancel = "hold" too (U4: nothing began), keeping its validity
#[tokio::test]
async fn a_drop_before_the_body_keeps_the_approval_under_hold() {
    let h = Harness::new();
    let spec = held("drop_before_body_hold");
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 1);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
    let approved = h.engine.approve(&key, &ana()).await.unwrap();
    let prepared = prepare(spec, Some(&ctx), |a| {
        a.key("order", &1u64)?;
        a.fingerprint("amount", &40u64).map(drop)
    })
    .unwrap();
    drop(prepared.claim::<u64, ToolError>().await.unwrap());
    let state = wait_for(&h, &key, |s| {
        matches!(s, Some(RecordState::Approved { .. }))
    })
    .await;
    assert_eq!(
        state.as_ref(),
        Some(&approved.record().state),
        "same validity"
    );
    assert_eq!(pay(spec, &ctx, &h.log, 1).await.unwrap(), 140);
    assert_eq!(h.log.len(), 1);
}

// pins A4, U2b, U4: an approved run cancelled after its effect under on_cancel = "release"
// gives the approval back (the author's at-least-once): the next call runs again; under
// "hold" (the default) the same cancellation is held and never runs again
#[tokio::test]
async fn cancelled_after_the_effect_release_runs_again_hold_never() {
    let h = Harness::new();
    let release = approval_spec("cancel_release", OnCancel::Release, OnUnknown::Hold, 0);
    let ctx = h.ctx("c-1");
    let key = key_of(release, &ctx, 1);
    assert!(awaiting(&pay(release, &ctx, &h.log, 1).await, false));
    h.engine.approve(&key, &ana()).await.unwrap();
    abort_during_body(&h, release, &ctx, 1).await;
    wait_for(&h, &key, |s| {
        matches!(s, Some(RecordState::Approved { .. }))
    })
    .await;
    assert_eq!(pay(release, &ctx, &h.log, 1).await.unwrap(), 140);
    assert_eq!(h.log.len(), 2, "released: at least once");
    let history = h.engine.history(&key).await.unwrap().unwrap();
    assert_eq!(
        events(&history)[3..],
        [
            HistoryEvent::Claimed,
            HistoryEvent::Released,
            HistoryEvent::Claimed,
            HistoryEvent::Completed {
                source: idem_runtime::OutcomeSource::Executed
            }
        ]
    );
    let fences: Vec<u64> = history.entries.iter().map(|e| e.fence).collect();
    assert_eq!(fences, [1, 1, 1, 2, 2, 3, 3], "F1: each run its own fence");

    let hold = held("cancel_hold");
    let key = key_of(hold, &ctx, 2);
    assert!(awaiting(&pay(hold, &ctx, &h.log, 2).await, false));
    h.engine.approve(&key, &ana()).await.unwrap();
    abort_during_body(&h, hold, &ctx, 2).await;
    wait_for(&h, &key, |s| {
        matches!(s, Some(RecordState::OutcomeUnknown { .. }))
    })
    .await;
    for _ in 0..3 {
        h.clock.advance(Duration::from_millis(LEASE_MS));
        assert!(is_held(&pay(hold, &ctx, &h.log, 2).await));
    }
    assert_eq!(h.log.len(), 3);
    let history = h.engine.history(&key).await.unwrap().unwrap();
    assert_eq!(
        events(&history).last(),
        Some(&HistoryEvent::Unknown {
            cause: UnknownReason::Cancelled
        })
    );
}

// pins A4, S7, U4: a panic in an approved body leaves the outcome unknown (cause panicked)
// under "hold", held for a person; under "release" it gives the approval back
#[tokio::test]
async fn a_panicking_approved_body() {
    let h = Harness::new();
    let ctx = h.ctx("c-1");
    for (spec, held_after) in [
        (held("panic_hold"), true),
        (
            approval_spec("panic_release", OnCancel::Release, OnUnknown::Hold, 0),
            false,
        ),
    ] {
        let key = key_of(spec, &ctx, 1);
        assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
        h.engine.approve(&key, &ana()).await.unwrap();
        let (log, c) = (h.log.clone(), ctx.clone());
        let joined =
            tokio::spawn(async move { pay_with(spec, &c, &log, 1, 40, Body::Panic).await }).await;
        assert!(joined.unwrap_err().is_panic());
        if held_after {
            wait_for(&h, &key, |s| {
                matches!(s, Some(RecordState::OutcomeUnknown { .. }))
            })
            .await;
            let history = h.engine.history(&key).await.unwrap().unwrap();
            assert_eq!(
                events(&history).last(),
                Some(&HistoryEvent::Unknown {
                    cause: UnknownReason::Panicked
                })
            );
            h.clock.advance(Duration::from_millis(LEASE_MS));
            assert!(is_held(&pay(spec, &ctx, &h.log, 1).await));
        } else {
            wait_for(&h, &key, |s| {
                matches!(s, Some(RecordState::Approved { .. }))
            })
            .await;
        }
    }
}

// pins A4, U7, F1: a retryable error of the approved body returns the record to approved
// with the same validity (history `released`); the next call runs with the next fence.
// A retryable error after the validity passed returns it to an approval that has expired:
// the next call waits again (expired: true) instead of running
#[tokio::test]
async fn a_retryable_approved_run_returns_to_approved() {
    let h = Harness::new();
    let spec = held("retryable_approved");
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 1);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
    let approved = h.engine.approve(&key, &ana()).await.unwrap();
    let answer = pay_with(spec, &ctx, &h.log, 1, 40, Body::Retry).await;
    assert!(matches!(answer, Err(ToolError::Retryable(_))), "{answer:?}");
    assert_eq!(
        state_of(&h, &key).await.as_ref(),
        Some(&approved.record().state)
    );
    let record = h.store.read(&key, h.now()).await.unwrap().unwrap();
    assert_eq!(record.fence, 2);
    assert_eq!(pay(spec, &ctx, &h.log, 1).await.unwrap(), 140);
    assert_eq!(h.store.read(&key, h.now()).await.unwrap().unwrap().fence, 3);
    // expired while it ran, then released
    let key = key_of(spec, &ctx, 2);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 2).await, false));
    h.engine.approve(&key, &ana()).await.unwrap();
    let prepared = prepare(spec, Some(&ctx), |a| {
        a.key("order", &2u64)?;
        a.fingerprint("amount", &40u64).map(drop)
    })
    .unwrap();
    let claimed = prepared.claim::<u64, ToolError>().await.unwrap();
    h.clock.advance(Duration::from_millis(VALID_MS));
    let answer = claimed
        .run(async { Err::<u64, _>(ToolError::retryable("down")) })
        .await;
    assert!(answer.is_err());
    assert!(awaiting(&pay(spec, &ctx, &h.log, 2).await, true));
    assert_eq!(h.log.len(), 1);
}

// pins A4, U1, U2, U7: an outcome-unknown error of the approved body is held for a person
// (history cause error); never a second run; its decision replays with source resolved
#[tokio::test]
async fn an_unknown_approved_run_is_held() {
    let h = Harness::new();
    let spec = held("unknown_approved");
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 1);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
    h.engine.approve(&key, &ana()).await.unwrap();
    let answer = pay_with(spec, &ctx, &h.log, 1, 40, Body::Unknown).await;
    assert!(
        matches!(answer, Err(ToolError::OutcomeUnknown(_))),
        "{answer:?}"
    );
    for _ in 0..3 {
        h.clock.advance(Duration::from_millis(DAY_MS));
        assert!(is_held(&pay(spec, &ctx, &h.log, 1).await));
    }
    assert_eq!(h.log.len(), 1);
    let history = h.engine.history(&key).await.unwrap().unwrap();
    assert_eq!(
        events(&history).last(),
        Some(&HistoryEvent::Unknown {
            cause: UnknownReason::Error
        })
    );
    let applied = Resolution::new(Decision::applied(&140u64).unwrap(), "ana").unwrap();
    h.engine.resolve(&key, &applied).await.unwrap();
    assert_eq!(pay(spec, &ctx, &h.log, 1).await.unwrap(), 140);
    assert_eq!(h.log.len(), 1);
}

// pins U6, A2, A4: on an approval tool, an approved run whose outcome became unknown and
// was decided not applied asks for approval again on its next call (one approval, one
// run); approved again, it runs once more
#[tokio::test]
async fn not_applied_after_an_approved_run_runs_once_more() {
    let h = Harness::new();
    let spec = held("not_applied_approved");
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 1);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
    h.engine.approve(&key, &ana()).await.unwrap();
    let _ = pay_with(spec, &ctx, &h.log, 1, 40, Body::Unknown).await;
    let not_applied = Resolution::new(Decision::not_applied(), "ana").unwrap();
    h.engine.resolve(&key, &not_applied).await.unwrap();
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
    assert_eq!(h.log.len(), 1, "no run without a new approval");
    h.engine.approve(&key, &ana()).await.unwrap();
    assert_eq!(pay(spec, &ctx, &h.log, 1).await.unwrap(), 140);
    assert_eq!(pay(spec, &ctx, &h.log, 1).await.unwrap(), 140);
    assert_eq!(h.log.len(), 2);
}

// pins A2, S9: other fingerprint arguments are a Mismatch in every approval state, and the
// record is untouched (an expired approval is not moved back to awaiting by a mismatch)
#[tokio::test]
async fn mismatch_in_every_approval_state_touches_nothing() {
    let h = Harness::new();
    let spec = held("mismatch_states");
    let ctx = h.ctx("c-1");
    let check = |order: u64| {
        let (h, ctx) = (&h, ctx.clone());
        async move {
            let key = key_of(spec, &ctx, order);
            let before = h.store.read(&key, h.now()).await.unwrap();
            let answer = pay_with(spec, &ctx, &h.log, order, 9_999, Body::Ok).await;
            assert!(
                matches!(answer, Err(ToolError::Idem(Error::Mismatch { .. }))),
                "{answer:?}"
            );
            assert_eq!(h.store.read(&key, h.now()).await.unwrap(), before);
        }
    };
    // awaiting
    let k = key_of(spec, &ctx, 1);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
    check(1).await;
    // approved, then approved but expired
    h.engine.approve(&k, &ana()).await.unwrap();
    check(1).await;
    h.clock.advance(Duration::from_millis(VALID_MS));
    check(1).await;
    assert!(matches!(
        state_of(&h, &k).await,
        Some(RecordState::Approved { .. })
    ));
    // denied
    let d = key_of(spec, &ctx, 2);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 2).await, false));
    h.engine.deny(&d, &ana()).await.unwrap();
    check(2).await;
    // unknown after an approved run, then not applied
    let u = key_of(spec, &ctx, 3);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 3).await, false));
    h.engine.approve(&u, &ana()).await.unwrap();
    let _ = pay_with(spec, &ctx, &h.log, 3, 40, Body::Unknown).await;
    check(3).await;
    let not_applied = Resolution::new(Decision::not_applied(), "ana").unwrap();
    h.engine.resolve(&u, &not_applied).await.unwrap();
    check(3).await;
    assert_eq!(h.log.len(), 1);
}

// pins A2, K7: under scope = "call" a retry of the same provider call keeps its key and so
// its approval; another call id with equal arguments is another key waiting on its own
#[tokio::test]
async fn call_scope_keeps_its_approval_on_retry() {
    let h = Harness::new();
    let spec: &'static ToolSpec = Box::leak(Box::new(ToolSpec {
        scope: Scope::Call,
        ..*held("call_scoped_approval")
    }));
    let ctx = |id: &str| h.ctx("c-1").with_tool_call(id.to_owned());
    let key = key_of(spec, &ctx("call_1"), 1);
    assert!(awaiting(&pay(spec, &ctx("call_1"), &h.log, 1).await, false));
    h.engine.approve(&key, &ana()).await.unwrap();
    assert!(awaiting(&pay(spec, &ctx("call_2"), &h.log, 1).await, false));
    assert_eq!(h.log.len(), 0);
    assert_eq!(pay(spec, &ctx("call_1"), &h.log, 1).await.unwrap(), 140);
    assert_eq!(pay(spec, &ctx("call_1"), &h.log, 1).await.unwrap(), 140);
    assert_eq!(h.log.len(), 1);
}

// pins S8, A2, G1: a request awaiting approval for 25 h (past its TTL) neither expires nor
// is collected, nor is an approved one; approved then, it runs once
#[tokio::test]
async fn waiting_records_outlive_ttl_and_collection() {
    let memory = Arc::new(MemoryStore::new());
    let h = Harness::on(crate::support::TestStore {
        store: memory.clone(),
        keep: None,
    });
    let spec = held("waits_25h");
    let ctx = h.ctx("c-1");
    let (k1, k2) = (key_of(spec, &ctx, 1), key_of(spec, &ctx, 2));
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
    assert!(awaiting(&pay(spec, &ctx, &h.log, 2).await, false));
    h.engine
        .approve(&k2, &ana().valid_for(Duration::from_secs(48 * 3_600)))
        .await
        .unwrap();
    h.clock.advance(Duration::from_millis(DAY_MS + 3_600_000));
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
    // a sweep (every 4096 claims) well past both records' expiry, by both clocks
    h.clock.advance(Duration::from_millis(3 * 3_600_000));
    let fingerprint = idem_runtime::Fingerprint::from_hex(&"f".repeat(64)).unwrap();
    for n in 0..4_096u64 {
        let k = idem_runtime::IdempotencyKey::from_hex(&format!("{n:064x}")).unwrap();
        memory
            .claim(ClaimRequest {
                key: &k,
                fingerprint: &fingerprint,
                owner: OwnerToken::random(),
                now: h.now(),
                lease_until: h.now(),
                expires_at: h.now(),
                label: &idem_runtime::RecordLabel::default(),
            })
            .await
            .unwrap();
    }
    assert!(matches!(
        state_of(&h, &k1).await,
        Some(RecordState::AwaitingApproval { .. })
    ));
    assert!(matches!(
        state_of(&h, &k2).await,
        Some(RecordState::Approved { .. })
    ));
    // the approval's validity is capped by the tool's (60 s): it expired long ago
    assert!(awaiting(&pay(spec, &ctx, &h.log, 2).await, true));
    h.engine.approve(&k1, &ana()).await.unwrap();
    assert_eq!(pay(spec, &ctx, &h.log, 1).await.unwrap(), 140);
    assert_eq!(h.log.len(), 1);
}

// pins D3, A2, A5: the texts the model reads: waiting names the key and says to call again
// with the same arguments, not in another form; a denial names who and why and says not to
// retry in this or another form
#[tokio::test]
async fn error_texts_tell_the_model_not_to_retry_in_another_form() {
    let h = Harness::new();
    let spec = held("texts");
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 1);
    let waiting = pay(spec, &ctx, &h.log, 1).await.unwrap_err().to_string();
    assert!(waiting.contains(&key.to_string()), "{waiting}");
    assert!(waiting.contains("not in another form"), "{waiting}");
    h.engine
        .approve(&key, &ana().valid_for(Duration::from_millis(1)))
        .await
        .unwrap();
    h.clock.advance(Duration::from_millis(1));
    let expired = pay(spec, &ctx, &h.log, 1).await.unwrap_err().to_string();
    assert!(expired.contains("expired"), "{expired}");
    h.engine
        .deny(&key, &Approval::new("bo").unwrap().note("too much"))
        .await
        .unwrap();
    let denied = pay(spec, &ctx, &h.log, 1).await.unwrap_err().to_string();
    for part in ["bo", "too much", "do not retry", "another form"] {
        assert!(denied.contains(part), "{denied}");
    }
}

// pins U6, A3: actors and notes idem cannot record are refused, and a refused note writes
// nothing
#[tokio::test]
async fn bad_approval_inputs_are_refused() {
    for actor in ["", "   ", "a\nb", "tab\there", "\u{7f}"] {
        assert!(
            matches!(Approval::new(actor), Err(ResolveError::BadActor { .. })),
            "{actor:?}"
        );
    }
    assert!(Approval::new("x".repeat(129)).is_err());
    assert!(Approval::new("é".repeat(128)).is_ok());
    let h = Harness::new();
    let spec = held("bad_inputs");
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 1);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 1).await, false));
    let huge = Approval::new("ana").unwrap().note("n".repeat(1_025));
    assert!(matches!(
        h.engine.approve(&key, &huge).await,
        Err(ResolveError::BadNote { chars: 1_025 })
    ));
    assert!(matches!(
        h.engine.deny(&key, &huge).await,
        Err(ResolveError::BadNote { .. })
    ));
    assert!(matches!(
        state_of(&h, &key).await,
        Some(RecordState::AwaitingApproval { .. })
    ));
    let fits = Approval::new("ana").unwrap().note("n".repeat(1_024));
    h.engine.approve(&key, &fits).await.unwrap();
}

// pins A2, S2, S5: 16 concurrent first calls of a tool that requires approval record one
// request (one `approval_requested` in the history); every caller is told it awaits
// approval (waiting out the instant between the claim and the request), nothing runs
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_first_calls_record_one_request() {
    let h = Harness::new();
    let spec = approval_spec("concurrent_first", OnCancel::Hold, OnUnknown::Hold, 30_000);
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 1);
    let calls: Vec<_> = (0..16)
        .map(|_| {
            let (ctx, log) = (ctx.clone(), h.log.clone());
            tokio::spawn(async move { pay(spec, &ctx, &log, 1).await })
        })
        .collect();
    for call in calls {
        let answer = call.await.unwrap();
        assert!(awaiting(&answer, false), "{answer:?}");
    }
    assert_eq!(h.log.len(), 0);
    let history = h.engine.history(&key).await.unwrap().unwrap();
    assert_eq!(
        events(&history),
        [HistoryEvent::Claimed, HistoryEvent::ApprovalRequested]
    );
}
