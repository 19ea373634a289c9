//! Retries: only transient failures, a bounded number of attempts with backoff and
//! jitter, the first attempt's key on every retry (contract D3, K9, S4, S5).

use crate::common;

use std::sync::atomic::{AtomicU32, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::tools::{engine, logged, spec, yield_once};
use idem_runtime::clock::Sleep;
use idem_runtime::dispatch::{
    parse_turns, Conversation, Dispatcher, FailureKind, Jitter, RetryPolicy, Sleeper, Tool, Turn,
};
use idem_runtime::testkit::{EffectLog, FailBeforeEffectTransport, FailOn, RecordingSleeper};
use idem_runtime::{prepare, CallStatus, Scope, ToolError, ToolSpec};
use serde::Deserialize;
use serde_json::json;

#[derive(Deserialize)]
struct ChargeArgs {
    cents: u64,
}

static CHARGE: ToolSpec = ToolSpec::new("charge");

/// `charge(cents)`: logs every body run with the key it carried; the first `failures`
/// runs end in `error`, the later ones succeed.
fn charge(log: &EffectLog, failures: u32, error: fn() -> ToolError) -> Tool {
    let (log, runs) = (log.clone(), Arc::new(AtomicU32::new(0)));
    Tool::from_async("charge", move |a: ChargeArgs, _ctx| {
        let (log, runs) = (log.clone(), Arc::clone(&runs));
        async move {
            prepare(&CHARGE, None, |b| b.key("cents", &a.cents).map(drop))?
                .run(async move {
                    log.record("charge", format!("{} cents", a.cents));
                    if runs.fetch_add(1, Ordering::SeqCst) < failures {
                        return Err(error());
                    }
                    Ok(json!({"charged": a.cents}))
                })
                .await
        }
    })
}

fn charge_turn() -> Turn {
    parse_turns(
        &json!({"type": "function_call", "call_id": "call_charge", "name": "charge",
                        "arguments": "{\"cents\": 500}"}),
    )
    .unwrap()
    .remove(0)
}

fn dispatcher(tool: Tool, retry: RetryPolicy) -> Dispatcher {
    Dispatcher::builder()
        .tool(tool)
        .engine(engine())
        .retry(retry)
        .build()
        .unwrap()
}

fn timeout_error() -> ToolError {
    ToolError::retryable("bank API timed out")
}

fn declined_error() -> ToolError {
    ToolError::failed("card declined")
}

// pins D3, K9, S4: a retryable tool error is retried; every attempt carries the key the
// first attempt derived; the body runs again (its error was not saved) until it succeeds
#[tokio::test]
async fn retryable_errors_are_retried_with_the_same_key() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(charge(&log, 2, timeout_error), RetryPolicy::immediate(5));
    let outcome = dispatcher
        .dispatch_turn(&charge_turn(), &Conversation::new("conv_retry"))
        .await;
    let report = &outcome.calls[0];
    assert_eq!(report.attempt_count(), 3);
    assert!(report.is_ok());
    assert_eq!(report.status(), Some(CallStatus::Executed));
    let key = report.key.clone().unwrap();
    assert_eq!(log.len(), 3);
    assert_eq!(
        log.count_for(&key),
        3,
        "every attempt carried the first key"
    );
    for attempt in &report.attempts[..2] {
        let failure = attempt
            .outcome
            .as_ref()
            .unwrap()
            .result
            .as_ref()
            .unwrap_err();
        assert_eq!((failure.kind, failure.retryable), (FailureKind::Tool, true));
    }
}

// pins D3, S4: a final tool error is not retried; it is saved and replayed to a later call
#[tokio::test]
async fn final_errors_are_not_retried_and_replay() {
    let log = EffectLog::new();
    let dispatcher = dispatcher(charge(&log, 1, declined_error), RetryPolicy::immediate(5));
    let conversation = Conversation::new("conv_declined");
    let first = dispatcher
        .dispatch_turn(&charge_turn(), &conversation)
        .await;
    let again = dispatcher
        .dispatch_turn(&charge_turn(), &conversation)
        .await;
    for (outcome, status) in [
        (&first, CallStatus::Executed),
        (&again, CallStatus::Replayed),
    ] {
        let report = &outcome.calls[0];
        assert_eq!(report.attempt_count(), 1);
        assert_eq!(report.status(), Some(status));
        let failure = report.reply.result.as_ref().unwrap_err();
        assert_eq!(
            (failure.kind, failure.retryable),
            (FailureKind::Tool, false)
        );
    }
    assert_eq!(log.len(), 1, "the declined charge ran once");
}

