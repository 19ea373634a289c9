//! Tests of the approval states (A2–A6): the transitions into and out of them against the
//! memory store (the reference), and a record in each state read back, claimed, listed,
//! counted, purged and collected through the store.

use futures_util::FutureExt;

use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::label::RecordLabel;
use crate::store::sqlite::statements::tests::{at, entry, fingerprint, key};
use crate::store::sqlite::SqliteStore;
use crate::store::{
    Claim, ClaimRequest, CompleteRequest, DecisionKind, History, HistoryEntry, HistoryEvent,
    ListQuery, MarkUnknownRequest, MemoryStore, OutcomeSource, OwnerToken, PurgeOutcome, Record,
    RecordState, Seen, StateFilter, Store, StoreFuture, Target, TransitionRequest, UnknownReason,
};

/// The answer of a store call, which is ready at once outside a tokio runtime (the SQLite
/// store runs inline there, the memory store always does).
fn ready<T>(call: StoreFuture<'_, T>) -> T {
    call.now_or_never()
        .expect("ready outside a runtime")
        .expect("the store call succeeds")
}

/// The owner of every test claim.
fn owner() -> OwnerToken {
    OwnerToken::from_u128(0xa11ce)
}

/// The label of every test claim.
fn label() -> RecordLabel {
    RecordLabel {
        tool: "wire".to_owned(),
        ..RecordLabel::default()
    }
}

/// Claims `k` for [`owner`] with fingerprint `a…a` at `now`: lease until `now + 100`,
/// expiry at `now + 1000`.
fn claim(store: &dyn Store, k: &IdempotencyKey, fp: &Fingerprint, now: u64) -> Claim {
    ready(store.claim(ClaimRequest {
        key: k,
        fingerprint: fp,
        owner: owner(),
        now: at(now),
        lease_until: at(now + 100),
        expires_at: at(now + 1_000),
        label: &label(),
    }))
}

/// A transition of `k`'s record of `fence` at `now`, with expiry `expires_at`.
fn move_to(
    store: &dyn Store,
    k: &IdempotencyKey,
    (fence, seen): (u64, Seen),
    target: Target<'_>,
    (now, expires_at): (u64, u64),
    entry: HistoryEntry,
) -> bool {
    ready(store.transition(TransitionRequest {
        key: k,
        fence,
        seen,
        target,
        now: at(now),
        expires_at: at(expires_at),
        entry,
    }))
}

fn in_progress() -> Seen {
    Seen::InProgress {
        owner: owner(),
        lease_until: None,
    }
}

/// The states a record is put in before a transition.
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

