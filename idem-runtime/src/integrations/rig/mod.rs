//! [rig](https://docs.rs/rig-core) tools made idempotent (cargo feature `rig`, contract
//! section R).
//!
//! [`Idempotent`] wraps any [`rig_core::tool::Tool`] and is itself a `Tool` with the same
//! name, description, parameters, annotations and footprint, so it registers wherever the
//! original did (`AgentBuilder::tool(Idempotent::new(SendRefund))` in `rig-agent`,
//! `rig_core::serve::adapters::ToolAdapter::new(…)`). Each call goes through idem's call
//! protocol: the key is derived from the tool's name, the conversation and the canonical
//! JSON of the call's arguments — the key idem's own dispatcher derives for the same call
//! of an `#[idempotent]` fn whose parameters are the arguments' members (R2) — the first
//! outcome is saved and every repeat within the TTL gets it back without running the tool
//! (R1), errors included (R4).
//!
//! ```
//! # extern crate idem_runtime as idem_agent;
//! # use rig_core::tool::{Tool, ToolContext};
//! # #[derive(serde::Serialize, serde::Deserialize)] struct Refund { order_id: String, amount_cents: u64 }
//! # struct SendRefund;
//! # impl Tool for SendRefund {
//! #     const NAME: &'static str = "send_refund";
//! #     type Args = Refund; type Output = String; type Error = std::convert::Infallible;
//! #     fn description(&self) -> String { "Refunds an order".into() }
//! #     fn parameters(&self) -> serde_json::Value { serde_json::json!({"type": "object", "properties": {"order_id": {"type": "string"}, "amount_cents": {"type": "integer"}}}) }
//! #     async fn call(&self, _: &mut ToolContext, a: Refund) -> Result<String, Self::Error> {
//! #         static REFUNDS: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(0);
//! #         let n = REFUNDS.fetch_add(1, std::sync::atomic::Ordering::SeqCst) + 1;
//! #         Ok(format!("refund #{n}: {} on {}", a.amount_cents, a.order_id))
//! #     }
//! # }
//! use idem_agent::integrations::rig::{Conversation, Idempotent};
//! use rig_core::serve::adapters::ToolAdapter;
//! use serde_json::json;
//!
//! # #[tokio::main(flavor = "current_thread")] async fn main() -> Result<(), Box<dyn std::error::Error>> {
//! // Register it where the tool went: rig-agent's `AgentBuilder::tool(Idempotent::new(SendRefund))`.
//! let refund = ToolAdapter::new(Idempotent::new(SendRefund));
//! // The host names the conversation in the rig ToolContext of the run.
//! let mut context = ToolContext::new();
//! context.insert(Conversation::new("conv_42"))?;
//! let args = json!({"order_id": "ord_7", "amount_cents": 500});
//! let first = refund.run_with(&mut context, args.clone()).await?; // runs the tool
//! let retry = refund.run_with(&mut context, args).await?; // replayed: no second refund
//! assert_eq!(first.as_text(), Some("refund #1: 500 on ord_7"));
//! assert_eq!(retry.as_text(), Some("refund #1: 500 on ord_7"));
//! # Ok(()) }
//! ```
//!
//! # The conversation, from the host (R3)
//!
//! Rig gives a tool no conversation id, so the wrapper takes it from its host. A call's
//! [`CallContext`] is, from the most specific to the least:
//!
//! 1. a [`CallContext`] attached to rig's `ToolContext` as a scope
//!    (`ToolContext::new().with_scope(Arc::new(ctx))`, handed to rig-agent with
//!    `agent.prompt(…).tool_context(…)`): its engine, conversation and named scopes;
//! 2. else the [`CallContext`] in force while rig polls the tool
//!    (`ctx.run(agent.prompt(…)).await`): rig-agent runs a turn's tool calls inside the
//!    run's own future (`buffer_unordered`, no spawned task), so the context reaches them;
//!    a host that spawns the tool call itself loses it, as with any task-local;
//! 3. else the wrapper's own, [`Idempotent::context`] / [`Idempotent::conversation`];
//!
//! and a [`Conversation`] value in rig's `ToolContext`
//! (`context.insert(Conversation::new("conv_42"))`) sets the conversation over any of them.
//! The call runs under a copy holding that context's engine, conversation, tool-call id and
//! the value of the wrapper's named scope, with an outcome slot of its own; an idem
//! dispatcher's attempt record (K9) is not carried into a rig tool.
//! A call of a conversation-scoped tool with no conversation from any of these fails with
//! [`Error::MissingScope`](crate::Error::MissingScope), as the tool's error
//! ([`IdempotentToolError::Idem`]; rig's code `idem.missing_scope`): the tool does not run,
//! nothing panics. Rig gives a tool no provider tool-call id either: a
//! [`Scope::Call`] wrapper needs a `CallContext` that has one
//! ([`CallContext::with_tool_call`]).
//!
//! What each call did (S12) is published into rig's `ToolContext` as result metadata
//! ([`Outcome`]: executed or replayed, the key, timestamps), where rig's result hooks
//! read it, and set on the host's `CallContext` (`ctx.last_outcome()`) when one came from
//! step 1 or 2 (concurrent calls under one context overwrite each other's there).
//!
//! # Toolchain
//!
//! rig-core 0.46 declares Rust 1.97.1 as its minimum (`rust-version`). idem's pinned
//! toolchain (Rust 1.95.0) builds and tests this module with cargo's
//! `--ignore-rust-version`: `cargo test -p idem-runtime --features rig --ignore-rust-version`.

