//! A replayed result tells the model it is a replay, and when the first run was, when the
//! dispatcher or the tool opts in; off, results are as they always were (contract D6).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::tools::{charge_card, engine_at_first_run, greet, OrderArgs, FIRST_RUN, FIRST_RUN_MS};
use idem_runtime::dispatch::{
    call_result, parse_turns, turn_messages, Conversation, Dispatcher, Tool, Turn, TurnOutcome,
};
use idem_runtime::store::MemoryStore;
use idem_runtime::testkit::{EffectLog, ManualClock};
use idem_runtime::{prepare, CallStatus, Engine, Timestamp, ToolError, ToolSpec};
use serde_json::{json, Value};

static REFUND: ToolSpec = ToolSpec::new("send_refund");

/// `send_refund(order)`: a JSON value.
fn send_refund(log: &EffectLog) -> Tool {
    let log = log.clone();
    Tool::from_async("send_refund", move |a: OrderArgs, _ctx| {
        let log = log.clone();
        async move {
            prepare(&REFUND, None, |b| b.key("order", &a.order).map(drop))?
                .run(async move {
                    log.record("send_refund", a.order.to_string());
                    Ok::<_, ToolError>(
                        json!({"refund_id": format!("re_{}", a.order), "cents": 1250}),
                    )
                })
                .await
        }
    })
}

/// A dispatcher of the three tools on a fresh store whose clock starts at `FIRST_RUN`.
fn three_tools(
    mark: bool,
    log: &EffectLog,
    tweak: impl Fn(Tool) -> Tool,
) -> (Dispatcher, ManualClock) {
    let (engine, clock) = engine_at_first_run();
    let dispatcher = Dispatcher::builder()
        .tools([send_refund(log), greet(log), charge_card(log)].map(tweak))
        .engine(engine)
        .mark_replays(mark)
        .build()
        .unwrap();
    (dispatcher, clock)
}

/// The same three calls (`send_refund`, `greet`, `charge_card`) as each provider sends them.
fn turns() -> Vec<(&'static str, Turn)> {
    let documents = [
        (
            "openai-chat",
            json!({"role": "assistant", "tool_calls": [
                {"id": "call_a", "type": "function", "function": {"name": "send_refund", "arguments": "{\"order\":7}"}},
                {"id": "call_b", "type": "function", "function": {"name": "greet", "arguments": "{\"name\":\"Ada\"}"}},
                {"id": "call_c", "type": "function", "function": {"name": "charge_card", "arguments": "{\"order\":7}"}},
            ]}),
        ),
        (
            "openai-responses",
            json!({"object": "response", "output": [
                {"type": "function_call", "id": "fc_a", "call_id": "call_a", "name": "send_refund", "arguments": "{\"order\":7}"},
                {"type": "function_call", "id": "fc_b", "call_id": "call_b", "name": "greet", "arguments": "{\"name\":\"Ada\"}"},
                {"type": "function_call", "id": "fc_c", "call_id": "call_c", "name": "charge_card", "arguments": "{\"order\":7}"},
            ]}),
        ),
        (
            "anthropic",
            json!({"role": "assistant", "content": [
                {"type": "tool_use", "id": "toolu_a", "name": "send_refund", "input": {"order": 7}},
                {"type": "tool_use", "id": "toolu_b", "name": "greet", "input": {"name": "Ada"}},
                {"type": "tool_use", "id": "toolu_c", "name": "charge_card", "input": {"order": 7}},
            ]}),
        ),
        (
            "gemini",
            json!({"role": "model", "parts": [
                {"functionCall": {"id": "g_a", "name": "send_refund", "args": {"order": 7}}},
                {"functionCall": {"id": "g_b", "name": "greet", "args": {"name": "Ada"}}},
                {"functionCall": {"id": "g_c", "name": "charge_card", "args": {"order": 7}}},
            ]}),
        ),
        (
            "mcp",
            json!([
                {"jsonrpc": "2.0", "id": 1, "method": "tools/call", "params": {"name": "send_refund", "arguments": {"order": 7}}},
                {"jsonrpc": "2.0", "id": 2, "method": "tools/call", "params": {"name": "greet", "arguments": {"name": "Ada"}}},
                {"jsonrpc": "2.0", "id": 3, "method": "tools/call", "params": {"name": "charge_card", "arguments": {"order": 7}}},
            ]),
        ),
    ];
    documents
        .into_iter()
        .map(|(name, document)| {
            let mut turns = parse_turns(&document).unwrap_or_else(|e| panic!("{name}: {e}"));
            let calls: Vec<_> = turns.iter_mut().flat_map(|t| t.calls.drain(..)).collect();
            let mut turn = turns.remove(0);
            turn.calls = calls;
            assert_eq!(turn.calls.len(), 3, "{name}");
            (name, turn)
        })
        .collect()
}

