//! How the records of tools that require a person's approval print (A2–A6, X2): the denial a
//! completed record saved (source `denied`), an approval no call used in time, and the
//! command that decides a record awaiting approval.

use idem_runtime::store::{Denial, OutcomeSource, Record, RecordState};
use idem_runtime::{IdempotencyKey, Timestamp};
use serde::Serialize;

use super::{printable, when};

/// A saved denial in `show --json` / `ls --json` (member `denial`): `{"actor", "at",
/// "note"}` (`at` RFC 3339, `note` `null` without one); `{"error": WHY}` when the saved
/// outcome is not a denial this build can read.
#[derive(Debug, Clone, Serialize)]
#[serde(untagged)]
pub enum DenialJson {
    /// The denial.
    Read {
        actor: String,
        at: String,
        note: Option<String>,
    },
    /// What is wrong with the saved outcome.
    Unreadable { error: String },
}

/// The denial `record` saved: `None` for any record but a completed one with source
/// `denied` (A3, A5); `Some(Err(why))` when its outcome is not a readable denial.
fn denial_of(record: &Record) -> Option<Result<Denial, String>> {
    match &record.state {
        RecordState::Completed {
            outcome,
            source: OutcomeSource::Denied,
            ..
        } => Some(Denial::from_envelope(outcome)),
        _ => None,
    }
}

/// The `denial` member of `record`'s JSON object.
pub(super) fn denial_json(record: &Record) -> Option<DenialJson> {
    Some(match denial_of(record)? {
        Ok(denial) => DenialJson::Read {
            actor: denial.actor,
            at: denial.at.to_rfc3339(),
            note: denial.note,
        },
        Err(error) => DenialJson::Unreadable { error },
    })
}

/// `show`'s rows for a denied record: who denied it, and their note (quoted, control
/// characters escaped, as the history prints notes).
pub(super) fn denial_rows(record: &Record) -> Vec<(&'static str, String)> {
    match denial_of(record) {
        None => Vec::new(),
        Some(Ok(denial)) => {
            let mut rows = vec![("denied by", printable(&denial.actor))];
            if let Some(note) = &denial.note {
                rows.push(("note", format!("{note:?}")));
            }
            rows.push((
                "next calls",
                "get the denial (Error::Denied) without running the tool, until it expires"
                    .to_owned(),
            ));
            rows
        }
        Some(Err(why)) => vec![(
            "denied by",
            format!("- (the saved denial cannot be read: {why})"),
        )],
    }
}

/// When an approval ends, and whether it already did: `2026-…Z (in 57m)`, or `2026-…Z (3m
/// ago): expired, the next call asks for approval again` (A4).
pub(super) fn until_text(until: Timestamp, now: Timestamp) -> String {
    let text = when(until, now);
    if until <= now {
        format!("{text}: expired, the next call asks for approval again")
    } else {
        text
    }
}

/// What the state's name needs beside it: ` (expired)` for an approval whose validity
/// ended before a call used it (the state is still approved until a call finds it so, A4).
pub(super) fn state_suffix(record: &Record, now: Timestamp) -> &'static str {
    match record.state {
        RecordState::Approved { until, .. } if until <= now => " (expired)",
        _ => "",
    }
}

