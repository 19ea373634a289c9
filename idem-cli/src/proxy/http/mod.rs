//! `idem mcp-proxy --listen ADDR --upstream URL`: the proxy in front of a server that speaks
//! MCP's streamable HTTP (contract Y10).
//!
//! Every HTTP request is forwarded to the upstream origin with its method, path, query,
//! headers (`Mcp-Session-Id`, `MCP-Protocol-Version`, `Authorization`, `Last-Event-ID`…) and
//! body, and the upstream's answer comes back as it is, streamed: sessions are the
//! upstream's own. Two kinds of POST to the MCP endpoint are looked into: `initialize`,
//! whose result gains `capabilities.experimental.idempotency`, and `tools/call` of keyed
//! tools, which run under idem's call protocol with the upstream's answer as the outcome.

use std::collections::HashMap;
use std::convert::Infallible;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use bytes::Bytes;
use futures_util::StreamExt;
use http::header::{self, HeaderMap, HeaderName, HeaderValue};
use http::{Method, Request, Response, StatusCode, Uri};
use http_body_util::combinators::UnsyncBoxBody;
use http_body_util::{BodyExt, Full, StreamBody};
use hyper::body::{Frame, Incoming};
use hyper_util::client::legacy::connect::HttpConnector;
use hyper_util::client::legacy::Client;
use hyper_util::rt::{TokioExecutor, TokioIo};
use idem_runtime::integrations::rmcp::{capability, ForwardedCall, ServerAnswer};
use idem_runtime::Engine;
use serde_json::{json, Map, Value};
use sse_stream::{Sse, SseStream};
use tokio::sync::{mpsc, oneshot, watch};

use super::config::Config;
use super::jsonrpc::{self, error_line, error_response, Id, Malformed, Message, INTERNAL_ERROR};
use super::keyed::given_up;
use super::tools::ToolTable;

type Body = UnsyncBoxBody<Bytes, BoxError>;
type BoxError = Box<dyn std::error::Error + Send + Sync>;

mod keyed;
mod sse;

use self::sse::{encode_sse, is_sse, parse_sse, read_answer, Answer};

/// The method whose sight makes the proxy list the upstream's tools again (Y4).
const LIST_CHANGED: &[u8] = b"notifications/tools/list_changed";

/// The largest request body the proxy reads into memory to look into it, in bytes.
pub const MAX_BODY_BYTES: usize = 16 * 1024 * 1024;

/// Headers that belong to one HTTP connection, never forwarded (RFC 9110 §7.6.1), plus the
/// ones the proxy recomputes.
const HOP_BY_HOP: [&str; 9] = [
    "connection",
    "keep-alive",
    "proxy-connection",
    "te",
    "trailer",
    "transfer-encoding",
    "upgrade",
    "host",
    "content-length",
];

/// The HTTP proxy's shared state.
struct HttpProxy {
    config: Config,
    engine: Engine,
    upstream: Uri,
    client: Client<HttpConnector, Full<Bytes>>,
    tools: Arc<Mutex<Option<Arc<ToolTable>>>>,
    /// Held while the proxy lists the upstream's tools: concurrent keyed calls wait for one
    /// listing instead of each making its own.
    listing: tokio::sync::Mutex<()>,
    /// Keyed calls in progress, by (session, the client's JSON-RPC id): cancelled? (Y7).
    keyed: Mutex<HashMap<(String, String), Keyed>>,
    next_id: AtomicU64,
    fatal: watch::Sender<Option<String>>,
    /// Keyed calls whose task runs (the proxy waits for them before it exits).
    running: AtomicU64,
    /// Requests other than GETs whose answers are not yet written whole (the proxy waits
    /// for them for `cancel_wait` when it stops).
    passing: Arc<AtomicU64>,
    /// Set once the proxy stops: keyed calls not forwarded yet end with an error, forwarded
    /// ones stop waiting for the upstream (an unknown outcome).
    stopping: watch::Sender<bool>,
}

struct Keyed {
    cancelled: watch::Sender<bool>,
}