/// The results as D5 shapes them today, from each call's reply: what an unmarked
/// dispatcher returns.
fn today(turn: &Turn, outcome: &TurnOutcome) -> Vec<Value> {
    turn.calls
        .iter()
        .zip(&outcome.calls)
        .map(|(call, report)| call_result(call, &report.reply.result))
        .collect()
}

/// The text content (or the Gemini `response` object) of each result of `outcome`.
fn contents(provider: &str, outcome: &TurnOutcome) -> Vec<Value> {
    outcome
        .calls
        .iter()
        .map(|report| {
            let result = &report.result;
            match provider {
                "openai-chat" | "anthropic" => result["content"].clone(),
                "openai-responses" => result["output"].clone(),
                "gemini" => result["functionResponse"]["response"].clone(),
                "mcp" => result["result"]["content"][0]["text"].clone(),
                other => unreachable!("{other}"),
            }
        })
        .collect()
}

/// The result with its content taken out: what marking must leave as it was.
fn without_content(provider: &str, result: &Value) -> Value {
    let mut result = result.clone();
    match provider {
        "openai-chat" | "anthropic" => result["content"] = Value::Null,
        "openai-responses" => result["output"] = Value::Null,
        "gemini" => result["functionResponse"]["response"] = Value::Null,
        "mcp" => result["result"]["content"][0]["text"] = Value::Null,
        other => unreachable!("{other}"),
    }
    result
}

/// Text content as a test compares it: JSON text of an object as that object (member
/// order aside: a build with serde_json's `preserve_order` keeps insertion order), any other
/// text as itself.
fn read(content: &Value) -> Value {
    match content.as_str().map(serde_json::from_str::<Value>) {
        Some(Ok(object @ Value::Object(_))) => object,
        _ => content.clone(),
    }
}

/// `original` text content, marked as replayed with a first run at `FIRST_RUN`, as
/// [`read`] gives it.
fn marked_text(original: &Value) -> Value {
    match read(original) {
        // JSON content: the wrapper.
        content @ Value::Object(_) => {
            json!({"idem": {"replayed": true, "first_run_at": FIRST_RUN}, "result": content})
        }
        // A string value: the leading line.
        text => Value::String(format!(
            "[idem: replayed; first run at {FIRST_RUN}]\n{}",
            text.as_str().expect("text content")
        )),
    }
}

async fn twice(
    dispatcher: &Dispatcher,
    clock: &ManualClock,
    turn: &Turn,
    conversation: &str,
) -> (TurnOutcome, TurnOutcome) {
    let conversation = Conversation::new(conversation);
    let first = dispatcher.dispatch_turn(turn, &conversation).await;
    clock.advance(Duration::from_secs(3_600));
    let again = dispatcher.dispatch_turn(turn, &conversation).await;
    (first, again)
}

