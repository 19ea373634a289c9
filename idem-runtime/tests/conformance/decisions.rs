//! The conformance suite's "a person decides" part (issue 17): unknown outcomes held for a
//! decision by default (U2), records that wait for one never expire (S8), operator
//! decisions as compare-and-sets (U6), the history of every key (U7), and a takeover that
//! is cancelled never releasing the unknown outcome it took over (U1, U2b).
//!
//! Instantiated per backend with [`decisions_suite!`]; a crashed worker is a claimed call
//! forgotten (`std::mem::forget`): no release, no marking, no renewal, as after SIGKILL.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::resolve::{Decision, Resolution, ResolveError, Resolved};
use idem_runtime::store::{
    DecisionKind, HistoryEvent, ListQuery, OutcomeSource, RecordState, StateFilter, UnknownReason,
};
use idem_runtime::testkit::EffectLog;
use idem_runtime::{
    prepare, CallContext, CallStatus, Error, OnCancel, OnUnknown, Scope, ToolError, ToolSpec,
};

use super::Factory;
use crate::support::{events, is_held, key_of, refund, Harness};

/// Defines the suite's tests for one backend: `decisions_suite!(module, factory)`.
macro_rules! decisions_suite {
    ($backend:ident, $factory:expr) => {
        mod $backend {
            use super::conformance as suite;
            #[allow(unused_imports)]
            use super::support::TestStore;

            fn factory() -> TestStore {
                ($factory)()
            }

            async_tests!(
                a_crashed_owner_is_held_not_rerun,
                a_held_key_outlives_its_ttl_and_is_listed_oldest_first,
                resolved_applied_is_replayed_with_its_history,
                resolved_not_applied_runs_the_body_once_with_a_larger_fence,
                resolved_error_is_replayed,
                decisions_are_compare_and_sets,
                a_not_applied_key_checks_the_fingerprint_and_returns_after_a_release,
                live_and_completed_records_are_not_decidable,
                a_cancelled_takeover_never_releases_the_unknown_outcome,
                rerun_keeps_the_at_least_once_takeover,
                bulk_decisions_take_the_oldest_first_and_dry_runs_write_nothing,
                a_run_cancelled_after_its_effect_is_held_then_decided,
            );
        }
    };
}

const LEASE_MS: u64 = 1_000;