/// Serves on `listen` until interrupted (exit 0) or the configuration is contradicted by
/// the upstream's tools (exit 2).
pub async fn serve(config: Config, engine: Engine, listen: SocketAddr, upstream: Uri) -> u8 {
    let listener = match tokio::net::TcpListener::bind(listen).await {
        Ok(listener) => listener,
        Err(error) => {
            tracing::error!("cannot listen on {listen}: {error}");
            return 2;
        }
    };
    let local = listener.local_addr().map_or(listen, |a| a);
    tracing::info!(
        "idem mcp-proxy listens on http://{local}{} for {upstream}",
        upstream.path()
    );
    let proxy = Arc::new(HttpProxy {
        config,
        engine,
        upstream,
        client: Client::builder(TokioExecutor::new()).build_http(),
        tools: Arc::default(),
        listing: tokio::sync::Mutex::new(()),
        keyed: Mutex::default(),
        next_id: AtomicU64::new(0),
        fatal: watch::channel(None).0,
        running: AtomicU64::new(0),
        passing: Arc::default(),
        stopping: watch::channel(false).0,
    });
    let mut fatal = proxy.fatal.subscribe();
    let mut stop_signal = super::StopSignal::new();
    let code = loop {
        tokio::select! {
            accepted = listener.accept() => {
                let Ok((stream, _)) = accepted else { continue };
                let proxy = Arc::clone(&proxy);
                tokio::spawn(async move {
                    let service = hyper::service::service_fn(move |request| {
                        let proxy = Arc::clone(&proxy);
                        async move { Ok::<_, Infallible>(proxy.handle(request).await) }
                    });
                    let _ = hyper::server::conn::http1::Builder::new()
                        .serve_connection(TokioIo::new(stream), service)
                        .await;
                });
            }
            _ = fatal.wait_for(Option::is_some) => break 2,
            signal = stop_signal.received() => {
                tracing::info!("{signal}: the proxy stops taking requests and lets its keyed calls end");
                break 0;
            }
        }
    };
    // The keyed calls in progress still get the upstream's answers and save them for
    // `cancel_wait`; then the ones still waiting end (Y9).
    if code == 0 {
        let deadline = tokio::time::Instant::now() + proxy.config.cancel_wait;
        let busy =
            || proxy.running.load(Ordering::SeqCst) + proxy.passing.load(Ordering::SeqCst) > 0;
        while busy() && tokio::time::Instant::now() < deadline {
            tokio::select! {
                () = tokio::time::sleep(Duration::from_millis(20)) => {}
                signal = stop_signal.received() => {
                    tracing::info!("{signal} again: the proxy stops now");
                    break;
                }
            }
        }
    }
    proxy.stopping.send_replace(true);
    let deadline = tokio::time::Instant::now() + super::WIND_DOWN;
    while proxy.running.load(Ordering::SeqCst) > 0 && tokio::time::Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    code
}

impl HttpProxy {
    /// Whether `uri` names the MCP endpoint: compared as routers may (percent-decoded, dot
    /// segments and repeated or trailing slashes removed, case folded), so that no spelling
    /// of the endpoint's path passes a keyed call through unkeyed (Y10). A path that only
    /// looks like it costs nothing: its requests are forwarded to it all the same.
    fn is_endpoint(&self, uri: &Uri) -> bool {
        comparable_path(uri.path()) == comparable_path(self.upstream.path())
    }

    async fn handle(self: Arc<Self>, request: Request<Incoming>) -> Response<Body> {
        let (parts, body) = request.into_parts();
        // Every request but a GET (an event stream that lasts as long as its session) is
        // waited for when the proxy stops (Y9).
        let flight = (parts.method != Method::GET).then(|| Flight::start(&self.passing));
        let response = self.route(parts, body).await;
        match flight {
            Some(flight) => flight.carried_by(response),
            None => response,
        }
    }

