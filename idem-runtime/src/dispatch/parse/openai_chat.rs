//! OpenAI Chat Completions (D1): a response body `{"choices":[{"message":{…}}]}` or an
//! assistant message `{"role":"assistant","tool_calls":[…]}`.
//!
//! Each `tool_calls[]` element is `{"id","type":"function","function":{"name",
//! "arguments"}}`, where `arguments` is a JSON *string* (OpenAI API reference,
//! `ChatCompletionMessageToolCall`). Messages of other roles (`user`, `tool`, `system`, …)
//! are not model turns and yield none, so a whole `messages` history can be passed.
//!
//! A call named `multi_tool_use.parallel` is a parallel wrapper (D7): its `tool_uses`
//! become calls of their own, `"<id>:<i>"`, in its place (see the `parallel` module).

use serde_json::{Map, Value};

use super::arguments::json_string_member;
use super::error::ParseError;
use super::parallel;
use super::path::JsonPath;
use super::read::{identify_by_member, role, Reader};
use crate::dispatch::{Provider, ToolCall, Turn};

const READER: Reader = Reader {
    provider: Provider::OpenAiChat,
};

/// Whether `object` looks like a Chat Completions response or message.
pub(crate) fn recognises(object: &Map<String, Value>) -> bool {
    object.contains_key("choices")
        || object.contains_key("tool_calls")
        || object.contains_key("function_call")
}

/// The turns of a response body or message at `path`.
pub(crate) fn turns(
    object: &Map<String, Value>,
    index: usize,
    path: &JsonPath,
) -> Result<Vec<Turn>, ParseError> {
    if object.contains_key("choices") {
        let choices = READER.array(object, "choices", path, "an array of choices")?;
        let choices_path = path.key("choices");
        let Some(choice) = READER.single_choice(choices, &choices_path)? else {
            return Ok(Vec::new());
        };
        let choice_path = choices_path.index(0);
        let choice = READER.object(choice, &choice_path, "a choice object")?;
        let message_path = choice_path.key("message");
        let message = choice
            .get("message")
            .ok_or_else(|| READER.malformed(&message_path, "a message object", None))?;
        let message = READER.object(message, &message_path, "a message object")?;
        let mut turns = message_turn(message, index, &message_path)?;
        identify_by_member(&mut turns, object, "id");
        return Ok(turns);
    }
    message_turn(object, index, path)
}

fn message_turn(
    message: &Map<String, Value>,
    index: usize,
    path: &JsonPath,
) -> Result<Vec<Turn>, ParseError> {
    if role(message).is_some_and(|r| r != "assistant") {
        return Ok(Vec::new());
    }
    if message.get("function_call").is_some_and(|v| !v.is_null()) {
        return Err(READER.malformed(
            &path.key("function_call"),
            "`tool_calls` (the deprecated `function_call` field is not supported: its result shape has no call id)",
            message.get("function_call"),
        ));
    }
    let items = READER
        .optional_array(message, "tool_calls", path, "an array of tool calls")?
        .unwrap_or_default();
    let calls_path = path.key("tool_calls");
    let mut calls = Vec::with_capacity(items.len());
    for (i, item) in items.iter().enumerate() {
        calls.extend(tool_call(item, &calls_path.index(i))?);
    }
    Ok(vec![Turn {
        provider: Provider::OpenAiChat,
        index,
        calls,
    }])
}

/// The call of one `tool_calls[]` element at `path`; a parallel wrapper's calls (D7).
fn tool_call(item: &Value, path: &JsonPath) -> Result<Vec<ToolCall>, ParseError> {
    let item = READER.object(item, path, "a tool call object")?;
    if let Some(kind) = item.get("type") {
        if kind.as_str() != Some("function") {
            return Err(READER.malformed(
                &path.key("type"),
                "\"function\" (other tool-call types are not dispatched)",
                Some(kind),
            ));
        }
    }
    let id = READER.id(item, "id", path, "the tool call's id (a non-empty string)")?;
    let function_path = path.key("function");
    let function = item
        .get("function")
        .ok_or_else(|| READER.malformed(&function_path, "a function object", None))?;
    let function = READER.object(function, &function_path, "a function object")?;
    let name = READER.string(
        function,
        "name",
        &function_path,
        "the function's name (a string)",
    )?;
    let arguments_path = function_path.key("arguments");
    let arguments = json_string_member(function.get("arguments"), &arguments_path);
    let call = ToolCall {
        provider: Provider::OpenAiChat,
        id: id.to_owned(),
        id_synthesized: false,
        name: name.to_owned(),
        arguments,
        request_id: None,
        turn_id: None,
        wrapped_in: None,
    };
    Ok(parallel::unwrap(call, &arguments_path))
}
