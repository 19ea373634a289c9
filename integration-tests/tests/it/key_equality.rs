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

/// The Rust tool a proxied server's `send_refund` must share keys with.
#[idem::idempotent]
async fn send_refund(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{amount_cents} on {order_id}"))
}

/// The same, keyed by the order alone (the amount is fingerprint).
#[idem::idempotent(key(order_id), name = "send_refund")]
async fn send_refund_by_order(order_id: String, amount_cents: u64) -> Result<String, ToolError> {
    Ok(format!("{amount_cents} on {order_id}"))
}

/// The key `idem mcp-proxy` derives for a forwarded `tools/call` (Y3), keyed by `key`.
async fn forwarded_key(params: serde_json::Value, key: Option<&'static [&'static str]>) -> String {
    use idem_runtime::integrations::rmcp::{ForwardedCall, ServerAnswer};
    let spec = ForwardedCall::spec("send_refund", &idem_runtime::ToolSpec::new("")).unwrap();
    let call = ForwardedCall::from_params(
        params.as_object().unwrap(),
        Some(Engine::in_memory()),
        "conversationId",
    );
    let result = json!({"content": [{"type": "text", "text": "ok"}]});
    let answer = async move { ServerAnswer::Result(result.as_object().unwrap().clone()) };
    let out = call.run(spec, key, answer).await.unwrap();
    out["_meta"]["idem/key"].as_str().unwrap().to_owned()
}

// pins Y3, K1, K8: a proxied server's call and a Rust `#[idempotent]` tool of the same
// name and arguments share one key (golden: the value is fixed, so a change of either
// derivation fails here)
#[tokio::test]
async fn a_forwarded_call_has_the_key_of_the_rust_tool() {
    const GOLDEN: &str = "75f262578a78665093a278c19e30742d14918af2829d57a80a86db2b329ceef0";
    let params = json!({"name": "send_refund", "arguments": {"order_id": "o1", "amount_cents": 500},
                        "_meta": {"conversationId": "c1"}});
    assert_eq!(forwarded_key(params.clone(), None).await, GOLDEN);

    let context = CallContext::new()
        .with_conversation("c1")
        .with_engine(Engine::in_memory());
    context.run(send_refund("o1".into(), 500)).await.unwrap();
    assert_eq!(context.last_outcome().unwrap().key.as_str(), GOLDEN);

    // key(order_id): the proxy's `key = ["order_id"]` and the attribute's `key(order_id)`.
    let by_order = forwarded_key(params, Some(&["order_id"])).await;
    assert_ne!(by_order, GOLDEN);
    let context = CallContext::new()
        .with_conversation("c1")
        .with_engine(Engine::in_memory());
    context
        .run(send_refund_by_order("o1".into(), 500))
        .await
        .unwrap();
    assert_eq!(context.last_outcome().unwrap().key.as_str(), by_order);
}
