//! Typed dispatch of async-openai's Chat Completions and Responses types (contract O1–O5),
//! with responses built from small JSON documents as OpenAI sends them.

use crate::common;

use async_openai::types::chat::{
    ChatCompletionRequestAssistantMessageContent, ChatCompletionRequestMessage,
    ChatCompletionRequestToolMessageContent, ChatCompletionRequestUserMessage,
    ChatCompletionResponseMessage, CreateChatCompletionRequest, CreateChatCompletionRequestArgs,
    CreateChatCompletionResponse,
};
use async_openai::types::responses::{
    CreateResponse, CreateResponseArgs, FunctionCallOutput, InputItem, Item, OutputItem, Response,
};
use common::tools::{engine, send_refund};
use idem_runtime::dispatch::{parse_as, Conversation, Dispatcher, FailureKind, Provider};
use idem_runtime::integrations::async_openai::{
    assistant_message, OpenAiDispatchError, ResponseToolResults,
};
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

fn function_call(id: &str, arguments: &str) -> Value {
    json!({"id": id, "type": "function", "function": {"name": "send_refund", "arguments": arguments}})
}

/// A Chat Completions response body whose one choice holds `tool_calls`.
fn chat_json(tool_calls: Value) -> Value {
    json!({
        "id": "chatcmpl_1", "object": "chat.completion", "created": 1_700_000_000, "model": "gpt-4.1",
        "choices": [{"index": 0, "finish_reason": "tool_calls", "message": {
            "role": "assistant", "content": null, "tool_calls": tool_calls}}],
        "usage": {"prompt_tokens": 50, "completion_tokens": 20, "total_tokens": 70}
    })
}

fn chat_response(tool_calls: Value) -> CreateChatCompletionResponse {
    serde_json::from_value(chat_json(tool_calls)).unwrap()
}

fn two_refunds() -> CreateChatCompletionResponse {
    chat_response(json!([
        function_call("call_a", "{\"order\": 7, \"cents\": 1250}"),
        function_call("call_b", "{\"order\": 8, \"cents\": 300}"),
    ]))
}

fn tool_message(message: &ChatCompletionRequestMessage) -> (&str, Value) {
    let ChatCompletionRequestMessage::Tool(tool) = message else {
        panic!("not a tool message: {message:?}");
    };
    let ChatCompletionRequestToolMessageContent::Text(text) = &tool.content else {
        panic!("tool content is not text: {tool:?}");
    };
    (
        tool.tool_call_id.as_str(),
        serde_json::from_str(text).unwrap(),
    )
}

// pins O1: two tool calls give two tool messages, in call order, each with its call's
// tool_call_id and that call's result; both tools ran once
#[tokio::test]
async fn two_tool_calls_give_two_tool_messages() {
    let log = EffectLog::new();
    let results = dispatcher(&log)
        .dispatch_chat_completion(&two_refunds(), &Conversation::new("conv_o1"))
        .await
        .unwrap();
    assert_eq!(results.len(), 2);
    assert!(results.all_ok());
    let messages: Vec<_> = results.messages().iter().map(tool_message).collect();
    assert_eq!(
        messages,
        vec![
            ("call_a", json!({"refund_id": "re_7", "cents": 1250})),
            ("call_b", json!({"refund_id": "re_8", "cents": 300})),
        ]
    );
    let statuses: Vec<_> = results.reports().iter().map(|r| r.status()).collect();
    assert_eq!(statuses, vec![Some(CallStatus::Executed); 2]);
    assert_eq!(log.len(), 2);
}

// pins O1: the typed tool messages are, as JSON, exactly the results the JSON path gives
// for the same response (parse_as + dispatch_turn + TurnOutcome::messages)
#[tokio::test]
async fn typed_messages_equal_the_json_results() {
    let log = EffectLog::new();
    let document = chat_json(json!([
        function_call("call_a", "{\"order\": 7, \"cents\": 1250}"),
        function_call("call_b", "{\"order\": 8,"),
    ]));
    let typed = dispatcher(&log)
        .dispatch_chat_completion(
            &serde_json::from_value(document.clone()).unwrap(),
            &Conversation::new("conv_typed"),
        )
        .await
        .unwrap();
    let turn = parse_as(Provider::OpenAiChat, &document).unwrap().remove(0);
    let from_json = dispatcher(&log)
        .dispatch_turn(&turn, &Conversation::new("conv_json"))
        .await;
    let typed_json: Vec<Value> = typed
        .messages()
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    assert_eq!(typed_json, from_json.messages());
    assert_eq!(typed_json, typed.outcome().messages());
}

