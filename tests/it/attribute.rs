//! `#[idempotent]` end to end: tools written with the attribute, run on an in-memory
//! engine with a manual clock. Each test names the contract rules it pins.

use std::sync::Arc;

use idem_agent::dispatch::FailureKind;
use idem_agent::testkit::{EffectLog, ManualClock};
use idem_agent::{
    idempotent, CallContext, CallStatus, Engine, Error, IdempotencyKey, MemoryStore, ToolError,
    ToolSpec,
};
use serde::{Deserialize, Serialize};
use serde_json::json;

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Receipt {
    order: String,
    amount_cents: u64,
    refund: usize,
}

fn engine() -> Engine {
    Engine::from_shared(Arc::new(MemoryStore::new()), Arc::new(ManualClock::new()))
}

/// A context with a fresh in-memory engine, in conversation `conv_1`.
fn context() -> CallContext {
    CallContext::new()
        .with_engine(engine())
        .with_conversation("conv_1")
}

fn status(ctx: &CallContext) -> CallStatus {
    ctx.last_outcome().expect("an outcome").status
}

fn key(ctx: &CallContext) -> IdempotencyKey {
    ctx.last_outcome().expect("an outcome").key
}

/// The key `prepare` derives for `spec` from hand-written key arguments: what the
/// attribute must produce for the same call.
fn key_by_hand(
    spec: &'static ToolSpec,
    ctx: &CallContext,
    fill: impl FnOnce(&mut idem_agent::ArgsBuilder) -> Result<(), idem_agent::CanonicalError>,
) -> IdempotencyKey {
    // A derived context (own outcome slot), so that preparing this probe does not clear
    // the outcome of the call under test.
    let probe = ctx.clone().with_scope("__key_by_hand", "probe");
    idem_agent::prepare(spec, Some(&probe), fill)
        .unwrap()
        .key()
        .clone()
}

// ---------------------------------------------------------------------------------------
// Tools

#[idempotent(skip(log), dispatch = false)]
fn refund(log: &EffectLog, order: String, amount_cents: u64) -> Result<Receipt, ToolError> {
    log.record("refund", format!("{order} {amount_cents}"));
    Ok(Receipt {
        order,
        amount_cents,
        refund: log.len(),
    })
}

#[idempotent(skip(log), dispatch = false)]
async fn refund_later(
    log: &EffectLog,
    order: &str,
    amount_cents: u64,
) -> Result<Receipt, ToolError> {
    tokio::task::yield_now().await;
    log.record("refund_later", order);
    Ok(Receipt {
        order: order.to_owned(),
        amount_cents,
        refund: log.len(),
    })
}

#[idempotent(skip(log), dispatch = false)]
fn decline(log: &EffectLog, order: String) -> Result<Receipt, ToolError> {
    log.record("decline", order);
    Err(ToolError::failed("card declined"))
}

#[idempotent(skip(log), dispatch = false)]
fn refund_a(log: &EffectLog, order: String) -> Result<String, ToolError> {
    log.record("refund_a", &order);
    Ok(order)
}

#[idempotent(skip(log), dispatch = false)]
fn refund_b(log: &EffectLog, order: String) -> Result<String, ToolError> {
    log.record("refund_b", &order);
    Ok(order)
}

#[idempotent(name = "refund.v2", skip(log), dispatch = false)]
fn renamed(log: &EffectLog, order: String) -> Result<String, ToolError> {
    log.record("renamed", &order);
    Ok(order)
}

#[idempotent(scope = "global", skip(log), dispatch = false)]
fn global_refund(log: &EffectLog, order: String) -> Result<String, ToolError> {
    log.record("global_refund", &order);
    Ok(order)
}

#[idempotent(scope = "call", skip(log), dispatch = false)]
fn roll_die(log: &EffectLog, sides: u32) -> Result<u32, ToolError> {
    log.record("roll_die", sides.to_string());
    Ok(log.len() as u32 % sides + 1)
}

#[idempotent(scope = "tenant", skip(log), dispatch = false)]
fn tenant_refund(log: &EffectLog, order: String) -> Result<String, ToolError> {
    log.record("tenant_refund", &order);
    Ok(order)
}

