//! Google Gemini (D1): a `generateContent` response `{"candidates":[{"content":{…}}]}`,
//! a content `{"role":"model","parts":[…]}`, or a `contents` history (an array of
//! contents, or a request body `{"contents":[…]}`).
//!
//! A call is a part `{"functionCall":{"name","args","id"?}}` (Gemini API reference,
//! `Part`, `FunctionCall`; the proto field name `function_call` is accepted too, as
//! proto3 JSON parsers do). `args` is an object and may be absent (no arguments). `id` is
//! optional and often absent (older responses, and parallel calls in current ones); an
//! empty `id` counts as absent. The call then gets the id `"<label>:<part index>"`,
//! marked [`id_synthesized`](ToolCall::id_synthesized), whose label is:
//! - in a response, its `responseId` (unique per response, so the same on a re-read);
//! - in a response without `responseId` (older ones), a random 16-hex-digit label drawn
//!   per parse: each separately received response is a new turn, and positional labels
//!   (`0:0` every time) would let two turns' calls share a `scope = "call"` key (K7, K9);
//! - in a `contents` history (or a bare content), the content's position in the history,
//!   which stays the same each time the growing history is read.
//!
//! Contents whose `role` is not `model` (user turns, function responses) yield no turn.

use serde_json::{Map, Value};

use super::arguments::object_member;
use super::error::ParseError;
use super::path::JsonPath;
use super::read::{identify_by_member, role, Reader};
use crate::dispatch::{Provider, ToolCall, Turn};

const READER: Reader = Reader {
    provider: Provider::Gemini,
};

/// Whether `object` looks like a Gemini response, content, or request body.
pub(crate) fn recognises(object: &Map<String, Value>) -> bool {
    ["candidates", "promptFeedback", "contents", "parts"]
        .iter()
        .any(|name| object.contains_key(*name))
}

/// The turns of a response, content or request body at `path`.
pub(crate) fn turns(
    object: &Map<String, Value>,
    index: usize,
    path: &JsonPath,
) -> Result<Vec<Turn>, ParseError> {
    if object.contains_key("contents") {
        let contents = READER.array(object, "contents", path, "an array of contents")?;
        return contents_turns(contents, &path.key("contents"));
    }
    if object.contains_key("parts") {
        return content_turn(object, index, None, path);
    }
    let Some(candidates) =
        READER.optional_array(object, "candidates", path, "an array of candidates")?
    else {
        return Ok(Vec::new()); // a blocked prompt: `promptFeedback` and no candidates
    };
    let candidates_path = path.key("candidates");
    let Some(candidate) = READER.single_choice(candidates, &candidates_path)? else {
        return Ok(Vec::new());
    };
    let candidate_path = candidates_path.index(0);
    let candidate = READER.object(candidate, &candidate_path, "a candidate object")?;
    let response_id = match object.get("responseId").and_then(Value::as_str) {
        Some(id) if !id.is_empty() => ResponseId::Given(id),
        _ => ResponseId::Absent,
    };
    let content_path = candidate_path.key("content");
    match candidate.get("content") {
        // A candidate stopped before producing content (a safety stop): no calls.
        None | Some(Value::Null) => Ok(vec![Turn {
            provider: Provider::Gemini,
            index,
            calls: Vec::new(),
        }]),
        Some(content) => {
            let content = READER.object(content, &content_path, "a content object")?;
            let mut turns = content_turn(content, index, Some(response_id), &content_path)?;
            identify_by_member(&mut turns, object, "responseId");
            Ok(turns)
        }
    }
}

/// The turns of a `contents` history at `path`: one per `model` content, indexed by its
/// position.
pub(crate) fn contents_turns(contents: &[Value], path: &JsonPath) -> Result<Vec<Turn>, ParseError> {
    let mut turns = Vec::new();
    for (i, content) in contents.iter().enumerate() {
        let content_path = path.index(i);
        let content = READER.object(content, &content_path, "a content object")?;
        for mut turn in content_turn(content, i, None, &content_path)? {
            turn.identify_by_position(i);
            turns.push(turn);
        }
    }
    Ok(turns)
}

/// The `responseId` of the response a content came from (`None`: a history's content).
#[derive(Clone, Copy)]
enum ResponseId<'a> {
    Given(&'a str),
    Absent,
}

fn content_turn(
    content: &Map<String, Value>,
    index: usize,
    response_id: Option<ResponseId<'_>>,
    path: &JsonPath,
) -> Result<Vec<Turn>, ParseError> {
    if role(content).is_some_and(|r| r != "model") {
        return Ok(Vec::new());
    }
    let parts = READER
        .optional_array(content, "parts", path, "an array of parts")?
        .unwrap_or_default();
    let label = match response_id {
        Some(ResponseId::Given(id)) => id.to_owned(),
        Some(ResponseId::Absent) => format!("{:016x}", uuid::Uuid::new_v4().as_u64_pair().0),
        None => index.to_string(),
    };
    let parts_path = path.key("parts");
    let mut calls = Vec::new();
    for (i, part) in parts.iter().enumerate() {
        let part_path = parts_path.index(i);
        let part = READER.object(part, &part_path, "a part object")?;
        let member = ["functionCall", "function_call"]
            .into_iter()
            .find_map(|name| part.get(name).map(|call| (name, call)));
        if let Some((member, call)) = member {
            let synthesized = format!("{label}:{i}");
            calls.push(function_call(call, synthesized, &part_path.key(member))?);
        }
    }
    Ok(vec![Turn {
        provider: Provider::Gemini,
        index,
        calls,
    }])
}

fn function_call(
    call: &Value,
    synthesized: String,
    path: &JsonPath,
) -> Result<ToolCall, ParseError> {
    let call = READER.object(call, path, "a functionCall object")?;
    let name = READER.string(call, "name", path, "the function's name (a string)")?;
    let (id, id_synthesized) = match call.get("id") {
        None | Some(Value::Null) => (synthesized, true),
        Some(Value::String(id)) if !id.is_empty() => (id.clone(), false),
        Some(Value::String(_)) => (synthesized, true),
        Some(other) => {
            return Err(READER.malformed(&path.key("id"), "the call's id (a string)", Some(other)))
        }
    };
    Ok(ToolCall {
        provider: Provider::Gemini,
        id,
        id_synthesized,
        name: name.to_owned(),
        arguments: object_member(call.get("args"), &path.key("args"), true),
        request_id: None,
        turn_id: None,
        wrapped_in: None,
    })
}
