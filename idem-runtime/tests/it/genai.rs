//! Typed dispatch of genai's tool calls (contract O6–O8), with responses built from small
//! JSON documents in genai's own serde shape.

use crate::common;

use common::tools::{engine, send_refund};
use genai::chat::{ChatMessage, ChatRequest, ChatResponse, ChatRole, ContentPart, ToolCall};
use idem_runtime::dispatch::{Conversation, Dispatcher, FailureKind};
use idem_runtime::integrations::genai::GenaiDispatchError;
use idem_runtime::testkit::EffectLog;
use idem_runtime::CallStatus;
use serde_json::{json, Value};

fn dispatcher(log: &EffectLog) -> Dispatcher {
    Dispatcher::builder()
        .tool(send_refund(log))
        .engine(engine())
        .build()
        .unwrap()
}

fn tool_call(call_id: &str, arguments: Value) -> Value {
    json!({"ToolCall": {"call_id": call_id, "fn_name": "send_refund", "fn_arguments": arguments}})
}

/// A genai `ChatResponse` whose content holds `parts` (text, reasoning, tool calls).
fn response(parts: Value) -> ChatResponse {
    let model = json!({"adapter_kind": "OpenAI", "model_name": "gpt-4.1"});
    // From text: genai's `ModelName` deserializes from a borrowed string only.
    let body = json!({
        "content": parts, "model_iden": model, "provider_model_iden": model, "usage": {}
    });
    serde_json::from_str(&body.to_string()).unwrap()
}

fn two_refunds() -> ChatResponse {
    response(json!([
        {"Text": "Refunding both."},
        tool_call("call_a", json!({"order": 7, "cents": 1250})),
        tool_call("call_b", json!({"order": 8, "cents": 300})),
    ]))
}

fn contents(results: &idem_runtime::integrations::genai::GenaiToolResults) -> Vec<(String, Value)> {
    results
        .tool_responses()
        .iter()
        .map(|r| {
            assert_eq!(r.fn_name.as_deref(), Some("send_refund"));
            (r.call_id.clone(), serde_json::from_str(&r.content).unwrap())
        })
        .collect()
}

// pins O6: two tool calls give two tool responses, in call order, each with its call_id,
// the tool's name and the result; the assistant message keeps the response's content
#[tokio::test]
async fn two_tool_calls_give_two_tool_responses() {
    let log = EffectLog::new();
    let results = dispatcher(&log)
        .dispatch_genai(&two_refunds(), &Conversation::new("conv_o6"))
        .await
        .unwrap();
    assert_eq!(
        contents(&results),
        vec![
            (
                "call_a".to_owned(),
                json!({"refund_id": "re_7", "cents": 1250})
            ),
            (
                "call_b".to_owned(),
                json!({"refund_id": "re_8", "cents": 300})
            ),
        ]
    );
    assert_eq!(log.len(), 2);
    let assistant = results.assistant_message().unwrap();
    assert_eq!(assistant.role, ChatRole::Assistant);
    assert_eq!(assistant.content.texts(), ["Refunding both."]);
    let ids: Vec<&str> = assistant
        .content
        .tool_calls()
        .iter()
        .map(|c| c.call_id.as_str())
        .collect();
    assert_eq!(ids, ["call_a", "call_b"]);

    let next = results.append_to(ChatRequest::new(vec![ChatMessage::user("Refund 7 and 8")]));
    let roles: Vec<&ChatRole> = next.messages.iter().map(|m| &m.role).collect();
    assert_eq!(
        roles,
        [
            &ChatRole::User,
            &ChatRole::Assistant,
            &ChatRole::Tool,
            &ChatRole::Tool
        ]
    );
    assert!(matches!(
        next.messages[3].content.parts().as_slice(),
        [ContentPart::ToolResponse(r)] if r.call_id == "call_b"
    ));
}