#[idempotent(skip(log, requested_at), dispatch = false)]
fn stamped(log: &EffectLog, order: String, requested_at: u64) -> Result<String, ToolError> {
    log.record("stamped", format!("{order} {requested_at}"));
    Ok(order)
}

#[idempotent(key(order), skip(log), dispatch = false)]
fn charge(log: &EffectLog, order: String, amount_cents: u64) -> Result<u64, ToolError> {
    log.record("charge", format!("{order} {amount_cents}"));
    Ok(amount_cents)
}

#[idempotent]
fn key_in_body(order: String) -> Result<String, ToolError> {
    let _ = order;
    Ok(idem_agent::current_key()
        .expect("a key in the body")
        .to_string())
}

#[idempotent]
async fn key_in_async_body(ctx: &CallContext, order: String) -> Result<String, ToolError> {
    let _ = order;
    tokio::task::yield_now().await;
    let from_context = ctx.key().map(ToString::to_string);
    let current = idem_agent::current_key().map(|k| k.to_string());
    assert_eq!(from_context, None, "the caller's context is not the body's");
    Ok(current.expect("a key in the body"))
}

#[idempotent]
fn shapes(
    order: &str,
    lines: &[u32],
    note: Option<&str>,
    (x, y): (i32, i32),
    mut retries: u8,
) -> Result<String, ToolError> {
    retries += 1;
    Ok(format!("{order} {lines:?} {note:?} {x},{y} {retries}"))
}

#[idempotent(dispatch = false)]
fn generic<T: Serialize + std::fmt::Debug>(item: T) -> Result<String, ToolError> {
    Ok(format!("{item:?}"))
}

#[idempotent]
fn any_serialize(item: impl Serialize) -> Result<String, ToolError> {
    Ok(serde_json::to_string(&item).unwrap())
}

#[idempotent]
async fn send_refund(
    order: &str,
    amount_cents: u64,
    note: Option<&str>,
) -> Result<Receipt, ToolError> {
    Ok(Receipt {
        order: format!("{order}{}", note.unwrap_or_default()),
        amount_cents,
        refund: 1,
    })
}

#[idempotent]
fn send_refund_sync(ctx: &CallContext, order: String, lines: &[u32]) -> Result<usize, ToolError> {
    assert!(ctx.conversation_id().is_some());
    Ok(order.len() + lines.len())
}

struct Bank {
    name: &'static str,
    log: EffectLog,
    refunds: u32,
}

impl Bank {
    #[idempotent]
    fn balance(&self, account: u64) -> Result<u64, ToolError> {
        self.log.record(self.name, account.to_string());
        Ok(account)
    }

    #[idempotent]
    fn refund(&mut self, order: &str) -> Result<u32, ToolError> {
        self.log.record(self.name, order);
        self.refunds += 1;
        Ok(self.refunds)
    }

    #[idempotent]
    async fn refund_later(&mut self, order: &str) -> Result<u32, ToolError> {
        tokio::task::yield_now().await;
        self.log.record(self.name, order);
        self.refunds += 1;
        Ok(self.refunds)
    }
}

fn assert_send<F: Send>(_: F) {}

// ---------------------------------------------------------------------------------------
// S3, S4, S12: run once, then replay

// pins S3, S12
#[test]
fn sync_tool_runs_once_then_replays_the_saved_value() {
    let (ctx, log) = (context(), EffectLog::new());
    let first = ctx.enter(|| refund(&log, "ord_1".into(), 500)).unwrap();
    assert_eq!(status(&ctx), CallStatus::Executed);
    let second = ctx.enter(|| refund(&log, "ord_1".into(), 500)).unwrap();
    assert_eq!(status(&ctx), CallStatus::Replayed);
    assert_eq!(first, second);
    assert_eq!(log.len(), 1, "the body ran once");
}

