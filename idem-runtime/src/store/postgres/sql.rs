//! The SQL of the PostgreSQL store's operations (see the module documentation of
//! [`super`]). Every statement names the schema (a checked identifier, quoted) and binds
//! everything else as a parameter: keys, fingerprints, owners, outcomes, times (ms since
//! the Unix epoch, `BIGINT`) and fencing tokens (`BIGINT`).

/// The columns of a record, in the order `Inner::decode` reads them (columns 1 to
/// 13 of `claim`, `read_live`, `purge` and the listing, after column 0: `acquired`,
/// `deleted` or the key). The last four are the label (P1).
pub(super) const ROW: &str = "fingerprint, created_at, expires_at, fence, owner, lease_until, \
                              unknown_since, outcome, completed_at, \
                              tool, namespace, scope, key_args";

/// The server's clock in ms since the Unix epoch: the start of the current statement, so
/// one value per statement (`statement_timestamp()` is stable, so the planner can compare
/// it with the `expires_at` index).
const SERVER_NOW_MS: &str = "floor(extract(epoch FROM statement_timestamp()) * 1000)::BIGINT";

/// A row's state as [`StateFilter::as_str`](crate::store::StateFilter::as_str) names it:
/// completed with an outcome, outcome unknown with `unknown_since`, else in progress.
const STATE: &str = "CASE WHEN outcome IS NOT NULL THEN 'completed' \
                     WHEN unknown_since IS NOT NULL THEN 'outcome_unknown' \
                     ELSE 'in_progress' END";

/// The operations' statements, with the schema name spliced in once.
pub(super) struct Statements {
    /// Insert-if-absent; answers `acquired` and the new fence, or the live row.
    /// `$1` key, `$2` fingerprint, `$3` now, `$4` expires_at, `$5` owner, `$6` lease_until,
    /// `$7` tool, `$8` namespace, `$9` scope, `$10` key_args (the label, P1).
    pub(super) claim: String,
    /// The live row, as the live branch of `claim`. `$1` key, `$2` now.
    pub(super) read_live: String,
    /// Compare-and-set on owner and lease of a row in progress or outcome unknown. `$1`
    /// owner, `$2` lease_until, `$3` now, `$4` expires_at, `$5` key, `$6` seen owner, `$7`
    /// seen lease_until, `$8` fence, `$9` tool, `$10` namespace, `$11` scope, `$12` key_args
    /// (the label, P1).
    pub(super) take_over: String,
    /// Compare-and-set on the owner of a live row in progress: the new lease. `$1`
    /// lease_until, `$2` key, `$3` owner, `$4` now.
    pub(super) renew: String,
    /// Compare-and-set on the owner of a live row in progress: outcome unknown since `$1`.
    /// `$2` key, `$3` owner, `$4` now.
    pub(super) mark_unknown: String,
    /// Compare-and-set on the owner of a live row in progress: the outcome. `$1` outcome,
    /// `$2` completed_at (now), `$3` key, `$4` owner.
    pub(super) complete: String,
    /// Compare-and-delete on the owner of a row in progress. `$1` key, `$2` owner.
    pub(super) release: String,
    /// Deletes at most `$3` garbage rows (G1) by the cutoff `min($1, server now) − $2`.
    pub(super) collect_some: String,
    /// Deletes every garbage row (G1) by the cutoff `min($1, server now) − $2`.
    pub(super) collect_all: String,
    /// Deletes the row of key `$1` if it is live at `$2` (now) and completed, or `$3`
    /// (force) is true, answering `deleted` and the row; otherwise answers the live row kept
    /// (`deleted` false); no row when the key has no live row. An expired row is left to
    /// garbage collection, which judges it by the server's clock too (G1).
    pub(super) purge: String,
    /// Live rows by `$1` (now), counted by tool and state (I5).
    pub(super) stats: String,
}

