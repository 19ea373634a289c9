//! The approval states on the server (A2–A5): every transition into and out of them, from
//! every state and seen state, against the memory store (the reference); a record's way
//! through them is in `approval_queue`.

use super::*;
use crate::store::{Denial, MemoryStore};

/// An hour (ms): the approvals' validity in these tests.
pub(super) const HOUR_MS: u64 = 3_600_000;

/// The state a record is put in before a transition is tried on it.
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

/// Moves `key`'s record of `fence`, seen as `seen`, to `target` at `now`, with the entry
/// the engine writes for that move (a denial for a completion); whether it moved.
pub(super) async fn transition(
    store: &impl Store,
    key: &IdempotencyKey,
    fence: u64,
    seen: Seen,
    target: Target<'_>,
    now: Timestamp,
    expires_at: Timestamp,
) -> bool {
    let event = match &target {
        Target::OutcomeUnknown { .. } => HistoryEvent::Unknown {
            cause: UnknownReason::LeaseLapsed,
        },
        Target::Completed { .. } => HistoryEvent::Denied,
        Target::NotApplied => HistoryEvent::Resolved {
            decision: DecisionKind::NotApplied,
        },
        Target::AwaitingApproval => HistoryEvent::ApprovalRequested,
        Target::Approved { until, .. } => HistoryEvent::Approved { until: *until },
        Target::InProgress { .. } => HistoryEvent::Claimed,
    };
    let mut entry = HistoryEntry::new(now, event, fence);
    if let Target::InProgress { owner, fence, .. } = target {
        entry = HistoryEntry::claimed(now, fence, owner);
    } else if matches!(target, Target::Completed { .. } | Target::Approved { .. }) {
        entry = entry.with_actor("ana", Some("ok for \"40 EUR\"\nline two".to_owned()));
    }
    store
        .transition(TransitionRequest {
            key,
            fence,
            seen,
            target,
            now,
            expires_at,
            entry,
        })
        .await
        .unwrap()
}

/// The outcome a denial by `bo` at `now` saves (A3, A5).
pub(super) fn denial(now: Timestamp) -> Envelope {
    Denial {
        actor: "bo".to_owned(),
        at: now,
        note: Some("not this month".to_owned()),
    }
    .to_envelope()
}

/// Puts `key`'s record in `start` (claimed at `t0` by `owner`, lease `t0 + 1 s`, fence 1)
/// with the writes the engine makes to get there.
async fn set_up(
    store: &impl Store,
    key: &IdempotencyKey,
    start: Start,
    owner: OwnerToken,
    t0: Timestamp,
) {
    claim(store, key, 1, owner, t0, 10_000).await;
    let mine = Seen::InProgress {
        owner,
        lease_until: None,
    };
    let t1 = plus(t0, 1);
    let ok = match start {
        Start::InProgress => true,
        Start::OutcomeUnknown => mark_unknown(store, key, owner, t1, 1).await,
        Start::NotApplied => {
            mark_unknown(store, key, owner, t1, 1).await
                && transition(
                    store,
                    key,
                    1,
                    mine_unknown(owner, t0),
                    Target::NotApplied,
                    t1,
                    t1,
                )
                .await
        }
        Start::AwaitingApproval | Start::Approved => {
            transition(store, key, 1, mine, Target::AwaitingApproval, t1, t1).await
                && (start == Start::AwaitingApproval
                    || transition(
                        store,
                        key,
                        1,
                        Seen::AwaitingApproval,
                        Target::Approved {
                            decided_at: t1,
                            until: plus(t1, HOUR_MS),
                        },
                        t1,
                        t1,
                    )
                    .await)
        }
        Start::Completed => complete(store, key, owner, t1, 1).await == Completion::Saved,
    };
    assert!(ok, "set up {start:?}");
}

/// What the owner of the claim made at `t0` sees once it is marked unknown.
fn mine_unknown(owner: OwnerToken, t0: Timestamp) -> Seen {
    Seen::OutcomeUnknown {
        owner,
        lease_until: plus(t0, 1_000),
    }
}

/// Whether `seen` describes a record set up in `start` by `owner` at `t0`.
fn sees(start: Start, seen: Seen, owner: OwnerToken, t0: Timestamp) -> bool {
    let lease = plus(t0, 1_000);
    match (start, seen) {
        (
            Start::InProgress,
            Seen::InProgress {
                owner: o,
                lease_until,
            },
        ) => o == owner && lease_until.is_none_or(|l| l == lease),
        (
            Start::OutcomeUnknown,
            Seen::OutcomeUnknown {
                owner: o,
                lease_until,
            },
        ) => o == owner && lease_until == lease,
        (Start::NotApplied, Seen::NotApplied)
        | (Start::AwaitingApproval, Seen::AwaitingApproval)
        | (Start::Approved, Seen::Approved) => true,
        _ => false,
    }
}

