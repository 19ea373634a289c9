//! Reconciliation: asking the downstream system whether a run whose outcome is unknown had
//! its effect, before running the body again (contract U3).

use std::future::{ready, Future, Ready};

/// A reconcile function's answer about a run whose outcome is unknown (U3).
///
/// A tool declared with `#[idempotent(reconcile = check_refund)]` has `check_refund` called
/// *instead of* its body first whenever a call finds the key's outcome unknown (a takeover
/// after a lapsed lease, or a run that was cancelled, panicked or ended with an
/// outcome-unknown error). The function gets the tool's arguments, each by reference, and
/// the [`AttemptInfo`](crate::AttemptInfo) (key, fence, the previous run), and may be sync
/// or async.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::{AttemptInfo, Reconciled, ToolError};
///
/// /// What the payment API says about a refund sent with this idempotency key.
/// fn check_refund(order: &str, amount_cents: &u64, attempt: &AttemptInfo) -> Reconciled<String, ToolError> {
///     let _ = (order, amount_cents, attempt.key());
///     let found: Option<String> = None; // look the refund up by `attempt.key()`
///     match found {
///         Some(refund_id) => Reconciled::Done(Ok(refund_id)), // it happened: save and replay it
///         None => Reconciled::NotDone,                        // it did not: run the body
///     }
/// }
/// # let _ = check_refund;
/// ```
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reconciled<T, E> {
    /// The effect happened and this is its outcome: it is saved and replayed to this call
    /// and every later one as if the body had returned it; the body does not run. (An
    /// error that would not be saved — retryable, outcome unknown, a layer error — leaves
    /// the key unknown, as after any takeover (U1); answer `NotDone` to run the body.)
    Done(Result<T, E>),
    /// The effect did not happen: the body runs now, with the same key and this attempt's
    /// fence.
    NotDone,
    /// Still unknown (the downstream system cannot tell yet, or could not be asked): this
    /// call gets [`Error::OutcomeUnknown`](crate::Error::OutcomeUnknown), which is not
    /// retried automatically; the key keeps saying unknown and the next call reconciles
    /// again.
    Unknown,
}

/// What a reconcile function may return: a [`Reconciled`] or a future of one (an `async fn`).
#[diagnostic::on_unimplemented(
    message = "a reconcile function must return `idem_agent::Reconciled<T, E>` (or be an `async fn` returning it), not `{Self}`",
    label = "the reconcile function's answer",
    note = "`T` and `E` are the tool's `Result<T, E>`: `Reconciled::Done(outcome)` saves and replays `outcome`, `Reconciled::NotDone` runs the body, `Reconciled::Unknown` answers `OutcomeUnknown`"
)]
pub trait ReconcileVerdict<T, E> {
    /// The future of the answer.
    type Future: Future<Output = Reconciled<T, E>>;
    /// The answer as a future.
    fn into_verdict(self) -> Self::Future;
}

impl<T, E> ReconcileVerdict<T, E> for Reconciled<T, E> {
    type Future = Ready<Reconciled<T, E>>;
    fn into_verdict(self) -> Self::Future {
        ready(self)
    }
}

impl<T, E, F: Future<Output = Reconciled<T, E>>> ReconcileVerdict<T, E> for F {
    type Future = F;
    fn into_verdict(self) -> Self::Future {
        self
    }
}