// pins O7: the same response dispatched again (a retried turn) runs nothing: the reports say
// replayed and the tool responses are equal
#[tokio::test]
async fn a_retried_genai_turn_replays() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log);
    let conversation = Conversation::new("conv_o7");
    let response = two_refunds();
    let first = dispatcher
        .dispatch_genai(&response, &conversation)
        .await
        .unwrap();
    let again = dispatcher
        .dispatch_genai(&response, &conversation)
        .await
        .unwrap();
    assert_eq!(log.len(), 2, "each tool ran once");
    let statuses: Vec<_> = again.reports().iter().map(|r| r.status()).collect();
    assert_eq!(statuses, vec![Some(CallStatus::Replayed); 2]);
    assert_eq!(contents(&first), contents(&again));
}

// pins O6, D2: arguments left as a string are read as OpenAI's (invalid JSON is that call's
// bad_arguments response; valid JSON text runs); null means no arguments; a non-object is
// refused; the other calls still run
#[tokio::test]
async fn genai_arguments_follow_the_json_rules() {
    let log = EffectLog::new();
    let response = response(json!([
        tool_call("call_text", json!("{\"order\": 9, \"cents\": 10}")),
        tool_call("call_bad", json!("{\"order\": 9,")),
        tool_call("call_null", Value::Null),
        tool_call("call_array", json!([1, 2])),
    ]));
    let results = dispatcher(&log)
        .dispatch_genai(&response, &Conversation::new("conv_o6_args"))
        .await
        .unwrap();
    let kinds: Vec<Option<FailureKind>> = results
        .reports()
        .iter()
        .map(|r| r.reply.result.as_ref().err().map(|f| f.kind))
        .collect();
    assert_eq!(
        kinds,
        [
            None,
            Some(FailureKind::BadArguments),
            Some(FailureKind::BadArguments), // `{}` reached the tool: order and cents missing
            Some(FailureKind::BadArguments),
        ]
    );
    let attempts: Vec<usize> = results
        .reports()
        .iter()
        .map(|r| r.attempt_count())
        .collect();
    assert_eq!(
        attempts,
        [1, 0, 1, 0],
        "unusable arguments never reach the tool"
    );
    let bad: Value = serde_json::from_str(&results.tool_responses()[1].content).unwrap();
    assert!(bad["error"]["message"]
        .as_str()
        .unwrap()
        .contains("$.tool_calls[1].fn_arguments"));
    assert_eq!(log.len(), 1);
}

// pins O6: tool calls on their own (a stream's captured calls) dispatch too, with an
// assistant message made of the calls; no calls, no messages
#[tokio::test]
async fn bare_tool_calls_dispatch_too() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log);
    let calls: Vec<ToolCall> = two_refunds().into_tool_calls();
    let results = dispatcher
        .dispatch_genai_calls(&calls, &Conversation::new("conv_o6_bare"))
        .await
        .unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(
        results
            .assistant_message()
            .unwrap()
            .content
            .tool_calls()
            .len(),
        2
    );
    let none = dispatcher
        .dispatch_genai(
            &response(json!([{"Text": "Done."}])),
            &Conversation::new("c"),
        )
        .await
        .unwrap();
    assert!(none.is_empty());
    assert!(none.assistant_message().is_none());
    let request = none.append_to(ChatRequest::new(vec![ChatMessage::user("hi")]));
    assert_eq!(request.messages.len(), 1);
}

// pins O8: an empty call_id is a typed error naming the call, before any call runs
#[tokio::test]
async fn an_empty_call_id_is_refused() {
    let log = EffectLog::new();
    let response = response(json!([
        tool_call("call_ok", json!({"order": 1, "cents": 1})),
        tool_call("", json!({"order": 2, "cents": 2})),
    ]));
    assert_eq!(
        dispatcher(&log)
            .dispatch_genai(&response, &Conversation::new("conv_o8"))
            .await
            .unwrap_err(),
        GenaiDispatchError::EmptyCallId {
            path: "$.tool_calls[1].call_id".into()
        }
    );
    assert!(log.is_empty(), "nothing ran");
}

/// A genai tool call to `multi_tool_use.parallel` (an OpenAI parallel wrapper) with
/// `arguments`.
fn wrapper_call(call_id: &str, arguments: Value) -> Value {
    json!({"ToolCall": {"call_id": call_id, "fn_name": "multi_tool_use.parallel",
        "fn_arguments": arguments}})
}

