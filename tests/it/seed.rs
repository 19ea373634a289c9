//! The four seed scenarios of the product, written with the public test kit (T1–T4) the
//! way a user would write them.

use std::sync::{Arc, LazyLock};
use std::time::Duration;

use serde::{Deserialize, Serialize};

use idem_agent::dispatch::{Conversation, Dispatcher, RetryPolicy};
use idem_agent::testkit::{EffectLog, FailOn, LosingTransport, ManualClock, ScriptedModel};
use idem_agent::{idempotent, CallContext, CallStatus, Engine, MemoryStore, ToolError};

/// The payment provider's side: every refund that really happened.
static REFUNDS: LazyLock<EffectLog> = LazyLock::new(EffectLog::new);

#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
struct Refund {
    refund_id: String,
    order_id: String,
    amount_cents: u64,
}

/// The side-effecting tool under test.
#[idempotent(scope = "conversation", ttl = "24h")]
async fn send_refund(order_id: String, amount_cents: u64) -> Result<Refund, ToolError> {
    // The effect lands, carrying the idempotency key downstream (K10).
    REFUNDS.record("send_refund", format!("{order_id}:{amount_cents}"));
    Ok(Refund {
        refund_id: format!("re_{}", REFUNDS.len()),
        order_id,
        amount_cents,
    })
}

fn engine(clock: &ManualClock) -> Engine {
    Engine::from_shared(Arc::new(MemoryStore::new()), Arc::new(clock.clone()))
}

fn refunds_for(order: &str) -> usize {
    REFUNDS
        .effects()
        .iter()
        .filter(|e| e.detail.starts_with(&format!("{order}:")))
        .count()
}

const ONE_REFUND: &str = r#"{"role":"assistant","content":null,"tool_calls":[
  {"id":"call_1","type":"function","function":{"name":"send_refund","arguments":"{\"order_id\":\"ord_seed_a\",\"amount_cents\":1500}"}}]}"#;

// Seed (a). pins T2, T3, T4, D3, K9, S3
#[tokio::test]
async fn lost_first_response_is_retried_and_the_refund_happens_once() {
    let clock = ManualClock::new();
    let transport = Arc::new(LosingTransport::new(FailOn::FirstAttempt));
    let dispatcher = Dispatcher::builder()
        .tool(send_refund::tool())
        .engine(engine(&clock))
        .retry(RetryPolicy::immediate(3))
        .transport(transport.clone())
        .build()
        .unwrap();
    let model = ScriptedModel::from_json(ONE_REFUND).unwrap();
    let turn = model.next_turn().unwrap();
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_seed_a"))
        .await;
    model.send_results(&outcome);

    // The retry happened.
    assert_eq!(transport.invocation_count(), 2);
    // The effect happened once.
    assert_eq!(refunds_for("ord_seed_a"), 1);
    // Both attempts carried the same key, the one the effect carried.
    let keys: Vec<_> = transport.invocations().into_iter().map(|i| i.key).collect();
    assert_eq!(keys.len(), 2);
    assert!(keys[0].is_some() && keys[0] == keys[1], "{keys:?}");
    let effect = REFUNDS
        .effects()
        .into_iter()
        .find(|e| e.detail.starts_with("ord_seed_a:"))
        .unwrap();
    assert_eq!(effect.key, keys[0]);
    // The agent was told success, with the first attempt's outcome, replayed.
    assert!(model.was_told_success("call_1"));
    assert_eq!(outcome.calls[0].status(), Some(CallStatus::Replayed));
}

const TWO_REFUNDS: &str = r#"{"role":"assistant","content":null,"tool_calls":[
  {"id":"call_1","type":"function","function":{"name":"send_refund","arguments":"{\"order_id\":\"ord_seed_b1\",\"amount_cents\":100}"}},
  {"id":"call_2","type":"function","function":{"name":"send_refund","arguments":"{\"order_id\":\"ord_seed_b2\",\"amount_cents\":100}"}}]}"#;

// Seed (b). pins D4, K2
#[tokio::test]
async fn two_different_refunds_in_one_conversation_both_happen() {
    let clock = ManualClock::new();
    let dispatcher = Dispatcher::builder()
        .tool(send_refund::tool())
        .engine(engine(&clock))
        .build()
        .unwrap();
    let model = ScriptedModel::from_json(TWO_REFUNDS).unwrap();
    let outcome = dispatcher
        .dispatch_turn(
            &model.next_turn().unwrap(),
            &Conversation::new("conv_seed_b"),
        )
        .await;
    model.send_results(&outcome);
    assert_eq!(refunds_for("ord_seed_b1"), 1);
    assert_eq!(refunds_for("ord_seed_b2"), 1);
    assert_ne!(outcome.calls[0].key, outcome.calls[1].key);
    assert!(model.was_told_success("call_1") && model.was_told_success("call_2"));
}

// Seed (c): a recorded Gemini message with three identical calls (no call ids) gives one effect.
// pins D1, D4, S2, S5
#[tokio::test]
async fn recorded_identical_calls_give_one_effect() {
    static TOPICS: LazyLock<EffectLog> = LazyLock::new(EffectLog::new);

    #[idempotent]
    async fn generate_topic() -> Result<String, ToolError> {
        TOPICS.record("generate_topic", "");
        Ok("the history of tea".to_owned())
    }

    let path = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/examples/transcripts/gemini-identical-calls-no-id.json"
    );
    let model = ScriptedModel::from_file(path).unwrap();
    let dispatcher = Dispatcher::builder()
        .tool(generate_topic::tool())
        .engine(engine(&ManualClock::new()))
        .build()
        .unwrap();
    let turn = model.next_turn().unwrap();
    assert_eq!(turn.calls.len(), 3);
    let outcome = dispatcher
        .dispatch_turn(&turn, &Conversation::new("conv_seed_c"))
        .await;
    model.send_results(&outcome);
    assert_eq!(TOPICS.len(), 1);
    assert!(outcome.all_ok());
    assert!(outcome.calls.iter().all(|c| model.was_told_success(&c.id)));
}

// Seed (d): the TTL boundary, moved by the manual clock. pins S8, T1
#[tokio::test]
async fn ttl_boundary_replays_at_ttl_minus_one_ms_and_runs_again_at_ttl() {
    let clock = ManualClock::new();
    let ctx = CallContext::new()
        .with_engine(engine(&clock))
        .with_conversation("conv_seed_d");
    let first = ctx
        .run(send_refund("ord_seed_d".into(), 700))
        .await
        .unwrap();
    clock.advance(Duration::from_secs(24 * 60 * 60) - Duration::from_millis(1));
    let replay = ctx
        .run(send_refund("ord_seed_d".into(), 700))
        .await
        .unwrap();
    assert_eq!(replay, first);
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Replayed);
    assert_eq!(refunds_for("ord_seed_d"), 1);
    clock.advance(Duration::from_millis(1));
    let again = ctx
        .run(send_refund("ord_seed_d".into(), 700))
        .await
        .unwrap();
    assert_eq!(ctx.last_outcome().unwrap().status, CallStatus::Executed);
    assert_ne!(again.refund_id, first.refund_id);
    assert_eq!(refunds_for("ord_seed_d"), 2);
}
