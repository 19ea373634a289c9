//! The MCP session as the conversation (contract M3): rmcp's streamable HTTP server puts
//! each request's `http::request::Parts` in its extensions; a transport wrapper here does
//! the same over a pipe, with the `Mcp-Session-Id` header of one session per connection.

use crate::common;

use std::future::Future;

use common::shop::Shop;
use common::{call, meta, text, Client, Runs};
use rmcp::model::{GetExtensions, JsonRpcMessage};
use rmcp::service::{RxJsonRpcMessage, TxJsonRpcMessage};
use rmcp::transport::{IntoTransport, Transport};
use rmcp::{RoleServer, ServiceExt};
use serde_json::json;

/// A server transport that adds the HTTP parts of session `session` to every request.
struct InSession<T> {
    inner: T,
    session: &'static str,
}

impl<T: Transport<RoleServer>> Transport<RoleServer> for InSession<T> {
    type Error = T::Error;

    fn send(
        &mut self,
        item: TxJsonRpcMessage<RoleServer>,
    ) -> impl Future<Output = Result<(), Self::Error>> + Send + 'static {
        self.inner.send(item)
    }

    async fn receive(&mut self) -> Option<RxJsonRpcMessage<RoleServer>> {
        let mut message = self.inner.receive().await?;
        if let JsonRpcMessage::Request(request) = &mut message {
            let (parts, ()) = http::Request::builder()
                .method("POST")
                .header("Mcp-Session-Id", self.session)
                .body(())
                .unwrap()
                .into_parts();
            request.request.extensions_mut().insert(parts);
        }
        Some(message)
    }

    fn close(&mut self) -> impl Future<Output = Result<(), Self::Error>> + Send {
        self.inner.close()
    }
}

async fn connect_in_session(server: Shop, session: &'static str) -> Client {
    let (client_io, server_io) = tokio::io::duplex(1 << 16);
    let inner =
        IntoTransport::<RoleServer, std::io::Error, _>::into_transport(tokio::io::split(server_io));
    tokio::spawn(async move {
        if let Ok(running) = server.serve(InSession { inner, session }).await {
            let _ = running.waiting().await;
        }
    });
    ().serve(tokio::io::split(client_io)).await.unwrap()
}

// pins M3, K7: without _meta.conversationId a session is the conversation: a retry in the
// session replays, another session runs again, and a client-chosen conversation id equal
// to a session id is not that session
#[tokio::test]
async fn a_session_is_the_conversation() {
    let runs = Runs::default();
    let args = json!({"order_id": "o_session", "amount_cents": 5});
    let a = connect_in_session(Shop::new(runs.clone()), "session-test-a").await;
    let first = a
        .call_tool(call("send_refund", args.clone(), json!(null)))
        .await
        .unwrap();
    let retry = a
        .call_tool(call("send_refund", args.clone(), json!(null)))
        .await
        .unwrap();
    assert_eq!(meta(&first, "idem/status"), "executed", "{}", text(&first));
    assert_eq!(meta(&retry, "idem/status"), "replayed");

    let b = connect_in_session(Shop::new(runs.clone()), "session-test-b").await;
    let other = b
        .call_tool(call("send_refund", args.clone(), json!(null)))
        .await
        .unwrap();
    assert_eq!(meta(&other, "idem/status"), "executed");
    let named = b
        .call_tool(call(
            "send_refund",
            args,
            json!({"conversationId": "session-test-a"}),
        ))
        .await
        .unwrap();
    assert_eq!(meta(&named, "idem/status"), "executed");
    assert_ne!(meta(&named, "idem/key"), meta(&first, "idem/key"));
    assert_eq!(runs.of("send_refund"), 3);
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}

// M3 says a session id is hashed as `mcp-session:<id>` "so it never equals a client-chosen
// conversation id". A client of session B that sends `_meta.conversationId =
// "mcp-session:<A's session id>"` is in session A's conversation: it gets A's saved refund
// back (and could block or conflict A's keys).
// pins M3 (a defect the adversarial review of issue 8 found; fixed)
#[tokio::test]
async fn a_client_cannot_name_another_sessions_conversation() {
    let runs = Runs::default();
    let args = json!({"order_id": "o_adv8_session", "amount_cents": 5});
    let a = connect_in_session(Shop::new(runs.clone()), "adv8-session-a").await;
    let first = a
        .call_tool(call("send_refund", args.clone(), json!(null)))
        .await
        .unwrap();
    assert_eq!(meta(&first, "idem/status"), "executed");
    let b = connect_in_session(Shop::new(runs.clone()), "adv8-session-b").await;
    let spoofed = b
        .call_tool(call(
            "send_refund",
            args,
            json!({"conversationId": "mcp-session:adv8-session-a"}),
        ))
        .await
        .unwrap();
    assert_ne!(
        meta(&spoofed, "idem/key"),
        meta(&first, "idem/key"),
        "a client-chosen conversation id equals session A's conversation ({}: {})",
        meta(&spoofed, "idem/status"),
        text(&spoofed)
    );
    a.cancel().await.unwrap();
    b.cancel().await.unwrap();
}
