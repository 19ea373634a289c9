//! Dispatching an agent's tool calls to `#[idempotent]` tools (contract D1–D5).
//!
//! - [`parse_turns`] reads the tool calls of any provider's response, message or history
//!   into [`Turn`]s of [`ToolCall`]s (D1, D2).

pub mod parse;
mod provider;
mod tool;
mod turn;

pub use parse::{parse_as, parse_turns, parse_turns_str, ArgumentError, ParseError};
pub use provider::Provider;
pub use tool::{FailureKind, ReplyFuture, Tool, ToolFailure, ToolReply};
pub use turn::{ToolCall, Turn};
