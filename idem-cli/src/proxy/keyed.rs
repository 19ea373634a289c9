//! A client's `tools/call`: passed through, or run under idem's call protocol with the
//! server's answer as the outcome (contract Y2, Y3, Y7).

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::integrations::rmcp::{ForwardedCall, ServerAnswer};
use serde_json::{Map, Value};
use tokio::sync::watch;
use tracing::Instrument;

use super::jsonrpc::{error_response, result_response, tool_call, INTERNAL_ERROR};
use super::router::{KeyedCall, Reply, Router};

/// Serves the client's `tools/call` request `id` (the whole message `body`).
pub async fn serve(router: Arc<Router>, id: Value, body: Map<String, Value>) {
    let (params, tool) = tool_call(&body);
    let span = tracing::info_span!("mcp_proxy.call", tool = %tool, request = %id);
    async move {
        let (call, mut cancelled) = router.keyed_started(&id);
        let Some(table) = router.tool_table().await else {
            // The proxy is stopping; `stop` answered this request.
            return;
        };
        let Some(plan) = table.plan(&router.config, &tool) else {
            router.keyed_finished(call);
            if *cancelled.borrow() {
                return;
            }
            tracing::debug!("not keyed: passed through");
            router.forward_request(id, "tools/call".to_owned(), body);
            return;
        };
        let forwarded_call = ForwardedCall::from_params(
            &params,
            Some(router.engine.clone()),
            &router.config.conversation_meta,
        );
        let forward = forward(&router, call, body);
        let run = forwarded_call.run(plan.spec, plan.key, forward);
        let outcome = tokio::select! {
            outcome = run => Some(outcome),
            () = given_up(&mut cancelled, || router.keyed_forwarded(call), router.config.cancel_wait) => None,
        };
        router.keyed_finished(call);
        match outcome {
            Some(Ok(result)) => router.send_client(result_response(id, result)),
            Some(Err(error)) => router.send_client(serde_json::json!({
                "jsonrpc": "2.0", "id": id, "error": error,
            })),
            None => tracing::info!(
                "cancelled by the client and not answered by the server: the call ended as its on_cancel says"
            ),
        }
    }
    .instrument(span)
    .await;
}

/// The body of a keyed call: the request to the server, and its answer (Y3, Y6).
async fn forward(router: &Router, call: KeyedCall, body: Map<String, Value>) -> ServerAnswer {
    let reply = router.forward_keyed(call, body).await;
    match reply {
        Ok(Reply::Answer(mut answer)) => {
            match (answer.remove("result"), answer.remove("error")) {
                (Some(Value::Object(result)), _) => ServerAnswer::Result(result),
                (_, Some(error)) => ServerAnswer::Error(error),
                (other, None) => {
                    // A result that is not an object is no MCP result: refused, not saved.
                    let shown = other.map_or_else(|| "nothing".to_owned(), |v| v.to_string());
                    tracing::warn!("the server answered tools/call with {shown}");
                    ServerAnswer::Error(
                    error_response(
                        Value::Null,
                        INTERNAL_ERROR,
                        format!("the MCP server answered with a result that is not an object: {shown}"),
                    )["error"]
                        .take(),
                )
                }
            }
        }
        Ok(Reply::Lost(why)) => ServerAnswer::Lost { reason: why },
        Ok(Reply::NotDelivered(why)) => ServerAnswer::NotDelivered(
            error_response(
                Value::Null,
                INTERNAL_ERROR,
                format!("the MCP server did not get the request: {why}; retry"),
            )["error"]
                .take(),
        ),
        // The router dropped the waiter (the proxy is stopping): the request may have reached
        // the server, so whether it took effect is unknown (U1), never released.
        Err(_) => ServerAnswer::Lost {
            reason: "the proxy stopped".to_owned(),
        },
    }
}

/// Resolves when the proxy gives up on a keyed call the client cancelled (Y7): at once if
/// it was not `forwarded` yet (it is still waiting for its claim), else after
/// `cancel_wait` without an answer. Never resolves for a call that is not cancelled.
pub async fn given_up(
    cancelled: &mut watch::Receiver<bool>,
    forwarded: impl Fn() -> bool,
    cancel_wait: Duration,
) {
    if cancelled.wait_for(|c| *c).await.is_err() {
        std::future::pending::<()>().await;
    }
    if forwarded() {
        tokio::time::sleep(cancel_wait).await;
    }
}
