//! A `tools/call` that a proxy forwards to another MCP server, as JSON: keyed and saved
//! exactly as an rmcp tool's call, with the other server's answer as the body's outcome
//! (contract Y3, M2–M8).
//!
//! The answer is kept as the JSON object the server sent, unknown members included, so a
//! replay hands back what the server said, whatever protocol version or extension it
//! speaks. It is saved in the same envelope as an rmcp tool's `CallToolResult`, so a Rust
//! server and a proxied one can share a store.

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use ::rmcp::model::{CallToolResult, JsonObject, RequestMetaObject};
use serde_json::Value;

use super::call::{as_handed_out, ArgumentSelection, McpCall};
use super::intern::intern;
use super::names::{ERROR, KEY, OUTCOME_UNKNOWN, RETRYABLE, STATUS};
use super::outcome::McpFailure;
use super::results::{layer_error, status_name};
use super::settings::{check_conversation_meta_key, check_spec, CallSettings, ServerConfigError};
use crate::engine::Engine;
use crate::key::IdempotencyKey;
use crate::outcome::CallStatus;
use crate::spec::{OnUnknown, ToolSpec};

/// What the other server did with a forwarded `tools/call` (Y3, Y6).
#[derive(Debug, Clone, PartialEq)]
pub enum ServerAnswer {
    /// The JSON-RPC `result` object it answered: the outcome, saved and replayed unless
    /// M8's markers or a `resultType` other than `"complete"` say otherwise.
    Result(JsonObject),
    /// The JSON-RPC `error` object it answered (`{"code": …, "message": …}`): the request was
    /// not served; handed back, not saved, the claim released (M7).
    Error(Value),
    /// The request was never delivered (the server was not running): like [`Error`](Self::Error),
    /// this JSON-RPC error object is handed back and the claim released.
    NotDelivered(Value),
    /// The request was written to the server and its answer was lost (the server exited):
    /// whether the effect happened is unknown (U1); `reason` says why, for the client's text.
    Lost {
        /// Why the answer was lost (`"the MCP server exited (status 9)"`), for the client's
        /// text: "the answer to `TOOL` was lost (REASON)".
        reason: String,
    },
}

impl ServerAnswer {
    /// Sorts the server's JSON-RPC response `message` to a forwarded `tools/call` (the
    /// whole message; its `id` is ignored): a `result` object is [`Result`](Self::Result),
    /// an `error` (beside no `result` or a `null` one) is [`Error`](Self::Error). A response with neither, or whose `result` is
    /// not an object, is no MCP answer, yet the server did receive and serve the request:
    /// whether the effect happened is unknown, so it is [`Lost`](Self::Lost) (U1), never a
    /// release.
    pub fn from_response(mut message: JsonObject) -> Self {
        match (message.remove("result"), message.remove("error")) {
            (Some(Value::Object(result)), _) => ServerAnswer::Result(result),
            (None | Some(Value::Null), Some(error)) => ServerAnswer::Error(error),
            (Some(other), _) => ServerAnswer::Lost {
                reason: format!(
                    "the MCP server answered with a result that is not an object: {}",
                    shorten(&other.to_string())
                ),
            },
            (None, None) => ServerAnswer::Lost {
                reason: "the MCP server answered with neither a result nor an error".to_owned(),
            },
        }
    }

    /// The answer to a call its client cancelled (Y7): a JSON-RPC [`Error`](Self::Error)
    /// then does not say the request went unserved (MCP's -32800 "request cancelled" may
    /// come after the work began), so `on_cancel` decides it as it decides a cancelled call
    /// with no answer: [`OnCancel::Hold`](crate::OnCancel::Hold) makes it [`Lost`](Self::Lost) (an unknown
    /// outcome, U1, U4), [`OnCancel::Release`](crate::OnCancel::Release) leaves it an error (the claim released). A
    /// result, and every other answer, is unchanged.
    pub fn after_cancellation(self, on_cancel: crate::OnCancel) -> Self {
        match (self, on_cancel) {
            (ServerAnswer::Error(error), crate::OnCancel::Hold) => ServerAnswer::Lost {
                reason: format!(
                    "the client cancelled the call, and the MCP server's error answer ({}) does not say whether the effect happened",
                    shorten(&error.to_string())
                ),
            },
            (answer, _) => answer,
        }
    }
}

/// At most 200 characters of `text`, for messages.
fn shorten(text: &str) -> Cow<'_, str> {
    match text.char_indices().nth(200) {
        Some((end, _)) => Cow::Owned(format!("{}…", &text[..end])),
        None => Cow::Borrowed(text),
    }
}

