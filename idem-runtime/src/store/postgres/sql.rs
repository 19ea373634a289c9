//! The SQL of the PostgreSQL store's operations (see the module documentation of
//! [`super`]). Every statement names the schema (a checked identifier, quoted) and binds
//! everything else as a parameter: keys, fingerprints, owners, outcomes, times (ms since
//! the Unix epoch, `BIGINT`), fencing tokens (`BIGINT`) and history entries (`TEXT`).

use crate::store::HISTORY_LIMIT;

/// The columns of a record, in the order `Inner::decode` reads them (columns 1 to
/// 17 of `claim`, `read_live`, `purge` and the listing, after column 0: `acquired`,
/// `deleted` or the key). `approval_at` and `approval_until` are the approval states'
/// (A2, A3); the last four are the label (P1).
pub(super) const ROW: &str = "fingerprint, created_at, expires_at, fence, owner, lease_until, \
                              unknown_since, outcome, completed_at, source, decided_at, \
                              approval_at, approval_until, tool, namespace, scope, key_args";

/// How many columns [`ROW`] names: `claim` answers `reopened` after them.
pub(super) const ROW_COLUMNS: usize = 17;

/// The server's clock in ms since the Unix epoch: the start of the current statement, so
/// one value per statement (`statement_timestamp()` is stable, so the planner can compare
/// it with the `expires_at` index).
const SERVER_NOW_MS: &str = "floor(extract(epoch FROM statement_timestamp()) * 1000)::BIGINT";

/// Whether a row is live at `now` (an SQL expression, S8): a completed row until its
/// `expires_at`, a row in any other state (in progress, outcome unknown, not applied,
/// awaiting approval, approved) whatever its `expires_at`.
pub(super) fn live(now: &str) -> String {
    format!("(expires_at > {now} OR outcome IS NULL)")
}

/// A row's state at `now` (an SQL expression) as
/// [`StateFilter::as_str`](crate::store::StateFilter::as_str) names it, the effective state
/// of [`StateFilter::at`](crate::store::StateFilter::at) (I7): completed with an outcome,
/// not applied with `decided_at`, approved with `approval_until`, awaiting approval with
/// only `approval_at` (both tested before the lease: they have none, A6), outcome unknown
/// with `unknown_since` or a lease that lapsed at or before `now`, else in progress.
pub(super) fn state_at(now: &str) -> String {
    format!(
        "CASE WHEN outcome IS NOT NULL THEN 'completed' \
              WHEN decided_at IS NOT NULL THEN 'not_applied' \
              WHEN approval_until IS NOT NULL THEN 'approved' \
              WHEN approval_at IS NOT NULL THEN 'awaiting_approval' \
              WHEN unknown_since IS NOT NULL OR lease_until <= {now} THEN 'outcome_unknown' \
              ELSE 'in_progress' END"
    )
}

/// The `SET` items that append `entry` (an SQL text expression: one stored line, U7) to
/// the history of the row `t` (`"r."` or `""`): when `HISTORY_LIMIT` entries are kept, the
/// first line (up to and including the first newline) is dropped and counted. The right
/// sides read the row as it was, so the three items agree.
fn append_history(t: &str, entry: &str) -> String {
    let limit = HISTORY_LIMIT;
    format!(
        "history = CASE
             WHEN {t}history_len >= {limit}
                 THEN substr({t}history, strpos({t}history, chr(10)) + 1) || chr(10) || {entry}
             WHEN {t}history IS NULL OR {t}history_len = 0 THEN {entry}
             ELSE {t}history || chr(10) || {entry} END,
         history_len = LEAST({t}history_len + 1, {limit}),
         history_dropped = {t}history_dropped
             + CASE WHEN {t}history_len >= {limit} THEN 1 ELSE 0 END"
    )
}

/// The `claimed` entry of a claim (U7) with the fence `fence` (an SQL expression), built as
/// [`HistoryEntry::claimed`](crate::store::HistoryEntry::claimed)`(now, fence,
/// owner).to_json()` writes it, byte for byte: `$3` is the claim's now, `$5` its owner (32
/// hex digits, nothing to escape); a `BIGINT`'s text has no leading zeros.
fn claimed_entry(fence: &str) -> String {
    format!(
        "('{{\"at\":' || $3::BIGINT::TEXT || ',\"event\":\"claimed\",\"fence\":' \
         || ({fence})::TEXT || ',\"owner\":\"' || $5::TEXT || '\"}}')"
    )
}

/// The fence after the row `r`'s: one more, saturating at `i64::MAX` (F1).
const NEXT_FENCE: &str =
    "CASE WHEN r.fence < 9223372036854775807 THEN r.fence + 1 ELSE r.fence END";

