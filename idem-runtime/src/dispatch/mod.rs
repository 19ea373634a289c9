//! Dispatching an agent's tool calls to `#[idempotent]` tools (contract D1–D5).

mod tool;

pub use tool::{FailureKind, ReplyFuture, Tool, ToolFailure, ToolReply};
