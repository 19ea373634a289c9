//! Running one assistant message's tool calls (contract D2–D4, K9).
//!
//! ```text
//! dispatch_turn:  join_all(calls)                                         (D4: concurrent)
//! one call:       unknown tool / unusable arguments ──→ error result, no run    (D2)
//!                 (a parallel wrapper's calls arrive unwrapped, one each       (D7))
//!                 record = AttemptRecord::new(tool name)        (K9: one per call)
//!                 attempt 1..=max: context(conversation, call id, record)
//!                                  → transport → reply
//!                                  transient? ── yes ─→ backoff + jitter, again (D3)
//!                                              └ no ──→ done
//!                 → CallReport { attempts, reply, key, provider-shaped result } (D5)
//! ```
//! Calls of one message that share a key (the model emitted the same call twice) both
//! reach the store: one claims and runs, the others wait for its outcome and replay it
//! (S5), so there is one effect and every caller gets the result (D4). The dispatcher
//! never deduplicates calls itself and never cancels an attempt in flight: cancelling
//! would release the claim (S7) of a body that may already have had its effect.

use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use futures_util::future::join_all;
use serde_json::Value;

use crate::context::{AttemptRecord, CallContext};
use crate::dispatch::parse::parallel;
use crate::dispatch::results::marked_call_result;
use crate::dispatch::retry::is_transient;
use crate::dispatch::{
    ArgumentError, Attempt, CallReport, Conversation, FailureKind, InProcess, OwnRun, RetryPolicy,
    Tool, ToolCall, ToolFailure, ToolReply, ToolRequest, Transport, Turn, TurnOutcome,
};
use crate::engine::Engine;
use crate::key::IdempotencyKey;
use crate::outcome::{CallRecord, CallStatus};

/// Runs the tool calls of assistant messages against registered [`Tool`]s, with retries
/// that carry each call's key (D2–D5).
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::dispatch::{parse_turns_str, Conversation, Dispatcher, RetryPolicy, Tool};
/// use idem_agent::{Engine, ToolError};
/// #[derive(serde::Deserialize)]
/// struct Args { city: String }
/// let dispatcher = Dispatcher::builder()
///     .tool(Tool::from_sync("get_weather", |a: Args, _ctx| Ok::<_, ToolError>(format!("sunny in {}", a.city))))
///     .engine(Engine::in_memory())
///     .retry(RetryPolicy::immediate(3))
///     .build()?;
/// let turns = parse_turns_str(r#"{"jsonrpc":"2.0","id":2,"method":"tools/call",
///     "params":{"name":"get_weather","arguments":{"city":"Oslo"}}}"#)?;
/// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
/// let outcome = dispatcher.dispatch_turn(&turns[0], &Conversation::new("conv_1")).await;
/// assert!(outcome.all_ok());
/// assert_eq!(outcome.messages()[0]["result"]["content"][0]["text"], "sunny in Oslo");
/// # });
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug, Clone)]
pub struct Dispatcher {
    tools: Arc<HashMap<String, Tool>>,
    engine: Option<Engine>,
    retry: RetryPolicy,
    transport: Arc<dyn Transport>,
    /// Whether replayed results carry the marker the model reads (D6), for tools that do
    /// not choose for themselves.
    mark_replays: bool,
}

/// Builds a [`Dispatcher`]; see [`Dispatcher::builder`].
#[derive(Debug, Default)]
pub struct DispatcherBuilder {
    tools: Vec<Tool>,
    engine: Option<Engine>,
    retry: Option<RetryPolicy>,
    transport: Option<Arc<dyn Transport>>,
    mark_replays: bool,
}

/// Why a [`DispatcherBuilder`] could not build.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum BuildError {
    /// Two registered tools have the same name: a model call could not be routed.
    #[error("two tools are registered under the name `{name}`")]
    DuplicateTool {
        /// The name.
        name: String,
    },
}

impl DispatcherBuilder {
    /// Registers `tool` under its [`name`](Tool::name).
    pub fn tool(mut self, tool: Tool) -> Self {
        self.tools.push(tool);
        self
    }

    /// Registers every tool of `tools`.
    pub fn tools(mut self, tools: impl IntoIterator<Item = Tool>) -> Self {
        self.tools.extend(tools);
        self
    }

