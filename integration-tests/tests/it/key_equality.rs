//! The key of an MCP call equals the key of the same call made through `#[idempotent]`'s
//! runtime path (`prepare` + `ArgsBuilder`) and through the dispatcher (contract M2, K1).

use crate::common;

use common::shop::{Refund, Shop, SEND_REFUND};
use common::{call, connect, meta, Runs};
use idem_runtime::dispatch::{parse_turns_str, Conversation, Dispatcher, Tool};
use idem_runtime::{prepare, CallContext, Engine, ToolError};
use serde_json::json;

/// What `#[idempotent] async fn send_refund(order_id: String, amount_cents: u64)`
/// generates: the arguments added to an `ArgsBuilder` by parameter name, through `prepare`.
async fn typed_send_refund(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    let prepared = prepare(&SEND_REFUND, None, |args| {
        args.key("order_id", &order_id)?;
        args.key("amount_cents", &amount_cents)?;
        Ok(())
    });
    match prepared {
        Err(error) => Err(error.into()),
        Ok(call) => {
            call.run(async move { Ok(format!("{amount_cents} on {order_id}")) })
                .await
        }
    }
}

// pins M2, K1: one intent, one key, whichever way the call arrives
#[tokio::test]
async fn mcp_typed_and_dispatched_calls_share_the_key() {
    let client = connect(Shop::new(Runs::default())).await;
    let mcp = client
        .call_tool(call(
            "send_refund",
            json!({"amount_cents": 500, "order_id": "ord_7"}),
            json!({"conversationId": "key_equality"}),
        ))
        .await
        .unwrap();
    let mcp_key = meta(&mcp, "idem/key").as_str().unwrap().to_owned();

    // The attribute's path, with the conversation on the call context.
    let context = CallContext::new()
        .with_conversation("key_equality")
        .with_engine(Engine::in_memory());
    context
        .run(typed_send_refund("ord_7".into(), 500))
        .await
        .unwrap();
    let typed_key = context.last_outcome().unwrap().key;
    assert_eq!(typed_key.as_str(), mcp_key);

    // The dispatcher's path, from an MCP tools/call transcript.
    let dispatcher = Dispatcher::builder()
        .tool(Tool::from_async(
            "send_refund",
            |refund: Refund, _context: CallContext| {
                typed_send_refund(refund.order_id, refund.amount_cents)
            },
        ))
        .engine(Engine::in_memory())
        .build()
        .unwrap();
    let turns = parse_turns_str(
        r#"{"jsonrpc":"2.0","id":9,"method":"tools/call","params":{"name":"send_refund",
            "arguments":{"order_id":"ord_7","amount_cents":500}}}"#,
    )
    .unwrap();
    let outcome = dispatcher
        .dispatch_turn(&turns[0], &Conversation::new("key_equality"))
        .await;
    let dispatched_key = outcome.calls[0].key.clone().unwrap();
    assert_eq!(dispatched_key.as_str(), mcp_key);

    // Another conversation is another key.
    let elsewhere = client
        .call_tool(call(
            "send_refund",
            json!({"amount_cents": 500, "order_id": "ord_7"}),
            json!({"conversationId": "key_equality_other"}),
        ))
        .await
        .unwrap();
    assert_ne!(meta(&elsewhere, "idem/key").as_str().unwrap(), mcp_key);
    client.cancel().await.unwrap();
}
