//! Typed dispatch of [genai](https://docs.rs/genai/0.7) tool calls (feature `genai`;
//! contract O6–O8).
//!
//! genai reads every provider's tool calls into one [`ToolCall`] type and sends
//! [`ToolResponse`]s back. [`Dispatcher::dispatch_genai`] runs the calls of a
//! [`ChatResponse`] as [`Dispatcher::dispatch_turn`] runs any provider's calls
//! (concurrently, each retry carrying its call's key, under a [`Conversation`]) and returns
//! one `ToolResponse` per call, with the assistant message that precedes them;
//! [`GenaiToolResults::append_to`] appends both to the next [`ChatRequest`]. The same
//! response dispatched again (a retried turn) replays every call's saved outcome.
//!
//! One exception, for `scope = "call"` tools (keyed by the provider's tool-call id): when
//! Gemini sends a call without an id, genai makes one up, `call#<fn_name>#<index>`, the
//! same in every response. Read literally, a later turn's die roll would replay an earlier
//! turn's. Such a call is keyed by `<label>:<genai's id>` instead, with a label drawn at
//! random for each dispatch (genai keeps no response id), as the JSON Gemini parser labels
//! its own positional ids: a call-scoped tool of such a call runs again when the same
//! response is dispatched again. Conversation-scoped tools (the default) are not affected,
//! and the `ToolResponse` carries genai's id either way.
//!
//! A call named `multi_tool_use.parallel` (an OpenAI parallel wrapper, D7) is run as the
//! calls its `tool_uses` hold, each with its own [`CallReport`], and answered by one
//! `ToolResponse` under the wrapper's `call_id` and name. A `ToolResponse`'s content is
//! one string, so a wrapper's content is the JSON text of the array of its entries'
//! texts, in order (`["sunny in Oslo","{\"error\":{…}}"]`), each the text the entry's
//! own `ToolResponse` would have.
//!
//! ```
//! # extern crate idem_runtime as idem_agent;
//! # use genai::chat::{ChatResponse, MessageContent, ToolCall};
//! # mod send_refund { // what `#[idempotent] async fn send_refund(order_id: &str, amount_cents: u64)` generates
//! #     use idem_runtime as idem_agent;
//! #     #[derive(serde::Deserialize)] pub struct Args { order_id: String, amount_cents: u64 }
//! #     static SPEC: idem_agent::ToolSpec = idem_agent::ToolSpec::new("send_refund");
//! #     pub fn tool() -> idem_agent::dispatch::Tool {
//! #         idem_agent::dispatch::Tool::from_async("send_refund", |a: Args, _ctx| async move {
//! #             idem_agent::prepare(&SPEC, None, |b| { b.key("order_id", &a.order_id)?.key("amount_cents", &a.amount_cents)?; Ok(()) })?
//! #                 .run(async move { Ok::<_, idem_agent::ToolError>(format!("refunded {} on {}", a.amount_cents, a.order_id)) }).await
//! #         })
//! #     }
//! # }
//! # fn chat_response() -> ChatResponse { // the model asks for one refund
//! #     let call = ToolCall { call_id: "call_1".into(), fn_name: "send_refund".into(),
//! #         fn_arguments: serde_json::json!({"order_id": "ord_7", "amount_cents": 500}), thought_signatures: None };
//! #     let model_iden = genai::ModelIden::new(genai::adapter::AdapterKind::OpenAI, "gpt-4.1");
//! #     ChatResponse { content: MessageContent::from_tool_calls(vec![call]), reasoning_content: None,
//! #         model_iden: model_iden.clone(), provider_model_iden: model_iden, stop_reason: None,
//! #         usage: Default::default(), captured_raw_body: None, response_id: None }
//! # }
//! # tokio::runtime::Builder::new_current_thread().build()?.block_on(async {
//! use genai::chat::{ChatMessage, ChatRequest};
//! use idem_agent::{dispatch::{Conversation, Dispatcher}, CallStatus};
//!
//! let dispatcher = Dispatcher::builder().tool(send_refund::tool()).build()?;
//! let conversation = Conversation::new("conv_42");
//! let request = ChatRequest::new(vec![ChatMessage::user("Refund order 7")]);
//! let response = chat_response(); // what `client.exec_chat(model, request.clone(), None).await?` returned
//! let results = dispatcher.dispatch_genai(&response, &conversation).await?;
//! assert_eq!(results.reports()[0].status(), Some(CallStatus::Executed));
//! let next = results.append_to(request); // the assistant's tool calls, then one tool response per call
//! assert_eq!(next.messages.len(), 3);
//! // A retried turn (the same response again) replays: no second refund.
//! let again = dispatcher.dispatch_genai(&response, &conversation).await?;
//! assert_eq!(again.reports()[0].status(), Some(CallStatus::Replayed));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```
//!
//! [`Dispatcher::dispatch_turn`]: crate::dispatch::Dispatcher::dispatch_turn
//! [`Dispatcher::dispatch_genai`]: crate::dispatch::Dispatcher::dispatch_genai
//! [`Conversation`]: crate::dispatch::Conversation

