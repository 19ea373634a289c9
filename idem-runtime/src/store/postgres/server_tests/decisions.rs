//! Records decided not applied, and what operations cost (U6, S8, I4, I7).

use super::{
    at, claim, costs, fp, history, key, label, not_applied, read, resolved, unknown, Schema,
};
use crate::envelope::Envelope;
use crate::store::OutcomeSource;
use crate::store::{
    Claim, CompleteRequest, Completion, DecisionKind, HistoryEntry, HistoryEvent, ListQuery,
    OwnerToken, PurgeOutcome, Record, RecordState, Seen, StateFilter, Store, Target,
    TransitionRequest, UnknownReason,
};

// pins U6, S8, S9, I4, I7: a record decided not applied reads back as such past its expiry, is
// listed and counted as not applied, kept by a purge without force, refused to a call with
// another fingerprint, and re-claimed (next fence, history kept) by one with the same; a
// release of that claim returns it to not applied; a stale decision changes nothing; each
// transition and each history read is one round trip, a first call two and a replay one
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn not_applied_records_round_trip() {
    let schema = Schema::fresh();
    let store = schema.store();
    let (k, f, label) = (key(7), fp(2), label());
    let owner = OwnerToken::random();
    // warm up: the schema, and the statements on the pool's one connection
    let warm = key(70);
    let warm_owner = OwnerToken::random();
    assert!(store
        .claim(claim(&warm, &f, warm_owner, 1_000, &label))
        .await
        .is_ok());
    let warm_entry = unknown(1_000, 1, UnknownReason::Error);
    let warm_mark = TransitionRequest {
        key: &warm,
        fence: 1,
        seen: Seen::InProgress {
            owner: warm_owner,
            lease_until: None,
        },
        target: Target::OutcomeUnknown { since: at(1_000) },
        now: at(1_000),
        expires_at: at(1_000),
        entry: warm_entry.clone(),
    };
    assert_eq!(store.transition(warm_mark).await, Ok(true));
    assert!(store.history(&warm, at(1_000)).await.is_ok());
    let ok = Envelope::from_stored("{\"ok\":7}");
    let completed = HistoryEntry::new(
        at(1_000),
        HistoryEvent::Completed {
            source: OutcomeSource::Executed,
        },
        1,
    );
    let warm_done = key(71);
    let warm_done_owner = OwnerToken::random();
    assert!(store
        .claim(claim(&warm_done, &f, warm_done_owner, 1_000, &label))
        .await
        .is_ok());
    let warm_complete = CompleteRequest {
        key: &warm_done,
        owner: warm_done_owner,
        outcome: &ok,
        source: OutcomeSource::Executed,
        now: at(1_000),
        entry: completed.clone(),
    };
    assert_eq!(store.complete(warm_complete).await, Ok(Completion::Saved));

    // a first call: claim + complete, two round trips
    let (first, first_owner) = (key(72), OwnerToken::random());
    let (claimed, cost) = costs(&store, || {
        store.claim(claim(&first, &f, first_owner, 1_000, &label))
    })
    .await;
    assert_eq!(
        (claimed, cost),
        (
            Ok(Claim::Acquired {
                fence: 1,
                reopened: false
            }),
            1
        )
    );
    let complete = CompleteRequest {
        key: &first,
        owner: first_owner,
        outcome: &ok,
        source: OutcomeSource::Executed,
        now: at(1_000),
        entry: completed.clone(),
    };
    assert_eq!(
        costs(&store, || store.complete(complete)).await,
        (Ok(Completion::Saved), 1)
    );

    // a call whose outcome becomes unknown, decided not applied
    let (claimed, cost) = costs(&store, || store.claim(claim(&k, &f, owner, 1_000, &label))).await;
    assert_eq!(
        (claimed, cost),
        (
            Ok(Claim::Acquired {
                fence: 1,
                reopened: false
            }),
            1
        )
    );
    let marked = unknown(1_100, 1, UnknownReason::Error);
    let mark = TransitionRequest {
        key: &k,
        fence: 1,
        seen: Seen::InProgress {
            owner,
            lease_until: None,
        },
        target: Target::OutcomeUnknown { since: at(1_000) },
        now: at(1_100),
        expires_at: at(1_100),
        entry: marked.clone(),
    };
    assert_eq!(
        costs(&store, || store.transition(mark)).await,
        (Ok(true), 1)
    );
    // an unknown outcome is not marked unknown again, nor decided with a stale fence
    let again = TransitionRequest {
        key: &k,
        fence: 1,
        seen: Seen::OutcomeUnknown {
            owner,
            lease_until: at(2_000),
        },
        target: Target::OutcomeUnknown { since: at(1_000) },
        now: at(1_200),
        expires_at: at(1_200),
        entry: marked.clone(),
    };
    assert_eq!(store.transition(again).await, Ok(false));
    let decided = resolved(1_200, 1, DecisionKind::NotApplied);
    let stale = not_applied(&k, owner, 2, &decided);
    assert_eq!(store.transition(stale).await, Ok(false));
    let decide = not_applied(&k, owner, 1, &decided);
    assert_eq!(
        costs(&store, || store.transition(decide)).await,
        (Ok(true), 1)
    );

    // not applied, past its expiry (101 000): live, listed, counted, kept by a purge
    let late = 500_000;
    let record = read(&store, &k, late).await;
    assert_eq!(
        (record.fence, &record.state),
        (
            1,
            &RecordState::NotApplied {
                decided_at: at(1_200)
            }
        )
    );
    assert!(record.is_overdue(at(late)));
    let (read_back, cost) = costs(&store, || store.history(&k, at(late))).await;
    assert_eq!(cost, 1);
    assert_eq!(
        read_back.expect("read").expect("live").entries,
        vec![
            HistoryEntry::claimed(at(1_000), 1, owner),
            marked.clone(),
            decided.clone()
        ]
    );
    let listed = store
        .list(&ListQuery::new().state(StateFilter::NotApplied), at(late))
        .await
        .expect("listed");
    assert_eq!(
        listed.records.iter().map(|r| &r.key).collect::<Vec<_>>(),
        vec![&k]
    );
    let stats = store.stats(at(late)).await.expect("counts");
    assert_eq!(
        (
            stats.total.not_applied,
            stats.total.outcome_unknown,
            stats.total.completed
        ),
        (1, 1, 0),
        "the warm-up's unknown outcome; the completed records expired: {stats:?}"
    );
    assert_eq!(
        store.purge(&k, false, at(late)).await,
        Ok(PurgeOutcome::Kept(record.clone()))
    );

    // another fingerprint meets it (Mismatch, S9); the same re-claims it
    let other = fp(9);
    assert_eq!(
        store
            .claim(claim(&k, &other, OwnerToken::random(), late, &label))
            .await,
        Ok(Claim::Existing(record.clone()))
    );
    let second = OwnerToken::random();
    let (reclaimed, cost) =
        costs(&store, || store.claim(claim(&k, &f, second, late, &label))).await;
    assert_eq!(
        (reclaimed, cost),
        (
            Ok(Claim::Acquired {
                fence: 2,
                reopened: true
            }),
            1
        )
    );
    assert_eq!(
        read(&store, &k, late).await,
        Record {
            fingerprint: f.clone(),
            created_at: at(late),
            expires_at: at(late + 100_000),
            fence: 2,
            state: RecordState::InProgress {
                owner: second,
                lease_until: at(late + 1_000)
            },
            label: Some(label.clone()),
        }
    );
    // released: back to not applied, fence and history kept
    let released = HistoryEntry::new(at(late + 10), HistoryEvent::Released, 2);
    let give_back = TransitionRequest {
        key: &k,
        fence: 2,
        seen: Seen::InProgress {
            owner: second,
            lease_until: None,
        },
        target: Target::NotApplied,
        now: at(late + 10),
        expires_at: at(late + 10),
        entry: released.clone(),
    };
    assert_eq!(store.transition(give_back).await, Ok(true));
    let back = read(&store, &k, late + 10).await;
    assert_eq!(
        (back.fence, back.state),
        (
            2,
            RecordState::NotApplied {
                decided_at: at(late + 10)
            }
        )
    );
    assert_eq!(
        history(&store, &k, late + 10).await.entries,
        vec![
            HistoryEntry::claimed(at(1_000), 1, owner),
            marked,
            decided,
            HistoryEntry::claimed(at(late), 2, second),
            released
        ]
    );
    // a forced purge deletes it with its history
    assert!(matches!(
        store.purge(&k, true, at(late + 10)).await,
        Ok(PurgeOutcome::Deleted(_))
    ));
    assert_eq!(store.history(&k, at(late + 10)).await, Ok(None));

    // a replay costs one round trip and writes nothing
    let (replayed, cost) = costs(&store, || {
        store.claim(claim(&first, &f, OwnerToken::random(), 2_000, &label))
    })
    .await;
    assert!(matches!(replayed, Ok(Claim::Existing(_))), "{replayed:?}");
    assert_eq!(cost, 1);
}

