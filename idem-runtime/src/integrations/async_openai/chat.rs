//! Chat Completions: a `CreateChatCompletionResponse` in, tool messages out (O1–O3, O5).

use ::async_openai::types::chat::{
    ChatCompletionMessageToolCalls, ChatCompletionRequestAssistantMessage,
    ChatCompletionRequestAssistantMessageAudio, ChatCompletionRequestAssistantMessageContent,
    ChatCompletionRequestMessage, ChatCompletionRequestToolMessage, ChatCompletionResponseMessage,
    CreateChatCompletionResponse,
};
use serde::Deserialize;
use serde_json::Value;

use super::OpenAiDispatchError;
use crate::dispatch::parse::arguments::parse_text;
use crate::dispatch::parse::parallel;
use crate::dispatch::parse::path::JsonPath;
use crate::dispatch::{
    CallReport, Conversation, Dispatcher, Provider, ToolCall, Turn, TurnOutcome,
};

/// What dispatching one Chat Completions assistant message did: the messages to append to
/// the next request, and a [`CallReport`] per call (O1, O2).
///
/// The next request's `messages` are the history so far, then
/// [`assistant_message`](Self::assistant_message), then [`messages`](Self::messages) (one
/// tool message per call, in call order); [`append_to`](Self::append_to) pushes both.
///
/// A `multi_tool_use.parallel` call (an OpenAI parallel wrapper, D7) is run as its
/// `tool_uses`, each a call of its own with a [`CallReport`], and answered by one tool
/// message under the wrapper's id whose content is a list of text parts, one per entry
/// in order. The assistant message keeps the wrapper call as the model sent it.
#[derive(Debug, Clone, PartialEq)]
pub struct ChatToolResults {
    assistant: ChatCompletionRequestAssistantMessage,
    messages: Vec<ChatCompletionRequestMessage>,
    outcome: TurnOutcome,
}

impl ChatToolResults {
    /// The model's message as a request message, to append before the tool messages
    /// ([`assistant_message`](super::assistant_message) of the dispatched message).
    pub fn assistant_message(&self) -> &ChatCompletionRequestAssistantMessage {
        &self.assistant
    }

    /// The tool messages: one [`ChatCompletionRequestMessage::Tool`] per call of the
    /// model's message, in call order, each with the call's `tool_call_id` and its result
    /// as text (D5: a string value as itself, any other value as its JSON text, a failure
    /// as `{"error":{"kind","message","retryable",…}}`). A parallel wrapper's message has
    /// the wrapper's `tool_call_id` and
    /// [`ChatCompletionRequestToolMessageContent::Array`](::async_openai::types::chat::ChatCompletionRequestToolMessageContent::Array)
    /// content: one text part per entry, in order, each that entry's text (D7).
    pub fn messages(&self) -> &[ChatCompletionRequestMessage] {
        &self.messages
    }

    /// The tool messages, owned (see [`messages`](Self::messages)).
    pub fn into_messages(self) -> Vec<ChatCompletionRequestMessage> {
        self.messages
    }

    /// Pushes the assistant message, then the tool messages, onto `history`: what the next
    /// request sends after the history it already had. With no calls, only the assistant
    /// message is pushed.
    pub fn append_to(self, history: &mut Vec<ChatCompletionRequestMessage>) {
        history.reserve(1 + self.messages.len());
        history.push(ChatCompletionRequestMessage::Assistant(self.assistant));
        history.extend(self.messages);
    }

    /// One report per call, in call order: attempts, final reply, key, and executed or
    /// replayed ([`CallReport::status`]). A parallel wrapper has one report per entry
    /// (ids `"<wrapper id>:<i>"`, D7), so there may be more reports than
    /// [`messages`](Self::messages).
    pub fn reports(&self) -> &[CallReport] {
        &self.outcome.calls
    }

    /// The dispatcher's own outcome (its [`messages`](TurnOutcome::messages) are the same
    /// tool messages as JSON).
    pub fn outcome(&self) -> &TurnOutcome {
        &self.outcome
    }

