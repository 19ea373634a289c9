//! Every transition from every state, on this store and on the memory store (the
//! reference, `MemoryStore::transition`): the same answer, the same record and the same
//! history (A2–A4, U2, U6, U7, F1).

use super::{at, claim, fp, key, label, Schema};
use crate::envelope::Envelope;
use crate::key::IdempotencyKey;
use crate::store::{
    Claim, CompleteRequest, Completion, Denial, History, HistoryEntry, HistoryEvent, MemoryStore,
    OutcomeSource, OwnerToken, Record, Seen, Store, Target, TransitionRequest, UnknownReason,
};

/// The state a record is brought to before the transition tried on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Start {
    InProgress,
    OutcomeUnknown,
    NotApplied,
    AwaitingApproval,
    Approved,
    Completed,
}

const STARTS: [Start; 6] = [
    Start::InProgress,
    Start::OutcomeUnknown,
    Start::NotApplied,
    Start::AwaitingApproval,
    Start::Approved,
    Start::Completed,
];

/// The claim's owner and lease (see `claim`: claimed at 1 000, lease until 2 000).
const LEASE: u64 = 2_000;

/// One step of the set-up at `now` on fence 1.
fn step<'a>(
    k: &'a IdempotencyKey,
    seen: Seen,
    target: Target<'a>,
    now: u64,
    event: HistoryEvent,
) -> TransitionRequest<'a> {
    TransitionRequest {
        key: k,
        fence: 1,
        seen,
        target,
        now: at(now),
        expires_at: at(now),
        entry: HistoryEntry::new(at(now), event, 1),
    }
}

