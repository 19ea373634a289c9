//! JSON-RPC 2.0 messages as the proxy sees them: a line read, sorted into request,
//! notification or response, kept as the JSON object it was (contract Y1, Y8).

use serde_json::value::RawValue;
use serde_json::{json, Map, Value};

/// JSON-RPC's "parse error": the line is not JSON.
pub const PARSE_ERROR: i64 = -32700;
/// JSON-RPC's "invalid request": JSON, but not a JSON-RPC 2.0 message.
pub const INVALID_REQUEST: i64 = -32600;
/// JSON-RPC's "invalid params": a `tools/call` the proxy cannot read a tool's name and
/// arguments from (Y3, Y8).
pub const INVALID_PARAMS: i64 = -32602;
/// JSON-RPC's "internal error": what the proxy answers for a server that exited or could
/// not be reached (Y6).
pub const INTERNAL_ERROR: i64 = -32603;

/// A request id exactly as its sender wrote it (JSON-RPC ids are compared and answered as
/// sent: `1e2`, `-0` or an integer past 2^64 come back unchanged): its JSON text.
#[derive(Debug, Clone, PartialEq)]
pub struct Id {
    raw: String,
}

impl Id {
    /// The `null` id of an answer to a message whose id cannot be read.
    pub fn null() -> Self {
        Id {
            raw: "null".to_owned(),
        }
    }

    /// The id `value` as the proxy writes it (for the proxy's own requests).
    pub fn of(value: &Value) -> Self {
        Id {
            raw: value.to_string(),
        }
    }

    /// Its JSON text, as sent.
    pub fn raw(&self) -> &str {
        &self.raw
    }

    /// The key it is looked up by, exact: a string id's JSON after unescaping (`"\u0061"`
    /// is `"a"`), a number's text as sent (no rounding through `f64`: two integers past
    /// 2^53 never meet), so `1` and `"1"` differ, as JSON-RPC says, and a cancellation's
    /// `requestId` finds the request it names.
    pub fn text(&self) -> String {
        match serde_json::from_str::<Value>(&self.raw) {
            Ok(Value::String(text)) => Value::String(text).to_string(),
            _ => self.raw.trim().to_owned(),
        }
    }

    /// The id `raw` (JSON text), if it is a string or a number.
    fn from_raw(raw: &RawValue) -> Option<Self> {
        let text = raw.get().trim();
        let usable = text.starts_with('"')
            || text.starts_with('-')
            || text.starts_with(|c: char| c.is_ascii_digit());
        usable.then(|| Id {
            raw: text.to_owned(),
        })
    }

    /// Its parsed value.
    pub fn value(&self) -> Value {
        serde_json::from_str(&self.raw).unwrap_or(Value::Null)
    }
}

impl std::fmt::Display for Id {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.raw)
    }
}

/// A message's members as their sender wrote them (order, duplicates, numbers and escapes
/// kept): what the proxy forwards, with only its `id` rewritten (Y1, Y5).
#[derive(Debug, Clone)]
pub struct Raw(Vec<(String, Box<RawValue>)>);

impl Raw {
    fn parse(line: &str) -> Option<Self> {
        serde_json::from_str::<Members>(line)
            .ok()
            .map(|members| Raw(members.0))
    }

    /// The members of `object`, as the proxy writes them (for a message it changed).
    pub fn from_value(object: &Map<String, Value>) -> Self {
        serde_json::to_string(object)
            .ok()
            .and_then(|text| Raw::parse(&text))
            .unwrap_or(Raw(Vec::new()))
    }

    /// The message as one line of JSON text, unchanged but for whitespace between members.
    pub fn text(&self) -> String {
        self.write(None)
    }

    /// The message with its `id` member's value replaced by the JSON text `id`.
    pub fn with_id(&self, id: &str) -> String {
        self.write(Some(id))
    }

    fn write(&self, id: Option<&str>) -> String {
        let mut line = String::with_capacity(
            self.0
                .iter()
                .map(|(name, value)| name.len() + value.get().len() + 4)
                .sum::<usize>()
                + 2,
        );
        line.push('{');
        for (at, (name, value)) in self.0.iter().enumerate() {
            if at > 0 {
                line.push(',');
            }
            // A member name serialises infallibly.
            line.push_str(&serde_json::to_string(name).unwrap_or_default());
            line.push(':');
            match id {
                Some(id) if name == "id" => line.push_str(id),
                _ => line.push_str(value.get()),
            }
        }
        line.push('}');
        line
    }

    /// The `params` member `name` as an id (a cancellation's `requestId`), exactly as sent.
    pub fn param_id(&self, name: &str) -> Option<Id> {
        let params = Raw::parse(self.member("params")?.get())?;
        Id::from_raw(params.member(name)?)
    }

