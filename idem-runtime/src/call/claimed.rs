//! A call that holds its key's claim: reconcile, run the body with its lease renewed, and
//! finish — save, mark unknown or release — even if the caller goes away (contract S4,
//! S6, S7, S10, L1, U1–U5).

use std::future::Future;
use std::sync::Arc;

use serde::Serialize;
use tracing::Instrument;

use super::acquire::{Lifetime, Ownership, Reopened};
use super::PreparedCall;
use crate::attempt::AttemptInfo;
use crate::clock::{Clock, Timestamp};
use crate::context::CallContext;
use crate::detach::{detach, Detachable};
use crate::envelope::Envelope;
use crate::error::Error;
use crate::heartbeat::{Beating, Heartbeat, Lease};
use crate::key::IdempotencyKey;
use crate::outcome::{CallStatus, IdempotentError, OutcomeSource};
use crate::reconcile::{ReconcileVerdict, Reconciled};
use crate::spec::OnCancel;
use crate::store::{
    CompleteRequest, Completion, HistoryEntry, HistoryEvent, MarkUnknownRequest, OwnerToken, Seen,
    Store, Target, TransitionRequest, UnknownReason,
};
use crate::telemetry::{CallTrace, ReleasedBecause, StoreOperation, UnknownBecause};

/// A call that holds its key's claim (the `Ok` of [`PreparedCall::claim`]): reconcile if
/// [`needs_reconcile`](Self::needs_reconcile), then [`run`](Self::run) the body.
///
/// Dropping it without running the body gives the claim back: released for a first
/// claim, marked outcome unknown again after a takeover, not applied again after a claim
/// of a key decided not applied (U4, U6).
#[derive(Debug)]
pub struct ClaimedCall {
    call: PreparedCall,
    owner: OwnerToken,
    lifetime: Lifetime,
    attempt: AttemptInfo,
    needs_reconcile: bool,
    /// Whether the claim took a key decided not applied (U6).
    reopened: Reopened,
    /// Renews the lease alongside async work (L1).
    heartbeat: Option<Heartbeat>,
    /// The heartbeat of the sync path, served by the renewal thread; unregistered on drop.
    _beating: Option<Beating>,
    guard: ClaimGuard,
}

/// What finishing writes to the store.
enum FinishStep {
    /// Save the outcome of a call that ends with `CallStatus` (executed or reconciled).
    Complete(Envelope, CallStatus),
    MarkUnknown(UnknownBecause),
    /// Give the claim back: delete a first claim's record (S4), or return a key decided
    /// not applied to that state (U6).
    Release,
}

impl ClaimedCall {
    pub(super) fn new(call: PreparedCall, ownership: Ownership, blocking: bool) -> Self {
        let (store, clock) = (call.engine.store(), call.engine.clock());
        call.trace.claimed(ownership.fence);
        let claimed_at = ownership.lifetime.created_at;
        let attempt = AttemptInfo::new(
            call.key.clone(),
            ownership.fence,
            claimed_at,
            ownership.previous,
        );
        let heartbeat = Heartbeat::new(
            store,
            clock,
            &call.key,
            Lease {
                tool: call.spec.name,
                owner: ownership.owner,
                claimed_at,
                lease: call.spec.lease,
                every: call.spec.effective_heartbeat(),
                trace: call.trace.clone(),
            },
            attempt.fenced_signal(),
        );
        let beating = match (&heartbeat, blocking) {
            (Some(heartbeat), true) => heartbeat.register(),
            _ => None,
        };
        // Dropped before the body begins: give the claim back as it was taken (U4).
        let on_drop = match ownership.previous {
            Some(previous) => DropAction::MarkUnknown {
                since: previous.unknown_since,
            },
            None => DropAction::Release,
        };
        let guard = ClaimGuard {
            trace: call.trace.clone(),
            store: Arc::clone(store),
            clock: Arc::clone(clock),
            key: call.key.clone(),
            owner: ownership.owner,
            fence: ownership.fence,
            reopened: ownership.reopened,
            on_drop: Some(on_drop),
        };
        ClaimedCall {
            reopened: ownership.reopened,
            needs_reconcile: call.spec.reconcile && ownership.previous.is_some(),
            owner: ownership.owner,
            lifetime: ownership.lifetime,
            attempt,
            heartbeat: if blocking { None } else { heartbeat },
            _beating: beating,
            guard,
            call,
        }
    }

    /// Whether this call took over a run whose outcome is unknown and its tool has a
    /// reconcile function: then ask it (with [`attempt`](Self::attempt)) and pass its
    /// answer to [`settle`](Self::settle) before running the body (U3).
    pub fn needs_reconcile(&self) -> bool {
        self.needs_reconcile
    }

