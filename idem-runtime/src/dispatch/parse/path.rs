//! JSON paths and value descriptions for parse errors.

use serde_json::{Map, Value};

/// Where a value sits in the parsed document, written as a JSONPath-like string:
/// `$.choices[0].message.tool_calls[1].function.arguments`. Member names that are not
/// plain identifiers are quoted: `$.params["io.example/x"]`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct JsonPath(String);

impl JsonPath {
    /// The document itself: `$`.
    pub(crate) fn root() -> Self {
        JsonPath("$".to_owned())
    }

    /// The member `name` of the object at this path.
    pub(crate) fn key(&self, name: &str) -> Self {
        let plain = !name.is_empty()
            && name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == '$');
        if plain {
            JsonPath(format!("{}.{name}", self.0))
        } else {
            let quoted = serde_json::to_string(name).unwrap_or_else(|_| "\"?\"".to_owned());
            JsonPath(format!("{}[{quoted}]", self.0))
        }
    }

    /// The element `index` of the array at this path.
    pub(crate) fn index(&self, index: usize) -> Self {
        JsonPath(format!("{}[{index}]", self.0))
    }

    /// The path as a string.
    pub(crate) fn into_string(self) -> String {
        self.0
    }
}

/// The JSON type of `value`: `null`, `a boolean`, `a number`, `a string`, `an array`,
/// `an object`.
pub(crate) fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// Longest member name quoted in a description, in characters.
const NAME_CHARS: usize = 32;
/// Most member names listed in a description.
const NAMES_LISTED: usize = 8;

/// A short description of `value` for an error message: its type, and for an object the
/// first member names (bounded, so a hostile document cannot blow up the message).
pub(crate) fn describe(value: &Value) -> String {
    match value {
        Value::Object(map) => describe_object(map),
        Value::Array(items) => format!("an array of {} elements", items.len()),
        Value::String(text) if text.is_empty() => "an empty string".to_owned(),
        other => kind(other).to_owned(),
    }
}

/// [`describe`] for an object.
pub(crate) fn describe_object(map: &Map<String, Value>) -> String {
    if map.is_empty() {
        return "an empty object".to_owned();
    }
    let mut names: Vec<String> = map
        .keys()
        .take(NAMES_LISTED)
        .map(|name| {
            let short: String = name.chars().take(NAME_CHARS).collect();
            format!("{short:?}")
        })
        .collect();
    if map.len() > NAMES_LISTED {
        names.push(format!("… {} more", map.len() - NAMES_LISTED));
    }
    format!("an object with members [{}]", names.join(", "))
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins D1: parse errors name the path of the offending value
    #[test]
    fn paths_quote_names_that_are_not_identifiers() {
        let path = JsonPath::root().key("params").key("io.example/x").index(2);
        assert_eq!(path.into_string(), r#"$.params["io.example/x"][2]"#);
    }

    // pins D2: descriptions of hostile documents stay short
    #[test]
    fn descriptions_are_bounded() {
        let map: serde_json::Map<String, Value> = (0..100)
            .map(|i| (format!("{}{i}", "k".repeat(100)), Value::Null))
            .collect();
        let text = describe(&Value::Object(map));
        assert!(text.contains("… 92 more"));
        assert!(text.len() < 8 * (NAME_CHARS + 8) + 64);
    }
}
