//! What schema 4 added to the statements: liveness (S8), the history columns (U7) and the
//! operator's compare-and-set, [`Store::transition`](crate::store::Store::transition) (U2,
//! U6), which schema 5 extends to the approval states (A2–A4).
//!
//! A row's history is three columns: `history`, the entries' stored lines
//! ([`HistoryEntry::to_json`](crate::store::HistoryEntry::to_json)) joined by `\n`, oldest
//! first (`NULL` or empty: none); `history_len`, how many lines it holds; and
//! `history_dropped`, how many earlier ones were dropped. Every statement that moves a row
//! appends its entry in the same `UPDATE` ([`append_history`]), so the history costs no
//! statement and no round trip.

use std::path::Path;

use rusqlite::types::Value;
use rusqlite::{named_params, Connection, OptionalExtension, ToSql};

use super::error::{corrupt, db_error};
use super::values::{fence_to_sql, owner_to_sql, to_sql};
use crate::clock::Timestamp;
use crate::store::StoreError;
use crate::store::{History, Seen, Target, TransitionRequest, HISTORY_LIMIT};

/// Whether a row is live at `:now` (S8): a completed row until its `expires_at`, a row in
/// any other state whatever its `expires_at`.
macro_rules! live {
    () => {
        "(expires_at > :now OR outcome IS NULL)"
    };
}
pub(super) use live;

/// The `SET` assignments that append the entry the SQL expression `$entry` (a literal)
/// gives to the row's history: when [`HISTORY_LIMIT`] (32) lines are held, the oldest
/// (everything up to and including the first `\n`) is dropped and counted. The right-hand
/// sides read the row as it was before the `UPDATE`, as SQL assignments do.
macro_rules! append_history {
    ($entry:expr) => {
        concat!(
            "history = CASE WHEN history_len >= 32
                    THEN substr(history, instr(history, char(10)) + 1) || char(10) || ",
            $entry,
            "
                    WHEN history IS NULL OR history = '' THEN ",
            $entry,
            "
                    ELSE history || char(10) || ",
            $entry,
            " END,
    history_len = MIN(history_len + 1, 32),
    history_dropped = history_dropped + (history_len >= 32)"
        )
    };
}
pub(super) use append_history;

// The statements spell the bound out: they must keep what `HISTORY_LIMIT` says.
const _: () = assert!(HISTORY_LIMIT == 32);

/// The stored line of a claim's `claimed` entry
/// ([`HistoryEntry::claimed`](crate::store::HistoryEntry::claimed)) with the fence the SQL
/// expression `$fence` gives, built in SQL from `:now` and `:owner` (a claim learns its
/// fence only in the statement that writes it). Byte for byte the line `to_json` writes:
/// SQLite turns an integer into text without leading zeros or sign, and an owner token is
/// 32 hex digits, which JSON needs not escape.
macro_rules! claimed_entry {
    ($fence:expr) => {
        concat!(
            "('{\"at\":' || :now || ',\"event\":\"claimed\",\"fence\":' || ",
            $fence,
            " || ',\"owner\":\"' || :owner || '\"}')"
        )
    };
}
pub(super) use claimed_entry;

/// The history of a live row.
const HISTORY: &str = concat!(
    "SELECT history, history_dropped FROM idem_records WHERE key = :key AND ",
    live!()
);

/// One statement: [`HISTORY`]. `None` without a live row at `now`.
pub(super) fn history(
    conn: &Connection,
    path: &Path,
    key: &str,
    now: Timestamp,
) -> Result<Option<History>, StoreError> {
    let row: Option<(Option<String>, i64)> = conn
        .prepare_cached(HISTORY)
        .and_then(|mut statement| {
            statement.query_row(named_params! { ":key": key, ":now": to_sql(now) }, |row| {
                Ok((row.get(0)?, row.get(1)?))
            })
        })
        .optional()
        .map_err(|e| db_error(path, "read the history", e))?;
    row.map(|(text, dropped)| {
        let dropped = u64::try_from(dropped)
            .map_err(|_| corrupt(path, key, &format!("negative history_dropped {dropped}")))?;
        Ok(History::from_stored(text.as_deref(), dropped))
    })
    .transpose()
}

/// The state a transition expects, as stored.
enum SeenValues {
    InProgress {
        owner: String,
        lease_until: Option<i64>,
    },
    OutcomeUnknown {
        owner: String,
        lease_until: i64,
    },
    NotApplied,
    AwaitingApproval,
    Approved {
        until: i64,
    },
}

