//! What `idem` prints: records as JSON objects (X2), tables, and times as RFC 3339 with a
//! relative form (P3).

use std::fmt::Write as _;

use idem_runtime::store::{OutcomeSource, Record, RecordState, StateFilter};
use idem_runtime::{IdempotencyKey, RecordLabel, ScopePart, ScopePath, Timestamp};
use serde::Serialize;
use serde_json::{json, Value};

mod approval;
#[cfg(test)]
mod fixtures;
mod history;

pub use history::{history_text, record_with_history_json};

/// `2026-12-01T20:33:33.123Z (3m ago)`.
pub fn when(at: Timestamp, now: Timestamp) -> String {
    format!("{} ({})", at.to_rfc3339(), relative(at, now))
}

/// `at` relative to `now`: `3m ago`, `in 23h 57m`, `2d 4h ago`, `now` (within a second).
/// Rounded down to the two largest units (days and hours, hours and minutes), minutes
/// alone under an hour, seconds under a minute.
pub fn relative(at: Timestamp, now: Timestamp) -> String {
    let (span, future) = if at > now {
        (at.as_millis() - now.as_millis(), true)
    } else {
        (now.as_millis() - at.as_millis(), false)
    };
    let secs = span / 1000;
    if secs == 0 {
        return "now".to_owned();
    }
    let (days, hours, minutes) = (secs / 86_400, secs % 86_400 / 3600, secs % 3600 / 60);
    let text = if days > 0 {
        two_units(days, 'd', hours, 'h')
    } else if hours > 0 {
        two_units(hours, 'h', minutes, 'm')
    } else if minutes > 0 {
        format!("{minutes}m")
    } else {
        format!("{secs}s")
    };
    if future {
        format!("in {text}")
    } else {
        format!("{text} ago")
    }
}

fn two_units(big: u64, big_unit: char, small: u64, small_unit: char) -> String {
    if small == 0 {
        format!("{big}{big_unit}")
    } else {
        format!("{big}{big_unit} {small}{small_unit}")
    }
}

/// The label's tool, `None` for a record written before labels existed (P4).
pub fn tool_of(record: &Record) -> Option<&str> {
    record
        .label
        .as_ref()
        .map(|l| l.tool.as_str())
        .filter(|t| !t.is_empty())
}

fn label_of(record: &Record) -> RecordLabel {
    record.label.clone().unwrap_or_default()
}

/// The record's scope as text (`tenant=acme/conversation=c-1`; empty for `global` and for
/// records written before labels existed).
pub fn scope_text(scope: &ScopePath) -> String {
    scope.to_string()
}

/// One scope part as `--scope` takes it: `kind=value`, `%`, `/` and `=` in the value
/// percent-encoded.
pub fn part_text(part: &ScopePart) -> String {
    ScopePath::new()
        .with(part.kind.clone(), part.value.clone())
        .to_string()
}

/// The saved outcome as JSON: `{"ok": VALUE}` or `{"err": VALUE}` (the envelope without
/// its version); `null` for a record without one; `{"undecodable": TEXT, "error": WHY}`
/// for an envelope this build cannot read.
pub fn outcome_json(record: &Record) -> Value {
    let RecordState::Completed { outcome, .. } = &record.state else {
        return Value::Null;
    };
    match outcome.decode::<Value, Value>() {
        Ok(Ok(value)) => json!({ "ok": value }),
        Ok(Err(error)) => json!({ "err": error }),
        Err(why) => json!({ "undecodable": outcome.as_str(), "error": why }),
    }
}

/// The audited key arguments (P2) as JSON, `null` when the tool does not audit.
fn key_args_json(label: &RecordLabel) -> Value {
    match &label.key_args {
        None => Value::Null,
        Some(text) => serde_json::from_str(text).unwrap_or_else(|_| Value::String(text.clone())),
    }
}

