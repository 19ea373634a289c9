//! Tests of the history columns and of transitions.

use std::path::Path;

use rusqlite::Connection;

use super::{history, transition, TransitionValues};
use crate::envelope::Envelope;
use crate::store::sqlite::statements::tests::{
    at, claim_at, complete_at, database, entry, fingerprint, key, mark_unknown_at, not_applied_at,
    outcome, PATH,
};
use crate::store::sqlite::statements::{self, ClaimValues, TakeoverValues};
use crate::store::OutcomeSource;
use crate::store::{
    Claim, ClaimRequest, Completion, DecisionKind, History, HistoryEntry, HistoryEvent, OwnerToken,
    Record, RecordState, Seen, TakeoverRequest, Target, TransitionRequest, UnknownReason,
    HISTORY_LIMIT,
};
use crate::{IdempotencyKey, RecordLabel};

fn path() -> &'static Path {
    Path::new(PATH)
}

fn read(conn: &Connection, k: &IdempotencyKey, now: u64) -> Record {
    statements::read_live(conn, path(), k.as_str(), at(now))
        .unwrap()
        .expect("a live record")
}

fn history_of(conn: &Connection, k: &IdempotencyKey, now: u64) -> History {
    history(conn, path(), k.as_str(), at(now))
        .unwrap()
        .expect("a live record")
}

/// The stored history columns of `k`'s row.
fn columns(conn: &Connection, k: &IdempotencyKey) -> (Option<String>, i64, i64) {
    conn.query_row(
        "SELECT history, history_len, history_dropped FROM idem_records WHERE key = ?1",
        [k.as_str()],
        |r| Ok((r.get(0)?, r.get(1)?, r.get(2)?)),
    )
    .unwrap()
}

/// A transition of `k`'s record of `fence` from `seen` to `target` at `now`.
fn move_to(
    conn: &Connection,
    k: &IdempotencyKey,
    fence: u64,
    seen: Seen,
    target: Target<'_>,
    (now, expires_at): (u64, u64),
    entry: &HistoryEntry,
) -> bool {
    let values = TransitionValues::of(&TransitionRequest {
        key: k,
        fence,
        seen,
        target,
        now: at(now),
        expires_at: at(expires_at),
        entry: entry.clone(),
    });
    transition(conn, path(), &values).unwrap()
}

// pins U7: the `claimed` line a claim builds in SQL is byte for byte the one
// `HistoryEntry::claimed(…).to_json()` writes, for a first claim, a claim over an expired
// record (the history starts over) and a saturated fence
#[test]
fn claimed_entries_built_in_sql_are_the_lines_rust_writes() {
    let mut conn = database();
    let k = key(1);
    let a = OwnerToken::from_u128(0xabc);
    claim_at(
        &mut conn,
        &k,
        a,
        1_796_000_000_000,
        1_796_000_000_100,
        1_796_000_001_000,
    );
    let first = HistoryEntry::claimed(at(1_796_000_000_000), 1, a);
    assert_eq!(columns(&conn, &k), (Some(first.to_json()), 1, 0));
    assert_eq!(
        first.to_json(),
        r#"{"at":1796000000000,"event":"claimed","fence":1,"owner":"00000000000000000000000000000abc"}"#
    );
    assert_eq!(
        complete_at(&conn, &k, a, 1_796_000_000_050),
        Completion::Saved
    );
    assert_eq!(columns(&conn, &k).1, 2);
    let b = OwnerToken::random();
    assert_eq!(
        claim_at(
            &mut conn,
            &k,
            b,
            1_796_000_001_000,
            1_796_000_001_100,
            1_796_000_002_000
        ),
        Claim::Acquired {
            fence: 2,
            reopened: false
        }
    );
    let again = HistoryEntry::claimed(at(1_796_000_001_000), 2, b);
    assert_eq!(
        columns(&conn, &k),
        (Some(again.to_json()), 1, 0),
        "started over"
    );
    assert_eq!(history_of(&conn, &k, 1_796_000_001_000).entries, [again]);

    let max = i64::MAX as u64;
    assert_eq!(
        complete_at(&conn, &k, b, 1_796_000_001_050),
        Completion::Saved
    );
    conn.execute("UPDATE idem_records SET fence = ?1", [i64::MAX])
        .unwrap();
    claim_at(
        &mut conn,
        &k,
        a,
        1_796_000_002_000,
        1_796_000_002_100,
        1_796_000_003_000,
    );
    let saturated = HistoryEntry::claimed(at(1_796_000_002_000), max, a);
    assert_eq!(columns(&conn, &k).0, Some(saturated.to_json()));
}

