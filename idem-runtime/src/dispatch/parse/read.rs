//! Typed access to the members of a recognised document, with [`ParseError::Malformed`]
//! naming the path when a member is missing or of the wrong type.

use serde_json::{Map, Value};

use super::error::ParseError;
use super::path::{describe, JsonPath};
use crate::dispatch::{Provider, Turn};

/// Reads members of one provider's document.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Reader {
    pub(crate) provider: Provider,
}

impl Reader {
    pub(crate) fn new(provider: Provider) -> Self {
        Reader { provider }
    }

    /// The error for `found` (or a missing value) at `path`, where `expected` belongs.
    pub(crate) fn malformed(
        self,
        path: &JsonPath,
        expected: &'static str,
        found: Option<&Value>,
    ) -> ParseError {
        ParseError::Malformed {
            provider: self.provider,
            path: path.clone().into_string(),
            expected,
            found: found.map_or_else(|| "nothing".to_owned(), describe),
        }
    }

    /// `value` as an object.
    pub(crate) fn object<'a>(
        self,
        value: &'a Value,
        path: &JsonPath,
        expected: &'static str,
    ) -> Result<&'a Map<String, Value>, ParseError> {
        value
            .as_object()
            .ok_or_else(|| self.malformed(path, expected, Some(value)))
    }

    /// The required string member `name` of `object` at `path`.
    pub(crate) fn string<'a>(
        self,
        object: &'a Map<String, Value>,
        name: &str,
        path: &JsonPath,
        expected: &'static str,
    ) -> Result<&'a str, ParseError> {
        let member = object.get(name);
        member
            .and_then(Value::as_str)
            .ok_or_else(|| self.malformed(&path.key(name), expected, member))
    }

    /// The required call-id member `name` of `object` at `path`: a non-empty string (an
    /// empty id could not be told apart from another call's when results go back).
    pub(crate) fn id<'a>(
        self,
        object: &'a Map<String, Value>,
        name: &str,
        path: &JsonPath,
        expected: &'static str,
    ) -> Result<&'a str, ParseError> {
        let member = object.get(name);
        member
            .and_then(Value::as_str)
            .filter(|id| !id.is_empty())
            .ok_or_else(|| self.malformed(&path.key(name), expected, member))
    }

    /// The array member `name` of `object` at `path`; absent or `null` is `None`.
    pub(crate) fn optional_array<'a>(
        self,
        object: &'a Map<String, Value>,
        name: &str,
        path: &JsonPath,
        expected: &'static str,
    ) -> Result<Option<&'a [Value]>, ParseError> {
        match object.get(name) {
            None | Some(Value::Null) => Ok(None),
            Some(Value::Array(items)) => Ok(Some(items)),
            Some(other) => Err(self.malformed(&path.key(name), expected, Some(other))),
        }
    }

    /// The required array member `name` of `object` at `path`.
    pub(crate) fn array<'a>(
        self,
        object: &'a Map<String, Value>,
        name: &str,
        path: &JsonPath,
        expected: &'static str,
    ) -> Result<&'a [Value], ParseError> {
        self.optional_array(object, name, path, expected)?
            .ok_or_else(|| self.malformed(&path.key(name), expected, object.get(name)))
    }

    /// The only element of a `choices` / `candidates` array, `None` when it is empty.
    ///
    /// # Errors
    /// [`ParseError::MultipleChoices`] when there are several alternatives.
    pub(crate) fn single_choice<'a>(
        self,
        items: &'a [Value],
        path: &JsonPath,
    ) -> Result<Option<&'a Value>, ParseError> {
        match items {
            [] => Ok(None),
            [only] => Ok(Some(only)),
            _ => Err(ParseError::MultipleChoices {
                provider: self.provider,
                path: path.clone().into_string(),
                count: items.len(),
            }),
        }
    }
}

/// Gives every call of `turns` the response's own id as its turn identity (D10), when
/// `object` has a non-empty string member `name` (`id`, Gemini's `responseId`).
pub(crate) fn identify_by_member(turns: &mut [Turn], object: &Map<String, Value>, name: &str) {
    if let Some(id) = object
        .get(name)
        .and_then(Value::as_str)
        .filter(|id| !id.is_empty())
    {
        for turn in turns {
            turn.identify(id);
        }
    }
}

/// The `role` member of a message, if it is a string.
pub(crate) fn role(object: &Map<String, Value>) -> Option<&str> {
    object.get("role").and_then(Value::as_str)
}
