//! What a person's decision shares, whichever it is (`resolve`, U6; `approve` and `deny`,
//! A3): who decides (`--actor`, `IDEM_ACTOR`, `USER`), the note and spans checked before
//! anything is read, how a decision about one key prints, and how a refusal maps to an
//! exit status (X3).

use std::time::Duration;

use idem_runtime::resolve::{ResolveError, Resolved, NOTE_MAX_CHARS};
use idem_runtime::store::{Record, RecordState, StateFilter};
use idem_runtime::{IdempotencyKey, Timestamp};
use serde::Serialize;

use super::Report;
use crate::cli::Decider;
use crate::exit::CliError;
use crate::output::{json_line, state_words};

/// Where the actor's name came from, for messages.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum ActorOrigin {
    /// `--actor`.
    Option,
    /// The environment variable `IDEM_ACTOR`.
    IdemActor,
    /// The environment variable `USER`.
    User,
}

impl ActorOrigin {
    fn name(self) -> &'static str {
        match self {
            ActorOrigin::Option => "--actor",
            ActorOrigin::IdemActor => "IDEM_ACTOR",
            ActorOrigin::User => "USER (pass --actor to name someone else)",
        }
    }
}

/// The actor: `--actor`, else `IDEM_ACTOR`, else `USER` (empty variables count as unset).
/// Without any, bad usage telling to pass `--actor`.
pub(super) fn actor(
    given: Option<&str>,
    idem_actor: Option<String>,
    user: Option<String>,
) -> Result<(String, ActorOrigin), CliError> {
    if let Some(actor) = given {
        return Ok((actor.to_owned(), ActorOrigin::Option));
    }
    let set = |value: Option<String>| value.filter(|v| !v.is_empty());
    if let Some(actor) = set(idem_actor) {
        return Ok((actor, ActorOrigin::IdemActor));
    }
    if let Some(actor) = set(user) {
        return Ok((actor, ActorOrigin::User));
    }
    Err(CliError::usage(
        "--actor",
        "needed: who decides (a decision names its actor); pass --actor NAME or set \
         IDEM_ACTOR (neither IDEM_ACTOR nor USER is set)",
    ))
}

/// Who decides and their note, from the command line and this process's environment,
/// checked before anything is read: the actor as [`actor`], the note at most
/// [`NOTE_MAX_CHARS`] characters.
pub(super) fn decider(args: &Decider) -> Result<(String, ActorOrigin), CliError> {
    let found = actor(
        args.actor.as_deref(),
        std::env::var("IDEM_ACTOR").ok(),
        std::env::var("USER").ok(),
    )?;
    if let Some(note) = &args.note {
        let chars = note.chars().count();
        if chars > NOTE_MAX_CHARS {
            return Err(resolve_error(ResolveError::BadNote { chars }, found.1));
        }
    }
    Ok(found)
}

/// A span given as `option` that must be longer than zero; `why` says what zero would do.
pub(super) fn positive(
    option: &str,
    span: humantime::Duration,
    why: &str,
) -> Result<Duration, CliError> {
    let span = Duration::from(span);
    if span.is_zero() {
        return Err(CliError::usage(
            option,
            format!("must be longer than zero: {why}"),
        ));
    }
    Ok(span)
}

/// A decision about one key, as `resolve KEY`, `approve` and `deny` print it.
pub(super) struct OneDecision<'a> {
    /// The key decided.
    pub key: &'a IdempotencyKey,
    /// The decision as JSON names it: `applied`, `error`, `not_applied`, `approved`,
    /// `denied`.
    pub decision: &'static str,
    /// The decision for people, after "decided KEY: ": `applied`, `not applied`, `approved`.
    pub words: &'a str,
    /// The decision for people, after "KEY was already ": `decided applied`, `approved`.
    pub already_words: &'a str,
    /// Who decided.
    pub actor: &'a str,
    /// Their note.
    pub note: Option<&'a str>,
    /// What the engine answered.
    pub resolved: &'a Resolved,
}

/// `resolve KEY --json`, `approve --json`, `deny --json`: `{"key", "decision", "actor",
/// "note", "state", "fence", "already_decided"}`, and `approved_until` for an approved
/// record.
#[derive(Serialize)]
struct DecidedJson<'a> {
    key: &'a str,
    decision: &'static str,
    actor: &'a str,
    note: Option<&'a str>,
    state: &'static str,
    fence: u64,
    already_decided: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    approved_until: Option<String>,
}

impl OneDecision<'_> {
    /// The report of the decision at `now`: `decided KEY: WORDS, by ACTOR; it is now STATE,
    /// fence N: NEXT` (`next` says what the next call does, given the record as the
    /// decision left it), or `KEY was already ALREADY_WORDS: nothing written; it is STATE,
    /// fence N`; with `json`, [`DecidedJson`]. Exit 0 either way (X3).
    pub fn report(
        &self,
        json: bool,
        now: Timestamp,
        next: impl FnOnce(&Record) -> String,
    ) -> Report {
        let (record, already) = match self.resolved {
            Resolved::Decided(record) => (record, false),
            Resolved::AlreadyDecided(record) => (record, true),
        };
        if json {
            return Report::out(json_line(&DecidedJson {
                key: self.key.as_str(),
                decision: self.decision,
                actor: self.actor,
                note: self.note,
                state: StateFilter::at(&record.state, now).as_str(),
                fence: record.fence,
                already_decided: already,
                approved_until: match record.state {
                    RecordState::Approved { until, .. } => Some(until.to_rfc3339()),
                    _ => None,
                },
            }));
        }
        let key = self.key;
        let state = state_after(record, now);
        let fence = record.fence;
        Report::out(if already {
            format!(
                "{key} was already {}: nothing written; it is {state}, fence {fence}\n",
                self.already_words
            )
        } else {
            format!(
                "decided {key}: {}, by {}; it is now {state}, fence {fence}: {}\n",
                self.words,
                self.actor,
                next(record)
            )
        })
    }
}

/// The record's state after a decision: `completed (source resolved)`, `not applied`,
/// `approved until 2026-…Z`.
fn state_after(record: &Record, now: Timestamp) -> String {
    let state = state_words(StateFilter::at(&record.state, now));
    match &record.state {
        RecordState::Completed { source, .. } => format!("{state} (source {})", source.as_str()),
        RecordState::Approved { until, .. } => format!("{state} until {}", until.to_rfc3339()),
        _ => state.to_owned(),
    }
}

/// A refused decision (U6, A3, X3): bad input is exit 2 naming the option (or the variable
/// the actor came from); a record that cannot be decided, or changed, exit 1 saying what it
/// is now and what to do; the store, exit 3.
pub(super) fn resolve_error(error: ResolveError, origin: ActorOrigin) -> CliError {
    match error {
        ResolveError::BadActor { .. } => CliError::usage(origin.name(), error),
        ResolveError::BadNote { .. } => CliError::usage("--note", error),
        // Its message begins with the option: `--output: not one JSON value: …`.
        ResolveError::BadOutput { .. } => CliError::Usage(error.to_string()),
        ResolveError::Store(e) => e.into(),
        ResolveError::Changed { ref key, .. } => CliError::NotFound(format!(
            "{error} (`idem show {key} --history`); nothing was decided"
        )),
        other => CliError::NotFound(format!("{other}; nothing was decided")),
    }
}
