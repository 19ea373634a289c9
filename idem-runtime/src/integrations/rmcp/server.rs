//! [`IdempotentServer`]: server-wide opt-in, every tool of an rmcp server keyed without an
//! annotation (contract M9, M10).

use std::collections::{HashMap, HashSet};
use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use ::rmcp::model::{CallToolRequestParams, CallToolResponse, ServerCapabilities, Tool};
use ::rmcp::service::RequestContext;
use ::rmcp::{ErrorData, RoleServer, ServerHandler};
use serde_json::{json, Map, Value};

use super::call::{ArgumentSelection, McpCall};
use super::intern::intern;
use super::marker::keys_its_own_calls;
use super::names::{
    CAPABILITY, CONVERSATION_ID, IDEMPOTENCY_KEY, MAX_CLIENT_KEY_CHARS, STATUS, TOOL_CALL_ID,
};
use super::settings::{
    check_conversation_meta_key, check_spec, CallSettings, KeyedByServer, ServerConfigError,
};
use crate::engine::Engine;
use crate::scope::Scope;
use crate::spec::{OnCancel, OnUnknown, ToolSpec};

/// An rmcp [`ServerHandler`] that keys every side-effecting tool call of the handler it
/// wraps: a retried `tools/call` replays the first call's saved result instead of running
/// the tool again (M10).
///
/// Every `ServerHandler` method is delegated to the inner handler, except:
///
/// - `call_tool`: the tool is looked up with the inner handler's `get_tool` (which
///   `#[tool_handler]` generates). A tool that keys its own calls (its `_meta` carries the
///   marker `#[idempotent]` writes) is passed through with this server's engine and
///   conversation `_meta` member in the request's extensions; its own settings apply. A
///   tool annotated `readOnlyHint: true`, a tool [excluded](IdempotentServerBuilder::exclude),
///   and a name `get_tool` does not know (rmcp answers it with its own error) are passed
///   through unkeyed. Every other call runs under idem with this server's spec for the tool
///   ([defaults](IdempotentServerBuilder), [per-tool](IdempotentServerBuilder::tool_spec)),
///   keyed by the tool name, the scope value and every member of its arguments object, with
///   the rules of the attribute's MCP mode (M2–M8).
/// - `get_info`, `initialize`, `negotiate_initialize`, `discover`: the inner handler's
///   answer with `capabilities.experimental.idempotency` added (M10; MCP's `ToolsCapability`
///   has no `idempotency` field yet, as the proposal SEP-3182 would add).
///
/// A handler without `get_tool` (the trait's default answers `None`) gets no keying: write
/// it with `#[tool_handler]`, or implement `get_tool`.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use std::time::Duration;
/// use idem_agent::integrations::rmcp::IdempotentServer;
/// use idem_agent::{Engine, Scope};
/// use rmcp::ServerHandler;
///
/// struct Payments; // in practice a `#[tool_router]` + `#[tool_handler]` server
/// impl ServerHandler for Payments {}
///
/// let server = IdempotentServer::builder(Payments)
///     .engine(Engine::in_memory())
///     .conversation_meta_key("threadId")
///     .tool_spec("send_refund", |spec| spec.ttl = Duration::from_secs(7 * 24 * 3600))
///     .tool_spec("roll_die", |spec| spec.scope = Scope::Call)
///     .exclude("search")
///     .build()?;
/// let info = server.get_info();
/// let advertised = &info.capabilities.experimental.unwrap()["idempotency"];
/// assert_eq!(advertised["conversationIdMeta"], "threadId");
/// assert_eq!(advertised["idempotencyKeyMeta"], "idempotencyKey");
///
/// let refused = IdempotentServer::builder(Payments).lease(Duration::from_secs(30))
///     .heartbeat(Duration::from_secs(30)).build().unwrap_err();
/// assert!(refused.to_string().contains("is not shorter than its lease"));
/// // Serve it like any handler: `server.serve(rmcp::transport::stdio()).await?.waiting().await?`.
/// # Ok::<(), Box<dyn std::error::Error>>(())
/// ```
pub struct IdempotentServer<H> {
    pub(super) inner: H,
    settings: CallSettings,
    default: ToolSpec,
    overrides: HashMap<String, ToolSpec>,
    excluded: HashSet<String>,
}

/// Shows the inner handler by its type name (handlers rarely implement `Debug`).
impl<H> fmt::Debug for IdempotentServer<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotentServer")
            .field("inner", &std::any::type_name::<H>())
            .field("settings", &self.settings)
            .field("default", &self.default)
            .field("overrides", &self.overrides)
            .field("excluded", &self.excluded)
            .finish()
    }
}

