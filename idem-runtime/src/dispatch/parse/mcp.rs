//! Model Context Protocol (D1): a `tools/call` JSON-RPC 2.0 request
//! `{"jsonrpc":"2.0","id":…,"method":"tools/call","params":{"name","arguments"}}`
//! (MCP specification, server/tools, `CallToolRequest`).
//!
//! Only `params.name` and `params.arguments` are the call's intent. `params._meta`
//! (protocol metadata: progress tokens, client info), `params.task` (task augmentation)
//! and the JSON-RPC `id` are not: they never reach the arguments, so they never reach the
//! key. The `id` is kept as [`ToolCall::request_id`] so the response can echo it (D5).
//! `arguments` is optional in the schema: absent means `{}`.
//!
//! A bare `CallToolRequestParams` object (`{"name","arguments"?,"_meta"?,"task"?}`, what
//! an MCP server hands its tool layer, and how the specification's examples show a call) is
//! read the same way (D9). It has no request id: the call gets the synthesized id
//! `"<label>:<position>"`, with a random 16-hex-digit label drawn per parse (each received
//! params object is a new call, as for a Gemini response without `responseId`) and the
//! object's position in an array of them (0 alone). Its result is a bare `CallToolResult`.

use serde_json::{Map, Value};

use super::arguments::object_member;
use super::error::ParseError;
use super::path::JsonPath;
use super::read::Reader;
use crate::dispatch::{Provider, ToolCall, Turn};

const READER: Reader = Reader {
    provider: Provider::Mcp,
};

/// The members a bare `CallToolRequestParams` object may have (MCP schema 2025-11-25).
const PARAMS_MEMBERS: [&str; 4] = ["name", "arguments", "_meta", "task"];

/// Whether `object` looks like a JSON-RPC message or a bare `CallToolRequestParams`.
pub(crate) fn recognises(object: &Map<String, Value>) -> bool {
    object.contains_key("jsonrpc") || object.contains_key("method") || is_bare_params(object)
}

/// A bare params object: a string `name`, `arguments` absent, `null` or an object, and no
/// member the schema does not give it (an OpenAI `function` object, whose `arguments` is a
/// string, is not one).
fn is_bare_params(object: &Map<String, Value>) -> bool {
    object.get("name").is_some_and(Value::is_string)
        && object
            .get("arguments")
            .is_none_or(|arguments| arguments.is_null() || arguments.is_object())
        && object
            .keys()
            .all(|name| PARAMS_MEMBERS.contains(&name.as_str()))
}

/// The one-call turn of a `tools/call` request at `path`.
pub(crate) fn turns(
    object: &Map<String, Value>,
    index: usize,
    path: &JsonPath,
) -> Result<Vec<Turn>, ParseError> {
    if is_bare_params(object) {
        let label = format!("{:016x}", uuid::Uuid::new_v4().as_u64_pair().0);
        let call = params_call(object, format!("{label}:{index}"), None, path)?;
        return Ok(vec![Turn {
            provider: Provider::Mcp,
            index,
            calls: vec![call],
        }]);
    }
    if let Some(version) = object.get("jsonrpc") {
        if version.as_str() != Some("2.0") {
            return Err(READER.malformed(&path.key("jsonrpc"), "\"2.0\"", Some(version)));
        }
    }
    let method = object.get("method");
    if method.and_then(Value::as_str) != Some("tools/call") {
        return Err(READER.malformed(&path.key("method"), "\"tools/call\"", method));
    }
    let request_id = match object.get("id") {
        Some(id @ (Value::String(_) | Value::Number(_))) => id.clone(),
        other => return Err(READER.malformed(
            &path.key("id"),
            "the request id (a string or a number; a tools/call is a request, not a notification)",
            other,
        )),
    };
    let id = match &request_id {
        Value::String(text) => text.clone(),
        other => other.to_string(),
    };
    let params_path = path.key("params");
    let params = object
        .get("params")
        .ok_or_else(|| READER.malformed(&params_path, "a params object", None))?;
    let params = READER.object(params, &params_path, "a params object")?;
    let call = params_call(params, id, Some(request_id), &params_path)?;
    Ok(vec![Turn {
        provider: Provider::Mcp,
        index,
        calls: vec![call],
    }])
}

/// The call of a `CallToolRequestParams` object at `path`: its id is the request's (as
/// text, with `request_id` the id as sent) or, for bare params, `synthesized`.
fn params_call(
    params: &Map<String, Value>,
    id: String,
    request_id: Option<Value>,
    path: &JsonPath,
) -> Result<ToolCall, ParseError> {
    let name = READER.string(params, "name", path, "the tool's name (a string)")?;
    Ok(ToolCall {
        provider: Provider::Mcp,
        id_synthesized: request_id.is_none(),
        id,
        name: name.to_owned(),
        arguments: object_member(params.get("arguments"), &path.key("arguments"), true),
        request_id,
        turn_id: None,
        wrapped_in: None,
    })
}