/// The operations' statements, with the schema name spliced in once.
pub(super) struct Statements {
    /// Insert-if-absent, or re-claim of a row decided not applied with the same
    /// fingerprint; answers `acquired`, the new fence and `reopened`, or the live row.
    /// `$1` key, `$2` fingerprint, `$3` now, `$4` expires_at, `$5` owner, `$6` lease_until,
    /// `$7` tool, `$8` namespace, `$9` scope, `$10` key_args (the label, P1).
    pub(super) claim: String,
    /// The live row, as the live branch of `claim`. `$1` key, `$2` now.
    pub(super) read_live: String,
    /// Compare-and-set on owner and lease of a row in progress or outcome unknown. `$1`
    /// owner, `$2` lease_until, `$3` now, `$4` expires_at, `$5` key, `$6` seen owner, `$7`
    /// seen lease_until, `$8` fence, `$9` tool, `$10` namespace, `$11` scope, `$12` key_args
    /// (the label, P1), `$13` the history entry.
    pub(super) take_over: String,
    /// Compare-and-set on the owner of a row in progress: the new lease. `$1` lease_until,
    /// `$2` key, `$3` owner.
    pub(super) renew: String,
    /// Compare-and-set on the owner of a row in progress: outcome unknown since `$1`.
    /// `$2` key, `$3` owner, `$4` the history entry.
    pub(super) mark_unknown: String,
    /// Compare-and-set on the owner of a row in progress: the outcome. `$1` outcome,
    /// `$2` completed_at (now), `$3` key, `$4` owner, `$5` source, `$6` the history entry.
    pub(super) complete: String,
    /// Compare-and-delete on the owner of a row in progress. `$1` key, `$2` owner.
    pub(super) release: String,
    /// Compare-and-set on the fence and the state seen (U2, U6, A2–A4): see the function
    /// `transition` of this module for the parameters.
    pub(super) transition: String,
    /// The history of the live row. `$1` key, `$2` now.
    pub(super) history: String,
    /// Deletes at most `$3` garbage rows (G1) by the cutoff `min($1, server now) − $2`.
    pub(super) collect_some: String,
    /// Deletes every garbage row (G1) by the cutoff `min($1, server now) − $2`.
    pub(super) collect_all: String,
    /// Deletes the row of key `$1` if it is live at `$2` (now) and completed, or `$3`
    /// (force) is true, answering `deleted` and the row; otherwise answers the live row kept
    /// (`deleted` false); no row when the key has no live row. An expired row is left to
    /// garbage collection, which judges it by the server's clock too (G1).
    pub(super) purge: String,
    /// Live rows by `$1` (now), counted by tool and state at `$1` (I5, I7).
    pub(super) stats: String,
}

