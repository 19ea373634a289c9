//! `McpCall::run`, as `#[idempotent]` on an rmcp `#[tool]` method runs it: an rmcp client
//! and server in one process (contract M1–M8).

use crate::common;

use common::shop::{Shop, SLOW};
use common::{call, connect, meta, text, Runs};
use serde_json::json;

fn refund(order: &str) -> serde_json::Value {
    json!({"order_id": order, "amount_cents": 500})
}

// pins M1, M2, M5, S3: the same call twice in one conversation runs once; the retry gets
// the same result marked replayed, with the same key
#[tokio::test]
async fn a_retry_in_the_same_conversation_replays() {
    let runs = Runs::default();
    let client = connect(Shop::new(runs.clone())).await;
    let conversation = json!({"conversationId": "mcp_call_replays"});
    let first = client
        .call_tool(call("send_refund", refund("o1"), conversation.clone()))
        .await
        .unwrap();
    let retry = client
        .call_tool(call("send_refund", refund("o1"), conversation))
        .await
        .unwrap();
    assert_eq!(text(&first), "refund #1: 500 cents on o1");
    assert_eq!(meta(&first, "idem/status"), "executed");
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    assert_eq!(meta(&retry, "idem/key"), meta(&first, "idem/key"));
    assert_eq!(meta(&first, "idem/key").as_str().unwrap().len(), 64);
    // An executed result and its replay differ only in the status.
    let mut unmarked = retry.clone();
    unmarked
        .meta
        .as_mut()
        .unwrap()
        .insert("idem/status".into(), "executed".into());
    assert_eq!(unmarked, first);
    assert_eq!(runs.of("send_refund"), 1);
    client.cancel().await.unwrap();
}

// pins M2, M3, K7: other arguments and other conversations are other intents
#[tokio::test]
async fn other_arguments_or_conversations_run_again() {
    let runs = Runs::default();
    let client = connect(Shop::new(runs.clone())).await;
    let a = json!({"conversationId": "mcp_call_other_a"});
    let b = json!({"conversationId": "mcp_call_other_b"});
    let first = client
        .call_tool(call("send_refund", refund("o1"), a.clone()))
        .await
        .unwrap();
    let other_order = client
        .call_tool(call("send_refund", refund("o2"), a))
        .await
        .unwrap();
    let other_conversation = client
        .call_tool(call("send_refund", refund("o1"), b))
        .await
        .unwrap();
    for result in [&first, &other_order, &other_conversation] {
        assert_eq!(meta(result, "idem/status"), "executed");
    }
    assert_ne!(meta(&first, "idem/key"), meta(&other_order, "idem/key"));
    assert_ne!(
        meta(&first, "idem/key"),
        meta(&other_conversation, "idem/key")
    );
    assert_eq!(runs.of("send_refund"), 3);
    client.cancel().await.unwrap();
}

// pins M3, M6, K7: no conversation and no session: refused before the tool runs, and told
// what to send
#[tokio::test]
async fn no_conversation_is_a_missing_scope_error() {
    let runs = Runs::default();
    let client = connect(Shop::new(runs.clone())).await;
    let result = client
        .call_tool(call("send_refund", refund("o1"), json!(null)))
        .await
        .unwrap();
    assert_eq!(result.is_error, Some(true));
    assert_eq!(meta(&result, "idem/error"), "missing_scope");
    assert!(
        text(&result).contains("send the conversation id as `_meta.conversationId`"),
        "{}",
        text(&result)
    );
    let bad = client
        .call_tool(call(
            "send_refund",
            refund("o1"),
            json!({"conversationId": 42}),
        ))
        .await
        .unwrap();
    assert_eq!(meta(&bad, "idem/error"), "bad_meta");
    assert_eq!(
        text(&bad),
        "`_meta.conversationId` must be a non-empty string, not a number; the tool did not run"
    );
    // A global tool needs none.
    let global = client
        .call_tool(call(
            "note_global",
            json!({"text": "mcp_call_no_conv"}),
            json!(null),
        ))
        .await
        .unwrap();
    assert_eq!(meta(&global, "idem/status"), "executed");
    assert_eq!(runs.of("send_refund"), 0);
    client.cancel().await.unwrap();
}

