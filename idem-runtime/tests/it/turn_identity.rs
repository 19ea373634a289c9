//! Call ids reused by position across turns (`call_0` in every response): the call scope
//! includes the turn's identity, and each call's report says what that call did
//! (contract D10, D11, K7, K9).

use crate::common;

use common::tools::{engine, logged, spec};
use idem_runtime::dispatch::{
    parse_turns, Conversation, Dispatcher, RetryPolicy, Tool, Turn, TurnOutcome,
};
use idem_runtime::inspect::CallQuery;
use idem_runtime::label::ScopePath;
use idem_runtime::testkit::{EffectLog, FailOn, LosingTransport};
use idem_runtime::{prepare, CallStatus, Engine, Scope, ToolError};
use serde_json::{json, Map, Value};

/// A Chat Completions response `id` whose one call is `call_0` to `cat` on `path`.
fn chat_response(id: &str, path: &str) -> Value {
    json!({"id": id, "object": "chat.completion", "choices": [{"index": 0, "finish_reason": "tool_calls",
        "message": {"role": "assistant", "content": null, "tool_calls": [{"id": "call_0", "type": "function",
            "function": {"name": "cat", "arguments": json!({"path": path}).to_string()}}]}}]})
}

/// The same call as a bare assistant message (no id).
fn chat_message(path: &str) -> Value {
    chat_response("unused", path)["choices"][0]["message"].clone()
}

fn only_turn(document: &Value) -> Turn {
    let mut turns = parse_turns(document).unwrap();
    assert_eq!(turns.len(), 1);
    turns.remove(0)
}

/// Dispatches `chatcmpl-1` and then `chatcmpl-2`, both calling `call_0` to `cat` on
/// `a.txt`, in `conversation`.
async fn two_responses(
    dispatcher: &Dispatcher,
    conversation: &Conversation,
) -> (TurnOutcome, TurnOutcome) {
    let mut outcomes = Vec::new();
    for id in ["chatcmpl-1", "chatcmpl-2"] {
        let turn = only_turn(&chat_response(id, "a.txt"));
        outcomes.push(dispatcher.dispatch_turn(&turn, conversation).await);
    }
    let two = outcomes.pop().unwrap();
    (outcomes.pop().unwrap(), two)
}

fn turn_ids(document: &Value) -> Vec<Option<String>> {
    parse_turns(document)
        .unwrap()
        .into_iter()
        .flat_map(|turn| turn.calls.into_iter().map(|call| call.turn_id))
        .collect()
}

fn some(id: &str) -> Option<String> {
    Some(id.to_owned())
}

