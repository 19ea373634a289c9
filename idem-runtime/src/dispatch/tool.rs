//! A tool the dispatcher can call with JSON arguments.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use crate::context::CallContext;
use crate::error::Error;
use crate::outcome::{CallRecord, IdempotentError};

/// A boxed `Send` future of a [`ToolReply`].
pub type ReplyFuture = Pin<Box<dyn Future<Output = ToolReply> + Send + 'static>>;

type CallFn = dyn Fn(Value, CallContext) -> ReplyFuture + Send + Sync;

/// A named tool that takes JSON arguments, as the dispatcher calls it.
///
/// `#[idempotent]` generates one for every free, non-generic tool fn
/// (`send_refund::tool()`); [`Tool::from_async`] and [`Tool::from_sync`] build one from a
/// closure (for methods: capture the receiver). The arguments object is deserialized into
/// `A` (a struct whose fields are the parameters); arguments that do not fit give a
/// [`FailureKind::BadArguments`] reply and the tool does not run (D2).
///
/// [`mark_replays`](Tool::mark_replays) chooses, for this tool alone, whether a replayed
/// result tells the model it is a replay (D6).
#[derive(Clone)]
pub struct Tool {
    name: Arc<str>,
    call: Arc<CallFn>,
    /// This tool's own choice of replay marking (D6); `None` follows the dispatcher's.
    mark_replays: Option<bool>,
}

impl fmt::Debug for Tool {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Tool")
            .field("name", &self.name)
            .finish_non_exhaustive()
    }
}

/// What one tool call returned, as JSON, with what the idempotency layer did (S12).
#[derive(Debug, Clone, PartialEq)]
pub struct ToolReply {
    /// The tool's `Ok` value, or why it failed.
    pub result: Result<Value, ToolFailure>,
    /// Executed or replayed, the key, timestamps; `None` when the call never reached the
    /// store (bad arguments, missing scope, canonicalisation error).
    pub record: Option<CallRecord>,
}

/// Why a dispatched tool call failed.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ToolFailure {
    /// Which kind of failure.
    pub kind: FailureKind,
    /// A message for the model and the logs.
    pub message: String,
    /// Whether retrying the same call (same key) may succeed (D3): layer errors that are
    /// transient, and tool errors marked [`IdempotentError::is_retryable`].
    pub retryable: bool,
    /// The tool's error value as JSON (`null` for bad arguments).
    pub error: Value,
    /// When retrying may succeed, in milliseconds from now: an `InProgress` key's owner's
    /// next renewal or lease deadline, or when an unknown outcome's held claim lapses. The
    /// dispatcher waits at least this long before its next attempt (D3).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub retry_after_ms: Option<u64>,
}

/// Kinds of [`ToolFailure`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum FailureKind {
    /// The arguments were not valid JSON or did not fit the tool's parameters (D2).
    BadArguments,
    /// No tool of that name is registered (D2).
    UnknownTool,
    /// The idempotency layer failed (missing scope, mismatch, in progress, store, …).
    Layer,
    /// The tool returned an error (saved and replayed unless retryable).
    Tool,
    /// The response was lost on the way back (a transport timeout; T2).
    Transport,
    /// Whether the effect happened is unknown (U1): the tool said so, or the key's last run
    /// ended without an outcome (`Error::OutcomeUnknown`). Not retried; the model is told.
    OutcomeUnknown,
}

impl ToolFailure {
    /// A failure with no error value.
    pub fn new(kind: FailureKind, message: impl Into<String>, retryable: bool) -> Self {
        ToolFailure {
            kind,
            message: message.into(),
            retryable,
            error: Value::Null,
            retry_after_ms: None,
        }
    }

    fn from_tool_error<E: IdempotentError + fmt::Display>(error: &E) -> Self {
        let (kind, retryable) = match error.idem_error() {
            Some(layer) => (layer_kind(layer), layer.is_transient()),
            None if error.is_outcome_unknown() => (FailureKind::OutcomeUnknown, false),
            None => (FailureKind::Tool, error.is_retryable()),
        };
        ToolFailure {
            kind,
            message: error.to_string(),
            retryable,
            error: serde_json::to_value(error).unwrap_or(Value::Null),
            retry_after_ms: error.idem_error().and_then(retry_after_ms),
        }
    }
}

/// The body's own outcome-unknown error, told to the model with the key and since when, as
/// the layer's `OutcomeUnknown` is (U2): the model can then refer to the call later.
fn with_unknown_key(mut failure: ToolFailure, record: Option<&CallRecord>) -> ToolFailure {
    if let (FailureKind::OutcomeUnknown, Some(record)) = (failure.kind, record) {
        if !failure.message.contains(record.key.as_str()) {
            failure.message = format!(
                "{}; the outcome of idempotency key {} (claimed at {} ms after the epoch) is unknown: the effect may or may not have happened",
                failure.message,
                record.key,
                record.created_at.as_millis()
            );
        }
    }
    failure
}

/// The failure kind of a layer error: [`FailureKind::OutcomeUnknown`] for
/// `Error::OutcomeUnknown`, else [`FailureKind::Layer`].
fn layer_kind(error: &Error) -> FailureKind {
    match error {
        Error::OutcomeUnknown { .. } => FailureKind::OutcomeUnknown,
        _ => FailureKind::Layer,
    }
}

