//! Regressions found by the adversarial review against the contract (K3, K7, K9, S5, S7).
//! Each test failed before its fix.
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_agent::dispatch::{parse_turns, Conversation, Dispatcher, Tool};
use idem_agent::key::IdempotencyKey;
use idem_agent::store::{Claim, ClaimRequest, StoreFuture};
use idem_agent::testkit::{EffectLog, ManualClock};
use idem_agent::{idempotent, CallContext, Engine, MemoryStore, Store, ToolError};
use serde_json::json;

use crate::intercept::{Intercept, Intercepted};

fn engine() -> Engine {
    Engine::from_shared(Arc::new(MemoryStore::new()), Arc::new(ManualClock::new()))
}

static LOG: std::sync::LazyLock<EffectLog> = std::sync::LazyLock::new(EffectLog::new);

#[idempotent(dispatch = false)]
fn adv_send_refund(order: u64) -> Result<u64, ToolError> {
    LOG.record("adv_send_refund", order.to_string());
    Ok(order * 100)
}

#[derive(serde::Deserialize)]
struct Batch {
    orders: Vec<u64>,
}

// pins K9: a carried key must never leak to a different call. A dispatched tool whose handler
// refunds two orders through the same #[idempotent] tool gets the FIRST order's key for the
// second refund: the second refund never happens and its "result" is the first one's.
#[tokio::test]
async fn k9_carried_key_leaks_to_a_second_call_of_the_same_tool_in_one_handler() {
    let batch = Tool::from_sync("refund_batch", |a: Batch, _ctx: CallContext| {
        let mut out = Vec::new();
        for order in a.orders {
            out.push(adv_send_refund(order)?);
        }
        Ok::<_, ToolError>(out)
    });
    let dispatcher = Dispatcher::builder()
        .tool(batch)
        .engine(engine())
        .build()
        .unwrap();
    let turns = parse_turns(&json!({"role": "assistant", "content": [
        {"type": "tool_use", "id": "toolu_1", "name": "refund_batch", "input": {"orders": [7, 8]}}]}))
    .unwrap();
    let before = LOG.len();
    let outcome = dispatcher
        .dispatch_turn(&turns[0], &Conversation::new("conv_k9"))
        .await;
    let value = outcome.calls[0].reply.result.clone().unwrap();
    assert_eq!(value, json!([700, 800]), "order 8 got order 7's outcome");
    assert_eq!(LOG.len() - before, 2, "order 8 was never refunded");
}

#[idempotent(scope = "call", dispatch = true)]
fn adv_roll_die(sides: u32) -> Result<u32, ToolError> {
    static N: AtomicUsize = AtomicUsize::new(0);
    Ok((N.fetch_add(1, Ordering::SeqCst) as u32) % sides + 1)
}

// pins K7, K9: scope="call" / a `call`-scoped tool is keyed on the tool-call id alone. MCP request
// ids ("1", "2", …) restart in every session and Gemini's synthesized ids ("0:0") repeat in
// every response without `responseId`: distinct rolls in other conversations/turns replay.
#[tokio::test]
async fn k7_call_scope_is_shared_across_conversations_with_reused_call_ids() {
    let dispatcher = Dispatcher::builder()
        .tool(adv_roll_die::tool())
        .engine(engine())
        .build()
        .unwrap();
    let mcp = json!({"jsonrpc": "2.0", "id": 1, "method": "tools/call",
        "params": {"name": "adv_roll_die", "arguments": {"sides": 1000}}});
    let turn = &parse_turns(&mcp).unwrap()[0];
    let a = dispatcher
        .dispatch_turn(turn, &Conversation::new("session_alice"))
        .await;
    let b = dispatcher
        .dispatch_turn(turn, &Conversation::new("session_bob"))
        .await;
    assert_ne!(
        a.calls[0].key, b.calls[0].key,
        "two sessions' distinct rolls share one key"
    );
}

// pins K7, K9, D1: synthesized Gemini ids differ between separately parsed responses
#[tokio::test]
async fn k7_call_scope_gemini_synthesized_ids_repeat_across_turns() {
    let dispatcher = Dispatcher::builder()
        .tool(adv_roll_die::tool())
        .engine(engine())
        .build()
        .unwrap();
    let gemini = json!({"candidates": [{"content": {"role": "model",
        "parts": [{"functionCall": {"name": "adv_roll_die", "args": {"sides": 1000}}}]}}]});
    let conv = Conversation::new("conv_dice");
    let t1 = dispatcher
        .dispatch_turn(&parse_turns(&gemini).unwrap()[0], &conv)
        .await;
    let t2 = dispatcher
        .dispatch_turn(&parse_turns(&gemini).unwrap()[0], &conv)
        .await;
    assert_ne!(
        t1.calls[0].key, t2.calls[0].key,
        "the roll of the next turn replays the first"
    );
}