mod error;
mod members;

use std::fmt;
use std::sync::{Arc, Mutex, OnceLock, PoisonError};
use std::time::Duration;

use ::rig_core::completion::ToolAnnotations;
use ::rig_core::tool::{ContextValue, Tool, ToolContext, ToolExecutionError, Touches};
use serde::de::DeserializeOwned;
use serde::{Deserialize, Serialize};

use crate::call::prepare;
use crate::context::CallContext;
use crate::envelope::Envelope;
use crate::outcome::{CallRecord, CallStatus};
use crate::scope::Scope;
use crate::spec::{OnCancel, OnUnknown, ToolSpec};

pub use error::IdempotentToolError;
use members::Selection;

/// A rig tool whose calls are idempotent: same name, description, parameters, annotations
/// and footprint as `T`, and each call keyed, claimed, saved and replayed by idem's call
/// protocol (R1).
///
/// - `Args` is `T::Args`, which must also be `Serialize`: the key is derived from the
///   typed arguments as serialized, each top-level member of their JSON object a member of
///   the key object (a value that is not an object is the member `"args"`; a unit value
///   has none) — the key of the same call of an `#[idempotent]` fn with those parameters
///   (R2). Defaults filled in by `Deserialize` are in the key; unknown members the tool
///   ignores are not.
/// - `Output` is `T::Output`, which must also be `Serialize + DeserializeOwned` (`Send`):
///   a replay returns the value the first call returned, decoded from the store (R1).
/// - `Error` is [`IdempotentToolError`]: the tool's error as rig normalizes it (saved and
///   replayed, R4), or the layer's (never saved).
///
/// Settings are those of `#[idempotent]`, with its defaults ([`ToolSpec::new`]):
/// conversation scope, TTL 24 h, lease 60 s, wait 5 s, heartbeat a third of the lease,
/// [`OnCancel::Hold`], [`OnUnknown::Hold`], the engine of the call's context. They are
/// checked on the first call (as the attribute checks them at compile time): a TTL of zero
/// or shorter than the lease, a heartbeat of zero or not shorter than the lease, or a
/// `key`/`skip` name that is not a property of the tool's parameters schema make every call
/// fail with [`IdempotentToolError::Config`].
///
/// `ToolSpec` holds `&'static` data: the wrapper keeps its settings by value and, on its
/// first call, interns them — one leaked `ToolSpec` per distinct setting (and one string per
/// distinct store locator) for the life of the process, shared by every wrapper with the
/// same settings, so building wrappers in a loop does not grow memory.
#[derive(Clone)]
pub struct Idempotent<T> {
    tool: T,
    spec: ToolSpec,
    selection: Selection,
    fallback: Option<CallContext>,
    checked: OnceLock<Result<&'static ToolSpec, String>>,
}

