//! `IdempotentServer`: every tool of an rmcp server keyed with no annotation, except
//! read-only, excluded and self-keyed tools (contract M7, M9, M10).

use crate::common;

use std::time::Duration;

use common::{call, connect, meta, text, Runs};
use idem_runtime::integrations::rmcp::{tool_meta, ArgumentSelection, IdempotentServer, McpCall};
use idem_runtime::{Engine, Scope, ToolSpec};
use rmcp::handler::server::{router::tool::ToolRouter, wrapper::Parameters};
use rmcp::model::CallToolResponse;
use rmcp::{tool, tool_handler, tool_router, ErrorData, ServerHandler};
use serde::Deserialize;
use serde_json::json;

#[derive(Debug, Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Transfer {
    to: String,
    cents: u64,
}

#[derive(Debug, Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Account {
    account: String,
}

static STAMP: ToolSpec = ToolSpec {
    scope: Scope::Global,
    ..ToolSpec::new("stamp")
};
static SIGN: ToolSpec = ToolSpec::new("sign");
/// A hand-written `McpCall` tool that forgot the marker.
static UNMARKED: ToolSpec = ToolSpec::new("unmarked");

#[derive(Clone)]
struct Bank {
    runs: Runs,
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Bank {
    fn new(runs: Runs) -> Self {
        Bank {
            runs,
            tool_router: Self::tool_router(),
        }
    }

    /// Moves money: no annotation at all.
    #[tool]
    async fn transfer(&self, Parameters(t): Parameters<Transfer>) -> String {
        let n = self.runs.ran("transfer");
        format!("transfer #{n}: {} cents to {}", t.cents, t.to)
    }

    /// The same, configured per tool on the server to be global.
    #[tool]
    async fn transfer_global(&self, Parameters(t): Parameters<Transfer>) -> String {
        let n = self.runs.ran("transfer_global");
        format!("global transfer #{n}: {} cents to {}", t.cents, t.to)
    }

    /// Reads only.
    #[tool(annotations(read_only_hint = true))]
    async fn balance(&self, Parameters(a): Parameters<Account>) -> String {
        let n = self.runs.ran("balance");
        format!("balance of {} (read #{n})", a.account)
    }

    /// Safe to repeat; excluded on the server.
    #[tool]
    async fn audit(&self, Parameters(a): Parameters<Account>) -> String {
        let n = self.runs.ran("audit");
        format!("audit #{n} of {}", a.account)
    }

    /// The server cannot serve it: a JSON-RPC error, never saved.
    #[tool]
    async fn reject(&self, Parameters(a): Parameters<Account>) -> Result<String, ErrorData> {
        let n = self.runs.ran("reject");
        Err(ErrorData::internal_error(
            format!("ledger offline ({n}) for {}", a.account),
            None,
        ))
    }

    /// Keys its own calls (`#[idempotent(scope = "global")]`).
    #[tool(meta = tool_meta(None, &STAMP))]
    async fn stamp(
        &self,
        call: McpCall,
        Parameters(a): Parameters<Account>,
    ) -> Result<CallToolResponse, ErrorData> {
        call.run(&STAMP, ArgumentSelection::ALL, async move {
            let n = self.runs.ran("stamp");
            format!("stamp #{n} on {}", a.account)
        })
        .await
    }

    /// Keys its own calls by conversation.
    #[tool(meta = tool_meta(None, &SIGN))]
    async fn sign(
        &self,
        call: McpCall,
        Parameters(a): Parameters<Account>,
    ) -> Result<CallToolResponse, ErrorData> {
        call.run(&SIGN, ArgumentSelection::ALL, async move {
            let n = self.runs.ran("sign");
            format!("signature #{n} on {}", a.account)
        })
        .await
    }

    /// Uses `McpCall` but has no marker: the server keys it, and `McpCall` stands aside.
    #[tool]
    async fn unmarked(
        &self,
        call: McpCall,
        Parameters(a): Parameters<Account>,
    ) -> Result<CallToolResponse, ErrorData> {
        call.run(&UNMARKED, ArgumentSelection::ALL, async move {
            let n = self.runs.ran("unmarked");
            format!("unmarked #{n} on {}", a.account)
        })
        .await
    }
}

#[tool_handler(router = self.tool_router)]
impl ServerHandler for Bank {}

fn server(runs: &Runs, engine: &Engine) -> IdempotentServer<Bank> {
    IdempotentServer::builder(Bank::new(runs.clone()))
        .engine(engine.clone())
        .conversation_meta_key("threadId")
        .tool_spec("transfer_global", |spec| spec.scope = Scope::Global)
        .exclude("audit")
        .build()
        .unwrap()
}

fn thread(id: &str) -> serde_json::Value {
    json!({ "threadId": id })
}

// pins M10, M2, M5: an un-annotated tool is keyed: a retry replays; other arguments run
#[tokio::test]
async fn unannotated_tools_are_keyed() {
    let (runs, engine) = (Runs::default(), Engine::in_memory());
    let client = connect(server(&runs, &engine)).await;
    let args = json!({"to": "acct_9", "cents": 1200});
    let first = client
        .call_tool(call("transfer", args.clone(), thread("t1")))
        .await
        .unwrap();
    let retry = client
        .call_tool(call("transfer", args.clone(), thread("t1")))
        .await
        .unwrap();
    let other = client
        .call_tool(call(
            "transfer",
            json!({"to": "acct_9", "cents": 1300}),
            thread("t1"),
        ))
        .await
        .unwrap();
    assert_eq!(text(&first), "transfer #1: 1200 cents to acct_9");
    assert_eq!(meta(&first, "idem/status"), "executed");
    assert_eq!(text(&retry), text(&first));
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    assert_eq!(meta(&other, "idem/status"), "executed");
    assert_eq!(runs.of("transfer"), 2);

    // The server's conversation member is threadId: conversationId alone is no conversation.
    let missing = client
        .call_tool(call("transfer", args, json!({"conversationId": "t1"})))
        .await
        .unwrap();
    assert_eq!(meta(&missing, "idem/error"), "missing_scope");
    assert!(
        text(&missing).contains("`_meta.threadId`"),
        "{}",
        text(&missing)
    );
    // A per-tool override: global, no conversation needed.
    let global = client
        .call_tool(call(
            "transfer_global",
            json!({"to": "a", "cents": 1}),
            json!(null),
        ))
        .await
        .unwrap();
    assert_eq!(meta(&global, "idem/status"), "executed");
    client.cancel().await.unwrap();
}

// pins M10: read-only and excluded tools pass through unkeyed
#[tokio::test]
async fn read_only_and_excluded_tools_pass_through() {
    let (runs, engine) = (Runs::default(), Engine::in_memory());
    let client = connect(server(&runs, &engine)).await;
    for tool in ["balance", "audit"] {
        for _ in 0..2 {
            let result = client
                .call_tool(call(tool, json!({"account": "acct_1"}), json!(null)))
                .await
                .unwrap();
            assert_eq!(result.is_error, Some(false), "{tool}: {result:?}");
            assert_eq!(meta(&result, "idem/status"), &serde_json::Value::Null);
        }
        assert_eq!(runs.of(tool), 2, "{tool}");
    }
    client.cancel().await.unwrap();
}

// pins M9: a tool keyed by its own #[idempotent] keeps its settings (global here, while the
// server's default is conversation) and gets the server's engine and conversation member
#[tokio::test]
async fn self_keyed_tools_keep_their_own_settings() {
    let (runs, engine) = (Runs::default(), Engine::in_memory());
    let client = connect(server(&runs, &engine)).await;
    let before = engine.store().round_trips().unwrap();
    let first = client
        .call_tool(call("stamp", json!({"account": "acct_s"}), json!(null)))
        .await
        .unwrap();
    let retry = client
        .call_tool(call("stamp", json!({"account": "acct_s"}), json!(null)))
        .await
        .unwrap();
    assert_eq!(meta(&first, "idem/status"), "executed");
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    assert_eq!(runs.of("stamp"), 1);
    assert!(
        engine.store().round_trips().unwrap() >= before + 3,
        "the tool used the server's engine"
    );
    let signed = client
        .call_tool(call("sign", json!({"account": "acct_s"}), thread("t_sign")))
        .await
        .unwrap();
    assert_eq!(meta(&signed, "idem/status"), "executed", "{signed:?}");
    client.cancel().await.unwrap();
}

// pins M9: an McpCall inside a call the server keys runs its body once, without a second
// claim on the same key
#[tokio::test]
async fn an_unmarked_mcp_call_tool_is_keyed_once() {
    let (runs, engine) = (Runs::default(), Engine::in_memory());
    let client = connect(server(&runs, &engine)).await;
    let first = client
        .call_tool(call(
            "unmarked",
            json!({"account": "a"}),
            thread("t_unmarked"),
        ))
        .await
        .unwrap();
    let retry = client
        .call_tool(call(
            "unmarked",
            json!({"account": "a"}),
            thread("t_unmarked"),
        ))
        .await
        .unwrap();
    assert_eq!(text(&first), "unmarked #1 on a");
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    assert_eq!(runs.of("unmarked"), 1);
    client.cancel().await.unwrap();
}

// pins M7: a JSON-RPC error from the tool is not saved: the next call runs it again
#[tokio::test]
async fn protocol_errors_are_not_saved() {
    let (runs, engine) = (Runs::default(), Engine::in_memory());
    let client = connect(server(&runs, &engine)).await;
    for _ in 0..2 {
        let error = client
            .call_tool(call("reject", json!({"account": "a"}), thread("t_reject")))
            .await
            .unwrap_err();
        assert!(error.to_string().contains("ledger offline"), "{error}");
    }
    assert_eq!(runs.of("reject"), 2);
    client.cancel().await.unwrap();
}

// pins M10: the server advertises idempotency in its capabilities, and lists the inner
// handler's tools unchanged
#[tokio::test]
async fn capabilities_advertise_idempotency() {
    let (runs, engine) = (Runs::default(), Engine::in_memory());
    let client = connect(server(&runs, &engine)).await;
    let info = client.peer_info().unwrap();
    let advertised = &info.capabilities.experimental.as_ref().unwrap()["idempotency"];
    assert_eq!(advertised["conversationIdMeta"], "threadId");
    assert_eq!(advertised["idempotencyKeyMeta"], "idempotencyKey");
    assert_eq!(advertised["resultStatusMeta"], "idem/status");
    assert!(info.capabilities.tools.is_some());
    let tools = client.list_all_tools().await.unwrap();
    assert_eq!(tools.len(), 8);
    client.cancel().await.unwrap();
}

// pins S8, L1: the builder refuses spans the attribute refuses, naming the tool
#[test]
fn the_builder_checks_its_spans() {
    let error = IdempotentServer::builder(Bank::new(Runs::default()))
        .tool_spec("transfer", |spec| spec.ttl = Duration::from_secs(1))
        .build()
        .unwrap_err();
    assert_eq!(
        error.to_string(),
        "the ttl of tool `transfer` (1000 ms) is shorter than its lease (60000 ms): a record could expire while its call still runs, and a retry would run the side effect again"
    );
    let error = IdempotentServer::builder(Bank::new(Runs::default()))
        .conversation_meta_key("idempotencyKey")
        .build()
        .unwrap_err();
    assert!(error
        .to_string()
        .starts_with("`idempotencyKey` cannot hold the conversation id"));
}
