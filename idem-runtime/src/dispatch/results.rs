//! Tool results in each provider's own shape, matched to each call id (contract D5).
//!
//! A call's outcome (`Ok` value or [`ToolFailure`]) becomes one provider-shaped piece
//! ([`call_result`]); the pieces of one turn become the message(s) to send back
//! ([`turn_messages`]). Where a provider wants text, a string value is sent as itself
//! (`done`, as agent frameworks send string results), any other value as its JSON text
//! (`{"refund_id":"re_1"}`, `42`), and a failure as the JSON text of
//! `{"error":{"kind","message","retryable","detail"?}}`.
//!
//! A dispatcher (or tool) that marks replays (D6) changes the content of a call's result
//! whose outcome (replayed or reconciled) is not that call's own run (D11), so the model
//! can tell it did not run now; see
//! [`DispatcherBuilder::mark_replays`](crate::dispatch::DispatcherBuilder::mark_replays).
//! [`call_result`] itself never marks.
//!
//! | Provider | one call ([`call_result`]) | one turn ([`turn_messages`]) |
//! | --- | --- | --- |
//! | OpenAI Chat | `{"role":"tool","tool_call_id","content":"<json>"}` | one message per call |
//! | OpenAI Responses | `{"type":"function_call_output","call_id","output":"<json>"}` | one item per call |
//! | Anthropic | `{"type":"tool_result","tool_use_id","content":"<json>","is_error"}` | one `user` message holding every block |
//! | Gemini | `{"functionResponse":{"name","id"?,"response":{"result" or "error"}}}` | one `user` content holding every part |
//! | MCP | JSON-RPC response `{"jsonrpc":"2.0","id","result":{"content":[{"type":"text","text"}],"structuredContent"?,"isError"}}` | one response per call |
//!
//! The calls of an OpenAI parallel wrapper (`multi_tool_use.parallel`, D7; see
//! [`ToolCall::wrapped_in`]) answer under the wrapper's id, each as one text part, and
//! [`turn_messages`] merges a wrapper's parts, in entry order, into the one result the
//! wrapper call gets. Each part's text is what the entry's result would be alone (D5),
//! replay marker included (D6):
//!
//! | Provider | one wrapped call ([`call_result`]) | one wrapper ([`turn_messages`]) |
//! | --- | --- | --- |
//! | OpenAI Chat | `{"role":"tool","tool_call_id":"<wrapper id>","content":[{"type":"text","text":"<json>"}]}` | one message: `"content":[{"type":"text","text"}, …]`, a part per entry |
//! | OpenAI Responses | `{"type":"function_call_output","call_id":"<wrapper id>","output":[{"type":"input_text","text":"<json>"}]}` | one item: `"output":[{"type":"input_text","text"}, …]`, a part per entry |
//!
//! Sources: OpenAI API reference (Chat `ChatCompletionToolMessageParam`: `tool_call_id`,
//! string `content` or an array of `text` content parts; Responses `function_call_output`
//! input item: `call_id`, `output` "a JSON string of the output" or a list of
//! `input_text` content items); Anthropic tool-use guide (`tool_result` blocks in a `user`
//! message, `is_error`; results of parallel calls go in one message); Gemini API reference
//! (`FunctionResponse`: `name`; `id` "populated by the client to match the corresponding
//! function call id", so only when the call had one; `response` a JSON object in which
//! callers may use keys of their choice for the output, such as `result` or `output`, and
//! an `error` key reports a failure; function responses go back in a `user` content);
//! MCP specification 2025-11-25, server/tools (`CallToolResult`: `content`,
//! `structuredContent` a JSON object, `isError`; unknown tools and malformed requests are
//! JSON-RPC errors, code `-32602`; input validation errors are tool execution errors with
//! `isError: true`).

use serde_json::{json, Map, Value};

use crate::clock::Timestamp;
use crate::dispatch::{FailureKind, Provider, ToolCall, ToolFailure};
use crate::outcome::{CallRecord, CallStatus};

/// JSON-RPC "Invalid params", which MCP uses for unknown tools and malformed requests.
pub const JSONRPC_INVALID_PARAMS: i64 = -32602;

