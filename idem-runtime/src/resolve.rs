//! A person's decision about a key whose outcome is unknown (contract U6): the effect
//! happened (its output is saved and replayed), the call failed (its error is saved), or the
//! effect did not happen (the next call runs the body). Every decision is a
//! compare-and-set on the record as the decider read it, names its actor, and lands in the
//! record's history (U7).
//!
//! ```
//! # extern crate idem_runtime as idem_agent;
//! use idem_agent::resolve::{Decision, Resolution, Resolved};
//! use idem_agent::{Engine, IdempotencyKey};
//! # let runtime = tokio::runtime::Builder::new_current_thread().build().unwrap();
//! # runtime.block_on(async {
//! let engine = Engine::in_memory();
//! let key = IdempotencyKey::from_hex(&"ab".repeat(32)).unwrap();
//! // No call ran with this key: there is nothing to decide.
//! let decision = Resolution::new(Decision::applied(&"re_1")?, "ana")?.note("the bank shows re_1");
//! let answer = engine.resolve(&key, &decision).await;
//! assert!(matches!(answer, Err(idem_agent::resolve::ResolveError::NotFound { .. })));
//! # Ok::<(), Box<dyn std::error::Error>>(())
//! # }).unwrap();
//! ```

use std::fmt;
use std::time::Duration;

use serde::Serialize;

use crate::canonical::CanonicalError;
use crate::clock::Timestamp;
use crate::engine::Engine;
use crate::envelope::Envelope;
use crate::key::IdempotencyKey;
use crate::outcome::OutcomeSource;
use crate::store::{
    DecisionKind, HistoryEntry, HistoryEvent, KeyedRecord, ListQuery, Record, RecordState, Seen,
    StateFilter, StoreError, Target, TransitionRequest,
};

/// The longest actor name, in characters.
pub const ACTOR_MAX_CHARS: usize = 128;
/// The longest note, in characters.
pub const NOTE_MAX_CHARS: usize = 1024;
/// The largest output or error a decision saves, in bytes of JSON text (1 MiB).
pub const OUTPUT_MAX_BYTES: usize = 1 << 20;
/// How long a decision's saved outcome lives from the decision, unless
/// [`Resolution::keep_for`] says otherwise: 24 hours, the default TTL (S8).
pub const DEFAULT_KEEP_FOR: Duration = Duration::from_secs(24 * 60 * 60);

/// What a person decided (U6).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// The effect happened; this `Ok` outcome is saved and replayed.
    Applied(Envelope),
    /// The call failed; this `Err` outcome is saved and replayed.
    Failed(Envelope),
    /// The effect did not happen: the next call with the same fingerprint runs the body.
    NotApplied,
}

impl Decision {
    /// The effect happened and the tool's `Ok` value was `value`, encoded as the body's
    /// outcome would be (S11).
    ///
    /// # Errors
    /// [`CanonicalError`] when `value` cannot be saved (a NaN, a failing `Serialize`).
    pub fn applied<T: Serialize + ?Sized>(value: &T) -> Result<Self, CanonicalError> {
        Envelope::encode_ok(value).map(Decision::Applied)
    }

    /// The call failed with the tool's `Err` value `error`, encoded as a saved error is.
    ///
    /// # Errors
    /// As [`applied`](Self::applied).
    pub fn failed<E: Serialize + ?Sized>(error: &E) -> Result<Self, CanonicalError> {
        Envelope::encode_err(error).map(Decision::Failed)
    }

    /// The effect did not happen.
    pub fn not_applied() -> Self {
        Decision::NotApplied
    }

    /// [`applied`](Self::applied) from JSON text (the command line's `--output`): one JSON
    /// value of at most [`OUTPUT_MAX_BYTES`]. Nothing checks it against the tool's type; a
    /// replay that cannot decode it is `Error::Decode` and never runs the body.
    ///
    /// # Errors
    /// [`ResolveError::BadOutput`] naming `what` when the text is not one JSON value or is
    /// too long.
    pub fn applied_json(text: &str) -> Result<Self, ResolveError> {
        json_value("--output", text).and_then(|value| {
            Self::applied(&value).map_err(|e| bad_output("--output", e.to_string()))
        })
    }

    /// [`failed`](Self::failed) from JSON text (the command line's `--error`), with the
    /// checks of [`applied_json`](Self::applied_json).
    ///
    /// # Errors
    /// As [`applied_json`](Self::applied_json).
    pub fn failed_json(text: &str) -> Result<Self, ResolveError> {
        json_value("--error", text).and_then(|value| {
            Self::failed(&value).map_err(|e| bad_output("--error", e.to_string()))
        })
    }

