//! Second adversarial review: the fixes of the issue-10 review (commit ad7024e).
//!
//! Each finding is pinned as the rule it broke, now kept; the rest pin what was tried and
//! held. A `serde_json::Value` parameter beside a flattened struct that needed the second
//! decode sees integers: documented on `Tool` and in D8.

use crate::common;

use common::chat::{chat_call, chat_message, chat_response, one_turn};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::tools::{engine, spec, yield_once};
use idem_runtime::dispatch::{
    parse_turns, Conversation, Dispatcher, InProcess, RetryPolicy, Tool, ToolRequest, Transport,
    TransportFuture, Turn, TurnOutcome,
};
use idem_runtime::inspect::CallQuery;
use idem_runtime::label::ScopePath;
use idem_runtime::testkit::{EffectLog, FailOn, LosingTransport};
use idem_runtime::{
    prepare, CallContext, CallStatus, Engine, MemoryStore, Scope, ToolError, ToolSpec,
};
use serde::Deserialize;
use serde_json::{json, Value};

#[derive(Deserialize)]
struct OrderArgs {
    order: u64,
}

// =======================================================================================
// 1. dispatched_outcome: the carried key's outcome
// =======================================================================================

/// `refund(order)`, keyed in the `tenant` scope, then (whatever the refund did) a notice
/// keyed globally: the refund's own failure does not stop the notice.
fn refund_then_notify_anyway(log: &EffectLog) -> Tool {
    let refund = spec("refund", Scope::Named("tenant"));
    let notify = spec("notify_customer", Scope::Global);
    let log = log.clone();
    Tool::from_async("refund", move |a: OrderArgs, _ctx| {
        let log = log.clone();
        async move {
            let refund_log = log.clone();
            let refunded = match prepare(refund, None, |b| b.key("order", &a.order).map(drop)) {
                Ok(call) => {
                    call.run(async move {
                        refund_log.record("refund", a.order.to_string());
                        Ok::<_, ToolError>(format!("refunded order {}", a.order))
                    })
                    .await
                }
                Err(error) => Err(ToolError::from(error)),
            };
            let notify_log = log.clone();
            let _ = prepare(notify, None, |b| b.key("kind", &"refund").map(drop))?
                .run(async move {
                    notify_log.record("notify_customer", "refund");
                    Ok::<_, ToolError>(())
                })
                .await;
            refunded
        }
    })
}