// pins D3: attempts are bounded; backoff doubles from the base up to the cap (milliseconds)
#[tokio::test]
async fn attempts_are_bounded_and_backoff_is_capped() {
    let log = EffectLog::new();
    let sleeper = RecordingSleeper::new();
    let policy = RetryPolicy::new()
        .with_max_attempts(4)
        .with_backoff(Duration::from_millis(100), Duration::from_millis(300))
        .with_jitter(Jitter::None)
        .with_sleeper(sleeper.clone());
    let dispatcher = dispatcher(charge(&log, u32::MAX, timeout_error), policy);
    let outcome = dispatcher
        .dispatch_turn(&charge_turn(), &Conversation::new("conv_bounded"))
        .await;
    let report = &outcome.calls[0];
    assert_eq!(report.attempt_count(), 4);
    let failure = report.reply.result.as_ref().unwrap_err();
    assert!(failure.retryable);
    assert!(
        failure.message.contains("gave up after 4 attempts"),
        "{}",
        failure.message
    );
    let millis: Vec<u128> = sleeper.delays().iter().map(Duration::as_millis).collect();
    assert_eq!(millis, [100, 200, 300]);
    let waited: Vec<u128> = report
        .attempts
        .iter()
        .map(|a| a.waited.as_millis())
        .collect();
    assert_eq!(waited, [0, 100, 200, 300]);
}

// pins D3: full jitter draws every delay from [0, ceiling], and the draws vary
#[tokio::test]
async fn full_jitter_stays_under_the_ceiling() {
    let policy = RetryPolicy::new()
        .with_max_attempts(6)
        .with_backoff(Duration::from_millis(50), Duration::from_millis(400))
        .with_sleeper(RecordingSleeper::new());
    let draws: Vec<Duration> = (0..200).map(|_| policy.delay_before(4)).collect();
    assert!(draws.iter().all(|d| *d <= Duration::from_millis(200)));
    assert!(draws.iter().any(|d| *d != draws[0]), "jitter varies");
    let dispatcher = dispatcher(
        charge(&EffectLog::new(), u32::MAX, timeout_error),
        policy.clone(),
    );
    let outcome = dispatcher
        .dispatch_turn(&charge_turn(), &Conversation::new("conv_jitter"))
        .await;
    let attempts = &outcome.calls[0].attempts;
    assert_eq!(attempts.len(), 6);
    for attempt in attempts {
        assert!(attempt.waited <= policy.ceiling_before(attempt.number));
    }
}

/// Yields once instead of sleeping: the other calls of the turn run meanwhile.
#[derive(Debug)]
struct YieldSleeper;

impl Sleeper for YieldSleeper {
    fn sleep(&self, _span: Duration) -> Sleep {
        Box::pin(yield_once())
    }
}

// pins D3, D4, S5: a duplicate that gives up waiting gets the layer's retryable
// InProgress; the dispatcher retries it with the same key and it replays the owner's result
#[tokio::test]
async fn in_progress_is_retried_and_replays() {
    static IMPATIENT: ToolSpec = ToolSpec {
        wait: Duration::ZERO,
        ..ToolSpec::new("impatient")
    };
    let log = EffectLog::new();
    let policy = RetryPolicy::new()
        .with_max_attempts(3)
        .with_backoff(Duration::from_millis(1), Duration::from_millis(1))
        .with_jitter(Jitter::None)
        .with_sleeper(YieldSleeper);
    let dispatcher = dispatcher(logged(&IMPATIENT, &log), policy);
    let call = json!({"type": "function_call", "name": "impatient", "arguments": "{\"n\":1}"});
    let mut first = call.clone();
    first["call_id"] = json!("first");
    let mut second = call;
    second["call_id"] = json!("second");
    let turn = parse_turns(&json!([first, second])).unwrap().remove(0);
    assert_eq!(turn.calls.len(), 2);
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_impatient"))
        .await;
    assert_eq!(log.len(), 1);
    assert!(outcome.all_ok());
    let waiting = outcome.call("second").unwrap();
    assert_eq!(waiting.attempt_count(), 2);
    let failure = waiting.attempts[0]
        .outcome
        .as_ref()
        .unwrap()
        .result
        .as_ref()
        .unwrap_err();
    assert_eq!(
        (failure.kind, failure.retryable),
        (FailureKind::Layer, true)
    );
    assert!(
        failure.message.contains("in progress"),
        "{}",
        failure.message
    );
    assert_eq!(waiting.status(), Some(CallStatus::Replayed));
    assert_eq!(waiting.key, outcome.call("first").unwrap().key);
}

// pins D3, T2: a request that never arrived is retried; the tool runs once
#[tokio::test]
async fn failure_before_the_effect_is_retried() {
    let log = EffectLog::new();
    let transport = FailBeforeEffectTransport::new(FailOn::FirstAttempt);
    let dispatcher = Dispatcher::builder()
        .tool(logged(spec("ping", Scope::Conversation), &log))
        .engine(engine())
        .retry(RetryPolicy::immediate(3))
        .transport(transport.clone())
        .build()
        .unwrap();
    let turn = parse_turns(&json!({"jsonrpc": "2.0", "id": 9, "method": "tools/call",
                                   "params": {"name": "ping", "arguments": {"host": "db"}}}))
    .unwrap()
    .remove(0);
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_ping"))
        .await;
    let seen = transport.invocations();
    assert_eq!(transport.invocation_count(), 2);
    assert!(!seen[0].reached_tool && seen[0].key.is_none());
    assert!(seen[1].reached_tool);
    assert_eq!(log.len(), 1);
    assert_eq!(outcome.calls[0].status(), Some(CallStatus::Executed));
    assert_eq!(outcome.messages()[0]["id"], 9);
}
