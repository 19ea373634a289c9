//! The statements of the store's operations, each one statement or one `BEGIN IMMEDIATE`
//! transaction (S2), and the decoding of a row into a [`Record`].
//!
//! Every value is bound as a named parameter, never spliced into SQL. Times are compared
//! with the `now` the engine passes in, never SQLite's clock (S8).

use std::path::Path;

use rusqlite::{named_params, Connection, OptionalExtension, TransactionBehavior};

use super::error::{corrupt, db_error};
use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::Fingerprint;
use crate::store::{Claim, ClaimRequest, Completion, OwnerToken, Record, RecordState, StoreError};
use crate::store::{MarkUnknownRequest, RenewRequest, TakeoverRequest};

/// Insert if absent or expired (S2, S8). A new key gets fence 1; a claim over an expired
/// row gets its fence + 1, saturating at `i64::MAX` (F1). Returns the new fence, or no
/// row when a live record holds the key (nothing written).
const CLAIM: &str = "
INSERT INTO idem_records
    (key, fingerprint, created_at, expires_at, owner, lease_until, fence)
VALUES (:key, :fingerprint, :now, :expires_at, :owner, :lease_until, 1)
ON CONFLICT (key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    created_at = excluded.created_at,
    expires_at = excluded.expires_at,
    owner = excluded.owner,
    lease_until = excluded.lease_until,
    unknown_since = NULL,
    outcome = NULL,
    completed_at = NULL,
    fence = CASE WHEN idem_records.fence < 9223372036854775807
                 THEN idem_records.fence + 1 ELSE idem_records.fence END
WHERE idem_records.expires_at <= :now
RETURNING fence
";

const READ_LIVE: &str = "
SELECT fingerprint, created_at, expires_at, fence, owner, lease_until, unknown_since,
       outcome, completed_at
FROM idem_records WHERE key = :key AND expires_at > :now
";

/// Compare-and-set on the seen owner and lease of a live row in progress or outcome
/// unknown (a completed row has no owner) (S6, U1).
const TAKE_OVER: &str = "
UPDATE idem_records
SET owner = :owner, lease_until = :lease_until, unknown_since = NULL,
    created_at = :now, expires_at = :expires_at, fence = :fence
WHERE key = :key AND owner = :seen_owner AND lease_until = :seen_lease_until
  AND expires_at > :now
";

/// Compare-and-set on the owner of a live row in progress (L1).
const RENEW: &str = "
UPDATE idem_records SET lease_until = :lease_until
WHERE key = :key AND owner = :owner AND unknown_since IS NULL AND expires_at > :now
";

/// Compare-and-set on the owner of a live row in progress; owner and lease stay (U1).
const MARK_UNKNOWN: &str = "
UPDATE idem_records SET unknown_since = :since
WHERE key = :key AND owner = :owner AND unknown_since IS NULL AND expires_at > :now
";

/// Compare-and-set on the owner of a live row in progress (S6).
const COMPLETE: &str = "
UPDATE idem_records
SET owner = NULL, lease_until = NULL, outcome = :outcome, completed_at = :now
WHERE key = :key AND owner = :owner AND unknown_since IS NULL AND expires_at > :now
";

/// Compare-and-delete on the owner of a row in progress (S4, S7).
const RELEASE: &str = "
DELETE FROM idem_records WHERE key = :key AND owner = :owner AND unknown_since IS NULL
";

/// Garbage (G1, as [`is_garbage`](crate::store::is_garbage)): expired at or before the
/// cutoff and, unless completed, its lease lapsed at or before it too. At most `:limit`
/// rows (all when negative); the `expires_at` index finds them.
const COLLECT: &str = "
DELETE FROM idem_records WHERE key IN (
    SELECT key FROM idem_records
    WHERE expires_at <= :cutoff AND (outcome IS NOT NULL OR lease_until <= :cutoff)
    LIMIT :limit)
";

/// A timestamp as an SQLite integer (ms), saturating at `i64::MAX`.
pub(super) fn to_sql(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

/// A fencing token as an SQLite integer, saturating at `i64::MAX` (never reached: one
/// claim or takeover of one key per nanosecond would take 292 years).
fn fence_to_sql(fence: u64) -> i64 {
    i64::try_from(fence).unwrap_or(i64::MAX)
}

fn owner_to_sql(owner: OwnerToken) -> String {
    owner.to_hex()
}

/// The parameters of a claim, owned so that they can move to the blocking pool.
pub(super) struct ClaimValues {
    key: String,
    fingerprint: String,
    owner: String,
    now: Timestamp,
    lease_until: i64,
    expires_at: i64,
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
        }
    }
}

