//! The proxy's switchboard: every message from the client or the server goes through here,
//! with its id translated, to the other side; `tools/call` requests go to [`super::keyed`]
//! (contract Y1, Y2, Y5, Y6, Y8).

use std::collections::HashMap;
use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use idem_runtime::integrations::rmcp::capability;
use idem_runtime::Engine;
use serde_json::{Map, Value};
use tokio::sync::{mpsc, oneshot, watch};

use super::config::Config;
use super::jsonrpc::{self, error_line, Id, Message, INTERNAL_ERROR, INVALID_PARAMS};
use super::tools::ToolTable;

mod listing;
mod process;

/// How long the proxy waits for the server to answer one of its own requests (a page of
/// its tool listing, its re-initialisation).
pub const OWN_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// The prefix of the `_meta` members that carry a request's protocol version and client
/// description in MCP's discovery era (2026-07-28): copied onto the proxy's own requests.
const PROTOCOL_META_PREFIX: &str = "io.modelcontextprotocol/";

/// A message for the server, and the proxy id of the request it is, if it is one.
#[derive(Debug)]
pub struct Outgoing {
    /// The proxy's id of the request (its `id` member), `None` for notifications and
    /// responses.
    pub proxy_id: Option<u64>,
    /// The message, one line of JSON text (no newline).
    pub line: String,
}

/// What a request the proxy sent the server came to.
#[derive(Debug)]
pub enum Reply {
    /// The server's response (the whole message).
    Answer(Map<String, Value>),
    /// It was written to the server, which exited before answering: why.
    Lost(String),
    /// It never reached the server: why.
    NotDelivered(String),
}

/// A keyed call in progress, as the router knows it.
#[derive(Debug, Clone, Copy)]
pub struct KeyedCall(u64);

/// Who waits for a request sent to the server.
#[derive(Debug)]
enum Waiter {
    /// The client, whose request had `id`: the answer goes to it with that id.
    Client { id: Id, method: String },
    /// A task of the proxy (a keyed call, the tool listing, the re-initialisation).
    Task(oneshot::Sender<Reply>),
}

#[derive(Debug)]
struct Pending {
    /// The generation of the server process it was written to; `None` while queued.
    written: Option<u64>,
    waiter: Waiter,
}

/// A keyed call in progress (Y7), by a number of its own: a client may reuse a request id
/// while an earlier call with it still runs (Y5).
#[derive(Debug)]
struct KeyedEntry {
    /// The client's request id, as text.
    client_id: String,
    cancelled: watch::Sender<bool>,
    /// The proxy id of its request to the server, once forwarded.
    proxy_id: Option<u64>,
}

#[derive(Debug, Default)]
struct State {
    next_id: u64,
    generation: u64,
    to_server: HashMap<u64, Pending>,
    /// The client's id (as text) of each client request in flight to the server.
    client_ids: HashMap<String, u64>,
    /// Requests the server sent the client: proxy id → (generation, the server's id).
    to_client: HashMap<u64, (u64, Id)>,
    /// The same, by (generation, the server's id as text): for the server's cancellations.
    server_ids: HashMap<(u64, String), u64>,
    keyed: HashMap<u64, KeyedEntry>,
    /// The params of the client's `initialize`, for re-initialising a restarted server.
    initialize: Option<Value>,
    /// The client sent `notifications/initialized`.
    initialized: bool,
    /// The protocol `_meta` members of the client's latest request.
    protocol_meta: Map<String, Value>,
    probing: bool,
    /// A listing was asked for while one was under way.
    probe_again: bool,
    /// The client's `initialize` was answered with a result since the last restart.
    initialize_answered: bool,
}

/// The switchboard, shared by the tasks that read the client, read the server, supervise the
/// server's process and run keyed calls.
#[derive(Debug)]
pub struct Router {
    pub(super) config: Config,
    pub(super) engine: Engine,
    to_client: mpsc::UnboundedSender<Option<String>>,
    to_server: mpsc::UnboundedSender<Outgoing>,
    state: Mutex<State>,
    tools: watch::Sender<Option<Arc<ToolTable>>>,
    /// Set once: why the proxy must stop (a configuration the server contradicts, the
    /// server's restarts run out), and its exit status.
    fatal: watch::Sender<Option<(String, u8)>>,
    /// Set once the proxy stops, fatally or because its client is gone: why. Keyed calls
    /// not yet forwarded end then (their requests are answered with an error).
    stopping: watch::Sender<Option<String>>,
}