/// `show`'s last row for a record a person can still decide: `to decide  idem approve KEY
/// --expect-fence N | idem deny KEY …` awaiting approval, `to revoke  idem deny KEY …` once
/// approved and not yet run (A3).
pub(super) fn action_row(key: &IdempotencyKey, record: &Record) -> Option<(&'static str, String)> {
    let fence = record.fence;
    match record.state {
        RecordState::AwaitingApproval { .. } => Some((
            "to decide",
            format!(
                "idem approve {key} --expect-fence {fence} [--valid-for 1h] | idem deny {key} \
                 --expect-fence {fence} [--note TEXT]"
            ),
        )),
        RecordState::Approved { .. } => Some((
            "to revoke",
            format!("idem deny {key} --expect-fence {fence} [--note TEXT] (before a call runs it)"),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::output::fixtures::*;
    use crate::output::{effective_state_text, record_json, record_text};
    use idem_runtime::{Envelope, RecordLabel, ScopePath};
    use serde_json::{json, Value};

    fn labelled() -> Record {
        let label = RecordLabel {
            key_args: Some(r#"{"amount_cents":500,"order_id":4417}"#.to_owned()),
            ..RecordLabel::new("send_refund", ScopePath::new().with("conversation", "c-9"))
        };
        completed(Some(label))
    }

    // pins A2, A6, X2: a record awaiting approval shows since when, its key arguments, and
    // the commands that decide it
    #[test]
    fn awaiting_approval_shows_since_and_how_to_decide() {
        let mut record = labelled();
        record.state = RecordState::AwaitingApproval { since: at(-60_000) };
        let value = serde_json::to_value(record_json(&key(), &record, at(0))).unwrap();
        assert_eq!(value["state"], "awaiting_approval");
        assert_eq!(value["awaiting_approval_since"], "2026-12-01T20:32:33.123Z");
        assert_eq!(value["outcome"], Value::Null);
        assert_eq!(
            value["key_args"],
            json!({"amount_cents": 500, "order_id": 4417})
        );
        for absent in [
            "decided_at",
            "approved_until",
            "denial",
            "source",
            "lease_until",
        ] {
            assert!(value.get(absent).is_none(), "{absent}: {value}");
        }
        let text = record_text(&key(), &record, at(0));
        assert_eq!(row(&text, "state"), "awaiting approval", "{text}");
        assert_eq!(
            row(&text, "awaiting since"),
            "2026-12-01T20:32:33.123Z (1m ago)",
            "{text}"
        );
        assert_eq!(
            row(&text, "arguments"),
            r#"{"amount_cents":500,"order_id":4417}"#
        );
        assert!(
            row(&text, "to decide").starts_with(&format!(
                "idem approve {} --expect-fence 1 [--valid-for 1h] | idem deny",
                key()
            )),
            "{text}"
        );
    }

    // pins A3, A4, A6, X2: an approved record shows when and until when; once its validity
    // ended, that it expired
    #[test]
    fn approved_shows_decided_and_until() {
        let mut record = labelled();
        record.state = RecordState::Approved {
            decided_at: at(-60_000),
            until: at(3_540_000),
        };
        let value = serde_json::to_value(record_json(&key(), &record, at(0))).unwrap();
        assert_eq!(value["state"], "approved");
        assert_eq!(value["decided_at"], "2026-12-01T20:32:33.123Z");
        assert_eq!(value["approved_until"], "2026-12-01T21:32:33.123Z");
        let text = record_text(&key(), &record, at(0));
        assert_eq!(row(&text, "state"), "approved", "{text}");
        assert_eq!(
            row(&text, "decided"),
            "2026-12-01T20:32:33.123Z (1m ago)",
            "{text}"
        );
        assert_eq!(
            row(&text, "approved until"),
            "2026-12-01T21:32:33.123Z (in 59m)",
            "{text}"
        );
        assert!(row(&text, "to revoke").starts_with("idem deny "), "{text}");

        let later = at(3_600_000);
        assert_eq!(effective_state_text(&record, later), "approved (expired)");
        let text = record_text(&key(), &record, later);
        assert!(
            row(&text, "approved until")
                .ends_with("(1m ago): expired, the next call asks for approval again"),
            "{text}"
        );
    }

    // pins A3, A5, X2: a denied record shows who denied it and their note, decoded from the
    // saved denial; a saved outcome that is not a denial is shown, not fatal
    #[test]
    fn a_denial_shows_actor_and_note() {
        let mut record = labelled();
        record.state = RecordState::Completed {
            outcome: Denial {
                actor: "ana".to_owned(),
                at: at(-60_000),
                note: Some("too large\n\u{1b}[2J".to_owned()),
            }
            .to_envelope(),
            completed_at: at(-60_000),
            source: OutcomeSource::Denied,
        };
        let value = serde_json::to_value(record_json(&key(), &record, at(0))).unwrap();
        assert_eq!(value["source"], "denied");
        assert_eq!(
            value["denial"],
            json!({"actor": "ana", "at": "2026-12-01T20:32:33.123Z",
                   "note": "too large\n\u{1b}[2J"})
        );
        let text = record_text(&key(), &record, at(0));
        assert_eq!(
            row(&text, "source"),
            "denied: a person refused the call; the tool did not run"
        );
        assert_eq!(row(&text, "denied by"), "ana", "{text}");
        assert_eq!(row(&text, "note"), r#""too large\n\u{1b}[2J""#, "{text}");
        assert!(!text.contains('\u{1b}'), "{text}");

        record.state = RecordState::Completed {
            outcome: Envelope::encode_ok(&json!(1)).unwrap(),
            completed_at: at(0),
            source: OutcomeSource::Denied,
        };
        let value = serde_json::to_value(record_json(&key(), &record, at(0))).unwrap();
        assert!(value["denial"]["error"].is_string(), "{value}");
        let text = record_text(&key(), &record, at(0));
        assert!(
            row(&text, "denied by").starts_with("- (the saved denial cannot be read"),
            "{text}"
        );
        assert!(
            serde_json::to_value(record_json(&key(), &labelled(), at(0)))
                .unwrap()
                .get("denial")
                .is_none(),
            "only denied records have one"
        );
    }
}
