//! Tests of the inspection statements, against the reference semantics of `ListQuery::matches`.

use std::path::Path;

use rusqlite::Connection;

use super::{list, list_sql, purge, purge_matching, stats, Filter};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::label::{RecordLabel, ScopePath};
use crate::store::sqlite::statements::{self, ClaimValues};
use crate::store::{
    ClaimRequest, Completion, KeyedRecord, ListCursor, ListPage, ListQuery, OwnerToken,
    PurgeCounts, PurgeOutcome, StateFilter, StoreStats,
};

use crate::store::sqlite::statements::tests::{
    approved_at, at, awaiting_approval_at, complete_at, database, fingerprint, key,
    mark_unknown_at, not_applied_at, PATH,
};

/// The details of `EXPLAIN QUERY PLAN` for `sql` with `filter`'s parameters.
fn plan(conn: &Connection, filter: &Filter, sql: &str) -> Vec<String> {
    let mut statement = conn.prepare(&format!("EXPLAIN QUERY PLAN {sql}")).unwrap();
    let rows = statement
        .query_map(filter.bound().as_slice(), |row| {
            row.get::<_, String>("detail")
        })
        .unwrap();
    rows.collect::<Result<_, _>>().unwrap()
}

fn list_plan(conn: &Connection, query: &ListQuery) -> Vec<String> {
    let select = list_sql(query, at(5));
    plan(conn, &select, &select.sql)
}

fn c9() -> ScopePath {
    ScopePath::new().with("conversation", "c-9")
}

fn cursor() -> ListCursor {
    ListCursor {
        created_at: at(9),
        key: key(9),
    }
}

/// Every line of `plan` that reads the table is an index search with `index`.
fn assert_searches(plan: &[String], index: &str) {
    let reads: Vec<_> = plan.iter().filter(|l| l.contains("idem_records")).collect();
    assert!(!reads.is_empty(), "{plan:?}");
    for line in reads {
        assert!(
            line.starts_with("SEARCH idem_records USING INDEX ") && line.contains(index),
            "{plan:?}"
        );
    }
}

// pins I3: a tool filter is an index range on (tool, created_at, key), which also gives the
// listing order (no sort), with or without a cursor; a scope prefix is two ranges of the
// scope index; a page after a cursor with no filter is a range of (created_at, key); never a
// scan of the table
#[test]
fn tool_and_scope_filters_are_served_by_indexes() {
    let conn = database();
    for query in [
        ListQuery::new().tool("send_refund"),
        ListQuery::new().tool("send_refund").after(cursor()),
        ListQuery::new().tool("send_refund").scope(c9()),
        ListQuery::new()
            .tool("send_refund")
            .state(StateFilter::Completed),
    ] {
        let plan = list_plan(&conn, &query);
        assert_searches(&plan, "idem_records_tool (tool=?");
        assert!(!plan.iter().any(|l| l.contains("TEMP B-TREE")), "{plan:?}");
    }
    let after = list_plan(&conn, &ListQuery::new().tool("send_refund").after(cursor()));
    assert!(after[0].contains("(created_at,key)<(?,?)"), "{after:?}");
    for query in [
        ListQuery::new().scope(c9()),
        ListQuery::new().scope(c9()).after(cursor()),
    ] {
        let plan = list_plan(&conn, &query);
        assert_searches(&plan, "idem_records_scope (scope");
        assert!(plan.iter().any(|l| l.contains("(scope=?)")), "{plan:?}");
        assert!(
            plan.iter().any(|l| l.contains("(scope>? AND scope<?)")),
            "{plan:?}"
        );
    }
    let paged = list_plan(&conn, &ListQuery::new().after(cursor()));
    assert_searches(&paged, "idem_records_created_at ((created_at,key)<(?,?))");
    let first = list_plan(&conn, &ListQuery::new());
    assert_eq!(
        first,
        ["SCAN idem_records USING INDEX idem_records_created_at"]
    );
    // oldest first (I7): the same indexes, read the other way, the cursor a lower bound
    let oldest = list_plan(&conn, &ListQuery::new().oldest_first());
    assert_eq!(
        oldest,
        ["SCAN idem_records USING INDEX idem_records_created_at"]
    );
    let paged = list_plan(&conn, &ListQuery::new().oldest_first().after(cursor()));
    assert_searches(&paged, "idem_records_created_at ((created_at,key)>(?,?))");
    let by_tool = list_plan(
        &conn,
        &ListQuery::new()
            .tool("send_refund")
            .state(StateFilter::OutcomeUnknown)
            .oldest_first()
            .after(cursor()),
    );
    assert_searches(&by_tool, "idem_records_tool (tool=?");
    assert!(
        !by_tool.iter().any(|l| l.contains("TEMP B-TREE")),
        "{by_tool:?}"
    );
    // purging by tool or scope finds the rows by the same indexes
    for (query, index) in [
        (ListQuery::new().tool("send_refund"), "idem_records_tool"),
        (ListQuery::new().scope(c9()), "idem_records_scope"),
    ] {
        let filter = Filter::of(&query, at(5), false);
        let delete = format!("DELETE FROM idem_records WHERE {}", filter.sql);
        assert_searches(&plan(&conn, &filter, &delete), index);
    }
}

