//! Records awaiting approval and approved (A2–A6): read back past their expiry, listed,
//! counted, answered to claims, kept by purges and garbage collection, decided, run, and
//! raced.

use super::{at, claim, costs, fp, history, key, label, read, Schema};
use crate::envelope::Envelope;
use crate::key::IdempotencyKey;
use crate::store::{
    Claim, CompleteRequest, Completion, Denial, HistoryEntry, HistoryEvent, ListCursor, ListQuery,
    OutcomeSource, OwnerToken, PurgeCounts, PurgeOutcome, Record, RecordState, Seen, StateCounts,
    StateFilter, Store, Target, TransitionRequest,
};

/// A transition of `k` on `fence` at `now` (the expiry `expires_at`), appending `entry`.
fn request<'a>(
    k: &'a IdempotencyKey,
    fence: u64,
    seen: Seen,
    target: Target<'a>,
    now: u64,
    expires_at: u64,
    entry: &HistoryEntry,
) -> TransitionRequest<'a> {
    TransitionRequest {
        key: k,
        fence,
        seen,
        target,
        now: at(now),
        expires_at: at(expires_at),
        entry: entry.clone(),
    }
}

/// Claims `k` at `now` and records the approval request (A2): fence 1, awaiting approval
/// since `now`.
async fn request_approval(store: &dyn Store, k: &IdempotencyKey, now: u64) {
    let (owner, f, label) = (OwnerToken::random(), fp(3), label());
    assert_eq!(
        store.claim(claim(k, &f, owner, now, &label)).await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    let seen = Seen::InProgress {
        owner,
        lease_until: None,
    };
    let entry = HistoryEntry::new(at(now), HistoryEvent::ApprovalRequested, 1);
    let target = Target::AwaitingApproval;
    let requested = store.transition(request(k, 1, seen, target, now, now, &entry));
    assert_eq!(requested.await, Ok(true));
}

/// `ana`'s approval of a record of fence 1 at `now`, valid until `until` (A3).
fn approval(now: u64, until: u64) -> HistoryEntry {
    HistoryEntry::new(at(now), HistoryEvent::Approved { until: at(until) }, 1)
        .with_actor("ana", Some("checked with the customer".to_owned()))
}

fn events(entries: &[HistoryEntry]) -> Vec<HistoryEvent> {
    entries.iter().map(|entry| entry.event.clone()).collect()
}

async fn keys(store: &dyn Store, query: &ListQuery, now: u64) -> Vec<IdempotencyKey> {
    let page = store.list(query, at(now)).await.expect("listed");
    page.records.into_iter().map(|r| r.key).collect()
}

// pins A2, A3, A6, S8, G1, I4, I5, I7, U7, S9: records awaiting approval and approved read
// back as such past their expiry, are listed by their own state filters (oldest first, page
// by page: the queue) and counted apart, never as in progress or unknown (they have no
// lease); a claim with the same fingerprint or another answers the record as it is, in one
// round trip, writing nothing; a purge without force and garbage collection keep them; the
// history holds the request and the approval
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_awaiting_approval_and_approved_round_trip() {
    let schema = Schema::fresh();
    let store = schema.store();
    let (first, second, approved) = (key(1), key(2), key(3));
    request_approval(&store, &first, 1_000).await;
    request_approval(&store, &second, 2_000).await;
    request_approval(&store, &approved, 3_000).await;
    let approve = request(
        &approved,
        1,
        Seen::AwaitingApproval,
        Target::Approved {
            decided_at: at(3_500),
            until: at(63_500),
        },
        3_500,
        3_500,
        &approval(3_500, 63_500),
    );
    assert_eq!(store.transition(approve).await, Ok(true));

    // past every expiry (at most 103 000): live, overdue, as they were written
    let late = 500_000;
    let waiting = read(&store, &first, late).await;
    assert_eq!(
        waiting,
        Record {
            fingerprint: fp(3),
            created_at: at(1_000),
            expires_at: at(101_000),
            fence: 1,
            state: RecordState::AwaitingApproval { since: at(1_000) },
            label: Some(label()),
        }
    );
    assert!(waiting.is_overdue(at(late)));
    let decided = read(&store, &approved, late).await;
    assert_eq!(
        (decided.fence, &decided.state),
        (
            1,
            &RecordState::Approved {
                decided_at: at(3_500),
                until: at(63_500)
            }
        )
    );

    // the queue: oldest first, page by page; newest first; the approved apart (A6)
    let queue = ListQuery::new().state(StateFilter::AwaitingApproval);
    let oldest = queue.clone().oldest_first();
    assert_eq!(
        keys(&store, &oldest, late).await,
        vec![first.clone(), second.clone()]
    );
    assert_eq!(
        keys(&store, &queue, late).await,
        vec![second.clone(), first.clone()]
    );
    let page = store
        .list(&oldest.clone().limit(1), at(late))
        .await
        .expect("listed");
    assert_eq!(page.records.len(), 1);
    assert_eq!(page.records[0].key, first);
    assert_eq!(page.records[0].record, waiting);
    let next = page.next.expect("a next page");
    assert_eq!(next, ListCursor::after(&first, &waiting));
    let rest = oldest.clone().limit(1).after(next);
    assert_eq!(keys(&store, &rest, late).await, vec![second.clone()]);
    let approved_only = ListQuery::new().state(StateFilter::Approved);
    assert_eq!(
        keys(&store, &approved_only, late).await,
        vec![approved.clone()]
    );
    for other in [
        StateFilter::InProgress,
        StateFilter::OutcomeUnknown,
        StateFilter::NotApplied,
        StateFilter::Completed,
    ] {
        let query = ListQuery::new().state(other);
        assert_eq!(keys(&store, &query, late).await, vec![], "{other}");
    }
    let stats = store.stats(at(late)).await.expect("counts");
    let counts = StateCounts {
        awaiting_approval: 2,
        approved: 1,
        ..StateCounts::default()
    };
    assert_eq!(stats.total, counts, "{stats:?}");
    assert_eq!(stats.by_tool.get("send_refund"), Some(&counts), "{stats:?}");

    // a claim, with the same fingerprint or another, answers the record: one round trip,
    // nothing written (A2, S9)
    let label = label();
    let before = history(&store, &approved, late).await;
    for (k, record) in [(&first, &waiting), (&approved, &decided)] {
        for f in [fp(3), fp(4)] {
            let owner = OwnerToken::random();
            let (claimed, cost) =
                costs(&store, || store.claim(claim(k, &f, owner, late, &label))).await;
            assert_eq!(claimed, Ok(Claim::Existing(record.clone())));
            assert_eq!(cost, 1);
        }
    }
    assert_eq!(read(&store, &first, late).await, waiting);
    assert_eq!(history(&store, &approved, late).await, before);
    assert_eq!(
        events(&before.entries),
        vec![
            HistoryEvent::Claimed,
            HistoryEvent::ApprovalRequested,
            HistoryEvent::Approved { until: at(63_500) }
        ]
    );
    assert_eq!(before.entries[2], approval(3_500, 63_500));

    // kept: by a purge without force, one by filter, and garbage collection (G1, I4)
    assert_eq!(
        store.purge(&first, false, at(late)).await,
        Ok(PurgeOutcome::Kept(waiting.clone()))
    );
    assert_eq!(
        store.purge(&approved, false, at(late)).await,
        Ok(PurgeOutcome::Kept(decided.clone()))
    );
    assert_eq!(
        store.purge_matching(&queue, false, at(late)).await,
        Ok(PurgeCounts {
            deleted: 0,
            kept: 2
        })
    );
    let now = crate::clock::system_now();
    assert_eq!(store.collect_garbage(now).await, Ok(0));
    assert_eq!(read(&store, &approved, late).await, decided);
    assert_eq!(store.stats(at(late)).await.expect("counts").total, counts);
}

// pins A3, A4, A5, F1, S3, U7: a denial saves the outcome with source `denied` (it reads back
// as such, raised expiry, and every claim replays it); an approved record runs once with the
// next fence (created and expiring as a claim), its outcome saved and replayed; an approval
// that expired returns the record to awaiting approval since then, fence kept; each appends
// its entry
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn approval_decisions_deny_run_and_expire() {
    let schema = Schema::fresh();
    let store = schema.store();
    let (denied, run, expired) = (key(21), key(22), key(23));
    for (k, now) in [(&denied, 1_000), (&run, 1_000), (&expired, 1_000)] {
        request_approval(&store, k, now).await;
    }
    let (late, keep) = (500_000, 86_400_000);
    let label = label();

    // denied while awaiting approval (A3, A5)
    let denial = Denial {
        actor: "ana".to_owned(),
        at: at(late),
        note: Some("not this customer".to_owned()),
    };
    let outcome = denial.to_envelope();
    let deny_entry = HistoryEntry::new(at(late), HistoryEvent::Denied, 1)
        .with_actor("ana", Some("not this customer".to_owned()));
    let deny = request(
        &denied,
        1,
        Seen::AwaitingApproval,
        Target::Completed {
            outcome: &outcome,
            source: OutcomeSource::Denied,
        },
        late,
        late + keep,
        &deny_entry,
    );
    assert_eq!(store.transition(deny).await, Ok(true));
    let saved = read(&store, &denied, late).await;
    assert_eq!(
        (saved.fence, saved.expires_at, &saved.state),
        (
            1,
            at(late + keep),
            &RecordState::Completed {
                outcome: outcome.clone(),
                completed_at: at(late),
                source: OutcomeSource::Denied,
            }
        )
    );
    let RecordState::Completed {
        outcome: read_back, ..
    } = &saved.state
    else {
        unreachable!()
    };
    assert_eq!(Denial::from_envelope(read_back), Ok(denial));
    let replay = store
        .claim(claim(
            &denied,
            &fp(3),
            OwnerToken::random(),
            late + 1,
            &label,
        ))
        .await;
    assert_eq!(replay, Ok(Claim::Existing(saved.clone())));
    let entries = history(&store, &denied, late).await.entries;
    assert_eq!(entries.last(), Some(&deny_entry));
    assert_eq!(entries.len(), 3);

    // approved, then run once with the next fence, its outcome saved and replayed (A4)
    let approve = request(
        &run,
        1,
        Seen::AwaitingApproval,
        Target::Approved {
            decided_at: at(2_000),
            until: at(late + 60_000),
        },
        2_000,
        2_000,
        &approval(2_000, late + 60_000),
    );
    assert_eq!(store.transition(approve).await, Ok(true));
    let runner = OwnerToken::random();
    let claimed = HistoryEntry::claimed(at(late), 2, runner);
    let take = request(
        &run,
        1,
        Seen::Approved {
            until: at(late + 60_000),
        },
        Target::InProgress {
            owner: runner,
            lease_until: at(late + 1_000),
            fence: 2,
        },
        late,
        late + 100_000,
        &claimed,
    );
    assert_eq!(store.transition(take).await, Ok(true));
    assert_eq!(
        read(&store, &run, late).await,
        Record {
            fingerprint: fp(3),
            created_at: at(late),
            expires_at: at(late + 100_000),
            fence: 2,
            state: RecordState::InProgress {
                owner: runner,
                lease_until: at(late + 1_000)
            },
            label: Some(label.clone()),
        }
    );
    let ok = Envelope::from_stored("{\"ok\":{\"refund\":\"r_1\"}}");
    let completed = HistoryEntry::new(
        at(late + 10),
        HistoryEvent::Completed {
            source: OutcomeSource::Executed,
        },
        2,
    );
    let complete = CompleteRequest {
        key: &run,
        owner: runner,
        outcome: &ok,
        source: OutcomeSource::Executed,
        now: at(late + 10),
        entry: completed.clone(),
    };
    assert_eq!(store.complete(complete).await, Ok(Completion::Saved));
    let done = read(&store, &run, late + 20).await;
    let replay = store
        .claim(claim(&run, &fp(3), OwnerToken::random(), late + 20, &label))
        .await;
    assert_eq!(replay, Ok(Claim::Existing(done)));
    let entries = history(&store, &run, late + 20).await.entries;
    assert_eq!(entries[3..], [claimed, completed]);

    // approved, found expired: awaiting approval again since then, fence kept (A4)
    let approve = request(
        &expired,
        1,
        Seen::AwaitingApproval,
        Target::Approved {
            decided_at: at(2_000),
            until: at(62_000),
        },
        2_000,
        2_000,
        &approval(2_000, 62_000),
    );
    assert_eq!(store.transition(approve).await, Ok(true));
    let lapsed = HistoryEntry::new(at(late), HistoryEvent::ApprovalExpired, 1);
    let back = request(
        &expired,
        1,
        Seen::Approved { until: at(62_000) },
        Target::AwaitingApproval,
        late,
        late,
        &lapsed,
    );
    assert_eq!(store.transition(back).await, Ok(true));
    let waiting = read(&store, &expired, late).await;
    assert_eq!(
        (waiting.fence, waiting.created_at, waiting.state),
        (
            1,
            at(1_000),
            RecordState::AwaitingApproval { since: at(late) }
        )
    );
    assert_eq!(
        history(&store, &expired, late).await.entries.last(),
        Some(&lapsed)
    );
    let stats = store.stats(at(late + 20)).await.expect("counts");
    assert_eq!(
        stats.total,
        StateCounts {
            awaiting_approval: 1,
            completed: 2,
            ..StateCounts::default()
        }
    );
}

// pins A3, A4, S2: deciders racing to approve one record awaiting approval, on two stores (two
// pools, as two processes), make one decision; callers racing to run the approved record take
// it once; each time every other caller is refused and writes nothing
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn racing_approvals_and_runs_apply_once() {
    let schema = Schema::fresh();
    let stores = [schema.store(), schema.store()];
    let keys: Vec<_> = (40..44).map(key).collect();
    for k in &keys {
        request_approval(&stores[0], k, 1_000).await;
    }
    let mut tasks = Vec::new();
    for (i, k) in keys.iter().cycle().take(keys.len() * 8).enumerate() {
        let (store, k) = (stores[i % 2].clone(), k.clone());
        tasks.push(tokio::spawn(async move {
            let decided_at = 2_000 + i as u64;
            let target = Target::Approved {
                decided_at: at(decided_at),
                until: at(decided_at + 60_000),
            };
            let entry = approval(decided_at, decided_at + 60_000);
            let req = request(&k, 1, Seen::AwaitingApproval, target, decided_at, 0, &entry);
            (k.clone(), store.transition(req).await)
        }));
    }
    let mut approvals = std::collections::HashMap::new();
    for task in tasks {
        let (k, approved) = task.await.expect("the task");
        *approvals.entry(k).or_insert(0) += usize::from(approved.expect("answered"));
    }
    assert!(approvals.values().all(|&n| n == 1), "{approvals:?}");

    // The approval each caller saw (which decider won is the race above's).
    let mut untils = std::collections::HashMap::new();
    for k in &keys {
        match read(&stores[0], k, 5_000).await.state {
            RecordState::Approved { until, .. } => untils.insert(k.clone(), until),
            other => panic!("approved: {other:?}"),
        };
    }
    let untils = std::sync::Arc::new(untils);
    let mut tasks = Vec::new();
    for (i, k) in keys.iter().cycle().take(keys.len() * 8).enumerate() {
        let (store, k, untils) = (stores[i % 2].clone(), k.clone(), untils.clone());
        tasks.push(tokio::spawn(async move {
            let owner = OwnerToken::random();
            let target = Target::InProgress {
                owner,
                lease_until: at(10_000),
                fence: 2,
            };
            let entry = HistoryEntry::claimed(at(5_000), 2, owner);
            let until = untils[&k];
            let req = request(
                &k,
                1,
                Seen::Approved { until },
                target,
                5_000,
                105_000,
                &entry,
            );
            (k.clone(), owner, store.transition(req).await)
        }));
    }
    let mut runners = std::collections::HashMap::new();
    for task in tasks {
        let (k, owner, ran) = task.await.expect("the task");
        if ran.expect("answered") {
            assert!(runners.insert(k, owner).is_none(), "two runs");
        }
    }
    assert_eq!(runners.len(), keys.len(), "one run per key");
    for k in &keys {
        let record = read(&stores[1], k, 5_000).await;
        assert_eq!(record.fence, 2);
        assert!(
            matches!(record.state, RecordState::InProgress { owner, .. } if owner == runners[k]),
            "{record:?}"
        );
        let entries = history(&stores[0], k, 5_000).await.entries;
        assert_eq!(entries.len(), 4, "{entries:?}");
        assert!(matches!(entries[2].event, HistoryEvent::Approved { .. }));
        assert_eq!(entries[3], HistoryEntry::claimed(at(5_000), 2, runners[k]));
    }
}
