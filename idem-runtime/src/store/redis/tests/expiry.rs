//! The Redis expiry of records that are and are not completed (S8, G1), and the effective
//! state and oldest-first order of inspection (I3, I5, I7), on the server.

use super::*;
use crate::store::redis::GC_MARGIN_MS;

// pins S8, G1, U2: a record that is not completed carries no Redis expiry, whatever wrote
// it: a claim, a renewal, a marking as unknown, a takeover, a transition to unknown; an
// expiry set by an older build is removed by each of them; such a record stays live long
// past its `expires_at`, and a purge without force keeps it
#[tokio::test]
async fn records_that_are_not_completed_carry_no_redis_expiry() {
    let mut s = server().await;
    let t0 = at(5_000_000);
    let owner = OwnerToken::random();
    let k = key(11);
    claim(&s.store, &k, 1, owner, t0, 10_000).await;
    assert_eq!(s.pttl(&k).await, -1, "claimed");
    s.old_expiry(&k).await;
    let renew = |now: Timestamp, lease_until: Timestamp| RenewRequest {
        key: &k,
        owner,
        now,
        lease_until,
    };
    assert!(s
        .store
        .renew(renew(t0, plus(t0, 3 * DAY_MS)))
        .await
        .unwrap());
    assert_eq!(s.pttl(&k).await, -1, "renewed");
    assert_eq!(
        read(&s.store, &k, t0).await.expires_at,
        plus(t0, 3 * DAY_MS)
    );
    s.old_expiry(&k).await;
    assert!(mark_unknown(&s.store, &k, owner, t0, 1).await);
    assert_eq!(s.pttl(&k).await, -1, "marked unknown");
    s.old_expiry(&k).await;
    let seen = read(&s.store, &k, t0).await;
    let taker = OwnerToken::random();
    assert!(take_over(&s.store, &k, &seen, taker, t0).await);
    assert_eq!(s.pttl(&k).await, -1, "taken over");
    s.old_expiry(&k).await;
    let lapsed = plus(t0, 2_000);
    let entry = HistoryEntry::new(
        lapsed,
        HistoryEvent::Unknown {
            cause: UnknownReason::LeaseLapsed,
        },
        2,
    );
    assert!(s
        .store
        .transition(TransitionRequest {
            key: &k,
            fence: 2,
            seen: Seen::InProgress {
                owner: taker,
                lease_until: Some(plus(t0, 1_000))
            },
            target: Target::OutcomeUnknown { since: t0 },
            now: lapsed,
            expires_at: lapsed,
            entry: entry.clone(),
        })
        .await
        .unwrap());
    assert_eq!(s.pttl(&k).await, -1, "transition to unknown");
    // Outcome unknown is only reached from in progress.
    assert!(!s
        .store
        .transition(TransitionRequest {
            key: &k,
            fence: 2,
            seen: Seen::OutcomeUnknown {
                owner: taker,
                lease_until: plus(t0, 1_000)
            },
            target: Target::OutcomeUnknown { since: t0 },
            now: lapsed,
            expires_at: lapsed,
            entry,
        })
        .await
        .unwrap());
    // A year later it is still there and live: a claim meets it, a purge keeps it.
    let later = plus(t0, YEAR_MS);
    let record = read(&s.store, &k, later).await;
    assert!(record.is_overdue(later));
    assert!(
        matches!(record.state, RecordState::OutcomeUnknown { owner: o, since, .. } if o == taker && since == t0)
    );
    assert_eq!(
        claim(&s.store, &k, 1, OwnerToken::random(), later, 10_000).await,
        Claim::Existing(record.clone())
    );
    assert!(matches!(
        s.store.purge(&k, false, later).await.unwrap(),
        crate::store::PurgeOutcome::Kept(_)
    ));
    assert_eq!(s.pttl(&k).await, -1);
    assert_eq!(
        events(&history(&s.store, &k, later).await),
        [
            ("claimed", 1),
            ("unknown", 1),
            ("taken_over", 2),
            ("unknown", 2)
        ]
    );
}