    async fn route(
        self: &Arc<Self>,
        parts: http::request::Parts,
        body: Incoming,
    ) -> Response<Body> {
        if parts.method != Method::POST || !self.is_endpoint(&parts.uri) {
            return self.forward(parts, body.boxed_unsync_err()).await;
        }
        let bytes = match Limited::read(body).await {
            Ok(bytes) => bytes,
            Err(response) => return response,
        };
        let text = match jsonrpc::utf8(&bytes) {
            Ok(text) => text,
            Err(bad) => return malformed(&bad),
        };
        if let Some(answer) = jsonrpc::refuse_batch(text) {
            // A batch (MCP before 2025-06-18) passes through unless a tools/call is in it:
            // a keyed call must not pass unkeyed inside one. Then nothing in it is
            // forwarded, and each request in it is answered with an error (Y8, Y10).
            if !batch_calls_a_tool(text) {
                return self.forward(parts, full(bytes)).await;
            }
            return match answer {
                Some(answer) => json_text_response(StatusCode::OK, answer),
                None => empty_response(StatusCode::ACCEPTED),
            };
        }
        let message = match jsonrpc::parse(text) {
            Ok(message) => message,
            Err(bad) => return malformed(&bad),
        };
        match message {
            Message::Request {
                id, method, body, ..
            } if method == "tools/call" => match jsonrpc::tool_call(&body) {
                Ok((params, tool)) => {
                    Arc::clone(self)
                        .tools_call(parts, bytes, id, params, tool)
                        .await
                }
                Err(why) => {
                    tracing::warn!("a tools/call that names no tool, refused: {why}");
                    json_text_response(
                        StatusCode::OK,
                        error_line(&id, jsonrpc::INVALID_PARAMS, why),
                    )
                }
            },
            Message::Request { method, .. } if method == "initialize" => {
                let response = self.forward(parts, full(bytes)).await;
                self.advertise(response).await
            }
            Message::Notification { method, raw, .. } if method == "notifications/cancelled" => {
                if let Some(request) = raw.param_id("requestId") {
                    let key = (session(&parts.headers), request.text());
                    if let Some(keyed) = self.keyed().get(&key) {
                        keyed.cancelled.send_replace(true);
                    }
                }
                self.forward(parts, full(bytes)).await
            }
            _ => self.forward(parts, full(bytes)).await,
        }
    }

    fn keyed(&self) -> std::sync::MutexGuard<'_, HashMap<(String, String), Keyed>> {
        self.keyed.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The request sent upstream as it came, and the upstream's answer back as it comes.
    async fn forward(&self, parts: http::request::Parts, body: Body) -> Response<Body> {
        match self
            .send_upstream(&parts.method, &parts.uri, &parts.headers, body)
            .await
        {
            Ok(response) => {
                let (mut head, body) = response.into_parts();
                strip_hop_by_hop(&mut head.headers);
                self.relative_location(&mut head.headers);
                let body = if is_sse(&head.headers) {
                    self.watch_list_changed(body)
                } else {
                    body.boxed_unsync_err()
                };
                Response::from_parts(head, body)
            }
            Err(error) => bad_gateway(&error.message),
        }
    }

    /// Sends a request upstream. `Err` says whether the request may have reached the
    /// upstream (anything but a failed connection: the effect may have happened).
    async fn send_upstream(
        &self,
        method: &Method,
        uri: &Uri,
        headers: &HeaderMap,
        body: Body,
    ) -> Result<Response<Incoming>, UpstreamError> {
        let bytes = body
            .collect()
            .await
            .map_err(|e| UpstreamError::unsent(format!("reading the request: {e}")))?
            .to_bytes();
        let mut target = http::uri::Parts::from(self.upstream.clone());
        target.path_and_query = uri.path_and_query().cloned();
        let target = Uri::from_parts(target).map_err(|e| UpstreamError::unsent(e.to_string()))?;
        let mut request = Request::builder().method(method.clone()).uri(target);
        for (name, value) in headers {
            if !HOP_BY_HOP.contains(&name.as_str()) {
                request = request.header(name, value);
            }
        }
        let request = request
            .body(Full::new(bytes))
            .map_err(|e| UpstreamError::unsent(e.to_string()))?;
        self.client
            .request(request)
            .await
            .map_err(|e| UpstreamError {
                maybe_delivered: !e.is_connect(),
                message: format!("the upstream MCP server at {} failed: {e}", self.upstream),
            })
    }

    /// A redirect to the upstream's own origin is made relative (its path and query), so
    /// that the client follows it through the proxy, never around it (Y10).
    fn relative_location(&self, headers: &mut HeaderMap) {
        let Some(location) = headers
            .get(header::LOCATION)
            .and_then(|l| l.to_str().ok())
            .and_then(|l| l.parse::<Uri>().ok())
        else {
            return;
        };
        let same_origin = location.scheme() == self.upstream.scheme()
            && location.authority() == self.upstream.authority();
        if let (true, Some(path)) = (same_origin, location.path_and_query()) {
            if let Ok(relative) = HeaderValue::from_str(path.as_str()) {
                headers.insert(header::LOCATION, relative);
            }
        }
    }

