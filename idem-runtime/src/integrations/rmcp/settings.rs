//! What an [`IdempotentServer`](super::IdempotentServer) hands to the calls it serves, and
//! the checks on the spans it is configured with (contract M10, S8, L1).

use std::sync::Arc;
use std::time::Duration;

use super::names::{CONVERSATION_ID, IDEMPOTENCY_KEY, TOOL_CALL_ID};
use crate::engine::Engine;
use crate::spec::ToolSpec;

/// Put in a request's extensions by `IdempotentServer`: the engine and the `_meta` member of
/// the conversation id for the call (M10). Read by `McpCall`.
#[derive(Debug, Clone)]
pub(crate) struct CallSettings {
    pub engine: Option<Engine>,
    pub conversation_meta_key: Arc<str>,
}

impl Default for CallSettings {
    fn default() -> Self {
        CallSettings {
            engine: None,
            conversation_meta_key: Arc::from(CONVERSATION_ID),
        }
    }
}

/// Put in a request's extensions by `IdempotentServer` when it keys the call itself: an
/// `McpCall` inside (a hand-written tool without the marker) then runs its body as is, so a
/// call is never claimed twice under one key (M9).
#[derive(Debug, Clone, Copy)]
pub(crate) struct KeyedByServer;

/// Why an [`IdempotentServerBuilder`](super::IdempotentServerBuilder) could not build. The
/// rules are the attribute's (S8, L1), checked for the server's defaults and for every
/// per-tool override.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ServerConfigError {
    /// A TTL of zero would replay nothing: every retry would run the side effect again.
    #[error("the ttl of {} is zero: a zero TTL replays nothing, so every retry would run the side effect again", target(tool))]
    ZeroTtl {
        /// The tool whose override it is; `None` for the server's default.
        tool: Option<String>,
    },
    /// The TTL is shorter than the lease: a record could expire while its call still runs.
    #[error("the ttl of {} ({ttl_ms} ms) is shorter than its lease ({lease_ms} ms): a record could expire while its call still runs, and a retry would run the side effect again", target(tool))]
    TtlShorterThanLease {
        /// The tool whose override it is; `None` for the server's default.
        tool: Option<String>,
        /// The TTL, in milliseconds.
        ttl_ms: u128,
        /// The lease, in milliseconds.
        lease_ms: u128,
    },
    /// A lease of zero is "already lapsed" (S6): a duplicate would take over every call
    /// while it runs. The attribute may say so; a server's or a proxy's setting may not.
    #[error("the lease of {} is zero: a zero lease is already lapsed when the call starts, so a duplicate would take over every call while it runs and its outcome would be unknown; give a lease longer than the tool's slowest call", target(tool))]
    ZeroLease {
        /// The tool whose override it is; `None` for the server's default.
        tool: Option<String>,
    },
    /// A heartbeat of zero: the time between two renewals must be positive.
    #[error("the heartbeat of {} is zero: it is the time between two renewals of a running call's lease; leave it unset for a third of the lease", target(tool))]
    ZeroHeartbeat {
        /// The tool whose override it is; `None` for the server's default.
        tool: Option<String>,
    },
    /// The heartbeat is not shorter than the lease: the lease would lapse between renewals.
    #[error("the heartbeat of {} ({heartbeat_ms} ms) is not shorter than its lease ({lease_ms} ms): the lease would lapse between two renewals and another caller could run the side effect again while this call still runs", target(tool))]
    HeartbeatNotShorterThanLease {
        /// The tool whose override it is; `None` for the server's default.
        tool: Option<String>,
        /// The heartbeat, in milliseconds.
        heartbeat_ms: u128,
        /// The lease, in milliseconds.
        lease_ms: u128,
    },
    /// A span with a fraction of a millisecond: idem measures time in whole milliseconds.
    #[error("the {option} of {} is not a whole number of milliseconds; idem measures time in milliseconds", target(tool))]
    NotWholeMilliseconds {
        /// The tool whose override it is; `None` for the server's default.
        tool: Option<String>,
        /// `ttl`, `lease`, `wait` or `heartbeat`.
        option: &'static str,
    },
    /// The conversation `_meta` member is empty or names a member idem reads for
    /// something else (`idempotencyKey`, `toolCallId`).
    #[error("`{key}` cannot hold the conversation id: give a non-empty `_meta` member name other than `{IDEMPOTENCY_KEY}` and `{TOOL_CALL_ID}`")]
    BadConversationMetaKey {
        /// The name given.
        key: String,
    },
    /// A per-tool setting (`tool_spec`, `exclude`) names the empty tool name.
    #[error("a per-tool setting names the empty tool name")]
    EmptyToolName,
}