/// The layer's hint of when to retry, in milliseconds.
fn retry_after_ms(error: &Error) -> Option<u64> {
    match error {
        Error::InProgress { retry_after_ms, .. } => Some(*retry_after_ms),
        Error::OutcomeUnknown { retry_after_ms, .. } => *retry_after_ms,
        _ => None,
    }
}

fn reply<T: Serialize, E: IdempotentError + fmt::Display>(
    outcome: Result<T, E>,
    context: &CallContext,
) -> ToolReply {
    let result = match outcome {
        Ok(value) => serde_json::to_value(&value).map_err(|e| {
            ToolFailure::new(
                FailureKind::Layer,
                format!("the tool's value cannot be written as JSON: {e}"),
                false,
            )
        }),
        Err(error) => Err(ToolFailure::from_tool_error(&error)),
    };
    let record = context.last_outcome();
    let result = result.map_err(|failure| with_unknown_key(failure, record.as_ref()));
    ToolReply { result, record }
}

fn bad_arguments(tool: &str, error: serde_json::Error) -> ToolReply {
    ToolReply {
        result: Err(ToolFailure::new(
            FailureKind::BadArguments,
            format!("arguments do not fit tool `{tool}`: {error}"),
            false,
        )),
        record: None,
    }
}

impl Tool {
    /// A tool from an async closure taking the deserialized arguments and the call's
    /// context. The closure's future runs with the context in force.
    pub fn from_async<A, T, E, F, Fut>(name: impl Into<Arc<str>>, f: F) -> Tool
    where
        A: DeserializeOwned + Send + 'static,
        T: Serialize + 'static,
        E: IdempotentError + fmt::Display + 'static,
        F: Fn(A, CallContext) -> Fut + Send + Sync + 'static,
        Fut: Future<Output = Result<T, E>> + Send + 'static,
    {
        let name: Arc<str> = name.into();
        let tool_name = Arc::clone(&name);
        let call = move |arguments: Value, context: CallContext| -> ReplyFuture {
            let args = match A::deserialize(arguments) {
                Ok(args) => args,
                Err(e) => return Box::pin(std::future::ready(bad_arguments(&tool_name, e))),
            };
            let future = context.run(f(args, context.clone()));
            Box::pin(async move {
                let outcome = future.await;
                reply(outcome, &context)
            })
        };
        Tool {
            name,
            call: Arc::new(call),
            mark_replays: None,
        }
    }

    /// A tool from a sync closure; it runs on the dispatching task with the context in
    /// force.
    pub fn from_sync<A, T, E, F>(name: impl Into<Arc<str>>, f: F) -> Tool
    where
        A: DeserializeOwned + Send + 'static,
        T: Serialize + 'static,
        E: IdempotentError + fmt::Display + 'static,
        F: Fn(A, CallContext) -> Result<T, E> + Send + Sync + 'static,
    {
        let name: Arc<str> = name.into();
        let tool_name = Arc::clone(&name);
        let call = move |arguments: Value, context: CallContext| -> ReplyFuture {
            let reply = match A::deserialize(arguments) {
                Ok(args) => reply(context.enter(|| f(args, context.clone())), &context),
                Err(e) => bad_arguments(&tool_name, e),
            };
            Box::pin(std::future::ready(reply))
        };
        Tool {
            name,
            call: Arc::new(call),
            mark_replays: None,
        }
    }

    /// The tool's name, as the model calls it.
    pub fn name(&self) -> &str {
        &self.name
    }

    /// Calls the tool with a JSON arguments object under `context`.
    pub fn call(&self, arguments: Value, context: CallContext) -> ReplyFuture {
        (self.call)(arguments, context)
    }

    /// Whether a replayed result of this tool carries the replay marker the model reads
    /// (D6), whatever the dispatcher's own setting
    /// ([`DispatcherBuilder::mark_replays`](crate::dispatch::DispatcherBuilder::mark_replays),
    /// which describes the marker in each provider's shape). `true` marks this tool's
    /// replays under a dispatcher that does not mark; `false` leaves them unmarked under one
    /// that does. A tool on which this is never called follows the dispatcher.
    ///
    /// ```
    /// # extern crate idem_runtime as idem_agent;
    /// use idem_agent::dispatch::{Dispatcher, Tool};
    /// use idem_agent::ToolError;
    /// let refund = Tool::from_sync("send_refund", |_: serde_json::Value, _ctx| Ok::<_, ToolError>("sent"))
    ///     .mark_replays(true);
    /// let dispatcher = Dispatcher::builder().tool(refund).build()?;
    /// # Ok::<(), idem_agent::dispatch::BuildError>(())
    /// ```
    pub fn mark_replays(mut self, mark: bool) -> Tool {
        self.mark_replays = Some(mark);
        self
    }

    /// This tool's own replay marking choice; `None` when it follows the dispatcher's.
    pub(crate) fn replay_marking(&self) -> Option<bool> {
        self.mark_replays
    }
}

/// Turns a layer error into a reply (for dispatchers that fail before calling the tool).
impl From<Error> for ToolFailure {
    fn from(error: Error) -> Self {
        ToolFailure {
            kind: layer_kind(&error),
            retryable: error.is_transient(),
            message: error.to_string(),
            retry_after_ms: retry_after_ms(&error),
            error: serde_json::to_value(&error).unwrap_or(Value::Null),
        }
    }
}