    /// Passes an SSE stream through, and forgets the tool listing when the stream carries
    /// `notifications/tools/list_changed`: the next keyed call lists the tools again and
    /// checks the configuration (Y4).
    fn watch_list_changed(&self, body: Incoming) -> Body {
        let tools = Arc::clone(&self.tools);
        // The end of the previous chunk, so that a notification cut between two reads is seen.
        let mut tail: Vec<u8> = Vec::new();
        let stream = body.into_data_stream().map(move |chunk| {
            if let Ok(chunk) = &chunk {
                tail.extend_from_slice(chunk);
                if contains(&tail, LIST_CHANGED) {
                    *tools.lock().unwrap_or_else(PoisonError::into_inner) = None;
                    tail.clear();
                }
                let keep = tail.len().saturating_sub(LIST_CHANGED.len());
                tail.drain(..keep);
            }
            chunk.map(Frame::data).map_err(|e| Box::new(e) as BoxError)
        });
        BodyExt::boxed_unsync(StreamBody::new(stream))
    }

    /// An `initialize` answer with `capabilities.experimental.idempotency` added (Y1, M10).
    async fn advertise(&self, response: Response<Body>) -> Response<Body> {
        let (mut head, body) = response.into_parts();
        let Ok(collected) = body.collect().await else {
            return Response::from_parts(head, full(Bytes::new()));
        };
        let bytes = collected.to_bytes();
        let add = |message: &mut Value| {
            if let Some(capabilities) = message
                .pointer_mut("/result/capabilities")
                .and_then(Value::as_object_mut)
            {
                let experimental = capabilities
                    .entry("experimental")
                    .or_insert_with(|| json!({}));
                if let Some(experimental) = experimental.as_object_mut() {
                    experimental.insert(
                        "idempotency".into(),
                        Value::Object(capability(&self.config.conversation_meta)),
                    );
                }
            }
        };
        let bytes = if is_sse(&head.headers) {
            let events = parse_sse(bytes.clone()).await;
            let mut out = Vec::new();
            for mut event in events {
                if let Some(mut message) = event
                    .data
                    .as_deref()
                    .and_then(|d| serde_json::from_str::<Value>(d).ok())
                {
                    add(&mut message);
                    event.data = Some(message.to_string());
                }
                out.extend_from_slice(&encode_sse(&event));
            }
            Bytes::from(out)
        } else {
            match serde_json::from_slice::<Value>(&bytes) {
                Ok(mut message) => {
                    add(&mut message);
                    Bytes::from(message.to_string())
                }
                Err(_) => bytes,
            }
        };
        head.headers.remove(header::CONTENT_LENGTH);
        Response::from_parts(head, full(bytes))
    }

