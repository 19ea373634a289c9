//! Bad documents and bad arguments: typed errors naming the path, never a panic
//! (contract D1, D2).

use idem_runtime::dispatch::{parse_turns, parse_turns_str, ArgumentError, ParseError, Provider};
use proptest::prelude::*;
use serde_json::{json, Value};

fn chat_message(arguments: Value) -> Value {
    json!({"role": "assistant", "content": null, "tool_calls": [
        {"id": "call_bad", "type": "function", "function": {"name": "send_refund", "arguments": arguments}},
        {"id": "call_good", "type": "function", "function": {"name": "send_refund", "arguments": "{\"order\":7}"}},
    ]})
}

// pins D2: unusable arguments stay on their call; the other call of the message is intact
#[test]
fn bad_argument_table() {
    let path = "$.tool_calls[0].function.arguments";
    let cases: Vec<(Value, ArgumentError)> = vec![
        (
            json!("{\"order\": 7"),
            ArgumentError::InvalidJson {
                path: path.into(),
                message: "EOF while parsing an object at line 1 column 11".into(),
            },
        ),
        (
            json!("{'order': 7}"),
            ArgumentError::InvalidJson {
                path: path.into(),
                message: "key must be a string at line 1 column 2".into(),
            },
        ),
        (
            json!("[7]"),
            ArgumentError::NotAnObject {
                path: path.into(),
                found: "an array",
            },
        ),
        (
            json!("\"7\""),
            ArgumentError::NotAnObject {
                path: path.into(),
                found: "a string",
            },
        ),
        (
            json!(7),
            ArgumentError::NotAnObject {
                path: path.into(),
                found: "a number",
            },
        ),
        (
            json!(null),
            ArgumentError::NotAnObject {
                path: path.into(),
                found: "null",
            },
        ),
        (
            json!("{\"cents\":1,\"cents\":100}"),
            ArgumentError::DuplicateMember {
                path: path.into(),
                name: "cents".into(),
            },
        ),
    ];
    for (arguments, expected) in cases {
        let turns = parse_turns(&chat_message(arguments.clone())).unwrap();
        let calls = &turns[0].calls;
        assert_eq!(calls.len(), 2, "{arguments}");
        assert_eq!(calls[0].arguments, Err(expected), "{arguments}");
        assert_eq!(calls[1].arguments, Ok(json!({"order": 7})));
    }
}

// pins D2: each provider's non-object arguments are a per-call error
#[test]
fn non_object_arguments_in_every_object_format() {
    let documents = [
        json!({"role": "assistant", "content": [
            {"type": "tool_use", "id": "toolu_1", "name": "t", "input": [1]}]}),
        json!({"role": "model", "parts": [{"functionCall": {"name": "t", "args": "x"}}]}),
        json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
               "params": {"name": "t", "arguments": "{\"a\":1}"}}),
        json!({"type": "function_call", "call_id": "c", "name": "t", "arguments": "true"}),
    ];
    for document in documents {
        let turns = parse_turns(&document).unwrap();
        assert!(
            matches!(
                turns[0].calls[0].arguments,
                Err(ArgumentError::NotAnObject { .. })
            ),
            "{document}"
        );
    }
}

// pins D2: Anthropic requires `input`; Gemini `args` and MCP `arguments` may be absent
#[test]
fn missing_arguments() {
    let anthropic =
        json!({"role": "assistant", "content": [{"type": "tool_use", "id": "t1", "name": "t"}]});
    assert_eq!(
        parse_turns(&anthropic).unwrap()[0].calls[0].arguments,
        Err(ArgumentError::Missing {
            path: "$.content[0].input".into()
        })
    );
    let gemini = json!({"role": "model", "parts": [{"functionCall": {"name": "t"}}]});
    let mcp = json!({"jsonrpc": "2.0", "id": "r", "method": "tools/call", "params": {"name": "t"}});
    for document in [gemini, mcp] {
        assert_eq!(
            parse_turns(&document).unwrap()[0].calls[0].arguments,
            Ok(json!({}))
        );
    }
}