impl<T: fmt::Debug> fmt::Debug for Idempotent<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Idempotent")
            .field("tool", &self.tool)
            .field("spec", &self.spec)
            .field("key", &self.selection.key)
            .field("skip", &self.selection.skip)
            .field("context", &self.fallback)
            .finish()
    }
}

impl<T: Tool> Idempotent<T> {
    /// `tool` with the attribute's defaults, named `T::NAME` (part of every key, K6).
    pub fn new(tool: T) -> Self {
        Idempotent {
            tool,
            spec: ToolSpec::new(T::NAME),
            selection: Selection::default(),
            fallback: None,
            checked: OnceLock::new(),
        }
    }

    fn edit(mut self, f: impl FnOnce(&mut Self)) -> Self {
        f(&mut self);
        self.checked = OnceLock::new();
        self
    }

    /// Whose calls share keys (K7); default [`Scope::Conversation`].
    pub fn scope(self, scope: Scope) -> Self {
        self.edit(|w| w.spec.scope = scope)
    }

    /// How long an outcome is replayed, from the first call (S8); default 24 h. Applied in
    /// whole milliseconds; positive and at least the lease.
    pub fn ttl(self, ttl: Duration) -> Self {
        self.edit(|w| w.spec.ttl = ttl)
    }

    /// How long a claim lasts without renewal before another call may take it over (S6);
    /// default 60 s. Zero: already lapsed.
    pub fn lease(self, lease: Duration) -> Self {
        self.edit(|w| w.spec.lease = lease)
    }

    /// How long a concurrent duplicate waits for the first call's outcome before a
    /// retryable `InProgress` (S5); default 5 s.
    pub fn wait(self, wait: Duration) -> Self {
        self.edit(|w| w.spec.wait = wait)
    }

    /// How often a running call renews its lease (L1); default a third of the lease.
    /// Positive and shorter than the lease.
    pub fn heartbeat(self, heartbeat: Duration) -> Self {
        self.edit(|w| w.spec.heartbeat = Some(heartbeat))
    }

    /// What a call cancelled or panicking after the tool began leaves behind (U4); default
    /// [`OnCancel::Hold`].
    pub fn on_cancel(self, on_cancel: OnCancel) -> Self {
        self.edit(|w| w.spec.on_cancel = on_cancel)
    }

    /// What happens to an unknown outcome that no reconcile function settles (U2, U2a);
    /// default [`OnUnknown::Hold`]: held for a person's decision (`idem resolve`).
    /// [`OnUnknown::Rerun`]: at least once, the tool runs again after the lease lapses.
    pub fn on_unknown(self, on_unknown: OnUnknown) -> Self {
        self.edit(|w| w.spec.on_unknown = on_unknown)
    }

    /// Whether each key's first call waits for a person's approval (A1–A4):
    /// `Some(valid_for)` (an approval lets one call run for that long; the attribute's
    /// default is [`ToolSpec::DEFAULT_APPROVAL_VALID_FOR`]), `None` (the default): no
    /// approval. The model gets `idem.awaiting_approval` until `idem approve` decides.
    pub fn require_approval(self, valid_for: Option<std::time::Duration>) -> Self {
        self.edit(|w| w.spec.approval = valid_for)
    }

    /// This tool's own store, as a [store locator](crate::store::locator) (`"memory"`,
    /// `"sqlite:agent.db"`, …), opened on the first call; it wins over the context's
    /// engine. A locator that does not parse or open fails each call with a store error.
    pub fn store(self, locator: impl AsRef<str>) -> Self {
        let locator = intern_str(locator.as_ref());
        self.edit(|w| w.spec.store = Some(locator))
    }

