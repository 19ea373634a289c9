//! A person's approval of a call that waits for it (contract A1–A6): approve it (the next
//! call with the same arguments runs the tool once) or deny it (every call of the key gets
//! the denial). Each decision is a compare-and-set on the record as the decider read it,
//! names its actor, and lands in the record's history (U7).
//!
//! ```
//! # extern crate idem_runtime as idem_agent;
//! use idem_agent::approval::Approval;
//! use idem_agent::resolve::ResolveError;
//! use idem_agent::{Engine, IdempotencyKey};
//! # let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! # runtime.block_on(async {
//! let engine = Engine::in_memory();
//! let key = IdempotencyKey::from_hex(&"ab".repeat(32)).unwrap();
//! // No call asked for approval with this key: there is nothing to approve.
//! let approval = Approval::new("ana")?.note("refund of 40 EUR checked with the customer");
//! let answer = engine.approve(&key, &approval).await;
//! assert!(matches!(answer, Err(ResolveError::NotFound { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::time::Duration;

use crate::engine::Engine;
use crate::key::IdempotencyKey;
use crate::outcome::OutcomeSource;
use crate::resolve::{fence_checked, Decider, ResolveError, Resolved};
use crate::spec::ToolSpec;
use crate::store::{
    Denial, HistoryEntry, HistoryEvent, RecordState, Seen, StateFilter, Target, TransitionRequest,
};

/// Who approves or denies a call, and why (A3). Build with [`Approval::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Approval {
    decider: Decider,
    valid_for: Duration,
}

impl Approval {
    /// A decision by `actor` (1–[`ACTOR_MAX_CHARS`](crate::resolve::ACTOR_MAX_CHARS)
    /// characters, no control characters).
    ///
    /// # Errors
    /// [`ResolveError::BadActor`] naming what is wrong with `actor`.
    pub fn new(actor: impl Into<String>) -> Result<Self, ResolveError> {
        Ok(Approval {
            decider: Decider::new(actor.into())?,
            valid_for: ToolSpec::DEFAULT_APPROVAL_VALID_FOR,
        })
    }

    /// With a note saying why (at most [`NOTE_MAX_CHARS`](crate::resolve::NOTE_MAX_CHARS)
    /// characters; longer notes are refused with [`ResolveError::BadNote`]).
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.decider.note = Some(note.into());
        self
    }

    /// Only if the record still has fence `fence` (what `idem show` printed).
    pub fn expect_fence(mut self, fence: u64) -> Self {
        self.decider.expect_fence = Some(fence);
        self
    }

    /// An approval lets a call run for `valid_for` from the decision (default
    /// [`ToolSpec::DEFAULT_APPROVAL_VALID_FOR`], 1 hour), and never longer than the tool's
    /// own validity (A1, A3), which the call's request recorded: the shorter is saved.
    pub fn valid_for(mut self, valid_for: Duration) -> Self {
        self.valid_for = valid_for;
        self
    }

    /// A denial is kept `keep_for` from the decision (default
    /// [`DEFAULT_KEEP_FOR`](crate::resolve::DEFAULT_KEEP_FOR), 24 hours).
    pub fn keep_for(mut self, keep_for: Duration) -> Self {
        self.decider.keep_for = keep_for;
        self
    }

    /// Who decides.
    pub fn actor(&self) -> &str {
        &self.decider.actor
    }
}

impl Engine {
    /// The tool's approval validity as the key's latest request for approval recorded it
    /// (A3); `None` when the history does not say (a store without histories, or a request
    /// dropped from a full history).
    async fn tools_validity(
        &self,
        key: &IdempotencyKey,
        now: crate::clock::Timestamp,
    ) -> Result<Option<Duration>, ResolveError> {
        let history = match self.store().history(key, now).await {
            Ok(history) => history,
            Err(e) if e.kind == crate::store::StoreErrorKind::Unsupported => None,
            Err(e) => return Err(e.into()),
        };
        Ok(history.and_then(|history| {
            history
                .entries
                .iter()
                .rev()
                .find_map(|entry| match entry.event {
                    HistoryEvent::ApprovalRequested | HistoryEvent::ApprovalExpired => {
                        entry.valid_for
                    }
                    _ => None,
                })
        }))
    }
}

/// Which way a person decides (A3).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Verdict {
    Approve,
    Deny,
}

impl Engine {
    /// Approves the call waiting for approval under `key` (A3): the next call with the same
    /// arguments runs the tool once, while the approval is valid
    /// ([`Approval::valid_for`], capped by the tool's own validity). A compare-and-set on
    /// the record as read; emits the INFO event `decided` (V2). Three round trips: the
    /// record, its history (the tool's validity, which the call's request recorded), the
    /// compare-and-set.
    ///
    /// # Errors
    /// [`ResolveError::NotFound`] without a live record; [`ResolveError::FenceChanged`]
    /// when [`Approval::expect_fence`] does not match; [`ResolveError::NotDecidable`] for
    /// a record that does not await approval (approving an approved record again answers
    /// [`Resolved::AlreadyDecided`] and extends nothing); [`ResolveError::Changed`] when a
    /// call or another decision changed the record in between; [`ResolveError::BadNote`];
    /// [`ResolveError::Store`].
    pub async fn approve(
        &self,
        key: &IdempotencyKey,
        approval: &Approval,
    ) -> Result<Resolved, ResolveError> {
        self.decide_approval(key, approval, Verdict::Approve).await
    }

