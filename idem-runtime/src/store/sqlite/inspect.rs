//! The inspection statements (I3–I5): listing, purging and counting records.
//!
//! A listing's `WHERE` clause is assembled from fixed fragments, one per filter the query
//! gives, so that SQLite's planner sees only the conditions that apply and can pick the
//! index that serves them; every value (tool, namespace, scope text, times, cursor) is
//! bound as a named parameter, never spliced into SQL, and no filter uses `LIKE`. These
//! statements are prepared afresh on each call rather than kept in the connection's
//! statement cache: their shapes vary with the filters, and inspection is rare, so they
//! would only push the operations' statements out of the cache.
//!
//! Expiry is judged with the `now` the caller passes in (S8), as everywhere in this store.

use std::path::Path;

use rusqlite::types::Value;
use rusqlite::{named_params, Connection, OptionalExtension, ToSql, TransactionBehavior};

use super::error::{corrupt, db_error};
use super::statements::{record_columns, to_sql, Row};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::store::{
    KeyedRecord, ListCursor, ListPage, ListQuery, PurgeCounts, PurgeOutcome, StateFilter,
    StoreError, StoreStats,
};

/// Deletes `:key`'s live row if it is completed, or whatever its state with `:force`, and
/// returns it as it was.
const PURGE: &str = concat!(
    "DELETE FROM idem_records
     WHERE key = :key AND expires_at > :now AND (:force OR outcome IS NOT NULL)
     RETURNING ",
    record_columns!()
);

/// Live rows by tool and state (I5), each state named as [`StateFilter::as_str`] names it.
const STATS: &str = "
SELECT tool, CASE WHEN outcome IS NOT NULL THEN 'completed'
                  WHEN unknown_since IS NOT NULL THEN 'outcome_unknown'
                  ELSE 'in_progress' END AS state,
       COUNT(*)
FROM idem_records WHERE expires_at > :now
GROUP BY tool, state
";

/// The `WHERE` clause of a query's filters and its parameters.
struct Filter {
    sql: String,
    params: Vec<(&'static str, Value)>,
}

impl Filter {
    /// Live rows at `now` matching every filter of `query`, as
    /// [`ListQuery::matches`] decides (the reference semantics), and lying after its
    /// cursor when `cursor` is set:
    ///
    /// - tool: `tool = :tool` (the `(tool, created_at, key)` index); a record without a
    ///   label has the tool `""`, so a filter on `""` also takes `tool IS NULL`;
    /// - namespace: `namespace = :namespace` (a record without one never matches);
    /// - scope prefix `P` (its text): `scope = P` or `P/ <= scope < P0` (`0` is the byte
    ///   after `/`): exactly the texts that begin with `P/`, which are the scopes whose
    ///   parts begin with `P`'s (see [`ScopePath`](crate::label::ScopePath)); two ranges of
    ///   the `(scope)` index. A record without a label matches only the empty prefix;
    /// - state: which of `outcome` and `unknown_since` are set;
    /// - creation time: `created_at >= :from`, `created_at < :before`;
    /// - cursor: `(created_at, key) < (:after_created_at, :after_key)`, a range of the
    ///   `(created_at, key)` index (or of the tool index's tail).
    fn of(query: &ListQuery, now: Timestamp, cursor: bool) -> Self {
        let mut filter = Filter {
            sql: "expires_at > :now".to_owned(),
            params: vec![(":now", Value::Integer(to_sql(now)))],
        };
        match query.tool.as_deref() {
            None => {}
            Some("") => filter.and("(tool IS NULL OR tool = '')", []),
            Some(tool) => filter.and("tool = :tool", [(":tool", text(tool))]),
        }
        if let Some(namespace) = &query.namespace {
            filter.and("namespace = :namespace", [(":namespace", text(namespace))]);
        }
        if !query.scope.is_global() {
            let prefix = query.scope.to_string();
            filter.and(
                "(scope = :scope OR (scope >= :scope_from AND scope < :scope_to))",
                [
                    (":scope_from", text(&format!("{prefix}/"))),
                    (":scope_to", text(&format!("{prefix}0"))),
                    (":scope", Value::Text(prefix)),
                ],
            );
        }
        if let Some(state) = query.state {
            filter.and(state_sql(state), []);
        }
        if let Some(from) = query.created_from {
            filter.and(
                "created_at >= :created_from",
                [(":created_from", Value::Integer(to_sql(from)))],
            );
        }
        if let Some(before) = query.created_before {
            filter.and(
                "created_at < :created_before",
                [(":created_before", Value::Integer(to_sql(before)))],
            );
        }
        if let Some(after) = query.after.as_ref().filter(|_| cursor) {
            filter.and(
                "(created_at, key) < (:after_created_at, :after_key)",
                [
                    (
                        ":after_created_at",
                        Value::Integer(to_sql(after.created_at)),
                    ),
                    (":after_key", text(after.key.as_str())),
                ],
            );
        }
        filter
    }

