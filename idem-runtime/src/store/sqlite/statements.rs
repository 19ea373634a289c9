//! The statements of the store's operations, each one statement or one `BEGIN IMMEDIATE`
//! transaction (S2), and the decoding of a row into a [`Record`].
//!
//! Every value is bound as a named parameter, never spliced into SQL. Times are compared
//! with the `now` the engine passes in, never SQLite's clock (S8).

use std::path::Path;

use rusqlite::{named_params, Connection, OptionalExtension, TransactionBehavior};

use super::error::{corrupt, db_error};
use super::history::{append_history, claimed_entry, live};
use super::values::{fence_to_sql, owner_to_sql, to_sql};
use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::store::sql_row::{self, SqlLabel, SqlRow};
use crate::store::{Claim, ClaimRequest, CompleteRequest, Completion, OwnerToken, Record};
use crate::store::{MarkUnknownRequest, RecordState, RenewRequest, StoreError, TakeoverRequest};

/// The fence after the stored one, saturating at `i64::MAX` (F1).
macro_rules! next_fence {
    () => {
        "(CASE WHEN idem_records.fence < 9223372036854775807
               THEN idem_records.fence + 1 ELSE idem_records.fence END)"
    };
}

/// Insert if absent, or replace an expired completed row (S2, S8): only a completed row
/// expires, so a row in any other state (awaiting approval and approved included, A2) is
/// live and conflicts. A new key gets fence 1; a
/// claim over an expired row gets its fence + 1, saturating at `i64::MAX` (F1). The
/// history starts over with one `claimed` entry (U7). Returns the new fence, or no row
/// when a live record holds the key (nothing written).
const CLAIM: &str = concat!(
    "
INSERT INTO idem_records
    (key, fingerprint, created_at, expires_at, owner, lease_until, fence,
     tool, namespace, scope, key_args, history, history_len, history_dropped)
VALUES (:key, :fingerprint, :now, :expires_at, :owner, :lease_until, 1,
        :tool, :namespace, :scope, :key_args, ",
    claimed_entry!("1"),
    ", 1, 0)
ON CONFLICT (key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    created_at = excluded.created_at,
    expires_at = excluded.expires_at,
    owner = excluded.owner,
    lease_until = excluded.lease_until,
    unknown_since = NULL,
    outcome = NULL,
    completed_at = NULL,
    source = NULL,
    decided_at = NULL,
    approval_at = NULL,
    approval_until = NULL,
    tool = excluded.tool,
    namespace = excluded.namespace,
    scope = excluded.scope,
    key_args = excluded.key_args,
    fence = ",
    next_fence!(),
    ",
    history = ",
    claimed_entry!(next_fence!()),
    ",
    history_len = 1,
    history_dropped = 0
WHERE idem_records.outcome IS NOT NULL AND idem_records.expires_at <= :now
RETURNING fence
"
);

/// Claim a row decided not applied with the claim's fingerprint (U6): in progress again
/// with the next fence, the history kept and a `claimed` entry appended (U7). Returns the
/// new fence.
const REOPEN: &str = concat!(
    "
UPDATE idem_records SET
    created_at = :now,
    expires_at = :expires_at,
    owner = :owner,
    lease_until = :lease_until,
    decided_at = NULL,
    tool = :tool,
    namespace = :namespace,
    scope = :scope,
    key_args = :key_args,
    fence = ",
    next_fence!(),
    ",
    ",
    append_history!(claimed_entry!(next_fence!())),
    "
WHERE key = :key AND decided_at IS NOT NULL AND fingerprint = :fingerprint
RETURNING fence
"
);

/// The columns [`Row::read`] decodes, in a `SELECT`.
macro_rules! record_columns {
    () => {
        "fingerprint, created_at, expires_at, fence, owner, lease_until, unknown_since,
       outcome, completed_at, source, decided_at, approval_at, approval_until,
       tool, namespace, scope, key_args"
    };
}
pub(super) use record_columns;

const READ_LIVE: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM idem_records WHERE key = :key AND ",
    live!()
);

/// Compare-and-set on the seen owner and lease of a row in progress or outcome unknown
/// (only those have an owner, and they are always live, S8) (S6, U1).
const TAKE_OVER: &str = concat!(
    "
UPDATE idem_records
SET owner = :owner, lease_until = :lease_until, unknown_since = NULL,
    created_at = :now, expires_at = :expires_at, fence = :fence,
    tool = :tool, namespace = :namespace, scope = :scope, key_args = :key_args,
    ",
    append_history!(":entry"),
    "
WHERE key = :key AND owner = :seen_owner AND lease_until = :seen_lease_until
"
);

/// Compare-and-set on the owner of a row in progress (L1). No history entry.
const RENEW: &str = "
UPDATE idem_records SET lease_until = :lease_until, expires_at = MAX(expires_at, :lease_until)
WHERE key = :key AND owner = :owner AND unknown_since IS NULL
";

/// Compare-and-set on the owner of a row in progress; owner and lease stay (U1).
const MARK_UNKNOWN: &str = concat!(
    "
UPDATE idem_records SET unknown_since = :since, ",
    append_history!(":entry"),
    "
WHERE key = :key AND owner = :owner AND unknown_since IS NULL
"
);

/// Compare-and-set on the owner of a row in progress (S6); `created_at` and `expires_at`
/// stay.
const COMPLETE: &str = concat!(
    "
UPDATE idem_records
SET owner = NULL, lease_until = NULL, outcome = :outcome, completed_at = :now,
    source = :source, ",
    append_history!(":entry"),
    "
WHERE key = :key AND owner = :owner AND unknown_since IS NULL
"
);

/// Compare-and-delete on the owner of a row in progress (S4, S7): the history goes with it.
const RELEASE: &str = "
DELETE FROM idem_records WHERE key = :key AND owner = :owner AND unknown_since IS NULL
";

/// Garbage (G1, as [`is_garbage`](crate::store::is_garbage)): completed and expired at or
/// before the cutoff; a row in any other state never is. At most `:limit` rows (all when
/// negative); the partial `expires_at` index, which holds only completed rows, finds them.
const COLLECT: &str = "
DELETE FROM idem_records WHERE key IN (
    SELECT key FROM idem_records
    WHERE outcome IS NOT NULL AND expires_at <= :cutoff
    LIMIT :limit)
";

/// The parameters of a claim, owned so that they can move to the blocking pool.
pub(super) struct ClaimValues {
    key: String,
    fingerprint: String,
    owner: String,
    now: Timestamp,
    lease_until: i64,
    expires_at: i64,
    label: SqlLabel,
}

impl ClaimValues {
    pub(super) fn of(req: &ClaimRequest<'_>) -> Self {
        ClaimValues {
            key: req.key.as_str().to_owned(),
            fingerprint: req.fingerprint.as_str().to_owned(),
            owner: owner_to_sql(req.owner),
            now: req.now,
            lease_until: to_sql(req.lease_until),
            expires_at: to_sql(req.expires_at),
            label: SqlLabel::of(req.label),
        }
    }
}

/// One `BEGIN IMMEDIATE` transaction: [`CLAIM`] (insert if absent or expired); when it
/// wrote nothing, the live row, and [`REOPEN`] when that row is decided not applied with
/// the claim's fingerprint (U6), else that row as [`Claim::Existing`] (a row awaiting
/// approval or approved included: only a transition takes it, A2, A4); and, when `collect` gives a cutoff, the deletion of at
/// most `batch` garbage rows ([`collect`]).
pub(super) fn claim(
    conn: &mut Connection,
    path: &Path,
    v: &ClaimValues,
    collect: Option<(Timestamp, i64)>,
) -> Result<Claim, StoreError> {
    let failed = |e| db_error(path, "claim", e);
    let tx = conn
        .transaction_with_behavior(TransactionBehavior::Immediate)
        .map_err(failed)?;
    let fence: Option<i64> = tx
        .prepare_cached(CLAIM)
        .and_then(|mut statement| {
            statement.query_row(
                named_params! {
                    ":key": v.key,
                    ":fingerprint": v.fingerprint,
                    ":now": to_sql(v.now),
                    ":expires_at": v.expires_at,
                    ":owner": v.owner,
                    ":lease_until": v.lease_until,
                    ":tool": v.label.tool,
                    ":namespace": v.label.namespace,
                    ":scope": v.label.scope,
                    ":key_args": v.label.key_args,
                },
                |row| row.get(0),
            )
        })
        .optional()
        .map_err(failed)?;
    let claim = match fence {
        Some(fence) => Claim::Acquired {
            fence: decode_fence(path, &v.key, fence)?,
            reopened: false,
        },
        None => {
            let held = read_live(&tx, path, &v.key, v.now)?.ok_or_else(|| {
                corrupt(path, &v.key, "claim conflicted with a row that is not live")
            })?;
            let reopens = matches!(held.state, RecordState::NotApplied { .. })
                && held.fingerprint.as_str() == v.fingerprint;
            if reopens {
                Claim::Acquired {
                    fence: reopen(&tx, path, v)?,
                    reopened: true,
                }
            } else {
                Claim::Existing(held)
            }
        }
    };
    if let Some((cutoff, batch)) = collect {
        self::collect(&tx, path, cutoff, batch)?;
    }
    tx.commit().map_err(failed)?;
    Ok(claim)
}

/// [`REOPEN`], inside the claim's transaction, of a row just read as not applied with the
/// claim's fingerprint: the new fence.
fn reopen(conn: &Connection, path: &Path, v: &ClaimValues) -> Result<u64, StoreError> {
    let fence: i64 = conn
        .prepare_cached(REOPEN)
        .and_then(|mut statement| {
            statement.query_row(
                named_params! {
                    ":key": v.key,
                    ":fingerprint": v.fingerprint,
                    ":now": to_sql(v.now),
                    ":expires_at": v.expires_at,
                    ":owner": v.owner,
                    ":lease_until": v.lease_until,
                    ":tool": v.label.tool,
                    ":namespace": v.label.namespace,
                    ":scope": v.label.scope,
                    ":key_args": v.label.key_args,
                },
                |row| row.get(0),
            )
        })
        .map_err(|e| db_error(path, "claim", e))?;
    decode_fence(path, &v.key, fence)
}

/// The parameters of a takeover, owned so that they can move to the blocking pool.
pub(super) struct TakeoverValues {
    key: String,
    seen_owner: String,
    seen_lease_until: i64,
    owner: String,
    now: i64,
    lease_until: i64,
    expires_at: i64,
    fence: i64,
    label: SqlLabel,
    entry: String,
}

impl TakeoverValues {
    pub(super) fn of(req: &TakeoverRequest<'_>) -> Self {
        TakeoverValues {
            key: req.key.as_str().to_owned(),
            seen_owner: owner_to_sql(req.seen_owner),
            seen_lease_until: to_sql(req.seen_lease_until),
            owner: owner_to_sql(req.owner),
            now: to_sql(req.now),
            lease_until: to_sql(req.lease_until),
            expires_at: to_sql(req.expires_at),
            fence: fence_to_sql(req.fence),
            label: SqlLabel::of(req.label),
            entry: req.entry.to_json(),
        }
    }
}

/// One statement: [`TAKE_OVER`]. `true` when the row was taken over.
pub(super) fn take_over(
    conn: &Connection,
    path: &Path,
    v: &TakeoverValues,
) -> Result<bool, StoreError> {
    conn.prepare_cached(TAKE_OVER)
        .and_then(|mut statement| {
            statement.execute(named_params! {
                ":key": v.key,
                ":seen_owner": v.seen_owner,
                ":seen_lease_until": v.seen_lease_until,
                ":owner": v.owner,
                ":now": v.now,
                ":lease_until": v.lease_until,
                ":expires_at": v.expires_at,
                ":fence": v.fence,
                ":tool": v.label.tool,
                ":namespace": v.label.namespace,
                ":scope": v.label.scope,
                ":key_args": v.label.key_args,
                ":entry": v.entry,
            })
        })
        .map(|updated| updated == 1)
        .map_err(|e| db_error(path, "take over", e))
}

/// The parameters of a renewal: key, owner and the new lease deadline (ms).
pub(super) struct RenewValues {
    key: String,
    owner: String,
    lease_until: i64,
}

impl RenewValues {
    pub(super) fn of(req: &RenewRequest<'_>) -> Self {
        RenewValues {
            key: req.key.as_str().to_owned(),
            owner: owner_to_sql(req.owner),
            lease_until: to_sql(req.lease_until),
        }
    }
}

/// One statement: [`RENEW`]. `true` when the lease was extended.
pub(super) fn renew(conn: &Connection, path: &Path, v: &RenewValues) -> Result<bool, StoreError> {
    conn.prepare_cached(RENEW)
        .and_then(|mut statement| {
            statement.execute(named_params! {
                ":key": v.key,
                ":owner": v.owner,
                ":lease_until": v.lease_until,
            })
        })
        .map(|updated| updated == 1)
        .map_err(|e| db_error(path, "renew", e))
}

/// The parameters of a mark-unknown: key, owner, `since` (ms) and the history entry.
pub(super) struct MarkUnknownValues {
    key: String,
    owner: String,
    since: i64,
    entry: String,
}

impl MarkUnknownValues {
    pub(super) fn of(req: &MarkUnknownRequest<'_>) -> Self {
        MarkUnknownValues {
            key: req.key.as_str().to_owned(),
            owner: owner_to_sql(req.owner),
            since: to_sql(req.since),
            entry: req.entry.to_json(),
        }
    }
}

/// One statement: [`MARK_UNKNOWN`]. `true` when the row became outcome unknown.
pub(super) fn mark_unknown(
    conn: &Connection,
    path: &Path,
    v: &MarkUnknownValues,
) -> Result<bool, StoreError> {
    conn.prepare_cached(MARK_UNKNOWN)
        .and_then(|mut statement| {
            statement.execute(named_params! {
                ":key": v.key,
                ":owner": v.owner,
                ":since": v.since,
                ":entry": v.entry,
            })
        })
        .map(|updated| updated == 1)
        .map_err(|e| db_error(path, "mark unknown", e))
}

/// The parameters of a completion, owned so that they can move to the blocking pool.
pub(super) struct CompleteValues {
    key: String,
    owner: String,
    outcome: Envelope,
    source: &'static str,
    now: i64,
    entry: String,
}

impl CompleteValues {
    pub(super) fn of(req: &CompleteRequest<'_>) -> Self {
        CompleteValues {
            key: req.key.as_str().to_owned(),
            owner: owner_to_sql(req.owner),
            outcome: req.outcome.clone(),
            source: req.source.as_str(),
            now: to_sql(req.now),
            entry: req.entry.to_json(),
        }
    }
}

/// One statement: [`COMPLETE`].
pub(super) fn complete(
    conn: &Connection,
    path: &Path,
    v: &CompleteValues,
) -> Result<Completion, StoreError> {
    conn.prepare_cached(COMPLETE)
        .and_then(|mut statement| {
            statement.execute(named_params! {
                ":key": v.key,
                ":owner": v.owner,
                ":outcome": v.outcome.as_str(),
                ":source": v.source,
                ":now": v.now,
                ":entry": v.entry,
            })
        })
        .map(|updated| {
            if updated == 1 {
                Completion::Saved
            } else {
                Completion::Fenced
            }
        })
        .map_err(|e| db_error(path, "complete", e))
}

/// One statement: [`RELEASE`]. `true` when the row was deleted.
pub(super) fn release(
    conn: &Connection,
    path: &Path,
    key: &str,
    owner: OwnerToken,
) -> Result<bool, StoreError> {
    conn.prepare_cached(RELEASE)
        .and_then(|mut statement| {
            statement.execute(named_params! { ":key": key, ":owner": owner_to_sql(owner) })
        })
        .map(|deleted| deleted == 1)
        .map_err(|e| db_error(path, "release", e))
}

/// One statement: [`COLLECT`] with garbage cutoff `cutoff`, at most `limit` rows (all
/// when negative). Returns how many rows it deleted.
pub(super) fn collect(
    conn: &Connection,
    path: &Path,
    cutoff: Timestamp,
    limit: i64,
) -> Result<usize, StoreError> {
    conn.prepare_cached(COLLECT)
        .and_then(|mut statement| {
            statement.execute(named_params! { ":cutoff": to_sql(cutoff), ":limit": limit })
        })
        .map_err(|e| db_error(path, "collect garbage", e))
}

/// The live row of `key` at `now`, decoded.
pub(super) fn read_live(
    conn: &Connection,
    path: &Path,
    key: &str,
    now: Timestamp,
) -> Result<Option<Record>, StoreError> {
    let row: Option<Row> = conn
        .prepare_cached(READ_LIVE)
        .and_then(|mut statement| {
            statement.query_row(
                named_params! { ":key": key, ":now": to_sql(now) },
                Row::read,
            )
        })
        .optional()
        .map_err(|e| db_error(path, "read", e))?;
    row.map(|row| row.decode(path, key)).transpose()
}

/// The columns of [`record_columns`], as stored.
pub(super) struct Row(SqlRow);

impl Row {
    /// Reads the columns [`record_columns`] names, by name, from a row of any query that
    /// selects them.
    pub(super) fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Row(SqlRow {
            fingerprint: row.get("fingerprint")?,
            created_at: row.get("created_at")?,
            expires_at: row.get("expires_at")?,
            fence: row.get("fence")?,
            owner: row.get("owner")?,
            lease_until: row.get("lease_until")?,
            unknown_since: row.get("unknown_since")?,
            outcome: row.get("outcome")?,
            completed_at: row.get("completed_at")?,
            source: row.get("source")?,
            decided_at: row.get("decided_at")?,
            approval_at: row.get("approval_at")?,
            approval_until: row.get("approval_until")?,
            label: SqlLabel {
                tool: row.get("tool")?,
                namespace: row.get("namespace")?,
                scope: row.get("scope")?,
                key_args: row.get("key_args")?,
            },
        }))
    }

    /// The record, or [`StoreErrorKind::Corrupt`](crate::store::StoreErrorKind::Corrupt)
    /// when a value is out of its domain or the columns set match no state.
    pub(super) fn decode(self, path: &Path, key: &str) -> Result<Record, StoreError> {
        self.0.decode(|what| corrupt(path, key, what))
    }
}

fn decode_fence(path: &Path, key: &str, fence: i64) -> Result<u64, StoreError> {
    sql_row::decode_fence(fence, |what| corrupt(path, key, what))
}

#[cfg(test)]
pub(super) mod tests;
