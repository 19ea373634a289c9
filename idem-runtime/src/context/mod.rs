//! The call context: the values a call is keyed by, carried into sync and async tools
//! without changing their signatures (contract K7, K9, K10, S12).
//!
//! A context is set for the duration of a closure ([`CallContext::enter`]) or a future
//! ([`CallContext::run`]), like a tracing span: the innermost one is in force. Tools may
//! also take a `&CallContext` argument to receive it explicitly; such an argument is never
//! part of the key.

use std::cell::RefCell;
use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::task::{Context, Poll};

use crate::engine::Engine;
use crate::key::{Fingerprint, IdempotencyKey};
use crate::label::RecordLabel;
use crate::outcome::CallRecord;

pub(crate) mod attempt;
mod resolve;

use attempt::AttemptInfo;

/// Conversation id, tool-call id, named scope values and engine for the calls made under
/// it; after a call, what that call did ([`last_outcome`](CallContext::last_outcome),
/// [`last_key`](CallContext::last_key), [`outcome_of`](CallContext::outcome_of)).
///
/// Cheap to clone (one `Arc`). Clones share one outcome slot: hand a clone to a task and
/// read what its call did on the original. Calls made concurrently on clones each find
/// their own outcome with [`outcome_of`](CallContext::outcome_of) (S13). The `with_*`
/// methods derive a new context with its own slot, so contexts built for concurrent calls
/// never see each other's outcome.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::CallContext;
/// let ctx = CallContext::new().with_conversation("conv_42").with_scope("tenant", "acme");
/// assert_eq!(ctx.conversation_id(), Some("conv_42"));
/// let inside = ctx.enter(|| CallContext::current().and_then(|c| c.scope_value("tenant").map(String::from)));
/// assert_eq!(inside.as_deref(), Some("acme"));
/// assert!(CallContext::current().is_none());
/// ```
#[derive(Clone, Default)]
pub struct CallContext {
    inner: Arc<Inner>,
}

#[derive(Clone, Default)]
struct Inner {
    engine: Option<Engine>,
    conversation_id: Option<Arc<str>>,
    tool_call_id: Option<Arc<str>>,
    turn_id: Option<Arc<str>>,
    scopes: Vec<(Arc<str>, Arc<str>)>,
    attempt: Option<AttemptSlot>,
    running: Option<AttemptInfo>,
    outcomes: Arc<Mutex<Outcomes>>,
}

/// The outcome slot that clones of one context share (S12, S13).
#[derive(Default)]
struct Outcomes {
    /// The outcome of the latest call to finish, unless a call started since.
    last: Option<CallRecord>,
    /// The key of the latest call to derive one, unless a call started since.
    last_key: Option<IdempotencyKey>,
    /// The outcomes of the latest [`CallContext::OUTCOMES_KEPT`] calls to finish, oldest
    /// first, one per key.
    by_key: VecDeque<CallRecord>,
    /// The runs made directly under this context whose outcome is being saved, as (key,
    /// fence), the latest [`CallContext::OUTCOMES_KEPT`]: a later replay of a record with one
    /// of them is the outcome of a run made here (D11).
    claims: VecDeque<(IdempotencyKey, u64)>,
}

impl std::fmt::Debug for CallContext {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("CallContext")
            .field("conversation_id", &self.inner.conversation_id)
            .field("tool_call_id", &self.inner.tool_call_id)
            .field("turn_id", &self.inner.turn_id)
            .field("scopes", &self.inner.scopes)
            .field("key", &self.key())
            .finish_non_exhaustive()
    }
}

thread_local! {
    static CURRENT: RefCell<Option<CallContext>> = const { RefCell::new(None) };
}

/// Restores the previous thread-local context on drop (also on panic).
struct Entered(Option<CallContext>);

impl Drop for Entered {
    fn drop(&mut self) {
        let previous = self.0.take();
        CURRENT.with(|current| *current.borrow_mut() = previous);
    }
}

fn enter_context(context: CallContext) -> Entered {
    Entered(CURRENT.with(|current| current.borrow_mut().replace(context)))
}

impl CallContext {
    /// An empty context: no conversation, no tool-call id, the default engine.
    pub fn new() -> Self {
        Self::default()
    }

