//! What `idem` prints: records as JSON objects (X2), tables, and times as RFC 3339 with a
//! relative form (P3).

use std::fmt::Write as _;

use idem_runtime::store::{Record, RecordState, StateFilter};
use idem_runtime::{IdempotencyKey, RecordLabel, ScopePart, ScopePath, Timestamp};
use serde::Serialize;
use serde_json::{json, Value};

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
/// its members in this order: `key`, `tool`, `namespace`, `scope`, `scope_parts`, `state`,
/// `fence`, `created_at`, `expires_at`, then `completed_at` (completed), `lease_until` (in
/// progress and outcome unknown), `unknown_since` (outcome unknown), and `outcome`,
/// `key_args`.
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
    #[serde(skip_serializing_if = "Option::is_none")]
    completed_at: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    lease_until: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    unknown_since: Option<String>,
    outcome: Value,
    key_args: Value,
}

/// The [`RecordJson`] of `record`.
pub fn record_json(key: &IdempotencyKey, record: &Record) -> RecordJson {
    let label = label_of(record);
    let (completed_at, lease_until, unknown_since) = match &record.state {
        RecordState::Completed { completed_at, .. } => (Some(*completed_at), None, None),
        RecordState::InProgress { lease_until, .. } => (None, Some(*lease_until), None),
        RecordState::OutcomeUnknown {
            lease_until, since, ..
        } => (None, Some(*lease_until), Some(*since)),
    };
    let text = |at: Option<Timestamp>| at.map(|t| t.to_rfc3339());
    RecordJson {
        key: key.to_string(),
        tool: tool_of(record).map(str::to_owned),
        namespace: label.namespace.clone(),
        scope: scope_text(&label.scope),
        scope_parts: label.scope.parts().to_vec(),
        state: StateFilter::of(&record.state).as_str(),
        fence: record.fence,
        created_at: record.created_at.to_rfc3339(),
        expires_at: record.expires_at.to_rfc3339(),
        completed_at: text(completed_at),
        lease_until: text(lease_until),
        unknown_since: text(unknown_since),
        outcome: outcome_json(record),
        key_args: key_args_json(&label),
    }
}

/// `value` as one line of JSON, newline included.
pub fn json_line<T: Serialize>(value: &T) -> String {
    // Structs of strings, numbers and JSON values always serialize.
    serde_json::to_string(value).unwrap_or_default() + "\n"
}

/// `in progress`, `outcome unknown`, `completed`: a state as people read it.
pub fn state_words(state: StateFilter) -> &'static str {
    match state {
        StateFilter::InProgress => "in progress",
        StateFilter::OutcomeUnknown => "outcome unknown",
        StateFilter::Completed => "completed",
    }
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
        (
            "state",
            state_words(StateFilter::of(&record.state)).to_owned(),
        ),
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
    match &record.state {
        RecordState::Completed { completed_at, .. } => {
            rows.push(("completed", when(*completed_at, now)));
        }
        RecordState::InProgress { lease_until, .. } => {
            rows.push(("lease until", when(*lease_until, now)));
        }
        RecordState::OutcomeUnknown {
            lease_until, since, ..
        } => {
            rows.push(("unknown since", when(*since, now)));
            rows.push(("lease until", when(*lease_until, now)));
        }
    }
    rows.push(("expires", when(record.expires_at, now)));
    if let Some(args) = &label.key_args {
        rows.push(("key args", args.clone()));
    }
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
    use super::*;
    use idem_runtime::store::OwnerToken;
    use idem_runtime::{Envelope, Fingerprint};

    const NOW: u64 = 1_796_157_213_123;

    fn at(offset_ms: i64) -> Timestamp {
        Timestamp::from_millis((NOW as i64 + offset_ms) as u64)
    }

    fn key() -> IdempotencyKey {
        IdempotencyKey::from_hex(&"ab".repeat(32)).unwrap()
    }

    fn fingerprint() -> Fingerprint {
        Fingerprint::from_hex(&"cd".repeat(32)).unwrap()
    }

    fn completed(label: Option<RecordLabel>) -> Record {
        Record {
            fingerprint: fingerprint(),
            created_at: at(-180_000),
            expires_at: at(86_400_000 - 180_000),
            fence: 1,
            state: RecordState::Completed {
                outcome: Envelope::encode_ok(&json!({"refund_id": "re_1"})).unwrap(),
                completed_at: at(-179_000),
            },
            label,
        }
    }

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
        let value = serde_json::to_value(record_json(&key(), &completed(Some(label)))).unwrap();
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
                "completed_at": "2026-12-01T20:30:34.123Z",
                "outcome": {"ok": {"refund_id": "re_1"}},
                "key_args": {"amount_cents": 500, "order_id": 4417},
            })
        );
    }

    // pins X2: members come in a reading order, key first, the outcome after the times
    #[test]
    fn members_come_in_reading_order() {
        let line = json_line(&record_json(&key(), &completed(None)));
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
            "completed_at",
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
            let value = serde_json::to_value(record_json(&key(), &record)).unwrap();
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
        let value = serde_json::to_value(record_json(&key(), &record)).unwrap();
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
    }

    // pins X2: a saved error shows as err; an envelope this build cannot read is shown,
    // not fatal
    #[test]
    fn errors_and_unreadable_envelopes() {
        let mut record = completed(None);
        record.state = RecordState::Completed {
            outcome: Envelope::encode_err(&json!({"Failed": "card declined"})).unwrap(),
            completed_at: at(0),
        };
        assert_eq!(
            outcome_json(&record),
            json!({"err": {"Failed": "card declined"}})
        );
        record.state = RecordState::Completed {
            outcome: Envelope::from_stored(r#"{"version":9,"ok":1}"#),
            completed_at: at(0),
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
