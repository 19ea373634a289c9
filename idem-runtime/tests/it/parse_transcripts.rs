//! Every shipped provider transcript parses into the calls it holds (contract D1, K4).

use crate::common;

use common::{transcript, transcripts_dir};
use idem_runtime::dispatch::{parse_as, parse_turns, parse_turns_str, Provider, ToolCall, Turn};
use serde_json::{json, Value};

/// (id, name, id synthesized, arguments) of each call of each turn.
type Expected<'a> = Vec<Vec<(&'a str, &'a str, bool, Value)>>;

fn assert_turns(turns: &[Turn], provider: Provider, expected: Expected<'_>) {
    assert_eq!(turns.len(), expected.len(), "number of turns");
    for (turn, calls) in turns.iter().zip(expected) {
        assert_eq!(turn.provider, provider);
        assert_eq!(
            turn.calls.len(),
            calls.len(),
            "calls of turn {}",
            turn.index
        );
        for (call, (id, name, synthesized, arguments)) in turn.calls.iter().zip(calls) {
            assert_eq!(call.provider, provider);
            assert_eq!(call.id, id);
            assert_eq!(call.name, name);
            assert_eq!(call.id_synthesized, synthesized, "{id}");
            assert_eq!(call.arguments, Ok(arguments), "{id}");
        }
    }
}

// pins D1: every transcript in the folder is read, none is skipped by this suite
#[test]
fn every_shipped_transcript_parses_by_detection() {
    let mut parsed = 0;
    for entry in std::fs::read_dir(transcripts_dir()).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().and_then(|e| e.to_str()) != Some("json") {
            continue;
        }
        let text = std::fs::read_to_string(&path).unwrap();
        let turns = parse_turns_str(&text).unwrap_or_else(|e| panic!("{}: {e}", path.display()));
        assert!(!turns.is_empty(), "{}", path.display());
        assert!(
            turns.iter().all(|t| !t.calls.is_empty()),
            "{}",
            path.display()
        );
        parsed += 1;
    }
    assert_eq!(parsed, 10);
}

// pins D1, D4: four parallel tool_use blocks of one tool, text block ignored
#[test]
fn anthropic_four_parallel_calls() {
    let turns = parse_turns(&transcript("anthropic-parallel-same-tool-4x")).unwrap();
    let call = |id, who| (id, "retrieve_entity_info", false, json!({ "name": who }));
    assert_turns(
        &turns,
        Provider::Anthropic,
        vec![vec![
            call("toolu_0167cfEnoQaPviGdVXA95zcu", "Alice"),
            call("toolu_01EEe2V5HD1Ac4rKiUR4HD2T", "Bob"),
            call("toolu_01XFyAjstT3966qvRynZyVPo", "Charlie"),
            call("toolu_013mnQZbgtK2oe3Mo3XKJsx3", "Daisy"),
        ]],
    );
}

// pins D1: an array of two Gemini responses is two turns; real ids are kept
#[test]
fn gemini_two_turns_with_real_ids() {
    let turns = parse_turns(&transcript("gemini-functioncall-with-id")).unwrap();
    assert_turns(
        &turns,
        Provider::Gemini,
        vec![
            vec![(
                "yot5i3fn",
                "search_tools",
                false,
                json!({"queries": ["exchange rate", "currency conversion"]}),
            )],
            vec![(
                "qebf65or",
                "get_exchange_rate",
                false,
                json!({"from_currency": "USD", "to_currency": "EUR"}),
            )],
        ],
    );
    assert_eq!((turns[0].index, turns[1].index), (0, 1));
}

// pins D1, K9: three identical Gemini calls without ids get distinct, deterministic,
// synthesized ids built from the responseId and the part index
#[test]
fn gemini_identical_calls_get_synthesized_ids() {
    let document = transcript("gemini-identical-calls-no-id");
    let turns = parse_turns(&document).unwrap();
    let call = |id| (id, "generate_topic", true, json!({}));
    assert_turns(
        &turns,
        Provider::Gemini,
        vec![vec![
            call("wOd8abGuO5rgz7IP5tLEGA:0"),
            call("wOd8abGuO5rgz7IP5tLEGA:1"),
            call("wOd8abGuO5rgz7IP5tLEGA:2"),
        ]],
    );
    assert_eq!(parse_turns(&document).unwrap(), turns, "deterministic");
}