    /// The kind of decision, as the history names it.
    pub fn kind(&self) -> DecisionKind {
        match self {
            Decision::Applied(_) => DecisionKind::Applied,
            Decision::Failed(_) => DecisionKind::Error,
            Decision::NotApplied => DecisionKind::NotApplied,
        }
    }

    /// The outcome a decision saves, if it saves one.
    fn outcome(&self) -> Option<&Envelope> {
        match self {
            Decision::Applied(outcome) | Decision::Failed(outcome) => Some(outcome),
            Decision::NotApplied => None,
        }
    }
}

fn json_value(what: &'static str, text: &str) -> Result<serde_json::Value, ResolveError> {
    if text.len() > OUTPUT_MAX_BYTES {
        return Err(bad_output(
            what,
            format!("{} bytes; at most {OUTPUT_MAX_BYTES}", text.len()),
        ));
    }
    serde_json::from_str(text).map_err(|e| bad_output(what, format!("not one JSON value: {e}")))
}

fn bad_output(what: &'static str, message: String) -> ResolveError {
    ResolveError::BadOutput { what, message }
}

/// A decision with who made it and why (U6). Build with [`Resolution::new`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Resolution {
    decision: Decision,
    decider: Decider,
}

impl Resolution {
    /// `decision`, made by `actor` (1–[`ACTOR_MAX_CHARS`] characters, no control
    /// characters).
    ///
    /// # Errors
    /// [`ResolveError::BadActor`] naming what is wrong with `actor`.
    pub fn new(decision: Decision, actor: impl Into<String>) -> Result<Self, ResolveError> {
        Ok(Resolution {
            decision,
            decider: Decider::new(actor.into())?,
        })
    }

    /// With a note saying why (at most [`NOTE_MAX_CHARS`] characters; longer notes are
    /// refused by [`Engine::resolve`] with [`ResolveError::BadNote`]).
    pub fn note(mut self, note: impl Into<String>) -> Self {
        self.decider.note = Some(note.into());
        self
    }

    /// Only if the record still has fence `fence` (what `idem show` printed).
    pub fn expect_fence(mut self, fence: u64) -> Self {
        self.decider.expect_fence = Some(fence);
        self
    }

    /// A saved outcome lives `keep_for` from the decision (default [`DEFAULT_KEEP_FOR`]).
    pub fn keep_for(mut self, keep_for: Duration) -> Self {
        self.decider.keep_for = keep_for;
        self
    }

    /// The decision.
    pub fn decision(&self) -> &Decision {
        &self.decision
    }

    /// Who decided.
    pub fn actor(&self) -> &str {
        &self.decider.actor
    }
}

/// Who decides, why, on which fence, and how long a saved outcome is kept: what every
/// person's decision carries (U6, A3), for [`Resolution`] and
/// [`Approval`](crate::approval::Approval) alike.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Decider {
    pub(crate) actor: String,
    pub(crate) note: Option<String>,
    pub(crate) expect_fence: Option<u64>,
    pub(crate) keep_for: Duration,
}

impl Decider {
    /// A decider named `actor`, checked ([`ResolveError::BadActor`]).
    pub(crate) fn new(actor: String) -> Result<Self, ResolveError> {
        Ok(Decider {
            actor: checked_actor(actor)?,
            note: None,
            expect_fence: None,
            keep_for: DEFAULT_KEEP_FOR,
        })
    }

    /// [`ResolveError::BadNote`] for a note longer than [`NOTE_MAX_CHARS`] characters.
    pub(crate) fn check_note(&self) -> Result<(), ResolveError> {
        check_note(self.note.as_deref())
    }

    /// `event` at `now` on `fence`, signed with the actor and the note (U7).
    pub(crate) fn entry(&self, now: Timestamp, event: HistoryEvent, fence: u64) -> HistoryEntry {
        HistoryEntry::new(now, event, fence).with_actor(&self.actor, self.note.clone())
    }

    /// Records a decision written on `record` of `key`: the `decided` INFO event (V2) and
    /// the delay from `since` (the unknown outcome, or the request) to `now` (V3).
    pub(crate) fn announce(
        &self,
        key: &IdempotencyKey,
        record: &Record,
        decision: &'static str,
        since: Timestamp,
        now: Timestamp,
    ) {
        let tool = record.label.as_ref().map_or("", |l| l.tool.as_str());
        crate::telemetry::decision_delay(tool, decision, now.saturating_since(since));
        tracing::info!(
            target: "idem",
            key = %key,
            tool,
            decision,
            actor = %self.actor,
            note = self.note.as_deref().unwrap_or(""),
            fence = record.fence,
            "decided"
        );
    }
}

