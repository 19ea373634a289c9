//! `idem mcp-proxy --listen --upstream` (contract Y10) in front of a fake MCP server that
//! speaks streamable HTTP, written here with hyper: POST /mcp with JSON-RPC, sessions in
//! `Mcp-Session-Id`, answers as `application/json` or as `text/event-stream` (progress
//! first), an expired session's 404, and a connection dropped mid-stream. The client is a
//! plain HTTP client speaking MCP as a client would. Needs neither Node nor Python.

use std::collections::HashSet;
use std::convert::Infallible;
use std::net::{SocketAddr, TcpListener as StdListener, TcpStream};
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use bytes::Bytes;
use http::header::{HeaderMap, HeaderValue, CONTENT_TYPE};
use http::{Method, Request, Response, StatusCode};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use serde_json::{json, Value};
use tokio::sync::{mpsc, Notify};
use tokio::time::timeout;

type BoxError = Box<dyn std::error::Error + Send + Sync>;
type Body = UnsyncBoxBody<Bytes, BoxError>;

/// A whole test's bound (each takes well under a second when it passes).
const BOUND: Duration = Duration::from_secs(20);
/// How long the proxy may take to accept connections.
const START: Duration = Duration::from_secs(5);
const ACCEPT: &str = "application/json, text/event-stream";
const SESSION: &str = "mcp-session-id";

// ---------------------------------------------------------------------------------------
// The fake upstream.

/// How the fake answers the next `tools/call send_refund`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum Refund {
    /// One `application/json` answer.
    Json,
    /// `text/event-stream`: the progress event (if the request asked for progress), then,
    /// once the test opens the gate, the result event.
    SseGated,
    /// 404 as for an expired session, once (then `Json`); the refund does not happen.
    ExpireOnce,
    /// `text/event-stream`: the refund happens, the progress event is sent, and the
    /// connection is dropped before the result (once, then `Json`).
    DropAfterProgress,
    /// A JSON-RPC error, once (then `Json`); the refund does not happen.
    RpcErrorOnce,
    /// `text/event-stream`: `notifications/tools/list_changed`, then the result.
    SseListChanged,
    /// `text/event-stream`: the refund happens, then, once the test opens the gate, MCP's
    /// -32800 "request cancelled" error comes instead of the result.
    SseGatedCancelledError,
}

#[derive(Debug, Clone)]
pub(crate) struct Seen {
    pub(crate) method: Method,
    pub(crate) path_and_query: String,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Value,
}

pub(crate) struct FakeState {
    pub(crate) refunds: AtomicUsize,
    pub(crate) lookups: AtomicUsize,
    pub(crate) next_session: AtomicUsize,
    pub(crate) sessions: Mutex<HashSet<String>>,
    pub(crate) refund: Mutex<Refund>,
    /// `initialize` answered as an event stream.
    pub(crate) init_as_sse: Mutex<bool>,
    /// `lookup` listed with `readOnlyHint: true`.
    pub(crate) lookup_read_only: Mutex<bool>,
    /// The GET stream's `list_changed` event written in two frames 50 ms apart.
    pub(crate) split_list_changed: Mutex<bool>,
    /// `lookup` answers once the test opens the gate.
    pub(crate) lookup_gated: Mutex<bool>,
    pub(crate) tool_lists: AtomicUsize,
    pub(crate) gate: Notify,
    pub(crate) seen: Mutex<Vec<Seen>>,
}

pub(crate) struct Fake {
    pub(crate) addr: SocketAddr,
    pub(crate) state: Arc<FakeState>,
    pub(crate) task: tokio::task::JoinHandle<()>,
}

impl Drop for Fake {
    fn drop(&mut self) {
        self.task.abort();
    }
}

/// The fake's `initialize` result.
fn init_result() -> Value {
    json!({
        "protocolVersion": "2025-06-18",
        "capabilities": {
            "tools": { "listChanged": true },
            "logging": {},
            "experimental": { "fake/own": { "kept": true } },
        },
        "serverInfo": { "name": "fake-upstream", "version": "1.2.3" },
        "instructions": "a fake MCP server for idem's HTTP proxy tests",
    })
}

fn tools(lookup_read_only: bool) -> Value {
    let lookup_annotations = if lookup_read_only {
        json!({ "readOnlyHint": true })
    } else {
        json!({ "readOnlyHint": false })
    };
    json!([
        {
            "name": "send_refund",
            "description": "Refunds an order",
            "inputSchema": {
                "type": "object",
                "properties": {
                    "order_id": { "type": "string" },
                    "amount_cents": { "type": "integer" },
                },
                "required": ["order_id", "amount_cents"],
            },
        },
        {
            "name": "lookup",
            "description": "Looks an order up",
            "inputSchema": {
                "type": "object",
                "properties": { "order_id": { "type": "string" } },
            },
            "annotations": lookup_annotations,
        },
    ])
}

/// The fake's progress notification for `token`.
fn progress(token: &Value) -> Value {
    json!({
        "jsonrpc": "2.0",
        "method": "notifications/progress",
        "params": { "progressToken": token, "progress": 1, "total": 2, "message": "half way" },
    })
}

/// The fake's `send_refund` result (`run`: how many refunds it has made, this one included).
pub(crate) fn refund_result(args: &Value, run: usize) -> Value {
    json!({
        "content": [{
            "type": "text",
            "text": format!("refunded {} cents on {} (run {run})", args["amount_cents"], args["order_id"]),
        }],
        "structuredContent": { "order_id": args["order_id"], "run": run },
        "_meta": { "fake/own": "kept" },
    })
}

pub(crate) fn sse_event(id: &str, message: &Value) -> Bytes {
    Bytes::from(format!("event: message\nid: {id}\ndata: {message}\n\n"))
}

pub(crate) fn full(bytes: impl Into<Bytes>) -> Body {
    Full::new(bytes.into())
        .map_err(|never| match never {})
        .boxed_unsync()
}

pub(crate) fn json_answer(status: StatusCode, message: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(CONTENT_TYPE, "application/json")
        .body(full(message.to_string()))
        .unwrap()
}

pub(crate) fn rpc_result(id: &Value, result: Value) -> Value {
    json!({ "jsonrpc": "2.0", "id": id, "result": result })
}

/// An event stream whose frames the returned sender writes; an `Err` aborts the
/// connection.
pub(crate) fn sse_stream() -> (
    mpsc::UnboundedSender<Result<Frame<Bytes>, BoxError>>,
    Response<Body>,
) {
    let (sender, mut receiver) = mpsc::unbounded_channel::<Result<Frame<Bytes>, BoxError>>();
    let stream = futures_util::stream::poll_fn(move |cx| receiver.poll_recv(cx));
    let response = Response::builder()
        .status(StatusCode::OK)
        .header(CONTENT_TYPE, "text/event-stream")
        .header("cache-control", "no-cache")
        .body(BodyExt::boxed_unsync(StreamBody::new(stream)))
        .unwrap();
    (sender, response)
}

