//! One `tools/call` under idem's call protocol: the extractor the `#[idempotent]` attribute
//! adds to an rmcp `#[tool]` method, and the run that keys, claims, saves and replays
//! (contract M1–M8).

use std::borrow::Cow;
use std::future::Future;
use std::sync::Arc;

use ::rmcp::handler::server::common::FromContextPart;
use ::rmcp::handler::server::tool::{IntoCallToolResult, ToolCallContext};
use ::rmcp::model::{CallToolResponse, CallToolResult, JsonObject, RequestMetaObject};
use ::rmcp::service::RequestContext;
use ::rmcp::{ErrorData, RoleServer};
use serde_json::Value;

use super::names::{CLIENT_KEY_SCOPE, SESSION_PREFIX, TOOL_CALL_ID};
use super::outcome::{classify, McpFailure};
use super::request::{client_key, meta_string, session_id, MetaProblem};
use super::results::{bad_configuration, bad_meta, layer_error, status_name, with_status, Refused};
use super::settings::{CallSettings, KeyedByServer};
use crate::args::ArgsBuilder;
use crate::call::{prepare, PreparedCall};
use crate::canonical::CanonicalError;
use crate::context::{AttemptRecord, CallContext, DerivedKey};
use crate::envelope::Envelope;
use crate::error::Error;
use crate::key::{derive_key_in, ScopeComponent};
use crate::label::{RecordLabel, ScopePath};
use crate::outcome::CallStatus;
use crate::scope::Scope;
use crate::spec::ToolSpec;

/// What idem needs of one MCP `tools/call`: the tool name, a copy of its arguments, the
/// request's `_meta`, the MCP session id (streamable HTTP), and the settings an
/// [`IdempotentServer`](super::IdempotentServer) put in the request's extensions (engine,
/// conversation `_meta` member).
///
/// It is an rmcp extractor: `#[idempotent]` on an rmcp `#[tool]` method adds a parameter of
/// this type after the receiver and runs the body through it. Extracting it never fails and
/// takes nothing from the call (the arguments are copied, so rmcp's `Parameters<T>`
/// extractor, which runs after it, still gets them; `_meta` is copied, so a
/// `RequestMetaObject` extractor still gets it).
#[derive(Debug)]
pub struct McpCall {
    tool: Cow<'static, str>,
    arguments: Option<JsonObject>,
    meta: RequestMetaObject,
    session: Option<String>,
    settings: CallSettings,
    keyed_by_server: bool,
    /// The server's transport may give the call a session, which is the conversation when
    /// `_meta` names none (M3): a `missing_scope` error says so. A proxy's call has none.
    transport_sessions: bool,
}

/// A saved or replayed `result` of the call keyed in `context`, as every caller gets it, and
/// its status: the first caller gets it as a replay will return it (M5, S12).
pub(crate) fn as_handed_out<T>(context: &CallContext, result: T) -> (T, CallStatus)
where
    T: serde::Serialize + serde::de::DeserializeOwned,
{
    let status = context
        .last_outcome()
        .map_or(CallStatus::Executed, |record| record.status);
    match status {
        CallStatus::Replayed => (result, status),
        _ => (Envelope::as_replayed(result), status),
    }
}

/// Which members of a call's arguments object form its key (K8): all of them (`key: None`),
/// or only those named in `key`; the others form the fingerprint (S9). Members named in
/// `skip` are in neither. Written by the `#[idempotent]` attribute from its `key(…)` and
/// `skip(…)` options.
#[doc(hidden)]
#[derive(Debug, Clone, Copy, Default)]
pub struct ArgumentSelection {
    /// The identity members; `None`: every member that is not skipped.
    pub key: Option<&'static [&'static str]>,
    /// Members left out of the key and the fingerprint.
    pub skip: &'static [&'static str],
    /// The JSON schema of the tool's arguments (rmcp's `schema_for_type::<T>` of its
    /// `Parameters<T>`), when the attribute could name it: the names in `key` and `skip`
    /// are checked against its `properties` before the tool runs (M2).
    pub schema: Option<fn() -> Arc<JsonObject>>,
}

impl ArgumentSelection {
    /// Every member is part of the key.
    pub const ALL: ArgumentSelection = ArgumentSelection {
        key: None,
        skip: &[],
        schema: None,
    };