    /// Uses `engine` for calls whose [`Conversation`] sets none. Without it, calls use
    /// the process-wide default engine ([`default_engine`](crate::default_engine)).
    pub fn engine(mut self, engine: Engine) -> Self {
        self.engine = Some(engine);
        self
    }

    /// Retries by `policy` (default [`RetryPolicy::new`]: 3 attempts, 200 ms base, 5 s
    /// cap, full jitter).
    pub fn retry(mut self, policy: RetryPolicy) -> Self {
        self.retry = Some(policy);
        self
    }

    /// Sends attempts through `transport` (default [`InProcess`]).
    pub fn transport(mut self, transport: impl Transport) -> Self {
        self.transport = Some(Arc::new(transport));
        self
    }

    /// Whether a result whose outcome did not run now tells the model so (D6). Off by
    /// default: results are then exactly as [`call_result`](crate::dispatch::call_result)
    /// shapes them, a replay's equal to the first run's (O3, O7). A tool's own
    /// choice ([`Tool::mark_replays`]) wins over this one.
    ///
    /// On, a call's content is marked when the outcome it ends with is not its own run's
    /// (D6, D11): its final reply's record (S12) is replayed or reconciled, and
    /// [`CallReport::ran`](crate::dispatch::CallReport::ran) is `None`, so none of the
    /// call's own attempts ran the body (or reconciled) and saved that outcome.
    ///
    /// - A **replayed** reply (the saved outcome returned without running,
    ///   [`CallStatus::Replayed`](crate::CallStatus::Replayed)) is marked with
    ///   `first_run_at`: when the run whose outcome is replayed claimed the key (the
    ///   record's `created_at`, RFC 3339 in UTC with milliseconds, as
    ///   [`Timestamp::to_rfc3339`](crate::Timestamp::to_rfc3339) writes it).
    /// - A **reconciled** reply ([`CallStatus::Reconciled`](crate::CallStatus::Reconciled):
    ///   a takeover's reconcile function found that an earlier run, whose outcome was
    ///   lost, had had its effect, U3) is marked `reconciled` with `reconciled_at`, the time
    ///   of that takeover (the earlier run's own start is not recorded). Only when no
    ///   attempt of this call is seen reconciling: under a transport that runs the tool in
    ///   process ([`InProcess`](crate::dispatch::InProcess)), the call's own attempt did
    ///   the reconciling, which is its own run (D11), so its result is not marked; a later
    ///   call that replays the reconciled outcome is marked `replayed`.
    ///
    /// Failures are marked like values: a replayed failure is the case that misleads a
    /// model most (it reads an old failure as a new one). An executed call, and a call that
    /// never reached the store (unknown tool, unusable arguments), is never marked.
    ///
    /// The marker, for content `c` (the value's JSON, or `{"error":{…}}` for a failure) and
    /// the first run at `2026-12-01T20:33:33.123Z`:
    ///
    /// - JSON content: `{"idem":{"first_run_at":"2026-12-01T20:33:33.123Z","replayed":true},"result":c}`
    ///   (members sorted, as D5's text is), or for a reconciled outcome
    ///   `{"idem":{"reconciled":true,"reconciled_at":"…"},"result":c}`;
    /// - text content (a tool's string value, which D5 sends as itself): the line
    ///   `[idem: replayed; first run at 2026-12-01T20:33:33.123Z]` (reconciled:
    ///   `[idem: reconciled; an earlier run's effect was confirmed at …]`), a newline, then
    ///   the text.
    ///
    /// Where it goes, per provider:
    ///
    /// | Provider | marked | unchanged |
    /// | --- | --- | --- |
    /// | OpenAI Chat | the tool message's `content` string (an entry of a parallel wrapper, D7: its own text part's `text`) | `role`, `tool_call_id` |
    /// | OpenAI Responses | the `function_call_output`'s `output` string (an entry of a parallel wrapper, D7: its own `input_text` part's `text`) | `type`, `call_id` |
    /// | Anthropic | the `tool_result`'s `content` string | `tool_use_id`, `is_error` |
    /// | Gemini | `functionResponse.response`, a JSON object: an `idem` member beside its `result` (or `error`), so `{"idem":{…},"result":value}` | `name`, `id`; a failure stays under `error` |
    /// | MCP | `result.content[0].text` | `structuredContent` (it must match the tool's output schema), `isError`, the JSON-RPC `id` |
    ///
    /// The typed integrations (`integrations::async_openai`, `integrations::genai`) take
    /// their content from these results, so their tool messages, `function_call_output`
    /// items and `ToolResponse`s carry the same marked text.
    ///
    /// Marked: a call whose outcome another call ran, such as a later call with the same
    /// key (a retried turn, as in the example below; a call that reuses an earlier call's
    /// id and so gets its key, D11) and the second of two identical calls in one message
    /// (D4). Not marked: a call whose own attempt ran the body and saved the outcome but
    /// whose reply was lost, so that a retry (D3) replayed that outcome (or the transport
    /// gave up while the body ran, and a retry replayed the record that attempt was
    /// saving): the call's own run, reported as executed by
    /// [`CallReport::own_status`](crate::dispatch::CallReport::own_status) and
    /// [`CallReport::ran`](crate::dispatch::CallReport::ran) (D11), although
    /// [`CallReport::status`](crate::dispatch::CallReport::status), the final reply's, is
    /// replayed.
    ///
    /// ```
    /// # extern crate idem_runtime as idem_agent;
    /// use std::sync::Arc;
    /// use idem_agent::dispatch::{parse_turns_str, Conversation, Dispatcher, Tool};
    /// use idem_agent::testkit::ManualClock;
    /// use idem_agent::{prepare, Engine, MemoryStore, Timestamp, ToolError, ToolSpec};
    /// static SEND_REFUND: ToolSpec = ToolSpec::new("send_refund");
    /// #[derive(serde::Deserialize)]
    /// struct Args { order: u64 }
    /// // What `#[idempotent] async fn send_refund(order: u64)` registers as `send_refund::tool()`.
    /// let send_refund = Tool::from_async("send_refund", |a: Args, _ctx| async move {
    ///     prepare(&SEND_REFUND, None, |b| b.key("order", &a.order).map(drop))?
    ///         .run(async move { Ok::<_, ToolError>(format!("refunded order {}", a.order)) })
    ///         .await
    /// });
    /// let clock = ManualClock::starting_at(Timestamp::from_millis(1_796_157_213_123));
    /// let dispatcher = Dispatcher::builder()
    ///     .tool(send_refund)
    ///     .engine(Engine::from_shared(Arc::new(MemoryStore::new()), Arc::new(clock)))
    ///     .mark_replays(true)
    ///     .build()?;
    /// let turns = parse_turns_str(r#"{"role":"assistant","tool_calls":[{"id":"call_1","type":"function",
    ///     "function":{"name":"send_refund","arguments":"{\"order\":7}"}}]}"#)?;
    /// # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
    /// let conversation = Conversation::new("conv_1");
    /// let first = dispatcher.dispatch_turn(&turns[0], &conversation).await;
    /// assert_eq!(first.messages()[0]["content"], "refunded order 7");
    /// // The model's turn is retried: the saved outcome comes back, marked.
    /// let again = dispatcher.dispatch_turn(&turns[0], &conversation).await;
    /// assert_eq!(
    ///     again.messages()[0]["content"],
    ///     "[idem: replayed; first run at 2026-12-01T20:33:33.123Z]\nrefunded order 7"
    /// );
    /// # });
    /// # Ok::<(), Box<dyn std::error::Error>>(())
    /// ```
    pub fn mark_replays(mut self, mark: bool) -> Self {
        self.mark_replays = mark;
        self
    }