/// Scopes whose texts sort next to `conversation=c`'s: longer values, values with
/// encoded `/` and `=`, the bytes on either side of `/`, nested and composite paths.
fn scopes() -> Vec<ScopePath> {
    let conversation = |c: &str| ScopePath::new().with("conversation", c);
    vec![
        ScopePath::new(),
        conversation("c"),
        conversation("c-1"),
        conversation("c.d"),
        conversation("c0"),
        conversation("c/1"),
        conversation("c=1"),
        conversation("c%"),
        conversation("c").with("call", "x"),
        conversation("c").with("call", "y"),
        conversation("c-1").with("call", "x"),
        ScopePath::new().with("tenant", "acme"),
        ScopePath::new()
            .with("tenant", "acme")
            .with("conversation", "c"),
        ScopePath::new()
            .with("tenant", "acme-2")
            .with("conversation", "c"),
        ScopePath::new().with("call", "x"),
    ]
}

/// A database of records over [`scopes`], tools `a`, `b` and `""`, with and without a
/// namespace, in every state at `at(50)`: completed (live, and expired at `at(40)`),
/// outcome unknown (marked, and in progress with a lease that lapsed at `at(30)`), in
/// progress (also overdue: expired at `at(40)` but live, S8), not applied (also
/// overdue), awaiting approval (also without a label) and approved (also overdue, and
/// past its approval's `until`, A6); some created at one instant, some written before
/// labels existed (no label). Returns the keys.
fn populated() -> (Connection, Vec<IdempotencyKey>) {
    let mut conn = database();
    let path = Path::new(PATH);
    let mut keys = Vec::new();
    let mut n = 0u64;
    for scope in scopes() {
        for round in 0..10u64 {
            n += 1;
            let k = key(n * 7919 % 1000);
            let owner = OwnerToken::random();
            let label = RecordLabel {
                tool: ["a", "b", ""][(n % 3) as usize].to_owned(),
                namespace: (round % 2 == 1).then(|| "n".to_owned()),
                scope: scope.clone(),
                key_args: None,
            };
            let created = 10 + n % 4; // ties on created_at
            let expires = if matches!(round, 3 | 5 | 7 | 9) {
                40
            } else {
                1_000
            };
            let lease = if round == 4 { 30 } else { 100 };
            let values = ClaimValues::of(&ClaimRequest {
                key: &k,
                fingerprint: &fingerprint('a'),
                owner,
                now: at(created),
                lease_until: at(lease),
                expires_at: at(expires),
                label: &label,
            });
            statements::claim(&mut conn, path, &values, None).unwrap();
            match round {
                0 | 3 => assert_eq!(complete_at(&conn, &k, owner, 20), Completion::Saved),
                1 => assert!(mark_unknown_at(&conn, &k, owner, 20)),
                6 | 7 => assert!(not_applied_at(&conn, &k, owner, 1, 20)),
                8 | 9 => assert!(awaiting_approval_at(&conn, &k, owner, 1, 20)),
                _ => {}
            }
            if round == 9 {
                assert!(approved_at(&conn, &k, 1, 25, 30 + n % 40));
            }
            if round == 4 || round == 6 || round == 8 {
                conn.execute(
                    "UPDATE idem_records SET tool = NULL, namespace = NULL, scope = NULL
                     WHERE key = ?1",
                    [k.as_str()],
                )
                .unwrap();
            }
            keys.push(k);
        }
    }
    (conn, keys)
}

