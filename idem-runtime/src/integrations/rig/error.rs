//! The error an [`Idempotent`](super::Idempotent) tool returns (R4, R5, R7).

use ::rig_core::tool::{ToolErrorKind, ToolExecutionError};
use serde::{Deserialize, Serialize};

use crate::error::Error;
use crate::outcome::IdempotentError;

/// Why a call of an [`Idempotent`](super::Idempotent) tool failed: the wrapped tool's own
/// error, or the idempotency layer's.
///
/// The tool's error is kept as rig normalizes it at its dispatch boundary
/// ([`Tool::map_error`](::rig_core::tool::Tool::map_error) of the wrapped tool, into a
/// [`ToolExecutionError`]): that is the value saved and replayed, so the first call and
/// every replay return the same error (R4). On the first call it still carries the
/// concrete source for [`ToolExecutionError::downcast_ref`]; a replayed one has none (rig
/// never serializes sources).
///
/// Which tool errors are saved (R4, contract S4, U1):
/// - kind [`ToolErrorKind::Timeout`]: whether the effect happened is unknown — not saved,
///   the key is marked outcome unknown ([`IdempotentError::is_outcome_unknown`]);
/// - otherwise retryable by rig's verdict (`with_retryable(true)`, or the kind's default:
///   `RateLimited`, `Network`) — the effect did not happen: not saved, the claim is
///   released and the next call runs the tool again with the same key;
/// - every other error is saved and replayed, as Stripe saves a 500.
///
/// Layer errors ([`IdempotentToolError::Idem`]) and configuration errors are never saved.
#[derive(Debug, Clone, thiserror::Error, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum IdempotentToolError {
    /// The wrapped tool's error, normalized by its `map_error` (saved and replayed unless
    /// transient, above).
    #[error("{0}")]
    Tool(ToolExecutionError),
    /// An error of the idempotency layer: `MissingScope` (no conversation for the call,
    /// R3), `Mismatch`, `InProgress`, `OutcomeUnknown`, canonicalisation, store. Never saved.
    #[error(transparent)]
    Idem(Error),
    /// The wrapper's settings cannot work (a TTL shorter than the lease, a `key`/`skip`
    /// name that is not a parameter of the tool, a malformed conversation value in the
    /// rig `ToolContext`); no call of the tool runs until they are fixed. Never saved.
    #[error("idempotent rig tool `{tool}` is misconfigured: {message}")]
    Config {
        /// The tool's name.
        tool: String,
        /// What is wrong.
        message: String,
    },
}

impl From<Error> for IdempotentToolError {
    fn from(error: Error) -> Self {
        IdempotentToolError::Idem(error)
    }
}

impl IdempotentError for IdempotentToolError {
    fn idem_error(&self) -> Option<&Error> {
        match self {
            IdempotentToolError::Idem(error) => Some(error),
            _ => None,
        }
    }

    fn is_retryable(&self) -> bool {
        match self {
            IdempotentToolError::Idem(error) => error.is_transient(),
            IdempotentToolError::Tool(error) => {
                error.kind() != ToolErrorKind::Timeout && is_retryable(error)
            }
            IdempotentToolError::Config { .. } => false,
        }
    }

    fn is_outcome_unknown(&self) -> bool {
        matches!(self, IdempotentToolError::Tool(error) if error.kind() == ToolErrorKind::Timeout)
    }
}

/// Rig's verdict: the explicit one, else the kind's default, else not retryable.
fn is_retryable(error: &ToolExecutionError) -> bool {
    error
        .retryable()
        .or_else(|| error.kind().default_retryable())
        .unwrap_or(false)
}

impl IdempotentToolError {
    /// This error as rig's [`ToolExecutionError`], what the model and rig's hooks see: the
    /// tool's own error as it is; a layer error with its message as model feedback, the
    /// code `idem.<kind>` (`idem.missing_scope`, `idem.in_progress`, `idem.mismatch`,
    /// `idem.outcome_unknown`, `idem.awaiting_approval`, `idem.denied`, `idem.store`, …),
    /// retryable when it is transient
    /// (`InProgress`, a transient store error), and the [`Error`] as source; a
    /// configuration error with the code `idem.config`, not retryable.
    pub fn into_execution_error(self) -> ToolExecutionError {
        match self {
            IdempotentToolError::Tool(error) => error,
            IdempotentToolError::Idem(error) => {
                let kind = match &error {
                    Error::Store { source, .. } if source.is_transient() => ToolErrorKind::Network,
                    _ => ToolErrorKind::Other,
                };
                let code = serde_json::to_value(&error)
                    .ok()
                    .and_then(|v| v.get("kind").and_then(|k| k.as_str()).map(str::to_owned))
                    .unwrap_or_else(|| "error".to_owned());
                let mut message = error.to_string();
                if matches!(error, Error::MissingScope { .. }) {
                    // Where a rig host says which conversation a call belongs to (R3).
                    message.push_str(
                        "; for a rig tool, put the conversation in the run's ToolContext (context.insert(Conversation::new(\"…\"))), run the agent inside a CallContext that has one, or set it on the wrapper (.conversation(\"…\"))",
                    );
                }
                ToolExecutionError::new(kind, message)
                    .with_retryable(error.is_transient())
                    .with_code(format!("idem.{code}"))
                    .with_source(error)
            }
            config @ IdempotentToolError::Config { .. } => {
                ToolExecutionError::other(config.to_string())
                    .with_retryable(false)
                    .with_code("idem.config")
            }
        }
    }
}
