//! A lost `tools/call` response: the tool ran, the client never heard, and retries
//! (contract M1, M5, S3; the MCP case of T2).

mod common;

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::shop::Shop;
use common::{call, connect_losing_first_response, meta, text, Runs};
use serde_json::json;

// pins M1, M5, S3: the retry of a call whose response was lost after the tool ran gets the
// first run's result, replayed; the effect happened once
#[tokio::test]
async fn a_retry_after_a_lost_response_replays_the_first_result() {
    let runs = Runs::default();
    let lost = Arc::new(AtomicUsize::new(0));
    let client = connect_losing_first_response(Shop::new(runs.clone()), lost.clone()).await;
    let request = call(
        "send_refund",
        json!({"order_id": "o_lost", "amount_cents": 700}),
        json!({"conversationId": "lost_response"}),
    );
    let first = tokio::time::timeout(
        Duration::from_millis(500),
        client.call_tool(request.clone()),
    )
    .await;
    assert!(first.is_err(), "the first response must be lost: {first:?}");
    assert_eq!(lost.load(Ordering::SeqCst), 1);
    assert_eq!(
        runs.of("send_refund"),
        1,
        "the tool ran before its response was lost"
    );

    let retry = client.call_tool(request).await.unwrap();
    assert_eq!(text(&retry), "refund #1: 700 cents on o_lost");
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    assert_eq!(retry.is_error, Some(false));
    assert_eq!(runs.of("send_refund"), 1);
    client.cancel().await.unwrap();
}
