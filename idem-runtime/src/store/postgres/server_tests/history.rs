//! The history kept in the row (U7).

use super::{at, claim, fp, history, key, label, read, resolved, unknown, Schema};
use crate::envelope::Envelope;
use crate::store::OutcomeSource;
use crate::store::{
    Claim, DecisionKind, History, HistoryEntry, HistoryEvent, MarkUnknownRequest, OwnerToken,
    RecordState, Seen, Store, TakeoverRequest, Target, TransitionRequest, UnknownReason,
    HISTORY_LIMIT,
};

// pins U7: each transition appends one entry in its own statement; the history keeps the last
// HISTORY_LIMIT entries and counts the dropped ones; the `claimed` entry the SQL builds is the
// line `HistoryEntry::claimed(…).to_json()` writes, byte for byte; renewals add nothing; a
// claim over an expired record starts a new history
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_history_keeps_the_last_32_entries() {
    let schema = Schema::fresh();
    let store = schema.store();
    let (k, f, label) = (key(5), fp(1), label());
    let mut owner = OwnerToken::random();
    assert_eq!(
        store.claim(claim(&k, &f, owner, 1_000, &label)).await,
        Ok(Claim::Acquired {
            fence: 1,
            reopened: false
        })
    );
    assert_eq!(
        schema
            .value(&format!(
                "SELECT history FROM {{schema}}.records WHERE key = '{k}'"
            ))
            .await,
        Some(HistoryEntry::claimed(at(1_000), 1, owner).to_json())
    );
    let renewal = crate::store::RenewRequest {
        key: &k,
        owner,
        now: at(1_000),
        lease_until: at(1_500),
    };
    assert_eq!(store.renew(renewal).await, Ok(true));
    assert_eq!(
        history(&store, &k, 1_000).await.entries.len(),
        1,
        "no entry"
    );
    let mut lease = 1_500;
    let takeovers = HISTORY_LIMIT as u64 + 8;
    for fence in 2..=takeovers + 1 {
        let (next, now) = (OwnerToken::random(), 1_000 + fence);
        let entry = HistoryEntry::new(
            at(now),
            HistoryEvent::TakenOver {
                cause: UnknownReason::LeaseLapsed,
            },
            fence,
        )
        .with_owner(next);
        let taken = store
            .take_over(TakeoverRequest {
                key: &k,
                seen_owner: owner,
                seen_lease_until: at(lease),
                owner: next,
                now: at(now),
                lease_until: at(now + 500),
                expires_at: at(100_000),
                fence,
                label: &label,
                entry: entry.clone(),
            })
            .await;
        assert_eq!(taken, Ok(true), "takeover {fence}");
        (owner, lease) = (next, now + 500);
    }
    // 1 claim + 40 takeovers: the last 32 kept, 9 dropped
    let read_back = history(&store, &k, 2_000).await;
    assert_eq!(read_back.entries.len(), HISTORY_LIMIT);
    assert_eq!(read_back.dropped, takeovers + 1 - HISTORY_LIMIT as u64);
    let fences: Vec<u64> = read_back.entries.iter().map(|e| e.fence).collect();
    let expected: Vec<u64> = (takeovers + 2 - HISTORY_LIMIT as u64..=takeovers + 1).collect();
    assert_eq!(fences, expected);
    assert!(read_back
        .entries
        .iter()
        .all(|e| matches!(e.event, HistoryEvent::TakenOver { .. })));
    assert_eq!(
        schema
            .value(&format!(
                "SELECT history_len || ' ' || history_dropped
                        || ' ' || (length(history) - length(replace(history, chr(10), '')))
                 FROM {{schema}}.records WHERE key = '{k}'"
            ))
            .await
            .as_deref(),
        Some("32 9 31"),
        "32 lines, 31 newlines"
    );

    // one more entry drops one more
    let marked = unknown(3_000, takeovers + 1, UnknownReason::Cancelled);
    let mark = MarkUnknownRequest {
        key: &k,
        owner,
        now: at(3_000),
        since: at(2_000),
        entry: marked.clone(),
    };
    assert_eq!(store.mark_unknown(mark).await, Ok(true));
    let read_back = history(&store, &k, 3_000).await;
    assert_eq!(
        (read_back.entries.len(), read_back.dropped),
        (HISTORY_LIMIT, 10)
    );
    assert_eq!(read_back.entries.last(), Some(&marked));

    // decided applied, then expired: a claim starts over with one entry and nothing dropped
    let ok = Envelope::from_stored("{\"ok\":true}");
    let applied = resolved(3_000, takeovers + 1, DecisionKind::Applied);
    let decide = TransitionRequest {
        key: &k,
        fence: takeovers + 1,
        seen: Seen::OutcomeUnknown {
            owner,
            lease_until: at(lease),
        },
        target: Target::Completed {
            outcome: &ok,
            source: OutcomeSource::Resolved,
        },
        now: at(3_000),
        expires_at: at(200_000),
        entry: applied.clone(),
    };
    assert_eq!(store.transition(decide).await, Ok(true));
    let done = read(&store, &k, 3_000).await;
    assert_eq!(
        done.expires_at,
        at(200_000),
        "raised to the decision's expiry"
    );
    assert_eq!(
        done.state,
        RecordState::Completed {
            outcome: ok,
            completed_at: at(3_000),
            source: OutcomeSource::Resolved
        }
    );
    assert_eq!(store.history(&k, at(200_000)).await, Ok(None), "expired");
    let later = OwnerToken::random();
    assert_eq!(
        store.claim(claim(&k, &f, later, 200_000, &label)).await,
        Ok(Claim::Acquired {
            fence: takeovers + 2,
            reopened: false
        })
    );
    assert_eq!(
        history(&store, &k, 200_000).await,
        History {
            entries: vec![HistoryEntry::claimed(at(200_000), takeovers + 2, later)],
            dropped: 0
        }
    );
}
