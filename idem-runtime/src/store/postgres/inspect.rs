//! The PostgreSQL store's inspection (contract I3–I5): listing, purging and counting, each
//! one statement. A listing's and a purge-by-filter's statement is built from the filters
//! the query sets (fixed SQL fragments; every value bound as a parameter, never spliced),
//! so that the planner sees only the conditions in force and picks the index that serves
//! them; each such shape is prepared once per pooled connection, as the fixed statements
//! are.

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::ops::to_sql;
use super::sql::{live, ROW};
use super::{Inner, PostgresStore};
use crate::clock::Timestamp;
use crate::key::IdempotencyKey;
use crate::store::{
    KeyedRecord, ListCursor, ListPage, ListQuery, PurgeCounts, PurgeOutcome, StateFilter,
    StoreError, StoreStats,
};

/// Every state, by the names `sql::state_at` gives them (an unknown name, which the
/// statement never answers, counts as in progress, its `ELSE`).
const STATES: [StateFilter; 6] = [
    StateFilter::InProgress,
    StateFilter::OutcomeUnknown,
    StateFilter::Completed,
    StateFilter::NotApplied,
    StateFilter::AwaitingApproval,
    StateFilter::Approved,
];

/// One bound parameter of a built statement.
type Param = Box<dyn ToSql + Sync + Send>;

/// The `WHERE` conditions of a query's filters, and their parameters (`$1` on).
struct Filter {
    conditions: Vec<String>,
    params: Vec<Param>,
}

impl Filter {
    /// Binds `value`, answering its placeholder (`$n`).
    fn bind(&mut self, value: Param) -> String {
        self.params.push(value);
        format!("${}", self.params.len())
    }

    /// The conditions of `query` on live records at `now`: every filter, and the cursor
    /// when `with_cursor` (a purge ignores it).
    ///
    /// - live: `(expires_at > now OR outcome IS NULL)`: a completed row until its expiry,
    ///   any other whatever its expiry (S8; a filter);
    /// - tool: `tool = $n` (index `records_tool_created`); the tool `""` also matches rows
    ///   without a label, as [`ListQuery::matches`] does;
    /// - namespace: `namespace = $n` (no index of its own: a filter on the rows another
    ///   condition selects);
    /// - scope prefix: `scope = $n OR (scope >= $n || '/' AND scope < $n || '0')`, byte
    ///   order (the column's collation is `"C"`): exactly the paths whose parts begin with
    ///   the prefix's, since `/` joins parts, `0` is the byte after `/`, and values
    ///   percent-encode `/` (an equality and a range of index `records_scope`, no `LIKE`);
    /// - state: the state at `now` (I7: an in-progress row whose lease lapsed at or before
    ///   `now` is outcome unknown), from which of `outcome`, `decided_at`, `approval_at`,
    ///   `approval_until`, `unknown_since` is set and `lease_until` (a filter);
    /// - creation range: `created_at >= $n`, `created_at < $n`;
    /// - cursor: `(created_at, key) < ($n, $m)` in listing order, `>` oldest first (index
    ///   `records_created`, or `records_tool_created` after a tool).
    fn of(query: &ListQuery, now: i64, with_cursor: bool) -> Self {
        let mut f = Filter {
            conditions: Vec::new(),
            params: Vec::new(),
        };
        let now = f.bind(Box::new(now));
        f.conditions.push(live(&now));
        if let Some(tool) = &query.tool {
            let empty = tool.is_empty();
            let p = f.bind(Box::new(tool.clone()));
            f.conditions.push(if empty {
                format!("(tool = {p}::TEXT OR tool IS NULL)")
            } else {
                format!("tool = {p}::TEXT")
            });
        }
        if let Some(namespace) = &query.namespace {
            let p = f.bind(Box::new(namespace.clone()));
            f.conditions.push(format!("namespace = {p}::TEXT"));
        }
        if !query.scope.is_global() {
            let p = f.bind(Box::new(query.scope.to_string()));
            f.conditions.push(format!(
                "(scope = {p}::TEXT OR (scope >= ({p}::TEXT || '/') AND scope < ({p}::TEXT || '0')))"
            ));
        }
        if let Some(state) = query.state {
            f.conditions.push(state_condition(state, &now));
        }
        if let Some(from) = query.created_from {
            let p = f.bind(Box::new(to_sql(from)));
            f.conditions.push(format!("created_at >= {p}::BIGINT"));
        }
        if let Some(before) = query.created_before {
            let p = f.bind(Box::new(to_sql(before)));
            f.conditions.push(format!("created_at < {p}::BIGINT"));
        }
        if let (Some(cursor), true) = (&query.after, with_cursor) {
            let created_at = f.bind(Box::new(to_sql(cursor.created_at)));
            let key = f.bind(Box::new(cursor.key.as_str().to_owned()));
            let after = if query.oldest_first { ">" } else { "<" };
            f.conditions.push(format!(
                "(created_at, key COLLATE \"C\") {after} ({created_at}::BIGINT, {key}::TEXT)"
            ));
        }
        f
    }

