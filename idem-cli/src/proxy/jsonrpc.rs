//! JSON-RPC 2.0 messages as the proxy sees them: a line read, sorted into request,
//! notification or response, kept as the JSON object it was (contract Y1, Y8).

use serde_json::{json, Map, Value};

/// JSON-RPC's "parse error": the line is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's "invalid request": JSON, but not a JSON-RPC 2.0 message.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's "internal error": what the proxy answers for a server that exited or could
/// not be reached (Y6).
pub const INTERNAL_ERROR: i64 = -32603;

/// One message, with the object it came in.
#[derive(Debug, Clone, PartialEq)]
pub enum Message {
    /// A request: a method and an id.
    Request {
        /// Its id (a string or a number).
        id: Value,
        /// Its method.
        method: String,
        /// The whole message.
        body: Map<String, Value>,
    },
    /// A notification: a method, no id.
    Notification {
        /// Its method.
        method: String,
        /// The whole message.
        body: Map<String, Value>,
    },
    /// A response: an id and a `result` or an `error`.
    Response {
        /// The id of the request it answers.
        id: Value,
        /// The whole message.
        body: Map<String, Value>,
    },
}

/// A line that is not a message: what to answer (when its sender is the client) and log.
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    /// The JSON-RPC error code: [`PARSE_ERROR`] or [`INVALID_REQUEST`].
    pub code: i64,
    /// The id to answer with: the message's own when it had a usable one, else `null`.
    pub id: Value,
    /// What was wrong.
    pub why: String,
}

/// Sorts `line` (one line of newline-delimited JSON, MCP's stdio framing).
pub fn parse(line: &str) -> Result<Message, Malformed> {
    let value: Value = serde_json::from_str(line).map_err(|e| Malformed {
        code: PARSE_ERROR,
        id: Value::Null,
        why: format!("not JSON: {e}"),
    })?;
    let Value::Object(body) = value else {
        return Err(invalid(
            Value::Null,
            format!(
                "a JSON-RPC message is an object, not {}",
                kind(&value) // batches were removed from MCP in 2025-06-18
            ),
        ));
    };
    let id = body.get("id").cloned();
    let usable_id = id.clone().filter(|id| id.is_string() || id.is_number());
    let answer_id = usable_id.clone().unwrap_or(Value::Null);
    if body.get("jsonrpc") != Some(&Value::from("2.0")) {
        return Err(invalid(answer_id, "`jsonrpc` must be \"2.0\"".to_owned()));
    }
    match (body.get("method"), id) {
        (Some(Value::String(method)), None) => Ok(Message::Notification {
            method: method.clone(),
            body,
        }),
        (Some(Value::String(method)), Some(_)) => match usable_id {
            Some(id) => Ok(Message::Request {
                id,
                method: method.clone(),
                body,
            }),
            None => Err(invalid(
                Value::Null,
                "a request's `id` is a string or a number".to_owned(),
            )),
        },
        (Some(other), _) => Err(invalid(
            answer_id,
            format!("`method` must be a string, not {}", kind(other)),
        )),
        (None, Some(id)) if body.contains_key("result") || body.contains_key("error") => {
            Ok(Message::Response { id, body })
        }
        (None, _) => Err(invalid(
            answer_id,
            "neither a request (`method`) nor a response (`result` or `error` with an `id`)"
                .to_owned(),
        )),
    }
}

fn invalid(id: Value, why: String) -> Malformed {
    Malformed {
        code: INVALID_REQUEST,
        id,
        why,
    }
}

/// A JSON-RPC error response to request `id`.
pub fn error_response(id: Value, code: i64, message: impl Into<String>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": code, "message": message.into()}})
}

/// A JSON-RPC response to request `id` with `result`.
pub fn result_response(id: Value, result: Map<String, Value>) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "result": result})
}

/// A `tools/call` request's `params` object (empty when absent or not an object) and the
/// tool's name in it (empty when absent).
pub fn tool_call(message: &Map<String, Value>) -> (Map<String, Value>, String) {
    let params = message
        .get("params")
        .and_then(Value::as_object)
        .cloned()
        .unwrap_or_default();
    let tool = params
        .get("name")
        .and_then(Value::as_str)
        .unwrap_or_default()
        .to_owned();
    (params, tool)
}

/// "a string", "an array"…: what a JSON value is, for messages.
pub fn kind(value: &Value) -> &'static str {
    match value {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

/// The text an id is looked up by: its JSON (so `1` and `"1"` differ, as JSON-RPC says).
pub fn id_text(id: &Value) -> String {
    id.to_string()
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins Y8: every malformed line gets the error JSON-RPC prescribes
    #[test]
    fn lines_are_sorted() {
        let request = parse(r#"{"jsonrpc":"2.0","id":7,"method":"ping"}"#).unwrap();
        assert!(matches!(request, Message::Request { ref method, .. } if method == "ping"));
        let note = parse(r#"{"jsonrpc":"2.0","method":"notifications/initialized"}"#).unwrap();
        assert!(matches!(note, Message::Notification { .. }));
        let response = parse(r#"{"jsonrpc":"2.0","id":"a","result":{}}"#).unwrap();
        assert!(matches!(response, Message::Response { ref id, .. } if id == "a"));

        let bad = parse("{not json").unwrap_err();
        assert_eq!((bad.code, bad.id.clone()), (PARSE_ERROR, Value::Null));
        let bad = parse("[1,2]").unwrap_err();
        assert_eq!(bad.code, INVALID_REQUEST);
        let bad = parse(r#"{"jsonrpc":"1.0","id":3,"method":"x"}"#).unwrap_err();
        assert_eq!((bad.code, bad.id), (INVALID_REQUEST, json!(3)));
        let bad = parse(r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#).unwrap_err();
        assert_eq!(bad.id, Value::Null);
        let bad = parse(r#"{"jsonrpc":"2.0","id":4,"method":5}"#).unwrap_err();
        assert!(bad.why.contains("`method` must be a string"));
        let bad = parse(r#"{"jsonrpc":"2.0","id":4}"#).unwrap_err();
        assert_eq!((bad.code, bad.id), (INVALID_REQUEST, json!(4)));
    }
}