/// One record as the JSON object `show --json` prints and `ls --json` prints per line (X2),
/// its members in this order: `key`, `tool`, `namespace`, `scope`, `scope_parts`, `state`
/// (as a call would find it at `now`, I7), `fence`, `created_at`, `expires_at`, `overdue`,
/// then `completed_at` and `source` (completed), `lease_until` (in progress and outcome
/// unknown), `unknown_since` (outcome unknown), `decided_at` (not applied, approved),
/// `awaiting_approval_since` (awaiting approval), `approved_until` (approved), `denial`
/// (completed with source `denied`), and `outcome`, `key_args`.
#[derive(Debug, Clone, Serialize)]
pub struct RecordJson {
    key: String,
    tool: Option<String>,
    namespace: Option<String>,
    scope: String,
    scope_parts: Vec<ScopePart>,
    state: &'static str,
    fence: u64,
    created_at: String,
    expires_at: String,
    overdue: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    completed_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    source: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unknown_since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    decided_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    awaiting_approval_since: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    approved_until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    denial: Option<approval::DenialJson>,
    outcome: Value,
    key_args: Value,
}

/// The times a record's state carries, by name.
#[derive(Default)]
struct StateTimes {
    completed_at: Option<Timestamp>,
    source: Option<OutcomeSource>,
    lease_until: Option<Timestamp>,
    unknown_since: Option<Timestamp>,
    decided_at: Option<Timestamp>,
    awaiting_approval_since: Option<Timestamp>,
    approved_until: Option<Timestamp>,
}

/// What `record`'s state says beside its name, at `now`: an in-progress record whose lease
/// lapsed is an unknown outcome since its claim (U1, I7), as the decision that marks it
/// will record it.
fn state_times(record: &Record, now: Timestamp) -> StateTimes {
    match &record.state {
        RecordState::Completed {
            completed_at,
            source,
            ..
        } => StateTimes {
            completed_at: Some(*completed_at),
            source: Some(*source),
            ..StateTimes::default()
        },
        RecordState::InProgress { lease_until, .. } => StateTimes {
            lease_until: Some(*lease_until),
            unknown_since: (*lease_until <= now).then_some(record.created_at),
            ..StateTimes::default()
        },
        RecordState::OutcomeUnknown {
            lease_until, since, ..
        } => StateTimes {
            lease_until: Some(*lease_until),
            unknown_since: Some(*since),
            ..StateTimes::default()
        },
        RecordState::NotApplied { decided_at } => StateTimes {
            decided_at: Some(*decided_at),
            ..StateTimes::default()
        },
        RecordState::AwaitingApproval { since } => StateTimes {
            awaiting_approval_since: Some(*since),
            ..StateTimes::default()
        },
        RecordState::Approved { decided_at, until } => StateTimes {
            decided_at: Some(*decided_at),
            approved_until: Some(*until),
            ..StateTimes::default()
        },
        // A state of a newer runtime: its name and times, no more.
        _ => StateTimes::default(),
    }
}

/// The [`RecordJson`] of `record` at `now`.
pub fn record_json(key: &IdempotencyKey, record: &Record, now: Timestamp) -> RecordJson {
    let label = label_of(record);
    let times = state_times(record, now);
    let text = |at: Option<Timestamp>| at.map(|t| t.to_rfc3339());
    RecordJson {
        key: key.to_string(),
        tool: tool_of(record).map(str::to_owned),
        namespace: label.namespace.clone(),
        scope: scope_text(&label.scope),
        scope_parts: label.scope.parts().to_vec(),
        state: StateFilter::at(&record.state, now).as_str(),
        fence: record.fence,
        created_at: record.created_at.to_rfc3339(),
        expires_at: record.expires_at.to_rfc3339(),
        overdue: record.is_overdue(now),
        completed_at: text(times.completed_at),
        source: times.source.map(OutcomeSource::as_str),
        lease_until: text(times.lease_until),
        unknown_since: text(times.unknown_since),
        decided_at: text(times.decided_at),
        awaiting_approval_since: text(times.awaiting_approval_since),
        approved_until: text(times.approved_until),
        denial: approval::denial_json(record),
        outcome: outcome_json(record),
        key_args: key_args_json(&label),
    }
}

/// `text` with its control characters escaped (`\u{1b}`): stored text that cannot move
/// the terminal.
fn printable(text: &str) -> String {
    text.chars()
        .map(|c| {
            if c.is_control() {
                c.escape_default().to_string()
            } else {
                c.to_string()
            }
        })
        .collect()
}

