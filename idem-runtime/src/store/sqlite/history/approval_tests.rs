//! Tests of the approval states (A2–A6): the transitions into and out of them against the
//! memory store (the reference; the matrix every store runs, `store::transition_matrix`),
//! and a record in each state read back, claimed, listed, counted, purged and collected
//! through the store.

use futures_util::FutureExt;

use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::label::RecordLabel;
use crate::store::sqlite::statements::tests::{at, entry, fingerprint, key};
use crate::store::sqlite::SqliteStore;
use crate::store::transition_matrix::{self, Backend, Case};
use crate::store::{
    Claim, ClaimRequest, History, HistoryEntry, HistoryEvent, ListQuery, OutcomeSource, OwnerToken,
    PurgeOutcome, Record, RecordState, Seen, StateFilter, Store, StoreFuture, Target,
    TransitionRequest,
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

impl Backend for SqliteStore {
    fn store(&self) -> &dyn Store {
        self
    }

    async fn moved(&mut self, k: &IdempotencyKey, case: &Case<'_>) {
        let (approval_at, approval_until) = case.approval();
        let ms = |t: Option<Timestamp>| t.map(|t| i64::try_from(t.as_millis()).expect("ms"));
        let columns = (ms(approval_at), ms(approval_until));
        assert_eq!(
            approval_columns(self, k),
            columns,
            "{case}: approval columns"
        );
    }
}

// pins A2, A3, A4, A5, U6, U7, F1: from every state, with every seen state and a right or
// wrong fence, every target moves the SQLite record exactly when the memory store (the
// reference) moves it, to the same record and history (the matrix every store runs,
// `store::transition_matrix`); the rule is the one the spec states (awaiting approval from
// in progress or approved; approved from awaiting approval or in progress; in progress
// only from approved, with the given fence; completed, a denial included, and not applied
// from any state but completed); a refused transition writes nothing, no entry either; the
// approval columns hold exactly the approval states' times and are NULL after every other
// target
#[test]
fn approval_transitions_match_the_memory_store() {
    let mut sqlite = SqliteStore::open_in_memory().unwrap();
    transition_matrix::run(&mut sqlite)
        .now_or_never()
        .expect("the SQLite store (outside a runtime) and the memory store answer at once");
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
        (1, Seen::Approved { until: at(5_000) }),
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
        (2, Seen::Approved { until: at(5_000) }),
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