fn parse_error(document: Value) -> ParseError {
    parse_turns(&document).expect_err(&document.to_string())
}

// pins D1: documents that match no shape are typed errors naming the path
#[test]
fn unknown_shapes_name_the_path() {
    let cases = [
        (json!(42), "$"),
        (json!("hello"), "$"),
        (json!({"hello": "world"}), "$"),
        (json!([{"role": "assistant", "tool_calls": []}, 7]), "$[1]"),
        (json!([[]]), "$[0]"),
    ];
    for (document, path) in cases {
        match parse_error(document.clone()) {
            ParseError::UnknownShape { path: p, .. } => assert_eq!(p, path, "{document}"),
            other => panic!("{document}: {other:?}"),
        }
    }
}

// pins D1: recognised documents lacking what a call needs are Malformed, with the path
#[test]
fn malformed_documents_name_provider_and_path() {
    let cases = [
        (
            json!({"tool_calls": [{"type": "function", "function": {"name": "t", "arguments": "{}"}}]}),
            Provider::OpenAiChat,
            "$.tool_calls[0].id",
        ),
        (
            json!({"tool_calls": [{"id": "", "function": {"name": "t", "arguments": "{}"}}]}),
            Provider::OpenAiChat,
            "$.tool_calls[0].id",
        ),
        (
            json!({"choices": [{"message": {"role": "assistant", "tool_calls": [{"id": "c", "function": {"name": 5}}]}}]}),
            Provider::OpenAiChat,
            "$.choices[0].message.tool_calls[0].function.name",
        ),
        (
            json!({"tool_calls": "all of them"}),
            Provider::OpenAiChat,
            "$.tool_calls",
        ),
        (
            json!({"role": "assistant", "function_call": {"name": "t", "arguments": "{}"}}),
            Provider::OpenAiChat,
            "$.function_call",
        ),
        (
            json!({"output": [{"type": "function_call", "name": "t", "arguments": "{}"}]}),
            Provider::OpenAiResponses,
            "$.output[0].call_id",
        ),
        (
            json!({"type": "message", "role": "assistant", "content": [{"type": "tool_use", "name": "t", "input": {}}]}),
            Provider::Anthropic,
            "$.content[0].id",
        ),
        (
            json!({"candidates": [{"content": {"role": "model", "parts": [{"functionCall": {"args": {}}}]}}]}),
            Provider::Gemini,
            "$.candidates[0].content.parts[0].functionCall.name",
        ),
        (
            json!({"jsonrpc": "2.0", "id": 1, "method": "tools/list"}),
            Provider::Mcp,
            "$.method",
        ),
        (
            json!({"jsonrpc": "2.0", "method": "tools/call", "params": {"name": "t"}}),
            Provider::Mcp,
            "$.id",
        ),
        (
            json!({"jsonrpc": "1.0", "id": 1, "method": "tools/call", "params": {"name": "t"}}),
            Provider::Mcp,
            "$.jsonrpc",
        ),
    ];
    for (document, provider, path) in cases {
        match parse_error(document.clone()) {
            ParseError::Malformed {
                provider: p,
                path: at,
                ..
            } => assert_eq!((p, at.as_str()), (provider, path), "{document}"),
            other => panic!("{document}: {other:?}"),
        }
    }
}

// pins D1: alternatives (n > 1) are refused rather than all run
#[test]
fn several_alternative_messages_are_refused() {
    let message = json!({"role": "assistant", "tool_calls": []});
    let document = json!({"choices": [{"message": message}, {"message": message}]});
    assert_eq!(
        parse_error(document),
        ParseError::MultipleChoices {
            provider: Provider::OpenAiChat,
            path: "$.choices".into(),
            count: 2
        }
    );
}