impl Fake {
    pub(crate) async fn start() -> Fake {
        let listener = tokio::net::TcpListener::bind("127.0.0.1:0").await.unwrap();
        let addr = listener.local_addr().unwrap();
        let state = Arc::new(FakeState {
            refunds: AtomicUsize::new(0),
            lookups: AtomicUsize::new(0),
            next_session: AtomicUsize::new(0),
            sessions: Mutex::default(),
            refund: Mutex::new(Refund::Json),
            init_as_sse: Mutex::new(false),
            lookup_read_only: Mutex::new(true),
            split_list_changed: Mutex::new(false),
            lookup_gated: Mutex::new(false),
            tool_lists: AtomicUsize::new(0),
            gate: Notify::new(),
            seen: Mutex::default(),
        });
        let shared = Arc::clone(&state);
        let task = tokio::spawn(async move {
            loop {
                let Ok((stream, _)) = listener.accept().await else {
                    continue;
                };
                let state = Arc::clone(&shared);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let state = Arc::clone(&state);
                        async move { Ok::<_, Infallible>(handle(state, request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
        });
        Fake { addr, state, task }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    pub(crate) fn set_refund(&self, mode: Refund) {
        *self.state.refund.lock().unwrap() = mode;
    }

    pub(crate) fn refunds(&self) -> usize {
        self.state.refunds.load(Ordering::SeqCst)
    }

    pub(crate) fn lookups(&self) -> usize {
        self.state.lookups.load(Ordering::SeqCst)
    }

    pub(crate) fn seen(&self) -> Vec<Seen> {
        self.state.seen.lock().unwrap().clone()
    }

    /// The `tools/call` requests it received.
    pub(crate) fn tool_calls(&self) -> Vec<Seen> {
        self.seen()
            .into_iter()
            .filter(|s| s.body["method"] == "tools/call")
            .collect()
    }
}

async fn handle(state: Arc<FakeState>, request: Request<Incoming>) -> Response<Body> {
    let (parts, body) = request.into_parts();
    let bytes = body
        .collect()
        .await
        .map(|c| c.to_bytes())
        .unwrap_or_default();
    let message: Value = serde_json::from_slice(&bytes).unwrap_or(Value::Null);
    let path_and_query = parts
        .uri
        .path_and_query()
        .map_or_else(String::new, ToString::to_string);
    state.seen.lock().unwrap().push(Seen {
        method: parts.method.clone(),
        path_and_query: path_and_query.clone(),
        headers: parts.headers.clone(),
        body: message.clone(),
    });

    // Its router reads the path as many do: percent-decoded, a trailing slash dropped.
    let path = parts.uri.path().replace("%6D", "m").replace("%6d", "m");
    if path == "/redirect-me" {
        // A redirect to its own origin, absolute, as frameworks write them.
        let host = parts
            .headers
            .get("host")
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        return Response::builder()
            .status(StatusCode::TEMPORARY_REDIRECT)
            .header("location", format!("http://{host}/mcp?from=redirect"))
            .body(full(""))
            .unwrap();
    }
    if path.trim_end_matches('/') != "/mcp" {
        // Any other path: an echo of what arrived, with a status and a header of its own.
        let header = |name: &str| {
            parts
                .headers
                .get(name)
                .and_then(|v| v.to_str().ok())
                .map(str::to_owned)
        };
        let echo = json!({
            "method": parts.method.as_str(),
            "path_and_query": path_and_query,
            "authorization": header("authorization"),
            "x-custom": header("x-custom"),
            "body": String::from_utf8_lossy(&bytes),
        });
        return Response::builder()
            .status(StatusCode::NON_AUTHORITATIVE_INFORMATION)
            .header(CONTENT_TYPE, "application/json")
            .header("x-fake-echo", "yes")
            .body(full(echo.to_string()))
            .unwrap();
    }
    if parts.method == Method::GET
        && state
            .sessions
            .lock()
            .unwrap()
            .iter()
            .any(|s| parts.headers.get(SESSION).and_then(|v| v.to_str().ok()) == Some(s.as_str()))
    {
        // The session's own stream: `notifications/tools/list_changed`, then its end.
        let (sender, response) = sse_stream();
        let split = *state.split_list_changed.lock().unwrap();
        tokio::spawn(async move {
            let event = sse_event("get-1", &list_changed());
            if split {
                // Cut in the middle of the method's name.
                let cut = String::from_utf8_lossy(&event)
                    .find("tools/list_changed")
                    .unwrap()
                    + 6;
                let (a, b) = event.split_at(cut);
                let _ = sender.send(Ok(Frame::data(Bytes::copy_from_slice(a))));
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = sender.send(Ok(Frame::data(Bytes::copy_from_slice(b))));
            } else {
                let _ = sender.send(Ok(Frame::data(event)));
            }
        });
        return response;
    }
    if parts.method != Method::POST {
        return Response::builder()
            .status(StatusCode::METHOD_NOT_ALLOWED)
            .body(full(""))
            .unwrap();
    }
    let id = message.get("id").cloned();
    let method = message["method"].as_str().unwrap_or("").to_owned();

    if method == "initialize" {
        let id = id.unwrap_or(Value::Null);
        let n = state.next_session.fetch_add(1, Ordering::SeqCst) + 1;
        let session = format!("fake-session-{n}");
        state.sessions.lock().unwrap().insert(session.clone());
        let answer = rpc_result(&id, init_result());
        let mut response = if *state.init_as_sse.lock().unwrap() {
            Response::builder()
                .status(StatusCode::OK)
                .header(CONTENT_TYPE, "text/event-stream")
                .body(full(sse_event("init-1", &answer)))
                .unwrap()
        } else {
            json_answer(StatusCode::OK, &answer)
        };
        response
            .headers_mut()
            .insert(SESSION, HeaderValue::from_str(&session).unwrap());
        return response;
    }

    // Every other message needs a session the fake issued.
    let session = parts
        .headers
        .get(SESSION)
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned();
    if session.is_empty() {
        return json_answer(
            StatusCode::BAD_REQUEST,
            &json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32000, "message": "Bad Request: no session"}}),
        );
    }
    if !state.sessions.lock().unwrap().contains(&session) {
        return json_answer(
            StatusCode::NOT_FOUND,
            &json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32001, "message": "Session not found"}}),
        );
    }
    if let Some(batch) = message.as_array() {
        // A JSON-RPC batch (MCP 2025-03-26): each `send_refund` in it refunds.
        let answers: Vec<Value> = batch
            .iter()
            .filter(|m| m.get("id").is_some())
            .map(|m| {
                if m["method"] == "tools/call" && m["params"]["name"] == "send_refund" {
                    let run = state.refunds.fetch_add(1, Ordering::SeqCst) + 1;
                    rpc_result(&m["id"], refund_result(&m["params"]["arguments"], run))
                } else {
                    json!({"jsonrpc": "2.0", "id": m["id"], "error": {"code": -32601, "message": "Method not found"}})
                }
            })
            .collect();
        return json_answer(StatusCode::OK, &Value::Array(answers));
    }
    let Some(id) = id else {
        // A notification.
        return Response::builder()
            .status(StatusCode::ACCEPTED)
            .body(full(""))
            .unwrap();
    };
    match method.as_str() {
        "tools/list" => {
            state.tool_lists.fetch_add(1, Ordering::SeqCst);
            let read_only = *state.lookup_read_only.lock().unwrap();
            json_answer(
                StatusCode::OK,
                &rpc_result(&id, json!({ "tools": tools(read_only) })),
            )
        }
        "ping" => json_answer(StatusCode::OK, &rpc_result(&id, json!({}))),
        "tools/call" => {
            let name = message["params"]["name"].as_str().unwrap_or("");
            let args = message["params"]["arguments"].clone();
            match name {
                "lookup" => {
                    let gated = *state.lookup_gated.lock().unwrap();
                    if gated {
                        state.gate.notified().await;
                    }
                    let n = state.lookups.fetch_add(1, Ordering::SeqCst) + 1;
                    let result = json!({
                        "content": [{ "type": "text", "text": format!("order {} looked up (lookup {n})", args["order_id"]) }],
                    });
                    let mut response = json_answer(StatusCode::OK, &rpc_result(&id, result));
                    response
                        .headers_mut()
                        .insert("x-fake-lookup", HeaderValue::from(n));
                    response
                }
                "send_refund" => refund(&state, &id, &message, &args),
                _ => json_answer(
                    StatusCode::OK,
                    &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32602, "message": format!("Tool {name} not found")}}),
                ),
            }
        }
        _ => json_answer(
            StatusCode::OK,
            &json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32601, "message": "Method not found"}}),
        ),
    }
}