// pins D7, O6, O7: a genai wrapper runs each entry as its own call (a report each) and is
// answered by one tool response under its call_id and name, whose content is the JSON
// array of the entries' texts in order; the assistant message keeps the wrapper call; a
// retried turn replays every entry
#[tokio::test]
async fn a_genai_wrapper_gives_one_tool_response() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log);
    let conversation = Conversation::new("conv_d7_genai");
    let response = response(json!([
        tool_call("call_a", json!({"order": 7, "cents": 1250})),
        wrapper_call(
            "call_w",
            json!({"tool_uses": [
                {"recipient_name": "functions.send_refund", "parameters": {"order": 8, "cents": 300}},
                {"recipient_name": "functions.send_refund", "parameters": {"order": 9, "cents": 400}},
            ]})
        ),
    ]));
    let results = dispatcher
        .dispatch_genai(&response, &conversation)
        .await
        .unwrap();
    assert_eq!(log.len(), 3);
    let ids: Vec<&str> = results.reports().iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["call_a", "call_w:0", "call_w:1"]);
    assert_eq!(results.len(), 2);
    let wrapper = &results.tool_responses()[1];
    assert_eq!(wrapper.call_id, "call_w");
    assert_eq!(wrapper.fn_name.as_deref(), Some("multi_tool_use.parallel"));
    let texts: Vec<String> = serde_json::from_str(&wrapper.content).unwrap();
    assert_eq!(
        texts,
        [
            r#"{"cents":300,"refund_id":"re_8"}"#,
            r#"{"cents":400,"refund_id":"re_9"}"#
        ]
    );
    let assistant = results.assistant_message().unwrap();
    let names: Vec<&str> = assistant
        .content
        .tool_calls()
        .iter()
        .map(|c| c.fn_name.as_str())
        .collect();
    assert_eq!(names, ["send_refund", "multi_tool_use.parallel"]);

    let again = dispatcher
        .dispatch_genai(&response, &conversation)
        .await
        .unwrap();
    assert_eq!(log.len(), 3, "each entry ran once");
    let statuses: Vec<_> = again.reports().iter().map(|r| r.status()).collect();
    assert_eq!(statuses, vec![Some(CallStatus::Replayed); 3]);
    let content = |r: &idem_runtime::integrations::genai::GenaiToolResults| {
        r.tool_responses()
            .iter()
            .map(|t| (t.call_id.clone(), t.content.clone()))
            .collect::<Vec<_>>()
    };
    assert_eq!(content(&again), content(&results));
    let next = again.append_to(ChatRequest::new(vec![ChatMessage::user("refund")]));
    assert_eq!(next.messages.len(), 4);
}

// pins D7, D2, O6: a genai wrapper whose arguments are not `tool_uses` is one call with one
// bad_arguments response naming the member; the other call still runs
#[tokio::test]
async fn a_malformed_genai_wrapper_is_one_bad_call() {
    let log = EffectLog::new();
    let response = response(json!([
        wrapper_call(
            "call_w",
            json!({"tool_uses": [{"recipient_name": "functions.send_refund",
            "parameters": "{\"order\": 8}"}]})
        ),
        tool_call("call_a", json!({"order": 7, "cents": 1250})),
    ]));
    let results = dispatcher(&log)
        .dispatch_genai(&response, &Conversation::new("conv_d7_genai_bad"))
        .await
        .unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(results.reports().len(), 2);
    let bad = &results.tool_responses()[0];
    assert_eq!(
        (bad.call_id.as_str(), bad.fn_name.as_deref()),
        ("call_w", Some("multi_tool_use.parallel"))
    );
    let error: Value = serde_json::from_str(&bad.content).unwrap();
    assert_eq!(error["error"]["kind"], "bad_arguments");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(message.contains("`tool_uses[0].parameters`"), "{message}");
    assert!(
        message.contains("$.tool_calls[0].fn_arguments"),
        "{message}"
    );
}