    /// The identity members of the arguments (K8): only these form the key; the other
    /// members form the fingerprint, and a later call with the same key and other values
    /// of them is a `Mismatch` (S9). Names are property names of the tool's parameters
    /// schema (`"args"` for a tool whose arguments are not an object).
    pub fn key<I, S>(self, members: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let members = members.into_iter().map(Into::into).collect();
        self.edit(|w| w.selection.key = Some(members))
    }

    /// Members left out of the key and the fingerprint (K8): timestamps, anything that
    /// differs between retries of one intent.
    pub fn skip<I, S>(self, members: I) -> Self
    where
        I: IntoIterator<Item = S>,
        S: Into<String>,
    {
        let members: Vec<String> = members.into_iter().map(Into::into).collect();
        self.edit(|w| w.selection.skip.extend(members))
    }

    /// The context this wrapper's calls use when the host gives none (R3, step 3):
    /// its engine, conversation and scope values.
    pub fn context(self, context: CallContext) -> Self {
        self.edit(|w| w.fallback = Some(context))
    }

    /// The conversation this wrapper's calls are keyed by when the host gives none (R3,
    /// step 3): for a tool built per conversation.
    pub fn conversation(self, id: impl Into<Arc<str>>) -> Self {
        let id = id.into();
        self.edit(|w| {
            w.fallback = Some(w.fallback.take().unwrap_or_default().with_conversation(id));
        })
    }

    /// The settings, as a [`ToolSpec`].
    pub fn spec(&self) -> &ToolSpec {
        &self.spec
    }

    /// The wrapped tool.
    pub fn inner(&self) -> &T {
        &self.tool
    }

    /// The wrapped tool, unwrapped.
    pub fn into_inner(self) -> T {
        self.tool
    }

    /// The interned spec, once the settings are checked.
    fn checked_spec(&self) -> Result<&'static ToolSpec, IdempotentToolError> {
        self.checked
            .get_or_init(|| self.check().map(|()| intern(self.spec)))
            .clone()
            .map_err(|message| IdempotentToolError::Config {
                tool: T::NAME.to_owned(),
                message,
            })
    }

    fn check(&self) -> Result<(), String> {
        let spec = &self.spec;
        if spec.ttl.is_zero() {
            return Err("the TTL is zero: nothing would ever be replayed".to_owned());
        }
        if spec.ttl < spec.lease {
            return Err(format!(
                "the TTL ({:?}) is shorter than the lease ({:?}): the record would expire while its call holds it",
                spec.ttl, spec.lease
            ));
        }
        if let Some(heartbeat) = spec.heartbeat {
            if heartbeat.is_zero() || heartbeat >= spec.lease {
                return Err(format!(
                    "the heartbeat ({heartbeat:?}) must be positive and shorter than the lease ({:?})",
                    spec.lease
                ));
            }
        }
        if let Some(keys) = &self.selection.key {
            if let Some(both) = keys.iter().find(|k| self.selection.skip.contains(k)) {
                return Err(format!("`{both}` is both in key(…) and in skip(…)"));
            }
        }
        let parameters = self.tool.parameters();
        let properties = parameters.get("properties").and_then(|p| p.as_object());
        for name in self.selection.names() {
            let known = match properties {
                Some(properties) => properties.contains_key(name),
                None => name == members::WHOLE,
            };
            if !known {
                return Err(match properties {
                    Some(properties) => format!(
                        "`{name}` in key(…) or skip(…) is not a parameter of the tool (its parameters: {})",
                        properties.keys().map(String::as_str).collect::<Vec<_>>().join(", ")
                    ),
                    None => format!(
                        "`{name}` in key(…) or skip(…) is not a parameter: the tool's parameters schema has no properties, so its arguments are keyed whole as `{}`",
                        members::WHOLE
                    ),
                });
            }
        }
        Ok(())
    }

    /// The host's context for a call (R3) and, separately, the context the call runs
    /// under: a copy of it with its own outcome slot, so concurrent calls under one host
    /// context each publish their own outcome.
    fn contexts(
        &self,
        spec: &ToolSpec,
        tool_context: &ToolContext,
    ) -> Result<(Option<CallContext>, CallContext), IdempotentToolError> {
        let host = tool_context
            .scope::<CallContext>()
            .map(|context| (*context).clone())
            .or_else(CallContext::current);
        let base = host
            .clone()
            .or_else(|| self.fallback.clone())
            .unwrap_or_default();
        let conversation =
            tool_context
                .get::<Conversation>()
                .map_err(|error| IdempotentToolError::Config {
                    tool: spec.name.to_owned(),
                    message: error.to_string(),
                })?;
        let mut own = CallContext::new();
        if let Some(engine) = base.engine() {
            own = own.with_engine(engine.clone());
        }
        let conversation = conversation.map(|c| c.0);
        if let Some(id) = conversation.as_deref().or(base.conversation_id()) {
            own = own.with_conversation(id);
        }
        if let Some(id) = base.tool_call_id() {
            own = own.with_tool_call(id);
        }
        for name in spec.scope.named_parts() {
            if let Some(value) = base.scope_value(name) {
                own = own.with_scope(name, value);
            }
        }
        Ok((host, own))
    }
}

