//! The arguments and answers of the store's operations (contract S2, S6, L1, U1, U2, U6,
//! U7): one struct per compare-and-set, the states a [`Store::transition`](super::Store::transition)
//! expects and moves to.

use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::label::RecordLabel;

#[cfg(doc)]
use super::Store;
use super::{HistoryEntry, HistoryEvent, OutcomeSource, OwnerToken, Record, UnknownReason};

/// Arguments of [`Store::claim`].
#[derive(Debug, Clone)]
pub struct ClaimRequest<'a> {
    /// The key to claim.
    pub key: &'a IdempotencyKey,
    /// Fingerprint to store with a new claim.
    pub fingerprint: &'a Fingerprint,
    /// Owner of the new claim.
    pub owner: OwnerToken,
    /// The engine clock's "now": decides expiry.
    pub now: Timestamp,
    /// Lease deadline of the new claim.
    pub lease_until: Timestamp,
    /// Expiry of the new record (`now + ttl`).
    pub expires_at: Timestamp,
    /// The label to store with a new claim (P1).
    pub label: &'a RecordLabel,
}

/// What [`Store::claim`] found.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Claim {
    /// The key was absent or expired, or decided not applied with the same fingerprint
    /// (U6): an in-progress record now belongs to the caller.
    Acquired {
        /// The new claim's fencing token: 1 if the store held no record of the key, else
        /// the held record's fence + 1 (F1).
        fence: u64,
        /// Whether the claim took a record decided not applied (U6): a release of this
        /// claim must return it to not applied ([`Store::transition`]), not delete it.
        reopened: bool,
    },
    /// A live record exists in any state but a not-applied one this call reopens (any
    /// fingerprint; an approval is never reopened by a claim, A4); nothing changed.
    Existing(Record),
}

/// Arguments of [`Store::take_over`]: replace an in-progress record whose lease lapsed, or
/// a record whose outcome is unknown.
#[derive(Debug, Clone)]
pub struct TakeoverRequest<'a> {
    /// The key.
    pub key: &'a IdempotencyKey,
    /// The owner seen in the record: the compare-and-set succeeds only if the record is
    /// still in progress (or outcome unknown) with this owner and this lease deadline.
    pub seen_owner: OwnerToken,
    /// The lease deadline seen in the lapsed record.
    pub seen_lease_until: Timestamp,
    /// The new owner.
    pub owner: OwnerToken,
    /// The engine clock's "now".
    pub now: Timestamp,
    /// The new lease deadline.
    pub lease_until: Timestamp,
    /// The new expiry (`now + ttl`).
    pub expires_at: Timestamp,
    /// The new owner's fencing token: the seen record's fence + 1 (F1).
    pub fence: u64,
    /// The label to store (P1): the same call's, so it changes only a record written
    /// before labels existed.
    pub label: &'a RecordLabel,
    /// The `taken_over` entry to append to the record's history (U7).
    pub entry: HistoryEntry,
}

/// Arguments of [`Store::renew`]: extend a held claim's lease (a heartbeat, L1).
#[derive(Debug, Clone)]
pub struct RenewRequest<'a> {
    /// The key.
    pub key: &'a IdempotencyKey,
    /// The owner renewing: the compare-and-set succeeds only if the record is live and
    /// still in progress with this owner.
    pub owner: OwnerToken,
    /// The engine clock's "now": decides expiry.
    pub now: Timestamp,
    /// The new lease deadline (`now + lease`).
    pub lease_until: Timestamp,
}

/// Arguments of [`Store::mark_unknown`]: the owner gives up without an outcome (U1).
#[derive(Debug, Clone)]
pub struct MarkUnknownRequest<'a> {
    /// The key.
    pub key: &'a IdempotencyKey,
    /// The owner giving up: the compare-and-set succeeds only if the record is live and
    /// still in progress with this owner.
    pub owner: OwnerToken,
    /// The engine clock's "now": decides expiry.
    pub now: Timestamp,
    /// When the run whose outcome is unknown claimed the key.
    pub since: Timestamp,
    /// The `unknown` entry to append to the record's history (U7).
    pub entry: HistoryEntry,
}

/// Arguments of [`Store::complete`]: the owner saves its outcome.
#[derive(Debug, Clone)]
pub struct CompleteRequest<'a> {
    /// The key.
    pub key: &'a IdempotencyKey,
    /// The owner saving: the compare-and-set succeeds only if the record is live and still
    /// in progress with this owner.
    pub owner: OwnerToken,
    /// The outcome to save (S11).
    pub outcome: &'a Envelope,
    /// Where it came from: the body or a reconcile function.
    pub source: OutcomeSource,
    /// The engine clock's "now": the completion time.
    pub now: Timestamp,
    /// The `completed` entry to append to the record's history (U7).
    pub entry: HistoryEntry,
}

