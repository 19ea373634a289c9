//! A record's history: the append-only list of its transitions (contract U7).
//!
//! Every store keeps a record's history beside the record and writes each entry in the
//! same request as the transition it tells of, so the history costs no round trip. Stores
//! keep it as text: one JSON object per entry, entries separated by a newline (`\n`,
//! which JSON text never holds unescaped), oldest first, at most [`HISTORY_LIMIT`]
//! entries; appending to a full history drops the oldest entry. Each entry is one line of
//! this shape (members in this order, absent ones left out):
//!
//! ```text
//! {"at":1796000000000,"event":"claimed","fence":1,"owner":"<32 hex digits>"}
//! {"at":1796000060000,"event":"unknown","fence":1,"cause":"lease_lapsed"}
//! {"at":1796000090000,"event":"resolved","fence":1,"decision":"applied","actor":"ana","note":"bank says paid"}
//! ```
//!
//! - `at`: milliseconds since the Unix epoch, by the writer's clock (the engine's, or the
//!   deciding operator's);
//! - `event`: `claimed`, `taken_over`, `unknown`, `completed`, `resolved`, `released`,
//!   `approval_requested`, `approved`, `denied`, `approval_expired` ([`HistoryEvent`]);
//! - `fence`: the fencing token of the run the entry is about (F1);
//! - `owner`: the owner token of a claim or takeover (32 lower-case hex digits);
//! - `cause`: why a run's outcome became unknown (`unknown`, `taken_over`: [`UnknownReason`]);
//! - `source`: where a completed outcome came from (`completed`: `executed`, `reconciled`);
//! - `decision`: a person's decision (`resolved`: `applied`, `error`, `not_applied`);
//! - `until`: when an approval expires (`approved`, ms since the Unix epoch);
//! - `valid_for`: how long the tool lets an approval run it, in ms (`approval_requested`,
//!   `approval_expired`);
//! - `actor`, `note`: who decided, and why (`resolved`, `approved`, `denied`).
//!
//! A reader accepts the members in any order and ignores members it does not know, so a
//! newer build's entries read back; an entry that is not such an object reads as
//! [`HistoryEvent::Unreadable`] with its text, never as an error that hides the record.

use std::collections::VecDeque;
use std::fmt;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::{OutcomeSource, OwnerToken};
use crate::clock::Timestamp;

/// How many entries a record's history keeps: the last 32 (U7).
pub const HISTORY_LIMIT: usize = 32;

/// One transition of a record (U7).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct HistoryEntry {
    /// When it happened (ms since the Unix epoch, the writer's clock).
    pub at: Timestamp,
    /// What happened.
    pub event: HistoryEvent,
    /// The fencing token of the run it is about (F1).
    pub fence: u64,
    /// The owner token of a claim or takeover.
    pub owner: Option<OwnerToken>,
    /// Who decided (a person's decision, U6).
    pub actor: Option<String>,
    /// Why, in the decider's words.
    pub note: Option<String>,
    /// How long an approval of this call may let it run, as the tool said when the call
    /// asked for one (`approval_requested`, `approval_expired`; A3 caps an approval by it).
    pub valid_for: Option<Duration>,
}

/// What a [`HistoryEntry`] tells of.
#[derive(Debug, Clone, PartialEq, Eq)]
#[non_exhaustive]
pub enum HistoryEvent {
    /// A call claimed the key (S2): a first claim, a claim over an expired record, or a
    /// claim of a key decided not applied (U6).
    Claimed,
    /// A call took over a run whose outcome was unknown (U2a, U3).
    TakenOver {
        /// Why that run's outcome was unknown.
        cause: UnknownReason,
    },
    /// The run's outcome became unknown (U1).
    Unknown {
        /// Why.
        cause: UnknownReason,
    },
    /// The run's outcome was saved (S3, S4).
    Completed {
        /// The body's, or a reconcile function's (U3).
        source: OutcomeSource,
    },
    /// A person decided (U6).
    Resolved {
        /// What they decided.
        decision: DecisionKind,
    },
    /// A run that claimed a key decided not applied, or approved, gave it back without an
    /// outcome (a retryable error, a cancellation under `on_cancel = "release"`, a drop
    /// before its body began): the key is not applied (U6), or approved (A4), again.
    Released,
    /// The first call of a tool that requires approval recorded its request (A2).
    ApprovalRequested,
    /// A person approved the call (A3), until the given instant.
    Approved {
        /// When the approval expires (ms since the Unix epoch).
        until: Timestamp,
    },
    /// A person denied the call (A3); the denial is the key's saved outcome (A5).
    Denied,
    /// A call found the approval expired: the record awaits approval again (A4).
    ApprovalExpired,
    /// An entry this build cannot read (a newer build's, or a damaged one), as stored.
    Unreadable(String),
}

