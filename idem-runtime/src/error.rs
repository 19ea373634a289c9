//! Errors of the idempotency layer itself.
//!
//! These are never saved as a tool's outcome (contract S4): they describe why the layer
//! could not run or replay a call, not what the tool did. Each variant says what Stripe's
//! idempotent requests and the IETF `Idempotency-Key` header draft answer in the same case.

use serde::{Deserialize, Serialize};

use crate::canonical::CanonicalError;
use crate::key::IdempotencyKey;
use crate::store::StoreError;

/// An error of the idempotency layer (never a tool's own failure).
///
/// Tools return `Result<T, E>` where `E: From<idem_agent::Error>`, so these errors reach the
/// caller through the tool's own error type. `Error` is `Serialize + Deserialize` only so
/// that it can sit inside such an `E`; the layer never saves it as an outcome (S4).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum Error {
    /// The tool's scope needs a value (a conversation id, a tool-call id, a named scope
    /// value) and none is in force for this call. Raised before the body runs; the layer
    /// never falls back to a shared global key (K7). IETF draft: 400 (key missing).
    ///
    /// The message names the method that sets the value:
    /// `CallContext::with_conversation(…)` for `conversation`,
    /// `CallContext::with_tool_call(…)` for `call`, `CallContext::with_scope("name", …)`
    /// for a named scope.
    #[error("tool `{tool}` is keyed by scope `{scope}`, but no {scope} value is in force for this call (an empty one counts as none): set it with {} on the idem_agent::CallContext the call runs in", scope_setter(.scope))]
    MissingScope {
        /// The tool's name (K6).
        tool: String,
        /// The scope's name: `conversation`, `call`, or a user-named scope.
        scope: String,
    },

    /// The idempotency key was first used with different fingerprint arguments (only
    /// possible with `key(…)`). The body does not run and the saved record is untouched
    /// (S9). Stripe: 400 "Keys for idempotent requests can only be used with the same
    /// parameters"; IETF draft: 422.
    #[error("idempotency key {key} of tool `{tool}` was first used with different arguments (stored fingerprint {stored}, this call {given}); the first call's record is untouched")]
    Mismatch {
        /// The tool's name.
        tool: String,
        /// The idempotency key (lowercase hex).
        key: String,
        /// Fingerprint saved with the key.
        stored: String,
        /// Fingerprint of this call.
        given: String,
    },

    /// Another caller holds the key's claim and did not finish within this call's wait
    /// bound (S5). Retryable: retry later with the same key. Stripe: 409 Conflict; IETF
    /// draft: 409.
    #[error("idempotency key {key} of tool `{tool}` is in progress in another call; gave up after waiting {waited_ms} ms; retry with the same key")]
    InProgress {
        /// The tool's name.
        tool: String,
        /// The idempotency key (lowercase hex).
        key: String,
        /// How long this call waited, in milliseconds of the engine's clock.
        waited_ms: u64,
        /// When to try again, in milliseconds from now (engine clock): the owner's next
        /// renewal (one heartbeat of this tool) or its lease deadline, whichever is sooner;
        /// at least 1. The dispatcher does not retry sooner (D3).
        retry_after_ms: u64,
    },

    /// Whether the effect of the key's last run happened is unknown (U1, U2): that run was
    /// cancelled or panicked after it began, ended with an outcome-unknown error, its owner
    /// died (its lease lapsed), or the reconcile function could not tell. The body does not
    /// run. Not retried by the dispatcher: the model is told the outcome is unknown and not
    /// to retry the action (D3). With `held` (the default `on_unknown = "hold"`, U2) every
    /// call gets this until a person decides (`idem resolve`, U6); for a tool with a
    /// reconcile function the next call reconciles again; with `on_unknown = "rerun"`
    /// (U2a) the key is held until `retry_after_ms` has passed, after which the next call
    /// runs the body again with the same key. Stripe/IETF have no such answer: it is the
    /// 409 of a request whose first attempt may have had its effect.
    #[error("{}", outcome_unknown_message(tool, key, *since, *retry_after_ms, *held))]
    OutcomeUnknown {
        /// The tool's name.
        tool: String,
        /// The idempotency key (lowercase hex).
        key: String,
        /// Since when the outcome has been unknown: the claim time of the run whose
        /// outcome is unknown (engine clock, ms since the epoch).
        since: crate::clock::Timestamp,
        /// Under `on_unknown = "rerun"` (U2a) for a tool without a reconcile function: in
        /// how many milliseconds (engine clock) the held claim lapses and a call may run
        /// the body again. `None`: a person or a reconcile function decides.
        retry_after_ms: Option<u64>,
        /// `true` when nothing runs the body again until a person decides (U2): the tool
        /// holds unknown outcomes (the default) and has no reconcile function. Absent from
        /// older serialized errors (read as `false`).
        #[serde(default)]
        held: bool,
    },

    /// The tool requires a person's approval (A1) and this call's key has none in force:
    /// its request is recorded (the first call of the key records it, A2; a call that
    /// found the approval expired records it again, A4) and the body does not run. Not
    /// retried by the dispatcher (D3): the model is told the action waits for approval.
    /// Call again with the same arguments once `idem approve` (or
    /// [`Engine::approve`](crate::Engine::approve)) decided; a denial then answers
    /// [`Denied`](Self::Denied). Stripe/IETF have no such answer: it is a 202 Accepted
    /// whose work waits for a person.
    #[error("{}", awaiting_approval_message(tool, key, *since, *expired))]
    AwaitingApproval {
        /// The tool's name.
        tool: String,
        /// The idempotency key (lowercase hex).
        key: String,
        /// Since when the request waits (ms since the epoch; the clock of the call that
        /// recorded it).
        since: crate::clock::Timestamp,
        /// Whether an approval was given and expired before a call used it (A4).
        #[serde(default)]
        expired: bool,
    },

    /// A person denied this call (A3, A5): the denial is the key's saved outcome and
    /// every call with the key gets it until it expires. The body does not run. Not
    /// retried by the dispatcher: the model is told a person denied the action.
    #[error("{}", denied_message(tool, key, actor, note.as_deref(), *at))]
    Denied {
        /// The tool's name.
        tool: String,
        /// The idempotency key (lowercase hex).
        key: String,
        /// Who denied it.
        actor: String,
        /// Why, in their words.
        note: Option<String>,
        /// When (ms since the epoch, the decider's clock).
        at: crate::clock::Timestamp,
    },

    /// The key or fingerprint arguments cannot be written as canonical JSON (K2, K3):
    /// a NaN or infinite float, an unsupported map key, a failing `Serialize` impl.
    /// Raised before the store is consulted. Stripe/IETF: 400.
    #[error("arguments of tool `{tool}` cannot be canonicalised: {source}")]
    Canonical {
        /// The tool's name.
        tool: String,
        /// What was wrong, and where.
        source: CanonicalError,
    },

    /// The store could not be reached or answered badly (S10). When this happens before
    /// the claim, the body did not run. Retryable when [`StoreError::is_transient`].
    /// Stripe: 5xx, safe to retry with the same key.
    #[error("idempotency store failed for tool `{tool}`: {source}")]
    Store {
        /// The tool's name.
        tool: String,
        /// The store's error.
        source: StoreError,
        /// The call's idempotency key (lowercase hex) when the store failed after the key
        /// was derived (S13); `None` when no store could be had for the call at all.
        /// Absent from the serialized form when `None`.
        #[serde(default, skip_serializing_if = "Option::is_none")]
        key: Option<String>,
    },

    /// A saved outcome could not be decoded as this tool's return type (the type changed
    /// since it was saved, or the record is corrupt). The body does not run.
    #[error("saved outcome of key {key} of tool `{tool}` cannot be decoded as the tool's return type: {reason}")]
    Decode {
        /// The tool's name.
        tool: String,
        /// The idempotency key.
        key: String,
        /// The decoder's message.
        reason: String,
    },

    /// The engine's run-time settings for this tool (E1, E2) are invalid together with
    /// the attribute's values: an overridden lease longer than the attribute's ttl, an
    /// overridden heartbeat not shorter than the attribute's lease, or the attribute's
    /// heartbeat not shorter than an overridden lease (E3). Raised for every call of the
    /// tool through that engine, before the key is derived: the body does not run. Not
    /// retryable (fix the settings), never saved.
    #[error("invalid run-time settings for tool `{tool}`: {message}")]
    Config {
        /// The tool's name.
        tool: String,
        /// What is wrong, naming the settings and where their values came from.
        message: String,
    },
}