    /// This attempt: key, fence, the run it took over (if any), the fenced signal.
    pub fn attempt(&self) -> AttemptInfo {
        self.attempt.clone()
    }

    /// The context the body (and a reconcile function) runs under: the caller's, with this
    /// call's key and attempt (K10).
    fn body_context(&self) -> CallContext {
        self.call
            .context
            .clone()
            .unwrap_or_default()
            .for_body(self.attempt.clone())
    }

    /// Acts on a reconcile function's answer (U3), awaiting it first if it is a future
    /// (with the lease renewed meanwhile). `Ok`: not done, run the body now. `Err`: the
    /// call is answered: [`Reconciled::Done`]'s outcome, saved and returned as if the body
    /// had returned it (status [`CallStatus::Reconciled`]); or, for
    /// [`Reconciled::Unknown`], [`Error::OutcomeUnknown`], the key staying unknown so that
    /// the next call reconciles again.
    pub async fn settle<T, E, V>(mut self, verdict: V) -> Result<ClaimedCall, Result<T, E>>
    where
        T: Serialize,
        E: IdempotentError,
        V: ReconcileVerdict<T, E>,
    {
        let span = self.call.trace.span().clone();
        async move {
            let asked = self.body_context().run(verdict.into_verdict());
            let answer = Heartbeat::alongside(self.heartbeat.as_ref(), asked).await;
            match answer {
                Reconciled::NotDone => {
                    self.call.trace.reconcile_answered(true);
                    self.needs_reconcile = false;
                    Ok(self)
                }
                Reconciled::Done(outcome) => {
                    Err(self.finish(outcome, CallStatus::Reconciled).await)
                }
                Reconciled::Unknown => {
                    self.call.trace.reconcile_answered(false);
                    Err(self.still_unknown().await)
                }
            }
        }
        .instrument(span)
        .await
    }

    /// [`settle`](Self::settle) for a sync tool: drives the answer (and any store write) on
    /// this thread, with the rules of [`PreparedCall::run_blocking`].
    pub fn settle_blocking<T, E, V>(self, verdict: V) -> Result<ClaimedCall, Result<T, E>>
    where
        T: Serialize,
        E: IdempotentError,
        V: ReconcileVerdict<T, E>,
    {
        let span = self.call.trace.span().clone();
        let _in_span = span.enter();
        let asked = self.body_context().run(verdict.into_verdict());
        match self.call.drive_blocking(asked) {
            Ok(Reconciled::NotDone) => {
                self.call.trace.reconcile_answered(true);
                let mut this = self;
                this.needs_reconcile = false;
                Ok(this)
            }
            Ok(Reconciled::Done(outcome)) => {
                Err(self.finish_blocking(outcome, CallStatus::Reconciled))
            }
            Ok(Reconciled::Unknown) => {
                self.call.trace.reconcile_answered(false);
                let mut this = self;
                let step = this.still_unknown_step();
                // Refused only on a current-thread runtime, which the claim already refused;
                // the key then stays in progress and lapses into an unknown outcome.
                drop(this.call.drive_blocking(step));
                Err(Err(E::from(this.unknown_error())))
            }
            Err(refused) => {
                // Not the call's end: dropping `self` leaves the key unknown (U4).
                self.call.trace.store_error(None, &refused);
                Err(Err(E::from(self.call.store_error(refused))))
            }
        }
    }

