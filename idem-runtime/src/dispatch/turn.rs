//! One assistant message's tool calls, as read from any provider (contract D1), and why one
//! call's arguments cannot be used (D2), which the call keeps.

use serde_json::Value;

use crate::dispatch::Provider;

/// The tool calls of one assistant message (one model turn), in the order the model
/// emitted them. The dispatcher runs them concurrently (D4).
#[derive(Debug, Clone, PartialEq)]
pub struct Turn {
    /// The format the message was read from; its results go back in that format (D5).
    pub provider: Provider,
    /// Where the message sits in the parsed document: 0 for a lone response or message,
    /// its position for an array of turns or a Gemini `contents` history, the position of
    /// its first item for an OpenAI Responses item list.
    pub index: usize,
    /// The calls, possibly none (a text-only answer is a turn without calls).
    pub calls: Vec<ToolCall>,
}

impl Turn {
    /// Gives every call that has none the turn identity of a response whose id is `id`
    /// (D10). An id that begins with `#` gets one more `#` (`#7` → `##7`), so no response id
    /// ever reads as a position (`#7`, [`identify_by_position`](Self::identify_by_position)).
    pub(crate) fn identify(&mut self, id: &str) {
        let identity = if id.starts_with('#') {
            format!("#{id}")
        } else {
            id.to_owned()
        };
        self.set_identity(&identity);
    }

    /// Gives every call that has none the identity of a message at `position` in a history
    /// or an array of turns: `#` and the position (D10).
    pub(crate) fn identify_by_position(&mut self, position: usize) {
        self.set_identity(&format!("#{position}"));
    }

    fn set_identity(&mut self, identity: &str) {
        for call in &mut self.calls {
            call.turn_id.get_or_insert_with(|| identity.to_owned());
        }
    }
}

/// Whether a turn identity is a position (`#3`, `#0.2`), not a response's id (D10).
pub(crate) fn is_position(identity: &str) -> bool {
    identity
        .strip_prefix('#')
        .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
}

/// One tool call the model asked for.
#[derive(Debug, Clone, PartialEq)]
pub struct ToolCall {
    /// The format it was read from.
    pub provider: Provider,
    /// The id its result is matched to (D5): `tool_calls[].id` (OpenAI Chat), `call_id`
    /// (OpenAI Responses), the `tool_use` block's `id` (Anthropic), `functionCall.id` or a
    /// synthesized id (Gemini), the JSON-RPC request id as text (MCP: `2` → `"2"`), a
    /// synthesized id for bare MCP params and for a call unwrapped from an OpenAI parallel
    /// wrapper. With [`turn_id`](Self::turn_id), what `scope = "call"` tools are keyed by
    /// (K7, D10).
    pub id: String,
    /// `true` when the provider sent no id for this call and this one was made up:
    /// - Gemini: `"<label>:<part index>"`, where `<label>` is the response's `responseId`
    ///   when it has one, a content's position in a `contents` history, and a random label
    ///   drawn per parse for a response without `responseId` (each received response is a
    ///   new turn; see the Gemini parser's docs);
    /// - bare MCP `CallToolRequestParams` (D9): `"<random label>:<position>"`, the label
    ///   drawn per parse;
    /// - an entry of an OpenAI parallel wrapper (D7): `"<wrapper id>:<position>"`.
    ///
    /// Deterministic except where a random label is drawn. A synthesized id is never sent
    /// back to the provider (Gemini's `functionResponse` gets an `id` only when the call had
    /// one; a wrapper's entries answer under the wrapper's id; a bare params result has no
    /// id).
    pub id_synthesized: bool,
    /// The tool's name, as the model called it.
    pub name: String,
    /// The arguments object, or why it is unusable (D2: the call then gets an error
    /// result and does not run). A JSON-string argument (OpenAI) is parsed into a
    /// [`Value`] here, so neither its whitespace nor its member order reaches the key
    /// (K4); the key is derived later from the tool's typed arguments.
    pub arguments: Result<Value, ArgumentError>,
    /// MCP only: the JSON-RPC request id exactly as sent (a number or a string), which the
    /// response must echo. `None` for the other providers. Like `params._meta` and
    /// `params.task`, it is never part of the arguments or the key (D1).
    pub request_id: Option<Value>,
    /// The identity of the assistant message the call came from, where the document has
    /// one (D10): the response's own id (`chatcmpl-…`, `resp_…`, `msg_…`, Gemini
    /// `responseId`; one that begins with `#` gets one more, `##7`), else the message's
    /// position in a history or array of turns (`#3`; inside an element of an array,
    /// `#<element>.<position>`).
    /// `None` for a lone message without an id. A `scope = "call"` key includes it, so a
    /// provider that reuses call ids by position (`call_0` in every turn) never makes a
    /// later turn's call replay an earlier one (K7).
    pub turn_id: Option<String>,
    /// Set when the call was one entry of an OpenAI parallel wrapper
    /// (`multi_tool_use.parallel`, D7): which wrapper, and where in it. Its result goes
    /// back under the wrapper's id, as one text part of the wrapper's single result,
    /// merged with its siblings' in order by [`turn_messages`](crate::dispatch::turn_messages)
    /// (D5). The parsers set it; `None` for every other call.
    pub wrapped_in: Option<ParallelWrapper>,
}

/// The OpenAI parallel wrapper a call was unwrapped from (D7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ParallelWrapper {
    /// The wrapper call's id (`tool_calls[].id`, or the `call_id` of a Responses
    /// `function_call`): the id the call's result goes back under.
    pub id: String,
    /// The wrapper's name as the model wrote it: `multi_tool_use.parallel` or `parallel`.
    pub name: String,
    /// The call's position among the wrapper's `tool_uses`, from 0.
    pub position: usize,
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