fn list_changed() -> Value {
    json!({ "jsonrpc": "2.0", "method": "notifications/tools/list_changed" })
}

/// The fake's JSON-RPC error answer to `send_refund` in `RpcErrorOnce` mode.
fn rpc_busy(id: &Value) -> Value {
    json!({"jsonrpc": "2.0", "id": id, "error": {"code": -32000, "message": "refunds are paused"}})
}

/// The 404 body of the fake's expired session.
fn expired_body() -> Value {
    json!({"jsonrpc": "2.0", "id": null, "error": {"code": -32001, "message": "Session expired"}})
}

fn refund(state: &Arc<FakeState>, id: &Value, message: &Value, args: &Value) -> Response<Body> {
    let mode = {
        let mut mode = state.refund.lock().unwrap();
        let now = *mode;
        if matches!(
            now,
            Refund::ExpireOnce | Refund::DropAfterProgress | Refund::RpcErrorOnce
        ) {
            *mode = Refund::Json;
        }
        now
    };
    if mode == Refund::ExpireOnce {
        let mut response = json_answer(StatusCode::NOT_FOUND, &expired_body());
        response
            .headers_mut()
            .insert("x-fake-expired", HeaderValue::from_static("yes"));
        return response;
    }
    if mode == Refund::RpcErrorOnce {
        return json_answer(StatusCode::OK, &rpc_busy(id));
    }
    let run = state.refunds.fetch_add(1, Ordering::SeqCst) + 1;
    let answer = rpc_result(id, refund_result(args, run));
    let token = message["params"]["_meta"]["progressToken"].clone();
    match mode {
        Refund::Json => json_answer(StatusCode::OK, &answer),
        Refund::SseGated => {
            let (sender, response) = sse_stream();
            let state = Arc::clone(state);
            tokio::spawn(async move {
                if !token.is_null() {
                    let _ = sender.send(Ok(Frame::data(sse_event("ev-1", &progress(&token)))));
                }
                state.gate.notified().await;
                let _ = sender.send(Ok(Frame::data(sse_event("ev-2", &answer))));
            });
            response
        }
        Refund::DropAfterProgress => {
            let (sender, response) = sse_stream();
            tokio::spawn(async move {
                let _ = sender.send(Ok(Frame::data(sse_event("ev-1", &progress(&token)))));
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = sender.send(Err("the fake drops the connection".into()));
            });
            response
        }
        Refund::SseListChanged => {
            let mut body = sse_event("ev-1", &list_changed()).to_vec();
            body.extend_from_slice(&sse_event("ev-2", &answer));
            Response::builder()
                .status(StatusCode::OK)
                .header(CONTENT_TYPE, "text/event-stream")
                .body(full(body))
                .unwrap()
        }
        Refund::SseGatedCancelledError => {
            let (sender, response) = sse_stream();
            let state = Arc::clone(state);
            let error = json!({"jsonrpc": "2.0", "id": id,
                "error": {"code": -32800, "message": "request cancelled"}});
            tokio::spawn(async move {
                state.gate.notified().await;
                let _ = sender.send(Ok(Frame::data(sse_event("ev-2", &error))));
            });
            response
        }
        Refund::ExpireOnce | Refund::RpcErrorOnce => unreachable!(),
    }
}

// ---------------------------------------------------------------------------------------
// The proxy's process.

/// `idem mcp-proxy --listen … --upstream …`, killed when dropped (also used by
/// `mcp_http_node`).
pub(crate) struct Proxy {
    pub(crate) child: Child,
    pub(crate) addr: SocketAddr,
    stderr: PathBuf,
    _dir: tempfile::TempDir,
}

impl Drop for Proxy {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

pub(crate) fn free_port() -> u16 {
    StdListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap()
        .port()
}

impl Proxy {
    /// `idem mcp-proxy --store sqlite:DIR/p.db [--config DIR/idem.toml] --listen … --upstream
    /// URL`, once it accepts connections.
    pub(crate) fn start(upstream: &str, config: Option<&str>) -> Proxy {
        let mut last = String::new();
        // A port found free may be taken before the proxy binds it: try another.
        for _ in 0..3 {
            match Proxy::try_start(upstream, config) {
                Ok(proxy) => return proxy,
                Err(why) => last = why,
            }
        }
        panic!("the proxy did not start: {last}");
    }

    fn try_start(upstream: &str, config: Option<&str>) -> Result<Proxy, String> {
        let dir = tempfile::tempdir().unwrap();
        let stderr = dir.path().join("stderr");
        let addr: SocketAddr = format!("127.0.0.1:{}", free_port()).parse().unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_idem"));
        command
            .arg("mcp-proxy")
            .arg("--store")
            .arg(format!("sqlite:{}", dir.path().join("p.db").display()));
        if let Some(config) = config {
            let path = dir.path().join("idem.toml");
            std::fs::write(&path, config).unwrap();
            command.arg("--config").arg(path);
        }
        let child = command
            .arg("--listen")
            .arg(addr.to_string())
            .arg("--upstream")
            .arg(upstream)
            .env_remove("IDEM_STORE")
            .env_remove("IDEM_NAMESPACE")
            .env("IDEM_LOG", "info")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&stderr).unwrap())
            .spawn()
            .map_err(|e| format!("cannot run idem: {e}"))?;
        let mut proxy = Proxy {
            child,
            addr,
            stderr,
            _dir: dir,
        };
        let deadline = Instant::now() + START;
        loop {
            if TcpStream::connect_timeout(&addr, Duration::from_millis(200)).is_ok() {
                return Ok(proxy);
            }
            if let Ok(Some(status)) = proxy.child.try_wait() {
                return Err(format!("it exited ({status}){}", proxy.log()));
            }
            if Instant::now() > deadline {
                return Err(format!("it did not listen within {START:?}{}", proxy.log()));
            }
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    pub(crate) fn url(&self) -> String {
        format!("http://{}/mcp", self.addr)
    }

    /// Its stderr so far, for failure messages.
    pub(crate) fn log(&self) -> String {
        format!(
            "\n--- the proxy's stderr:\n{}",
            std::fs::read_to_string(&self.stderr).unwrap_or_default()
        )
    }
}

// ---------------------------------------------------------------------------------------
// The client.

#[derive(Debug)]
struct SseEvent {
    event: Option<String>,
    id: Option<String>,
    data: String,
}

/// Complete events in `text` (each ends with a blank line); the rest is left in `text`.
fn take_events(text: &mut String) -> Vec<SseEvent> {
    let normalized = text.replace("\r\n", "\n");
    let mut events = Vec::new();
    let mut rest = normalized.as_str();
    while let Some(end) = rest.find("\n\n") {
        let block = &rest[..end];
        rest = &rest[end + 2..];
        let mut event = SseEvent {
            event: None,
            id: None,
            data: String::new(),
        };
        let mut data = Vec::new();
        for line in block.lines() {
            let (field, value) = line.split_once(':').unwrap_or((line, ""));
            let value = value.strip_prefix(' ').unwrap_or(value);
            match field {
                "event" => event.event = Some(value.to_owned()),
                "id" => event.id = Some(value.to_owned()),
                "data" => data.push(value.to_owned()),
                _ => {}
            }
        }
        if data.is_empty() && event.event.is_none() && event.id.is_none() {
            continue;
        }
        event.data = data.join("\n");
        events.push(event);
    }
    *text = rest.to_owned();
    events
}

/// One HTTP answer, read whole.
#[derive(Debug)]
pub(crate) struct Reply {
    pub(crate) status: StatusCode,
    pub(crate) headers: HeaderMap,
    pub(crate) body: Bytes,
}

impl Reply {
    pub(crate) fn content_type(&self) -> &str {
        self.headers
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
    }