/// Where a saved outcome came from, for people: `executed: the tool's own result`,
/// `reconciled: …`, `resolved: a person's decision`, `denied: …`.
pub fn source_words(source: OutcomeSource) -> &'static str {
    match source {
        OutcomeSource::Executed => "executed: the tool's own result",
        OutcomeSource::Reconciled => "reconciled: its reconcile function found it",
        OutcomeSource::Resolved => "resolved: a person's decision",
        OutcomeSource::Denied => "denied: a person refused the call; the tool did not run",
        _ => "from a source this build does not know",
    }
}

/// `value` as one line of JSON, newline included.
pub fn json_line<T: Serialize>(value: &T) -> String {
    // Structs of strings, numbers and JSON values always serialize.
    serde_json::to_string(value).unwrap_or_default() + "\n"
}

/// `in progress`, `outcome unknown`, `completed`, `not applied`, `awaiting approval`,
/// `approved`: a state as people read it.
pub fn state_words(state: StateFilter) -> &'static str {
    match state {
        StateFilter::InProgress => "in progress",
        StateFilter::OutcomeUnknown => "outcome unknown",
        StateFilter::Completed => "completed",
        StateFilter::NotApplied => "not applied",
        StateFilter::AwaitingApproval => "awaiting approval",
        StateFilter::Approved => "approved",
        _ => "in a state this build does not know",
    }
}

/// The state a call would find at `now` as people read it, with what makes it so:
/// `outcome unknown (lease lapsed)` for an in-progress record whose owner's lease lapsed,
/// `approved (expired)` for an approval no call used in time (A4), and `, overdue` for a record that is not completed past its `expires_at` (S8, I7).
pub fn effective_state_text(record: &Record, now: Timestamp) -> String {
    let mut text = state_words(StateFilter::at(&record.state, now)).to_owned();
    if matches!(record.state, RecordState::InProgress { lease_until, .. } if lease_until <= now) {
        text.push_str(" (lease lapsed)");
    }
    text.push_str(approval::state_suffix(record, now));
    if record.is_overdue(now) {
        text.push_str(", overdue");
    }
    text
}

/// One record as `show` prints it for people: one `name  value` line per field, times
/// absolute and relative, the outcome as indented pretty JSON.
pub fn record_text(key: &IdempotencyKey, record: &Record, now: Timestamp) -> String {
    let label = label_of(record);
    let mut rows: Vec<(&str, String)> = vec![
        ("key", key.to_string()),
        (
            "tool",
            tool_of(record)
                .unwrap_or("- (written before records had labels)")
                .to_owned(),
        ),
        (
            "namespace",
            label.namespace.clone().unwrap_or_else(|| "-".to_owned()),
        ),
        (
            "scope",
            if label.scope.is_global() {
                match tool_of(record) {
                    Some(_) => "- (global)".to_owned(),
                    None => "-".to_owned(),
                }
            } else {
                scope_text(&label.scope)
            },
        ),
        ("state", effective_state_text(record, now)),
        (
            "fence",
            format!(
                "{} ({})",
                record.fence,
                plural(record.fence, "attempt", "attempts")
            ),
        ),
        ("created", when(record.created_at, now)),
    ];
    let times = state_times(record, now);
    if let Some(at) = times.completed_at {
        rows.push(("completed", when(at, now)));
    }
    if let Some(source) = times.source {
        rows.push(("source", source_words(source).to_owned()));
    }
    rows.extend(approval::denial_rows(record));
    if let Some(at) = times.decided_at {
        rows.push(("decided", when(at, now)));
    }
    if let Some(at) = times.unknown_since {
        rows.push(("unknown since", when(at, now)));
    }
    if let Some(at) = times.awaiting_approval_since {
        rows.push(("awaiting since", when(at, now)));
    }
    if let Some(until) = times.approved_until {
        rows.push(("approved until", approval::until_text(until, now)));
    }
    if let Some(at) = times.lease_until {
        rows.push(("lease until", when(at, now)));
    }
    let expires = when(record.expires_at, now);
    rows.push((
        "expires",
        if record.is_overdue(now) {
            format!("{expires}: overdue, kept until a call, a decision or a purge moves it on")
        } else {
            expires
        },
    ));
    if let Some(args) = &label.key_args {
        rows.push(("arguments", args.clone()));
    }
    if StateFilter::at(&record.state, now) == StateFilter::OutcomeUnknown {
        rows.push((
            "to decide",
            format!(
                "idem resolve {key} --expect-fence {} (--applied [--output JSON] | \
                 --not-applied | --error JSON)",
                record.fence
            ),
        ));
    }
    rows.extend(approval::action_row(key, record));
    let width = rows.iter().map(|(name, _)| name.len()).max().unwrap_or(0);
    let mut text = String::new();
    for (name, value) in &rows {
        let _ = writeln!(text, "{name:<width$}  {value}");
    }
    let outcome = outcome_json(record);
    if !outcome.is_null() {
        let pretty = serde_json::to_string_pretty(&outcome).unwrap_or_default();
        let _ = writeln!(text, "outcome");
        for line in pretty.lines() {
            let _ = writeln!(text, "  {line}");
        }
    }
    text
}

