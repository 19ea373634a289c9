//! Tests of the schema set-up and of the migrations from every older version.

use std::path::Path;

use rusqlite::Connection;

use super::{set_up, COLUMNS_V3, COLUMNS_V4, META, MIGRATIONS, SCHEMA_V1, SQLITE_SCHEMA_VERSION};
use crate::store::sqlite::history::history;
use crate::store::sqlite::statements::read_live;
use crate::store::sqlite::statements::tests::{
    approved_at, at, awaiting_approval_at, claim_at, complete_at, key, not_applied_at, PATH,
};
use crate::store::sqlite::SqliteOpenError;
use crate::store::OutcomeSource;
use crate::store::{Claim, HistoryEntry, HistoryEvent, OwnerToken, RecordState};

/// The idem tables and indexes of `conn`, as SQLite keeps their definitions.
fn idem_schema(conn: &Connection) -> Vec<(String, String)> {
    let mut statement = conn
        .prepare("SELECT name, sql FROM sqlite_master WHERE name LIKE 'idem%' ORDER BY name")
        .unwrap();
    let rows = statement
        .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
        .unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

fn version(conn: &Connection) -> i64 {
    conn.query_row(
        "SELECT value FROM idem_meta WHERE name = 'schema_version'",
        [],
        |row| row.get(0),
    )
    .unwrap()
}

/// A database as a build of `version` left it, without records.
fn empty_of_version(version: i64) -> Connection {
    let conn = Connection::open_in_memory().unwrap();
    conn.execute_batch(META).unwrap();
    conn.execute_batch(SCHEMA_V1).unwrap();
    conn.execute(
        "INSERT INTO idem_meta (name, value) VALUES ('schema_version', 1)",
        [],
    )
    .unwrap();
    let tx = conn.unchecked_transaction().unwrap();
    for migration in &MIGRATIONS[..(version - 1) as usize] {
        migration(&tx).unwrap();
    }
    tx.commit().unwrap();
    conn.execute(
        "UPDATE idem_meta SET value = ?1 WHERE name = 'schema_version'",
        [version],
    )
    .unwrap();
    conn
}

/// The stored history line of the version-4 records of [`old_file`].
fn v4_line(event: HistoryEvent, at_ms: u64, fence: u64) -> String {
    HistoryEntry::new(at(at_ms), event, fence).to_json()
}

/// A database as a build of `version` (1 to 4) left it, with the records such a build
/// wrote, each in the columns it knew: key 1 completed, key 2 in progress (both
/// version 1), key 3 outcome unknown with fence 2 and key 4 completed with fence 3
/// (version 2), key 5 completed with a label (version 3), key 6 not applied and key 7
/// completed by a person (source resolved), both with a history (version 4).
fn old_file(version: i64) -> Connection {
    let conn = empty_of_version(version);
    let row = |n: u64, columns: &str, values: &str| {
        conn.execute(
            &format!(
                "INSERT INTO idem_records (key, fingerprint, created_at, expires_at, {columns})
                 VALUES ('{}', '{}', 10, 1000, {values})",
                key(n).as_str(),
                "a".repeat(64)
            ),
            [],
        )
        .unwrap();
    };
    let owner = OwnerToken::from_u128(7).to_hex();
    let done = r#"'{"version":1,"ok":1}'"#;
    row(1, "outcome, completed_at", &format!("{done}, 20"));
    row(2, "owner, lease_until", &format!("'{owner}', 100"));
    if version >= 2 {
        row(
            3,
            "owner, lease_until, fence, unknown_since",
            &format!("'{owner}', 100, 2, 10"),
        );
        row(4, "outcome, completed_at, fence", &format!("{done}, 20, 3"));
    }
    if version >= 3 {
        row(
            5,
            "outcome, completed_at, fence, tool, namespace, scope, key_args",
            &format!("{done}, 20, 4, 'refund', 'prod', 'conversation=c-1', '{{\"order\":1}}'"),
        );
    }
    if version >= 4 {
        let claimed = HistoryEntry::claimed(at(10), 5, OwnerToken::from_u128(7)).to_json();
        let decision = crate::store::DecisionKind::NotApplied;
        let decided = v4_line(HistoryEvent::Resolved { decision }, 15, 5);
        row(
            6,
            "fence, tool, scope, decided_at, history, history_len, history_dropped",
            &format!("5, 'refund', '', 15, '{claimed}\n{decided}', 2, 3"),
        );
        let source = crate::store::OutcomeSource::Resolved;
        let completed = v4_line(HistoryEvent::Completed { source }, 20, 6);
        row(
            7,
            "outcome, completed_at, fence, source, history, history_len",
            &format!("{done}, 20, 6, 'resolved', '{completed}', 1"),
        );
    }
    conn
}

/// A row's `source`, `decided_at`, `history`, `history_len` and `history_dropped`.
type NewColumns = (Option<String>, Option<i64>, Option<String>, i64, i64);

/// Every row's columns of version `version`, as text, by key.
fn rows_of(conn: &Connection, version: i64) -> Vec<Vec<Option<String>>> {
    let columns = match version {
        1 => "key, fingerprint, created_at, expires_at, owner, lease_until, outcome, completed_at",
        2 => "key, fingerprint, created_at, expires_at, owner, lease_until, outcome, completed_at, fence, unknown_since",
        3 => COLUMNS_V3,
        _ => COLUMNS_V4,
    };
    let width = columns.split(',').count();
    let mut statement = conn
        .prepare(&format!("SELECT {columns} FROM idem_records ORDER BY key"))
        .unwrap();
    let rows = statement
        .query_map([], |row| {
            (0..width)
                .map(|i| {
                    row.get::<_, rusqlite::types::Value>(i).map(|v| match v {
                        rusqlite::types::Value::Null => None,
                        rusqlite::types::Value::Integer(i) => Some(i.to_string()),
                        rusqlite::types::Value::Text(t) => Some(t),
                        other => Some(format!("{other:?}")),
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        })
        .unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

// pins S11, P4, A2: a new file and files migrated from versions 1, 2, 3 and 4 end with
// one and the same schema (the label, source, decision, history and approval columns, the
// rebuilt table's CHECK and the four indexes included), and setting up a current file
// again changes nothing
#[test]
fn new_and_migrated_files_have_one_schema() {
    let path = Path::new(":memory:");
    let mut new = Connection::open_in_memory().unwrap();
    set_up(&mut new, path, false).unwrap();
    assert_eq!(version(&new), SQLITE_SCHEMA_VERSION);
    assert_eq!(SQLITE_SCHEMA_VERSION, 5);
    let schema = idem_schema(&new);
    let table = &schema
        .iter()
        .find(|(name, _)| name == "idem_records")
        .unwrap()
        .1;
    for column in [
        "unknown_since",
        "tool",
        "namespace",
        "scope",
        "key_args",
        "source",
        "decided_at",
        "history",
        "history_len",
        "history_dropped",
        "approval_at",
        "approval_until",
    ] {
        assert!(table.contains(column), "{column}: {table}");
    }
    let names: Vec<_> = schema.iter().map(|(name, _)| name.as_str()).collect();
    assert_eq!(
        names,
        [
            "idem_meta",
            "idem_records",
            "idem_records_created_at",
            "idem_records_expires_at",
            "idem_records_scope",
            "idem_records_tool",
        ]
    );
    for from in 1..SQLITE_SCHEMA_VERSION {
        let mut migrated = empty_of_version(from);
        assert_eq!(version(&migrated), from);
        set_up(&mut migrated, path, false).unwrap();
        assert_eq!(version(&migrated), SQLITE_SCHEMA_VERSION);
        assert_eq!(idem_schema(&migrated), schema, "from version {from}");
    }
    set_up(&mut new, path, false).unwrap();
    assert_eq!(idem_schema(&new), schema);
}

// pins P4, U6, U7, S1, S3, A2, A3: files of versions 1, 2, 3 and 4 keep every row
// through the upgrade (the 3 → 4 and 4 → 5 steps rebuild the table): each column a
// version wrote is as it was, the records decode in their states with their fences and
// labels; rows written before version 4 count their outcomes as executed and have an
// empty history, rows written at version 4 keep their source and history; no row is in
// an approval state; a completed record replays (a claim answers it); and the rebuilt
// table holds the not-applied and approval states, which older CHECKs forbade
#[test]
fn old_files_keep_every_row_through_the_rebuild() {
    for from in 1..SQLITE_SCHEMA_VERSION {
        let mut conn = old_file(from);
        let before = rows_of(&conn, from);
        let count = before.len();
        assert!(count >= 2);
        set_up(&mut conn, Path::new(PATH), false).unwrap();
        assert_eq!(version(&conn), SQLITE_SCHEMA_VERSION);
        assert_eq!(rows_of(&conn, from), before, "from version {from}");
        let new_columns: Vec<NewColumns> = conn
            .prepare(
                "SELECT source, decided_at, history, history_len, history_dropped
                 FROM idem_records WHERE key <= ?1 ORDER BY key",
            )
            .unwrap()
            .query_map([key(5).as_str()], |r| {
                Ok((r.get(0)?, r.get(1)?, r.get(2)?, r.get(3)?, r.get(4)?))
            })
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap();
        assert_eq!(new_columns, vec![(None, None, None, 0, 0); count.min(5)]);
        let approvals: i64 = conn
            .query_row(
                "SELECT COUNT(*) FROM idem_records
                 WHERE approval_at IS NOT NULL OR approval_until IS NOT NULL",
                [],
                |r| r.get(0),
            )
            .unwrap();
        assert_eq!(approvals, 0, "from version {from}");
        let path = Path::new(PATH);
        for n in 1..=count as u64 {
            let k = key(n);
            let record = read_live(&conn, path, k.as_str(), at(50)).unwrap().unwrap();
            let expected_fence = [1, 1, 2, 3, 4, 5, 6][n as usize - 1];
            assert_eq!(record.fence, expected_fence, "key {n} from {from}");
            assert_eq!(
                record.label.is_some(),
                matches!(n, 5 | 6),
                "key {n} from {from}"
            );
            match (n, &record.state) {
                (1 | 4 | 5, RecordState::Completed { source, .. }) => {
                    assert_eq!(*source, OutcomeSource::Executed)
                }
                (7, RecordState::Completed { source, .. }) => {
                    assert_eq!(*source, OutcomeSource::Resolved)
                }
                (2, RecordState::InProgress { .. }) => {}
                (3, RecordState::OutcomeUnknown { since, .. }) => assert_eq!(*since, at(10)),
                (6, RecordState::NotApplied { decided_at }) => assert_eq!(*decided_at, at(15)),
                (n, state) => panic!("key {n} from {from}: {state:?}"),
            }
            let kept = history(&conn, path, k.as_str(), at(50)).unwrap().unwrap();
            let (entries, dropped) = match n {
                6 => (2, 3),
                7 => (1, 0),
                _ => (0, 0),
            };
            assert_eq!(
                (kept.entries.len(), kept.dropped),
                (entries, dropped),
                "key {n}"
            );
            assert!(kept
                .entries
                .iter()
                .all(|e| !matches!(e.event, HistoryEvent::Unreadable(_))));
        }
        // a completed record replays: a claim answers it and writes nothing
        let done = read_live(&conn, path, key(1).as_str(), at(50)).unwrap();
        let met = claim_at(&mut conn, &key(1), OwnerToken::random(), 50, 100, 1_000);
        assert_eq!(met, Claim::Existing(done.unwrap()), "from version {from}");
        // the old claim in progress completes; a new one is decided not applied, another
        // awaits approval and is approved
        assert_eq!(
            complete_at(&conn, &key(2), OwnerToken::from_u128(7), 60),
            crate::store::Completion::Saved
        );
        let owner = OwnerToken::random();
        claim_at(&mut conn, &key(9), owner, 60, 100, 1_000);
        assert!(not_applied_at(&conn, &key(9), owner, 1, 70));
        let record = read_live(&conn, path, key(9).as_str(), at(70))
            .unwrap()
            .unwrap();
        assert_eq!(record.state, RecordState::NotApplied { decided_at: at(70) });
        claim_at(&mut conn, &key(10), owner, 60, 100, 1_000);
        assert!(awaiting_approval_at(&conn, &key(10), owner, 1, 70));
        assert!(approved_at(&conn, &key(10), 1, 80, 500));
        let record = read_live(&conn, path, key(10).as_str(), at(80))
            .unwrap()
            .unwrap();
        let approved = RecordState::Approved {
            decided_at: at(80),
            until: at(500),
        };
        assert_eq!(record.state, approved, "from version {from}");
    }
}

// pins P4: the rebuilds (from version 3, and from version 4) keep what is not idem's:
// another index and a trigger on the records table are re-created as they were, and a
// view over it reads the new table
#[test]
fn the_rebuild_keeps_other_indexes_triggers_and_views() {
    for from in [3, 4] {
        keeps_other_indexes_triggers_and_views(from);
    }
}

fn keeps_other_indexes_triggers_and_views(from: i64) {
    let mut conn = old_file(from);
    conn.execute_batch(
        "CREATE INDEX audit_by_fingerprint ON idem_records (fingerprint);
         CREATE TABLE audit_log (key TEXT);
         CREATE TRIGGER audit_deletes AFTER DELETE ON idem_records
             BEGIN INSERT INTO audit_log (key) VALUES (old.key); END;
         CREATE VIEW audit_completed AS
             SELECT key FROM idem_records WHERE outcome IS NOT NULL;",
    )
    .unwrap();
    let others = |conn: &Connection| -> Vec<(String, String)> {
        conn.prepare("SELECT name, sql FROM sqlite_master WHERE name LIKE 'audit%' ORDER BY name")
            .unwrap()
            .query_map([], |row| Ok((row.get(0)?, row.get(1)?)))
            .unwrap()
            .collect::<Result<_, _>>()
            .unwrap()
    };
    let before = others(&conn);
    assert_eq!(before.len(), 4);
    set_up(&mut conn, Path::new(PATH), false).unwrap();
    assert_eq!(others(&conn), before, "from version {from}");
    let completed: i64 = conn
        .query_row("SELECT COUNT(*) FROM audit_completed", [], |r| r.get(0))
        .unwrap();
    assert_eq!(completed, if from == 3 { 3 } else { 4 });
    conn.execute("DELETE FROM idem_records WHERE key = ?1", [key(1).as_str()])
        .unwrap();
    let logged: String = conn
        .query_row("SELECT key FROM audit_log", [], |r| r.get(0))
        .unwrap();
    assert_eq!(logged, key(1).as_str());
}

// pins P4, S10: a rebuild that fails (a row the new CHECK refuses, which only a row
// breaking the old one can be) fails the set-up and leaves the file as it was: version,
// schema and rows; from version 3 (two rebuilds) and from version 4 (the last one)
#[test]
fn a_failed_rebuild_leaves_the_file_as_it_was() {
    for from in [3, 4] {
        failed_rebuild_leaves_the_file(from);
    }
}

fn failed_rebuild_leaves_the_file(from: i64) {
    let mut conn = old_file(from);
    conn.execute_batch(
        "PRAGMA ignore_check_constraints = ON;
         UPDATE idem_records SET outcome = NULL, completed_at = NULL WHERE fence = 3;
         PRAGMA ignore_check_constraints = OFF;",
    )
    .unwrap();
    let (schema, rows) = (idem_schema(&conn), rows_of(&conn, from));
    match set_up(&mut conn, Path::new(PATH), false) {
        Err(SqliteOpenError::Setup { message, .. }) => {
            assert!(message.contains("CHECK"), "{message}")
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(version(&conn), from);
    assert_eq!(idem_schema(&conn), schema);
    assert_eq!(rows_of(&conn, from), rows);
}

// pins S10: versions no build wrote are refused and left as they are
#[test]
fn unknown_versions_are_refused() {
    for found in [0, -1, SQLITE_SCHEMA_VERSION + 1] {
        let mut conn = empty_of_version(1);
        conn.execute(
            "UPDATE idem_meta SET value = ?1 WHERE name = 'schema_version'",
            [found],
        )
        .unwrap();
        let before = idem_schema(&conn);
        match set_up(&mut conn, Path::new(":memory:"), false) {
            Err(SqliteOpenError::UnsupportedSchema {
                found: f,
                supported: SQLITE_SCHEMA_VERSION,
                ..
            }) => assert_eq!(f, found),
            other => panic!("version {found}: {other:?}"),
        }
        assert_eq!(idem_schema(&conn), before);
        assert_eq!(version(&conn), found);
    }
}