impl Router {
    /// A router that writes to the client through `to_client` and to the server through
    /// `to_server`.
    pub fn new(
        config: Config,
        engine: Engine,
        to_client: mpsc::UnboundedSender<Option<String>>,
        to_server: mpsc::UnboundedSender<Outgoing>,
    ) -> Self {
        Router {
            config,
            engine,
            to_client,
            to_server,
            state: Mutex::default(),
            tools: watch::channel(None).0,
            fatal: watch::channel(None).0,
            stopping: watch::channel(None).0,
        }
    }

    fn state(&self) -> std::sync::MutexGuard<'_, State> {
        self.state.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Sends `line` (one JSON-RPC message) to the client. A client that is gone is not an
    /// error: the proxy winds down when its input ends.
    pub fn send_client(&self, line: String) {
        let _ = self.to_client.send(Some(line));
    }

    /// Ends the client's output once what was sent before is written.
    pub fn close_client(&self) {
        let _ = self.to_client.send(None);
    }

    fn send_server(&self, proxy_id: Option<u64>, line: String) {
        if let Err(mpsc::error::SendError(unsent)) =
            self.to_server.send(Outgoing { proxy_id, line })
        {
            if let Some(id) = unsent.proxy_id {
                self.not_delivered(id, "the proxy is shutting down");
            }
        }
    }

    /// Why the proxy must stop, once it must.
    pub fn fatal(&self) -> watch::Receiver<Option<(String, u8)>> {
        self.fatal.subscribe()
    }

    /// Why the proxy stops, once it does.
    pub fn stopping(&self) -> watch::Receiver<Option<String>> {
        self.stopping.subscribe()
    }

    /// Stops the proxy with `message` and exit status `code` (Y4, Y6): see
    /// [`wind_down`](Self::wind_down).
    pub fn stop(&self, message: String, code: u8) {
        tracing::error!("{message}");
        self.wind_down(&message);
        self.fatal.send_replace(Some((message, code)));
    }

    /// Ends what is still waiting for the server, because the proxy stops (`why`): a
    /// client's request gets a JSON-RPC error (-32603) saying why; a keyed call's request
    /// that was written to the server has an unknown outcome (U1), one that was not is not
    /// delivered (released, and never written after this); keyed calls not forwarded yet
    /// answer their requests with the same error.
    pub fn wind_down(&self, why: &str) {
        let pending: Vec<Pending> = {
            let mut state = self.state();
            state.client_ids.clear();
            state.to_server.drain().map(|(_, p)| p).collect()
        };
        self.stopping.send_replace(Some(why.to_owned()));
        for pending in pending {
            match pending.waiter {
                Waiter::Client { id, .. } => {
                    self.send_client(error_line(&id, INTERNAL_ERROR, why));
                }
                Waiter::Task(sender) => {
                    let reply = match pending.written {
                        Some(_) => Reply::Lost(format!("{why} before the server answered")),
                        None => Reply::NotDelivered(why.to_owned()),
                    };
                    let _ = sender.send(reply);
                }
            }
        }
    }

    // ---- from the client ----

    /// Answers a client's line that is no message with Y8's error, and logs it.
    fn refuse(&self, bad: &jsonrpc::Malformed) {
        tracing::warn!(
            code = bad.code,
            "malformed message from the client: {}",
            bad.why
        );
        self.send_client(error_line(&bad.id, bad.code, bad.why.clone()));
    }