    fn and<const N: usize>(&mut self, condition: &str, params: [(&'static str, Value); N]) {
        self.sql.push_str(" AND ");
        self.sql.push_str(condition);
        self.params.extend(params);
    }

    /// The parameters, as rusqlite binds them by name.
    fn bound(&self) -> Vec<(&str, &dyn ToSql)> {
        self.params
            .iter()
            .map(|(name, value)| (*name, value as &dyn ToSql))
            .collect()
    }
}

fn text(value: &str) -> Value {
    Value::Text(value.to_owned())
}

/// The condition of rows in `state`, as [`STATS`] tells the states apart.
fn state_sql(state: StateFilter) -> &'static str {
    match state {
        StateFilter::Completed => "outcome IS NOT NULL",
        StateFilter::OutcomeUnknown => "outcome IS NULL AND unknown_since IS NOT NULL",
        StateFilter::InProgress => "outcome IS NULL AND unknown_since IS NULL",
    }
}

/// The `SELECT` of one page of `query` at `now`: at most the page size + 1 rows, newest
/// first, so that one more row than the page says whether a next page exists.
fn list_sql(query: &ListQuery, now: Timestamp) -> Filter {
    let mut filter = Filter::of(query, now, true);
    filter.sql = format!(
        "SELECT key, {} FROM idem_records WHERE {} ORDER BY created_at DESC, key DESC LIMIT :limit",
        record_columns!(),
        filter.sql
    );
    let limit = i64::try_from(query.page_size() + 1).unwrap_or(i64::MAX);
    filter.params.push((":limit", Value::Integer(limit)));
    filter
}

/// One statement: one page of live rows matching `query` at `now` (I3).
pub(super) fn list(
    conn: &Connection,
    path: &Path,
    query: &ListQuery,
    now: Timestamp,
) -> Result<ListPage, StoreError> {
    let failed = |e| db_error(path, "list", e);
    let select = list_sql(query, now);
    let mut statement = conn.prepare(&select.sql).map_err(failed)?;
    let rows = statement
        .query_map(select.bound().as_slice(), |row| {
            Ok((row.get::<_, String>("key")?, Row::read(row)?))
        })
        .map_err(failed)?;
    let mut records = Vec::new();
    for row in rows {
        let (key, row) = row.map_err(failed)?;
        let record = row.decode(path, &key)?;
        let key = IdempotencyKey::from_hex(&key)
            .ok_or_else(|| corrupt(path, &key, "key is not 64 lowercase hex digits"))?;
        records.push(KeyedRecord { key, record });
    }
    let size = query.page_size();
    let more = records.len() > size;
    records.truncate(size);
    let next = more
        .then(|| records.last().map(|r| ListCursor::after(&r.key, &r.record)))
        .flatten();
    Ok(ListPage { records, next })
}

/// One `BEGIN IMMEDIATE` transaction: [`PURGE`], and, when it deleted nothing, the live
/// row it kept (not completed, no `force`) or none (I4). An expired row is left to garbage
/// collection (G1): this caller's clock may run ahead of the others'.
pub(super) fn purge(
    conn: &mut Connection,
    path: &Path,
    key: &str,
    force: bool,
    now: Timestamp,
) -> Result<PurgeOutcome, StoreError> {
    let failed = |e| db_error(path, "purge", e);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(failed)?;
    let deleted: Option<Row> = tx
        .prepare_cached(PURGE)
        .and_then(|mut statement| {
            statement.query_row(
                named_params! { ":key": key, ":now": to_sql(now), ":force": force },
                Row::read,
            )
        })
        .optional()
        .map_err(failed)?;
    let outcome = match deleted {
        Some(row) => PurgeOutcome::Deleted(row.decode(path, key)?),
        None => match super::statements::read_live(&tx, path, key, now)? {
            Some(record) => PurgeOutcome::Kept(record),
            None => PurgeOutcome::Absent,
        },
    };
    tx.commit().map_err(failed)?;
    Ok(outcome)
}

/// One `BEGIN IMMEDIATE` transaction (I4): without `force`, counts the matching rows that
/// are not completed (kept) and deletes the completed ones; with `force`, deletes every
/// matching row. `query`'s limit and cursor do not apply.
pub(super) fn purge_matching(
    conn: &mut Connection,
    path: &Path,
    query: &ListQuery,
    force: bool,
    now: Timestamp,
) -> Result<PurgeCounts, StoreError> {
    let failed = |e| db_error(path, "purge", e);
    let filter = Filter::of(query, now, false);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(failed)?;
    let mut counts = PurgeCounts::default();
    let deletable = if force {
        filter.sql.clone()
    } else {
        let kept: i64 = tx
            .query_row(
                &format!(
                    "SELECT COUNT(*) FROM idem_records WHERE {} AND outcome IS NULL",
                    filter.sql
                ),
                filter.bound().as_slice(),
                |row| row.get(0),
            )
            .map_err(failed)?;
        counts.kept = u64::try_from(kept).unwrap_or(0);
        format!("{} AND outcome IS NOT NULL", filter.sql)
    };
    let deleted = tx
        .execute(
            &format!("DELETE FROM idem_records WHERE {deletable}"),
            filter.bound().as_slice(),
        )
        .map_err(failed)?;
    counts.deleted = deleted as u64;
    tx.commit().map_err(failed)?;
    Ok(counts)
}

/// One statement: [`STATS`] (I5). A row without a label counts under the tool `""`.
pub(super) fn stats(
    conn: &Connection,
    path: &Path,
    now: Timestamp,
) -> Result<StoreStats, StoreError> {
    let failed = |e| db_error(path, "count", e);
    let mut statement = conn.prepare_cached(STATS).map_err(failed)?;
    let rows = statement
        .query_map(named_params! { ":now": to_sql(now) }, |row| {
            Ok((
                row.get::<_, Option<String>>(0)?,
                row.get::<_, String>(1)?,
                row.get::<_, i64>(2)?,
            ))
        })
        .map_err(failed)?;
    let mut stats = StoreStats::default();
    for row in rows {
        let (tool, state, n) = row.map_err(failed)?;
        let state = [
            StateFilter::InProgress,
            StateFilter::OutcomeUnknown,
            StateFilter::Completed,
        ]
        .into_iter()
        .find(|s| s.as_str() == state)
        .unwrap_or(StateFilter::InProgress);
        stats.add(
            tool.as_deref().unwrap_or_default(),
            state,
            u64::try_from(n).unwrap_or(0),
        );
    }
    Ok(stats)
}

#[cfg(test)]
mod tests {
    use std::path::Path;