use ::genai::chat::{ChatMessage, ChatRequest, ChatResponse, ToolCall, ToolResponse};
use serde_json::Value;

use crate::dispatch::parse::arguments::{object_member, parse_text};
use crate::dispatch::parse::parallel;
use crate::dispatch::parse::path::JsonPath;
use crate::dispatch::{
    turn_messages, CallReport, Conversation, Dispatcher, Provider, Turn, TurnOutcome,
};

/// Why a genai response could not be dispatched, or its results not be written as genai
/// types (contract O8).
///
/// Problems with one call's *arguments* are not errors here: that call gets a
/// `bad_arguments` tool response and does not run, and the other calls still run (D2).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum GenaiDispatchError {
    /// A tool call's `call_id` is empty: its response could not be matched to it (D5).
    /// Returned before any call runs.
    #[error(
        "the tool call at {path} has an empty call_id: its response could not be matched to it"
    )]
    EmptyCallId {
        /// Where the call is: `$.tool_calls[i].call_id`, `i` counting the response's
        /// tool calls.
        path: String,
    },

    /// A call ran, but its result (D5) has no text content to make a [`ToolResponse`]
    /// of. The calls have run and their outcomes are saved: dispatching the same response
    /// again replays them without a second effect.
    #[error(
        "the result of call `{call_id}` has no text content for a genai ToolResponse: {result}"
    )]
    ResultConversion {
        /// The call's id.
        call_id: String,
        /// The result, as JSON text.
        result: String,
    },
}

/// What dispatching one genai response's tool calls did: the messages to append to the
/// next request, and a [`CallReport`] per call (O6).
#[derive(Debug, Clone)]
pub struct GenaiToolResults {
    assistant: Option<ChatMessage>,
    responses: Vec<ToolResponse>,
    outcome: TurnOutcome,
}

impl GenaiToolResults {
    /// The assistant message to append before the tool responses: the response's whole
    /// content (text, reasoning, thought signatures and tool calls, as genai's
    /// `ChatResponse::into_assistant_message_for_tool_use` keeps them), or for
    /// [`dispatch_genai_calls`](Dispatcher::dispatch_genai_calls) the calls alone. `None`
    /// when there were no calls.
    pub fn assistant_message(&self) -> Option<&ChatMessage> {
        self.assistant.as_ref()
    }

    /// One [`ToolResponse`] per call, in call order: the call's `call_id`, the tool's
    /// name, and its result as text (D5: a string value as itself, any other value as its
    /// JSON text, a failure as `{"error":{"kind","message","retryable",…}}`). A parallel
    /// wrapper's response has the wrapper's `call_id` and name, and as content the JSON
    /// text of the array of its entries' texts, in order (D7).
    pub fn tool_responses(&self) -> &[ToolResponse] {
        &self.responses
    }

    /// The tool responses, owned (see [`tool_responses`](Self::tool_responses)).
    pub fn into_tool_responses(self) -> Vec<ToolResponse> {
        self.responses
    }

    /// `request` with the assistant message and then one tool message per call appended:
    /// the next request of the agent loop. With no calls, `request` unchanged.
    pub fn append_to(self, request: ChatRequest) -> ChatRequest {
        let request = match self.assistant {
            Some(assistant) => request.append_message(assistant),
            None => request,
        };
        request.append_messages(self.responses)
    }

    /// One report per call, in call order: attempts, final reply, key, and executed or
    /// replayed ([`CallReport::status`]). A parallel wrapper has one report per entry
    /// (ids `"<wrapper call_id>:<i>"`, D7), so there may be more reports than
    /// [`tool_responses`](Self::tool_responses).
    pub fn reports(&self) -> &[CallReport] {
        &self.outcome.calls
    }

    /// The dispatcher's own outcome (its [`messages`](TurnOutcome::messages) are the
    /// results in OpenAI Chat's JSON shape, with the same content text).
    pub fn outcome(&self) -> &TurnOutcome {
        &self.outcome
    }