/// The `CallContext` method that gives a call the value of `scope` (K7).
fn scope_setter(scope: &str) -> String {
    match scope {
        "conversation" => "`CallContext::with_conversation(…)`".to_owned(),
        "call" => "`CallContext::with_tool_call(…)`".to_owned(),
        named => format!("`CallContext::with_scope({named:?}, …)`"),
    }
}

fn outcome_unknown_message(
    tool: &str,
    key: &str,
    since: crate::clock::Timestamp,
    retry_after_ms: Option<u64>,
    held: bool,
) -> String {
    let next = match (held, retry_after_ms) {
        (true, _) => format!("it is held until a person decides: nothing runs the tool again for this key on its own; an operator checks whether the effect happened (`idem show {key} --history`) and records it with `idem resolve {key} --applied [--output JSON]`, `--not-applied` or `--error JSON`; do not retry this action, in this or another form"),
        (false, Some(ms)) => format!("the key is held for {ms} ms more; after that a call runs the tool again with the same key"),
        (false, None) => "the next call asks the tool's reconcile function again".to_owned(),
    };
    format!("the outcome of idempotency key {key} of tool `{tool}` is unknown since {}: a run that claimed it ended without an outcome (cancelled, crashed, or timed out downstream), so the effect may or may not have happened; {next}", since.to_rfc3339())
}

