//! One assistant message's calls: concurrency, bad calls, duplicates, fresh keys per call
//! (contract D2, D4, K7, K9).

use crate::common;

use std::sync::Arc;
use std::time::Duration;

use common::tools::{engine, logged, send_refund, spec};
use common::transcript;
use idem_runtime::dispatch::{
    parse_turns, Conversation, Dispatcher, FailureKind, RetryPolicy, Tool, Turn,
};
use idem_runtime::testkit::EffectLog;
use idem_runtime::{prepare, CallStatus, Scope, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::{json, Value};
use tokio::sync::Barrier;

fn one_turn(document: &Value) -> Turn {
    let mut turns = parse_turns(document).unwrap();
    assert_eq!(turns.len(), 1);
    turns.remove(0)
}

static MEET: ToolSpec = ToolSpec::new("meet");

#[derive(Deserialize)]
struct MeetArgs {
    who: String,
}

// pins D4: the calls of one message run concurrently: each body waits for the other at a
// barrier, which would never open if they ran one after the other
#[tokio::test]
async fn calls_of_one_turn_run_concurrently() {
    let barrier = Arc::new(Barrier::new(2));
    let meet = Tool::from_async("meet", move |a: MeetArgs, _ctx| {
        let barrier = Arc::clone(&barrier);
        async move {
            prepare(&MEET, None, |b| b.key("who", &a.who).map(drop))?
                .run(async move {
                    barrier.wait().await;
                    Ok::<_, ToolError>(format!("met {}", a.who))
                })
                .await
        }
    });
    let dispatcher = Dispatcher::builder()
        .tool(meet)
        .engine(engine())
        .build()
        .unwrap();
    let turn = one_turn(&json!({"role": "assistant", "tool_calls": [
        {"id": "a", "type": "function", "function": {"name": "meet", "arguments": "{\"who\":\"Ada\"}"}},
        {"id": "b", "type": "function", "function": {"name": "meet", "arguments": "{\"who\":\"Bo\"}"}},
    ]}));
    let outcome = tokio::time::timeout(
        Duration::from_secs(10),
        dispatcher.dispatch_turn(&turn, &Conversation::new("conv_meet")),
    )
    .await
    .expect("the two calls ran one after the other");
    assert!(outcome.all_ok());
}

// pins D2: unknown tool, unusable arguments, arguments that do not fit the parameters: each
// gets an error result and does not run; the good call of the same message still runs
#[tokio::test]
async fn bad_calls_get_error_results_and_the_others_still_run() {
    let log = EffectLog::new();
    let dispatcher = Dispatcher::builder()
        .tool(send_refund(&log))
        .engine(engine())
        .retry(RetryPolicy::immediate(3))
        .build()
        .unwrap();
    let call = |id: &str, name: &str, arguments: &str| json!({"id": id, "type": "function", "function": {"name": name, "arguments": arguments}});
    let turn = one_turn(&json!({"role": "assistant", "tool_calls": [
        call("unknown", "send_refnud", "{\"order\":1,\"cents\":100}"),
        call("not_json", "send_refund", "{\"order\":1,"),
        call("not_object", "send_refund", "[1, 100]"),
        call("wrong_type", "send_refund", "{\"order\":\"seven\",\"cents\":100}"),
        call("missing", "send_refund", "{\"order\":7}"),
        call("extra", "send_refund", "{\"order\":7,\"cents\":100,\"note\":\"x\"}"),
        call("good", "send_refund", "{\"order\":7,\"cents\":100}"),
    ]}));
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_bad"))
        .await;
    let expected = [
        ("unknown", FailureKind::UnknownTool, 0),
        ("not_json", FailureKind::BadArguments, 0),
        ("not_object", FailureKind::BadArguments, 0),
        ("wrong_type", FailureKind::BadArguments, 1),
        ("missing", FailureKind::BadArguments, 1),
        ("extra", FailureKind::BadArguments, 1),
    ];
    for (id, kind, attempts) in expected {
        let report = outcome.call(id).unwrap();
        let failure = report.reply.result.as_ref().unwrap_err();
        assert_eq!((failure.kind, failure.retryable), (kind, false), "{id}");
        assert_eq!(report.attempt_count(), attempts, "{id}");
        assert_eq!(report.reply.record, None, "{id} never reached the store");
        let content: Value =
            serde_json::from_str(report.result["content"].as_str().unwrap()).unwrap();
        assert_eq!(content["error"]["kind"], json!(kind), "{id}");
    }
    let unknown = outcome.call("unknown").unwrap();
    assert!(unknown
        .reply
        .result
        .as_ref()
        .unwrap_err()
        .message
        .contains("known tools: send_refund"));
    let good = outcome.call("good").unwrap();
    assert!(good.is_ok());
    assert_eq!(good.status(), Some(CallStatus::Executed));
    assert_eq!(log.len(), 1, "only the good call had an effect");
}

// pins K7, D2: a conversation-scoped tool without a conversation id fails before running
#[tokio::test]
async fn missing_conversation_id_is_a_layer_error_not_a_run() {
    let log = EffectLog::new();
    let dispatcher = Dispatcher::builder()
        .tool(send_refund(&log))
        .engine(engine())
        .retry(RetryPolicy::immediate(3))
        .build()
        .unwrap();
    let turn = one_turn(
        &json!({"type": "function_call", "call_id": "c1", "name": "send_refund",
                                "arguments": "{\"order\":7,\"cents\":100}"}),
    );
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::without_id())
        .await;
    let report = &outcome.calls[0];
    let failure = report.reply.result.as_ref().unwrap_err();
    assert_eq!(failure.kind, FailureKind::Layer);
    assert!(!failure.retryable);
    assert_eq!(report.attempt_count(), 1, "not retried");
    assert!(log.is_empty());
}

