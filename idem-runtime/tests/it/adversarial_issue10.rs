//! Adversarial review of D7 (parallel wrappers), D8 (integral numbers), D9 (bare MCP
//! params), D10 (turn identity) and D11 (each call's own outcome).
//!
//! Each finding of the review is pinned here as the rule it broke, now kept; `held_*` tests
//! pin what was tried and held. Findings documented as limits rather than fixed (an
//! ordinary call whose provider id is `<wrapper id>:<i>`, a turn dispatched from a response
//! and again from a history, windowed histories) are stated in D7 and D10.

use crate::common;
use crate::support::{Intercept, Intercepted};

use common::chat::{
    chat_call, chat_message, chat_response, chat_wrapper, entry, one_turn, WRAPPER,
};
use std::collections::HashMap;
use std::sync::Arc;
use std::time::Duration;

use common::tools::{engine, logged, spec, yield_once};
use idem_runtime::dispatch::{
    parse_turns, Conversation, Dispatcher, FailureKind, InProcess, Provider, RetryPolicy, Tool,
    ToolReply, ToolRequest, Transport, TransportError, TransportFuture, Turn, TurnOutcome,
};
use idem_runtime::inspect::CallQuery;
use idem_runtime::label::ScopePath;
use idem_runtime::store::{CompleteRequest, Completion, StoreFuture};
use idem_runtime::testkit::{EffectLog, FailOn, LosingTransport};
use idem_runtime::{prepare, CallStatus, Engine, MemoryStore, Scope, Store, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::{json, Value};

fn dispatcher_with(tools: Vec<Tool>, engine: Engine) -> Dispatcher {
    Dispatcher::builder()
        .tools(tools)
        .engine(engine)
        .retry(RetryPolicy::immediate(3))
        .build()
        .unwrap()
}

// =======================================================================================
// D7: parallel wrappers
// =======================================================================================

// pins D7, D2: nested wrappers, empty names and `functions.` alone are each one call that
// fails as an unknown tool, the others still run, nothing panics; the wrapper gets exactly
// one tool message, between the ordinary calls' messages.
#[tokio::test]
async fn hostile_entries_fail_alone_and_the_wrapper_answers_once_in_place() {
    let log = EffectLog::new();
    let dispatcher = dispatcher_with(
        vec![logged(spec("get_weather", Scope::Conversation), &log)],
        engine(),
    );
    let nested = json!({"recipient_name": WRAPPER,
        "parameters": {"tool_uses": [entry("get_weather", json!({"city": "Rome"}))]}});
    let message = chat_message(vec![
        chat_call("a", "get_weather", r#"{"city":"Oslo"}"#),
        chat_wrapper(
            "w",
            vec![
                nested,
                json!({"recipient_name": "functions."}),
                json!({"recipient_name": ""}),
                entry("nope", json!({})),
                entry("get_weather", json!({"city": "Bergen"})),
            ],
        ),
        chat_call("b", "get_weather", r#"{"city":"Paris"}"#),
    ]);
    let turn = one_turn(&message);
    assert_eq!(turn.calls.len(), 7);
    assert_eq!(turn.calls[1].name, WRAPPER, "one level only");
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("c"))
        .await;
    let messages = outcome.messages();
    let ids: Vec<&str> = messages
        .iter()
        .map(|m| m["tool_call_id"].as_str().unwrap())
        .collect();
    assert_eq!(ids, ["a", "w", "b"]);
    assert_eq!(messages[1]["content"].as_array().unwrap().len(), 5);
    for i in 1..=4 {
        let failure = outcome.calls[i].reply.result.as_ref().unwrap_err();
        assert_eq!(failure.kind, FailureKind::UnknownTool, "{i}");
    }
    assert_eq!(log.len(), 3, "Oslo, Bergen, Paris");
}

// pins D7, D4: a big wrapper (5 000 entries, 2 500 distinct) parses and dispatches; equal
// entries share one effect and the wrapper answers once with a part per entry.
#[tokio::test]
async fn a_huge_wrapper_is_one_message_with_one_effect_per_intent() {
    let log = EffectLog::new();
    let dispatcher = dispatcher_with(
        vec![logged(spec("echo", Scope::Conversation), &log)],
        engine(),
    );
    let entries: Vec<Value> = (0..5_000)
        .map(|i| entry("echo", json!({"n": i % 2_500})))
        .collect();
    let turn = one_turn(&chat_message(vec![chat_wrapper("w", entries)]));
    assert_eq!(turn.calls.len(), 5_000);
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("c"))
        .await;
    let messages = outcome.messages();
    assert_eq!(messages.len(), 1);
    assert_eq!(messages[0]["content"].as_array().unwrap().len(), 5_000);
    assert_eq!(log.len(), 2_500);
}

// pins D7: two different wrappers next to each other stay two messages; a call after a
// wrapper whose id equals the wrapper's is not merged into it.
#[tokio::test]
async fn adjacent_wrappers_stay_apart() {
    let log = EffectLog::new();
    let dispatcher = dispatcher_with(
        vec![logged(spec("echo", Scope::Conversation), &log)],
        engine(),
    );
    let message = chat_message(vec![
        chat_wrapper("w1", vec![entry("echo", json!({"n": 1}))]),
        chat_wrapper("w2", vec![entry("echo", json!({"n": 2}))]),
        chat_call("w2", "echo", r#"{"n": 3}"#),
    ]);
    let outcome = dispatcher
        .dispatch_turn(&one_turn(&message), &Conversation::new("c"))
        .await;
    let messages = outcome.messages();
    assert_eq!(messages.len(), 3);
    assert!(messages[2]["content"].is_string());
}

// =======================================================================================
// D8: integral numbers where serde buffers the value
// =======================================================================================

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
#[serde(tag = "action", rename_all = "snake_case")]
enum Internally {
    Refund { order: u64 },
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
#[serde(tag = "type", content = "args", rename_all = "snake_case")]
enum Adjacently {
    Refund { order: u64 },
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
#[serde(untagged)]
enum Untagged {
    Order { order: u64 },
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Page {
    limit: u32,
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Flattened {
    order: u64,
    #[serde(flatten)]
    page: Page,
}

/// A tool `name` whose parameters are `A`; answers "ok".
fn typed<A: serde::de::DeserializeOwned + Send + 'static>(name: &'static str) -> Tool {
    Tool::from_sync(name, |_a: A, _ctx| Ok::<_, ToolError>("ok"))
}

/// One Gemini turn calling a tool of each buffered shape with `order` (and `limit`), as
/// written.
async fn buffered_shapes(order: Value, limit: Value) -> TurnOutcome {
    let dispatcher = dispatcher_with(
        vec![
            typed::<Internally>("internally"),
            typed::<Adjacently>("adjacently"),
            typed::<Untagged>("untagged"),
            typed::<Flattened>("flattened"),
        ],
        engine(),
    );
    let gemini = json!({"responseId": "r1", "candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "internally", "args": {"action": "refund", "order": order}}},
        {"functionCall": {"name": "adjacently", "args": {"type": "refund", "args": {"order": order}}}},
        {"functionCall": {"name": "untagged", "args": {"order": order}}},
        {"functionCall": {"name": "flattened", "args": {"order": order, "limit": limit}}},
    ]}}]});
    dispatcher
        .dispatch_turn(&one_turn(&gemini), &Conversation::new("c"))
        .await
}

// pins D8: an integer parameter inside an internally tagged, adjacently tagged or untagged
// enum, or a `#[serde(flatten)]`ed struct (values serde buffers before it knows their
// type), accepts Gemini's `7.0`: the arguments are decoded once more with integral numbers
// written as integers (found by the issue-10 adversarial review)
#[tokio::test]
async fn integral_floats_are_accepted_where_serde_buffers() {
    let outcome = buffered_shapes(json!(7.0), json!(20.0)).await;
    let refused: Vec<String> = outcome
        .calls
        .iter()
        .filter(|c| !c.is_ok())
        .map(|c| {
            format!(
                "{}: {}",
                c.tool,
                c.reply.result.as_ref().unwrap_err().message
            )
        })
        .collect();
    assert!(refused.is_empty(), "{refused:#?}");
}

// pins D8: the integer spellings of the same calls are accepted (the shapes themselves are
// fine), so only D8 is at stake above.
#[tokio::test]
async fn integer_spellings_of_the_buffered_shapes_are_accepted() {
    let outcome = buffered_shapes(json!(7), json!(20)).await;
    assert!(outcome.all_ok(), "{:#?}", outcome.calls);
}

#[derive(Debug, Deserialize)]
#[allow(dead_code)]
struct Everything {
    a: u8,
    b: i8,
    c: u16,
    d: i16,
    e: u32,
    f: i32,
    g: u64,
    h: i64,
    i: u128,
    j: i128,
    k: Option<Vec<HashMap<String, (u8, i64)>>>,
    l: std::num::NonZeroU64,
    m: Box<u32>,
    s: String,
}

// pins D8: every integer type, nested, optional, map values, tuples, NonZero and Box read
// `N.0`; a string "57.0" is never a number, and the error names the path.
#[tokio::test]
#[allow(clippy::excessive_precision)] // the exact spellings of the edge doubles are the point
async fn every_integer_type_and_strings_stay_strings() {
    let dispatcher = dispatcher_with(vec![typed::<Everything>("all")], engine());
    let args = |s: Value| {
        json!({"a": 255.0, "b": -128.0, "c": 6.5535e4, "d": -0.0, "e": 4294967295.0,
            "f": -2147483648.0, "g": 1.8446744073709550e19, "h": -9.2233720368547748e18,
            "i": 1e19, "j": -1e18, "k": [{"x": [1.0, -2.0]}], "l": 1.0, "m": 3e0, "s": s})
    };
    let gemini = json!({"responseId": "r1", "candidates": [{"content": {"role": "model", "parts": [
        {"functionCall": {"name": "all", "args": args(json!("57.0"))}},
        {"functionCall": {"name": "all", "args": args(json!(57.0))}},
    ]}}]});
    let outcome = dispatcher
        .dispatch_turn(&one_turn(&gemini), &Conversation::new("c"))
        .await;
    assert!(outcome.calls[0].is_ok(), "{:#?}", outcome.calls[0].reply);
    let refused = outcome.calls[1].reply.result.as_ref().unwrap_err();
    assert_eq!(refused.kind, FailureKind::BadArguments);
    assert!(
        refused.message.contains("argument `s`"),
        "{}",
        refused.message
    );
}

// =======================================================================================
// D9: bare MCP params lookalikes
// =======================================================================================

// pins D9, D2: inside an OpenAI Responses item list, a bare `CallToolRequestParams` object
// (or a whole `tools/call` request) is never dropped silently: the list is refused as
// mixing formats, as it is for a Chat, Anthropic or Gemini message
#[test]
fn mcp_calls_inside_a_responses_item_list_are_not_dropped() {
    let items = json!([
        {"type": "function_call", "call_id": "c1", "name": "get_weather", "arguments": "{}"},
        {"name": "send_refund", "arguments": {"order": 7}},
    ]);
    match parse_turns(&items) {
        Err(_) => {}
        Ok(turns) => {
            let calls: Vec<&str> = turns
                .iter()
                .flat_map(|t| t.calls.iter().map(|c| c.name.as_str()))
                .collect();
            assert!(
                calls.contains(&"send_refund"),
                "the refund call was dropped without an error: {calls:?}"
            );
        }
    }
}

// pins D9: lookalikes with a `name` member are not bare params: a Chat `tool` message or
// legacy `function` message with `name`, an OpenAI `function` object (string arguments),
// Gemini's `functionCall` (`args`), an Anthropic `tool_use` block, a tool definition.
// A `{"name": …}` alone in an array of Chat messages is read as an MCP call (it was an
// UnknownShape error before D9: no previously accepted document changes meaning).
#[test]
fn lookalikes_are_not_bare_params() {
    let history = json!([
        {"role": "user", "content": "hi", "name": "alice"},
        {"role": "tool", "tool_call_id": "c", "name": "get_weather", "content": "sunny"},
        {"role": "function", "name": "get_weather", "content": "sunny"},
    ]);
    assert!(parse_turns(&history).unwrap().is_empty());
    for lookalike in [
        json!({"name": "get_weather", "arguments": "{\"city\":\"Oslo\"}"}),
        json!({"name": "get_weather", "args": {"city": "Oslo"}}),
        json!({"type": "tool_use", "id": "t", "name": "get_weather", "input": {}}),
        json!({"name": "get_weather", "description": "d", "inputSchema": {}}),
        json!({"name": "get_weather", "parameters": {}}),
    ] {
        assert!(parse_turns(&lookalike).is_err(), "{lookalike}");
    }
    let mixed = json!([{"role": "user", "content": "hi"}, {"name": "get_weather"}]);
    let turns = parse_turns(&mixed).unwrap();
    assert_eq!(turns[0].provider, Provider::Mcp);
}

// =======================================================================================
// D10: turn identity
// =======================================================================================

// pins D10, D1: in an array whose elements are Gemini `{"contents": […]}` bodies, each
// element's turns have their own identity (`#<element>.<position>`): a call-scoped call of
// the second never replays the first's outcome
#[tokio::test]
async fn contents_bodies_in_an_array_have_their_own_turn_identities() {
    let body = |city: &str| {
        json!({"contents": [{"role": "model", "parts": [
            {"functionCall": {"name": "roll_dice", "args": {"sides": 6, "note": city}}}]}]})
    };
    let same = |_: &str| {
        json!({"contents": [{"role": "model", "parts": [
            {"functionCall": {"name": "roll_dice", "args": {"sides": 6}}}]}]})
    };
    let turns = parse_turns(&json!([body("a"), body("b")])).unwrap();
    let identities: Vec<(Option<String>, String)> = turns
        .iter()
        .map(|t| (t.calls[0].turn_id.clone(), t.calls[0].id.clone()))
        .collect();
    assert_ne!(
        identities[0], identities[1],
        "two turns at positions 0 and 1 of the array must not share (turn, call id)"
    );
    let log = EffectLog::new();
    let dispatcher = dispatcher_with(vec![logged(spec("roll_dice", Scope::Call), &log)], engine());
    for turn in parse_turns(&json!([same("a"), same("b")])).unwrap() {
        dispatcher
            .dispatch_turn(&turn, &Conversation::new("c"))
            .await;
    }
    assert_eq!(log.len(), 2);
}

// pins D10, I1, X1: a call-scoped call dispatched without a conversation id but with a
// turn identity is keyed under the scope path `turn=…/call=…`, which `ScopePath` parses
// (as `idem key --scope turn=t --scope call=id` does), giving the call's key
#[tokio::test]
async fn a_turn_scope_path_without_a_conversation_can_be_named() {
    let log = EffectLog::new();
    let engine = engine();
    let dispatcher = dispatcher_with(
        vec![logged(spec("roll_dice", Scope::Call), &log)],
        engine.clone(),
    );
    let message = chat_message(vec![chat_call("call_0", "roll_dice", r#"{"sides":6}"#)]);
    let outcome = dispatcher
        .dispatch_turn(
            &one_turn(&chat_response("chatcmpl-1", message)),
            &Conversation::without_id(),
        )
        .await;
    let key = outcome.calls[0]
        .key
        .clone()
        .expect("the call derived a key");
    let unchecked = ScopePath::new()
        .with("turn", "chatcmpl-1")
        .with("call", "call_0");
    let query = CallQuery::new(
        "roll_dice",
        unchecked.clone(),
        json!({"args": {"sides": 6}}),
    );
    assert_eq!(engine.key_of(&query).unwrap(), key, "the runtime's path");
    let as_the_cli_reads_it = ScopePath::from_parts(unchecked.parts().to_vec());
    assert!(
        as_the_cli_reads_it.is_ok(),
        "the path of a key the runtime derives: {as_the_cli_reads_it:?}"
    );
}

// pins D10, K5: without a turn identity the call scope key is `key_of`'s for
// `conversation=…/call=…` (key.rs, label.rs and canonical/ are unchanged since 588acfa, and
// golden_keys passes), and with one it is the key `key_of` derives from the checked path
// `conversation=…/turn=…/call=…` (the CLI's path).
#[tokio::test]
async fn keys_without_turn_identity_are_unchanged() {
    let engine = engine();
    let path = |parts: &[(&str, &str)]| {
        ScopePath::from_parts(
            parts
                .iter()
                .map(|(k, v)| idem_runtime::ScopePart {
                    kind: (*k).into(),
                    value: (*v).into(),
                })
                .collect(),
        )
        .unwrap()
    };
    let args = json!({"args": {"path": "a.txt"}});
    let before = engine
        .key_of(&CallQuery::new(
            "cat",
            path(&[("conversation", "conv_cat"), ("call", "call_0")]),
            args.clone(),
        ))
        .unwrap();
    let log = EffectLog::new();
    let dispatcher = dispatcher_with(vec![logged(spec("cat", Scope::Call), &log)], engine.clone());
    let message = chat_message(vec![chat_call("call_0", "cat", r#"{"path":"a.txt"}"#)]);
    let bare = dispatcher
        .dispatch_turn(&one_turn(&message), &Conversation::new("conv_cat"))
        .await;
    assert_eq!(bare.calls[0].key.as_ref(), Some(&before));
    let response = dispatcher
        .dispatch_turn(
            &one_turn(&chat_response("chatcmpl-7", message)),
            &Conversation::new("conv_cat"),
        )
        .await;
    let with_turn = engine
        .key_of(&CallQuery::new(
            "cat",
            path(&[
                ("conversation", "conv_cat"),
                ("turn", "chatcmpl-7"),
                ("call", "call_0"),
            ]),
            args,
        ))
        .unwrap();
    assert_eq!(response.calls[0].key.as_ref(), Some(&with_turn));
    // What `idem key --tool cat --args '{"args":{"path":"a.txt"}}'` printed (idem-cli built
    // from this commit) for `--scope conversation=conv_cat [--scope turn=chatcmpl-7]
    // --scope call=call_0`.
    assert_eq!(
        before.as_str(),
        "42e1cd8988c9a5c96dc27cd41c7bbd349b8b2c2fdf36136d180725808d8adaa9"
    );
    assert_eq!(
        with_turn.as_str(),
        "08f363cfa6d38c498678f4f674e227e97af8cb144110d1e9087edcf91de40e9f"
    );
}

// =======================================================================================
// D11: each call's own outcome
// =======================================================================================

static REFUND: ToolSpec = ToolSpec::new("refund");
static NOTIFY: ToolSpec = ToolSpec::new("notify_customer");

#[derive(Deserialize)]
struct RefundArgs {
    order: u64,
}

/// `refund(order)`: refunds (keyed on the order), then notifies the customer through
/// another `#[idempotent]` tool keyed on the conversation alone (one notice per
/// conversation): two idempotent calls in one handler.
fn refund_then_notify(log: &EffectLog) -> Tool {
    let log = log.clone();
    Tool::from_async("refund", move |a: RefundArgs, _ctx| {
        let log = log.clone();
        async move {
            let refund_log = log.clone();
            let refunded = prepare(&REFUND, None, |b| b.key("order", &a.order).map(drop))?
                .run(async move {
                    refund_log.record("refund", a.order.to_string());
                    Ok::<_, ToolError>(format!("refunded order {}", a.order))
                })
                .await?;
            let notify_log = log.clone();
            prepare(&NOTIFY, None, |b| b.key("kind", &"refund").map(drop))?
                .run(async move {
                    notify_log.record("notify_customer", "refund");
                    Ok::<_, ToolError>(())
                })
                .await?;
            Ok::<_, ToolError>(refunded)
        }
    })
}

// pins D11, D6, S12: a handler that makes two `#[idempotent]` calls reports the outcome
// of the key the dispatched call carries (K9), not the last one's: the refund that ran is
// `executed` and unmarked although the notice after it replayed
#[tokio::test]
async fn a_handler_reports_the_outcome_of_the_key_it_carries() {
    let log = EffectLog::new();
    let dispatcher = dispatcher_with(vec![refund_then_notify(&log)], engine()).mark_replays(true);
    let conversation = Conversation::new("conv_refunds");
    let message = |id: &str, order: u64| {
        chat_message(vec![chat_call(
            id,
            "refund",
            &json!({"order": order}).to_string(),
        )])
    };
    let first = dispatcher
        .dispatch_turn(&one_turn(&message("call_1", 7)), &conversation)
        .await;
    assert_eq!(first.calls[0].own_status(), Some(CallStatus::Executed));
    let second = dispatcher
        .dispatch_turn(&one_turn(&message("call_2", 8)), &conversation)
        .await;
    let refunds = log.effects().iter().filter(|e| e.tool == "refund").count();
    assert_eq!(refunds, 2, "order 8 was refunded now");
    let report = &second.calls[0];
    let problems = [
        (report.own_status() != Some(CallStatus::Executed))
            .then(|| format!("own_status {:?}", report.own_status())),
        (report.status() != Some(CallStatus::Executed))
            .then(|| format!("status {:?}", report.status())),
        (report.reply.record.as_ref().map(|r| &r.key) != report.key.as_ref())
            .then(|| "reply.record.key is not the call's key".to_owned()),
        (report.result["content"] != "refunded order 8")
            .then(|| format!("content {}", report.result["content"])),
    ];
    let problems: Vec<String> = problems.into_iter().flatten().collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

static INNER: ToolSpec = ToolSpec::new("inner_name");

// pins D11: a tool registered as `outer` whose `#[idempotent]` name is `inner_name` (so no
// key is carried, K9) under a transport that loses the first reply: own_status executed,
// status replayed, one effect.
#[tokio::test]
async fn a_renamed_tool_under_a_losing_transport() {
    let log = EffectLog::new();
    let tool = {
        let log = log.clone();
        Tool::from_async("outer", move |a: RefundArgs, _ctx| {
            let log = log.clone();
            async move {
                prepare(&INNER, None, |b| b.key("order", &a.order).map(drop))?
                    .run(async move {
                        log.record("inner_name", a.order.to_string());
                        yield_once().await;
                        Ok::<_, ToolError>(a.order)
                    })
                    .await
            }
        })
    };
    let dispatcher = Dispatcher::builder()
        .tool(tool)
        .engine(engine())
        .retry(RetryPolicy::immediate(3))
        .transport(LosingTransport::new(FailOn::FirstAttempt))
        .build()
        .unwrap();
    let message = chat_message(vec![chat_call("call_1", "outer", r#"{"order": 7}"#)]);
    let outcome = dispatcher
        .dispatch_turn(&one_turn(&message), &Conversation::new("c"))
        .await;
    let report = &outcome.calls[0];
    assert_eq!(log.len(), 1);
    assert_eq!(report.status(), Some(CallStatus::Replayed));
    assert_eq!(report.own_status(), Some(CallStatus::Executed));
    assert_eq!(report.ran.as_ref().map(|r| r.attempt), Some(1));
    assert!(report.key.is_some());
}

/// A transport that starts the tool on a task of its own, gives up after `patience` (a
/// timeout: the reply is lost, the body keeps running) and answers later attempts in
/// process.
#[derive(Debug)]
struct ImpatientTransport {
    patience: Duration,
}

impl Transport for ImpatientTransport {
    fn invoke(&self, request: ToolRequest) -> TransportFuture {
        let patience = self.patience;
        if request.attempt > 1 {
            return InProcess.invoke(request);
        }
        Box::pin(async move {
            let running = tokio::spawn(InProcess.invoke(request));
            match tokio::time::timeout(patience, running).await {
                Ok(Ok(reply)) => reply,
                _ => Err::<ToolReply, _>(TransportError::Timeout {
                    message: "no reply in time".into(),
                }),
            }
        })
    }
}

/// A memory store whose `complete` acknowledges `ack_delay` after the write landed (a
/// network store's round trip back).
#[derive(Debug)]
struct SlowAck {
    ack_delay: Duration,
}

impl Intercept for SlowAck {
    fn complete<'a>(
        &'a self,
        inner: &'a dyn Store,
        req: CompleteRequest<'a>,
    ) -> StoreFuture<'a, Completion> {
        let delay = self.ack_delay;
        Box::pin(async move {
            let done = inner.complete(req).await;
            tokio::time::sleep(delay).await;
            done
        })
    }
    fn backend(&self) -> Option<&'static str> {
        Some("slow-ack")
    }
}

fn slow_body(log: &EffectLog) -> Tool {
    let log = log.clone();
    Tool::from_async("refund", move |a: RefundArgs, _ctx| {
        let log = log.clone();
        async move {
            prepare(&REFUND, None, |b| b.key("order", &a.order).map(drop))?
                .run(async move {
                    tokio::time::sleep(Duration::from_millis(100)).await;
                    log.record("refund", a.order.to_string());
                    Ok::<_, ToolError>(a.order)
                })
                .await
        }
    })
}

// pins D11: the transport times out while the body still runs; the retry waits for the
// body (S5) and replays it, possibly before the first attempt's call has published its
// outcome. The call is still `executed`: the replayed record has the key and fence its
// own first attempt claimed. Run 60 times (the race is seen a few times in a hundred).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_that_outlives_its_timed_out_attempt_is_the_calls_own() {
    let mut statuses = Vec::new();
    for _ in 0..60 {
        let log = EffectLog::new();
        let dispatcher = Dispatcher::builder()
            .tool(slow_body(&log))
            .engine(Engine::new(MemoryStore::new(), idem_runtime::SystemClock))
            .retry(RetryPolicy::immediate(3))
            .transport(ImpatientTransport {
                patience: Duration::from_millis(20),
            })
            .build()
            .unwrap();
        let message = chat_message(vec![chat_call("call_1", "refund", r#"{"order": 7}"#)]);
        let outcome = dispatcher
            .dispatch_turn(&one_turn(&message), &Conversation::new("c"))
            .await;
        let report = &outcome.calls[0];
        assert_eq!(log.len(), 1);
        assert_eq!(report.status(), Some(CallStatus::Replayed));
        statuses.push(report.own_status());
    }
    assert!(
        statuses.iter().all(|s| *s == Some(CallStatus::Executed)),
        "own_status of the only call, which ran the body: {statuses:?}"
    );
}

// pins D11: the same, with a store whose write acknowledgement comes back 300 ms after the
// write landed (any network store): the retry replays before the first attempt's call has
// published what it did, and the call is still `executed`
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_run_whose_store_ack_is_slow_is_the_calls_own() {
    let log = EffectLog::new();
    let store = Intercepted::new(
        Arc::new(MemoryStore::new()),
        SlowAck {
            ack_delay: Duration::from_millis(300),
        },
    );
    let dispatcher = Dispatcher::builder()
        .tool(slow_body(&log))
        .engine(Engine::new(store, idem_runtime::SystemClock))
        .retry(RetryPolicy::immediate(3))
        .transport(ImpatientTransport {
            patience: Duration::from_millis(20),
        })
        .build()
        .unwrap();
    let message = chat_message(vec![chat_call("call_1", "refund", r#"{"order": 7}"#)]);
    let outcome = dispatcher
        .dispatch_turn(&one_turn(&message), &Conversation::new("c"))
        .await;
    let report = &outcome.calls[0];
    assert_eq!(log.len(), 1, "one effect");
    assert_eq!(
        report.own_status(),
        Some(CallStatus::Executed),
        "the only call ran the body in its own first attempt: ran = {:?}",
        report.ran
    );
}

mod fuzz {
    //! No panic on wrapper and bare-params shapes; a Chat message's answers are exactly
    //! one per distinct tool call id, in the provider's order (D2, D5, D7, D9).

    use super::*;
    use proptest::prelude::*;

    fn leaf() -> impl Strategy<Value = Value> {
        prop_oneof![
            Just(Value::Null),
            any::<bool>().prop_map(Value::Bool),
            any::<i64>().prop_map(Value::from),
            (-1e300f64..1e300).prop_map(Value::from),
            prop::sample::select(vec![
                "functions.x",
                "x",
                "functions.",
                "",
                WRAPPER,
                "parallel",
                "functions.multi_tool_use.parallel",
                "{\"tool_uses\":[]}",
                "{",
            ])
            .prop_map(|s| Value::String(s.to_owned())),
        ]
    }

    fn value() -> impl Strategy<Value = Value> {
        leaf().prop_recursive(4, 32, 5, |inner| {
            prop_oneof![
                prop::collection::vec(inner.clone(), 0..4).prop_map(Value::Array),
                prop::collection::vec(
                    (
                        prop::sample::select(vec![
                            "tool_uses",
                            "recipient_name",
                            "parameters",
                            "name",
                            "arguments",
                            "_meta",
                            "task",
                            "x",
                        ]),
                        inner
                    ),
                    0..5
                )
                .prop_map(|kv| Value::Object(
                    kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()
                )),
            ]
        })
    }

    /// A `tool_uses` entry: mostly well-formed, sometimes not.
    fn use_entry() -> impl Strategy<Value = Value> {
        prop_oneof![
            3 => (leaf(), prop_oneof![Just(Value::Null), value()]).prop_map(|(name, parameters)| {
                json!({"recipient_name": name, "parameters": parameters})
            }),
            1 => value(),
        ]
    }

    /// One `tool_calls` element: a wrapper (well-formed or not), an ordinary call to `x`.
    fn tool_call(i: usize) -> impl Strategy<Value = Value> {
        prop_oneof![
            prop::collection::vec(use_entry(), 0..6).prop_map(move |uses| {
                chat_call(
                    &format!("w{i}"),
                    WRAPPER,
                    &json!({"tool_uses": uses}).to_string(),
                )
            }),
            value().prop_map(move |arguments| {
                chat_call(&format!("w{i}"), WRAPPER, &arguments.to_string())
            }),
            value().prop_map(move |arguments| {
                chat_call(&format!("c{i}"), "x", &arguments.to_string())
            }),
        ]
    }

    fn message() -> impl Strategy<Value = Value> {
        (0..5usize)
            .prop_flat_map(|n| (0..n).map(tool_call).collect::<Vec<_>>())
            .prop_map(chat_message)
    }

    fn bare_params() -> impl Strategy<Value = Value> {
        prop::collection::vec(
            (
                prop::sample::select(vec!["name", "arguments", "_meta", "task"]),
                value(),
            ),
            0..5,
        )
        .prop_map(|kv| Value::Object(kv.into_iter().map(|(k, v)| (k.to_owned(), v)).collect()))
    }

    fn run(turn: &Turn) -> Vec<Value> {
        let dispatcher = Dispatcher::builder()
            .tool(Tool::from_sync("x", |a: Value, _c| Ok::<_, ToolError>(a)))
            .tool(Tool::from_sync("", |a: Value, _c| Ok::<_, ToolError>(a)))
            .tool(Tool::from_sync(WRAPPER, |a: Value, _c| {
                Ok::<_, ToolError>(a)
            }))
            .engine(Engine::in_memory())
            .retry(RetryPolicy::immediate(1))
            .mark_replays(true)
            .build()
            .unwrap();
        let outcome = pollster::block_on(dispatcher.dispatch_turn(turn, &Conversation::new("c")));
        outcome.messages()
    }

    proptest! {
        #![proptest_config(ProptestConfig { cases: 1500, .. ProptestConfig::default() })]

        // held (D2, D5, D7): nothing panics; exactly one tool message per tool call of the
        // message, under its id, in the message's order
        #[test]
        fn one_answer_per_chat_tool_call(message in message()) {
            let ids: Vec<String> = message["tool_calls"].as_array().unwrap().iter()
                .map(|c| c["id"].as_str().unwrap().to_owned()).collect();
            let turn = one_turn(&message);
            let answered: Vec<String> = run(&turn).iter()
                .map(|m| m["tool_call_id"].as_str().unwrap().to_owned()).collect();
            prop_assert_eq!(answered, ids);
        }

        // held (D2, D9): bare params (and arrays of them, in Chat histories) never panic
        #[test]
        fn bare_params_never_panic(params in bare_params(), others in prop::collection::vec(bare_params(), 0..3)) {
            let mut documents = vec![params.clone()];
            let mut array = vec![json!({"role": "user", "content": "hi"}), params];
            array.extend(others);
            documents.push(Value::Array(array));
            for document in documents {
                if let Ok(turns) = parse_turns(&document) {
                    for turn in &turns {
                        let messages = run(turn);
                        if turn.provider == Provider::Mcp {
                            prop_assert_eq!(messages.len(), turn.calls.len());
                        }
                    }
                }
            }
        }
    }
}

#[derive(Debug, Deserialize)]
struct Signed {
    n: i64,
}

#[derive(Debug, Deserialize)]
struct Wide {
    n: i128,
}

// pins D8, K3: integer spellings just below i64::MIN (-2^63 - 1 … -2^63 - 1024), which
// serde_json reads as the double -2^63, are refused: never run as i64::MIN, a number the
// model did not write (as 2^64 is refused at the top end)
#[tokio::test]
async fn integers_below_i64_min_are_refused() {
    let seen = Arc::new(std::sync::Mutex::new(Vec::new()));
    let (narrow, wide) = (Arc::clone(&seen), Arc::clone(&seen));
    let dispatcher = dispatcher_with(
        vec![
            Tool::from_sync("narrow", move |a: Signed, _ctx| {
                narrow.lock().unwrap().push(i128::from(a.n));
                Ok::<_, ToolError>("ok")
            }),
            Tool::from_sync("wide", move |a: Wide, _ctx| {
                wide.lock().unwrap().push(a.n);
                Ok::<_, ToolError>("ok")
            }),
        ],
        engine(),
    );
    let message = chat_message(vec![
        chat_call("c1", "narrow", r#"{"n": -9223372036854775809}"#),
        chat_call("c2", "narrow", r#"{"n": -9223372036854776000}"#),
        chat_call("c3", "wide", r#"{"n": -9223372036854775809}"#),
    ]);
    let outcome = dispatcher
        .dispatch_turn(&one_turn(&message), &Conversation::new("c"))
        .await;
    let ran = seen.lock().unwrap().clone();
    assert!(
        ran.iter().all(|n| *n != i128::from(i64::MIN)),
        "ran with i64::MIN for a number the model did not write: {ran:?}; replies {:?}",
        outcome
            .calls
            .iter()
            .map(|c| c.reply.result.clone())
            .collect::<Vec<_>>()
    );
}