// pins D10: every format gives its calls the response's own id as their turn identity
#[test]
fn responses_with_an_id_identify_their_calls() {
    assert_eq!(
        turn_ids(&chat_response("chatcmpl-1", "a.txt")),
        [some("chatcmpl-1")]
    );
    let responses = json!({"id": "resp_1", "object": "response", "output": [
        {"type": "function_call", "id": "fc_1", "call_id": "call_0", "name": "cat", "arguments": "{}"}]});
    assert_eq!(turn_ids(&responses), [some("resp_1")]);
    let anthropic = json!({"id": "msg_1", "type": "message", "role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "cat", "input": {}}]});
    assert_eq!(turn_ids(&anthropic), [some("msg_1")]);
    let gemini = json!({"responseId": "r-1", "candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "cat", "args": {}, "id": "call_0"}}]}}]});
    assert_eq!(turn_ids(&gemini), [some("r-1")]);
}

// pins D10: in a history or an array of turns, a message without an id of its own is
// identified by its position; a response keeps its own id there
#[test]
fn messages_in_a_history_are_identified_by_position() {
    let history = json!([
        {"role": "user", "content": "show me a.txt, then again"},
        chat_message("a.txt"),
        {"role": "tool", "tool_call_id": "call_0", "content": "A"},
        chat_message("a.txt"),
        chat_response("chatcmpl-9", "a.txt"),
    ]);
    assert_eq!(
        turn_ids(&history),
        [some("#1"), some("#3"), some("chatcmpl-9")]
    );
    let items = json!([
        {"role": "user", "content": "cat"},
        {"type": "function_call", "call_id": "call_0", "name": "cat", "arguments": "{}"},
        {"type": "function_call_output", "call_id": "call_0", "output": "A"},
        {"type": "function_call", "call_id": "call_0", "name": "cat", "arguments": "{}"},
    ]);
    assert_eq!(turn_ids(&items), [some("#1"), some("#3")]);
    let contents = json!({"contents": [
        {"role": "user", "parts": [{"text": "cat"}]},
        {"role": "model", "parts": [{"functionCall": {"name": "cat", "args": {}}}]},
    ]});
    assert_eq!(turn_ids(&contents), [some("#1")]);
}

// pins D10: a lone message without an id, and an MCP request, have no turn identity
#[test]
fn a_lone_message_without_an_id_has_no_turn_identity() {
    assert_eq!(turn_ids(&chat_message("a.txt")), [None]);
    let mcp = json!({"jsonrpc": "2.0", "id": 3, "method": "tools/call",
        "params": {"name": "cat", "arguments": {}}});
    assert_eq!(turn_ids(&mcp), [None]);
}

/// `tool` on a fresh store, retried up to 3 times, through `transport` if given.
fn dispatcher_of(tool: Tool, transport: Option<LosingTransport>) -> Dispatcher {
    let builder = Dispatcher::builder()
        .tool(tool)
        .engine(engine())
        .retry(RetryPolicy::immediate(3));
    match transport {
        Some(transport) => builder.transport(transport),
        None => builder,
    }
    .build()
    .unwrap()
}

/// `cat`, keyed by `scope`, logging into `log`.
fn dispatcher(log: &EffectLog, scope: Scope) -> Dispatcher {
    dispatcher_of(logged(spec("cat", scope), log), None)
}

/// [`dispatcher`] whose every call loses its first response after the effect.
fn losing_dispatcher(log: &EffectLog, scope: Scope) -> Dispatcher {
    dispatcher_of(
        logged(spec("cat", scope), log),
        Some(LosingTransport::new(FailOn::FirstAttempt)),
    )
}

// pins D10, K7: under scope = "call", two responses that both carry `call_0` with equal
// arguments are two calls and run twice; a re-dispatch of either (the same response read
// again) replays
#[tokio::test]
async fn reused_call_ids_in_two_responses_run_twice() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log, Scope::Call);
    let conversation = Conversation::new("conv_cat");
    let (one, two) = two_responses(&dispatcher, &conversation).await;
    assert_eq!(log.len(), 2, "a later turn's call_0 is a new call");
    assert_ne!(one.calls[0].key, two.calls[0].key);
    assert_eq!(one.calls[0].status(), Some(CallStatus::Executed));
    assert_eq!(two.calls[0].status(), Some(CallStatus::Executed));

    let second = only_turn(&chat_response("chatcmpl-2", "a.txt"));
    let again = dispatcher.dispatch_turn(&second, &conversation).await;
    assert_eq!(log.len(), 2, "the same response read again replays");
    assert_eq!(again.calls[0].status(), Some(CallStatus::Replayed));
    assert_eq!(again.calls[0].key, two.calls[0].key);
}

// pins D10, K9, D11: a retry of one call after its reply was lost replays, also under
// scope = "call" with a turn identity; the call's own status is still `executed`
#[tokio::test]
async fn a_retry_of_one_of_them_replays() {
    let log = EffectLog::new();
    let dispatcher = losing_dispatcher(&log, Scope::Call);
    let conversation = Conversation::new("conv_cat");
    let (one, two) = two_responses(&dispatcher, &conversation).await;
    for outcome in [one, two] {
        let call = &outcome.calls[0];
        assert_eq!(call.attempt_count(), 2);
        assert_eq!(
            call.status(),
            Some(CallStatus::Replayed),
            "the retry's reply"
        );
        assert_eq!(
            call.own_status(),
            Some(CallStatus::Executed),
            "its own attempt ran it"
        );
    }
    assert_eq!(log.len(), 2);
}

// pins D10: positions tell apart the turns of one history whose messages have no ids
#[tokio::test]
async fn positions_tell_apart_the_turns_of_a_history() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log, Scope::Call);
    let conversation = Conversation::new("conv_cat");
    let history = json!([chat_message("a.txt"), chat_message("a.txt")]);
    for turn in parse_turns(&history).unwrap() {
        dispatcher.dispatch_turn(&turn, &conversation).await;
    }
    assert_eq!(log.len(), 2);
    // The history read again, one turn longer: the earlier turns replay.
    let longer = json!([
        chat_message("a.txt"),
        chat_message("a.txt"),
        chat_message("a.txt")
    ]);
    let mut statuses = Vec::new();
    for turn in parse_turns(&longer).unwrap() {
        let outcome = dispatcher.dispatch_turn(&turn, &conversation).await;
        statuses.push(outcome.calls[0].status().unwrap());
    }
    assert_eq!(
        statuses,
        [
            CallStatus::Replayed,
            CallStatus::Replayed,
            CallStatus::Executed
        ]
    );
    assert_eq!(log.len(), 3);
}