    /// One line from the client (Y1, Y5, Y8).
    pub fn from_client(self: &Arc<Self>, line: &[u8]) {
        let line = match jsonrpc::utf8(line) {
            Ok(line) => line,
            Err(bad) => return self.refuse(&bad),
        };
        if line.trim().is_empty() {
            return;
        }
        if let Some(answer) = jsonrpc::refuse_batch(line) {
            tracing::warn!("a JSON-RPC batch from the client: refused");
            if let Some(answer) = answer {
                self.send_client(answer);
            }
            return;
        }
        let message = match jsonrpc::parse(line) {
            Ok(message) => message,
            Err(bad) => return self.refuse(&bad),
        };
        match message {
            Message::Request {
                id,
                method,
                body,
                raw,
            } => {
                self.remember_protocol_meta(&body);
                if method == "tools/call" {
                    let (params, tool) = match jsonrpc::tool_call(&body) {
                        Ok(call) => call,
                        Err(why) => {
                            tracing::warn!("a tools/call that names no tool, refused: {why}");
                            self.send_client(error_line(&id, INVALID_PARAMS, why));
                            return;
                        }
                    };
                    // Registered before its task runs: a client that closes its input
                    // right after the request still finds it in progress (the proxy waits
                    // for it before it exits).
                    let (call, cancelled) = self.keyed_started(&id);
                    let router = Arc::clone(self);
                    tokio::spawn(super::keyed::serve(
                        router, id, params, tool, raw, call, cancelled,
                    ));
                } else {
                    if method == "initialize" {
                        self.state().initialize = body.get("params").cloned();
                    }
                    self.forward_request(id, method, &raw);
                }
            }
            Message::Notification {
                method,
                mut body,
                raw,
            } => match method.as_str() {
                "notifications/cancelled" => {
                    if self.cancel_from_client(&mut body, &raw) {
                        self.send_server(None, Value::Object(body).to_string());
                    }
                }
                "notifications/initialized" => {
                    self.state().initialized = true;
                    self.send_server(None, raw.text());
                    self.probe_tools();
                }
                _ => self.send_server(None, raw.text()),
            },
            Message::Response { id, raw, .. } => {
                // The client's answer to a request the server sent it, by the proxy's id.
                let target = id.value().as_u64().and_then(|proxy_id| {
                    let mut state = self.state();
                    let (generation, server_id) = state.to_client.remove(&proxy_id)?;
                    state.server_ids.remove(&(generation, server_id.text()));
                    (generation == state.generation).then_some(server_id)
                });
                match target {
                    Some(server_id) => {
                        self.send_server(None, raw.with_id(server_id.raw()));
                    }
                    None => tracing::warn!(
                        id = %id,
                        "dropped the client's response to a request the server did not send or that died with its process"
                    ),
                }
            }
        }
    }

    fn remember_protocol_meta(&self, body: &Map<String, Value>) {
        let Some(meta) = param(body, "_meta").and_then(Value::as_object) else {
            return;
        };
        let protocol: Map<String, Value> = meta
            .iter()
            .filter(|(name, _)| name.starts_with(PROTOCOL_META_PREFIX))
            .map(|(name, value)| (name.clone(), value.clone()))
            .collect();
        if !protocol.is_empty() {
            self.state().protocol_meta = protocol;
        }
    }

    /// Forwards a client's request (`raw`) with the proxy's id, the answer to go back to
    /// `id`.
    pub fn forward_request(&self, id: Id, method: String, raw: &jsonrpc::Raw) {
        let proxy_id = {
            let mut state = self.state();
            let proxy_id = next_id(&mut state);
            state.client_ids.insert(id.text(), proxy_id);
            state.to_server.insert(
                proxy_id,
                Pending {
                    written: None,
                    waiter: Waiter::Client { id, method },
                },
            );
            proxy_id
        };
        self.send_server(Some(proxy_id), raw.with_id(&proxy_id.to_string()));
    }

    /// Sends the proxy's own request (`method`, `params`) to the server; the reply comes
    /// through the returned receiver.
    pub fn request(&self, method: &str, params: Option<Value>) -> oneshot::Receiver<Reply> {
        let (proxy_id, receiver) = self.request_unsent(method);
        let mut message = Map::new();
        message.insert("jsonrpc".into(), Value::from("2.0"));
        message.insert("id".into(), Value::from(proxy_id));
        message.insert("method".into(), Value::from(method));
        if let Some(params) = params {
            message.insert("params".into(), params);
        }
        self.send_server(Some(proxy_id), Value::Object(message).to_string());
        receiver
    }