/// Every live record at `now`, read one by one.
fn live(conn: &Connection, keys: &[IdempotencyKey], now: Timestamp) -> Vec<KeyedRecord> {
    keys.iter()
        .filter_map(|k| {
            statements::read_live(conn, Path::new(PATH), k.as_str(), now)
                .unwrap()
                .map(|record| KeyedRecord {
                    key: k.clone(),
                    record,
                })
        })
        .collect()
}

/// Queries over every scope, tool, namespace and state, some with a creation window.
fn queries() -> Vec<ListQuery> {
    let mut queries = Vec::new();
    for scope in scopes() {
        for tool in [None, Some("a"), Some(""), Some("zz")] {
            for namespace in [None, Some("n")] {
                for state in [
                    None,
                    Some(StateFilter::InProgress),
                    Some(StateFilter::OutcomeUnknown),
                    Some(StateFilter::Completed),
                    Some(StateFilter::NotApplied),
                    Some(StateFilter::AwaitingApproval),
                    Some(StateFilter::Approved),
                ] {
                    for oldest_first in [false, true] {
                        queries.push(ListQuery {
                            tool: tool.map(str::to_owned),
                            namespace: namespace.map(str::to_owned),
                            scope: scope.clone(),
                            state,
                            limit: 3,
                            oldest_first,
                            ..ListQuery::new()
                        });
                    }
                }
            }
        }
        queries.push(ListQuery {
            scope: scope.clone(),
            created_from: Some(at(11)),
            created_before: Some(at(13)),
            limit: 2,
            ..ListQuery::new()
        });
    }
    queries
}

// pins I3, I7, S8, A6: every page the SQL filters and cursor select is the page
// `ListQuery::matches` (the reference) selects, newest and oldest first, over scopes
// whose texts sort next to each other, records with and without a label or namespace,
// every effective state (lapsed leases as outcome unknown, the approval states), ties on
// created_at, expired completed records and overdue records that are not completed
#[test]
fn listing_selects_what_the_reference_matches() {
    let (conn, keys) = populated();
    let now = at(50);
    let all = live(&conn, &keys, now);
    assert!(all.len() < keys.len(), "some records expired");
    assert!(
        all.iter().any(|r| r.record.is_overdue(now)),
        "some are overdue"
    );
    for state in [
        StateFilter::InProgress,
        StateFilter::OutcomeUnknown,
        StateFilter::Completed,
        StateFilter::NotApplied,
        StateFilter::AwaitingApproval,
        StateFilter::Approved,
    ] {
        assert!(all
            .iter()
            .any(|r| StateFilter::at(&r.record.state, now) == state));
    }
    let mut nonempty = 0;
    for query in queries() {
        let mut query = query;
        loop {
            let matching = all
                .iter()
                .filter(|r| query.matches(&r.key, &r.record, now))
                .cloned()
                .collect();
            let expected = ListPage::cut(matching, &query);
            let page = list(&conn, Path::new(PATH), &query, now).unwrap();
            assert_eq!(page, expected, "{query:?}");
            nonempty += usize::from(!page.records.is_empty());
            match page.next {
                Some(cursor) => query.after = Some(cursor),
                None => break,
            }
        }
    }
    assert!(nonempty > 200, "the queries select records: {nonempty}");
}