    pub(crate) fn is_sse(&self) -> bool {
        self.content_type().starts_with("text/event-stream")
    }

    pub(crate) fn text(&self) -> String {
        String::from_utf8_lossy(&self.body).into_owned()
    }

    /// The JSON-RPC messages it carries: the body, or each event's data.
    pub(crate) fn messages(&self) -> Vec<Value> {
        if self.is_sse() {
            let mut text = self.text();
            take_events(&mut text)
                .into_iter()
                .filter(|e| !e.data.is_empty())
                .map(|e| {
                    serde_json::from_str(&e.data)
                        .unwrap_or_else(|err| panic!("event data {:?} is not JSON: {err}", e.data))
                })
                .collect()
        } else {
            vec![serde_json::from_slice(&self.body)
                .unwrap_or_else(|e| panic!("the body is not JSON ({e}): {self:?}"))]
        }
    }

    /// The response to request `id` among its messages.
    pub(crate) fn answer(&self, id: u64) -> Value {
        self.messages()
            .into_iter()
            .find(|m| m.get("method").is_none() && m["id"] == id)
            .unwrap_or_else(|| panic!("no answer to request {id} in {self:?}"))
    }

    pub(crate) fn header(&self, name: &str) -> Option<&str> {
        self.headers.get(name).and_then(|v| v.to_str().ok())
    }
}

pub(crate) struct Mcp {
    pub(crate) http: Client<HttpConnector, Full<Bytes>>,
    pub(crate) url: String,
    pub(crate) session: Option<String>,
    pub(crate) next_id: u64,
}

impl Mcp {
    pub(crate) fn new(url: String) -> Mcp {
        Mcp {
            http: Client::builder(TokioExecutor::new()).build_http(),
            url,
            session: None,
            next_id: 0,
        }
    }

    pub(crate) fn post_request(&self, message: &Value) -> Request<Full<Bytes>> {
        let mut request = Request::builder()
            .method(Method::POST)
            .uri(&self.url)
            .header("accept", ACCEPT)
            .header(CONTENT_TYPE, "application/json")
            .header("mcp-protocol-version", "2025-06-18");
        if let Some(session) = &self.session {
            request = request.header(SESSION, session);
        }
        request
            .body(Full::new(Bytes::from(message.to_string())))
            .unwrap()
    }

    pub(crate) async fn send(&self, request: Request<Full<Bytes>>) -> Reply {
        let response = self.http.request(request).await.expect("the proxy answers");
        let (head, body) = response.into_parts();
        let body = body
            .collect()
            .await
            .expect("the proxy's answer is read whole")
            .to_bytes();
        Reply {
            status: head.status,
            headers: head.headers,
            body,
        }
    }

    pub(crate) async fn post(&self, message: &Value) -> Reply {
        self.send(self.post_request(message)).await
    }

    pub(crate) fn id(&mut self) -> u64 {
        self.next_id += 1;
        self.next_id
    }

    /// `initialize` (its session kept) and `notifications/initialized`.
    pub(crate) async fn initialize(&mut self) -> (u64, Reply) {
        let id = self.id();
        let reply = self
            .post(&json!({
                "jsonrpc": "2.0",
                "id": id,
                "method": "initialize",
                "params": {
                    "protocolVersion": "2025-06-18",
                    "capabilities": {},
                    "clientInfo": { "name": "idem-http-test", "version": "0" },
                },
            }))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        self.session = reply.header(SESSION).map(str::to_owned);
        let initialized = self
            .post(&json!({"jsonrpc": "2.0", "method": "notifications/initialized"}))
            .await;
        assert_eq!(initialized.status, StatusCode::ACCEPTED, "{initialized:?}");
        (id, reply)
    }

    pub(crate) fn call_message(
        id: u64,
        tool: &str,
        arguments: Value,
        meta: Option<Value>,
    ) -> Value {
        let mut params = json!({ "name": tool, "arguments": arguments });
        if let Some(meta) = meta {
            params["_meta"] = meta;
        }
        json!({ "jsonrpc": "2.0", "id": id, "method": "tools/call", "params": params })
    }

    /// `tools/call`: the HTTP answer and the request's id.
    pub(crate) async fn call(
        &mut self,
        tool: &str,
        arguments: Value,
        meta: Option<Value>,
    ) -> (u64, Reply) {
        let id = self.id();
        let reply = self
            .post(&Mcp::call_message(id, tool, arguments, meta))
            .await;
        (id, reply)
    }

    /// `tools/call` answered 200: its JSON-RPC result.
    pub(crate) async fn call_result(
        &mut self,
        tool: &str,
        arguments: Value,
        meta: Option<Value>,
    ) -> Value {
        let (id, reply) = self.call(tool, arguments, meta).await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        let answer = reply.answer(id);
        answer
            .get("result")
            .cloned()
            .unwrap_or_else(|| panic!("not a result: {answer}"))
    }
}

pub(crate) fn status(result: &Value) -> &Value {
    &result["_meta"]["idem/status"]
}

pub(crate) fn key(result: &Value) -> &str {
    let key = result["_meta"]["idem/key"]
        .as_str()
        .unwrap_or_else(|| panic!("no idem/key: {result}"));
    assert!(
        key.len() == 64 && key.chars().all(|c| c.is_ascii_hexdigit()),
        "{key}"
    );
    key
}

/// `result` without idem's markers (M5).
pub(crate) fn without_markers(result: &Value) -> Value {
    let mut result = result.clone();
    if let Some(meta) = result["_meta"].as_object_mut() {
        meta.remove("idem/status");
        meta.remove("idem/key");
    }
    result
}

/// Runs a test body within [`BOUND`].
pub(crate) async fn bounded<T>(test: impl std::future::Future<Output = T>) -> T {
    timeout(BOUND, test)
        .await
        .unwrap_or_else(|_| panic!("the test did not finish within {BOUND:?}"))
}

pub(crate) fn refund_args(order: &str, cents: u64) -> Value {
    json!({ "order_id": order, "amount_cents": cents })
}

pub(crate) fn in_conversation(conversation: &str) -> Option<Value> {
    Some(json!({ "conversationId": conversation }))
}

// ---------------------------------------------------------------------------------------
// The tests.

// pins Y1, Y10: `initialize` through the proxy answers the upstream's result plus
// `capabilities.experimental.idempotency` (nothing else changed, the upstream's own
// experimental members kept), as JSON and as an event stream, and the upstream's
// `Mcp-Session-Id` header reaches the client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn initialize_gains_the_capability_and_keeps_the_session() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        for as_sse in [false, true] {
            *fake.state.init_as_sse.lock().unwrap() = as_sse;
            let mut client = Mcp::new(proxy.url());
            let (id, reply) = client.initialize().await;
            assert_eq!(reply.is_sse(), as_sse, "{reply:?}{}", proxy.log());
            let issued = format!("fake-session-{}", if as_sse { 2 } else { 1 });
            assert_eq!(
                reply.header(SESSION),
                Some(issued.as_str()),
                "the upstream's session header reaches the client: {reply:?}"
            );
            let answer = reply.answer(id);
            let mut result = answer["result"].clone();
            let idempotency = result["capabilities"]["experimental"]
                .as_object_mut()
                .and_then(|e| e.remove("idempotency"))
                .unwrap_or_else(|| panic!("no experimental.idempotency: {answer}"));
            assert_eq!(idempotency["conversationIdMeta"], "conversationId");
            assert_eq!(idempotency["resultStatusMeta"], "idem/status");
            assert_eq!(
                result,
                init_result(),
                "the rest of the result is the upstream's"
            );
            assert_eq!(answer["jsonrpc"], "2.0");
            // The session works through the proxy.
            let ping_id = client.id();
            let ping = client
                .post(&json!({"jsonrpc": "2.0", "id": ping_id, "method": "ping"}))
                .await;
            assert_eq!(ping.status, StatusCode::OK, "{ping:?}");
            assert_eq!(ping.answer(ping_id)["result"], json!({}));
        }
    })
    .await;
}

