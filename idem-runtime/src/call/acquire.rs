//! Acquiring a key: claim, replay, take over, reconcile, or wait (contract S2–S6, S9,
//! U2–U3, U6).
//!
//! ```text
//! claim ─ Acquired ───────────────────────────────────────→ owner (fence from the store;
//!       │                                                   also a key decided not applied)
//!       └ Existing ─ other fingerprint ───────────────────→ Mismatch (S9)
//!                  ├ Completed ───────────────────────────→ replay (S3, S4)
//!                  ├ OutcomeUnknown ─ reconcile fn ───────→ take over now, reconcile (U3)
//!                  │                ├ on_unknown = hold ──→ OutcomeUnknown, held (U2)
//!                  │                ├ rerun, lease lapsed → take over, run again (U2a)
//!                  │                └ rerun, lease live ──→ OutcomeUnknown error (U2a)
//!                  └ InProgress ─ lease lapsed ─ reconcile fn or rerun → take over (CAS),
//!                               │              │            reconcile or run again (S6)
//!                               │              └ hold ───→ mark unknown (CAS), held (U2)
//!                               └ lease live ─────────────→ wait ≤ `wait`, look again,
//!                                                           then InProgress (S5)
//! ```

use std::sync::Arc;
use std::time::Duration;

use futures_util::future::select;

use super::PreparedCall;
use crate::attempt::{PreviousRun, UnknownCause};
use crate::clock::{duration_millis, Timestamp};
use crate::detach::detach;
use crate::envelope::Envelope;
use crate::error::Error;
use crate::key::IdempotencyKey;
use crate::outcome::OutcomeSource;
use crate::spec::OnUnknown;
use crate::store::{
    Claim, ClaimRequest, Denial, HistoryEntry, HistoryEvent, OwnerToken, Record, RecordState, Seen,
    Store, StoreError, StoreErrorKind, TakeoverRequest, Target, TransitionRequest, UnknownReason,
};
use crate::telemetry::StoreOperation;

/// Shortest and longest pause between two looks at an in-progress key when the store
/// cannot signal changes (S5: no tighter polling than needed).
const POLL_MIN: Duration = Duration::from_millis(10);
const POLL_MAX: Duration = Duration::from_millis(250);

/// What [`PreparedCall::acquire`] obtained.
pub(super) enum Acquired {
    /// This call owns the key and runs the body (or reconciles first).
    Owner(Ownership),
    /// The key has a saved outcome.
    Replay(Envelope, Lifetime),
}

/// A claim this call holds.
pub(super) struct Ownership {
    pub(super) owner: OwnerToken,
    pub(super) fence: u64,
    pub(super) lifetime: Lifetime,
    /// The run this claim took over, whose outcome is unknown (U2).
    pub(super) previous: Option<PreviousRun>,
    /// What the claim reopened (U6, A4): giving it back returns the record to that state
    /// instead of deleting it.
    pub(super) reopened: Reopened,
}

/// What a claim reopened, so that a run giving it back without an outcome returns the
/// record to that state (U6, A4) instead of deleting it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Reopened {
    /// A first claim (or one over an expired record): giving it back deletes the record.
    No,
    /// A key decided not applied (U6).
    NotApplied,
    /// An approved key (A4): giving it back keeps the approval.
    Approved {
        /// When the approval was recorded.
        decided_at: Timestamp,
        /// When it expires.
        until: Timestamp,
    },
}

impl Ownership {
    /// A claim (or, with `previous`, a takeover) made at `now`.
    fn new(
        owner: OwnerToken,
        fence: u64,
        now: Timestamp,
        expires_at: Timestamp,
        previous: Option<PreviousRun>,
    ) -> Self {
        Ownership {
            owner,
            fence,
            lifetime: Lifetime {
                created_at: now,
                expires_at,
                fence,
                takeover: previous.is_some(),
                source: OutcomeSource::Executed,
            },
            previous,
            reopened: Reopened::No,
        }
    }
}

/// When the record that answers a call was created and expires.
#[derive(Debug, Clone, Copy)]
pub(super) struct Lifetime {
    pub(super) created_at: Timestamp,
    pub(super) expires_at: Timestamp,
    pub(super) fence: u64,
    pub(super) takeover: bool,
    /// Where the outcome that answers the call came from (a replay's: the record's).
    pub(super) source: OutcomeSource,
}

