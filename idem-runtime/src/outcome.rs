//! What a call did, and how a tool's errors are treated (contract S3, S4, S12).

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::clock::Timestamp;
use crate::error::Error;
use crate::key::IdempotencyKey;
pub use crate::store::OutcomeSource;

/// Whether the body ran for this call or a saved outcome was replayed (S12).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum CallStatus {
    /// This call claimed the key and ran the body.
    Executed,
    /// This call found a saved outcome and returned it without running the body
    /// (Stripe's `Idempotent-Replayed: true`).
    Replayed,
    /// This call took over a run whose outcome was unknown, and the tool's reconcile
    /// function found that the effect had happened: its outcome was saved and returned
    /// without running the body (U3).
    Reconciled,
}

/// What one `#[idempotent]` call did, observable without changing the tool's return type
/// (S12): read it with [`CallContext::last_outcome`](crate::CallContext::last_outcome)
/// or from a dispatched call's result.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct CallRecord {
    /// The tool's name.
    pub tool: String,
    /// The call's idempotency key (K10).
    pub key: IdempotencyKey,
    /// Executed, replayed, or reconciled (U3).
    pub status: CallStatus,
    /// When the saved (or now saving) execution claimed the key.
    pub created_at: Timestamp,
    /// When the record expires: `created_at + ttl` (S8).
    pub expires_at: Timestamp,
    /// For an executed call: whether its outcome was saved. `false` when the store failed
    /// or a takeover fenced this owner out (S10; the record then stays in progress until
    /// its lease lapses), and when the body ended with an error that is not saved
    /// (retryable: released; outcome unknown: the key is marked unknown, U1). Always
    /// `true` for a replay.
    pub recorded: bool,
    /// Whether this execution took over a claim whose outcome was unknown: its lease had
    /// lapsed, or its owner gave up (S6, U2).
    pub takeover: bool,
    /// The fencing token of the execution that produced (or is producing) the outcome (F1).
    pub fence: u64,
    /// Where the outcome came from: the body, a reconcile function, or a person's decision
    /// (U6); for a replay, the saved outcome's source.
    #[serde(default)]
    pub source: OutcomeSource,
}

/// The error type of an `#[idempotent]` tool: saved and replayed like a value (S4),
/// except for the two kinds it identifies.
///
/// It must be `Serialize + DeserializeOwned` (it is saved) and `From<idem_agent::Error>` (layer
/// errors reach the caller through it). [`idem_error`](Self::idem_error) has no default on
/// purpose: a type that wraps `idem_agent::Error` must hand it back, or a nested call's
/// `InProgress` would be saved and replayed as the tool's outcome. [`ToolError`] is a
/// ready-made implementation.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::{Error, IdempotentError};
/// use serde::{Deserialize, Serialize};
///
/// #[derive(Debug, Serialize, Deserialize)]
/// enum RefundError {
///     Declined { reason: String },   // saved and replayed
///     BankTimeout,                   // the refund may not have happened: run again
///     Idem(Error),                   // the layer's own: never saved
/// }
///
/// impl From<Error> for RefundError {
///     fn from(e: Error) -> Self { RefundError::Idem(e) }
/// }
///
/// impl IdempotentError for RefundError {
///     fn idem_error(&self) -> Option<&Error> {
///         match self { RefundError::Idem(e) => Some(e), _ => None }
///     }
///     fn is_retryable(&self) -> bool {
///         match self {
///             RefundError::BankTimeout => true,
///             RefundError::Idem(e) => e.is_transient(),
///             RefundError::Declined { .. } => false,
///         }
///     }
/// }
/// assert!(RefundError::BankTimeout.is_retryable());
/// ```
pub trait IdempotentError: Serialize + DeserializeOwned + From<Error> {
    /// The layer error inside this value, if it came from `From<idem_agent::Error>`: `Some` for
    /// every value built by that conversion. Such errors are never saved (S4).
    fn idem_error(&self) -> Option<&Error>;