// pins O3: the same response dispatched again (a retried turn) runs nothing: each report
// says replayed, under the same key, and the tool messages are equal
#[tokio::test]
async fn a_retried_chat_turn_replays() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log);
    let conversation = Conversation::new("conv_o3");
    let response = two_refunds();
    let first = dispatcher
        .dispatch_chat_completion(&response, &conversation)
        .await
        .unwrap();
    let again = dispatcher
        .dispatch_chat_completion(&response, &conversation)
        .await
        .unwrap();
    assert_eq!(log.len(), 2, "each tool ran once");
    let statuses: Vec<_> = again.reports().iter().map(|r| r.status()).collect();
    assert_eq!(statuses, vec![Some(CallStatus::Replayed); 2]);
    for (a, b) in first.reports().iter().zip(again.reports()) {
        assert_eq!(a.key, b.key);
        assert!(a.key.is_some());
    }
    assert_eq!(first.messages(), again.messages());
    assert_eq!(first.assistant_message(), again.assistant_message());
}

// pins O1, D2: a call whose arguments are not JSON gets a bad_arguments tool message and
// does not run; the other call of the message still runs
#[tokio::test]
async fn unusable_arguments_answer_that_call_alone() {
    let log = EffectLog::new();
    let response = chat_response(json!([
        function_call("call_bad", "{\"order\": 7,"),
        function_call("call_ok", "{\"order\": 8, \"cents\": 300}"),
    ]));
    let results = dispatcher(&log)
        .dispatch_chat_completion(&response, &Conversation::new("conv_d2"))
        .await
        .unwrap();
    let (id, content) = tool_message(&results.messages()[0]);
    assert_eq!(id, "call_bad");
    assert_eq!(content["error"]["kind"], "bad_arguments");
    let message = content["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("$.choices[0].message.tool_calls[0].function.arguments"),
        "{message}"
    );
    assert_eq!(results.reports()[0].attempt_count(), 0);
    assert_eq!(
        results.reports()[0].reply.result.as_ref().unwrap_err().kind,
        FailureKind::BadArguments
    );
    assert_eq!(tool_message(&results.messages()[1]).0, "call_ok");
    assert!(results.reports()[1].is_ok());
    assert_eq!(log.len(), 1);
}

// pins O2: history + assistant message + tool messages form a valid next request: the
// assistant message repeats the model's tool calls, each tool message answers one, and the
// request serializes as the API expects and reads back equal
#[tokio::test]
async fn results_form_a_valid_next_request() {
    let log = EffectLog::new();
    let response = two_refunds();
    let results = dispatcher(&log)
        .dispatch_chat_completion(&response, &Conversation::new("conv_o2"))
        .await
        .unwrap();
    let assistant = results.assistant_message().clone();
    assert_eq!(
        assistant.tool_calls, response.choices[0].message.tool_calls,
        "the model's calls, unchanged"
    );
    let mut messages = vec![ChatCompletionRequestMessage::from(
        ChatCompletionRequestUserMessage::from("Refund orders 7 and 8"),
    )];
    results.append_to(&mut messages);
    let request = CreateChatCompletionRequestArgs::default()
        .model("gpt-4.1")
        .messages(messages)
        .build()
        .unwrap();
    let body = serde_json::to_value(&request).unwrap();
    let roles: Vec<&str> = body["messages"]
        .as_array()
        .unwrap()
        .iter()
        .map(|m| m["role"].as_str().unwrap())
        .collect();
    assert_eq!(roles, ["user", "assistant", "tool", "tool"]);
    let assistant_json = &body["messages"][1];
    assert_eq!(assistant_json["tool_calls"][0]["id"], "call_a");
    assert_eq!(assistant_json["tool_calls"][0]["type"], "function");
    assert_eq!(
        assistant_json["tool_calls"][1]["function"]["arguments"],
        "{\"order\": 8, \"cents\": 300}"
    );
    assert!(assistant_json.get("content").is_none());
    for (i, id) in [(2, "call_a"), (3, "call_b")] {
        assert_eq!(body["messages"][i]["tool_call_id"], id);
        assert!(body["messages"][i]["content"].is_string());
    }
    let read_back: CreateChatCompletionRequest = serde_json::from_value(body).unwrap();
    assert_eq!(read_back, request);
}