    /// Registers a request of the proxy's own (`method`, for logs) that the caller writes
    /// itself: its proxy id, and the receiver of its reply.
    pub fn request_unsent(&self, method: &str) -> (u64, oneshot::Receiver<Reply>) {
        let (sender, receiver) = oneshot::channel();
        let mut state = self.state();
        let proxy_id = next_id(&mut state);
        tracing::debug!(proxy_id, method, "the proxy's own request");
        state.to_server.insert(
            proxy_id,
            Pending {
                written: None,
                waiter: Waiter::Task(sender),
            },
        );
        (proxy_id, receiver)
    }

    /// Sends a client's keyed `tools/call` (`raw`) to the server with the proxy's own id
    /// (Y3, Y5).
    pub fn forward_keyed(&self, call: KeyedCall, raw: &jsonrpc::Raw) -> oneshot::Receiver<Reply> {
        let (sender, receiver) = oneshot::channel();
        let proxy_id = {
            let mut state = self.state();
            let proxy_id = next_id(&mut state);
            state.to_server.insert(
                proxy_id,
                Pending {
                    written: None,
                    waiter: Waiter::Task(sender),
                },
            );
            if let Some(entry) = state.keyed.get_mut(&call.0) {
                entry.proxy_id = Some(proxy_id);
            }
            proxy_id
        };
        self.send_server(Some(proxy_id), raw.with_id(&proxy_id.to_string()));
        receiver
    }

    /// Registers a keyed call of the client's request `client_id`: its handle and its
    /// cancellation flag.
    pub fn keyed_started(&self, client_id: &Id) -> (KeyedCall, watch::Receiver<bool>) {
        let (cancelled, receiver) = watch::channel(false);
        let mut state = self.state();
        let number = next_id(&mut state);
        state.keyed.insert(
            number,
            KeyedEntry {
                client_id: client_id.text(),
                cancelled,
                proxy_id: None,
            },
        );
        (KeyedCall(number), receiver)
    }

    /// The keyed call is over: forgets it and its request to the server.
    pub fn keyed_finished(&self, call: KeyedCall) {
        let mut state = self.state();
        if let Some(entry) = state.keyed.remove(&call.0) {
            if let Some(proxy_id) = entry.proxy_id {
                state.to_server.remove(&proxy_id);
            }
        }
    }

    /// Whether the keyed call was forwarded to the server yet.
    pub fn keyed_forwarded(&self, call: KeyedCall) -> bool {
        self.state()
            .keyed
            .get(&call.0)
            .is_some_and(|entry| entry.proxy_id.is_some())
    }

    /// Translates a client's `notifications/cancelled` to the proxy's id; `false` when it
    /// names no request in flight (then it is dropped: the id means nothing to the server).
    /// A keyed call is flagged cancelled (Y7).
    fn cancel_from_client(&self, body: &mut Map<String, Value>, raw: &jsonrpc::Raw) -> bool {
        let Some(request_id) = raw.param_id("requestId") else {
            return false;
        };
        let text = request_id.text();
        let proxy_id = {
            let state = self.state();
            let mut keyed = state
                .keyed
                .values()
                .filter(|e| e.client_id == text)
                .peekable();
            if keyed.peek().is_some() {
                let mut forwarded = None;
                for entry in keyed {
                    entry.cancelled.send_replace(true);
                    forwarded = forwarded.or(entry.proxy_id);
                }
                forwarded
            } else {
                state.client_ids.get(&text).copied()
            }
        };
        match proxy_id {
            Some(proxy_id) => {
                if let Some(params) = body.get_mut("params").and_then(Value::as_object_mut) {
                    params.insert("requestId".into(), Value::from(proxy_id));
                }
                true
            }
            None => {
                tracing::debug!(request = %request_id, "cancellation of a request not sent to the server: not forwarded");
                false
            }
        }
    }

    // ---- from the server ----