impl Statements {
    pub(super) fn new(schema: &str) -> Self {
        let s = format!("\"{schema}\"");
        // G1: a row is garbage once it is completed and expired at or before the cutoff
        // judged by the caller's clock ($1) and by the server's, less the margin ($2). The
        // expression is stable: evaluated once per statement. A row that is not completed
        // is never garbage (S8).
        let cutoff = format!("(LEAST($1::BIGINT, {SERVER_NOW_MS}) - $2::BIGINT)");
        let garbage = format!("outcome IS NOT NULL AND expires_at <= {cutoff}");
        // U6: the live row is decided not applied with the claim's fingerprint.
        let reopenable = "decided_at IS NOT NULL AND fingerprint = $2::TEXT";
        Statements {
            // Three branches, chosen by the statement's snapshot of the live row (`live`):
            // none → insert, or replace an expired completed row (`ins`); one decided not
            // applied with this fingerprint → re-claim it, appending to its history
            // (`upd`); any other (awaiting approval and approved included: only a
            // transition moves those, A2, A4) → answer it, writing nothing. `ins` and `upd` re-check
            // their conditions on the row as it is when they write it (READ COMMITTED), so
            // a row changed since the snapshot is not overwritten: then the statement
            // answers no row, and the caller reads afresh.
            claim: format!(
                "WITH live AS (
                    SELECT {ROW} FROM {s}.records WHERE key = $1 AND {live}
                 ),
                 upd AS (
                    UPDATE {s}.records AS r SET
                        created_at = $3, expires_at = $4, owner = $5, lease_until = $6,
                        fence = {NEXT_FENCE}, decided_at = NULL,
                        tool = $7, namespace = $8, scope = $9, key_args = $10,
                        {append_claimed}
                    WHERE r.key = $1 AND r.decided_at IS NOT NULL AND r.fingerprint = $2
                      AND EXISTS (SELECT 1 FROM live WHERE {reopenable})
                    RETURNING r.fence
                 ),
                 ins AS (
                    INSERT INTO {s}.records AS r
                        (key, fingerprint, created_at, expires_at, owner, lease_until, fence,
                         tool, namespace, scope, key_args, history, history_len, history_dropped)
                    SELECT $1::TEXT, $2::TEXT, $3::BIGINT, $4::BIGINT, $5::TEXT, $6::BIGINT, 1,
                           $7::TEXT, $8::TEXT, $9::TEXT, $10::TEXT, {first_claimed}, 1, 0
                    WHERE NOT EXISTS (SELECT 1 FROM live)
                    ON CONFLICT (key) DO UPDATE SET
                        fingerprint = EXCLUDED.fingerprint,
                        created_at = EXCLUDED.created_at,
                        expires_at = EXCLUDED.expires_at,
                        owner = EXCLUDED.owner,
                        lease_until = EXCLUDED.lease_until,
                        fence = {NEXT_FENCE},
                        unknown_since = NULL,
                        outcome = NULL,
                        completed_at = NULL,
                        source = NULL,
                        decided_at = NULL,
                        approval_at = NULL,
                        approval_until = NULL,
                        tool = EXCLUDED.tool,
                        namespace = EXCLUDED.namespace,
                        scope = EXCLUDED.scope,
                        key_args = EXCLUDED.key_args,
                        history = {next_claimed},
                        history_len = 1,
                        history_dropped = 0
                    WHERE r.outcome IS NOT NULL AND r.expires_at <= $3
                    RETURNING r.fence
                 )
                 SELECT TRUE AS acquired, NULL::TEXT, NULL::BIGINT, NULL::BIGINT, fence,
                        NULL::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::TEXT, NULL::BIGINT,
                        NULL::TEXT, NULL::BIGINT, NULL::BIGINT, NULL::BIGINT,
                        NULL::TEXT, NULL::TEXT, NULL::TEXT, NULL::TEXT, reopened
                 FROM (SELECT fence, FALSE AS reopened FROM ins
                       UNION ALL SELECT fence, TRUE FROM upd) AS won
                 UNION ALL
                 SELECT FALSE, {ROW}, FALSE FROM live WHERE NOT ({reopenable})",
                live = live("$3"),
                append_claimed = append_history("r.", &claimed_entry(NEXT_FENCE)),
                first_claimed = claimed_entry("1"),
                next_claimed = claimed_entry(NEXT_FENCE),
            ),
            read_live: format!(
                "SELECT FALSE, {ROW} FROM {s}.records WHERE key = $1 AND {live}",
                live = live("$2")
            ),
            // A row with an owner is in progress or outcome unknown: never expired (S8).
            take_over: format!(
                "UPDATE {s}.records
                 SET owner = $1, lease_until = $2, created_at = $3, expires_at = $4, fence = $8,
                     unknown_since = NULL,
                     tool = $9, namespace = $10, scope = $11, key_args = $12,
                     {append}
                 WHERE key = $5 AND owner = $6 AND lease_until = $7",
                append = append_history("", "$13::TEXT")
            ),
            renew: format!(
                "UPDATE {s}.records SET lease_until = $1, expires_at = GREATEST(expires_at, $1)
                 WHERE key = $2 AND owner = $3 AND unknown_since IS NULL"
            ),
            mark_unknown: format!(
                "UPDATE {s}.records SET unknown_since = $1, {append}
                 WHERE key = $2 AND owner = $3 AND unknown_since IS NULL",
                append = append_history("", "$4::TEXT")
            ),
            complete: format!(
                "UPDATE {s}.records
                 SET owner = NULL, lease_until = NULL, outcome = $1, completed_at = $2,
                     source = $5, {append}
                 WHERE key = $3 AND owner = $4 AND unknown_since IS NULL",
                append = append_history("", "$6::TEXT")
            ),
            release: format!(
                "DELETE FROM {s}.records WHERE key = $1 AND owner = $2 AND unknown_since IS NULL"
            ),
            transition: transition(&s),
            history: format!(
                "SELECT history, history_dropped FROM {s}.records WHERE key = $1 AND {live}",
                live = live("$2")
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
                    WHERE key = $1 AND {live} AND (outcome IS NOT NULL OR $3::BOOLEAN)
                    RETURNING {ROW}
                 )
                 SELECT TRUE AS deleted, {ROW} FROM del
                 UNION ALL
                 SELECT FALSE, {ROW} FROM {s}.records
                 WHERE key = $1 AND {live} AND NOT EXISTS (SELECT 1 FROM del)",
                live = live("$2::BIGINT")
            ),
            stats: format!(
                "SELECT tool, {state}, count(*) FROM {s}.records
                 WHERE {live} GROUP BY 1, 2",
                state = state_at("$1::BIGINT"),
                live = live("$1::BIGINT")
            ),
        }
    }
}