// pins O2: the assistant message keeps content, refusal and the audio id, and leaves out an
// empty tool_calls list (which the API refuses)
#[test]
fn assistant_message_repeats_the_model_message() {
    let message: ChatCompletionResponseMessage = serde_json::from_value(json!({
        "role": "assistant", "content": "Checking.", "refusal": "no", "tool_calls": [],
        "audio": {"id": "audio_1", "expires_at": 1, "data": "", "transcript": "Checking."}
    }))
    .unwrap();
    let assistant = assistant_message(&message);
    assert_eq!(
        assistant.content,
        Some(ChatCompletionRequestAssistantMessageContent::Text(
            "Checking.".into()
        ))
    );
    assert_eq!(assistant.refusal.as_deref(), Some("no"));
    assert_eq!(assistant.audio.map(|a| a.id).as_deref(), Some("audio_1"));
    assert_eq!(assistant.tool_calls, None);
}

// pins O1: a bare assistant message dispatches like the response holding it; a message
// without calls gives no tool messages and still its assistant message
#[tokio::test]
async fn a_bare_message_dispatches_too() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log);
    let response = two_refunds();
    let results = dispatcher
        .dispatch_chat_message(&response.choices[0].message, &Conversation::new("conv_m"))
        .await
        .unwrap();
    assert_eq!(results.len(), 2);
    assert_eq!(tool_message(&results.messages()[1]).0, "call_b");

    let answer: ChatCompletionResponseMessage =
        serde_json::from_value(json!({"role": "assistant", "content": "Both refunded."})).unwrap();
    let done = dispatcher
        .dispatch_chat_message(&answer, &Conversation::new("conv_m"))
        .await
        .unwrap();
    assert!(done.is_empty());
    let mut history = Vec::new();
    done.append_to(&mut history);
    assert!(matches!(
        &history[..],
        [ChatCompletionRequestMessage::Assistant(a)]
            if a.content == Some(ChatCompletionRequestAssistantMessageContent::Text("Both refunded.".into()))
    ));
}

// pins O5: responses the dispatcher refuses are typed errors naming what is wrong, returned
// before any call runs
#[tokio::test]
async fn refused_chat_responses_are_typed_errors() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log);
    let conversation = Conversation::new("conv_o5");
    let ok_call = function_call("call_ok", "{\"order\": 1, \"cents\": 1}");

    let mut none = chat_json(json!([]));
    none["choices"] = json!([]);
    let none: CreateChatCompletionResponse = serde_json::from_value(none).unwrap();
    assert_eq!(
        dispatcher
            .dispatch_chat_completion(&none, &conversation)
            .await,
        Err(OpenAiDispatchError::NoChoices {
            response_id: "chatcmpl_1".into()
        })
    );

    let mut two = chat_json(json!([ok_call.clone()]));
    let choice = two["choices"][0].clone();
    two["choices"] = json!([choice.clone(), choice]);
    let two: CreateChatCompletionResponse = serde_json::from_value(two).unwrap();
    assert_eq!(
        dispatcher
            .dispatch_chat_completion(&two, &conversation)
            .await,
        Err(OpenAiDispatchError::MultipleChoices {
            response_id: "chatcmpl_1".into(),
            count: 2
        })
    );

    let empty_id = chat_response(json!([ok_call.clone(), function_call("", "{}")]));
    assert_eq!(
        dispatcher
            .dispatch_chat_completion(&empty_id, &conversation)
            .await,
        Err(OpenAiDispatchError::EmptyCallId {
            path: "$.choices[0].message.tool_calls[1].id".into()
        })
    );

    let custom = chat_response(json!([ok_call.clone(),
        {"id": "call_c", "type": "custom", "custom_tool": {"name": "grep", "input": "refund"}}]));
    assert_eq!(
        dispatcher
            .dispatch_chat_completion(&custom, &conversation)
            .await,
        Err(OpenAiDispatchError::CustomToolCall {
            path: "$.choices[0].message.tool_calls[1]".into(),
            call_id: "call_c".into(),
            name: "grep".into()
        })
    );

    let deprecated: ChatCompletionResponseMessage = serde_json::from_value(json!({
        "role": "assistant", "tool_calls": [ok_call],
        "function_call": {"name": "send_refund", "arguments": "{}"}
    }))
    .unwrap();
    let error = dispatcher
        .dispatch_chat_message(&deprecated, &conversation)
        .await
        .unwrap_err();
    assert_eq!(
        error,
        OpenAiDispatchError::DeprecatedFunctionCall {
            path: "$.function_call".into()
        }
    );
    assert!(error.to_string().contains("use `tool_calls`"), "{error}");

    assert!(log.is_empty(), "nothing ran");
}