impl Statements {
    pub(super) fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        // G1: a row is garbage once it expired, and (unless completed) its lease lapsed, at
        // or before the cutoff judged by the caller's clock ($1) and by the server's, less
        // the margin ($2). The expression is stable: evaluated once per statement.
        let cutoff = format!("(LEAST($1::BIGINT, {SERVER_NOW_MS}) - $2::BIGINT)");
        let garbage =
            format!("expires_at <= {cutoff} AND (outcome IS NOT NULL OR lease_until <= {cutoff})");
        Statements {
            claim: format!(
                "WITH live AS (
                    SELECT {ROW} FROM {s}.records WHERE key = $1 AND expires_at > $3
                 ),
                 ins AS (
                    INSERT INTO {s}.records AS r
                        (key, fingerprint, created_at, expires_at, owner, lease_until, fence,
                         tool, namespace, scope, key_args)
                    SELECT $1::TEXT, $2::TEXT, $3::BIGINT, $4::BIGINT, $5::TEXT, $6::BIGINT, 1,
                           $7::TEXT, $8::TEXT, $9::TEXT, $10::TEXT
                    WHERE NOT EXISTS (SELECT 1 FROM live)
                    ON CONFLICT (key) DO UPDATE SET
                        fingerprint = EXCLUDED.fingerprint,
                        created_at = EXCLUDED.created_at,
                        expires_at = EXCLUDED.expires_at,
                        owner = EXCLUDED.owner,
                        lease_until = EXCLUDED.lease_until,
                        fence = CASE WHEN r.fence < 9223372036854775807
                                     THEN r.fence + 1 ELSE r.fence END,
                        unknown_since = NULL,
                        outcome = NULL,
                        completed_at = NULL,
                        tool = EXCLUDED.tool,
                        namespace = EXCLUDED.namespace,
                        scope = EXCLUDED.scope,
                        key_args = EXCLUDED.key_args
                    WHERE r.expires_at <= $3
                    RETURNING r.fence
                 )
                 SELECT TRUE AS acquired, NULL::TEXT, NULL::BIGINT, NULL::BIGINT, fence,
                        NULL::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::TEXT, NULL::BIGINT,
                        NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT
                 FROM ins
                 UNION ALL
                 SELECT FALSE, {ROW} FROM live WHERE NOT EXISTS (SELECT 1 FROM ins)"
            ),
            read_live: format!(
                "SELECT FALSE, {ROW} FROM {s}.records WHERE key = $1 AND expires_at > $2"
            ),
            take_over: format!(
                "UPDATE {s}.records
                 SET owner = $1, lease_until = $2, created_at = $3, expires_at = $4, fence = $8,
                     unknown_since = NULL,
                     tool = $9, namespace = $10, scope = $11, key_args = $12
                 WHERE key = $5 AND owner = $6 AND lease_until = $7 AND expires_at > $3"
            ),
            renew: format!(
                "UPDATE {s}.records SET lease_until = $1, expires_at = GREATEST(expires_at, $1)
                 WHERE key = $2 AND owner = $3 AND unknown_since IS NULL AND expires_at > $4"
            ),
            mark_unknown: format!(
                "UPDATE {s}.records SET unknown_since = $1
                 WHERE key = $2 AND owner = $3 AND unknown_since IS NULL AND expires_at > $4"
            ),
            complete: format!(
                "UPDATE {s}.records
                 SET owner = NULL, lease_until = NULL, outcome = $1, completed_at = $2
                 WHERE key = $3 AND owner = $4 AND unknown_since IS NULL AND expires_at > $2"
            ),
            release: format!(
                "DELETE FROM {s}.records WHERE key = $1 AND owner = $2 AND unknown_since IS NULL"
            ),
            // The garbage test is repeated outside the sub-select: a row re-claimed between
            // the two (READ COMMITTED re-checks the outer condition on the new row) stays.
            collect_some: format!(
                "DELETE FROM {s}.records WHERE key IN
                    (SELECT key FROM {s}.records WHERE {garbage} LIMIT $3)
                 AND {garbage}"
            ),
            collect_all: format!("DELETE FROM {s}.records WHERE {garbage}"),
            // The DELETE sees a row changed since the statement's snapshot as changed (READ
            // COMMITTED re-checks its condition); the kept branch reads the snapshot, so a
            // row kept is answered as the statement found it.
            purge: format!(
                "WITH del AS (
                    DELETE FROM {s}.records
                    WHERE key = $1 AND expires_at > $2 AND (outcome IS NOT NULL OR $3::BOOLEAN)
                    RETURNING {ROW}
                 )
                 SELECT TRUE AS deleted, {ROW} FROM del
                 UNION ALL
                 SELECT FALSE, {ROW} FROM {s}.records
                 WHERE key = $1 AND expires_at > $2 AND NOT EXISTS (SELECT 1 FROM del)"
            ),
            stats: format!(
                "SELECT tool, {STATE}, count(*) FROM {s}.records
                 WHERE expires_at > $1 GROUP BY 1, 2"
            ),
        }
    }
}
