//! The conformance suite's approvals part (issue 17, contract A1–A6): a tool that requires
//! approval records the request on its first call and runs nothing; a person approves
//! (the next call runs once, then replays) or denies (every call gets the denial); other
//! arguments under the key are a mismatch; a cancellation after the effect leaves the
//! outcome unknown, never a second run; two concurrent deciders make one decision.
//!
//! Instantiated per backend with [`approvals_suite!`].

use std::time::Duration;

use idem_runtime::approval::Approval;
use idem_runtime::resolve::{ResolveError, Resolved};
use idem_runtime::store::{
    HistoryEntry, HistoryEvent, ListQuery, OutcomeSource, RecordState, Seen, StateFilter, Target,
    TransitionRequest,
};
use idem_runtime::testkit::EffectLog;
use idem_runtime::{prepare, CallContext, Error, OnCancel, Scope, ToolError, ToolSpec};

use super::Factory;
use crate::support::{awaiting, events, key_of, Harness};

/// Defines the suite's tests for one backend: `approvals_suite!(module, factory)`.
macro_rules! approvals_suite {
    ($backend:ident, $factory:expr) => {
        mod $backend {
            use super::conformance as suite;
            #[allow(unused_imports)]
            use super::support::TestStore;

            fn factory() -> TestStore {
                ($factory)()
            }

            async_tests!(
                approve_runs_once_then_replays,
                deny_is_saved_and_replayed_as_an_error,
                other_arguments_under_the_key_are_a_mismatch,
                a_cancel_after_approval_and_effect_is_held_not_rerun,
                two_concurrent_deciders_make_one_decision,
                an_expired_approval_waits_again,
                a_released_approved_run_keeps_its_approval,
                the_queue_is_listed_and_counted,
                approval_of_one_key_runs_no_other,
            );
        }
    };
}

const LEASE_MS: u64 = 1_000;
const VALID_MS: u64 = 60_000;

