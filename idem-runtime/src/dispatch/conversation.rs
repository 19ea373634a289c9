//! The conversation a turn belongs to: what its calls are keyed by (contract K7, K9).

use std::sync::Arc;

use crate::context::{AttemptRecord, CallContext};
use crate::engine::Engine;

/// The values a turn's calls are keyed by: the conversation id (`scope = "conversation"`,
/// the default, K7), user-named scope values (`scope = "tenant"`), and optionally the
/// engine (store and clock) to use.
///
/// The dispatcher builds a fresh [`CallContext`] from it for every attempt of every call
/// ([`call_context`](Self::call_context)), adding the call's id (`scope = "call"`) and
/// the call's [`AttemptRecord`] (K9). Fresh, because each context also receives what its
/// call did ([`CallContext::last_outcome`]): calls running concurrently must not share
/// that slot, and clones of one `CallContext` do.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::{AttemptRecord, dispatch::Conversation};
/// let conversation = Conversation::new("conv_42").with_scope("tenant", "acme");
/// let ctx = conversation.call_context("call_1", AttemptRecord::new("send_refund"));
/// assert_eq!(ctx.conversation_id(), Some("conv_42"));
/// assert_eq!(ctx.tool_call_id(), Some("call_1"));
/// assert_eq!(ctx.scope_value("tenant"), Some("acme"));
/// ```
#[derive(Debug, Clone, Default)]
pub struct Conversation {
    id: Option<Arc<str>>,
    scopes: Vec<(Arc<str>, Arc<str>)>,
    engine: Option<Engine>,
}

impl Conversation {
    /// The conversation `id` (a thread id, a session id: whatever identifies one agent
    /// conversation in your application).
    pub fn new(id: impl Into<Arc<str>>) -> Self {
        Conversation {
            id: Some(id.into()),
            ..Self::default()
        }
    }

    /// No conversation id: `scope = "conversation"` tools then fail with `MissingScope`
    /// before running (K7); `global`, `call` and named scopes still work.
    pub fn without_id() -> Self {
        Self::default()
    }

    /// Sets the value of a user-named scope (`scope = "tenant"` reads `"tenant"`).
    pub fn with_scope(mut self, name: impl Into<Arc<str>>, value: impl Into<Arc<str>>) -> Self {
        let (name, value) = (name.into(), value.into());
        self.scopes.retain(|(n, _)| *n != name);
        self.scopes.push((name, value));
        self
    }

    /// Uses `engine` for this conversation's calls, before the dispatcher's own engine
    /// and the process-wide default.
    pub fn with_engine(mut self, engine: Engine) -> Self {
        self.engine = Some(engine);
        self
    }

    /// The conversation id, if set.
    pub fn id(&self) -> Option<&str> {
        self.id.as_deref()
    }

    /// The engine, if set.
    pub fn engine(&self) -> Option<&Engine> {
        self.engine.as_ref()
    }

    /// A new context for one attempt of the call `call_id`, carrying `attempt`, the call's
    /// record shared by all its attempts (K9).
    pub fn call_context(&self, call_id: &str, attempt: Arc<AttemptRecord>) -> CallContext {
        let mut context = CallContext::new()
            .with_tool_call(call_id)
            .with_attempt(attempt);
        if let Some(id) = &self.id {
            context = context.with_conversation(Arc::clone(id));
        }
        for (name, value) in &self.scopes {
            context = context.with_scope(Arc::clone(name), Arc::clone(value));
        }
        if let Some(engine) = &self.engine {
            context = context.with_engine(engine.clone());
        }
        context
    }
}