/// The provider-shaped result of one call, for `call.provider` (see the
/// [module documentation](self) for each shape). A call unwrapped from an OpenAI parallel
/// wrapper ([`ToolCall::wrapped_in`], D7) gets the wrapper's id and a one-part content
/// list, which [`turn_messages`] merges with its siblings'.
///
/// For MCP, an unknown tool and arguments that are not a JSON object (a request that
/// fails the `CallToolRequest` schema) are JSON-RPC errors with code
/// [`JSONRPC_INVALID_PARAMS`]; every other failure is a result with `isError: true`, so
/// the model can read it and correct itself.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::dispatch::{call_result, parse_turns, ToolFailure, FailureKind};
/// use serde_json::json;
/// let turns = parse_turns(&json!({"role": "assistant", "content": [
///     {"type": "tool_use", "id": "toolu_1", "name": "send_refund", "input": {"order": 7}}]}))?;
/// let ok = call_result(&turns[0].calls[0], &Ok(json!({"refund_id": "re_1"})));
/// assert_eq!(ok, json!({"type": "tool_result", "tool_use_id": "toolu_1",
///                       "content": "{\"refund_id\":\"re_1\"}", "is_error": false}));
/// let failed = call_result(&turns[0].calls[0], &Err(ToolFailure::new(FailureKind::Tool, "card declined", false)));
/// assert_eq!(failed["is_error"], json!(true));
/// # Ok::<(), idem_agent::dispatch::ParseError>(())
/// ```
pub fn call_result(call: &ToolCall, result: &Result<Value, ToolFailure>) -> Value {
    shaped(call, result, None)
}

/// [`call_result`], with the replay marker the model reads (D6) when `record` says the
/// outcome did not run now (replayed or reconciled); see
/// [`DispatcherBuilder::mark_replays`](crate::dispatch::DispatcherBuilder::mark_replays)
/// for the shapes. An executed call's result, or one with no record, is [`call_result`]'s.
pub(crate) fn marked_call_result(
    call: &ToolCall,
    result: &Result<Value, ToolFailure>,
    record: Option<&CallRecord>,
) -> Value {
    shaped(call, result, record.and_then(Marker::of))
}

fn shaped(call: &ToolCall, result: &Result<Value, ToolFailure>, marker: Option<Marker>) -> Value {
    match (call.provider, &call.wrapped_in) {
        (Provider::OpenAiChat, Some(wrapper)) => json!({
            "role": "tool",
            "tool_call_id": wrapper.id,
            "content": [{"type": "text", "text": text(result, marker)}],
        }),
        (Provider::OpenAiResponses, Some(wrapper)) => json!({
            "type": "function_call_output",
            "call_id": wrapper.id,
            "output": [{"type": "input_text", "text": text(result, marker)}],
        }),
        _ => plain(call, result, marker),
    }
}

/// [`shaped`] for a call answered under its own id.
fn plain(call: &ToolCall, result: &Result<Value, ToolFailure>, marker: Option<Marker>) -> Value {
    match call.provider {
        Provider::OpenAiChat => json!({
            "role": "tool",
            "tool_call_id": call.id,
            "content": text(result, marker),
        }),
        Provider::OpenAiResponses => json!({
            "type": "function_call_output",
            "call_id": call.id,
            "output": text(result, marker),
        }),
        Provider::Anthropic => json!({
            "type": "tool_result",
            "tool_use_id": call.id,
            "content": text(result, marker),
            "is_error": result.is_err(),
        }),
        Provider::Gemini => gemini_part(call, result, marker),
        Provider::Mcp => mcp_response(call, result, marker),
    }
}

/// What a replay marker tells the model (D6): the outcome did not run now, and when the
/// run (or the reconciliation) that produced it claimed the key.
#[derive(Debug, Clone, Copy)]
enum Marker {
    /// A saved outcome, returned again; the time its run claimed the key.
    Replayed(Timestamp),
    /// An outcome an earlier run's effect was found to have (U3); the time of the takeover
    /// that checked.
    Reconciled(Timestamp),
}

impl Marker {
    fn of(record: &CallRecord) -> Option<Marker> {
        match record.status {
            CallStatus::Executed => None,
            CallStatus::Replayed => Some(Marker::Replayed(record.created_at)),
            CallStatus::Reconciled => Some(Marker::Reconciled(record.created_at)),
        }
    }

    /// The `idem` member of marked JSON content.
    fn object(self) -> Value {
        match self {
            Marker::Replayed(at) => json!({"replayed": true, "first_run_at": at.to_rfc3339()}),
            Marker::Reconciled(at) => {
                json!({"reconciled": true, "reconciled_at": at.to_rfc3339()})
            }
        }
    }

    /// The line that leads marked text content (without its newline).
    fn line(self) -> String {
        match self {
            Marker::Replayed(at) => format!("[idem: replayed; first run at {}]", at.to_rfc3339()),
            Marker::Reconciled(at) => format!(
                "[idem: reconciled; an earlier run's effect was confirmed at {}]",
                at.to_rfc3339()
            ),
        }
    }
}