fn target(tool: &Option<String>) -> String {
    match tool {
        Some(tool) => format!("tool `{tool}`"),
        None => "the server's default".to_owned(),
    }
}

/// Checks the spans of `spec` (the server's default when `tool` is `None`).
pub(crate) fn check_spec(spec: &ToolSpec, tool: Option<&str>) -> Result<(), ServerConfigError> {
    let tool = || tool.map(str::to_owned);
    let whole = |option: &'static str, span: Duration| {
        if span.subsec_nanos().is_multiple_of(1_000_000) {
            Ok(())
        } else {
            Err(ServerConfigError::NotWholeMilliseconds {
                tool: tool(),
                option,
            })
        }
    };
    whole("ttl", spec.ttl)?;
    whole("lease", spec.lease)?;
    whole("wait", spec.wait)?;
    if let Some(heartbeat) = spec.heartbeat {
        whole("heartbeat", heartbeat)?;
    }
    if spec.ttl.is_zero() {
        return Err(ServerConfigError::ZeroTtl { tool: tool() });
    }
    if spec.lease.is_zero() {
        return Err(ServerConfigError::ZeroLease { tool: tool() });
    }
    if spec.ttl < spec.lease {
        return Err(ServerConfigError::TtlShorterThanLease {
            tool: tool(),
            ttl_ms: spec.ttl.as_millis(),
            lease_ms: spec.lease.as_millis(),
        });
    }
    match spec.heartbeat {
        Some(heartbeat) if heartbeat.is_zero() => {
            Err(ServerConfigError::ZeroHeartbeat { tool: tool() })
        }
        Some(heartbeat) if heartbeat >= spec.lease => {
            Err(ServerConfigError::HeartbeatNotShorterThanLease {
                tool: tool(),
                heartbeat_ms: heartbeat.as_millis(),
                lease_ms: spec.lease.as_millis(),
            })
        }
        _ => Ok(()),
    }
}

/// Checks the `_meta` member name for the conversation id.
pub(crate) fn check_conversation_meta_key(key: &str) -> Result<(), ServerConfigError> {
    if key.is_empty() || key == IDEMPOTENCY_KEY || key == TOOL_CALL_ID {
        return Err(ServerConfigError::BadConversationMetaKey {
            key: key.to_owned(),
        });
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn spec(f: impl FnOnce(&mut ToolSpec)) -> ToolSpec {
        let mut spec = ToolSpec::new("");
        f(&mut spec);
        spec
    }

    // pins S8, L1: the builder refuses what the attribute refuses at compile time
    #[test]
    fn spans_are_checked() {
        assert_eq!(check_spec(&ToolSpec::new(""), None), Ok(()));
        let short = spec(|s| s.ttl = Duration::from_secs(10));
        assert_eq!(
            check_spec(&short, Some("t")).unwrap_err().to_string(),
            "the ttl of tool `t` (10000 ms) is shorter than its lease (60000 ms): a record could expire while its call still runs, and a retry would run the side effect again"
        );
        let zero = spec(|s| s.ttl = Duration::ZERO);
        assert!(matches!(
            check_spec(&zero, None),
            Err(ServerConfigError::ZeroTtl { tool: None })
        ));
        let beat = spec(|s| s.heartbeat = Some(Duration::from_secs(60)));
        assert!(matches!(
            check_spec(&beat, None),
            Err(ServerConfigError::HeartbeatNotShorterThanLease { .. })
        ));
        let lease = spec(|s| s.lease = Duration::ZERO);
        assert!(matches!(
            check_spec(&lease, Some("t")),
            Err(ServerConfigError::ZeroLease { .. })
        ));
        let beat = spec(|s| s.heartbeat = Some(Duration::ZERO));
        assert!(matches!(
            check_spec(&beat, None),
            Err(ServerConfigError::ZeroHeartbeat { .. })
        ));
        let micro = spec(|s| s.wait = Duration::from_micros(1500));
        assert!(matches!(
            check_spec(&micro, None),
            Err(ServerConfigError::NotWholeMilliseconds { option: "wait", .. })
        ));
        assert!(check_conversation_meta_key("threadId").is_ok());
        assert!(check_conversation_meta_key("").is_err());
        assert!(check_conversation_meta_key("idempotencyKey").is_err());
    }
}