/// How `call_tool` handles one call.
enum Route {
    /// Unknown, read-only or excluded: the inner handler, unkeyed.
    Plain,
    /// The tool keys its own calls (`#[idempotent]`): the inner handler, with this server's
    /// settings in the extensions.
    OwnAttribute,
    /// Keyed here, with this spec.
    Keyed(&'static ToolSpec),
}

impl<H: ServerHandler> IdempotentServer<H> {
    /// Wraps `inner` with the defaults: conversation scope (the conversation id from
    /// `_meta.conversationId`, else the MCP session), 24 h TTL, 60 s lease, 5 s wait, a
    /// heartbeat of a third of the lease, the process default engine.
    pub fn new(inner: H) -> Self {
        IdempotentServer {
            inner,
            settings: CallSettings::default(),
            default: ToolSpec::new(""),
            overrides: HashMap::new(),
            excluded: HashSet::new(),
        }
    }

    /// A builder to configure the wrapper of `inner`; see [`IdempotentServerBuilder`].
    pub fn builder(inner: H) -> IdempotentServerBuilder<H> {
        IdempotentServerBuilder {
            inner,
            engine: None,
            conversation_meta_key: CONVERSATION_ID.to_owned(),
            default: ToolSpec::new(""),
            overrides: Vec::new(),
            excluded: Vec::new(),
        }
    }

    /// The wrapped handler.
    pub fn inner(&self) -> &H {
        &self.inner
    }

    /// The wrapped handler, unwrapped.
    pub fn into_inner(self) -> H {
        self.inner
    }

    fn route(&self, tool: Option<&Tool>) -> Route {
        let Some(tool) = tool else {
            return Route::Plain;
        };
        if keys_its_own_calls(tool) {
            return Route::OwnAttribute;
        }
        let read_only = tool
            .annotations
            .as_ref()
            .and_then(|annotations| annotations.read_only_hint)
            == Some(true);
        if read_only || self.excluded.contains(tool.name.as_ref()) {
            return Route::Plain;
        }
        let template = self
            .overrides
            .get(tool.name.as_ref())
            .unwrap_or(&self.default);
        Route::Keyed(intern(&tool.name, template))
    }

    /// `call_tool` (M9, M10).
    pub(super) async fn keyed_call_tool(
        &self,
        request: CallToolRequestParams,
        mut context: RequestContext<RoleServer>,
    ) -> Result<CallToolResponse, ErrorData> {
        let tool = self.inner.get_tool(&request.name);
        match self.route(tool.as_ref()) {
            Route::Plain => self.inner.call_tool(request, context).await,
            Route::OwnAttribute => {
                context.extensions.insert(self.settings.clone());
                self.inner.call_tool(request, context).await
            }
            Route::Keyed(spec) => {
                context.extensions.insert(self.settings.clone());
                let call = McpCall::new(request.name.clone(), request.arguments.clone(), &context)
                    .with_params_meta(request.meta.as_ref());
                // Inserted after the call read the extensions: only the inner handler sees it.
                context.extensions.insert(KeyedByServer);
                let body = self.inner.call_tool(request, context);
                call.run(spec, ArgumentSelection::ALL, body).await
            }
        }
    }