    /// Runs the body as this claim's owner, renewing the lease alongside it (L1), and
    /// finishes: saves its outcome, or marks it unknown, or releases (S4, U1).
    pub async fn run<T, E, Fut>(self, body: Fut) -> Result<T, E>
    where
        T: Serialize,
        E: IdempotentError,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run_body(body, false).await
    }

    /// [`run`](Self::run) for an async body that may block its thread inside a poll (a
    /// framework's handler that runs a sync fn inline, as rmcp does for a sync tool): while
    /// each poll runs, idem's renewal thread renews the lease too, so a body that never
    /// returns `Pending` keeps its claim however long it blocks (L1). Costs a registration
    /// with the renewal thread per poll.
    pub async fn run_may_block<T, E, Fut>(self, body: Fut) -> Result<T, E>
    where
        T: Serialize,
        E: IdempotentError,
        Fut: Future<Output = Result<T, E>>,
    {
        self.run_body(body, true).await
    }

    /// The body, its heartbeat (also served by the renewal thread during each poll when the
    /// body `may_block`), then the finishing write.
    async fn run_body<T, E, Fut>(mut self, body: Fut, may_block: bool) -> Result<T, E>
    where
        T: Serialize,
        E: IdempotentError,
        Fut: Future<Output = Result<T, E>>,
    {
        let span = self.call.trace.span().clone();
        async move {
            self.body_begins();
            let body = self.body_context().run(body);
            let outcome = Heartbeat::alongside_with(self.heartbeat.as_ref(), body, may_block).await;
            self.finish(outcome, CallStatus::Executed).await
        }
        .instrument(span)
        .await
    }

    /// [`run`](Self::run) for a sync tool: the body runs on this thread while the lease is
    /// renewed by idem's renewal thread.
    pub fn run_blocking<T, E>(mut self, body: impl FnOnce() -> Result<T, E>) -> Result<T, E>
    where
        T: Serialize,
        E: IdempotentError,
    {
        let span = self.call.trace.span().clone();
        let _in_span = span.enter();
        self.body_begins();
        let context = self.body_context();
        let outcome = self.call.blocking_section(|| context.enter(body));
        self.finish_blocking(outcome, CallStatus::Executed)
    }

    /// From here the effect may happen: a drop or a panic leaves the outcome unknown,
    /// unless the tool releases on cancel (U4) and this run did not take over an unknown
    /// outcome, which is never released (U1, U2b).
    fn body_begins(&mut self) {
        let since = self.unknown_since();
        let releases = self.call.spec.on_cancel == OnCancel::Release && !self.attempt.is_takeover();
        self.guard.on_drop = Some(if releases {
            DropAction::Release
        } else {
            DropAction::MarkUnknown { since }
        });
        self.needs_reconcile = false;
    }

    /// Since when this run's outcome would be unknown: the claim of the run it took over,
    /// else its own.
    fn unknown_since(&self) -> Timestamp {
        self.attempt
            .previous()
            .map_or(self.attempt.claimed_at(), |p| p.unknown_since)
    }

    /// What finishing writes for `outcome`, or `None` when it cannot be saved (then the key
    /// stays in progress until its lease lapses, S10).
    fn finish_step<T: Serialize, E: IdempotentError>(
        &self,
        outcome: &Result<T, E>,
        status: CallStatus,
    ) -> Option<FinishStep> {
        // S4: a release lets the next attempt run the body with the same key. After a
        // takeover this run's "did not happen" says nothing of the run it took over, whose
        // outcome is still unknown: the key stays unknown instead (U2).
        let release = if self.attempt.is_takeover() {
            FinishStep::MarkUnknown(UnknownBecause::Error)
        } else {
            FinishStep::Release
        };
        let encoded = match outcome {
            Err(error) if error.idem_error().is_some() => return Some(release),
            // U1: whether the effect happened is unknown.
            Err(error) if error.is_outcome_unknown() => {
                return Some(FinishStep::MarkUnknown(UnknownBecause::Error))
            }
            Err(error) if error.is_retryable() => return Some(release),
            Ok(value) => Envelope::encode_ok(value),
            Err(error) => Envelope::encode_err(error),
        };
        match encoded {
            Ok(envelope) => Some(FinishStep::Complete(envelope, status)),
            Err(e) => {
                tracing::error!(tool = self.call.spec.name, key = %self.call.key, error = %e, "the outcome cannot be saved; the key stays in progress until its lease lapses");
                None
            }
        }
    }

    /// The store write of `step`, as an owned future that finishes even if its caller
    /// goes away (U5), and then the call's status (V2). Answers whether the outcome was
    /// saved.
    fn finish_write(&self, step: FinishStep) -> Detachable<bool> {
        // Before the outcome can be seen in the store: a retry that replays it even before
        // this call publishes its outcome knows it as this call's own run (D11). Noted only
        // for an outcome to save, never a release, after which the key's next claim starts
        // again at fence 1 and the same (key, fence) is another run.
        if let (FinishStep::Complete(..), Some(context)) = (&step, &self.call.context) {
            context.note_claim(&self.call.key, self.attempt.fence());
        }
        let (store, clock) = (
            Arc::clone(self.call.engine.store()),
            Arc::clone(self.call.engine.clock()),
        );
        let (key, owner, trace) = (self.call.key.clone(), self.owner, self.call.trace.clone());
        let (since, fence, reopened) = (self.unknown_since(), self.attempt.fence(), self.reopened);
        let span = trace.span().clone();
        let write = async move {
            match step {
                FinishStep::Complete(envelope, status) => {
                    let now = clock.now();
                    let source = match status {
                        CallStatus::Reconciled => OutcomeSource::Reconciled,
                        _ => OutcomeSource::Executed,
                    };
                    let entry = HistoryEntry::new(now, HistoryEvent::Completed { source }, fence);
                    let completing = store.complete(CompleteRequest {
                        key: &key,
                        owner,
                        outcome: &envelope,
                        source,
                        now,
                        entry,
                    });
                    let saved = match trace
                        .timed(StoreOperation::Complete, store.backend(), completing)
                        .await
                    {
                        Ok(Completion::Saved) => true,
                        // The lease lapsed and another caller took over (S6).
                        Ok(Completion::Fenced) => {
                            trace.lease_lost(StoreOperation::Complete);
                            false
                        }
                        // The effect happened and its outcome was not saved: the key stays
                        // in progress until its lease lapses (S10); `timed` reported it.
                        Err(_) => false,
                    };
                    ended(&trace, status, saved);
                    saved
                }
                FinishStep::MarkUnknown(cause) => {
                    let held = Held {
                        store: &*store,
                        clock: &*clock,
                        key: &key,
                        owner,
                        fence,
                        trace: &trace,
                    };
                    held.mark_unknown(since, cause.reason()).await;
                    trace.outcome_unknown(cause);
                    false
                }
                FinishStep::Release => {
                    let held = Held {
                        store: &*store,
                        clock: &*clock,
                        key: &key,
                        owner,
                        fence,
                        trace: &trace,
                    };
                    held.give_back(reopened).await;
                    trace.released(ReleasedBecause::Error);
                    false
                }
            }
        };
        Detachable::new(write.instrument(span))
    }

    /// The write that finishes with `outcome`, if any. From here the guard does nothing:
    /// the outcome exists, so the effect may have happened, and only this write acts (not
    /// even a panic in the outcome's `Serialize` releases the claim, S7, S10).
    fn finishing<T: Serialize, E: IdempotentError>(
        &mut self,
        outcome: &Result<T, E>,
        status: CallStatus,
    ) -> Option<Detachable<bool>> {
        self.guard.on_drop = None;
        match self.finish_step(outcome, status) {
            Some(step) => Some(self.finish_write(step)),
            None => {
                ended(&self.call.trace, status, false);
                None
            }
        }
    }

    /// Finishes with the body's (or a reconcile function's) outcome and returns it.
    async fn finish<T: Serialize, E: IdempotentError>(
        mut self,
        outcome: Result<T, E>,
        status: CallStatus,
    ) -> Result<T, E> {
        let recorded = match self.finishing(&outcome, status) {
            // The write is one store round trip, bounded by the store's timeout: it renews
            // alongside only if a renewal is due already (a body that ended just then), so
            // the common write arms no renewal timer.
            Some(write) => {
                let due = self.heartbeat.as_ref().filter(|h| h.is_due());
                Heartbeat::alongside(due, write).await
            }
            None => false,
        };
        self.call.record(status, self.lifetime, recorded);
        outcome
    }

    /// [`finish`](Self::finish) for the sync path.
    fn finish_blocking<T: Serialize, E: IdempotentError>(
        mut self,
        outcome: Result<T, E>,
        status: CallStatus,
    ) -> Result<T, E> {
        // Refused only on a current-thread runtime, which the claim already refused.
        let recorded = match self.finishing(&outcome, status) {
            Some(write) => self.call.drive_blocking(write).unwrap_or(false),
            None => false,
        };
        self.call.record(status, self.lifetime, recorded);
        outcome
    }

    /// The reconcile function could not tell: the key stays unknown (U3).
    async fn still_unknown<T, E: IdempotentError>(mut self) -> Result<T, E> {
        self.guard.on_drop = None;
        let step = self.still_unknown_step();
        Heartbeat::alongside(self.heartbeat.as_ref(), step).await;
        Err(E::from(self.unknown_error()))
    }

    fn still_unknown_step(&mut self) -> Detachable<bool> {
        self.guard.on_drop = None;
        self.finish_write(FinishStep::MarkUnknown(UnknownBecause::Reconcile))
    }

    fn unknown_error(&self) -> Error {
        Error::OutcomeUnknown {
            tool: self.call.spec.name.to_owned(),
            key: self.call.key.to_string(),
            since: self.unknown_since(),
            retry_after_ms: None,
            held: false,
        }
    }
}

