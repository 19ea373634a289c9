//! Scopes: whose calls share idempotency keys (contract K7).

use crate::context::CallContext;
use crate::error::Error;
use crate::key::ScopeComponent;

/// Which value, besides the tool name and arguments, a tool's keys are derived from.
///
/// Chosen with the attribute's `scope = "…"` option.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Scope {
    /// `scope = "conversation"` (the default): the conversation id in force for the call.
    /// Equal calls in one conversation share a record; other conversations do not.
    Conversation,
    /// `scope = "global"`: no scope value. Equal calls share one record everywhere the
    /// store is shared.
    Global,
    /// `scope = "call"`: the provider's tool-call id, within the conversation in force if
    /// any (provider ids repeat across conversations: MCP request ids restart at every
    /// session). For tools whose identical calls are distinct intents (two dice rolls):
    /// only retries of the same tool call replay.
    Call,
    /// `scope = "tenant"` (any other name): the value set under that name on the
    /// [`CallContext`] with [`CallContext::with_scope`].
    Named(&'static str),
}

impl Scope {
    /// The scope's kind as hashed into the key: `conversation`, `global`, `call`, or the
    /// user's name.
    pub fn kind(&self) -> &'static str {
        match self {
            Scope::Conversation => "conversation",
            Scope::Global => "global",
            Scope::Call => "call",
            Scope::Named(name) => name,
        }
    }

    /// The key component of this scope for a call made under `context`.
    ///
    /// # Errors
    /// [`Error::MissingScope`] when the scope needs a value and `context` is `None` or
    /// has no such value (K7): never a silently shared key.
    pub fn resolve<'c>(
        &self,
        tool: &str,
        context: Option<&'c CallContext>,
    ) -> Result<ScopeComponent<'c>, Error> {
        let kind = self.kind();
        let value = match self {
            Scope::Global => return Ok(ScopeComponent::new(kind, None)),
            Scope::Conversation => context.and_then(CallContext::conversation_id),
            Scope::Call => context.and_then(CallContext::tool_call_id),
            Scope::Named(name) => context.and_then(|c| c.scope_value(name)),
        };
        let Some(value) = value else {
            return Err(Error::MissingScope {
                tool: tool.to_owned(),
                scope: kind.to_owned(),
            });
        };
        let within = match self {
            Scope::Call => context.and_then(CallContext::conversation_id),
            _ => None,
        };
        Ok(ScopeComponent {
            kind,
            value: Some(value),
            within,
        })
    }
}
