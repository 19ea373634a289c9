//! Reading one call's arguments: a JSON string (OpenAI) or an object (everyone else).
//!
//! A JSON-string argument becomes a [`Value`]: whitespace and member order inside the
//! string are gone before anything is keyed (K4). Problems are [`ArgumentError`]s for that
//! call alone (D2).

use std::cell::RefCell;
use std::collections::HashSet;
use std::fmt;

use serde::de::{self, DeserializeSeed, Deserializer, MapAccess, SeqAccess, Visitor};
use serde_json::{Map, Value};

use super::path::{kind, JsonPath};
use crate::dispatch::turn::ArgumentError;

/// An OpenAI `arguments` member: a JSON string holding an object. An object given
/// directly (some OpenAI-compatible servers send one) is taken as is.
pub(crate) fn json_string_member(
    member: Option<&Value>,
    path: &JsonPath,
) -> Result<Value, ArgumentError> {
    match member {
        None => Err(ArgumentError::Missing {
            path: path.clone().into_string(),
        }),
        Some(Value::String(text)) => parse_text(text, path),
        Some(object @ Value::Object(_)) => Ok(object.clone()),
        Some(other) => Err(ArgumentError::NotAnObject {
            path: path.clone().into_string(),
            found: kind(other),
        }),
    }
}

/// An arguments member that must be a JSON object. When `optional` (Gemini `args`, MCP
/// `arguments`), an absent or `null` member means no arguments: `{}`.
pub(crate) fn object_member(
    member: Option<&Value>,
    path: &JsonPath,
    optional: bool,
) -> Result<Value, ArgumentError> {
    match member {
        None | Some(Value::Null) if optional => Ok(Value::Object(Map::new())),
        None => Err(ArgumentError::Missing {
            path: path.clone().into_string(),
        }),
        Some(object @ Value::Object(_)) => Ok(object.clone()),
        Some(other) => Err(ArgumentError::NotAnObject {
            path: path.clone().into_string(),
            found: kind(other),
        }),
    }
}

/// Parses an arguments string. An empty (or all-whitespace) string means no arguments,
/// `{}`: models send it for functions without parameters. Anything else must be one JSON
/// object with no member named twice at any level.
pub(crate) fn parse_text(text: &str, path: &JsonPath) -> Result<Value, ArgumentError> {
    if text
        .trim_matches(|c| matches!(c, ' ' | '\t' | '\n' | '\r'))
        .is_empty()
    {
        return Ok(Value::Object(Map::new()));
    }
    let value: Value = serde_json::from_str(text).map_err(|e| ArgumentError::InvalidJson {
        path: path.clone().into_string(),
        message: e.to_string(),
    })?;
    if !value.is_object() {
        return Err(ArgumentError::NotAnObject {
            path: path.clone().into_string(),
            found: kind(&value),
        });
    }
    let duplicate = RefCell::new(None);
    let mut deserializer = serde_json::Deserializer::from_str(text);
    if NoDuplicates(&duplicate)
        .deserialize(&mut deserializer)
        .is_err()
    {
        if let Some(name) = duplicate.into_inner() {
            return Err(ArgumentError::DuplicateMember {
                path: path.clone().into_string(),
                name,
            });
        }
    }
    Ok(value)
}

/// Walks a JSON text and stops at the first member name repeated within one object,
/// leaving the name in the cell. Values are not built. Numbers are never inspected, so
/// this also works when serde_json's `arbitrary_precision` feature is on (K4).
#[derive(Clone, Copy)]
struct NoDuplicates<'a>(&'a RefCell<Option<String>>);

impl<'de> DeserializeSeed<'de> for NoDuplicates<'_> {
    type Value = ();

    fn deserialize<D: Deserializer<'de>>(self, deserializer: D) -> Result<(), D::Error> {
        deserializer.deserialize_any(self)
    }
}

impl<'de> Visitor<'de> for NoDuplicates<'_> {
    type Value = ();

    fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("any JSON value")
    }

    fn visit_bool<E>(self, _: bool) -> Result<(), E> {
        Ok(())
    }

    fn visit_i64<E>(self, _: i64) -> Result<(), E> {
        Ok(())
    }

    fn visit_u64<E>(self, _: u64) -> Result<(), E> {
        Ok(())
    }

    fn visit_f64<E>(self, _: f64) -> Result<(), E> {
        Ok(())
    }

    fn visit_str<E>(self, _: &str) -> Result<(), E> {
        Ok(())
    }

    fn visit_unit<E>(self) -> Result<(), E> {
        Ok(())
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<(), A::Error> {
        while seq.next_element_seed(self)?.is_some() {}
        Ok(())
    }

    fn visit_map<A: MapAccess<'de>>(self, mut map: A) -> Result<(), A::Error> {
        let mut seen = HashSet::new();
        while let Some(name) = map.next_key::<String>()? {
            if !seen.insert(name.clone()) {
                *self.0.borrow_mut() = Some(name);
                return Err(de::Error::custom("duplicate member name"));
            }
            map.next_value_seed(self)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use serde_json::json;

    use super::*;

    fn parse(text: &str) -> Result<Value, ArgumentError> {
        parse_text(text, &JsonPath::root())
    }

    // pins K4: whitespace and member order inside a JSON-string argument do not matter
    #[test]
    fn spacing_and_member_order_give_the_same_value() {
        let compact = parse(r#"{"city":"Edinburgh","units":"c"}"#).unwrap();
        let spaced = parse("{ \"units\" : \"c\",\n  \"city\": \"Edinburgh\" }").unwrap();
        assert_eq!(compact, spaced);
    }

    // pins D2: a repeated member is ambiguous, at any depth, also when spelled with escapes
    #[test]
    fn repeated_members_are_rejected() {
        for text in [
            r#"{"amount":1,"amount":100}"#,
            r#"{"order":{"id":1,"id":2}}"#,
            r#"{"items":[{"a":1,"\u0061":2}]}"#,
        ] {
            assert!(
                matches!(parse(text), Err(ArgumentError::DuplicateMember { .. })),
                "{text}"
            );
        }
        assert!(parse(r#"{"a":{"a":1},"b":[{"a":1},{"a":2}]}"#).is_ok());
    }

    // pins D2: empty means no arguments; other non-objects are errors
    #[test]
    fn empty_is_no_arguments_and_scalars_are_not_objects() {
        assert_eq!(parse(" \n").unwrap(), json!({}));
        assert!(matches!(
            parse("[1]"),
            Err(ArgumentError::NotAnObject {
                found: "an array",
                ..
            })
        ));
        assert!(matches!(
            parse("{\"a\":"),
            Err(ArgumentError::InvalidJson { .. })
        ));
    }
}