// pins D6: with the option on, for every provider shape, the first dispatch's results are
// unchanged and the replay's content is marked (JSON: the `idem` wrapper; text: the leading
// line; Gemini: an `idem` member of the response object) with the first run's time, the
// replayed failure included; everything else about each result is as it was
#[tokio::test]
async fn replays_are_marked_in_every_provider_shape() {
    for (provider, turn) in turns() {
        let log = EffectLog::new();
        let (dispatcher, clock) = three_tools(true, &log, |tool| tool);
        let (first, again) = twice(&dispatcher, &clock, &turn, "conv_d6").await;
        assert_eq!(log.len(), 3, "{provider}: one effect per call");
        let statuses: Vec<_> = again.calls.iter().map(|c| c.status()).collect();
        assert_eq!(statuses, [Some(CallStatus::Replayed); 3], "{provider}");
        assert!(
            !again.calls[2].is_ok(),
            "{provider}: the failure is replayed"
        );

        // The first results are today's.
        assert_eq!(
            first
                .calls
                .iter()
                .map(|c| c.result.clone())
                .collect::<Vec<_>>(),
            today(&turn, &first),
            "{provider}"
        );
        // The replay: only the content changes, and it is marked.
        for (one, two) in first.calls.iter().zip(&again.calls) {
            assert_eq!(
                without_content(provider, &one.result),
                without_content(provider, &two.result),
                "{provider}"
            );
        }
        let before = contents(provider, &first);
        let after = contents(provider, &again);
        if provider == "gemini" {
            for (one, two) in before.iter().zip(&after) {
                let mut expected = one.clone();
                expected["idem"] = json!({"replayed": true, "first_run_at": FIRST_RUN});
                assert_eq!(two, &expected, "{provider}");
            }
            assert!(
                after[2].get("error").is_some(),
                "a failure stays under `error`"
            );
        } else {
            let expected: Vec<Value> = before.iter().map(marked_text).collect();
            assert_eq!(
                after.iter().map(read).collect::<Vec<_>>(),
                expected,
                "{provider}"
            );
        }
    }
}

// pins D6: the exact bytes the model reads (OpenAI Chat), for a JSON value, a string value
// and a replayed failure
#[tokio::test]
async fn the_marker_bytes() {
    let (_, turn) = turns().remove(0);
    let (dispatcher, clock) = three_tools(true, &EffectLog::new(), |tool| tool);
    let (_, again) = twice(&dispatcher, &clock, &turn, "conv_bytes").await;
    let contents = contents("openai-chat", &again);
    assert_eq!(
        contents[0],
        r#"{"idem":{"first_run_at":"2026-12-01T20:33:33.123Z","replayed":true},"result":{"cents":1250,"refund_id":"re_7"}}"#
    );
    assert_eq!(
        contents[1],
        "[idem: replayed; first run at 2026-12-01T20:33:33.123Z]\nhello Ada"
    );
    let failure: Value = serde_json::from_str(contents[2].as_str().unwrap()).unwrap();
    assert_eq!(
        failure["idem"],
        json!({"replayed": true, "first_run_at": FIRST_RUN})
    );
    assert_eq!(failure["result"]["error"]["kind"], "tool");
    assert_eq!(failure["result"]["error"]["message"], "card declined");
    assert_eq!(failure["result"]["error"]["retryable"], false);
}

// pins D6: off (the default, or set), results are byte for byte today's shapes, and a
// replay's equal to the first dispatch's
#[tokio::test]
async fn off_by_default_results_are_unchanged() {
    for (provider, turn) in turns() {
        let log = EffectLog::new();
        let clock = ManualClock::starting_at(Timestamp::from_millis(FIRST_RUN_MS));
        let engine = Engine::from_shared(Arc::new(MemoryStore::new()), Arc::new(clock.clone()));
        let default = Dispatcher::builder()
            .tools([send_refund(&log), greet(&log), charge_card(&log)])
            .engine(engine)
            .build()
            .unwrap();
        let (first, again) = twice(&default, &clock, &turn, "conv_off").await;
        assert_eq!(again.calls[0].status(), Some(CallStatus::Replayed));
        let text = |outcome: &TurnOutcome| {
            outcome
                .messages()
                .iter()
                .map(Value::to_string)
                .collect::<Vec<_>>()
        };
        // Byte for byte today's shapes, the replay's as the first's.
        for outcome in [&first, &again] {
            let today = turn_messages(turn.provider, today(&turn, outcome));
            assert_eq!(
                text(outcome),
                today.iter().map(Value::to_string).collect::<Vec<_>>(),
                "{provider}"
            );
        }
        // The replay equal to the first dispatch (O3, O7). As values: a Gemini response
        // object's members come back sorted from the store, where a build with serde_json's
        // `preserve_order` (genai turns it on) keeps the live value's order.
        assert_eq!(again.messages(), first.messages(), "{provider}");

        // Explicitly off: the same.
        let (off, clock) = three_tools(false, &EffectLog::new(), |tool| tool);
        let (_, again_off) = twice(&off, &clock, &turn, "conv_off").await;
        assert_eq!(text(&again_off), text(&again), "{provider}");
    }
}