fn approval_spec(name: &'static str, on_cancel: OnCancel) -> &'static ToolSpec {
    Box::leak(Box::new(ToolSpec {
        scope: Scope::Conversation,
        ttl: Duration::from_secs(86_400),
        lease: Duration::from_millis(LEASE_MS),
        wait: Duration::from_millis(0),
        on_cancel,
        approval: Some(Duration::from_millis(VALID_MS)),
        ..ToolSpec::new(name)
    }))
}

/// A refund of `amount` for `order`: the order is the key, the amount only fingerprinted.
async fn pay(
    spec: &'static ToolSpec,
    ctx: &CallContext,
    log: &EffectLog,
    order: u64,
    amount: u64,
) -> Result<u64, ToolError> {
    let prepared = prepare(spec, Some(ctx), |a| {
        a.key("order", &order)?;
        a.fingerprint("amount", &amount).map(drop)
    })?;
    prepared
        .run(async {
            log.record(spec.name, order.to_string());
            Ok(order * 100 + amount)
        })
        .await
}

fn ana() -> Approval {
    Approval::new("ana")
        .unwrap()
        .note("checked with the customer")
        .valid_for(Duration::from_millis(VALID_MS))
}

// pins A2, A3, A4, U7: the first call records the request and runs nothing (every call
// until a decision gets the same); approved, the next call runs once with the next fence,
// and every later call replays; the history tells it
pub async fn approve_runs_once_then_replays(make: Factory) {
    let h = Harness::on(make());
    let spec = approval_spec("approve_once", OnCancel::Hold);
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 7);
    for _ in 0..3 {
        let answer = pay(spec, &ctx, &h.log, 7, 40).await;
        assert!(awaiting(&answer, false), "{answer:?}");
        let message = answer.unwrap_err().to_string();
        assert!(message.contains(&key.to_string()), "{message}");
        assert!(message.contains("idem approve"), "{message}");
    }
    assert_eq!(h.log.len(), 0, "nothing ran before the approval");
    let record = h.store.read(&key, h.now()).await.unwrap().unwrap();
    assert!(
        matches!(record.state, RecordState::AwaitingApproval { .. }),
        "{record:?}"
    );
    let label = record.label.expect("a labelled record");
    assert_eq!(
        label.key_args.as_deref(),
        Some(r#"{"amount":40,"order":7}"#),
        "the operator sees what they approve, fingerprint-only arguments too (A1)"
    );
    let decided = h.engine.approve(&key, &ana()).await.unwrap();
    assert!(matches!(decided, Resolved::Decided(_)), "{decided:?}");
    assert_eq!(pay(spec, &ctx, &h.log, 7, 40).await.unwrap(), 740);
    assert_eq!(h.log.len(), 1, "the approved call ran once");
    for _ in 0..3 {
        assert_eq!(pay(spec, &ctx, &h.log, 7, 40).await.unwrap(), 740);
    }
    assert_eq!(h.log.len(), 1, "later calls replay");
    let record = h.store.read(&key, h.now()).await.unwrap().unwrap();
    assert_eq!(record.fence, 2, "the approved run took the next fence (F1)");
    let history = h.engine.history(&key).await.unwrap().unwrap();
    let events = events(&history);
    assert_eq!(
        events[..2],
        [HistoryEvent::Claimed, HistoryEvent::ApprovalRequested]
    );
    assert!(
        matches!(events[2], HistoryEvent::Approved { .. }),
        "{events:?}"
    );
    assert_eq!(history.entries[2].actor.as_deref(), Some("ana"));
    assert_eq!(events[3], HistoryEvent::Claimed);
    assert_eq!(history.entries[3].fence, 2);
    assert!(
        matches!(
            events[4],
            HistoryEvent::Completed {
                source: OutcomeSource::Executed
            }
        ),
        "{events:?}"
    );
    assert_eq!(events.len(), 5, "replays write nothing: {events:?}");
}

// pins A3, A5: a denial is saved and every call gets it as `Error::Denied` (actor, note),
// without running; denying again is the decision in force; approving a denial is refused
pub async fn deny_is_saved_and_replayed_as_an_error(make: Factory) {
    let h = Harness::on(make());
    let spec = approval_spec("deny_saved", OnCancel::Hold);
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 8);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 8, 40).await, false));
    let bo = Approval::new("bo").unwrap().note("amount too high");
    assert!(matches!(
        h.engine.deny(&key, &bo).await.unwrap(),
        Resolved::Decided(_)
    ));
    for _ in 0..3 {
        match pay(spec, &ctx, &h.log, 8, 40).await {
            Err(ToolError::Idem(Error::Denied { actor, note, .. })) => {
                assert_eq!(actor, "bo");
                assert_eq!(note.as_deref(), Some("amount too high"));
            }
            other => panic!("a denial replays: {other:?}"),
        }
    }
    assert_eq!(h.log.len(), 0, "a denied call never runs");
    assert!(matches!(
        h.engine.deny(&key, &bo).await.unwrap(),
        Resolved::AlreadyDecided(_)
    ));
    assert!(matches!(
        h.engine.approve(&key, &ana()).await,
        Err(ResolveError::NotDecidable { .. })
    ));
    let record = h.store.read(&key, h.now()).await.unwrap().unwrap();
    assert!(
        matches!(
            record.state,
            RecordState::Completed {
                source: OutcomeSource::Denied,
                ..
            }
        ),
        "{record:?}"
    );
    let history = h.engine.history(&key).await.unwrap().unwrap();
    assert_eq!(events(&history).last(), Some(&HistoryEvent::Denied));
}

// pins A2, S9: other arguments outside `key(…)` under a key that awaits approval, is
// approved, or ran, are a `Mismatch`; the approved call still runs with its own arguments
pub async fn other_arguments_under_the_key_are_a_mismatch(make: Factory) {
    let h = Harness::on(make());
    let spec = approval_spec("mismatch_approval", OnCancel::Hold);
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 9);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 9, 40).await, false));
    let mismatch = |answer: &Result<u64, ToolError>| {
        matches!(answer, Err(ToolError::Idem(Error::Mismatch { .. })))
    };
    assert!(mismatch(&pay(spec, &ctx, &h.log, 9, 4_000).await));
    h.engine.approve(&key, &ana()).await.unwrap();
    assert!(mismatch(&pay(spec, &ctx, &h.log, 9, 4_000).await));
    assert_eq!(h.log.len(), 0, "approval of 40 never runs 4000");
    assert_eq!(pay(spec, &ctx, &h.log, 9, 40).await.unwrap(), 940);
    assert!(mismatch(&pay(spec, &ctx, &h.log, 9, 4_000).await));
    assert_eq!(h.log.len(), 1);
}

