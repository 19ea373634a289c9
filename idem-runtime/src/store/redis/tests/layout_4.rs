//! Records of layout 4, as that build wrote them, under this build (layout 5, P4).

use super::*;
use crate::store::redis::REDIS_LAYOUT_VERSION;

// pins P4, U6, U7, S3, A2: records of layout 4 (completed with its source and history, not
// applied, in progress) read, list and count as before, and a replay, a read and a history
// read write nothing; the key decided not applied is reopened by a claim with its
// fingerprint (layout 5, next fence, history kept), and the in-progress one moves to
// awaiting approval (layout 5); the index already holds them all
#[tokio::test]
async fn layout_4_records_keep_working_at_layout_5() {
    let mut s = server().await;
    assert_eq!(REDIS_LAYOUT_VERSION, 5);
    let t0 = 4_000_000;
    let owner = OwnerToken::random();
    let (done, decided, running) = (key(41), key(42), key(43));
    let claimed = HistoryEntry::claimed(at(t0), 1, owner);
    let resolved = HistoryEntry::new(
        at(t0 + 2),
        HistoryEvent::Resolved {
            decision: DecisionKind::Applied,
        },
        1,
    )
    .with_actor("ana", None);
    let lines = |entries: &[&HistoryEntry]| {
        let text: Vec<String> = entries.iter().map(|e| e.to_json()).collect();
        (text.join("\n"), entries.len().to_string())
    };
    let (done_history, done_len) = lines(&[&claimed, &resolved]);
    let completed = [
        ("expires_at", digits(t0 + 10_000)),
        ("fence", digits(1)),
        ("outcome", outcome().as_str().to_owned()),
        ("completed_at", digits(t0 + 2)),
        ("source", "resolved".to_owned()),
        ("history", done_history),
        ("history_len", done_len),
    ];
    write_layout(&mut s, "4", &done, t0, &completed).await;
    let not_applied = HistoryEntry::new(
        at(t0 + 3),
        HistoryEvent::Resolved {
            decision: DecisionKind::NotApplied,
        },
        3,
    );
    let (decided_history, decided_len) = lines(&[&not_applied]);
    let decision = [
        ("expires_at", digits(t0 + 10_000)),
        ("fence", digits(3)),
        ("decided_at", digits(t0 + 3)),
        ("history", decided_history),
        ("history_len", decided_len),
    ];
    write_layout(&mut s, "4", &decided, t0 + 1, &decision).await;
    let (running_history, running_len) = lines(&[&claimed]);
    let in_progress = [
        ("expires_at", digits(t0 + 10_000)),
        ("fence", digits(1)),
        ("owner", owner.to_hex()),
        ("lease_until", digits(t0 + 1_000)),
        ("history", running_history),
        ("history_len", running_len),
    ];
    write_layout(&mut s, "4", &running, t0 + 2, &in_progress).await;
    let keys = [&done, &decided, &running];
    let mut before = Vec::new();
    for k in keys {
        before.push(hash(&mut s, k).await);
    }

    let now = at(t0 + 10);
    let replay = claim(&s.store, &done, 1, OwnerToken::random(), now, 10_000).await;
    let Claim::Existing(saved) = replay else {
        panic!("{replay:?}")
    };
    assert_eq!(
        (saved.fence, saved.state.clone(), saved.label),
        (
            1,
            RecordState::Completed {
                outcome: outcome(),
                completed_at: at(t0 + 2),
                source: OutcomeSource::Resolved
            },
            Some(label())
        )
    );
    assert_eq!(
        history(&s.store, &done, now).await.entries,
        [claimed, resolved]
    );
    assert_eq!(
        read(&s.store, &decided, now).await.state,
        RecordState::NotApplied {
            decided_at: at(t0 + 3)
        }
    );
    assert_eq!(
        read(&s.store, &running, now).await.state,
        RecordState::InProgress {
            owner,
            lease_until: at(t0 + 1_000)
        }
    );
    let stats = s.store.stats(now).await.unwrap();
    assert_eq!(
        (
            stats.total.completed,
            stats.total.not_applied,
            stats.total.in_progress,
            stats.total.total()
        ),
        (1, 1, 1, 3)
    );
    let query = ListQuery::new().state(StateFilter::NotApplied);
    let listed = s.store.list(&query, now).await.unwrap().records;
    assert_eq!(listed.len(), 1);
    assert_eq!(listed[0].key, decided);
    for (k, fields) in keys.iter().zip(&before) {
        assert_eq!(&hash(&mut s, k).await, fields, "nothing written");
        assert_eq!(
            s.field(k, "v").await.as_deref(),
            Some("4"),
            "nothing written"
        );
    }
    assert_eq!(s.store.reindex().await.unwrap(), 0, "all were indexed");

    // Reopened by a claim with its fingerprint: layout 5, the next fence, history kept.
    let again = OwnerToken::random();
    assert_eq!(
        claim(&s.store, &decided, 1, again, now, 10_000).await,
        Claim::Acquired {
            fence: 4,
            reopened: true
        }
    );
    assert_eq!(s.field(&decided, "v").await.as_deref(), Some("5"));
    assert_eq!(
        history(&s.store, &decided, now).await.entries,
        [not_applied, HistoryEntry::claimed(now, 4, again)]
    );
    // The in-progress record's request for approval: layout 5, awaiting approval.
    let entry = HistoryEntry::new(now, HistoryEvent::ApprovalRequested, 1);
    assert!(s
        .store
        .transition(TransitionRequest {
            key: &running,
            fence: 1,
            seen: Seen::InProgress {
                owner,
                lease_until: None
            },
            target: Target::AwaitingApproval,
            now,
            expires_at: now,
            entry,
        })
        .await
        .unwrap());
    assert_eq!(s.field(&running, "v").await.as_deref(), Some("5"));
    assert_eq!(
        read(&s.store, &running, now).await.state,
        RecordState::AwaitingApproval { since: now }
    );
    assert_eq!(
        events(&history(&s.store, &running, now).await),
        [("claimed", 1), ("approval_requested", 1)]
    );
}