    /// Denies the call waiting for approval (or approved and not yet run) under `key` (A3,
    /// A5): the denial (actor, note, time) is saved as the key's outcome, source
    /// [`OutcomeSource::Denied`], kept [`Approval::keep_for`], and every call of the key
    /// gets [`Error::Denied`](crate::Error::Denied). Two round trips: the record and the
    /// compare-and-set.
    ///
    /// # Errors
    /// As [`approve`](Self::approve); denying a denied record again answers
    /// [`Resolved::AlreadyDecided`].
    pub async fn deny(
        &self,
        key: &IdempotencyKey,
        approval: &Approval,
    ) -> Result<Resolved, ResolveError> {
        self.decide_approval(key, approval, Verdict::Deny).await
    }

    async fn decide_approval(
        &self,
        key: &IdempotencyKey,
        approval: &Approval,
        verdict: Verdict,
    ) -> Result<Resolved, ResolveError> {
        let decider = &approval.decider;
        decider.check_note()?;
        let now = self.clock().now();
        let mut record = self.live_record(key, now).await?;
        let state = fence_checked(key, &record, decider.expect_fence, now)?;
        // A3: an approval lasts no longer than the tool's own validity, which the call
        // wrote into its request (one more round trip, for approvals only).
        let tools_validity = match verdict {
            Verdict::Approve => self.tools_validity(key, now).await?,
            Verdict::Deny => None,
        };
        let refuse = |why: String| ResolveError::NotDecidable {
            key: key.to_string(),
            state,
            why,
        };
        let seen = match (&record.state, verdict) {
            (RecordState::AwaitingApproval { .. }, _) => Seen::AwaitingApproval,
            (RecordState::Approved { until, .. }, Verdict::Approve) if now >= *until => {
                // A4: an approval no call used expired; record the new one after the
                // expiry a call would have recorded.
                let expired = TransitionRequest {
                    key,
                    fence: record.fence,
                    seen: Seen::Approved { until: *until },
                    target: Target::AwaitingApproval,
                    now,
                    expires_at: record.expires_at,
                    entry: {
                        let entry =
                            HistoryEntry::new(now, HistoryEvent::ApprovalExpired, record.fence);
                        match tools_validity {
                            Some(valid_for) => entry.with_valid_for(valid_for),
                            None => entry,
                        }
                    },
                };
                if !self.store().transition(expired).await? {
                    return Err(self.changed(key, now).await);
                }
                Seen::AwaitingApproval
            }
            (RecordState::Approved { .. }, Verdict::Approve) => {
                return Ok(Resolved::AlreadyDecided(record));
            }
            (RecordState::Approved { until, .. }, Verdict::Deny) => {
                Seen::Approved { until: *until }
            }
            (RecordState::Completed { source, .. }, Verdict::Deny)
                if *source == OutcomeSource::Denied =>
            {
                return Ok(Resolved::AlreadyDecided(record));
            }
            (RecordState::Completed { source, .. }, Verdict::Approve)
                if *source == OutcomeSource::Denied =>
            {
                return Err(refuse(
                    "it was denied; a denial is final until it expires or is purged (idem purge)"
                        .to_owned(),
                ));
            }
            _ if state == StateFilter::OutcomeUnknown => {
                return Err(refuse(format!(
                    "its outcome is unknown, not waiting for approval: check whether the effect happened (idem show {key} --history) and record it with idem resolve {key} (--applied | --not-applied | --error)"
                )));
            }
            _ => {
                return Err(refuse(format!(
                    "it does not wait for approval (it is {state}); only a call of a tool that requires approval asks for it"
                )));
            }
        };
        let denial = Denial {
            actor: decider.actor.clone(),
            at: now,
            note: decider.note.clone(),
        }
        .to_envelope();
        let valid_for = tools_validity.map_or(approval.valid_for, |t| t.min(approval.valid_for));
        let until = now.saturating_add(valid_for);
        let (target, event) = match verdict {
            Verdict::Approve => (
                Target::Approved {
                    decided_at: now,
                    until,
                },
                HistoryEvent::Approved { until },
            ),
            Verdict::Deny => (
                Target::Completed {
                    outcome: &denial,
                    source: OutcomeSource::Denied,
                },
                HistoryEvent::Denied,
            ),
        };
        let entry = decider.entry(now, event, record.fence);
        let expires_at = now.saturating_add(decider.keep_for);
        let decided = self
            .store()
            .transition(TransitionRequest {
                key,
                fence: record.fence,
                seen,
                target,
                now,
                expires_at,
                entry,
            })
            .await?;
        if !decided {
            return Err(self.changed(key, now).await);
        }
        let decision = match verdict {
            Verdict::Approve => "approved",
            Verdict::Deny => "denied",
        };
        let since = match record.state {
            RecordState::AwaitingApproval { since } => since,
            _ => record.created_at,
        };
        decider.announce(key, &record, decision, since, now);
        // The record as the transition left it (one read and one compare-and-set).
        record.state = match verdict {
            Verdict::Approve => RecordState::Approved {
                decided_at: now,
                until,
            },
            Verdict::Deny => {
                record.expires_at = record.expires_at.max(expires_at);
                RecordState::Completed {
                    outcome: denial,
                    completed_at: now,
                    source: OutcomeSource::Denied,
                }
            }
        };
        Ok(Resolved::Decided(record))
    }
}