    /// The raw text of the last member named `name` (serde_json's `Map` keeps the last).
    fn member(&self, name: &str) -> Option<&RawValue> {
        self.0
            .iter()
            .rev()
            .find(|(member, _)| member == name)
            .map(|(_, value)| &**value)
    }
}

/// An object's members, in order, each kept as its JSON text.
struct Members(Vec<(String, Box<RawValue>)>);

impl<'de> serde::Deserialize<'de> for Members {
    fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct Visit;
        impl<'de> serde::de::Visitor<'de> for Visit {
            type Value = Members;
            fn expecting(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
                f.write_str("a JSON object")
            }
            fn visit_map<A: serde::de::MapAccess<'de>>(
                self,
                mut map: A,
            ) -> Result<Members, A::Error> {
                let mut members = Vec::new();
                while let Some(member) = map.next_entry::<String, Box<RawValue>>()? {
                    members.push(member);
                }
                Ok(Members(members))
            }
        }
        deserializer.deserialize_map(Visit)
    }
}

/// One message: its kind, the object it came in (to read), and its members as sent (to
/// forward).
#[derive(Debug, Clone)]
pub enum Message {
    /// A request: a method and an id.
    Request {
        /// Its id (a string or a number).
        id: Id,
        /// Its method.
        method: String,
        /// The whole message.
        body: Map<String, Value>,
        /// The message as sent.
        raw: Raw,
    },
    /// A notification: a method, no id.
    Notification {
        /// Its method.
        method: String,
        /// The whole message.
        body: Map<String, Value>,
        /// The message as sent.
        raw: Raw,
    },
    /// A response: an id and a `result` or an `error`.
    Response {
        /// The id of the request it answers.
        id: Id,
        /// The whole message.
        body: Map<String, Value>,
        /// The message as sent.
        raw: Raw,
    },
}

/// A line that is not a message: what to answer (when its sender is the client) and log.
#[derive(Debug, Clone, PartialEq)]
pub struct Malformed {
    /// The JSON-RPC error code: [`PARSE_ERROR`] or [`INVALID_REQUEST`].
    pub code: i64,
    /// The id to answer with: the message's own when it had a usable one, else `null`.
    pub id: Id,
    /// What was wrong.
    pub why: String,
}

/// `bytes` (a line, an HTTP body) as text, or the parse error for bytes that are not
/// UTF-8: JSON text is UTF-8 (RFC 8259 §8.1), and bytes are never replaced (two lines that
/// differ in their bytes must not become one call).
pub fn utf8(bytes: &[u8]) -> Result<&str, Malformed> {
    std::str::from_utf8(bytes).map_err(|e| Malformed {
        code: PARSE_ERROR,
        id: Id::null(),
        why: format!(
            "not JSON: JSON text is UTF-8, and byte {} is not",
            e.valid_up_to() + 1
        ),
    })
}

/// Sorts `line` (one line of newline-delimited JSON, MCP's stdio framing).
pub fn parse(line: &str) -> Result<Message, Malformed> {
    let value: Value = serde_json::from_str(line).map_err(|e| Malformed {
        code: PARSE_ERROR,
        id: Id::null(),
        why: format!("not JSON: {e}"),
    })?;
    let Value::Object(body) = value else {
        return Err(invalid(
            Id::null(),
            format!(
                "a JSON-RPC message is an object, not {}",
                kind(&value) // batches were removed from MCP in 2025-06-18
            ),
        ));
    };
    // An object that parsed as a Value parses as members too.
    let raw = Raw::parse(line).unwrap_or(Raw(Vec::new()));
    let id = body.get("id").map(|value| Id {
        raw: raw
            .member("id")
            .map_or_else(|| value.to_string(), |raw| raw.get().to_owned()),
    });
    let usable_id = id.clone().filter(|_| {
        body.get("id")
            .is_some_and(|id| id.is_string() || id.is_number())
    });
    let answer_id = usable_id.clone().unwrap_or_else(Id::null);
    if body.get("jsonrpc") != Some(&Value::from("2.0")) {
        return Err(invalid(answer_id, "`jsonrpc` must be \"2.0\"".to_owned()));
    }
    if let Some(params) = body.get("params") {
        if body.contains_key("method")
            && !matches!(params, Value::Object(_) | Value::Array(_) | Value::Null)
        {
            return Err(invalid(
                answer_id,
                format!("`params` is an object or an array, not {}", kind(params)),
            ));
        }
    }
    match (body.get("method"), id) {
        (Some(Value::String(method)), None) => Ok(Message::Notification {
            method: method.clone(),
            body,
            raw,
        }),
        (Some(Value::String(method)), Some(_)) => match usable_id {
            Some(id) => Ok(Message::Request {
                id,
                method: method.clone(),
                body,
                raw,
            }),
            None => Err(invalid(
                Id::null(),
                "a request's `id` is a string or a number".to_owned(),
            )),
        },
        (Some(other), _) => Err(invalid(
            answer_id,
            format!("`method` must be a string, not {}", kind(other)),
        )),
        (None, Some(id)) if body.contains_key("result") || body.contains_key("error") => {
            Ok(Message::Response { id, body, raw })
        }
        (None, _) => Err(invalid(
            answer_id,
            "neither a request (`method`) nor a response (`result` or `error` with an `id`)"
                .to_owned(),
        )),
    }
}

