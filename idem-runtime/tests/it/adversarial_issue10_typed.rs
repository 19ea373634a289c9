//! Adversarial review of D10 on the typed async-openai paths (feature `async-openai`):
//! `cargo test -p idem-runtime --features async-openai --test it adversarial_issue10_typed::`.

#![cfg(feature = "async-openai")]

use crate::common;

use async_openai::types::chat::CreateChatCompletionResponse;
use async_openai::types::responses::Response;
use common::tools::{engine, logged, spec};
use idem_runtime::dispatch::{parse_turns, Conversation, Dispatcher};
use idem_runtime::testkit::EffectLog;
use idem_runtime::Scope;
use serde_json::{json, Value};

fn chat_json(id: &str) -> Value {
    json!({"id": id, "object": "chat.completion", "created": 1_700_000_000, "model": "gpt-4.1",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null, "tool_calls": [{"id": "call_0", "type": "function",
                "function": {"name": "roll_dice", "arguments": "{\"sides\":6}"}}]}}]})
}

fn responses_json(id: &str) -> Value {
    json!({"id": id, "object": "response", "created_at": 1_700_000_000, "model": "gpt-4.1",
        "status": "completed", "output": [{"type": "function_call", "id": "fc_1", "call_id": "call_0",
            "name": "roll_dice", "arguments": "{\"sides\":6}", "status": "completed"}]})
}

fn dispatcher(log: &EffectLog) -> Dispatcher {
    Dispatcher::builder()
        .tool(logged(spec("roll_dice", Scope::Call), log))
        .engine(engine())
        .build()
        .unwrap()
}

// pins D10, O1, O4: the typed paths identify the turn by the response's `id`, as the JSON
// path does: a gateway that reuses `call_0` in every response gets two call-scoped rolls
// through async-openai, and a response gets one key through either path
#[tokio::test]
async fn typed_paths_identify_the_turn_by_the_response_id() {
    let conversation = Conversation::new("conv_dice");

    let log = EffectLog::new();
    let typed = dispatcher(&log);
    let mut chat_keys = Vec::new();
    for id in ["chatcmpl-1", "chatcmpl-2"] {
        let response: CreateChatCompletionResponse = serde_json::from_value(chat_json(id)).unwrap();
        let results = typed
            .dispatch_chat_completion(&response, &conversation)
            .await
            .unwrap();
        chat_keys.push(results.reports()[0].key.clone());
    }
    let chat_runs = log.len();

    let log = EffectLog::new();
    let typed = dispatcher(&log);
    for id in ["resp_1", "resp_2"] {
        let response: Response = serde_json::from_value(responses_json(id)).unwrap();
        typed
            .dispatch_response(&response, &conversation)
            .await
            .unwrap();
    }
    let responses_runs = log.len();

    // The JSON path, same first response, fresh store: its key.
    let log = EffectLog::new();
    let json_path = dispatcher(&log);
    let turn = parse_turns(&chat_json("chatcmpl-1")).unwrap().remove(0);
    let json_key = json_path.dispatch_turn(&turn, &conversation).await.calls[0]
        .key
        .clone();

    assert_eq!(
        (chat_runs, responses_runs, &chat_keys[0]),
        (2, 2, &json_key),
        "two responses, two rolls; one response, one key whatever the reader"
    );
}