    /// The upstream's tools, listed with the client's session headers if not yet (Y2).
    async fn tool_table(&self, headers: &HeaderMap) -> Result<Arc<ToolTable>, String> {
        let listed = || {
            self.tools
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .clone()
        };
        if let Some(table) = listed() {
            return Ok(table);
        }
        let _listing = self.listing.lock().await;
        if let Some(table) = listed() {
            return Ok(table);
        }
        let mut table = ToolTable::default();
        let mut cursor: Option<String> = None;
        loop {
            let id = format!(
                "idem-proxy-{}",
                self.next_id.fetch_add(1, Ordering::SeqCst) + 1
            );
            let mut request = json!({"jsonrpc": "2.0", "id": id, "method": "tools/list"});
            if let Some(cursor) = &cursor {
                request["params"] = json!({ "cursor": cursor });
            }
            let mut own = HeaderMap::new();
            for (name, value) in headers {
                let keep = [
                    "mcp-session-id",
                    "mcp-protocol-version",
                    "authorization",
                    "cookie",
                ];
                if keep.contains(&name.as_str()) {
                    own.insert(name.clone(), value.clone());
                }
            }
            own.insert(
                header::CONTENT_TYPE,
                HeaderValue::from_static("application/json"),
            );
            own.insert(
                header::ACCEPT,
                HeaderValue::from_static("application/json, text/event-stream"),
            );
            let response = self
                .send_upstream(
                    &Method::POST,
                    &self.upstream,
                    &own,
                    full(Bytes::from(request.to_string())),
                )
                .await;
            let page = match response {
                Ok(response) if response.status().is_success() => {
                    match read_answer(response, &Id::of(&json!(id)), &mut |_| {}).await {
                        Ok(Answer::Message(message)) => {
                            message.get("result").and_then(Value::as_object).cloned()
                        }
                        _ => None,
                    }
                }
                _ => None,
            };
            let Some(page) = page else {
                // A listing that failed (an expired session, an upstream error) says nothing
                // of the tools: this call treats them as unlisted (keyed), nothing is kept,
                // and the configuration is not checked against it.
                tracing::warn!("the upstream's tools/list failed: this call's tool is keyed as unlisted; the next call lists again");
                return Ok(Arc::new(table));
            };
            match table.add_page(&page) {
                Some(next) => cursor = Some(next),
                None => break,
            }
        }
        if let Err(problem) = table.check(&self.config) {
            let message = format!("the configuration does not fit the upstream server: {problem}");
            tracing::error!("{message}");
            self.fatal.send_replace(Some(message.clone()));
            return Err(message);
        }
        let table = Arc::new(table);
        *self.tools.lock().unwrap_or_else(PoisonError::into_inner) = Some(Arc::clone(&table));
        Ok(table)
    }
}

fn session(headers: &HeaderMap) -> String {
    headers
        .get("mcp-session-id")
        .and_then(|v| v.to_str().ok())
        .unwrap_or("")
        .to_owned()
}

fn strip_hop_by_hop(headers: &mut HeaderMap) {
    for name in HOP_BY_HOP {
        if name != "content-length" {
            headers.remove(HeaderName::from_static(name));
        }
    }
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

fn full(bytes: Bytes) -> Body {
    Full::new(bytes)
        .map_err(|never| match never {})
        .boxed_unsync()
}

fn json_response(status: StatusCode, message: &Value) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(full(Bytes::from(message.to_string())))
        .unwrap_or_default()
}

fn json_text_response(status: StatusCode, message: String) -> Response<Body> {
    Response::builder()
        .status(status)
        .header(header::CONTENT_TYPE, "application/json")
        .body(full(Bytes::from(message)))
        .unwrap_or_default()
}

fn empty_response(status: StatusCode) -> Response<Body> {
    Response::builder()
        .status(status)
        .body(full(Bytes::new()))
        .unwrap_or_default()
}

/// A POST to the endpoint that is no JSON-RPC message: HTTP 400 with Y8's error, nothing
/// forwarded (MCP's streamable HTTP answers a body it cannot accept with 400).
fn malformed(bad: &Malformed) -> Response<Body> {
    tracing::warn!(
        code = bad.code,
        "malformed message from the client: {}",
        bad.why
    );
    json_text_response(
        StatusCode::BAD_REQUEST,
        error_line(&bad.id, bad.code, bad.why.clone()),
    )
}

/// Whether the batch `text` holds a `tools/call` request.
fn batch_calls_a_tool(text: &str) -> bool {
    serde_json::from_str::<Vec<Box<serde_json::value::RawValue>>>(text).is_ok_and(|elements| {
        elements.iter().any(|element| {
            matches!(jsonrpc::parse(element.get()),
                Ok(Message::Request { method, .. }) if method == "tools/call")
        })
    })
}

/// A path as routers may read it, for comparison: percent-decoded, dot segments and empty
/// segments removed, lower case (`/%6DCP/./` is `/mcp`).
fn comparable_path(path: &str) -> String {
    let bytes = path.as_bytes();
    let mut decoded = Vec::with_capacity(bytes.len());
    let mut at = 0;
    while at < bytes.len() {
        let hex = |b: u8| char::from(b).to_digit(16);
        match (
            bytes[at],
            bytes.get(at + 1).copied().and_then(hex),
            bytes.get(at + 2).copied().and_then(hex),
        ) {
            (b'%', Some(high), Some(low)) => {
                // Two hex digits make one byte: high * 16 + low < 256.
                decoded.push(u8::try_from(high * 16 + low).unwrap_or(b'%'));
                at += 3;
            }
            (byte, _, _) => {
                decoded.push(byte);
                at += 1;
            }
        }
    }
    let decoded = String::from_utf8_lossy(&decoded).to_lowercase();
    let mut segments: Vec<&str> = Vec::new();
    for segment in decoded.split('/') {
        match segment {
            "" | "." => {}
            ".." => {
                segments.pop();
            }
            segment => segments.push(segment),
        }
    }
    segments.join("/")
}

