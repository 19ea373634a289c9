//! A composite scope (K7) on the rig wrapper (R3, R5): the host context's named parts reach
//! the call. (Found by the adversarial review of issue 9: only a single named scope was
//! copied, so a composite always failed with MissingScope.)

#![cfg(feature = "rig")]

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use idem_runtime::integrations::rig::Idempotent;
use idem_runtime::{CallContext, Engine, Scope};
use rig_core::tool::{Tool, ToolContext};
use serde::{Deserialize, Serialize};
use serde_json::{json, Value};

#[derive(Debug, Clone, Serialize, Deserialize)]
struct Args {
    order_id: String,
}

#[derive(Clone, Default)]
struct Ticket(Arc<AtomicUsize>);

#[derive(Debug, thiserror::Error)]
#[error("never")]
struct Never;

impl Tool for Ticket {
    const NAME: &'static str = "open_ticket";
    type Args = Args;
    type Output = u64;
    type Error = Never;
    fn description(&self) -> String {
        "t".into()
    }
    fn parameters(&self) -> Value {
        json!({"type": "object", "properties": {"order_id": {"type": "string"}}})
    }
    async fn call(&self, _c: &mut ToolContext, _a: Args) -> Result<u64, Never> {
        Ok(self.0.fetch_add(1, Ordering::SeqCst) as u64 + 1)
    }
}

static PARTS: [Scope; 2] = [Scope::Named("tenant"), Scope::Conversation];
static COMPOSITE: Scope = Scope::Composite {
    kind: "tenant+conversation",
    parts: &PARTS,
};

// pins K7, R3, R5
#[tokio::test]
async fn a_composite_scope_reads_its_named_parts_from_the_host() {
    let host = CallContext::new()
        .with_engine(Engine::in_memory())
        .with_conversation("c-1")
        .with_scope("tenant", "acme");
    let mut context = ToolContext::new().with_scope(Arc::new(host.clone()));
    // control: a single named scope works
    let single = Idempotent::new(Ticket::default()).scope(Scope::Named("tenant"));
    let r = single
        .call(
            &mut context,
            Args {
                order_id: "o1".into(),
            },
        )
        .await;
    assert!(r.is_ok(), "single named scope: {r:?}");
    let composite = Idempotent::new(Ticket::default()).scope(COMPOSITE);
    let r = composite
        .call(
            &mut context,
            Args {
                order_id: "o1".into(),
            },
        )
        .await;
    assert!(
        r.is_ok(),
        "K7/R3: composite scope with both parts in the host context: {r:?}"
    );
}
