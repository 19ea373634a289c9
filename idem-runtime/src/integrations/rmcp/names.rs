//! The `_meta` member names this integration reads and writes (contract M2–M7).
//!
//! Names idem writes carry the prefix `idem/`, which MCP's `_meta` key rules allow
//! (labels, then `/`, then a name that begins and ends with a letter or digit) and which is
//! not reserved for MCP itself. Names it reads from a request are the client's: plain names
//! without a prefix, as the proposals and existing clients use them.

/// Request `_meta` member holding the conversation id of a `scope = "conversation"` tool
/// (the default; [`IdempotentServerBuilder::conversation_meta_key`](super::IdempotentServerBuilder::conversation_meta_key)
/// changes it): a non-empty string (M3).
pub const CONVERSATION_ID: &str = "conversationId";

/// Request `_meta` member holding a client-supplied idempotency key (the shape of the MCP
/// proposal SEP-3182, read from `_meta` because rmcp's typed `CallToolRequestParams` has no
/// params-level `idempotencyKey`): a non-empty string of at most
/// [`MAX_CLIENT_KEY_CHARS`] characters (M4).
pub const IDEMPOTENCY_KEY: &str = "idempotencyKey";

/// The longest client-supplied idempotency key accepted, in characters (Stripe's limit).
pub const MAX_CLIENT_KEY_CHARS: usize = 255;

/// Request `_meta` member holding the tool-call id of a `scope = "call"` tool: MCP has no
/// tool-call id of its own (the JSON-RPC id is per connection and restarts with every
/// session), so the client names the call (M3).
pub const TOOL_CALL_ID: &str = "toolCallId";

/// Result `_meta` member: `"executed"`, `"replayed"` or `"reconciled"` (M5).
pub const STATUS: &str = "idem/status";

/// Result `_meta` member: the call's idempotency key, 64 lowercase hex digits (M5).
pub const KEY: &str = "idem/key";

/// Result `_meta` member on an error of the idempotency layer: what went wrong, one of
/// `in_progress`, `conflict`, `missing_scope`, `outcome_unknown`, `store_unavailable`,
/// `store_error`, `bad_meta`, `bad_arguments`, `undecodable_outcome` (M6).
pub const ERROR: &str = "idem/error";

/// Result `_meta` member on a retryable error of the idempotency layer: when to retry, in
/// milliseconds from now (M6).
pub const RETRY_AFTER_MS: &str = "idem/retryAfterMs";

/// `_meta` member a tool body sets to `true` on an error result when the effect did not
/// happen: the result is not saved and the next call runs the tool again (M8); see
/// [`retryable_error`](super::retryable_error).
pub const RETRYABLE: &str = "idem/retryable";

/// `_meta` member a tool body sets to `true` on an error result when whether the effect
/// happened is unknown: the result is not saved and the key is held as outcome unknown
/// (M8, U1); see [`outcome_unknown_error`](super::outcome_unknown_error).
pub const OUTCOME_UNKNOWN: &str = "idem/outcomeUnknown";

/// Tool `_meta` member marking a tool keyed by its own `#[idempotent]` (written by
/// [`tool_meta`](super::tool_meta)): an object `{"scope": "<scope kind>"}` (M9).
pub const TOOL_MARKER: &str = "idem/idempotent";

/// The member of `capabilities.experimental` that [`IdempotentServer`](super::IdempotentServer)
/// adds to its server info (M10).
pub const CAPABILITY: &str = "idempotency";

/// The scope kind hashed into the key of a call that carries a client idempotency key. It
/// contains a `:`, which no `#[idempotent(scope = "…")]` name may, so it never collides
/// with a user-named scope (K1, K7).
pub(crate) const CLIENT_KEY_SCOPE: &str = "mcp:idempotencyKey";

/// The prefix of a conversation id taken from the MCP session (streamable HTTP), so that a
/// session id and a client-chosen `_meta.conversationId` never name the same conversation.
pub(crate) const SESSION_PREFIX: &str = "mcp-session:";