impl<T> Tool for Idempotent<T>
where
    T: Tool,
    T::Args: Serialize,
    T::Output: Serialize + DeserializeOwned + Send,
{
    const NAME: &'static str = T::NAME;
    type Args = T::Args;
    type Output = T::Output;
    type Error = IdempotentToolError;

    fn description(&self) -> String {
        self.tool.description()
    }

    fn parameters(&self) -> serde_json::Value {
        self.tool.parameters()
    }

    fn annotations(&self) -> ToolAnnotations {
        self.tool.annotations()
    }

    fn footprint(&self, args: &Self::Args) -> Touches {
        self.tool.footprint(args)
    }

    /// [`IdempotentToolError::into_execution_error`]: the wrapped tool's error as its own
    /// `map_error` made it; a layer error with its message and an `idem.<kind>` code.
    fn map_error(&self, error: Self::Error) -> ToolExecutionError {
        error.into_execution_error()
    }

    /// Keys the call (R2, R3), then runs `T::call` at most once for the key and returns
    /// its outcome, or the saved one (R1, R4). The tool runs with the call's context in
    /// force: `idem_agent::current_key()` gives the key to forward downstream (K10).
    async fn call(
        &self,
        context: &mut ToolContext,
        args: Self::Args,
    ) -> Result<Self::Output, Self::Error> {
        let spec = self.checked_spec()?;
        let (host, own) = self.contexts(spec, context)?;
        if let Some(host) = &host {
            host.clear_last_outcome();
        }
        let prepared = prepare(spec, Some(&own), |builder| {
            self.selection.fill(builder, &args)
        })?;
        if let Some(host) = &host {
            host.set_last_key(prepared.key()); // S13
        }
        let tool = &self.tool;
        let outcome = prepared
            .run(async {
                tool.call(context, args)
                    .await
                    .map_err(|error| IdempotentToolError::Tool(tool.map_error(error)))
            })
            .await;
        // The first caller gets the output as a replay will return it (R1).
        let executed = own
            .last_outcome()
            .is_some_and(|record| record.status != CallStatus::Replayed);
        let outcome = match outcome {
            Ok(output) if executed => Ok(Envelope::as_replayed(output)),
            other => other,
        };
        if let Some(record) = own.last_outcome() {
            if let Some(host) = &host {
                host.set_last_outcome(record.clone());
            }
            context.insert_result(Outcome(record)).map_err(|error| {
                IdempotentToolError::Config {
                    tool: spec.name.to_owned(),
                    message: error.to_string(),
                }
            })?;
        }
        outcome
    }
}

/// The conversation id a host puts in rig's `ToolContext` for its tools' calls (R3):
/// `context.insert(Conversation::new("conv_42"))?`. It sets the conversation over any
/// [`CallContext`] the call has. Serialized as the bare string, under the slot
/// `idem.conversation`.
#[derive(Debug, Clone, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Conversation(pub String);

impl Conversation {
    /// The conversation `id`.
    pub fn new(id: impl Into<String>) -> Self {
        Conversation(id.into())
    }
}

