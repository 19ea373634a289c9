//! Telling the provider formats apart, and walking arrays of turns (D1).

use serde_json::{Map, Value};

use super::error::ParseError;
use super::path::{describe, describe_object, JsonPath};
use super::read::{role, Reader};
use super::{anthropic, gemini, mcp, openai_chat, openai_responses};
use crate::dispatch::turn::is_position;
use crate::dispatch::{Provider, Turn};

/// The provider whose format `object` is in, by the members only that format has.
pub(crate) fn provider_of(object: &Map<String, Value>) -> Option<Provider> {
    if mcp::recognises(object) {
        Some(Provider::Mcp)
    } else if openai_chat::recognises(object) {
        Some(Provider::OpenAiChat)
    } else if gemini::recognises(object) {
        Some(Provider::Gemini)
    } else if openai_responses::recognises(object) {
        Some(Provider::OpenAiResponses)
    } else if anthropic::recognises(object) {
        Some(Provider::Anthropic)
    } else {
        None
    }
}

/// The turns of `document`, detecting the format of each object in it.
pub(crate) fn detect_turns(document: &Value) -> Result<Vec<Turn>, ParseError> {
    let root = JsonPath::root();
    match document {
        Value::Object(object) => object_turns(object, 0, &root),
        Value::Array(items) if openai_responses::is_item_list(items) => {
            openai_responses::item_list_turns(items, &root)
        }
        Value::Array(items) => {
            let mut turns = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let path = root.index(i);
                match item {
                    Value::Object(object) => {
                        turns.extend(identified(object_turns(object, i, &path)?, i));
                    }
                    other => return Err(unknown(&path, other)),
                }
            }
            Ok(turns)
        }
        other => Err(unknown(&root, other)),
    }
}

fn object_turns(
    object: &Map<String, Value>,
    index: usize,
    path: &JsonPath,
) -> Result<Vec<Turn>, ParseError> {
    match provider_of(object) {
        Some(provider) => provider_turns(provider, object, index, path),
        // A message of another role (`user`, `tool`, `system`) is not a model turn.
        None if role(object).is_some_and(|r| r != "assistant" && r != "model") => Ok(Vec::new()),
        // An assistant message with text content only: a turn without calls.
        None if role(object) == Some("assistant") => openai_chat::turns(object, index, path),
        None => Err(ParseError::UnknownShape {
            path: path.clone().into_string(),
            found: describe_object(object),
        }),
    }
}

/// The turns of `document` read as `provider`'s format, without detection.
pub(crate) fn turns_as(provider: Provider, document: &Value) -> Result<Vec<Turn>, ParseError> {
    let root = JsonPath::root();
    let reader = Reader::new(provider);
    match document {
        Value::Object(object) => provider_turns(provider, object, 0, &root),
        Value::Array(items)
            if provider == Provider::OpenAiResponses
                && !items
                    .iter()
                    .all(|item| item.get("output").is_some_and(Value::is_array)) =>
        {
            openai_responses::item_list_turns(items, &root)
        }
        Value::Array(items) => {
            let mut turns = Vec::new();
            for (i, item) in items.iter().enumerate() {
                let path = root.index(i);
                let object = reader.object(item, &path, "a message or response object")?;
                turns.extend(identified(provider_turns(provider, object, i, &path)?, i));
            }
            Ok(turns)
        }
        other => Err(reader.malformed(&root, "an object or an array", Some(other))),
    }
}

fn provider_turns(
    provider: Provider,
    object: &Map<String, Value>,
    index: usize,
    path: &JsonPath,
) -> Result<Vec<Turn>, ParseError> {
    match provider {
        Provider::OpenAiChat => openai_chat::turns(object, index, path),
        Provider::OpenAiResponses => openai_responses::turns(object, index, path),
        Provider::Anthropic => anthropic::turns(object, index, path),
        Provider::Gemini => gemini::turns(object, index, path),
        Provider::Mcp => mcp::turns(object, index, path),
    }
}

/// The turns of the element at `position` of an array of turns, each call without a turn
/// identity of its own (a response id) identified by that position (D10). A position
/// inside the element (a Gemini `{"contents":[…]}` body in the array: `#j`) becomes
/// `#position.j`, so two such bodies never share one.
fn identified(mut turns: Vec<Turn>, position: usize) -> Vec<Turn> {
    for turn in &mut turns {
        for call in &mut turn.calls {
            let inner = call.turn_id.as_deref().filter(|id| is_position(id));
            if let Some(inner) = inner.and_then(|id| id.strip_prefix('#')) {
                call.turn_id = Some(format!("#{position}.{inner}"));
            }
        }
        turn.identify_by_position(position);
    }
    turns
}

fn unknown(path: &JsonPath, found: &Value) -> ParseError {
    ParseError::UnknownShape {
        path: path.clone().into_string(),
        found: describe(found),
    }
}
