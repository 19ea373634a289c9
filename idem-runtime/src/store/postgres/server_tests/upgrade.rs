//! Upgrades of schemas of versions 1, 2 and 3 to version 5 (P4); version 4's in
//! `upgrade_v4`.

use super::upgrade_v4::{SCHEMA_V4, V5_COLUMNS};
use super::{at, claim, fp, history, key, label, read, resolved, unknown, Schema};
use crate::envelope::Envelope;
use crate::store::postgres::POSTGRES_SCHEMA_VERSION;
use crate::store::OutcomeSource;
use crate::store::{
    Claim, CompleteRequest, Completion, DecisionKind, History, HistoryEntry, HistoryEvent,
    OwnerToken, Record, RecordState, Seen, Store, Target, TransitionRequest, UnknownReason,
};

/// The records table of version 1 (before fencing tokens), as that build created it.
const SCHEMA_V1: &str = "
    CREATE SCHEMA {schema};
    CREATE TABLE {schema}.meta (name TEXT PRIMARY KEY, value BIGINT NOT NULL);
    CREATE TABLE {schema}.records (
        key          TEXT PRIMARY KEY,
        fingerprint  TEXT NOT NULL,
        created_at   BIGINT NOT NULL,
        expires_at   BIGINT NOT NULL,
        owner        TEXT,
        lease_until  BIGINT,
        outcome      TEXT,
        completed_at BIGINT,
        CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
                AND outcome IS NULL AND completed_at IS NULL)
            OR (owner IS NULL AND lease_until IS NULL
                AND outcome IS NOT NULL AND completed_at IS NOT NULL))
    );
    CREATE INDEX records_expires_at ON {schema}.records (expires_at);
    INSERT INTO {schema}.meta (name, value) VALUES ('schema_version', 1);";

/// The records table of version 2 (before labels), as that build created it.
const SCHEMA_V2: &str = "
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
        CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
                AND outcome IS NULL AND completed_at IS NULL)
            OR (owner IS NULL AND lease_until IS NULL
                AND outcome IS NOT NULL AND completed_at IS NOT NULL)),
        CONSTRAINT records_fence_positive CHECK (fence >= 1),
        CONSTRAINT records_unknown_has_owner CHECK (unknown_since IS NULL OR owner IS NOT NULL)
    );
    CREATE INDEX records_expires_at ON {schema}.records (expires_at);
    INSERT INTO {schema}.meta (name, value) VALUES ('schema_version', 2);";

