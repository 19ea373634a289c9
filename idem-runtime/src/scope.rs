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
    /// has no such value, or only an empty one (K7): never a silently shared key. (Several
    /// frameworks default a missing thread id to `""`; read as a real id, it would make
    /// every such conversation one.)
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
        let Some(value) = value.filter(|value| !value.is_empty()) else {
            return Err(Error::MissingScope {
                tool: tool.to_owned(),
                scope: kind.to_owned(),
            });
        };
        let within = match self {
            Scope::Call => context
                .and_then(CallContext::conversation_id)
                .filter(|conversation| !conversation.is_empty()),
            _ => None,
        };
        Ok(ScopeComponent {
            kind,
            value: Some(value),
            within,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins K7: an empty scope value is none: MissingScope, never a key shared by every
    // conversation (or call, or tenant) whose id defaulted to ""
    #[test]
    fn an_empty_value_is_missing() {
        let empty = CallContext::new()
            .with_conversation("")
            .with_tool_call("")
            .with_scope("tenant", "");
        for scope in [Scope::Conversation, Scope::Call, Scope::Named("tenant")] {
            let error = scope.resolve("refund", Some(&empty)).unwrap_err();
            assert!(
                matches!(&error, Error::MissingScope { scope: s, .. } if s == scope.kind()),
                "{error:?}"
            );
        }
        let with_call = CallContext::new()
            .with_conversation("")
            .with_tool_call("call_1");
        let component = Scope::Call.resolve("refund", Some(&with_call)).unwrap();
        assert_eq!(component.value, Some("call_1"));
        assert_eq!(
            component.within, None,
            "an empty conversation is no conversation"
        );
        let real = CallContext::new().with_conversation("c-9");
        assert!(Scope::Conversation.resolve("refund", Some(&real)).is_ok());
    }
}
