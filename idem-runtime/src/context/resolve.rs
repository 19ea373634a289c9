//! Resolving a tool's [`Scope`] against the [`CallContext`] of a call: the scope path its
//! key is derived from (K7, P1, D10).
//!
//! The scope types themselves ([`crate::scope`]) know nothing of contexts; this is where a
//! scope reads the values in force for one call.

use crate::error::Error;
use crate::label::ScopePath;
use crate::scope::{Scope, TURN_PART};

use super::CallContext;

impl Scope {
    /// The scope path of a call made under `context` (P1): the parts whose values the key
    /// is derived from ([`ScopePath::with_component`]).
    ///
    /// # Errors
    /// [`Error::MissingScope`] when the scope needs a value and `context` is `None` or
    /// has no such value, or only an empty one (K7): never a silently shared key. (Several
    /// frameworks default a missing thread id to `""`; read as a real id, it would make
    /// every such conversation one.) A composite scope names the first part that is
    /// missing. [`Error::Config`] for a scope built by hand that the attribute would refuse
    /// (a named scope that is not a scope name, a composite whose kind is not its parts').
    pub fn resolve(&self, tool: &str, context: Option<&CallContext>) -> Result<ScopePath, Error> {
        let missing = |kind: &str| Error::MissingScope {
            tool: tool.to_owned(),
            scope: kind.to_owned(),
        };
        let value = |scope: &Scope| -> Result<String, Error> {
            let value = match scope {
                Scope::Conversation => context.and_then(CallContext::conversation_id),
                Scope::Call => context.and_then(CallContext::tool_call_id),
                Scope::Named(name) => context.and_then(|c| c.scope_value(name)),
                Scope::Global | Scope::Composite { .. } => None,
            };
            value
                .filter(|value| !value.is_empty())
                .map(str::to_owned)
                .ok_or_else(|| missing(scope.kind()))
        };
        self.check().map_err(|message| Error::Config {
            tool: tool.to_owned(),
            message,
        })?;
        let path = ScopePath::new();
        Ok(match self {
            Scope::Global => path,
            Scope::Call => {
                let call = value(self)?;
                let within = [
                    (
                        Scope::Conversation.kind(),
                        context.and_then(CallContext::conversation_id),
                    ),
                    (TURN_PART, context.and_then(CallContext::turn_id)),
                ];
                let mut path = path;
                for (kind, value) in within {
                    if let Some(value) = value.filter(|value| !value.is_empty()) {
                        path = path.with(kind, value);
                    }
                }
                path.with(self.kind(), call)
            }
            Scope::Conversation | Scope::Named(_) => path.with(self.kind(), value(self)?),
            Scope::Composite { parts, .. } => {
                let mut path = path;
                for part in *parts {
                    if !matches!(part, Scope::Conversation | Scope::Named(_)) {
                        return Err(missing(part.kind()));
                    }
                    path = path.with(part.kind(), value(part)?);
                }
                path
            }
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
        let path = Scope::Call.resolve("refund", Some(&with_call)).unwrap();
        assert_eq!(
            path.to_string(),
            "call=call_1",
            "an empty conversation is no conversation"
        );
        let real = CallContext::new().with_conversation("c-9");
        assert!(Scope::Conversation.resolve("refund", Some(&real)).is_ok());
    }

    // pins K7: a composite scope needs every part and names the missing one
    #[test]
    fn composite_scopes_need_every_part() {
        static BOTH: Scope = Scope::Composite {
            kind: "tenant+conversation",
            parts: &[Scope::Named("tenant"), Scope::Conversation],
        };
        let full = CallContext::new()
            .with_conversation("c-1")
            .with_scope("tenant", "acme");
        let path = BOTH.resolve("refund", Some(&full)).unwrap();
        assert_eq!(path.to_string(), "tenant=acme/conversation=c-1");
        assert_eq!(path.kind(), BOTH.kind());
        for (context, missing) in [
            (CallContext::new().with_conversation("c-1"), "tenant"),
            (
                CallContext::new().with_scope("tenant", "acme"),
                "conversation",
            ),
            (
                CallContext::new()
                    .with_scope("tenant", "")
                    .with_conversation("c-1"),
                "tenant",
            ),
        ] {
            let error = BOTH.resolve("refund", Some(&context)).unwrap_err();
            assert!(
                matches!(&error, Error::MissingScope { scope, .. } if scope == missing),
                "{error:?}"
            );
        }
        static WITH_CALL: Scope = Scope::Composite {
            kind: "tenant+call",
            parts: &[Scope::Named("tenant"), Scope::Call],
        };
        let context = full.with_tool_call("call_1");
        assert!(WITH_CALL.resolve("refund", Some(&context)).is_err());
    }

    // pins K7, K12: scopes built by hand that the attribute would refuse are Config errors,
    // so that no named scope can pose as a composite (`a+b`) and no label becomes unreadable
    #[test]
    fn hand_built_scopes_are_checked() {
        let context = CallContext::new()
            .with_conversation("c-1")
            .with_scope("tenant+conversation", r#"["acme","c-1"]"#)
            .with_scope("tenant", "acme");
        static WRONG_KIND: Scope = Scope::Composite {
            kind: "conversation+tenant",
            parts: &[Scope::Named("tenant"), Scope::Conversation],
        };
        static ONE_PART: Scope = Scope::Composite {
            kind: "tenant",
            parts: &[Scope::Named("tenant")],
        };
        for scope in [
            Scope::Named("tenant+conversation"),
            Scope::Named("a b"),
            Scope::Named(""),
            WRONG_KIND,
            ONE_PART,
        ] {
            let error = scope.resolve("refund", Some(&context)).unwrap_err();
            assert!(
                matches!(error, Error::Config { .. }),
                "{scope:?}: {error:?}"
            );
        }
        assert!(Scope::Named("mcp:idempotencyKey")
            .resolve(
                "refund",
                Some(&context.clone().with_scope("mcp:idempotencyKey", "k"))
            )
            .is_ok());
    }
}
