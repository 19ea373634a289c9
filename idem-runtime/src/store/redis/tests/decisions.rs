//! Layouts 4 and 5 on the server: records of layout 3 as that build wrote them, the
//! history's bound, the not-applied state (P4, U6, U7).

use super::*;
use crate::store::redis::REDIS_LAYOUT_VERSION;
use crate::store::HISTORY_LIMIT;

// pins P4, S1, U7, G1: records of layout 3, written as that build wrote them (with a Redis
// expiry), keep replaying: a completed one reads and replays with the source `executed`
// and an empty history, and no write; an in-progress one is completed in place (layout 5,
// its history the one `completed` entry) and an unknown one taken over; `reindex` removes
// the old Redis expiry of the records that are not completed and keeps the completed one's
#[tokio::test]
async fn layout_3_records_keep_replaying_with_source_executed_and_an_empty_history() {
    let mut s = server().await;
    assert_eq!(REDIS_LAYOUT_VERSION, 5);
    let t0 = 9_000_000;
    let owner = OwnerToken::random();
    let (done, running, unknown, held) = (key(1), key(2), key(3), key(4));
    let in_progress = |lease: u64| {
        vec![
            ("expires_at", digits(t0 + 10_000)),
            ("owner", owner.to_hex()),
            ("lease_until", digits(lease)),
            ("fence", digits(3)),
        ]
    };
    let mut completed = vec![
        ("expires_at", digits(t0 + 10_000)),
        ("fence", digits(2)),
        ("completed_at", digits(t0 + 5)),
    ];
    completed.push(("outcome", outcome().as_str().to_owned()));
    write_layout(&mut s, "3", &done, t0, &completed).await;
    write_layout(&mut s, "3", &running, t0 + 1, &in_progress(t0 + 1_000)).await;
    let mut marked = in_progress(t0 + 1_000);
    marked.push(("unknown_since", digits(t0)));
    write_layout(&mut s, "3", &unknown, t0 + 2, &marked).await;
    write_layout(&mut s, "3", &held, t0 + 3, &in_progress(t0 + 1_000)).await;
    let before = s
        .cmd::<Vec<(String, String)>>(&["HGETALL", &s.store.record_key(&done)])
        .await;

    let now = at(t0 + 10);
    let replay = claim(&s.store, &done, 1, OwnerToken::random(), now, 10_000).await;
    match replay {
        Claim::Existing(Record {
            fence: 2,
            state:
                RecordState::Completed {
                    outcome: ref saved,
                    source: OutcomeSource::Executed,
                    ..
                },
            label: Some(ref label),
            ..
        }) => {
            assert_eq!(saved, &outcome());
            assert_eq!(label.tool, "send_refund");
        }
        other => panic!("expected the completed layout-3 record, got {other:?}"),
    }
    let rt = s.round_trips();
    assert_eq!(history(&s.store, &done, now).await, History::default());
    assert_eq!(s.round_trips() - rt, 1, "a history read is one round trip");
    assert_eq!(
        s.cmd::<Vec<(String, String)>>(&["HGETALL", &s.store.record_key(&done)])
            .await,
        before,
        "a replay and a history read write nothing"
    );

    // Completed in place by this build: layout 5, source executed, one history entry.
    assert_eq!(
        complete(&s.store, &running, owner, now, 3).await,
        Completion::Saved
    );
    assert_eq!(s.field(&running, "v").await.as_deref(), Some("5"));
    assert_eq!(
        s.field(&running, "source").await.as_deref(),
        Some("executed")
    );
    assert_eq!(
        events(&history(&s.store, &running, now).await),
        [("completed", 3)]
    );
    assert!(matches!(
        read(&s.store, &running, now).await.state,
        RecordState::Completed {
            source: OutcomeSource::Executed,
            ..
        }
    ));
    // Taken over: layout 5, no Redis expiry, the takeover's entry.
    let seen = read(&s.store, &unknown, now).await;
    assert!(take_over(&s.store, &unknown, &seen, OwnerToken::random(), now).await);
    assert_eq!(s.field(&unknown, "v").await.as_deref(), Some("5"));
    assert_eq!(s.pttl(&unknown).await, -1);
    assert_eq!(
        events(&history(&s.store, &unknown, now).await),
        [("taken_over", 4)]
    );

    // The in-progress record nobody wrote keeps its old expiry until `reindex` removes it.
    assert!(s.pttl(&held).await > 0);
    assert_eq!(s.store.reindex().await.unwrap(), 0, "all were indexed");
    assert_eq!(s.pttl(&held).await, -1);
    assert!(
        s.pttl(&done).await > 0,
        "a completed record keeps its expiry"
    );
    assert_eq!(
        s.field(&held, "v").await.as_deref(),
        Some("3"),
        "reindex writes no field"
    );
    // Long past its expiry it is still live (S8), and still held by its owner.
    let late = at(t0 + 10 * DAY_MS);
    assert_eq!(read(&s.store, &held, late).await.fence, 3);
    assert!(matches!(
        claim(&s.store, &held, 1, OwnerToken::random(), late, 10_000).await,
        Claim::Existing(_)
    ));
}

