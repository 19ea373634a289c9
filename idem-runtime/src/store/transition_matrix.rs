//! The transition matrix every persistent store's tests run (A2–A5, U2, U6, U7, F1): every
//! transition (6 targets) tried on a record in every state (6), as every state a caller
//! may have seen (8: an approval seen is told apart from a later one by its expiry), on the
//! record's fence and on a stale one, on the store under test and
//! on the memory store (the reference, `MemoryStore::transition`): the same answer, the
//! same record and the same history, and the answer the specification's table gives.
//!
//! A store's test wraps a fresh store in a [`Backend`], whose hooks check what only that
//! store can see (raw columns or hash fields, the Redis expiry), and calls [`run`].

use std::fmt;
use std::time::Duration;

use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::label::{RecordLabel, ScopePath};
use crate::store::{
    Claim, ClaimRequest, CompleteRequest, Completion, DecisionKind, Denial, History, HistoryEntry,
    HistoryEvent, MarkUnknownRequest, MemoryStore, OutcomeSource, OwnerToken, Record, Seen, Store,
    Target, TransitionRequest, UnknownReason,
};

/// The store under test, and what the matrix lets it check beyond the record and history
/// it compares with the memory store's.
pub(crate) trait Backend {
    /// The store under test. It must hold none of the matrix's keys (those of
    /// [`key`]`(1..=`[`CASES`]`)`): a fresh store, schema or prefix.
    fn store(&self) -> &dyn Store;

    /// Called once a case's record is set up, just before the transition is tried: the
    /// place to take a snapshot of the raw storage for [`refused`](Self::refused).
    async fn before(&mut self, _key: &IdempotencyKey) {}

    /// Called after a transition the store refused (and the matrix checked that the record
    /// and history are as they were): the raw storage must be as it was too.
    async fn refused(&mut self, _key: &IdempotencyKey, _case: &Case<'_>) {}

    /// Called after a transition the store made (and the matrix checked the record and
    /// history against the memory store's).
    async fn moved(&mut self, _key: &IdempotencyKey, _case: &Case<'_>) {}
}

/// The state a record is brought to before the transition tried on it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Start {
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

/// How many cases the matrix tries: 6 starts × 8 seen states × 6 targets × 2 fences.
pub(crate) const CASES: u64 = 6 * 8 * 6 * 2;

/// An hour (ms): the validity of the approvals the matrix records.
const HOUR_MS: u64 = 3_600_000;

/// When every case's record is claimed (fence 1, lease until `T0 + LEASE_MS`, expiry
/// `T0 + TTL_MS`); it is brought to its start at `T0 + 1` (and approved at `T0 + 2`), and
/// the transition tried at [`NOW`].
const T0: u64 = 1_000_000;
const LEASE_MS: u64 = 1_000;
const TTL_MS: u64 = 100_000;
/// When the transition is tried and the records read.
const NOW: u64 = T0 + 10;

/// One case of the matrix: the transition tried at `now` on a record brought to `start`.
pub(crate) struct Case<'a> {
    pub(crate) start: Start,
    pub(crate) seen: Seen,
    pub(crate) target: &'a Target<'a>,
    pub(crate) fence: u64,
    pub(crate) now: Timestamp,
}

impl Case<'_> {
    /// The approval times a record moved by this case holds, `(approval_at,
    /// approval_until)`: only the approval states have them (A2, A3).
    pub(crate) fn approval(&self) -> (Option<Timestamp>, Option<Timestamp>) {
        match *self.target {
            Target::AwaitingApproval => (Some(self.now), None),
            Target::Approved { decided_at, until } => (Some(decided_at), Some(until)),
            _ => (None, None),
        }
    }
}

impl fmt::Display for Case<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let Case {
            start,
            seen,
            target,
            fence,
            ..
        } = self;
        write!(
            f,
            "start {start:?}, seen {seen:?}, target {target:?}, fence {fence}"
        )
    }
}

/// The key of the matrix's `n`th case.
pub(crate) fn key(n: u64) -> IdempotencyKey {
    IdempotencyKey::from_hex(&format!("{n:064x}")).expect("64 hex digits")
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}

fn plus(t: Timestamp, ms: u64) -> Timestamp {
    t.saturating_add(Duration::from_millis(ms))
}

/// The entry the engine writes for a move to `target` on `fence` at `now` (a denial for a
/// completion); a person's approval or denial carries an actor and a note that needs
/// escaping.
pub(crate) fn entry(target: &Target<'_>, fence: u64, now: Timestamp) -> HistoryEntry {
    let event = match target {
        Target::OutcomeUnknown { .. } => HistoryEvent::Unknown {
            cause: UnknownReason::LeaseLapsed,
        },
        Target::Completed { .. } => HistoryEvent::Denied,
        Target::NotApplied => HistoryEvent::Resolved {
            decision: DecisionKind::NotApplied,
        },
        Target::AwaitingApproval => HistoryEvent::ApprovalRequested,
        Target::Approved { until, .. } => HistoryEvent::Approved { until: *until },
        Target::InProgress { owner, fence, .. } => {
            return HistoryEntry::claimed(now, *fence, *owner)
        }
    };
    let entry = HistoryEntry::new(now, event, fence);
    match target {
        Target::Completed { .. } | Target::Approved { .. } => {
            entry.with_actor("ana", Some("ok for \"40 EUR\"\nline two".to_owned()))
        }
        _ => entry,
    }
}