/// The message(s) that carry one turn's results back to `provider`, from the pieces
/// [`call_result`] made, in call order: OpenAI Chat tool messages, Responses items and
/// MCP responses as they are; Anthropic blocks inside one `{"role":"user","content":[…]}`
/// message; Gemini parts inside one `{"role":"user","parts":[…]}` content. No pieces, no
/// messages.
///
/// OpenAI Chat and Responses pieces that follow one another with the same id
/// (`tool_call_id`, `call_id`) and a list of parts as content (`content`, `output`) are
/// the calls of one parallel wrapper (D7): they become one message or item under that
/// id, whose list holds their parts in order.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::dispatch::{call_result, parse_turns, turn_messages, Provider};
/// use serde_json::json;
/// let turns = parse_turns(&json!({"role": "assistant", "tool_calls": [{"id": "call_w", "type": "function",
///     "function": {"name": "multi_tool_use.parallel", "arguments": r#"{"tool_uses": [
///         {"recipient_name": "functions.get_weather", "parameters": {"city": "Oslo"}},
///         {"recipient_name": "functions.get_weather", "parameters": {"city": "Bergen"}}]}"#}}]}))?;
/// let calls = &turns[0].calls;
/// assert_eq!((calls[0].id.as_str(), calls[1].id.as_str()), ("call_w:0", "call_w:1"));
/// let pieces = vec![call_result(&calls[0], &Ok(json!("sunny"))), call_result(&calls[1], &Ok(json!("rain")))];
/// assert_eq!(turn_messages(Provider::OpenAiChat, pieces), [json!({"role": "tool", "tool_call_id": "call_w",
///     "content": [{"type": "text", "text": "sunny"}, {"type": "text", "text": "rain"}]})]);
/// # Ok::<(), idem_agent::dispatch::ParseError>(())
/// ```
pub fn turn_messages(provider: Provider, results: Vec<Value>) -> Vec<Value> {
    if results.is_empty() {
        return results;
    }
    match provider {
        Provider::OpenAiChat => merge_wrapped(results, "tool_call_id", "content"),
        Provider::OpenAiResponses => merge_wrapped(results, "call_id", "output"),
        Provider::Mcp => results,
        Provider::Anthropic => vec![json!({"role": "user", "content": results})],
        Provider::Gemini => vec![json!({"role": "user", "parts": results})],
    }
}

/// `pieces` with each run of consecutive pieces that share the string member `id` and
/// hold an array under `parts` merged into the first of the run, parts in order (D7).
fn merge_wrapped(pieces: Vec<Value>, id: &str, parts: &str) -> Vec<Value> {
    let mut merged: Vec<Value> = Vec::with_capacity(pieces.len());
    for mut piece in pieces {
        if let Some(previous) = merged.last_mut() {
            let same_id = matches!(
                (previous.get(id), piece.get(id)),
                (Some(Value::String(a)), Some(Value::String(b))) if a == b
            );
            if same_id {
                if let (Some(Value::Array(into)), Some(Value::Array(more))) =
                    (previous.get_mut(parts), piece.get_mut(parts))
                {
                    into.append(more);
                    continue;
                }
            }
        }
        merged.push(piece);
    }
    merged
}

/// The JSON object a failure is reported as: `{"kind","message","retryable"}`, plus
/// `detail` (the tool's own error value) when there is one.
pub fn failure_object(failure: &ToolFailure) -> Value {
    let mut object = Map::new();
    object.insert("kind".into(), json!(failure.kind));
    object.insert("message".into(), json!(failure.message));
    object.insert("retryable".into(), json!(failure.retryable));
    if let Some(ms) = failure.retry_after_ms {
        object.insert("retry_after_ms".into(), json!(ms));
    }
    if !failure.error.is_null() {
        object.insert("detail".into(), failure.error.clone());
    }
    Value::Object(object)
}

/// The JSON text of an `Ok` value, or of `{"error": failure_object}`, with object members
/// sorted as the saved envelope writes them (S11): the first call's text and a replay's are
/// the same bytes even when serde_json's `preserve_order` is on in the build (a dependency
/// such as genai turns it on), where the live value keeps its insertion order and the
/// replayed one comes back sorted.
///
/// With a `marker` (D6), a string value is led by the marker's line and a newline, and any
/// other content `c` becomes the JSON text of `{"idem":{…},"result":c}`.
fn text(result: &Result<Value, ToolFailure>, marker: Option<Marker>) -> String {
    let sorted = |value: &Value| {
        crate::canonical::capture(value)
            .ok()
            .and_then(|node| serde_json::to_string(&node).ok())
            .unwrap_or_else(|| value.to_string())
    };
    let error;
    let content = match result {
        Ok(Value::String(text)) => {
            return match marker {
                Some(marker) => format!("{}\n{text}", marker.line()),
                None => text.clone(),
            }
        }
        Ok(value) => value,
        Err(failure) => {
            error = json!({"error": failure_object(failure)});
            &error
        }
    };
    match marker {
        Some(marker) => sorted(&json!({"idem": marker.object(), "result": content})),
        None => sorted(content),
    }
}