/// Whether the specification lets `target` move a record from `start` (seen rightly).
fn allowed(start: Start, target: &Target<'_>) -> bool {
    match target {
        Target::OutcomeUnknown { .. } => start == Start::InProgress,
        Target::Completed { .. } | Target::NotApplied => start != Start::Completed,
        Target::AwaitingApproval => matches!(start, Start::InProgress | Start::Approved),
        Target::Approved { .. } => matches!(start, Start::AwaitingApproval | Start::InProgress),
        Target::InProgress { .. } => start == Start::Approved,
    }
}

// pins A2, A3, A4, A5, F1, U7, S8, G1: every target (the approval ones, the run an approval
// allows, a denial, not applied, outcome unknown) tried on a record in every state with
// every seen state and a wrong fence moves exactly what the memory store (the reference)
// moves, to the same record and history, and exactly the specification's moves: awaiting
// approval only from in progress or approved, approved only from awaiting approval or in
// progress, in progress only from approved, a denial from awaiting approval; a refused
// transition writes nothing (hash, history and Redis expiry as they were); a record that
// is not completed has no Redis expiry, a completed one has one; each write makes layout 5
#[tokio::test]
async fn approval_transitions_move_as_the_reference_does() {
    let mut s = server().await;
    let memory = MemoryStore::new();
    let t0 = at(7_000_000);
    let now = plus(t0, 10);
    let keep = plus(now, DAY_MS);
    let (owner, other, runner) = (
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
    );
    let denied = denial(now);
    let seens = [
        Seen::InProgress {
            owner,
            lease_until: None,
        },
        Seen::InProgress {
            owner,
            lease_until: Some(plus(t0, 1_000)),
        },
        Seen::InProgress {
            owner: other,
            lease_until: None,
        },
        mine_unknown(owner, t0),
        Seen::NotApplied,
        Seen::AwaitingApproval,
        Seen::Approved,
    ];
    let targets = [
        Target::OutcomeUnknown { since: now },
        Target::Completed {
            outcome: &denied,
            source: OutcomeSource::Denied,
        },
        Target::NotApplied,
        Target::AwaitingApproval,
        Target::Approved {
            decided_at: now,
            until: plus(now, HOUR_MS),
        },
        Target::InProgress {
            owner: runner,
            lease_until: plus(now, 1_000),
            fence: 2,
        },
    ];
    let (mut n, mut moved_count) = (0u32, 0u32);
    for start in STARTS {
        for seen in seens {
            for target in &targets {
                for fence in [1, 2] {
                    if fence == 2 && !sees(start, seen, owner, t0) {
                        continue; // refused on the seen state already
                    }
                    n += 1;
                    let k = key(50_000 + n);
                    set_up(&s.store, &k, start, owner, t0).await;
                    set_up(&memory, &k, start, owner, t0).await;
                    let before = hash(&mut s, &k).await;
                    let pttl_before = s.pttl(&k).await;
                    let what = format!("{start:?} seen {seen:?} fence {fence} to {target:?}");
                    let moved =
                        transition(&s.store, &k, fence, seen, target.clone(), now, keep).await;
                    let reference =
                        transition(&memory, &k, fence, seen, target.clone(), now, keep).await;
                    assert_eq!(moved, reference, "{what}: as the memory store");
                    let expected =
                        fence == 1 && sees(start, seen, owner, t0) && allowed(start, target);
                    assert_eq!(moved, expected, "{what}: as specified");
                    assert_eq!(
                        s.store.read(&k, now).await.unwrap(),
                        memory.read(&k, now).await.unwrap(),
                        "{what}: the record"
                    );
                    assert_eq!(
                        s.store.history(&k, now).await.unwrap(),
                        memory.history(&k, now).await.unwrap(),
                        "{what}: the history"
                    );
                    if !moved {
                        assert_eq!(hash(&mut s, &k).await, before, "{what}: nothing written");
                        let pttl = s.pttl(&k).await;
                        assert!(
                            pttl <= pttl_before && (pttl > 0) == (pttl_before > 0),
                            "{what}: expiry kept, {pttl_before} then {pttl}"
                        );
                        continue;
                    }
                    moved_count += 1;
                    assert_eq!(s.field(&k, "v").await.as_deref(), Some("5"), "{what}");
                    let completed = matches!(target, Target::Completed { .. });
                    let pttl = s.pttl(&k).await;
                    assert_eq!(pttl > 0, completed, "{what}: Redis expiry {pttl}");
                    let approval =
                        matches!(target, Target::AwaitingApproval | Target::Approved { .. });
                    assert_eq!(
                        s.field(&k, "approval_at").await.is_some(),
                        approval,
                        "{what}"
                    );
                    assert_eq!(
                        s.field(&k, "approval_until").await.is_some(),
                        matches!(target, Target::Approved { .. }),
                        "{what}"
                    );
                }
            }
        }
    }
    // Moves: outcome unknown 2 (in progress, seen with and without the lease), completed
    // and not applied 2 × 6 (every state that is not completed, in progress seen two
    // ways), awaiting approval 3, approved 3, in progress 1.
    assert_eq!(moved_count, 2 + 12 + 3 + 3 + 1, "of {n}");
}
