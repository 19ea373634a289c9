//! Tools that require a person's approval, served by `IdempotentServer` to a stock rmcp
//! client in one process (contract A1–A5, M6, M9, M10, D3): the client is told the call
//! waits for approval or was denied, as tool errors the model can read, and the tool's body
//! runs once, only after the host approves the key through the engine.

use crate::common;

use std::error::Error;
use std::time::Duration;

use common::shop::{Note, Refund};
use common::{call, connect, meta, text, Client, Runs};
use idem_runtime::approval::Approval;
use idem_runtime::integrations::rmcp::{tool_meta, ArgumentSelection, IdempotentServer, McpCall};
use idem_runtime::{Engine, IdempotencyKey, ToolSpec};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult};
use rmcp::{tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde_json::{json, Value};

/// A self-keyed tool (`#[idempotent(require_approval = "10m")]` on an rmcp `#[tool]`).
static WIRE: ToolSpec = ToolSpec {
    approval: Some(Duration::from_secs(600)),
    ..ToolSpec::new("wire")
};

#[derive(Clone)]
struct Desk {
    runs: Runs,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Desk {
    fn new(runs: Runs) -> Self {
        Desk {
            runs,
            tool_router: Self::tool_router(),
        }
    }

    /// Refunds an order: no annotation, keyed by the server.
    #[tool]
    async fn refund(&self, Parameters(r): Parameters<Refund>) -> String {
        let n = self.runs.ran("refund");
        format!("refund #{n}: {} cents on {}", r.amount_cents, r.order_id)
    }

    /// Writes a note: keyed by the server, approval turned off for it.
    #[tool]
    async fn note(&self, Parameters(note): Parameters<Note>) -> String {
        let n = self.runs.ran("note");
        format!("note #{n}: {}", note.text)
    }

    /// Keys its own calls and requires approval itself.
    #[tool(meta = tool_meta(None, &WIRE))]
    async fn wire(
        &self,
        call: McpCall,
        Parameters(r): Parameters<Refund>,
    ) -> Result<CallToolResponse, ErrorData> {
        call.run(&WIRE, ArgumentSelection::ALL, async move {
            let n = self.runs.ran("wire");
            format!("wire #{n}: {} cents for {}", r.amount_cents, r.order_id)
        })
        .await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Desk {}

/// Every tool of the server requires approval (valid 10 min), except `note`.
async fn approving_server(runs: &Runs, engine: &Engine) -> Client {
    let server = IdempotentServer::builder(Desk::new(runs.clone()))
        .engine(engine.clone())
        .require_approval(Some(Duration::from_secs(600)))
        .tool_spec("note", |spec| spec.approval = None)
        .build()
        .unwrap();
    connect(server).await
}

fn refund(order: &str, cents: u64) -> Value {
    json!({"order_id": order, "amount_cents": cents})
}

fn conversation(id: &str) -> Value {
    json!({ "conversationId": id })
}

async fn call_tool(client: &Client, params: CallToolRequestParams) -> CallToolResult {
    client.call_tool(params).await.expect("a tool result")
}

/// The key a result names in `_meta["idem/key"]`.
fn key_of(result: &CallToolResult) -> IdempotencyKey {
    let hex = meta(result, "idem/key").as_str().expect("idem/key");
    IdempotencyKey::from_hex(hex).expect("64 hex digits")
}

/// Asserts `result` is the layer error `kind`, with no retry hint and no status.
fn assert_layer_error(result: &CallToolResult, kind: &str) {
    assert_eq!(result.is_error, Some(true), "{result:?}");
    assert_eq!(meta(result, "idem/error"), kind, "{result:?}");
    assert_eq!(
        meta(result, "idem/retryAfterMs"),
        &Value::Null,
        "{result:?}"
    );
    assert_eq!(meta(result, "idem/status"), &Value::Null, "{result:?}");
}

/// Asserts `result` is `awaiting_approval` for `key`, told as M6 and D3 say.
fn assert_awaiting(result: &CallToolResult, key: &IdempotencyKey) {
    assert_layer_error(result, "awaiting_approval");
    assert_eq!(meta(result, "idem/key"), key.as_str());
    let said = text(result);
    for words in [
        "waits for a person's approval",
        "the tool did not run",
        "do not retry it now nor in another form",
        "call it again later with the same arguments",
        key.as_str(),
    ] {
        assert!(said.contains(words), "{words:?} not in {said:?}");
    }
}

// pins A2, A3, A4, M6, M10, D3: a tool the server requires approval for does not run on its
// first call: the client gets `awaiting_approval` with the key and no retry hint, told to
// call again later with the same arguments; once the host approves the key, the same call
// runs the body once, and a third call replays it
#[tokio::test]
async fn a_call_waits_for_approval_then_runs_once() -> Result<(), Box<dyn Error>> {
    let (runs, engine) = (Runs::default(), Engine::in_memory());
    let client = approving_server(&runs, &engine).await;
    let same = || call("refund", refund("o1", 4000), conversation("approvals_run"));

    let first = call_tool(&client, same()).await;
    let key = key_of(&first);
    assert_awaiting(&first, &key);
    assert!(text(&first).contains("tool `refund`"), "{}", text(&first));
    // Asking again before a decision answers the same, and runs nothing (A2).
    let again = call_tool(&client, same()).await;
    assert_awaiting(&again, &key);
    assert_eq!(runs.of("refund"), 0);

    engine.approve(&key, &Approval::new("ana")?).await?;
    let approved = call_tool(&client, same()).await;
    assert_eq!(approved.is_error, Some(false), "{approved:?}");
    assert_eq!(text(&approved), "refund #1: 4000 cents on o1");
    assert_eq!(meta(&approved, "idem/status"), "executed");
    assert_eq!(meta(&approved, "idem/key"), key.as_str());
    assert_eq!(runs.of("refund"), 1);

    // pins A4, M5, S3: the outcome is saved: the next call replays it
    let replay = call_tool(&client, same()).await;
    assert_eq!(meta(&replay, "idem/status"), "replayed");
    assert_eq!(meta(&replay, "idem/key"), key.as_str());
    assert_eq!(text(&replay), text(&approved));
    assert_eq!(runs.of("refund"), 1);

    // pins A2: approval is per key: the same refund in another conversation waits for its own
    let elsewhere = call_tool(
        &client,
        call(
            "refund",
            refund("o1", 4000),
            conversation("approvals_other"),
        ),
    )
    .await;
    let other_key = key_of(&elsewhere);
    assert_ne!(other_key, key);
    assert_awaiting(&elsewhere, &other_key);
    assert_eq!(runs.of("refund"), 1);
    client.cancel().await?;
    Ok(())
}

// pins A2, S9, M4, M6: under a client key (every argument fingerprint), other arguments are a
// conflict whatever the decision: before it, and after the approved call ran
#[tokio::test]
async fn other_arguments_under_the_same_key_are_a_conflict() -> Result<(), Box<dyn Error>> {
    let (runs, engine) = (Runs::default(), Engine::in_memory());
    let client = approving_server(&runs, &engine).await;
    let client_key = json!({"idempotencyKey": "mcp-approvals-client-key-1"});
    let asked = call_tool(
        &client,
        call("refund", refund("o1", 4000), client_key.clone()),
    )
    .await;
    let key = key_of(&asked);
    assert_awaiting(&asked, &key);

    let conflict = |result: &CallToolResult| {
        assert_layer_error(result, "conflict");
        assert_eq!(meta(result, "idem/key"), key.as_str());
        assert!(
            text(result).starts_with(
                "conflict: this `_meta.idempotencyKey` was already used for a call of tool `refund` with other arguments"
            ),
            "{}",
            text(result)
        );
    };
    let other = || call("refund", refund("o1", 9900), client_key.clone());
    conflict(&call_tool(&client, other()).await);

    engine.approve(&key, &Approval::new("ana")?).await?;
    conflict(&call_tool(&client, other()).await);
    // The conflict did not use the approval: the approved arguments still run.
    let approved = call_tool(
        &client,
        call("refund", refund("o1", 4000), client_key.clone()),
    )
    .await;
    assert_eq!(text(&approved), "refund #1: 4000 cents on o1");
    assert_eq!(meta(&approved, "idem/status"), "executed");
    conflict(&call_tool(&client, other()).await);
    assert_eq!(runs.of("refund"), 1);
    client.cancel().await?;
    Ok(())
}

// pins A3, A5, M6, D3: after the host denies the key, every call of it gets `denied`, naming
// the actor and their note and saying not to retry it in any form; the body never runs
#[tokio::test]
async fn a_denied_call_is_told_who_denied_it_and_never_runs() -> Result<(), Box<dyn Error>> {
    let (runs, engine) = (Runs::default(), Engine::in_memory());
    let client = approving_server(&runs, &engine).await;
    let same = || {
        call(
            "refund",
            refund("o2", 250_000),
            conversation("approvals_deny"),
        )
    };
    let asked = call_tool(&client, same()).await;
    let key = key_of(&asked);
    assert_awaiting(&asked, &key);

    let denial = Approval::new("ana")?.note("amount too high");
    engine.deny(&key, &denial).await?;
    for _ in 0..2 {
        let denied = call_tool(&client, same()).await;
        assert_layer_error(&denied, "denied");
        assert_eq!(meta(&denied, "idem/key"), key.as_str());
        let said = text(&denied);
        for words in [
            "a person (ana) denied this action: amount too high",
            "the tool did not run",
            "do not retry it, with this tool or another",
            key.as_str(),
        ] {
            assert!(said.contains(words), "{words:?} not in {said:?}");
        }
    }
    // pins A3: a denied key cannot be approved afterwards
    assert!(engine.approve(&key, &Approval::new("bo")?).await.is_err());
    assert_eq!(
        meta(&call_tool(&client, same()).await, "idem/error"),
        "denied"
    );
    assert_eq!(runs.of("refund"), 0);
    client.cancel().await?;
    Ok(())
}

// pins A1, M10: a tool whose approval the server turns off with `.tool_spec(name, |s|
// s.approval = None)` runs at once, still keyed
#[tokio::test]
async fn a_tool_with_approval_turned_off_runs_at_once() {
    let (runs, engine) = (Runs::default(), Engine::in_memory());
    let client = approving_server(&runs, &engine).await;
    let same = || {
        call(
            "note",
            json!({"text": "hello"}),
            conversation("approvals_off"),
        )
    };
    let first = call_tool(&client, same()).await;
    assert_eq!(first.is_error, Some(false), "{first:?}");
    assert_eq!(text(&first), "note #1: hello");
    assert_eq!(meta(&first, "idem/status"), "executed");
    assert_eq!(meta(&first, "idem/error"), &Value::Null);
    let retry = call_tool(&client, same()).await;
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    assert_eq!(runs.of("note"), 1);
    client.cancel().await.unwrap();
}

// pins A1, M9, M12: a self-keyed tool that requires approval itself (`#[idempotent(
// require_approval)]`) waits for it under a server that requires none, with the server's
// engine, and runs once approved
#[tokio::test]
async fn a_self_keyed_tool_requires_its_own_approval() -> Result<(), Box<dyn Error>> {
    let (runs, engine) = (Runs::default(), Engine::in_memory());
    let server = IdempotentServer::builder(Desk::new(runs.clone()))
        .engine(engine.clone())
        .build()?;
    let client = connect(server).await;
    let same = || {
        call(
            "wire",
            refund("o3", 700),
            conversation("approvals_self_keyed"),
        )
    };
    let asked = call_tool(&client, same()).await;
    let key = key_of(&asked);
    assert_awaiting(&asked, &key);
    assert_eq!(runs.of("wire"), 0);
    // The server's other tools need no approval.
    let plain = call_tool(
        &client,
        call(
            "refund",
            refund("o3", 700),
            conversation("approvals_self_keyed"),
        ),
    )
    .await;
    assert_eq!(meta(&plain, "idem/status"), "executed");

    engine.approve(&key, &Approval::new("ana")?).await?;
    let ran = call_tool(&client, same()).await;
    assert_eq!(text(&ran), "wire #1: 700 cents for o3");
    assert_eq!(meta(&ran, "idem/status"), "executed");
    let replay = call_tool(&client, same()).await;
    assert_eq!(meta(&replay, "idem/status"), "replayed");
    assert_eq!(runs.of("wire"), 1);
    client.cancel().await?;
    Ok(())
}
