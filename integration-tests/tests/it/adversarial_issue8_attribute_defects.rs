//! Adversarial review of issue 8 (defects found, now fixed): `#[idempotent]` above rmcp's
//! `#[tool]` with `key(…)`/`skip(…)` naming a member the arguments do not have (M2, K8,
//! C3). A raw-identifier method (rmcp names it `r#type`) is a compile error now, pinned by
//! idem-macros' `a_raw_identifier_needs_a_name`.

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{call, connect, meta, text};
use idem::idempotent;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_handler, tool_router, ServerHandler};
use serde_json::json;

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
#[allow(dead_code)] // the schema lists every member; the bodies read order_id
struct Refund {
    order_id: String,
    amount_cents: u64,
    #[serde(default)]
    requested_at: u64,
}

#[derive(Clone)]
struct Typos {
    runs: Arc<AtomicUsize>,
    #[allow(dead_code)]
    tool_router: ToolRouter<Self>,
}

impl Typos {
    fn new() -> Self {
        Typos {
            runs: Arc::default(),
            tool_router: Self::tool_router(),
        }
    }
    fn run(&self) -> usize {
        self.runs.fetch_add(1, Ordering::SeqCst) + 1
    }
}

#[tool_router]
impl Typos {
    /// `skip(requested_att)`: a typo of `requested_at`. Was accepted without a word; now a
    /// `bad_configuration` tool error before the tool runs (M2).
    #[idempotent(skip(requested_att))]
    #[tool]
    async fn skip_typo(&self, Parameters(r): Parameters<Refund>) -> String {
        format!("refund #{} on {}", self.run(), r.order_id)
    }

    /// `key(ordr)`: a typo of `order_id`: every call of the conversation shared one key.
    #[idempotent(key(ordr))]
    #[tool]
    async fn key_typo(&self, Parameters(r): Parameters<Refund>) -> String {
        format!("refund #{} on {}", self.run(), r.order_id)
    }
}

#[tool_handler]
impl ServerHandler for Typos {}

// A retry of one refund whose `requested_at` differs (the reason to skip it) runs the
// refund twice: the misspelt skip left `requested_at` in the key.
// pins M2, K8 (a defect the adversarial review of issue 8 found; fixed)
#[tokio::test]
async fn adv8_skip_naming_an_absent_member_is_not_reported() {
    let client = connect(Typos::new()).await;
    let c = json!({"conversationId": "adv8-skip-typo"});
    let first = client
        .call_tool(call(
            "skip_typo",
            json!({"order_id": "o1", "amount_cents": 5, "requested_at": 1}),
            c.clone(),
        ))
        .await
        .unwrap();
    let retry = client
        .call_tool(call(
            "skip_typo",
            json!({"order_id": "o1", "amount_cents": 5, "requested_at": 2}),
            c,
        ))
        .await
        .unwrap();
    assert_eq!(meta(&first, "idem/error"), "bad_configuration", "{first:?}");
    assert!(
        text(&first).contains("`skip(…)` names `requested_att`"),
        "{first:?}"
    );
    assert_eq!(meta(&retry, "idem/error"), "bad_configuration");
    let runs_after = client
        .call_tool(call(
            "key_typo",
            json!({"order_id": "o9", "amount_cents": 1}),
            json!({"conversationId": "x"}),
        ))
        .await
        .unwrap();
    assert_eq!(meta(&runs_after, "idem/error"), "bad_configuration");
    assert!(
        meta(&retry, "idem/status") != "executed" || meta(&first, "idem/error") != &json!(null),
        "skip(requested_att) names no member of Refund, yet it was accepted and the retry ran the refund again: {} / {}",
        text(&first),
        text(&retry)
    );
    client.cancel().await.unwrap();
}

// Two different orders in one conversation: the second is refused as a conflict because the
// misspelt key left the key empty.
// pins M2, K8 (a defect the adversarial review of issue 8 found; fixed)
#[tokio::test]
async fn adv8_key_naming_an_absent_member_is_not_reported() {
    let client = connect(Typos::new()).await;
    let c = json!({"conversationId": "adv8-key-typo"});
    let first = client
        .call_tool(call(
            "key_typo",
            json!({"order_id": "o1", "amount_cents": 5}),
            c.clone(),
        ))
        .await
        .unwrap();
    let other_order = client
        .call_tool(call(
            "key_typo",
            json!({"order_id": "o2", "amount_cents": 5}),
            c,
        ))
        .await
        .unwrap();
    assert_eq!(meta(&first, "idem/error"), "bad_configuration", "{first:?}");
    assert!(text(&first).contains("`key(…)` names `ordr`"), "{first:?}");
    assert_eq!(
        meta(&other_order, "idem/error"),
        "bad_configuration",
        "key(ordr) names no member of Refund; another order was refused instead of the typo being reported: {}",
        text(&other_order)
    );
    client.cancel().await.unwrap();
}
