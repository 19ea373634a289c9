//! Anthropic Messages (D1): a response body `{"type":"message","role":"assistant",
//! "content":[…]}` or an assistant message `{"role":"assistant","content":[…]}`.
//!
//! A call is a content block `{"type":"tool_use","id","name","input"}`, `input` an
//! object (Anthropic API reference, Messages, tool use). Other blocks (`text`, `thinking`,
//! and `server_tool_use` / `mcp_tool_use`, which Anthropic runs itself) carry no call for
//! us. Messages of role `user` (which carry `tool_result` blocks) are not model turns and
//! yield none, so a whole `messages` history can be passed.

use serde_json::{Map, Value};

use super::arguments::object_member;
use super::error::ParseError;
use super::path::JsonPath;
use super::read::{identify_by_member, role, Reader};
use crate::dispatch::{Provider, ToolCall, Turn};

const READER: Reader = Reader {
    provider: Provider::Anthropic,
};

/// Whether `object` looks like a Messages response or message: a `content` array of
/// typed blocks, or a `"type":"message"` body.
pub(crate) fn recognises(object: &Map<String, Value>) -> bool {
    let typed_blocks = object
        .get("content")
        .and_then(Value::as_array)
        .is_some_and(|blocks| {
            blocks
                .iter()
                .all(|b| b.get("type").is_some_and(Value::is_string))
        });
    typed_blocks || object.get("type").and_then(Value::as_str) == Some("message")
}

/// The turn of a response body or message at `path`.
pub(crate) fn turns(
    object: &Map<String, Value>,
    index: usize,
    path: &JsonPath,
) -> Result<Vec<Turn>, ParseError> {
    if role(object).is_some_and(|r| r != "assistant") {
        return Ok(Vec::new());
    }
    let content_path = path.key("content");
    let blocks = match object.get("content") {
        Some(Value::String(_)) => &[][..],
        Some(Value::Array(blocks)) => blocks.as_slice(),
        other => {
            return Err(READER.malformed(
                &content_path,
                "an array of content blocks (or a string)",
                other,
            ))
        }
    };
    let mut calls = Vec::new();
    for (i, block) in blocks.iter().enumerate() {
        let block_path = content_path.index(i);
        let block = READER.object(block, &block_path, "a content block object")?;
        if block.get("type").and_then(Value::as_str) == Some("tool_use") {
            calls.push(tool_use(block, &block_path)?);
        }
    }
    let mut turns = vec![Turn {
        provider: Provider::Anthropic,
        index,
        calls,
    }];
    identify_by_member(&mut turns, object, "id");
    Ok(turns)
}

fn tool_use(block: &Map<String, Value>, path: &JsonPath) -> Result<ToolCall, ParseError> {
    let id = READER.id(
        block,
        "id",
        path,
        "the tool_use block's id (a non-empty string)",
    )?;
    let name = READER.string(block, "name", path, "the tool's name (a string)")?;
    Ok(ToolCall {
        provider: Provider::Anthropic,
        id: id.to_owned(),
        id_synthesized: false,
        name: name.to_owned(),
        arguments: object_member(block.get("input"), &path.key("input"), false),
        request_id: None,
        turn_id: None,
        wrapped_in: None,
    })
}