// pins Y2, Y3, Y10, M5, S12: a keyed call answered as JSON runs once: executed, then the
// same call in the same conversation replayed (the upstream not called again, the result
// the same but for the status), and other arguments executed under another key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_call_answered_as_json_runs_once() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;

        let (id, reply) = client
            .call(
                "send_refund",
                refund_args("A-1", 500),
                in_conversation("conv-json"),
            )
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}{}", proxy.log());
        assert!(!reply.is_sse(), "{reply:?}");
        let first = reply.answer(id)["result"].clone();
        assert_eq!(status(&first), "executed", "{first}");
        assert_eq!(first["_meta"]["fake/own"], "kept", "{first}");
        assert_eq!(
            without_markers(&first),
            refund_result(&refund_args("A-1", 500), 1)
        );
        assert_eq!(fake.refunds(), 1);
        let forwarded = fake.tool_calls();
        assert_eq!(forwarded.len(), 1);
        assert_eq!(
            forwarded[0]
                .headers
                .get(SESSION)
                .and_then(|v| v.to_str().ok()),
            client.session.as_deref(),
            "the client's session header goes upstream"
        );

        let again = client
            .call_result(
                "send_refund",
                refund_args("A-1", 500),
                in_conversation("conv-json"),
            )
            .await;
        assert_eq!(status(&again), "replayed", "{again}");
        assert_eq!(key(&again), key(&first));
        assert_eq!(without_markers(&again), without_markers(&first));
        assert_eq!(fake.refunds(), 1, "the replay did not call the upstream");

        let other = client
            .call_result(
                "send_refund",
                refund_args("A-2", 500),
                in_conversation("conv-json"),
            )
            .await;
        assert_eq!(status(&other), "executed", "{other}");
        assert_ne!(key(&other), key(&first));
        assert_eq!(fake.refunds(), 2);
    })
    .await;
}

// pins Y3, Y10, Y1: a keyed call the upstream answers as an event stream: its progress
// event reaches the client while the upstream has not answered yet (relayed as it comes),
// then the result with idem's markers, as SSE; the replay is one JSON answer without
// progress.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_call_answered_as_a_stream_relays_progress_then_the_result() {
    bounded(async {
        let fake = Fake::start().await;
        fake.set_refund(Refund::SseGated);
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        let meta = json!({ "conversationId": "conv-sse", "progressToken": "tok-1" });
        let args = refund_args("S-1", 700);

        let id = client.id();
        let request = client.post_request(&Mcp::call_message(
            id,
            "send_refund",
            args.clone(),
            Some(meta.clone()),
        ));
        let response = client
            .http
            .request(request)
            .await
            .expect("the proxy answers");
        assert_eq!(response.status(), StatusCode::OK, "{}", proxy.log());
        let content_type = response
            .headers()
            .get(CONTENT_TYPE)
            .and_then(|v| v.to_str().ok())
            .unwrap_or("")
            .to_owned();
        assert!(
            content_type.starts_with("text/event-stream"),
            "{content_type}{}",
            proxy.log()
        );
        let mut body = response.into_body();
        let mut buffer = String::new();
        let mut events = Vec::new();
        // The progress event, while the upstream still holds its result back.
        while events.is_empty() {
            let frame = timeout(Duration::from_secs(5), body.frame())
                .await
                .unwrap_or_else(|_| panic!("no progress event before the result{}", proxy.log()))
                .expect("the stream goes on")
                .expect("the stream is not broken");
            if let Ok(data) = frame.into_data() {
                buffer.push_str(&String::from_utf8_lossy(&data));
                events.extend(take_events(&mut buffer));
            }
        }
        assert_eq!(fake.refunds(), 1);
        let message: Value = serde_json::from_str(&events[0].data).unwrap();
        assert_eq!(message, progress(&json!("tok-1")), "{events:?}");
        // Now the result.
        fake.state.gate.notify_one();
        while let Some(frame) = body.frame().await {
            if let Ok(data) = frame.expect("the stream ends cleanly").into_data() {
                buffer.push_str(&String::from_utf8_lossy(&data));
                events.extend(take_events(&mut buffer));
            }
        }
        assert_eq!(events.len(), 2, "progress and result: {events:?}");
        let answer: Value = serde_json::from_str(&events[1].data).unwrap();
        assert_eq!(answer["id"], id, "{answer}");
        let first = answer["result"].clone();
        assert_eq!(status(&first), "executed", "{first}");
        assert_eq!(without_markers(&first), refund_result(&args, 1));

        let (id, replay) = client.call("send_refund", args.clone(), Some(meta)).await;
        assert_eq!(replay.status, StatusCode::OK);
        assert!(
            !replay.is_sse(),
            "the replay is one JSON answer: {replay:?}"
        );
        assert_eq!(replay.messages().len(), 1, "{replay:?}");
        let again = replay.answer(id)["result"].clone();
        assert_eq!(status(&again), "replayed", "{again}");
        assert_eq!(without_markers(&again), without_markers(&first));
        assert_eq!(key(&again), key(&first));
        assert_eq!(fake.refunds(), 1);
    })
    .await;
}

// pins Y2, Y1: a tool annotated `readOnlyHint: true` passes through unkeyed: the upstream's
// answer unchanged (no idem markers, its own headers), and the upstream called every time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_read_only_tool_passes_through_unkeyed() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        for n in 1..=2usize {
            let (id, reply) = client
                .call("lookup", json!({ "order_id": "L-1" }), in_conversation("conv-ro"))
                .await;
            assert_eq!(reply.status, StatusCode::OK, "{reply:?}{}", proxy.log());
            assert_eq!(reply.header("x-fake-lookup"), Some(n.to_string().as_str()), "{reply:?}");
            let expected = rpc_result(
                &json!(id),
                json!({ "content": [{ "type": "text", "text": format!("order \"L-1\" looked up (lookup {n})") }] }),
            );
            assert_eq!(reply.answer(id), expected, "passed through unchanged");
            assert_eq!(fake.lookups(), n);
        }
        assert_eq!(fake.refunds(), 0);
    })
    .await;
}

// pins Y3, M3, M6: over HTTP too, a keyed call that names no conversation (and no
// idempotency key) is a `missing_scope` tool error naming the member to send, and the
// upstream is not called, even though the request has a session.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_call_without_conversation_is_refused() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        assert!(client.session.is_some());
        for meta in [None, Some(json!({ "progressToken": "tok" }))] {
            let result = client
                .call_result("send_refund", refund_args("M-1", 100), meta)
                .await;
            assert_eq!(result["isError"], true, "{result}{}", proxy.log());
            assert_eq!(result["_meta"]["idem/error"], "missing_scope", "{result}");
            assert!(
                result["content"][0]["text"]
                    .as_str()
                    .is_some_and(|t| t.contains("conversationId")),
                "{result}"
            );
        }
        assert_eq!(fake.refunds(), 0);
        assert!(fake.tool_calls().is_empty(), "{:?}", fake.tool_calls());
    })
    .await;
}