// pins D6: a tool's own choice: `mark_replays(true)` marks that tool's replays under a
// dispatcher that does not mark, and no other tool's; `mark_replays(false)` keeps a tool's
// replays unmarked under a dispatcher that marks
#[tokio::test]
async fn a_tool_chooses_for_itself() {
    let (_, turn) = turns().remove(0);
    let only_refund = |tool: Tool| {
        if tool.name() == "send_refund" {
            tool.mark_replays(true)
        } else {
            tool
        }
    };
    let (dispatcher, clock) = three_tools(false, &EffectLog::new(), only_refund);
    let (first, again) = twice(&dispatcher, &clock, &turn, "conv_tool").await;
    let (before, after) = (
        contents("openai-chat", &first),
        contents("openai-chat", &again),
    );
    assert_eq!(read(&after[0]), marked_text(&before[0]));
    assert_eq!(after[1..], before[1..]);

    let all_but_greet = |tool: Tool| {
        if tool.name() == "greet" {
            tool.mark_replays(false)
        } else {
            tool
        }
    };
    let (dispatcher, clock) = three_tools(true, &EffectLog::new(), all_but_greet);
    let (first, again) = twice(&dispatcher, &clock, &turn, "conv_tool").await;
    let (before, after) = (
        contents("openai-chat", &first),
        contents("openai-chat", &again),
    );
    assert_eq!(read(&after[0]), marked_text(&before[0]));
    assert_eq!(after[1], before[1]);
    assert_eq!(read(&after[2]), marked_text(&before[2]));
}

// pins D6, D4: two identical calls in one message: the one that ran is not marked, the one
// that got its outcome is
#[tokio::test]
async fn the_duplicate_of_a_call_in_one_message_is_marked() {
    let message = json!({"role": "assistant", "tool_calls": [
        {"id": "call_a", "type": "function", "function": {"name": "send_refund", "arguments": "{\"order\":7}"}},
        {"id": "call_b", "type": "function", "function": {"name": "send_refund", "arguments": "{\"order\":7}"}},
    ]});
    let turn = parse_turns(&message).unwrap().remove(0);
    let log = EffectLog::new();
    let (dispatcher, _clock) = three_tools(true, &log, |tool| tool);
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_dup"))
        .await;
    assert_eq!(log.len(), 1);
    let contents = contents("openai-chat", &outcome);
    let mut statuses: Vec<_> = outcome.calls.iter().map(|c| c.status().unwrap()).collect();
    let executed = statuses
        .iter()
        .position(|s| *s == CallStatus::Executed)
        .unwrap();
    let replayed = 1 - executed;
    statuses.sort_by_key(|s| *s == CallStatus::Replayed);
    assert_eq!(statuses, [CallStatus::Executed, CallStatus::Replayed]);
    assert_eq!(read(&contents[replayed]), marked_text(&contents[executed]));
}

/// The typed async-openai dispatch takes its content from the dispatcher's results.
#[cfg(feature = "async-openai")]
mod async_openai {
    use super::*;
    use ::async_openai::types::chat::{
        ChatCompletionRequestMessage, ChatCompletionRequestToolMessageContent,
        CreateChatCompletionResponse,
    };
    use ::async_openai::types::responses::{FunctionCallOutput, InputItem, Item, OutputItem};

