//! `#[idempotent]` written above rmcp's `#[tool]` on a server's methods, with nothing else:
//! the attribute adds the extractor, keys the call on its JSON arguments and conversation,
//! and returns rmcp's result with idem's `_meta`. The facade is a renamed dependency here
//! (`idem = { package = "idem-agent", … }`), so the attribute must find it as `idem` (C5).

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{call, connect, meta, text};
use idem::idempotent;
use idem::integrations::rmcp::IdempotentServer;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::{tool, tool_handler, tool_router, ServerHandler};
use serde_json::json;

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Refund {
    order_id: String,
    amount_cents: u64,
}

#[derive(Debug, serde::Serialize, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Receipt {
    refund: usize,
    order_id: String,
}

#[derive(Clone, Default)]
struct Refunds {
    runs: Arc<AtomicUsize>,
}

impl Refunds {
    fn run(&self) -> usize {
        self.runs.fetch_add(1, Ordering::SeqCst) + 1
    }
}

#[tool_router]
impl Refunds {
    /// An async method returning text.
    #[idempotent]
    #[tool]
    async fn send_refund(&self, Parameters(refund): Parameters<Refund>) -> String {
        format!("refund #{} on {}", self.run(), refund.order_id)
    }

    /// A sync method returning a `Result`, keyed by `order_id` only: `amount_cents` is the
    /// fingerprint; rmcp's own name for it.
    #[idempotent(key(order_id), scope = "global")]
    #[tool(name = "charge-order", description = "Charges an order")]
    fn charge(&self, Parameters(refund): Parameters<Refund>) -> Result<String, String> {
        if refund.amount_cents == 0 {
            return Err(format!("charge #{} refused: nothing to charge", self.run()));
        }
        Ok(format!("charge #{} of {}", self.run(), refund.amount_cents))
    }

    /// Structured output: rmcp's output schema for `Json<T>` is kept.
    #[idempotent(ttl = "1h", lease = "30s")]
    #[tool(meta = rmcp::model::MetaObject(serde_json::json!({"owner": "billing"}).as_object().unwrap().clone()))]
    async fn receipt(&self, Parameters(refund): Parameters<Refund>) -> Json<Receipt> {
        Json(Receipt {
            refund: self.run(),
            order_id: refund.order_id,
        })
    }

    /// Not annotated: under `IdempotentServer` it is keyed with the server's settings.
    #[tool]
    async fn note(&self, Parameters(refund): Parameters<Refund>) -> String {
        format!("note #{} on {}", self.run(), refund.order_id)
    }
}

#[tool_handler]
impl ServerHandler for Refunds {}

fn refund(order: &str, cents: u64) -> serde_json::Value {
    json!({"order_id": order, "amount_cents": cents})
}

// pins M1, M3, C5: the attribute alone makes the rmcp tool idempotent: the same call in one
// conversation replays, another order or conversation executes, no conversation is a tool
// error that says what to send
#[tokio::test]
async fn the_attribute_above_tool_replays_a_retried_call() {
    let server = Refunds::default();
    let runs = server.runs.clone();
    let client = connect(server).await;
    let c9 = json!({"conversationId": "attr-c9"});
    let first = client
        .call_tool(call("send_refund", refund("o1", 500), c9.clone()))
        .await
        .unwrap();
    let retry = client
        .call_tool(call("send_refund", refund("o1", 500), c9.clone()))
        .await
        .unwrap();
    assert_eq!(text(&first), "refund #1 on o1");
    assert_eq!(text(&retry), "refund #1 on o1");
    assert_eq!(meta(&first, "idem/status"), "executed");
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    assert_eq!(meta(&first, "idem/key"), meta(&retry, "idem/key"));
    let other = client
        .call_tool(call("send_refund", refund("o2", 500), c9.clone()))
        .await
        .unwrap();
    assert_eq!(text(&other), "refund #2 on o2");
    let elsewhere = client
        .call_tool(call(
            "send_refund",
            refund("o1", 500),
            json!({"conversationId": "attr-c10"}),
        ))
        .await
        .unwrap();
    assert_eq!(text(&elsewhere), "refund #3 on o1");
    let anonymous = client
        .call_tool(call("send_refund", refund("o1", 500), json!({})))
        .await
        .unwrap();
    assert_eq!(anonymous.is_error, Some(true));
    assert!(
        text(&anonymous).contains("_meta.conversationId"),
        "{anonymous:?}"
    );
    assert_eq!(meta(&anonymous, "idem/error"), "missing_scope");
    assert_eq!(runs.load(Ordering::SeqCst), 3);
    client.cancel().await.unwrap();
}