/// One request in flight, counted until its answer is written whole or dropped.
struct Flight(Arc<AtomicU64>);

impl Flight {
    fn start(counter: &Arc<AtomicU64>) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Flight(Arc::clone(counter))
    }

    /// `response`, whose body holds the count until it ends.
    fn carried_by(self, response: Response<Body>) -> Response<Body> {
        response.map(|body| {
            BodyExt::boxed_unsync(Counted {
                body,
                _flight: self,
            })
        })
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// A response body that keeps its request counted in flight.
struct Counted {
    body: Body,
    _flight: Flight,
}

impl hyper::body::Body for Counted {
    type Data = Bytes;
    type Error = BoxError;

    fn poll_frame(
        self: std::pin::Pin<&mut Self>,
        cx: &mut std::task::Context<'_>,
    ) -> std::task::Poll<Option<Result<Frame<Bytes>, BoxError>>> {
        std::pin::Pin::new(&mut self.get_mut().body).poll_frame(cx)
    }

    fn is_end_stream(&self) -> bool {
        self.body.is_end_stream()
    }

    fn size_hint(&self) -> hyper::body::SizeHint {
        self.body.size_hint()
    }
}

fn bad_gateway(error: &str) -> Response<Body> {
    tracing::warn!("{error}");
    let message = error_response(Value::Null, INTERNAL_ERROR, error);
    json_response(StatusCode::BAD_GATEWAY, &message)
}

/// A request that did not get an upstream answer.
#[derive(Debug)]
pub(super) struct UpstreamError {
    /// What went wrong.
    pub message: String,
    /// The request may have reached the upstream (only a failed connection says it did not).
    pub maybe_delivered: bool,
}

impl UpstreamError {
    fn unsent(message: String) -> Self {
        UpstreamError {
            message,
            maybe_delivered: false,
        }
    }
}

impl From<UpstreamError> for String {
    fn from(error: UpstreamError) -> String {
        error.message
    }
}

/// Reads a request body up to [`MAX_BODY_BYTES`].
struct Limited;

impl Limited {
    async fn read(body: Incoming) -> Result<Bytes, Response<Body>> {
        match http_body_util::Limited::new(body, MAX_BODY_BYTES)
            .collect()
            .await
        {
            Ok(collected) => Ok(collected.to_bytes()),
            Err(error) => {
                let message = error_response(
                    Value::Null,
                    super::jsonrpc::INVALID_REQUEST,
                    format!(
                        "the request body cannot be read (at most {MAX_BODY_BYTES} bytes): {error}"
                    ),
                );
                Err(json_response(StatusCode::PAYLOAD_TOO_LARGE, &message))
            }
        }
    }
}

trait BoxedUnsyncErr {
    fn boxed_unsync_err(self) -> Body;
}

impl BoxedUnsyncErr for Incoming {
    fn boxed_unsync_err(self) -> Body {
        self.map_err(|e| Box::new(e) as BoxError).boxed_unsync()
    }
}

#[cfg(test)]
mod tests {
    use super::comparable_path;

    // pins Y10: spellings a router may take for the endpoint compare equal to it
    #[test]
    fn endpoint_spellings_compare_equal() {
        for path in [
            "/mcp",
            "/mcp/",
            "//mcp",
            "/%6Dcp",
            "/%6dCP",
            "/x/../mcp",
            "/./mcp",
        ] {
            assert_eq!(comparable_path(path), "mcp", "{path}");
        }
        assert_eq!(comparable_path("/"), "");
        assert_ne!(comparable_path("/mcpx"), "mcp");
        assert_eq!(comparable_path("/a%2fb"), comparable_path("/a/b"));
        assert_eq!(comparable_path("/%zz"), "%zz");
    }
}