    /// A derived context: a copy of this one with `f` applied and its own outcome slot, so
    /// calls made under the derived context never overwrite this one's
    /// [`last_outcome`](Self::last_outcome). (Plain clones share the slot.)
    fn edit(mut self, f: impl FnOnce(&mut Inner)) -> Self {
        let inner = Arc::make_mut(&mut self.inner);
        inner.outcomes = Arc::default();
        f(inner);
        self
    }

    /// Sets the conversation id that `scope = "conversation"` tools are keyed by.
    pub fn with_conversation(self, id: impl Into<Arc<str>>) -> Self {
        self.edit(|inner| inner.conversation_id = Some(id.into()))
    }

    /// Sets the provider's tool-call id that `scope = "call"` tools are keyed by.
    pub fn with_tool_call(self, id: impl Into<Arc<str>>) -> Self {
        self.edit(|inner| inner.tool_call_id = Some(id.into()))
    }

    /// Sets the identity of the assistant message the tool call came from (a response id,
    /// or a position in a history: [`ToolCall::turn_id`](crate::dispatch::ToolCall::turn_id)).
    /// `scope = "call"` tools are keyed by it with the tool-call id (D10), so a call id
    /// reused in a later turn is a new call. An empty id counts as none.
    pub fn with_turn(self, id: impl Into<Arc<str>>) -> Self {
        self.edit(|inner| inner.turn_id = Some(id.into()))
    }

    /// Sets the value of a user-named scope (`scope = "tenant"` reads `"tenant"`).
    pub fn with_scope(self, name: impl Into<Arc<str>>, value: impl Into<Arc<str>>) -> Self {
        let (name, value) = (name.into(), value.into());
        self.edit(|inner| {
            inner.scopes.retain(|(n, _)| *n != name);
            inner.scopes.push((name, value));
        })
    }

    /// Uses `engine` (store and clock) instead of the default one.
    pub fn with_engine(self, engine: Engine) -> Self {
        self.edit(|inner| inner.engine = Some(engine))
    }

    /// Attaches the attempt record of one dispatched tool call, for one attempt: the first
    /// attempt stores its key there and every retry reuses it unchanged (K9). Call it once
    /// per attempt: within an attempt only the first call of the record's tool carries.
    pub fn with_attempt(self, attempt: Arc<AttemptRecord>) -> Self {
        let slot = AttemptSlot {
            record: attempt,
            taken: Arc::new(AtomicBool::new(false)),
            outcome: Arc::default(),
        };
        self.edit(|inner| inner.attempt = Some(slot))
    }

    /// A copy that marks the body (or reconcile function) of the call whose attempt is
    /// `attempt` (K10, F1), with its own outcome slot so calls nested in the body do not
    /// overwrite the caller's.
    pub(crate) fn for_body(&self, attempt: AttemptInfo) -> Self {
        self.clone().edit(|inner| {
            inner.running = Some(attempt);
            inner.attempt = None;
        })
    }

    /// The conversation id, if set.
    pub fn conversation_id(&self) -> Option<&str> {
        self.inner.conversation_id.as_deref()
    }

    /// The tool-call id, if set.
    pub fn tool_call_id(&self) -> Option<&str> {
        self.inner.tool_call_id.as_deref()
    }

    /// The turn identity set with [`with_turn`](Self::with_turn), if any.
    pub fn turn_id(&self) -> Option<&str> {
        self.inner.turn_id.as_deref()
    }

    /// The value of a user-named scope, if set.
    pub fn scope_value(&self, name: &str) -> Option<&str> {
        self.inner
            .scopes
            .iter()
            .find(|(n, _)| &**n == name)
            .map(|(_, v)| &**v)
    }

    /// The engine set with [`with_engine`](Self::with_engine), if any.
    pub fn engine(&self) -> Option<&Engine> {
        self.inner.engine.as_ref()
    }

    /// The attempt record, if this context belongs to a dispatched call.
    pub fn attempt(&self) -> Option<&Arc<AttemptRecord>> {
        self.inner.attempt.as_ref().map(|slot| &slot.record)
    }

    /// The attempt record, if `tool` is the record's tool and no earlier call of this
    /// attempt took it: the key a call of `tool` carries (K9). At most once per attempt.
    pub(crate) fn take_attempt_for(&self, tool: &str) -> Option<&Arc<AttemptRecord>> {
        let slot = self.inner.attempt.as_ref()?;
        (slot.record.tool == tool && !slot.taken.swap(true, Ordering::SeqCst))
            .then_some(&slot.record)
    }

