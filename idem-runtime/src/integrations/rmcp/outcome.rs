//! How a tool body's answer becomes an outcome of the call protocol: which answers are
//! saved and replayed, and which are handed back unsaved (contract M7, M8, S4, U1).

use std::future::Future;

use ::rmcp::handler::server::tool::IntoCallToolResult;
use ::rmcp::model::{CallToolResponse, CallToolResult};
use ::rmcp::ErrorData;
use serde::{Deserialize, Serialize};

use super::names::{OUTCOME_UNKNOWN, RETRYABLE};
use super::results::has_marker;
use crate::error::Error;
use crate::outcome::IdempotentError;

/// The error side of an MCP call's outcome: for an rmcp handler's call (the defaults) and for
/// a call forwarded to another server as JSON (`R` and `N` a result object, `P` a JSON-RPC
/// error object, Y3). Only [`McpFailure::Idem`] is ever serialized (the trait needs it); no
/// variant is ever saved: every one is a layer error, released, or marked outcome unknown
/// (S4, U1).
#[derive(Debug, Serialize, Deserialize)]
#[serde(bound = "")]
pub(crate) enum McpFailure<R = CallToolResult, N = CallToolResponse, P = ErrorData> {
    /// The idempotency layer's own error (never saved, S4).
    Idem(Error),
    /// A JSON-RPC error from the body (`Err(ErrorData)`): by rmcp's convention the request
    /// was not served (unroutable, or the server cannot serve now), so the claim is released
    /// and the next call runs the tool again (M7).
    #[serde(skip)]
    Protocol(P),
    /// An error result the body marked `"idem/retryable": true`: the effect did not happen;
    /// released (M8).
    #[serde(skip)]
    Retryable(R),
    /// An error result the body marked `"idem/outcomeUnknown": true`: held as outcome
    /// unknown (M8, U1).
    #[serde(skip)]
    OutcomeUnknown(R),
    /// An `InputRequired` or `Task` response: not a final outcome; released, handed back
    /// unchanged (M7).
    #[serde(skip)]
    NotFinal(N),
}

impl<R, N, P> From<Error> for McpFailure<R, N, P> {
    fn from(error: Error) -> Self {
        McpFailure::Idem(error)
    }
}

impl<R, N, P> IdempotentError for McpFailure<R, N, P> {
    fn idem_error(&self) -> Option<&Error> {
        match self {
            McpFailure::Idem(error) => Some(error),
            _ => None,
        }
    }

    fn is_retryable(&self) -> bool {
        match self {
            McpFailure::Idem(error) => error.is_transient(),
            McpFailure::Protocol(_) | McpFailure::Retryable(_) | McpFailure::NotFinal(_) => true,
            McpFailure::OutcomeUnknown(_) => false,
        }
    }

    fn is_outcome_unknown(&self) -> bool {
        matches!(self, McpFailure::OutcomeUnknown(_))
    }
}

/// Runs `body` and sorts its answer (M7, M8): a complete result is the outcome to save
/// (`isError` results included: an error outcome is replayed, Stripe's rule), unless it
/// carries one of the two markers; everything else is a failure that is not saved.
pub(crate) async fn classify<R, F>(body: F) -> Result<CallToolResult, McpFailure>
where
    F: Future<Output = R>,
    R: IntoCallToolResult,
{
    match body.await.into_call_tool_result() {
        Ok(CallToolResponse::Complete(result)) if has_marker(&result, OUTCOME_UNKNOWN) => {
            Err(McpFailure::OutcomeUnknown(result))
        }
        Ok(CallToolResponse::Complete(result)) if has_marker(&result, RETRYABLE) => {
            Err(McpFailure::Retryable(result))
        }
        Ok(CallToolResponse::Complete(result)) => Ok(result),
        Ok(other) => Err(McpFailure::NotFinal(other)),
        Err(error) => Err(McpFailure::Protocol(error)),
    }
}
