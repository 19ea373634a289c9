//! The upgrade of a schema of version 4 to version 5 (P4, A2, A3): the approval columns
//! added in place, the state check replaced, every record kept with its history.

use super::{at, claim, connect, fp, history, key, label, read, resolved, url, Schema};
use crate::envelope::Envelope;
use crate::store::postgres::{PostgresStore, POSTGRES_SCHEMA_VERSION};
use crate::store::{
    Claim, DecisionKind, HistoryEntry, HistoryEvent, OutcomeSource, OwnerToken, Record,
    RecordState, Seen, StateCounts, Store, StoreErrorKind, Target, TransitionRequest,
};

/// The schema of version 4 (before approvals), as that build created it.
pub(super) const SCHEMA_V4: &str = "
    CREATE SCHEMA {schema};
    CREATE TABLE {schema}.meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
    CREATE TABLE {schema}.records (
        key           TEXT PRIMARY KEY,
        fingerprint   TEXT NOT NULL,
        created_at    BIGINT NOT NULL,
        expires_at    BIGINT NOT NULL,
        owner         TEXT,
        lease_until   BIGINT,
        outcome       TEXT,
        completed_at  BIGINT,
        fence         BIGINT NOT NULL DEFAULT 1,
        unknown_since BIGINT,
        CONSTRAINT records_fence_positive CHECK (fence >= 1),
        CONSTRAINT records_unknown_has_owner
            CHECK (unknown_since IS NULL OR owner IS NOT NULL),
        tool          TEXT,
        namespace     TEXT,
        scope         TEXT COLLATE \"C\",
        key_args      TEXT,
        source          TEXT,
        decided_at      BIGINT,
        history         TEXT,
        history_len     INTEGER NOT NULL DEFAULT 0,
        history_dropped BIGINT NOT NULL DEFAULT 0,
        CONSTRAINT records_state CHECK (
                (owner IS NOT NULL AND lease_until IS NOT NULL
                 AND outcome IS NULL AND completed_at IS NULL AND decided_at IS NULL)
             OR (owner IS NULL AND lease_until IS NULL
                 AND outcome IS NOT NULL AND completed_at IS NOT NULL AND decided_at IS NULL)
             OR (owner IS NULL AND lease_until IS NULL
                 AND outcome IS NULL AND completed_at IS NULL AND decided_at IS NOT NULL))
    );
    CREATE INDEX records_expires_at ON {schema}.records (expires_at);
    CREATE INDEX records_created ON {schema}.records (created_at, key COLLATE \"C\");
    CREATE INDEX records_tool_created ON {schema}.records (tool, created_at, key COLLATE \"C\");
    CREATE INDEX records_scope ON {schema}.records (scope);
    INSERT INTO {schema}.meta (name, value) VALUES ('schema_version', 4);";

/// The columns version 5 adds, in order.
pub(super) const V5_COLUMNS: &str = "approval_at,approval_until";

// pins P4, A2, A3, U6, U7, S3, S10: a schema of version 4, written by hand as that build wrote
// it, is refused by a store opened for inspection (nothing changed), then upgraded in place to
// version 5 by a store's first use: two columns added, `records_state` replaced (the new one
// admits the approval states and still refuses an approval column beside another state's);
// every record is kept: a resolved outcome replays with its source and history, a claim in
// progress can request approval and be approved, a record decided not applied is re-claimed;
// a store opened later changes nothing
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_4_schema_is_upgraded_to_5_in_place() {
    let schema = Schema::fresh();
    schema.admin(SCHEMA_V4).await;
    let (done, running, decided) = (key(1), key(2), key(3));
    let (owner, f) = (OwnerToken::random(), fp(7));
    let outcome = "{\"ok\":{\"refund\":\"r_9\"}}";
    let done_history = [
        HistoryEntry::claimed(at(1_000), 3, owner),
        resolved(1_500, 3, DecisionKind::Applied),
    ];
    let running_history = [HistoryEntry::claimed(at(1_000), 1, owner)];
    let decided_history = [resolved(1_500, 2, DecisionKind::NotApplied)];
    let lines = |entries: &[HistoryEntry]| {
        let lines: Vec<String> = entries.iter().map(HistoryEntry::to_json).collect();
        lines.join("\n")
    };
    schema
        .admin(&format!(
            "INSERT INTO {{schema}}.records
                (key, fingerprint, created_at, expires_at, owner, lease_until, outcome,
                 completed_at, fence, source, decided_at, tool, scope, history, history_len)
             VALUES
             ('{done}', '{f}', 1000, 100000, NULL, NULL, '{outcome}', 1500, 3, 'resolved',
              NULL, 'send_refund', 'conversation=c-1', '{done_lines}', 2),
             ('{running}', '{f}', 1000, 100000, '{owner}', 9000, NULL, NULL, 1, NULL,
              NULL, 'send_refund', 'conversation=c-1', '{running_lines}', 1),
             ('{decided}', '{f}', 1000, 100000, NULL, NULL, NULL, NULL, 2, NULL,
              1500, 'send_refund', 'conversation=c-1', '{decided_lines}', 1);",
            f = f.as_str(),
            owner = owner.to_hex(),
            done_lines = lines(&done_history),
            running_lines = lines(&running_history),
            decided_lines = lines(&decided_history),
        ))
        .await;

    // opened for inspection: refused, and left at version 4
    let inspecting = PostgresStore::connect_existing(&url(), &schema.name).expect("valid");
    let refused = inspecting.read(&done, at(5_000)).await.unwrap_err();
    assert_eq!(refused.kind, StoreErrorKind::Unsupported, "{refused}");
    assert!(refused.message.contains("version 4"), "{refused}");
    assert_eq!(schema.version().await, Some(4));
    assert_eq!(schema.columns_after(19).await, None);

    // the first use upgrades
    let store = schema.store();
    let old_done = read(&store, &done, 5_000).await;
    assert_eq!(schema.version().await, Some(POSTGRES_SCHEMA_VERSION));
    assert_eq!(schema.columns_after(19).await.as_deref(), Some(V5_COLUMNS));
    assert_eq!(
        schema.checks().await.as_deref(),
        Some("records_fence_positive,records_state,records_unknown_has_owner")
    );
    assert_eq!(
        old_done,
        Record {
            fingerprint: f.clone(),
            created_at: at(1_000),
            expires_at: at(100_000),
            fence: 3,
            state: RecordState::Completed {
                outcome: Envelope::from_stored(outcome),
                completed_at: at(1_500),
                source: OutcomeSource::Resolved,
            },
            label: Some(label()),
        }
    );
    let label = label();
    assert_eq!(
        store
            .claim(claim(&done, &f, OwnerToken::random(), 5_000, &label))
            .await,
        Ok(Claim::Existing(old_done.clone()))
    );
    assert_eq!(
        history(&store, &done, 5_000).await.entries,
        done_history.to_vec()
    );

    // the claim in progress requests approval (a row version 4's check refused), is approved
    let requested = HistoryEntry::new(at(5_000), HistoryEvent::ApprovalRequested, 1);
    let request = TransitionRequest {
        key: &running,
        fence: 1,
        seen: Seen::InProgress {
            owner,
            lease_until: Some(at(9_000)),
        },
        target: Target::AwaitingApproval,
        now: at(5_000),
        expires_at: at(5_000),
        entry: requested.clone(),
    };
    assert_eq!(store.transition(request).await, Ok(true));
    let approved = HistoryEntry::new(at(5_100), HistoryEvent::Approved { until: at(65_100) }, 1);
    let approve = TransitionRequest {
        key: &running,
        fence: 1,
        seen: Seen::AwaitingApproval,
        target: Target::Approved {
            decided_at: at(5_100),
            until: at(65_100),
        },
        now: at(5_100),
        expires_at: at(5_100),
        entry: approved.clone(),
    };
    assert_eq!(store.transition(approve).await, Ok(true));
    assert_eq!(
        read(&store, &running, 5_100).await.state,
        RecordState::Approved {
            decided_at: at(5_100),
            until: at(65_100)
        }
    );
    assert_eq!(
        history(&store, &running, 5_100).await.entries,
        [running_history.to_vec(), vec![requested, approved]].concat()
    );

    // the record decided not applied is re-claimed, its history kept
    let again = OwnerToken::random();
    assert_eq!(
        store.claim(claim(&decided, &f, again, 6_000, &label)).await,
        Ok(Claim::Acquired {
            fence: 3,
            reopened: true
        })
    );
    assert_eq!(
        history(&store, &decided, 6_000).await.entries,
        [
            decided_history.to_vec(),
            vec![HistoryEntry::claimed(at(6_000), 3, again)]
        ]
        .concat()
    );
    let stats = store.stats(at(6_000)).await.expect("counts");
    assert_eq!(
        stats.total,
        StateCounts {
            in_progress: 1,
            completed: 1,
            approved: 1,
            ..StateCounts::default()
        }
    );

    // the new check still refuses an approval column beside another state's
    let client = connect().await;
    for (k, column) in [(&done, "approval_at"), (&decided, "approval_until")] {
        let sql = schema.sql(&format!(
            "UPDATE {{schema}}.records SET {column} = 1 WHERE key = '{k}'"
        ));
        let error = client.batch_execute(&sql).await.expect_err(&sql);
        assert!(format!("{error:?}").contains("records_state"), "{error:?}");
    }

    // a store opened later, or for inspection, finds version 5 and changes nothing
    assert_eq!(read(&schema.store(), &done, 5_000).await, old_done);
    assert_eq!(
        PostgresStore::connect_existing(&url(), &schema.name)
            .expect("valid")
            .read(&done, at(5_000))
            .await,
        Ok(Some(old_done))
    );
    assert_eq!(schema.version().await, Some(POSTGRES_SCHEMA_VERSION));
}
