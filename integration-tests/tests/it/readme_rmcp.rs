//! The README's rmcp snippet, verbatim between the markers, served and called: what a new
//! user copies compiles against the renamed facade and replays (M12).

use crate::common;

// The README depends on `idem-agent`; this crate renames it `idem` (C5): `idem_agent` is
// declared at the crate root (main.rs), where an `extern crate` joins the extern prelude.

#[rustfmt::skip]
mod snippet {
// README snippet starts
use idem_agent::idempotent;
use rmcp::{handler::server::wrapper::Parameters, tool, tool_handler, tool_router, ServerHandler};
#[derive(serde::Deserialize, rmcp::schemars::JsonSchema)] #[schemars(crate = "rmcp::schemars")]
struct Refund { order_id: String, amount_cents: u64 }
#[derive(Clone)] struct Refunds;
#[tool_router]
impl Refunds {
    #[idempotent(ttl = "24h")] // above #[tool]
    #[tool(description = "Refund an order")]
    async fn send_refund(&self, Parameters(r): Parameters<Refund>) -> String {
        format!("refunded {} cents on order {}", r.amount_cents, r.order_id)
    }
}
#[tool_handler] impl ServerHandler for Refunds {}
// README snippet ends

use super::common::{call, connect, meta, text};
use serde_json::json;

// pins M12: the README's snippet is an idempotent MCP tool as written
#[tokio::test]
async fn the_readme_snippet_replays() {
    let client = connect(Refunds).await;
    let request = call(
        "send_refund",
        json!({"order_id": "o7", "amount_cents": 500}),
        json!({"conversationId": "readme"}),
    );
    let first = client.call_tool(request.clone()).await.unwrap();
    let retry = client.call_tool(request).await.unwrap();
    assert_eq!(text(&first), "refunded 500 cents on order o7");
    assert_eq!(meta(&first, "idem/status"), "executed");
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    client.cancel().await.unwrap();
}
}
