//! adv8: the rmcp runtime (McpCall, IdempotentServer) against odd requests (contract M2–M8).

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::{call, connect, meta, text};
use idem::idempotent;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::Parameters;
use rmcp::model::{CallToolResult, ContentBlock};
use rmcp::{tool, tool_handler, tool_router, ServerHandler};
use serde_json::json;

#[derive(Clone)]
struct Odd {
    runs: Arc<AtomicUsize>,
    #[allow(dead_code)]
    tool_router: ToolRouter<Self>,
}

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Empty {}

#[tool_router]
impl Odd {
    /// Structured content with floats and members out of order, and a `_meta` of its own.
    #[idempotent(scope = "global")]
    #[tool]
    async fn numbers(&self, Parameters(_e): Parameters<Empty>) -> CallToolResult {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        let mut result = CallToolResult::success(vec![ContentBlock::text(format!("numbers #{n}"))]);
        result.structured_content = Some(json!({
            "zeta": 1.0,
            "alpha": -0.0,
            "mid": 0.1,
            "huge": 1e300,
            "max": u64::MAX,
            "min": i64::MIN,
            "float_int": 9007199254740993.0,
        }));
        result
    }

    /// A slow tool (for many concurrent duplicates).
    #[idempotent(scope = "global", wait = "10s")]
    #[tool]
    async fn slow(&self, Parameters(_e): Parameters<Empty>) -> String {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        tokio::time::sleep(Duration::from_millis(300)).await;
        format!("slow #{n}")
    }
}

#[tool_handler]
impl ServerHandler for Odd {}

// M5: "an executed result and its replays differ only in the status". The saved result is
// rewritten through the envelope's canonical capture: floats written as integers (1.0 → 1,
// -0.0 → 0) compare unequal as serde_json values.
#[tokio::test]
async fn adv8_a_replay_differs_from_the_executed_result_only_in_status() {
    let client = connect(Odd {
        runs: Arc::default(),
        tool_router: Odd::tool_router(),
    })
    .await;
    let first = client
        .call_tool(call("numbers", json!({}), json!({})))
        .await
        .unwrap();
    let retry = client
        .call_tool(call("numbers", json!({}), json!({})))
        .await
        .unwrap();
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    let mut unmarked = retry.clone();
    unmarked
        .meta
        .as_mut()
        .unwrap()
        .insert("idem/status".into(), "executed".into());
    assert_eq!(
        serde_json::to_string(&unmarked).unwrap(),
        serde_json::to_string(&first).unwrap()
    );
    assert_eq!(unmarked, first);
    client.cancel().await.unwrap();
}

// S2 over MCP: 48 duplicates at once run the tool once; all get its result.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn adv8_many_concurrent_duplicates_run_once() {
    let runs = Arc::new(AtomicUsize::new(0));
    let client = connect(Odd {
        runs: runs.clone(),
        tool_router: Odd::tool_router(),
    })
    .await;
    let client = Arc::new(client);
    let mut handles = Vec::new();
    for _ in 0..48 {
        let client = client.clone();
        handles.push(tokio::spawn(async move {
            client
                .call_tool(call("slow", json!({}), json!({})))
                .await
                .unwrap()
        }));
    }
    let mut statuses = Vec::new();
    for handle in handles {
        let result = handle.await.unwrap();
        assert_eq!(text(&result), "slow #1", "{result:?}");
        statuses.push(meta(&result, "idem/status").clone());
    }
    assert_eq!(runs.load(Ordering::SeqCst), 1);
    assert_eq!(statuses.iter().filter(|s| *s == "executed").count(), 1);
}