// pins D1, K7, K9: a legacy response has no responseId: its id-less calls get a random
// label per parse, so separately received responses never share call ids
#[test]
fn gemini_legacy_response_without_any_id() {
    let document = transcript("gemini-rest-legacy-no-id");
    let turns = parse_turns(&document).unwrap();
    assert_eq!(turns.len(), 1);
    let call = &turns[0].calls[0];
    assert_eq!(
        (call.name.as_str(), call.id_synthesized),
        ("find_theaters", true)
    );
    assert_eq!(
        call.arguments,
        Ok(json!({"movie": "Barbie", "location": "Mountain View, CA"}))
    );
    let (label, part) = call.id.split_once(':').unwrap();
    assert_eq!((label.len(), part), (16, "0"), "{}", call.id);
    let again = parse_turns(&document).unwrap();
    assert_ne!(again[0].calls[0].id, call.id, "a new parse is a new turn");
}

// pins D1: a Gemini `contents` history: only model contents are turns, indexed by position
#[test]
fn gemini_contents_history() {
    let response = transcript("gemini-rest-legacy-no-id");
    let model = response["candidates"][0]["content"].clone();
    let history = json!([
        {"role": "user", "parts": [{"text": "Which theaters in Mountain View show Barbie?"}]},
        model,
        {"role": "user", "parts": [{"functionResponse": {"name": "find_theaters", "response": {"result": []}}}]},
        model,
    ]);
    for document in [history.clone(), json!({ "contents": history })] {
        let turns = parse_turns(&document).unwrap();
        let indexes: Vec<usize> = turns.iter().map(|t| t.index).collect();
        assert_eq!(indexes, [1, 3]);
        assert_eq!(turns[0].calls[0].id, "1:0");
        assert_eq!(turns[1].calls[0].id, "3:0");
    }
}

fn mcp_call(name: &str) -> ToolCall {
    let turns = parse_turns(&transcript(name)).unwrap();
    assert_eq!(turns.len(), 1);
    assert_eq!(turns[0].calls.len(), 1);
    turns[0].calls[0].clone()
}

// pins D1: MCP `_meta` and the JSON-RPC id never reach the arguments; the id is kept as sent
#[test]
fn mcp_requests_keep_only_name_and_arguments_as_intent() {
    let plain = mcp_call("mcp-tools-call-2025-11-25");
    let with_meta = mcp_call("mcp-tools-call-draft-with-meta");
    for call in [&plain, &with_meta] {
        assert_eq!(call.provider, Provider::Mcp);
        assert_eq!(call.name, "get_weather");
        assert_eq!(call.arguments, Ok(json!({"location": "New York"})));
        assert!(!call.id_synthesized);
    }
    assert_eq!(plain.arguments, with_meta.arguments);
    assert_eq!(
        (plain.id.as_str(), &plain.request_id),
        ("2", &Some(json!(2)))
    );
    assert_eq!(
        (with_meta.id.as_str(), &with_meta.request_id),
        ("call-tool-example", &Some(json!("call-tool-example")))
    );
}

// pins D1: `params.task` is not intent either
#[test]
fn mcp_task_augmentation_is_not_intent() {
    let mut request = transcript("mcp-tools-call-2025-11-25");
    request["params"]["task"] = json!({"ttl": 60000});
    let turns = parse_turns(&request).unwrap();
    assert_eq!(
        turns[0].calls[0].arguments,
        Ok(json!({"location": "New York"}))
    );
}

// pins D1: a bare Chat Completions assistant message with spaced JSON-string arguments
#[test]
fn openai_chat_bare_message_two_calls_one_function() {
    let turns = parse_turns(&transcript("openai-chat-parallel-same-function")).unwrap();
    let call = |id, location, format| {
        (
            id,
            "get_n_day_weather_forecast",
            false,
            json!({"location": location, "format": format, "num_days": 4}),
        )
    };
    assert_turns(
        &turns,
        Provider::OpenAiChat,
        vec![vec![
            call(
                "call_pFdKcCu5taDTtOOfX14vEDRp",
                "San Francisco, CA",
                "fahrenheit",
            ),
            call("call_Veeyp2hYJOKp0wT7ODxmTjaS", "Glasgow, UK", "celsius"),
        ]],
    );
}

