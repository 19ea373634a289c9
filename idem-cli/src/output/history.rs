//! A record's history as `show --history` prints it (U7, X2): one JSON object per entry,
//! or one line per entry for people.

use std::fmt::Write as _;

use idem_runtime::store::{DecisionKind, History, HistoryEntry, HistoryEvent, Record};
use idem_runtime::{IdempotencyKey, Timestamp};
use serde::Serialize;

use super::{plural, printable, record_json, source_words, table, when, RecordJson};

/// One history entry as `show --history --json` prints it: `at` (RFC 3339), `event`,
/// `fence`, then whichever of `owner`, `cause`, `source`, `decision`, `until` (an approval's
/// end, RFC 3339), `actor`, `note` the entry has; an entry this build cannot read is `{"event": "unreadable", "text": …}`.
#[derive(Debug, Clone, Serialize)]
pub struct HistoryEntryJson {
    at: String,
    event: &'static str,
    fence: u64,
    #[serde(skip_serializing_if = "Option::is_none")]
    owner: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    cause: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decision: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    actor: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    note: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    text: Option<String>,
}

/// The [`HistoryEntryJson`] of `entry`.
pub fn history_entry_json(entry: &HistoryEntry) -> HistoryEntryJson {
    let mut json = HistoryEntryJson {
        at: entry.at.to_rfc3339(),
        event: "",
        fence: entry.fence,
        owner: entry.owner.map(|o| o.to_hex()),
        cause: None,
        source: None,
        decision: None,
        until: None,
        actor: entry.actor.clone(),
        note: entry.note.clone(),
        text: None,
    };
    json.event = match &entry.event {
        HistoryEvent::Claimed => "claimed",
        HistoryEvent::TakenOver { cause } => {
            json.cause = Some(cause.as_str());
            "taken_over"
        }
        HistoryEvent::Unknown { cause } => {
            json.cause = Some(cause.as_str());
            "unknown"
        }
        HistoryEvent::Completed { source } => {
            json.source = Some(source.as_str());
            "completed"
        }
        HistoryEvent::Resolved { decision } => {
            json.decision = Some(decision.as_str());
            "resolved"
        }
        HistoryEvent::Released => "released",
        HistoryEvent::ApprovalRequested => "approval_requested",
        HistoryEvent::Approved { until } => {
            json.until = Some(until.to_rfc3339());
            "approved"
        }
        HistoryEvent::Denied => "denied",
        HistoryEvent::ApprovalExpired => "approval_expired",
        HistoryEvent::Unreadable(text) => {
            json.text = Some(text.clone());
            "unreadable"
        }
        // An event of a newer runtime: kept as its stored line.
        _ => {
            json.text = Some(entry.to_json());
            "unreadable"
        }
    };
    json
}

/// `show --json --history`: the record's object followed by `history` and
/// `history_dropped` (how many earlier entries the store dropped, U7).
#[derive(Debug, Clone, Serialize)]
pub struct RecordWithHistoryJson {
    #[serde(flatten)]
    record: RecordJson,
    history: Vec<HistoryEntryJson>,
    history_dropped: u64,
}

/// The [`RecordWithHistoryJson`] of `record` and its `history` at `now`.
pub fn record_with_history_json(
    key: &IdempotencyKey,
    record: &Record,
    history: &History,
    now: Timestamp,
) -> RecordWithHistoryJson {
    RecordWithHistoryJson {
        record: record_json(key, record, now),
        history: history.entries.iter().map(history_entry_json).collect(),
        history_dropped: history.dropped,
    }
}

/// What a key given back without an outcome (`released`) returns to: the last decision
/// before it in the history (U6, A4).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum GivenBackTo {
    /// No decision among the entries kept.
    Unknown,
    /// Decided not applied (U6).
    NotApplied,
    /// Approved (A4).
    Approved,
}