/// A Responses API response body: a reasoning item, a message, and two function calls.
fn responses_json(output: Value) -> Value {
    json!({
        "id": "resp_1", "object": "response", "created_at": 1_700_000_000, "model": "gpt-4.1",
        "status": "completed", "output": output
    })
}

fn responses_call(call_id: &str, arguments: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id,
           "name": "send_refund", "arguments": arguments, "status": "completed"})
}

fn two_refunds_response() -> Response {
    serde_json::from_value(responses_json(json!([
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "message", "id": "msg_1", "role": "assistant", "status": "completed",
         "content": [{"type": "output_text", "text": "Refunding both.", "annotations": []}]},
        responses_call("call_a", "{\"order\": 7, \"cents\": 1250}"),
        responses_call("call_b", "{\"order\": 8, \"cents\": 300}"),
    ])))
    .unwrap()
}

fn output_of(item: &InputItem) -> (&str, Value) {
    let InputItem::Item(Item::FunctionCallOutput(output)) = item else {
        panic!("not a function_call_output item: {item:?}");
    };
    let FunctionCallOutput::Text(text) = &output.output else {
        panic!("output is not text: {output:?}");
    };
    (
        output.call_id.as_deref().unwrap(),
        serde_json::from_str(text).unwrap(),
    )
}

// pins O4: the function_call items of a Response give one function_call_output item per
// call, in output order, matched by call_id (not the item's own fc_ id); other items carry
// no call
#[tokio::test]
async fn responses_function_calls_give_function_call_outputs() {
    let log = EffectLog::new();
    let results = dispatcher(&log)
        .dispatch_response(&two_refunds_response(), &Conversation::new("conv_o4"))
        .await
        .unwrap();
    let outputs: Vec<_> = results.items().iter().map(output_of).collect();
    assert_eq!(
        outputs,
        vec![
            ("call_a", json!({"refund_id": "re_7", "cents": 1250})),
            ("call_b", json!({"refund_id": "re_8", "cents": 300})),
        ]
    );
    assert_eq!(log.len(), 2);
    let typed_json: Vec<Value> = results
        .items()
        .iter()
        .map(|i| serde_json::to_value(i).unwrap())
        .collect();
    assert_eq!(typed_json, results.outcome().messages());
}

// pins O3, O4: a retried Responses turn replays: the tools ran once, the reports say
// replayed, the items are equal
#[tokio::test]
async fn a_retried_responses_turn_replays() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log);
    let conversation = Conversation::new("conv_o4_retry");
    let response = two_refunds_response();
    let first = dispatcher
        .dispatch_response(&response, &conversation)
        .await
        .unwrap();
    let again = dispatcher
        .dispatch_response_output(&response.output, &conversation)
        .await
        .unwrap();
    assert_eq!(log.len(), 2, "each tool ran once");
    let statuses: Vec<_> = again.reports().iter().map(|r| r.status()).collect();
    assert_eq!(statuses, vec![Some(CallStatus::Replayed); 2]);
    assert_eq!(first.items(), again.items());
}

/// The next request of a stateless Responses conversation: `response`'s output items echoed,
/// then `results`' items. Checks that it serializes and reads back equal; returns its JSON.
fn stateless_next_request(response: &Response, results: ResponseToolResults) -> Value {
    let mut input: Vec<InputItem> = response
        .output
        .iter()
        .cloned()
        .map(InputItem::from)
        .collect();
    input.extend(results.into_items());
    let next = CreateResponseArgs::default()
        .model("gpt-4.1")
        .input(input)
        .build()
        .unwrap();
    let body = serde_json::to_value(&next).unwrap();
    let read_back: CreateResponse = serde_json::from_value(body.clone()).unwrap();
    assert_eq!(read_back, next);
    body
}

