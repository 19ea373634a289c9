//! A client's `tools/call`: passed through, or run under idem's call protocol with the
//! server's answer as the outcome (contract Y2, Y3, Y7).

use std::sync::Arc;
use std::time::Duration;

use idem_runtime::integrations::rmcp::{ForwardedCall, ServerAnswer};
use idem_runtime::OnCancel;
use serde_json::{Map, Value};
use tokio::sync::watch;
use tracing::Instrument;

use super::jsonrpc::{answer_line, error_line, error_response, Id, Raw, INTERNAL_ERROR};
use super::router::{KeyedCall, Reply, Router};

/// Serves the client's `tools/call` request `id` of `tool` (its `params`; the message as
/// sent, `raw`), registered with the router as `call` (whose cancellation flag is
/// `cancelled`).
pub async fn serve(
    router: Arc<Router>,
    id: Id,
    params: Map<String, Value>,
    tool: String,
    raw: Raw,
    call: KeyedCall,
    mut cancelled: watch::Receiver<bool>,
) {
    let span = tracing::info_span!("mcp_proxy.call", tool = %tool, request = %id);
    async move {
        let mut stopping = router.stopping();
        // Each answer is sent before the call is finished: the proxy, winding down, exits
        // once no keyed call is left, and what was sent by then reaches the client.
        let Some(table) = router.tool_table().await else {
            router.send_client(error_line(&id, INTERNAL_ERROR, stopped(&stopping)));
            router.keyed_finished(call);
            return;
        };
        let Some(plan) = table.plan(&router.config, &tool) else {
            if !*cancelled.borrow() {
                tracing::debug!("not keyed: passed through");
                router.forward_request(id, "tools/call".to_owned(), &raw);
            }
            router.keyed_finished(call);
            return;
        };
        let forwarded_call = ForwardedCall::from_params(
            &params,
            Some(router.engine.clone()),
            &router.config.conversation_meta,
        );
        let forward = forward(&router, call, &raw, cancelled.clone(), plan.spec.on_cancel);
        let run = forwarded_call.run(plan.spec, plan.key, forward);
        let outcome = tokio::select! {
            outcome = run => Ended::Outcome(outcome),
            () = given_up(&mut cancelled, || router.keyed_forwarded(call), router.config.cancel_wait) => Ended::Cancelled,
            // Still waiting for its claim or the tool listing: nothing reached the server.
            // Once forwarded, the router's wind-down ends the body (unknown or released).
            () = async {
                let _ = stopping.wait_for(Option::is_some).await;
                if router.keyed_forwarded(call) {
                    std::future::pending::<()>().await;
                }
            } => Ended::Stopping,
        };
        match outcome {
            Ended::Outcome(Ok(result)) => router.send_client(answer_line(&id, Ok(&result))),
            Ended::Outcome(Err(error)) => router.send_client(answer_line(&id, Err(&error))),
            Ended::Cancelled => tracing::info!(
                "cancelled by the client and not answered by the server: the call ended as its on_cancel says"
            ),
            Ended::Stopping => {
                router.send_client(error_line(&id, INTERNAL_ERROR, stopped(&stopping)));
            }
        }
        router.keyed_finished(call);
    }
    .instrument(span)
    .await;
}

/// How a keyed call's task ended.
enum Ended {
    Outcome(Result<Map<String, Value>, Value>),
    Cancelled,
    Stopping,
}

/// The error text for a request the proxy ends because it stops.
fn stopped(stopping: &watch::Receiver<Option<String>>) -> String {
    let why = stopping.borrow().clone();
    format!(
        "{}; the call was not forwarded to the MCP server: retry",
        why.unwrap_or_else(|| "the proxy is stopping".to_owned())
    )
}

/// The body of a keyed call: the request to the server, and its answer (Y3, Y6); an error
/// answer after the client's cancellation is as `on_cancel` says (Y7).
async fn forward(
    router: &Router,
    call: KeyedCall,
    raw: &Raw,
    cancelled: watch::Receiver<bool>,
    on_cancel: OnCancel,
) -> ServerAnswer {
    let reply = router.forward_keyed(call, raw).await;
    match reply {
        Ok(Reply::Answer(answer)) if *cancelled.borrow() => {
            ServerAnswer::from_response(answer).after_cancellation(on_cancel)
        }
        Ok(Reply::Answer(answer)) => ServerAnswer::from_response(answer),
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
