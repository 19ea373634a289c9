//! MCP servers built with [rmcp](https://docs.rs/rmcp) 3.11 (the official Rust MCP SDK):
//! a retried `tools/call` replays the first call's result instead of running the tool
//! again (cargo feature `rmcp`; contract M1–M11).
//!
//! An MCP client that loses a `tools/call` response (a timeout, a dropped connection)
//! cannot tell whether the tool ran. With this module the retry is safe: the call is keyed,
//! its first complete result is saved, and every retry gets that result back, marked
//! `"idem/status": "replayed"` in its `_meta`.
//!
//! Two ways in:
//!
//! - **Per tool**: `#[idempotent]` on an rmcp `#[tool]` method (placed above `#[tool]`)
//!   keys that tool with the attribute's options (`scope`, `ttl`, `key(…)`, `skip(…)`, …).
//!   The attribute adds a [`McpCall`] extractor to the method and runs its body through it.
//! - **Server-wide**: [`IdempotentServer::new(MyServer::new())`](IdempotentServer) keys
//!   every tool of a handler with no annotation at all, except tools annotated
//!   `readOnlyHint: true`, tools you exclude, and tools that carry their own
//!   `#[idempotent]` (which keep their own settings).
//!
//! # The rules
//!
//! - **Key (M2).** The tool name, the scope value and the members of the arguments object
//!   (all of them, or the attribute's `key(…)`; `skip(…)` leaves members out; the other
//!   members are the fingerprint, S9), derived exactly as `#[idempotent]` and the dispatcher
//!   derive it: a call `send_refund({"order_id": "o1", "amount_cents": 500})` in
//!   conversation `c` has the key of the Rust call `send_refund("o1", 500)` under
//!   `CallContext::new().with_conversation("c")`. Members are keyed as sent: an omitted
//!   member and an explicit `null` are different arguments (a member named in `key(…)`
//!   that is omitted counts as `null`, as a typed argument's `None` does).
//! - **Scope (M3).** `conversation` (the default): `_meta.conversationId` (a non-empty
//!   string; [`IdempotentServerBuilder::conversation_meta_key`] renames it), else the MCP
//!   session id (streamable HTTP's `Mcp-Session-Id`; stdio has none), else the call is
//!   refused with a `missing_scope` error and the tool does not run. `global`: no value.
//!   `call`: `_meta.toolCallId` (MCP has no tool-call id of its own; the JSON-RPC id
//!   restarts with every connection). A named scope `tenant`: `_meta.tenant`. A `_meta`
//!   value that is present but not a non-empty string is a `bad_meta` error. The values
//!   are the client's word: a server with several clients should have them send ids that
//!   are unique across clients (UUIDs), or scope by something it authenticates.
//! - **Client key (M4).** `_meta.idempotencyKey` (a non-empty string of at most 255
//!   characters; the proposal SEP-3182 puts it in `params`, which rmcp's typed
//!   `CallToolRequestParams` has no field for, so it must be sent in `_meta`) replaces the
//!   scope and the key arguments: the call is keyed by the tool name and that key alone, and
//!   every (non-skipped) argument is fingerprint, so reusing the key with other arguments
//!   is a `conflict` error.
//! - **Saved outcome (M7).** The body's answer converted by rmcp's `IntoCallToolResult`: a
//!   complete result is saved and replayed, error results (`isError: true`, as an rmcp tool
//!   returning `Err(String)` gives) included: Stripe replays errors too. A JSON-RPC error
//!   the body returns (`Err(ErrorData)`) is not saved (rmcp's convention: the request was
//!   not served) and the next call runs the tool again; `InputRequired` and `Task`
//!   responses are not final outcomes: handed back unchanged, not saved.
//! - **Not saved on purpose (M8).** An error result made with [`retryable_error`] (the
//!   effect did not happen) is released; one made with [`outcome_unknown_error`] holds the
//!   key as outcome unknown (U1).
//! - **Replay marker (M5).** Every result idem hands back carries `_meta["idem/status"]`
//!   (`"executed"`, `"replayed"` or `"reconciled"`) and `_meta["idem/key"]` (64 hex
//!   digits), added to the tool's own `_meta`; an executed result and its replays differ
//!   only in the status.
//! - **Layer errors (M6)** are tool errors (`isError: true`) whose text says what to do,
//!   with `_meta["idem/error"]` (`in_progress`, `conflict`, `missing_scope`,
//!   `outcome_unknown`, `awaiting_approval`, `denied`, `store_unavailable`, `store_error`,
//!   `bad_meta`, `bad_arguments`, `undecodable_outcome`) and, when a later retry can succeed, `_meta["idem/retryAfterMs"]`.
//!   A concurrent duplicate waits up to the tool's `wait` for the running call's result
//!   and replays it, else gets `in_progress` (S5).
//! - **Cancellation.** rmcp 3.11 does not drop a tool's future on
//!   `notifications/cancelled`: it cancels the request's `CancellationToken` and drops the
//!   response. The body runs to its end and its outcome is saved, so the client's retry
//!   replays it. A body that watches the token and stops early should return
//!   [`retryable_error`] only if its effect did not happen, and [`outcome_unknown_error`]
//!   if it may have. A future dropped for another reason (the runtime shutting down)
//!   follows U4 unchanged.
//! - **Engine.** The tool's own `store = …` (an `#[idempotent]` option), else the engine an
//!   [`IdempotentServer`] was given, else the process default (`IDEM_STORE`), as for every
//!   idem call (the tool's store wins, as it wins over a call context's engine).
//!
//! # Example: the wire
//!
//! A server keyed with [`IdempotentServer`], driven over an in-memory pipe with raw
//! JSON-RPC lines as a client sends them (a real client uses rmcp's client or any MCP
//! client library): the same `tools/call` twice in one conversation runs the tool once.
//!
//! ```
//! # extern crate idem_runtime as idem_agent;
//! use std::sync::atomic::{AtomicUsize, Ordering};
//! use std::sync::Arc;
//! use idem_agent::integrations::rmcp::IdempotentServer;
//! use idem_agent::Engine;
//! use rmcp::model::{CallToolRequestParams, CallToolResponse, CallToolResult, ContentBlock, Tool};
//! use rmcp::{service::RequestContext, ErrorData, RoleServer, ServerHandler, ServiceExt};
//! use serde_json::{json, Value};
//! use tokio::io::{AsyncBufReadExt, AsyncWriteExt, BufReader};
//!
//! /// A handler written by hand; `#[tool_router]` + `#[tool_handler]` generate the same
//! /// `get_tool` and `call_tool` for `#[tool]` methods.
//! struct Payments { refunds: Arc<AtomicUsize> }
//!
//! impl ServerHandler for Payments {
//!     fn get_tool(&self, name: &str) -> Option<Tool> {
//!         (name == "send_refund").then(|| Tool::new(name.to_owned(), "Refunds an order", Arc::default()))
//!     }
//!     async fn call_tool(&self, call: CallToolRequestParams, _: RequestContext<RoleServer>)
//!         -> Result<CallToolResponse, ErrorData> {
//!         let args = call.arguments.unwrap_or_default();
//!         let n = self.refunds.fetch_add(1, Ordering::SeqCst) + 1;
//!         let text = format!("refund #{n}: {} cents on {}", args["amount_cents"], args["order_id"]);
//!         Ok(CallToolResult::success(vec![ContentBlock::text(text)]).into())
//!     }
//! }
//!
//! # tokio::runtime::Runtime::new()?.block_on(async {
//! let refunds = Arc::new(AtomicUsize::new(0));
//! let payments = Payments { refunds: refunds.clone() };
//! let server = IdempotentServer::builder(payments).engine(Engine::in_memory()).build()?;
//! let (client_side, server_side) = tokio::io::duplex(64 * 1024);
//! let (from_server, to_server) = tokio::io::split(server_side);
//! tokio::spawn(async move {
//!     let running = server.serve((from_server, to_server)).await?;
//!     running.waiting().await?;
//!     Ok::<(), Box<dyn std::error::Error + Send + Sync>>(())
//! });
//!
//! let (reader, mut writer) = tokio::io::split(client_side);
//! let mut lines = BufReader::new(reader).lines();
//! let mut send = async |message: Value| -> Result<Value, Box<dyn std::error::Error>> {
//!     writer.write_all(format!("{message}\n").as_bytes()).await?;
//!     if message.get("id").is_none() { return Ok(Value::Null); } // a notification
//!     Ok(serde_json::from_str(&lines.next_line().await?.ok_or("closed")?)?)
//! };
//! send(json!({"jsonrpc": "2.0", "id": 0, "method": "initialize", "params": {
//!     "protocolVersion": "2025-06-18", "capabilities": {},
//!     "clientInfo": {"name": "doc", "version": "0"}}})).await?;
//! send(json!({"jsonrpc": "2.0", "method": "notifications/initialized"})).await?;
//! let call = |id: u32| json!({"jsonrpc": "2.0", "id": id, "method": "tools/call", "params": {
//!     "name": "send_refund", "arguments": {"order_id": "o1", "amount_cents": 500},
//!     "_meta": {"conversationId": "conv_42"}}});
//! let first = send(call(1)).await?;
//! let retry = send(call(2)).await?;
//! assert_eq!(first["result"]["content"][0]["text"], r#"refund #1: 500 cents on "o1""#);
//! assert_eq!(retry["result"]["content"], first["result"]["content"]);
//! assert_eq!(first["result"]["_meta"]["idem/status"], "executed");
//! assert_eq!(retry["result"]["_meta"]["idem/status"], "replayed");
//! assert_eq!(retry["result"]["_meta"]["idem/key"], first["result"]["_meta"]["idem/key"]);
//! assert_eq!(refunds.load(Ordering::SeqCst), 1);
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # })?;
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! ```

mod call;
mod forwarded;
mod handler;
mod intern;
mod marker;
pub mod names;
mod outcome;
mod request;
mod results;
mod server;
mod settings;

pub use call::{ArgumentSelection, McpCall};
pub use forwarded::{ForwardedCall, ServerAnswer};

/// What an rmcp tool method marked `#[idempotent]` returns once the attribute rewrote it:
/// rmcp's own result of a tool call (a tool error is `Ok` with `isError: true`; `Err` is a
/// JSON-RPC error).
#[doc(hidden)]
pub type ToolResult = Result<::rmcp::model::CallToolResponse, ::rmcp::ErrorData>;
pub use intern::interned_tool_specs;
pub use marker::tool_meta;
pub use results::{outcome_unknown_error, retryable_error};
pub use server::{capability, IdempotentServer, IdempotentServerBuilder};
pub use settings::ServerConfigError;
