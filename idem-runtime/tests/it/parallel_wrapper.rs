//! OpenAI parallel wrappers (`multi_tool_use.parallel`): each entry runs as its own call,
//! keyed on its own intent, and the entries' results go back as one result under the
//! wrapper's id (contract D7, with D2, D4, D5, D6).

use crate::common;

use common::chat::{chat_call, chat_message, chat_wrapper, entry, one_turn, WRAPPER};
use common::tools::{charge_card, engine_at_first_run, greet, logged, spec, FIRST_RUN};
use idem_runtime::dispatch::{Conversation, Dispatcher, FailureKind, Tool, TurnOutcome};
use idem_runtime::testkit::EffectLog;
use idem_runtime::{CallStatus, Scope, ToolError};
use serde::Deserialize;
use serde_json::{json, Value};

/// `greet`, `charge_card` and `get_weather` (`scope = "conversation"`, a JSON value) on a
/// fresh store whose clock starts at `FIRST_RUN`.
fn dispatcher(log: &EffectLog, mark: bool) -> Dispatcher {
    let (engine, _clock) = engine_at_first_run();
    Dispatcher::builder()
        .tool(greet(log))
        .tool(charge_card(log))
        .tool(logged(spec("get_weather", Scope::Conversation), log))
        .engine(engine)
        .mark_replays(mark)
        .build()
        .unwrap()
}

/// A Responses `function_call` item.
fn responses_call(call_id: &str, name: &str, arguments: &str) -> Value {
    json!({"type": "function_call", "id": format!("fc_{call_id}"), "call_id": call_id,
        "name": name, "arguments": arguments})
}

fn responses_response(items: Vec<Value>) -> Value {
    json!({"id": "resp_1", "object": "response", "output": items})
}

/// The wrapper's entries of the result tests: text, a failure, JSON.
fn three_entries() -> Vec<Value> {
    vec![
        entry("greet", json!({"name": "Ada"})),
        entry("charge_card", json!({"order": 7})),
        entry("get_weather", json!({"city": "Oslo"})),
    ]
}

/// The failure text `charge_card` gives (D5), read from the report so that its `detail`
/// (the tool error's own serialization) is not restated here.
fn failure_text(outcome: &TurnOutcome, id: &str) -> String {
    let report = outcome.call(id).unwrap();
    assert_eq!(
        report.reply.result.as_ref().unwrap_err().kind,
        FailureKind::Tool
    );
    let failure = report.reply.result.clone().unwrap_err();
    // Members in sorted order, as results are written (S11), also when serde_json's
    // `preserve_order` is on in the build (genai turns it on).
    let error = json!({"detail": failure.error, "kind": "tool", "message": "card declined",
        "retryable": false});
    serde_json::to_string(&json!({ "error": error })).unwrap()
}

