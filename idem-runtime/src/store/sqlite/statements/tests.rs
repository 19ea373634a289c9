//! Tests of the operations' statements, and the helpers the other test modules share.

use std::path::Path;

use rusqlite::Connection;

use super::{claim, collect, complete, mark_unknown, read_live, release, renew, take_over};
use super::{ClaimValues, CompleteValues, MarkUnknownValues, RenewValues, TakeoverValues};
use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::store::sqlite::history::{self, TransitionValues};
use crate::store::OutcomeSource;
use crate::store::{
    is_garbage, Claim, ClaimRequest, CompleteRequest, Completion, HistoryEntry, HistoryEvent,
    MarkUnknownRequest, OwnerToken, RecordState, RenewRequest, Seen, StoreErrorKind,
    TakeoverRequest, Target, TransitionRequest, UnknownReason,
};

/// The path errors name for the in-memory test database.
pub(in crate::store::sqlite) const PATH: &str = ":memory:";

/// An in-memory database with the current schema.
pub(in crate::store::sqlite) fn database() -> Connection {
    let mut conn = Connection::open_in_memory().expect("in-memory database");
    super::super::schema::set_up(&mut conn, Path::new(PATH), false).expect("schema");
    conn
}

/// The key whose hex digits spell `n`.
pub(in crate::store::sqlite) fn key(n: u64) -> IdempotencyKey {
    IdempotencyKey::from_hex(&format!("{n:064x}")).expect("64 hex digits")
}

/// The instant `ms` milliseconds after the epoch.
pub(in crate::store::sqlite) fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}

/// The fingerprint whose 64 hex digits are all `digit`.
pub(in crate::store::sqlite) fn fingerprint(digit: char) -> Fingerprint {
    Fingerprint::from_hex(&digit.to_string().repeat(64)).expect("64 hex digits")
}

/// An entry of `event` at `at` for `fence`.
pub(in crate::store::sqlite) fn entry(event: HistoryEvent, at: u64, fence: u64) -> HistoryEntry {
    HistoryEntry::new(Timestamp::from_millis(at), event, fence)
}

