//! `examples/mcp_server.rs`, the binary, over stdio, under an rmcp client: the issue's
//! end-to-end check. The test builds the example (`cargo build --example mcp_server
//! --features rmcp`), starts it as a child process, and talks MCP to its stdin/stdout,
//! directly or through a relay that loses the first `tools/call` response after the server
//! sent it (the refund happened, the client never heard).

use crate::common;

use std::path::PathBuf;
use std::process::Stdio;
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, OnceLock};
use std::time::Duration;

use common::{call, meta, text, Client};
use rmcp::ServiceExt;
use serde_json::{json, Value};
use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
use tokio::process::{Child, Command};

/// Builds the example once per test binary and returns its path.
fn server_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY
        .get_or_init(|| {
            let root = PathBuf::from(env!("CARGO_MANIFEST_DIR"))
                .parent()
                .expect("the workspace root")
                .to_path_buf();
            let cargo = std::env::var("CARGO").unwrap_or_else(|_| "cargo".to_owned());
            let status = std::process::Command::new(cargo)
                .current_dir(&root)
                .args([
                    "build",
                    "--quiet",
                    "--example",
                    "mcp_server",
                    "--features",
                    "rmcp",
                ])
                .status()
                .expect("cargo runs");
            assert!(status.success(), "building examples/mcp_server.rs failed");
            let target = std::env::var_os("CARGO_TARGET_DIR")
                .map(PathBuf::from)
                .unwrap_or_else(|| root.join("target"));
            target.join("debug").join("examples").join("mcp_server")
        })
        .clone()
}

/// Starts the server and connects an rmcp client to it; with `lose_first`, the first
/// `tools/call` response the server writes is dropped on its way to the client, and the
/// count of lost responses goes up.
async fn start(lose_first: Option<Arc<AtomicUsize>>) -> (Client, Child) {
    let mut child = Command::new(server_binary())
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .kill_on_drop(true)
        .spawn()
        .expect("the example starts");
    let server_in = child.stdin.take().unwrap();
    let server_out = child.stdout.take().unwrap();
    let (client_io, relay) = tokio::io::duplex(1 << 16);
    let (mut relay_read, mut relay_write) = tokio::io::split(relay);
    tokio::spawn(async move {
        let mut server_in = server_in;
        let _ = tokio::io::copy(&mut relay_read, &mut server_in).await;
    });
    tokio::spawn(async move {
        let mut lines = BufReader::new(server_out).lines();
        while let Ok(Some(line)) = lines.next_line().await {
            let message: Value = serde_json::from_str(&line).unwrap_or(Value::Null);
            if let Some(lost) = &lose_first {
                if message["result"].get("content").is_some() && lost.load(Ordering::SeqCst) == 0 {
                    lost.fetch_add(1, Ordering::SeqCst);
                    continue;
                }
            }
            if relay_write
                .write_all(format!("{line}\n").as_bytes())
                .await
                .is_err()
            {
                break;
            }
        }
    });
    let client = ().serve(tokio::io::split(client_io)).await.expect("client connects");
    (client, child)
}

fn refund(order: &str) -> Value {
    json!({"order_id": order, "amount_cents": 500})
}

// pins M1, M3, M5: the same send_refund twice in one conversation returns the same text
// (replayed), another order a new execution number, a call without a conversation a clear
// tool error; over stdio, against the example binary
#[tokio::test]
async fn the_example_server_replays_over_stdio() {
    let (client, _child) = start(None).await;
    let conversation = json!({"conversationId": "stdio-c9"});
    let first = client
        .call_tool(call("send_refund", refund("4417"), conversation.clone()))
        .await
        .unwrap();
    let again = client
        .call_tool(call("send_refund", refund("4417"), conversation.clone()))
        .await
        .unwrap();
    assert!(
        text(&first).starts_with("refund #1 of 500 cents for order 4417"),
        "{first:?}"
    );
    assert_eq!(text(&again), text(&first));
    assert_eq!(meta(&again, "idem/status"), "replayed");
    let other = client
        .call_tool(call("send_refund", refund("4418"), conversation))
        .await
        .unwrap();
    assert!(
        text(&other).starts_with("refund #2 of 500 cents for order 4418"),
        "{other:?}"
    );
    let anonymous = client
        .call_tool(call("send_refund", refund("4419"), json!({})))
        .await
        .unwrap();
    assert_eq!(anonymous.is_error, Some(true));
    assert!(text(&anonymous).contains("conversationId"), "{anonymous:?}");
    client.cancel().await.unwrap();
}

// pins M1, M5, S3 (T2 over MCP): the first response is lost after the refund ran; the
// client retries the same request and is told success with the first run's text; one
// refund happened (the next order is #2)
#[tokio::test]
async fn a_lost_response_over_stdio_is_retried_without_a_second_refund() {
    let lost = Arc::new(AtomicUsize::new(0));
    let (client, _child) = start(Some(lost.clone())).await;
    let conversation = json!({"conversationId": "stdio-lost"});
    let request = call("send_refund", refund("5001"), conversation.clone());
    let first =
        tokio::time::timeout(Duration::from_secs(2), client.call_tool(request.clone())).await;
    assert!(first.is_err(), "the first response must be lost: {first:?}");
    assert_eq!(lost.load(Ordering::SeqCst), 1);
    let retry = client.call_tool(request).await.unwrap();
    assert_eq!(retry.is_error, Some(false));
    assert!(
        text(&retry).starts_with("refund #1 of 500 cents for order 5001"),
        "{retry:?}"
    );
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    let next = client
        .call_tool(call("send_refund", refund("5002"), conversation))
        .await
        .unwrap();
    assert!(
        text(&next).starts_with("refund #2 "),
        "one refund before this one: {next:?}"
    );
    client.cancel().await.unwrap();
}