/// [`ResolveError::FenceChanged`] when `expected` is given and is not `record`'s fence;
/// else the record's state at `now` (I7).
pub(crate) fn fence_checked(
    key: &IdempotencyKey,
    record: &Record,
    expected: Option<u64>,
    now: Timestamp,
) -> Result<StateFilter, ResolveError> {
    let state = StateFilter::at(&record.state, now);
    match expected.filter(|&f| f != record.fence) {
        Some(expected) => Err(ResolveError::FenceChanged {
            key: key.to_string(),
            expected,
            found: record.fence,
            state,
        }),
        None => Ok(state),
    }
}

/// `actor` if idem records it (U6): 1–[`ACTOR_MAX_CHARS`] characters, no control
/// characters; else [`ResolveError::BadActor`] naming what is wrong.
pub(crate) fn checked_actor(actor: String) -> Result<String, ResolveError> {
    let count = actor.chars().count();
    let why = if actor.trim().is_empty() {
        Some("it is empty".to_owned())
    } else if count > ACTOR_MAX_CHARS {
        Some(format!(
            "it has {count} characters; at most {ACTOR_MAX_CHARS}"
        ))
    } else if actor.chars().any(char::is_control) {
        Some("it holds a control character".to_owned())
    } else {
        None
    };
    match why {
        Some(why) => Err(ResolveError::BadActor { actor, why }),
        None => Ok(actor),
    }
}

/// [`ResolveError::BadNote`] for a note longer than [`NOTE_MAX_CHARS`] characters.
fn check_note(note: Option<&str>) -> Result<(), ResolveError> {
    match note {
        Some(note) if note.chars().count() > NOTE_MAX_CHARS => Err(ResolveError::BadNote {
            chars: note.chars().count(),
        }),
        _ => Ok(()),
    }
}

/// What [`Engine::resolve`] did.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolved {
    /// The decision is recorded; the record as it is now.
    Decided(Record),
    /// The same decision was already in force; nothing was written.
    AlreadyDecided(Record),
}

impl Resolved {
    /// The record after the decision.
    pub fn record(&self) -> &Record {
        match self {
            Resolved::Decided(record) | Resolved::AlreadyDecided(record) => record,
        }
    }
}

/// Why a decision was not recorded. Nothing was written in any of these cases.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ResolveError {
    /// The actor is not a name idem records.
    #[error("actor {actor:?} cannot be recorded: {why} (1 to {ACTOR_MAX_CHARS} characters, no control characters)")]
    BadActor {
        /// The actor as given.
        actor: String,
        /// What is wrong.
        why: String,
    },
    /// The note is too long.
    #[error("the note has {chars} characters; at most {NOTE_MAX_CHARS}")]
    BadNote {
        /// Its length in characters.
        chars: usize,
    },
    /// The output or error to save is not one JSON value, or is too long.
    #[error("{what}: {message}")]
    BadOutput {
        /// Which value (`--output`, `--error`).
        what: &'static str,
        /// What is wrong.
        message: String,
    },
    /// No live record has this key: nothing ran with it, it expired, or it was purged.
    #[error("no record of idempotency key {key}: nothing to decide (no call ran with it, or its record expired or was purged)")]
    NotFound {
        /// The key.
        key: String,
    },
    /// The record's fence is not the one the decider expected: it changed since it was
    /// shown.
    #[error("idempotency key {key} changed since it was shown: fence {found} ({state}), not {expected}; look at it again (`idem show {key} --history`) before deciding")]
    FenceChanged {
        /// The key.
        key: String,
        /// The fence given.
        expected: u64,
        /// The record's fence.
        found: u64,
        /// The record's state.
        state: StateFilter,
    },
    /// The record is not waiting for a decision, or waits for another one.
    #[error("idempotency key {key} cannot be decided: {why}")]
    NotDecidable {
        /// The key.
        key: String,
        /// The record's state.
        state: StateFilter,
        /// Why, and what to do instead.
        why: String,
    },
    /// A call or another decision changed the record between the read and the decision.
    #[error("idempotency key {key} changed while deciding: it is now {state} with fence {fence}; look at it again before deciding")]
    Changed {
        /// The key.
        key: String,
        /// Its state now.
        state: StateFilter,
        /// Its fence now.
        fence: u64,
    },
    /// The store failed or cannot record decisions.
    #[error(transparent)]
    Store(#[from] StoreError),
}