/// Moves `k`'s record of `fence`, seen as `seen`, to `target` at `now`, with the entry the
/// engine writes for that move.
async fn transition(
    store: &dyn Store,
    k: &IdempotencyKey,
    (fence, seen): (u64, Seen),
    target: Target<'_>,
    now: Timestamp,
) -> bool {
    let entry = entry(&target, fence, now);
    let request = TransitionRequest {
        key: k,
        fence,
        seen,
        target,
        now,
        expires_at: plus(now, 24 * HOUR_MS),
        entry,
    };
    match store.transition(request).await {
        Ok(moved) => moved,
        Err(e) => panic!("a set-up transition of {k} on {store:?}: {e:?}"),
    }
}

/// Brings `k` to `start` on `store` with the writes the engine makes to get there, by the
/// same requests on every store: claimed by `owner` at [`T0`], then marked unknown, decided
/// not applied, sent for approval (and approved) or completed at `T0 + 1` (`T0 + 2`).
async fn bring(store: &dyn Store, k: &IdempotencyKey, owner: OwnerToken, start: Start) {
    let (t0, t1) = (at(T0), at(T0 + 1));
    let fingerprint = Fingerprint::from_hex(&"ab".repeat(32)).expect("64 hex digits");
    let label = RecordLabel::new("send_refund", ScopePath::new().with("conversation", "c-1"));
    let claimed = store
        .claim(ClaimRequest {
            key: k,
            fingerprint: &fingerprint,
            owner,
            now: t0,
            lease_until: plus(t0, LEASE_MS),
            expires_at: plus(t0, TTL_MS),
            label: &label,
        })
        .await;
    let acquired = Claim::Acquired {
        fence: 1,
        reopened: false,
    };
    assert_eq!(claimed, Ok(acquired), "set-up of {start:?} on {store:?}");
    let mine = Seen::InProgress {
        owner,
        lease_until: None,
    };
    let mark_unknown = || async move {
        let cause = UnknownReason::Error;
        let marked = store
            .mark_unknown(MarkUnknownRequest {
                key: k,
                owner,
                now: t1,
                since: t1,
                entry: HistoryEntry::new(t1, HistoryEvent::Unknown { cause }, 1),
            })
            .await;
        marked == Ok(true)
    };
    let ok = match start {
        Start::InProgress => true,
        Start::OutcomeUnknown => mark_unknown().await,
        Start::NotApplied => {
            mark_unknown().await
                && transition(store, k, (1, unknown(owner)), Target::NotApplied, t1).await
        }
        Start::AwaitingApproval | Start::Approved => {
            transition(store, k, (1, mine), Target::AwaitingApproval, t1).await
                && (start == Start::AwaitingApproval || {
                    let approved = Target::Approved {
                        decided_at: at(T0 + 2),
                        until: approved_until(),
                    };
                    transition(store, k, (1, Seen::AwaitingApproval), approved, at(T0 + 2)).await
                })
        }
        Start::Completed => {
            let source = OutcomeSource::Executed;
            let saved = store
                .complete(CompleteRequest {
                    key: k,
                    owner,
                    outcome: &Envelope::encode_ok(&100u64).expect("encodes"),
                    source,
                    now: t1,
                    entry: HistoryEntry::new(t1, HistoryEvent::Completed { source }, 1),
                })
                .await;
            saved == Ok(Completion::Saved)
        }
    };
    assert!(ok, "set-up of {start:?} on {store:?}");
}

/// The expiry of the approval a record brought to `Start::Approved` holds.
fn approved_until() -> Timestamp {
    plus(at(T0 + 2), HOUR_MS)
}

/// What `owner` sees of its claim once it is marked unknown (the lease is kept).
fn unknown(owner: OwnerToken) -> Seen {
    Seen::OutcomeUnknown {
        owner,
        lease_until: at(T0 + LEASE_MS),
    }
}

/// The states a caller can have seen of a record claimed by `owner`: in progress with and
/// without its lease, in progress by `other`, the record's approval and an earlier one, and
/// every other state.
fn seens(owner: OwnerToken, other: OwnerToken) -> [Seen; 8] {
    [
        Seen::InProgress {
            owner,
            lease_until: None,
        },
        Seen::InProgress {
            owner,
            lease_until: Some(at(T0 + LEASE_MS)),
        },
        Seen::InProgress {
            owner: other,
            lease_until: None,
        },
        unknown(owner),
        Seen::NotApplied,
        Seen::AwaitingApproval,
        Seen::Approved {
            until: approved_until(),
        },
        // An approval that expired and was replaced: its expiry is not the record's (A4).
        Seen::Approved { until: at(T0 + 1) },
    ]
}

