//! What can be wrong with a tool-call document (D1, D2). What can be wrong with one call's
//! arguments ([`ArgumentError`](crate::dispatch::ArgumentError)) lives with the call it is
//! kept in (`dispatch::turn`).

use crate::dispatch::Provider;

/// Why a document could not be read as tool calls at all (contract D1, D2).
///
/// Returned by [`parse_turns`](crate::dispatch::parse_turns) and the per-provider parsers
/// when the document matches no known shape, or matches one but lacks a member every call
/// needs (an id to match the result to, a name to route by). Problems with one call's
/// *arguments* are not parse errors: that call keeps an
/// [`ArgumentError`](crate::dispatch::ArgumentError) and the other calls of the message still
/// run. Paths are JSONPath-like: `$.choices[0].message`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ParseError {
    /// The text given to [`parse_turns_str`](crate::dispatch::parse_turns_str) is not JSON.
    #[error("the document is not JSON: {message}")]
    InvalidJson {
        /// serde_json's message, with line and column.
        message: String,
    },

    /// The value at `path` matches none of the accepted shapes.
    #[error("no tool-call shape matches the value at {path} ({found}); expected an OpenAI Chat Completions response (`choices`) or assistant message (`tool_calls`), an OpenAI Responses response (`output`) or `function_call` item, an Anthropic Messages response or message (`content` blocks), a Gemini response (`candidates`), content (`parts`) or `contents` history, an MCP `tools/call` request (`jsonrpc`, `method`) or bare `CallToolRequestParams` (`name`, `arguments`), or an array of these")]
    UnknownShape {
        /// Where the value is.
        path: String,
        /// What was found there: its type, and for an object its first member names.
        found: String,
    },

    /// The value at `path` belongs to a recognised shape but is not what that provider's
    /// format puts there (a tool call without an id, a name that is not a string, …).
    #[error("{provider} document: expected {expected} at {path}, found {found}")]
    Malformed {
        /// The provider whose format was recognised.
        provider: Provider,
        /// Where the value is (or would be, when missing).
        path: String,
        /// What the format requires there.
        expected: &'static str,
        /// What was found: `missing`, or the value's type.
        found: String,
    },

    /// A response holds several alternative messages (`choices` / `candidates` with
    /// `n > 1`). They are alternatives, not one message: running all of them would run
    /// calls the agent did not choose. Pass the chosen message instead.
    #[error(
        "{provider} document: {count} alternative messages at {path}; pass the one the agent chose"
    )]
    MultipleChoices {
        /// The provider whose format was recognised.
        provider: Provider,
        /// Where the alternatives are.
        path: String,
        /// How many there are.
        count: usize,
    },
}
