//! An rmcp server whose tools are written by hand the way `#[idempotent]` on an rmcp
//! `#[tool]` method generates them: an `McpCall` parameter after the receiver, the body run
//! through `call.run(&SPEC, selection, async { … })`, and `meta = tool_meta(…)`.

use std::time::Duration;

use idem_runtime::integrations::rmcp::{retryable_error, tool_meta, ArgumentSelection, McpCall};
use idem_runtime::{Scope, ToolSpec};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{CallToolResponse, CallToolResult};
use rmcp::{tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde::Deserialize;

use super::Runs;

#[derive(Debug, Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct Refund {
    pub order_id: String,
    pub amount_cents: u64,
}

#[derive(Debug, Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
pub struct Note {
    pub text: String,
}

pub static SEND_REFUND: ToolSpec = ToolSpec::new("send_refund");

/// A slow tool whose concurrent duplicates do not wait: they get `in_progress` at once.
pub static SLOW_NO_WAIT: ToolSpec = ToolSpec {
    wait: Duration::ZERO,
    ..ToolSpec::new("slow_no_wait")
};

/// A slow tool whose concurrent duplicates wait for its result and replay it.
pub static SLOW_WAIT: ToolSpec = ToolSpec::new("slow_wait");

pub static DECLINE: ToolSpec = ToolSpec::new("decline");

pub static FLAKY: ToolSpec = ToolSpec::new("flaky");

/// Keyed by `order_id` only: `amount_cents` is fingerprint (S9).
pub static CHARGE: ToolSpec = ToolSpec::new("charge");
const CHARGE_KEY: &[&str] = &["order_id"];

/// Global scope: needs no conversation.
pub static NOTE_GLOBAL: ToolSpec = ToolSpec {
    scope: Scope::Global,
    ..ToolSpec::new("note_global")
};

/// How long the slow tools take.
pub const SLOW: Duration = Duration::from_millis(400);

#[derive(Clone)]
pub struct Shop {
    pub runs: Runs,
    tool_router: ToolRouter<Self>,
}

impl Shop {
    pub fn new(runs: Runs) -> Self {
        Shop {
            runs,
            tool_router: Self::tool_router(),
        }
    }
}

#[tool_router]
impl Shop {
    /// Refunds an order.
    #[tool(meta = tool_meta(None, &SEND_REFUND))]
    async fn send_refund(
        &self,
        call: McpCall,
        Parameters(refund): Parameters<Refund>,
    ) -> Result<CallToolResponse, ErrorData> {
        call.run(&SEND_REFUND, ArgumentSelection::ALL, async move {
            let n = self.runs.ran("send_refund");
            format!(
                "refund #{n}: {} cents on {}",
                refund.amount_cents, refund.order_id
            )
        })
        .await
    }

    /// A refund that takes a while; duplicates do not wait.
    #[tool(meta = tool_meta(None, &SLOW_NO_WAIT))]
    async fn slow_no_wait(
        &self,
        call: McpCall,
        Parameters(refund): Parameters<Refund>,
    ) -> Result<CallToolResponse, ErrorData> {
        call.run(&SLOW_NO_WAIT, ArgumentSelection::ALL, async move {
            let n = self.runs.ran("slow_no_wait");
            tokio::time::sleep(SLOW).await;
            format!("slow refund #{n} on {}", refund.order_id)
        })
        .await
    }

    /// A refund that takes a while; duplicates wait for it.
    #[tool(meta = tool_meta(None, &SLOW_WAIT))]
    async fn slow_wait(
        &self,
        call: McpCall,
        Parameters(refund): Parameters<Refund>,
    ) -> Result<CallToolResponse, ErrorData> {
        call.run(&SLOW_WAIT, ArgumentSelection::ALL, async move {
            let n = self.runs.ran("slow_wait");
            tokio::time::sleep(SLOW).await;
            format!("slow refund #{n} on {}", refund.order_id)
        })
        .await
    }

    /// Always declined: an error outcome, saved and replayed.
    #[tool(meta = tool_meta(None, &DECLINE))]
    async fn decline(
        &self,
        call: McpCall,
        Parameters(refund): Parameters<Refund>,
    ) -> Result<CallToolResponse, ErrorData> {
        call.run(&DECLINE, ArgumentSelection::ALL, async move {
            let n = self.runs.ran("decline");
            Err::<String, String>(format!(
                "card declined for {} (attempt {n})",
                refund.order_id
            ))
        })
        .await
    }

    /// Fails retryably on its first run (the bank refused the connection), then succeeds.
    #[tool(meta = tool_meta(None, &FLAKY))]
    async fn flaky(
        &self,
        call: McpCall,
        Parameters(refund): Parameters<Refund>,
    ) -> Result<CallToolResponse, ErrorData> {
        call.run(&FLAKY, ArgumentSelection::ALL, async move {
            match self.runs.ran("flaky") {
                1 => retryable_error("the bank refused the connection; nothing was sent"),
                n => CallToolResult::success(vec![rmcp::model::ContentBlock::text(format!(
                    "refund #{n} on {}",
                    refund.order_id
                ))]),
            }
        })
        .await
    }

    /// Keyed by the order only; the amount is fingerprint.
    #[tool(meta = tool_meta(None, &CHARGE))]
    async fn charge(
        &self,
        call: McpCall,
        Parameters(refund): Parameters<Refund>,
    ) -> Result<CallToolResponse, ErrorData> {
        let selection = ArgumentSelection {
            schema: None,
            key: Some(CHARGE_KEY),
            skip: &[],
        };
        call.run(&CHARGE, selection, async move {
            let n = self.runs.ran("charge");
            format!(
                "charge #{n}: {} cents on {}",
                refund.amount_cents, refund.order_id
            )
        })
        .await
    }

    /// Global scope, with the user's own tool `_meta` kept next to idem's marker.
    #[tool(meta = tool_meta(Some(own_meta()), &NOTE_GLOBAL))]
    async fn note_global(
        &self,
        call: McpCall,
        Parameters(note): Parameters<Note>,
    ) -> Result<CallToolResponse, ErrorData> {
        call.run(&NOTE_GLOBAL, ArgumentSelection::ALL, async move {
            let n = self.runs.ran("note_global");
            format!("note #{n}: {}", note.text)
        })
        .await
    }
}

fn own_meta() -> rmcp::model::MetaObject {
    let mut meta = rmcp::model::MetaObject::new();
    meta.insert("example.com/owner".into(), "payments".into());
    meta
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Shop {}