/// One `BEGIN IMMEDIATE` transaction: the insert-if-absent-or-expired, the live row when
/// nothing was written, and, when `collect` gives a cutoff, the deletion of at most
/// `batch` garbage rows ([`collect`]).
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
        .query_row(
            CLAIM,
            named_params! {
                ":key": v.key,
                ":fingerprint": v.fingerprint,
                ":now": to_sql(v.now),
                ":expires_at": v.expires_at,
                ":owner": v.owner,
                ":lease_until": v.lease_until,
            },
            |row| row.get(0),
        )
        .optional()
        .map_err(failed)?;
    let claim = match fence {
        Some(fence) => Claim::Acquired {
            fence: decode_fence(path, &v.key, fence)?,
        },
        None => Claim::Existing(read_live(&tx, path, &v.key, v.now)?.ok_or_else(|| {
            corrupt(path, &v.key, "claim conflicted with a row that is not live")
        })?),
    };
    if let Some((cutoff, batch)) = collect {
        self::collect(&tx, path, cutoff, batch)?;
    }
    tx.commit().map_err(failed)?;
    Ok(claim)
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
        }
    }
}

/// One statement: [`TAKE_OVER`]. `true` when the row was taken over.
pub(super) fn take_over(
    conn: &Connection,
    path: &Path,
    v: &TakeoverValues,
) -> Result<bool, StoreError> {
    conn.execute(
        TAKE_OVER,
        named_params! {
            ":key": v.key,
            ":seen_owner": v.seen_owner,
            ":seen_lease_until": v.seen_lease_until,
            ":owner": v.owner,
            ":now": v.now,
            ":lease_until": v.lease_until,
            ":expires_at": v.expires_at,
            ":fence": v.fence,
        },
    )
    .map(|updated| updated == 1)
    .map_err(|e| db_error(path, "take over", e))
}

/// The parameters of a renewal or a mark-unknown: key, owner, `now`, and the new lease
/// deadline or the `since` (ms).
pub(super) struct OwnerUpdate {
    key: String,
    owner: String,
    now: i64,
    value: i64,
}

impl OwnerUpdate {
    pub(super) fn renew(req: &RenewRequest<'_>) -> Self {
        OwnerUpdate {
            key: req.key.as_str().to_owned(),
            owner: owner_to_sql(req.owner),
            now: to_sql(req.now),
            value: to_sql(req.lease_until),
        }
    }

    pub(super) fn mark_unknown(req: &MarkUnknownRequest<'_>) -> Self {
        OwnerUpdate {
            key: req.key.as_str().to_owned(),
            owner: owner_to_sql(req.owner),
            now: to_sql(req.now),
            value: to_sql(req.since),
        }
    }
}

/// One statement: [`RENEW`]. `true` when the lease was extended.
pub(super) fn renew(conn: &Connection, path: &Path, v: &OwnerUpdate) -> Result<bool, StoreError> {
    conn.execute(
        RENEW,
        named_params! {
            ":key": v.key,
            ":owner": v.owner,
            ":now": v.now,
            ":lease_until": v.value,
        },
    )
    .map(|updated| updated == 1)
    .map_err(|e| db_error(path, "renew", e))
}

/// One statement: [`MARK_UNKNOWN`]. `true` when the row became outcome unknown.
pub(super) fn mark_unknown(
    conn: &Connection,
    path: &Path,
    v: &OwnerUpdate,
) -> Result<bool, StoreError> {
    conn.execute(
        MARK_UNKNOWN,
        named_params! {
            ":key": v.key,
            ":owner": v.owner,
            ":now": v.now,
            ":since": v.value,
        },
    )
    .map(|updated| updated == 1)
    .map_err(|e| db_error(path, "mark unknown", e))
}