/// The status event of a call whose body (or reconcile function, `status`
/// [`CallStatus::Reconciled`]) gave an outcome; `saved`: the outcome was saved.
fn ended(trace: &CallTrace, status: CallStatus, saved: bool) {
    match status {
        CallStatus::Reconciled => trace.reconciled(saved),
        CallStatus::Executed | CallStatus::Replayed => trace.executed(saved),
    }
}

/// A claim being given up without an outcome: the writes that mark it unknown or give it
/// back, each as one store operation that reports its failure (the claim then lapses with
/// its lease, and the next caller treats the outcome as unknown all the same, U1) or a
/// claim already lost.
struct Held<'a> {
    store: &'a dyn Store,
    clock: &'a dyn Clock,
    key: &'a IdempotencyKey,
    owner: OwnerToken,
    fence: u64,
    trace: &'a CallTrace,
}

impl Held<'_> {
    /// Marks the outcome unknown (U1), with `cause` in the history (U7).
    async fn mark_unknown(&self, since: Timestamp, cause: UnknownReason) {
        let now = self.clock.now();
        let entry = HistoryEntry::new(now, HistoryEvent::Unknown { cause }, self.fence);
        let request = MarkUnknownRequest {
            key: self.key,
            owner: self.owner,
            now,
            since,
            entry,
        };
        let marking = self.store.mark_unknown(request);
        // A store error is reported by `timed`.
        if let Ok(false) = self
            .trace
            .timed(StoreOperation::MarkUnknown, self.store.backend(), marking)
            .await
        {
            self.trace.lease_lost(StoreOperation::MarkUnknown);
        }
    }

    /// Gives the claim back: deletes a first claim's record (S4, S7), or returns a key
    /// decided not applied, or approved (`reopened`), to that state, keeping its fence and
    /// history (U6, A4).
    async fn give_back(&self, reopened: Reopened) {
        let target = match reopened {
            Reopened::No => None,
            Reopened::NotApplied => Some(Target::NotApplied),
            Reopened::Approved { decided_at, until } => {
                Some(Target::Approved { decided_at, until })
            }
        };
        let Some(target) = target else {
            // A failure is reported by `timed`; the claim lapses with its lease.
            let releasing = self.store.release(self.key, self.owner);
            let released =
                self.trace
                    .timed(StoreOperation::Release, self.store.backend(), releasing);
            drop(released.await);
            return;
        };
        let now = self.clock.now();
        let entry = HistoryEntry::new(now, HistoryEvent::Released, self.fence);
        let request = TransitionRequest {
            key: self.key,
            fence: self.fence,
            seen: Seen::InProgress {
                owner: self.owner,
                lease_until: None,
            },
            target,
            now,
            expires_at: now,
            entry,
        };
        let returning = self.store.transition(request);
        if let Ok(false) = self
            .trace
            .timed(StoreOperation::Release, self.store.backend(), returning)
            .await
        {
            self.trace.lease_lost(StoreOperation::Release);
        }
    }
}

