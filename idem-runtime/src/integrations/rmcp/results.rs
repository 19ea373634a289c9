//! The results idem hands back: a saved or replayed result with its status in `_meta`, the
//! idempotency layer's own errors as tool errors a model can act on, and the two markers a
//! tool body puts on an error result that must not be saved (contract M5, M6, M8).

use ::rmcp::model::{CallToolResult, ContentBlock, MetaObject};
use serde_json::Value;

use super::names::{
    ERROR, IDEMPOTENCY_KEY, KEY, OUTCOME_UNKNOWN, RETRYABLE, RETRY_AFTER_MS, STATUS, TOOL_CALL_ID,
};
use crate::error::Error;
use crate::key::IdempotencyKey;
use crate::outcome::CallStatus;

/// An error result for a failure after which the effect did **not** happen (the payment API
/// refused the connection): idem does not save it, releases the claim, and the next call
/// with the same key runs the tool again (M8, S4). The client sees an ordinary error result
/// (`isError: true`, `text`) whose `_meta` says `"idem/retryable": true`.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::integrations::rmcp::retryable_error;
/// let result = retryable_error("the bank refused the connection; nothing was sent");
/// assert_eq!(result.is_error, Some(true));
/// assert_eq!(result.meta.unwrap()["idem/retryable"], true);
/// ```
pub fn retryable_error(text: impl Into<String>) -> CallToolResult {
    marked_error(text, RETRYABLE)
}

/// An error result for a failure after which whether the effect happened is **unknown**
/// (the payment API timed out after the request was sent): idem does not save it and holds
/// the key as outcome unknown (M8, U1): later calls get an `outcome_unknown` error until
/// the claim's lease lapses, then the tool runs again with the same key. `_meta` says
/// `"idem/outcomeUnknown": true`.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::integrations::rmcp::outcome_unknown_error;
/// let result = outcome_unknown_error("the bank timed out after the refund was sent");
/// assert_eq!(result.meta.unwrap()["idem/outcomeUnknown"], true);
/// ```
pub fn outcome_unknown_error(text: impl Into<String>) -> CallToolResult {
    marked_error(text, OUTCOME_UNKNOWN)
}

fn marked_error(text: impl Into<String>, marker: &str) -> CallToolResult {
    let mut meta = MetaObject::new();
    meta.insert(marker.to_owned(), Value::Bool(true));
    CallToolResult::error(vec![ContentBlock::text(text)]).with_meta(Some(meta))
}

/// Whether a body's result carries `marker` (`"idem/retryable"` or `"idem/outcomeUnknown"`)
/// set to `true`.
pub(crate) fn has_marker(result: &CallToolResult, marker: &str) -> bool {
    result
        .meta
        .as_ref()
        .and_then(|meta| meta.get(marker))
        .and_then(Value::as_bool)
        .unwrap_or(false)
}

/// The status name written as `_meta["idem/status"]` (M5).
pub(crate) fn status_name(status: CallStatus) -> &'static str {
    match status {
        CallStatus::Executed => "executed",
        CallStatus::Replayed => "replayed",
        CallStatus::Reconciled => "reconciled",
    }
}

/// `result` with `_meta["idem/status"]` and `_meta["idem/key"]` added to whatever `_meta`
/// the tool wrote (M5).
pub(crate) fn with_status(
    mut result: CallToolResult,
    status: &'static str,
    key: &IdempotencyKey,
) -> CallToolResult {
    let meta = result.meta.get_or_insert_with(MetaObject::new);
    meta.insert(STATUS.to_owned(), Value::from(status));
    meta.insert(KEY.to_owned(), Value::from(key.as_str()));
    result
}

/// What a layer error's text says about the call it refused.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Refused<'a> {
    /// The `_meta` member a conversation id is read from.
    pub conversation_meta_key: &'a str,
    /// Whether the call carried a client idempotency key (then a conflict is about that key).
    pub client_key: bool,
    /// Whether a session of the transport would be the conversation (an rmcp server's
    /// call; not a proxy's).
    pub transport_sessions: bool,
}

/// An error of the idempotency layer as a tool error (`isError: true`) whose text says what
/// to do, with `_meta["idem/error"]`, `_meta["idem/retryAfterMs"]` when retrying later can
/// succeed, and `_meta["idem/key"]` when the key is known (M6).
pub(crate) fn layer_error(
    error: &Error,
    key: Option<&IdempotencyKey>,
    refused: Refused<'_>,
) -> CallToolResult {
    let (code, retry_after_ms, text) = describe(error, refused);
    let mut meta = MetaObject::new();
    meta.insert(ERROR.to_owned(), Value::from(code));
    if let Some(ms) = retry_after_ms {
        meta.insert(RETRY_AFTER_MS.to_owned(), Value::from(ms));
    }
    if let Some(key) = key {
        meta.insert(KEY.to_owned(), Value::from(key.as_str()));
    }
    CallToolResult::error(vec![ContentBlock::text(text)]).with_meta(Some(meta))
}