// pins U7: the history keeps the last HISTORY_LIMIT (32) entries, oldest first, and counts
// the dropped ones; each write stays one round trip; a claim over the expired completed
// record starts a new history of one entry
#[tokio::test]
async fn the_history_keeps_32_entries_and_counts_the_dropped_ones() {
    let mut s = server().await;
    let k = key(7);
    let mut now = at(1_000_000);
    let mut owner = OwnerToken::random();
    assert!(matches!(
        claim(&s.store, &k, 1, owner, now, 10_000).await,
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    ));
    let mut written = 1u64;
    for _ in 0..20 {
        now = plus(now, 1);
        let fence = read(&s.store, &k, now).await.fence;
        let rt = s.round_trips();
        assert!(mark_unknown(&s.store, &k, owner, now, fence).await);
        let seen = read(&s.store, &k, now).await;
        owner = OwnerToken::random();
        assert!(take_over(&s.store, &k, &seen, owner, now).await);
        assert_eq!(s.round_trips() - rt, 3, "mark, read, take over: one each");
        written += 2;
    }
    assert_eq!(written, 41);
    let kept = history(&s.store, &k, now).await;
    assert_eq!(kept.entries.len(), HISTORY_LIMIT);
    assert_eq!(kept.dropped, written - HISTORY_LIMIT as u64);
    assert_eq!(s.field(&k, "history_len").await.as_deref(), Some("32"));
    assert_eq!(s.field(&k, "history_dropped").await.as_deref(), Some("9"));
    // Written: claimed (fence 1), then unknown (i) and taken_over (i + 1) for i in 1..=20;
    // the 10th, the oldest kept, is the unknown of fence 5.
    let first = &kept.entries[0];
    assert_eq!(
        (first.fence, &first.event),
        (
            5,
            &HistoryEvent::Unknown {
                cause: UnknownReason::Error
            }
        )
    );
    let last = kept.entries.last().unwrap();
    assert_eq!((last.fence, last.owner), (21, Some(owner)));
    let text = s.field(&k, "history").await.unwrap();
    assert_eq!(text.lines().count(), HISTORY_LIMIT);
    assert_eq!(History::from_stored(Some(&text), 9), kept);
    // Renewals add nothing.
    let renewed = s
        .store
        .renew(RenewRequest {
            key: &k,
            owner,
            now,
            lease_until: plus(now, 5_000),
        })
        .await
        .unwrap();
    assert!(renewed);
    assert_eq!(history(&s.store, &k, now).await, kept);
    // One more: still 32 kept, 10 dropped.
    assert_eq!(
        complete(&s.store, &k, owner, now, 21).await,
        Completion::Saved
    );
    let full = history(&s.store, &k, now).await;
    assert_eq!((full.entries.len(), full.dropped), (HISTORY_LIMIT, 10));
    assert_eq!(full.entries[..31], kept.entries[1..]);
    // Expired: no history; the next claim starts a new one.
    let expired = plus(now, 10_000);
    assert_eq!(s.store.history(&k, expired).await.unwrap(), None);
    let fresh = OwnerToken::random();
    assert!(matches!(
        claim(&s.store, &k, 1, fresh, expired, 10_000).await,
        Claim::Acquired {
            fence: 22,
            reopened: false
        }
    ));
    assert_eq!(
        history(&s.store, &k, expired).await,
        History {
            entries: vec![HistoryEntry::claimed(expired, 22, fresh)],
            dropped: 0
        }
    );
    assert_eq!(s.field(&k, "history_dropped").await, None);
}