fn spec_with(name: &'static str, on_unknown: OnUnknown, on_cancel: OnCancel) -> &'static ToolSpec {
    Box::leak(Box::new(ToolSpec {
        scope: Scope::Conversation,
        ttl: Duration::from_secs(86_400),
        lease: Duration::from_millis(LEASE_MS),
        wait: Duration::from_millis(0),
        on_unknown,
        on_cancel,
        ..ToolSpec::new(name)
    }))
}

fn held_spec(name: &'static str) -> &'static ToolSpec {
    spec_with(name, OnUnknown::Hold, OnCancel::Hold)
}

/// A worker that claims the call, has its effect, and dies (no release, no mark, no renewal).
async fn crash_after_effect(
    spec: &'static ToolSpec,
    ctx: &CallContext,
    log: &EffectLog,
    order: u64,
) {
    let prepared = prepare(spec, Some(ctx), |a| a.key("order", &order).map(drop)).unwrap();
    let claimed = match prepared.claim::<u64, ToolError>().await {
        Ok(claimed) => claimed,
        Err(answer) => panic!("the first call claims: {answer:?}"),
    };
    log.record(spec.name, order.to_string());
    std::mem::forget(claimed);
}

fn actor(decision: Decision) -> Resolution {
    Resolution::new(decision, "ana")
        .unwrap()
        .note("checked the bank")
}

// pins U1, U2, U7: a worker killed after its effect leaves a claim that, once its lease
// lapsed, is held for a person: 20 retries over 5 lease lengths run nothing, the first one
// marks it unknown (lease lapsed), and the error names the key and the resolve command
pub async fn a_crashed_owner_is_held_not_rerun(make: Factory) {
    let h = Harness::on(make());
    let spec = held_spec("crash_held");
    let ctx = h.ctx("c-1");
    crash_after_effect(spec, &ctx, &h.log, 7).await;
    let key = key_of(spec, &ctx, 7);
    h.clock.advance(Duration::from_millis(LEASE_MS));
    for _ in 0..20 {
        h.clock
            .advance(Duration::from_millis(5 * LEASE_MS / 20 + 1));
        let answer = refund(spec, &ctx, &h.log, 7).await;
        assert!(is_held(&answer), "{answer:?}");
        let message = answer.unwrap_err().to_string();
        assert!(message.contains(&key.to_string()), "{message}");
        assert!(message.contains("idem resolve"), "{message}");
    }
    assert_eq!(h.log.len(), 1, "the body never ran again");
    let record = h.store.read(&key, h.now()).await.unwrap().unwrap();
    assert!(
        matches!(record.state, RecordState::OutcomeUnknown { .. }),
        "{record:?}"
    );
    let history = h.engine.history(&key).await.unwrap().unwrap();
    assert_eq!(
        events(&history),
        [
            HistoryEvent::Claimed,
            HistoryEvent::Unknown {
                cause: UnknownReason::LeaseLapsed
            }
        ],
        "{history:?}"
    );
    assert_eq!(history.entries[0].fence, 1);
    assert!(history.entries[0].owner.is_some());
}

// pins S8, G1, I7: a held record 25 h after its claim (TTL 24 h) is still held and not run
// again; listings and counts show it as outcome unknown, oldest first, overdue
pub async fn a_held_key_outlives_its_ttl_and_is_listed_oldest_first(make: Factory) {
    let h = Harness::on(make());
    let spec = held_spec("overdue");
    let ctx = h.ctx("c-1");
    crash_after_effect(spec, &ctx, &h.log, 1).await;
    h.clock.advance(Duration::from_millis(10));
    crash_after_effect(spec, &ctx, &h.log, 2).await;
    h.clock.advance(Duration::from_secs(25 * 3600));
    assert!(is_held(&refund(spec, &ctx, &h.log, 1).await));
    assert_eq!(h.log.len(), 2);
    let now = h.now();
    let record = h
        .store
        .read(&key_of(spec, &ctx, 2), now)
        .await
        .unwrap()
        .unwrap();
    assert!(
        record.is_overdue(now),
        "still live past its expiry: {record:?}"
    );
    let query = ListQuery::new()
        .tool("overdue")
        .state(StateFilter::OutcomeUnknown)
        .oldest_first();
    let page = h.store.list(&query, now).await.unwrap();
    let keys: Vec<_> = page.records.iter().map(|r| r.key.clone()).collect();
    assert_eq!(
        keys,
        [key_of(spec, &ctx, 1), key_of(spec, &ctx, 2)],
        "oldest first"
    );
    let stats = h.store.stats(now).await.unwrap();
    assert_eq!(stats.by_tool["overdue"].outcome_unknown, 2, "{stats:?}");
}

// pins U6, U7, S3: "applied" saves the output; the next call replays it without running,
// with source resolved; the history reads claimed → unknown(lease lapsed) → resolved, and
// a replay adds nothing
pub async fn resolved_applied_is_replayed_with_its_history(make: Factory) {
    let h = Harness::on(make());
    let spec = held_spec("resolve_applied");
    let ctx = h.ctx("c-1");
    crash_after_effect(spec, &ctx, &h.log, 3).await;
    let key = key_of(spec, &ctx, 3);
    h.clock.advance(Duration::from_millis(LEASE_MS));
    let decided = h
        .engine
        .resolve(&key, &actor(Decision::applied(&300u64).unwrap()))
        .await
        .unwrap();
    assert!(matches!(decided, Resolved::Decided(_)), "{decided:?}");
    for _ in 0..3 {
        assert_eq!(refund(spec, &ctx, &h.log, 3).await, Ok(300));
        let outcome = ctx.last_outcome().unwrap();
        assert_eq!(outcome.status, CallStatus::Replayed);
        assert_eq!(outcome.source, OutcomeSource::Resolved);
    }
    assert_eq!(h.log.len(), 1);
    let history = h.engine.history(&key).await.unwrap().unwrap();
    assert_eq!(
        events(&history),
        [
            HistoryEvent::Claimed,
            HistoryEvent::Unknown {
                cause: UnknownReason::LeaseLapsed
            },
            HistoryEvent::Resolved {
                decision: DecisionKind::Applied
            },
        ]
    );
    let resolved = &history.entries[2];
    assert_eq!(resolved.actor.as_deref(), Some("ana"));
    assert_eq!(resolved.note.as_deref(), Some("checked the bank"));
    assert_eq!(resolved.fence, 1);
}

// pins U6, F1: "not applied" lets the next call run the body exactly once, with a larger
// fence; later calls replay its outcome
pub async fn resolved_not_applied_runs_the_body_once_with_a_larger_fence(make: Factory) {
    let h = Harness::on(make());
    let spec = held_spec("resolve_not_applied");
    let ctx = h.ctx("c-1");
    crash_after_effect(spec, &ctx, &h.log, 4).await;
    let key = key_of(spec, &ctx, 4);
    h.clock.advance(Duration::from_millis(LEASE_MS));
    assert!(is_held(&refund(spec, &ctx, &h.log, 4).await));
    h.engine
        .resolve(&key, &actor(Decision::not_applied()))
        .await
        .unwrap();
    assert_eq!(refund(spec, &ctx, &h.log, 4).await, Ok(400));
    let ran = ctx.last_outcome().unwrap();
    assert_eq!((ran.status, ran.fence), (CallStatus::Executed, 2));
    assert_eq!(refund(spec, &ctx, &h.log, 4).await, Ok(400));
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
    assert_eq!(h.log.len(), 2, "once more, not twice");
    let history = h.engine.history(&key).await.unwrap().unwrap();
    assert_eq!(
        events(&history),
        [
            HistoryEvent::Claimed,
            HistoryEvent::Unknown {
                cause: UnknownReason::LeaseLapsed
            },
            HistoryEvent::Resolved {
                decision: DecisionKind::NotApplied
            },
            HistoryEvent::Claimed,
            HistoryEvent::Completed {
                source: OutcomeSource::Executed
            },
        ]
    );
    assert_eq!(history.entries[3].fence, 2);
}

// pins U6, S4: "error" saves a failure that every later call gets back
pub async fn resolved_error_is_replayed(make: Factory) {
    let h = Harness::on(make());
    let spec = held_spec("resolve_error");
    let ctx = h.ctx("c-1");
    crash_after_effect(spec, &ctx, &h.log, 5).await;
    let key = key_of(spec, &ctx, 5);
    h.clock.advance(Duration::from_millis(LEASE_MS));
    let declined = ToolError::failed("the bank declined the refund");
    h.engine
        .resolve(&key, &actor(Decision::failed(&declined).unwrap()))
        .await
        .unwrap();
    assert_eq!(refund(spec, &ctx, &h.log, 5).await, Err(declined.clone()));
    assert_eq!(refund(spec, &ctx, &h.log, 5).await, Err(declined));
    assert_eq!(h.log.len(), 1);
}

// pins U6: a decision is a compare-and-set: a stale --expect-fence is refused naming both
// fences, two concurrent deciders make one decision, an identical repeat succeeds and writes
// nothing, another decision after it is refused
pub async fn decisions_are_compare_and_sets(make: Factory) {
    let h = Harness::on(make());
    let spec = held_spec("decide_cas");
    let ctx = h.ctx("c-1");
    crash_after_effect(spec, &ctx, &h.log, 6).await;
    let key = key_of(spec, &ctx, 6);
    h.clock.advance(Duration::from_millis(LEASE_MS));
    assert!(is_held(&refund(spec, &ctx, &h.log, 6).await));
    let stale = actor(Decision::not_applied()).expect_fence(7);
    match h.engine.resolve(&key, &stale).await {
        Err(ResolveError::FenceChanged {
            expected: 7,
            found: 1,
            ..
        }) => {}
        other => panic!("stale fence refused: {other:?}"),
    }
    let applied = actor(Decision::applied(&600u64).unwrap()).expect_fence(1);
    let not_applied = actor(Decision::not_applied()).expect_fence(1);
    let (a, b) = futures_util::join!(
        h.engine.resolve(&key, &applied),
        h.engine.resolve(&key, &not_applied)
    );
    let decided = [&a, &b]
        .iter()
        .filter(|r| matches!(r, Ok(Resolved::Decided(_))))
        .count();
    assert_eq!(decided, 1, "one decision: {a:?} {b:?}");
    let winner = if a.is_ok() { &applied } else { &not_applied };
    let loser = if a.is_ok() { &b } else { &a };
    assert!(
        matches!(
            loser,
            Err(ResolveError::NotDecidable { .. } | ResolveError::Changed { .. })
        ),
        "{loser:?}"
    );
    let before = h.engine.history(&key).await.unwrap().unwrap();
    let repeat = h.engine.resolve(&key, winner).await.unwrap();
    assert!(matches!(repeat, Resolved::AlreadyDecided(_)), "{repeat:?}");
    assert_eq!(
        h.engine.history(&key).await.unwrap().unwrap(),
        before,
        "nothing written"
    );
}

// pins U6, S9, U4: a key decided not applied runs only for the same fingerprint (another is
// Mismatch); a run that gives it back (a retryable error) returns it to not applied, with
// its fence and history kept
pub async fn a_not_applied_key_checks_the_fingerprint_and_returns_after_a_release(make: Factory) {
    let h = Harness::on(make());
    let spec = held_spec("not_applied_release");
    let ctx = h.ctx("c-1");
    let call = |amount: u64, fail: bool| {
        let ctx = ctx.clone();
        let log = h.log.clone();
        async move {
            let prepared = prepare(spec, Some(&ctx), |a| {
                a.key("order", &8u64)?;
                a.fingerprint("amount", &amount).map(drop)
            })
            .unwrap();
            prepared
                .run(async {
                    log.record(spec.name, amount.to_string());
                    if fail {
                        Err(ToolError::retryable("the bank was down"))
                    } else {
                        Ok(amount)
                    }
                })
                .await
        }
    };
    let prepared = prepare(spec, Some(&ctx), |a| {
        a.key("order", &8u64)?;
        a.fingerprint("amount", &10u64).map(drop)
    })
    .unwrap();
    let key = prepared.key().clone();
    let claimed = prepared.claim::<u64, ToolError>().await.ok().unwrap();
    std::mem::forget(claimed);
    h.clock.advance(Duration::from_millis(LEASE_MS));
    h.engine
        .resolve(&key, &actor(Decision::not_applied()))
        .await
        .unwrap();
    assert!(matches!(
        call(11, false).await,
        Err(ToolError::Idem(Error::Mismatch { .. }))
    ));
    assert!(matches!(call(10, true).await, Err(ToolError::Retryable(_))));
    let record = h.store.read(&key, h.now()).await.unwrap().unwrap();
    assert!(
        matches!(record.state, RecordState::NotApplied { .. }),
        "{record:?}"
    );
    assert_eq!(record.fence, 2, "the fence is kept");
    assert_eq!(call(10, false).await, Ok(10));
    assert_eq!(ctx.last_outcome().unwrap().fence, 3);
    let history = h.engine.history(&key).await.unwrap().unwrap();
    assert_eq!(
        events(&history)[3..],
        [
            HistoryEvent::Claimed,
            HistoryEvent::Released,
            HistoryEvent::Claimed,
            HistoryEvent::Completed {
                source: OutcomeSource::Executed
            },
        ]
    );
}

// pins U6: nothing to decide without a record; a claim whose lease is live and a completed
// record are refused, and nothing is written
pub async fn live_and_completed_records_are_not_decidable(make: Factory) {
    let h = Harness::on(make());
    let spec = held_spec("not_decidable");
    let ctx = h.ctx("c-1");
    let absent = key_of(spec, &ctx, 1);
    assert!(matches!(
        h.engine
            .resolve(&absent, &actor(Decision::not_applied()))
            .await,
        Err(ResolveError::NotFound { .. })
    ));
    crash_after_effect(spec, &ctx, &h.log, 2).await;
    let live = key_of(spec, &ctx, 2);
    assert!(matches!(
        h.engine
            .resolve(&live, &actor(Decision::not_applied()))
            .await,
        Err(ResolveError::NotDecidable {
            state: StateFilter::InProgress,
            ..
        })
    ));
    assert_eq!(refund(spec, &ctx, &h.log, 3).await, Ok(300));
    let done = key_of(spec, &ctx, 3);
    assert!(matches!(
        h.engine
            .resolve(&done, &actor(Decision::applied(&1u64).unwrap()))
            .await,
        Err(ResolveError::NotDecidable {
            state: StateFilter::Completed,
            ..
        })
    ));
    assert_eq!(
        refund(spec, &ctx, &h.log, 3).await,
        Ok(300),
        "the saved outcome stays"
    );
}

/// A call of `spec` whose body records its effect, then waits (it is cancelled there) or
/// panics.
async fn effect_then(spec: &'static ToolSpec, ctx: &CallContext, log: &EffectLog, panics: bool) {
    let prepared = prepare(spec, Some(ctx), |a| a.key("order", &9u64).map(drop)).unwrap();
    let body = async {
        log.record(spec.name, "9".to_owned());
        if panics {
            panic!("the body panics after its effect");
        }
        std::future::pending::<Result<u64, ToolError>>().await
    };
    let run = prepared.run(body);
    if panics {
        let caught = futures_util::FutureExt::catch_unwind(std::panic::AssertUnwindSafe(run)).await;
        assert!(caught.is_err());
    } else {
        // Polled until the body began and had its effect (a network store answers the
        // claim later than the first poll), then dropped: cancelled.
        let effects = log.len();
        let mut run = Box::pin(run);
        for _ in 0..1_000 {
            assert!(futures_util::poll!(run.as_mut()).is_pending());
            if log.len() > effects {
                break;
            }
            tokio::time::sleep(Duration::from_millis(5)).await;
        }
        assert!(log.len() > effects, "the body began");
        drop(run);
    }
}

/// Waits (real time, bounded) until the key's record is in a state `done` accepts: the
/// guard's write runs on a task of its own (U5).
async fn settled(
    h: &Harness,
    key: &idem_runtime::IdempotencyKey,
    done: impl Fn(&RecordState) -> bool,
) -> RecordState {
    for _ in 0..500 {
        if let Some(record) = h.store.read(key, h.now()).await.unwrap() {
            if done(&record.state) {
                return record.state;
            }
        }
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    panic!(
        "the key did not settle: {:?}",
        h.store.read(key, h.now()).await
    );
}

// pins U1, U2b, U4 (issue 17's bug): under on_cancel = "release", a run that took over an
// unknown outcome and is then cancelled, or panics, leaves the key unknown — it is never
// released — so the next run takes over with a larger fence and knows the previous run
pub async fn a_cancelled_takeover_never_releases_the_unknown_outcome(make: Factory) {
    for panics in [false, true] {
        let h = Harness::on(make());
        let spec = spec_with("takeover_release", OnUnknown::Rerun, OnCancel::Release);
        let ctx = h.ctx("c-1");
        let key = key_of(spec, &ctx, 9);
        // Run 1: the effect, then an outcome-unknown error.
        let prepared = prepare(spec, Some(&ctx), |a| a.key("order", &9u64).map(drop)).unwrap();
        let first = prepared
            .run(async { Err::<u64, _>(ToolError::outcome_unknown("timed out after sending")) })
            .await;
        assert!(matches!(first, Err(ToolError::OutcomeUnknown(_))));
        // Run 2, after the lapse, takes over (fence 2) and is cancelled or panics.
        h.clock.advance(Duration::from_millis(LEASE_MS));
        effect_then(spec, &ctx, &h.log, panics).await;
        let state = settled(&h, &key, |s| !matches!(s, RecordState::InProgress { .. })).await;
        assert!(
            matches!(state, RecordState::OutcomeUnknown { .. }),
            "panics {panics}: {state:?}"
        );
        // Run 3 takes over again, fence 3, and sees run 2's claim as the previous run.
        h.clock.advance(Duration::from_millis(LEASE_MS));
        let seen = Arc::new(AtomicUsize::new(0));
        let prepared = prepare(spec, Some(&ctx), |a| a.key("order", &9u64).map(drop)).unwrap();
        let seen_in_body = seen.clone();
        let third = prepared
            .run(async move {
                let attempt = idem_runtime::current_attempt().unwrap();
                assert_eq!(attempt.fence(), 3);
                assert_eq!(attempt.previous().map(|p| p.fence), Some(2));
                seen_in_body.fetch_add(1, Ordering::SeqCst);
                Ok::<u64, ToolError>(900)
            })
            .await;
        assert_eq!(third, Ok(900));
        assert_eq!(seen.load(Ordering::SeqCst), 1);
    }
}

// pins U2a: with on_unknown = "rerun", a crashed owner's claim is taken over once its lease
// lapsed and the body runs again with the same key and a larger fence (the at-least-once
// path, unchanged)
pub async fn rerun_keeps_the_at_least_once_takeover(make: Factory) {
    let h = Harness::on(make());
    let spec = spec_with("rerun", OnUnknown::Rerun, OnCancel::Hold);
    let ctx = h.ctx("c-1");
    crash_after_effect(spec, &ctx, &h.log, 1).await;
    h.clock.advance(Duration::from_millis(LEASE_MS));
    assert_eq!(refund(spec, &ctx, &h.log, 1).await, Ok(100));
    let outcome = ctx.last_outcome().unwrap();
    assert!(outcome.takeover);
    assert_eq!(outcome.fence, 2);
    assert_eq!(h.log.len(), 2, "at least once");
    let history = h
        .engine
        .history(&key_of(spec, &ctx, 1))
        .await
        .unwrap()
        .unwrap();
    assert_eq!(
        events(&history),
        [
            HistoryEvent::Claimed,
            HistoryEvent::TakenOver {
                cause: UnknownReason::LeaseLapsed
            },
            HistoryEvent::Completed {
                source: OutcomeSource::Executed
            },
        ]
    );
}

// pins U6, I7: a bulk decision takes every record waiting for one that the filter matches,
// oldest first; a dry run lists them and writes nothing
pub async fn bulk_decisions_take_the_oldest_first_and_dry_runs_write_nothing(make: Factory) {
    let h = Harness::on(make());
    let spec = held_spec("bulk");
    let ctx = h.ctx("c-1");
    for order in [1, 2, 3] {
        crash_after_effect(spec, &ctx, &h.log, order).await;
        h.clock.advance(Duration::from_millis(1));
    }
    assert_eq!(refund(spec, &ctx, &h.log, 4).await, Ok(400));
    h.clock.advance(Duration::from_millis(LEASE_MS));
    let query = ListQuery::new().tool("bulk");
    let resolution = actor(Decision::not_applied());
    let dry = h
        .engine
        .resolve_matching(&query, &resolution, true)
        .await
        .unwrap();
    let order: Vec<_> = dry.iter().map(|(r, _)| r.key.clone()).collect();
    assert_eq!(
        order,
        [1, 2, 3].map(|o| key_of(spec, &ctx, o)),
        "oldest first, waiting only"
    );
    assert!(dry.iter().all(|(_, answer)| answer.is_none()));
    let record = h.store.read(&order[0], h.now()).await.unwrap().unwrap();
    assert!(
        matches!(record.state, RecordState::InProgress { .. }),
        "a dry run writes nothing"
    );
    let done = h
        .engine
        .resolve_matching(&query, &resolution, false)
        .await
        .unwrap();
    assert!(
        done.iter()
            .all(|(_, a)| matches!(a, Some(Ok(Resolved::Decided(_))))),
        "{done:?}"
    );
    for key in &order {
        let record = h.store.read(key, h.now()).await.unwrap().unwrap();
        assert!(matches!(record.state, RecordState::NotApplied { .. }));
    }
}

// pins U1, U2, U4, U6, U7, F1 (issue 17's "Done when", the in-process form the memory store
// needs, on every store): a run cancelled after its effect leaves the outcome unknown
// (cancelled); 20 retries over 5 lease lengths run nothing; "applied" makes the next call
// replay the output, the history reads claimed → unknown(cancelled) → resolved and replays
// add nothing; on another key "not applied" runs the body exactly once more, with fence 2
pub async fn a_run_cancelled_after_its_effect_is_held_then_decided(make: Factory) {
    let h = Harness::on(make());
    for (name, applied) in [
        ("cancel_then_applied", true),
        ("cancel_then_not_applied", false),
    ] {
        let spec = held_spec(name);
        let ctx = h.ctx("c-1");
        let before = h.log.len();
        effect_then(spec, &ctx, &h.log, false).await;
        let key = key_of(spec, &ctx, 9);
        settled(&h, &key, |s| {
            matches!(s, RecordState::OutcomeUnknown { .. })
        })
        .await;
        for _ in 0..20 {
            h.clock
                .advance(Duration::from_millis(5 * LEASE_MS / 20 + 1));
            let answer = refund(spec, &ctx, &h.log, 9).await;
            assert!(is_held(&answer), "{answer:?}");
        }
        assert_eq!(h.log.len(), before + 1, "nothing ran again");
        let decision = if applied {
            Decision::applied(&900u64).unwrap()
        } else {
            Decision::not_applied()
        };
        h.engine.resolve(&key, &actor(decision)).await.unwrap();
        let history = h.engine.history(&key).await.unwrap().unwrap();
        let decided = history.entries.len();
        assert_eq!(
            events(&history)[..2],
            [
                HistoryEvent::Claimed,
                HistoryEvent::Unknown {
                    cause: UnknownReason::Cancelled
                }
            ]
        );
        assert_eq!(history.entries[decided - 1].actor.as_deref(), Some("ana"));
        if applied {
            for _ in 0..3 {
                assert_eq!(refund(spec, &ctx, &h.log, 9).await, Ok(900));
                assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
            }
            assert_eq!(h.log.len(), before + 1, "replays run nothing");
            let history = h.engine.history(&key).await.unwrap().unwrap();
            assert_eq!(history.entries.len(), decided, "replays write no history");
        } else {
            assert_eq!(refund(spec, &ctx, &h.log, 9).await, Ok(900));
            assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Executed);
            assert_eq!(refund(spec, &ctx, &h.log, 9).await, Ok(900));
            assert_eq!(h.log.len(), before + 2, "exactly once more");
            let record = h.store.read(&key, h.now()).await.unwrap().unwrap();
            assert_eq!(record.fence, 2, "a larger fence (F1)");
        }
    }
}