    /// How many tool calls the message had (a parallel wrapper counts once, as it has
    /// one tool message): the number of [`messages`](Self::messages).
    pub fn len(&self) -> usize {
        self.messages.len()
    }

    /// Whether the message had no tool calls: the model answered, the agent loop is done.
    pub fn is_empty(&self) -> bool {
        self.messages.is_empty()
    }

    /// Whether every call's final reply is a success.
    pub fn all_ok(&self) -> bool {
        self.outcome.all_ok()
    }
}

/// The request message that repeats `message` (a model's reply) in the next request's
/// history: its content, refusal, audio id and tool calls unchanged (O2). An empty
/// `tool_calls` list is left out (the API refuses an empty array).
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use async_openai::types::chat::{ChatCompletionRequestAssistantMessageContent, ChatCompletionResponseMessage};
/// use idem_agent::integrations::async_openai::assistant_message;
/// let reply = ChatCompletionResponseMessage { content: Some("Done.".into()), ..Default::default() };
/// let message = assistant_message(&reply);
/// assert_eq!(message.content, Some(ChatCompletionRequestAssistantMessageContent::Text("Done.".into())));
/// assert_eq!(message.tool_calls, None);
/// ```
#[allow(deprecated)] // `function_call`: copied as it is, like every other member
pub fn assistant_message(
    message: &ChatCompletionResponseMessage,
) -> ChatCompletionRequestAssistantMessage {
    ChatCompletionRequestAssistantMessage {
        content: message
            .content
            .clone()
            .map(ChatCompletionRequestAssistantMessageContent::Text),
        refusal: message.refusal.clone(),
        name: None,
        audio: message
            .audio
            .as_ref()
            .map(|audio| ChatCompletionRequestAssistantMessageAudio {
                id: audio.id.clone(),
            }),
        tool_calls: message.tool_calls.clone().filter(|calls| !calls.is_empty()),
        function_call: message.function_call.clone(),
    }
}

impl Dispatcher {
    /// Runs the tool calls of a Chat Completions response's one choice under
    /// `conversation`, as [`dispatch_turn`](Self::dispatch_turn) runs them (concurrently,
    /// with retries carrying each call's key), and returns the messages to append to the
    /// next request (O1, O2). Dispatching the same response again under the same
    /// conversation (a retried turn) replays each call's saved outcome: no second effect,
    /// the same messages (O3).
    ///
    /// A response without tool calls gives empty results
    /// ([`is_empty`](ChatToolResults::is_empty)) with the assistant message.
    ///
    /// Needs the `async-openai` feature ([`integrations::async_openai`](crate::integrations::async_openai)).
    ///
    /// # Errors
    /// Before any call runs: [`OpenAiDispatchError::NoChoices`],
    /// [`MultipleChoices`](OpenAiDispatchError::MultipleChoices) (`n` > 1: pass the
    /// chosen message to [`dispatch_chat_message`](Self::dispatch_chat_message)), and the
    /// errors of [`dispatch_chat_message`](Self::dispatch_chat_message).
    pub async fn dispatch_chat_completion(
        &self,
        response: &CreateChatCompletionResponse,
        conversation: &Conversation,
    ) -> Result<ChatToolResults, OpenAiDispatchError> {
        let choice = match response.choices.as_slice() {
            [choice] => choice,
            [] => {
                return Err(OpenAiDispatchError::NoChoices {
                    response_id: response.id.clone(),
                })
            }
            choices => {
                return Err(OpenAiDispatchError::MultipleChoices {
                    response_id: response.id.clone(),
                    count: choices.len(),
                })
            }
        };
        let path = JsonPath::root().key("choices").index(0).key("message");
        self.dispatch_chat(&choice.message, conversation, &path, Some(&response.id))
            .await
    }

