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
use crate::store::sql_row::{self, SqlLabel, SqlRow};
use crate::store::{Claim, ClaimRequest, Completion, OwnerToken, Record, StoreError};
use crate::store::{MarkUnknownRequest, RenewRequest, TakeoverRequest};

/// Insert if absent or expired (S2, S8). A new key gets fence 1; a claim over an expired
/// row gets its fence + 1, saturating at `i64::MAX` (F1). Returns the new fence, or no
/// row when a live record holds the key (nothing written).
const CLAIM: &str = "
INSERT INTO idem_records
    (key, fingerprint, created_at, expires_at, owner, lease_until, fence,
     tool, namespace, scope, key_args)
VALUES (:key, :fingerprint, :now, :expires_at, :owner, :lease_until, 1,
        :tool, :namespace, :scope, :key_args)
ON CONFLICT (key) DO UPDATE SET
    fingerprint = excluded.fingerprint,
    created_at = excluded.created_at,
    expires_at = excluded.expires_at,
    owner = excluded.owner,
    lease_until = excluded.lease_until,
    unknown_since = NULL,
    outcome = NULL,
    completed_at = NULL,
    tool = excluded.tool,
    namespace = excluded.namespace,
    scope = excluded.scope,
    key_args = excluded.key_args,
    fence = CASE WHEN idem_records.fence < 9223372036854775807
                 THEN idem_records.fence + 1 ELSE idem_records.fence END
WHERE idem_records.expires_at <= :now
RETURNING fence
";

/// The columns [`Row::read`] decodes, in a `SELECT`.
macro_rules! record_columns {
    () => {
        "fingerprint, created_at, expires_at, fence, owner, lease_until, unknown_since,
       outcome, completed_at, tool, namespace, scope, key_args"
    };
}
pub(super) use record_columns;

const READ_LIVE: &str = concat!(
    "SELECT ",
    record_columns!(),
    " FROM idem_records WHERE key = :key AND expires_at > :now"
);

/// Compare-and-set on the seen owner and lease of a live row in progress or outcome
/// unknown (a completed row has no owner) (S6, U1).
const TAKE_OVER: &str = "
UPDATE idem_records
SET owner = :owner, lease_until = :lease_until, unknown_since = NULL,
    created_at = :now, expires_at = :expires_at, fence = :fence,
    tool = :tool, namespace = :namespace, scope = :scope, key_args = :key_args
WHERE key = :key AND owner = :seen_owner AND lease_until = :seen_lease_until
  AND expires_at > :now
";

/// Compare-and-set on the owner of a live row in progress (L1).
const RENEW: &str = "
UPDATE idem_records SET lease_until = :lease_until, expires_at = MAX(expires_at, :lease_until)
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
    label: SqlLabel,
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
            })
        })
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
    conn.prepare_cached(RENEW)
        .and_then(|mut statement| {
            statement.execute(named_params! {
                ":key": v.key,
                ":owner": v.owner,
                ":now": v.now,
                ":lease_until": v.value,
            })
        })
        .map(|updated| updated == 1)
        .map_err(|e| db_error(path, "renew", e))
}