impl PreparedCall {
    pub(super) async fn acquire(&self) -> Result<Acquired, Error> {
        let (store, clock) = (self.engine.store(), self.engine.clock());
        let started = clock.now();
        let wait_until = started.saturating_add(self.spec.wait);
        let mut poll = POLL_MIN;
        // Subscribed only once the key is seen in progress (then looked at again before
        // waiting), so the common paths pay nothing for it.
        let mut change: Option<Option<crate::store::ChangeSignal>> = None;
        // Consecutive takeovers refused by the store's compare-and-set.
        let mut failed_takeovers = 0u32;
        loop {
            let now = clock.now();
            let owner = OwnerToken::random();
            let lease_until = now.saturating_add(self.spec.lease);
            let expires_at = now.saturating_add(self.spec.ttl);
            let request = ClaimRequest {
                key: &self.key,
                fingerprint: &self.fingerprint,
                owner,
                now,
                lease_until,
                expires_at,
                label: &self.label,
            };
            let record = match self
                .trace
                .timed(StoreOperation::Claim, store.backend(), store.claim(request))
                .await
                .map_err(|e| self.store_error(e))?
            {
                Claim::Acquired { fence, reopened } => {
                    if self.spec.approval.is_some() {
                        // A2: the first call of a key records the request, nothing runs;
                        // so does the first call after a decision "not applied" (every
                        // run needs an approval in force).
                        if self
                            .request_approval(owner, fence, reopened, now, expires_at)
                            .await?
                        {
                            return Err(self.awaiting_approval(now, false));
                        }
                        match self.refused_again(&mut failed_takeovers, "the store granted a claim and then refused its owner's request for approval") {
                            Some(corrupt) => return Err(corrupt),
                            None => continue,
                        }
                    }
                    let mut claimed = Ownership::new(owner, fence, now, expires_at, None);
                    if reopened {
                        claimed.reopened = Reopened::NotApplied;
                    }
                    return Ok(Acquired::Owner(claimed));
                }
                Claim::Existing(record) => record,
            };
            self.trace.seen(record.fence);
            if record.fingerprint != self.fingerprint {
                return Err(Error::Mismatch {
                    tool: self.spec.name.to_owned(),
                    key: self.key.to_string(),
                    stored: record.fingerprint.to_string(),
                    given: self.fingerprint.to_string(),
                });
            }
            let due = match self.decide(&record, now)? {
                Decision::TakeOver(due) => due,
                Decision::Replay => {
                    let RecordState::Completed {
                        outcome, source, ..
                    } = record.state
                    else {
                        continue; // `decide` replays completed records only
                    };
                    if source == OutcomeSource::Denied {
                        return Err(self.denied(&outcome));
                    }
                    let lifetime = Lifetime {
                        created_at: record.created_at,
                        expires_at: record.expires_at,
                        fence: record.fence,
                        takeover: false,
                        source,
                    };
                    return Ok(Acquired::Replay(outcome, lifetime));
                }
                Decision::Hold { lapsed } => {
                    if let Some((owner, lease_until)) = lapsed {
                        if self.mark_lapsed(&record, owner, lease_until, now).await? {
                            self.trace.lapse_marked(record.fence);
                        } else {
                            // The record changed under us: look again, once. A mark that
                            // keeps failing means the store does not hold what it returned;
                            // the lapsed claim counts as unknown all the same (U1).
                            failed_takeovers += 1;
                            if failed_takeovers < 2 {
                                continue;
                            }
                        }
                    }
                    return Err(self.held(&record));
                }
                Decision::AwaitingApproval { since } => {
                    return Err(self.awaiting_approval(since, false));
                }
                Decision::RunApproved { decided_at, until } => {
                    let fence = record.fence.saturating_add(1);
                    let run = TransitionRequest {
                        key: &self.key,
                        fence: record.fence,
                        seen: Seen::Approved { until },
                        target: Target::InProgress {
                            owner,
                            lease_until,
                            fence,
                        },
                        now,
                        expires_at,
                        entry: HistoryEntry::claimed(now, fence, owner),
                    };
                    if self.approval_transition(run).await? {
                        let mut claimed = Ownership::new(owner, fence, now, expires_at, None);
                        claimed.reopened = Reopened::Approved { decided_at, until };
                        return Ok(Acquired::Owner(claimed));
                    }
                    // Another call took the approval first: look again (it is in progress).
                    continue;
                }
                Decision::ApprovalExpired { until } => {
                    let back = TransitionRequest {
                        key: &self.key,
                        fence: record.fence,
                        seen: Seen::Approved { until },
                        target: Target::AwaitingApproval,
                        now,
                        expires_at: record.expires_at,
                        entry: self.with_validity(HistoryEntry::new(
                            now,
                            HistoryEvent::ApprovalExpired,
                            record.fence,
                        )),
                    };
                    if self.approval_transition(back).await? {
                        return Err(self.awaiting_approval(now, true));
                    }
                    continue;
                }
                Decision::LookAgain => {
                    // A store that answers a claim of a key decided not applied (with this
                    // fingerprint) with the record instead of the claim breaks U6.
                    match self.refused_again(&mut failed_takeovers, "the store answers a claim of a key decided not applied with the record instead of granting the claim") {
                        Some(corrupt) => return Err(corrupt),
                        None => continue,
                    }
                }
                Decision::Wait { seen_lease_until } => {
                    // In progress with a live lease: wait for its outcome (S5).
                    failed_takeovers = 0;
                    if now >= wait_until {
                        return Err(self.in_progress(now, started, seen_lease_until));
                    }
                    let Some(signal) = change.take() else {
                        change = Some(store.watch(&self.key));
                        continue; // subscribed: look once more before waiting, so no change is missed
                    };
                    let deadline = clock.sleep_until(wait_until.min(seen_lease_until));
                    match signal {
                        Some(signal) => drop(select(signal, deadline).await),
                        None => {
                            let tick = futures_timer::Delay::new(poll);
                            poll = (poll * 2).min(POLL_MAX);
                            drop(select(tick, deadline).await);
                        }
                    }
                    change = Some(store.watch(&self.key)); // before the next look
                    continue;
                }
            };
            let fence = record.fence.saturating_add(1);
            let cause = match due.previous.cause {
                UnknownCause::LeaseLapsed => UnknownReason::LeaseLapsed,
                UnknownCause::GaveUp => UnknownReason::Marked,
            };
            let entry =
                HistoryEntry::new(now, HistoryEvent::TakenOver { cause }, fence).with_owner(owner);
            let takeover = TakeoverRequest {
                key: &self.key,
                seen_owner: due.seen_owner,
                seen_lease_until: due.seen_lease_until,
                owner,
                now,
                lease_until,
                expires_at,
                fence,
                label: &self.label,
                entry,
            };
            if self
                .trace
                .timed(
                    StoreOperation::TakeOver,
                    store.backend(),
                    store.take_over(takeover),
                )
                .await
                .map_err(|e| self.store_error(e))?
            {
                let previous = &due.previous;
                self.trace
                    .taken_over(previous.fence, previous.cause, self.spec.reconcile);
                let taken = Ownership::new(owner, fence, now, expires_at, Some(due.previous));
                return Ok(Acquired::Owner(taken));
            }
            // The record changed under us (another caller took over first): look again at
            // once. A takeover that keeps failing means the store does not hold what it
            // returned; from the second failure on, behave like a waiter: answer InProgress
            // once the wait bound has passed, else pause first (S5).
            failed_takeovers += 1;
            if failed_takeovers < 2 {
                continue;
            }
            if now >= wait_until {
                return Err(self.in_progress(now, started, due.seen_lease_until));
            }
            let tick = futures_timer::Delay::new(poll);
            poll = (poll * 2).min(POLL_MAX);
            drop(select(tick, clock.sleep_until(wait_until)).await);
        }
    }