// pins S3, S12
#[tokio::test]
async fn async_tool_runs_once_then_replays_the_saved_value() {
    let (ctx, log) = (context(), EffectLog::new());
    let first = ctx.run(refund_later(&log, "ord_1", 500)).await.unwrap();
    assert_eq!(status(&ctx), CallStatus::Executed);
    let second = ctx.run(refund_later(&log, "ord_1", 500)).await.unwrap();
    assert_eq!(status(&ctx), CallStatus::Replayed);
    assert_eq!(first, second);
    assert_eq!(log.len(), 1, "the body ran once");
    assert_eq!(
        log.effects()[0].key.as_ref(),
        Some(&key(&ctx)),
        "the effect carried the key"
    );
}

// pins S4
#[test]
fn a_saved_error_is_replayed_without_running_the_body() {
    let (ctx, log) = (context(), EffectLog::new());
    let first = ctx.enter(|| decline(&log, "ord_1".into()));
    let second = ctx.enter(|| decline(&log, "ord_1".into()));
    assert_eq!(first, Err(ToolError::failed("card declined")));
    assert_eq!(first, second);
    assert_eq!(status(&ctx), CallStatus::Replayed);
    assert_eq!(log.len(), 1);
}

// ---------------------------------------------------------------------------------------
// K6: the tool name

// pins K6
#[test]
fn two_tools_with_equal_arguments_do_not_share_a_record() {
    let (ctx, log) = (context(), EffectLog::new());
    ctx.enter(|| refund_a(&log, "ord_1".into())).unwrap();
    let key_a = key(&ctx);
    ctx.enter(|| refund_b(&log, "ord_1".into())).unwrap();
    assert_eq!(status(&ctx), CallStatus::Executed);
    assert_ne!(key(&ctx), key_a);
    assert_eq!(log.len(), 2);
}

// pins K6, K8
#[test]
fn the_key_is_derived_from_the_tool_name_and_the_named_arguments() {
    static REFUND_A: ToolSpec = ToolSpec::new("refund_a");
    static RENAMED: ToolSpec = ToolSpec::new("refund.v2");
    let (ctx, log) = (context(), EffectLog::new());
    ctx.enter(|| refund_a(&log, "ord_1".into())).unwrap();
    let by_hand = key_by_hand(&REFUND_A, &ctx, |args| {
        args.key("order", "ord_1")?;
        Ok(())
    });
    assert_eq!(key(&ctx), by_hand);

    ctx.enter(|| renamed(&log, "ord_1".into())).unwrap();
    assert_eq!(ctx.last_outcome().unwrap().tool, "refund.v2");
    let by_hand = key_by_hand(&RENAMED, &ctx, |args| {
        args.key("order", "ord_1")?;
        Ok(())
    });
    assert_eq!(key(&ctx), by_hand);
}

// ---------------------------------------------------------------------------------------
// K7: scopes

/// The `MissingScope` error of `tool` for `scope` that `outcome` must be.
#[track_caller]
fn missing_scope<T: std::fmt::Debug>(
    outcome: Result<T, ToolError>,
    tool: &str,
    scope: &str,
) -> Error {
    match outcome {
        Err(ToolError::Idem(error)) => {
            let expected = Error::MissingScope {
                tool: tool.to_owned(),
                scope: scope.to_owned(),
            };
            assert_eq!(error, expected);
            error
        }
        other => panic!("expected MissingScope, got {other:?}"),
    }
}

// pins K7
#[test]
fn a_missing_conversation_is_an_error_before_the_body_runs() {
    let ctx = CallContext::new().with_engine(engine());
    let log = EffectLog::new();
    let outcome = ctx.enter(|| refund(&log, "ord_1".into(), 500));
    let error = missing_scope(outcome, "refund", "conversation");
    // The message names the method that sets the missing value.
    assert_eq!(
        error.to_string(),
        "tool `refund` is keyed by scope `conversation`, but no conversation value is in \
         force for this call (an empty one counts as none): set it with \
         `CallContext::with_conversation(…)` on the idem_agent::CallContext the call runs in"
    );
    assert!(log.is_empty(), "the body did not run");
    assert!(ctx.last_outcome().is_none(), "the store was never reached");
    // No context in force at all: the same.
    assert!(matches!(
        refund(&log, "ord_1".into(), 500),
        Err(ToolError::Idem(Error::MissingScope { .. }))
    ));
    assert!(log.is_empty());
}