// pins D10: what happens where no identity exists, as documented: two bare messages parsed
// separately that reuse a call id share a record; a turn id set by the caller tells them
// apart
#[tokio::test]
async fn lone_messages_without_an_id_share_a_record_unless_the_caller_names_the_turn() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(&log, Scope::Call);
    let conversation = Conversation::new("conv_cat");
    let first = dispatcher
        .dispatch_turn(&only_turn(&chat_message("a.txt")), &conversation)
        .await;
    let second = dispatcher
        .dispatch_turn(&only_turn(&chat_message("a.txt")), &conversation)
        .await;
    assert_eq!(log.len(), 1);
    assert_eq!(second.calls[0].key, first.calls[0].key);
    assert_eq!(second.calls[0].status(), Some(CallStatus::Replayed));

    let mut named = only_turn(&chat_message("a.txt"));
    named.calls[0].turn_id = Some("my-turn-2".to_owned());
    let third = dispatcher.dispatch_turn(&named, &conversation).await;
    assert_eq!(log.len(), 2);
    assert_eq!(third.calls[0].status(), Some(CallStatus::Executed));
}

// pins D10, K7: calls without a turn identity keep the key they had (conversation + call);
// with one, the key is the one a look-up derives from the scope path
// `conversation=…, turn=…, call=…` (I1)
#[tokio::test]
async fn the_call_scope_path_names_the_turn() {
    let log = EffectLog::new();
    let engine: Engine = engine();
    let dispatcher = Dispatcher::builder()
        .tool(logged(spec("cat", Scope::Call), &log))
        .engine(engine.clone())
        .build()
        .unwrap();
    let conversation = Conversation::new("conv_cat");
    let args = json!({"args": {"path": "a.txt"}});
    let path = |parts: &[(&str, &str)]| {
        parts.iter().fold(ScopePath::new(), |path, (kind, value)| {
            path.with(*kind, *value)
        })
    };

    let lone = dispatcher
        .dispatch_turn(&only_turn(&chat_message("a.txt")), &conversation)
        .await;
    let without = CallQuery::new(
        "cat",
        path(&[("conversation", "conv_cat"), ("call", "call_0")]),
        args.clone(),
    );
    assert_eq!(
        lone.calls[0].key.as_ref(),
        Some(&engine.key_of(&without).unwrap())
    );

    let response = dispatcher
        .dispatch_turn(
            &only_turn(&chat_response("chatcmpl-7", "a.txt")),
            &conversation,
        )
        .await;
    let with = CallQuery::new(
        "cat",
        path(&[
            ("conversation", "conv_cat"),
            ("turn", "chatcmpl-7"),
            ("call", "call_0"),
        ]),
        args,
    );
    assert_eq!(
        response.calls[0].key.as_ref(),
        Some(&engine.key_of(&with).unwrap())
    );
}

// pins D11: with ids repeated across turns, each call's status comes from its own
// outcome: under the default scope the second response's equal call is a replay, even
// though its call id is the first one's
#[tokio::test]
async fn each_report_says_what_its_own_call_did() {
    let log = EffectLog::new();
    let dispatcher = losing_dispatcher(&log, Scope::Conversation);
    let conversation = Conversation::new("conv_cat");
    let (one, two) = two_responses(&dispatcher, &conversation).await;
    assert_eq!(log.len(), 1);
    let (first, second) = (&one.calls[0], &two.calls[0]);
    assert_eq!(first.id, second.id);
    assert_eq!(
        first.status(),
        Some(CallStatus::Replayed),
        "the retry's reply"
    );
    assert_eq!(first.own_status(), Some(CallStatus::Executed));
    let ran = first.ran.as_ref().expect("the first call ran the body");
    assert_eq!((ran.attempt, ran.record.status), (1, CallStatus::Executed));
    assert_eq!(second.own_status(), Some(CallStatus::Replayed));
    assert!(second.ran.is_none());
}

// pins D11: a tool registered under another name than its `#[idempotent]` one (as the main
// job's demo tool is) still reports its own run, in the attempt that ran it
#[tokio::test]
async fn own_runs_are_seen_whatever_name_the_tool_is_registered_under() {
    let log = EffectLog::new();
    let demo_spec = spec("demo_effect", Scope::Conversation);
    let effects = log.clone();
    let demo = Tool::from_async("cat", move |args: Map<String, Value>, _ctx| {
        let effects = effects.clone();
        async move {
            prepare(demo_spec, None, |b| b.key("args", &args).map(drop))?
                .run(async move {
                    effects.record("demo_effect", Value::Object(args).to_string());
                    Ok::<_, ToolError>("done".to_owned())
                })
                .await
        }
    });
    let dispatcher = dispatcher_of(demo, Some(LosingTransport::new(FailOn::FirstAttempt)));
    let conversation = Conversation::new("conv_demo");
    let (one, two) = two_responses(&dispatcher, &conversation).await;
    assert_eq!(log.len(), 1);
    assert_eq!(one.calls[0].own_status(), Some(CallStatus::Executed));
    assert_eq!(one.calls[0].ran.as_ref().map(|run| run.attempt), Some(1));
    assert_eq!(two.calls[0].own_status(), Some(CallStatus::Replayed));
}
