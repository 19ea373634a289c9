//! A model that replays recorded assistant turns and remembers what it was told (T4).

use std::path::Path;
use std::sync::{Arc, Mutex, MutexGuard, PoisonError};

use serde_json::Value;

use crate::dispatch::{parse_turns, parse_turns_str, ParseError, Turn, TurnOutcome};

/// Stands in for a model in an agent-loop test (T4): it hands out recorded assistant
/// turns one by one ([`next_turn`](Self::next_turn)) and records every tool result sent
/// back to it ([`send_results`](Self::send_results)), so a test can assert what the agent
/// was told ([`was_told_success`](Self::was_told_success)).
///
/// The script is any document [`parse_turns`] accepts: a response, a message, an array
/// of turns, a Gemini `contents` history. Clones share the script and the record.
///
/// ```
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::testkit::ScriptedModel;
/// let model = ScriptedModel::from_json(r#"[
///     {"role":"assistant","content":[{"type":"tool_use","id":"toolu_1","name":"refund","input":{"order":7}}]},
///     {"role":"assistant","content":"Refunded."}
/// ]"#)?;
/// assert_eq!(model.remaining(), 2);
/// let first = model.next_turn().unwrap();
/// assert_eq!(first.calls[0].name, "refund");
/// assert!(model.next_turn().unwrap().calls.is_empty());
/// assert!(model.next_turn().is_none());
/// # Ok::<(), idem_agent::dispatch::ParseError>(())
/// ```
#[derive(Debug, Clone)]
pub struct ScriptedModel {
    script: Arc<Mutex<Script>>,
}

#[derive(Debug)]
struct Script {
    turns: Vec<Turn>,
    next: usize,
    received: Vec<ReceivedResult>,
    messages: Vec<Value>,
}

/// One tool result a [`ScriptedModel`] was sent.
#[derive(Debug, Clone, PartialEq)]
pub struct ReceivedResult {
    /// The [`index`](Turn::index) of the turn the call belonged to.
    pub turn: usize,
    /// The call's id.
    pub call_id: String,
    /// The tool's name.
    pub tool: String,
    /// Whether the agent was told the call succeeded.
    pub ok: bool,
    /// The result in the provider's shape, as the model would read it (D5).
    pub result: Value,
}

/// Why a script could not be loaded from a file.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ScriptError {
    /// The file could not be read.
    #[error("cannot read the script {path}: {message}")]
    Io {
        /// The file.
        path: String,
        /// The I/O error.
        message: String,
    },
    /// The file is not a tool-call document.
    #[error("the script {path} is not a tool-call document: {source}")]
    Parse {
        /// The file.
        path: String,
        /// Why.
        source: ParseError,
    },
}

impl ScriptedModel {
    /// A model that will answer with `turns`, in order.
    pub fn from_turns(turns: Vec<Turn>) -> Self {
        ScriptedModel {
            script: Arc::new(Mutex::new(Script {
                turns,
                next: 0,
                received: Vec::new(),
                messages: Vec::new(),
            })),
        }
    }

    /// A model replaying the turns of `document`.
    ///
    /// # Errors
    /// The [`ParseError`] of [`parse_turns`].
    pub fn from_document(document: &Value) -> Result<Self, ParseError> {
        parse_turns(document).map(Self::from_turns)
    }

    /// A model replaying the turns of the JSON text `text`.
    ///
    /// # Errors
    /// The [`ParseError`] of [`parse_turns_str`].
    pub fn from_json(text: &str) -> Result<Self, ParseError> {
        parse_turns_str(text).map(Self::from_turns)
    }

    /// A model replaying the turns of the JSON file at `path` (a recorded transcript).
    ///
    /// # Errors
    /// [`ScriptError::Io`] when the file cannot be read, [`ScriptError::Parse`] when it
    /// is not a tool-call document.
    pub fn from_file(path: impl AsRef<Path>) -> Result<Self, ScriptError> {
        let path = path.as_ref();
        let text = std::fs::read_to_string(path).map_err(|e| ScriptError::Io {
            path: path.display().to_string(),
            message: e.to_string(),
        })?;
        Self::from_json(&text).map_err(|source| ScriptError::Parse {
            path: path.display().to_string(),
            source,
        })
    }

    fn lock(&self) -> MutexGuard<'_, Script> {
        self.script.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// The next recorded turn, `None` once the script is over.
    pub fn next_turn(&self) -> Option<Turn> {
        let mut script = self.lock();
        let turn = script.turns.get(script.next).cloned()?;
        script.next += 1;
        Some(turn)
    }

    /// How many turns are left.
    pub fn remaining(&self) -> usize {
        let script = self.lock();
        script.turns.len() - script.next
    }

    /// Sends the model a turn's results: records each call's provider-shaped result and
    /// the message(s) that carry them ([`TurnOutcome::messages`]).
    pub fn send_results(&self, outcome: &TurnOutcome) {
        let messages = outcome.messages();
        let mut script = self.lock();
        script.messages.extend(messages);
        script
            .received
            .extend(outcome.calls.iter().map(|call| ReceivedResult {
                turn: outcome.index,
                call_id: call.id.clone(),
                tool: call.tool.clone(),
                ok: call.is_ok(),
                result: call.result.clone(),
            }));
    }

    /// Every result received so far, in order.
    pub fn received(&self) -> Vec<ReceivedResult> {
        self.lock().received.clone()
    }

    /// The provider-shaped messages received so far, in order.
    pub fn messages(&self) -> Vec<Value> {
        self.lock().messages.clone()
    }

    /// The last result received for the call `call_id`.
    pub fn result_for(&self, call_id: &str) -> Option<ReceivedResult> {
        self.lock()
            .received
            .iter()
            .rev()
            .find(|r| r.call_id == call_id)
            .cloned()
    }

    /// Whether the last result received for `call_id` told the agent it succeeded;
    /// `false` when none was received.
    pub fn was_told_success(&self, call_id: &str) -> bool {
        self.result_for(call_id).is_some_and(|r| r.ok)
    }
}