    /// The conditions joined by `AND`.
    fn sql(&self) -> String {
        self.conditions.join(" AND ")
    }

    fn params(&self) -> Vec<&(dyn ToSql + Sync)> {
        self.params
            .iter()
            .map(|p| p.as_ref() as &(dyn ToSql + Sync))
            .collect()
    }
}

/// The condition of rows in `state` at `now` (a placeholder), as `sql::state_at` names
/// them (I7): a row with an owner is outcome unknown once marked so or once its lease
/// lapsed at or before `now`, else in progress; a row with only `approval_at` awaits
/// approval, one with `approval_until` is approved whatever its validity (A6).
fn state_condition(state: StateFilter, now: &str) -> String {
    match state {
        StateFilter::InProgress => {
            format!("(owner IS NOT NULL AND unknown_since IS NULL AND lease_until > {now})")
        }
        StateFilter::OutcomeUnknown => {
            format!("(owner IS NOT NULL AND (unknown_since IS NOT NULL OR lease_until <= {now}))")
        }
        StateFilter::Completed => "outcome IS NOT NULL".to_owned(),
        StateFilter::NotApplied => "decided_at IS NOT NULL".to_owned(),
        StateFilter::AwaitingApproval => {
            "(approval_at IS NOT NULL AND approval_until IS NULL)".to_owned()
        }
        StateFilter::Approved => "approval_until IS NOT NULL".to_owned(),
    }
}

impl Inner {
    /// The listing statement of `query` at `now` and its parameters: the key and the
    /// record's columns (`sql::ROW`), newest first (oldest first with
    /// [`ListQuery::oldest_first`]), at most one more than a page (which says whether a
    /// next page exists).
    fn list_statement(&self, query: &ListQuery, now: i64) -> (String, Filter) {
        let mut filter = Filter::of(query, now, true);
        let limit = filter.bind(Box::new(i64::try_from(query.page_size() + 1).unwrap_or(1)));
        let order = if query.oldest_first { "ASC" } else { "DESC" };
        let sql = format!(
            "SELECT key, {ROW} FROM {s}.records WHERE {conditions}
             ORDER BY created_at {order}, key COLLATE \"C\" {order} LIMIT {limit}",
            s = self.quoted_schema(),
            conditions = filter.sql(),
        );
        (sql, filter)
    }

    /// One page of live records matching `query` (I3): one statement.
    pub(super) async fn list(&self, query: &ListQuery, now: i64) -> Result<ListPage, StoreError> {
        let (sql, filter) = self.list_statement(query, now);
        let client = self.client().await?;
        let stmt = self.prepare(&client, &sql).await?;
        self.count();
        let rows = client
            .query(&stmt, &filter.params())
            .await
            .map_err(|e| self.db_error("list records", e))?;
        let size = query.page_size();
        let more = rows.len() > size;
        let records = rows
            .iter()
            .take(size)
            .map(|row| self.keyed(row))
            .collect::<Result<Vec<_>, _>>()?;
        let next = more
            .then(|| records.last().map(|r| ListCursor::after(&r.key, &r.record)))
            .flatten();
        Ok(ListPage { records, next })
    }

    /// A listing row: column 0 the key, then the record.
    fn keyed(&self, row: &Row) -> Result<KeyedRecord, StoreError> {
        let text: String = row
            .try_get(0)
            .map_err(|e| self.db_error("list records", e))?;
        let key = IdempotencyKey::from_hex(&text)
            .ok_or_else(|| self.corrupt(&text, "the key is not 64 lower-case hex digits"))?;
        let record = self.decode(&text, row)?;
        Ok(KeyedRecord { key, record })
    }

    /// Deletes `key`'s live record if completed or `force` (I4): one statement.
    pub(super) async fn purge(
        &self,
        key: &str,
        force: bool,
        now: i64,
    ) -> Result<PurgeOutcome, StoreError> {
        let client = self.client().await?;
        let stmt = self.prepare(&client, &self.sql.purge).await?;
        self.count();
        let row = client
            .query_opt(&stmt, &[&key, &now, &force])
            .await
            .map_err(|e| self.db_error("purge", e))?;
        let Some(row) = row else {
            return Ok(PurgeOutcome::Absent);
        };
        let deleted: bool = row.try_get(0).map_err(|e| self.db_error("purge", e))?;
        let record = self.decode(key, &row)?;
        Ok(if deleted {
            PurgeOutcome::Deleted(record)
        } else {
            PurgeOutcome::Kept(record)
        })
    }