    /// Inside an `#[idempotent]` body: the key of the running call (K10).
    pub fn key(&self) -> Option<&IdempotencyKey> {
        self.inner.running.as_ref().map(AttemptInfo::key)
    }

    /// Inside an `#[idempotent]` body (or reconcile function): the running attempt — key,
    /// fencing token, the run it took over, the fenced signal (F1, L2, U2).
    pub fn attempt_info(&self) -> Option<&AttemptInfo> {
        self.inner.running.as_ref()
    }

    /// How many outcomes [`outcome_of`](Self::outcome_of) keeps per outcome slot: those
    /// of the latest 64 calls to finish (with distinct keys).
    pub const OUTCOMES_KEPT: usize = 64;

    fn outcomes(&self) -> std::sync::MutexGuard<'_, Outcomes> {
        self.inner
            .outcomes
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
    }

    /// What the last `#[idempotent]` call made directly under this context did (S12):
    /// `None` when that call failed before the store gave it an outcome (a layer error
    /// such as `MissingScope`, `Mismatch` or `InProgress`). With calls running
    /// concurrently on clones of this context it is the latest to finish, unless another
    /// call started after it (each call clears it when it starts); read each call's own
    /// with [`outcome_of`](Self::outcome_of) (S13).
    pub fn last_outcome(&self) -> Option<CallRecord> {
        self.outcomes().last.clone()
    }

    /// The idempotency key of the last `#[idempotent]` call made directly under this
    /// context, whatever followed (S13): executed, replayed, `Mismatch`, `InProgress`,
    /// `OutcomeUnknown`, a store error. Set as soon as the call derived its key (or took
    /// the carried key of its attempt, K9); `None` when the call failed before that
    /// (`MissingScope`, `Canonical`, `Config`). Each call clears it when it starts, so
    /// with calls running concurrently on clones of this context it is the key of the
    /// latest call to derive one: use [`Error::key`](crate::Error::key) or
    /// [`outcome_of`](Self::outcome_of) for a particular call.
    pub fn last_key(&self) -> Option<IdempotencyKey> {
        self.outcomes().last_key.clone()
    }

    /// The outcome of the latest call with idempotency key `key` made directly under this
    /// context or a clone of it (S13): each call's own, whatever other calls on clones
    /// finished since. `None` while that call runs, when it ended without an outcome
    /// (a layer error such as `Mismatch` or `InProgress`), and when more than
    /// [`OUTCOMES_KEPT`](Self::OUTCOMES_KEPT) calls with other keys finished since (the
    /// oldest outcomes are dropped first).
    pub fn outcome_of(&self, key: &IdempotencyKey) -> Option<CallRecord> {
        self.outcomes()
            .by_key
            .iter()
            .rev()
            .find(|record| record.key == *key)
            .cloned()
    }

    /// Forgets the previous call's outcome and key: a call that then fails before reaching
    /// the store (missing scope, mismatch, …) leaves `None`, not a stale record. The
    /// outcomes kept for [`outcome_of`](Self::outcome_of) stay.
    pub(crate) fn clear_last_outcome(&self) {
        let mut outcomes = self.outcomes();
        outcomes.last = None;
        outcomes.last_key = None;
    }

    /// Publishes the key a call just derived (S13); the outcome of an earlier call with
    /// that key is no longer this call's.
    pub(crate) fn set_last_key(&self, key: &IdempotencyKey) {
        let mut outcomes = self.outcomes();
        outcomes.by_key.retain(|record| record.key != *key);
        outcomes.last_key = Some(key.clone());
    }

    /// Notes that a call made directly under this context ran the body under the claim of
    /// `key` with `fence` and is saving its outcome: the run a record with that key and fence
    /// holds (a released claim is never noted: the key's next claim may reuse the fence).
    pub(crate) fn note_claim(&self, key: &IdempotencyKey, fence: u64) {
        let mut outcomes = self.outcomes();
        if outcomes.claims.len() >= Self::OUTCOMES_KEPT {
            outcomes.claims.pop_front();
        }
        outcomes.claims.push_back((key.clone(), fence));
    }

    /// Whether a call made directly under this context (or a clone) claimed `record`'s key
    /// with `record`'s fence: the run that produced `record` was made here (D11).
    pub(crate) fn claimed(&self, record: &CallRecord) -> bool {
        self.outcomes()
            .claims
            .iter()
            .any(|(key, fence)| *key == record.key && *fence == record.fence)
    }

    /// The outcome of the dispatched call this context belongs to (S12, D11): when a call of
    /// the attempt's tool took the attempt slot (K9), that call's own outcome (`None` if it
    /// ended without one, as with `MissingScope`), so other `#[idempotent]` calls the
    /// handler makes, before or after, never stand for it; else (a tool whose
    /// `#[idempotent]` name differs from the name it is registered under) the last outcome.
    pub(crate) fn dispatched_outcome(&self) -> Option<CallRecord> {
        match &self.inner.attempt {
            Some(slot) if slot.taken.load(Ordering::SeqCst) => slot
                .outcome
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone(),
            _ => self.last_outcome(),
        }
    }

    /// Keeps `record` as the outcome of the call that took the attempt slot (D11).
    pub(crate) fn set_carried_outcome(&self, record: &CallRecord) {
        if let Some(slot) = &self.inner.attempt {
            *slot.outcome.lock().unwrap_or_else(PoisonError::into_inner) = Some(record.clone());
        }
    }

    pub(crate) fn set_last_outcome(&self, record: CallRecord) {
        let mut outcomes = self.outcomes();
        outcomes.by_key.retain(|kept| kept.key != record.key);
        if outcomes.by_key.len() >= Self::OUTCOMES_KEPT {
            outcomes.by_key.pop_front();
        }
        outcomes.by_key.push_back(record.clone());
        outcomes.last = Some(record);
    }

    /// The innermost context in force on this thread or task, if any.
    pub fn current() -> Option<CallContext> {
        CURRENT.with(|current| current.borrow().clone())
    }

    /// Runs `f` with this context in force (for sync tools).
    pub fn enter<R>(&self, f: impl FnOnce() -> R) -> R {
        let _entered = enter_context(self.clone());
        f()
    }

    /// Wraps `future` so that this context is in force whenever it is polled (for async
    /// tools): `ctx.run(send_refund(…)).await`. Nothing runs until the wrapper is awaited.
    /// The wrapper is `Send` when `future` is. (Like tokio's `task_local!` `scope`.)
    pub fn run<F: Future>(&self, future: F) -> WithContext<F> {
        WithContext {
            context: self.clone(),
            future,
        }
    }
}