/// A `tools/call` as a proxy received it, to be forwarded under idem's call protocol.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::integrations::rmcp::{ForwardedCall, ServerAnswer};
/// use idem_agent::{Engine, ToolSpec};
/// use serde_json::json;
///
/// # tokio::runtime::Runtime::new()?.block_on(async {
/// let engine = Engine::in_memory();
/// let spec = ForwardedCall::spec("send_refund", &ToolSpec::new(""))?;
/// let call = || {
///     let params = json!({"name": "send_refund", "arguments": {"order_id": "o1"},
///                         "_meta": {"conversationId": "c1"}});
///     ForwardedCall::from_params(params.as_object().unwrap(), Some(engine.clone()), "conversationId")
/// };
/// let answer = || async {
///     let result = json!({"content": [{"type": "text", "text": "refund re_1"}]});
///     ServerAnswer::Result(result.as_object().unwrap().clone())
/// };
/// let first = call().run(spec, None, answer()).await.unwrap();
/// let retry = call().run(spec, None, async { unreachable!("replayed") }).await.unwrap();
/// assert_eq!(first["_meta"]["idem/status"], "executed");
/// assert_eq!(retry["_meta"]["idem/status"], "replayed");
/// assert_eq!(retry["content"], first["content"]);
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// # })?;
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
#[derive(Debug)]
pub struct ForwardedCall {
    call: McpCall,
    /// The request carries MCP's discovery-era protocol version in `_meta` (2026-07-28):
    /// its results must say `resultType`.
    result_type: bool,
    /// What `arguments` was when it was neither absent, `null` nor an object ("an array"…).
    bad_arguments: Option<&'static str>,
}

/// JSON-RPC's "invalid params".
const INVALID_PARAMS: i64 = -32602;

/// The request `_meta` member of MCP's discovery era (2026-07-28) naming the protocol
/// version; a client that sends it expects every result to carry `resultType`.
const PROTOCOL_VERSION_META: &str = "io.modelcontextprotocol/protocolVersion";

impl ForwardedCall {
    /// The call whose JSON-RPC `params` are `params` (`name`, `arguments`, `_meta`), keyed
    /// in `engine` (else the process default, `IDEM_STORE`) with the conversation id read
    /// from `_meta[conversation_meta_key]` (M3). A `name` that is not a string is the empty
    /// tool name; `arguments` absent or `null` are no arguments; `arguments` of another
    /// kind than an object make [`run`](Self::run) refuse the call (MCP's arguments are an
    /// object, and two calls must not share a key because idem could not read theirs).
    pub fn from_params(
        params: &JsonObject,
        engine: Option<Engine>,
        conversation_meta_key: &str,
    ) -> Self {
        let tool = params.get("name").and_then(Value::as_str).unwrap_or("");
        let arguments = params.get("arguments").and_then(Value::as_object).cloned();
        let meta = params
            .get("_meta")
            .and_then(Value::as_object)
            .cloned()
            .map(RequestMetaObject::from)
            .unwrap_or_default();
        let settings = CallSettings {
            engine,
            conversation_meta_key: Arc::from(conversation_meta_key),
        };
        let result_type = meta.contains_key(PROTOCOL_VERSION_META);
        let bad_arguments = match params.get("arguments") {
            None | Some(Value::Null | Value::Object(_)) => None,
            Some(Value::Bool(_)) => Some("a boolean"),
            Some(Value::Number(_)) => Some("a number"),
            Some(Value::String(_)) => Some("a string"),
            Some(Value::Array(_)) => Some("an array"),
        };
        ForwardedCall {
            call: McpCall::from_parts(Cow::Owned(tool.to_owned()), arguments, meta, settings),
            result_type,
            bad_arguments,
        }
    }