    /// Deletes the live records matching `query` (I4): one statement, which without
    /// `force` also counts the matching records it keeps (every record not completed: in
    /// progress, outcome unknown, not applied, awaiting approval, approved), both as of
    /// the statement's snapshot.
    pub(super) async fn purge_matching(
        &self,
        query: &ListQuery,
        force: bool,
        now: i64,
    ) -> Result<PurgeCounts, StoreError> {
        let filter = Filter::of(query, now, false);
        let (s, conditions) = (self.quoted_schema(), filter.sql());
        let sql = if force {
            format!(
                "WITH del AS (DELETE FROM {s}.records WHERE {conditions} RETURNING 1)
                 SELECT count(*), 0::BIGINT FROM del"
            )
        } else {
            format!(
                "WITH del AS (
                    DELETE FROM {s}.records WHERE {conditions} AND outcome IS NOT NULL
                    RETURNING 1
                 )
                 SELECT (SELECT count(*) FROM del),
                        (SELECT count(*) FROM {s}.records WHERE {conditions} AND outcome IS NULL)"
            )
        };
        let client = self.client().await?;
        let stmt = self.prepare(&client, &sql).await?;
        self.count();
        let row = client
            .query_one(&stmt, &filter.params())
            .await
            .map_err(|e| self.db_error("purge records", e))?;
        let count = |i| {
            row.try_get::<_, i64>(i)
                .map(|n| u64::try_from(n).unwrap_or(0))
                .map_err(|e| self.db_error("purge records", e))
        };
        Ok(PurgeCounts {
            deleted: count(0)?,
            kept: count(1)?,
        })
    }

    /// Live records by tool and state at `now` (I5, I7, A6): one statement.
    pub(super) async fn stats(&self, now: i64) -> Result<StoreStats, StoreError> {
        let client = self.client().await?;
        let stmt = self.prepare(&client, &self.sql.stats).await?;
        self.count();
        let rows = client
            .query(&stmt, &[&now])
            .await
            .map_err(|e| self.db_error("count records", e))?;
        let mut stats = StoreStats::default();
        for row in rows {
            let bad = |e| self.db_error("count records", e);
            let tool: Option<String> = row.try_get(0).map_err(bad)?;
            let state: String = row.try_get(1).map_err(bad)?;
            let n: i64 = row.try_get(2).map_err(bad)?;
            let state = STATES
                .into_iter()
                .find(|known| known.as_str() == state)
                .unwrap_or(StateFilter::InProgress);
            stats.add(
                tool.as_deref().unwrap_or_default(),
                state,
                u64::try_from(n).unwrap_or(0),
            );
        }
        Ok(stats)
    }

    /// The schema name, quoted for SQL text (a checked identifier).
    fn quoted_schema(&self) -> String {
        format!("\"{}\"", self.schema)
    }
}

impl PostgresStore {
    /// The plan the server picks for [`Store::list`](crate::Store::list)`(query, now)`:
    /// the text of `EXPLAIN` of the very statement the listing runs, with the same
    /// parameters, one line per plan node. For operators checking which index serves a
    /// listing (`records_created`, `records_tool_created`, `records_scope`; see the
    /// [module documentation](crate::store::postgres)).
    ///
    /// # Errors
    /// As [`Store::list`](crate::Store::list).
    pub async fn explain_list(
        &self,
        query: &ListQuery,
        now: Timestamp,
    ) -> Result<String, StoreError> {
        let query = query.clone();
        self.run(
            move |inner| async move {
                let (sql, filter) = inner.list_statement(&query, to_sql(now));
                let client = inner.client().await?;
                // An unnamed statement: prepared and executed, two round trips.
                inner.count();
                inner.count();
                let rows = client
                    .query(&format!("EXPLAIN {sql}"), &filter.params())
                    .await
                    .map_err(|e| inner.db_error("explain a listing", e))?;
                rows.iter()
                    .map(|row| row.try_get::<_, String>(0))
                    .collect::<Result<Vec<_>, _>>()
                    .map(|lines| lines.join("\n"))
                    .map_err(|e| inner.db_error("explain a listing", e))
            },
            None,
        )
        .await
    }
}

#[cfg(test)]
mod tests {
    use super::Filter;
    use crate::clock::Timestamp;
    use crate::key::IdempotencyKey;
    use crate::label::ScopePath;
    use crate::store::{ListCursor, ListQuery, StateFilter};

