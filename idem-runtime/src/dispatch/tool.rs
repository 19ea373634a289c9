//! A tool the dispatcher can call with JSON arguments.

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};
use serde_json::Value;

use super::decode::{decode_arguments, ArgumentsError};
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
/// [`FailureKind::BadArguments`] reply and the tool does not run (D2). Its message names
/// the tool and the path of the value that did not fit, with what was expected:
/// ``arguments do not fit tool `multiply`: argument `a`: invalid type: floating point
/// `57.5`, expected u64``, ``… argument `items[2].qty`: …``.
///
/// # Integral numbers (D8)
///
/// Gemini carries arguments as a protobuf `Struct`, whose numbers are `Value.number_value`
/// doubles: `multiply(57, 44)` arrives as `{"a": 57.0, "b": 44.0}`. Where a parameter is
/// an integer type (`u8` … `u64`, `i8` … `i64`, `u128`, `i128`, also inside `Option`s,
/// sequences, map values, nested structs and enum variants), a JSON number whose value is
/// an integer that fits the type is accepted whatever its spelling (`57`, `57.0`, `5.7e1`;
/// `-0.0` is `0`), from every provider and in every build (also with serde_json's
/// `arbitrary_precision`). A number with a fraction (`57.5`) or out of the type's range
/// (`300.0` for a `u8`, `-1.0` for a `u64`, `1.8446744073709552e19` = 2^64 for a `u64`)
/// does not fit. The value checked is the number's double, as the key reads it (K2): the
/// key and the argument agree. A float spelling names an integer only within
/// [-2^63, 2^64) (also for `u128`/`i128`: beyond 64 bits an integer spelling may already
/// have been rounded to a double), and beyond 2^53 the nearest double
/// (`9007199254740993.0` is 2^53); integer spellings of `u64`/`i64` values are exact.
/// Other types see the number as it is: an `f64` parameter gets `57.5`, a
/// `serde_json::Value` parameter keeps `57.0` as a float, a string is never a number.
/// Inside `#[serde(flatten)]`, untagged and tagged enums (which serde buffers before it
/// knows the type), arguments that do not fit as written are decoded once more with the
/// integral numbers of the subtree the error is at written as integers (beside a flattened
/// struct that is the whole object, so a `Value` parameter there sees `57`).
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
#[non_exhaustive]
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
    /// The tool requires a person's approval and the call waits for it
    /// (`Error::AwaitingApproval`, A2). Not retried (D3); the model is told to call again
    /// with the same arguments later, not in another form.
    AwaitingApproval,
    /// A person denied the call (`Error::Denied`, A5). Not retried; the model is told not
    /// to retry the action in any form.
    Denied,
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
                "{}; the outcome of idempotency key {} (claimed at {} ms after the epoch) is unknown: the effect may or may not have happened; do not retry this action in another form (another tool, other arguments)",
                failure.message,
                record.key,
                record.created_at.as_millis()
            );
        }
    }
    failure
}

/// The failure kind of a layer error: [`FailureKind::OutcomeUnknown`] for
/// `Error::OutcomeUnknown`, [`FailureKind::AwaitingApproval`] and [`FailureKind::Denied`]
/// for theirs, else [`FailureKind::Layer`].
fn layer_kind(error: &Error) -> FailureKind {
    match error {
        Error::OutcomeUnknown { .. } => FailureKind::OutcomeUnknown,
        Error::AwaitingApproval { .. } => FailureKind::AwaitingApproval,
        Error::Denied { .. } => FailureKind::Denied,
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
    let record = context.dispatched_outcome();
    let result = result.map_err(|failure| with_unknown_key(failure, record.as_ref()));
    ToolReply { result, record }
}

fn bad_arguments(tool: &str, error: ArgumentsError) -> ToolReply {
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
    /// context. The closure's future runs with the context in force. Arguments that do not
    /// fit `A` (as the [type's documentation](Tool) says, integral numbers included: D8)
    /// give a `bad_arguments` reply without calling the closure.
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
            let args = match decode_arguments::<A>(arguments) {
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
    /// force. Arguments are decoded as for [`from_async`](Tool::from_async).
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
            let reply = match decode_arguments::<A>(arguments) {
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
