//! What dispatching a turn did, call by call (contract D2–D5, S12).

use std::time::Duration;

use serde_json::Value;

use crate::dispatch::results::turn_messages;
use crate::dispatch::{Provider, ToolReply, TransportError};
use crate::key::IdempotencyKey;
use crate::outcome::CallStatus;

/// One attempt of one call.
#[derive(Debug, Clone, PartialEq)]
pub struct Attempt {
    /// Which attempt, from 1.
    pub number: u32,
    /// How long the dispatcher waited before it (backoff with jitter, D3); zero for the
    /// first.
    pub waited: Duration,
    /// The reply, or why none came back.
    pub outcome: Result<ToolReply, TransportError>,
}

/// What happened to one call of a turn.
#[derive(Debug, Clone, PartialEq)]
pub struct CallReport {
    /// The call's [`id`](crate::dispatch::ToolCall::id): the provider's, or synthesized
    /// (some Gemini calls; `"<wrapper id>:<i>"` for an entry of an OpenAI parallel
    /// wrapper, D7).
    pub id: String,
    /// The tool's name, as the model called it.
    pub tool: String,
    /// Every attempt, in order. Empty when the dispatcher did not attempt the call: an
    /// unknown tool, arguments that are not a JSON object (D2), or an OpenAI parallel
    /// wrapper whose arguments are not a list of tool uses (D7). Arguments that are an
    /// object but do not fit the tool's parameters are refused by the tool itself in the
    /// first attempt: one attempt, a `BadArguments` failure, not retried.
    pub attempts: Vec<Attempt>,
    /// The final reply: the last attempt's, or an error reply when the call never ran or
    /// its last attempt lost the reply. Its `record` says executed or replayed, with the
    /// key (S12).
    pub reply: ToolReply,
    /// The idempotency key the call's first attempt derived and every retry carried (K9),
    /// else the key of the final reply's outcome; `None` when no attempt got as far as
    /// deriving one.
    pub key: Option<IdempotencyKey>,
    /// The result in the provider's shape, matched to [`id`](Self::id) (D5); for an
    /// entry of an OpenAI parallel wrapper, matched to the wrapper's id, as one text part
    /// ([`call_result`](crate::dispatch::call_result), D7).
    pub result: Value,
}

impl CallReport {
    /// How many attempts were made (0 when the call never ran).
    pub fn attempt_count(&self) -> usize {
        self.attempts.len()
    }

    /// Whether the final reply is a success: what the agent is told.
    pub fn is_ok(&self) -> bool {
        self.reply.result.is_ok()
    }

    /// Executed or replayed, for calls that reached the store.
    pub fn status(&self) -> Option<CallStatus> {
        self.reply.record.as_ref().map(|record| record.status)
    }
}

/// What dispatching one turn did.
#[derive(Debug, Clone, PartialEq)]
pub struct TurnOutcome {
    /// The turn's provider: the shape of [`messages`](Self::messages).
    pub provider: Provider,
    /// The turn's [`index`](crate::dispatch::Turn::index).
    pub index: usize,
    /// One report per call, in the turn's call order.
    pub calls: Vec<CallReport>,
}

impl TurnOutcome {
    /// The message(s) to send back to the model, in the provider's shape (D5): see
    /// [`turn_messages`](crate::dispatch::turn_messages). A parallel wrapper's calls get
    /// one message (Chat) or item (Responses) under the wrapper's id (D7), so there may be
    /// fewer messages than [`calls`](Self::calls).
    pub fn messages(&self) -> Vec<Value> {
        turn_messages(
            self.provider,
            self.calls.iter().map(|c| c.result.clone()).collect(),
        )
    }

    /// The report of the call `id`, if the turn has one (the first, if ids repeat).
    pub fn call(&self, id: &str) -> Option<&CallReport> {
        self.calls.iter().find(|c| c.id == id)
    }

    /// Whether every call's final reply is a success.
    pub fn all_ok(&self) -> bool {
        self.calls.iter().all(CallReport::is_ok)
    }
}