// pins D7, D4, K7: the same tool and arguments inside and outside a wrapper give the same
// key: dispatched in two turns of one conversation, the wrapped one replays the other
#[tokio::test]
async fn equal_intent_inside_and_outside_a_wrapper_share_a_key() {
    let documents = [
        (
            chat_message(vec![chat_call("a", "get_weather", r#"{"city":"Oslo"}"#)]),
            chat_message(vec![chat_wrapper(
                "w",
                vec![entry("get_weather", json!({"city": "Oslo"}))],
            )]),
        ),
        (
            responses_response(vec![responses_call(
                "a",
                "get_weather",
                r#"{"city":"Oslo"}"#,
            )]),
            responses_response(vec![responses_call(
                "w",
                "parallel",
                &json!({"tool_uses": [entry("get_weather", json!({"city": "Oslo"}))]}).to_string(),
            )]),
        ),
    ];
    for (plain, wrapped) in documents {
        let log = EffectLog::new();
        let dispatcher = dispatcher(&log, false);
        let conversation = Conversation::new("conv_weather");
        let first = dispatcher
            .dispatch_turn(&one_turn(&plain), &conversation)
            .await;
        let second = dispatcher
            .dispatch_turn(&one_turn(&wrapped), &conversation)
            .await;
        let (outside, inside) = (first.call("a").unwrap(), second.call("w:0").unwrap());
        assert!(outside.key.is_some());
        assert_eq!(outside.key, inside.key, "{wrapped}");
        assert_eq!(outside.status(), Some(CallStatus::Executed));
        assert_eq!(inside.status(), Some(CallStatus::Replayed));
        assert_eq!(log.len(), 1);
    }
}

// pins D7, D4: two equal entries are two calls of one key: one effect, both answered
#[tokio::test]
async fn equal_entries_share_one_effect() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log, false);
    let same = entry("greet", json!({"name": "Ada"}));
    let turn = one_turn(&chat_message(vec![chat_wrapper(
        "w",
        vec![same.clone(), same],
    )]));
    assert_eq!(turn.calls.len(), 2);
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_twice"))
        .await;
    assert_eq!(log.len(), 1);
    assert!(outcome.all_ok());
    let (first, second) = (&outcome.calls[0], &outcome.calls[1]);
    assert_eq!(first.key, second.key);
    let mut statuses = [first.status(), second.status()];
    statuses.sort_by_key(|s| format!("{s:?}"));
    assert_eq!(
        statuses,
        [Some(CallStatus::Executed), Some(CallStatus::Replayed)]
    );
    assert_eq!(
        outcome.messages(),
        [json!({"role": "tool", "tool_call_id": "w", "content": [
            {"type": "text", "text": "hello Ada"}, {"type": "text", "text": "hello Ada"}]})]
    );
}

// pins D7, D5: a Chat wrapper's results are one tool message under its id, a text part
// per entry in order (text, a failure, JSON), between the ordinary calls' messages
#[tokio::test]
async fn chat_results_merge_into_one_tool_message() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log, false);
    let turn = one_turn(&chat_message(vec![
        chat_call("a", "greet", r#"{"name":"Bo"}"#),
        chat_wrapper("w", three_entries()),
        chat_call("b", "greet", r#"{"name":"Cy"}"#),
    ]));
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_chat"))
        .await;
    assert_eq!(outcome.calls.len(), 5);
    assert_eq!(log.len(), 5);
    let failure = failure_text(&outcome, "w:1");
    assert_eq!(
        outcome.messages(),
        [
            json!({"role": "tool", "tool_call_id": "a", "content": "hello Bo"}),
            json!({"role": "tool", "tool_call_id": "w", "content": [
                {"type": "text", "text": "hello Ada"},
                {"type": "text", "text": failure},
                {"type": "text", "text": r#"{"args":{"city":"Oslo"},"tool":"get_weather"}"#},
            ]}),
            json!({"role": "tool", "tool_call_id": "b", "content": "hello Cy"}),
        ]
    );
}

// pins D7, D5: a Responses wrapper's results are one `function_call_output` under its
// `call_id`, an `input_text` part per entry in order
#[tokio::test]
async fn responses_results_merge_into_one_output_item() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log, false);
    let arguments = json!({ "tool_uses": three_entries() }).to_string();
    let turn = one_turn(&responses_response(vec![
        responses_call("a", "greet", r#"{"name":"Bo"}"#),
        responses_call("w", WRAPPER, &arguments),
    ]));
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_responses"))
        .await;
    let failure = failure_text(&outcome, "w:1");
    assert_eq!(
        outcome.messages(),
        [
            json!({"type": "function_call_output", "call_id": "a", "output": "hello Bo"}),
            json!({"type": "function_call_output", "call_id": "w", "output": [
                {"type": "input_text", "text": "hello Ada"},
                {"type": "input_text", "text": failure},
                {"type": "input_text", "text": r#"{"args":{"city":"Oslo"},"tool":"get_weather"}"#},
            ]}),
        ]
    );
}

// pins D7, D6: with replay marking on, a replayed wrapper's parts each carry the marker
// their entry would carry alone: a leading line for text, `{"idem","result"}` for JSON,
// the failure too; an entry that never reached the store (an unknown tool) is not marked
#[tokio::test]
async fn replayed_parts_carry_the_marker() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log, true);
    let mut entries = three_entries();
    entries.push(entry("nope", json!({})));
    for (name, document) in [
        (
            "chat",
            chat_message(vec![chat_wrapper("w", entries.clone())]),
        ),
        (
            "responses",
            responses_response(vec![responses_call(
                "w",
                WRAPPER,
                &json!({ "tool_uses": entries }).to_string(),
            )]),
        ),
    ] {
        let turn = one_turn(&document);
        let conversation = Conversation::new(format!("conv_marked_{name}"));
        let first = dispatcher.dispatch_turn(&turn, &conversation).await;
        let again = dispatcher.dispatch_turn(&turn, &conversation).await;
        let failure = failure_text(&again, "w:1");
        let unknown = again.call("w:3").unwrap();
        assert_eq!(
            unknown.reply.result.as_ref().unwrap_err().kind,
            FailureKind::UnknownTool
        );
        let unknown = serde_json::to_string(&json!({"error": {"kind": "unknown_tool",
            "message": unknown.reply.result.as_ref().unwrap_err().message, "retryable": false}}))
        .unwrap();
        let idem = json!({"first_run_at": FIRST_RUN, "replayed": true});
        let texts = [
            format!("[idem: replayed; first run at {FIRST_RUN}]\nhello Ada"),
            serde_json::to_string(&json!({"idem": idem,
                "result": serde_json::from_str::<Value>(&failure).unwrap()}))
            .unwrap(),
            serde_json::to_string(&json!({"idem": idem,
                "result": {"args": {"city": "Oslo"}, "tool": "get_weather"}}))
            .unwrap(),
            unknown,
        ];
        let expected = if name == "chat" {
            json!({"role": "tool", "tool_call_id": "w",
                "content": texts.iter().map(|t| json!({"type": "text", "text": t})).collect::<Vec<_>>()})
        } else {
            json!({"type": "function_call_output", "call_id": "w",
                "output": texts.iter().map(|t| json!({"type": "input_text", "text": t})).collect::<Vec<_>>()})
        };
        assert_eq!(again.messages(), [expected], "{name}");
        // The first dispatch of the turn ran: nothing of it is marked.
        let first_texts: Vec<String> = first.calls.iter().map(|c| c.result.to_string()).collect();
        assert!(first_texts.iter().all(|t| !t.contains("idem")), "{name}");
    }
    assert_eq!(log.len(), 6);
}