// pins K7
#[test]
fn conversations_do_not_share_records() {
    let log = EffectLog::new();
    let ctx = context();
    let other = ctx.clone().with_conversation("conv_2");
    ctx.enter(|| refund(&log, "ord_1".into(), 500)).unwrap();
    other.enter(|| refund(&log, "ord_1".into(), 500)).unwrap();
    assert_eq!(status(&other), CallStatus::Executed);
    assert_eq!(log.len(), 2);
}

// pins K7
#[test]
fn global_scope_works_without_any_context() {
    let log = EffectLog::new();
    // The process-wide default engine: an order id no other test uses.
    let order = format!("global_{}", std::process::id());
    assert_eq!(global_refund(&log, order.clone()).unwrap(), order);
    assert_eq!(global_refund(&log, order.clone()).unwrap(), order);
    assert_eq!(log.len(), 1, "the second call replayed");
    // And conversations do not matter to it.
    let ctx = context();
    let other = ctx.clone().with_conversation("conv_2");
    ctx.enter(|| global_refund(&log, "ord_1".into())).unwrap();
    other.enter(|| global_refund(&log, "ord_1".into())).unwrap();
    assert_eq!(status(&other), CallStatus::Replayed);
}

// pins K7
#[test]
fn call_scope_keys_on_the_tool_call_id() {
    let log = EffectLog::new();
    let ctx = context();
    let call_1 = ctx.clone().with_tool_call("call_1");
    let call_2 = ctx.clone().with_tool_call("call_2");
    call_1.enter(|| roll_die(&log, 6)).unwrap();
    call_2.enter(|| roll_die(&log, 6)).unwrap();
    assert_eq!(
        status(&call_2),
        CallStatus::Executed,
        "two rolls are two intents"
    );
    call_1.enter(|| roll_die(&log, 6)).unwrap();
    assert_eq!(
        status(&call_1),
        CallStatus::Replayed,
        "a retry of call_1 replays"
    );
    assert_eq!(log.len(), 2);
    let error = missing_scope(ctx.enter(|| roll_die(&log, 6)), "roll_die", "call");
    assert!(
        error
            .to_string()
            .contains("set it with `CallContext::with_tool_call(…)`"),
        "{error}"
    );
}

// pins K7
#[test]
fn a_named_scope_reads_its_value_from_the_context() {
    let log = EffectLog::new();
    let ctx = context();
    let acme = ctx.clone().with_scope("tenant", "acme");
    let globex = ctx.clone().with_scope("tenant", "globex");
    acme.enter(|| tenant_refund(&log, "ord_1".into())).unwrap();
    globex
        .enter(|| tenant_refund(&log, "ord_1".into()))
        .unwrap();
    assert_eq!(status(&globex), CallStatus::Executed);
    acme.enter(|| tenant_refund(&log, "ord_1".into())).unwrap();
    assert_eq!(status(&acme), CallStatus::Replayed);
    assert_eq!(log.len(), 2);
    let error = missing_scope(
        ctx.enter(|| tenant_refund(&log, "ord_1".into())),
        "tenant_refund",
        "tenant",
    );
    assert!(
        error
            .to_string()
            .contains("set it with `CallContext::with_scope(\"tenant\", …)`"),
        "{error}"
    );
}

// ---------------------------------------------------------------------------------------
// K8, S9: argument selection

// pins K8
#[test]
fn a_skipped_argument_does_not_change_the_key() {
    let (ctx, log) = (context(), EffectLog::new());
    ctx.enter(|| stamped(&log, "ord_1".into(), 1_000)).unwrap();
    let first = key(&ctx);
    ctx.enter(|| stamped(&log, "ord_1".into(), 2_000)).unwrap();
    assert_eq!(status(&ctx), CallStatus::Replayed);
    assert_eq!(key(&ctx), first);
    assert_eq!(log.len(), 1);
}

