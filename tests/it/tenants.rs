//! Tenants on one shared store (contract K7 composite scopes, K11 namespaces, P1, P2),
//! through the attribute.

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use idem_agent::inspect::CallQuery;
use idem_agent::{idempotent, CallContext, CallStatus, Engine, MemoryStore, ScopePath, ToolError};

static REFUNDS: AtomicUsize = AtomicUsize::new(0);
/// The tests count `REFUNDS`: one at a time.
static SERIAL: std::sync::Mutex<()> = std::sync::Mutex::new(());

#[idempotent(scope = "tenant+conversation", audit)]
fn send_refund(order_id: u64, amount_cents: u64) -> Result<String, ToolError> {
    let n = REFUNDS.fetch_add(1, Ordering::SeqCst) + 1;
    Ok(format!(
        "refund #{n} of {amount_cents} for order {order_id}"
    ))
}

// pins K7, P1, P2: two tenants, one store, the same tool, arguments and conversation id: two
// executions; each tenant's retry replays its own; records name the tenant and keep the
// audited key arguments; a call without a tenant is MissingScope
#[test]
fn two_tenants_on_one_store_never_share_a_record() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let engine = Engine::new(MemoryStore::new(), idem_agent::SystemClock);
    let context = |tenant: &str| {
        CallContext::new()
            .with_engine(engine.clone())
            .with_conversation("c-1")
            .with_scope("tenant", tenant)
    };
    let before = REFUNDS.load(Ordering::SeqCst);
    let (acme, globex) = (context("acme"), context("globex"));
    let first = acme.enter(|| send_refund(4417, 500)).unwrap();
    let other = globex.enter(|| send_refund(4417, 500)).unwrap();
    assert_ne!(first, other);
    assert_eq!(REFUNDS.load(Ordering::SeqCst) - before, 2);
    assert_eq!(acme.enter(|| send_refund(4417, 500)).unwrap(), first);
    assert_eq!(acme.last_outcome().unwrap().status, CallStatus::Replayed);
    assert_eq!(REFUNDS.load(Ordering::SeqCst) - before, 2);

    let call = CallQuery::new(
        "send_refund",
        ScopePath::new()
            .with("tenant", "acme")
            .with("conversation", "c-1"),
        serde_json::json!({"order_id": 4417, "amount_cents": 500}),
    );
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .unwrap();
    let found = runtime.block_on(engine.lookup_call(&call)).unwrap();
    assert_eq!(found.key, acme.last_outcome().unwrap().key);
    let label = found.record.unwrap().label.unwrap();
    assert_eq!(label.scope.to_string(), "tenant=acme/conversation=c-1");
    assert_eq!(
        label.key_args.as_deref(),
        Some(r#"{"amount_cents":500,"order_id":4417}"#)
    );

    let no_tenant = CallContext::new()
        .with_engine(engine.clone())
        .with_conversation("c-1");
    let error = no_tenant.enter(|| send_refund(4417, 500)).unwrap_err();
    assert!(error.to_string().contains("tenant"), "{error}");
}

// pins K11: engines with different namespaces over one store derive different keys for the
// same call, and neither replays the other's outcome
#[test]
fn namespaces_keep_deployments_apart() {
    let _serial = SERIAL.lock().unwrap_or_else(|p| p.into_inner());
    let store: Arc<dyn idem_agent::Store> = Arc::new(MemoryStore::new());
    let engine = |namespace: &str| {
        Engine::builder()
            .shared_store(store.clone())
            .namespace(namespace)
            .build()
            .unwrap()
    };
    let before = REFUNDS.load(Ordering::SeqCst);
    let mut keys = Vec::new();
    for namespace in ["eu-prod", "us-prod"] {
        let context = CallContext::new()
            .with_engine(engine(namespace))
            .with_conversation("c-1")
            .with_scope("tenant", "acme");
        context.enter(|| send_refund(1, 1)).unwrap();
        let outcome = context.last_outcome().unwrap();
        assert_eq!(outcome.status, CallStatus::Executed);
        keys.push(outcome.key);
    }
    assert_ne!(keys[0], keys[1]);
    assert_eq!(REFUNDS.load(Ordering::SeqCst) - before, 2);
    let bad = Engine::builder().namespace("").build().unwrap_err();
    assert!(bad.to_string().contains("namespace"), "{bad}");
    let bad = Engine::builder()
        .namespace("tab\there")
        .build()
        .unwrap_err();
    assert!(bad.to_string().contains("printable"), "{bad}");
}