#[derive(Clone)]
struct Panicky {
    runs: Arc<AtomicUsize>,
    #[allow(dead_code)]
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Panicky {
    /// Panics on its first run; re-runs unknown outcomes once their lease lapsed (U2a).
    #[idempotent(scope = "global", lease = "2s", on_unknown = "rerun")]
    #[tool]
    async fn boom(&self, Parameters(_e): Parameters<Empty>) -> String {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if n == 1 {
            panic!("boom");
        }
        format!("boom #{n}")
    }

    /// Returns a JSON-RPC error on its first run.
    #[idempotent(scope = "global")]
    #[tool]
    async fn protocol(&self, Parameters(_e): Parameters<Empty>) -> Result<String, rmcp::ErrorData> {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        if n == 1 {
            return Err(rmcp::ErrorData::internal_error("not now", None));
        }
        Ok(format!("protocol #{n}"))
    }
}

#[tool_handler]
impl ServerHandler for Panicky {}

// U4, U2a over MCP: a body that panics leaves the key held (outcome unknown) until the lease
// lapses; then, with `on_unknown = "rerun"`, the tool runs again. Passing check.
#[tokio::test]
async fn adv8_a_panicking_body_holds_then_reruns() {
    let runs = Arc::new(AtomicUsize::new(0));
    let client = connect(Panicky {
        runs: runs.clone(),
        tool_router: Panicky::tool_router(),
    })
    .await;
    let lost = tokio::time::timeout(
        Duration::from_millis(500),
        client.call_tool(call("boom", json!({}), json!({}))),
    )
    .await;
    assert!(
        lost.is_err(),
        "rmcp sends no response for a panicked handler: {lost:?}"
    );
    let held = client
        .call_tool(call("boom", json!({}), json!({})))
        .await
        .unwrap();
    assert_eq!(meta(&held, "idem/error"), "outcome_unknown", "{held:?}");
    assert!(
        meta(&held, "idem/retryAfterMs").as_u64().unwrap() <= 2000,
        "{held:?}"
    );
    tokio::time::sleep(Duration::from_millis(2100)).await;
    let rerun = client
        .call_tool(call("boom", json!({}), json!({})))
        .await
        .unwrap();
    assert_eq!(text(&rerun), "boom #2", "{rerun:?}");
    client.cancel().await.unwrap();
}

// M7 through the attribute: Err(ErrorData) is a JSON-RPC error, not saved. Passing check.
#[tokio::test]
async fn adv8_a_protocol_error_is_not_saved() {
    let runs = Arc::new(AtomicUsize::new(0));
    let client = connect(Panicky {
        runs: runs.clone(),
        tool_router: Panicky::tool_router(),
    })
    .await;
    let first = client
        .call_tool(call("protocol", json!({}), json!({})))
        .await;
    assert!(first.is_err(), "{first:?}");
    let second = client
        .call_tool(call("protocol", json!({}), json!({})))
        .await
        .unwrap();
    assert_eq!(text(&second), "protocol #2");
    assert_eq!(meta(&second, "idem/status"), "executed");
    client.cancel().await.unwrap();
}

#[derive(Clone)]
struct Blocking {
    runs: Arc<AtomicUsize>,
    #[allow(dead_code)]
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl Blocking {
    /// A sync tool that takes longer than its lease (a blocking bank call).
    #[idempotent(scope = "global", lease = "1s", wait = "0s")]
    #[tool]
    fn transfer(&self, Parameters(_e): Parameters<Empty>) -> String {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        std::thread::sleep(Duration::from_millis(2500));
        format!("transfer #{n}")
    }
}

#[tool_handler]
impl ServerHandler for Blocking {}

// L1 (a running body's lease is renewed every heartbeat, so a live owner is never taken
// over) for a *sync* rmcp tool: the attribute turns it into an async block, whose heartbeat
// is polled beside the body, but the body never yields, so no renewal runs (the plain
// attribute runs a sync body with `run_blocking` and the renewal thread). After the lease,
// a duplicate takes the key over and runs the transfer a second time while the first still
// runs.
// pins M10a, L1, S2 (a defect the adversarial review of issue 8 found; fixed)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn adv8_a_sync_rmcp_tool_longer_than_its_lease_is_taken_over() {
    let runs = Arc::new(AtomicUsize::new(0));
    let client = Arc::new(
        connect(Blocking {
            runs: runs.clone(),
            tool_router: Blocking::tool_router(),
        })
        .await,
    );
    let first = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call_tool(call("transfer", json!({}), json!({})))
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let duplicate = client
        .call_tool(call("transfer", json!({}), json!({})))
        .await
        .unwrap();
    let first = first.await.unwrap();
    assert_eq!(text(&first), "transfer #1");
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the duplicate ran the transfer again while the first still ran: {} ({})",
        text(&duplicate),
        meta(&duplicate, "idem/status")
    );
}

#[derive(Clone)]
struct PlainBlocking {
    runs: Arc<AtomicUsize>,
    #[allow(dead_code)]
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl PlainBlocking {
    /// A sync tool without the attribute, keyed by `IdempotentServer`.
    #[tool]
    fn transfer(&self, Parameters(_e): Parameters<Empty>) -> String {
        let n = self.runs.fetch_add(1, Ordering::SeqCst) + 1;
        std::thread::sleep(Duration::from_millis(2500));
        format!("transfer #{n}")
    }
}

#[tool_handler]
impl ServerHandler for PlainBlocking {}

// The same under `IdempotentServer` (M10): the server polls the heartbeat in the future
// that runs the inner handler, which a sync tool blocks.
// pins M10a, L1, S2 (a defect the adversarial review of issue 8 found; fixed)
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn adv8_a_sync_tool_under_the_server_longer_than_its_lease_is_taken_over() {
    let runs = Arc::new(AtomicUsize::new(0));
    let server = idem::integrations::rmcp::IdempotentServer::builder(PlainBlocking {
        runs: runs.clone(),
        tool_router: PlainBlocking::tool_router(),
    })
    .engine(idem::Engine::in_memory())
    .scope(idem::Scope::Global)
    .lease(Duration::from_secs(1))
    .wait(Duration::ZERO)
    .build()
    .unwrap();
    let client = Arc::new(connect(server).await);
    let first = {
        let client = client.clone();
        tokio::spawn(async move {
            client
                .call_tool(call("transfer", json!({}), json!({})))
                .await
                .unwrap()
        })
    };
    tokio::time::sleep(Duration::from_millis(1600)).await;
    let duplicate = client
        .call_tool(call("transfer", json!({}), json!({})))
        .await
        .unwrap();
    let _ = first.await.unwrap();
    assert_eq!(
        runs.load(Ordering::SeqCst),
        1,
        "the duplicate ran the transfer again while the first still ran: {} ({})",
        text(&duplicate),
        meta(&duplicate, "idem/status")
    );
}
