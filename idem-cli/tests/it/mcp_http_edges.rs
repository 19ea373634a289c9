//! `idem mcp-proxy --listen` at its edges (contract Y3, Y7, Y8, Y9, Y10), over the fake
//! upstream of [`super::mcp_http`]: bodies it cannot read, the endpoint's path spelled
//! otherwise, redirects, a cancelled call answered with an error, and SIGTERM while a
//! passed-through request is in flight.

use std::process::Command;
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::CONTENT_TYPE;
use http::{Method, Request, StatusCode};
use http_body_util::{BodyExt, Full};
use serde_json::{json, Value};

use super::mcp_http::{
    bounded, in_conversation, refund_args, status, until_forwarded, Fake, Mcp, Proxy, Refund,
};

/// A POST of `body` (any bytes) to `url` in the client's session.
fn raw_post(client: &Mcp, url: &str, body: Vec<u8>) -> Request<Full<Bytes>> {
    let mut request = Request::builder()
        .method(Method::POST)
        .uri(url)
        .header("accept", "application/json, text/event-stream")
        .header(CONTENT_TYPE, "application/json");
    if let Some(session) = &client.session {
        request = request.header("mcp-session-id", session);
    }
    request.body(Full::new(Bytes::from(body))).unwrap()
}

// pins Y8, Y10, Y3: a POST to the endpoint that is no JSON the proxy reads (NaN, a number
// past f64, bytes that are not UTF-8) is answered 400 with -32700, one whose `params` is
// neither an object nor an array 400 with -32600, and a tools/call that names no tool with
// -32602; none of them reaches the upstream
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn bodies_the_proxy_cannot_read_are_refused() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        let call = |amount: &str| {
            format!(
                r#"{{"jsonrpc":"2.0","id":1,"method":"tools/call","params":{{"name":"send_refund","arguments":{{"order_id":"N-1","amount_cents":{amount}}},"_meta":{{"conversationId":"c"}}}}}}"#
            )
            .into_bytes()
        };
        let mut not_utf8 = call("1");
        let at = not_utf8.iter().position(|&b| b == b'N').unwrap();
        not_utf8[at] = 0xff;
        for (body, code) in [
            (call("NaN"), -32700),
            (call("-Infinity"), -32700),
            (call("1e400"), -32700),
            (not_utf8, -32700),
            (
                br#"{"jsonrpc":"2.0","id":2,"method":"ping","params":5}"#.to_vec(),
                -32600,
            ),
        ] {
            let shown = String::from_utf8_lossy(&body).into_owned();
            let reply = client.send(raw_post(&client, &proxy.url(), body)).await;
            assert_eq!(reply.status, StatusCode::BAD_REQUEST, "{shown}: {reply:?}");
            let answer: Value = serde_json::from_slice(&reply.body).unwrap();
            assert_eq!(answer["error"]["code"], code, "{shown}: {answer}");
        }
        for params in [json!(["send_refund"]), json!({"arguments": {}}), json!({"name": 7})] {
            let id = client.id();
            let reply = client
                .post(&json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params}))
                .await;
            assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
            assert_eq!(reply.answer(id)["error"]["code"], -32602, "{reply:?}");
        }
        assert_eq!(fake.refunds(), 0);
        let seen = fake.seen();
        assert!(
            seen.iter()
                .all(|s| s.body["method"] != "tools/call" && s.body["method"] != "ping"),
            "nothing refused went upstream: {seen:?}"
        );
    })
    .await;
}

// pins Y10: the endpoint's path spelled otherwise (percent-encoded, a trailing slash), which
// the upstream's router takes for the endpoint, is the endpoint: its keyed calls are keyed,
// and a retry through another spelling replays
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_endpoint_spelled_otherwise_is_still_keyed() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        let mut results = Vec::new();
        for path in ["/%6Dcp", "/mcp/", "/m%63p"] {
            client.url = format!("http://{}{path}", proxy.addr);
            let result = client
                .call_result(
                    "send_refund",
                    refund_args("P-1", 100),
                    in_conversation("conv-path"),
                )
                .await;
            results.push(status(&result).clone());
        }
        assert_eq!(
            results,
            ["executed", "replayed", "replayed"],
            "{}",
            proxy.log()
        );
        assert_eq!(fake.refunds(), 1);
    })
    .await;
}