    /// The first name in `key` or `skip` that is not a property of the arguments' schema,
    /// as a message naming it and the members there are (M2, as K8 is checked at compile
    /// time for a fn's parameters). `Ok` when there is no schema or it lists no properties.
    fn check_names(&self, tool: &str) -> Result<(), String> {
        let Some(schema) = self.schema else {
            return Ok(());
        };
        let schema = schema();
        let Some(Value::Object(properties)) = schema.get("properties") else {
            return Ok(());
        };
        let named = self
            .key
            .unwrap_or_default()
            .iter()
            .map(|name| ("key", *name))
            .chain(self.skip.iter().map(|name| ("skip", *name)));
        for (option, name) in named {
            if !properties.contains_key(name) {
                let members: Vec<&str> = properties.keys().map(String::as_str).collect();
                return Err(format!(
                    "tool `{tool}` is misconfigured: its #[idempotent] option `{option}(…)` names `{name}`, which is not a member of the tool's arguments (they are: {}); fix the attribute; the tool did not run",
                    members.join(", ")
                ));
            }
        }
        Ok(())
    }
}

impl<S> FromContextPart<ToolCallContext<'_, S>> for McpCall {
    fn from_context_part(context: &mut ToolCallContext<'_, S>) -> Result<Self, ErrorData> {
        Ok(McpCall::new(
            context.name.clone(),
            context.arguments.clone(),
            &context.request_context,
        ))
    }
}

impl McpCall {
    /// The call `tool(arguments)` made with `context` (its `_meta`, extensions).
    pub(crate) fn new(
        tool: Cow<'static, str>,
        arguments: Option<JsonObject>,
        context: &RequestContext<RoleServer>,
    ) -> Self {
        McpCall {
            tool,
            arguments,
            meta: context.meta.clone(),
            session: session_id(&context.extensions),
            settings: context
                .extensions
                .get::<CallSettings>()
                .cloned()
                .unwrap_or_default(),
            keyed_by_server: context.extensions.get::<KeyedByServer>().is_some(),
            transport_sessions: true,
        }
    }

    /// The call `tool(arguments)` with request `_meta` `meta` and `settings`, as a proxy
    /// received it (no session: stdio has none).
    pub(crate) fn from_parts(
        tool: Cow<'static, str>,
        arguments: Option<JsonObject>,
        meta: RequestMetaObject,
        settings: CallSettings,
    ) -> Self {
        McpCall {
            tool,
            arguments,
            meta,
            session: None,
            settings,
            keyed_by_server: false,
            transport_sessions: false,
        }
    }

    /// The call with MCP session id `session`.
    pub(crate) fn with_session(mut self, session: String) -> Self {
        self.session = Some(session);
        self
    }

    /// Adds the members of a params-level `_meta` that the request context's `_meta` does not
    /// have (rmcp moves a request's `_meta` into the context; a handler called directly may
    /// still carry it in its params).
    pub(crate) fn with_params_meta(mut self, params_meta: Option<&RequestMetaObject>) -> Self {
        if let Some(params_meta) = params_meta {
            for (name, value) in params_meta.iter() {
                if !self.meta.contains_key(name) {
                    self.meta.insert(name.clone(), value.clone());
                }
            }
        }
        self
    }

    /// The tool's name, as the client called it.
    pub fn tool(&self) -> &str {
        &self.tool
    }

    /// The call's arguments object, as sent (`None` when the request had none).
    pub fn arguments(&self) -> Option<&JsonObject> {
        self.arguments.as_ref()
    }

    /// The request's `_meta`.
    pub fn meta(&self) -> &RequestMetaObject {
        &self.meta
    }

    /// The MCP session id (the `Mcp-Session-Id` of a streamable HTTP session), if the
    /// transport has sessions.
    pub fn session_id(&self) -> Option<&str> {
        self.session.as_deref()
    }