/// One statement: [`MARK_UNKNOWN`]. `true` when the row became outcome unknown.
pub(super) fn mark_unknown(
    conn: &Connection,
    path: &Path,
    v: &OwnerUpdate,
) -> Result<bool, StoreError> {
    conn.prepare_cached(MARK_UNKNOWN)
        .and_then(|mut statement| {
            statement.execute(named_params! {
                ":key": v.key,
                ":owner": v.owner,
                ":now": v.now,
                ":since": v.value,
            })
        })
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
    conn.prepare_cached(COMPLETE)
        .and_then(|mut statement| {
            statement.execute(named_params! {
                ":key": key,
                ":owner": owner_to_sql(owner),
                ":outcome": outcome.as_str(),
                ":now": to_sql(now),
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
pub(super) mod tests {
    use std::path::Path;

    use rusqlite::Connection;

    use super::{claim, collect, complete, mark_unknown, read_live, take_over};
    use super::{ClaimValues, OwnerUpdate, TakeoverValues};
    use crate::clock::Timestamp;
    use crate::envelope::Envelope;
    use crate::key::{Fingerprint, IdempotencyKey};
    use crate::store::{
        is_garbage, Claim, ClaimRequest, Completion, MarkUnknownRequest, OwnerToken,
        StoreErrorKind, TakeoverRequest,
    };

    /// The path errors name for the in-memory test database.
    pub(in crate::store::sqlite) const PATH: &str = ":memory:";

    /// An in-memory database with the current schema.
    pub(in crate::store::sqlite) fn database() -> Connection {
        let mut conn = Connection::open_in_memory().expect("in-memory database");
        super::super::schema::set_up(&mut conn, Path::new(PATH), false).expect("schema");
        conn
    }

    /// The key whose hex digits spell `n`.
    pub(in crate::store::sqlite) fn key(n: u64) -> IdempotencyKey {
        IdempotencyKey::from_hex(&format!("{n:064x}")).expect("64 hex digits")
    }

    /// The instant `ms` milliseconds after the epoch.
    pub(in crate::store::sqlite) fn at(ms: u64) -> Timestamp {
        Timestamp::from_millis(ms)
    }

    /// Claims `key` at `now` with the given lease and expiry.
    fn claim_at(
        conn: &mut Connection,
        key: &IdempotencyKey,
        owner: OwnerToken,
        now: u64,
        lease_until: u64,
        expires_at: u64,
    ) -> Claim {
        let fingerprint = Fingerprint::from_hex(&"a".repeat(64)).expect("64 hex digits");
        let values = ClaimValues::of(&ClaimRequest {
            key,
            fingerprint: &fingerprint,
            owner,
            now: at(now),
            lease_until: at(lease_until),
            expires_at: at(expires_at),
            label: &crate::RecordLabel::default(),
        });
        claim(conn, Path::new(PATH), &values, None).expect("claim")
    }

    // pins G1: the collection statement deletes exactly the rows `is_garbage` calls garbage:
    // every combination of expiry and lease around the cutoff, in progress, outcome unknown
    // and completed
    #[test]
    fn collection_deletes_exactly_the_garbage() {
        let mut conn = database();
        let path = Path::new(PATH);
        let cutoff = at(1_000);
        let mut n = 0;
        let mut keys = Vec::new();
        for expires_at in [999, 1_000, 1_001] {
            for lease_until in [999, 1_000, 1_001] {
                for state in ["in progress", "unknown", "completed"] {
                    n += 1;
                    let (k, owner) = (key(n), OwnerToken::random());
                    let claimed = claim_at(&mut conn, &k, owner, 0, lease_until, expires_at);
                    assert_eq!(claimed, Claim::Acquired { fence: 1 });
                    if state == "unknown" {
                        let unknown = OwnerUpdate::mark_unknown(&MarkUnknownRequest {
                            key: &k,
                            owner,
                            now: at(0),
                            since: at(0),
                        });
                        assert!(mark_unknown(&conn, path, &unknown).unwrap());
                    } else if state == "completed" {
                        let outcome = Envelope::from_stored(r#"{"version":1,"ok":1}"#);
                        let saved = complete(&conn, path, k.as_str(), owner, &outcome, at(0));
                        assert_eq!(saved.unwrap(), Completion::Saved);
                    }
                    let record = read_live(&conn, path, k.as_str(), at(0)).unwrap().unwrap();
                    keys.push((k, state, is_garbage(&record, cutoff)));
                }
            }
        }
        let garbage = keys.iter().filter(|(_, _, garbage)| *garbage).count();
        // completed: 2 expiries at or before the cutoff × 3 leases; in progress and
        // unknown: 2 expiries × 2 leases at or before it, each
        assert_eq!(garbage, 2 * 3 + 2 * (2 * 2));
        assert_eq!(collect(&conn, path, cutoff, -1).unwrap(), garbage);
        for (k, state, garbage) in keys {
            let kept = read_live(&conn, path, k.as_str(), at(0)).unwrap().is_some();
            assert_eq!(kept, !garbage, "{state} {k}");
        }
    }

    // pins G1: a collection during a claim deletes at most its batch
    #[test]
    fn collection_is_bounded_by_its_limit() {
        let mut conn = database();
        for n in 0..5 {
            claim_at(&mut conn, &key(n), OwnerToken::random(), 0, 10, 10);
        }
        assert_eq!(collect(&conn, Path::new(PATH), at(10), 2).unwrap(), 2);
        assert_eq!(collect(&conn, Path::new(PATH), at(10), -1).unwrap(), 3);
    }

    // pins F1: a fence at the largest SQLite integer saturates instead of overflowing into
    // a float, on a claim over an expired row and on a takeover with a fence past it
    #[test]
    fn fences_saturate_at_the_largest_integer() {
        let mut conn = database();
        let path = Path::new(PATH);
        let k = key(1);
        let owner = OwnerToken::random();
        claim_at(&mut conn, &k, owner, 0, 10, 10);
        conn.execute(
            "UPDATE idem_records SET fence = ?1 WHERE key = ?2",
            rusqlite::params![i64::MAX, k.as_str()],
        )
        .unwrap();
        let max = i64::MAX as u64;
        let next = OwnerToken::random();
        let claimed = claim_at(&mut conn, &k, next, 10, 20, 100);
        assert_eq!(claimed, Claim::Acquired { fence: max });
        let takeover = TakeoverValues::of(&TakeoverRequest {
            key: &k,
            seen_owner: next,
            seen_lease_until: at(20),
            owner: OwnerToken::random(),
            now: at(20),
            lease_until: at(30),
            expires_at: at(100),
            fence: u64::MAX,
            label: &crate::RecordLabel::default(),
        });
        assert!(take_over(&conn, path, &takeover).unwrap());
        let record = read_live(&conn, path, k.as_str(), at(20)).unwrap().unwrap();
        assert_eq!(record.fence, max);
    }

    // pins S10, F1, U1: rows that match no state, or hold a fence below 1, are Corrupt
    #[test]
    fn rows_outside_every_state_are_corrupt() {
        let mut conn = database();
        let path = Path::new(PATH);
        conn.execute_batch("PRAGMA ignore_check_constraints = ON")
            .unwrap();
        for (n, change) in [
            "fence = 0",
            "fence = -3",
            // completed and unknown at once
            "owner = NULL, lease_until = NULL, outcome = '{}', completed_at = 5, unknown_since = 1",
            // unknown without a lease
            "lease_until = NULL, unknown_since = 1",
            "unknown_since = -1",
        ]
        .into_iter()
        .enumerate()
        {
            let k = key(n as u64);
            claim_at(&mut conn, &k, OwnerToken::random(), 0, 10, 100);
            conn.execute(
                &format!("UPDATE idem_records SET {change} WHERE key = ?1"),
                [k.as_str()],
            )
            .unwrap();
            let error = read_live(&conn, path, k.as_str(), at(0)).unwrap_err();
            assert_eq!(error.kind, StoreErrorKind::Corrupt, "{change}: {error}");
        }
    }
}
