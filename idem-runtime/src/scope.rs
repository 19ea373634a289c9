//! Scopes: whose calls share idempotency keys (contract K7).

use crate::context::CallContext;
use crate::error::Error;
use crate::label::ScopePath;

/// The scope-path part of a `scope = "call"` key that names the assistant message the call
/// came from (D10): `conversation=…, turn=…, call=…`.
pub const TURN_PART: &str = "turn";

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
    /// session) and within the turn it came from if known ([`CallContext::with_turn`]:
    /// some providers reuse call ids by position in every turn, D10). For tools whose
    /// identical calls are distinct intents (two dice rolls): only retries of the same
    /// tool call replay.
    Call,
    /// `scope = "tenant"` (any other name): the value set under that name on the
    /// [`CallContext`] with [`CallContext::with_scope`].
    Named(&'static str),
    /// `scope = "tenant+conversation"`: several parts, outermost first, every one required
    /// (K7). `kind` is the parts' kinds joined by `+`; `parts` are
    /// [`Conversation`](Scope::Conversation) or [`Named`](Scope::Named) scopes (a `call` or
    /// `global` part, or a nested composite, is refused as [`Error::MissingScope`] naming
    /// it). Conversation ids are often unique only within a tenant: keyed by both, two
    /// tenants' conversations `c-1` never share a record.
    Composite {
        /// The parts' kinds joined by `+`: `tenant+conversation`.
        kind: &'static str,
        /// The parts, outermost first.
        parts: &'static [Scope],
    },
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
            Scope::Composite { kind, .. } => kind,
        }
    }

    /// The user-named scopes whose values a call of this scope reads from its context: the
    /// scope itself if it is [`Named`](Scope::Named), a composite's named parts, else none.
    /// For integrations that build a call's context from their host's.
    pub fn named_parts(&self) -> Vec<&'static str> {
        match self {
            Scope::Named(name) => vec![*name],
            Scope::Composite { parts, .. } => parts
                .iter()
                .filter_map(|part| match part {
                    Scope::Named(name) => Some(*name),
                    _ => None,
                })
                .collect(),
            _ => Vec::new(),
        }
    }

    /// Whether a scope built by hand (not by the attribute, which checks at compile time)
    /// names scopes as the attribute allows: a named scope is a scope name (ASCII letters,
    /// digits, `_`, `-`, `.`, `:`, starting with a letter: never `+`, so that no named scope
    /// can pose as a composite, K7), and a composite's kind is its parts' kinds joined by
    /// `+`, its parts `conversation` or named scopes.
    ///
    /// # Errors
    /// [`Error::Config`] naming the tool and the scope.
    fn check(&self, tool: &str) -> Result<(), Error> {
        let refuse = |why: String| {
            Err(Error::Config {
                tool: tool.to_owned(),
                message: why,
            })
        };
        // A named scope spelled like a built-in one would resolve to the built-in's path (a
        // hand-built `conversation+turn+call` composite to a call scope's, D10): refused, as
        // the attribute refuses it (K12).
        let named_well = |name: &str| {
            crate::label::is_scope_name(name)
                && ![
                    Scope::Conversation.kind(),
                    Scope::Call.kind(),
                    Scope::Global.kind(),
                ]
                .contains(&name)
        };
        match self {
            Scope::Named(name) if !named_well(name) => refuse(format!(
                "scope name {name:?} is not a scope name of its own: ASCII letters, digits, `_`, \
                 `-`, `.` and `:`, starting with a letter, and not `conversation`, `call` or \
                 `global` (use those scopes; a composite is `Scope::Composite`)"
            )),
            Scope::Composite { kind, parts } => {
                let named_well = parts.iter().all(|part| match part {
                    Scope::Conversation => true,
                    Scope::Named(name) => named_well(name),
                    _ => false,
                });
                let joined = parts.iter().map(Scope::kind).collect::<Vec<_>>().join("+");
                if parts.len() < 2 || !named_well || joined != *kind {
                    return refuse(format!(
                        "composite scope {kind:?} must have two or more parts, each \
                         `Scope::Conversation` or a `Scope::Named` scope name, and the kind \
                         {joined:?} (its parts' kinds joined by `+`)"
                    ));
                }
                Ok(())
            }
            _ => Ok(()),
        }
    }

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
        self.check(tool)?;
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
