//! Unknown outcomes through the attribute, as a user writes them: `reconcile = …`,
//! `on_cancel = …`, `on_unknown = …`, `heartbeat = …`, the attempt info, and what a
//! dispatched call tells the model (contract U1–U4, U2a, L1, F1, D3). Memory store, manual
//! clock.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_agent::dispatch::{Conversation, Dispatcher, FailureKind, RetryPolicy};
use idem_agent::testkit::{ManualClock, RecordingSleeper, ScriptedModel};
use idem_agent::{
    idempotent, AttemptInfo, CallContext, CallStatus, Engine, Error, MemoryStore, Reconciled,
    ToolError,
};

fn context(conversation: &str) -> (CallContext, ManualClock) {
    let clock = ManualClock::new();
    let engine = Engine::from_shared(Arc::new(MemoryStore::new()), Arc::new(clock.clone()));
    let ctx = CallContext::new()
        .with_engine(engine)
        .with_conversation(conversation.to_owned());
    (ctx, clock)
}

static PAID: AtomicUsize = AtomicUsize::new(0);
static RECONCILED: AtomicUsize = AtomicUsize::new(0);
static TIME_OUT_NEXT: AtomicBool = AtomicBool::new(false);

fn check_payment(order: &str, amount: &u64, attempt: &AttemptInfo) -> Reconciled<u64, ToolError> {
    RECONCILED.fetch_add(1, Ordering::SeqCst);
    assert!(attempt.is_takeover());
    let _ = order;
    // The downstream system says: it was paid, under this attempt's key.
    Reconciled::Done(Ok(*amount))
}

#[idempotent(reconcile = check_payment, lease = "30s")]
async fn pay(order: &str, amount: u64) -> Result<u64, ToolError> {
    let _ = order;
    PAID.fetch_add(1, Ordering::SeqCst);
    if TIME_OUT_NEXT.swap(false, Ordering::SeqCst) {
        return Err(ToolError::outcome_unknown("the bank timed out"));
    }
    Ok(amount)
}

// pins U1, U3: an outcome-unknown error makes the next call ask the reconcile function
// (once), whose "done" is saved and replayed; the body ran once
#[tokio::test]
async fn the_reconcile_function_is_asked_once_and_its_answer_replayed() {
    let (ctx, _clock) = context("conv_pay");
    TIME_OUT_NEXT.store(true, Ordering::SeqCst);
    assert_eq!(
        ctx.run(pay("ord_1", 500)).await,
        Err(ToolError::outcome_unknown("the bank timed out"))
    );
    assert_eq!(ctx.run(pay("ord_1", 500)).await, Ok(500));
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Reconciled);
    assert_eq!(ctx.run(pay("ord_1", 500)).await, Ok(500));
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
    assert_eq!(PAID.load(Ordering::SeqCst), 1, "the body ran once");
    assert_eq!(RECONCILED.load(Ordering::SeqCst), 1, "asked once");
}

static SENT: AtomicUsize = AtomicUsize::new(0);

#[idempotent(lease = "10s", heartbeat = "2s", on_unknown = "rerun")]
async fn send_mail(to: &str) -> Result<u32, ToolError> {
    let _ = to;
    SENT.fetch_add(1, Ordering::SeqCst);
    std::future::pending::<()>().await;
    Ok(1)
}

// pins U2a, U4: a timeout around the call that fires after the effect holds the key: with
// `on_unknown = "rerun"` the retry gets OutcomeUnknown (since, retry-after) and sends nothing
// until the lease lapses; then the next call runs again (at least once from there), knowing
// it is a takeover
#[tokio::test]
async fn a_timeout_after_the_effect_holds_the_key_until_the_lease_lapses() {
    let (ctx, clock) = context("conv_mail");
    let first = tokio::time::timeout(Duration::from_millis(20), ctx.run(send_mail("a@b.c"))).await;
    assert!(first.is_err());
    assert_eq!(SENT.load(Ordering::SeqCst), 1);
    clock.advance(Duration::from_secs(4));
    match ctx.run(send_mail("a@b.c")).await {
        Err(ToolError::Idem(Error::OutcomeUnknown { retry_after_ms, .. })) => {
            assert_eq!(retry_after_ms, Some(6_000));
        }
        other => panic!("expected OutcomeUnknown, got {other:?}"),
    }
    assert_eq!(SENT.load(Ordering::SeqCst), 1, "no second mail while held");
    clock.advance(Duration::from_secs(6));
    let again = tokio::time::timeout(Duration::from_millis(20), ctx.run(send_mail("a@b.c"))).await;
    assert!(again.is_err());
    assert_eq!(
        SENT.load(Ordering::SeqCst),
        2,
        "the documented at-least-once path"
    );
}

static PINGS: AtomicUsize = AtomicUsize::new(0);

#[idempotent(on_cancel = "release")]
async fn ping(host: &str) -> Result<u32, ToolError> {
    let _ = host;
    if PINGS.fetch_add(1, Ordering::SeqCst) == 0 {
        std::future::pending::<()>().await;
    }
    Ok(1)
}

// pins U4: with `on_cancel = "release"` a cancelled call is released at once: the retry runs
#[tokio::test]
async fn on_cancel_release_runs_the_retry_at_once() {
    let (ctx, _clock) = context("conv_ping");
    let first = tokio::time::timeout(Duration::from_millis(20), ctx.run(ping("h"))).await;
    assert!(first.is_err());
    assert_eq!(ctx.run(ping("h")).await, Ok(1));
    assert_eq!(PINGS.load(Ordering::SeqCst), 2);
}

static CHARGES: AtomicUsize = AtomicUsize::new(0);

async fn charge_happened(card: &u64, attempt: &AttemptInfo) -> Reconciled<u64, ToolError> {
    let _ = (card, attempt.key());
    Reconciled::NotDone
}