    /// The dispatcher.
    ///
    /// # Errors
    /// [`BuildError::DuplicateTool`] when two tools share a name.
    pub fn build(self) -> Result<Dispatcher, BuildError> {
        let mut tools = HashMap::with_capacity(self.tools.len());
        for tool in self.tools {
            let name = tool.name().to_owned();
            if tools.insert(name.clone(), tool).is_some() {
                return Err(BuildError::DuplicateTool { name });
            }
        }
        Ok(Dispatcher {
            tools: Arc::new(tools),
            engine: self.engine,
            retry: self.retry.unwrap_or_default(),
            transport: self.transport.unwrap_or_else(|| Arc::new(InProcess)),
            mark_replays: self.mark_replays,
        })
    }
}

impl Dispatcher {
    /// A builder with no tools, the default engine, retry policy and transport.
    pub fn builder() -> DispatcherBuilder {
        DispatcherBuilder::default()
    }

    /// The tool registered as `name`.
    pub fn tool(&self, name: &str) -> Option<&Tool> {
        self.tools.get(name)
    }

    /// This dispatcher (its tools, engine, retry policy and transport), marking replays
    /// or not (D6), for tools that do not choose for themselves: see
    /// [`DispatcherBuilder::mark_replays`] for the marker in each provider's shape.
    pub fn mark_replays(mut self, mark: bool) -> Self {
        self.mark_replays = mark;
        self
    }

