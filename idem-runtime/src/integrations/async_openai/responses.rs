//! Responses API: a `Response` in, `function_call_output` input items out (O3–O5).

use ::async_openai::types::responses::{
    FunctionCallOutputItemParam, InputItem, Item, OutputItem, Response,
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

/// What dispatching one Responses API response did: the input items to send next, and a
/// [`CallReport`] per call (O4).
///
/// The items are `function_call_output` items ([`Item::FunctionCallOutput`]), one per
/// `function_call` output item, in output order, each with the call's `call_id`. With
/// `previous_response_id` set to the response's id, they are the whole next `input`
/// (`CreateResponse::input` takes `Vec<InputItem>` through `InputParam::from`). Without
/// it (`store: false`, context managed by hand), the next input is the history so far,
/// then the response's output items (`InputItem::from(output_item)`: reasoning items must
/// be echoed with the calls they preceded), then these items.
///
/// A `function_call` named `multi_tool_use.parallel`, or `parallel` with a `tool_uses`
/// member (an OpenAI parallel wrapper, D7), is run as its `tool_uses`, each a call of its
/// own with a [`CallReport`], and answered by one `function_call_output` under the
/// wrapper's `call_id` whose `output` is a list of `input_text` parts, one per entry in
/// order.
#[derive(Debug, Clone, PartialEq)]
pub struct ResponseToolResults {
    items: Vec<InputItem>,
    outcome: TurnOutcome,
}

impl ResponseToolResults {
    /// The `function_call_output` input items, one per `function_call` item, in call
    /// order. Each `output` is the call's result as text (D5: a string value as itself,
    /// any other value as its JSON text, a failure as
    /// `{"error":{"kind","message","retryable",…}}`). A parallel wrapper's item has the
    /// wrapper's `call_id` and
    /// [`FunctionCallOutput::Content`](::async_openai::types::responses::FunctionCallOutput::Content)
    /// output: one `input_text` part per entry, in order, each that entry's text (D7).
    pub fn items(&self) -> &[InputItem] {
        &self.items
    }

    /// The input items, owned (see [`items`](Self::items)).
    pub fn into_items(self) -> Vec<InputItem> {
        self.items
    }

    /// One report per call, in call order: attempts, final reply, key, and executed or
    /// replayed ([`CallReport::status`]). A parallel wrapper has one report per entry
    /// (ids `"<wrapper call_id>:<i>"`, D7), so there may be more reports than
    /// [`items`](Self::items).
    pub fn reports(&self) -> &[CallReport] {
        &self.outcome.calls
    }

    /// The dispatcher's own outcome (its [`messages`](TurnOutcome::messages) are the same
    /// items as JSON).
    pub fn outcome(&self) -> &TurnOutcome {
        &self.outcome
    }

    /// How many function calls the response had (a parallel wrapper counts once, as it
    /// has one item): the number of [`items`](Self::items).
    pub fn len(&self) -> usize {
        self.items.len()
    }

    /// Whether the response had no function calls: the model answered, the agent loop is
    /// done.
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Whether every call's final reply is a success.
    pub fn all_ok(&self) -> bool {
        self.outcome.all_ok()
    }
}

impl Dispatcher {
    /// Runs the `function_call` items of a Responses API response under `conversation`,
    /// as [`dispatch_turn`](Self::dispatch_turn) runs them (concurrently, with retries
    /// carrying each call's key), and returns the `function_call_output` items to send
    /// next (O4). Other output items (messages, reasoning, built-in tools OpenAI runs
    /// itself) carry no call for the dispatcher. Dispatching the same response again under
    /// the same conversation (a retried turn) replays each call's saved outcome: no second
    /// effect, the same items (O3).
    ///
    /// Needs the `async-openai` feature ([`integrations::async_openai`](crate::integrations::async_openai)).
    ///
    /// # Errors
    /// Before any call runs: [`OpenAiDispatchError::EmptyCallId`] (a `call_id` is empty),
    /// [`CustomToolCall`](OpenAiDispatchError::CustomToolCall) (a `custom_tool_call` item).
    /// After the calls ran: [`ResultConversion`](OpenAiDispatchError::ResultConversion).
    pub async fn dispatch_response(
        &self,
        response: &Response,
        conversation: &Conversation,
    ) -> Result<ResponseToolResults, OpenAiDispatchError> {
        self.dispatch_items(
            &response.output,
            conversation,
            &JsonPath::root().key("output"),
            Some(&response.id),
        )
        .await
    }

    /// [`dispatch_response`](Self::dispatch_response) for a list of output items
    /// (`response.output`, or the items collected from a stream). The items carry no
    /// response id: their calls have no turn identity, so `scope = "call"` tools are keyed
    /// by the call id alone (D10); prefer `dispatch_response`, which keys them within the
    /// response's `id`.
    ///
    /// Needs the `async-openai` feature ([`integrations::async_openai`](crate::integrations::async_openai)).
    ///
    /// # Errors
    /// As [`dispatch_response`](Self::dispatch_response); paths start at `$[i]`.
    pub async fn dispatch_response_output(
        &self,
        output: &[OutputItem],
        conversation: &Conversation,
    ) -> Result<ResponseToolResults, OpenAiDispatchError> {
        self.dispatch_items(output, conversation, &JsonPath::root(), None)
            .await
    }

    async fn dispatch_items(
        &self,
        output: &[OutputItem],
        conversation: &Conversation,
        path: &JsonPath,
        response_id: Option<&str>,
    ) -> Result<ResponseToolResults, OpenAiDispatchError> {
        let mut turn = responses_turn(output, path)?;
        // The response's id is the turn's identity (D10), as for the JSON response.
        if let Some(id) = response_id.filter(|id| !id.is_empty()) {
            turn.identify(id);
        }
        let outcome = self.dispatch_turn(&turn, conversation).await;
        let items = outcome
            .messages()
            .iter()
            .map(output_item)
            .collect::<Result<_, _>>()?;
        Ok(ResponseToolResults { items, outcome })
    }
}

/// The function calls of `output` at `path`, read as the JSON parser reads them (D1, D2).
fn responses_turn(output: &[OutputItem], path: &JsonPath) -> Result<Turn, OpenAiDispatchError> {
    let mut calls = Vec::new();
    for (i, item) in output.iter().enumerate() {
        let item_path = path.index(i);
        match item {
            OutputItem::FunctionCall(call) => {
                if call.call_id.is_empty() {
                    return Err(OpenAiDispatchError::EmptyCallId {
                        path: item_path.key("call_id").into_string(),
                    });
                }
                let arguments_path = item_path.key("arguments");
                let tool_call = ToolCall {
                    provider: Provider::OpenAiResponses,
                    id: call.call_id.clone(),
                    id_synthesized: false,
                    name: call.name.clone(),
                    arguments: parse_text(&call.arguments, &arguments_path),
                    request_id: None,
                    turn_id: None,
                    wrapped_in: None,
                };
                calls.extend(parallel::unwrap(tool_call, &arguments_path));
            }
            OutputItem::CustomToolCall(custom) => {
                return Err(OpenAiDispatchError::CustomToolCall {
                    path: item_path.into_string(),
                    call_id: custom.call_id.clone(),
                    name: custom.name.clone(),
                })
            }
            _ => {}
        }
    }
    Ok(Turn {
        provider: Provider::OpenAiResponses,
        index: 0,
        calls,
    })
}

/// One D5 result item (`{"type":"function_call_output","call_id","output"}`, the output
/// a string or, for a parallel wrapper, a list of `input_text` parts) as an input item.
fn output_item(item: &Value) -> Result<InputItem, OpenAiDispatchError> {
    FunctionCallOutputItemParam::deserialize(item)
        .map(|param| InputItem::Item(Item::FunctionCallOutput(param)))
        .map_err(|e| OpenAiDispatchError::ResultConversion {
            call_id: item
                .get("call_id")
                .and_then(Value::as_str)
                .unwrap_or_default()
                .to_owned(),
            target: "FunctionCallOutputItemParam",
            message: e.to_string(),
        })
}