    /// How many tool calls there were (a parallel wrapper counts once, as it has one
    /// tool response): the number of [`tool_responses`](Self::tool_responses).
    pub fn len(&self) -> usize {
        self.responses.len()
    }

    /// Whether there were no tool calls: the model answered, the agent loop is done.
    pub fn is_empty(&self) -> bool {
        self.responses.is_empty()
    }

    /// Whether every call's final reply is a success.
    pub fn all_ok(&self) -> bool {
        self.outcome.all_ok()
    }
}

impl Dispatcher {
    /// Runs the tool calls of a genai [`ChatResponse`] under `conversation`, as
    /// [`dispatch_turn`](Self::dispatch_turn) runs them, and returns the assistant message
    /// and one [`ToolResponse`] per call (O6). Dispatching the same response again under
    /// the same conversation (a retried turn) replays each call's saved outcome: no second
    /// effect, the same tool responses (O7).
    ///
    /// Arguments genai already parsed (an object) are used as they are; arguments genai
    /// left as a string (a provider's text that was not JSON) are read as the JSON parser
    /// reads OpenAI's (D2); `null` means no arguments (`{}`); anything else is a
    /// `bad_arguments` result for that call.
    ///
    /// genai's `ChatResponse` carries no response id, so its calls have no turn identity:
    /// `scope = "call"` tools are keyed by the call id alone (D10). With a provider that
    /// reuses call ids in every turn, give each turn one yourself: parse the provider's
    /// JSON with [`parse_turns`](crate::dispatch::parse_turns), or set
    /// [`ToolCall::turn_id`](crate::dispatch::ToolCall::turn_id) and use
    /// [`dispatch_turn`](Self::dispatch_turn).
    ///
    /// Needs the `genai` feature ([`integrations::genai`](crate::integrations::genai)).
    ///
    /// # Errors
    /// [`GenaiDispatchError::EmptyCallId`] before any call runs;
    /// [`GenaiDispatchError::ResultConversion`] after the calls ran.
    pub async fn dispatch_genai(
        &self,
        response: &ChatResponse,
        conversation: &Conversation,
    ) -> Result<GenaiToolResults, GenaiDispatchError> {
        let calls = response.tool_calls();
        let (responses, outcome) = self.genai_calls(calls, conversation).await?;
        let assistant = response.clone().into_assistant_message_for_tool_use();
        Ok(GenaiToolResults {
            assistant,
            responses,
            outcome,
        })
    }

    /// [`dispatch_genai`](Self::dispatch_genai) for tool calls on their own (such as a
    /// stream's captured tool calls); the assistant message is `ChatMessage::from(calls)`.
    ///
    /// Needs the `genai` feature ([`integrations::genai`](crate::integrations::genai)).
    ///
    /// # Errors
    /// As [`dispatch_genai`](Self::dispatch_genai).
    pub async fn dispatch_genai_calls(
        &self,
        calls: &[ToolCall],
        conversation: &Conversation,
    ) -> Result<GenaiToolResults, GenaiDispatchError> {
        let (responses, outcome) = self
            .genai_calls(calls.iter().collect(), conversation)
            .await?;
        let assistant = (!calls.is_empty()).then(|| ChatMessage::from(calls.to_vec()));
        Ok(GenaiToolResults {
            assistant,
            responses,
            outcome,
        })
    }

    async fn genai_calls(
        &self,
        calls: Vec<&ToolCall>,
        conversation: &Conversation,
    ) -> Result<(Vec<ToolResponse>, TurnOutcome), GenaiDispatchError> {
        let (turn, counts) = genai_turn(&calls, &random_label())?;
        let outcome = self.dispatch_turn(&turn, conversation).await;
        let mut responses = Vec::with_capacity(calls.len());
        let mut reports = outcome.calls.as_slice();
        for (call, count) in calls.iter().zip(counts) {
            let (own, rest) = reports.split_at(count.min(reports.len()));
            reports = rest;
            responses.push(tool_response(own, call)?);
        }
        Ok((responses, outcome))
    }
}

/// A label for the calls genai gave made-up ids: 16 random hex digits, new for each
/// dispatch (genai keeps no response id to label them by).
fn random_label() -> String {
    format!("{:016x}", uuid::Uuid::new_v4().as_u64_pair().0)
}

/// Whether `call_id` is the stand-in genai's Gemini adapter makes for a call Gemini sent
/// without an id: `call#<fn_name>#<index in the response>` (genai 0.7's Gemini adapter).
/// Such an id is the same in every response, so it is no call's identity (K7, K9).
fn is_genai_stand_in(call_id: &str, fn_name: &str) -> bool {
    call_id
        .strip_prefix("call#")
        .and_then(|rest| rest.strip_prefix(fn_name))
        .and_then(|rest| rest.strip_prefix('#'))
        .is_some_and(|index| !index.is_empty() && index.bytes().all(|b| b.is_ascii_digit()))
}