/// Inside an `#[idempotent]` body: the key of the running call, to forward downstream,
/// for example as a payment API's `Idempotency-Key` header (K10). `None` elsewhere.
pub fn current_key() -> Option<IdempotencyKey> {
    CallContext::current().and_then(|c| c.key().cloned())
}

/// Inside an `#[idempotent]` body: the running attempt (key, fence, takeover, fenced
/// signal). `None` elsewhere. See [`AttemptInfo`].
pub fn current_attempt() -> Option<AttemptInfo> {
    CallContext::current().and_then(|c| c.attempt_info().cloned())
}

pin_project_lite::pin_project! {
    /// A future with a [`CallContext`] in force while it is polled; see
    /// [`CallContext::run`].
    pub struct WithContext<F> {
        context: CallContext,
        #[pin]
        future: F,
    }
}

impl<F: Future> Future for WithContext<F> {
    type Output = F::Output;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<F::Output> {
        let this = self.project();
        let _entered = enter_context(this.context.clone());
        this.future.poll(cx)
    }
}

/// The key and fingerprint derived on a dispatched call's first attempt (K9).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DerivedKey {
    /// The tool they were derived for.
    pub tool: String,
    /// The idempotency key.
    pub key: IdempotencyKey,
    /// The fingerprint.
    pub fingerprint: Fingerprint,
    /// The record label the first attempt derived (P1), stored by every attempt's claim.
    pub label: RecordLabel,
}