/// The transition statement (U2, U6, A2–A4): one `UPDATE` of the live row of key `$1` if
/// it has fence `$2` and is in the state seen, moving it to the target and appending the
/// entry.
///
/// `$3` the state seen (`in_progress`, `outcome_unknown`, `not_applied`,
/// `awaiting_approval`, `approved`), `$4` the owner seen, `$5` the lease seen (`NULL`: any,
/// only for `in_progress`; for `approved`, the expiry of the approval seen), `$6` the target (`outcome_unknown`, `completed`,
/// `not_applied`, `awaiting_approval`, `approved`, `in_progress`), `$7` the target's
/// `since`, `$8` its outcome, `$9` its source, `$10` now, `$11` the expiry to raise a
/// completed row's to, or a run's expiry, `$12` the history entry, `$13` the run's owner,
/// `$14` its lease, `$15` its fence, `$16` the approval's `decided_at`, `$17` its `until`.
///
/// Which target is reached from which state seen, as the memory store's `transition`:
/// outcome unknown only from in progress (it keeps the owner and lease); awaiting approval
/// (`approval_at` = now) from in progress or approved; approved (`approval_at` =
/// `decided_at`, `approval_until` = `until`) from awaiting approval or in progress; in
/// progress (owner, lease, fence, `created_at` = now, `expires_at` = `$11`) only from
/// approved; completed and not applied from every state. Every target sets each state
/// column to its own value or `NULL`: owner and lease survive only into outcome unknown,
/// the approval columns only into the two approval states, so no other state's column is
/// left behind; fence, `created_at` and `expires_at` change only as said.
fn transition(s: &str) -> String {
    format!(
        "UPDATE {s}.records SET
            owner = CASE $6::TEXT WHEN 'outcome_unknown' THEN owner
                                  WHEN 'in_progress' THEN $13::TEXT END,
            lease_until = CASE $6::TEXT WHEN 'outcome_unknown' THEN lease_until
                                        WHEN 'in_progress' THEN $14::BIGINT END,
            fence = CASE WHEN $6::TEXT = 'in_progress' THEN $15::BIGINT ELSE fence END,
            created_at = CASE WHEN $6::TEXT = 'in_progress' THEN $10::BIGINT
                              ELSE created_at END,
            unknown_since = CASE WHEN $6::TEXT = 'outcome_unknown' THEN $7::BIGINT END,
            outcome = CASE WHEN $6::TEXT = 'completed' THEN $8::TEXT END,
            completed_at = CASE WHEN $6::TEXT = 'completed' THEN $10::BIGINT END,
            source = CASE WHEN $6::TEXT = 'completed' THEN $9::TEXT END,
            decided_at = CASE WHEN $6::TEXT = 'not_applied' THEN $10::BIGINT END,
            approval_at = CASE $6::TEXT WHEN 'awaiting_approval' THEN $10::BIGINT
                                        WHEN 'approved' THEN $16::BIGINT END,
            approval_until = CASE WHEN $6::TEXT = 'approved' THEN $17::BIGINT END,
            expires_at = CASE $6::TEXT WHEN 'completed' THEN GREATEST(expires_at, $11::BIGINT)
                                       WHEN 'in_progress' THEN $11::BIGINT
                                       ELSE expires_at END,
            {append}
         WHERE key = $1 AND fence = $2::BIGINT AND {live}
           AND (($3::TEXT = 'in_progress' AND owner = $4::TEXT AND unknown_since IS NULL
                 AND ($5::BIGINT IS NULL OR lease_until = $5::BIGINT))
             OR ($3::TEXT = 'outcome_unknown' AND owner = $4::TEXT
                 AND unknown_since IS NOT NULL AND lease_until = $5::BIGINT)
             OR ($3::TEXT = 'not_applied' AND decided_at IS NOT NULL)
             OR ($3::TEXT = 'awaiting_approval' AND approval_at IS NOT NULL
                 AND approval_until IS NULL)
             OR ($3::TEXT = 'approved' AND approval_until = $5::BIGINT))
           AND CASE $6::TEXT
                 WHEN 'outcome_unknown' THEN $3::TEXT = 'in_progress'
                 WHEN 'awaiting_approval' THEN $3::TEXT IN ('in_progress', 'approved')
                 WHEN 'approved' THEN $3::TEXT IN ('awaiting_approval', 'in_progress')
                 WHEN 'in_progress' THEN $3::TEXT = 'approved'
                 ELSE TRUE END",
        append = append_history("", "$12::TEXT"),
        live = live("$10::BIGINT")
    )
}