    /// [`dispatch_chat_completion`](Self::dispatch_chat_completion) for one assistant
    /// message (`response.choices[i].message`). A message has no id: its calls carry no turn
    /// identity, so `scope = "call"` tools are keyed by the call id alone (D10); prefer
    /// `dispatch_chat_completion`, which keys them within the response's `id`.
    ///
    /// Needs the `async-openai` feature ([`integrations::async_openai`](crate::integrations::async_openai)).
    ///
    /// # Errors
    /// Before any call runs: [`OpenAiDispatchError::EmptyCallId`],
    /// [`CustomToolCall`](OpenAiDispatchError::CustomToolCall),
    /// [`DeprecatedFunctionCall`](OpenAiDispatchError::DeprecatedFunctionCall). After the
    /// calls ran: [`ResultConversion`](OpenAiDispatchError::ResultConversion).
    pub async fn dispatch_chat_message(
        &self,
        message: &ChatCompletionResponseMessage,
        conversation: &Conversation,
    ) -> Result<ChatToolResults, OpenAiDispatchError> {
        self.dispatch_chat(message, conversation, &JsonPath::root(), None)
            .await
    }

    async fn dispatch_chat(
        &self,
        message: &ChatCompletionResponseMessage,
        conversation: &Conversation,
        path: &JsonPath,
        response_id: Option<&str>,
    ) -> Result<ChatToolResults, OpenAiDispatchError> {
        let mut turn = chat_turn(message, path)?;
        // The response's id is the turn's identity (D10), as for the JSON response.
        if let Some(id) = response_id.filter(|id| !id.is_empty()) {
            turn.identify(id);
        }
        let outcome = self.dispatch_turn(&turn, conversation).await;
        let messages = outcome
            .messages()
            .iter()
            .map(tool_message)
            .collect::<Result<_, _>>()?;
        Ok(ChatToolResults {
            assistant: assistant_message(message),
            messages,
            outcome,
        })
    }
}

/// The calls of `message` at `path`, read as the JSON parser reads them (D1, D2).
fn chat_turn(
    message: &ChatCompletionResponseMessage,
    path: &JsonPath,
) -> Result<Turn, OpenAiDispatchError> {
    #[allow(deprecated)]
    if message.function_call.is_some() {
        return Err(OpenAiDispatchError::DeprecatedFunctionCall {
            path: path.key("function_call").into_string(),
        });
    }
    let calls_path = path.key("tool_calls");
    let mut calls = Vec::new();
    for (i, call) in message.tool_calls.iter().flatten().enumerate() {
        calls.extend(chat_call(call, &calls_path.index(i))?);
    }
    Ok(Turn {
        provider: Provider::OpenAiChat,
        index: 0,
        calls,
    })
}

/// The call at `path`; a parallel wrapper's calls (D7).
fn chat_call(
    call: &ChatCompletionMessageToolCalls,
    path: &JsonPath,
) -> Result<Vec<ToolCall>, OpenAiDispatchError> {
    let call = match call {
        ChatCompletionMessageToolCalls::Function(call) => call,
        ChatCompletionMessageToolCalls::Custom(custom) => {
            return Err(OpenAiDispatchError::CustomToolCall {
                path: path.clone().into_string(),
                call_id: custom.id.clone(),
                name: custom.custom_tool.name.clone(),
            })
        }
    };
    if call.id.is_empty() {
        return Err(OpenAiDispatchError::EmptyCallId {
            path: path.key("id").into_string(),
        });
    }
    let arguments_path = path.key("function").key("arguments");
    let tool_call = ToolCall {
        provider: Provider::OpenAiChat,
        id: call.id.clone(),
        id_synthesized: false,
        name: call.function.name.clone(),
        arguments: parse_text(&call.function.arguments, &arguments_path),
        request_id: None,
        turn_id: None,
        wrapped_in: None,
    };
    Ok(parallel::unwrap(tool_call, &arguments_path))
}

/// One D5 tool message (`{"role":"tool","tool_call_id","content"}`, the content a string
/// or, for a parallel wrapper, a list of text parts) as a request message.
fn tool_message(message: &Value) -> Result<ChatCompletionRequestMessage, OpenAiDispatchError> {
    ChatCompletionRequestToolMessage::deserialize(message)
        .map(ChatCompletionRequestMessage::Tool)
        .map_err(|e| OpenAiDispatchError::ResultConversion {
            call_id: message
                .get("tool_call_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            target: "ChatCompletionRequestToolMessage",
            message: e.to_string(),
        })
}
