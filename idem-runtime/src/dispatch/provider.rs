//! The model APIs whose tool calls the dispatcher reads and answers (contract D1, D5).

use std::fmt;

use serde::{Deserialize, Serialize};

/// A provider format: where tool calls are read from (D1) and which tool-result shape
/// goes back (D5).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Provider {
    /// OpenAI Chat Completions: `choices[].message.tool_calls[]`, arguments a JSON string;
    /// results are `role: "tool"` messages.
    OpenAiChat,
    /// OpenAI Responses: `output[]` items of type `function_call` with a `call_id`;
    /// results are `function_call_output` items.
    OpenAiResponses,
    /// Anthropic Messages: `content[]` blocks of type `tool_use` with an `input` object;
    /// results are `tool_result` blocks in one `user` message.
    Anthropic,
    /// Google Gemini: `functionCall` parts with `args` and an optional `id`; results are
    /// `functionResponse` parts in one `user` content.
    Gemini,
    /// Model Context Protocol: a `tools/call` JSON-RPC request; the result is its JSON-RPC
    /// response.
    Mcp,
}

impl Provider {
    /// The API's name, for messages: `OpenAI Chat Completions`, `OpenAI Responses`,
    /// `Anthropic Messages`, `Gemini`, `MCP`.
    pub fn name(self) -> &'static str {
        match self {
            Provider::OpenAiChat => "OpenAI Chat Completions",
            Provider::OpenAiResponses => "OpenAI Responses",
            Provider::Anthropic => "Anthropic Messages",
            Provider::Gemini => "Gemini",
            Provider::Mcp => "MCP",
        }
    }
}

impl fmt::Display for Provider {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}