/// Why a run's outcome is unknown (U1), as the history names it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
#[non_exhaustive]
pub enum UnknownReason {
    /// The call was cancelled (its future dropped) after its body began.
    Cancelled,
    /// The body panicked.
    Panicked,
    /// The body ended with an outcome-unknown error, or a run that took over ended with an
    /// error that would have released.
    Error,
    /// The owner's lease lapsed: it crashed, was killed, or stalled longer than the lease.
    LeaseLapsed,
    /// A reconcile function answered `Unknown` (U3).
    ReconcileUnknown,
    /// The run had been marked unknown (the cause is in its own entry): the cause of a
    /// takeover of such a run.
    Marked,
}

impl UnknownReason {
    /// The name in the history: `cancelled`, `panicked`, `error`, `lease_lapsed`,
    /// `reconcile_unknown`, `marked`.
    pub fn as_str(self) -> &'static str {
        match self {
            UnknownReason::Cancelled => "cancelled",
            UnknownReason::Panicked => "panicked",
            UnknownReason::Error => "error",
            UnknownReason::LeaseLapsed => "lease_lapsed",
            UnknownReason::ReconcileUnknown => "reconcile_unknown",
            UnknownReason::Marked => "marked",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "cancelled" => UnknownReason::Cancelled,
            "panicked" => UnknownReason::Panicked,
            "error" => UnknownReason::Error,
            "lease_lapsed" => UnknownReason::LeaseLapsed,
            "reconcile_unknown" => UnknownReason::ReconcileUnknown,
            "marked" => UnknownReason::Marked,
            _ => return None,
        })
    }
}

/// What a person decided about an unknown outcome (U6).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
#[non_exhaustive]
pub enum DecisionKind {
    /// The effect happened; its output is saved.
    Applied,
    /// The call failed; its error is saved.
    Error,
    /// The effect did not happen; the next call runs the body.
    NotApplied,
}

impl DecisionKind {
    /// `applied`, `error`, `not_applied`.
    pub fn as_str(self) -> &'static str {
        match self {
            DecisionKind::Applied => "applied",
            DecisionKind::Error => "error",
            DecisionKind::NotApplied => "not_applied",
        }
    }

    fn parse(text: &str) -> Option<Self> {
        Some(match text {
            "applied" => DecisionKind::Applied,
            "error" => DecisionKind::Error,
            "not_applied" => DecisionKind::NotApplied,
            _ => return None,
        })
    }
}

impl fmt::Display for DecisionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// A record's history as read (U7): its entries, oldest first, and how many earlier ones
/// were dropped to keep within [`HISTORY_LIMIT`].
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct History {
    /// The kept entries, oldest first.
    pub entries: Vec<HistoryEntry>,
    /// How many entries were dropped before the first kept one.
    pub dropped: u64,
}

/// The stored member names and values of an entry, in the stored order.
#[derive(Serialize, Deserialize)]
struct Wire {
    at: u64,
    event: String,
    fence: u64,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    cause: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    source: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    decision: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    until: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    valid_for: Option<u64>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    actor: Option<String>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    note: Option<String>,
}

impl HistoryEntry {
    /// An entry of `event` at `at` for the run of `fence`, without owner, actor or note.
    pub fn new(at: Timestamp, event: HistoryEvent, fence: u64) -> Self {
        HistoryEntry {
            at,
            event,
            fence,
            owner: None,
            actor: None,
            note: None,
            valid_for: None,
        }
    }

    /// This entry with the tool's approval validity (a request for approval, A3).
    pub fn with_valid_for(mut self, valid_for: Duration) -> Self {
        self.valid_for = Some(valid_for);
        self
    }

    /// This entry with the owner token of a claim or takeover.
    pub fn with_owner(mut self, owner: OwnerToken) -> Self {
        self.owner = Some(owner);
        self
    }

    /// This entry with the deciding person and their note.
    pub fn with_actor(mut self, actor: impl Into<String>, note: Option<String>) -> Self {
        self.actor = Some(actor.into());
        self.note = note;
        self
    }

    /// The `claimed` entry a store writes for a claim it granted with `fence` (U7).
    pub fn claimed(at: Timestamp, fence: u64, owner: OwnerToken) -> Self {
        HistoryEntry::new(at, HistoryEvent::Claimed, fence).with_owner(owner)
    }