    /// `true` when the effect did not happen, or whether it happened is unknown (a
    /// downstream timeout): the claim is released, nothing is saved, the next attempt
    /// runs the body again with the same key (S4), and the dispatcher retries it (D3).
    /// Default: `true` only for transient layer errors; every other error is saved and
    /// replayed, as Stripe saves a 500.
    fn is_retryable(&self) -> bool {
        self.idem_error().is_some_and(Error::is_transient)
    }

    /// `true` when whether the effect happened is unknown (the downstream API timed out
    /// after the request was sent): unlike a retryable error, the claim is not released.
    /// The key is marked outcome unknown (U1): a tool with a reconcile function reconciles
    /// on the next call; other tools' calls get
    /// [`Error::OutcomeUnknown`] until the claim's lease lapses, then run the body again.
    /// The caller gets this error back; it is not saved. Checked after
    /// [`idem_error`](Self::idem_error) and before [`is_retryable`](Self::is_retryable).
    /// Default: `false`.
    fn is_outcome_unknown(&self) -> bool {
        false
    }
}

/// A ready-made tool error type.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::{IdempotentError, ToolError};
/// let declined = ToolError::failed("card declined");
/// assert!(!declined.is_retryable()); // saved and replayed
/// let timeout = ToolError::retryable("bank API timed out");
/// assert!(timeout.is_retryable()); // released, run again with the same key
/// ```
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum ToolError {
    /// An error of the idempotency layer; never saved.
    #[error(transparent)]
    Idem(#[from] Error),
    /// The tool failed for good; saved and replayed to every retry.
    #[error("{0}")]
    Failed(String),
    /// The effect did not happen; not saved, run again.
    #[error("retryable: {0}")]
    Retryable(String),
    /// Whether the effect happened is unknown (the downstream call timed out after it was
    /// sent); not saved, the key is marked outcome unknown (U1).
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
}

impl ToolError {
    /// A final failure, saved and replayed.
    pub fn failed(message: impl Into<String>) -> Self {
        ToolError::Failed(message.into())
    }

    /// A failure after which the effect did not happen: not saved, run again.
    pub fn retryable(message: impl Into<String>) -> Self {
        ToolError::Retryable(message.into())
    }

    /// A failure after which whether the effect happened is unknown: not saved; the key is
    /// marked outcome unknown (U1).
    pub fn outcome_unknown(message: impl Into<String>) -> Self {
        ToolError::OutcomeUnknown(message.into())
    }
}

impl IdempotentError for ToolError {
    fn idem_error(&self) -> Option<&Error> {
        match self {
            ToolError::Idem(e) => Some(e),
            _ => None,
        }
    }

    fn is_retryable(&self) -> bool {
        match self {
            ToolError::Idem(e) => e.is_transient(),
            ToolError::Failed(_) | ToolError::OutcomeUnknown(_) => false,
            ToolError::Retryable(_) => true,
        }
    }

    fn is_outcome_unknown(&self) -> bool {
        matches!(self, ToolError::OutcomeUnknown(_))
    }
}

/// The return type of an `#[idempotent]` tool: `Result<T, E>` with a saveable `T` and an
/// [`IdempotentError`] `E` (contract C2).
#[diagnostic::on_unimplemented(
    message = "`{Self}` cannot be saved and replayed by #[idempotent]",
    label = "an #[idempotent] tool must return `Result<T, E>` where `T: Serialize + DeserializeOwned` and `E: idem_agent::IdempotentError`",
    note = "the first outcome is saved as JSON and given back to every retry, so both `T` and `E` must round-trip through serde"
)]
pub trait ToolOutput: Sized {
    /// The success type.
    type Ok: Serialize + DeserializeOwned;
    /// The error type.
    type Err: IdempotentError;
    /// Wraps a layer error as this return type.
    fn from_layer_error(error: Error) -> Self;
}

impl<T: Serialize + DeserializeOwned, E: IdempotentError> ToolOutput for Result<T, E> {
    type Ok = T;
    type Err = E;
    fn from_layer_error(error: Error) -> Self {
        Err(E::from(error))
    }
}
