//! Tests of the PostgreSQL store against a server (schema version 5: the upgrade from
//! older versions, the history, the not-applied and approval states, garbage collection),
//! contract P4, U6, U7, G1, S8, I7, A2–A6.
//!
//! The server is `IDEM_TEST_POSTGRES_URL` (default `postgres://postgres@127.0.0.1:5432/test`).
//! Every test works in a fresh schema `idem_unit_<32 hex digits>`, dropped when it is done.

mod approval_matrix;
mod approvals;
mod decisions;
mod gc;
mod history;
mod upgrade;
mod upgrade_v4;

use tokio_postgres::{NoTls, SimpleQueryMessage};

use super::PostgresStore;
use crate::clock::Timestamp;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::label::{RecordLabel, ScopePath};
use crate::store::{
    ClaimRequest, DecisionKind, History, HistoryEntry, HistoryEvent, OwnerToken, Record, Seen,
    Store, Target, TransitionRequest, UnknownReason,
};

fn url() -> String {
    std::env::var("IDEM_TEST_POSTGRES_URL")
        .unwrap_or_else(|_| "postgres://postgres@127.0.0.1:5432/test".to_owned())
}

/// A schema no other test uses, dropped with this value.
struct Schema {
    name: String,
}

impl Schema {
    fn fresh() -> Self {
        Schema {
            name: format!("idem_unit_{:032x}", OwnerToken::random().as_u128()),
        }
    }

    fn store(&self) -> PostgresStore {
        PostgresStore::with_schema(&url(), &self.name).expect("a valid URL and schema")
    }

    fn sql(&self, sql: &str) -> String {
        sql.replace("{schema}", &format!("\"{}\"", self.name))
    }

    /// Runs `sql` (`{schema}`: this schema's quoted name) on a connection of its own.
    async fn admin(&self, sql: &str) {
        let client = connect().await;
        let sql = self.sql(sql);
        if let Err(e) = client.batch_execute(&sql).await {
            panic!("{sql}: {e:?}");
        }
    }

    /// The first column of the first row `sql` answers, as text (`None`: no row or NULL).
    async fn value(&self, sql: &str) -> Option<String> {
        let client = connect().await;
        let sql = self.sql(sql);
        let messages = client.simple_query(&sql).await.expect(&sql);
        messages.into_iter().find_map(|message| match message {
            SimpleQueryMessage::Row(row) => Some(row.get(0).map(str::to_owned)),
            _ => None,
        })?
    }

    async fn version(&self) -> Option<i64> {
        self.value("SELECT value FROM {schema}.meta WHERE name = 'schema_version'")
            .await
            .map(|text| text.parse().expect("a number"))
    }

    /// The records table's columns (after the first `after`), in order, comma-separated.
    async fn columns_after(&self, after: usize) -> Option<String> {
        self.value(&format!(
            "SELECT string_agg(column_name, ',' ORDER BY ordinal_position)
             FROM information_schema.columns
             WHERE table_schema = '{}' AND table_name = 'records' AND ordinal_position > {after}",
            self.name
        ))
        .await
    }

    /// The names of the records table's check constraints, sorted, comma-separated.
    async fn checks(&self) -> Option<String> {
        self.value(&format!(
            "SELECT string_agg(conname, ',' ORDER BY conname) FROM pg_constraint
             WHERE conrelid = '\"{}\".records'::regclass AND contype = 'c'",
            self.name
        ))
        .await
    }
}

impl Drop for Schema {
    /// Drops the schema on a thread of its own (a `Drop` cannot await), also when the test
    /// failed (then a failure to drop is only printed).
    fn drop(&mut self) {
        let sql = format!("DROP SCHEMA IF EXISTS \"{}\" CASCADE", self.name);
        let dropped = std::thread::spawn(move || {
            let runtime = tokio::runtime::Builder::new_current_thread()
                .enable_all()
                .build()
                .map_err(|e| e.to_string())?;
            runtime.block_on(async {
                let (client, connection) = tokio_postgres::connect(&url(), NoTls)
                    .await
                    .map_err(|e| e.to_string())?;
                tokio::spawn(connection);
                client.batch_execute(&sql).await.map_err(|e| e.to_string())
            })
        })
        .join()
        .unwrap_or_else(|_| Err("the thread panicked".to_owned()));
        if let Err(e) = dropped {
            if std::thread::panicking() {
                eprintln!("could not drop the test schema {}: {e}", self.name);
            } else {
                panic!("could not drop the test schema {}: {e}", self.name);
            }
        }
    }
}

async fn connect() -> tokio_postgres::Client {
    let (client, connection) = tokio_postgres::connect(&url(), NoTls)
        .await
        .expect("the test server");
    tokio::spawn(connection);
    client
}

fn key(n: u64) -> IdempotencyKey {
    IdempotencyKey::from_hex(&format!("{n:064x}")).expect("64 hex digits")
}

fn fp(n: u8) -> Fingerprint {
    Fingerprint::from_hex(&format!("{n:02x}").repeat(32)).expect("64 hex digits")
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}

fn label() -> RecordLabel {
    RecordLabel::new("send_refund", ScopePath::new().with("conversation", "c-1"))
}

fn claim<'a>(
    key: &'a IdempotencyKey,
    fingerprint: &'a Fingerprint,
    owner: OwnerToken,
    now: u64,
    label: &'a RecordLabel,
) -> ClaimRequest<'a> {
    ClaimRequest {
        key,
        fingerprint,
        owner,
        now: at(now),
        lease_until: at(now + 1_000),
        expires_at: at(now + 100_000),
        label,
    }
}

fn unknown(now: u64, fence: u64, cause: UnknownReason) -> HistoryEntry {
    HistoryEntry::new(at(now), HistoryEvent::Unknown { cause }, fence)
}

fn resolved(now: u64, fence: u64, decision: DecisionKind) -> HistoryEntry {
    HistoryEntry::new(at(now), HistoryEvent::Resolved { decision }, fence)
        .with_actor("ana", Some("checked the bank".to_owned()))
}

async fn read(store: &PostgresStore, key: &IdempotencyKey, now: u64) -> Record {
    match store.read(key, at(now)).await {
        Ok(Some(record)) => record,
        other => panic!("a live record of {key}, got {other:?}"),
    }
}

async fn history(store: &PostgresStore, key: &IdempotencyKey, now: u64) -> History {
    match store.history(key, at(now)).await {
        Ok(Some(history)) => history,
        other => panic!("the history of {key}, got {other:?}"),
    }
}

/// What the operation `op` starts costs in round trips (made after the first reading: the
/// store starts its task when the future is made).
async fn costs<T, F: std::future::Future<Output = T>>(
    store: &PostgresStore,
    op: impl FnOnce() -> F,
) -> (T, u64) {
    let before = store.round_trips().expect("counted");
    let out = op().await;
    (out, store.round_trips().expect("counted") - before)
}

/// A decision of `key` (outcome unknown, owner `owner`, lease 2 000) as not applied at
/// 1 200, on the fence `fence`.
fn not_applied<'a>(
    key: &'a IdempotencyKey,
    owner: OwnerToken,
    fence: u64,
    entry: &HistoryEntry,
) -> TransitionRequest<'a> {
    TransitionRequest {
        key,
        fence,
        seen: Seen::OutcomeUnknown {
            owner,
            lease_until: at(2_000),
        },
        target: Target::NotApplied,
        now: at(1_200),
        expires_at: at(1_200),
        entry: entry.clone(),
    }
}
