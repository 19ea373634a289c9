//! M5 ("an executed result and its replays differ only in the status") on the wire, in a
//! build where serde_json's `preserve_order` is on (this crate turns it on, as the `genai`
//! feature does, K4): the executed result is handed out as the envelope will replay it, so
//! the bytes are the same (found by the adversarial review of issue 8, where the executed
//! result kept the tool's member order and the replay came back sorted).
use idem::integrations::rmcp::IdempotentServer;
use idem::Engine;
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Tool};
use rmcp::{service::RequestContext, ErrorData, RoleServer, ServerHandler, ServiceExt};
use serde_json::{json, Value};
use std::sync::Arc;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

struct Receipts;

impl ServerHandler for Receipts {
    fn get_tool(&self, name: &str) -> Option<Tool> {
        (name == "receipt").then(|| Tool::new(name.to_owned(), "a receipt", Arc::default()))
    }
    async fn call_tool(
        &self,
        _: CallToolRequestParams,
        _: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let mut result = CallToolResult::success(vec![ContentBlock::text("ok")]);
        result.structured_content = Some(json!({"zeta": 1, "alpha": 2}));
        Ok(result.into())
    }
}

// pins M5, S12
#[tokio::test]
async fn replay_bytes_equal_executed_bytes() {
    let server = IdempotentServer::builder(Receipts)
        .engine(Engine::in_memory())
        .build()
        .unwrap();
    let (client_side, server_side) = tokio::io::duplex(64 * 1024);
    let (from_server, to_server) = tokio::io::split(server_side);
    tokio::spawn(async move {
        let running = server.serve((from_server, to_server)).await.unwrap();
        let _ = running.waiting().await;
    });
    let (reader, mut writer) = tokio::io::split(client_side);
    let mut lines = BufReader::new(reader).lines();
    let mut send = async |message: Value| -> String {
        writer
            .write_all(format!("{message}\n").as_bytes())
            .await
            .unwrap();
        if message.get("id").is_none() {
            return String::new();
        }
        lines.next_line().await.unwrap().unwrap()
    };
    send(
        json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
        "protocolVersion": "2025-06-18", "capabilities": {},
        "clientInfo": {"name": "t", "version": "0"}}}),
    )
    .await;
    send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await;
    let call = |id: u32| {
        json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
        "name": "receipt", "arguments": {}, "_meta": {"conversationId": "c"}}})
    };
    let first = send(call(1)).await;
    let retry = send(call(2)).await;
    let first = first.replace("\"id\":1", "\"id\":N");
    let retry = retry
        .replace("\"id\":2", "\"id\":N")
        .replace("\"replayed\"", "\"executed\"");
    assert_eq!(retry, first);
}