    /// The `&'static` spec the call protocol takes for tool `name` with the settings of
    /// `template` (whose own name is ignored), interned process-wide once per distinct
    /// (name, settings): a proxy calls it once per tool and configuration.
    ///
    /// # Errors
    /// What [`IdempotentServerBuilder`](super::IdempotentServerBuilder) refuses (S8, L1): a
    /// zero TTL or one shorter than the lease, a zero lease, a zero heartbeat or one not shorter than the
    /// lease, a span with a fraction of a millisecond; and the empty tool name.
    pub fn spec(name: &str, template: &ToolSpec) -> Result<&'static ToolSpec, ServerConfigError> {
        if name.is_empty() {
            return Err(ServerConfigError::EmptyToolName);
        }
        check_spec(template, Some(name))?;
        Ok(intern(name, template))
    }

    /// Checks a `_meta` member name for the conversation id, as
    /// [`IdempotentServerBuilder::conversation_meta_key`](super::IdempotentServerBuilder::conversation_meta_key)
    /// does.
    ///
    /// # Errors
    /// [`ServerConfigError::BadConversationMetaKey`] for the empty name and for
    /// `idempotencyKey` and `toolCallId`, which idem reads for other things.
    pub fn check_conversation_meta_key(name: &str) -> Result<(), ServerConfigError> {
        check_conversation_meta_key(name)
    }

    /// Reads a `conversation` scope from the MCP session `session` (streamable HTTP's
    /// `Mcp-Session-Id`) when the request's `_meta` names no conversation, as an rmcp
    /// server's call does (M3): the conversation is `mcp-session:<session>`.
    pub fn with_session(mut self, session: impl Into<String>) -> Self {
        self.call = self.call.with_session(session.into());
        self
    }

    /// The tool's name, as the client called it.
    pub fn tool(&self) -> &str {
        self.call.tool()
    }

    /// Runs the call under idem's call protocol (Y3): keys it by the tool name, the scope
    /// value and the arguments (all members, or those `key` names; the others fingerprint),
    /// or by the client's `_meta.idempotencyKey`; claims the key; awaits `forward` (which
    /// sends the request to the server and waits for its answer) only when this call owns
    /// the claim; saves a final result; and returns what the client gets:
    ///
    /// - `Ok(result)`: a JSON-RPC `result` object: the server's result with
    ///   `_meta["idem/status"]` and `_meta["idem/key"]` (M5), a replay of a saved one, or a
    ///   layer error (`isError: true`, `_meta["idem/error"]`, M6); a lost answer is an
    ///   `outcome_unknown` tool error, the key held (U1);
    /// - `Err(error)`: a JSON-RPC `error` object the server answered, or the
    ///   [`ServerAnswer::NotDelivered`] one: the claim was released; or JSON-RPC's invalid
    ///   params (-32602) for `arguments` that are not an object, before anything is claimed
    ///   or forwarded.
    ///
    /// Dropping the future after `forward` began leaves the outcome as the spec's
    /// `on_cancel` says (U4): how a proxy ends a cancelled call the server never answered.
    pub async fn run<F>(
        self,
        spec: &'static ToolSpec,
        key: Option<&'static [&'static str]>,
        forward: F,
    ) -> Result<JsonObject, Value>
    where
        F: Future<Output = ServerAnswer>,
    {
        if let Some(kind) = self.bad_arguments {
            return Err(serde_json::json!({
                "code": INVALID_PARAMS,
                "message": format!(
                    "the `arguments` of tools/call `{}` must be an object, not {kind}: idem keys a call by its arguments object; the call was not forwarded",
                    self.tool()
                ),
            }));
        }
        let selection = ArgumentSelection {
            key,
            ..ArgumentSelection::ALL
        };
        let (prepared, context, refused) = match self.call.keyed(spec, selection) {
            Ok(keyed) => keyed,
            Err(refusal) => return Ok(to_object(*refusal, self.result_type)),
        };
        let key = prepared.key().clone();
        let result_type = self.result_type;
        let outcome = prepared
            .run::<JsonObject, McpFailure<JsonObject, JsonObject, Value>, _>(classify(
                spec,
                result_type,
                forward,
            ))
            .await;
        match outcome {
            Ok(result) => {
                let (result, status) = as_handed_out(&context, result);
                Ok(with_status(result, status_name(status), &key))
            }
            Err(McpFailure::Idem(error)) => Ok(to_object(
                layer_error(&error, Some(&key), refused),
                self.result_type,
            )),
            Err(McpFailure::Protocol(error)) => Err(error),
            Err(McpFailure::Retryable(result) | McpFailure::OutcomeUnknown(result)) => {
                Ok(with_status(result, status_name(CallStatus::Executed), &key))
            }
            Err(McpFailure::NotFinal(result)) => Ok(result),
        }
    }
}

/// Awaits the server's answer and sorts it as M7/M8 sort an rmcp tool's (Y3, Y6).
async fn classify<F>(
    spec: &ToolSpec,
    result_type: bool,
    forward: F,
) -> Result<JsonObject, McpFailure<JsonObject, JsonObject, Value>>
where
    F: Future<Output = ServerAnswer>,
{
    match forward.await {
        ServerAnswer::Result(result) if !is_final(&result) => Err(McpFailure::NotFinal(result)),
        ServerAnswer::Result(result) if has_marker(&result, OUTCOME_UNKNOWN) => {
            Err(McpFailure::OutcomeUnknown(result))
        }
        ServerAnswer::Result(result) if has_marker(&result, RETRYABLE) => {
            Err(McpFailure::Retryable(result))
        }
        ServerAnswer::Result(result) => Ok(result),
        ServerAnswer::Error(error) | ServerAnswer::NotDelivered(error) => {
            Err(McpFailure::Protocol(error))
        }
        ServerAnswer::Lost { reason } => {
            Err(McpFailure::OutcomeUnknown(lost(spec, &reason, result_type)))
        }
    }
}

