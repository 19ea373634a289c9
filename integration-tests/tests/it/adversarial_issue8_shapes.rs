//! adv8: odd shapes of `#[idempotent]` above rmcp's `#[tool]` (contract M12, C4).

use crate::common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use common::{call, connect, meta, text};
use idem::idempotent;
use rmcp::handler::server::common::Extension;
use rmcp::handler::server::router::tool::ToolRouter;
use rmcp::handler::server::wrapper::{Json, Parameters};
use rmcp::service::RequestContext;
use rmcp::{tool, tool_handler, tool_router, Peer, RoleServer, ServerHandler};
use serde_json::json;

#[derive(Debug, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Refund {
    order_id: String,
    amount_cents: u64,
}

#[derive(Debug, serde::Serialize, serde::Deserialize, rmcp::schemars::JsonSchema)]
#[schemars(crate = "rmcp::schemars")]
struct Receipt {
    n: usize,
}

static STATIC_RUNS: AtomicUsize = AtomicUsize::new(0);

#[derive(Clone)]
struct Odd {
    runs: Arc<AtomicUsize>,
    #[allow(dead_code)]
    tool_router: ToolRouter<Self>,
}

impl Odd {
    fn new() -> Self {
        Odd {
            runs: Arc::default(),
            tool_router: Self::tool_router(),
        }
    }
    fn run(&self) -> usize {
        self.runs.fetch_add(1, Ordering::SeqCst) + 1
    }
}

#[tool_router]
impl Odd {
    /// Explicit receiver lifetime, struct destructuring in `Parameters`.
    #[idempotent]
    #[tool]
    async fn lifetimed<'a>(
        &'a self,
        Parameters(Refund {
            order_id,
            amount_cents,
        }): Parameters<Refund>,
    ) -> String {
        format!("lifetimed #{} {order_id} {amount_cents}", self.run())
    }

    /// No receiver.
    #[idempotent(scope = "global")]
    #[tool]
    async fn no_receiver(Parameters(refund): Parameters<Refund>) -> String {
        let n = STATIC_RUNS.fetch_add(1, Ordering::SeqCst) + 1;
        format!("static #{n} {}", refund.order_id)
    }

    /// Several extractors after `Parameters`.
    #[idempotent]
    #[tool]
    async fn extractors(
        &self,
        context: RequestContext<RoleServer>,
        Parameters(refund): Parameters<Refund>,
        _peer: Peer<RoleServer>,
        _meta: rmcp::model::RequestMetaObject,
    ) -> String {
        let _ = context.id;
        format!("extractors #{} {}", self.run(), refund.order_id)
    }

    /// `?` and `return` in the body of a sync fn returning `Result<Json<T>, String>`.
    #[idempotent(scope = "global")]
    #[rmcp::tool(name = "question-mark")]
    fn question_mark(&self, p: Parameters<Refund>) -> Result<Json<Receipt>, String> {
        let n: u64 =
            p.0.order_id
                .parse()
                .map_err(|_| format!("not a number: {}", p.0.order_id))?;
        if n == 0 {
            return Err("zero".to_owned());
        }
        Ok(Json(Receipt { n: self.run() }))
    }

    /// Named scope and call scope.
    #[idempotent(scope = "tenant")]
    #[tool]
    async fn tenant(&self, Parameters(refund): Parameters<Refund>) -> String {
        format!("tenant #{} {}", self.run(), refund.order_id)
    }

    #[idempotent(scope = "call", store = "memory")]
    #[tool]
    async fn per_call(&self, Parameters(refund): Parameters<Refund>) -> String {
        format!("per_call #{} {}", self.run(), refund.order_id)
    }

    /// An `Extension` extractor that is missing: rmcp's error before the body.
    #[idempotent(scope = "global")]
    #[tool]
    async fn needs_extension(&self, Extension(x): Extension<u32>) -> String {
        format!("ext {x}")
    }
}

#[tool_handler]
impl ServerHandler for Odd {}

fn refund(order: &str) -> serde_json::Value {
    json!({"order_id": order, "amount_cents": 5})
}