// pins Y10, Y4, M3: with `session_as_conversation = true`, a call that names no
// conversation is keyed by its session: the same call twice in one session replays, in
// another session it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_session_is_the_conversation_when_configured() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), Some("session_as_conversation = true\n"));
        let mut one = Mcp::new(proxy.url());
        one.initialize().await;
        let mut other = Mcp::new(proxy.url());
        other.initialize().await;
        assert_ne!(one.session, other.session);
        let args = refund_args("Q-1", 300);

        let first = one.call_result("send_refund", args.clone(), None).await;
        assert_eq!(status(&first), "executed", "{first}{}", proxy.log());
        let again = one.call_result("send_refund", args.clone(), None).await;
        assert_eq!(status(&again), "replayed", "{again}");
        assert_eq!(key(&again), key(&first));
        assert_eq!(fake.refunds(), 1);

        let elsewhere = other.call_result("send_refund", args.clone(), None).await;
        assert_eq!(status(&elsewhere), "executed", "{elsewhere}");
        assert_ne!(key(&elsewhere), key(&first));
        assert_eq!(fake.refunds(), 2);

        // A conversation named in `_meta` still wins over the session.
        let named = one
            .call_result("send_refund", args.clone(), in_conversation("conv-s"))
            .await;
        let named_elsewhere = other
            .call_result("send_refund", args, in_conversation("conv-s"))
            .await;
        assert_eq!(status(&named), "executed", "{named}");
        assert_eq!(status(&named_elsewhere), "replayed", "{named_elsewhere}");
        assert_eq!(fake.refunds(), 3);
    })
    .await;
}

// pins Y10, Y3, M7: an upstream's non-2xx answer to a keyed call (an expired session's 404)
// is handed back unchanged (status, headers, body) and releases the claim: the retry runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_expired_session_is_handed_back_and_releases_the_claim() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        fake.set_refund(Refund::ExpireOnce);
        let args = refund_args("E-1", 900);

        let (_, reply) = client
            .call("send_refund", args.clone(), in_conversation("conv-404"))
            .await;
        assert_eq!(
            reply.status,
            StatusCode::NOT_FOUND,
            "{reply:?}{}",
            proxy.log()
        );
        assert_eq!(reply.header("x-fake-expired"), Some("yes"), "{reply:?}");
        assert!(!reply.is_sse(), "{reply:?}");
        let body: Value = serde_json::from_slice(&reply.body).unwrap();
        assert_eq!(body, expired_body());
        assert_eq!(fake.refunds(), 0);

        let retry = client
            .call_result("send_refund", args.clone(), in_conversation("conv-404"))
            .await;
        assert_eq!(status(&retry), "executed", "{retry}{}", proxy.log());
        assert_eq!(without_markers(&retry), refund_result(&args, 1));
        assert_eq!(fake.refunds(), 1);
    })
    .await;
}

// pins Y10, Y6, U1, U2, M6: the upstream drops the connection after its progress event
// (the refund happened, its answer lost): the client gets the progress and then an
// `outcome_unknown` tool error; the retry gets `outcome_unknown` too (the key held for a
// person's decision, no retry hint), and the upstream ran once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_connection_dropped_mid_stream_leaves_the_outcome_unknown() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        fake.set_refund(Refund::DropAfterProgress);
        let args = refund_args("D-1", 1200);
        let meta = json!({ "conversationId": "conv-drop", "progressToken": "tok-drop" });

        let (id, reply) = client
            .call("send_refund", args.clone(), Some(meta.clone()))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}{}", proxy.log());
        assert!(reply.is_sse(), "the progress made it a stream: {reply:?}");
        let messages = reply.messages();
        assert_eq!(messages.len(), 2, "progress and the answer: {messages:?}");
        assert_eq!(messages[0], progress(&json!("tok-drop")));
        let first = reply.answer(id)["result"].clone();
        assert_eq!(first["isError"], true, "{first}");
        assert_eq!(first["_meta"]["idem/error"], "outcome_unknown", "{first}");
        key(&first);
        assert_eq!(fake.refunds(), 1);

        let (id, reply) = client.call("send_refund", args, Some(meta)).await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
        let retry = reply.answer(id)["result"].clone();
        assert_eq!(retry["isError"], true, "{retry}");
        assert_eq!(retry["_meta"]["idem/error"], "outcome_unknown", "{retry}");
        assert!(
            retry["_meta"].get("idem/retryAfterMs").is_none(),
            "held: {retry}"
        );
        assert_eq!(key(&retry), key(&first));
        assert_eq!(fake.refunds(), 1, "the upstream ran once");
        assert_eq!(
            fake.tool_calls().len(),
            1,
            "the held retry was not forwarded"
        );
    })
    .await;
}

// pins Y10: a request to a path other than the endpoint is forwarded as it is (method,
// path, query, headers, body) and its answer comes back as it is (status, headers, body).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn other_paths_are_forwarded_as_they_are() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let client = Mcp::new(proxy.url());
        for (method, body) in [(Method::GET, ""), (Method::POST, "{\"x\":1}")] {
            let request = Request::builder()
                .method(method.clone())
                .uri(format!("http://{}/.well-known/x?y=1&z=two", proxy.addr))
                .header("authorization", "Bearer secret-token")
                .header("x-custom", "custom value")
                .body(Full::new(Bytes::from(body)))
                .unwrap();
            let reply = client.send(request).await;
            assert_eq!(
                reply.status,
                StatusCode::NON_AUTHORITATIVE_INFORMATION,
                "{reply:?}{}",
                proxy.log()
            );
            assert_eq!(reply.header("x-fake-echo"), Some("yes"), "{reply:?}");
            let echo: Value = serde_json::from_slice(&reply.body).unwrap();
            assert_eq!(
                echo,
                json!({
                    "method": method.as_str(),
                    "path_and_query": "/.well-known/x?y=1&z=two",
                    "authorization": "Bearer secret-token",
                    "x-custom": "custom value",
                    "body": body,
                })
            );
        }
        let seen = fake.seen();
        assert_eq!(seen.len(), 2, "{seen:?}");
        assert_eq!(seen[0].method, Method::GET);
        assert_eq!(seen[1].method, Method::POST);
        assert!(seen
            .iter()
            .all(|s| s.path_and_query == "/.well-known/x?y=1&z=two"));
    })
    .await;
}