// pins M2, S9, K6, S4: `key(…)` names argument members (the rest is the fingerprint, a
// reuse with another amount is a conflict), rmcp's `#[tool(name)]` is the name in the key,
// a sync method works, and an `Err` result is saved and replayed as `isError`
#[tokio::test]
async fn key_selection_names_and_errors_follow_the_contract() {
    let server = Refunds::default();
    let runs = server.runs.clone();
    let client = connect(server).await;
    let none = json!({});
    let first = client
        .call_tool(call("charge-order", refund("o1", 500), none.clone()))
        .await
        .unwrap();
    assert_eq!(text(&first), "charge #1 of 500");
    let conflict = client
        .call_tool(call("charge-order", refund("o1", 700), none.clone()))
        .await
        .unwrap();
    assert_eq!(conflict.is_error, Some(true));
    assert_eq!(meta(&conflict, "idem/error"), "conflict", "{conflict:?}");
    let refused = client
        .call_tool(call("charge-order", refund("o2", 0), none.clone()))
        .await
        .unwrap();
    let refused_again = client
        .call_tool(call("charge-order", refund("o2", 0), none.clone()))
        .await
        .unwrap();
    assert_eq!(refused.is_error, Some(true));
    assert_eq!(text(&refused), "charge #2 refused: nothing to charge");
    assert_eq!(text(&refused_again), text(&refused));
    assert_eq!(meta(&refused_again, "idem/status"), "replayed");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    client.cancel().await.unwrap();
}

// pins M1, M9: a `Json<T>` tool keeps rmcp's output schema and its structured content is
// replayed; the user's own tool `meta` is kept beside idem's marker
#[tokio::test]
async fn structured_output_and_tool_meta_survive_the_attribute() {
    let client = connect(Refunds::default()).await;
    let tools = client.list_all_tools().await.unwrap();
    let receipt = tools.iter().find(|t| t.name == "receipt").unwrap();
    assert!(receipt.output_schema.is_some(), "{receipt:?}");
    let tool_meta = receipt.meta.as_ref().unwrap();
    assert_eq!(tool_meta.get("owner"), Some(&json!("billing")));
    assert!(tool_meta.get("idem/idempotent").is_some(), "{tool_meta:?}");
    let note = tools.iter().find(|t| t.name == "note").unwrap();
    assert!(
        note.meta.is_none(),
        "an unannotated tool is not marked: {note:?}"
    );

    let c = json!({"conversationId": "attr-json"});
    let first = client
        .call_tool(call("receipt", refund("o9", 1), c.clone()))
        .await
        .unwrap();
    let retry = client
        .call_tool(call("receipt", refund("o9", 1), c))
        .await
        .unwrap();
    assert_eq!(
        first.structured_content,
        Some(json!({"refund": 1, "order_id": "o9"}))
    );
    assert_eq!(retry.structured_content, first.structured_content);
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    client.cancel().await.unwrap();
}

// pins M8: under `IdempotentServer`, an annotated tool keeps its own settings (a global
// tool needs no conversation) and is keyed once, an unannotated tool is keyed with the
// server's defaults
#[tokio::test]
async fn the_server_wrapper_defers_to_the_attribute() {
    let server = Refunds::default();
    let runs = server.runs.clone();
    let client = connect(IdempotentServer::new(server)).await;
    let none = json!({});
    let charged = client
        .call_tool(call("charge-order", refund("w1", 5), none.clone()))
        .await
        .unwrap();
    let again = client
        .call_tool(call("charge-order", refund("w1", 5), none.clone()))
        .await
        .unwrap();
    assert_eq!(text(&charged), "charge #1 of 5");
    assert_eq!(meta(&again, "idem/status"), "replayed");
    let unscoped = client
        .call_tool(call("note", refund("w1", 5), none))
        .await
        .unwrap();
    assert_eq!(
        meta(&unscoped, "idem/error"),
        "missing_scope",
        "{unscoped:?}"
    );
    let c = json!({"conversationId": "wrapped"});
    let noted = client
        .call_tool(call("note", refund("w1", 5), c.clone()))
        .await
        .unwrap();
    let noted_again = client
        .call_tool(call("note", refund("w1", 5), c))
        .await
        .unwrap();
    assert_eq!(text(&noted), "note #2 on w1");
    assert_eq!(text(&noted_again), "note #2 on w1");
    assert_eq!(meta(&noted_again, "idem/status"), "replayed");
    assert_eq!(runs.load(Ordering::SeqCst), 2);
    client.cancel().await.unwrap();
}

// pins M3, M9: the conversation member an `IdempotentServer` is configured with
// (`threadId`) is the one its annotated tools read too
#[tokio::test]
async fn annotated_tools_read_the_servers_conversation_member() {
    let server = IdempotentServer::builder(Refunds::default())
        .conversation_meta_key("threadId")
        .build()
        .unwrap();
    let client = connect(server).await;
    let thread = json!({"threadId": "attr-thread-1"});
    let first = client
        .call_tool(call("send_refund", refund("t1", 5), thread.clone()))
        .await
        .unwrap();
    let retry = client
        .call_tool(call("send_refund", refund("t1", 5), thread))
        .await
        .unwrap();
    assert_eq!(meta(&first, "idem/status"), "executed", "{first:?}");
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    let other_member = client
        .call_tool(call(
            "send_refund",
            refund("t1", 5),
            json!({"conversationId": "attr-thread-1"}),
        ))
        .await
        .unwrap();
    assert_eq!(meta(&other_member, "idem/error"), "missing_scope");
    assert!(
        text(&other_member).contains("_meta.threadId"),
        "{other_member:?}"
    );
    client.cancel().await.unwrap();
}
