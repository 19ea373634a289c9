//! An MCP server over stdio whose `send_refund` tool is idempotent: a retried call (same
//! arguments, same conversation) gets the first call's result back instead of a second
//! refund.
//!
//! ```sh
//! cargo run --example mcp_server --features rmcp
//! ```
//!
//! Any MCP client can talk to it (it speaks JSON-RPC on stdin/stdout). Each refund's text
//! names its execution number within this server process (`refund #1 …`), so a client sees
//! a replay (the same text, `_meta["idem/status"] = "replayed"`) apart from a second
//! execution (a new number). Calls are keyed by the conversation the client names in the
//! request's `_meta` (`{"conversationId": "c-9"}`); a call without one is a tool error
//! (`isError: true`) saying what to send. The store is the process default: memory, or the
//! locator in `IDEM_STORE` (`sqlite:refunds.db` with `--features rmcp,sqlite`).
//!
//! `integration-tests/tests/it/mcp_server_stdio.rs` runs this binary under an rmcp client.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use idem_agent::idempotent;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::{tool, tool_handler, tool_router, ServerHandler, ServiceExt};

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Refund {
    /// The order to refund.
    order_id: String,
    /// How much, in cents.
    amount_cents: u64,
}

#[derive(Clone)]
struct Refunds {
    /// Refunds executed by this process (the side effect a replay must not repeat).
    executed: Arc<AtomicU64>,
}

#[tool_router]
impl Refunds {
    fn new() -> Self {
        Refunds {
            executed: Arc::new(AtomicU64::new(0)),
        }
    }

    /// Refunds an order. Safe to retry: a repeat in the same conversation is replayed.
    #[idempotent(scope = "conversation", ttl = "24h")]
    #[tool]
    async fn send_refund(&self, Parameters(refund): Parameters<Refund>) -> String {
        let n = self.executed.fetch_add(1, Ordering::SeqCst) + 1;
        let key = idem_agent::current_key()
            .map(|k| k.prefix(12).to_owned())
            .unwrap_or_default();
        format!(
            "refund #{n} of {} cents for order {} (idempotency key {key})",
            refund.amount_cents, refund.order_id
        )
    }
}

#[tool_handler]
impl ServerHandler for Refunds {}

#[tokio::main]
async fn main() -> Result<(), Box<dyn std::error::Error>> {
    let server = Refunds::new().serve(rmcp::transport::stdio()).await?;
    server.waiting().await?;
    Ok(())
}