// pins D7, D2: a wrapper whose arguments are not `{"tool_uses":[{"recipient_name",
// "parameters"}]}` is one call with one `bad_arguments` error naming the member inside
// the arguments; it runs nothing, and the other call of the message still runs
#[tokio::test]
async fn malformed_wrappers_are_one_bad_call() {
    let cases = [
        (json!({"uses": []}).to_string(), "`tool_uses`"),
        (json!({"tool_uses": "greet"}).to_string(), "`tool_uses`"),
        (json!({"tool_uses": [entry("greet", json!({"name": "Ada"})), "greet"]}).to_string(), "`tool_uses[1]`"),
        (json!({"tool_uses": [{"parameters": {"name": "Ada"}}]}).to_string(), "`tool_uses[0].recipient_name`"),
        (json!({"tool_uses": [{"recipient_name": ["functions.greet"]}]}).to_string(), "`tool_uses[0].recipient_name`"),
        (json!({"tool_uses": [{"recipient_name": "functions.greet", "parameters": "{\"name\":\"Ada\"}"}]}).to_string(), "`tool_uses[0].parameters`"),
        ("{\"tool_uses\": [".to_owned(), "not valid JSON"),
    ];
    for (arguments, names) in cases {
        for (name, document) in [
            (
                "chat",
                chat_message(vec![
                    chat_call("a", "greet", r#"{"name":"Bo"}"#),
                    chat_call("w", WRAPPER, &arguments),
                ]),
            ),
            (
                "responses",
                responses_response(vec![
                    responses_call("a", "greet", r#"{"name":"Bo"}"#),
                    responses_call("w", WRAPPER, &arguments),
                ]),
            ),
        ] {
            let log = EffectLog::new();
            let dispatcher = dispatcher(&log, false);
            let turn = one_turn(&document);
            assert_eq!(turn.calls.len(), 2, "{name} {arguments}");
            let outcome = dispatcher
                .dispatch_turn(&turn, &Conversation::new("conv_bad"))
                .await;
            let wrapper = outcome.call("w").unwrap();
            assert_eq!(wrapper.tool, WRAPPER);
            assert!(wrapper.attempts.is_empty());
            let failure = wrapper.reply.result.as_ref().unwrap_err();
            assert_eq!(
                failure.kind,
                FailureKind::BadArguments,
                "{name} {arguments}"
            );
            assert!(
                failure.message.contains(names),
                "{name}: {}",
                failure.message
            );
            assert!(
                !failure.message.contains("no tool named"),
                "{}",
                failure.message
            );
            assert_eq!(
                outcome.call("a").unwrap().status(),
                Some(CallStatus::Executed)
            );
            assert_eq!(
                log.effects()
                    .iter()
                    .map(|e| e.detail.as_str())
                    .collect::<Vec<_>>(),
                ["Bo"]
            );
            // Its result is an ordinary one, under the wrapper's id.
            let messages = outcome.messages();
            assert_eq!(messages.len(), 2);
            let text = messages[1]
                .get("content")
                .or_else(|| messages[1].get("output"))
                .and_then(Value::as_str)
                .unwrap();
            let error: Value = serde_json::from_str(text).unwrap();
            assert_eq!(error["error"]["kind"], "bad_arguments");
        }
    }
}

// pins D7: a Responses call named `parallel` without `tool_uses` calls the user's tool
// named `parallel`
#[tokio::test]
async fn parallel_without_tool_uses_calls_the_users_tool() {
    #[derive(Deserialize)]
    struct Jobs {
        jobs: u32,
    }
    let dispatcher = Dispatcher::builder()
        .tool(Tool::from_sync("parallel", |a: Jobs, _ctx| {
            Ok::<_, ToolError>(format!("{} jobs", a.jobs))
        }))
        .build()
        .unwrap();
    let turn = one_turn(&responses_response(vec![responses_call(
        "c",
        "parallel",
        r#"{"jobs":4}"#,
    )]));
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_jobs"))
        .await;
    assert_eq!(
        outcome.messages(),
        [json!({"type": "function_call_output", "call_id": "c", "output": "4 jobs"})]
    );
}