// pins D1: whole Chat Completions responses, compact and spaced argument strings
#[test]
fn openai_chat_whole_responses() {
    let two = parse_turns(&transcript("openai-chat-parallel-two-functions")).unwrap();
    assert_turns(
        &two,
        Provider::OpenAiChat,
        vec![vec![
            (
                "call_fdNz3vOBKYgOIpMdWotB9MjY",
                "GetWeatherArgs",
                false,
                json!({"city": "Edinburgh", "country": "GB", "units": "c"}),
            ),
            (
                "call_h1DWI1POMJLb0KwIyQHWXD4p",
                "get_stock_price",
                false,
                json!({"ticker": "AAPL", "exchange": "NASDAQ"}),
            ),
        ]],
    );
    let one = parse_turns(&transcript("openai-chat-single-compact-args")).unwrap();
    assert_turns(
        &one,
        Provider::OpenAiChat,
        vec![vec![(
            "call_Y6qJ7ofLgOrBnMD5WbVAeiRV",
            "GetWeatherArgs",
            false,
            json!({"city": "Edinburgh", "country": "UK", "units": "c"}),
        )]],
    );
}

// pins K4: re-spacing and re-ordering the arguments string of a recorded call gives the
// same arguments value (the key is derived from it later)
#[test]
fn argument_string_spacing_and_order_do_not_matter() {
    let original = transcript("openai-chat-parallel-same-function");
    let mut reordered = original.clone();
    reordered["tool_calls"][0]["function"]["arguments"] =
        json!("{\"num_days\":4,\"format\":\"fahrenheit\",\"location\":\"San Francisco, CA\"}");
    let a = parse_turns(&original).unwrap();
    let b = parse_turns(&reordered).unwrap();
    assert_eq!(a[0].calls[0].arguments, b[0].calls[0].arguments);
}

// pins D1: Responses `function_call` items are matched by call_id, not the item id
#[test]
fn openai_responses_two_function_calls() {
    let turns = parse_turns(&transcript("openai-responses-parallel-same-function")).unwrap();
    assert_turns(
        &turns,
        Provider::OpenAiResponses,
        vec![vec![
            (
                "call_LWVp74L5HaH2KNvgVz9PJsrj",
                "get_location",
                false,
                json!({"loc_name": "Londos"}),
            ),
            (
                "call_YnRAWeTyxI91m5uNa5bxXwVO",
                "get_location",
                false,
                json!({"loc_name": "London"}),
            ),
        ]],
    );
}

// pins D1: a Responses item list splits into turns at input items
#[test]
fn openai_responses_item_list_history() {
    let response = transcript("openai-responses-parallel-same-function");
    let output = response["output"].as_array().unwrap().clone();
    let mut items = vec![json!({"role": "user", "content": "Where is London?"})];
    items.extend(output.clone());
    items.push(json!({"type": "function_call_output", "call_id": "call_LWVp74L5HaH2KNvgVz9PJsrj", "output": "{}"}));
    items.push(json!({"type": "function_call_output", "call_id": "call_YnRAWeTyxI91m5uNa5bxXwVO", "output": "{}"}));
    items.push(output[1].clone());
    let turns = parse_turns(&Value::Array(items)).unwrap();
    let shape: Vec<(usize, usize)> = turns.iter().map(|t| (t.index, t.calls.len())).collect();
    assert_eq!(shape, [(1, 2), (5, 1)]);
}

// pins D1: a whole Anthropic history (user, assistant, user with tool results) is one turn
#[test]
fn anthropic_history_array() {
    let response = transcript("anthropic-parallel-same-tool-4x");
    let history = json!([
        {"role": "user", "content": "Who is the youngest?"},
        response,
        {"role": "user", "content": [{"type": "tool_result", "tool_use_id": "toolu_0167cfEnoQaPviGdVXA95zcu", "content": "{}"}]},
    ]);
    let turns = parse_turns(&history).unwrap();
    assert_eq!(turns.len(), 1);
    assert_eq!((turns[0].index, turns[0].calls.len()), (1, 4));
}

// pins D1: forcing the provider reads the same calls as detection
#[test]
fn parse_as_agrees_with_detection() {
    let cases = [
        ("anthropic-parallel-same-tool-4x", Provider::Anthropic),
        ("gemini-functioncall-with-id", Provider::Gemini),
        ("gemini-identical-calls-no-id", Provider::Gemini),
        ("mcp-tools-call-draft-with-meta", Provider::Mcp),
        ("openai-chat-parallel-two-functions", Provider::OpenAiChat),
        (
            "openai-responses-parallel-same-function",
            Provider::OpenAiResponses,
        ),
    ];
    for (name, provider) in cases {
        let document = transcript(name);
        assert_eq!(
            parse_as(provider, &document).unwrap(),
            parse_turns(&document).unwrap(),
            "{name}"
        );
    }
}