/// Every target, with `runner` the owner of the run an approval allows and `denial` a
/// person's denial saved as the outcome (A3).
fn targets(runner: OwnerToken, denial: &Envelope) -> [Target<'_>; 6] {
    let now = at(NOW);
    [
        Target::OutcomeUnknown { since: at(T0) },
        Target::Completed {
            outcome: denial,
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
            lease_until: plus(now, LEASE_MS),
            fence: 2,
        },
    ]
}

/// Whether `seen` is what a record brought to `start` by `owner` is (a lease seen must be
/// the record's).
fn sees(start: Start, seen: Seen, owner: OwnerToken) -> bool {
    match (start, seen) {
        (
            Start::InProgress,
            Seen::InProgress {
                owner: o,
                lease_until,
            },
        ) => o == owner && lease_until.is_none_or(|l| l == at(T0 + LEASE_MS)),
        (Start::OutcomeUnknown, seen) => seen == unknown(owner),
        (Start::NotApplied, Seen::NotApplied)
        | (Start::AwaitingApproval, Seen::AwaitingApproval) => true,
        (Start::Approved, Seen::Approved { until }) => until == approved_until(),
        _ => false,
    }
}

/// Whether `target` may be reached from `start` (the specification's table): outcome
/// unknown only from in progress; completed (a denial) and not applied from any state but
/// completed; awaiting approval from in progress or approved; approved from awaiting
/// approval or in progress; in progress only from approved.
fn allowed(start: Start, target: &Target<'_>) -> bool {
    match target {
        Target::OutcomeUnknown { .. } => start == Start::InProgress,
        Target::Completed { .. } | Target::NotApplied => start != Start::Completed,
        Target::AwaitingApproval => matches!(start, Start::InProgress | Start::Approved),
        Target::Approved { .. } => matches!(start, Start::AwaitingApproval | Start::InProgress),
        Target::InProgress { .. } => start == Start::Approved,
    }
}

/// The live record of `k` at `now` and its history, as `store` reads them.
async fn state(
    store: &dyn Store,
    k: &IdempotencyKey,
    now: Timestamp,
    case: &dyn fmt::Display,
) -> (Option<Record>, Option<History>) {
    let record = store.read(k, now).await;
    let history = store.history(k, now).await;
    match (record, history) {
        (Ok(record), Ok(history)) => (record, history),
        (record, history) => panic!("{case}: reading {store:?}: {record:?}, {history:?}"),
    }
}

/// Runs the whole matrix ([`CASES`] cases, keys `1..=CASES`) on `backend`'s store against
/// a memory store, asserting for each case that both stores give the answer the
/// specification's table gives, then the same record and history, and that a refused
/// transition wrote nothing; `backend`'s hooks check the raw storage around each case.
pub(crate) async fn run(backend: &mut impl Backend) {
    let memory = MemoryStore::new();
    let (owner, other, runner) = (
        OwnerToken::random(),
        OwnerToken::random(),
        OwnerToken::random(),
    );
    let now = at(NOW);
    let denial = Denial {
        actor: "ana".to_owned(),
        at: now,
        note: Some("not this customer".to_owned()),
    }
    .to_envelope();
    let targets = targets(runner, &denial);
    let (mut n, mut moved) = (0, 0);
    for start in STARTS {
        for seen in seens(owner, other) {
            for target in &targets {
                for fence in [1, 2] {
                    n += 1;
                    let k = key(n);
                    let case = Case {
                        start,
                        seen,
                        target,
                        fence,
                        now,
                    };
                    bring(backend.store(), &k, owner, start).await;
                    bring(&memory, &k, owner, start).await;
                    let set_up = format!("set-up of {start:?}");
                    let before = state(backend.store(), &k, now, &set_up).await;
                    assert_eq!(
                        before,
                        state(&memory, &k, now, &set_up).await,
                        "{set_up}: as on the memory store"
                    );
                    backend.before(&k).await;
                    let request = TransitionRequest {
                        key: &k,
                        fence,
                        seen,
                        target: target.clone(),
                        now,
                        expires_at: plus(now, 24 * HOUR_MS),
                        entry: entry(target, fence, now),
                    };
                    let expected = fence == 1 && sees(start, seen, owner) && allowed(start, target);
                    assert_eq!(
                        memory.transition(request.clone()).await,
                        Ok(expected),
                        "{case}: the memory store, as specified"
                    );
                    assert_eq!(
                        backend.store().transition(request).await,
                        Ok(expected),
                        "{case}: as the memory store and the specification"
                    );
                    let after = state(backend.store(), &k, now, &case).await;
                    assert_eq!(
                        after,
                        state(&memory, &k, now, &case).await,
                        "{case}: the record and history, as on the memory store"
                    );
                    if expected {
                        moved += 1;
                        backend.moved(&k, &case).await;
                    } else {
                        assert_eq!(after, before, "{case}: nothing written, history included");
                        backend.refused(&k, &case).await;
                    }
                }
            }
        }
    }
    assert_eq!(n, CASES);
    // in progress (seen two ways): 5 targets each; outcome unknown, not applied: 2 each;
    // awaiting approval: 3; approved: 4; completed: none
    assert_eq!(moved, 2 * 5 + 2 + 2 + 3 + 4, "moves of {n} cases");
}