// pins A4, U1, U2, U4: a call cancelled after the approval and after its effect leaves the
// outcome unknown, held for a person: later calls run nothing
pub async fn a_cancel_after_approval_and_effect_is_held_not_rerun(make: Factory) {
    let h = Harness::on(make());
    let spec = approval_spec("cancel_approved", OnCancel::Hold);
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 10);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 10, 40).await, false));
    h.engine.approve(&key, &ana()).await.unwrap();
    {
        let log = h.log.clone();
        let ctx = ctx.clone();
        let call = tokio::spawn(async move {
            let prepared = prepare(spec, Some(&ctx), |a| {
                a.key("order", &10u64)?;
                a.fingerprint("amount", &40u64).map(drop)
            })
            .unwrap();
            prepared
                .run(async {
                    log.record(spec.name, "10");
                    futures_util::future::pending::<Result<u64, ToolError>>().await
                })
                .await
        });
        while h.log.is_empty() {
            tokio::task::yield_now().await;
        }
        call.abort();
        let _ = call.await;
    }
    // The drop guard's write runs on a task of its own (U5): wait for it.
    let mut state = None;
    for _ in 0..500 {
        let record = h.store.read(&key, h.now()).await.unwrap().unwrap();
        if matches!(record.state, RecordState::OutcomeUnknown { .. }) {
            state = Some(record.state);
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(
        state.is_some(),
        "the cancelled run left the outcome unknown"
    );
    for _ in 0..5 {
        h.clock.advance(Duration::from_millis(LEASE_MS));
        let answer = pay(spec, &ctx, &h.log, 10, 40).await;
        assert!(
            matches!(
                answer,
                Err(ToolError::Idem(Error::OutcomeUnknown { held: true, .. }))
            ),
            "{answer:?}"
        );
    }
    assert_eq!(h.log.len(), 1, "never a second run");
}

// pins A3, U7: two deciders at once make one decision; the other is told it is decided
// (the same decision) or that the record changed, and the history has one decision; at
// the store, of two compare-and-sets from the same state and fence exactly one writes
pub async fn two_concurrent_deciders_make_one_decision(make: Factory) {
    let h = Harness::on(make());
    let spec = approval_spec("two_deciders", OnCancel::Hold);
    let ctx = h.ctx("c-1");
    for (order, deny) in [(11u64, false), (12, true)] {
        let key = key_of(spec, &ctx, order);
        assert!(awaiting(&pay(spec, &ctx, &h.log, order, 40).await, false));
        let (ana, bo) = (ana(), Approval::new("bo").unwrap());
        let (first, second) = if deny {
            tokio::join!(h.engine.deny(&key, &ana), h.engine.deny(&key, &bo))
        } else {
            tokio::join!(h.engine.approve(&key, &ana), h.engine.approve(&key, &bo))
        };
        let decided = [&first, &second]
            .iter()
            .filter(|a| matches!(a, Ok(Resolved::Decided(_))))
            .count();
        assert_eq!(decided, 1, "{first:?} {second:?}");
        for answer in [&first, &second] {
            assert!(
                matches!(
                    answer,
                    Ok(_) | Err(ResolveError::Changed { .. } | ResolveError::NotDecidable { .. })
                ),
                "{answer:?}"
            );
        }
        let history = h.engine.history(&key).await.unwrap().unwrap();
        let decisions = events(&history)
            .into_iter()
            .filter(|e| matches!(e, HistoryEvent::Approved { .. } | HistoryEvent::Denied))
            .count();
        assert_eq!(decisions, 1, "{history:?}");
    }
    // Both deciders read the record awaiting approval with fence 1; only one write lands.
    let key = key_of(spec, &ctx, 13);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 13, 40).await, false));
    let now = h.now();
    let approve = |actor: &str| TransitionRequest {
        key: &key,
        fence: 1,
        seen: Seen::AwaitingApproval,
        target: Target::Approved {
            decided_at: now,
            until: now.saturating_add(Duration::from_millis(VALID_MS)),
        },
        now,
        expires_at: now,
        entry: HistoryEntry::new(
            now,
            HistoryEvent::Approved {
                until: now.saturating_add(Duration::from_millis(VALID_MS)),
            },
            1,
        )
        .with_actor(actor, None),
    };
    let (a, b) = tokio::join!(
        h.store.transition(approve("ana")),
        h.store.transition(approve("bo"))
    );
    let wins = [a.unwrap(), b.unwrap()];
    assert_eq!(wins.iter().filter(|w| **w).count(), 1, "{wins:?}");
}