    /// The entry as one line of stored text (see the [module documentation](self)).
    pub fn to_json(&self) -> String {
        let (event, cause, source, decision) = match &self.event {
            HistoryEvent::Claimed => ("claimed", None, None, None),
            HistoryEvent::TakenOver { cause } => ("taken_over", Some(cause.as_str()), None, None),
            HistoryEvent::Unknown { cause } => ("unknown", Some(cause.as_str()), None, None),
            HistoryEvent::Completed { source } => ("completed", None, Some(source.as_str()), None),
            HistoryEvent::Resolved { decision } => {
                ("resolved", None, None, Some(decision.as_str()))
            }
            HistoryEvent::Released => ("released", None, None, None),
            HistoryEvent::ApprovalRequested => ("approval_requested", None, None, None),
            HistoryEvent::Approved { .. } => ("approved", None, None, None),
            HistoryEvent::Denied => ("denied", None, None, None),
            HistoryEvent::ApprovalExpired => ("approval_expired", None, None, None),
            HistoryEvent::Unreadable(text) => return text.clone(),
        };
        let until = match self.event {
            HistoryEvent::Approved { until } => Some(until.as_millis()),
            _ => None,
        };
        let wire = Wire {
            at: self.at.as_millis(),
            event: event.to_owned(),
            fence: self.fence,
            owner: self.owner.map(OwnerToken::to_hex),
            cause: cause.map(str::to_owned),
            source: source.map(str::to_owned),
            decision: decision.map(str::to_owned),
            until,
            valid_for: self.valid_for.map(crate::clock::duration_millis),
            actor: self.actor.clone(),
            note: self.note.clone(),
        };
        // A struct of strings and integers always serializes.
        serde_json::to_string(&wire).unwrap_or_default()
    }

    /// Reads one stored line; a line this build cannot read is
    /// [`HistoryEvent::Unreadable`] (at the epoch, fence 0), never an error.
    pub fn from_json(line: &str) -> Self {
        let unreadable = || {
            HistoryEntry::new(
                Timestamp::EPOCH,
                HistoryEvent::Unreadable(line.to_owned()),
                0,
            )
        };
        let Ok(wire) = serde_json::from_str::<Wire>(line) else {
            return unreadable();
        };
        let cause = wire.cause.as_deref().and_then(UnknownReason::parse);
        let event = match (wire.event.as_str(), cause) {
            ("claimed", _) => HistoryEvent::Claimed,
            ("taken_over", Some(cause)) => HistoryEvent::TakenOver { cause },
            ("unknown", Some(cause)) => HistoryEvent::Unknown { cause },
            ("completed", _) => match wire.source.as_deref().and_then(OutcomeSource::parse) {
                Some(source) => HistoryEvent::Completed { source },
                None => return unreadable(),
            },
            ("resolved", _) => match wire.decision.as_deref().and_then(DecisionKind::parse) {
                Some(decision) => HistoryEvent::Resolved { decision },
                None => return unreadable(),
            },
            ("released", _) => HistoryEvent::Released,
            ("approval_requested", _) => HistoryEvent::ApprovalRequested,
            ("approved", _) => match wire.until {
                Some(until) => HistoryEvent::Approved {
                    until: Timestamp::from_millis(until),
                },
                None => return unreadable(),
            },
            ("denied", _) => HistoryEvent::Denied,
            ("approval_expired", _) => HistoryEvent::ApprovalExpired,
            _ => return unreadable(),
        };
        let owner = match wire.owner.as_deref() {
            None => None,
            Some(hex) => match OwnerToken::from_hex(hex) {
                Some(owner) => Some(owner),
                None => return unreadable(),
            },
        };
        HistoryEntry {
            at: Timestamp::from_millis(wire.at),
            event,
            fence: wire.fence,
            owner,
            actor: wire.actor,
            note: wire.note,
            valid_for: wire.valid_for.map(Duration::from_millis),
        }
    }
}

impl History {
    /// Reads a stored history: `text` as the store keeps it (entries separated by `\n`;
    /// `None` or empty: no entry) and `dropped`, how many earlier entries the store
    /// dropped.
    pub fn from_stored(text: Option<&str>, dropped: u64) -> Self {
        let entries = text
            .unwrap_or_default()
            .split('\n')
            .filter(|line| !line.is_empty())
            .map(HistoryEntry::from_json)
            .collect();
        History { entries, dropped }
    }
}

/// A history kept in process (the memory store; the SQLite store's rows are appended by
/// SQL): at most [`HISTORY_LIMIT`] entries as stored lines, and the count of dropped ones.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub(crate) struct StoredHistory {
    lines: VecDeque<String>,
    dropped: u64,
}