impl Engine {
    /// Records `resolution`'s decision about `key`'s unknown outcome (U6), as a
    /// compare-and-set on the record as read, and emits the INFO event `decided` (V2).
    ///
    /// Two round trips: the read and the compare-and-set. An in-progress record whose lease
    /// lapsed is first marked unknown (cause `lease_lapsed`, U1), so its history reads
    /// claimed → unknown → resolved; that costs one more. Repeating a decision already in force answers
    /// [`Resolved::AlreadyDecided`] and writes nothing.
    ///
    /// # Errors
    /// [`ResolveError::NotFound`] without a live record; [`ResolveError::FenceChanged`]
    /// when [`Resolution::expect_fence`] does not match; [`ResolveError::NotDecidable`]
    /// for a completed record (another outcome is saved), a claim whose lease is live, or
    /// a record decided otherwise; [`ResolveError::Changed`] when the compare-and-set
    /// lost to a call or another decision; [`ResolveError::BadNote`];
    /// [`ResolveError::Store`] when the store fails or does not support decisions
    /// ([`StoreErrorKind::Unsupported`](crate::StoreErrorKind::Unsupported)).
    pub async fn resolve(
        &self,
        key: &IdempotencyKey,
        resolution: &Resolution,
    ) -> Result<Resolved, ResolveError> {
        resolution.decider.check_note()?;
        let now = self.clock().now();
        let record = self.live_record(key, now).await?;
        let expected = resolution.decider.expect_fence;
        self.resolve_record(key, record, resolution, expected, now)
            .await
    }

    /// [`resolve`](Self::resolve) for every record `query` matches that waits for a
    /// decision (outcome unknown, counted at now: I7), oldest first, each as a
    /// compare-and-set on the fence it was listed with (the resolution's own
    /// `expect_fence` is not used). With `dry_run` nothing is written: the answer lists
    /// the records that would be decided, each with `None`. Reads every page of the
    /// listing first, then decides.
    ///
    /// # Errors
    /// [`StoreError`] when the listing fails; each record's own failure is in its answer.
    pub async fn resolve_matching(
        &self,
        query: &ListQuery,
        resolution: &Resolution,
        dry_run: bool,
    ) -> Result<Vec<(KeyedRecord, Option<Result<Resolved, ResolveError>>)>, StoreError> {
        let mut query = query.clone();
        query.state = Some(StateFilter::OutcomeUnknown);
        query.oldest_first = true;
        query.after = None;
        let mut waiting = Vec::new();
        loop {
            let page = self.store().list(&query, self.clock().now()).await?;
            waiting.extend(page.records);
            match page.next {
                Some(next) => query.after = Some(next),
                None => break,
            }
        }
        let mut answers = Vec::with_capacity(waiting.len());
        for listed in waiting {
            if dry_run {
                answers.push((listed, None));
                continue;
            }
            let answer = match resolution.decider.check_note() {
                Err(e) => Err(e),
                Ok(()) => {
                    let now = self.clock().now();
                    let fence = Some(listed.record.fence);
                    match self.store().read(&listed.key, now).await {
                        Ok(Some(record)) => {
                            self.resolve_record(&listed.key, record, resolution, fence, now)
                                .await
                        }
                        Ok(None) => Err(ResolveError::NotFound {
                            key: listed.key.to_string(),
                        }),
                        Err(e) => Err(e.into()),
                    }
                }
            };
            answers.push((listed, Some(answer)));
        }
        Ok(answers)
    }

