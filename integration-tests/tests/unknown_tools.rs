//! Calls of tools the server does not have: rmcp's own error, and no memory kept for them
//! (contract M10). In a test binary of its own: the table of interned specs is per process,
//! and no other test may add to it while this one counts.

#[path = "common/mod.rs"]
mod common;

use common::{call, connect, meta, Runs};
use idem_runtime::integrations::rmcp::{interned_tool_specs, IdempotentServer};
use idem_runtime::Engine;
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::{tool, tool_handler, tool_router, ServerHandler, ServiceError};
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Mail {
    to: String,
}

#[derive(Clone)]
struct Mailer {
    runs: Runs,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Mailer {
    /// Sends a mail.
    #[tool]
    async fn send_mail(&self, Parameters(mail): Parameters<Mail>) -> String {
        format!("mail #{} to {}", self.runs.ran("send_mail"), mail.to)
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Mailer {}

// pins M10: an unknown tool gets rmcp's own error, and made-up names intern nothing
#[tokio::test]
async fn unknown_tools_get_rmcps_error_and_cost_no_memory() {
    let runs = Runs::default();
    let mailer = Mailer {
        runs: runs.clone(),
        tool_router: Mailer::tool_router(),
    };
    let server = IdempotentServer::builder(mailer)
        .engine(Engine::in_memory())
        .build()
        .unwrap();
    let client = connect(server).await;
    let sent = client
        .call_tool(call(
            "send_mail",
            json!({"to": "a@example.com"}),
            json!({"conversationId": "c"}),
        ))
        .await
        .unwrap();
    assert_eq!(meta(&sent, "idem/status"), "executed");
    assert_eq!(interned_tool_specs(), 1);
    for i in 0..200 {
        let name: &'static str = Box::leak(format!("no_such_tool_{i}").into_boxed_str());
        let error = client
            .call_tool(call(name, json!({}), json!({"conversationId": "c"})))
            .await
            .unwrap_err();
        match error {
            ServiceError::McpError(error) => assert_eq!(error.message, "tool not found"),
            other => panic!("not rmcp's error: {other:?}"),
        }
    }
    // Repeated calls of the known tool intern nothing more either.
    for _ in 0..3 {
        client
            .call_tool(call(
                "send_mail",
                json!({"to": "b@example.com"}),
                json!({"conversationId": "c"}),
            ))
            .await
            .unwrap();
    }
    assert_eq!(interned_tool_specs(), 1);
    assert_eq!(runs.of("send_mail"), 2);
    client.cancel().await.unwrap();
}