/// Waits until the fake has received `n` `tools/call` requests.
pub(crate) async fn until_forwarded(fake: &Fake, n: usize) {
    let deadline = Instant::now() + Duration::from_secs(5);
    while fake.tool_calls().len() < n {
        assert!(
            Instant::now() < deadline,
            "the upstream did not get {n} tools/call"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
}

// pins Y10, M11: a client's dropped HTTP connection is not a cancellation: the keyed call
// runs on and its outcome is saved, so the retry replays it; whether the connection drops
// after the relayed progress (the answer already a stream) or before anything came.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_dropped_client_connection_is_not_a_cancellation() {
    bounded(async {
        let fake = Fake::start().await;
        fake.set_refund(Refund::SseGated);
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;

        // Dropped after the progress event.
        let meta = json!({ "conversationId": "conv-gone", "progressToken": "tok-gone" });
        let args = refund_args("G-1", 100);
        let id = client.id();
        let request = client.post_request(&Mcp::call_message(
            id,
            "send_refund",
            args.clone(),
            Some(meta.clone()),
        ));
        let response = client
            .http
            .request(request)
            .await
            .expect("the proxy answers");
        let mut body = response.into_body();
        let frame = timeout(Duration::from_secs(5), body.frame())
            .await
            .expect("the progress event comes");
        assert!(frame.is_some());
        drop(body);
        tokio::time::sleep(Duration::from_millis(100)).await;
        fake.state.gate.notify_one();
        let retry = client
            .call_result("send_refund", args.clone(), Some(meta))
            .await;
        assert_eq!(status(&retry), "replayed", "{retry}{}", proxy.log());
        assert_eq!(without_markers(&retry), refund_result(&args, 1));
        assert_eq!(fake.refunds(), 1);

        // Dropped before anything came (no progress asked for).
        let meta = in_conversation("conv-gone");
        let args = refund_args("G-2", 200);
        let id = client.id();
        let request = client.post_request(&Mcp::call_message(
            id,
            "send_refund",
            args.clone(),
            meta.clone(),
        ));
        let gone = timeout(Duration::from_millis(300), client.http.request(request)).await;
        assert!(gone.is_err(), "the upstream has not answered yet: {gone:?}");
        until_forwarded(&fake, 2).await;
        fake.state.gate.notify_one();
        let retry = client.call_result("send_refund", args.clone(), meta).await;
        assert_eq!(status(&retry), "replayed", "{retry}{}", proxy.log());
        assert_eq!(without_markers(&retry), refund_result(&args, 2));
        assert_eq!(fake.refunds(), 2);
    })
    .await;
}

// pins Y7, Y10: a `notifications/cancelled` POSTed for a keyed call is forwarded upstream,
// and the upstream's later answer is still the outcome: handed to the client and saved, so
// the retry replays it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancelled_keyed_call_keeps_the_upstream_answer() {
    bounded(async {
        let fake = Fake::start().await;
        fake.set_refund(Refund::SseGated);
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        let args = refund_args("C-1", 400);
        let meta = in_conversation("conv-cancel");
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
            .post(&json!({
                "jsonrpc": "2.0",
                "method": "notifications/cancelled",
                "params": { "requestId": id, "reason": "the user changed their mind" },
            }))
            .await;
        assert_eq!(cancelled.status, StatusCode::ACCEPTED, "{cancelled:?}");
        assert!(
            fake.seen()
                .iter()
                .any(|s| s.body["method"] == "notifications/cancelled"
                    && s.body["params"]["requestId"] == id),
            "the cancellation went upstream"
        );
        fake.state.gate.notify_one();
        let response = pending.await.unwrap().expect("the proxy answers");
        let body = response.into_body().collect().await.unwrap().to_bytes();
        let answer: Value = serde_json::from_slice(&body)
            .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&body)));
        assert_eq!(status(&answer["result"]), "executed", "{answer}");
        let retry = client.call_result("send_refund", args, meta).await;
        assert_eq!(status(&retry), "replayed", "{retry}{}", proxy.log());
        assert_eq!(fake.refunds(), 1);
    })
    .await;
}

// pins S5, Y3: two identical keyed calls at once: the upstream runs one, the other waits
// for it and replays its outcome.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_duplicates_run_once() {
    bounded(async {
        let fake = Fake::start().await;
        fake.set_refund(Refund::SseGated);
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        let args = refund_args("P-1", 800);
        let meta = in_conversation("conv-dup");
        let mut pending = Vec::new();
        for _ in 0..2 {
            let id = client.id();
            let request = client.post_request(&Mcp::call_message(
                id,
                "send_refund",
                args.clone(),
                meta.clone(),
            ));
            pending.push((id, tokio::spawn(client.http.request(request))));
            until_forwarded(&fake, 1).await;
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
        fake.state.gate.notify_one();
        let mut statuses = Vec::new();
        for (id, task) in pending {
            let response = task.await.unwrap().expect("the proxy answers");
            let body = response.into_body().collect().await.unwrap().to_bytes();
            let answer: Value = serde_json::from_slice(&body)
                .unwrap_or_else(|e| panic!("{e}: {}", String::from_utf8_lossy(&body)));
            assert_eq!(answer["id"], id);
            statuses.push(status(&answer["result"]).clone());
        }
        statuses.sort_by_key(Value::to_string);
        assert_eq!(
            statuses,
            [json!("executed"), json!("replayed")],
            "{}",
            proxy.log()
        );
        assert_eq!(fake.refunds(), 1);
        assert_eq!(fake.tool_calls().len(), 1);
    })
    .await;
}

// pins Y3, M4: a client's `_meta.idempotencyKey` keys the call without a conversation: the
// same key with the same arguments replays in another session; with other arguments it is
// a `conflict`.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_key_replays_in_any_session() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let mut one = Mcp::new(proxy.url());
        one.initialize().await;
        let mut other = Mcp::new(proxy.url());
        other.initialize().await;
        let meta = Some(json!({ "idempotencyKey": "client-key-1" }));
        let first = one
            .call_result("send_refund", refund_args("K-1", 100), meta.clone())
            .await;
        assert_eq!(status(&first), "executed", "{first}{}", proxy.log());
        let again = other
            .call_result("send_refund", refund_args("K-1", 100), meta.clone())
            .await;
        assert_eq!(status(&again), "replayed", "{again}");
        let conflict = other
            .call_result("send_refund", refund_args("K-1", 999), meta)
            .await;
        assert_eq!(conflict["_meta"]["idem/error"], "conflict", "{conflict}");
        assert_eq!(fake.refunds(), 1);
    })
    .await;
}

// pins Y2, Y10: the proxy's own `tools/list` runs with the headers of the first keyed
// call; a listing that fails (that client's session expired upstream) is not kept: the
// next call, in a live session, is planned from a real listing, so the read-only tool
// passes through unkeyed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_tool_listing_is_not_kept() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let mut stale = Mcp::new(proxy.url());
        stale.session = Some("expired-session".into());
        let (_, reply) = stale
            .call(
                "lookup",
                json!({ "order_id": "X-1" }),
                in_conversation("conv-x"),
            )
            .await;
        assert_eq!(
            reply.status,
            StatusCode::NOT_FOUND,
            "{reply:?}{}",
            proxy.log()
        );

        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        for n in 1..=2usize {
            let result = client
                .call_result(
                    "lookup",
                    json!({ "order_id": "X-1" }),
                    in_conversation("conv-x"),
                )
                .await;
            assert!(
                result["_meta"].get("idem/status").is_none(),
                "lookup is read-only, yet keyed after a failed listing: {result}{}",
                proxy.log()
            );
            assert_eq!(fake.lookups(), n, "the upstream runs every lookup");
        }
    })
    .await;
}

// pins Y4, Y10: a listing that fails because one client's session expired says nothing
// about the upstream's tools: the proxy does not stop over it (it stops only when the
// upstream's real listing contradicts the configuration), hands the client the upstream's
// 404 and serves the next client.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failed_tool_listing_does_not_stop_the_proxy() {
    bounded(async {
        let fake = Fake::start().await;
        let mut proxy = Proxy::start(
            &fake.url(),
            Some("[tools.send_refund]\nkey = [\"order_id\"]\n"),
        );
        let mut stale = Mcp::new(proxy.url());
        stale.session = Some("expired-session".into());
        let (_, reply) = stale
            .call(
                "send_refund",
                refund_args("Z-1", 100),
                in_conversation("conv-z"),
            )
            .await;
        tokio::time::sleep(Duration::from_millis(200)).await;
        let exited = proxy.child.try_wait().unwrap();
        assert!(
            reply.status == StatusCode::NOT_FOUND && exited.is_none(),
            "expected the upstream's 404 for the expired session and the proxy running; got \
             HTTP {} {} and the proxy {}{}",
            reply.status,
            reply.text(),
            exited.map_or_else(|| "running".to_owned(), |s| format!("exited ({s})")),
            proxy.log()
        );
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        let result = client
            .call_result(
                "send_refund",
                refund_args("Z-1", 100),
                in_conversation("conv-z"),
            )
            .await;
        assert_eq!(status(&result), "executed", "{result}{}", proxy.log());
        assert_eq!(fake.refunds(), 1);
    })
    .await;
}