// pins K8, S9
#[test]
fn same_key_argument_with_another_fingerprint_argument_is_a_mismatch() {
    let (ctx, log) = (context(), EffectLog::new());
    assert_eq!(ctx.enter(|| charge(&log, "ord_1".into(), 500)), Ok(500));
    assert_eq!(ctx.enter(|| charge(&log, "ord_1".into(), 500)), Ok(500));
    assert_eq!(status(&ctx), CallStatus::Replayed);
    match ctx.enter(|| charge(&log, "ord_1".into(), 700)) {
        Err(ToolError::Idem(Error::Mismatch { tool, .. })) => assert_eq!(tool, "charge"),
        other => panic!("expected Mismatch, got {other:?}"),
    }
    assert_eq!(log.len(), 1, "the body did not run again");
    // The record is untouched: the first call's value still replays.
    assert_eq!(ctx.enter(|| charge(&log, "ord_1".into(), 500)), Ok(500));
    // Another order is another key.
    assert_eq!(ctx.enter(|| charge(&log, "ord_2".into(), 700)), Ok(700));
    assert_eq!(log.len(), 2);
}

// pins K8, C4
#[test]
fn pattern_and_borrowed_arguments_are_keyed_by_name_and_position() {
    static SHAPES: ToolSpec = ToolSpec::new("shapes");
    let ctx = context();
    let text = ctx
        .enter(|| shapes("ord_1", &[1, 2], Some("late"), (3, 4), 0))
        .unwrap();
    assert_eq!(text, "ord_1 [1, 2] Some(\"late\") 3,4 1");
    let by_hand = key_by_hand(&SHAPES, &ctx, |args| {
        args.key("order", "ord_1")?
            .key("lines", &[1u32, 2])?
            .key("note", &Some("late"))?
            .key("arg3", &(3, 4))?
            .key("retries", &0u8)?;
        Ok(())
    });
    assert_eq!(key(&ctx), by_hand);
}

// ---------------------------------------------------------------------------------------
// K10: the key in the body

// pins K10
#[test]
fn the_key_inside_a_sync_body_is_the_outcome_key() {
    let ctx = context();
    let inside = ctx.enter(|| key_in_body("ord_1".into())).unwrap();
    assert_eq!(inside, key(&ctx).to_string());
    assert!(idem_agent::current_key().is_none(), "no key outside a body");
}

// pins K10, C4
#[tokio::test]
async fn the_key_inside_an_async_body_is_the_outcome_key() {
    let ctx = context();
    let inside = key_in_async_body(&ctx, "ord_1".into()).await.unwrap();
    assert_eq!(inside, key(&ctx).to_string());
}

// ---------------------------------------------------------------------------------------
// C4: shapes

// pins C4
#[test]
fn the_receiver_is_never_part_of_the_key() {
    let (ctx, log) = (context(), EffectLog::new());
    let first = Bank {
        name: "first",
        log: log.clone(),
        refunds: 0,
    };
    let mut second = Bank {
        name: "second",
        log: log.clone(),
        refunds: 10,
    };
    assert_eq!(ctx.enter(|| first.balance(7)), Ok(7));
    assert_eq!(ctx.enter(|| second.balance(7)), Ok(7));
    assert_eq!(
        status(&ctx),
        CallStatus::Replayed,
        "another receiver, the same key"
    );
    assert_eq!(ctx.enter(|| second.refund("ord_1")), Ok(11));
    assert_eq!(ctx.enter(|| second.refund("ord_1")), Ok(11));
    assert_eq!(second.refunds, 11, "the &mut self body ran once");
    assert_eq!(log.len(), 2);
}

// pins C4
#[tokio::test]
async fn async_methods_with_reference_arguments_run() {
    let (ctx, log) = (context(), EffectLog::new());
    let mut bank = Bank {
        name: "bank",
        log: log.clone(),
        refunds: 0,
    };
    let order = String::from("ord_1");
    assert_eq!(ctx.run(bank.refund_later(&order)).await, Ok(1));
    assert_eq!(ctx.run(bank.refund_later(&order)).await, Ok(1));
    assert_eq!(bank.refunds, 1);
}