/// One history entry for people: `claimed (owner 3f2a…)`, `outcome unknown: lease lapsed`,
/// `resolved applied by ana: "bank shows re_1"`, `approved by ana until 2026-…Z: "ok"`; a
/// `released` entry says what the key returned to (`released`). Notes and unreadable text
/// are quoted with their control characters escaped, so that nothing stored can move the
/// terminal.
fn history_event_text(entry: &HistoryEntry, released: GivenBackTo) -> String {
    let words = |text: &str| text.replace('_', " ");
    // Said after the actor: `approved by ana until …`.
    let mut after_actor = String::new();
    let mut text = match &entry.event {
        HistoryEvent::Claimed => "claimed".to_owned(),
        HistoryEvent::TakenOver { cause } => {
            format!(
                "taken over (the earlier run's outcome: {})",
                words(cause.as_str())
            )
        }
        HistoryEvent::Unknown { cause } => format!("outcome unknown: {}", words(cause.as_str())),
        HistoryEvent::Completed { source } => format!("completed ({})", source_words(*source)),
        HistoryEvent::Resolved { decision } => format!("resolved {}", words(decision.as_str())),
        HistoryEvent::Released => match released {
            GivenBackTo::NotApplied => "released: not applied again".to_owned(),
            GivenBackTo::Approved => "released: approved again (same validity)".to_owned(),
            GivenBackTo::Unknown => "released: given back without an outcome".to_owned(),
        },
        HistoryEvent::ApprovalRequested => {
            "approval requested: the call waits for a person's approval".to_owned()
        }
        HistoryEvent::Approved { until } => {
            after_actor = format!(" until {}", until.to_rfc3339());
            "approved".to_owned()
        }
        HistoryEvent::Denied => "denied".to_owned(),
        HistoryEvent::ApprovalExpired => {
            "approval expired: no call used it in time; awaiting approval again".to_owned()
        }
        HistoryEvent::Unreadable(stored) => format!("unreadable entry {stored:?}"),
        _ => format!("unreadable entry {:?}", entry.to_json()),
    };
    if let Some(owner) = entry.owner {
        let _ = write!(text, " (owner {})", owner.to_hex());
    }
    if let Some(actor) = &entry.actor {
        let _ = write!(text, " by {}", printable(actor));
    }
    text.push_str(&after_actor);
    if let Some(note) = &entry.note {
        let _ = write!(text, ": {note:?}");
    }
    text
}

