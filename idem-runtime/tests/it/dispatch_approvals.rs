//! The dispatcher and tools that require approval (contract D3, A2, A5): an
//! awaiting-approval answer and a denial reach the model as their own failure kinds, with
//! text that says what happened and not to retry, and are never retried.

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::approval::Approval;
use idem_runtime::dispatch::{
    parse_turns, Conversation, Dispatcher, FailureKind, RetryPolicy, Tool,
};
use idem_runtime::testkit::{ManualClock, RecordingSleeper};
use idem_runtime::{prepare, Engine, MemoryStore, Scope, Store, ToolError, ToolSpec};
use serde_json::json;

#[derive(serde::Deserialize)]
struct Args {
    order: u64,
}

fn turn(id: &str, name: &str) -> idem_runtime::dispatch::Turn {
    parse_turns(
        &json!({"type": "function_call", "call_id": id, "name": name,
                        "arguments": "{\"order\": 7}"}),
    )
    .unwrap()
    .remove(0)
}

fn dispatcher(name: &'static str, engine: &Engine, sleeper: &RecordingSleeper) -> Dispatcher {
    let spec: &'static ToolSpec = Box::leak(Box::new(ToolSpec {
        scope: Scope::Conversation,
        approval: Some(Duration::from_secs(600)),
        ..ToolSpec::new(name)
    }));
    let tool = Tool::from_async(spec.name, move |a: Args, _ctx| async move {
        prepare(spec, None, |b| b.key("order", &a.order).map(drop))?
            .run(async { Ok::<u64, ToolError>(a.order * 100) })
            .await
    });
    Dispatcher::builder()
        .tool(tool)
        .engine(engine.clone())
        .retry(
            RetryPolicy::new()
                .with_max_attempts(5)
                .with_sleeper(sleeper.clone()),
        )
        .build()
        .unwrap()
}

fn engine() -> Engine {
    let store: Arc<dyn Store> = Arc::new(MemoryStore::new());
    Engine::from_shared(store, Arc::new(ManualClock::new()))
}

// pins D3, A2, A4: awaiting approval is told to the model once, not retried, with the key;
// approved, the same call runs and its result reaches the model
#[tokio::test]
async fn awaiting_approval_is_not_retried_and_runs_once_approved() {
    let engine = engine();
    let sleeper = RecordingSleeper::new();
    let d = dispatcher("dispatch_needs_approval", &engine, &sleeper);
    let conversation = Conversation::new("conv");
    let out = d
        .dispatch_turn(&turn("c1", "dispatch_needs_approval"), &conversation)
        .await;
    let report = &out.calls[0];
    assert_eq!(report.attempt_count(), 1, "not retried");
    assert!(sleeper.delays().is_empty());
    let failure = report.reply.result.as_ref().unwrap_err();
    assert_eq!(failure.kind, FailureKind::AwaitingApproval);
    assert!(!failure.retryable);
    let key = report.key.clone().expect("the call's key");
    let told = out.messages()[0].to_string();
    assert!(told.contains("approval"), "{told}");
    assert!(told.contains(key.as_str()), "{told}");
    assert!(told.contains("same arguments"), "{told}");
    engine
        .approve(&key, &Approval::new("ana").unwrap())
        .await
        .unwrap();
    let out = d
        .dispatch_turn(&turn("c2", "dispatch_needs_approval"), &conversation)
        .await;
    assert_eq!(out.calls[0].reply.result.as_ref().unwrap(), &json!(700));
}

// pins D3, A5: a denial reaches the model as `denied`, naming who and why, not retried
#[tokio::test]
async fn a_denial_is_not_retried_and_names_the_decider() {
    let engine = engine();
    let sleeper = RecordingSleeper::new();
    let d = dispatcher("dispatch_denied", &engine, &sleeper);
    let conversation = Conversation::new("conv");
    let out = d
        .dispatch_turn(&turn("c1", "dispatch_denied"), &conversation)
        .await;
    let key = out.calls[0].key.clone().unwrap();
    engine
        .deny(
            &key,
            &Approval::new("bo").unwrap().note("not this customer"),
        )
        .await
        .unwrap();
    let out = d
        .dispatch_turn(&turn("c2", "dispatch_denied"), &conversation)
        .await;
    let report = &out.calls[0];
    assert_eq!(report.attempt_count(), 1, "not retried");
    let failure = report.reply.result.as_ref().unwrap_err();
    assert_eq!(failure.kind, FailureKind::Denied);
    assert!(!failure.retryable);
    let told = out.messages()[0].to_string();
    assert!(told.contains("denied by bo"), "{told}");
    assert!(told.contains("not this customer"), "{told}");
    assert!(told.contains("do not retry"), "{told}");
}