#[cfg_attr(not(feature = "memory"), allow(dead_code))]
impl StoredHistory {
    /// A history whose one entry is `entry`.
    pub(crate) fn starting(entry: &HistoryEntry) -> Self {
        let mut history = StoredHistory::default();
        history.append(entry);
        history
    }

    /// Appends `entry`, dropping the oldest one when full.
    pub(crate) fn append(&mut self, entry: &HistoryEntry) {
        if self.lines.len() >= HISTORY_LIMIT {
            self.lines.pop_front();
            self.dropped += 1;
        }
        self.lines.push_back(entry.to_json());
    }

    /// The history as read.
    pub(crate) fn read(&self) -> History {
        History {
            entries: self
                .lines
                .iter()
                .map(|l| HistoryEntry::from_json(l))
                .collect(),
            dropped: self.dropped,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins U7: every event round-trips through its stored line, and the line has the
    // documented shape
    #[test]
    fn entries_round_trip_through_their_stored_line() {
        let owner = OwnerToken::from_u128(0xabc);
        let at = Timestamp::from_millis(1_796_000_000_000);
        let entries = [
            HistoryEntry::claimed(at, 1, owner),
            HistoryEntry::new(
                at,
                HistoryEvent::TakenOver {
                    cause: UnknownReason::LeaseLapsed,
                },
                2,
            )
            .with_owner(owner),
            HistoryEntry::new(
                at,
                HistoryEvent::Unknown {
                    cause: UnknownReason::Panicked,
                },
                2,
            ),
            HistoryEntry::new(
                at,
                HistoryEvent::Completed {
                    source: OutcomeSource::Reconciled,
                },
                3,
            ),
            HistoryEntry::new(
                at,
                HistoryEvent::Resolved {
                    decision: DecisionKind::NotApplied,
                },
                3,
            )
            .with_actor("ana", Some("bank: no refund \"re_1\"\nline two".to_owned())),
            HistoryEntry::new(at, HistoryEvent::Released, 4),
            HistoryEntry::new(at, HistoryEvent::ApprovalRequested, 1)
                .with_valid_for(Duration::from_secs(1_800)),
            HistoryEntry::new(
                at,
                HistoryEvent::Approved {
                    until: Timestamp::from_millis(1_796_003_600_000),
                },
                1,
            )
            .with_actor("ana", Some("ok for 40 EUR".to_owned())),
            HistoryEntry::new(at, HistoryEvent::Denied, 1).with_actor("bo", None),
            HistoryEntry::new(at, HistoryEvent::ApprovalExpired, 1),
        ];
        for entry in entries {
            let line = entry.to_json();
            assert!(!line.contains('\n'), "{line}");
            assert_eq!(HistoryEntry::from_json(&line), entry, "{line}");
        }
        assert_eq!(
            HistoryEntry::claimed(at, 1, owner).to_json(),
            r#"{"at":1796000000000,"event":"claimed","fence":1,"owner":"00000000000000000000000000000abc"}"#
        );
    }

    // pins U7: a line this build cannot read is kept as text, never an error
    #[test]
    fn unreadable_lines_are_kept_as_text() {
        for line in [
            "not json",
            r#"{"at":1,"event":"teleported","fence":1}"#,
            r#"{"at":1,"event":"unknown","fence":1}"#,
        ] {
            assert_eq!(
                HistoryEntry::from_json(line).event,
                HistoryEvent::Unreadable(line.to_owned())
            );
        }
        let members_in_any_order = r#"{"fence":2,"event":"released","at":5,"extra":true}"#;
        assert_eq!(
            HistoryEntry::from_json(members_in_any_order),
            HistoryEntry::new(Timestamp::from_millis(5), HistoryEvent::Released, 2)
        );
    }

    // pins U7: the history keeps the last HISTORY_LIMIT entries and counts the dropped ones
    #[test]
    fn the_history_is_bounded() {
        let mut history = StoredHistory::default();
        for fence in 1..=(HISTORY_LIMIT as u64 + 5) {
            history.append(&HistoryEntry::new(
                Timestamp::from_millis(fence),
                HistoryEvent::Released,
                fence,
            ));
        }
        let read = history.read();
        assert_eq!(read.entries.len(), HISTORY_LIMIT);
        assert_eq!(read.dropped, 5);
        assert_eq!(read.entries[0].fence, 6);
        let text = history.lines.iter().cloned().collect::<Vec<_>>().join("\n");
        assert_eq!(History::from_stored(Some(&text), 5), read);
    }
}