    async fn resolve_record(
        &self,
        key: &IdempotencyKey,
        mut record: Record,
        resolution: &Resolution,
        expect_fence: Option<u64>,
        now: Timestamp,
    ) -> Result<Resolved, ResolveError> {
        let decision = &resolution.decision;
        let state = fence_checked(key, &record, expect_fence, now)?;
        let refuse = |why: String| ResolveError::NotDecidable {
            key: key.to_string(),
            state,
            why,
        };
        let seen = match &record.state {
            RecordState::Completed {
                outcome, source, ..
            } => {
                if *source == OutcomeSource::Resolved && decision.outcome() == Some(outcome) {
                    return Ok(Resolved::AlreadyDecided(record));
                }
                return Err(refuse(format!(
                    "its outcome is saved already (source {}); a decision only settles an unknown outcome",
                    source.as_str()
                )));
            }
            RecordState::NotApplied { decided_at } => {
                if *decision == Decision::NotApplied {
                    return Ok(Resolved::AlreadyDecided(record));
                }
                return Err(refuse(format!(
                    "it was decided not applied at {}; the next call runs the tool",
                    decided_at.to_rfc3339()
                )));
            }
            RecordState::AwaitingApproval { since } => {
                return Err(refuse(format!(
                    "it awaits a person's approval (since {}): approve or deny it (idem approve / idem deny)",
                    since.to_rfc3339()
                )));
            }
            RecordState::Approved { until, .. } => {
                return Err(refuse(format!(
                    "it is approved (until {}) and its next call runs the tool",
                    until.to_rfc3339()
                )));
            }
            RecordState::InProgress { lease_until, .. } if *lease_until > now => {
                return Err(refuse(format!(
                    "a call holds it and renews its lease (until {}): it may still finish; wait for it, or purge it with --force once its owner is known to be gone",
                    lease_until.to_rfc3339()
                )));
            }
            RecordState::InProgress { owner, lease_until } => {
                // U1: a lapsed claim is an unknown outcome; record it so before deciding.
                let (owner, lease_until) = (*owner, *lease_until);
                let marked = self
                    .store()
                    .transition(TransitionRequest::lapsed(
                        key,
                        &record,
                        owner,
                        lease_until,
                        now,
                    ))
                    .await?;
                if !marked {
                    return Err(self.changed(key, now).await);
                }
                record.state = RecordState::OutcomeUnknown {
                    owner,
                    lease_until,
                    since: record.created_at,
                };
                Seen::OutcomeUnknown { owner, lease_until }
            }
            RecordState::OutcomeUnknown {
                owner, lease_until, ..
            } => Seen::OutcomeUnknown {
                owner: *owner,
                lease_until: *lease_until,
            },
        };
        let target = match decision {
            Decision::Applied(outcome) | Decision::Failed(outcome) => Target::Completed {
                outcome,
                source: OutcomeSource::Resolved,
            },
            Decision::NotApplied => Target::NotApplied,
        };
        let event = HistoryEvent::Resolved {
            decision: decision.kind(),
        };
        let entry = resolution.decider.entry(now, event, record.fence);
        let decided = self
            .store()
            .transition(TransitionRequest {
                key,
                fence: record.fence,
                seen,
                target,
                now,
                expires_at: now.saturating_add(resolution.decider.keep_for),
                entry,
            })
            .await?;
        if !decided {
            return Err(self.changed(key, now).await);
        }
        let unknown_since = match record.state {
            RecordState::OutcomeUnknown { since, .. } => since,
            _ => record.created_at,
        };
        let kind = decision.kind().as_str();
        resolution
            .decider
            .announce(key, &record, kind, unknown_since, now);
        // The record as the transition left it, without reading it again (U6: a decision is
        // one read and one compare-and-set).
        record.state = match decision {
            Decision::Applied(outcome) | Decision::Failed(outcome) => {
                record.expires_at = record
                    .expires_at
                    .max(now.saturating_add(resolution.decider.keep_for));
                RecordState::Completed {
                    outcome: outcome.clone(),
                    completed_at: now,
                    source: OutcomeSource::Resolved,
                }
            }
            Decision::NotApplied => RecordState::NotApplied { decided_at: now },
        };
        Ok(Resolved::Decided(record))
    }

    /// `key`'s live record at `now`; [`ResolveError::NotFound`] without one.
    pub(crate) async fn live_record(
        &self,
        key: &IdempotencyKey,
        now: Timestamp,
    ) -> Result<Record, ResolveError> {
        self.store()
            .read(key, now)
            .await?
            .ok_or_else(|| ResolveError::NotFound {
                key: key.to_string(),
            })
    }

    /// The error of a compare-and-set that lost: what the record is now.
    pub(crate) async fn changed(&self, key: &IdempotencyKey, now: Timestamp) -> ResolveError {
        match self.store().read(key, now).await {
            Ok(Some(record)) => ResolveError::Changed {
                key: key.to_string(),
                state: StateFilter::at(&record.state, now),
                fence: record.fence,
            },
            Ok(None) => ResolveError::NotFound {
                key: key.to_string(),
            },
            Err(e) => e.into(),
        }
    }
}

impl fmt::Display for Decision {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.kind().as_str())
    }
}
