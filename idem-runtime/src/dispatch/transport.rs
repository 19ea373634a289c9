//! How a dispatched call reaches its tool and how the reply comes back (contract D3, T2).
//!
//! The default, [`InProcess`], calls the [`Tool`] directly. Other transports put a
//! network, a queue or a fault injector in between: the test kit's
//! [`LosingTransport`](crate::testkit::LosingTransport) lets the effect land and then
//! loses the reply, the way a timeout does in production.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde_json::Value;

use crate::context::CallContext;
use crate::dispatch::{Tool, ToolReply};

/// A boxed `Send` future of one attempt's reply or transport error.
pub type TransportFuture =
    Pin<Box<dyn Future<Output = Result<ToolReply, TransportError>> + Send + 'static>>;

/// One attempt of one call, as handed to a [`Transport`].
#[derive(Debug, Clone)]
pub struct ToolRequest {
    /// The tool to call.
    pub tool: Tool,
    /// The arguments object.
    pub arguments: Value,
    /// The attempt's context: conversation id, tool-call id, engine, and the call's
    /// attempt record, which carries the key from the first attempt to the retries (K9).
    /// Run the tool under exactly this context.
    pub context: CallContext,
    /// The provider's id of the call.
    pub call_id: String,
    /// Which attempt this is, from 1.
    pub attempt: u32,
}

/// Why a reply did not come back.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum TransportError {
    /// No reply in time. The request may or may not have reached the tool: the effect
    /// may have happened. Transient: retried with the same key, which makes the retry a
    /// replay if the effect did happen.
    #[error("timed out waiting for the reply ({message}); the effect may have happened")]
    Timeout {
        /// What timed out.
        message: String,
    },
    /// The connection failed before the request was sent: the tool did not run.
    /// Transient.
    #[error("the request did not reach the tool ({message})")]
    Unreachable {
        /// What failed.
        message: String,
    },
    /// The transport cannot carry this call at all (it cannot encode it, the tool is not
    /// served there). Not transient.
    #[error("the transport cannot carry this call: {message}")]
    Failed {
        /// What failed.
        message: String,
    },
}

impl TransportError {
    /// Whether trying again may succeed: [`Timeout`](Self::Timeout) and
    /// [`Unreachable`](Self::Unreachable).
    pub fn is_transient(&self) -> bool {
        matches!(self, Self::Timeout { .. } | Self::Unreachable { .. })
    }
}

/// Carries one attempt to its tool and the reply back.
///
/// Implementations must run the tool under [`ToolRequest::context`] (it holds the key
/// carried across attempts, K9) and must report a reply that was lost as
/// [`TransportError::Timeout`], never as a success or a final failure.
pub trait Transport: Send + Sync + fmt::Debug + 'static {
    /// Sends one attempt.
    fn invoke(&self, request: ToolRequest) -> TransportFuture;
}

impl<T: Transport + ?Sized> Transport for Arc<T> {
    fn invoke(&self, request: ToolRequest) -> TransportFuture {
        (**self).invoke(request)
    }
}

/// The default transport: calls the tool in this process and never loses a reply.
#[derive(Debug, Clone, Copy, Default)]
pub struct InProcess;

impl Transport for InProcess {
    fn invoke(&self, request: ToolRequest) -> TransportFuture {
        let reply = request.tool.call(request.arguments, request.context);
        Box::pin(async move { Ok(reply.await) })
    }
}