/// One dispatched tool call's record across its attempts (K9): the first attempt stores
/// the key it derived; every retry of that call reuses it unchanged. A new tool call gets
/// a new record, so a reused provider call id never carries a key to another call.
///
/// Only a call of the record's tool carries the key, and only the first such call of each
/// attempt: a handler that calls the tool twice (two refunds in one batch) derives the
/// second key from its own arguments, and calls of other tools are never affected.
#[derive(Debug)]
pub struct AttemptRecord {
    tool: String,
    derived: Mutex<Option<DerivedKey>>,
}

/// An attempt's view of its record: whether a call of this attempt already took it.
#[derive(Debug, Clone)]
struct AttemptSlot {
    record: Arc<AttemptRecord>,
    taken: Arc<AtomicBool>,
    /// The outcome of the call that took the slot (the dispatched call's own, D11).
    outcome: Arc<Mutex<Option<CallRecord>>>,
}

impl AttemptRecord {
    /// A fresh record for one call of the tool named `tool` (its `#[idempotent]` name).
    pub fn new(tool: impl Into<String>) -> Arc<Self> {
        Arc::new(AttemptRecord {
            tool: tool.into(),
            derived: Mutex::new(None),
        })
    }

    /// The tool whose key this record carries.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The key derived by the first attempt, if it got that far.
    pub fn derived(&self) -> Option<DerivedKey> {
        self.derived
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }

    /// Stores the first attempt's key; a later call keeps the first.
    pub(crate) fn remember(&self, derived: DerivedKey) {
        let mut slot = self.derived.lock().unwrap_or_else(PoisonError::into_inner);
        slot.get_or_insert(derived);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;
    use crate::outcome::CallStatus;

    fn record() -> CallRecord {
        CallRecord {
            tool: "t".into(),
            key: IdempotencyKey::from_hex(&"a".repeat(64)).unwrap(),
            status: CallStatus::Executed,
            created_at: Timestamp::EPOCH,
            expires_at: Timestamp::EPOCH,
            recorded: true,
            takeover: false,
            fence: 1,
            source: crate::outcome::OutcomeSource::Executed,
        }
    }

    fn record_of(n: usize) -> CallRecord {
        CallRecord {
            key: IdempotencyKey::from_hex(&format!("{n:064x}")).unwrap(),
            ..record()
        }
    }

    // pins S13: outcome_of keeps the latest OUTCOMES_KEPT outcomes, one per key; a call
    // that derives a key forgets the earlier outcome of that key; starting a call clears
    // last_outcome and last_key but not the kept outcomes
    #[test]
    fn outcomes_are_kept_per_key_and_bounded() {
        let ctx = CallContext::new();
        let kept = CallContext::OUTCOMES_KEPT;
        for n in 0..kept + 10 {
            ctx.clone().set_last_outcome(record_of(n));
        }
        assert_eq!(
            ctx.outcome_of(&record_of(9).key),
            None,
            "the oldest are dropped"
        );
        for n in 10..kept + 10 {
            assert_eq!(ctx.outcome_of(&record_of(n).key), Some(record_of(n)));
        }
        assert_eq!(ctx.last_outcome(), Some(record_of(kept + 9)));
        // Another outcome of a kept key replaces it without dropping anything else.
        let replayed = CallRecord {
            status: CallStatus::Replayed,
            ..record_of(10)
        };
        ctx.set_last_outcome(replayed.clone());
        assert_eq!(ctx.outcome_of(&record_of(10).key), Some(replayed));
        assert!(ctx.outcome_of(&record_of(11).key).is_some());
        ctx.clear_last_outcome();
        assert_eq!((ctx.last_outcome(), ctx.last_key()), (None, None));
        assert!(ctx.outcome_of(&record_of(11).key).is_some());
        ctx.set_last_key(&record_of(11).key);
        assert_eq!(ctx.last_key(), Some(record_of(11).key));
        assert_eq!(ctx.outcome_of(&record_of(11).key), None);
    }

    // pins S12: clones share the outcome slot; derived contexts get their own
    #[test]
    fn derived_contexts_have_their_own_outcome_slot() {
        let base = CallContext::new().with_conversation("c");
        let clone = base.clone();
        let derived = base.clone().with_tool_call("call_1");
        clone.set_last_outcome(record());
        assert_eq!(base.last_outcome(), Some(record()));
        assert_eq!(derived.last_outcome(), None);
        derived.set_last_outcome(record());
        let other = base.clone().with_tool_call("call_2");
        assert_eq!(other.last_outcome(), None);
    }
}