    /// One line from the server process of `generation` (Y1, Y5, Y8).
    pub fn from_server(self: &Arc<Self>, generation: u64, line: &[u8]) {
        let line = match jsonrpc::utf8(line) {
            Ok(line) => line,
            Err(bad) => {
                tracing::warn!("malformed message from the server, dropped: {}", bad.why);
                return;
            }
        };
        if line.trim().is_empty() {
            return;
        }
        let message = match jsonrpc::parse(line) {
            Ok(message) => message,
            Err(bad) => {
                tracing::warn!(
                    code = bad.code,
                    "malformed message from the server, dropped: {}",
                    bad.why
                );
                return;
            }
        };
        match message {
            Message::Response { id, body, raw } => self.answer_from_server(id, body, &raw),
            Message::Request { id, raw, .. } => {
                let proxy_id = {
                    let mut state = self.state();
                    let proxy_id = next_id(&mut state);
                    state.server_ids.insert((generation, id.text()), proxy_id);
                    state.to_client.insert(proxy_id, (generation, id));
                    proxy_id
                };
                self.send_client(raw.with_id(&proxy_id.to_string()));
            }
            Message::Notification {
                method,
                mut body,
                raw,
            } => {
                if method == "notifications/cancelled" {
                    let proxy_id = raw.param_id("requestId").and_then(|id| {
                        self.state()
                            .server_ids
                            .get(&(generation, id.text()))
                            .copied()
                    });
                    match (
                        proxy_id,
                        body.get_mut("params").and_then(Value::as_object_mut),
                    ) {
                        (Some(proxy_id), Some(params)) => {
                            params.insert("requestId".into(), Value::from(proxy_id));
                        }
                        _ => return,
                    }
                    self.send_client(Value::Object(body).to_string());
                } else {
                    self.send_client(raw.text());
                }
                if method == "notifications/tools/list_changed" {
                    self.tools.send_replace(None);
                    self.probe_tools();
                }
            }
        }
    }

    fn answer_from_server(&self, id: Id, mut body: Map<String, Value>, raw: &jsonrpc::Raw) {
        let pending = id.value().as_u64().and_then(|proxy_id| {
            let mut state = self.state();
            let pending = state.to_server.remove(&proxy_id)?;
            if let Waiter::Client { id, method } = &pending.waiter {
                state.client_ids.remove(&id.text());
                if method == "initialize" && body.contains_key("result") {
                    state.initialize_answered = true;
                }
            }
            Some(pending)
        });
        match pending.map(|p| p.waiter) {
            Some(Waiter::Client { id, method }) => {
                if matches!(method.as_str(), "initialize" | "server/discover") {
                    // The one answer the proxy changes (Y1): re-serialised.
                    self.advertise(&mut body);
                    body.insert("id".into(), Value::Null);
                    let advertised = jsonrpc::Raw::from_value(&body);
                    self.send_client(advertised.with_id(id.raw()));
                } else {
                    self.send_client(raw.with_id(id.raw()));
                }
            }
            Some(Waiter::Task(sender)) => {
                let _ = sender.send(Reply::Answer(body));
            }
            None => {
                tracing::warn!(id = %id, "dropped a response from the server to no request in flight")
            }
        }
    }

    /// Adds `capabilities.experimental.idempotency` to an `initialize` (or discovery)
    /// result (Y1, M10).
    fn advertise(&self, body: &mut Map<String, Value>) {
        let Some(Value::Object(result)) = body.get_mut("result") else {
            return;
        };
        let Some(Value::Object(capabilities)) = result.get_mut("capabilities") else {
            return;
        };
        let experimental = capabilities
            .entry("experimental")
            .or_insert_with(|| Value::Object(Map::new()));
        if let Value::Object(experimental) = experimental {
            experimental.insert(
                "idempotency".into(),
                Value::Object(capability(&self.config.conversation_meta)),
            );
        }
    }
}

/// The member `name` of a message's `params`.
fn param<'m>(body: &'m Map<String, Value>, name: &str) -> Option<&'m Value> {
    body.get("params").and_then(|params| params.get(name))
}

fn next_id(state: &mut State) -> u64 {
    state.next_id += 1;
    state.next_id
}
