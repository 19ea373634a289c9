//! Results go back in each provider's own tool-result shape, matched to each call id
//! (contract D5).

use crate::common;

use common::tools::{engine, logged, spec};
use common::transcript;
use idem_runtime::dispatch::{
    call_result, parse_turns, turn_messages, Conversation, Dispatcher, FailureKind, RetryPolicy,
    ToolFailure, Turn,
};
use idem_runtime::testkit::EffectLog;
use idem_runtime::Scope;
use serde_json::{json, Value};

fn turn(name: &str, index: usize) -> Turn {
    parse_turns(&transcript(name)).unwrap().remove(index)
}

fn declined() -> ToolFailure {
    ToolFailure {
        error: json!({"failed": "card declined"}),
        ..ToolFailure::new(FailureKind::Tool, "card declined", false)
    }
}

/// The JSON text a provider gets for a value.
fn parse_text(text: &Value) -> Value {
    serde_json::from_str(text.as_str().expect("a string")).expect("JSON text")
}

// pins D5: OpenAI Chat: one `tool` message per call, `tool_call_id`, JSON-text content
#[test]
fn openai_chat_tool_messages() {
    let turn = turn("openai-chat-parallel-two-functions", 0);
    let results = vec![
        call_result(&turn.calls[0], &Ok(json!({"temp_c": 11}))),
        call_result(&turn.calls[1], &Err(declined())),
    ];
    let messages = turn_messages(turn.provider, results);
    assert_eq!(messages.len(), 2);
    assert_eq!(messages[0]["role"], "tool");
    assert_eq!(messages[0]["tool_call_id"], "call_fdNz3vOBKYgOIpMdWotB9MjY");
    assert_eq!(parse_text(&messages[0]["content"]), json!({"temp_c": 11}));
    assert_eq!(messages[1]["tool_call_id"], "call_h1DWI1POMJLb0KwIyQHWXD4p");
    assert_eq!(
        parse_text(&messages[1]["content"]),
        json!({"error": {"kind": "tool", "message": "card declined", "retryable": false,
                         "detail": {"failed": "card declined"}}})
    );
}

// pins D5: OpenAI Responses: `function_call_output` items keyed by `call_id`
#[test]
fn openai_responses_output_items() {
    let turn = turn("openai-responses-parallel-same-function", 0);
    let results = turn
        .calls
        .iter()
        .map(|c| call_result(c, &Ok(json!("found"))))
        .collect();
    let items = turn_messages(turn.provider, results);
    assert_eq!(
        items,
        [
            json!({"type": "function_call_output", "call_id": "call_LWVp74L5HaH2KNvgVz9PJsrj", "output": "found"}),
            json!({"type": "function_call_output", "call_id": "call_YnRAWeTyxI91m5uNa5bxXwVO", "output": "found"}),
        ]
    );
}

// pins D5: Anthropic: one `user` message holding every `tool_result` block, `is_error`
#[test]
fn anthropic_one_user_message_with_all_results() {
    let turn = turn("anthropic-parallel-same-tool-4x", 0);
    let results = turn
        .calls
        .iter()
        .enumerate()
        .map(|(i, c)| {
            if i == 3 {
                call_result(c, &Err(declined()))
            } else {
                call_result(c, &Ok(json!({"age": 30 + i})))
            }
        })
        .collect();
    let messages = turn_messages(turn.provider, results);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["role"], "user");
    let blocks = messages[0]["content"].as_array().unwrap();
    assert_eq!(blocks.len(), 4);
    for (block, call) in blocks.iter().zip(&turn.calls) {
        assert_eq!(block["type"], "tool_result");
        assert_eq!(block["tool_use_id"], call.id.as_str());
    }
    assert_eq!(parse_text(&blocks[0]["content"]), json!({"age": 30}));
    assert_eq!(blocks[0]["is_error"], false);
    assert_eq!(blocks[3]["is_error"], true);
}