/// Brings `k` to `start` on `store`, by the same requests on every store: claimed by
/// `owner` at 1 000 (fence 1, lease 2 000, expiry 101 000), then moved at 1 100 (and
/// approved at 1 150).
async fn bring(store: &dyn Store, k: &IdempotencyKey, owner: OwnerToken, start: Start) {
    let (f, label) = (fp(1), label());
    assert_eq!(
        store.claim(claim(k, &f, owner, 1_000, &label)).await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    let own = Seen::InProgress {
        owner,
        lease_until: None,
    };
    let moved = match start {
        Start::InProgress => return,
        Start::OutcomeUnknown => {
            let cause = UnknownReason::Error;
            let target = Target::OutcomeUnknown { since: at(1_000) };
            store
                .transition(step(k, own, target, 1_100, HistoryEvent::Unknown { cause }))
                .await
        }
        Start::NotApplied => {
            let event = HistoryEvent::Released;
            store
                .transition(step(k, own, Target::NotApplied, 1_100, event))
                .await
        }
        Start::AwaitingApproval | Start::Approved => {
            let event = HistoryEvent::ApprovalRequested;
            let requested = store
                .transition(step(k, own, Target::AwaitingApproval, 1_100, event))
                .await;
            if start == Start::AwaitingApproval || requested != Ok(true) {
                requested
            } else {
                let (decided_at, until) = (at(1_150), at(61_150));
                let target = Target::Approved { decided_at, until };
                let event = HistoryEvent::Approved { until };
                store
                    .transition(step(k, Seen::AwaitingApproval, target, 1_150, event))
                    .await
            }
        }
        Start::Completed => {
            let outcome = Envelope::from_stored("{\"ok\":1}");
            let source = OutcomeSource::Executed;
            let saved = store
                .complete(CompleteRequest {
                    key: k,
                    owner,
                    outcome: &outcome,
                    source,
                    now: at(1_100),
                    entry: HistoryEntry::new(at(1_100), HistoryEvent::Completed { source }, 1),
                })
                .await;
            assert_eq!(saved, Ok(Completion::Saved), "{start:?}");
            return;
        }
    };
    assert_eq!(moved, Ok(true), "set-up of {start:?}");
}

/// The states a caller can have seen of a record claimed by `owner`.
fn seens(owner: OwnerToken) -> [Seen; 6] {
    [
        Seen::InProgress {
            owner,
            lease_until: None,
        },
        Seen::InProgress {
            owner,
            lease_until: Some(at(LEASE)),
        },
        Seen::OutcomeUnknown {
            owner,
            lease_until: at(LEASE),
        },
        Seen::NotApplied,
        Seen::AwaitingApproval,
        Seen::Approved,
    ]
}

/// Every target, with `runner` the owner of a run an approval allows, and `denial` a
/// person's denial saved as the outcome (A3).
fn targets(runner: OwnerToken, denial: &Envelope) -> [Target<'_>; 6] {
    [
        Target::OutcomeUnknown { since: at(1_000) },
        Target::Completed {
            outcome: denial,
            source: OutcomeSource::Denied,
        },
        Target::NotApplied,
        Target::AwaitingApproval,
        Target::Approved {
            decided_at: at(1_200),
            until: at(61_200),
        },
        Target::InProgress {
            owner: runner,
            lease_until: at(3_200),
            fence: 2,
        },
    ]
}

/// Whether `seen` is what a record in `start` is (the owner and lease always match).
fn seen_is(start: Start, seen: Seen) -> bool {
    matches!(
        (seen, start),
        (Seen::InProgress { .. }, Start::InProgress)
            | (Seen::OutcomeUnknown { .. }, Start::OutcomeUnknown)
            | (Seen::NotApplied, Start::NotApplied)
            | (Seen::AwaitingApproval, Start::AwaitingApproval)
            | (Seen::Approved, Start::Approved)
    )
}

/// Whether `target` may be reached from `start` (the specification's table): outcome
/// unknown only from in progress; completed (a denial) and not applied from any state;
/// awaiting approval from in progress or approved; approved from awaiting approval or in
/// progress; in progress only from approved.
fn allowed(start: Start, target: &Target<'_>) -> bool {
    match target {
        Target::OutcomeUnknown { .. } => start == Start::InProgress,
        Target::Completed { .. } | Target::NotApplied => true,
        Target::AwaitingApproval => matches!(start, Start::InProgress | Start::Approved),
        Target::Approved { .. } => matches!(start, Start::AwaitingApproval | Start::InProgress),
        Target::InProgress { .. } => start == Start::Approved,
    }
}

/// The live record of `k` at 1 300 and its history, or `None`.
async fn state(store: &dyn Store, k: &IdempotencyKey) -> Option<(Record, History)> {
    let record = store.read(k, at(1_300)).await.expect("read")?;
    let history = store.history(k, at(1_300)).await.expect("history")?;
    Some((record, history))
}

// pins A2, A3, A4, A5, U2, U6, U7, F1: every transition (6 targets) tried on a record in
// every state (6) as every state seen (6), on the right fence and on a stale one, answers
// what the specification's table says, and leaves the same record and history as the
// memory store: a transition applies only on the record's fence and the state seen, moves
// the record to exactly the target's state (approval columns set only in the two approval
// states), and appends its entry; a refused one writes nothing, history included
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_transition_from_every_state_matches_the_memory_store() {
    let schema = Schema::fresh();
    let postgres = schema.store();
    let memory = MemoryStore::new();
    let (owner, runner) = (OwnerToken::random(), OwnerToken::random());
    let denial = Denial {
        actor: "ana".to_owned(),
        at: at(1_200),
        note: Some("not this customer".to_owned()),
    }
    .to_envelope();
    let mut n = 0;
    let mut applied = 0;
    for start in STARTS {
        for seen in seens(owner) {
            for (t, target) in targets(runner, &denial).into_iter().enumerate() {
                for fence in [1, 2] {
                    n += 1;
                    let k = key(10_000 + n);
                    bring(&postgres, &k, owner, start).await;
                    bring(&memory, &k, owner, start).await;
                    let before = state(&postgres, &k).await;
                    assert_eq!(before, state(&memory, &k).await, "{start:?}");
                    let request = TransitionRequest {
                        key: &k,
                        fence,
                        seen,
                        target: target.clone(),
                        now: at(1_200),
                        expires_at: at(200_000),
                        entry: HistoryEntry::new(at(1_200), HistoryEvent::Released, fence)
                            .with_actor(format!("case {t}"), None),
                    };
                    let case =
                        format!("{start:?}, seen {seen:?}, target {target:?}, fence {fence}");
                    let expected = fence == 1 && seen_is(start, seen) && allowed(start, &target);
                    applied += usize::from(expected);
                    assert_eq!(
                        memory.transition(request.clone()).await,
                        Ok(expected),
                        "memory: {case}"
                    );
                    assert_eq!(postgres.transition(request).await, Ok(expected), "{case}");
                    let after = state(&postgres, &k).await;
                    assert_eq!(after, state(&memory, &k).await, "{case}");
                    if !expected {
                        assert_eq!(after, before, "nothing written: {case}");
                    }
                }
            }
        }
    }
    assert_eq!(n, 6 * 6 * 6 * 2);
    // in progress (seen two ways): 5 targets each; outcome unknown, not applied: 2 each;
    // awaiting approval: 3; approved: 4; completed: none
    assert_eq!(applied, 2 * 5 + 2 + 2 + 3 + 4);
}