    fn chat_response() -> CreateChatCompletionResponse {
        serde_json::from_value(json!({
            "id": "chatcmpl_1", "object": "chat.completion", "created": 1_700_000_000, "model": "gpt-4.1",
            "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
                "role": "assistant", "content": null, "tool_calls": [
                    {"id": "call_a", "type": "function", "function": {"name": "send_refund", "arguments": "{\"order\":7}"}},
                    {"id": "call_b", "type": "function", "function": {"name": "greet", "arguments": "{\"name\":\"Ada\"}"}},
                    {"id": "call_c", "type": "function", "function": {"name": "charge_card", "arguments": "{\"order\":7}"}},
                ]}}],
        }))
        .unwrap()
    }

    fn tool_text(message: &ChatCompletionRequestMessage) -> Value {
        let ChatCompletionRequestMessage::Tool(tool) = message else {
            panic!("not a tool message: {message:?}");
        };
        let ChatCompletionRequestToolMessageContent::Text(text) = &tool.content else {
            panic!("tool content is not text: {tool:?}");
        };
        Value::String(text.clone())
    }

    fn output_text(item: &InputItem) -> Value {
        let InputItem::Item(Item::FunctionCallOutput(output)) = item else {
            panic!("not a function_call_output item: {item:?}");
        };
        let FunctionCallOutput::Text(text) = &output.output else {
            panic!("output is not text: {output:?}");
        };
        Value::String(text.clone())
    }

    // pins D6, O1, O4: async-openai's tool messages and function_call_output items carry
    // the marked content of a replay, the replayed failure included
    #[tokio::test]
    async fn typed_openai_results_are_marked() {
        let (dispatcher, clock) = three_tools(true, &EffectLog::new(), |tool| tool);
        let conversation = Conversation::new("conv_typed");
        let first = dispatcher
            .dispatch_chat_completion(&chat_response(), &conversation)
            .await
            .unwrap();
        clock.advance(Duration::from_secs(60));
        let again = dispatcher
            .dispatch_chat_completion(&chat_response(), &conversation)
            .await
            .unwrap();
        for (one, two) in first.messages().iter().zip(again.messages()) {
            assert_eq!(read(&tool_text(two)), marked_text(&tool_text(one)));
        }

        let output: Vec<OutputItem> = serde_json::from_value(json!([
            {"type": "function_call", "id": "fc_a", "call_id": "call_r", "name": "greet",
             "arguments": "{\"name\":\"Bo\"}", "status": "completed"},
        ]))
        .unwrap();
        let first = dispatcher
            .dispatch_response_output(&output, &conversation)
            .await
            .unwrap();
        let again = dispatcher
            .dispatch_response_output(&output, &conversation)
            .await
            .unwrap();
        assert_eq!(
            output_text(&again.items()[0]),
            format!(
                "[idem: replayed; first run at 2026-12-01T20:34:33.123Z]\n{}",
                output_text(&first.items()[0]).as_str().unwrap()
            )
        );
    }
}

/// The typed genai dispatch takes its content from the dispatcher's results.
#[cfg(feature = "genai")]
mod genai {
    use super::*;
    use ::genai::chat::ToolCall;

    // pins D6, O6: genai's tool responses carry the marked content of a replay
    #[tokio::test]
    async fn typed_genai_results_are_marked() {
        let (dispatcher, clock) = three_tools(true, &EffectLog::new(), |tool| tool);
        let calls: Vec<ToolCall> = serde_json::from_value(json!([
            {"call_id": "call_a", "fn_name": "send_refund", "fn_arguments": {"order": 7}},
            {"call_id": "call_b", "fn_name": "greet", "fn_arguments": {"name": "Ada"}},
            {"call_id": "call_c", "fn_name": "charge_card", "fn_arguments": {"order": 7}},
        ]))
        .unwrap();
        let conversation = Conversation::new("conv_genai");
        let first = dispatcher
            .dispatch_genai_calls(&calls, &conversation)
            .await
            .unwrap();
        clock.advance(Duration::from_secs(60));
        let again = dispatcher
            .dispatch_genai_calls(&calls, &conversation)
            .await
            .unwrap();
        for (one, two) in first.tool_responses().iter().zip(again.tool_responses()) {
            assert_eq!(two.call_id, one.call_id);
            assert_eq!(
                read(&Value::String(two.content.clone())),
                marked_text(&Value::String(one.content.clone()))
            );
        }
    }
}