/// Puts `k`'s record (fence 1, claimed at 0 with lease until 100) in `start`, by the
/// store's own operations.
fn put(store: &dyn Store, k: &IdempotencyKey, start: Start) {
    let claimed = claim(store, k, &fingerprint('a'), 0);
    assert_eq!(
        claimed,
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    );
    let requested = |store: &dyn Store| {
        let asked = entry(HistoryEvent::ApprovalRequested, 3, 1);
        let to = Target::AwaitingApproval;
        assert!(move_to(store, k, (1, in_progress()), to, (3, 3), asked));
    };
    match start {
        Start::InProgress => {}
        Start::OutcomeUnknown => {
            let cause = UnknownReason::Error;
            assert!(ready(store.mark_unknown(MarkUnknownRequest {
                key: k,
                owner: owner(),
                now: at(1),
                since: at(0),
                entry: entry(HistoryEvent::Unknown { cause }, 1, 1),
            })));
        }
        Start::NotApplied => {
            let decision = DecisionKind::NotApplied;
            let decided = entry(HistoryEvent::Resolved { decision }, 2, 1);
            let to = Target::NotApplied;
            assert!(move_to(store, k, (1, in_progress()), to, (2, 2), decided));
        }
        Start::AwaitingApproval => requested(store),
        Start::Approved => {
            requested(store);
            let until = at(500);
            let approved = entry(HistoryEvent::Approved { until }, 4, 1).with_actor("ana", None);
            let to = Target::Approved {
                decided_at: at(4),
                until,
            };
            assert!(move_to(
                store,
                k,
                (1, Seen::AwaitingApproval),
                to,
                (4, 4),
                approved
            ));
        }
        Start::Completed => {
            let source = OutcomeSource::Executed;
            let saved = ready(store.complete(CompleteRequest {
                key: k,
                owner: owner(),
                outcome: &Envelope::from_stored(r#"{"version":1,"ok":1}"#),
                source,
                now: at(5),
                entry: entry(HistoryEvent::Completed { source }, 5, 1),
            }));
            assert_eq!(saved, crate::store::Completion::Saved);
        }
    }
}

/// Every seen state a caller may pass for a record of [`owner`] with lease until 100, and
/// the start it describes.
fn seens() -> [(Seen, Start); 6] {
    let lease = Some(at(100));
    [
        (
            Seen::InProgress {
                owner: owner(),
                lease_until: lease,
            },
            Start::InProgress,
        ),
        (in_progress(), Start::InProgress),
        (
            Seen::OutcomeUnknown {
                owner: owner(),
                lease_until: at(100),
            },
            Start::OutcomeUnknown,
        ),
        (Seen::NotApplied, Start::NotApplied),
        (Seen::AwaitingApproval, Start::AwaitingApproval),
        (Seen::Approved, Start::Approved),
    ]
}

/// Every target, its history entry, and the starts it may follow: the rule of the memory
/// store, spelled out.
fn targets(denial: &Envelope) -> Vec<(Target<'_>, HistoryEntry, Vec<Start>)> {
    use Start::*;
    let every = vec![
        InProgress,
        OutcomeUnknown,
        NotApplied,
        AwaitingApproval,
        Approved,
    ];
    let until = at(3_600_020);
    let next = OwnerToken::from_u128(0xb0b);
    let cause = UnknownReason::LeaseLapsed;
    let decision = DecisionKind::NotApplied;
    vec![
        (
            Target::OutcomeUnknown { since: at(0) },
            entry(HistoryEvent::Unknown { cause }, 20, 1),
            vec![InProgress],
        ),
        (
            Target::Completed {
                outcome: denial,
                source: OutcomeSource::Denied,
            },
            entry(HistoryEvent::Denied, 20, 1).with_actor("bo", Some("no".to_owned())),
            every.clone(),
        ),
        (
            Target::NotApplied,
            entry(HistoryEvent::Resolved { decision }, 20, 1),
            every,
        ),
        (
            Target::AwaitingApproval,
            entry(HistoryEvent::ApprovalExpired, 20, 1),
            vec![InProgress, Approved],
        ),
        (
            Target::Approved {
                decided_at: at(20),
                until,
            },
            entry(HistoryEvent::Approved { until }, 20, 1).with_actor("ana", None),
            vec![AwaitingApproval, InProgress],
        ),
        (
            Target::InProgress {
                owner: next,
                lease_until: at(130),
                fence: 2,
            },
            HistoryEntry::claimed(at(20), 2, next),
            vec![Approved],
        ),
    ]
}

/// The stored `(approval_at, approval_until)` of `k`'s row.
fn approval_columns(store: &SqliteStore, k: &IdempotencyKey) -> (Option<i64>, Option<i64>) {
    let conn = store.inner.conn.lock().unwrap();
    conn.query_row(
        "SELECT approval_at, approval_until FROM idem_records WHERE key = ?1",
        [k.as_str()],
        |r| Ok((r.get(0)?, r.get(1)?)),
    )
    .unwrap()
}

fn read(store: &dyn Store, k: &IdempotencyKey, now: u64) -> Option<Record> {
    ready(store.read(k, at(now)))
}

fn history(store: &dyn Store, k: &IdempotencyKey, now: u64) -> Option<History> {
    ready(store.history(k, at(now)))
}

// pins A2, A3, A4, A5, U6, U7, F1: from every state, with every seen state and a right or
// wrong fence, every target moves the SQLite record exactly when the memory store (the
// reference) moves it, to the same record and history; the rule is the one the spec
// states (awaiting approval from in progress or approved; approved from awaiting approval
// or in progress; in progress only from approved, with the given fence; completed, a
// denial included, and not applied from any state but completed); a refused transition
// writes nothing, no entry either; the approval columns hold exactly the approval states'
// times and are NULL after every other target
#[test]
fn approval_transitions_match_the_memory_store() {
    let sqlite = SqliteStore::open_in_memory().unwrap();
    let memory = MemoryStore::new();
    let denial = Envelope::from_stored(r#"{"version":1,"err":"denied"}"#);
    let mut n = 0;
    let mut moved = 0;
    for start in STARTS {
        for (seen, described) in seens() {
            for (target, line, follows) in targets(&denial) {
                for fence in [1, 2] {
                    n += 1;
                    let k = key(n);
                    put(&sqlite, &k, start);
                    put(&memory, &k, start);
                    let before = (read(&sqlite, &k, 20), history(&sqlite, &k, 20));
                    assert_eq!(before, (read(&memory, &k, 20), history(&memory, &k, 20)));
                    let expected = fence == 1 && described == start && follows.contains(&start);
                    let case = format!("{start:?} seen {seen:?} to {target:?} fence {fence}");
                    let times = (20, 2_000);
                    let to = target.clone();
                    let answer = move_to(&sqlite, &k, (fence, seen), to, times, line.clone());
                    let to = target.clone();
                    let reference = move_to(&memory, &k, (fence, seen), to, times, line.clone());
                    assert_eq!((answer, reference), (expected, expected), "{case}");
                    let after = (read(&sqlite, &k, 20), history(&sqlite, &k, 20));
                    assert_eq!(
                        after,
                        (read(&memory, &k, 20), history(&memory, &k, 20)),
                        "{case}"
                    );
                    if !expected {
                        assert_eq!(after, before, "{case}: nothing written");
                        continue;
                    }
                    moved += 1;
                    let columns = match target {
                        Target::AwaitingApproval => (Some(20), None),
                        Target::Approved { .. } => (Some(20), Some(3_600_020)),
                        _ => (None, None),
                    };
                    assert_eq!(approval_columns(&sqlite, &k), columns, "{case}");
                }
            }
        }
    }
    // the accepted pairs: 1 + 5 + 5 + 2 + 2 + 1 targets' starts, in progress seen two ways
    assert_eq!(moved, 2 + 6 + 6 + 3 + 3 + 1);
}

// pins A2, A3, A4, A5, A6, S8, S9, G1, I4, I5, I7, U7: records awaiting approval and
// approved read back as such and stay live past their expiry; a claim with either
// fingerprint answers Existing with the record and writes nothing (never reopens it);
// they are listed by their state filters (newest and oldest first), counted, kept by a
// purge without force and never collected; the approved run takes the record with its
// fence, gives it back to approved with the same validity, finds it expired (awaiting
// approval again); a denial completes a record awaiting approval with source denied;
// each step appends its entry
#[test]
fn approval_records_round_trip() {
    let store = SqliteStore::open_in_memory().unwrap();
    let (k1, k2, k3) = (key(1), key(2), key(3));
    let asked = |k: &IdempotencyKey, now: u64| {
        claim(&store, k, &fingerprint('a'), now);
        let line = entry(HistoryEvent::ApprovalRequested, now + 10, 1);
        let to = Target::AwaitingApproval;
        assert!(move_to(
            &store,
            k,
            (1, in_progress()),
            to,
            (now + 10, 0),
            line
        ));
    };
    asked(&k1, 0);
    asked(&k2, 1);
    asked(&k3, 2);
    let approved = entry(HistoryEvent::Approved { until: at(5_000) }, 12, 1)
        .with_actor("ana", Some("ok for 40 EUR".to_owned()));
    let to = Target::Approved {
        decided_at: at(12),
        until: at(5_000),
    };
    let seen = (1, Seen::AwaitingApproval);
    assert!(move_to(&store, &k2, seen, to, (12, 0), approved.clone()));

    let record = |created: u64, state| Record {
        fingerprint: fingerprint('a'),
        created_at: at(created),
        expires_at: at(created + 1_000),
        fence: 1,
        state,
        label: Some(label()),
    };
    let waiting = record(0, RecordState::AwaitingApproval { since: at(10) });
    let approval = RecordState::Approved {
        decided_at: at(12),
        until: at(5_000),
    };
    let allowed = record(1, approval);
    for now in [20, 10_000] {
        assert_eq!(
            read(&store, &k1, now),
            Some(waiting.clone()),
            "live at {now}"
        );
        assert_eq!(
            read(&store, &k2, now),
            Some(allowed.clone()),
            "live at {now}"
        );
    }
    let lines = |k: &IdempotencyKey| history(&store, k, 10_000).unwrap().entries;
    let requested = |at_ms: u64| {
        vec![
            HistoryEntry::claimed(at(at_ms), 1, owner()),
            entry(HistoryEvent::ApprovalRequested, at_ms + 10, 1),
        ]
    };
    assert_eq!(lines(&k1), requested(0));
    let mut k2_lines = requested(1);
    k2_lines.push(approved);
    assert_eq!(lines(&k2), k2_lines);
    for fp in [fingerprint('a'), fingerprint('b')] {
        for (k, held) in [(&k1, &waiting), (&k2, &allowed)] {
            let met = claim(&store, k, &fp, 10_000);
            assert_eq!(met, Claim::Existing(held.clone()));
        }
    }
    assert_eq!(lines(&k1).len(), 2, "a claim writes no entry");
    assert_eq!(lines(&k2).len(), 3, "a claim writes no entry");

    // listed, counted, kept, never collected
    let listed = |state, oldest_first| -> Vec<IdempotencyKey> {
        let query = ListQuery {
            state: Some(state),
            oldest_first,
            ..ListQuery::new()
        };
        let page = ready(store.list(&query, at(10_000)));
        page.records.into_iter().map(|r| r.key).collect()
    };
    assert_eq!(
        listed(StateFilter::AwaitingApproval, true),
        [k1.clone(), k3.clone()]
    );
    assert_eq!(
        listed(StateFilter::AwaitingApproval, false),
        [k3.clone(), k1.clone()]
    );
    let approved = listed(StateFilter::Approved, true);
    assert_eq!(approved, std::slice::from_ref(&k2));
    for state in [StateFilter::InProgress, StateFilter::OutcomeUnknown] {
        assert!(listed(state, false).is_empty(), "{state:?}");
    }
    let stats = ready(store.stats(at(10_000)));
    assert_eq!(
        (stats.total.awaiting_approval, stats.total.approved),
        (2, 1)
    );
    assert_eq!(stats.total.total(), 3);
    assert_eq!(stats.by_tool["wire"], stats.total);
    let kept = ready(store.purge(&k2, false, at(10_000)));
    assert_eq!(kept, PurgeOutcome::Kept(allowed.clone()));
    let far = Timestamp::from_millis(i64::MAX as u64);
    assert_eq!(store.collect_garbage(far).unwrap(), 0);

    // the approved run: the next fence, created now, its own expiry
    let runner = OwnerToken::from_u128(0xb0b);
    let run = Target::InProgress {
        owner: runner,
        lease_until: at(10_100),
        fence: 2,
    };
    let took = HistoryEntry::claimed(at(10_000), 2, runner);
    assert!(move_to(
        &store,
        &k2,
        (1, Seen::Approved),
        run,
        (10_000, 20_000),
        took.clone()
    ));
    let running = Record {
        created_at: at(10_000),
        expires_at: at(20_000),
        fence: 2,
        state: RecordState::InProgress {
            owner: runner,
            lease_until: at(10_100),
        },
        ..allowed.clone()
    };
    assert_eq!(read(&store, &k2, 10_000), Some(running.clone()));
    assert_eq!(approval_columns(&store, &k2), (None, None));
    // given back without an outcome: approved again, with the same validity
    let seen = (
        2,
        Seen::InProgress {
            owner: runner,
            lease_until: Some(at(10_100)),
        },
    );
    let back = Target::Approved {
        decided_at: at(12),
        until: at(5_000),
    };
    let released = entry(HistoryEvent::Released, 10_050, 2);
    assert!(move_to(
        &store,
        &k2,
        seen,
        back,
        (10_050, 0),
        released.clone()
    ));
    let again = Record {
        state: allowed.state.clone(),
        ..running
    };
    assert_eq!(read(&store, &k2, 10_050), Some(again.clone()));
    // found expired: awaiting approval since that call, fence kept
    let lapsed = entry(HistoryEvent::ApprovalExpired, 10_060, 2);
    let to = Target::AwaitingApproval;
    assert!(move_to(
        &store,
        &k2,
        (2, Seen::Approved),
        to,
        (10_060, 0),
        lapsed.clone()
    ));
    let state = RecordState::AwaitingApproval { since: at(10_060) };
    assert_eq!(read(&store, &k2, 10_060), Some(Record { state, ..again }));
    assert_eq!(lines(&k2)[3..], [took, released, lapsed]);

    // denied: completed with source denied, the expiry raised to the denial's keep_for
    let denial = Envelope::from_stored(r#"{"version":1,"err":"denied by bo"}"#);
    let denied = entry(HistoryEvent::Denied, 10_070, 1).with_actor("bo", None);
    let target = Target::Completed {
        outcome: &denial,
        source: OutcomeSource::Denied,
    };
    let decided = (10_070, 10_070 + 86_400_000);
    let seen = (1, Seen::AwaitingApproval);
    assert!(move_to(&store, &k1, seen, target, decided, denied.clone()));
    let done = read(&store, &k1, 10_070).unwrap();
    assert_eq!(
        done.state,
        RecordState::Completed {
            outcome: denial,
            completed_at: at(10_070),
            source: OutcomeSource::Denied,
        }
    );
    assert_eq!(done.expires_at, at(decided.1));
    assert_eq!(approval_columns(&store, &k1), (None, None));
    assert_eq!(lines(&k1).last(), Some(&denied));
    assert_eq!(
        claim(&store, &k1, &fingerprint('a'), 10_080),
        Claim::Existing(done)
    );
    assert_eq!(
        listed(StateFilter::AwaitingApproval, true),
        [k3, k2],
        "k2 created anew by its run"
    );
}
