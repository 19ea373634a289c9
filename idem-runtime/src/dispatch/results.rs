//! Tool results in each provider's own shape, matched to each call id (contract D5).
//!
//! A call's outcome (`Ok` value or [`ToolFailure`]) becomes one provider-shaped piece
//! ([`call_result`]); the pieces of one turn become the message(s) to send back
//! ([`turn_messages`]). Where a provider wants text, a string value is sent as itself
//! (`done`, as agent frameworks send string results), any other value as its JSON text
//! (`{"refund_id":"re_1"}`, `42`), and a failure as the JSON text of
//! `{"error":{"kind","message","retryable","detail"?}}`.
//!
//! | Provider | one call ([`call_result`]) | one turn ([`turn_messages`]) |
//! | --- | --- | --- |
//! | OpenAI Chat | `{"role":"tool","tool_call_id","content":"<json>"}` | one message per call |
//! | OpenAI Responses | `{"type":"function_call_output","call_id","output":"<json>"}` | one item per call |
//! | Anthropic | `{"type":"tool_result","tool_use_id","content":"<json>","is_error"}` | one `user` message holding every block |
//! | Gemini | `{"functionResponse":{"name","id"?,"response":{"result" or "error"}}}` | one `user` content holding every part |
//! | MCP | JSON-RPC response `{"jsonrpc":"2.0","id","result":{"content":[{"type":"text","text"}],"structuredContent"?,"isError"}}` | one response per call |
//!
//! Sources: OpenAI API reference (Chat `ChatCompletionToolMessageParam`: `tool_call_id`,
//! string `content`; Responses `function_call_output` input item: `call_id`, `output` "a
//! JSON string of the output"); Anthropic tool-use guide (`tool_result` blocks in a `user`
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

use crate::dispatch::{FailureKind, Provider, ToolCall, ToolFailure};

/// JSON-RPC "Invalid params", which MCP uses for unknown tools and malformed requests.
pub const JSONRPC_INVALID_PARAMS: i64 = -32602;

/// The provider-shaped result of one call, for `call.provider` (see the
/// [module documentation](self) for each shape).
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
    match call.provider {
        Provider::OpenAiChat => json!({
            "role": "tool",
            "tool_call_id": call.id,
            "content": text(result),
        }),
        Provider::OpenAiResponses => json!({
            "type": "function_call_output",
            "call_id": call.id,
            "output": text(result),
        }),
        Provider::Anthropic => json!({
            "type": "tool_result",
            "tool_use_id": call.id,
            "content": text(result),
            "is_error": result.is_err(),
        }),
        Provider::Gemini => gemini_part(call, result),
        Provider::Mcp => mcp_response(call, result),
    }
}

/// The message(s) that carry one turn's results back to `provider`, from the pieces
/// [`call_result`] made, in call order: OpenAI Chat tool messages, Responses items and
/// MCP responses as they are; Anthropic blocks inside one `{"role":"user","content":[…]}`
/// message; Gemini parts inside one `{"role":"user","parts":[…]}` content. No pieces, no
/// messages.
pub fn turn_messages(provider: Provider, results: Vec<Value>) -> Vec<Value> {
    if results.is_empty() {
        return results;
    }
    match provider {
        Provider::OpenAiChat | Provider::OpenAiResponses | Provider::Mcp => results,
        Provider::Anthropic => vec![json!({"role": "user", "content": results})],
        Provider::Gemini => vec![json!({"role": "user", "parts": results})],
    }
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
fn text(result: &Result<Value, ToolFailure>) -> String {
    let sorted = |value: &Value| {
        crate::canonical::capture(value)
            .ok()
            .and_then(|node| serde_json::to_string(&node).ok())
            .unwrap_or_else(|| value.to_string())
    };
    match result {
        Ok(Value::String(text)) => text.clone(),
        Ok(value) => sorted(value),
        Err(failure) => sorted(&json!({"error": failure_object(failure)})),
    }
}

fn gemini_part(call: &ToolCall, result: &Result<Value, ToolFailure>) -> Value {
    let response = match result {
        Ok(value) => json!({"result": value}),
        Err(failure) => json!({"error": failure_object(failure)}),
    };
    let mut function_response = Map::new();
    function_response.insert("name".into(), json!(call.name));
    if !call.id_synthesized {
        function_response.insert("id".into(), json!(call.id));
    }
    function_response.insert("response".into(), response);
    json!({"functionResponse": function_response})
}

fn mcp_response(call: &ToolCall, result: &Result<Value, ToolFailure>) -> Value {
    let id = call
        .request_id
        .clone()
        .unwrap_or_else(|| Value::String(call.id.clone()));
    let protocol_error = match result {
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
        json!([{"type": "text", "text": text(result)}]),
    );
    if let Ok(structured @ Value::Object(_)) = result {
        body.insert("structuredContent".into(), structured.clone());
    }
    body.insert("isError".into(), json!(result.is_err()));
    json!({"jsonrpc": "2.0", "id": id, "result": body})
}