// pins M4, M6, S9: a client key reused with other arguments is a conflict; with the same
// arguments it replays, in any conversation
#[tokio::test]
async fn a_client_key_reused_with_other_arguments_is_a_conflict() {
    let runs = Runs::default();
    let client = connect(Shop::new(runs.clone())).await;
    let keyed = |conversation: &str| json!({"idempotencyKey": "mcp-call-client-key-1", "conversationId": conversation});
    let first = client
        .call_tool(call("send_refund", refund("o1"), keyed("mcp_call_ck_a")))
        .await
        .unwrap();
    assert_eq!(meta(&first, "idem/status"), "executed");
    let elsewhere = client
        .call_tool(call("send_refund", refund("o1"), keyed("mcp_call_ck_b")))
        .await
        .unwrap();
    assert_eq!(meta(&elsewhere, "idem/status"), "replayed");
    let conflict = client
        .call_tool(call("send_refund", refund("o2"), keyed("mcp_call_ck_a")))
        .await
        .unwrap();
    assert_eq!(conflict.is_error, Some(true));
    assert_eq!(meta(&conflict, "idem/error"), "conflict");
    assert!(
        text(&conflict).starts_with(
            "conflict: this `_meta.idempotencyKey` was already used for a call of tool `send_refund` with other arguments"
        ),
        "{}",
        text(&conflict)
    );
    // A client key needs no conversation.
    let bare = client
        .call_tool(call(
            "send_refund",
            refund("o1"),
            json!({"idempotencyKey": "mcp-call-client-key-1"}),
        ))
        .await
        .unwrap();
    assert_eq!(meta(&bare, "idem/status"), "replayed");
    let too_long = client
        .call_tool(call(
            "send_refund",
            refund("o1"),
            json!({"idempotencyKey": "k".repeat(256)}),
        ))
        .await
        .unwrap();
    assert_eq!(meta(&too_long, "idem/error"), "bad_meta");
    assert_eq!(runs.of("send_refund"), 1);
    client.cancel().await.unwrap();
}

// pins M2, S9: with key(order_id), the same order with another amount is a conflict
#[tokio::test]
async fn key_selection_makes_the_other_members_fingerprint() {
    let runs = Runs::default();
    let client = connect(Shop::new(runs.clone())).await;
    let conversation = json!({"conversationId": "mcp_call_key_selection"});
    let first = client
        .call_tool(call("charge", refund("o1"), conversation.clone()))
        .await
        .unwrap();
    let conflict = client
        .call_tool(call(
            "charge",
            json!({"order_id": "o1", "amount_cents": 999}),
            conversation,
        ))
        .await
        .unwrap();
    assert_eq!(meta(&first, "idem/status"), "executed");
    assert_eq!(meta(&conflict, "idem/error"), "conflict");
    assert!(text(&conflict)
        .starts_with("conflict: an earlier call of tool `charge` with the same key arguments"));
    assert_eq!(runs.of("charge"), 1);
    client.cancel().await.unwrap();
}