    /// Runs every call of `turn` concurrently under `conversation` and reports each
    /// (D4). Never fails as a whole: a call that cannot run gets an error result (D2).
    pub async fn dispatch_turn(&self, turn: &Turn, conversation: &Conversation) -> TurnOutcome {
        let calls = join_all(
            turn.calls
                .iter()
                .map(|call| self.dispatch_call(call, conversation)),
        )
        .await;
        TurnOutcome {
            provider: turn.provider,
            index: turn.index,
            calls,
        }
    }

    /// Runs one call with retries (D2, D3): a fresh [`AttemptRecord`] shared by all its
    /// attempts, so the key derived by the first attempt is carried by every retry and by
    /// no other call, even one reusing the provider's call id (K9).
    pub async fn dispatch_call(&self, call: &ToolCall, conversation: &Conversation) -> CallReport {
        let (tool, arguments) = match self.runnable(call) {
            Ok(runnable) => runnable,
            Err(failure) => {
                return report(call, Vec::new(), None, failure_reply(failure), false, None)
            }
        };
        let mark_replays = tool.replay_marking().unwrap_or(self.mark_replays);
        let record = AttemptRecord::new(call.name.as_str());
        let mut attempts: Vec<Attempt> = Vec::new();
        // Each attempt's context: its outcome slot says what the tool's `#[idempotent]`
        // call did in that attempt, also when the transport lost the reply (D11).
        let mut contexts = Vec::new();
        for number in 1..=self.retry.max_attempts() {
            // The backoff, or the previous attempt's retry-after hint if that is longer.
            let hint = attempts
                .last()
                .and_then(|previous| previous.outcome.as_ref().ok())
                .and_then(|reply| reply.result.as_ref().err())
                .and_then(|failure| failure.retry_after_ms)
                .map_or(Duration::ZERO, Duration::from_millis);
            let waited = self.retry.delay_before(number).max(hint);
            if waited > Duration::ZERO {
                self.retry.sleep(waited).await;
            }
            let mut context = conversation.call_context(&call.id, Arc::clone(&record));
            if let Some(turn) = &call.turn_id {
                context = context.with_turn(turn.as_str());
            }
            if let (None, Some(engine)) = (conversation.engine(), &self.engine) {
                context = context.with_engine(engine.clone());
            }
            let request = ToolRequest {
                tool: tool.clone(),
                arguments: arguments.clone(),
                context,
                call_id: call.id.clone(),
                attempt: number,
            };
            contexts.push(request.context.clone());
            let outcome = self.transport.invoke(request).await;
            let again = is_transient(&outcome);
            attempts.push(Attempt {
                number,
                waited,
                outcome,
            });
            if !again {
                break;
            }
        }
        let reply = final_reply(&attempts, self.retry.max_attempts());
        // The carried key; else (a tool whose `#[idempotent]` name differs from the name it is
        // registered under carries none, K9) the key its outcome reports.
        let key = record
            .derived()
            .map(|derived| derived.key)
            .or_else(|| reply.record.as_ref().map(|r| r.key.clone()));
        let ran = own_run(&contexts, &reply);
        report(call, attempts, key, reply, mark_replays, ran)
    }

