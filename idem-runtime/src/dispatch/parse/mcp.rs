//! Model Context Protocol (D1): a `tools/call` JSON-RPC 2.0 request
//! `{"jsonrpc":"2.0","id":…,"method":"tools/call","params":{"name","arguments"}}`
//! (MCP specification, server/tools, `CallToolRequest`).
//!
//! Only `params.name` and `params.arguments` are the call's intent. `params._meta`
//! (protocol metadata: progress tokens, client info), `params.task` (task augmentation)
//! and the JSON-RPC `id` are not: they never reach the arguments, so they never reach the
//! key. The `id` is kept as [`ToolCall::request_id`] so the response can echo it (D5).
//! `arguments` is optional in the schema: absent means `{}`.

use serde_json::{Map, Value};

use super::arguments::object_member;
use super::error::ParseError;
use super::path::JsonPath;
use super::read::Reader;
use crate::dispatch::{Provider, ToolCall, Turn};

const READER: Reader = Reader {
    provider: Provider::Mcp,
};

/// Whether `object` looks like a JSON-RPC message.
pub(crate) fn recognises(object: &Map<String, Value>) -> bool {
    object.contains_key("jsonrpc") || object.contains_key("method")
}

/// The one-call turn of a `tools/call` request at `path`.
pub(crate) fn turns(
    object: &Map<String, Value>,
    index: usize,
    path: &JsonPath,
) -> Result<Vec<Turn>, ParseError> {
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
    let name = READER.string(params, "name", &params_path, "the tool's name (a string)")?;
    let call = ToolCall {
        provider: Provider::Mcp,
        id,
        id_synthesized: false,
        name: name.to_owned(),
        arguments: object_member(params.get("arguments"), &params_path.key("arguments"), true),
        request_id: Some(request_id),
        turn_id: None,
        wrapped_in: None,
    };
    Ok(vec![Turn {
        provider: Provider::Mcp,
        index,
        calls: vec![call],
    }])
}
