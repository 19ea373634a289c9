//! Scopes: whose calls share idempotency keys (contract K7).

/// The scope-path part of a `scope = "call"` key that names the assistant message the call
/// came from (D10): `conversation=…, turn=…, call=…`.
pub const TURN_PART: &str = "turn";

/// The kind of the `call` scope: a provider's tool-call id.
pub(crate) const CALL: &str = "call";
/// The kind of the `conversation` scope.
pub(crate) const CONVERSATION: &str = "conversation";
/// The kind hashed for a scope without parts.
pub(crate) const GLOBAL: &str = "global";

/// Whether `name` can name a scope (K7, K12): ASCII letters, digits, `_`, `-`, `.` and `:`,
/// starting with a letter. Never `+` (which joins a composite's kinds) or `/` and `=`
/// (which separate a scope path's parts).
pub(crate) fn is_scope_name(name: &str) -> bool {
    name.starts_with(|c: char| c.is_ascii_alphabetic())
        && name
            .chars()
            .all(|c| c.is_ascii_alphanumeric() || matches!(c, '_' | '-' | '.' | ':'))
}

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
    /// session) and within the turn it came from if known ([`CallContext::with_turn`](crate::CallContext::with_turn):
    /// some providers reuse call ids by position in every turn, D10). For tools whose
    /// identical calls are distinct intents (two dice rolls): only retries of the same
    /// tool call replay.
    Call,
    /// `scope = "tenant"` (any other name): the value set under that name on the
    /// [`CallContext`](crate::CallContext) with
    /// [`CallContext::with_scope`](crate::CallContext::with_scope).
    Named(&'static str),
    /// `scope = "tenant+conversation"`: several parts, outermost first, every one required
    /// (K7). `kind` is the parts' kinds joined by `+`; `parts` are
    /// [`Conversation`](Scope::Conversation) or [`Named`](Scope::Named) scopes (a `call` or
    /// `global` part, or a nested composite, is refused as [`Error::MissingScope`](crate::Error::MissingScope) naming
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
            Scope::Conversation => CONVERSATION,
            Scope::Global => GLOBAL,
            Scope::Call => CALL,
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
    /// Why not, as text: [`Scope::resolve`] reports it as
    /// [`Error::Config`](crate::Error::Config) naming the tool.
    pub(crate) fn check(&self) -> Result<(), String> {
        let refuse = |why: String| Err(why);
        // A named scope spelled like a built-in one would resolve to the built-in's path (a
        // hand-built `conversation+turn+call` composite to a call scope's, D10): refused, as
        // the attribute refuses it (K12).
        let named_well = |name: &str| {
            is_scope_name(name)
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
}