/// The records table of version 3 (before histories and decisions), as that build created
/// it.
const SCHEMA_V3: &str = "
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
        CHECK ((owner IS NOT NULL AND lease_until IS NOT NULL
                AND outcome IS NULL AND completed_at IS NULL)
            OR (owner IS NULL AND lease_until IS NULL
                AND outcome IS NOT NULL AND completed_at IS NOT NULL)),
        CONSTRAINT records_fence_positive CHECK (fence >= 1),
        CONSTRAINT records_unknown_has_owner
            CHECK (unknown_since IS NULL OR owner IS NOT NULL),
        tool          TEXT,
        namespace     TEXT,
        scope         TEXT COLLATE \"C\",
        key_args      TEXT
    );
    CREATE INDEX records_expires_at ON {schema}.records (expires_at);
    CREATE INDEX records_created ON {schema}.records (created_at, key COLLATE \"C\");
    CREATE INDEX records_tool_created ON {schema}.records (tool, created_at, key COLLATE \"C\");
    CREATE INDEX records_scope ON {schema}.records (scope);
    INSERT INTO {schema}.meta (name, value) VALUES ('schema_version', 3);";

/// The columns versions 4 and 5 add, in order.
const V4_V5_COLUMNS: &str =
    "source,decided_at,history,history_len,history_dropped,approval_at,approval_until";

// pins P4, U6, U7, S3, A2: a schema of version 3, written by hand as that build wrote it, is
// upgraded in place to version 5 on first use (seven columns; the unnamed state check replaced
// by `records_state`, which admits a not-applied row); every old record is kept: a completed
// one replays with source executed and an empty history, an unknown one can be decided not
// applied and re-claimed, one in progress completes, an expired one is claimed afresh; a store
// opened later changes nothing
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_version_3_schema_is_upgraded_to_5_in_place() {
    let schema = Schema::fresh();
    schema.admin(SCHEMA_V3).await;
    let (done, running, held, expired) = (key(1), key(2), key(3), key(4));
    let (running_owner, held_owner) = (OwnerToken::random(), OwnerToken::random());
    let outcome = "{\"ok\":{\"refund\":\"r_9\",\"amount\":1.50}}";
    let f = fp(7);
    schema
        .admin(&format!(
            "INSERT INTO {{schema}}.records
                (key, fingerprint, created_at, expires_at, owner, lease_until, outcome,
                 completed_at, fence, unknown_since, tool, namespace, scope, key_args) VALUES
             ('{done}', '{f}', 1000, 100000, NULL, NULL, '{outcome}', 1500, 3, NULL,
              'send_refund', NULL, 'conversation=c-1', NULL),
             ('{running}', '{f}', 1000, 100000, '{running_owner}', 2000, NULL, NULL, 1, NULL,
              NULL, NULL, NULL, NULL),
             ('{held}', '{f}', 1000, 100000, '{held_owner}', 9000, NULL, NULL, 2, 1000,
              NULL, NULL, NULL, NULL),
             ('{expired}', '{f}', 1000, 3000, NULL, NULL, '{outcome}', 1500, 5, NULL,
              NULL, NULL, NULL, NULL);",
            f = f.as_str(),
            running_owner = running_owner.to_hex(),
            held_owner = held_owner.to_hex(),
        ))
        .await;
    assert_eq!(schema.version().await, Some(3));

    let store = schema.store();
    let old_done = read(&store, &done, 5_000).await;
    assert_eq!(schema.version().await, Some(POSTGRES_SCHEMA_VERSION));
    assert_eq!(POSTGRES_SCHEMA_VERSION, 5);
    assert_eq!(
        schema.columns_after(14).await.as_deref(),
        Some(V4_V5_COLUMNS)
    );
    assert!(V4_V5_COLUMNS.ends_with(V5_COLUMNS));
    assert_eq!(
        schema.checks().await.as_deref(),
        Some("records_fence_positive,records_state,records_unknown_has_owner"),
        "the unnamed state check of version 3 is replaced"
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
                source: OutcomeSource::Executed,
            },
            label: Some(label()),
        }
    );
    // a replay: the saved outcome, byte for byte, and nothing written
    let label = label();
    assert_eq!(
        store
            .claim(claim(&done, &f, OwnerToken::random(), 5_000, &label))
            .await,
        Ok(Claim::Existing(old_done.clone()))
    );
    assert_eq!(history(&store, &done, 5_000).await, History::default());
    assert_eq!(read(&store, &done, 5_000).await, old_done);

    // the lapsed claim and the unknown outcome count as unknown outcomes (I7)
    let stats = store.stats(at(5_000)).await.expect("counts");
    assert_eq!(
        (
            stats.total.completed,
            stats.total.outcome_unknown,
            stats.total.in_progress
        ),
        (1, 2, 0),
        "{stats:?}"
    );

    // the unknown outcome is decided not applied (a row the old check forbade), then re-claimed
    let decided = resolved(5_000, 2, DecisionKind::NotApplied);
    let not_applied = TransitionRequest {
        key: &held,
        fence: 2,
        seen: Seen::OutcomeUnknown {
            owner: held_owner,
            lease_until: at(9_000),
        },
        target: Target::NotApplied,
        now: at(5_000),
        expires_at: at(5_000),
        entry: decided.clone(),
    };
    assert_eq!(store.transition(not_applied).await, Ok(true));
    assert_eq!(
        read(&store, &held, 5_000).await.state,
        RecordState::NotApplied {
            decided_at: at(5_000)
        }
    );
    let again = OwnerToken::random();
    assert_eq!(
        store.claim(claim(&held, &f, again, 6_000, &label)).await,
        Ok(Claim::Acquired {
            fence: 3,
            reopened: true
        })
    );
    assert_eq!(
        history(&store, &held, 6_000).await.entries,
        vec![decided, HistoryEntry::claimed(at(6_000), 3, again)]
    );

    // the claim in progress completes: its history starts with that entry
    let completed = HistoryEntry::new(
        at(6_000),
        HistoryEvent::Completed {
            source: OutcomeSource::Executed,
        },
        1,
    );
    let ok = Envelope::from_stored("{\"ok\":1}");
    let saved = store
        .complete(CompleteRequest {
            key: &running,
            owner: running_owner,
            outcome: &ok,
            source: OutcomeSource::Executed,
            now: at(6_000),
            entry: completed.clone(),
        })
        .await;
    assert_eq!(saved, Ok(Completion::Saved));
    assert_eq!(
        history(&store, &running, 6_000).await.entries,
        vec![completed]
    );

    // the expired record is claimed afresh with the next fence and a new history
    let fresh = OwnerToken::random();
    assert_eq!(
        store.claim(claim(&expired, &f, fresh, 6_000, &label)).await,
        Ok(Claim::Acquired {
            fence: 6,
            reopened: false
        })
    );
    assert_eq!(
        history(&store, &expired, 6_000).await.entries,
        vec![HistoryEntry::claimed(at(6_000), 6, fresh)]
    );

    // a store opened later finds version 5 and changes nothing
    assert_eq!(read(&schema.store(), &done, 5_000).await, old_done);
    assert_eq!(schema.version().await, Some(POSTGRES_SCHEMA_VERSION));
}