    /// Runs `body` under idem's call protocol for this call (M1–M8): keys it (the tool name
    /// `spec.name`, the scope value from `_meta` or the session, the members of the
    /// arguments object `arguments` selects; or the client's `_meta.idempotencyKey`),
    /// claims the key, runs `body` once, saves its complete result and returns it with
    /// `_meta["idem/status"] = "executed"`; a later call with the key gets the saved result
    /// back with `"replayed"`, without running `body`. The idempotency layer's own errors
    /// come back as tool errors (`isError: true`) with `_meta["idem/error"]`.
    ///
    /// The future is `Send` when `body` is. `Err` is only a JSON-RPC error `body` itself
    /// returned (M7).
    #[doc(hidden)]
    pub async fn run<R, F>(
        self,
        spec: &'static ToolSpec,
        arguments: ArgumentSelection,
        body: F,
    ) -> Result<CallToolResponse, ErrorData>
    where
        F: Future<Output = R>,
        R: IntoCallToolResult,
    {
        if self.keyed_by_server {
            // The IdempotentServer around this handler keys the call already (M9).
            return body.await.into_call_tool_result();
        }
        let (prepared, context, refused) = match self.keyed(spec, arguments) {
            Ok(keyed) => keyed,
            Err(refusal) => return Ok((*refusal).into()),
        };
        let key = prepared.key().clone();
        // rmcp runs a sync tool inline in its handler's future, which then never returns
        // `Pending` while the tool runs: the lease is renewed from idem's renewal thread
        // during each poll as well (L1).
        match prepared.run_may_block(classify(body)).await {
            Ok(result) => {
                let (result, status) = as_handed_out(&context, result);
                Ok(with_status(result, status_name(status), &key).into())
            }
            Err(McpFailure::Idem(error)) => Ok(layer_error(&error, Some(&key), refused).into()),
            Err(McpFailure::Protocol(error)) => Err(error),
            Err(McpFailure::Retryable(result) | McpFailure::OutcomeUnknown(result)) => {
                Ok(with_status(result, status_name(CallStatus::Executed), &key).into())
            }
            Err(McpFailure::NotFinal(response)) => Ok(response),
        }
    }

    /// Keys the call (M2–M4) and prepares it under the call protocol: the prepared call, the
    /// context it was keyed in, and what a layer error's text says about it. `Err` is the
    /// tool error that refuses the call before anything is claimed (a misconfigured
    /// selection, an unusable `_meta` member, a missing scope, bad arguments, no engine).
    pub(crate) fn keyed(
        &self,
        spec: &'static ToolSpec,
        arguments: ArgumentSelection,
    ) -> Result<(PreparedCall, CallContext, Refused<'_>), Box<CallToolResult>> {
        if let Err(message) = arguments.check_names(spec.name) {
            return Err(Box::new(bad_configuration(message)));
        }
        let mut refused = Refused {
            conversation_meta_key: &self.settings.conversation_meta_key,
            client_key: false,
            transport_sessions: self.transport_sessions,
        };
        let (context, client_key) = match self.call_context(spec) {
            Ok(found) => found,
            Err(problem) => return Err(Box::new(bad_meta(problem.message()))),
        };
        refused.client_key = client_key.is_some();
        let keyed = match client_key {
            Some(client_key) => self.prepare_with_client_key(spec, arguments, context, client_key),
            None => self.prepare(spec, arguments, context),
        };
        match keyed {
            Ok((prepared, context)) => Ok((prepared, context, refused)),
            Err(error) => Err(Box::new(layer_error(&error, None, refused))),
        }
    }

    /// The call context the key is derived under (M3), and the client's key if it sent one
    /// (M4). Only the `_meta` members the tool's scope reads are looked at.
    fn call_context(&self, spec: &ToolSpec) -> Result<(CallContext, Option<String>), MetaProblem> {
        let client_key = client_key(&self.meta)?.map(str::to_owned);
        let mut context = CallContext::new();
        if let Some(engine) = &self.settings.engine {
            context = context.with_engine(engine.clone());
        }
        if client_key.is_some() {
            return Ok((context, client_key));
        }
        let parts = match &spec.scope {
            Scope::Composite { parts, .. } => parts,
            single => std::slice::from_ref(single),
        };
        for part in parts {
            match part {
                Scope::Global | Scope::Composite { .. } => {}
                Scope::Conversation => {
                    if let Some(conversation) = self.conversation()? {
                        context = context.with_conversation(conversation);
                    }
                }
                Scope::Call => {
                    if let Some(conversation) = self.conversation()? {
                        context = context.with_conversation(conversation);
                    }
                    if let Some(call) = meta_string(&self.meta, TOOL_CALL_ID)? {
                        context = context.with_tool_call(call);
                    }
                }
                Scope::Named(name) => {
                    if let Some(value) = meta_string(&self.meta, name)? {
                        context = context.with_scope(*name, value);
                    }
                }
            }
        }
        Ok((context, None))
    }