impl ContextValue for Conversation {
    const KEY: &'static str = "idem.conversation";
}

/// What one call of an [`Idempotent`] tool did (S12), published into rig's `ToolContext` as
/// result metadata (`context.result::<Outcome>()`, slot `idem.outcome`): executed or
/// replayed, the key, timestamps, fence. Absent when the call failed before the store gave
/// it an outcome (a missing conversation, a mismatch, a configuration error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Outcome(pub CallRecord);

impl ContextValue for Outcome {
    const KEY: &'static str = "idem.outcome";
}

/// One leaked copy of each distinct spec, shared by every wrapper with those settings.
fn intern(spec: ToolSpec) -> &'static ToolSpec {
    static SPECS: Mutex<Vec<&'static ToolSpec>> = Mutex::new(Vec::new());
    let mut specs = SPECS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = specs.iter().find(|known| ***known == spec) {
        return known;
    }
    let leaked: &'static ToolSpec = Box::leak(Box::new(spec));
    specs.push(leaked);
    leaked
}

/// One leaked copy of each distinct store locator.
fn intern_str(text: &str) -> &'static str {
    static TEXTS: Mutex<Vec<&'static str>> = Mutex::new(Vec::new());
    let mut texts = TEXTS.lock().unwrap_or_else(PoisonError::into_inner);
    if let Some(known) = texts.iter().find(|known| **known == text) {
        return known;
    }
    let leaked: &'static str = Box::leak(text.to_owned().into_boxed_str());
    texts.push(leaked);
    leaked
}

#[cfg(test)]
mod tests {
    use super::*;

    struct Echo;

    impl Tool for Echo {
        const NAME: &'static str = "echo";
        type Args = String;
        type Output = String;
        type Error = std::convert::Infallible;

        fn description(&self) -> String {
            "Echoes its argument".into()
        }

        fn parameters(&self) -> serde_json::Value {
            serde_json::json!({"type": "string"})
        }

        async fn call(&self, _: &mut ToolContext, text: String) -> Result<String, Self::Error> {
            Ok(text)
        }
    }

    // pins R5, U2, U2a, U4: `on_unknown` is a wrapper setting with the attribute's default,
    // set apart from `on_cancel`; setting it after a call's check gives the wrapper the
    // interned spec of its new settings
    #[test]
    fn on_unknown_is_a_wrapper_setting() {
        let wrapper = Idempotent::new(Echo);
        assert_eq!(wrapper.spec().on_cancel, OnCancel::Hold);
        assert_eq!(wrapper.spec().on_unknown, OnUnknown::Hold);
        let held = wrapper.checked_spec().unwrap();
        assert_eq!(held.on_unknown, OnUnknown::Hold);

        let wrapper = wrapper.on_unknown(OnUnknown::Rerun);
        assert_eq!(wrapper.spec().on_unknown, OnUnknown::Rerun);
        assert_eq!(wrapper.spec().on_cancel, OnCancel::Hold);
        let rerun = wrapper.checked_spec().unwrap();
        assert_eq!(rerun.on_unknown, OnUnknown::Rerun);
        assert!(!std::ptr::eq(held, rerun));

        let wrapper = Idempotent::new(Echo)
            .on_cancel(OnCancel::Release)
            .on_unknown(OnUnknown::Rerun);
        assert_eq!(wrapper.spec().on_cancel, OnCancel::Release);
        assert_eq!(wrapper.spec().on_unknown, OnUnknown::Rerun);
    }

    // pins R5, A1: `require_approval` is a wrapper setting, off by default
    #[test]
    fn require_approval_is_a_wrapper_setting() {
        let wrapper = Idempotent::new(Echo);
        assert_eq!(wrapper.spec().approval, None);
        let minute = std::time::Duration::from_secs(60);
        let wrapper = wrapper.require_approval(Some(minute));
        assert_eq!(wrapper.spec().approval, Some(minute));
        assert_eq!(wrapper.require_approval(None).spec().approval, None);
    }
}