/// The answer to `line` when it is a JSON-RPC batch (an array), which MCP removed in
/// 2025-06-18 and the proxy does not forward: one invalid-request error per request in it
/// (each with its id, as JSON-RPC answers a batch), `Some(None)` when it holds only
/// notifications (JSON-RPC answers nothing then); `None` when `line` is no batch.
pub fn refuse_batch(line: &str) -> Option<Option<String>> {
    let elements: Vec<Box<RawValue>> = serde_json::from_str(line).ok()?;
    if elements.is_empty() {
        return Some(Some(error_line(
            &Id::null(),
            INVALID_REQUEST,
            "an empty batch is no JSON-RPC request",
        )));
    }
    let why = "idem mcp-proxy does not take JSON-RPC batches (MCP removed them in protocol version 2025-06-18): send each message on its own line";
    let answers: Vec<String> = elements
        .iter()
        .filter_map(|element| match parse(element.get()) {
            Ok(Message::Request { id, .. }) => Some(error_line(&id, INVALID_REQUEST, why)),
            Ok(_) => None,
            Err(bad) => Some(error_line(&bad.id, bad.code, bad.why)),
        })
        .collect();
    Some((!answers.is_empty()).then(|| format!("[{}]", answers.join(","))))
}

fn invalid(id: Id, why: String) -> Malformed {
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

/// A JSON-RPC error response to request `id`, as a line, the id as its sender wrote it.
pub fn error_line(id: &Id, code: i64, message: impl Into<String>) -> String {
    let error = json!({"code": code, "message": message.into()});
    format!(r#"{{"jsonrpc":"2.0","id":{},"error":{error}}}"#, id.raw())
}

/// A JSON-RPC response to request `id` with `result` (an object) or `error` (an error
/// object), as a line, the id as its sender wrote it.
pub fn answer_line(id: &Id, answer: Result<&Map<String, Value>, &Value>) -> String {
    let (member, value) = match answer {
        Ok(result) => ("result", serde_json::to_string(result)),
        Err(error) => ("error", serde_json::to_string(error)),
    };
    // A map of JSON values serialises infallibly.
    let value = value.unwrap_or_else(|_| "null".to_owned());
    format!(
        r#"{{"jsonrpc":"2.0","id":{},"{member}":{value}}}"#,
        id.raw()
    )
}

/// A `tools/call` request's `params` object (empty when absent or `null`) and the tool's
/// name in it; `Err` (what to answer with [`INVALID_PARAMS`]) when `params` is not an object
/// or `name` is not a string: such a call names no tool, and is refused before anything is
/// claimed or forwarded (Y3).
pub fn tool_call(message: &Map<String, Value>) -> Result<(Map<String, Value>, String), String> {
    let params = match message.get("params") {
        None | Some(Value::Null) => Map::new(),
        Some(Value::Object(params)) => params.clone(),
        Some(other) => {
            return Err(format!(
                "a tools/call's `params` is an object with the tool's `name`, not {}",
                kind(other)
            ))
        }
    };
    match params.get("name") {
        Some(Value::String(tool)) => {
            let tool = tool.clone();
            Ok((params, tool))
        }
        None => Err("a tools/call's `params` has no `name`: name the tool to call".to_owned()),
        Some(other) => Err(format!(
            "a tools/call's `params.name` is the tool's name, a string, not {}",
            kind(other)
        )),
    }
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
        assert!(matches!(response, Message::Response { ref id, .. } if id.value() == "a"));

        let bad = parse("{not json").unwrap_err();
        assert_eq!((bad.code, bad.id.raw()), (PARSE_ERROR, "null"));
        let bad = parse("[1,2]").unwrap_err();
        assert_eq!(bad.code, INVALID_REQUEST);
        let bad = parse(r#"{"jsonrpc":"1.0","id":3,"method":"x"}"#).unwrap_err();
        assert_eq!((bad.code, bad.id.raw()), (INVALID_REQUEST, "3"));
        let bad = parse(r#"{"jsonrpc":"2.0","id":{},"method":"x"}"#).unwrap_err();
        assert_eq!(bad.id.raw(), "null");
        let bad = parse(r#"{"jsonrpc":"2.0","id":4,"method":5}"#).unwrap_err();
        assert!(bad.why.contains("`method` must be a string"));
        let bad = parse(r#"{"jsonrpc":"2.0","id":4}"#).unwrap_err();
        assert_eq!((bad.code, bad.id.raw()), (INVALID_REQUEST, "4"));
    }

    // pins Y1, Y5: a message is forwarded as sent (member order, unknown members, numbers
    // past f64, escapes) with only its id rewritten; ids are answered as sent
    #[test]
    fn messages_are_forwarded_as_sent() {
        let line = r#"{"method":"x/y","params":{"n":123456789012345678901234567890,"z":-0,"s":"\u00e9"},"id":1e2,"jsonrpc":"2.0","extra":[1.50]}"#;
        let Message::Request { id, raw, .. } = parse(line).unwrap() else {
            unreachable!()
        };
        assert_eq!(id.raw(), "1e2");
        assert_eq!(raw.text(), line);
        assert_eq!(raw.with_id("17"), line.replace(r#""id":1e2"#, r#""id":17"#));
        let big = Id {
            raw: "123456789012345678901234567890".to_owned(),
        };
        let answer = answer_line(&big, Ok(&Map::new()));
        assert_eq!(
            answer,
            r#"{"jsonrpc":"2.0","id":123456789012345678901234567890,"result":{}}"#
        );
        let batch = r#"[{"jsonrpc":"2.0","id":1,"method":"ping"},{"jsonrpc":"2.0","method":"n"},{"jsonrpc":"2.0","id":"b","method":"tools/call"}]"#;
        let answers: Value = serde_json::from_str(&refuse_batch(batch).unwrap().unwrap()).unwrap();
        let ids: Vec<&Value> = answers
            .as_array()
            .unwrap()
            .iter()
            .map(|a| &a["id"])
            .collect();
        assert_eq!(ids, [&json!(1), &json!("b")]);
        assert_eq!(answers[0]["error"]["code"], INVALID_REQUEST);
        assert_eq!(
            refuse_batch(r#"[{"jsonrpc":"2.0","method":"n"}]"#),
            Some(None)
        );
        assert!(refuse_batch("[]").unwrap().unwrap().contains("empty batch"));
        assert_eq!(
            refuse_batch(r#"{"jsonrpc":"2.0","id":1,"method":"ping"}"#),
            None
        );
        let error = error_line(&Id::null(), PARSE_ERROR, "bad");
        let error: Value = serde_json::from_str(&error).unwrap();
        assert_eq!(error["error"]["code"], PARSE_ERROR);
        assert_eq!(error["id"], Value::Null);
    }

    // pins Y5, Y7: ids are looked up exactly: integers past 2^53 that one f64 cannot tell
    // apart are two ids, a string and a number never meet, escapes do not matter; a
    // cancellation's requestId is read as sent
    #[test]
    fn ids_are_looked_up_exactly() {
        let id = |raw: &str| Id {
            raw: raw.to_owned(),
        };
        assert_ne!(
            id("36893488147419103232").text(),
            id("36893488147419103233").text()
        );
        assert_ne!(id("1").text(), id("\"1\"").text());
        assert_eq!(id("\"\\u0061\"").text(), id("\"a\"").text());
        let line = r#"{"jsonrpc":"2.0","method":"notifications/cancelled","params":{"requestId":36893488147419103233}}"#;
        let Message::Notification { raw, .. } = parse(line).unwrap() else {
            unreachable!()
        };
        assert_eq!(
            raw.param_id("requestId").unwrap().text(),
            "36893488147419103233"
        );
        assert!(raw.param_id("missing").is_none());
    }

    // pins Y3, Y8: `params` is an object or an array; a tools/call names its tool; bytes
    // that are not UTF-8 are a parse error
    #[test]
    fn params_and_tool_calls_are_checked() {
        let bad = parse(r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":5}"#).unwrap_err();
        assert_eq!((bad.code, bad.id.raw()), (INVALID_REQUEST, "3"));
        assert!(parse(r#"{"jsonrpc":"2.0","id":3,"method":"ping","params":null}"#).is_ok());
        let call = |params: Value| {
            let mut message = Map::new();
            message.insert("params".into(), params);
            tool_call(&message)
        };
        assert_eq!(call(json!({"name": "t"})).unwrap().1, "t");
        assert!(call(json!(["t"])).unwrap_err().contains("an array"));
        assert!(call(json!({})).unwrap_err().contains("no `name`"));
        assert!(call(json!({"name": 1})).unwrap_err().contains("a number"));
        assert!(tool_call(&Map::new()).is_err());
        let bad = utf8(b"{\"a\":\"\xff\"}").unwrap_err();
        assert_eq!(bad.code, PARSE_ERROR);
        assert!(bad.why.contains("byte 7"), "{}", bad.why);
    }
}