    /// Adds `experimental.idempotency` to `capabilities` (M10).
    pub(super) fn advertise(&self, capabilities: &mut ServerCapabilities) {
        capabilities
            .experimental
            .get_or_insert_with(Default::default)
            .insert(
                CAPABILITY.to_owned(),
                capability(&self.settings.conversation_meta_key),
            );
    }
}

/// The value idem advertises as `capabilities.experimental.idempotency` (M10, Y1): the
/// `_meta` members it reads (`idempotencyKeyMeta`, `conversationIdMeta` — the member
/// `conversation_meta_key` names — and `toolCallIdMeta`), the longest client key it accepts
/// (`maxIdempotencyKeyLength`, in characters) and the result `_meta` member of the replay
/// marker (`resultStatusMeta`).
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// let advertised = idem_agent::integrations::rmcp::capability("threadId");
/// assert_eq!(advertised["conversationIdMeta"], "threadId");
/// assert_eq!(advertised["maxIdempotencyKeyLength"], 255);
/// ```
pub fn capability(conversation_meta_key: &str) -> Map<String, Value> {
    let mut idempotency = Map::new();
    idempotency.insert("idempotencyKeyMeta".into(), json!(IDEMPOTENCY_KEY));
    idempotency.insert(
        "maxIdempotencyKeyLength".into(),
        json!(MAX_CLIENT_KEY_CHARS),
    );
    idempotency.insert(
        "conversationIdMeta".into(),
        Value::from(conversation_meta_key),
    );
    idempotency.insert("toolCallIdMeta".into(), json!(TOOL_CALL_ID));
    idempotency.insert("resultStatusMeta".into(), json!(STATUS));
    idempotency
}

/// Builds an [`IdempotentServer`]; from [`IdempotentServer::builder`]. Spans are applied in
/// whole milliseconds and checked by [`build`](Self::build) as the attribute checks them at
/// compile time (S8, L1).
pub struct IdempotentServerBuilder<H> {
    inner: H,
    engine: Option<Engine>,
    conversation_meta_key: String,
    default: ToolSpec,
    #[allow(clippy::type_complexity)]
    overrides: Vec<(String, Box<dyn FnOnce(&mut ToolSpec)>)>,
    excluded: Vec<String>,
}

/// Shows the inner handler by its type name.
impl<H> fmt::Debug for IdempotentServerBuilder<H> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("IdempotentServerBuilder")
            .field("inner", &std::any::type_name::<H>())
            .field("engine", &self.engine)
            .field("conversation_meta_key", &self.conversation_meta_key)
            .field("default", &self.default)
            .field(
                "overrides",
                &self.overrides.iter().map(|(n, _)| n).collect::<Vec<_>>(),
            )
            .field("excluded", &self.excluded)
            .finish()
    }
}

impl<H: ServerHandler> IdempotentServerBuilder<H> {
    /// Keeps outcomes in `engine`'s store (with its clock) instead of the process default
    /// (`IDEM_STORE`). Tools that key their own calls use it too, unless their
    /// `#[idempotent(store = …)]` names one.
    pub fn engine(mut self, engine: Engine) -> Self {
        self.engine = Some(engine);
        self
    }

    /// Reads the conversation id from `_meta[key]` instead of `_meta.conversationId` (for
    /// this server's keyed tools and the tools that key their own calls).
    pub fn conversation_meta_key(mut self, key: impl Into<String>) -> Self {
        self.conversation_meta_key = key.into();
        self
    }

    /// How long a saved result is replayed, from the first call (S8). Default 24 h.
    pub fn ttl(mut self, ttl: Duration) -> Self {
        self.default.ttl = ttl;
        self
    }

    /// How long a claim lasts without renewal before another call may take it over (S6).
    /// Default 60 s; not zero ([`ServerConfigError::ZeroLease`] from `build`).
    pub fn lease(mut self, lease: Duration) -> Self {
        self.default.lease = lease;
        self
    }

    /// How long a concurrent duplicate waits for the running call's result before it gets
    /// an `in_progress` error (S5). Default 5 s.
    pub fn wait(mut self, wait: Duration) -> Self {
        self.default.wait = wait;
        self
    }

    /// How often a running call renews its lease (L1). Default a third of the lease;
    /// positive and shorter than the lease.
    pub fn heartbeat(mut self, heartbeat: Duration) -> Self {
        self.default.heartbeat = Some(heartbeat);
        self
    }

    /// Whose calls share keys (K7). Default [`Scope::Conversation`].
    pub fn scope(mut self, scope: Scope) -> Self {
        self.default.scope = scope;
        self
    }

    /// What a call whose future is dropped after its tool began leaves behind (U4).
    /// Default [`OnCancel::Hold`].
    pub fn on_cancel(mut self, on_cancel: OnCancel) -> Self {
        self.default.on_cancel = on_cancel;
        self
    }

    /// What happens to an unknown outcome that no reconcile function settles (U2, U2a).
    /// Default [`OnUnknown::Hold`]: held for a person's decision (`idem resolve`);
    /// [`OnUnknown::Rerun`]: at least once, the tool runs again after the lease lapses.
    pub fn on_unknown(mut self, on_unknown: OnUnknown) -> Self {
        self.default.on_unknown = on_unknown;
        self
    }

    /// Whether each key's first call waits for a person's approval (A1–A4), for every
    /// tool unless [`tool_spec`](Self::tool_spec) says otherwise: `Some(valid_for)` (an
    /// approval lets one call run for that long), `None` (the default): no approval. The
    /// client gets a tool error with `_meta["idem/error"] = "awaiting_approval"` until
    /// `idem approve` decides.
    pub fn require_approval(mut self, valid_for: Option<std::time::Duration>) -> Self {
        self.default.approval = valid_for;
        self
    }