#[idempotent(reconcile = charge_happened, lease = "1s")]
fn charge(card: u64) -> Result<u64, ToolError> {
    let attempt = idem_agent::current_attempt().unwrap();
    CHARGES.fetch_add(1, Ordering::SeqCst);
    if attempt.fence() == 1 {
        panic!("the card reader crashed");
    }
    Ok(attempt.fence())
}

// pins U3, U4, F1: a sync tool whose body panicked is reconciled by an async reconcile
// function on the next call; "not done" runs the body with the takeover's fence
#[test]
fn a_sync_tool_reconciles_with_an_async_function() {
    let (ctx, _clock) = context("conv_charge");
    let crashed =
        std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| ctx.enter(|| charge(4242))));
    assert!(crashed.is_err());
    assert_eq!(ctx.enter(|| charge(4242)), Ok(2));
    assert_eq!(CHARGES.load(Ordering::SeqCst), 2);
}

static BOOKINGS: AtomicUsize = AtomicUsize::new(0);

#[idempotent(lease = "30s", on_unknown = "rerun")]
async fn book(room: u32) -> Result<u32, ToolError> {
    BOOKINGS.fetch_add(1, Ordering::SeqCst);
    Err(ToolError::outcome_unknown(format!(
        "room {room}: the hotel API timed out"
    )))
}

const BOOK: &str = r#"{"role":"assistant","content":null,"tool_calls":[
  {"id":"call_1","type":"function","function":{"name":"book","arguments":"{\"room\":7}"}}]}"#;

// pins D3, U2a: a dispatched call whose outcome is unknown is not retried; the model is told
// `outcome_unknown`, and (with `on_unknown = "rerun"`) a later turn's call gets
// OutcomeUnknown with a retry-after hint
#[tokio::test]
async fn the_model_is_told_the_outcome_is_unknown() {
    let clock = ManualClock::new();
    let sleeper = RecordingSleeper::new();
    let dispatcher = Dispatcher::builder()
        .tool(book::tool())
        .engine(Engine::from_shared(
            Arc::new(MemoryStore::new()),
            Arc::new(clock.clone()),
        ))
        .retry(RetryPolicy::new().with_sleeper(sleeper.clone()))
        .build()
        .unwrap();
    let model = ScriptedModel::from_json(BOOK).unwrap();
    let turn = model.next_turn().unwrap();
    let conversation = Conversation::new("conv_book");
    let outcome = dispatcher.dispatch_turn(&turn, &conversation).await;
    let failure = outcome.calls[0].reply.result.as_ref().unwrap_err();
    assert_eq!(failure.kind, FailureKind::OutcomeUnknown);
    assert!(!failure.retryable);
    assert_eq!(outcome.calls[0].attempts.len(), 1, "not retried");
    assert_eq!(BOOKINGS.load(Ordering::SeqCst), 1);
    // The same call in a later turn: held, told so with the time left.
    clock.advance(Duration::from_secs(10));
    let later = dispatcher.dispatch_turn(&turn, &conversation).await;
    let failure = later.calls[0].reply.result.as_ref().unwrap_err();
    assert_eq!(failure.kind, FailureKind::OutcomeUnknown);
    assert_eq!(failure.retry_after_ms, Some(20_000));
    assert_eq!(BOOKINGS.load(Ordering::SeqCst), 1);
}

/// A transport whose first attempt answers "in progress, retry after 700 ms".
#[derive(Debug, Default)]
struct BusyOnce {
    attempts: AtomicUsize,
}

impl idem_agent::dispatch::Transport for BusyOnce {
    fn invoke(
        &self,
        request: idem_agent::dispatch::ToolRequest,
    ) -> idem_agent::dispatch::TransportFuture {
        let first = self.attempts.fetch_add(1, Ordering::SeqCst) == 0;
        Box::pin(async move {
            if first {
                let busy = Error::InProgress {
                    tool: "book".into(),
                    key: "k".into(),
                    waited_ms: 0,
                    retry_after_ms: 700,
                };
                return Ok(idem_agent::dispatch::ToolReply {
                    result: Err(idem_agent::dispatch::ToolFailure::from(busy)),
                    record: None,
                });
            }
            Ok(request.tool.call(request.arguments, request.context).await)
        })
    }
}

#[idempotent(lease = "30s")]
async fn reserve(room: u32) -> Result<u32, ToolError> {
    Ok(room)
}

const RESERVE: &str = r#"{"role":"assistant","content":null,"tool_calls":[
  {"id":"call_1","type":"function","function":{"name":"reserve","arguments":"{\"room\":8}"}}]}"#;

// pins D3, S5: the dispatcher waits at least an InProgress failure's retry-after hint before
// its next attempt, even when its own backoff is zero
#[tokio::test]
async fn the_dispatcher_honours_the_retry_after_hint() {
    let sleeper = RecordingSleeper::new();
    let dispatcher = Dispatcher::builder()
        .tool(reserve::tool())
        .engine(Engine::from_shared(
            Arc::new(MemoryStore::new()),
            Arc::new(ManualClock::new()),
        ))
        .retry(RetryPolicy::immediate(3).with_sleeper(sleeper.clone()))
        .transport(BusyOnce::default())
        .build()
        .unwrap();
    let model = ScriptedModel::from_json(RESERVE).unwrap();
    let turn = model.next_turn().unwrap();
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_reserve"))
        .await;
    assert_eq!(
        outcome.calls[0].reply.result.as_ref().ok(),
        Some(&serde_json::json!(8))
    );
    assert_eq!(outcome.calls[0].attempts.len(), 2);
    assert_eq!(sleeper.delays(), [Duration::from_millis(700)]);
}
