//! What can be wrong with a tool-call document (D1) or with one call's arguments (D2).

use crate::dispatch::Provider;

/// Why a document could not be read as tool calls at all (contract D1, D2).
///
/// Returned by [`parse_turns`](crate::dispatch::parse_turns) and the per-provider parsers
/// when the document matches no known shape, or matches one but lacks a member every call
/// needs (an id to match the result to, a name to route by). Problems with one call's
/// *arguments* are not parse errors: that call keeps an [`ArgumentError`] and the other
/// calls of the message still run. Paths are JSONPath-like: `$.choices[0].message`.
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

/// Why one tool call's arguments cannot be used (contract D2).
///
/// The call is kept in its [`Turn`](crate::dispatch::Turn) with this error: the dispatcher
/// answers it with an error result, does not run the tool, and still runs the other calls
/// of the message. Paths are JSONPath-like, into the parsed document.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ArgumentError {
    /// The format requires arguments (`function.arguments`, `input`) and there are none.
    #[error("no arguments at {path}")]
    Missing {
        /// Where they should be.
        path: String,
    },

    /// The arguments string is not valid JSON.
    #[error("the arguments at {path} are not valid JSON: {message}")]
    InvalidJson {
        /// Where the string is.
        path: String,
        /// serde_json's message, with line and column inside the string.
        message: String,
    },

    /// The arguments string names the same member twice at one level (`{"a":1,"a":2}`):
    /// which value the model meant is ambiguous, so the call does not run (RFC 8785 works
    /// on I-JSON, which forbids duplicate names).
    #[error("the arguments at {path} name the member {name:?} twice")]
    DuplicateMember {
        /// Where the string is.
        path: String,
        /// The repeated member name.
        name: String,
    },

    /// The arguments are JSON but not an object (tool parameters are named members).
    #[error("the arguments at {path} are {found}, not a JSON object")]
    NotAnObject {
        /// Where they are.
        path: String,
        /// Their JSON type.
        found: &'static str,
    },

    /// The call is an OpenAI parallel wrapper (`multi_tool_use.parallel`, or a Responses
    /// `parallel` call with a `tool_uses` member, contract D7) whose arguments are a JSON
    /// object but not `{"tool_uses":[{"recipient_name":"functions.NAME","parameters":{…}},
    /// …]}`. The wrapper stays one call with this error and runs none of its entries; the
    /// other calls of the message still run (D2).
    #[error("the parallel wrapper's arguments at {path} are not a list of tool uses: expected {expected} at `{member}`, found {found}")]
    MalformedParallelWrapper {
        /// Where the wrapper's arguments are in the document.
        path: String,
        /// The offending member, as a path inside the arguments: `tool_uses`,
        /// `tool_uses[1]`, `tool_uses[0].recipient_name`, `tool_uses[2].parameters`.
        member: String,
        /// What belongs there: a non-empty array of tool uses, a tool use object, the
        /// tool's name (a string), the tool's arguments (an object).
        expected: &'static str,
        /// What was found: `nothing`, or a short description of the value (its type, and
        /// for an object its first member names).
        found: String,
    },
}