    /// What to do about `record` (live, same fingerprint): replay a completed one (S3);
    /// wait for a live owner (S5); for an unknown outcome (U1: marked so, or a lapsed
    /// lease), take it over when this tool reconciles (U3) or re-runs (U2a, once the held
    /// lease lapsed), else hold it for a person's decision (U2). An unknown outcome still
    /// held under `on_unknown = "rerun"` is [`Error::OutcomeUnknown`].
    fn decide(&self, record: &Record, now: Timestamp) -> Result<Decision, Error> {
        let previous = |cause, unknown_since| PreviousRun {
            claimed_at: record.created_at,
            fence: record.fence,
            unknown_since,
            cause,
        };
        // A2: a tool that requires approval never runs its body again without one: its
        // unknown outcomes are held for a person whatever `on_unknown` and `reconcile` say.
        let approval = self.spec.approval.is_some();
        let reruns = self.spec.on_unknown == OnUnknown::Rerun && !approval;
        let reconciles = self.spec.reconcile && !approval;
        match record.state {
            RecordState::Completed { .. } => Ok(Decision::Replay),
            RecordState::InProgress { owner, lease_until } if now >= lease_until => {
                if !(reconciles || reruns) {
                    return Ok(Decision::Hold {
                        lapsed: Some((owner, lease_until)),
                    });
                }
                Ok(Decision::TakeOver(Due {
                    seen_owner: owner,
                    seen_lease_until: lease_until,
                    previous: previous(UnknownCause::LeaseLapsed, record.created_at),
                }))
            }
            RecordState::InProgress { lease_until, .. } => Ok(Decision::Wait {
                seen_lease_until: lease_until,
            }),
            RecordState::OutcomeUnknown {
                owner,
                lease_until,
                since,
            } => {
                if reconciles || (reruns && now >= lease_until) {
                    return Ok(Decision::TakeOver(Due {
                        seen_owner: owner,
                        seen_lease_until: lease_until,
                        previous: previous(UnknownCause::GaveUp, since),
                    }));
                }
                if !reruns {
                    return Ok(Decision::Hold { lapsed: None });
                }
                Err(Error::OutcomeUnknown {
                    tool: self.spec.name.to_owned(),
                    key: self.key.to_string(),
                    since,
                    retry_after_ms: Some(duration_millis(lease_until.saturating_since(now))),
                    held: false,
                })
            }
            RecordState::AwaitingApproval { since } => Ok(Decision::AwaitingApproval { since }),
            RecordState::Approved { decided_at, until } => {
                // A3: the approver's validity, capped by the tool's own from the decision.
                let tools = self
                    .spec
                    .approval
                    .map_or(until, |valid_for| decided_at.saturating_add(valid_for));
                if now < until.min(tools) {
                    Ok(Decision::RunApproved { decided_at, until })
                } else {
                    Ok(Decision::ApprovalExpired { until })
                }
            }
            // A key decided not applied with this fingerprint is claimed by the store
            // (U6); seen here, it changed between the claim and its answer.
            _ => Ok(Decision::LookAgain),
        }
    }

