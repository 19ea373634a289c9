//! A lost `tools/call` response: the tool ran, the client never heard, and retries
//! (contract M1, M5, S3; the MCP case of T2).

use crate::common;

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

// pins M11, U4: a client that gives up on a running call sends notifications/cancelled;
// rmcp 3.11 cancels the request's token but lets the tool finish, so its outcome is saved
// and the retry replays it (had the future been dropped, U4 would hold the key unknown)
#[tokio::test]
async fn a_cancelled_call_finishes_and_its_retry_replays() {
    use common::connect;
    use common::shop::SLOW;
    let runs = Runs::default();
    let client = connect(Shop::new(runs.clone())).await;
    let request = call(
        "slow_wait",
        json!({"order_id": "o_cancel", "amount_cents": 1}),
        json!({"conversationId": "cancelled_call"}),
    );
    let gave_up = tokio::time::timeout(SLOW / 4, client.call_tool(request.clone())).await;
    assert!(gave_up.is_err(), "the client gives up before the tool ends");
    tokio::time::sleep(SLOW * 2).await;
    let retry = client.call_tool(request).await.unwrap();
    assert_eq!(meta(&retry, "idem/status"), "replayed", "{retry:?}");
    assert_eq!(text(&retry), "slow refund #1 on o_cancel");
    assert_eq!(runs.of("slow_wait"), 1);
    client.cancel().await.unwrap();
}