// pins D4, S5: three identical Gemini calls (no ids) share one key: one effect, three
// successful results, one executed and two replayed
#[tokio::test]
async fn identical_gemini_calls_have_one_effect_and_three_results() {
    let log = EffectLog::new();
    let dispatcher = Dispatcher::builder()
        .tool(logged(spec("generate_topic", Scope::Conversation), &log))
        .engine(engine())
        .retry(RetryPolicy::immediate(3))
        .build()
        .unwrap();
    let turn = one_turn(&transcript("gemini-identical-calls-no-id"));
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_topics"))
        .await;
    assert_eq!(log.len(), 1);
    assert!(outcome.all_ok());
    let key = outcome.calls[0].key.clone().unwrap();
    assert_eq!(log.count_for(&key), 1);
    let mut statuses = Vec::new();
    for report in &outcome.calls {
        assert_eq!(report.key.as_ref(), Some(&key));
        assert_eq!(
            report.attempt_count(),
            1,
            "waited for the owner, no retry needed"
        );
        statuses.push(report.status().unwrap());
    }
    statuses.sort_by_key(|s| *s == CallStatus::Replayed);
    assert_eq!(
        statuses,
        [
            CallStatus::Executed,
            CallStatus::Replayed,
            CallStatus::Replayed
        ]
    );
    let messages = outcome.messages();
    let parts = messages[0]["parts"].as_array().unwrap();
    assert_eq!(parts.len(), 3);
    for part in parts {
        assert_eq!(
            part["functionResponse"]["response"]["result"]["tool"],
            "generate_topic"
        );
    }
}

// pins K7, D4: with `scope = "call"` identical calls are distinct intents (three effects)
#[tokio::test]
async fn call_scoped_identical_calls_each_run() {
    let log = EffectLog::new();
    let dispatcher = Dispatcher::builder()
        .tool(logged(spec("generate_topic", Scope::Call), &log))
        .engine(engine())
        .build()
        .unwrap();
    let turn = one_turn(&transcript("gemini-identical-calls-no-id"));
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_dice"))
        .await;
    assert!(outcome.all_ok());
    assert_eq!(log.len(), 3);
}

// pins K9: a provider reusing `call_0` in the next turn does not carry the first call's key:
// each dispatched call derives its own key from its own arguments
#[tokio::test]
async fn reused_provider_call_id_gets_a_fresh_key() {
    let log = EffectLog::new();
    let dispatcher = Dispatcher::builder()
        .tool(send_refund(&log))
        .tool(logged(spec("send_voucher", Scope::Conversation), &log))
        .engine(engine())
        .build()
        .unwrap();
    let conversation = Conversation::new("conv_reuse");
    let message = |name: &str, arguments: &str| {
        json!({"role": "assistant", "tool_calls": [
            {"id": "call_0", "type": "function", "function": {"name": name, "arguments": arguments}}]})
    };
    let turns = [
        message("send_refund", "{\"order\":1,\"cents\":100}"),
        message("send_refund", "{\"order\":2,\"cents\":100}"),
        message("send_voucher", "{\"order\":1,\"cents\":100}"),
    ];
    let mut keys = Vec::new();
    for document in &turns {
        let outcome = dispatcher
            .dispatch_turn(&one_turn(document), &conversation)
            .await;
        assert_eq!(outcome.calls[0].status(), Some(CallStatus::Executed));
        keys.push(outcome.calls[0].key.clone().unwrap());
    }
    assert_eq!(log.len(), 3);
    assert_ne!(keys[0], keys[1]);
    assert_ne!(keys[0], keys[2]);
    assert_ne!(keys[1], keys[2]);
}

// pins D2: two tools under one name cannot be registered
#[test]
fn duplicate_tool_names_are_refused() {
    let log = EffectLog::new();
    let error = Dispatcher::builder()
        .tool(send_refund(&log))
        .tool(send_refund(&log))
        .build()
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "two tools are registered under the name `send_refund`"
    );
}

// pins D4: a turn's dispatch can be spawned on a multi-threaded runtime
#[test]
fn dispatch_futures_are_send() {
    fn assert_send<T: Send>(_: &T) {}
    fn assert_send_sync<T: Send + Sync>() {}
    assert_send_sync::<Dispatcher>();
    let log = EffectLog::new();
    let dispatcher = Dispatcher::builder()
        .tool(send_refund(&log))
        .build()
        .unwrap();
    let turn = one_turn(&json!({"role": "assistant", "tool_calls": []}));
    let conversation = Conversation::new("conv_send");
    let future = dispatcher.dispatch_turn(&turn, &conversation);
    assert_send(&future);
}