// pins U7: every transition appends its entry in its own statement; the history keeps
// the last HISTORY_LIMIT entries, oldest first, and counts the dropped ones
#[test]
fn the_history_keeps_the_last_32_entries() {
    let mut conn = database();
    let k = key(1);
    let mut owner = OwnerToken::random();
    claim_at(&mut conn, &k, owner, 0, 10, 100);
    let mut expected = vec![HistoryEntry::claimed(at(0), 1, owner)];
    // alternately marked unknown and taken over: one entry each
    for step in 1..=46u64 {
        let record = read(&conn, &k, step);
        if step % 2 == 1 {
            assert!(mark_unknown_at(&conn, &k, owner, step));
            expected.push(entry(
                HistoryEvent::Unknown {
                    cause: UnknownReason::Error,
                },
                step,
                1,
            ));
        } else {
            let (seen_owner, seen_lease_until) = match record.state {
                RecordState::OutcomeUnknown {
                    owner, lease_until, ..
                } => (owner, lease_until),
                other => panic!("{other:?}"),
            };
            let next = OwnerToken::random();
            let taken = entry(
                HistoryEvent::TakenOver {
                    cause: UnknownReason::Marked,
                },
                step,
                record.fence + 1,
            )
            .with_owner(next);
            let values = TakeoverValues::of(&TakeoverRequest {
                key: &k,
                seen_owner,
                seen_lease_until,
                owner: next,
                now: at(step),
                lease_until: at(step + 10),
                expires_at: at(step + 100),
                fence: record.fence + 1,
                label: &RecordLabel::default(),
                entry: taken.clone(),
            });
            assert!(statements::take_over(&conn, path(), &values).unwrap());
            expected.push(taken);
            owner = next;
        }
        let kept = expected.len().min(HISTORY_LIMIT);
        let dropped = expected.len() - kept;
        let read = history_of(&conn, &k, step);
        assert_eq!(read.entries, expected[dropped..], "after step {step}");
        assert_eq!(read.dropped, dropped as u64);
        let (text, len, dropped_column) = columns(&conn, &k);
        assert_eq!((len, dropped_column), (kept as i64, dropped as i64));
        let lines: Vec<String> = expected[dropped..]
            .iter()
            .map(HistoryEntry::to_json)
            .collect();
        assert_eq!(text, Some(lines.join("\n")));
    }
    assert_eq!(history_of(&conn, &k, 50).dropped, 47 - 32);
    // a renewal writes no entry, a read none either
    let before = columns(&conn, &k);
    let renewal = statements::RenewValues::of(&crate::store::RenewRequest {
        key: &k,
        owner,
        now: at(50),
        lease_until: at(60),
    });
    assert!(statements::renew(&conn, path(), &renewal).unwrap());
    read(&conn, &k, 50);
    assert_eq!(columns(&conn, &k), before);
}

