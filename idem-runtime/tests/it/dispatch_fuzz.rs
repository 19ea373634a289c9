//! Fuzzing from the adversarial review: random documents over the providers' member names,
//! and malformed templates of all five formats, through parsing, results and a whole
//! dispatch. Nothing may panic (D1, D2, D5).

use idem_runtime::dispatch::{
    call_result, parse_turns, turn_messages, Conversation, Dispatcher, RetryPolicy, Tool,
};
use idem_runtime::{Engine, ToolError};
use proptest::prelude::*;
use serde_json::{Map, Value};

const KEYS: &[&str] = &[
    "role",
    "content",
    "tool_calls",
    "function",
    "arguments",
    "name",
    "id",
    "type",
    "input",
    "candidates",
    "parts",
    "functionCall",
    "function_call",
    "args",
    "jsonrpc",
    "method",
    "params",
    "output",
    "call_id",
    "choices",
    "message",
    "contents",
    "responseId",
    "_meta",
    "task",
    "object",
    "promptFeedback",
    "stop_reason",
];
const STRS: &[&str] = &[
    "assistant",
    "model",
    "user",
    "tool_use",
    "function_call",
    "function",
    "tools/call",
    "2.0",
    "{\"a\":1}",
    "{\"a\":1,\"a\":2}",
    "",
    "x",
    "call_0",
    "{",
    "[1]",
    "null",
    "1e400",
    "response",
    "message",
    "chat.completion",
];

fn leaf() -> impl Strategy<Value = Value> {
    prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::Bool),
        any::<i64>().prop_map(Value::from),
        any::<u64>().prop_map(Value::from),
        (-1e300f64..1e300).prop_map(Value::from),
        prop::sample::select(STRS).prop_map(|s| Value::String(s.to_owned())),
    ]
}

fn value() -> impl Strategy<Value = Value> {
    leaf().prop_recursive(6, 64, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
            prop::collection::vec((prop::sample::select(KEYS), inner), 0..6).prop_map(|kv| {
                let mut m = Map::new();
                for (k, v) in kv {
                    m.insert(k.to_owned(), v);
                }
                Value::Object(m)
            }),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, .. ProptestConfig::default() })]
    // pins D1, D2, D5
    #[test]
    fn no_panic_on_any_document(doc in value()) {
        if let Ok(turns) = parse_turns(&doc) {
            let dispatcher = Dispatcher::builder()
                .tool(Tool::from_sync("x", |a: Value, _c| Ok::<_, ToolError>(a)))
                .tool(Tool::from_sync("", |a: Value, _c| Ok::<_, ToolError>(a)))
                .engine(Engine::in_memory()).retry(RetryPolicy::immediate(1)).build().unwrap();
            for turn in &turns {
                let pieces: Vec<Value> = turn.calls.iter().map(|c| call_result(c, &Ok(Value::Null))).collect();
                let _ = turn_messages(turn.provider, pieces);
                let out = pollster::block_on(dispatcher.dispatch_turn(turn, &Conversation::new("c")));
                let _ = out.messages();
            }
        }
    }
}

fn templated() -> impl Strategy<Value = Value> {
    (value(), value(), value(), 0..6usize).prop_map(|(a, b, c, t)| match t {
        0 => serde_json::json!({"role":"assistant","tool_calls":[{"id":a,"type":"function","function":{"name":"x","arguments":b}}, c]}),
        1 => serde_json::json!({"role":"assistant","content":[{"type":"tool_use","id":a,"name":"x","input":b}, c]}),
        2 => serde_json::json!({"candidates":[{"content":{"role":"model","parts":[{"functionCall":{"name":"x","args":a,"id":b}}, c]}}]}),
        3 => serde_json::json!({"jsonrpc":"2.0","id":a,"method":"tools/call","params":{"name":"x","arguments":b,"_meta":c}}),
        4 => serde_json::json!({"object":"response","output":[{"type":"function_call","call_id":a,"name":"x","arguments":b}, c]}),
        _ => serde_json::json!([a, {"role":"assistant","tool_calls":b}, {"contents":c}]),
    })
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 4000, .. ProptestConfig::default() })]
    // pins D1, D2, D5
    #[test]
    fn no_panic_on_templated_documents(doc in templated()) {
        if let Ok(turns) = parse_turns(&doc) {
            let dispatcher = Dispatcher::builder()
                .tool(Tool::from_sync("x", |a: Value, _c| Ok::<_, ToolError>(a)))
                .engine(Engine::in_memory()).retry(RetryPolicy::immediate(1)).build().unwrap();
            for turn in &turns {
                let out = pollster::block_on(dispatcher.dispatch_turn(turn, &Conversation::new("c")));
                let _ = out.messages();
            }
        }
    }
}