// pins O4: the items are the next CreateResponse's input (with previous_response_id, or
// after the echoed output items), serialize as function_call_output items and read back
// equal
#[tokio::test]
async fn responses_items_form_a_valid_next_request() {
    let log = EffectLog::new();
    let response = two_refunds_response();
    let results = dispatcher(&log)
        .dispatch_response(&response, &Conversation::new("conv_o4_next"))
        .await
        .unwrap();
    let chained = CreateResponseArgs::default()
        .model("gpt-4.1")
        .previous_response_id(response.id.clone())
        .input(results.items().to_vec())
        .build()
        .unwrap();
    let body = serde_json::to_value(&chained).unwrap();
    assert_eq!(body["input"][0]["type"], "function_call_output");
    assert_eq!(body["input"][0]["call_id"], "call_a");
    assert!(body["input"][0]["output"].is_string());
    assert_eq!(body["input"][1]["call_id"], "call_b");
    let read_back: CreateResponse = serde_json::from_value(body).unwrap();
    assert_eq!(read_back, chained);

    let body = stateless_next_request(&response, results);
    let types: Vec<&str> = body["input"]
        .as_array()
        .unwrap()
        .iter()
        .map(|i| i["type"].as_str().unwrap())
        .collect();
    assert_eq!(
        types,
        [
            "reasoning",
            "message",
            "function_call",
            "function_call",
            "function_call_output",
            "function_call_output"
        ]
    );
}

// pins O5: a custom tool call item and an empty call_id are typed errors naming the item,
// returned before any call runs
#[tokio::test]
async fn refused_responses_are_typed_errors() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log);
    let conversation = Conversation::new("conv_o5_responses");
    let ok = responses_call("call_ok", "{\"order\": 1, \"cents\": 1}");
    let custom: Response = serde_json::from_value(responses_json(json!([ok.clone(),
        {"type": "custom_tool_call", "id": "ctc_1", "call_id": "call_c", "name": "grep", "input": "refund"}])))
    .unwrap();
    assert_eq!(
        dispatcher.dispatch_response(&custom, &conversation).await,
        Err(OpenAiDispatchError::CustomToolCall {
            path: "$.output[1]".into(),
            call_id: "call_c".into(),
            name: "grep".into()
        })
    );
    let output: Vec<OutputItem> =
        serde_json::from_value(json!([ok, responses_call("", "{}")])).unwrap();
    assert_eq!(
        dispatcher
            .dispatch_response_output(&output, &conversation)
            .await,
        Err(OpenAiDispatchError::EmptyCallId {
            path: "$[1].call_id".into()
        })
    );
    assert!(log.is_empty(), "nothing ran");
}

// pins O1, O4: a call's arguments stay the model's: typed dispatch keys the call as the
// JSON path does (same key for the same intent, whatever the whitespace and member order)
#[tokio::test]
async fn typed_and_json_dispatch_share_keys() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log);
    let conversation = Conversation::new("conv_keys");
    let typed = dispatcher
        .dispatch_chat_completion(&two_refunds(), &conversation)
        .await
        .unwrap();
    let document = chat_json(json!([function_call(
        "call_other_id",
        "{\"cents\":1250,\"order\":7}"
    )]));
    let turn = parse_as(Provider::OpenAiChat, &document).unwrap().remove(0);
    let from_json = dispatcher.dispatch_turn(&turn, &conversation).await;
    assert_eq!(from_json.calls[0].key, typed.reports()[0].key);
    assert_eq!(from_json.calls[0].status(), Some(CallStatus::Replayed));
    assert_eq!(log.len(), 2);
}

/// A `multi_tool_use.parallel` call (an OpenAI parallel wrapper) holding refunds of
/// `(order, cents)`.
fn parallel_refunds(id: &str, refunds: &[(u64, u64)]) -> Value {
    let uses: Vec<Value> = refunds
        .iter()
        .map(|(order, cents)| {
            json!({"recipient_name": "functions.send_refund",
            "parameters": {"order": order, "cents": cents}})
        })
        .collect();
    json!({"id": id, "type": "function", "function": {"name": "multi_tool_use.parallel",
        "arguments": json!({"tool_uses": uses}).to_string()}})
}