// pins M6, S5: two calls at once with a tool that does not wait: one runs, the other is
// told to retry after a number of milliseconds
#[tokio::test]
async fn a_concurrent_duplicate_that_does_not_wait_is_in_progress() {
    let runs = Runs::default();
    let client = connect(Shop::new(runs.clone())).await;
    let conversation = json!({"conversationId": "mcp_call_concurrent_no_wait"});
    let (a, b) = tokio::join!(
        client.call_tool(call("slow_no_wait", refund("o1"), conversation.clone())),
        client.call_tool(call("slow_no_wait", refund("o1"), conversation.clone())),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let (done, busy) = if a.is_error == Some(true) {
        (b, a)
    } else {
        (a, b)
    };
    assert_eq!(meta(&done, "idem/status"), "executed");
    assert_eq!(meta(&busy, "idem/error"), "in_progress");
    let after = meta(&busy, "idem/retryAfterMs").as_u64().unwrap();
    assert!(after >= 1, "{after}");
    assert!(
        text(&busy).starts_with(&format!(
            "another call with this idempotency key is running; retry after {after} ms"
        )),
        "{}",
        text(&busy)
    );
    assert_eq!(meta(&busy, "idem/key"), meta(&done, "idem/key"));
    // The retry the error asks for gets the result.
    let retry = client
        .call_tool(call("slow_no_wait", refund("o1"), conversation))
        .await
        .unwrap();
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    assert_eq!(text(&retry), text(&done));
    assert_eq!(runs.of("slow_no_wait"), 1);
    client.cancel().await.unwrap();
}

// pins S5, D4: two calls at once with a tool that waits: one runs, the other replays its
// result
#[tokio::test]
async fn a_concurrent_duplicate_that_waits_replays() {
    let runs = Runs::default();
    let client = connect(Shop::new(runs.clone())).await;
    let conversation = json!({"conversationId": "mcp_call_concurrent_wait"});
    let started = std::time::Instant::now();
    let (a, b) = tokio::join!(
        client.call_tool(call("slow_wait", refund("o1"), conversation.clone())),
        client.call_tool(call("slow_wait", refund("o1"), conversation)),
    );
    let (a, b) = (a.unwrap(), b.unwrap());
    let mut statuses = [
        meta(&a, "idem/status").clone(),
        meta(&b, "idem/status").clone(),
    ];
    statuses.sort_by_key(|s| s.to_string());
    assert_eq!(statuses, [json!("executed"), json!("replayed")]);
    assert_eq!(text(&a), text(&b));
    assert_eq!(runs.of("slow_wait"), 1);
    assert!(started.elapsed() >= SLOW);
    client.cancel().await.unwrap();
}

// pins M7, S4: an error outcome (a tool returning Err(String)) is saved and replayed
#[tokio::test]
async fn an_error_result_is_replayed() {
    let runs = Runs::default();
    let client = connect(Shop::new(runs.clone())).await;
    let conversation = json!({"conversationId": "mcp_call_error_replayed"});
    let first = client
        .call_tool(call("decline", refund("o1"), conversation.clone()))
        .await
        .unwrap();
    let retry = client
        .call_tool(call("decline", refund("o1"), conversation))
        .await
        .unwrap();
    assert_eq!(first.is_error, Some(true));
    assert_eq!(text(&first), "card declined for o1 (attempt 1)");
    assert_eq!(retry.is_error, Some(true));
    assert_eq!(text(&retry), text(&first));
    assert_eq!(meta(&retry, "idem/status"), "replayed");
    assert_eq!(runs.of("decline"), 1);
    client.cancel().await.unwrap();
}

// pins M8, S4: an error result marked retryable is not saved: the next call runs again
#[tokio::test]
async fn a_retryable_error_result_is_not_saved() {
    let runs = Runs::default();
    let client = connect(Shop::new(runs.clone())).await;
    let conversation = json!({"conversationId": "mcp_call_retryable"});
    let first = client
        .call_tool(call("flaky", refund("o1"), conversation.clone()))
        .await
        .unwrap();
    assert_eq!(first.is_error, Some(true));
    assert_eq!(meta(&first, "idem/retryable"), true);
    assert_eq!(meta(&first, "idem/status"), "executed");
    let second = client
        .call_tool(call("flaky", refund("o1"), conversation.clone()))
        .await
        .unwrap();
    assert_eq!(text(&second), "refund #2 on o1");
    assert_eq!(meta(&second, "idem/status"), "executed");
    assert_eq!(meta(&second, "idem/key"), meta(&first, "idem/key"));
    let third = client
        .call_tool(call("flaky", refund("o1"), conversation))
        .await
        .unwrap();
    assert_eq!(meta(&third, "idem/status"), "replayed");
    assert_eq!(runs.of("flaky"), 2);
    client.cancel().await.unwrap();
}

// pins M9: the tool's _meta carries idem's marker next to its own members
#[tokio::test]
async fn tools_list_shows_the_marker() {
    let client = connect(Shop::new(Runs::default())).await;
    let tools = client.list_all_tools().await.unwrap();
    let note = tools.iter().find(|t| t.name == "note_global").unwrap();
    let tool_meta = note.meta.as_ref().unwrap();
    assert_eq!(tool_meta["idem/idempotent"], json!({"scope": "global"}));
    assert_eq!(tool_meta["example.com/owner"], "payments");
    client.cancel().await.unwrap();
}