#[tokio::test]
async fn adv8_odd_shapes_compile_and_replay() {
    let server = Odd::new();
    let client = connect(server).await;
    let c = json!({"conversationId": "adv8-shapes"});
    for tool in ["lifetimed", "extractors"] {
        let a = client
            .call_tool(call(tool, refund("o1"), c.clone()))
            .await
            .unwrap();
        let b = client
            .call_tool(call(tool, refund("o1"), c.clone()))
            .await
            .unwrap();
        assert_eq!(meta(&a, "idem/status"), "executed", "{tool}: {a:?}");
        assert_eq!(meta(&b, "idem/status"), "replayed", "{tool}: {b:?}");
        assert_eq!(text(&a), text(&b));
    }
    let a = client
        .call_tool(call("no_receiver", refund("o1"), json!({})))
        .await
        .unwrap();
    let b = client
        .call_tool(call("no_receiver", refund("o1"), json!({})))
        .await
        .unwrap();
    assert_eq!(meta(&b, "idem/status"), "replayed", "{a:?} {b:?}");
    assert_eq!(STATIC_RUNS.load(Ordering::SeqCst), 1);

    let bad = client
        .call_tool(call("question-mark", refund("x"), json!({})))
        .await
        .unwrap();
    let bad2 = client
        .call_tool(call("question-mark", refund("x"), json!({})))
        .await
        .unwrap();
    assert_eq!(bad.is_error, Some(true));
    assert_eq!(text(&bad), "not a number: x");
    assert_eq!(meta(&bad2, "idem/status"), "replayed");
    let ok = client
        .call_tool(call("question-mark", refund("7"), json!({})))
        .await
        .unwrap();
    assert!(ok.structured_content.is_some(), "{ok:?}");
    let tools = client.list_all_tools().await.unwrap();
    let qm = tools.iter().find(|t| t.name == "question-mark").unwrap();
    assert!(qm.output_schema.is_some(), "{qm:?}");

    let t1 = client
        .call_tool(call("tenant", refund("o1"), json!({"tenant": "acme"})))
        .await
        .unwrap();
    let t2 = client
        .call_tool(call("tenant", refund("o1"), json!({"tenant": "acme"})))
        .await
        .unwrap();
    let t3 = client
        .call_tool(call("tenant", refund("o1"), json!({"tenant": 5})))
        .await
        .unwrap();
    let t4 = client
        .call_tool(call("tenant", refund("o1"), json!({})))
        .await
        .unwrap();
    assert_eq!(meta(&t2, "idem/status"), "replayed", "{t1:?} {t2:?}");
    assert_eq!(meta(&t3, "idem/error"), "bad_meta", "{t3:?}");
    assert_eq!(meta(&t4, "idem/error"), "missing_scope", "{t4:?}");
    assert!(text(&t4).contains("_meta.tenant"), "{t4:?}");

    let p1 = client
        .call_tool(call("per_call", refund("o1"), json!({"toolCallId": "tc1"})))
        .await
        .unwrap();
    let p2 = client
        .call_tool(call("per_call", refund("o1"), json!({"toolCallId": "tc1"})))
        .await
        .unwrap();
    let p3 = client
        .call_tool(call("per_call", refund("o1"), json!({"toolCallId": "tc2"})))
        .await
        .unwrap();
    let p4 = client
        .call_tool(call("per_call", refund("o1"), json!({})))
        .await
        .unwrap();
    assert_eq!(meta(&p2, "idem/status"), "replayed", "{p1:?} {p2:?}");
    assert_eq!(meta(&p3, "idem/status"), "executed", "{p3:?}");
    assert_eq!(meta(&p4, "idem/error"), "missing_scope", "{p4:?}");

    let e = client
        .call_tool(call("needs_extension", json!({}), json!({})))
        .await;
    assert!(e.is_err(), "{e:?}");
    client.cancel().await.unwrap();
}

/// A generic server (an impl with type parameters).
#[derive(Clone)]
struct Generic<T: Clone + Send + Sync + 'static> {
    label: T,
    #[allow(dead_code)]
    tool_router: ToolRouter<Self>,
}

#[tool_router]
impl<T: Clone + Send + Sync + std::fmt::Display + 'static> Generic<T> {
    #[idempotent(scope = "global")]
    #[tool]
    async fn label(&self, Parameters(refund): Parameters<Refund>) -> String {
        format!("{} {}", self.label, refund.order_id)
    }
}

#[tool_handler]
impl<T: Clone + Send + Sync + std::fmt::Display + 'static> ServerHandler for Generic<T> {}

#[tokio::test]
async fn adv8_generic_server() {
    let client = connect(Generic {
        label: 7u32,
        tool_router: Generic::<u32>::tool_router(),
    })
    .await;
    let a = client
        .call_tool(call("label", refund("o1"), json!({})))
        .await
        .unwrap();
    let b = client
        .call_tool(call("label", refund("o1"), json!({})))
        .await
        .unwrap();
    assert_eq!(text(&a), "7 o1");
    assert_eq!(meta(&b, "idem/status"), "replayed");
}