/// A tool error for a `_meta` member that is present but unusable (M3, M4).
pub(crate) fn bad_meta(text: String) -> CallToolResult {
    refusal("bad_meta", text)
}

/// A tool error for a tool whose `key(…)`/`skip(…)` name a member its arguments do not
/// have (M2): every call fails until the attribute is fixed.
pub(crate) fn bad_configuration(text: String) -> CallToolResult {
    refusal("bad_configuration", text)
}

fn refusal(code: &'static str, text: String) -> CallToolResult {
    let mut meta = MetaObject::new();
    meta.insert(ERROR.to_owned(), Value::from(code));
    CallToolResult::error(vec![ContentBlock::text(text)]).with_meta(Some(meta))
}

/// `(idem/error code, retry-after ms, text)` of a layer error.
fn describe(error: &Error, refused: Refused<'_>) -> (&'static str, Option<u64>, String) {
    match error {
        Error::InProgress {
            tool,
            key,
            retry_after_ms,
            ..
        } => (
            "in_progress",
            Some(*retry_after_ms),
            format!(
                "another call with this idempotency key is running; retry after {retry_after_ms} ms with the same arguments to get its result (tool `{tool}`, idempotency key {key}); this call did not run the tool"
            ),
        ),
        Error::Mismatch { tool, key, .. } if refused.client_key => (
            "conflict",
            None,
            format!(
                "conflict: this `_meta.{IDEMPOTENCY_KEY}` was already used for a call of tool `{tool}` with other arguments, whose outcome is kept; repeat that call's arguments to get its result, or send a new `_meta.{IDEMPOTENCY_KEY}` for a new request (idempotency key {key}); this call did not run the tool"
            ),
        ),
        Error::Mismatch { tool, key, .. } => (
            "conflict",
            None,
            format!(
                "conflict: an earlier call of tool `{tool}` with the same key arguments had other values for its other arguments, and its outcome is kept; repeat its arguments to get its result, or change a key argument for a new request (idempotency key {key}); this call did not run the tool"
            ),
        ),
        Error::MissingScope { tool, scope } => ("missing_scope", None, missing_scope(tool, scope, refused)),
        Error::OutcomeUnknown {
            tool,
            key,
            retry_after_ms,
            held,
            ..
        } => {
            let next = match (held, retry_after_ms) {
                (true, _) => "a person is checking whether it happened, and nothing runs the tool again for this key until they decide: do not retry this action, with this tool or another, and tell the user that its outcome is being checked".to_owned(),
                (false, Some(ms)) => format!("check whether it happened before retrying: a call after {ms} ms runs the tool again with the same key"),
                (false, None) => "the next call asks the tool's reconcile function whether it happened".to_owned(),
            };
            (
                "outcome_unknown",
                *retry_after_ms,
                format!(
                    "the outcome of an earlier call with this idempotency key is unknown: it ended without an outcome (cancelled, crashed, or timed out downstream), so its effect may or may not have happened; {next} (tool `{tool}`, idempotency key {key}); this call did not run the tool"
                ),
            )
        }
        Error::AwaitingApproval {
            tool, key, expired, ..
        } => {
            let why = if *expired {
                "its earlier approval expired before it ran, so it waits for a new one"
            } else {
                "it waits for a person's approval"
            };
            (
                "awaiting_approval",
                None,
                format!(
                    "this action needs a person's approval and {why}; the tool did not run; do not retry it now nor in another form: tell the user it awaits approval, and call it again later with the same arguments, which runs it once it is approved (tool `{tool}`, idempotency key {key})"
                ),
            )
        }
        Error::Denied {
            tool,
            key,
            actor,
            note,
            ..
        } => {
            let note = note.as_deref().map(|n| format!(": {n}")).unwrap_or_default();
            (
                "denied",
                None,
                format!(
                    "a person ({actor}) denied this action{note}; the tool did not run; do not retry it, with this tool or another, and tell the user it was denied (tool `{tool}`, idempotency key {key})"
                ),
            )
        }
        Error::Store { source, .. } if source.is_transient() => (
            "store_unavailable",
            None,
            format!(
                "the idempotency store is unavailable ({source}); the tool did not run; retry the same call"
            ),
        ),
        Error::Store { source, .. } => (
            "store_error",
            None,
            format!("the idempotency store failed ({source}); the tool did not run"),
        ),
        Error::Canonical { tool, source } => (
            "bad_arguments",
            None,
            format!("the arguments of tool `{tool}` cannot be keyed: {source}; the tool did not run"),
        ),
        Error::Config { tool, message } => (
            "bad_configuration",
            None,
            format!("the idempotency settings of tool `{tool}` are invalid: {message}; the tool did not run"),
        ),
        Error::Decode {
            tool, key, reason, ..
        } => (
            "undecodable_outcome",
            None,
            format!(
                "the saved outcome of this call of tool `{tool}` (idempotency key {key}) cannot be read: {reason}; the tool did not run"
            ),
        ),
    }
}