// pins U6, S8, S9, F1, U7, P1: a row decided not applied reads back as such, is live
// past its expiry, is claimed only with its fingerprint (the next fence, its history
// kept, its label rewritten), returns to not applied and is decided completed with the
// expiry raised, never lowered
#[test]
fn not_applied_rows_round_trip() {
    let mut conn = database();
    let k = key(1);
    let a = OwnerToken::random();
    claim_at(&mut conn, &k, a, 0, 10, 100);
    assert!(mark_unknown_at(&conn, &k, a, 5));
    let unknown = read(&conn, &k, 5);
    let decided = entry(
        HistoryEvent::Resolved {
            decision: DecisionKind::NotApplied,
        },
        20,
        1,
    )
    .with_actor("ana", Some("bank: no refund\n\"re_1\"".to_owned()));
    let seen = Seen::OutcomeUnknown {
        owner: a,
        lease_until: at(10),
    };
    assert!(move_to(
        &conn,
        &k,
        1,
        seen,
        Target::NotApplied,
        (20, 0),
        &decided
    ));
    let not_applied = Record {
        state: RecordState::NotApplied { decided_at: at(20) },
        ..unknown.clone()
    };
    assert_eq!(read(&conn, &k, 20), not_applied);
    assert_eq!(
        read(&conn, &k, 1_000_000),
        not_applied,
        "live past its expiry"
    );
    assert_eq!(history_of(&conn, &k, 20).entries.last(), Some(&decided));

    // another fingerprint meets the record; the same one claims it
    let other = ClaimValues::of(&ClaimRequest {
        key: &k,
        fingerprint: &fingerprint('b'),
        owner: OwnerToken::random(),
        now: at(30),
        lease_until: at(40),
        expires_at: at(130),
        label: &RecordLabel::default(),
    });
    assert_eq!(
        statements::claim(&mut conn, path(), &other, None).unwrap(),
        Claim::Existing(not_applied.clone())
    );
    let b = OwnerToken::random();
    let label = RecordLabel {
        tool: "refund".to_owned(),
        ..RecordLabel::default()
    };
    let same = ClaimValues::of(&ClaimRequest {
        key: &k,
        fingerprint: &fingerprint('a'),
        owner: b,
        now: at(1_000),
        lease_until: at(1_010),
        expires_at: at(1_100),
        label: &label,
    });
    assert_eq!(
        statements::claim(&mut conn, path(), &same, None).unwrap(),
        Claim::Acquired {
            fence: 2,
            reopened: true
        }
    );
    let reopened = read(&conn, &k, 1_000);
    assert_eq!(
        reopened,
        Record {
            fingerprint: fingerprint('a'),
            created_at: at(1_000),
            expires_at: at(1_100),
            fence: 2,
            state: RecordState::InProgress {
                owner: b,
                lease_until: at(1_010)
            },
            label: Some(label),
        }
    );
    let events: Vec<_> = history_of(&conn, &k, 1_000).entries;
    assert_eq!(
        events.len(),
        4,
        "claimed, unknown, resolved, claimed: {events:?}"
    );
    assert_eq!(events[3], HistoryEntry::claimed(at(1_000), 2, b));

    // the claim gives the key back: not applied again, fence and history kept
    let released = entry(HistoryEvent::Released, 1_001, 2);
    let seen = Seen::InProgress {
        owner: b,
        lease_until: None,
    };
    assert!(move_to(
        &conn,
        &k,
        2,
        seen,
        Target::NotApplied,
        (1_001, 0),
        &released
    ));
    assert_eq!(
        read(&conn, &k, 1_001),
        Record {
            state: RecordState::NotApplied {
                decided_at: at(1_001)
            },
            ..reopened.clone()
        }
    );
    assert_eq!(history_of(&conn, &k, 1_001).entries.len(), 5);

    // decided applied: completed, source resolved, expiry raised to the later one
    let resolved = entry(
        HistoryEvent::Resolved {
            decision: DecisionKind::Applied,
        },
        1_002,
        2,
    );
    let saved = Envelope::from_stored(r#"{"version":1,"ok":"by hand"}"#);
    let target = Target::Completed {
        outcome: &saved,
        source: OutcomeSource::Resolved,
    };
    assert!(move_to(
        &conn,
        &k,
        2,
        Seen::NotApplied,
        target,
        (1_002, 5_000),
        &resolved
    ));
    let completed = read(&conn, &k, 1_002);
    assert_eq!(
        completed.state,
        RecordState::Completed {
            outcome: saved.clone(),
            completed_at: at(1_002),
            source: OutcomeSource::Resolved,
        }
    );
    assert_eq!((completed.expires_at, completed.fence), (at(5_000), 2));
    assert_eq!(read(&conn, &k, 4_999), completed);
    assert!(statements::read_live(&conn, path(), k.as_str(), at(5_000))
        .unwrap()
        .is_none());
    assert_eq!(history(&conn, path(), k.as_str(), at(5_000)).unwrap(), None);
}

// pins U6, U2: a transition is a compare-and-set on the live record's fence and seen
// state (owner, lease), and changes nothing (no entry either) when any of them differs
#[test]
fn transitions_compare_the_fence_and_the_seen_state() {
    let mut conn = database();
    let k = key(1);
    let a = OwnerToken::random();
    claim_at(&mut conn, &k, a, 0, 10, 100);
    let marked = entry(
        HistoryEvent::Unknown {
            cause: UnknownReason::LeaseLapsed,
        },
        20,
        1,
    );
    let since = Target::OutcomeUnknown { since: at(0) };
    let stranger = OwnerToken::random();
    let in_progress = |owner, lease_until| Seen::InProgress { owner, lease_until };
    let refused = [
        (2, in_progress(a, Some(at(10)))),
        (1, in_progress(stranger, Some(at(10)))),
        (1, in_progress(a, Some(at(11)))),
        (
            1,
            Seen::OutcomeUnknown {
                owner: a,
                lease_until: at(10),
            },
        ),
        (1, Seen::NotApplied),
    ];
    for (fence, seen) in refused {
        let before = (read(&conn, &k, 20), columns(&conn, &k));
        assert!(
            !move_to(&conn, &k, fence, seen, since.clone(), (20, 0), &marked),
            "{seen:?}"
        );
        assert_eq!(
            (read(&conn, &k, 20), columns(&conn, &k)),
            before,
            "{seen:?}"
        );
    }
    // a call that found the lease lapsed marks it unknown, owner and lease kept
    assert!(move_to(
        &conn,
        &k,
        1,
        in_progress(a, Some(at(10))),
        since.clone(),
        (20, 0),
        &marked
    ));
    assert_eq!(
        read(&conn, &k, 20).state,
        RecordState::OutcomeUnknown {
            owner: a,
            lease_until: at(10),
            since: at(0)
        }
    );
    // outcome unknown only follows in progress
    let seen = Seen::OutcomeUnknown {
        owner: a,
        lease_until: at(10),
    };
    assert!(!move_to(&conn, &k, 1, seen, since, (30, 0), &marked));
    // decided error: completed, the expiry kept when it is the later one
    let failed = Envelope::from_stored(r#"{"version":1,"err":"declined"}"#);
    let target = Target::Completed {
        outcome: &failed,
        source: OutcomeSource::Resolved,
    };
    let resolved = entry(
        HistoryEvent::Resolved {
            decision: DecisionKind::Error,
        },
        30,
        1,
    );
    assert!(move_to(
        &conn,
        &k,
        1,
        seen,
        target.clone(),
        (30, 50),
        &resolved
    ));
    let done = read(&conn, &k, 30);
    assert_eq!(done.expires_at, at(100));
    assert!(
        !move_to(&conn, &k, 1, seen, target, (40, 50), &resolved),
        "decided already"
    );
    assert_eq!(history_of(&conn, &k, 40).entries.len(), 3);
    // the owner's own save also fails now, and a completed record is not a transition's
    assert_eq!(complete_at(&conn, &k, a, 40), Completion::Fenced);
    let seen = in_progress(a, None);
    assert!(!move_to(
        &conn,
        &k,
        1,
        seen,
        Target::NotApplied,
        (40, 0),
        &resolved
    ));
    assert_eq!(read(&conn, &k, 40), done);
    // no record: nothing to move, no history
    assert!(!move_to(
        &conn,
        &key(2),
        1,
        seen,
        Target::NotApplied,
        (40, 0),
        &resolved
    ));
    assert_eq!(
        history(&conn, path(), key(2).as_str(), at(40)).unwrap(),
        None
    );
    // a not-applied row of another fence is not decided again
    claim_at(&mut conn, &key(3), a, 0, 10, 100);
    assert!(not_applied_at(&conn, &key(3), a, 1, 5));
    let saved = outcome();
    let target = Target::Completed {
        outcome: &saved,
        source: OutcomeSource::Resolved,
    };
    assert!(!move_to(
        &conn,
        &key(3),
        2,
        Seen::NotApplied,
        target,
        (6, 0),
        &resolved
    ));
}