/// One statement: [`COMPLETE`].
pub(super) fn complete(
    conn: &Connection,
    path: &Path,
    key: &str,
    owner: OwnerToken,
    outcome: &Envelope,
    now: Timestamp,
) -> Result<Completion, StoreError> {
    conn.execute(
        COMPLETE,
        named_params! {
            ":key": key,
            ":owner": owner_to_sql(owner),
            ":outcome": outcome.as_str(),
            ":now": to_sql(now),
        },
    )
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
    conn.execute(
        RELEASE,
        named_params! { ":key": key, ":owner": owner_to_sql(owner) },
    )
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
    conn.execute(
        COLLECT,
        named_params! { ":cutoff": to_sql(cutoff), ":limit": limit },
    )
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
        .query_row(
            READ_LIVE,
            named_params! { ":key": key, ":now": to_sql(now) },
            Row::read,
        )
        .optional()
        .map_err(|e| db_error(path, "read", e))?;
    row.map(|row| row.decode(path, key)).transpose()
}

/// The columns of [`READ_LIVE`], as stored.
struct Row {
    fingerprint: String,
    created_at: i64,
    expires_at: i64,
    fence: i64,
    owner: Option<String>,
    lease_until: Option<i64>,
    unknown_since: Option<i64>,
    outcome: Option<String>,
    completed_at: Option<i64>,
}

impl Row {
    fn read(row: &rusqlite::Row<'_>) -> rusqlite::Result<Self> {
        Ok(Row {
            fingerprint: row.get("fingerprint")?,
            created_at: row.get("created_at")?,
            expires_at: row.get("expires_at")?,
            fence: row.get("fence")?,
            owner: row.get("owner")?,
            lease_until: row.get("lease_until")?,
            unknown_since: row.get("unknown_since")?,
            outcome: row.get("outcome")?,
            completed_at: row.get("completed_at")?,
        })
    }

    /// The record, or [`StoreErrorKind::Corrupt`](crate::store::StoreErrorKind::Corrupt)
    /// when a value is out of its domain or the columns set match no state.
    fn decode(self, path: &Path, key: &str) -> Result<Record, StoreError> {
        let time = |value: i64, column: &str| {
            u64::try_from(value)
                .map(Timestamp::from_millis)
                .map_err(|_| corrupt(path, key, &format!("negative {column} {value}")))
        };
        let fingerprint = Fingerprint::from_hex(&self.fingerprint)
            .ok_or_else(|| corrupt(path, key, "fingerprint is not 64 lowercase hex digits"))?;
        let owner = |owner: &str| {
            OwnerToken::from_hex(owner)
                .ok_or_else(|| corrupt(path, key, "owner is not 32 lower-case hex digits"))
        };
        let state = match (
            self.owner,
            self.lease_until,
            self.unknown_since,
            self.outcome,
            self.completed_at,
        ) {
            (Some(o), Some(lease_until), None, None, None) => RecordState::InProgress {
                owner: owner(&o)?,
                lease_until: time(lease_until, "lease_until")?,
            },
            (Some(o), Some(lease_until), Some(since), None, None) => RecordState::OutcomeUnknown {
                owner: owner(&o)?,
                lease_until: time(lease_until, "lease_until")?,
                since: time(since, "unknown_since")?,
            },
            (None, None, None, Some(outcome), Some(completed_at)) => RecordState::Completed {
                outcome: Envelope::from_stored(outcome),
                completed_at: time(completed_at, "completed_at")?,
            },
            _ => {
                return Err(corrupt(
                    path,
                    key,
                    "neither in progress, outcome unknown nor completed",
                ))
            }
        };
        Ok(Record {
            fingerprint,
            created_at: time(self.created_at, "created_at")?,
            expires_at: time(self.expires_at, "expires_at")?,
            fence: decode_fence(path, key, self.fence)?,
            state,
        })
    }
}

fn decode_fence(path: &Path, key: &str, fence: i64) -> Result<u64, StoreError> {
    u64::try_from(fence)
        .ok()
        .filter(|&fence| fence >= 1)
        .ok_or_else(|| corrupt(path, key, &format!("fence {fence} is not positive")))
}