fn missing_scope(tool: &str, scope: &str, refused: Refused<'_>) -> String {
    let send = match scope {
        "conversation" => format!(
            "is keyed by conversation: send the conversation id as `_meta.{}` (a non-empty string, the same for every call of the conversation){}",
            refused.conversation_meta_key,
            if refused.transport_sessions {
                ", or call it over a transport with sessions (streamable HTTP)"
            } else {
                ""
            }
        ),
        "call" => format!(
            "is keyed by tool call: send the id of this tool call as `_meta.{TOOL_CALL_ID}` (a non-empty string, the same on every retry of the call)"
        ),
        named => format!("is keyed by `{named}`: send it as `_meta.{named}` (a non-empty string)"),
    };
    format!(
        "tool `{tool}` {send}, or send your own `_meta.{IDEMPOTENCY_KEY}` for this request; the tool did not run"
    )
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::clock::Timestamp;

    fn refused() -> Refused<'static> {
        Refused {
            conversation_meta_key: "threadId",
            client_key: false,
            transport_sessions: true,
        }
    }

    fn text(result: &CallToolResult) -> &str {
        &result.content[0].as_text().unwrap().text
    }

    // pins M6: every layer error is a tool error saying what to do, with a machine-readable code
    #[test]
    fn layer_errors_say_what_to_do() {
        let key = IdempotencyKey::from_hex(&"a".repeat(64)).unwrap();
        let busy = Error::InProgress {
            tool: "send_refund".into(),
            key: key.to_string(),
            waited_ms: 0,
            retry_after_ms: 250,
        };
        let result = layer_error(&busy, Some(&key), refused());
        assert_eq!(result.is_error, Some(true));
        assert!(text(&result)
            .starts_with("another call with this idempotency key is running; retry after 250 ms"));
        let meta = result.meta.unwrap();
        assert_eq!(meta[ERROR], "in_progress");
        assert_eq!(meta[RETRY_AFTER_MS], 250);
        assert_eq!(meta[KEY], key.as_str());

        let missing = Error::MissingScope {
            tool: "send_refund".into(),
            scope: "conversation".into(),
        };
        let result = layer_error(&missing, None, refused());
        assert!(text(&result).contains("send the conversation id as `_meta.threadId`"));
        assert_eq!(result.meta.unwrap()[ERROR], "missing_scope");

        let unknown = Error::OutcomeUnknown {
            tool: "t".into(),
            key: key.to_string(),
            since: Timestamp::EPOCH,
            retry_after_ms: Some(900),
            held: false,
        };
        let result = layer_error(&unknown, Some(&key), refused());
        assert!(text(&result).contains("a call after 900 ms runs the tool again"));
        assert_eq!(result.meta.as_ref().unwrap()[RETRY_AFTER_MS], 900);
        assert_eq!(result.meta.unwrap()[ERROR], "outcome_unknown");

        // pins M6, U2: a key held for a person's decision has no retry hint, and the text
        // tells the model not to retry the action in any form
        let held = Error::OutcomeUnknown {
            tool: "t".into(),
            key: key.to_string(),
            since: Timestamp::EPOCH,
            retry_after_ms: None,
            held: true,
        };
        let result = layer_error(&held, Some(&key), refused());
        assert!(
            text(&result).contains("do not retry this action"),
            "{}",
            text(&result)
        );
        let meta = result.meta.unwrap();
        assert_eq!(meta[ERROR], "outcome_unknown");
        assert!(meta.get(RETRY_AFTER_MS).is_none());

        // pins M6, A2, A5, D3: an awaiting-approval answer tells the model to call again
        // later with the same arguments, not in another form; a denial names who denied it
        // and says not to retry; neither has a retry hint
        for (expired, words) in [(false, "waits for a person's approval"), (true, "expired")] {
            let waiting = Error::AwaitingApproval {
                tool: "t".into(),
                key: key.to_string(),
                since: Timestamp::EPOCH,
                expired,
            };
            let result = layer_error(&waiting, Some(&key), refused());
            let said = text(&result);
            assert!(said.contains(words), "{said}");
            assert!(said.contains("same arguments"), "{said}");
            assert!(said.contains("nor in another form"), "{said}");
            let meta = result.meta.unwrap();
            assert_eq!(meta[ERROR], "awaiting_approval");
            assert!(meta.get(RETRY_AFTER_MS).is_none());
        }
        let denied = Error::Denied {
            tool: "t".into(),
            key: key.to_string(),
            actor: "ana".into(),
            note: Some("amount too high".into()),
            at: Timestamp::EPOCH,
        };
        let result = layer_error(&denied, Some(&key), refused());
        let said = text(&result);
        assert!(
            said.contains("(ana) denied this action: amount too high"),
            "{said}"
        );
        assert!(said.contains("do not retry it"), "{said}");
        assert_eq!(result.meta.unwrap()[ERROR], "denied");
    }
}