/// The state a [`Store::transition`] expects to find (besides the fence): a
/// compare-and-set on exactly what the caller saw.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum Seen {
    /// In progress with this owner; with `lease_until`, also with that lease deadline
    /// (a claim seen by another caller), without it whatever its lease (the owner itself).
    InProgress {
        /// The owner.
        owner: OwnerToken,
        /// The lease deadline seen, if any.
        lease_until: Option<Timestamp>,
    },
    /// Outcome unknown with this owner and lease deadline.
    OutcomeUnknown {
        /// The owner that gave up.
        owner: OwnerToken,
        /// Its lease deadline.
        lease_until: Timestamp,
    },
    /// Decided not applied (U6).
    NotApplied,
    /// Awaiting approval (A2).
    AwaitingApproval,
    /// Approved (A3), the approval that expires at `until`: a later approval of the same
    /// key (a re-approval after an expiry keeps the fence, F1) has another `until`, so a
    /// caller that saw an earlier one cannot move it.
    Approved {
        /// The expiry of the approval seen.
        until: Timestamp,
    },
}

/// The state a [`Store::transition`] moves a record to.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum Target<'a> {
    /// Outcome unknown since `since`, keeping the owner and lease deadline; only from
    /// [`Seen::InProgress`] (a call marking a lapsed claim unknown, U2).
    OutcomeUnknown {
        /// When the run whose outcome is unknown claimed the key.
        since: Timestamp,
    },
    /// Completed with `outcome` from `source` at the request's `now`; the expiry becomes
    /// the later of the record's and the request's `expires_at` (a person's decision, U6).
    Completed {
        /// The outcome to save.
        outcome: &'a Envelope,
        /// Where it came from.
        source: OutcomeSource,
    },
    /// Not applied, decided at the request's `now` (U6): owner, lease, unknown mark and
    /// outcome are cleared; fence and history stay.
    NotApplied,
    /// Awaiting approval since the request's `now` (A2, A4): from
    /// [`Seen::InProgress`] (the caller's own claim) or [`Seen::Approved`] (an expired
    /// approval). Owner and lease are cleared; fence and history stay.
    AwaitingApproval,
    /// Approved at `decided_at` until `until` (A3, A4): from [`Seen::AwaitingApproval`] (a
    /// person's approval) or [`Seen::InProgress`] (a run of an approved key giving it
    /// back). Owner and lease are cleared; fence and history stay.
    Approved {
        /// When the approval was recorded.
        decided_at: Timestamp,
        /// When it expires.
        until: Timestamp,
    },
    /// In progress with `owner` until `lease_until`, with fence `fence` (the seen fence +
    /// 1, F1), created at the request's `now` and expiring at its `expires_at` (as a
    /// claim): only from [`Seen::Approved`], the run an approval allows (A4). The
    /// approval columns are cleared.
    InProgress {
        /// The new owner.
        owner: OwnerToken,
        /// Its lease deadline.
        lease_until: Timestamp,
        /// Its fencing token.
        fence: u64,
    },
}

/// Arguments of [`Store::transition`]: move a record from the state its caller saw to
/// another, as one compare-and-set (U2, U6).
#[derive(Debug, Clone)]
pub struct TransitionRequest<'a> {
    /// The key.
    pub key: &'a IdempotencyKey,
    /// The fence the caller saw: the compare-and-set succeeds only if the record still
    /// has it and is still in the state [`seen`](Self::seen).
    pub fence: u64,
    /// The state the caller saw.
    pub seen: Seen,
    /// The state to move to.
    pub target: Target<'a>,
    /// The caller's "now" (the engine's clock, or the deciding operator's).
    pub now: Timestamp,
    /// For [`Target::Completed`]: the expiry to raise the record's to (now + the
    /// decision's `keep_for`); for [`Target::InProgress`]: the run's expiry (now + ttl).
    /// Ignored by the other targets.
    pub expires_at: Timestamp,
    /// The entry to append to the record's history (U7).
    pub entry: HistoryEntry,
}

/// What [`Store::complete`] did.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Completion {
    /// The outcome is saved.
    Saved,
    /// The record no longer belongs to this owner (its lease lapsed and another caller
    /// took over, or it expired): nothing was written (fencing, S6).
    Fenced,
}

impl<'a> TransitionRequest<'a> {
    /// The compare-and-set that marks a crashed owner's claim unknown (U1, U2): `record` of
    /// `key`, in progress with `owner` and `lease_until` as seen, whose lease lapsed at or
    /// before `now`, becomes outcome unknown since its claim, with the history entry
    /// `unknown` (cause `lease_lapsed`). Used by a call that finds it and by a decision.
    pub fn lapsed(
        key: &'a IdempotencyKey,
        record: &Record,
        owner: OwnerToken,
        lease_until: Timestamp,
        now: Timestamp,
    ) -> Self {
        TransitionRequest {
            key,
            fence: record.fence,
            seen: Seen::InProgress {
                owner,
                lease_until: Some(lease_until),
            },
            target: Target::OutcomeUnknown {
                since: record.created_at,
            },
            now,
            expires_at: record.expires_at,
            entry: HistoryEntry::new(
                now,
                HistoryEvent::Unknown {
                    cause: UnknownReason::LeaseLapsed,
                },
                record.fence,
            ),
        }
    }
}