/// The state a transition moves to, as stored.
enum TargetValues {
    OutcomeUnknown {
        since: i64,
    },
    Completed {
        outcome: String,
        source: &'static str,
    },
    NotApplied,
    AwaitingApproval,
    Approved {
        decided_at: i64,
        until: i64,
    },
    InProgress {
        owner: String,
        lease_until: i64,
        fence: i64,
    },
}

/// The parameters of a transition, owned so that they can move to the blocking pool.
pub(super) struct TransitionValues {
    key: String,
    fence: i64,
    seen: SeenValues,
    target: TargetValues,
    now: i64,
    expires_at: i64,
    entry: String,
}

/// The `SET` assignments that clear every state column but `approval_at`, before an
/// approval state's: an approval holds no owner, lease, unknown mark, outcome or decision
/// (A2, A3).
macro_rules! approval_clears {
    () => {
        "owner = NULL, lease_until = NULL, unknown_since = NULL, outcome = NULL,
    completed_at = NULL, source = NULL, decided_at = NULL, "
    };
}

impl TransitionValues {
    pub(super) fn of(req: &TransitionRequest<'_>) -> Self {
        TransitionValues {
            key: req.key.as_str().to_owned(),
            fence: fence_to_sql(req.fence),
            seen: match req.seen {
                Seen::InProgress { owner, lease_until } => SeenValues::InProgress {
                    owner: owner_to_sql(owner),
                    lease_until: lease_until.map(to_sql),
                },
                Seen::OutcomeUnknown { owner, lease_until } => SeenValues::OutcomeUnknown {
                    owner: owner_to_sql(owner),
                    lease_until: to_sql(lease_until),
                },
                Seen::NotApplied => SeenValues::NotApplied,
                Seen::AwaitingApproval => SeenValues::AwaitingApproval,
                Seen::Approved { until } => SeenValues::Approved {
                    until: to_sql(until),
                },
            },
            target: match &req.target {
                Target::OutcomeUnknown { since } => TargetValues::OutcomeUnknown {
                    since: to_sql(*since),
                },
                Target::Completed { outcome, source } => TargetValues::Completed {
                    outcome: outcome.as_str().to_owned(),
                    source: source.as_str(),
                },
                Target::NotApplied => TargetValues::NotApplied,
                Target::AwaitingApproval => TargetValues::AwaitingApproval,
                Target::Approved { decided_at, until } => TargetValues::Approved {
                    decided_at: to_sql(*decided_at),
                    until: to_sql(*until),
                },
                Target::InProgress {
                    owner,
                    lease_until,
                    fence,
                } => TargetValues::InProgress {
                    owner: owner_to_sql(*owner),
                    lease_until: to_sql(*lease_until),
                    fence: fence_to_sql(*fence),
                },
            },
            now: to_sql(req.now),
            expires_at: to_sql(req.expires_at),
            entry: req.entry.to_json(),
        }
    }

    /// Whether the target may follow the seen state, as the memory store (the reference)
    /// decides: outcome unknown only follows in progress (U1); completed and not applied
    /// follow any state (U6, A3: a denial completes a record awaiting approval); awaiting
    /// approval follows in progress (the request, A2) or approved (an expired approval,
    /// A4); approved follows awaiting approval (the decision, A3) or in progress (a run
    /// giving an approved key back, A4); in progress only follows approved (the run an
    /// approval allows, A4).
    fn follows(&self) -> bool {
        match self.target {
            TargetValues::OutcomeUnknown { .. } => {
                matches!(self.seen, SeenValues::InProgress { .. })
            }
            TargetValues::Completed { .. } | TargetValues::NotApplied => true,
            TargetValues::AwaitingApproval => matches!(
                self.seen,
                SeenValues::InProgress { .. } | SeenValues::Approved { .. }
            ),
            TargetValues::Approved { .. } => matches!(
                self.seen,
                SeenValues::InProgress { .. } | SeenValues::AwaitingApproval
            ),
            TargetValues::InProgress { .. } => matches!(self.seen, SeenValues::Approved { .. }),
        }
    }