// pins I4, I7, A6: purging by filter deletes the completed records the reference matches
// and keeps (and counts) the others (in progress, outcome unknown, not applied, awaiting
// approval, approved, overdue or not) without force; with force it deletes every match
#[test]
fn purging_by_filter_deletes_what_the_reference_matches() {
    let now = at(50);
    for query in queries().into_iter().step_by(7) {
        for force in [false, true] {
            let (mut conn, keys) = populated();
            let before = live(&conn, &keys, now);
            let matching: Vec<_> = before
                .iter()
                .filter(|r| query.matches(&r.key, &r.record, now))
                .collect();
            let completed =
                |r: &&KeyedRecord| StateFilter::at(&r.record.state, now) == StateFilter::Completed;
            let deletable = matching.iter().filter(|r| force || completed(r)).count();
            let counts = purge_matching(&mut conn, Path::new(PATH), &query, force, now);
            assert_eq!(
                counts.unwrap(),
                PurgeCounts {
                    deleted: deletable as u64,
                    kept: (matching.len() - deletable) as u64,
                },
                "{query:?} force {force}"
            );
            let after = live(&conn, &keys, now);
            assert_eq!(after.len(), before.len() - deletable, "{query:?}");
            assert!(after
                .iter()
                .all(|r| !query.matches(&r.key, &r.record, now) || (!force && !completed(&r))));
        }
    }
}

// pins I4, G1, S8: purging a key whose completed record expired answers Absent and
// leaves the row to garbage collection (a caller's clock may run ahead of the others');
// an overdue record that is not completed is kept without force and deleted with it; a
// live completed record is deleted and returned with its label
#[test]
fn purging_an_expired_record_leaves_it_to_collection() {
    let (mut conn, keys) = populated();
    let path = Path::new(PATH);
    let rows = |conn: &Connection| -> i64 {
        conn.query_row("SELECT COUNT(*) FROM idem_records", [], |r| r.get(0))
            .unwrap()
    };
    let held = rows(&conn);
    let expired = keys
        .iter()
        .find(|k| {
            statements::read_live(&conn, path, k.as_str(), at(39))
                .unwrap()
                .is_some_and(|r| {
                    r.expires_at == at(40)
                        && StateFilter::at(&r.state, at(39)) == StateFilter::Completed
                })
        })
        .unwrap();
    let purged = purge(&mut conn, path, expired.as_str(), true, at(40)).unwrap();
    assert_eq!(purged, PurgeOutcome::Absent);
    assert_eq!(rows(&conn), held);
    // Overdue records that are not completed are live (S8): kept without force, deleted
    // with it.
    for state in [
        StateFilter::InProgress,
        StateFilter::NotApplied,
        StateFilter::Approved,
    ] {
        let overdue = live(&conn, &keys, at(50))
            .into_iter()
            .find(|r| {
                r.record.is_overdue(at(50)) && StateFilter::at(&r.record.state, at(50)) == state
            })
            .unwrap();
        let kept = purge(&mut conn, path, overdue.key.as_str(), false, at(50)).unwrap();
        assert_eq!(kept, PurgeOutcome::Kept(overdue.record.clone()));
        let deleted = purge(&mut conn, path, overdue.key.as_str(), true, at(50)).unwrap();
        assert_eq!(deleted, PurgeOutcome::Deleted(overdue.record));
    }
    let held = rows(&conn);
    let done = live(&conn, &keys, at(50))
        .into_iter()
        .find(|r| {
            StateFilter::at(&r.record.state, at(50)) == StateFilter::Completed
                && r.record.label.is_some()
        })
        .unwrap();
    let purged = purge(&mut conn, path, done.key.as_str(), false, at(50)).unwrap();
    assert_eq!(purged, PurgeOutcome::Deleted(done.record));
    assert_eq!(rows(&conn), held - 1);
}

// pins I5, I7, A6, S8: the counts by tool and effective state are the reference's
// (`StateFilter::at` of every live record, by its tool, `""` without a label), the
// approval states counted apart from in progress though they hold no lease; expired
// completed records are not counted
#[test]
fn stats_count_what_the_reference_counts() {
    let (conn, keys) = populated();
    for now in [at(35), at(50)] {
        let mut expected = StoreStats::default();
        for r in live(&conn, &keys, now) {
            let tool = r.record.label.as_ref().map_or("", |l| l.tool.as_str());
            expected.add(tool, StateFilter::at(&r.record.state, now), 1);
        }
        assert!(expected.total.awaiting_approval > 0 && expected.total.approved > 0);
        assert_eq!(
            stats(&conn, Path::new(PATH), now).unwrap(),
            expected,
            "{now:?}"
        );
    }
}