// pins P4, U6, A2: schemas of versions 1 to 4 reach version 5 in one upgrade, with the same
// columns and checks as a schema created by this build, and a record written by the old
// build can be marked unknown, decided not applied, re-claimed, and then await approval (a
// row only the new state check admits)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_older_schema_reaches_version_5() {
    let created = Schema::fresh();
    let store = created.store();
    assert_eq!(store.read(&key(1), at(1)).await, Ok(None));
    let (all_columns, all_checks) = (created.columns_after(0).await, created.checks().await);
    assert_eq!(created.version().await, Some(5));
    for (ddl, version) in [
        (SCHEMA_V1, 1),
        (SCHEMA_V2, 2),
        (SCHEMA_V3, 3),
        (SCHEMA_V4, 4),
    ] {
        let schema = Schema::fresh();
        schema.admin(ddl).await;
        let (k, owner, f) = (key(9), OwnerToken::random(), fp(3));
        schema
            .admin(&format!(
                "INSERT INTO {{schema}}.records
                    (key, fingerprint, created_at, expires_at, owner, lease_until)
                 VALUES ('{k}', '{f}', 1000, 2000, '{owner}', 1500)",
                f = f.as_str(),
                owner = owner.to_hex()
            ))
            .await;
        let store = schema.store();
        // in progress, its lease lapsed and its expiry passed: still live (S8)
        let old = read(&store, &k, 3_000).await;
        assert_eq!(schema.version().await, Some(5), "from version {version}");
        assert_eq!(
            schema.columns_after(0).await,
            all_columns,
            "from version {version}"
        );
        assert_eq!(schema.checks().await, all_checks, "from version {version}");
        assert_eq!(old.fence, 1);
        let lapsed = unknown(3_000, 1, UnknownReason::LeaseLapsed);
        let mark = TransitionRequest {
            key: &k,
            fence: 1,
            seen: Seen::InProgress {
                owner,
                lease_until: Some(at(1_500)),
            },
            target: Target::OutcomeUnknown { since: at(1_000) },
            now: at(3_000),
            expires_at: at(3_000),
            entry: lapsed.clone(),
        };
        assert_eq!(
            store.transition(mark).await,
            Ok(true),
            "from version {version}"
        );
        let decided = resolved(3_000, 1, DecisionKind::NotApplied);
        let decide = TransitionRequest {
            key: &k,
            fence: 1,
            seen: Seen::OutcomeUnknown {
                owner,
                lease_until: at(1_500),
            },
            target: Target::NotApplied,
            now: at(3_000),
            expires_at: at(3_000),
            entry: decided.clone(),
        };
        assert_eq!(
            store.transition(decide).await,
            Ok(true),
            "from version {version}"
        );
        let (label, again) = (label(), OwnerToken::random());
        assert_eq!(
            store.claim(claim(&k, &f, again, 4_000, &label)).await,
            Ok(Claim::Acquired {
                fence: 2,
                reopened: true
            }),
            "from version {version}"
        );
        let requested = HistoryEntry::new(at(4_000), HistoryEvent::ApprovalRequested, 2);
        let request = TransitionRequest {
            key: &k,
            fence: 2,
            seen: Seen::InProgress {
                owner: again,
                lease_until: None,
            },
            target: Target::AwaitingApproval,
            now: at(4_000),
            expires_at: at(4_000),
            entry: requested,
        };
        assert_eq!(
            store.transition(request).await,
            Ok(true),
            "from version {version}"
        );
        assert_eq!(
            read(&store, &k, 4_000).await.state,
            RecordState::AwaitingApproval { since: at(4_000) }
        );
        assert_eq!(history(&store, &k, 4_000).await.entries.len(), 4);
    }
}
