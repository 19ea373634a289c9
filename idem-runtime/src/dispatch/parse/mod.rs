//! Reading tool calls from any provider's documents (contract D1, D2).
//!
//! Accepted documents, for every [`Provider`]:
//! - one whole response body (OpenAI Chat Completions, OpenAI Responses, Anthropic
//!   Messages, Gemini `generateContent`), one MCP `tools/call` request, or one bare MCP
//!   `CallToolRequestParams` object (`{"name","arguments"}`, D9);
//! - a bare assistant message (OpenAI Chat `{"role":"assistant","tool_calls":…}`,
//!   Anthropic `{"role":"assistant","content":[…]}`, a Gemini content
//!   `{"role":"model","parts":[…]}`, an OpenAI Responses `function_call` item);
//! - an array of turns: any mix of the above, each element its own turn (messages of
//!   other roles, such as `user` or `tool` messages in a history, yield no turn);
//! - a Gemini `contents` history (an array of contents or `{"contents":[…]}`) and an
//!   OpenAI Responses item list.
//!
//! The output is one [`Turn`] per assistant message, each with its
//! [`ToolCall`](crate::dispatch::ToolCall)s. Each call carries its turn's identity where the
//! document has one (D10): the response's id, else its position in an array or history
//! ([`ToolCall::turn_id`](crate::dispatch::ToolCall::turn_id)). An OpenAI parallel wrapper
//! (`multi_tool_use.parallel`, D7) is unwrapped wherever OpenAI calls are read: each of its
//! `tool_uses` becomes its own call, `"<wrapper id>:<i>"`, at the wrapper's place (see
//! [`ToolCall::wrapped_in`](crate::dispatch::ToolCall::wrapped_in)). A call whose arguments are unusable keeps an
//! [`ArgumentError`] (D2: it alone gets an error result); a document that cannot be read
//! at all is a [`ParseError`] naming the path and what was expected there. No input
//! panics.
//!
//! ```
//! # extern crate idem_runtime as idem_agent;
//! use idem_agent::dispatch::{parse_turns_str, Provider};
//! let turns = parse_turns_str(r#"{"role":"assistant","content":null,"tool_calls":[
//!     {"id":"call_1","type":"function",
//!      "function":{"name":"send_refund","arguments":"{\"order\": 7, \"cents\": 1250}"}}]}"#)?;
//! let call = &turns[0].calls[0];
//! assert_eq!((call.provider, call.id.as_str(), call.name.as_str()), (Provider::OpenAiChat, "call_1", "send_refund"));
//! assert_eq!(call.arguments, Ok(serde_json::json!({"cents": 1250, "order": 7})));
//! # Ok::<(), idem_agent::dispatch::ParseError>(())
//! ```

mod anthropic;
pub(crate) mod arguments;
mod detect;
mod error;
mod gemini;
mod mcp;
mod openai_chat;
mod openai_responses;
pub(crate) mod parallel;
pub(crate) mod path;
mod read;

use serde_json::Value;

pub use super::turn::ArgumentError;
pub use error::ParseError;
pub(crate) use path::kind;

use crate::dispatch::{Provider, Turn};

/// The turns of `document`, detecting each part's provider format by the members only
/// that format has (see the [module documentation](self) for the accepted documents).
///
/// # Errors
/// [`ParseError::UnknownShape`] when a part matches no format;
/// [`ParseError::Malformed`] when a recognised part lacks what every call needs (an id, a
/// name) or has it with the wrong type; [`ParseError::MultipleChoices`] for a response
/// with several alternative messages.
pub fn parse_turns(document: &Value) -> Result<Vec<Turn>, ParseError> {
    detect::detect_turns(document)
}

/// [`parse_turns`] for JSON text.
///
/// # Errors
/// [`ParseError::InvalidJson`] when `text` is not JSON (serde_json's nesting limit of 128
/// applies), and the errors of [`parse_turns`].
pub fn parse_turns_str(text: &str) -> Result<Vec<Turn>, ParseError> {
    let document: Value = serde_json::from_str(text).map_err(|e| ParseError::InvalidJson {
        message: e.to_string(),
    })?;
    parse_turns(&document)
}

/// The turns of `document` read as `provider`'s format, without detection: for callers
/// that know which API produced it.
///
/// # Errors
/// [`ParseError::Malformed`] when `document` is not in that format, and
/// [`ParseError::MultipleChoices`] as for [`parse_turns`].
pub fn parse_as(provider: Provider, document: &Value) -> Result<Vec<Turn>, ParseError> {
    detect::turns_as(provider, document)
}