    /// The `UPDATE` and its parameters, `None` when the target cannot follow the seen
    /// state ([`follows`](Self::follows)). One text per pair of seen state (in progress
    /// with or without a lease counting as two) and target it admits (21), each prepared
    /// once per connection. Every target but the two approval states leaves the approval
    /// columns `NULL`.
    fn statement(&self) -> Option<(String, Vec<(&'static str, Value)>)> {
        if !self.follows() {
            return None;
        }
        let mut params = vec![
            (":key", Value::Text(self.key.clone())),
            (":fence", Value::Integer(self.fence)),
            (":now", Value::Integer(self.now)),
            (":entry", Value::Text(self.entry.clone())),
        ];
        let seen = match &self.seen {
            SeenValues::InProgress { owner, lease_until } => {
                params.push((":seen_owner", Value::Text(owner.clone())));
                match lease_until {
                    Some(lease_until) => {
                        params.push((":seen_lease_until", Value::Integer(*lease_until)));
                        "owner = :seen_owner AND unknown_since IS NULL \
                         AND lease_until = :seen_lease_until"
                    }
                    None => "owner = :seen_owner AND unknown_since IS NULL",
                }
            }
            SeenValues::OutcomeUnknown { owner, lease_until } => {
                params.push((":seen_owner", Value::Text(owner.clone())));
                params.push((":seen_lease_until", Value::Integer(*lease_until)));
                "owner = :seen_owner AND unknown_since IS NOT NULL \
                 AND lease_until = :seen_lease_until"
            }
            SeenValues::NotApplied => "decided_at IS NOT NULL",
            SeenValues::AwaitingApproval => "approval_at IS NOT NULL AND approval_until IS NULL",
            SeenValues::Approved { until } => {
                params.push((":seen_until", Value::Integer(*until)));
                "approval_until = :seen_until"
            }
        };
        let set = match &self.target {
            TargetValues::OutcomeUnknown { since } => {
                params.push((":since", Value::Integer(*since)));
                "unknown_since = :since"
            }
            TargetValues::Completed { outcome, source } => {
                params.push((":outcome", Value::Text(outcome.clone())));
                params.push((":source", Value::Text((*source).to_owned())));
                params.push((":expires_at", Value::Integer(self.expires_at)));
                "owner = NULL, lease_until = NULL, unknown_since = NULL, decided_at = NULL,
    approval_at = NULL, approval_until = NULL,
    outcome = :outcome, completed_at = :now, source = :source,
    expires_at = MAX(expires_at, :expires_at)"
            }
            TargetValues::NotApplied => {
                "owner = NULL, lease_until = NULL, unknown_since = NULL, outcome = NULL,
    completed_at = NULL, source = NULL, approval_at = NULL, approval_until = NULL,
    decided_at = :now"
            }
            TargetValues::AwaitingApproval => concat!(
                approval_clears!(),
                "approval_at = :now, approval_until = NULL"
            ),
            TargetValues::Approved { decided_at, until } => {
                params.push((":decided_at", Value::Integer(*decided_at)));
                params.push((":until", Value::Integer(*until)));
                concat!(
                    approval_clears!(),
                    "approval_at = :decided_at, approval_until = :until"
                )
            }
            TargetValues::InProgress {
                owner,
                lease_until,
                fence,
            } => {
                params.push((":owner", Value::Text(owner.clone())));
                params.push((":lease_until", Value::Integer(*lease_until)));
                params.push((":new_fence", Value::Integer(*fence)));
                params.push((":expires_at", Value::Integer(self.expires_at)));
                "owner = :owner, lease_until = :lease_until, unknown_since = NULL,
    outcome = NULL, completed_at = NULL, source = NULL, decided_at = NULL,
    approval_at = NULL, approval_until = NULL,
    fence = :new_fence, created_at = :now, expires_at = :expires_at"
            }
        };
        let sql = format!(
            "UPDATE idem_records SET {set},\n    {}\nWHERE key = :key AND fence = :fence AND {} AND {seen}",
            append_history!(":entry"),
            live!(),
        );
        Some((sql, params))
    }
}

/// One statement: the compare-and-set `UPDATE … WHERE key = :key AND fence = :fence AND
/// <live> AND <the seen state>` that moves the row to the target and appends the entry.
/// `true` when the row moved.
pub(super) fn transition(
    conn: &Connection,
    path: &Path,
    v: &TransitionValues,
) -> Result<bool, StoreError> {
    let Some((sql, params)) = v.statement() else {
        return Ok(false);
    };
    let bound: Vec<(&str, &dyn ToSql)> = params
        .iter()
        .map(|(name, value)| (*name, value as &dyn ToSql))
        .collect();
    conn.prepare_cached(&sql)
        .and_then(|mut statement| statement.execute(bound.as_slice()))
        .map(|updated| updated == 1)
        .map_err(|e| db_error(path, "record a transition", e))
}

#[cfg(test)]
mod tests;

#[cfg(test)]
mod approval_tests;