/// Dispatches one Chat call `refund {"order": 7}` to `tool` on a fresh store, retried up to
/// 3 times, through `transport` if given, marking replays if `mark`.
async fn refund_order_7(tool: Tool, transport: Option<LosingTransport>, mark: bool) -> TurnOutcome {
    let builder = Dispatcher::builder()
        .tool(tool)
        .engine(engine())
        .retry(RetryPolicy::immediate(3))
        .mark_replays(mark);
    let dispatcher = match transport {
        Some(transport) => builder.transport(transport),
        None => builder,
    }
    .build()
    .unwrap();
    let message = chat_message(vec![chat_call("call_1", "refund", r#"{"order": 7}"#)]);
    dispatcher
        .dispatch_turn(&one_turn(&message), &Conversation::new("c"))
        .await
}

// pins D11, S12, S13, K9: when the carried tool's call fails before it derives its key
// (`MissingScope`), the dispatched call has no outcome: another `#[idempotent]` call the
// handler makes after it never stands for it
#[tokio::test]
async fn a_carried_call_that_fails_before_its_key_has_no_outcome() {
    let log = EffectLog::new();
    let outcome = refund_order_7(refund_then_notify_anyway(&log), None, false).await;
    let report = &outcome.calls[0];
    assert!(
        report.reply.result.is_err(),
        "the refund failed: MissingScope"
    );
    assert_eq!(log.len(), 1, "only the notice ran");
    let problems = [
        report
            .own_status()
            .map(|s| format!("own_status {s:?} (the refund never reached the store)")),
        report
            .reply
            .record
            .as_ref()
            .map(|r| format!("reply.record is the notice's ({:?}, {})", r.status, r.key)),
        report
            .key
            .as_ref()
            .map(|k| format!("report.key {k} is the notice's")),
    ];
    let problems: Vec<String> = problems.into_iter().flatten().collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

/// `refund(order)` whose handler makes sure of the refund twice (a helper that refunds
/// idempotently again before answering): the second call is a replay of the first, in
/// the same attempt.
fn refund_twice(log: &EffectLog) -> Tool {
    let refund = spec("refund", Scope::Conversation);
    let log = log.clone();
    Tool::from_async("refund", move |a: OrderArgs, _ctx| {
        let log = log.clone();
        async move {
            let mut last = String::new();
            for _ in 0..2 {
                let log = log.clone();
                last = prepare(refund, None, |b| b.key("order", &a.order).map(drop))?
                    .run(async move {
                        log.record("refund", a.order.to_string());
                        Ok::<_, ToolError>(format!("refunded order {}", a.order))
                    })
                    .await?;
            }
            Ok::<_, ToolError>(last)
        }
    })
}

// pins D11, D6, S12, K9: a handler that calls the carried tool a second time with the same
// arguments (an in-process replay) leaves the first call's run as the dispatched call's
// outcome: `executed`, unmarked
#[tokio::test]
async fn a_second_call_of_the_carried_tool_leaves_the_first_run_its_outcome() {
    let log = EffectLog::new();
    let outcome = refund_order_7(refund_twice(&log), None, true).await;
    let report = &outcome.calls[0];
    assert_eq!(log.len(), 1);
    let content = report.result["content"]
        .as_str()
        .unwrap_or_default()
        .to_owned();
    let problems = [
        (report.own_status() != Some(CallStatus::Executed))
            .then(|| format!("own_status {:?}", report.own_status())),
        (report.status() != Some(CallStatus::Executed))
            .then(|| format!("status {:?} on the first dispatch", report.status())),
        content
            .contains("replayed")
            .then(|| format!("marked as a replay: {content:?}")),
    ];
    let problems: Vec<String> = problems.into_iter().flatten().collect();
    assert!(problems.is_empty(), "{problems:#?}");
}

// pins D11, D6: when the transport loses the reply of the call's own run and the retry
// replays it, the result is not marked as a replay: the call ran now
#[tokio::test]
async fn a_lost_reply_of_the_calls_own_run_is_not_marked() {
    let log = EffectLog::new();
    let refund = spec("refund", Scope::Conversation);
    let tool = {
        let log = log.clone();
        Tool::from_async("refund", move |a: OrderArgs, _ctx| {
            let log = log.clone();
            async move {
                prepare(refund, None, |b| b.key("order", &a.order).map(drop))?
                    .run(async move {
                        log.record("refund", a.order.to_string());
                        Ok::<_, ToolError>(format!("refunded order {}", a.order))
                    })
                    .await
            }
        })
    };
    let outcome =
        refund_order_7(tool, Some(LosingTransport::new(FailOn::FirstAttempt)), true).await;
    let report = &outcome.calls[0];
    assert_eq!(log.len(), 1);
    assert_eq!(report.own_status(), Some(CallStatus::Executed));
    let content = report.result["content"].as_str().unwrap_or_default();
    assert!(
        !content.contains("replayed"),
        "the call's own run, marked as a replay to the model: {content:?}"
    );
}

// pins D11, K9: a sync tool whose handler refunds, then notifies (replayed on the second
// turn): the second turn's refund is `executed`, unmarked, with the refund's key.
#[tokio::test]
async fn a_sync_handler_reports_the_carried_key() {
    static SYNC_REFUND: ToolSpec = ToolSpec::new("sync_refund");
    static SYNC_NOTIFY: ToolSpec = ToolSpec::new("sync_notify");
    let log = EffectLog::new();
    let tool = {
        let log = log.clone();
        Tool::from_sync("sync_refund", move |a: OrderArgs, _ctx| {
            let l = log.clone();
            let refunded = prepare(&SYNC_REFUND, None, |b| b.key("order", &a.order).map(drop))?
                .run_blocking(|| {
                    l.record("sync_refund", a.order.to_string());
                    Ok::<_, ToolError>(format!("refunded order {}", a.order))
                })?;
            let l = log.clone();
            prepare(&SYNC_NOTIFY, None, |b| b.key("kind", &"refund").map(drop))?.run_blocking(
                || {
                    l.record("sync_notify", "refund");
                    Ok::<_, ToolError>(())
                },
            )?;
            Ok::<_, ToolError>(refunded)
        })
    };
    let dispatcher = Dispatcher::builder()
        .tool(tool)
        .engine(engine())
        .retry(RetryPolicy::immediate(3))
        .mark_replays(true)
        .build()
        .unwrap();
    let conversation = Conversation::new("c");
    for (id, order) in [("call_1", 7), ("call_2", 8)] {
        let message = chat_message(vec![chat_call(
            id,
            "sync_refund",
            &json!({ "order": order }).to_string(),
        )]);
        let outcome = dispatcher
            .dispatch_turn(&one_turn(&message), &conversation)
            .await;
        let report = &outcome.calls[0];
        assert_eq!(report.own_status(), Some(CallStatus::Executed), "{id}");
        assert_eq!(report.status(), Some(CallStatus::Executed), "{id}");
        assert_eq!(report.result["content"], format!("refunded order {order}"));
    }
}

// =======================================================================================
// 2. The claim note: a replay of a record its own attempt claimed
// =======================================================================================

/// `refund(order)` whose first run fails with a retryable error (the bank answered 503:
/// nothing was sent, S4: released, the next claim starts again at fence 1, F1/F2) and
/// whose later runs refund.
fn flaky_refund(log: &EffectLog, runs: &Arc<AtomicUsize>, yield_first: bool) -> Tool {
    let refund = spec("refund", Scope::Conversation);
    let (log, runs) = (log.clone(), Arc::clone(runs));
    Tool::from_async("refund", move |a: OrderArgs, _ctx| {
        let (log, runs) = (log.clone(), Arc::clone(&runs));
        async move {
            prepare(refund, None, |b| b.key("order", &a.order).map(drop))?
                .run(async move {
                    if runs.fetch_add(1, Ordering::SeqCst) == 0 {
                        if yield_first {
                            yield_once().await;
                        }
                        return Err(ToolError::retryable("bank answered 503: nothing sent"));
                    }
                    log.record("refund", a.order.to_string());
                    Ok::<_, ToolError>(format!("refunded order {}", a.order))
                })
                .await
        }
    })
}

/// A transport whose first attempt runs in process and then, before answering, lets
/// another dispatcher sharing the store dispatch `turn` (another turn, another process).
#[derive(Debug)]
struct InterleavingTransport {
    other: Dispatcher,
    turn: Turn,
    conversation: Conversation,
    other_outcome: Arc<Mutex<Option<TurnOutcome>>>,
}

impl Transport for InterleavingTransport {
    fn invoke(&self, request: ToolRequest) -> TransportFuture {
        if request.attempt > 1 {
            return InProcess.invoke(request);
        }
        let (other, turn, conversation) = (
            self.other.clone(),
            self.turn.clone(),
            self.conversation.clone(),
        );
        let slot = Arc::clone(&self.other_outcome);
        Box::pin(async move {
            let reply = InProcess.invoke(request).await;
            let outcome = other.dispatch_turn(&turn, &conversation).await;
            *slot.lock().unwrap() = Some(outcome);
            reply
        })
    }
}

// pins D11, S12, S2: call A's first attempt claims the key (fence 1), fails retryably and
// releases; call B claims afresh (fence 1 again) and runs; A's retry replays B's outcome:
// A is `replayed` (a released run is never the call's own, and (key, fence) is noted only
// for a run whose outcome is being saved)
#[tokio::test]
async fn a_released_claim_never_makes_another_calls_run_its_own() {
    let log = EffectLog::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let shared = engine();
    let conversation = Conversation::new("c");
    let other = Dispatcher::builder()
        .tool(flaky_refund(&log, &runs, false))
        .engine(shared.clone())
        .retry(RetryPolicy::immediate(3))
        .build()
        .unwrap();
    let slot = Arc::new(Mutex::new(None));
    let dispatcher = Dispatcher::builder()
        .tool(flaky_refund(&log, &runs, false))
        .engine(shared)
        .retry(RetryPolicy::immediate(3))
        .transport(InterleavingTransport {
            other,
            turn: one_turn(&chat_message(vec![chat_call(
                "call_B",
                "refund",
                r#"{"order": 7}"#,
            )])),
            conversation: conversation.clone(),
            other_outcome: Arc::clone(&slot),
        })
        .build()
        .unwrap();
    let message = chat_message(vec![chat_call("call_A", "refund", r#"{"order": 7}"#)]);
    let a = dispatcher
        .dispatch_turn(&one_turn(&message), &conversation)
        .await;
    let b = slot.lock().unwrap().take().expect("B was dispatched");
    assert_eq!(log.len(), 1, "one refund");
    let (a, b) = (&a.calls[0], &b.calls[0]);
    assert_eq!(
        b.own_status(),
        Some(CallStatus::Executed),
        "B ran the refund"
    );
    assert_eq!(
        a.own_status(),
        Some(CallStatus::Replayed),
        "A got B's outcome (A's own run released); ran = {:?}",
        a.ran
    );
}

// pins D11, D4: the same within one turn (the model emitted the refund twice): one effect,
// one call that ran it
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn equal_calls_in_one_turn_have_one_executed() {
    let log = EffectLog::new();
    let runs = Arc::new(AtomicUsize::new(0));
    let dispatcher = Dispatcher::builder()
        .tool(flaky_refund(&log, &runs, true))
        .engine(Engine::new(MemoryStore::new(), idem_runtime::SystemClock))
        .retry(
            RetryPolicy::new()
                .with_max_attempts(3)
                .with_backoff(Duration::from_millis(100), Duration::from_millis(100))
                .with_jitter(idem_runtime::dispatch::Jitter::None),
        )
        .build()
        .unwrap();
    let message = chat_message(vec![
        chat_call("call_A", "refund", r#"{"order": 7}"#),
        chat_call("call_B", "refund", r#"{"order": 7}"#),
    ]);
    let outcome = dispatcher
        .dispatch_turn(&one_turn(&message), &Conversation::new("c"))
        .await;
    assert_eq!(log.len(), 1, "one refund (D4)");
    let own: Vec<_> = outcome.calls.iter().map(|c| c.own_status()).collect();
    let executed = own
        .iter()
        .filter(|s| **s == Some(CallStatus::Executed))
        .count();
    assert_eq!(executed, 1, "one effect, one call that ran it: {own:?}");
}

// =======================================================================================
// 3. Scope paths with `turn`
// =======================================================================================

// pins D10, P1: `idem key`'s path for a call-scoped call of a response with an id
// (`conversation=…/turn=…/call=…`, what the CLI builds with `ScopePath::from_parts`)
// gives the key the dispatcher derived.
#[tokio::test]
async fn key_of_a_turn_path_is_the_dispatched_key() {
    let log = EffectLog::new();
    let shared = engine();
    let dispatcher = Dispatcher::builder()
        .tool(common::tools::logged(spec("roll", Scope::Call), &log))
        .engine(shared.clone())
        .build()
        .unwrap();
    let response = chat_response(
        "#resp/1=x",
        chat_message(vec![chat_call("call_0", "roll", r#"{"sides":6}"#)]),
    );
    let outcome = dispatcher
        .dispatch_turn(&one_turn(&response), &Conversation::new("c"))
        .await;
    let key = outcome.calls[0].key.clone().unwrap();
    // The response id `#resp/1=x` is the turn `##resp/1=x` (a leading `#` is doubled, D10).
    let path: ScopePath = "conversation=c/turn=%23%23resp%2F1%3Dx/call=call_0"
        .parse()
        .unwrap();
    let query = CallQuery::new("roll", path, json!({"args": {"sides": 6}}));
    assert_eq!(shared.key_of(&query).unwrap(), key);
}

// pins K1, K7, K12, D10: a hand-built scope whose named parts are spelled `call`,
// `conversation` or `global` is refused, so it can never resolve to a call scope's path
#[tokio::test]
async fn a_named_part_spelled_like_a_built_in_scope_is_refused() {
    let shared = engine();
    let call_scoped = spec("roll", Scope::Call);
    static PARTS: [Scope; 3] = [
        Scope::Conversation,
        Scope::Named("turn"),
        Scope::Named("call"),
    ];
    let composite = spec(
        "roll",
        Scope::Composite {
            kind: "conversation+turn+call",
            parts: &PARTS,
        },
    );
    let a = CallContext::new()
        .with_engine(shared.clone())
        .with_conversation("c")
        .with_turn("resp_1")
        .with_tool_call("call_0");
    let b = CallContext::new()
        .with_engine(shared.clone())
        .with_conversation("c")
        .with_scope("turn", "resp_1")
        .with_scope("call", "call_0");
    let key_a = prepare(call_scoped, Some(&a), |b| b.key("sides", &6).map(drop))
        .unwrap()
        .key()
        .clone();
    let key_b =
        prepare(composite, Some(&b), |b| b.key("sides", &6).map(drop)).map(|p| p.key().clone());
    assert!(
        key_b.as_ref() != Ok(&key_a),
        "a composite scope shares the call scope's key {key_a}"
    );
}

// =======================================================================================
// 4. The second decode with integral numbers as integers
// =======================================================================================

#[derive(Debug, Deserialize)]
#[serde(untagged)]
#[allow(dead_code)] // read through `Debug`
enum Limit {
    /// At most this many items.
    Count(u64),
    /// At most this fraction of the stock.
    Ratio(f64),
}

#[derive(Debug, Deserialize)]
#[serde(tag = "kind", rename_all = "snake_case")]
#[allow(dead_code)] // read through `Debug`
enum Order {
    Box { qty: u64 },
}

#[derive(Debug, Deserialize)]
struct ReserveArgs {
    order: Order,
    limit: Limit,
}

fn reserve(seen: &Arc<Mutex<Vec<String>>>) -> Tool {
    let seen = Arc::clone(seen);
    Tool::from_sync("reserve", move |a: ReserveArgs, _ctx| {
        seen.lock()
            .unwrap()
            .push(format!("{:?} {:?}", a.order, a.limit));
        Ok::<_, ToolError>("reserved")
    })
}

// pins D8, D2: the second decode rewrites only the subtree the first error is at: an
// untagged `limit: 1.0` beside a buffered `qty: 2.0` keeps its meaning (`Ratio`)
#[tokio::test]
async fn the_second_decode_leaves_other_arguments_as_written() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let dispatcher = Dispatcher::builder()
        .tool(reserve(&seen))
        .engine(engine())
        .build()
        .unwrap();
    for (id, qty) in [("call_1", "2"), ("call_2", "2.0")] {
        let arguments = format!(r#"{{"order": {{"kind": "box", "qty": {qty}}}, "limit": 1.0}}"#);
        let message = chat_message(vec![chat_call(id, "reserve", &arguments)]);
        let outcome = dispatcher
            .dispatch_turn(&one_turn(&message), &Conversation::new(id))
            .await;
        assert!(
            outcome.calls[0].reply.result.is_ok(),
            "{:?}",
            outcome.calls[0].reply
        );
    }
    let seen = seen.lock().unwrap().clone();
    assert_eq!(
        seen[0], seen[1],
        "the same `limit: 1.0`, decoded differently by the spelling of `qty`"
    );
}

#[derive(Debug, Deserialize)]
struct Item {
    qty: u64,
}

#[derive(Debug, Deserialize)]
struct ForwardArgs {
    #[serde(flatten)]
    item: Item,
    payload: Value,
}

// pins D8 (as documented on `Tool`): beside a flattened struct (whose error serde reports
// at the whole object) that needed the second decode, a `serde_json::Value` parameter sees
// `57.0` as `57`; with the integer written as one, no second decode and `57.0` stays
#[tokio::test]
async fn a_value_beside_a_flattened_struct_is_rewritten_with_it() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let tool = {
        let seen = Arc::clone(&seen);
        Tool::from_sync("forward", move |a: ForwardArgs, _ctx| {
            seen.lock().unwrap().push(a.payload["price"].is_f64());
            Ok::<_, ToolError>(a.item.qty)
        })
    };
    let dispatcher = Dispatcher::builder()
        .tool(tool)
        .engine(engine())
        .build()
        .unwrap();
    for (id, qty) in [("call_1", "2"), ("call_2", "2.0")] {
        let arguments = format!(r#"{{"qty": {qty}, "payload": {{"price": 57.0}}}}"#);
        let message = chat_message(vec![chat_call(id, "forward", &arguments)]);
        let outcome = dispatcher
            .dispatch_turn(&one_turn(&message), &Conversation::new(id))
            .await;
        assert!(
            outcome.calls[0].reply.result.is_ok(),
            "{:?}",
            outcome.calls[0].reply
        );
    }
    assert_eq!(*seen.lock().unwrap(), [true, false], "payload.price is_f64");
}

// pins D8, D2: a truly bad argument beside a buffered integral float still gets the
// first decode's error, naming its path.
#[tokio::test]
async fn a_bad_argument_keeps_the_first_error() {
    let seen = Arc::new(Mutex::new(Vec::new()));
    let dispatcher = Dispatcher::builder()
        .tool(reserve(&seen))
        .engine(engine())
        .build()
        .unwrap();
    let arguments = r#"{"order": {"kind": "box", "qty": 2.0}, "limit": "all"}"#;
    let message = chat_message(vec![chat_call("call_1", "reserve", arguments)]);
    let outcome = dispatcher
        .dispatch_turn(&one_turn(&message), &Conversation::new("c"))
        .await;
    let failure = outcome.calls[0].reply.result.as_ref().unwrap_err();
    assert!(seen.lock().unwrap().is_empty());
    assert!(
        failure.message.contains("order") || failure.message.contains("limit"),
        "{}",
        failure.message
    );
}

// =======================================================================================
// 5. `#j` turn ids in arrays
// =======================================================================================

fn turn_ids(document: &Value) -> Vec<Option<String>> {
    parse_turns(document)
        .unwrap()
        .iter()
        .flat_map(|t| t.calls.iter().map(|c| c.turn_id.clone()))
        .collect()
}

// pins D10: a response whose own id begins with `#` gets one more (`##7`): never read as a
// position, it is the same alone and in an array of responses
#[tokio::test]
async fn a_response_id_starting_with_hash_is_never_a_position() {
    let response = chat_response(
        "#7",
        chat_message(vec![chat_call("call_0", "roll", r#"{"sides":6}"#)]),
    );
    let alone = turn_ids(&response);
    let in_array = turn_ids(&json!([response.clone()]));
    assert_eq!(alone, [Some("##7".to_owned())]);
    assert_eq!(
        in_array, alone,
        "the response's own id, rewritten in an array"
    );
}

// pins D10, K1: a response whose id is `#1` and the message at position 1 of a history are
// two turns with two identities (`##1`, `#1`)
#[tokio::test]
async fn a_hash_response_id_and_a_position_are_two_turns() {
    let log = EffectLog::new();
    let dispatcher = Dispatcher::builder()
        .tool(common::tools::logged(spec("roll", Scope::Call), &log))
        .engine(engine())
        .build()
        .unwrap();
    let conversation = Conversation::new("c");
    let response = chat_response(
        "#1",
        chat_message(vec![chat_call("call_0", "roll", r#"{"sides":6}"#)]),
    );
    let history = json!([
        {"role": "user", "content": "roll twice"},
        chat_message(vec![chat_call("call_0", "roll", r#"{"sides":6}"#)]),
    ]);
    dispatcher
        .dispatch_turn(&one_turn(&response), &conversation)
        .await;
    dispatcher
        .dispatch_turn(&one_turn(&history), &conversation)
        .await;
    assert_eq!(log.len(), 2, "two turns' calls, one effect");
}