fn plural(n: u64, one: &'static str, many: &'static str) -> String {
    if n == 1 {
        format!("{n} {one}")
    } else {
        format!("{n} {many}")
    }
}

/// `n record` / `n records`.
pub fn records(n: u64) -> String {
    plural(n, "record", "records")
}

/// A table: a header row and rows, columns padded to their widest cell (by characters),
/// two spaces apart, trailing spaces trimmed.
pub fn table(header: &[&str], rows: &[Vec<String>]) -> String {
    let mut widths: Vec<usize> = header.iter().map(|h| h.chars().count()).collect();
    for row in rows {
        for (i, cell) in row.iter().enumerate() {
            if let Some(w) = widths.get_mut(i) {
                *w = (*w).max(cell.chars().count());
            }
        }
    }
    let mut text = String::new();
    let header: Vec<String> = header.iter().map(|h| (*h).to_owned()).collect();
    for row in std::iter::once(&header).chain(rows) {
        let mut line = String::new();
        for (i, cell) in row.iter().enumerate() {
            if i > 0 {
                line.push_str("  ");
            }
            line.push_str(cell);
            let pad = widths[i].saturating_sub(cell.chars().count());
            line.extend(std::iter::repeat_n(' ', pad));
        }
        text.push_str(line.trim_end());
        text.push('\n');
    }
    text
}

#[cfg(test)]
mod tests {
    use super::fixtures::*;
    use super::*;
    use idem_runtime::store::OwnerToken;
    use idem_runtime::Envelope;

    // pins X2, P3: relative times, past and future, two units at most
    #[test]
    fn relative_times_read_like_people_write_them() {
        let now = at(0);
        assert_eq!(relative(at(-180_000), now), "3m ago");
        assert_eq!(relative(at(-185_000), now), "3m ago");
        assert_eq!(relative(at(-12_500), now), "12s ago");
        assert_eq!(relative(at(-400), now), "now");
        assert_eq!(
            relative(at((23 * 3600 + 57 * 60) * 1000 + 999), now),
            "in 23h 57m"
        );
        assert_eq!(relative(at(2 * 3600 * 1000), now), "in 2h");
        assert_eq!(
            relative(at(-(2 * 86_400 + 4 * 3600) * 1000), now),
            "2d 4h ago"
        );
        assert_eq!(when(at(-180_000), now), "2026-12-01T20:30:33.123Z (3m ago)");
    }