// pins K3, K1: the exactness annex does not say which number it belongs to; a float and an
// unsafe integer trading places give the same canonical form and the same key.
#[idempotent(scope = "global", dispatch = false)]
fn adv_transfer(
    from_account: serde_json::Value,
    to_account: serde_json::Value,
) -> Result<String, ToolError> {
    Ok(format!("{from_account}->{to_account}"))
}

#[test]
fn k3_annex_position_collision() {
    let ctx = CallContext::new().with_engine(engine());
    let big = serde_json::Value::from((1u64 << 53) + 1);
    let flt = serde_json::Value::from(9007199254740992.0f64);
    let first = ctx
        .enter(|| adv_transfer(big.clone(), flt.clone()))
        .unwrap();
    let second = ctx
        .enter(|| adv_transfer(flt.clone(), big.clone()))
        .unwrap();
    assert_ne!(first, second, "the second transfer replayed the first");
}

/// Counts claims per key.
#[derive(Debug, Default)]
struct Counting {
    claims: std::sync::Mutex<std::collections::HashMap<IdempotencyKey, usize>>,
}
impl Intercept for Counting {
    fn claim<'a>(&'a self, inner: &'a dyn Store, req: ClaimRequest<'a>) -> StoreFuture<'a, Claim> {
        *self
            .claims
            .lock()
            .unwrap()
            .entry(req.key.clone())
            .or_default() += 1;
        inner.claim(req)
    }
    fn backend(&self) -> Option<&'static str> {
        Some("counting")
    }
}

#[idempotent(scope = "global", wait = "60s", skip(gate), dispatch = false)]
async fn adv_slow(gate: Arc<tokio::sync::Notify>, n: u32) -> Result<u32, ToolError> {
    if n == 0 {
        gate.notified().await;
    }
    Ok(n)
}

// pins S5: a waiting duplicate is woken by every change to ANY key of the store (MemoryStore has
// one global watch channel) and re-claims its key each time: "no polling tighter than
// needed" fails; store traffic of waiters grows with unrelated traffic (thundering herd).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn s5_waiter_wakes_and_reclaims_on_unrelated_keys() {
    let store = Arc::new(Intercepted::new(
        Arc::new(MemoryStore::new()),
        Counting::default(),
    ));
    let engine = Engine::from_shared(store.clone(), Arc::new(ManualClock::new()));
    let ctx = CallContext::new().with_engine(engine);
    let gate = Arc::new(tokio::sync::Notify::new());
    let owner = tokio::spawn(ctx.run(adv_slow(gate.clone(), 0)));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let waiter = tokio::spawn(ctx.run(adv_slow(gate.clone(), 0)));
    tokio::time::sleep(Duration::from_millis(20)).await;
    let key_claims = || *store.claims.lock().unwrap().values().max().unwrap();
    let before = key_claims(); // owner's claim + the waiter's look, subscribe, look
    for i in 1..=200u32 {
        ctx.run(adv_slow(gate.clone(), i)).await.unwrap(); // unrelated keys
        tokio::time::sleep(Duration::from_millis(1)).await;
    }
    let during = key_claims();
    gate.notify_one();
    owner.await.unwrap().unwrap();
    assert_eq!(waiter.await.unwrap(), Ok(0));
    assert_eq!(
        during,
        before,
        "the waiter re-claimed its key {} times while its owner was still running",
        during - before
    );
}

#[derive(Debug, PartialEq)]
struct Explosive;

impl serde::Serialize for Explosive {
    fn serialize<S: serde::Serializer>(&self, _: S) -> Result<S::Ok, S::Error> {
        panic!("Serialize of the outcome panicked");
    }
}

impl<'de> serde::Deserialize<'de> for Explosive {
    fn deserialize<D: serde::Deserializer<'de>>(_: D) -> Result<Self, D::Error> {
        Ok(Explosive)
    }
}

static EXPLOSIONS: std::sync::LazyLock<EffectLog> = std::sync::LazyLock::new(EffectLog::new);

#[idempotent(scope = "global", wait = "0s", dispatch = false)]
fn adv_explode(n: u32) -> Result<Explosive, ToolError> {
    EXPLOSIONS.record("adv_explode", n.to_string());
    Ok(Explosive)
}

// pins S7, S10: once the body has returned, a panic while saving its outcome must not release
// the claim: the effect happened, so no second run before the lease lapses
#[test]
fn panic_while_saving_the_outcome_keeps_the_claim() {
    let ctx = CallContext::new().with_engine(engine());
    let first = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| {
        ctx.enter(|| adv_explode(1))
    }));
    assert!(first.is_err());
    let second = ctx.enter(|| adv_explode(1));
    assert!(
        matches!(
            second,
            Err(ToolError::Idem(idem_agent::Error::InProgress { .. }))
        ),
        "{second:?}"
    );
    assert_eq!(EXPLOSIONS.len(), 1, "the body ran once");
}
