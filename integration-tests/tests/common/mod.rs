//! An rmcp client and server in one process, over in-memory pipes, and what the tests
//! need to talk to them.
#![allow(dead_code)] // each test file uses part of it

pub mod shop;

use std::collections::HashMap;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};

use rmcp::model::{CallToolRequestParams, CallToolResult, RequestMetaObject};
use rmcp::service::RunningService;
use rmcp::{RoleClient, ServerHandler, ServiceExt};
use serde_json::Value;
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};

pub type Client = RunningService<RoleClient, ()>;

/// Serves `server` on one end of a pipe and connects an rmcp client to the other.
pub async fn connect<S: ServerHandler>(server: S) -> Client {
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    serve(server, server_io);
    ().serve(tokio::io::split(client_io))
        .await
        .expect("client connects")
}

fn serve<S: ServerHandler>(server: S, io: tokio::io::DuplexStream) {
    tokio::spawn(async move {
        if let Ok(running) = server.serve(tokio::io::split(io)).await {
            let _ = running.waiting().await;
        }
    });
}

/// [`connect`] through a relay that loses the server's first `tools/call` response (a
/// line carrying a result with `content`) after the server sent it, as a dropped
/// connection would: the tool ran, the client never hears of it. `lost` counts the lost
/// responses.
pub async fn connect_losing_first_response<S: ServerHandler>(
    server: S,
    lost: Arc<AtomicUsize>,
) -> Client {
    let (client_io, relay_client) = tokio::io::duplex(1 << 16);
    let (relay_server, server_io) = tokio::io::duplex(1 << 16);
    serve(server, server_io);
    let (mut client_read, mut client_write) = tokio::io::split(relay_client);
    let (server_read, mut server_write) = tokio::io::split(relay_server);
    tokio::spawn(async move {
        let _ = tokio::io::copy(&mut client_read, &mut server_write).await;
    });
    tokio::spawn(async move {
        let mut lines = BufReader::new(server_read).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let message: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            let is_tool_result = message["result"].get("content").is_some();
            if is_tool_result && lost.load(Ordering::SeqCst) == 0 {
                lost.fetch_add(1, Ordering::SeqCst);
                continue;
            }
            if client_write
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    ().serve(tokio::io::split(client_io))
        .await
        .expect("client connects")
}

/// A `tools/call` of `tool` with `arguments` and request `_meta` `meta` (objects).
pub fn call(tool: &'static str, arguments: Value, meta: Value) -> CallToolRequestParams {
    let mut params = CallToolRequestParams::new(tool)
        .with_arguments(arguments.as_object().expect("arguments object").clone());
    if let Value::Object(meta) = meta {
        params.meta = Some(RequestMetaObject::from(meta));
    }
    params
}

/// The first text content of a result.
pub fn text(result: &CallToolResult) -> &str {
    &result.content[0].as_text().expect("text content").text
}

/// `_meta[name]` of a result (`Null` when absent).
pub fn meta<'r>(result: &'r CallToolResult, name: &str) -> &'r Value {
    result
        .meta
        .as_ref()
        .and_then(|meta| meta.get(name))
        .unwrap_or(&Value::Null)
}

/// How many times each tool body ran.
#[derive(Clone, Default)]
pub struct Runs(Arc<Mutex<HashMap<&'static str, usize>>>);

impl Runs {
    /// Counts one run of `tool`; returns its number (1 for the first).
    pub fn ran(&self, tool: &'static str) -> usize {
        let mut runs = self.0.lock().unwrap();
        let n = runs.entry(tool).or_default();
        *n += 1;
        *n
    }

    pub fn of(&self, tool: &str) -> usize {
        self.0.lock().unwrap().get(tool).copied().unwrap_or(0)
    }
}
