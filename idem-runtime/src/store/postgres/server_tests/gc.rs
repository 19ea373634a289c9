//! Garbage collection of completed records only (G1, S8), and inspection at `now` (I7).

use super::{at, fp, key, read, Schema};
use crate::store::postgres::{COLLECT_BATCH, MARGIN_PAST_CUTOFF};
use crate::store::{ListQuery, OwnerToken, RecordState, StateFilter, Store};

// pins G1, S8: garbage collection — the explicit one and the background statement, judged by
// the server's clock too — deletes completed records only: records in progress, outcome
// unknown or not applied whose expiry and lease lie decades in the past stay, and keep reading
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn garbage_collection_never_deletes_records_that_are_not_completed() {
    let schema = Schema::fresh();
    let store = schema.store();
    let (done, running, held, decided, done_too) = (key(11), key(12), key(13), key(14), key(15));
    assert_eq!(store.read(&done, at(1)).await, Ok(None), "set up");
    let owner = OwnerToken::random().to_hex();
    let f = fp(4);
    schema
        .admin(&format!(
            "INSERT INTO {{schema}}.records
                (key, fingerprint, created_at, expires_at, owner, lease_until, outcome,
                 completed_at, unknown_since, decided_at, fence) VALUES
             ('{done}', '{f}', 1000, 2000, NULL, NULL, '{{}}', 1500, NULL, NULL, 1),
             ('{running}', '{f}', 1000, 2000, '{owner}', 1500, NULL, NULL, NULL, NULL, 1),
             ('{held}', '{f}', 1000, 2000, '{owner}', 1500, NULL, NULL, 1000, NULL, 1),
             ('{decided}', '{f}', 1000, 2000, NULL, NULL, NULL, NULL, NULL, 1800, 1),
             ('{done_too}', '{f}', 1000, 2000, NULL, NULL, '{{}}', 1500, NULL, NULL, 1);",
            f = f.as_str()
        ))
        .await;
    let now = crate::clock::system_now().as_millis();
    // the background statement, with the claim's margin: the completed rows only
    let inner = &store.inner;
    let deleted = inner
        .execute(
            "collect garbage",
            &inner.sql.collect_some,
            &[&(now as i64), &MARGIN_PAST_CUTOFF, &1_i64],
        )
        .await;
    assert_eq!(deleted, Ok(1), "one completed row per batch of 1");
    let deleted = inner
        .execute(
            "collect garbage",
            &inner.sql.collect_some,
            &[&(now as i64), &MARGIN_PAST_CUTOFF, &COLLECT_BATCH],
        )
        .await;
    assert_eq!(deleted, Ok(1), "the other completed row");
    assert_eq!(store.collect_garbage(at(now)).await, Ok(0));
    assert_eq!(store.read(&done, at(now)).await, Ok(None));
    assert_eq!(store.read(&done_too, at(now)).await, Ok(None));
    assert!(matches!(
        read(&store, &running, now).await.state,
        RecordState::InProgress { .. }
    ));
    assert!(matches!(
        read(&store, &held, now).await.state,
        RecordState::OutcomeUnknown { .. }
    ));
    assert_eq!(
        read(&store, &decided, now).await.state,
        RecordState::NotApplied {
            decided_at: at(1_800)
        }
    );
    assert_eq!(
        schema
            .value("SELECT count(*) FROM {schema}.records")
            .await
            .as_deref(),
        Some("3")
    );
    // counted at `now`: the lapsed claim is an unknown outcome (I7)
    let stats = store.stats(at(now)).await.expect("counts");
    assert_eq!(
        (
            stats.total.in_progress,
            stats.total.outcome_unknown,
            stats.total.not_applied
        ),
        (0, 2, 1)
    );
    // listed oldest first, and the effective state filters
    let unknown_ones = store
        .list(
            &ListQuery::new()
                .state(StateFilter::OutcomeUnknown)
                .oldest_first()
                .limit(1),
            at(now),
        )
        .await
        .expect("listed");
    assert_eq!(unknown_ones.records.len(), 1);
    assert_eq!(unknown_ones.records[0].key, running);
    let rest = store
        .list(
            &ListQuery::new()
                .state(StateFilter::OutcomeUnknown)
                .oldest_first()
                .after(unknown_ones.next.expect("a next page")),
            at(now),
        )
        .await
        .expect("listed");
    assert_eq!(
        rest.records.iter().map(|r| &r.key).collect::<Vec<_>>(),
        vec![&held]
    );
    assert_eq!(rest.next, None);
}
