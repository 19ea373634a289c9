//! OpenAI Responses (D1): a response body `{"object":"response","output":[…]}`, one
//! `{"type":"function_call",…}` item, or a list of items.
//!
//! A `function_call` item is `{"type":"function_call","call_id","name","arguments"}`, with
//! `arguments` a JSON *string*; results are matched by `call_id`, not by the item's own
//! `id` (`fc_…`) (OpenAI API reference, Responses `output`). Other output items (messages,
//! reasoning, built-in tool calls that OpenAI runs itself) carry no call for us.
//!
//! In a list of items (an `input` history), a turn is a run of model output items; an
//! input item (`function_call_output`, a `user` message, …) ends it.
//!
//! A `function_call` named `multi_tool_use.parallel`, or named `parallel` with a
//! `tool_uses` member in its arguments, is a parallel wrapper (D7): its `tool_uses` become
//! calls of their own, `"<call_id>:<i>"`, in its place (see the `parallel` module). A
//! `parallel` call without `tool_uses` is an ordinary call to a tool of that name.

use serde_json::{Map, Value};

use super::arguments::json_string_member;
use super::error::ParseError;
use super::parallel;
use super::path::JsonPath;
use super::read::{identify_by_member, role, Reader};
use crate::dispatch::{Provider, ToolCall, Turn};

const READER: Reader = Reader {
    provider: Provider::OpenAiResponses,
};

/// Whether `object` looks like a Responses response or `function_call` item.
pub(crate) fn recognises(object: &Map<String, Value>) -> bool {
    object.get("output").is_some_and(Value::is_array) || is_function_call(object)
}

/// Whether an array is a Responses item list: some element is a `function_call` item.
pub(crate) fn is_item_list(items: &[Value]) -> bool {
    items
        .iter()
        .any(|item| item.as_object().is_some_and(is_function_call))
}

fn is_function_call(object: &Map<String, Value>) -> bool {
    object.get("type").and_then(Value::as_str) == Some("function_call")
}

/// The turn of a response body or of one item, at `path`.
pub(crate) fn turns(
    object: &Map<String, Value>,
    index: usize,
    path: &JsonPath,
) -> Result<Vec<Turn>, ParseError> {
    if is_function_call(object) {
        return Ok(vec![Turn {
            provider: Provider::OpenAiResponses,
            index,
            calls: function_call(object, path)?,
        }]);
    }
    let output = READER.array(object, "output", path, "an array of output items")?;
    let output_path = path.key("output");
    let mut calls = Vec::new();
    for (i, item) in output.iter().enumerate() {
        calls.extend(item_call(item, &output_path.index(i))?);
    }
    let mut turns = vec![Turn {
        provider: Provider::OpenAiResponses,
        index,
        calls,
    }];
    identify_by_member(&mut turns, object, "id");
    Ok(turns)
}

/// The turns of an item list at `path`: runs of output items, each indexed by the
/// position of its first item.
pub(crate) fn item_list_turns(items: &[Value], path: &JsonPath) -> Result<Vec<Turn>, ParseError> {
    let mut turns = Vec::new();
    let mut current: Option<Turn> = None;
    for (i, item) in items.iter().enumerate() {
        let item_path = path.index(i);
        let object = READER.object(item, &item_path, "an item object")?;
        if is_input_item(object) {
            turns.extend(current.take());
            continue;
        }
        let turn = current.get_or_insert_with(|| Turn {
            provider: Provider::OpenAiResponses,
            index: i,
            calls: Vec::new(),
        });
        turn.calls.extend(item_call(item, &item_path)?);
    }
    turns.extend(current);
    for turn in &mut turns {
        turn.identify_by_position(turn.index);
    }
    Ok(turns)
}

/// Items the application sends (tool outputs, user and system messages, references),
/// as opposed to items the model produced.
fn is_input_item(object: &Map<String, Value>) -> bool {
    let kind = object.get("type").and_then(Value::as_str);
    match kind {
        Some(kind) if kind.ends_with("_output") => true,
        Some("item_reference" | "mcp_approval_response") => true,
        Some("message") | None => role(object).is_some_and(|r| r != "assistant"),
        Some(_) => false,
    }
}

/// The calls of one output item at `path`: none for items that carry no call for us, one
/// for a `function_call`, a parallel wrapper's calls (D7).
fn item_call(item: &Value, path: &JsonPath) -> Result<Vec<ToolCall>, ParseError> {
    let object = READER.object(item, path, "an output item object")?;
    match object.get("type").and_then(Value::as_str) {
        Some("function_call") => function_call(object, path),
        Some("custom_tool_call") => Err(READER.malformed(
            &path.key("type"),
            "a `function_call` item (custom tools with free-form input are not dispatched)",
            object.get("type"),
        )),
        Some(_) => Ok(Vec::new()),
        // An item without a `type` is a plain message; one that carries another format's
        // calls means the list mixes formats, and those calls would be lost.
        None if carries_other_calls(object) => Err(READER.malformed(
            path,
            "a Responses item (this list mixes formats: pass each provider's messages separately)",
            Some(item),
        )),
        None => Ok(Vec::new()),
    }
}

/// Whether a message holds tool calls in the Chat, Anthropic or Gemini format, or is an
/// MCP call (a `tools/call` request or bare `CallToolRequestParams`, D9).
fn carries_other_calls(object: &Map<String, Value>) -> bool {
    let anthropic_blocks = object
        .get("content")
        .and_then(Value::as_array)
        .is_some_and(|blocks| {
            blocks
                .iter()
                .any(|b| b.get("type").and_then(Value::as_str) == Some("tool_use"))
        });
    ["tool_calls", "function_call", "parts"]
        .iter()
        .any(|name| object.contains_key(*name))
        || anthropic_blocks
        || super::mcp::recognises(object)
}

/// The call of a `function_call` item at `path`; a parallel wrapper's calls (D7).
fn function_call(
    object: &Map<String, Value>,
    path: &JsonPath,
) -> Result<Vec<ToolCall>, ParseError> {
    let call_id = READER.id(
        object,
        "call_id",
        path,
        "the call's `call_id` (a non-empty string)",
    )?;
    let name = READER.string(object, "name", path, "the function's name (a string)")?;
    let arguments_path = path.key("arguments");
    let call = ToolCall {
        provider: Provider::OpenAiResponses,
        id: call_id.to_owned(),
        id_synthesized: false,
        name: name.to_owned(),
        arguments: json_string_member(object.get("arguments"), &arguments_path),
        request_id: None,
        turn_id: None,
        wrapped_in: None,
    };
    Ok(parallel::unwrap(call, &arguments_path))
}