    /// U2: the crashed owner's claim (`owner`, `lease_until` as seen) is marked unknown,
    /// cause lease lapsed, as a compare-and-set. `false`: the record changed since it was
    /// read. A store that cannot record transitions leaves it as it is (it counts as
    /// unknown all the same, U1).
    async fn mark_lapsed(
        &self,
        record: &Record,
        owner: OwnerToken,
        lease_until: Timestamp,
        now: Timestamp,
    ) -> Result<bool, Error> {
        let store = self.engine.store();
        let request = TransitionRequest::lapsed(&self.key, record, owner, lease_until, now);
        let marking = store.transition(request);
        match self
            .trace
            .timed(StoreOperation::MarkUnknown, store.backend(), marking)
            .await
        {
            Ok(marked) => Ok(marked),
            Err(e) if e.kind == StoreErrorKind::Unsupported => Ok(true),
            Err(e) => Err(self.store_error(e)),
        }
    }

    /// U2: the answer to every call of a key held for a person's decision.
    /// Counts one more refusal of what the store itself answered: `None` (look again) for
    /// the first two, then the store's `Corrupt` error saying `what`.
    fn refused_again(&self, refusals: &mut u32, what: &'static str) -> Option<Error> {
        *refusals += 1;
        (*refusals >= 3).then(|| {
            let backend = self.engine.store().backend();
            self.store_error(StoreError::new(backend, StoreErrorKind::Corrupt, what))
        })
    }

    /// Records the approval request on the caller's own fresh claim (A2): one
    /// compare-and-set. `false`: the claim changed under the caller.
    async fn request_approval(
        &self,
        owner: OwnerToken,
        fence: u64,
        reopened: bool,
        now: Timestamp,
        expires_at: Timestamp,
    ) -> Result<bool, Error> {
        let request = TransitionRequest {
            key: &self.key,
            fence,
            seen: Seen::InProgress {
                owner,
                lease_until: None,
            },
            target: Target::AwaitingApproval,
            now,
            expires_at,
            entry: self.with_validity(HistoryEntry::new(
                now,
                HistoryEvent::ApprovalRequested,
                fence,
            )),
        };
        // Dropped before the request is recorded (or refused by the store): the claim is
        // given back, as any claim whose body never began (U4).
        let mut guard = RequestGuard {
            store: Arc::clone(self.engine.store()),
            key: self.key.clone(),
            owner,
            fence,
            reopened,
            now,
            armed: true,
        };
        let recorded = self.approval_transition(request).await;
        guard.armed = recorded.is_err();
        recorded
    }

    /// One compare-and-set of the approval states (A2, A4).
    async fn approval_transition(&self, request: TransitionRequest<'_>) -> Result<bool, Error> {
        let store = self.engine.store();
        self.trace
            .timed(
                StoreOperation::Transition,
                store.backend(),
                store.transition(request),
            )
            .await
            .map_err(|e| self.store_error(e))
    }