    /// The conversation id: `_meta[conversation key]`, else the MCP session's id (prefixed
    /// `mcp-session:`), else none (M3).
    fn conversation(&self) -> Result<Option<String>, MetaProblem> {
        let from_meta = meta_string(&self.meta, &self.settings.conversation_meta_key)?;
        if from_meta.is_some_and(|id| id.starts_with(SESSION_PREFIX)) {
            return Err(MetaProblem::Reserved {
                name: self.settings.conversation_meta_key.to_string(),
                prefix: SESSION_PREFIX,
            });
        }
        Ok(match (from_meta, &self.session) {
            (Some(id), _) => Some(id.to_owned()),
            (None, Some(session)) => Some(format!("{SESSION_PREFIX}{session}")),
            (None, None) => None,
        })
    }

    /// Keys the call by scope and arguments through [`prepare`], as the attribute and the
    /// dispatcher do (M2).
    fn prepare(
        &self,
        spec: &'static ToolSpec,
        selection: ArgumentSelection,
        context: CallContext,
    ) -> Result<(PreparedCall, CallContext), Error> {
        let prepared = prepare(spec, Some(&context), |args| {
            self.fill(selection, false, args)
        })?;
        Ok((prepared, context))
    }

    /// Keys the call by the tool name and the client's key alone; every selected argument is
    /// fingerprint (M4). The key is handed to [`prepare`] as a carried key (K9), so the rest
    /// of the protocol (engine choice, claim, replay, mismatch) is the same.
    fn prepare_with_client_key(
        &self,
        spec: &'static ToolSpec,
        selection: ArgumentSelection,
        context: CallContext,
        client_key: String,
    ) -> Result<(PreparedCall, CallContext), Error> {
        let mut args = ArgsBuilder::new();
        self.fill(selection, true, &mut args)
            .map_err(|source| Error::Canonical {
                tool: spec.name.to_owned(),
                source,
            })?;
        let (no_key_args, fingerprint) = args.finish();
        let namespace = context
            .engine()
            .cloned()
            .or_else(|| crate::engine::default_engine().ok())
            .and_then(|engine| engine.namespace().map(str::to_owned));
        let key = derive_key_in(
            namespace.as_deref(),
            ScopeComponent::new(CLIENT_KEY_SCOPE, Some(&client_key)),
            spec.name,
            &no_key_args,
        );
        let record = AttemptRecord::new(spec.name);
        record.remember(DerivedKey {
            tool: spec.name.to_owned(),
            key,
            fingerprint,
            label: RecordLabel {
                namespace,
                ..RecordLabel::new(
                    spec.name,
                    ScopePath::new().with(CLIENT_KEY_SCOPE, client_key),
                )
            },
        });
        let context = context.with_attempt(record);
        let prepared = prepare(spec, Some(&context), |_| Ok(()))?;
        Ok((prepared, context))
    }

    /// Adds the selected members of the arguments object: to the key (or, with
    /// `all_fingerprint`, the fingerprint), the others to the fingerprint (K8, S9). A member
    /// named in `selection.key` that the call left out counts as `null`, as a typed
    /// argument's `None` does.
    fn fill(
        &self,
        selection: ArgumentSelection,
        all_fingerprint: bool,
        args: &mut ArgsBuilder,
    ) -> Result<(), CanonicalError> {
        let skipped = |name: &str| selection.skip.contains(&name);
        let in_key =
            |name: &str| !all_fingerprint && selection.key.is_none_or(|key| key.contains(&name));
        if let Some(object) = &self.arguments {
            for (name, value) in object {
                if skipped(name) {
                    continue;
                }
                if in_key(name) {
                    args.key(name, value)?;
                } else {
                    args.fingerprint(name, value)?;
                }
            }
        }
        for name in selection.key.unwrap_or_default() {
            let sent = self
                .arguments
                .as_ref()
                .is_some_and(|o| o.contains_key(*name));
            if sent || skipped(name) {
                continue;
            }
            if in_key(name) {
                args.key(name, &Value::Null)?;
            } else {
                args.fingerprint(name, &Value::Null)?;
            }
        }
        Ok(())
    }
}