// pins Y3, M7: a JSON-RPC error the upstream answers to a keyed call is handed back as it
// is and releases the claim: the retry runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_upstream_json_rpc_error_is_handed_back_and_releases_the_claim() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        fake.set_refund(Refund::RpcErrorOnce);
        let args = refund_args("R-1", 100);
        let (id, reply) = client
            .call("send_refund", args.clone(), in_conversation("conv-err"))
            .await;
        assert_eq!(reply.status, StatusCode::OK, "{reply:?}{}", proxy.log());
        assert_eq!(reply.answer(id), rpc_busy(&json!(id)));
        assert_eq!(fake.refunds(), 0);
        let retry = client
            .call_result("send_refund", args, in_conversation("conv-err"))
            .await;
        assert_eq!(status(&retry), "executed", "{retry}");
        assert_eq!(fake.refunds(), 1);
    })
    .await;
}

/// `lookup` through `client`: whether the proxy keyed it.
async fn lookup_is_keyed(client: &mut Mcp) -> bool {
    let result = client
        .call_result(
            "lookup",
            json!({ "order_id": "T-1" }),
            in_conversation("conv-lc"),
        )
        .await;
    result["_meta"].get("idem/status").is_some()
}

/// The session's GET stream through the proxy, read whole.
async fn read_get_stream(client: &Mcp) -> Reply {
    let request = Request::builder()
        .method(Method::GET)
        .uri(&client.url)
        .header("accept", "text/event-stream")
        .header(SESSION, client.session.as_deref().unwrap())
        .body(Full::new(Bytes::new()))
        .unwrap();
    client.send(request).await
}

// pins Y10, Y2: `notifications/tools/list_changed` in the session's GET event stream makes
// the next call list the tools again: `lookup`, no longer read-only, is keyed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_in_the_get_stream_lists_the_tools_again() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        assert!(!lookup_is_keyed(&mut client).await);
        *fake.state.lookup_read_only.lock().unwrap() = false;
        let stream = read_get_stream(&client).await;
        assert_eq!(stream.messages(), [list_changed()], "{stream:?}");
        assert!(
            lookup_is_keyed(&mut client).await,
            "listed again after list_changed{}",
            proxy.log()
        );
        assert_eq!(fake.state.tool_lists.load(Ordering::SeqCst), 2);
    })
    .await;
}

// pins Y10, Y2: the same when the event arrives in two pieces (an SSE stream may be cut
// anywhere between reads).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_split_across_reads_lists_the_tools_again() {
    bounded(async {
        let fake = Fake::start().await;
        *fake.state.split_list_changed.lock().unwrap() = true;
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        assert!(!lookup_is_keyed(&mut client).await);
        *fake.state.lookup_read_only.lock().unwrap() = false;
        let stream = read_get_stream(&client).await;
        assert_eq!(stream.messages(), [list_changed()], "{stream:?}");
        assert!(
            lookup_is_keyed(&mut client).await,
            "a list_changed event split in two chunks was missed: the tools were not listed again \
             ({} listing(s)){}",
            fake.state.tool_lists.load(Ordering::SeqCst),
            proxy.log()
        );
    })
    .await;
}

// pins Y10, Y2: `notifications/tools/list_changed` relayed in a keyed call's own event
// stream counts too: the next call lists the tools again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn list_changed_in_a_keyed_calls_stream_lists_the_tools_again() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        assert!(!lookup_is_keyed(&mut client).await);
        *fake.state.lookup_read_only.lock().unwrap() = false;
        fake.set_refund(Refund::SseListChanged);
        let (id, reply) = client
            .call(
                "send_refund",
                refund_args("T-1", 100),
                in_conversation("conv-lc"),
            )
            .await;
        assert!(reply.is_sse(), "{reply:?}");
        let messages = reply.messages();
        assert_eq!(messages[0], list_changed(), "relayed: {messages:?}");
        assert_eq!(status(&reply.answer(id)["result"]), "executed");
        assert!(
            lookup_is_keyed(&mut client).await,
            "a list_changed event relayed in a keyed call's stream was missed: the tools were \
             not listed again ({} listing(s)){}",
            fake.state.tool_lists.load(Ordering::SeqCst),
            proxy.log()
        );
    })
    .await;
}

// pins Y8, Y10, Y3: a `tools/call` inside a JSON-RPC batch (MCP 2025-03-26 allowed them)
// never reaches the upstream outside the call protocol: the proxy answers the batch as the
// stdio proxy does, with an array of one -32600 error per request in it, each with its id,
// and forwards nothing in it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_call_in_a_batch_is_not_forwarded_unkeyed() {
    bounded(async {
        let fake = Fake::start().await;
        let proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        for _ in 0..2 {
            let (call, ping) = (client.id(), client.id());
            let batch = json!([
                Mcp::call_message(
                    call,
                    "send_refund",
                    refund_args("B-1", 100),
                    in_conversation("conv-batch"),
                ),
                {"jsonrpc": "2.0", "method": "notifications/progress", "params": {}},
                {"jsonrpc": "2.0", "id": ping, "method": "ping"},
            ]);
            let reply = client.post(&batch).await;
            assert_eq!(reply.status, StatusCode::OK, "{reply:?}");
            let answers: Value = serde_json::from_slice(&reply.body).unwrap();
            let ids: Vec<&Value> = answers
                .as_array()
                .unwrap()
                .iter()
                .map(|a| &a["id"])
                .collect();
            assert_eq!(ids, [&json!(call), &json!(ping)], "{answers}");
            assert!(answers
                .as_array()
                .unwrap()
                .iter()
                .all(|a| a["error"]["code"] == -32600));
        }
        assert_eq!(fake.refunds(), 0);
        assert!(
            fake.seen().iter().all(|s| !s.body.is_array()),
            "nothing in a batch went upstream"
        );
    })
    .await;
}

// pins Y9, Y10: SIGTERM stops the HTTP proxy taking requests, and a keyed call in progress
// still gets the upstream's answer, which reaches the client, saved; the proxy exits 0
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sigterm_lets_a_keyed_call_in_progress_finish() {
    bounded(async {
        let fake = Fake::start().await;
        let mut proxy = Proxy::start(&fake.url(), None);
        let mut client = Mcp::new(proxy.url());
        client.initialize().await;
        fake.set_refund(Refund::SseGated);
        let call = tokio::spawn(async move {
            client
                .call(
                    "send_refund",
                    refund_args("T-1", 300),
                    in_conversation("conv-term"),
                )
                .await
        });
        while fake.refunds() == 0 {
            tokio::time::sleep(Duration::from_millis(10)).await;
        }
        let pid = proxy.child.id().to_string();
        assert!(Command::new("kill")
            .args(["-TERM", &pid])
            .status()
            .unwrap()
            .success());
        tokio::time::sleep(Duration::from_millis(200)).await;
        assert!(
            proxy.child.try_wait().unwrap().is_none(),
            "the proxy waits for its keyed call{}",
            proxy.log()
        );
        fake.state.gate.notify_one();
        let (id, reply) = call.await.unwrap();
        let result = reply.answer(id)["result"].clone();
        assert_eq!(status(&result), "executed", "{result}{}", proxy.log());
        let deadline = Instant::now() + Duration::from_secs(10);
        let code = loop {
            if let Some(exit) = proxy.child.try_wait().unwrap() {
                break exit.code();
            }
            assert!(Instant::now() < deadline, "still running{}", proxy.log());
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(code, Some(0), "{}", proxy.log());
        assert!(proxy.log().contains("SIGTERM"), "{}", proxy.log());
        assert_eq!(fake.refunds(), 1);
    })
    .await;
}