    /// Settings for the tool named `name` only: `configure` gets a copy of the server's
    /// defaults (as they are at [`build`](Self::build)) and changes what it needs (`ttl`,
    /// `lease`, `wait`, `heartbeat`, `scope`, `on_cancel`, `on_unknown`, `approval`, `store`; the name and
    /// `reconcile` are the server's to set). A later call for the same name replaces it.
    pub fn tool_spec(
        mut self,
        name: impl Into<String>,
        configure: impl FnOnce(&mut ToolSpec) + 'static,
    ) -> Self {
        let name = name.into();
        self.overrides.retain(|(n, _)| *n != name);
        self.overrides.push((name, Box::new(configure)));
        self
    }

    /// Passes calls of the tool named `name` through unkeyed (a tool that is safe to
    /// repeat but not annotated `readOnlyHint: true`).
    pub fn exclude(mut self, name: impl Into<String>) -> Self {
        self.excluded.push(name.into());
        self
    }

    /// The server.
    ///
    /// # Errors
    /// [`ServerConfigError`] naming the setting (and the tool, for an override): a zero TTL
    /// or one shorter than the lease, a zero lease, a zero heartbeat or one not shorter than the lease, a
    /// span with a fraction of a millisecond, an unusable conversation `_meta` member, an
    /// empty tool name.
    pub fn build(self) -> Result<IdempotentServer<H>, ServerConfigError> {
        check_conversation_meta_key(&self.conversation_meta_key)?;
        let default = ToolSpec {
            name: "",
            reconcile: false,
            ..self.default
        };
        check_spec(&default, None)?;
        let mut overrides = HashMap::new();
        for (name, configure) in self.overrides {
            if name.is_empty() {
                return Err(ServerConfigError::EmptyToolName);
            }
            let mut spec = default;
            configure(&mut spec);
            let spec = ToolSpec {
                name: "",
                reconcile: false,
                ..spec
            };
            check_spec(&spec, Some(&name))?;
            overrides.insert(name, spec);
        }
        if self.excluded.iter().any(String::is_empty) {
            return Err(ServerConfigError::EmptyToolName);
        }
        Ok(IdempotentServer {
            inner: self.inner,
            settings: CallSettings {
                engine: self.engine,
                conversation_meta_key: Arc::from(self.conversation_meta_key),
            },
            default,
            overrides,
            excluded: self.excluded.into_iter().collect(),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Plain;
    impl ServerHandler for Plain {}

    // pins M10, U2, U2a, U4: `on_cancel` and `on_unknown` default to hold, the builder sets
    // them server-wide, and a per-tool override starts from the server's and changes one
    #[test]
    fn builder_sets_what_follows_a_cancel_and_an_unknown_outcome() {
        let server = IdempotentServer::builder(Plain).build().unwrap();
        assert_eq!(server.default.on_cancel, OnCancel::Hold);
        assert_eq!(server.default.on_unknown, OnUnknown::Hold);
        assert_eq!(
            IdempotentServer::new(Plain).default.on_unknown,
            OnUnknown::Hold
        );
        let server = IdempotentServer::builder(Plain)
            .on_cancel(OnCancel::Release)
            .on_unknown(OnUnknown::Rerun)
            .tool_spec("send_refund", |spec| spec.on_unknown = OnUnknown::Hold)
            .build()
            .unwrap();
        assert_eq!(server.default.on_cancel, OnCancel::Release);
        assert_eq!(server.default.on_unknown, OnUnknown::Rerun);
        let refund = &server.overrides["send_refund"];
        assert_eq!(refund.on_cancel, OnCancel::Release);
        assert_eq!(refund.on_unknown, OnUnknown::Hold);
    }

    // pins M10, A1: approval is off by default; the builder requires it for every tool,
    // and a tool's own spec can turn it off
    #[test]
    fn require_approval_is_a_server_setting() {
        let minute = std::time::Duration::from_secs(60);
        assert_eq!(IdempotentServer::new(Plain).default.approval, None);
        let server = IdempotentServer::builder(Plain)
            .require_approval(Some(minute))
            .tool_spec("lookup", |spec| spec.approval = None)
            .build()
            .unwrap();
        assert_eq!(server.default.approval, Some(minute));
        assert_eq!(server.overrides["lookup"].approval, None);
    }
}