    /// The tool and arguments of `call`, or the failure that keeps it from running (D2).
    /// An unknown tool is reported before unusable arguments, except for an OpenAI
    /// parallel wrapper that could not be unwrapped (D7): it names no tool, so its own
    /// argument error is what the model needs to read.
    fn runnable<'a>(&'a self, call: &'a ToolCall) -> Result<(&'a Tool, &'a Value), ToolFailure> {
        if let Err(error) = &call.arguments {
            if matches!(error, ArgumentError::MalformedParallelWrapper { .. })
                || parallel::is_wrapper_name(call.provider, &call.name)
            {
                return Err(ToolFailure::new(
                    FailureKind::BadArguments,
                    format!("`{}` ran none of its calls: {error}", call.name),
                    false,
                ));
            }
        }
        let Some(tool) = self.tools.get(&call.name) else {
            let mut known: Vec<&str> = self.tools.keys().map(String::as_str).collect();
            known.sort_unstable();
            return Err(ToolFailure::new(
                FailureKind::UnknownTool,
                format!(
                    "no tool named `{}` is registered; known tools: {}",
                    call.name,
                    known.join(", ")
                ),
                false,
            ));
        };
        match &call.arguments {
            Ok(arguments) => Ok((tool, arguments)),
            Err(error) => Err(ToolFailure::new(
                FailureKind::BadArguments,
                format!("arguments of tool `{}` are unusable: {error}", call.name),
                false,
            )),
        }
    }
}

fn report(
    call: &ToolCall,
    attempts: Vec<Attempt>,
    key: Option<IdempotencyKey>,
    reply: ToolReply,
    mark_replays: bool,
    ran: Option<OwnRun>,
) -> CallReport {
    // A call whose own run's reply was lost ran now: its retry's replay is not marked (D11).
    let record = reply
        .record
        .as_ref()
        .filter(|_| mark_replays && ran.is_none());
    CallReport {
        id: call.id.clone(),
        tool: call.name.clone(),
        result: marked_call_result(call, &reply.result, record),
        attempts,
        reply,
        key,
        ran,
    }
}

/// The first attempt whose tool call ran the body itself (executed or reconciled, not a
/// replay), read from the attempts' contexts (D11). A replay of a record that one of the
/// attempts claimed (same key and fence) is that attempt's own run too: its reply was lost
/// and the run finished after the next attempt replayed it (a transport that gives up
/// while the body runs).
fn own_run(contexts: &[CallContext], reply: &ToolReply) -> Option<OwnRun> {
    let ran_here = contexts.iter().zip(1..).find_map(|(context, attempt)| {
        context
            .dispatched_outcome()
            // A run whose outcome was not saved (a retryable error released the claim)
            // is not the outcome the call ends with.
            .filter(|record| record.status != CallStatus::Replayed && record.recorded)
            .map(|record| OwnRun { attempt, record })
    });
    ran_here.or_else(|| {
        let replayed = reply.record.as_ref()?;
        let (_, attempt) = contexts
            .iter()
            .zip(1..)
            .find(|(context, _)| context.claimed(replayed))?;
        Some(OwnRun {
            attempt,
            record: CallRecord {
                status: CallStatus::Executed,
                ..replayed.clone()
            },
        })
    })
}

fn failure_reply(failure: ToolFailure) -> ToolReply {
    ToolReply {
        result: Err(failure),
        record: None,
    }
}

/// The last attempt's reply; a lost reply becomes a transport failure, and a transient
/// failure on the last allowed attempt says the dispatcher gave up.
fn final_reply(attempts: &[Attempt], max_attempts: u32) -> ToolReply {
    let Some(last) = attempts.last() else {
        return failure_reply(ToolFailure::new(
            FailureKind::Transport,
            "no attempt was made",
            true,
        ));
    };
    let mut reply = match &last.outcome {
        Ok(reply) => reply.clone(),
        Err(error) => failure_reply(ToolFailure::new(
            FailureKind::Transport,
            error.to_string(),
            error.is_transient(),
        )),
    };
    if is_transient(&last.outcome) && last.number >= max_attempts {
        if let Err(failure) = &mut reply.result {
            failure.message = format!(
                "{} (gave up after {} attempts; retrying this call later with the same key is safe)",
                failure.message, last.number
            );
        }
    }
    reply
}
