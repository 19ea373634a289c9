//! A record's way through the approval states on the server (A2–A6): read, listed under
//! its state filter, counted, claimed, purged, run, given back, expired and denied, with its
//! history, index score and Redis expiry.

use super::approvals::{denial, transition, HOUR_MS};
use super::*;
use crate::store::{PurgeOutcome, StoreStats};

// pins A2, A3, A4, A5, A6, I3, I5, I7, S8, G1, F1, U7: a record awaiting approval and then
// approved is read, listed under its state filter (oldest first too) and counted, never
// expires (no Redis expiry, live a year past its expiry, kept by a purge without force), is
// answered as it is by every claim (same fingerprint or not) without a write; the approved
// run takes it over with the next fence (its index members re-scored to the run's
// `created_at`), gives it back to approved with the same validity, an expired approval
// returns it to awaiting approval, and a denial saves the outcome with source `denied` and
// the Redis expiry of a completion; the history holds each step
#[tokio::test]
async fn approval_records_round_trip() {
    let mut s = server().await;
    let t0 = at(6_000_000);
    let (owner, k, queued) = (OwnerToken::random(), key(31), key(32));
    claim(&s.store, &k, 1, owner, t0, 10_000).await;
    s.old_expiry(&k).await;
    let t1 = plus(t0, 1);
    let mine = Seen::InProgress {
        owner,
        lease_until: None,
    };
    let rt = s.round_trips();
    assert!(transition(&s.store, &k, 1, mine, Target::AwaitingApproval, t1, t1).await);
    assert_eq!(s.round_trips() - rt, 1, "a transition is one round trip");
    let q_owner = OwnerToken::random();
    claim(&s.store, &queued, 1, q_owner, plus(t0, 5), 10_000).await;
    let q_seen = Seen::InProgress {
        owner: q_owner,
        lease_until: None,
    };
    assert!(
        transition(
            &s.store,
            &queued,
            1,
            q_seen,
            Target::AwaitingApproval,
            t1,
            t1
        )
        .await
    );

    let late = plus(t0, YEAR_MS);
    let awaiting = read(&s.store, &k, late).await;
    assert_eq!(awaiting.state, RecordState::AwaitingApproval { since: t1 });
    assert_eq!(
        (
            awaiting.fence,
            awaiting.created_at,
            awaiting.expires_at,
            awaiting.label.clone()
        ),
        (1, t0, plus(t0, 10_000), Some(label()))
    );
    assert!(awaiting.is_overdue(late));
    assert_eq!(
        s.pttl(&k).await,
        -1,
        "a transition removes an old Redis expiry"
    );
    assert_eq!(
        s.field(&k, "approval_at").await,
        Some(digits(t1.as_millis()))
    );
    for gone in ["owner", "lease_until", "approval_until"] {
        assert_eq!(s.field(&k, gone).await, None, "{gone}");
    }
    let before = hash(&mut s, &k).await;
    for n in [1, 2] {
        assert_eq!(
            claim(&s.store, &k, n, OwnerToken::random(), late, 10_000).await,
            Claim::Existing(awaiting.clone()),
            "fingerprint {n}"
        );
    }
    assert_eq!(hash(&mut s, &k).await, before, "claims write nothing");
    let queue = ListQuery::new()
        .state(StateFilter::AwaitingApproval)
        .oldest_first();
    let listed: Vec<_> = s.store.list(&queue, late).await.unwrap().records;
    assert_eq!(
        listed
            .iter()
            .map(|r| (r.key.clone(), r.record.clone()))
            .collect::<Vec<_>>(),
        [
            (k.clone(), awaiting.clone()),
            (queued.clone(), read(&s.store, &queued, late).await)
        ]
    );
    let newest = s
        .store
        .list(&ListQuery::new().state(StateFilter::AwaitingApproval), late)
        .await;
    assert_eq!(newest.unwrap().records[0].key, queued);
    let counts = |stats: StoreStats| {
        (
            stats.total.awaiting_approval,
            stats.total.approved,
            stats.total.total(),
        )
    };
    assert_eq!(counts(s.store.stats(late).await.unwrap()), (2, 0, 2));
    assert!(matches!(
        s.store.purge(&k, false, late).await.unwrap(),
        PurgeOutcome::Kept(ref kept) if *kept == awaiting
    ));

    // Approved (A3): an approval of an approved record is refused (it is the engine that
    // answers a repeated decision); listed and counted as approved.
    let (t2, until) = (plus(t0, 2), plus(t0, 2 + HOUR_MS));
    let approve = Target::Approved {
        decided_at: t2,
        until,
    };
    assert!(
        transition(
            &s.store,
            &k,
            1,
            Seen::AwaitingApproval,
            approve.clone(),
            t2,
            t2
        )
        .await
    );
    assert!(
        !transition(
            &s.store,
            &k,
            1,
            Seen::AwaitingApproval,
            approve.clone(),
            t2,
            t2
        )
        .await
    );
    let approved = read(&s.store, &k, late).await;
    assert_eq!(
        approved.state,
        RecordState::Approved {
            decided_at: t2,
            until
        }
    );
    assert_eq!(
        s.field(&k, "approval_until").await,
        Some(digits(until.as_millis()))
    );
    assert_eq!(s.pttl(&k).await, -1);
    let listed = s
        .store
        .list(&ListQuery::new().state(StateFilter::Approved), late)
        .await;
    assert_eq!(listed.unwrap().records.len(), 1);
    let stats = s.store.stats(late).await.unwrap();
    assert_eq!(counts(stats.clone()), (1, 1, 2));
    assert_eq!(stats.by_tool["send_refund"].approved, 1);
    assert_eq!(
        claim(&s.store, &k, 1, OwnerToken::random(), late, 10_000).await,
        Claim::Existing(approved.clone())
    );

    // The run the approval allows (A4): next fence, created now, re-scored in the index.
    let (t3, runner) = (plus(t0, 3_000), OwnerToken::random());
    let run = Target::InProgress {
        owner: runner,
        lease_until: plus(t3, 1_000),
        fence: 2,
    };
    assert!(
        transition(
            &s.store,
            &k,
            1,
            Seen::Approved { until },
            run,
            t3,
            plus(t3, DAY_MS)
        )
        .await
    );
    let running = read(&s.store, &k, t3).await;
    assert_eq!(
        (
            running.state.clone(),
            running.fence,
            running.created_at,
            running.expires_at
        ),
        (
            RecordState::InProgress {
                owner: runner,
                lease_until: plus(t3, 1_000)
            },
            2,
            t3,
            plus(t3, DAY_MS)
        )
    );
    for gone in ["approval_at", "approval_until"] {
        assert_eq!(s.field(&k, gone).await, None, "{gone}");
    }
    let score = t3.as_millis().to_string();
    for set in [s.store.index_key(), s.store.tool_index_key("send_refund")] {
        let got: Option<String> = s.cmd(&["ZSCORE", &set, k.as_str()]).await;
        assert_eq!(got.as_deref(), Some(score.as_str()), "{set}");
    }
    let oldest = s
        .store
        .list(&ListQuery::new().oldest_first(), t3)
        .await
        .unwrap();
    assert_eq!(
        oldest.records.last().map(|r| &r.key),
        Some(&k),
        "listed at its new time"
    );
    // It gives its claim back (a retryable error): approved again, the same validity.
    let back = Seen::InProgress {
        owner: runner,
        lease_until: Some(plus(t3, 1_000)),
    };
    let released = HistoryEntry::new(t3, HistoryEvent::Released, 2);
    assert!(s
        .store
        .transition(TransitionRequest {
            key: &k,
            fence: 2,
            seen: back,
            target: approve,
            now: t3,
            expires_at: t3,
            entry: released,
        })
        .await
        .unwrap());
    assert_eq!(read(&s.store, &k, t3).await.state, approved.state);
    // Found expired: awaiting approval again, since then.
    let t4 = plus(until, 1);
    let again = HistoryEntry::new(t4, HistoryEvent::ApprovalExpired, 2);
    assert!(s
        .store
        .transition(TransitionRequest {
            key: &k,
            fence: 2,
            seen: Seen::Approved { until },
            target: Target::AwaitingApproval,
            now: t4,
            expires_at: t4,
            entry: again,
        })
        .await
        .unwrap());
    assert_eq!(
        read(&s.store, &k, t4).await.state,
        RecordState::AwaitingApproval { since: t4 }
    );
    assert_eq!(s.field(&k, "approval_until").await, None);

    // Denied (A3, A5): the denial is the outcome, source denied, kept `keep_for`.
    let now = s.server_now().await;
    let (saved, keep) = (denial(now), plus(now, DAY_MS));
    let deny = Target::Completed {
        outcome: &saved,
        source: OutcomeSource::Denied,
    };
    assert!(
        !transition(
            &s.store,
            &k,
            1,
            Seen::AwaitingApproval,
            deny.clone(),
            now,
            keep
        )
        .await
    );
    assert!(
        transition(
            &s.store,
            &k,
            2,
            Seen::AwaitingApproval,
            deny.clone(),
            now,
            keep
        )
        .await
    );
    let done = read(&s.store, &k, now).await;
    assert_eq!(
        done.state,
        RecordState::Completed {
            outcome: saved.clone(),
            completed_at: now,
            source: OutcomeSource::Denied
        }
    );
    assert_eq!((done.fence, done.expires_at), (2, keep));
    assert_eq!(s.field(&k, "source").await.as_deref(), Some("denied"));
    for gone in ["approval_at", "approval_until", "owner", "lease_until"] {
        assert_eq!(s.field(&k, gone).await, None, "{gone}");
    }
    let pttl = s.pttl(&k).await;
    assert!(
        pttl > 0 && pttl as u64 <= DAY_MS + crate::store::redis::GC_MARGIN_MS,
        "{pttl}"
    );
    assert_eq!(
        claim(&s.store, &k, 1, OwnerToken::random(), now, 10_000).await,
        Claim::Existing(done.clone())
    );
    assert!(!transition(&s.store, &k, 2, Seen::AwaitingApproval, deny, now, keep).await);
    let steps = history(&s.store, &k, now).await;
    assert_eq!(
        events(&steps),
        [
            ("claimed", 1),
            ("approval_requested", 1),
            ("approved", 1),
            ("claimed", 2),
            ("released", 2),
            ("approval_expired", 2),
            ("denied", 2)
        ]
    );
    assert_eq!(steps.entries[2].event, HistoryEvent::Approved { until });
    assert_eq!(
        steps.entries[2].note.as_deref(),
        Some("ok for \"40 EUR\"\nline two")
    );
    assert_eq!(steps.entries[3].owner, Some(runner));
}
