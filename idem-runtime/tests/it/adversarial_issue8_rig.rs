//! adv8: the rig wrapper (contract R1–R3, K7).
//! Run: `cargo test -p idem-runtime --features rig,genai --ignore-rust-version --test it adversarial_issue8_rig::`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use idem_runtime::integrations::rig::{Conversation, Idempotent, IdempotentToolError};
use idem_runtime::{CallContext, Engine, Error};
use rig_core::tool::{Tool, ToolContext};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Args {
    order_id: String,
}

#[derive(Clone, Default)]
struct Slow {
    runs: Arc<AtomicUsize>,
}

impl Tool for Slow {
    const NAME: &'static str = "slow_refund";
    type Args = Args;
    type Output = String;
    type Error = std::convert::Infallible;

    fn description(&self) -> String {
        "slow".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"order_id": {"type": "string"}}})
    }

    async fn call(
        &self,
        _: &mut ToolContext,
        args: Args,
    ) -> Result<String, std::convert::Infallible> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(Duration::from_millis(200)).await;
        Ok(format!("refund #{n} on {}", args.order_id))
    }
}

fn context(engine: &CallContext, conversation: &str) -> ToolContext {
    let mut context = ToolContext::new().with_scope(Arc::new(engine.clone()));
    context.insert(Conversation::new(conversation)).unwrap();
    context
}

// S2/D4 through rig: 16 concurrent calls with the same arguments run the tool once.
// Passing check.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adv8_rig_concurrent_duplicates_run_once() {
    let tool = Slow::default();
    let wrapped = Arc::new(Idempotent::new(tool.clone()).wait(Duration::from_secs(10)));
    let engine = CallContext::new().with_engine(Engine::in_memory());
    let mut handles = Vec::new();
    for _ in 0..16 {
        let (wrapped, engine) = (wrapped.clone(), engine.clone());
        handles.push(tokio::spawn(async move {
            let mut ctx = context(&engine, "adv8_rig_c");
            wrapped
                .call(
                    &mut ctx,
                    Args {
                        order_id: "o1".into(),
                    },
                )
                .await
                .unwrap()
        }));
    }
    for handle in handles {
        assert_eq!(handle.await.unwrap(), "refund #1 on o1");
    }
    assert_eq!(tool.runs.load(Ordering::SeqCst), 1);
}

// K7 ("no conversation id in force is an error, never a silently shared global key") and
// M3 (an MCP conversation id must be a non-empty string: `""` is `bad_meta`): a rig host
// whose conversation id is the empty string (an unset session field) gets every call keyed
// in one shared conversation `""` instead of `MissingScope`.
// pins K7: an empty conversation id is none (found by the adversarial review of issue 8)
#[tokio::test]
async fn adv8_rig_empty_conversation_is_not_missing_scope() {
    let tool = Slow::default();
    let wrapped = Idempotent::new(tool.clone());
    let engine = CallContext::new().with_engine(Engine::in_memory());
    let mut ctx = context(&engine, "");
    let result = wrapped
        .call(
            &mut ctx,
            Args {
                order_id: "o1".into(),
            },
        )
        .await;
    assert!(
        matches!(
            result,
            Err(IdempotentToolError::Idem(Error::MissingScope { .. }))
        ),
        "an empty conversation id was accepted as a conversation: {result:?} (runs: {})",
        tool.runs.load(Ordering::SeqCst)
    );
}

#[derive(Clone, Default)]
struct Quote;

impl Tool for Quote {
    const NAME: &'static str = "quote";
    type Args = Args;
    type Output = Value;
    type Error = std::convert::Infallible;

    fn description(&self) -> String {
        "quote".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"order_id": {"type": "string"}}})
    }

    async fn call(
        &self,
        _: &mut ToolContext,
        _args: Args,
    ) -> Result<Value, std::convert::Infallible> {
        Ok(json!({"zeta": 1, "alpha": 2}))
    }
}

// R1: "every repeat gets the first call's Ok value back … so rig shows the model the same
// output". In a build where serde_json's preserve_order is on (feature `genai` next to `rig`;
// rig-core 0.46 itself does not turn it on, whatever K4 says), a `Value` (or any map) output
// keeps the tool's member order on the first call; the replay is decoded from the envelope,
// whose members are sorted: the model sees `{"alpha":2,"zeta":1}` on a retry after
// `{"zeta":1,"alpha":2}`. Fails with `--features rig,genai`; passes with `--features rig`.
// pins R1 (a defect the adversarial review of issue 8 found; fixed)
#[tokio::test]
async fn adv8_rig_replayed_map_output_keeps_member_order() {
    let wrapped = Idempotent::new(Quote);
    let engine = CallContext::new().with_engine(Engine::in_memory());
    let mut ctx = context(&engine, "adv8_rig_order");
    let first = wrapped
        .call(
            &mut ctx,
            Args {
                order_id: "o".into(),
            },
        )
        .await
        .unwrap();
    let mut ctx = context(&engine, "adv8_rig_order");
    let replay = wrapped
        .call(
            &mut ctx,
            Args {
                order_id: "o".into(),
            },
        )
        .await
        .unwrap();
    assert_eq!(
        serde_json::to_string(&replay).unwrap(),
        serde_json::to_string(&first).unwrap()
    );
}