// pins Y10: a redirect the upstream answers to its own origin comes back relative, so the
// client follows it through the proxy, never around it
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_redirect_points_back_through_the_proxy() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let client = Mcp::new(proxy.url());
        let request = Request::builder()
            .uri(format!("http://{}/redirect-me", proxy.addr))
            .body(Full::new(Bytes::new()))
            .unwrap();
        let reply = client.send(request).await;
        assert_eq!(reply.status, StatusCode::TEMPORARY_REDIRECT, "{reply:?}");
        assert_eq!(reply.header("location"), Some("/mcp?from=redirect"));
    })
    .await;
}

// pins Y7, Y10, U4: after the client's cancellation, the upstream's -32800 error does not
// say the refund did not happen: under on_cancel = "hold" (the default) the outcome is
// unknown, and the retry is not run again
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_call_answered_with_an_error_is_held() {
    bounded(async {
        let fake = Fake::start().await;
        fake.set_refund(Refund::SseGatedCancelledError);
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        let args = refund_args("X-1", 900);
        let meta = in_conversation("conv-cancelled-error");
        let id = client.id();
        let request = client.post_request(&Mcp::call_message(
            id,
            "send_refund",
            args.clone(),
            meta.clone(),
        ));
        let pending = tokio::spawn(client.http.request(request));
        until_forwarded(&fake, 1).await;
        let cancelled = client
            .post(
                &json!({"jsonrpc": "2.0", "method": "notifications/cancelled",
                          "params": {"requestId": id}}),
            )
            .await;
        assert_eq!(cancelled.status, StatusCode::ACCEPTED, "{cancelled:?}");
        fake.state.gate.notify_one();
        let response = pending.await.unwrap().expect("the proxy answers");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let text = String::from_utf8_lossy(&body);
        assert!(text.contains("outcome_unknown"), "{text}{}", proxy.log());
        fake.set_refund(Refund::Json);
        let retry = client.call_result("send_refund", args, meta).await;
        assert_eq!(retry["_meta"]["idem/error"], "outcome_unknown", "{retry}");
        assert_eq!(fake.refunds(), 1);
    })
    .await;
}

// pins Y9, Y10: SIGTERM while a passed-through request (a read-only tool's call) waits for
// the upstream: the proxy still hands its answer back before it exits 0
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_passed_through_request_finish() {
    bounded(async {
        let fake = Fake::start().await;
        *fake.state.lookup_gated.lock().unwrap() = true;
        let mut proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        let call = tokio::spawn(async move {
            client
                .call("lookup", json!({"order_id": "L-1"}), in_conversation("c"))
                .await
        });
        until_forwarded(&fake, 1).await;
        let pid = proxy.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        tokio::time::sleep(Duration::from_millis(300)).await;
        assert!(
            proxy.child.try_wait().unwrap().is_none(),
            "the proxy waits for the request in flight{}",
            proxy.log()
        );
        fake.state.gate.notify_one();
        let (id, reply) = call.await.unwrap();
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}{}", proxy.log());
        let answer = reply.answer(id);
        assert!(
            answer["result"]["content"][0]["text"]
                .as_str()
                .is_some_and(|t| t.contains("looked up")),
            "{answer}"
        );
        let deadline = Instant::now() + Duration::from_secs(10);
        let code = loop {
            if let Some(exit) = proxy.child.try_wait().unwrap() {
                break exit.code();
            }
            assert!(Instant::now() < deadline, "still running{}", proxy.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(code, Some(0), "{}", proxy.log());
    })
    .await;
}