fn awaiting_approval_message(
    tool: &str,
    key: &str,
    since: crate::clock::Timestamp,
    expired: bool,
) -> String {
    let why = if expired {
        "its approval expired before a call used it, so it waits for a new one"
    } else {
        "the tool did not run"
    };
    format!("the call of tool `{tool}` with idempotency key {key} waits for a person's approval since {}: {why}; an operator approves it with `idem approve {key}` or denies it with `idem deny {key} --note …`; then call it again with the same arguments (not in another form)", since.to_rfc3339())
}

fn denied_message(
    tool: &str,
    key: &str,
    actor: &str,
    note: Option<&str>,
    at: crate::clock::Timestamp,
) -> String {
    let note = note.map(|n| format!(": {n}")).unwrap_or_default();
    format!("the call of tool `{tool}` with idempotency key {key} was denied by {actor} at {}{note}; the tool did not run; do not retry this action, in this or another form", at.to_rfc3339())
}

impl Error {
    /// The idempotency key of the call, for every error raised after the key was derived
    /// (S13): [`Mismatch`](Self::Mismatch), [`InProgress`](Self::InProgress),
    /// [`OutcomeUnknown`](Self::OutcomeUnknown), [`AwaitingApproval`](Self::AwaitingApproval),
    /// [`Denied`](Self::Denied), [`Decode`](Self::Decode), and
    /// [`Store`](Self::Store) once the call had its key. `None` for errors raised before
    /// (`MissingScope`, `Canonical`, `Config`, a store that could not be had).
    pub fn key(&self) -> Option<IdempotencyKey> {
        match self {
            Error::Mismatch { key, .. }
            | Error::InProgress { key, .. }
            | Error::OutcomeUnknown { key, .. }
            | Error::AwaitingApproval { key, .. }
            | Error::Denied { key, .. }
            | Error::Decode { key, .. } => IdempotencyKey::from_hex(key),
            Error::Store { key, .. } => key.as_deref().and_then(IdempotencyKey::from_hex),
            Error::MissingScope { .. } | Error::Canonical { .. } | Error::Config { .. } => None,
        }
    }

    /// Whether retrying the same call later (same key) can succeed: `InProgress`, and
    /// store errors the store marks transient. The dispatcher retries these (D3).
    pub fn is_transient(&self) -> bool {
        match self {
            Error::InProgress { .. } => true,
            Error::Store { source, .. } => source.is_transient(),
            _ => false,
        }
    }
}
