//! Bare MCP `CallToolRequestParams` objects, alone or in an array (contract D9, D1, D5).

use crate::common;

use common::tools::{engine, send_refund};
use idem_runtime::dispatch::{parse_turns, Conversation, Dispatcher, ParseError, Provider};
use idem_runtime::testkit::EffectLog;
use idem_runtime::CallStatus;
use serde_json::{json, Value};

fn params(order: u64) -> Value {
    json!({"name": "send_refund", "arguments": {"order": order, "cents": 1250},
        "_meta": {"progressToken": "p-1", "conversationId": "c-1"}, "task": {"ttl": 60000}})
}

// pins D9, D1: a bare params object is one turn of one MCP call; `_meta` and `task` stay
// out of the arguments; the id is synthesized, `<label>:<position>`, and no request id
#[test]
fn a_bare_params_object_is_one_call() {
    let turns = parse_turns(&params(7)).unwrap();
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].provider, Provider::Mcp);
    let call = &turns[0].calls[..];
    assert_eq!(call.len(), 1);
    let call = &call[0];
    assert_eq!(call.name, "send_refund");
    assert_eq!(call.arguments, Ok(json!({"order": 7, "cents": 1250})));
    assert!(call.id_synthesized);
    assert_eq!(call.request_id, None);
    let (label, position) = call.id.split_once(':').unwrap();
    assert_eq!((label.len(), position), (16, "0"));
    assert!(label.chars().all(|c| c.is_ascii_hexdigit()));
    // Each parse draws a new label: each received params object is a new call.
    assert_ne!(parse_turns(&params(7)).unwrap()[0].calls[0].id, call.id);
}

// pins D9: `arguments` may be absent or null (no arguments); an array of params is one
// turn per object, with its position in the id
#[test]
fn arrays_and_absent_arguments() {
    let turns =
        parse_turns(&json!([{"name": "ping"}, {"name": "ping", "arguments": null}, params(8)]))
            .unwrap();
    assert_eq!(turns.len(), 3);
    for (i, turn) in turns.iter().enumerate() {
        assert_eq!(turn.index, i);
        assert_eq!(turn.calls.len(), 1);
        assert!(turn.calls[0].id.ends_with(&format!(":{i}")));
    }
    assert_eq!(turns[0].calls[0].arguments, Ok(json!({})));
    assert_eq!(turns[1].calls[0].arguments, Ok(json!({})));
}

// pins D9, D2: objects that are not bare params are not read as one: an OpenAI `function`
// object (string arguments), an object with members the schema does not give params, a
// name that is not a string
#[test]
fn lookalikes_are_refused_with_the_shape_error() {
    for document in [
        json!({"name": "send_refund", "arguments": "{\"order\":7}"}),
        json!({"name": "send_refund", "arguments": {}, "id": 4}),
        json!({"name": 7, "arguments": {}}),
        json!({"name": "send_refund", "arguments": [1]}),
    ] {
        match parse_turns(&document) {
            Err(ParseError::UnknownShape { path, found }) => {
                assert_eq!(path, "$");
                assert!(found.contains("\"name\""), "{found}");
            }
            other => panic!("{document}: expected UnknownShape, got {other:?}"),
        }
    }
    let message = parse_turns(&json!({"name": "x", "arguments": "{}"}))
        .unwrap_err()
        .to_string();
    assert!(message.contains("CallToolRequestParams"), "{message}");
}

fn refunds(log: &EffectLog) -> Dispatcher {
    Dispatcher::builder()
        .tool(send_refund(log))
        .engine(engine())
        .build()
        .unwrap()
}

// pins D9, D1: a bare params call and the full `tools/call` request with the same name and
// arguments share a key (the request id, `_meta` and `task` are not intent); the second
// replays
#[tokio::test]
async fn bare_params_and_the_full_request_share_a_key() {
    let log = EffectLog::new();
    let dispatcher = refunds(&log);
    let conversation = Conversation::new("c-1");
    let bare = parse_turns(&params(7)).unwrap().remove(0);
    let request = json!({"jsonrpc": "2.0", "id": 12, "method": "tools/call", "params": params(7)});
    let full = parse_turns(&request).unwrap().remove(0);
    let first = dispatcher.dispatch_turn(&bare, &conversation).await;
    let second = dispatcher.dispatch_turn(&full, &conversation).await;
    assert_eq!(log.len(), 1);
    assert_eq!(first.calls[0].key, second.calls[0].key);
    assert_eq!(second.calls[0].status(), Some(CallStatus::Replayed));
}

// pins D9, D5: a bare params call's result is a bare `CallToolResult`, failures included
// (there is no request to answer with a JSON-RPC error)
#[tokio::test]
async fn results_are_bare_call_tool_results() {
    let log = EffectLog::new();
    let dispatcher = refunds(&log);
    let conversation = Conversation::new("c-1");
    let turns = parse_turns(&json!([
        params(7),
        {"name": "send_refnud", "arguments": {"order": 1, "cents": 1}},
        {"name": "send_refund", "arguments": {"order": "seven", "cents": 1}},
    ]))
    .unwrap();
    let mut results = Vec::new();
    for turn in &turns {
        results.extend(
            dispatcher
                .dispatch_turn(turn, &conversation)
                .await
                .messages(),
        );
    }
    assert_eq!(
        results[0],
        json!({"content": [{"type": "text", "text": "{\"cents\":1250,\"refund_id\":\"re_7\"}"}],
               "structuredContent": {"refund_id": "re_7", "cents": 1250}, "isError": false})
    );
    for failed in &results[1..] {
        let object = failed.as_object().unwrap();
        assert!(
            !object.contains_key("jsonrpc") && !object.contains_key("error"),
            "{failed}"
        );
        assert_eq!(failed["isError"], json!(true));
        assert!(failed["content"][0]["text"]
            .as_str()
            .unwrap()
            .contains("error"));
    }
    assert_eq!(log.len(), 1);
}