    /// `entry` with the tool's approval validity, which caps a person's approval (A3).
    fn with_validity(&self, entry: HistoryEntry) -> HistoryEntry {
        match self.spec.approval {
            Some(valid_for) => entry.with_valid_for(valid_for),
            None => entry,
        }
    }

    fn awaiting_approval(&self, since: Timestamp, expired: bool) -> Error {
        Error::AwaitingApproval {
            tool: self.spec.name.to_owned(),
            key: self.key.to_string(),
            since,
            expired,
        }
    }

    /// The saved denial (A5) as the error every call of the key gets.
    fn denied(&self, outcome: &Envelope) -> Error {
        match Denial::from_envelope(outcome) {
            Ok(denial) => Error::Denied {
                tool: self.spec.name.to_owned(),
                key: self.key.to_string(),
                actor: denial.actor,
                note: denial.note,
                at: denial.at,
            },
            Err(reason) => Error::Decode {
                tool: self.spec.name.to_owned(),
                key: self.key.to_string(),
                reason: format!("a saved denial: {reason}"),
            },
        }
    }

    fn held(&self, record: &Record) -> Error {
        let since = match record.state {
            RecordState::OutcomeUnknown { since, .. } => since,
            _ => record.created_at,
        };
        Error::OutcomeUnknown {
            tool: self.spec.name.to_owned(),
            key: self.key.to_string(),
            since,
            retry_after_ms: None,
            held: true,
        }
    }

    /// S5, with a hint of when to come back: the owner's lease deadline, or its next
    /// renewal if that is sooner (one heartbeat of this tool).
    fn in_progress(&self, now: Timestamp, started: Timestamp, lease_until: Timestamp) -> Error {
        let until_lapse = lease_until.saturating_since(now);
        let hint = match self.spec.effective_heartbeat() {
            Some(heartbeat) => until_lapse.min(heartbeat),
            None => until_lapse,
        };
        Error::InProgress {
            tool: self.spec.name.to_owned(),
            key: self.key.to_string(),
            waited_ms: duration_millis(now.saturating_since(started)),
            retry_after_ms: duration_millis(hint).max(1),
        }
    }
}

/// What [`PreparedCall::decide`] chose for a live record.
/// Gives back a claim whose approval request was not recorded: the call was dropped while
/// it waited for the store, or the store refused (A2, U4). A first claim is released, a
/// claim of a key decided not applied returns it to not applied (U6). The write runs on a
/// task of its own ([`detach`]), so it completes without the caller.
struct RequestGuard {
    store: Arc<dyn Store>,
    key: IdempotencyKey,
    owner: OwnerToken,
    fence: u64,
    reopened: bool,
    now: Timestamp,
    armed: bool,
}

impl Drop for RequestGuard {
    fn drop(&mut self) {
        if !self.armed {
            return;
        }
        let (store, key, owner) = (Arc::clone(&self.store), self.key.clone(), self.owner);
        let (fence, reopened, now) = (self.fence, self.reopened, self.now);
        detach(async move {
            let given_back = if reopened {
                let request = TransitionRequest {
                    key: &key,
                    fence,
                    seen: Seen::InProgress {
                        owner,
                        lease_until: None,
                    },
                    target: Target::NotApplied,
                    now,
                    expires_at: now,
                    entry: HistoryEntry::new(now, HistoryEvent::Released, fence),
                };
                store.transition(request).await.map(drop)
            } else {
                store.release(&key, owner).await.map(drop)
            };
            if let Err(error) = given_back {
                tracing::warn!(key = %key, %error, "could not release a claim whose approval request was not recorded; it lapses with its lease");
            }
        });
    }
}

enum Decision {
    Replay,
    TakeOver(Due),
    Wait {
        seen_lease_until: Timestamp,
    },
    /// Held for a person's decision (U2); `lapsed`: an in-progress claim (owner, lease
    /// deadline) whose lease lapsed, to mark unknown first.
    Hold {
        lapsed: Option<(OwnerToken, Timestamp)>,
    },
    /// The record is in a state this call does not act on: claim again.
    LookAgain,
    AwaitingApproval {
        since: Timestamp,
    },
    RunApproved {
        decided_at: Timestamp,
        until: Timestamp,
    },
    ApprovalExpired {
        until: Timestamp,
    },
}

/// A takeover that is due.
struct Due {
    seen_owner: OwnerToken,
    seen_lease_until: Timestamp,
    previous: PreviousRun,
}
