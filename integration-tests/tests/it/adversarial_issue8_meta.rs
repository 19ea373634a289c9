//! adv8: `_meta` edge cases that held (contract M3, M4, M6). Passing checks.

use crate::common;

use common::shop::Shop;
use common::{call, connect, meta, text, Runs};
use serde_json::json;

fn refund(order: &str) -> serde_json::Value {
    json!({"order_id": order, "amount_cents": 500})
}

#[tokio::test]
async fn adv8_conversation_ids_of_odd_types() {
    let runs = Runs::default();
    let client = connect(Shop::new(runs.clone())).await;
    for bad in [
        json!(7),
        json!(null),
        json!(""),
        json!({"id": "x"}),
        json!(["c"]),
        json!(true),
    ] {
        let result = client
            .call_tool(call(
                "send_refund",
                refund("o1"),
                json!({ "conversationId": bad }),
            ))
            .await
            .unwrap();
        assert_eq!(meta(&result, "idem/error"), "bad_meta", "{bad}: {result:?}");
    }
    assert_eq!(runs.of("send_refund"), 0);
    let huge = "c".repeat(1 << 20);
    let unicode = "会話-🧾-\u{0}-|".to_owned();
    for id in [huge, unicode] {
        let a = client
            .call_tool(call(
                "send_refund",
                refund("o1"),
                json!({ "conversationId": id.clone() }),
            ))
            .await
            .unwrap();
        let b = client
            .call_tool(call(
                "send_refund",
                refund("o1"),
                json!({ "conversationId": id }),
            ))
            .await
            .unwrap();
        assert_eq!(meta(&a, "idem/status"), "executed");
        assert_eq!(meta(&b, "idem/status"), "replayed");
    }
    client.cancel().await.unwrap();
}

#[tokio::test]
async fn adv8_client_keys_at_the_edges() {
    let runs = Runs::default();
    let client = connect(Shop::new(runs.clone())).await;
    let ok_keys = ["k".repeat(255), "🧾".repeat(255), "\u{0}".to_owned()];
    for (i, key) in ok_keys.iter().enumerate() {
        let order = format!("o{i}");
        let order: &'static str = Box::leak(order.into_boxed_str());
        let a = client
            .call_tool(call(
                "send_refund",
                refund(order),
                json!({ "idempotencyKey": key, "conversationId": "c1" }),
            ))
            .await
            .unwrap();
        // Another conversation, same key and arguments: replays (M4).
        let b = client
            .call_tool(call(
                "send_refund",
                refund(order),
                json!({ "idempotencyKey": key, "conversationId": "c2" }),
            ))
            .await
            .unwrap();
        assert_eq!(meta(&a, "idem/status"), "executed", "{a:?}");
        assert_eq!(meta(&b, "idem/status"), "replayed", "{b:?}");
    }
    for bad in [
        json!("k".repeat(256)),
        json!("🧾".repeat(256)),
        json!(""),
        json!(12),
        json!(null),
    ] {
        let r = client
            .call_tool(call(
                "send_refund",
                refund("x"),
                json!({ "idempotencyKey": bad }),
            ))
            .await
            .unwrap();
        assert_eq!(meta(&r, "idem/error"), "bad_meta", "{r:?}");
    }
    // The same client key on two tools: two records (the key includes the tool name).
    let a = client
        .call_tool(call(
            "send_refund",
            refund("shared"),
            json!({ "idempotencyKey": "shared-key" }),
        ))
        .await
        .unwrap();
    let b = client
        .call_tool(call(
            "charge",
            refund("shared"),
            json!({ "idempotencyKey": "shared-key" }),
        ))
        .await
        .unwrap();
    assert_eq!(meta(&a, "idem/status"), "executed", "{}", text(&a));
    assert_eq!(meta(&b, "idem/status"), "executed", "{}", text(&b));
    assert_ne!(meta(&a, "idem/key"), meta(&b, "idem/key"));
    client.cancel().await.unwrap();
}