// pins D1: text that is not JSON, including nesting past serde_json's limit
#[test]
fn invalid_json_text() {
    assert!(matches!(
        parse_turns_str("{\"choices\": ["),
        Err(ParseError::InvalidJson { .. })
    ));
    let deep = "[".repeat(100_000);
    assert!(matches!(
        parse_turns_str(&deep),
        Err(ParseError::InvalidJson { .. })
    ));
    let deep_argument = format!(
        "{{\"type\":\"function_call\",\"call_id\":\"c\",\"name\":\"t\",\"arguments\":\"{}\"}}",
        "[".repeat(100_000)
    );
    let turns = parse_turns_str(&deep_argument).unwrap();
    assert!(matches!(
        turns[0].calls[0].arguments,
        Err(ArgumentError::InvalidJson { .. })
    ));
}

/// Member names and strings that steer the parser into every provider's code paths.
const WORDS: &[&str] = &[
    "choices",
    "message",
    "tool_calls",
    "function",
    "arguments",
    "id",
    "name",
    "type",
    "content",
    "input",
    "tool_use",
    "candidates",
    "parts",
    "functionCall",
    "args",
    "contents",
    "output",
    "call_id",
    "function_call",
    "jsonrpc",
    "method",
    "params",
    "tools/call",
    "2.0",
    "role",
    "assistant",
    "model",
    "user",
    "responseId",
    "{}",
    "{\"a\":1}",
    "",
];

fn word() -> impl Strategy<Value = String> {
    prop_oneof![
        3 => prop::sample::select(WORDS).prop_map(str::to_owned),
        1 => ".{0,6}",
    ]
}

fn json_value() -> impl Strategy<Value = Value> {
    let leaf = prop_oneof![
        Just(Value::Null),
        any::<bool>().prop_map(Value::from),
        any::<i64>().prop_map(Value::from),
        any::<f64>()
            .prop_filter("finite", |f| f.is_finite())
            .prop_map(Value::from),
        word().prop_map(Value::from),
    ];
    leaf.prop_recursive(5, 96, 6, |inner| {
        prop_oneof![
            prop::collection::vec(inner.clone(), 0..6).prop_map(Value::Array),
            prop::collection::vec((word(), inner), 0..6)
                .prop_map(|members| Value::Object(members.into_iter().collect())),
        ]
    })
}

proptest! {
    #![proptest_config(ProptestConfig::with_cases(2_000))]

    // pins D2: arbitrary JSON never panics the parser, and what it accepts is well formed
    #[test]
    fn arbitrary_json_never_panics(document in json_value()) {
        if let Ok(turns) = parse_turns(&document) {
            for call in turns.iter().flat_map(|t| &t.calls) {
                prop_assert!(!call.id.is_empty() || call.provider == Provider::Mcp);
                if let Ok(arguments) = &call.arguments {
                    prop_assert!(arguments.is_object());
                }
            }
        }
    }

    // pins D2: arbitrary text never panics the parser
    #[test]
    fn arbitrary_text_never_panics(text in ".{0,64}") {
        let _ = parse_turns_str(&text);
    }

    // pins D2: any value as the arguments of a well-formed call: the call survives
    #[test]
    fn arbitrary_arguments_keep_the_call(arguments in json_value()) {
        let turns = parse_turns(&chat_message(arguments)).unwrap();
        prop_assert_eq!(turns[0].calls.len(), 2);
    }
}

// pins D1: a Responses item list that mixes in another format's message is refused, not
// read with that message's calls silently dropped
#[test]
fn mixed_formats_in_an_item_list_are_refused() {
    let document = json!([
        {"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"},
        {"role": "assistant", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "t", "arguments": "{}"}}]},
    ]);
    match parse_error(document) {
        ParseError::Malformed { provider, path, .. } => {
            assert_eq!(
                (provider, path.as_str()),
                (Provider::OpenAiResponses, "$[1]")
            );
        }
        other => panic!("{other:?}"),
    }
    let text_only = json!([
        {"type": "function_call", "call_id": "c1", "name": "t", "arguments": "{}"},
        {"role": "assistant", "content": "calling t"},
        {"role": "assistant", "content": [{"type": "output_text", "text": "calling t"}]},
    ]);
    assert_eq!(parse_turns(&text_only).unwrap()[0].calls.len(), 1);
}