/// The calls as one turn, and how many of the turn's calls each genai call became (one,
/// or a parallel wrapper's entries, D7). Results take OpenAI Chat's shape
/// (`tool_call_id`, text `content`), which is what a `ToolResponse` holds. A call whose
/// id is genai's stand-in for a Gemini call without one gets the id `<label>:<stand-in>`,
/// marked synthesized, as the Gemini parser labels positional ids per response: two
/// responses' calls never share a `scope = "call"` key (K7, K9). The `ToolResponse` still
/// carries genai's id.
fn genai_turn(calls: &[&ToolCall], label: &str) -> Result<(Turn, Vec<usize>), GenaiDispatchError> {
    let calls_path = JsonPath::root().key("tool_calls");
    let read = calls
        .iter()
        .enumerate()
        .map(|(i, call)| {
            let path = calls_path.index(i);
            if call.call_id.is_empty() {
                return Err(GenaiDispatchError::EmptyCallId {
                    path: path.key("call_id").into_string(),
                });
            }
            let arguments_path = path.key("fn_arguments");
            let arguments = match &call.fn_arguments {
                Value::String(text) => parse_text(text, &arguments_path),
                Value::Null => object_member(None, &arguments_path, true),
                other => object_member(Some(other), &arguments_path, true),
            };
            let stand_in = is_genai_stand_in(&call.call_id, &call.fn_name);
            let tool_call = crate::dispatch::ToolCall {
                provider: Provider::OpenAiChat,
                id: if stand_in {
                    format!("{label}:{}", call.call_id)
                } else {
                    call.call_id.clone()
                },
                id_synthesized: stand_in,
                name: call.fn_name.clone(),
                arguments,
                request_id: None,
                turn_id: None,
                wrapped_in: None,
            };
            Ok(parallel::unwrap(tool_call, &arguments_path))
        })
        .collect::<Result<Vec<_>, _>>()?;
    let counts = read.iter().map(Vec::len).collect();
    let turn = Turn {
        provider: Provider::OpenAiChat,
        index: 0,
        calls: read.into_iter().flatten().collect(),
    };
    Ok((turn, counts))
}

/// The D5 result of `call` (`{"role":"tool","tool_call_id","content"}`, from the reports
/// of the turn's calls it became) as a `ToolResponse` under genai's `call_id`, carrying
/// the call's name (Gemini matches responses by name). A parallel wrapper's reports
/// merge into one message whose content is a list of text parts (D7); its content here is
/// the JSON text of the array of their texts.
fn tool_response(
    reports: &[CallReport],
    call: &ToolCall,
) -> Result<ToolResponse, GenaiDispatchError> {
    let pieces = reports.iter().map(|report| report.result.clone()).collect();
    let merged = turn_messages(Provider::OpenAiChat, pieces);
    let content = match merged.as_slice() {
        [message] => match message.get("content") {
            Some(Value::String(text)) => Some(text.clone()),
            Some(Value::Array(parts)) => parts
                .iter()
                .map(|part| part.get("text").and_then(Value::as_str))
                .collect::<Option<Vec<_>>>()
                .map(|texts| Value::from(texts).to_string()),
            _ => None,
        },
        _ => None,
    };
    match content {
        Some(content) => {
            Ok(ToolResponse::new(call.call_id.clone(), content).with_fn_name(call.fn_name.clone()))
        }
        None => Err(GenaiDispatchError::ResultConversion {
            call_id: call.call_id.clone(),
            result: match merged.as_slice() {
                [message] => message.to_string(),
                _ => Value::from(merged).to_string(),
            },
        }),
    }
}

#[cfg(test)]
mod tests {
    use super::is_genai_stand_in;

    // pins K7, K9: only genai's own stand-in for an id-less Gemini call is relabelled
    #[test]
    fn recognises_genais_stand_in_ids() {
        assert!(is_genai_stand_in("call#roll_die#0", "roll_die"));
        assert!(is_genai_stand_in("call#roll_die#12", "roll_die"));
        assert!(!is_genai_stand_in("call#roll_die#", "roll_die"));
        assert!(!is_genai_stand_in("call#roll_die#x", "roll_die"));
        assert!(!is_genai_stand_in("call#other#0", "roll_die"));
        assert!(!is_genai_stand_in("call_abc123", "roll_die"));
    }
}
