//! One row of the records table as both SQL stores keep it (SQLite and PostgreSQL: times,
//! expiry and fence as signed 64-bit integers, fingerprint and owner as hex text), and its
//! decoding into a [`Record`] (S1, S10, F1, U1, U6).

use super::{OwnerToken, Record, RecordState, StoreError};
use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::Fingerprint;
use crate::label::{RecordLabel, ScopePath};
use crate::store::OutcomeSource;

/// The columns of one records-table row, as stored.
pub(crate) struct SqlRow {
    pub(crate) fingerprint: String,
    pub(crate) created_at: i64,
    pub(crate) expires_at: i64,
    pub(crate) fence: i64,
    pub(crate) owner: Option<String>,
    pub(crate) lease_until: Option<i64>,
    pub(crate) unknown_since: Option<i64>,
    pub(crate) outcome: Option<String>,
    pub(crate) completed_at: Option<i64>,
    /// Where a completed outcome came from ([`OutcomeSource::as_str`]); `NULL`: executed
    /// (every row written before schema 4, P4).
    pub(crate) source: Option<String>,
    /// When a person decided the key not applied (U6): set exactly in that state.
    pub(crate) decided_at: Option<i64>,
    /// Awaiting approval since, or approved at (A2, A3): set exactly in those two states.
    pub(crate) approval_at: Option<i64>,
    /// When the approval expires (A3): set exactly in the approved state.
    pub(crate) approval_until: Option<i64>,
    /// The label columns (P1): all `NULL` in a row written before labels existed (P4).
    pub(crate) label: SqlLabel,
}

/// The label columns of a row (P1): `tool`, `namespace`, `scope` (a [`ScopePath`]'s text)
/// and `key_args` (audit only, P2).
#[derive(Debug, Clone, Default)]
pub(crate) struct SqlLabel {
    pub(crate) tool: Option<String>,
    pub(crate) namespace: Option<String>,
    pub(crate) scope: Option<String>,
    pub(crate) key_args: Option<String>,
}

impl SqlLabel {
    /// The columns to write for `label`.
    pub(crate) fn of(label: &RecordLabel) -> Self {
        SqlLabel {
            tool: Some(label.tool.clone()),
            namespace: label.namespace.clone(),
            scope: Some(label.scope.to_string()),
            key_args: label.key_args.clone(),
        }
    }

    /// The label, `None` for a row without one (no tool). The scope text is read leniently
    /// ([`ScopePath::from_stored`]): a label never makes its record unreadable.
    pub(crate) fn decode(self) -> Option<RecordLabel> {
        let tool = self.tool?;
        let scope = ScopePath::from_stored(self.scope.as_deref().unwrap_or_default());
        Some(RecordLabel {
            tool,
            namespace: self.namespace,
            scope,
            key_args: self.key_args,
        })
    }
}