// pins C4
#[test]
fn generic_and_impl_trait_arguments_are_keyed_by_value() {
    let ctx = context();
    assert_eq!(ctx.enter(|| generic(vec![1, 2])).unwrap(), "[1, 2]");
    assert_eq!(ctx.enter(|| generic(vec![1, 2])).unwrap(), "[1, 2]");
    assert_eq!(status(&ctx), CallStatus::Replayed);
    assert_eq!(ctx.enter(|| any_serialize("x")).unwrap(), "\"x\"");
    assert_eq!(
        ctx.enter(|| any_serialize(String::from("x"))).unwrap(),
        "\"x\""
    );
    assert_eq!(status(&ctx), CallStatus::Replayed, "equal JSON, equal key");
}

// pins C4
#[test]
fn generated_futures_are_send_when_the_body_is() {
    let log = EffectLog::new();
    assert_send(refund_later(&log, "ord_1", 5));
    assert_send(send_refund("ord_1", 5, None));
    let ctx = context();
    assert_send(key_in_async_body(&ctx, "ord_1".into()));
    let mut bank = Bank {
        name: "bank",
        log,
        refunds: 0,
    };
    assert_send(bank.refund_later("ord_1"));
    // And the context wrapper keeps it Send.
    assert_send(ctx.run(send_refund("ord_1", 5, None)));
}

// ---------------------------------------------------------------------------------------
// The dispatch companion

// pins K9, C4, D2
#[tokio::test]
async fn the_companion_tool_derives_the_direct_call_key() {
    let ctx = context();
    let direct = ctx.run(send_refund("ord_1", 500, Some("!"))).await.unwrap();
    let direct_key = key(&ctx);

    let tool = send_refund::tool();
    assert_eq!(tool.name(), "send_refund");
    let reply = tool
        .call(
            json!({"order": "ord_1", "amount_cents": 500, "note": "!"}),
            ctx.clone(),
        )
        .await;
    let record = reply.record.expect("a record");
    assert_eq!(record.key, direct_key);
    assert_eq!(record.status, CallStatus::Replayed);
    assert_eq!(
        reply.result.unwrap(),
        serde_json::to_value(&direct).unwrap()
    );

    // A missing `Option` argument is `None`: another key.
    let reply = tool
        .call(json!({"order": "ord_1", "amount_cents": 500}), ctx.clone())
        .await;
    assert_eq!(reply.record.unwrap().status, CallStatus::Executed);
    assert_eq!(reply.result.unwrap()["order"], "ord_1");
}

// pins D2
#[tokio::test]
async fn the_companion_rejects_arguments_that_do_not_fit() {
    let ctx = context();
    let tool = send_refund::tool();
    for (arguments, says) in [
        (json!({"order": "ord_1"}), "missing field `amount_cents`"),
        (json!({"order": 7, "amount_cents": 500}), "argument `order`"),
        (
            json!({"order": "ord_1", "amount_cents": 500, "currency": "EUR"}),
            "unknown field `currency`",
        ),
        (json!("ord_1"), "must be a JSON object"),
    ] {
        let reply = tool.call(arguments, ctx.clone()).await;
        let failure = reply.result.unwrap_err();
        assert_eq!(failure.kind, FailureKind::BadArguments);
        assert!(failure.message.contains(says), "{}", failure.message);
        assert!(reply.record.is_none(), "the tool did not run");
    }
}

// pins K7, C4
#[tokio::test]
async fn the_sync_companion_passes_the_context_and_borrowed_arguments() {
    let ctx = context();
    let direct = send_refund_sync(&ctx, "ord_1".into(), &[1, 2, 3]).unwrap();
    let direct_key = key(&ctx);
    let reply = send_refund_sync::tool()
        .call(json!({"order": "ord_1", "lines": [1, 2, 3]}), ctx.clone())
        .await;
    assert_eq!(reply.result.unwrap(), json!(direct));
    let record = reply.record.unwrap();
    assert_eq!(
        (record.key, record.status),
        (direct_key, CallStatus::Replayed)
    );
}

// pins C4
#[tokio::test]
async fn the_companion_reads_pattern_arguments_by_position() {
    let ctx = context();
    let reply = shapes::tool()
        .call(
            json!({"order": "o", "lines": [], "note": null, "arg3": [1, 2], "retries": 0}),
            ctx.clone(),
        )
        .await;
    assert_eq!(reply.result.unwrap(), json!("o [] None 1,2 1"));
}