// pins D5: Gemini: `functionResponse` parts, `id` only for calls that had one
#[test]
fn gemini_function_responses() {
    let with_id = turn("gemini-functioncall-with-id", 1);
    let part = call_result(&with_id.calls[0], &Ok(json!({"rate": 0.92})));
    assert_eq!(
        part,
        json!({"functionResponse": {"name": "get_exchange_rate", "id": "qebf65or",
                                    "response": {"result": {"rate": 0.92}}}})
    );

    let no_id = turn("gemini-identical-calls-no-id", 0);
    let parts: Vec<Value> = no_id
        .calls
        .iter()
        .map(|c| call_result(c, &Err(declined())))
        .collect();
    for part in &parts {
        let response = &part["functionResponse"];
        assert_eq!(response["name"], "generate_topic");
        assert!(response.get("id").is_none(), "synthesized ids are not sent");
        assert_eq!(response["response"]["error"]["message"], "card declined");
    }
    let messages = turn_messages(no_id.provider, parts);
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["role"], "user");
    assert_eq!(messages[0]["parts"].as_array().unwrap().len(), 3);
}

// pins D5: MCP: a JSON-RPC response echoing the request id with its JSON type
#[test]
fn mcp_responses() {
    let numeric = turn("mcp-tools-call-2025-11-25", 0);
    let ok = call_result(&numeric.calls[0], &Ok(json!({"temperature": 22.5})));
    assert_eq!(
        ok,
        json!({"jsonrpc": "2.0", "id": 2, "result": {
            "content": [{"type": "text", "text": "{\"temperature\":22.5}"}],
            "structuredContent": {"temperature": 22.5},
            "isError": false,
        }})
    );
    let scalar = call_result(&numeric.calls[0], &Ok(json!("sunny")));
    assert!(scalar["result"].get("structuredContent").is_none());

    let named = turn("mcp-tools-call-draft-with-meta", 0);
    let failed = call_result(&named.calls[0], &Err(declined()));
    assert_eq!(failed["id"], "call-tool-example");
    assert_eq!(failed["result"]["isError"], true);
    assert!(failed["result"].get("structuredContent").is_none());

    let unknown = ToolFailure::new(FailureKind::UnknownTool, "no tool named `x`", false);
    let protocol = call_result(&named.calls[0], &Err(unknown));
    assert_eq!(
        protocol,
        json!({"jsonrpc": "2.0", "id": "call-tool-example",
               "error": {"code": -32602, "message": "no tool named `x`"}})
    );
}

// pins D2, D5: MCP arguments that are not an object fail the request schema: -32602;
// arguments that do not fit the tool are an `isError` result the model can correct
#[test]
fn mcp_bad_arguments_split_by_where_they_fail() {
    let mut request = transcript("mcp-tools-call-2025-11-25");
    request["params"]["arguments"] = json!(["New York"]);
    let turn = parse_turns(&request).unwrap().remove(0);
    let bad = ToolFailure::new(FailureKind::BadArguments, "not an object", false);
    assert_eq!(
        call_result(&turn.calls[0], &Err(bad.clone()))["error"]["code"],
        -32602
    );
    let fine = parse_turns(&transcript("mcp-tools-call-2025-11-25"))
        .unwrap()
        .remove(0);
    assert_eq!(
        call_result(&fine.calls[0], &Err(bad))["result"]["isError"],
        true
    );
}

// pins D5: a dispatched turn's messages are the provider shapes, in call order
#[tokio::test]
async fn dispatched_turn_answers_in_the_provider_shape() {
    let log = EffectLog::new();
    let dispatcher = Dispatcher::builder()
        .tool(logged(
            spec("retrieve_entity_info", Scope::Conversation),
            &log,
        ))
        .engine(engine())
        .retry(RetryPolicy::immediate(3))
        .build()
        .unwrap();
    let turn = turn("anthropic-parallel-same-tool-4x", 0);
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_results"))
        .await;
    let messages = outcome.messages();
    assert_eq!(messages.len(), 1);
    let blocks = messages[0]["content"].as_array().unwrap();
    let ids: Vec<&str> = blocks
        .iter()
        .map(|b| b["tool_use_id"].as_str().unwrap())
        .collect();
    let expected: Vec<&str> = turn.calls.iter().map(|c| c.id.as_str()).collect();
    assert_eq!(ids, expected);
    assert_eq!(
        parse_text(&blocks[1]["content"]),
        json!({"tool": "retrieve_entity_info", "args": {"name": "Bob"}})
    );
    assert_eq!(log.len(), 4);
}