// pins A4: an approval not used within its validity expires: the next call moves the
// record back to awaiting approval and says so; a new approval lets it run
pub async fn an_expired_approval_waits_again(make: Factory) {
    let h = Harness::on(make());
    let spec = approval_spec("expired_approval", OnCancel::Hold);
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 13);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 13, 40).await, false));
    h.engine.approve(&key, &ana()).await.unwrap();
    h.clock.advance(Duration::from_millis(VALID_MS));
    assert!(awaiting(&pay(spec, &ctx, &h.log, 13, 40).await, true));
    assert!(awaiting(&pay(spec, &ctx, &h.log, 13, 40).await, false));
    assert_eq!(h.log.len(), 0);
    let history = h.engine.history(&key).await.unwrap().unwrap();
    assert_eq!(
        events(&history).last(),
        Some(&HistoryEvent::ApprovalExpired)
    );
    // The tool's validity caps the approver's: 10 minutes asked, the tool's 1 minute kept.
    let long = ana().valid_for(Duration::from_secs(600));
    h.engine.approve(&key, &long).await.unwrap();
    h.clock.advance(Duration::from_millis(VALID_MS + 1));
    assert!(awaiting(&pay(spec, &ctx, &h.log, 13, 40).await, true));
    h.engine.approve(&key, &ana()).await.unwrap();
    assert_eq!(pay(spec, &ctx, &h.log, 13, 40).await.unwrap(), 1_340);
    assert_eq!(h.log.len(), 1);
}

// pins A4, U4, U7: an approved run that gives its claim back without an outcome (a drop
// before its body began; a release under on_cancel = "release") returns the record to
// approved, so the next call runs
pub async fn a_released_approved_run_keeps_its_approval(make: Factory) {
    let h = Harness::on(make());
    let spec = approval_spec("released_approved", OnCancel::Release);
    let ctx = h.ctx("c-1");
    let key = key_of(spec, &ctx, 14);
    assert!(awaiting(&pay(spec, &ctx, &h.log, 14, 40).await, false));
    h.engine.approve(&key, &ana()).await.unwrap();
    let prepared = prepare(spec, Some(&ctx), |a| {
        a.key("order", &14u64)?;
        a.fingerprint("amount", &40u64).map(drop)
    })
    .unwrap();
    let claimed = prepared.claim::<u64, ToolError>().await.unwrap();
    drop(claimed); // before its body began
    let mut back = false;
    for _ in 0..500 {
        let record = h.store.read(&key, h.now()).await.unwrap().unwrap();
        if matches!(record.state, RecordState::Approved { .. }) {
            back = true;
            break;
        }
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    assert!(back, "the approval is given back");
    assert_eq!(pay(spec, &ctx, &h.log, 14, 40).await.unwrap(), 1_440);
    assert_eq!(h.log.len(), 1);
    let history = h.engine.history(&key).await.unwrap().unwrap();
    assert!(events(&history).contains(&HistoryEvent::Released));
}

// pins A6, I7: the records awaiting approval are listed oldest first and counted, the
// approved ones too
pub async fn the_queue_is_listed_and_counted(make: Factory) {
    let h = Harness::on(make());
    let spec = approval_spec("approval_queue", OnCancel::Hold);
    let ctx = h.ctx("c-1");
    for order in [21u64, 22, 23] {
        assert!(awaiting(&pay(spec, &ctx, &h.log, order, 40).await, false));
        h.clock.advance(Duration::from_millis(10));
    }
    h.engine
        .approve(&key_of(spec, &ctx, 22), &ana())
        .await
        .unwrap();
    let query = ListQuery::new()
        .state(StateFilter::AwaitingApproval)
        .oldest_first();
    let page = h.store.list(&query, h.now()).await.unwrap();
    let keys: Vec<_> = page.records.iter().map(|r| r.key.clone()).collect();
    assert_eq!(
        keys,
        [key_of(spec, &ctx, 21), key_of(spec, &ctx, 23)],
        "oldest first"
    );
    let approved = h
        .store
        .list(&ListQuery::new().state(StateFilter::Approved), h.now())
        .await
        .unwrap();
    assert_eq!(approved.records.len(), 1);
    let stats = h.store.stats(h.now()).await.unwrap();
    let counts = stats.total;
    assert_eq!(
        (counts.awaiting_approval, counts.approved),
        (2, 1),
        "{stats:?}"
    );
}

// pins A2: approving one key lets no other key run
pub async fn approval_of_one_key_runs_no_other(make: Factory) {
    let h = Harness::on(make());
    let spec = approval_spec("one_key_only", OnCancel::Hold);
    let ctx = h.ctx("c-1");
    let other_ctx = h.ctx("c-2");
    assert!(awaiting(&pay(spec, &ctx, &h.log, 31, 40).await, false));
    h.engine
        .approve(&key_of(spec, &ctx, 31), &ana())
        .await
        .unwrap();
    assert!(awaiting(&pay(spec, &ctx, &h.log, 32, 40).await, false));
    assert!(awaiting(
        &pay(spec, &other_ctx, &h.log, 31, 40).await,
        false
    ));
    assert_eq!(h.log.len(), 0);
}