    // pins I3: every filter becomes a condition with its values bound as parameters (never in
    // the SQL text), the scope prefix as an equality and a byte-order range, the cursor only
    // when asked
    #[test]
    fn filters_bind_every_value() {
        let query = ListQuery {
            tool: Some("send_refund'; --".to_owned()),
            namespace: Some("acme".to_owned()),
            scope: ScopePath::new().with("conversation", "c%/1"),
            state: Some(StateFilter::Completed),
            created_from: Some(Timestamp::from_millis(5)),
            created_before: Some(Timestamp::from_millis(9)),
            limit: 10,
            after: Some(ListCursor {
                created_at: Timestamp::from_millis(7),
                key: IdempotencyKey::from_hex(&"a".repeat(64)).unwrap(),
            }),
            oldest_first: false,
        };
        let with_cursor = Filter::of(&query, 3, true);
        let sql = with_cursor.sql();
        assert_eq!(with_cursor.params.len(), 8, "{sql}");
        assert!(!sql.contains("send_refund") && !sql.contains("acme") && !sql.contains("c%"));
        assert!(!sql.to_lowercase().contains("like"), "{sql}");
        assert_eq!(
            sql,
            "(expires_at > $1 OR outcome IS NULL) AND tool = $2::TEXT AND namespace = $3::TEXT \
             AND (scope = $4::TEXT OR (scope >= ($4::TEXT || '/') AND scope < ($4::TEXT || '0'))) \
             AND outcome IS NOT NULL AND created_at >= $5::BIGINT AND created_at < $6::BIGINT \
             AND (created_at, key COLLATE \"C\") < ($7::BIGINT, $8::TEXT)"
        );
        let without = Filter::of(&query, 3, false);
        assert_eq!(without.params.len(), 6);
        assert!(!without.sql().contains("$7"));
        let oldest_first = Filter::of(
            &ListQuery {
                oldest_first: true,
                ..query.clone()
            },
            3,
            true,
        );
        assert!(
            oldest_first
                .sql()
                .ends_with("(created_at, key COLLATE \"C\") > ($7::BIGINT, $8::TEXT)"),
            "the cursor continues upward: {}",
            oldest_first.sql()
        );
        let everything = Filter::of(&ListQuery::new(), 3, true);
        assert_eq!(everything.sql(), "(expires_at > $1 OR outcome IS NULL)");
        let unlabelled = Filter::of(&ListQuery::new().tool(""), 3, true);
        assert_eq!(
            unlabelled.sql(),
            "(expires_at > $1 OR outcome IS NULL) AND (tool = $2::TEXT OR tool IS NULL)"
        );
    }

    // pins I7: the state filter is the effective state at `now`, bound as the listing's
    // `now` (never spliced): a lapsed lease is an unknown outcome, not in progress
    #[test]
    fn the_state_filter_is_the_effective_state_at_now() {
        let of = |state| Filter::of(&ListQuery::new().state(state), 3, true).sql();
        assert_eq!(
            of(StateFilter::InProgress),
            "(expires_at > $1 OR outcome IS NULL) AND \
             (owner IS NOT NULL AND unknown_since IS NULL AND lease_until > $1)"
        );
        assert_eq!(
            of(StateFilter::OutcomeUnknown),
            "(expires_at > $1 OR outcome IS NULL) AND \
             (owner IS NOT NULL AND (unknown_since IS NOT NULL OR lease_until <= $1))"
        );
        assert_eq!(
            of(StateFilter::NotApplied),
            "(expires_at > $1 OR outcome IS NULL) AND decided_at IS NOT NULL"
        );
    }

    // pins A6, I7: awaiting approval and approved are states of their own, told apart by
    // the approval columns (no owner, no lease: never in progress nor unknown), each state
    // name the counts' `CASE` answers is a state filter's name
    #[test]
    fn the_approval_states_have_their_own_filters() {
        let of = |state| Filter::of(&ListQuery::new().state(state), 3, true).sql();
        assert_eq!(
            of(StateFilter::AwaitingApproval),
            "(expires_at > $1 OR outcome IS NULL) AND \
             (approval_at IS NOT NULL AND approval_until IS NULL)"
        );
        assert_eq!(
            of(StateFilter::Approved),
            "(expires_at > $1 OR outcome IS NULL) AND approval_until IS NOT NULL"
        );
        let case = crate::store::postgres::sql::state_at("$1");
        for state in super::STATES {
            assert!(case.contains(&format!("'{}'", state.as_str())), "{state}");
        }
        let approval = case.find("'awaiting_approval'").expect("named");
        let lease = case.find("lease_until").expect("named");
        assert!(approval < lease, "tested before the lease: {case}");
    }
}