// pins S2, U6: callers racing to claim a key decided not applied, on two stores (two pools,
// as two processes), re-claim it exactly once per key: one `Acquired { reopened: true }` with
// the next fence, every other caller meets that claim in progress
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_claims_reopen_a_not_applied_record_once() {
    let schema = Schema::fresh();
    let (first, second) = (schema.store(), schema.store());
    assert_eq!(first.read(&key(1), at(1)).await, Ok(None), "set up");
    let f = fp(5);
    let keys: Vec<_> = (100..108).map(key).collect();
    for k in &keys {
        schema
            .admin(&format!(
                "INSERT INTO {{schema}}.records
                    (key, fingerprint, created_at, expires_at, fence, decided_at, history,
                     history_len)
                 VALUES ('{k}', '{f}', 1000, 2000, 4, 1500, '{line}', 1)",
                f = f.as_str(),
                line = resolved(1_500, 4, DecisionKind::NotApplied).to_json()
            ))
            .await;
    }
    let label = label();
    let mut tasks = Vec::new();
    for (i, k) in keys.iter().cycle().take(keys.len() * 8).enumerate() {
        let store = if i % 2 == 0 {
            first.clone()
        } else {
            second.clone()
        };
        let (k, f, label) = (k.clone(), f.clone(), label.clone());
        tasks.push(tokio::spawn(async move {
            let owner = OwnerToken::random();
            let claimed = store.claim(claim(&k, &f, owner, 5_000, &label)).await;
            (k, owner, claimed)
        }));
    }
    let mut winners = std::collections::HashMap::new();
    let mut others = Vec::new();
    for task in tasks {
        let (k, owner, claimed) = task.await.expect("the task");
        match claimed {
            Ok(Claim::Acquired {
                fence: 5,
                reopened: true,
            }) => assert!(winners.insert(k, owner).is_none(), "two winners"),
            Ok(Claim::Existing(record)) => others.push((k, record)),
            other => panic!("{other:?}"),
        }
    }
    assert_eq!(winners.len(), keys.len(), "one winner per key");
    for (k, record) in others {
        assert_eq!(record.fence, 5);
        assert!(
            matches!(record.state, RecordState::InProgress { owner, .. } if owner == winners[&k]),
            "{record:?}"
        );
    }
    for k in &keys {
        assert_eq!(history(&first, k, 5_000).await.entries.len(), 2);
    }
}