// pins U6, U7, F1, S9, S8: an unknown outcome decided not applied reads back as such,
// carries no Redis expiry and is live long past its expiry; a claim with another
// fingerprint gets it as it is, one with the same fingerprint reopens it (next fence,
// history kept and the `claimed` line appended byte for byte as `HistoryEntry::claimed`
// writes it, numbers beyond 2^53 exactly); the reopened claim gives it back to not
// applied, and a decision saves an outcome as resolved with the Redis expiry of a
// completion. Stale transitions change nothing.
#[tokio::test]
async fn not_applied_records_round_trip() {
    let mut s = server().await;
    let k = key(9);
    // 2^53 + 1 ms: beyond a double, written exactly.
    let t0 = at(9_007_199_254_740_993);
    let owner = OwnerToken::random();
    assert!(matches!(
        claim(&s.store, &k, 1, owner, t0, 10_000).await,
        Claim::Acquired {
            fence: 1,
            reopened: false
        }
    ));
    assert_eq!(
        s.field(&k, "history").await,
        Some(HistoryEntry::claimed(t0, 1, owner).to_json())
    );
    // A large fence: 10^19 + …, carried across digits.
    let seen = read(&s.store, &k, t0).await;
    let big = 10_999_999_999_999_999_999;
    let taker = OwnerToken::random();
    let entry = HistoryEntry::new(
        t0,
        HistoryEvent::TakenOver {
            cause: UnknownReason::LeaseLapsed,
        },
        big,
    )
    .with_owner(taker);
    let RecordState::InProgress { lease_until, .. } = seen.state else {
        panic!("{seen:?}")
    };
    assert!(s
        .store
        .take_over(TakeoverRequest {
            key: &k,
            seen_owner: owner,
            seen_lease_until: lease_until,
            owner: taker,
            now: t0,
            lease_until: plus(t0, 1_000),
            expires_at: plus(t0, 10_000),
            fence: big,
            label: &label(),
            entry,
        })
        .await
        .unwrap());
    let t1 = plus(t0, 5);
    assert!(mark_unknown(&s.store, &k, taker, t1, big).await);
    let unknown_seen = Seen::OutcomeUnknown {
        owner: taker,
        lease_until: plus(t0, 1_000),
    };
    // A stale fence or a wrong seen state changes nothing.
    let hash = s
        .cmd::<Vec<(String, String)>>(&["HGETALL", &s.store.record_key(&k)])
        .await;
    for (fence, seen) in [
        (big - 1, unknown_seen),
        (big, Seen::NotApplied),
        (
            big,
            Seen::InProgress {
                owner: taker,
                lease_until: None,
            },
        ),
        (
            big,
            Seen::OutcomeUnknown {
                owner,
                lease_until: plus(t0, 1_000),
            },
        ),
        (
            big,
            Seen::OutcomeUnknown {
                owner: taker,
                lease_until: plus(t0, 999),
            },
        ),
    ] {
        assert!(
            !decide(&s.store, &k, fence, seen, Target::NotApplied, t1, t1).await,
            "{seen:?}"
        );
    }
    assert_eq!(
        s.cmd::<Vec<(String, String)>>(&["HGETALL", &s.store.record_key(&k)])
            .await,
        hash
    );
    let rt = s.round_trips();
    assert!(decide(&s.store, &k, big, unknown_seen, Target::NotApplied, t1, t1).await);
    assert_eq!(s.round_trips() - rt, 1, "a transition is one round trip");
    let late = plus(t1, 30 * DAY_MS);
    let decided = read(&s.store, &k, late).await;
    assert_eq!(decided.state, RecordState::NotApplied { decided_at: t1 });
    assert_eq!((decided.fence, decided.expires_at), (big, plus(t0, 10_000)));
    assert_eq!(s.pttl(&k).await, -1);
    for gone in ["owner", "lease_until", "unknown_since"] {
        assert_eq!(s.field(&k, gone).await, None, "{gone}");
    }
    // Another fingerprint: the record as it is (a mismatch for the protocol, S9).
    assert_eq!(
        claim(&s.store, &k, 2, OwnerToken::random(), late, 10_000).await,
        Claim::Existing(decided.clone())
    );
    // The same fingerprint: reopened with the next fence, history kept.
    let again = OwnerToken::random();
    let rt = s.round_trips();
    assert_eq!(
        claim(&s.store, &k, 1, again, late, 10_000).await,
        Claim::Acquired {
            fence: 11_000_000_000_000_000_000,
            reopened: true
        }
    );
    assert_eq!(s.round_trips() - rt, 1, "a claim is one round trip");
    let reopened = read(&s.store, &k, late).await;
    assert_eq!(
        reopened.state,
        RecordState::InProgress {
            owner: again,
            lease_until: plus(late, 1_000)
        }
    );
    assert_eq!(
        (
            reopened.created_at,
            reopened.expires_at,
            reopened.label.clone()
        ),
        (late, plus(late, 10_000), Some(label()))
    );
    assert_eq!(s.field(&k, "decided_at").await, None);
    assert_eq!(s.pttl(&k).await, -1);
    let text = s.field(&k, "history").await.unwrap();
    assert_eq!(
        text.lines().last(),
        Some(
            HistoryEntry::claimed(late, 11_000_000_000_000_000_000, again)
                .to_json()
                .as_str()
        )
    );
    let read_back = history(&s.store, &k, late).await;
    assert_eq!(
        events(&read_back),
        [
            ("claimed", 1),
            ("taken_over", big),
            ("unknown", big),
            ("resolved", big),
            ("claimed", 11_000_000_000_000_000_000)
        ]
    );
    assert_eq!(
        read_back.entries[3].note.as_deref(),
        Some("bank says \"no\"\nline two")
    );
    // The reopened claim gives it back (a retryable error): not applied again.
    let fence = reopened.fence;
    let released = HistoryEntry::new(late, HistoryEvent::Released, fence);
    assert!(s
        .store
        .transition(TransitionRequest {
            key: &k,
            fence,
            seen: Seen::InProgress {
                owner: again,
                lease_until: None
            },
            target: Target::NotApplied,
            now: late,
            expires_at: late,
            entry: released,
        })
        .await
        .unwrap());
    assert_eq!(
        read(&s.store, &k, late).await.state,
        RecordState::NotApplied { decided_at: late }
    );
    // Decided applied: completed, source resolved, expiry raised, Redis expiry set.
    let saved = outcome();
    let decided_at = plus(late, 1);
    let keep = plus(decided_at, DAY_MS);
    let target = Target::Completed {
        outcome: &saved,
        source: OutcomeSource::Resolved,
    };
    assert!(
        !decide(
            &s.store,
            &k,
            fence + 1,
            Seen::NotApplied,
            target.clone(),
            decided_at,
            keep
        )
        .await
    );
    assert!(
        decide(
            &s.store,
            &k,
            fence,
            Seen::NotApplied,
            target,
            decided_at,
            keep
        )
        .await
    );
    let done = read(&s.store, &k, decided_at).await;
    assert_eq!(
        done.state,
        RecordState::Completed {
            outcome: saved,
            completed_at: decided_at,
            source: OutcomeSource::Resolved
        }
    );
    assert_eq!(done.expires_at, keep);
    assert_eq!(s.field(&k, "decided_at").await, None);
    // Completed at 2^53 ms, some 285 000 years ahead of the server's clock: its deadline
    // lies beyond GC_MAX_MS, so Redis keeps it without an expiry (the expiry of a decided
    // outcome in the present is pinned by `completion_sets_the_redis_expiry_by_both_clocks`).
    assert_eq!(s.pttl(&k).await, -1);
    // A completed record is never moved again.
    assert!(
        !decide(
            &s.store,
            &k,
            fence,
            Seen::NotApplied,
            Target::NotApplied,
            decided_at,
            keep
        )
        .await
    );
    assert_eq!(events(&history(&s.store, &k, decided_at).await).len(), 7);
}