    // pins X2, P1, P3: the JSON object of a completed record
    #[test]
    fn a_completed_record_as_json() {
        let label = RecordLabel {
            key_args: Some(r#"{"amount_cents":500,"order_id":4417}"#.to_owned()),
            ..RecordLabel::new(
                "send_refund",
                ScopePath::new()
                    .with("tenant", "acme")
                    .with("conversation", "c/9"),
            )
        };
        let value =
            serde_json::to_value(record_json(&key(), &completed(Some(label)), at(0))).unwrap();
        assert_eq!(
            value,
            json!({
                "key": "ab".repeat(32),
                "tool": "send_refund",
                "namespace": null,
                "scope": "tenant=acme/conversation=c%2F9",
                "scope_parts": [
                    {"kind": "tenant", "value": "acme"},
                    {"kind": "conversation", "value": "c/9"},
                ],
                "state": "completed",
                "fence": 1,
                "created_at": "2026-12-01T20:30:33.123Z",
                "expires_at": "2026-12-02T20:30:33.123Z",
                "overdue": false,
                "completed_at": "2026-12-01T20:30:34.123Z",
                "source": "executed",
                "outcome": {"ok": {"refund_id": "re_1"}},
                "key_args": {"amount_cents": 500, "order_id": 4417},
            })
        );
    }

    // pins X2: members come in a reading order, key first, the outcome after the times
    #[test]
    fn members_come_in_reading_order() {
        let line = json_line(&record_json(&key(), &completed(None), at(0)));
        let at = |member: &str| line.find(&format!("\"{member}\":")).unwrap();
        let order = [
            "key",
            "tool",
            "namespace",
            "scope",
            "scope_parts",
            "state",
            "fence",
            "created_at",
            "expires_at",
            "overdue",
            "completed_at",
            "source",
            "outcome",
            "key_args",
        ];
        assert!(order.windows(2).all(|w| at(w[0]) < at(w[1])), "{line}");
        assert!(
            line.starts_with("{\"key\":") && line.ends_with("}\n"),
            "{line}"
        );
    }

    // pins P4, X2: a record written before labels existed shows null/empty, not an error
    #[test]
    fn a_record_without_label_shows_empty() {
        for label in [None, Some(RecordLabel::default())] {
            let record = completed(label);
            let value = serde_json::to_value(record_json(&key(), &record, at(0))).unwrap();
            assert_eq!(value["tool"], Value::Null);
            assert_eq!(value["scope"], "");
            assert_eq!(value["scope_parts"], json!([]));
            assert_eq!(value["key_args"], Value::Null);
            let text = record_text(&key(), &record, at(0));
            assert!(text.contains("written before records had labels"), "{text}");
        }
    }

    // pins X2: in progress and unknown records show their lease and since
    #[test]
    fn states_show_their_times() {
        let mut record = completed(Some(RecordLabel::new("t", ScopePath::new())));
        record.state = RecordState::OutcomeUnknown {
            owner: OwnerToken::random(),
            lease_until: at(30_000),
            since: at(-180_000),
        };
        record.fence = 2;
        let value = serde_json::to_value(record_json(&key(), &record, at(0))).unwrap();
        assert_eq!(value["state"], "outcome_unknown");
        assert_eq!(value["lease_until"], "2026-12-01T20:34:03.123Z");
        assert_eq!(value["unknown_since"], "2026-12-01T20:30:33.123Z");
        assert_eq!(value["outcome"], Value::Null);
        assert!(value.get("completed_at").is_none());
        let text = record_text(&key(), &record, at(0));
        assert!(
            text.contains("lease until    2026-12-01T20:34:03.123Z (in 30s)"),
            "{text}"
        );
        assert!(text.contains("fence          2 (2 attempts)"), "{text}");
        assert!(text.contains("scope          - (global)"), "{text}");
        assert!(
            text.contains(&format!(
                "to decide      idem resolve {} --expect-fence 2 (--applied",
                key()
            )),
            "{text}"
        );
    }

    // pins I7, U1, S8, X2: an in-progress record whose lease lapsed shows as outcome
    // unknown (since its claim), and one past its expiry is marked overdue, in JSON and text
    #[test]
    fn a_lapsed_claim_is_unknown_and_an_old_one_overdue() {
        let mut record = completed(Some(RecordLabel::new("t", ScopePath::new())));
        record.state = RecordState::InProgress {
            owner: OwnerToken::random(),
            lease_until: at(30_000),
        };
        let live = serde_json::to_value(record_json(&key(), &record, at(0))).unwrap();
        assert_eq!(live["state"], "in_progress");
        assert_eq!(live["overdue"], false);
        assert!(live.get("unknown_since").is_none(), "{live}");
        let text = record_text(&key(), &record, at(0));
        assert_eq!(row(&text, "state"), "in progress", "{text}");
        assert!(
            !text.contains("to decide"),
            "a live claim is not decided: {text}"
        );

        let lapsed = serde_json::to_value(record_json(&key(), &record, at(30_000))).unwrap();
        assert_eq!(lapsed["state"], "outcome_unknown", "at its lease deadline");
        assert_eq!(lapsed["unknown_since"], "2026-12-01T20:30:33.123Z");
        assert_eq!(lapsed["lease_until"], "2026-12-01T20:34:03.123Z");
        let text = record_text(&key(), &record, at(30_000));
        assert_eq!(
            row(&text, "state"),
            "outcome unknown (lease lapsed)",
            "{text}"
        );
        assert_eq!(
            row(&text, "unknown since"),
            "2026-12-01T20:30:33.123Z (3m ago)",
            "{text}"
        );

        let day = 86_400_000;
        let overdue = serde_json::to_value(record_json(&key(), &record, at(day))).unwrap();
        assert_eq!(overdue["overdue"], true);
        let text = record_text(&key(), &record, at(day));
        assert!(
            text.contains("outcome unknown (lease lapsed), overdue"),
            "{text}"
        );
        assert!(text.contains("(3m ago): overdue, kept until"), "{text}");
        assert_eq!(
            effective_state_text(&completed(None), at(2 * day)),
            "completed",
            "a completed record is never overdue (it expires)"
        );
    }

    // pins U6, X2: a not-applied record shows when it was decided; a resolved outcome its
    // source
    #[test]
    fn decided_records_show_decided_at_and_source() {
        let mut record = completed(None);
        record.state = RecordState::NotApplied {
            decided_at: at(-60_000),
        };
        let value = serde_json::to_value(record_json(&key(), &record, at(0))).unwrap();
        assert_eq!(value["state"], "not_applied");
        assert_eq!(value["decided_at"], "2026-12-01T20:32:33.123Z");
        assert_eq!(value["outcome"], Value::Null);
        assert!(value.get("source").is_none() && value.get("lease_until").is_none());
        let text = record_text(&key(), &record, at(0));
        assert_eq!(row(&text, "state"), "not applied", "{text}");
        assert_eq!(
            row(&text, "decided"),
            "2026-12-01T20:32:33.123Z (1m ago)",
            "{text}"
        );

        record.state = RecordState::Completed {
            outcome: Envelope::encode_ok(&Value::Null).unwrap(),
            completed_at: at(0),
            source: OutcomeSource::Resolved,
        };
        let value = serde_json::to_value(record_json(&key(), &record, at(0))).unwrap();
        assert_eq!(value["source"], "resolved");
        assert_eq!(value["outcome"], json!({"ok": null}));
        let text = record_text(&key(), &record, at(0));
        assert_eq!(
            row(&text, "source"),
            "resolved: a person's decision",
            "{text}"
        );
    }

    // pins X2: a saved error shows as err; an envelope this build cannot read is shown,
    // not fatal
    #[test]
    fn errors_and_unreadable_envelopes() {
        let mut record = completed(None);
        record.state = RecordState::Completed {
            outcome: Envelope::encode_err(&json!({"Failed": "card declined"})).unwrap(),
            completed_at: at(0),
            source: OutcomeSource::Resolved,
        };
        assert_eq!(
            outcome_json(&record),
            json!({"err": {"Failed": "card declined"}})
        );
        record.state = RecordState::Completed {
            outcome: Envelope::from_stored(r#"{"version":9,"ok":1}"#),
            completed_at: at(0),
            source: OutcomeSource::Executed,
        };
        assert_eq!(
            outcome_json(&record)["undecodable"],
            r#"{"version":9,"ok":1}"#
        );
    }

    // pins X2: table columns line up by characters, not bytes
    #[test]
    fn tables_pad_by_characters() {
        let text = table(
            &["A", "BB"],
            &[
                vec!["é".to_owned(), "x".to_owned()],
                vec!["long".to_owned(), String::new()],
            ],
        );
        assert_eq!(text, "A     BB\né     x\nlong\n");
    }
}
