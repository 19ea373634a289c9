//! `#[idempotent]` on the method rig users write: `Tool::call` in `impl Tool for …`. The
//! attribute works on trait-impl methods; the conversation comes from the `CallContext` in
//! force around the rig run (the attribute cannot read rig's `ToolContext`), the tool's
//! `name` must be given (every such method is called `call`), and the `ToolContext`
//! parameter is skipped (it is `Serialize`, and holds the host's values, not the intent).
//!
//! Run: `cargo test -p idem-integration-tests --features rig --ignore-rust-version --test it rig_method::`.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use idem::{idempotent, CallContext, Engine, ToolError};
use rig_core::serve::adapters::ToolAdapter;
use rig_core::tool::{Tool, ToolContext};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct RefundArgs {
    order_id: String,
    amount_cents: u64,
}

#[derive(Clone, Default)]
struct SendRefund {
    runs: Arc<AtomicUsize>,
}

impl Tool for SendRefund {
    const NAME: &'static str = "send_refund";
    type Args = RefundArgs;
    type Output = String;
    type Error = ToolError;

    fn description(&self) -> String {
        "Refunds an order".into()
    }

    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}}})
    }

    #[idempotent(name = "send_refund", skip(context))]
    async fn call(&self, context: &mut ToolContext, args: RefundArgs) -> Result<String, ToolError> {
        let _ = context;
        let run = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        Ok(format!(
            "refund #{run} of {} on {}",
            args.amount_cents, args.order_id
        ))
    }
}

// pins R3, K7, S3: with the conversation in force around the run, rig's repeat of a call
// replays the first output; another conversation executes; none is MissingScope, before
// the body runs
#[tokio::test]
async fn the_attribute_on_rigs_call_method_replays() {
    let tool = SendRefund::default();
    let adapter = ToolAdapter::new(tool.clone());
    let engine = Engine::in_memory();
    let args = json!({"order_id": "ord_7", "amount_cents": 500});
    let ctx = CallContext::new()
        .with_engine(engine.clone())
        .with_conversation("rig-c9");
    let (first, retry) = ctx
        .run(async {
            let mut context = ToolContext::new();
            let first = adapter.run_with(&mut context, args.clone()).await.unwrap();
            let retry = adapter.run_with(&mut context, args.clone()).await.unwrap();
            (first, retry)
        })
        .await;
    assert_eq!(first.as_text(), Some("refund #1 of 500 on ord_7"));
    assert_eq!(retry.as_text(), first.as_text());
    assert_eq!(tool.runs.load(Ordering::SeqCst), 1);

    let elsewhere = CallContext::new()
        .with_engine(engine)
        .with_conversation("rig-c10");
    let other = elsewhere
        .run(async {
            adapter
                .run_with(&mut ToolContext::new(), args.clone())
                .await
        })
        .await
        .unwrap();
    assert_eq!(other.as_text(), Some("refund #2 of 500 on ord_7"));

    let nobody = adapter
        .run_with(&mut ToolContext::new(), args)
        .await
        .unwrap_err();
    let cause = std::error::Error::source(&nobody).map(|e| e.to_string());
    assert!(
        cause
            .as_deref()
            .is_some_and(|c| c.contains("no conversation value is in force")),
        "{nobody:?}: {cause:?}"
    );
    assert_eq!(tool.runs.load(Ordering::SeqCst), 2);
}
