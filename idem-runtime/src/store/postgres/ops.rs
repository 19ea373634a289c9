//! The PostgreSQL store's operations on the server: pooled connections, prepared
//! statements, the claim, and rows decoded into records.

use std::sync::atomic::Ordering;

use tokio_postgres::types::ToSql;
use tokio_postgres::Row;

use super::errors::error_text;
use super::{Inner, BACKEND};
use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::Fingerprint;
use crate::store::{Claim, OwnerToken, Record, RecordState, StoreError, StoreErrorKind};

/// How many times a claim retries after racing with a concurrent claim and release.
const CLAIM_ATTEMPTS: usize = 8;

impl Inner {
    /// Counts one statement exchange ([`Store::round_trips`]).
    pub(super) fn count(&self) {
        self.round_trips.fetch_add(1, Ordering::Relaxed);
    }

    /// A pooled connection, creating the schema first if this store has not yet.
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
            .get_or_try_init(|| self.set_up(&mut client))
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
    ) -> Result<Claim, StoreError> {
        let [now, lease_until, expires_at] = times;
        let client = self.client().await?;
        let claim = self.prepare(&client, &self.sql.claim).await?;
        for _ in 0..CLAIM_ATTEMPTS {
            self.count();
            let rows = client
                .query(
                    &claim,
                    &[&key, &fingerprint, &now, &expires_at, &owner, &lease_until],
                )
                .await
                .map_err(|e| self.db_error("claim", e))?;
            if let Some(row) = rows.first() {
                return self.decode_claim(key, row);
            }
            // Raced with a concurrent first claim committed after the snapshot: read it.
            let read = self.prepare(&client, &self.sql.read_live).await?;
            self.count();
            let rows = client
                .query(&read, &[&key, &now])
                .await
                .map_err(|e| self.db_error("claim", e))?;
            if let Some(row) = rows.first() {
                return self.decode_claim(key, row);
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

    fn decode_claim(&self, key: &str, row: &Row) -> Result<Claim, StoreError> {
        let acquired: bool = row
            .try_get(0)
            .map_err(|e| self.db_error("read a claim", e))?;
        if acquired {
            Ok(Claim::Acquired)
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

    /// A row of `read_live` (or the live branch of `claim`), columns 1 to 7.
    fn decode(&self, key: &str, row: &Row) -> Result<Record, StoreError> {
        let bad = |e: tokio_postgres::Error| self.corrupt(key, &e.to_string());
        let fingerprint: String = row.try_get(1).map_err(bad)?;
        let created_at: i64 = row.try_get(2).map_err(bad)?;
        let expires_at: i64 = row.try_get(3).map_err(bad)?;
        let owner: Option<String> = row.try_get(4).map_err(bad)?;
        let lease_until: Option<i64> = row.try_get(5).map_err(bad)?;
        let outcome: Option<String> = row.try_get(6).map_err(bad)?;
        let completed_at: Option<i64> = row.try_get(7).map_err(bad)?;
        let time = |value: i64, column: &str| {
            u64::try_from(value)
                .map(Timestamp::from_millis)
                .map_err(|_| self.corrupt(key, &format!("negative {column} {value}")))
        };
        let fingerprint = Fingerprint::from_hex(&fingerprint)
            .ok_or_else(|| self.corrupt(key, "fingerprint is not 64 lowercase hex digits"))?;
        let state = match (owner, lease_until, outcome, completed_at) {
            (Some(owner), Some(lease_until), None, None) => {
                let owner = OwnerToken::from_hex(&owner)
                    .ok_or_else(|| self.corrupt(key, "owner is not 32 lower-case hex digits"))?;
                RecordState::InProgress {
                    owner,
                    lease_until: time(lease_until, "lease_until")?,
                }
            }
            (None, None, Some(outcome), Some(completed_at)) => RecordState::Completed {
                outcome: Envelope::from_stored(outcome),
                completed_at: time(completed_at, "completed_at")?,
            },
            _ => return Err(self.corrupt(key, "neither in progress nor completed")),
        };
        Ok(Record {
            fingerprint,
            created_at: time(created_at, "created_at")?,
            expires_at: time(expires_at, "expires_at")?,
            state,
        })
    }
}

/// A timestamp as a BIGINT (ms), saturating at `i64::MAX`.
pub(super) fn to_sql(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

pub(super) fn owner_to_sql(owner: OwnerToken) -> String {
    owner.to_hex()
}