/// What the guard does if the call is dropped (or panics) while it holds the claim.
#[derive(Debug, Clone, Copy)]
enum DropAction {
    Release,
    MarkUnknown { since: Timestamp },
}

/// Acts on the claim when a [`ClaimedCall`] is dropped or unwinds before it finished
/// (S7, U4); the write goes through [`detach`], so it completes without the caller.
struct ClaimGuard {
    /// The call's span: the guard's write and event end the call (V2).
    trace: CallTrace,
    store: Arc<dyn Store>,
    clock: Arc<dyn Clock>,
    key: IdempotencyKey,
    owner: OwnerToken,
    fence: u64,
    /// Whether the claim took a key decided not applied (U6).
    reopened: Reopened,
    /// `None` once finishing took over.
    on_drop: Option<DropAction>,
}

impl std::fmt::Debug for ClaimGuard {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ClaimGuard")
            .field("key", &self.key)
            .field("on_drop", &self.on_drop)
            .finish_non_exhaustive()
    }
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        let Some(action) = self.on_drop.take() else {
            return;
        };
        let (trace, store, clock, key, owner, fence, reopened) = (
            self.trace.clone(),
            Arc::clone(&self.store),
            Arc::clone(&self.clock),
            self.key.clone(),
            self.owner,
            self.fence,
            self.reopened,
        );
        let cause = if std::thread::panicking() {
            UnknownReason::Panicked
        } else {
            UnknownReason::Cancelled
        };
        let span = trace.span().clone();
        // The call was dropped or panicked while it held the claim.
        detach(
            async move {
                let held = Held {
                    store: &*store,
                    clock: &*clock,
                    key: &key,
                    owner,
                    fence,
                    trace: &trace,
                };
                match action {
                    DropAction::Release => {
                        held.give_back(reopened).await;
                        trace.released(ReleasedBecause::Dropped);
                    }
                    DropAction::MarkUnknown { since } => {
                        held.mark_unknown(since, cause).await;
                        trace.outcome_unknown(UnknownBecause::Dropped);
                    }
                }
            }
            .instrument(span),
        );
    }
}