/// The outcome every test saves.
pub(in crate::store::sqlite) fn outcome() -> Envelope {
    Envelope::from_stored(r#"{"version":1,"ok":1}"#)
}

/// Claims `key` with fingerprint `a…a` at `now` with the given lease and expiry.
pub(in crate::store::sqlite) fn claim_at(
    conn: &mut Connection,
    key: &IdempotencyKey,
    owner: OwnerToken,
    now: u64,
    lease_until: u64,
    expires_at: u64,
) -> Claim {
    let values = ClaimValues::of(&ClaimRequest {
        key,
        fingerprint: &fingerprint('a'),
        owner,
        now: at(now),
        lease_until: at(lease_until),
        expires_at: at(expires_at),
        label: &crate::RecordLabel::default(),
    });
    claim(conn, Path::new(PATH), &values, None).expect("claim")
}

/// Saves [`outcome`] for `owner` at `now` (source executed).
pub(in crate::store::sqlite) fn complete_at(
    conn: &Connection,
    key: &IdempotencyKey,
    owner: OwnerToken,
    now: u64,
) -> Completion {
    let done = entry(
        HistoryEvent::Completed {
            source: OutcomeSource::Executed,
        },
        now,
        1,
    );
    let values = CompleteValues::of(&CompleteRequest {
        key,
        owner,
        outcome: &outcome(),
        source: OutcomeSource::Executed,
        now: at(now),
        entry: done,
    });
    complete(conn, Path::new(PATH), &values).expect("complete")
}

/// Marks `owner`'s claim unknown at `now`.
pub(in crate::store::sqlite) fn mark_unknown_at(
    conn: &Connection,
    key: &IdempotencyKey,
    owner: OwnerToken,
    now: u64,
) -> bool {
    let unknown = entry(
        HistoryEvent::Unknown {
            cause: UnknownReason::Error,
        },
        now,
        1,
    );
    let values = MarkUnknownValues::of(&MarkUnknownRequest {
        key,
        owner,
        now: at(now),
        since: at(0),
        entry: unknown,
    });
    mark_unknown(conn, Path::new(PATH), &values).expect("mark unknown")
}

/// Decides `key`'s run of `fence` in progress by `owner` not applied at `now`.
pub(in crate::store::sqlite) fn not_applied_at(
    conn: &Connection,
    key: &IdempotencyKey,
    owner: OwnerToken,
    fence: u64,
    now: u64,
) -> bool {
    let decided = entry(
        HistoryEvent::Resolved {
            decision: crate::store::DecisionKind::NotApplied,
        },
        now,
        fence,
    );
    let values = TransitionValues::of(&TransitionRequest {
        key,
        fence,
        seen: Seen::InProgress {
            owner,
            lease_until: None,
        },
        target: Target::NotApplied,
        now: at(now),
        expires_at: at(now),
        entry: decided,
    });
    history::transition(conn, Path::new(PATH), &values).expect("transition")
}

/// Records the approval request of `owner`'s claim of `fence` at `now` (A2).
pub(in crate::store::sqlite) fn awaiting_approval_at(
    conn: &Connection,
    key: &IdempotencyKey,
    owner: OwnerToken,
    fence: u64,
    now: u64,
) -> bool {
    let values = TransitionValues::of(&TransitionRequest {
        key,
        fence,
        seen: Seen::InProgress {
            owner,
            lease_until: None,
        },
        target: Target::AwaitingApproval,
        now: at(now),
        expires_at: at(now),
        entry: entry(HistoryEvent::ApprovalRequested, now, fence),
    });
    history::transition(conn, Path::new(PATH), &values).expect("transition")
}

/// Approves `key`'s record of `fence` awaiting approval at `now`, until `until` (A3).
pub(in crate::store::sqlite) fn approved_at(
    conn: &Connection,
    key: &IdempotencyKey,
    fence: u64,
    now: u64,
    until: u64,
) -> bool {
    let approved = HistoryEvent::Approved { until: at(until) };
    let values = TransitionValues::of(&TransitionRequest {
        key,
        fence,
        seen: Seen::AwaitingApproval,
        target: Target::Approved {
            decided_at: at(now),
            until: at(until),
        },
        now: at(now),
        expires_at: at(now),
        entry: entry(approved, now, fence).with_actor("ana", None),
    });
    history::transition(conn, Path::new(PATH), &values).expect("transition")
}

// pins G1, S8, A2, A3: the collection statement deletes exactly the rows `is_garbage` calls
// garbage, the completed ones expired at or before the cutoff: never a row in progress,
// outcome unknown, not applied, awaiting approval or approved, whatever its expiry and
// lease
#[test]
fn collection_deletes_exactly_the_garbage() {
    let mut conn = database();
    let path = Path::new(PATH);
    let cutoff = at(1_000);
    let mut n = 0;
    let mut keys = Vec::new();
    for expires_at in [999, 1_000, 1_001] {
        for lease_until in [999, 1_000, 1_001] {
            for state in [
                "in progress",
                "unknown",
                "completed",
                "not applied",
                "awaiting approval",
                "approved",
            ] {
                n += 1;
                let (k, owner) = (key(n), OwnerToken::random());
                let claimed = claim_at(&mut conn, &k, owner, 0, lease_until, expires_at);
                assert_eq!(
                    claimed,
                    Claim::Acquired {
                        fence: 1,
                        reopened: false
                    }
                );
                match state {
                    "unknown" => assert!(mark_unknown_at(&conn, &k, owner, 0)),
                    "completed" => {
                        assert_eq!(complete_at(&conn, &k, owner, 0), Completion::Saved)
                    }
                    "not applied" => assert!(not_applied_at(&conn, &k, owner, 1, 0)),
                    "awaiting approval" => assert!(awaiting_approval_at(&conn, &k, owner, 1, 0)),
                    "approved" => {
                        assert!(awaiting_approval_at(&conn, &k, owner, 1, 0));
                        assert!(approved_at(&conn, &k, 1, 0, 1));
                    }
                    _ => {}
                }
                let record = read_live(&conn, path, k.as_str(), at(0)).unwrap().unwrap();
                keys.push((k, state, is_garbage(&record, cutoff)));
            }
        }
    }
    let garbage = keys.iter().filter(|(_, _, garbage)| *garbage).count();
    // completed: 2 expiries at or before the cutoff × 3 leases; nothing else
    assert_eq!(garbage, 2 * 3);
    assert!(keys
        .iter()
        .all(|(_, state, garbage)| !garbage || *state == "completed"));
    assert_eq!(collect(&conn, path, cutoff, -1).unwrap(), garbage);
    for (k, state, garbage) in keys {
        let held = conn
            .query_row(
                "SELECT COUNT(*) FROM idem_records WHERE key = ?1",
                [k.as_str()],
                |r| r.get::<_, i64>(0),
            )
            .unwrap();
        assert_eq!(held == 1, !garbage, "{state} {k}");
    }
    // every row that is not completed is still there after a collection at any cutoff
    assert_eq!(collect(&conn, path, at(u64::MAX), -1).unwrap(), 3);
    let left: i64 = conn
        .query_row(
            "SELECT COUNT(*) FROM idem_records WHERE outcome IS NULL",
            [],
            |r| r.get(0),
        )
        .unwrap();
    assert_eq!(left, 3 * 3 * 5);
}

// pins G1: the collection finds its rows by the partial index of completed rows
#[test]
fn collection_reads_only_the_index_of_completed_rows() {
    let conn = database();
    let plan: Vec<String> = conn
        .prepare(&format!("EXPLAIN QUERY PLAN {}", super::COLLECT))
        .unwrap()
        .query_map(
            rusqlite::named_params! { ":cutoff": 1, ":limit": 1 },
            |row| row.get::<_, String>("detail"),
        )
        .unwrap()
        .collect::<Result<_, _>>()
        .unwrap();
    assert!(
        plan.iter().any(|l| l
            .contains("USING COVERING INDEX idem_records_expires_at (expires_at<?)")
            || l.contains("USING INDEX idem_records_expires_at (expires_at<?)")),
        "{plan:?}"
    );
}

// pins G1: a collection during a claim deletes at most its batch
#[test]
fn collection_is_bounded_by_its_limit() {
    let mut conn = database();
    for n in 0..5 {
        let owner = OwnerToken::random();
        claim_at(&mut conn, &key(n), owner, 0, 10, 10);
        assert_eq!(complete_at(&conn, &key(n), owner, 5), Completion::Saved);
    }
    assert_eq!(collect(&conn, Path::new(PATH), at(10), 2).unwrap(), 2);
    assert_eq!(collect(&conn, Path::new(PATH), at(10), -1).unwrap(), 3);
}

// pins S8, L1, U1, S6: a row that is not completed stays live past its expiry: a claim
// meets it, its owner renews, marks it unknown, completes it; only a completed row
// expires, and a claim over it continues its fence
#[test]
fn only_completed_rows_expire() {
    let mut conn = database();
    let path = Path::new(PATH);
    let (k, a, b) = (key(1), OwnerToken::random(), OwnerToken::random());
    claim_at(&mut conn, &k, a, 0, 50, 100);
    let overdue = read_live(&conn, path, k.as_str(), at(1_000))
        .unwrap()
        .unwrap();
    assert!(overdue.is_overdue(at(1_000)));
    assert_eq!(
        claim_at(&mut conn, &k, b, 1_000, 1_100, 2_000),
        Claim::Existing(overdue)
    );
    let renewal = RenewValues::of(&RenewRequest {
        key: &k,
        owner: a,
        now: at(1_000),
        lease_until: at(1_500),
    });
    assert!(renew(&conn, path, &renewal).unwrap());
    let renewed = read_live(&conn, path, k.as_str(), at(1_000))
        .unwrap()
        .unwrap();
    assert_eq!(renewed.expires_at, at(1_500), "raised to the lease");
    assert_eq!(complete_at(&conn, &k, a, 1_600), Completion::Saved);
    assert!(read_live(&conn, path, k.as_str(), at(1_499))
        .unwrap()
        .is_some());
    assert_eq!(read_live(&conn, path, k.as_str(), at(1_500)).unwrap(), None);
    assert_eq!(
        claim_at(&mut conn, &k, b, 1_500, 1_600, 2_500),
        Claim::Acquired {
            fence: 2,
            reopened: false
        }
    );
    // A release deletes only a row in progress of its owner.
    assert!(!release(&conn, path, k.as_str(), a).unwrap());
    assert!(release(&conn, path, k.as_str(), b).unwrap());
    assert_eq!(read_live(&conn, path, k.as_str(), at(0)).unwrap(), None);
}

// pins F1: a fence at the largest SQLite integer saturates instead of overflowing into
// a float, on a claim over an expired row, on a reopening claim and on a takeover with
// a fence past it
#[test]
fn fences_saturate_at_the_largest_integer() {
    let mut conn = database();
    let path = Path::new(PATH);
    let k = key(1);
    let owner = OwnerToken::random();
    claim_at(&mut conn, &k, owner, 0, 10, 10);
    assert_eq!(complete_at(&conn, &k, owner, 5), Completion::Saved);
    conn.execute(
        "UPDATE idem_records SET fence = ?1 WHERE key = ?2",
        rusqlite::params![i64::MAX, k.as_str()],
    )
    .unwrap();
    let max = i64::MAX as u64;
    let next = OwnerToken::random();
    let claimed = claim_at(&mut conn, &k, next, 10, 20, 100);
    assert_eq!(
        claimed,
        Claim::Acquired {
            fence: max,
            reopened: false
        }
    );
    let taken_over = entry(
        HistoryEvent::TakenOver {
            cause: UnknownReason::LeaseLapsed,
        },
        20,
        max,
    );
    let takeover = TakeoverValues::of(&TakeoverRequest {
        key: &k,
        seen_owner: next,
        seen_lease_until: at(20),
        owner: OwnerToken::random(),
        now: at(20),
        lease_until: at(30),
        expires_at: at(100),
        fence: u64::MAX,
        label: &crate::RecordLabel::default(),
        entry: taken_over,
    });
    assert!(take_over(&conn, path, &takeover).unwrap());
    let record = read_live(&conn, path, k.as_str(), at(20)).unwrap().unwrap();
    assert_eq!(record.fence, max);
    let RecordState::InProgress { owner: last, .. } = record.state else {
        panic!("{record:?}")
    };
    assert!(not_applied_at(&conn, &k, last, max, 30));
    let reopened = claim_at(&mut conn, &k, OwnerToken::random(), 40, 50, 100);
    assert_eq!(
        reopened,
        Claim::Acquired {
            fence: max,
            reopened: true
        }
    );
}

// pins S10, F1, U1, U6, A2, A3: rows that match no state, hold a fence below 1 or an
// unknown outcome source are Corrupt
#[test]
fn rows_outside_every_state_are_corrupt() {
    let mut conn = database();
    let path = Path::new(PATH);
    conn.execute_batch("PRAGMA ignore_check_constraints = ON")
        .unwrap();
    for (n, change) in [
        "fence = 0",
        "fence = -3",
        // completed and unknown at once
        "owner = NULL, lease_until = NULL, outcome = '{}', completed_at = 5, unknown_since = 1",
        // unknown without a lease
        "lease_until = NULL, unknown_since = 1",
        "unknown_since = -1",
        // no state at all
        "owner = NULL, lease_until = NULL",
        // not applied beside another state
        "decided_at = 5",
        "owner = NULL, lease_until = NULL, outcome = '{}', completed_at = 5, decided_at = 5",
        "owner = NULL, lease_until = NULL, decided_at = -5",
        // a source no build writes
        "owner = NULL, lease_until = NULL, outcome = '{}', completed_at = 5, source = 'magic'",
        // an approval beside another state, an approval's end without its start
        "approval_at = 5",
        "approval_at = 5, approval_until = 9",
        "owner = NULL, lease_until = NULL, decided_at = 5, approval_at = 5",
        "owner = NULL, lease_until = NULL, outcome = '{}', completed_at = 5, approval_at = 5",
        "owner = NULL, lease_until = NULL, approval_until = 9",
        "owner = NULL, lease_until = NULL, approval_at = -5",
        "owner = NULL, lease_until = NULL, approval_at = 5, approval_until = -9",
    ]
    .into_iter()
    .enumerate()
    {
        let k = key(n as u64);
        claim_at(&mut conn, &k, OwnerToken::random(), 0, 10, 100);
        conn.execute(
            &format!("UPDATE idem_records SET {change} WHERE key = ?1"),
            [k.as_str()],
        )
        .unwrap();
        let error = read_live(&conn, path, k.as_str(), at(0)).unwrap_err();
        assert_eq!(error.kind, StoreErrorKind::Corrupt, "{change}: {error}");
    }
}
