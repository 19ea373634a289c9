//! What dispatching a turn did, call by call (contract D2–D5, S12).

use std::time::Duration;

use serde_json::Value;

use crate::dispatch::results::turn_messages;
use crate::dispatch::{Provider, ToolReply, TransportError};
use crate::key::IdempotencyKey;
use crate::outcome::{CallRecord, CallStatus};

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

/// The run of the tool's body that one of a call's own attempts made (D11).
#[derive(Debug, Clone, PartialEq)]
pub struct OwnRun {
    /// The attempt that ran it, from 1.
    pub attempt: u32,
    /// The run's outcome record: [`CallStatus::Executed`], or
    /// [`CallStatus::Reconciled`] when a takeover settled an earlier run's outcome by
    /// reconciling (U3).
    pub record: CallRecord,
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
    /// This call's own run, when one of its attempts ran the body (or reconciled) and
    /// saved the outcome, also when that attempt's reply was lost and a retry replayed it
    /// (D11; the replay is then not marked, D6). Read from what the `#[idempotent]` call
    /// carrying the call's key (K9) published on each attempt's context (for a tool
    /// registered under another name than its `#[idempotent]` one, the last such call's,
    /// S12), and from the (key, fence) of the run each attempt was saving, which a replay
    /// of that record matches when the transport gave up while the body ran. So it needs a
    /// transport that runs the tool in process under the attempt's context (as
    /// [`InProcess`](crate::dispatch::InProcess) and the test kit's transports do; a
    /// remote tool's run is seen only in its reply). `None` when every outcome the call
    /// got was another call's (a replay), a run of its own ended without a saved outcome
    /// (a retryable error released the claim), or it never reached the store.
    pub ran: Option<OwnRun>,
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

    /// The final reply's status (S12): executed or replayed, for calls that reached the
    /// store. After a lost reply the retry's reply is a replay of the call's own first run:
    /// [`own_status`](Self::own_status) tells that apart from a replay of another call.
    pub fn status(&self) -> Option<CallStatus> {
        self.reply.record.as_ref().map(|record| record.status)
    }

    /// What this call did (D11): the status of its own run ([`ran`](Self::ran): executed
    /// or reconciled), also when that run's reply was lost and a retry replayed it; else
    /// the final reply's ([`status`](Self::status): replayed, when the outcome was an
    /// earlier call's). `None` for a call that never reached the store.
    pub fn own_status(&self) -> Option<CallStatus> {
        self.ran
            .as_ref()
            .map(|run| run.record.status)
            .or_else(|| self.status())
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