/// The history as `show --history` prints it after the record: a `history` heading, then
/// one line per entry, oldest first: the time (RFC 3339 and relative), the fence, what
/// happened.
pub fn history_text(history: &History, now: Timestamp) -> String {
    let mut text = String::new();
    if history.entries.is_empty() {
        text.push_str(
            "history  none kept (a record written before histories were kept, schema 4, has \
             none until its next transition)
",
        );
        return text;
    }
    let _ = writeln!(
        text,
        "history  {}",
        plural(history.entries.len() as u64, "entry", "entries")
    );
    if history.dropped > 0 {
        let _ = writeln!(
            text,
            "  ({} dropped before these: a history keeps the last {})",
            plural(history.dropped, "earlier entry", "earlier entries"),
            idem_runtime::store::HISTORY_LIMIT
        );
    }
    let mut released = GivenBackTo::Unknown;
    let rows: Vec<Vec<String>> = history
        .entries
        .iter()
        .map(|entry| {
            match entry.event {
                HistoryEvent::Resolved {
                    decision: DecisionKind::NotApplied,
                } => released = GivenBackTo::NotApplied,
                HistoryEvent::Approved { .. } => released = GivenBackTo::Approved,
                _ => {}
            }
            vec![
                when(entry.at, now),
                entry.fence.to_string(),
                history_event_text(entry, released),
            ]
        })
        .collect();
    for line in table(&["AT", "FENCE", "EVENT"], &rows).lines() {
        let _ = writeln!(text, "  {line}");
    }
    text
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::fixtures::*;
    use idem_runtime::store::{OutcomeSource, OwnerToken, UnknownReason};
    use serde_json::json;

    // pins U7, X2, P3: history entries as JSON objects (members present only when the
    // entry has them) and as lines with absolute and relative times; notes are escaped
    #[test]
    fn history_as_json_and_text() {
        let owner = OwnerToken::from_u128(0xabc);
        let history = History {
            entries: vec![
                HistoryEntry::claimed(at(-180_000), 1, owner),
                HistoryEntry::new(
                    at(-120_000),
                    HistoryEvent::Unknown {
                        cause: UnknownReason::LeaseLapsed,
                    },
                    1,
                ),
                HistoryEntry::new(
                    at(-60_000),
                    HistoryEvent::Resolved {
                        decision: DecisionKind::NotApplied,
                    },
                    1,
                )
                .with_actor("ana", Some("bank: no refund\n\u{1b}[2J".to_owned())),
                HistoryEntry::new(
                    at(0),
                    HistoryEvent::Completed {
                        source: OutcomeSource::Executed,
                    },
                    2,
                ),
                HistoryEntry::from_json("not json"),
            ],
            dropped: 3,
        };
        let value = serde_json::to_value(record_with_history_json(
            &key(),
            &completed(None),
            &history,
            at(0),
        ))
        .unwrap();
        assert_eq!(value["key"], "ab".repeat(32), "the record's members first");
        assert_eq!(value["history_dropped"], 3);
        assert_eq!(
            value["history"],
            json!([
                {"at": "2026-12-01T20:30:33.123Z", "event": "claimed", "fence": 1,
                 "owner": "00000000000000000000000000000abc"},
                {"at": "2026-12-01T20:31:33.123Z", "event": "unknown", "fence": 1,
                 "cause": "lease_lapsed"},
                {"at": "2026-12-01T20:32:33.123Z", "event": "resolved", "fence": 1,
                 "decision": "not_applied", "actor": "ana", "note": "bank: no refund\n\u{1b}[2J"},
                {"at": "2026-12-01T20:33:33.123Z", "event": "completed", "fence": 2,
                 "source": "executed"},
                {"at": "1970-01-01T00:00:00.000Z", "event": "unreadable", "fence": 0,
                 "text": "not json"},
            ])
        );
        let text = history_text(&history, at(0));
        let lines: Vec<&str> = text.lines().collect();
        assert_eq!(lines[0], "history  5 entries");
        assert!(lines[1].contains("3 earlier entries dropped"), "{text}");
        assert!(lines[2].starts_with("  AT"), "{text}");
        assert!(
            lines[3].starts_with("  2026-12-01T20:30:33.123Z (3m ago)")
                && lines[3].ends_with("1      claimed (owner 00000000000000000000000000000abc)"),
            "{text}"
        );
        assert!(
            lines[4].ends_with("1      outcome unknown: lease lapsed"),
            "{text}"
        );
        assert!(
            lines[5]
                .ends_with(r#"1      resolved not applied by ana: "bank: no refund\n\u{1b}[2J""#),
            "{text}"
        );
        assert!(
            !text.contains('\u{1b}'),
            "no escape sequence reaches the terminal: {text}"
        );
        assert!(
            lines[6].contains("(now)")
                && lines[6].ends_with("2      completed (executed: the tool's own result)"),
            "{text}"
        );
        assert!(
            lines[7].ends_with(r#"unreadable entry "not json""#),
            "{text}"
        );
        assert!(history_text(&History::default(), at(0)).starts_with("history  none kept"));
        let odd_actor = HistoryEntry::new(
            at(0),
            HistoryEvent::Resolved {
                decision: DecisionKind::Applied,
            },
            1,
        )
        .with_actor("a\u{1b}[2Jb", None);
        assert_eq!(
            history_event_text(&odd_actor, GivenBackTo::Unknown),
            "resolved applied by a\\u{1b}[2Jb",
            "an actor from another writer is escaped too"
        );
    }

    // pins U7, A2, A3, A4, X2: the approval events as JSON (an approval's `until`) and as
    // lines: who approved until when, who denied and why, an expired approval, and a
    // give-back after an approval said to return to approved
    #[test]
    fn approval_events_as_json_and_text() {
        let until = at(3_600_000);
        let history = History {
            entries: vec![
                HistoryEntry::claimed(at(-180_000), 1, OwnerToken::from_u128(0xabc)),
                HistoryEntry::new(at(-180_000), HistoryEvent::ApprovalRequested, 1),
                HistoryEntry::new(at(-120_000), HistoryEvent::Approved { until }, 1)
                    .with_actor("ana", Some("checked with the customer".to_owned())),
                HistoryEntry::claimed(at(-60_000), 2, OwnerToken::from_u128(0xdef)),
                HistoryEntry::new(at(-50_000), HistoryEvent::Released, 2),
                HistoryEntry::new(at(-40_000), HistoryEvent::ApprovalExpired, 2),
                HistoryEntry::new(at(0), HistoryEvent::Denied, 2).with_actor("bo", None),
            ],
            dropped: 0,
        };
        let value = serde_json::to_value(record_with_history_json(
            &key(),
            &completed(None),
            &history,
            at(0),
        ))
        .unwrap();
        let events: Vec<&str> = value["history"]
            .as_array()
            .unwrap()
            .iter()
            .map(|e| e["event"].as_str().unwrap())
            .collect();
        assert_eq!(
            events,
            [
                "claimed",
                "approval_requested",
                "approved",
                "claimed",
                "released",
                "approval_expired",
                "denied"
            ]
        );
        assert_eq!(
            value["history"][2],
            json!({"at": "2026-12-01T20:31:33.123Z", "event": "approved", "fence": 1,
                   "until": "2026-12-01T21:33:33.123Z", "actor": "ana",
                   "note": "checked with the customer"})
        );
        assert_eq!(
            value["history"][6],
            json!({"at": "2026-12-01T20:33:33.123Z", "event": "denied", "fence": 2,
                   "actor": "bo"})
        );
        let text = history_text(&history, at(0));
        let lines: Vec<&str> = text.lines().skip(2).collect();
        assert!(
            lines[1].ends_with("1      approval requested: the call waits for a person's approval"),
            "{text}"
        );
        assert!(
            lines[2].ends_with(
                r#"1      approved by ana until 2026-12-01T21:33:33.123Z: "checked with the customer""#
            ),
            "{text}"
        );
        assert!(
            lines[4].ends_with("2      released: approved again (same validity)"),
            "{text}"
        );
        assert!(
            lines[5].ends_with(
                "2      approval expired: no call used it in time; awaiting approval again"
            ),
            "{text}"
        );
        assert!(lines[6].ends_with("2      denied by bo"), "{text}");
        assert_eq!(
            history_event_text(&history.entries[4], GivenBackTo::Unknown),
            "released: given back without an outcome",
            "alone, an entry cannot say what it returned to"
        );
    }
}
