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
//! Expiry is judged with the `now` the caller passes in (S8), as everywhere in this store:
//! a row is live while completed and unexpired, or not completed ([`live`]). A row's state
//! is its effective state at that `now` (I7): a row in progress whose lease lapsed at or
//! before it counts as outcome unknown; a row awaiting approval or approved (A6) is in
//! that state whatever the time (it has no owner and no lease), and its approval's
//! `until` does not change it.

use std::path::Path;

use rusqlite::types::Value;
use rusqlite::{named_params, Connection, OptionalExtension, ToSql, TransactionBehavior};

use super::error::{corrupt, db_error};
use super::history::live;
use super::statements::{record_columns, Row};
use super::values::to_sql;
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
     WHERE key = :key AND ",
    live!(),
    " AND (:force OR outcome IS NOT NULL)
     RETURNING ",
    record_columns!()
);

/// Live rows by tool and effective state at `:now` (I5, I7), each state named as
/// [`StateFilter::as_str`] names it and told apart as [`state_sql`] does.
const STATS: &str = concat!(
    "
SELECT tool, CASE WHEN outcome IS NOT NULL THEN 'completed'
                  WHEN decided_at IS NOT NULL THEN 'not_applied'
                  WHEN approval_until IS NOT NULL THEN 'approved'
                  WHEN approval_at IS NOT NULL THEN 'awaiting_approval'
                  WHEN unknown_since IS NOT NULL OR lease_until <= :now THEN 'outcome_unknown'
                  ELSE 'in_progress' END AS state,
       COUNT(*)
FROM idem_records WHERE ",
    live!(),
    "
GROUP BY tool, state
"
);

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
    /// - state: the effective state at `now` ([`state_sql`]);
    /// - creation time: `created_at >= :from`, `created_at < :before`;
    /// - cursor: `(created_at, key) < (:after_created_at, :after_key)` (newest first) or
    ///   `>` ([`ListQuery::oldest_first`]), a range of the `(created_at, key)` index (or of
    ///   the tool index's tail).
    fn of(query: &ListQuery, now: Timestamp, cursor: bool) -> Self {
        let mut filter = Filter {
            sql: live!().to_owned(),
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
                if query.oldest_first {
                    "(created_at, key) > (:after_created_at, :after_key)"
                } else {
                    "(created_at, key) < (:after_created_at, :after_key)"
                },
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

/// The condition of rows whose effective state at `:now` is `state` (I7), as
/// [`StateFilter::at`] decides and [`STATS`] tells the states apart: an owner marks a row
/// in progress or outcome unknown, and a lease that lapsed at or before `:now` makes one in
/// progress count as outcome unknown; `approval_at` alone marks a row awaiting approval,
/// with `approval_until` approved (A6).
fn state_sql(state: StateFilter) -> &'static str {
    match state {
        StateFilter::Completed => "outcome IS NOT NULL",
        StateFilter::NotApplied => "decided_at IS NOT NULL",
        StateFilter::OutcomeUnknown => {
            "owner IS NOT NULL AND (unknown_since IS NOT NULL OR lease_until <= :now)"
        }
        StateFilter::InProgress => {
            "owner IS NOT NULL AND unknown_since IS NULL AND lease_until > :now"
        }
        StateFilter::AwaitingApproval => "approval_at IS NOT NULL AND approval_until IS NULL",
        StateFilter::Approved => "approval_until IS NOT NULL",
    }
}

/// The `SELECT` of one page of `query` at `now`: at most the page size + 1 rows, newest
/// first (or oldest first), so that one more row than the page says whether a next page
/// exists.
fn list_sql(query: &ListQuery, now: Timestamp) -> Filter {
    let mut filter = Filter::of(query, now, true);
    let order = if query.oldest_first {
        "created_at ASC, key ASC"
    } else {
        "created_at DESC, key DESC"
    };
    filter.sql = format!(
        "SELECT key, {} FROM idem_records WHERE {} ORDER BY {order} LIMIT :limit",
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
            StateFilter::NotApplied,
            StateFilter::AwaitingApproval,
            StateFilter::Approved,
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
mod tests;
