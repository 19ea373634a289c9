//! The PostgreSQL store's operations on the server: pooled connections, prepared
//! statements, the claim, and rows decoded into records.

use std::sync::atomic::Ordering;

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::errors::error_text;
use super::sql::ROW_COLUMNS;
use super::{Inner, BACKEND};
use crate::clock::Timestamp;
use crate::store::sql_row::{decode_fence, SqlLabel, SqlRow};
use crate::store::{Claim, History, OwnerToken, Record, RecordState, StoreError, StoreErrorKind};

/// How many times a claim retries after racing with a concurrent claim and release (or a
/// concurrent change of a record decided not applied).
const CLAIM_ATTEMPTS: usize = 8;

impl Inner {
    /// Counts one statement exchange ([`Store::round_trips`](crate::store::Store::round_trips)).
    pub(super) fn count(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    /// A pooled connection, creating the schema (or, opened for inspection, checking it)
    /// first if this store has not yet.
    pub(super) async fn client(&self) -> Result<deadpool_postgres::Client, StoreError> {
        let mut client = self.pool.get().await.map_err(|e| {
            StoreError::new(
                BACKEND,
                StoreErrorKind::Unavailable,
                match &e {
                    deadpool_postgres::PoolError::Backend(e) => {
                        format!("cannot connect to {}: {}", self.url, error_text(e))
                    }
                    e => format!("cannot connect to {}: {e}", self.url),
                },
            )
        })?;
        self.ready
            .get_or_try_init(|| async {
                if self.create {
                    self.set_up(&mut client).await
                } else {
                    self.check_existing(&client).await
                }
            })
            .await?;
        Ok(client)
    }

    pub(super) async fn prepare(
        &self,
        client: &deadpool_postgres::Client,
        sql: &str,
    ) -> Result<tokio_postgres::Statement, StoreError> {
        // A cached statement costs nothing; otherwise preparing is one round trip (the
        // statements use built-in types only, so no type lookups follow). A cache lookup
        // cannot fail, so an error means a prepare was attempted.
        let cached = client.statement_cache.size();
        let prepared = client.prepare_cached(sql).await;
        if prepared.is_err() || client.statement_cache.size() != cached {
            self.count();
        }
        prepared.map_err(|e| self.db_error("prepare a statement", e))
    }

    pub(super) async fn execute(
        &self,
        op: &str,
        sql: &str,
        params: &[&(dyn ToSql + Sync)],
    ) -> Result<u64, StoreError> {
        let client = self.client().await?;
        let stmt = self.prepare(&client, sql).await?;
        self.count();
        client
            .execute(&stmt, params)
            .await
            .map_err(|e| self.db_error(op, e))
    }

    pub(super) async fn claim(
        &self,
        key: &str,
        fingerprint: &str,
        owner: &str,
        times: [i64; 3],
        label: &SqlLabel,
    ) -> Result<Claim, StoreError> {
        let [now, lease_until, expires_at] = times;
        let client = self.client().await?;
        let claim = self.prepare(&client, &self.sql.claim).await?;
        for _ in 0..CLAIM_ATTEMPTS {
            self.count();
            let rows = client
                .query(
                    &claim,
                    &[
                        &key,
                        &fingerprint,
                        &now,
                        &expires_at,
                        &owner,
                        &lease_until,
                        &label.tool,
                        &label.namespace,
                        &label.scope,
                        &label.key_args,
                    ],
                )
                .await
                .map_err(|e| self.db_error("claim", e))?;
            if let Some(row) = rows.first() {
                return self.decode_claim(key, row);
            }
            // Raced with a concurrent first claim committed after the snapshot, or with a
            // change of the record decided not applied that the snapshot showed: read it.
            let read = self.prepare(&client, &self.sql.read_live).await?;
            self.count();
            let rows = client
                .query(&read, &[&key, &now])
                .await
                .map_err(|e| self.db_error("claim", e))?;
            if let Some(row) = rows.first() {
                match self.decode_claim(key, row)? {
                    // Decided not applied again with this fingerprint: claim it afresh.
                    Claim::Existing(Record {
                        state: RecordState::NotApplied { .. },
                        fingerprint: found,
                        ..
                    }) if found.as_str() == fingerprint => continue,
                    claim => return Ok(claim),
                }
            }
        }
        Err(StoreError::new(
            BACKEND,
            StoreErrorKind::Unavailable,
            format!(
                "claim of {key} on {}: the key kept changing under {CLAIM_ATTEMPTS} attempts",
                self.url
            ),
        ))
    }

    /// A row of `claim` (or `read_live`): column 0 says whether the claim was acquired,
    /// and then column 4 holds its fence and the column after the record's (only in
    /// `claim`'s answer) whether it re-claimed a record decided not applied; otherwise
    /// columns 1 to 17 are the live record (awaiting approval and approved included: a
    /// claim never takes those, A2, A4).
    fn decode_claim(&self, key: &str, row: &Row) -> Result<Claim, StoreError> {
        let acquired: bool = row
            .try_get(0)
            .map_err(|e| self.db_error("read a claim", e))?;
        if acquired {
            let bad = |e: tokio_postgres::Error| self.corrupt(key, &e.to_string());
            let fence: i64 = row.try_get(4).map_err(bad)?;
            let reopened: bool = row.try_get(ROW_COLUMNS + 1).map_err(bad)?;
            Ok(Claim::Acquired {
                fence: self.fence(key, fence)?,
                reopened,
            })
        } else {
            self.decode(key, row).map(Claim::Existing)
        }
    }

    pub(super) async fn read(&self, key: &str, now: i64) -> Result<Option<Record>, StoreError> {
        let client = self.client().await?;
        let stmt = self.prepare(&client, &self.sql.read_live).await?;
        self.count();
        let row = client
            .query_opt(&stmt, &[&key, &now])
            .await
            .map_err(|e| self.db_error("read", e))?;
        row.map(|row| self.decode(key, &row)).transpose()
    }

    /// The history of `key`'s live record at `now` (U7): one statement. A row written
    /// before version 4 has an empty history.
    pub(super) async fn history(&self, key: &str, now: i64) -> Result<Option<History>, StoreError> {
        let client = self.client().await?;
        let stmt = self.prepare(&client, &self.sql.history).await?;
        self.count();
        let row = client
            .query_opt(&stmt, &[&key, &now])
            .await
            .map_err(|e| self.db_error("read the history", e))?;
        let Some(row) = row else {
            return Ok(None);
        };
        let bad = |e: tokio_postgres::Error| self.corrupt(key, &e.to_string());
        let text: Option<String> = row.try_get(0).map_err(bad)?;
        let dropped: i64 = row.try_get(1).map_err(bad)?;
        let dropped = u64::try_from(dropped)
            .map_err(|_| self.corrupt(key, &format!("negative history_dropped {dropped}")))?;
        Ok(Some(History::from_stored(text.as_deref(), dropped)))
    }

    /// A row of `read_live` (or the live branch of `claim`, or `purge`, or a listing),
    /// columns 1 to 17 (see `sql::ROW`). A row with `unknown_since` is outcome unknown (it
    /// keeps its owner and lease); one with an owner otherwise in progress; one with an
    /// outcome completed (`source` `NULL`: executed, a row written before version 4); one
    /// with only `decided_at` not applied; one with only `approval_at` awaiting approval,
    /// with `approval_at` and `approval_until` approved (A2, A3; both `NULL` in a row
    /// written before version 5). Label columns all `NULL` (a row written before version
    /// 3): no label (P4).
    pub(super) fn decode(&self, key: &str, row: &Row) -> Result<Record, StoreError> {
        let bad = |e: tokio_postgres::Error| self.corrupt(key, &e.to_string());
        let fingerprint: String = row.try_get(1).map_err(bad)?;
        let created_at: i64 = row.try_get(2).map_err(bad)?;
        let expires_at: i64 = row.try_get(3).map_err(bad)?;
        let fence: i64 = row.try_get(4).map_err(bad)?;
        let owner: Option<String> = row.try_get(5).map_err(bad)?;
        let lease_until: Option<i64> = row.try_get(6).map_err(bad)?;
        let unknown_since: Option<i64> = row.try_get(7).map_err(bad)?;
        let outcome: Option<String> = row.try_get(8).map_err(bad)?;
        let completed_at: Option<i64> = row.try_get(9).map_err(bad)?;
        let source: Option<String> = row.try_get(10).map_err(bad)?;
        let decided_at: Option<i64> = row.try_get(11).map_err(bad)?;
        let approval_at: Option<i64> = row.try_get(12).map_err(bad)?;
        let approval_until: Option<i64> = row.try_get(13).map_err(bad)?;
        let label = SqlLabel {
            tool: row.try_get(14).map_err(bad)?,
            namespace: row.try_get(15).map_err(bad)?,
            scope: row.try_get(16).map_err(bad)?,
            key_args: row.try_get(17).map_err(bad)?,
        };
        SqlRow {
            fingerprint,
            created_at,
            expires_at,
            fence,
            owner,
            lease_until,
            unknown_since,
            outcome,
            completed_at,
            source,
            decided_at,
            approval_at,
            approval_until,
            label,
        }
        .decode(|what| self.corrupt(key, what))
    }

    fn fence(&self, key: &str, fence: i64) -> Result<u64, StoreError> {
        decode_fence(fence, |what| self.corrupt(key, what))
    }
}

/// A timestamp as a BIGINT (ms), saturating at `i64::MAX`.
pub(super) fn to_sql(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

/// A fencing token as a BIGINT, saturating at `i64::MAX` (F1: never reached in practice,
/// one more per claim or takeover of one key).
pub(super) fn fence_to_sql(fence: u64) -> i64 {
    i64::try_from(fence).unwrap_or(i64::MAX)
}

/// An owner token as stored: 32 lower-case hex digits.
pub(super) fn owner_to_sql(owner: OwnerToken) -> String {
    owner.to_hex()
}

#[cfg(test)]
mod tests {
    use super::{fence_to_sql, to_sql};
    use crate::clock::Timestamp;

    // pins F1, S8: times and fences are stored as BIGINT, saturating past i64::MAX
    #[test]
    fn times_and_fences_saturate_at_the_bigint_range() {
        assert_eq!(fence_to_sql(1), 1);
        assert_eq!(fence_to_sql(i64::MAX as u64), i64::MAX);
        assert_eq!(fence_to_sql(u64::MAX), i64::MAX);
        assert_eq!(to_sql(Timestamp::from_millis(1_500)), 1_500);
        assert_eq!(to_sql(Timestamp::from_millis(u64::MAX)), i64::MAX);
    }
}