    use rusqlite::Connection;

    use super::{list, list_sql, purge, purge_matching, Filter};
    use crate::clock::Timestamp;
    use crate::envelope::Envelope;
    use crate::key::{Fingerprint, IdempotencyKey};
    use crate::label::{RecordLabel, ScopePath};
    use crate::store::sqlite::statements::{self, ClaimValues, OwnerUpdate};
    use crate::store::{
        ClaimRequest, KeyedRecord, ListCursor, ListPage, ListQuery, MarkUnknownRequest, OwnerToken,
        PurgeCounts, PurgeOutcome, StateFilter,
    };

    use crate::store::sqlite::statements::tests::{at, database, key, PATH};

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
    /// namespace, in every state, some created at one instant, some expired at `at(50)`,
    /// and some written before labels existed (no label). Returns the keys.
    fn populated() -> (Connection, Vec<IdempotencyKey>) {
        let mut conn = database();
        let path = Path::new(PATH);
        let fingerprint = Fingerprint::from_hex(&"a".repeat(64)).unwrap();
        let mut keys = Vec::new();
        let mut n = 0u64;
        for scope in scopes() {
            for round in 0..6u64 {
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
                let expires = if round == 5 { 40 } else { 1_000 };
                let values = ClaimValues::of(&ClaimRequest {
                    key: &k,
                    fingerprint: &fingerprint,
                    owner,
                    now: at(created),
                    lease_until: at(100),
                    expires_at: at(expires),
                    label: &label,
                });
                statements::claim(&mut conn, path, &values, None).unwrap();
                match round % 3 {
                    0 => {
                        let outcome = Envelope::from_stored(r#"{"version":1,"ok":1}"#);
                        statements::complete(&conn, path, k.as_str(), owner, &outcome, at(20))
                            .unwrap();
                    }
                    1 => {
                        let unknown = OwnerUpdate::mark_unknown(&MarkUnknownRequest {
                            key: &k,
                            owner,
                            now: at(20),
                            since: at(created),
                        });
                        assert!(statements::mark_unknown(&conn, path, &unknown).unwrap());
                    }
                    _ => {}
                }
                if round == 4 {
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
                    ] {
                        queries.push(ListQuery {
                            tool: tool.map(str::to_owned),
                            namespace: namespace.map(str::to_owned),
                            scope: scope.clone(),
                            state,
                            limit: 3,
                            ..ListQuery::new()
                        });
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

    // pins I3: every page the SQL filters and cursor select is the page `ListQuery::matches`
    // (the reference) selects, over scopes whose texts sort next to each other, records with
    // and without a label or namespace, every state, ties on created_at and expired records
    #[test]
    fn listing_selects_what_the_reference_matches() {
        let (conn, keys) = populated();
        let now = at(50);
        let all = live(&conn, &keys, now);
        assert!(all.len() < keys.len(), "some records expired");
        let mut nonempty = 0;
        for query in queries() {
            let mut query = query;
            loop {
                let matching = all
                    .iter()
                    .filter(|r| query.matches(&r.key, &r.record))
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
        assert!(nonempty > 100, "the queries select records: {nonempty}");
    }

    // pins I4: purging by filter deletes the completed records the reference matches and
    // keeps (and counts) the others without force; with force it deletes every match
    #[test]
    fn purging_by_filter_deletes_what_the_reference_matches() {
        let now = at(50);
        for query in queries().into_iter().step_by(7) {
            for force in [false, true] {
                let (mut conn, keys) = populated();
                let before = live(&conn, &keys, now);
                let matching: Vec<_> = before
                    .iter()
                    .filter(|r| query.matches(&r.key, &r.record))
                    .collect();
                let completed =
                    |r: &&KeyedRecord| StateFilter::of(&r.record.state) == StateFilter::Completed;
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
                    .all(|r| !query.matches(&r.key, &r.record) || (!force && !completed(&r))));
            }
        }
    }

    // pins I4, G1: purging a key whose record expired answers Absent and leaves the row to
    // garbage collection (a caller's clock may run ahead of the others'); a live completed
    // record is deleted and returned with its label
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
                    .is_some_and(|r| r.expires_at == at(40))
            })
            .unwrap();
        let purged = purge(&mut conn, path, expired.as_str(), true, at(40)).unwrap();
        assert_eq!(purged, PurgeOutcome::Absent);
        assert_eq!(rows(&conn), held);
        let done = live(&conn, &keys, at(50))
            .into_iter()
            .find(|r| {
                StateFilter::of(&r.record.state) == StateFilter::Completed
                    && r.record.label.is_some()
            })
            .unwrap();
        let purged = purge(&mut conn, path, done.key.as_str(), false, at(50)).unwrap();
        assert_eq!(purged, PurgeOutcome::Deleted(done.record));
        assert_eq!(rows(&conn), held - 1);
    }
}