impl SqlRow {
    /// The record, or the error `corrupt(what)` makes when a value is out of its domain or
    /// the columns set match no state: an owner and a lease without `unknown_since` is in
    /// progress, with it outcome unknown; an outcome and its time is completed; only
    /// `decided_at` is not applied; only `approval_at` awaits approval; only `approval_at`
    /// and `approval_until` is approved.
    pub(crate) fn decode(self, corrupt: impl Fn(&str) -> StoreError) -> Result<Record, StoreError> {
        let time = |value: i64, column: &str| {
            u64::try_from(value)
                .map(Timestamp::from_millis)
                .map_err(|_| corrupt(&format!("negative {column} {value}")))
        };
        let owner = |owner: &str| {
            OwnerToken::from_hex(owner)
                .ok_or_else(|| corrupt("owner is not 32 lower-case hex digits"))
        };
        let fingerprint = Fingerprint::from_hex(&self.fingerprint)
            .ok_or_else(|| corrupt("fingerprint is not 64 lowercase hex digits"))?;
        let source = match self.source.as_deref() {
            None => OutcomeSource::Executed,
            Some(text) => OutcomeSource::parse(text)
                .ok_or_else(|| corrupt(&format!("unknown outcome source {text:?}")))?,
        };
        let not_applied = self.decided_at.is_some();
        let approval = (self.approval_at, self.approval_until);
        let bare = self.owner.is_none()
            && self.lease_until.is_none()
            && self.unknown_since.is_none()
            && self.outcome.is_none()
            && self.completed_at.is_none()
            && self.source.is_none()
            && !not_applied;
        let state = match (
            self.owner,
            self.lease_until,
            self.unknown_since,
            self.outcome,
            self.completed_at,
        ) {
            _ if approval != (None, None) => match approval {
                (Some(since), None) if bare => RecordState::AwaitingApproval {
                    since: time(since, "approval_at")?,
                },
                (Some(decided_at), Some(until)) if bare => RecordState::Approved {
                    decided_at: time(decided_at, "approval_at")?,
                    until: time(until, "approval_until")?,
                },
                _ => {
                    return Err(corrupt(
                        "approval_at or approval_until is set beside another state's columns",
                    ))
                }
            },
            (None, None, None, None, None) if not_applied => RecordState::NotApplied {
                decided_at: time(self.decided_at.unwrap_or_default(), "decided_at")?,
            },
            _ if not_applied => {
                return Err(corrupt("decided_at is set beside another state's columns"))
            }
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
                source,
            },
            _ => {
                return Err(corrupt(
                    "neither in progress, outcome unknown, completed nor not applied",
                ))
            }
        };
        Ok(Record {
            fingerprint,
            created_at: time(self.created_at, "created_at")?,
            expires_at: time(self.expires_at, "expires_at")?,
            fence: decode_fence(self.fence, &corrupt)?,
            state,
            label: self.label.decode(),
        })
    }
}

/// A stored fence: at least 1 (F1), else `corrupt(…)`.
pub(crate) fn decode_fence(
    fence: i64,
    corrupt: impl Fn(&str) -> StoreError,
) -> Result<u64, StoreError> {
    u64::try_from(fence)
        .ok()
        .filter(|&fence| fence >= 1)
        .ok_or_else(|| corrupt(&format!("fence {fence} is not at least 1")))
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::store::StoreErrorKind;

    fn row(approval_at: Option<i64>, approval_until: Option<i64>) -> SqlRow {
        SqlRow {
            fingerprint: "ab".repeat(32),
            created_at: 1_000,
            expires_at: 2_000,
            fence: 1,
            owner: None,
            lease_until: None,
            unknown_since: None,
            outcome: None,
            completed_at: None,
            source: None,
            decided_at: None,
            approval_at,
            approval_until,
            label: SqlLabel::default(),
        }
    }

    fn corrupt(what: &str) -> StoreError {
        StoreError::new("test", StoreErrorKind::Corrupt, what)
    }

    // pins A2, A3, P4: the approval columns alone are the two approval states; beside any
    // other state's column (a source included) the row is corrupt, never guessed
    #[test]
    fn approval_columns_decode_alone_and_only_alone() {
        let awaiting = row(Some(1_500), None).decode(corrupt).unwrap();
        assert_eq!(
            awaiting.state,
            RecordState::AwaitingApproval {
                since: Timestamp::from_millis(1_500)
            }
        );
        let approved = row(Some(1_500), Some(9_000)).decode(corrupt).unwrap();
        assert_eq!(
            approved.state,
            RecordState::Approved {
                decided_at: Timestamp::from_millis(1_500),
                until: Timestamp::from_millis(9_000)
            }
        );
        let mut with_source = row(Some(1_500), None);
        with_source.source = Some("denied".to_owned());
        let mut with_owner = row(Some(1_500), Some(9_000));
        with_owner.owner = Some("0".repeat(32));
        with_owner.lease_until = Some(3_000);
        let mut decided = row(Some(1_500), None);
        decided.decided_at = Some(1_600);
        for bad in [with_source, with_owner, decided, row(None, Some(9_000))] {
            let error = bad.decode(corrupt).unwrap_err();
            assert_eq!(error.kind, StoreErrorKind::Corrupt, "{error}");
        }
    }
}
