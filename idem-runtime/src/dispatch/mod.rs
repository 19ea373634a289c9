//! Dispatching an agent's tool calls to `#[idempotent]` tools (contract D1–D5).
//!
//! 1. [`parse_turns`] reads the tool calls of any provider's response, message or history
//!    into [`Turn`]s of [`ToolCall`]s (D1, D2).
//! 2. A [`Dispatcher`] runs one turn's calls concurrently against registered [`Tool`]s,
//!    through a [`Transport`], retrying transient failures by a [`RetryPolicy`] with the
//!    key each call's first attempt derived (D2–D4, K9), under a [`Conversation`]
//!    (what the calls are keyed by, K7).
//! 3. The [`TurnOutcome`] holds a [`CallReport`] per call and the results in the
//!    provider's own shape ([`TurnOutcome::messages`], [`call_result`], D5).

mod conversation;
pub(crate) mod decode;
mod dispatcher;
pub mod parse;
mod provider;
mod report;
pub mod results;
mod retry;
mod tool;
mod transport;
mod turn;

pub use conversation::Conversation;
pub use dispatcher::{BuildError, Dispatcher, DispatcherBuilder};
pub use parse::{parse_as, parse_turns, parse_turns_str, ParseError};
pub use provider::Provider;
pub use report::{Attempt, CallReport, OwnRun, TurnOutcome};
pub use results::{call_result, turn_messages};
pub use retry::{is_transient, Jitter, RetryPolicy, Sleeper, TimerSleeper};
pub use tool::{FailureKind, ReplyFuture, Tool, ToolFailure, ToolReply};
pub use transport::{InProcess, ToolRequest, Transport, TransportError, TransportFuture};
pub use turn::{ArgumentError, ParallelWrapper, ToolCall, Turn};