// pins D7, O1, O2: a Chat wrapper runs each entry as its own call (a report each) and is
// answered by one typed tool message under its id with a text part per entry, in order,
// equal to the JSON result; the assistant message keeps the wrapper call, so the next
// request is valid
#[tokio::test]
async fn a_chat_wrapper_gives_one_tool_message_with_parts() {
    let log = EffectLog::new();
    let response = chat_response(json!([
        function_call("call_a", "{\"order\": 7, \"cents\": 1250}"),
        parallel_refunds("call_w", &[(8, 300), (9, 400)]),
    ]));
    let results = dispatcher(&log)
        .dispatch_chat_completion(&response, &Conversation::new("conv_d7_chat"))
        .await
        .unwrap();
    assert_eq!(log.len(), 3);
    let ids: Vec<&str> = results.reports().iter().map(|r| r.id.as_str()).collect();
    assert_eq!(ids, ["call_a", "call_w:0", "call_w:1"]);
    assert_eq!(results.len(), 2);
    let ChatCompletionRequestMessage::Tool(wrapper) = &results.messages()[1] else {
        panic!("not a tool message: {:?}", results.messages()[1]);
    };
    assert_eq!(wrapper.tool_call_id, "call_w");
    assert!(matches!(
        &wrapper.content,
        ChatCompletionRequestToolMessageContent::Array(parts) if parts.len() == 2
    ));
    let typed: Vec<Value> = results
        .messages()
        .iter()
        .map(|m| serde_json::to_value(m).unwrap())
        .collect();
    assert_eq!(typed, results.outcome().messages());
    assert_eq!(
        typed[1],
        json!({"role": "tool", "tool_call_id": "call_w", "content": [
            {"type": "text", "text": r#"{"cents":300,"refund_id":"re_8"}"#},
            {"type": "text", "text": r#"{"cents":400,"refund_id":"re_9"}"#},
        ]})
    );
    assert_eq!(
        results.assistant_message(),
        &assistant_message(&response.choices[0].message)
    );

    let mut messages = vec![ChatCompletionRequestMessage::from(
        ChatCompletionRequestUserMessage::from("Refund orders 7, 8 and 9"),
    )];
    results.append_to(&mut messages);
    let request = CreateChatCompletionRequestArgs::default()
        .model("gpt-4.1")
        .messages(messages)
        .build()
        .unwrap();
    let body = serde_json::to_value(&request).unwrap();
    let calls = &body["messages"][1]["tool_calls"];
    assert_eq!(calls[1]["function"]["name"], "multi_tool_use.parallel");
    let answered: Vec<&str> = body["messages"].as_array().unwrap()[2..]
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(answered, ["call_a", "call_w"]);
    let read_back: CreateChatCompletionRequest = serde_json::from_value(body).unwrap();
    assert_eq!(read_back, request);
}

// pins D7, D2, O1: a typed wrapper whose arguments are not `tool_uses` is one call with a
// bad_arguments text message; the other call still runs
#[tokio::test]
async fn a_malformed_chat_wrapper_is_one_bad_call() {
    let log = EffectLog::new();
    let response = chat_response(json!([
        function_call("call_a", "{\"order\": 7, \"cents\": 1250}"),
        {"id": "call_w", "type": "function", "function": {"name": "multi_tool_use.parallel",
            "arguments": "{\"tool_uses\": [{\"recipient_name\": 3}]}"}},
    ]));
    let results = dispatcher(&log)
        .dispatch_chat_completion(&response, &Conversation::new("conv_d7_bad"))
        .await
        .unwrap();
    assert_eq!(log.len(), 1);
    assert_eq!(results.reports().len(), 2);
    let (id, error) = tool_message(&results.messages()[1]);
    assert_eq!(id, "call_w");
    assert_eq!(error["error"]["kind"], "bad_arguments");
    let message = error["error"]["message"].as_str().unwrap();
    assert!(
        message.contains("`tool_uses[0].recipient_name`"),
        "{message}"
    );
}

// pins D7, O4: a Responses wrapper (`parallel` with `tool_uses`) is answered by one typed
// function_call_output under its call_id with an input_text part per entry, equal to the
// JSON result, and forms a valid next request
#[tokio::test]
async fn a_responses_wrapper_gives_one_output_item_with_parts() {
    let log = EffectLog::new();
    let uses = json!({"tool_uses": [
        {"recipient_name": "functions.send_refund", "parameters": {"order": 8, "cents": 300}},
        {"recipient_name": "send_refund", "parameters": {"order": 9, "cents": 400}},
    ]});
    let wrapper = json!({"type": "function_call", "id": "fc_w", "call_id": "call_w",
        "name": "parallel", "arguments": uses.to_string(), "status": "completed"});
    let response: Response = serde_json::from_value(responses_json(json!([
        {"type": "reasoning", "id": "rs_1", "summary": []},
        wrapper,
        responses_call("call_a", "{\"order\": 7, \"cents\": 1250}"),
    ])))
    .unwrap();
    let results = dispatcher(&log)
        .dispatch_response(&response, &Conversation::new("conv_d7_responses"))
        .await
        .unwrap();
    assert_eq!(log.len(), 3);
    assert_eq!(results.reports().len(), 3);
    assert_eq!(results.len(), 2);
    let InputItem::Item(Item::FunctionCallOutput(output)) = &results.items()[0] else {
        panic!("not a function_call_output: {:?}", results.items()[0]);
    };
    assert_eq!(output.call_id.as_deref(), Some("call_w"));
    assert!(matches!(&output.output, FunctionCallOutput::Content(parts) if parts.len() == 2));
    let typed: Vec<Value> = results
        .items()
        .iter()
        .map(|i| serde_json::to_value(i).unwrap())
        .collect();
    assert_eq!(typed, results.outcome().messages());
    assert_eq!(
        typed[0],
        json!({"type": "function_call_output", "call_id": "call_w", "output": [
            {"type": "input_text", "text": r#"{"cents":300,"refund_id":"re_8"}"#},
            {"type": "input_text", "text": r#"{"cents":400,"refund_id":"re_9"}"#},
        ]})
    );
    stateless_next_request(&response, results);
}

// pins O1, A2, A4, A5, D3: a tool that requires approval answers its tool call with an
// awaiting-approval failure (a typed kind for the host, text for the model, not retried);
// approved, the same response dispatched again runs it once; denied, the model is told who
// denied it and why
#[tokio::test]
async fn approvals_reach_the_model_and_the_host() {
    let log = EffectLog::new();
    let engine = engine();
    let dispatcher = Dispatcher::builder()
        .tool(common::tools::send_refund_with_approval(&log))
        .engine(engine.clone())
        .build()
        .unwrap();
    let conversation = Conversation::new("conv_approval");
    let response = chat_response(json!([function_call(
        "call_a",
        "{\"order\": 7, \"cents\": 1250}"
    )]));
    let waiting = dispatcher
        .dispatch_chat_completion(&response, &conversation)
        .await
        .unwrap();
    let report = &waiting.reports()[0];
    let failure = report.reply.result.as_ref().unwrap_err();
    assert_eq!(failure.kind, FailureKind::AwaitingApproval);
    assert!(!failure.retryable);
    assert_eq!(report.attempt_count(), 1, "not retried");
    let (id, told) = tool_message(&waiting.messages()[0]);
    assert_eq!(id, "call_a");
    assert_eq!(told["error"]["kind"], "awaiting_approval", "{told}");
    assert_eq!(log.len(), 0);
    let key = report.key.clone().expect("the call's key");
    let ana = idem_runtime::approval::Approval::new("ana").unwrap();
    engine.approve(&key, &ana).await.unwrap();
    let ran = dispatcher
        .dispatch_chat_completion(&response, &conversation)
        .await
        .unwrap();
    assert!(ran.all_ok());
    assert_eq!(
        tool_message(&ran.messages()[0]).1,
        json!({"refund_id": "re_7", "cents": 1250})
    );
    assert_eq!(log.len(), 1);

    let other = chat_response(json!([function_call(
        "call_b",
        "{\"order\": 8, \"cents\": 300}"
    )]));
    let waiting = dispatcher
        .dispatch_chat_completion(&other, &conversation)
        .await
        .unwrap();
    let key = waiting.reports()[0].key.clone().unwrap();
    let bo = idem_runtime::approval::Approval::new("bo")
        .unwrap()
        .note("amount too high");
    engine.deny(&key, &bo).await.unwrap();
    let denied = dispatcher
        .dispatch_chat_completion(&other, &conversation)
        .await
        .unwrap();
    let failure = denied.reports()[0].reply.result.as_ref().unwrap_err();
    assert_eq!(failure.kind, FailureKind::Denied);
    let told = tool_message(&denied.messages()[0]).1;
    assert_eq!(told["error"]["kind"], "denied", "{told}");
    assert!(
        told["error"]["message"]
            .as_str()
            .is_some_and(|m| m.contains("denied by bo") && m.contains("amount too high")),
        "{told}"
    );
    assert_eq!(log.len(), 1, "a denied call never runs");
}