// pins G1, S8: a completion sets the Redis expiry from the record's `expires_at` plus the
// margin, by the completing caller's clock and by the server's: a caller a year ahead
// cannot shorten it, a caller a year behind keeps the record until its own clock passes
// the deadline; a decision that saves an outcome does the same with the raised expiry
#[tokio::test]
async fn completion_sets_the_redis_expiry_by_both_clocks() {
    let mut s = server().await;
    let now = s.server_now().await;
    let margin = GC_MARGIN_MS;
    let within = |pttl: i64, ms: u64| pttl > 0 && pttl as u64 <= ms && pttl as u64 + SLACK_MS >= ms;
    // A correct clock: expiry in a day, plus the margin.
    let (k1, o1) = (key(21), OwnerToken::random());
    claim(&s.store, &k1, 1, o1, now, DAY_MS).await;
    assert_eq!(s.pttl(&k1).await, -1);
    assert_eq!(complete(&s.store, &k1, o1, now, 1).await, Completion::Saved);
    let pttl = s.pttl(&k1).await;
    assert!(within(pttl, DAY_MS + margin), "{pttl}");
    // A caller a year ahead: its record expires by its clock in a day, by the server's in
    // a year and a day: kept for the later.
    let (k2, o2) = (key(22), OwnerToken::random());
    let ahead = plus(now, YEAR_MS);
    claim(&s.store, &k2, 1, o2, ahead, DAY_MS).await;
    assert_eq!(
        complete(&s.store, &k2, o2, ahead, 1).await,
        Completion::Saved
    );
    let pttl = s.pttl(&k2).await;
    assert!(within(pttl, YEAR_MS + DAY_MS + margin), "{pttl}");
    // A caller a year behind: kept until its own clock passes the deadline.
    let (k3, o3) = (key(23), OwnerToken::random());
    let behind = at(now.as_millis() - YEAR_MS);
    claim(&s.store, &k3, 1, o3, behind, DAY_MS).await;
    assert_eq!(
        complete(&s.store, &k3, o3, behind, 1).await,
        Completion::Saved
    );
    let pttl = s.pttl(&k3).await;
    assert!(within(pttl, DAY_MS + margin), "{pttl}");
    // An overdue in-progress record completed after its expiry: kept for the margin only.
    let (k4, o4) = (key(24), OwnerToken::random());
    claim(&s.store, &k4, 1, o4, now, 1_000).await;
    let late = plus(now, 5_000);
    assert_eq!(
        complete(&s.store, &k4, o4, late, 1).await,
        Completion::Saved
    );
    let pttl = s.pttl(&k4).await;
    assert!(within(pttl, 1_000 + margin), "{pttl}");
    assert_eq!(
        s.store.read(&k4, late).await.unwrap(),
        None,
        "expired on completion"
    );
    // A decision saving an outcome: the expiry raised to now + keep_for, then the margin.
    let (k5, o5) = (key(25), OwnerToken::random());
    claim(&s.store, &k5, 1, o5, now, 1_000).await;
    assert!(mark_unknown(&s.store, &k5, o5, now, 1).await);
    let saved = outcome();
    let keep = plus(now, 2 * DAY_MS);
    assert!(
        decide(
            &s.store,
            &k5,
            1,
            Seen::OutcomeUnknown {
                owner: o5,
                lease_until: plus(now, 1_000)
            },
            Target::Completed {
                outcome: &saved,
                source: OutcomeSource::Resolved
            },
            now,
            keep,
        )
        .await
    );
    assert_eq!(read(&s.store, &k5, now).await.expires_at, keep);
    let pttl = s.pttl(&k5).await;
    assert!(within(pttl, 2 * DAY_MS + margin), "{pttl}");
    assert_eq!(s.field(&k5, "source").await.as_deref(), Some("resolved"));
}

// pins I7, I3, I5: listing, filtering and counting see each record in its state at `now`
// (a lapsed lease counts as outcome unknown; not applied apart), and oldest first pages
// upward through records of one millisecond (more than a batch) and others, each once, in
// (created_at, key) order, within a created_at range
#[tokio::test]
async fn oldest_first_pages_and_effective_states() {
    let s = server().await;
    let t0 = at(8_000_000);
    let mut all = Vec::new();
    for n in 0..260u32 {
        let created = if n % 3 == 0 {
            t0
        } else {
            plus(t0, u64::from(n % 7))
        };
        claim(
            &s.store,
            &key(1_000 + n),
            1,
            OwnerToken::random(),
            created,
            10_000,
        )
        .await;
        all.push((created, key(1_000 + n)));
    }
    all.sort();
    for (query, from, before) in [
        (ListQuery::new().oldest_first().limit(9), None, None),
        (
            ListQuery {
                created_from: Some(plus(t0, 1)),
                created_before: Some(plus(t0, 5)),
                ..ListQuery::new().oldest_first().limit(4)
            },
            Some(plus(t0, 1)),
            Some(plus(t0, 5)),
        ),
    ] {
        let wanted: Vec<_> = all
            .iter()
            .filter(|(c, _)| from.is_none_or(|f| *c >= f) && before.is_none_or(|b| *c < b))
            .map(|(_, k)| k.clone())
            .collect();
        let mut seen = Vec::new();
        let mut query = query;
        loop {
            let page = s.store.list(&query, t0).await.unwrap();
            seen.extend(page.records.iter().map(|r| r.key.clone()));
            match page.next {
                Some(cursor) => query = query.after(cursor),
                None => break,
            }
        }
        assert_eq!(seen, wanted);
    }
    // Effective states: at t0 + 1000 every lease (1 s) lapsed.
    let (owner, k) = (OwnerToken::random(), key(1));
    claim(&s.store, &k, 1, owner, plus(t0, 10), 10_000).await;
    assert!(mark_unknown(&s.store, &k, owner, plus(t0, 10), 1).await);
    assert!(
        decide(
            &s.store,
            &k,
            1,
            Seen::OutcomeUnknown {
                owner,
                lease_until: plus(t0, 1_010)
            },
            Target::NotApplied,
            plus(t0, 10),
            plus(t0, 10)
        )
        .await
    );
    let stats = s.store.stats(t0).await.unwrap();
    assert_eq!((stats.total.in_progress, stats.total.not_applied), (260, 1));
    let lapsed = plus(t0, 1_010);
    let stats = s.store.stats(lapsed).await.unwrap();
    assert_eq!(
        (
            stats.total.in_progress,
            stats.total.outcome_unknown,
            stats.total.not_applied
        ),
        (0, 260, 1)
    );
    assert_eq!(stats.by_tool["send_refund"].outcome_unknown, 260);
    let unknown = ListQuery::new()
        .state(StateFilter::OutcomeUnknown)
        .limit(1000);
    assert_eq!(
        s.store.list(&unknown, lapsed).await.unwrap().records.len(),
        260
    );
    assert!(s.store.list(&unknown, t0).await.unwrap().records.is_empty());
    let not_applied = ListQuery::new().state(StateFilter::NotApplied);
    let page = s.store.list(&not_applied, plus(t0, YEAR_MS)).await.unwrap();
    assert_eq!(
        page.records.len(),
        1,
        "not applied and overdue: still listed"
    );
    // A purge without force keeps them all; counts say so.
    let counts = s
        .store
        .purge_matching(&ListQuery::new(), false, lapsed)
        .await
        .unwrap();
    assert_eq!((counts.deleted, counts.kept), (0, 261));
}