fn gemini_part(
    call: &ToolCall,
    result: &Result<Value, ToolFailure>,
    marker: Option<Marker>,
) -> Value {
    let mut response = Map::new();
    if let Some(marker) = marker {
        response.insert("idem".into(), marker.object());
    }
    match result {
        Ok(value) => response.insert("result".into(), value.clone()),
        Err(failure) => response.insert("error".into(), failure_object(failure)),
    };
    let response = Value::Object(response);
    let mut function_response = Map::new();
    function_response.insert("name".into(), json!(call.name));
    if !call.id_synthesized {
        function_response.insert("id".into(), json!(call.id));
    }
    function_response.insert("response".into(), response);
    json!({"functionResponse": function_response})
}

fn mcp_response(
    call: &ToolCall,
    result: &Result<Value, ToolFailure>,
    marker: Option<Marker>,
) -> Value {
    // A call read from bare params (D9) has no request to answer: its result is the bare
    // `CallToolResult`, and every failure an `isError` result.
    let id = call.request_id.clone();
    let protocol_error = id.is_some()
        && match result {
            Err(failure) if failure.kind == FailureKind::UnknownTool => true,
            Err(failure) => failure.kind == FailureKind::BadArguments && call.arguments.is_err(),
            Ok(_) => false,
        };
    if let (true, Err(failure)) = (protocol_error, result) {
        return json!({
            "jsonrpc": "2.0",
            "id": id,
            "error": {"code": JSONRPC_INVALID_PARAMS, "message": failure.message},
        });
    }
    let mut body = Map::new();
    body.insert(
        "content".into(),
        json!([{"type": "text", "text": text(result, marker)}]),
    );
    if let Ok(structured @ Value::Object(_)) = result {
        body.insert("structuredContent".into(), structured.clone());
    }
    body.insert("isError".into(), json!(result.is_err()));
    match id {
        Some(id) => json!({"jsonrpc": "2.0", "id": id, "result": body}),
        None => Value::Object(body),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::dispatch::parse_turns;
    use crate::key::IdempotencyKey;

    fn chat_call() -> ToolCall {
        let message = json!({"role": "assistant", "tool_calls": [{"id": "call_1", "type": "function",
            "function": {"name": "send_refund", "arguments": "{\"order\":7}"}}]});
        parse_turns(&message).unwrap().remove(0).calls.remove(0)
    }

    fn record(status: CallStatus) -> CallRecord {
        CallRecord {
            tool: "send_refund".into(),
            key: IdempotencyKey::from_hex(&"a".repeat(64)).unwrap(),
            status,
            created_at: Timestamp::from_millis(1_796_157_213_123),
            expires_at: Timestamp::from_millis(1_796_243_613_123),
            recorded: true,
            takeover: status == CallStatus::Reconciled,
            fence: 2,
            source: if status == CallStatus::Reconciled {
                crate::outcome::OutcomeSource::Reconciled
            } else {
                crate::outcome::OutcomeSource::Executed
            },
        }
    }

    // pins D6: an executed call, or one that never reached the store, is not marked; a
    // reconciled outcome (it did not run now either) is marked `reconciled` with the time
    // of the takeover that found it, as JSON and as a leading line
    #[test]
    fn only_outcomes_that_did_not_run_now_are_marked() {
        let call = chat_call();
        let value: Result<Value, ToolFailure> = Ok(json!({"refund_id": "re_7"}));
        let plain = call_result(&call, &value);
        let executed = record(CallStatus::Executed);
        assert_eq!(marked_call_result(&call, &value, Some(&executed)), plain);
        assert_eq!(marked_call_result(&call, &value, None), plain);

        let reconciled = record(CallStatus::Reconciled);
        assert_eq!(
            marked_call_result(&call, &value, Some(&reconciled))["content"],
            r#"{"idem":{"reconciled":true,"reconciled_at":"2026-12-01T20:33:33.123Z"},"result":{"refund_id":"re_7"}}"#
        );
        let text: Result<Value, ToolFailure> = Ok(json!("refunded"));
        assert_eq!(
            marked_call_result(&call, &text, Some(&reconciled))["content"],
            "[idem: reconciled; an earlier run's effect was confirmed at 2026-12-01T20:33:33.123Z]\nrefunded"
        );
    }
}