/// A result with no `resultType`, or `"complete"`, is final (MCP: a client treats an absent
/// `resultType` as `complete`); `input_required` and task results are not.
fn is_final(result: &JsonObject) -> bool {
    match result.get("resultType") {
        None | Some(Value::Null) => true,
        Some(Value::String(kind)) => kind == "complete",
        Some(_) => false,
    }
}

fn has_marker(result: &JsonObject, marker: &str) -> bool {
    meta_of(result)
        .and_then(|meta| meta.get(marker))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

fn meta_of(result: &JsonObject) -> Option<&JsonObject> {
    result.get("_meta").and_then(Value::as_object)
}

/// The tool error a client gets for a call whose answer was lost (Y6): `outcome_unknown`,
/// marked so the key is held (U1); its text says what follows under the tool's `on_unknown`
/// (U2, U2a).
fn lost(spec: &ToolSpec, reason: &str, result_type: bool) -> JsonObject {
    let tool = spec.name;
    let text = match spec.on_unknown {
        OnUnknown::Rerun => format!(
            "the answer to `{tool}` was lost ({reason}): whether it took effect is unknown. idem runs it again with the same idempotency key once the claim's lease ({} ms) lapses; retry after that",
            spec.lease.as_millis()
        ),
        _ => format!(
            "the answer to `{tool}` was lost ({reason}): whether it took effect is unknown. idem holds this idempotency key until a person decides (`idem show KEY --history`, then `idem resolve KEY --applied|--not-applied`); do not retry this action, in this or another form, until then"
        ),
    };
    let mut result = JsonObject::new();
    result.insert(
        "content".into(),
        serde_json::json!([{"type": "text", "text": text}]),
    );
    result.insert("isError".into(), Value::Bool(true));
    if result_type {
        result.insert("resultType".into(), Value::from("complete"));
    }
    let mut meta = JsonObject::new();
    meta.insert(ERROR.into(), Value::from("outcome_unknown"));
    meta.insert(OUTCOME_UNKNOWN.into(), Value::Bool(true));
    result.insert("_meta".into(), Value::Object(meta));
    result
}

/// `result` with `_meta["idem/status"]` and `_meta["idem/key"]` added to the server's own
/// `_meta` (M5). A `_meta` that is not an object (which MCP does not allow) is replaced.
fn with_status(mut result: JsonObject, status: &str, key: &IdempotencyKey) -> JsonObject {
    let meta = result
        .entry("_meta")
        .or_insert_with(|| Value::Object(JsonObject::new()));
    if !meta.is_object() {
        *meta = Value::Object(JsonObject::new());
    }
    if let Value::Object(meta) = meta {
        meta.insert(STATUS.into(), Value::from(status));
        meta.insert(KEY.into(), Value::from(key.as_str()));
    }
    result
}

/// A layer error as the JSON object a client gets: with the `resultType` rmcp's constructors
/// add only for a client of MCP's discovery era (`result_type`), which requires it; older
/// protocol versions have no such member.
fn to_object(mut result: CallToolResult, result_type: bool) -> JsonObject {
    if !result_type {
        result.result_type = None;
    }
    match serde_json::to_value(result) {
        Ok(Value::Object(object)) => object,
        _ => JsonObject::new(),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use serde_json::json;

    // pins Y7, U4: after a cancellation an error answer is unknown under hold, an error under
    // release; a result stays a result
    #[test]
    fn a_cancelled_calls_error_answer_follows_on_cancel() {
        let error = || ServerAnswer::Error(json!({"code": -32800, "message": "request cancelled"}));
        assert!(matches!(
            error().after_cancellation(crate::OnCancel::Hold),
            ServerAnswer::Lost { reason } if reason.contains("-32800")
        ));
        assert!(matches!(
            error().after_cancellation(crate::OnCancel::Release),
            ServerAnswer::Error(_)
        ));
        assert!(matches!(
            ServerAnswer::Result(JsonObject::new()).after_cancellation(crate::OnCancel::Hold),
            ServerAnswer::Result(_)
        ));
    }

    fn object(value: Value) -> JsonObject {
        value.as_object().unwrap().clone()
    }

    // pins Y3: results with a resultType other than complete are not final
    #[test]
    fn final_results() {
        assert!(is_final(&object(json!({"content": []}))));
        assert!(is_final(&object(json!({"resultType": "complete"}))));
        assert!(!is_final(&object(json!({"resultType": "input_required"}))));
        assert!(!is_final(&object(json!({"resultType": 3}))));
    }

    // pins Y3, U1: a response that is neither a result object nor an error was served all
    // the same: its outcome is unknown, never a release
    #[test]
    fn responses_are_sorted() {
        let sorted = |v: Value| ServerAnswer::from_response(object(v));
        assert_eq!(
            sorted(json!({"id": 1, "result": {"content": []}})),
            ServerAnswer::Result(object(json!({"content": []})))
        );
        assert_eq!(
            sorted(json!({"id": 1, "error": {"code": -1}})),
            ServerAnswer::Error(json!({"code": -1}))
        );
        assert_eq!(
            sorted(json!({"result": null, "error": {"code": -2}})),
            ServerAnswer::Error(json!({"code": -2}))
        );
        for odd in [
            json!({"id": 1, "result": 42}),
            json!({"id": 1}),
            json!({"result": null}),
        ] {
            assert!(
                matches!(sorted(odd.clone()), ServerAnswer::Lost { .. }),
                "{odd}"
            );
        }
        let ServerAnswer::Lost { reason } = sorted(json!({"result": "x".repeat(1000)})) else {
            unreachable!()
        };
        assert!(
            reason.len() < 300 && reason.contains("not an object"),
            "{reason}"
        );
    }

    // pins Y3: arguments that are not an object are refused before any claim, never
    // keyed as no arguments (two such calls would share a key)
    #[tokio::test]
    async fn arguments_that_are_not_an_object_are_refused() {
        let engine = Engine::in_memory();
        let spec = ForwardedCall::spec("send", &ToolSpec::new("")).unwrap();
        for arguments in [json!([1]), json!("x"), json!(3), json!(true)] {
            let params = json!({"name": "send", "arguments": arguments,
                                "_meta": {"conversationId": "c"}});
            let call = ForwardedCall::from_params(
                params.as_object().unwrap(),
                Some(engine.clone()),
                "conversationId",
            );
            let error = call
                .run(spec, None, async { unreachable!("not forwarded") })
                .await
                .unwrap_err();
            assert_eq!(error["code"], INVALID_PARAMS, "{error}");
            assert!(error["message"]
                .as_str()
                .unwrap()
                .contains("must be an object"));
        }
        for arguments in [Value::Null, json!({})] {
            let params = json!({"name": "send", "arguments": arguments,
                                "_meta": {"conversationId": "c"}});
            let call = ForwardedCall::from_params(
                params.as_object().unwrap(),
                Some(engine.clone()),
                "conversationId",
            );
            let answer = ServerAnswer::Result(object(json!({"content": []})));
            assert!(call.run(spec, None, async { answer }).await.is_ok());
        }
    }

    // pins Y3, M6: a proxied call without a scope is refused with a text that names the
    // `_meta` member to send and no transport session (a proxy's call has none)
    #[tokio::test]
    async fn a_call_without_a_conversation_is_told_what_to_send() {
        let spec = ForwardedCall::spec("send", &ToolSpec::new("")).unwrap();
        let params = json!({"name": "send", "arguments": {}});
        let call = ForwardedCall::from_params(
            params.as_object().unwrap(),
            Some(Engine::in_memory()),
            "threadId",
        );
        let refused = call
            .run(spec, None, async { unreachable!("not forwarded") })
            .await
            .unwrap();
        assert_eq!(refused["_meta"]["idem/error"], "missing_scope");
        let text = refused["content"][0]["text"].as_str().unwrap();
        assert!(text.contains("`_meta.threadId`"), "{text}");
        assert!(!text.contains("session"), "{text}");
    }

    // pins M5, Y3: the markers are added to the server's own _meta
    #[test]
    fn status_markers_keep_the_servers_meta() {
        let key = IdempotencyKey::from_hex(&"a".repeat(64)).unwrap();
        let result = with_status(object(json!({"_meta": {"own": 1}})), "executed", &key);
        assert_eq!(result["_meta"]["own"], 1);
        assert_eq!(result["_meta"]["idem/status"], "executed");
        let result = with_status(object(json!({"_meta": 7})), "replayed", &key);
        assert_eq!(result["_meta"]["idem/key"], "a".repeat(64));
    }
}
