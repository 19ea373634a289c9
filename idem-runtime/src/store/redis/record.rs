//! The record encoding: one Redis hash per idempotency key (the fields are listed in the
//! [module documentation](super)), its layout versions, and the decoding of a hash read
//! back (`HMGET` of [`FIELDS`], or the claim script's answer for a live record).

use redis::Value;

use crate::clock::Timestamp;
use crate::envelope::Envelope;
use crate::key::Fingerprint;
use crate::label::{RecordLabel, ScopePath};
use crate::store::OutcomeSource;
use crate::store::{History, OwnerToken, Record, RecordState};

/// The layout version this build writes in each record's `v` field when it claims, takes
/// over, marks unknown, completes or decides a key.
///
/// - `1`: the first layout: no fencing token and no "outcome unknown" state.
/// - `2`: adds `fence` (the fencing token, F1) and `unknown_since` (the outcome-unknown
///   state, U1).
/// - `3`: adds the label (P1): `tool`, `scope`, and when present `namespace` and
///   `key_args`; and the record is in its prefix's index (I3).
/// - `4`: adds the outcome's `source` (S1, U6), the not-applied state (`decided_at`, U6)
///   and the history (`history`, `history_len`, `history_dropped`, U7). A record that
///   reaches layout 4 from layout 1 or 2 by a marking, a completion or a decision (not a
///   claim nor a takeover, which write the label) has no label.
///
/// This build reads all four (P4). A layout-1 record reads with fence 1; a renewal makes it
/// layout 2 (with fence 1), and every write that appends to the history makes any record
/// layout 4 (with fence 1 if it had none); a claim (over an expired record) or a takeover
/// writes layout 4 with the label. Records of layouts 1 and 2 read with no label; records
/// of layouts 1 to 3 read with an empty history and, when completed, with the source
/// `executed`. A record of any other version (one written by a newer build) is neither
/// read nor written: every operation on it fails with
/// [`StoreErrorKind::Corrupt`](crate::StoreErrorKind::Corrupt) and leaves it untouched.
pub const REDIS_LAYOUT_VERSION: u32 = 4;

/// The layout versions this build reads, as stored.
pub(super) const READABLE: [&str; 4] = ["1", "2", "3", "4"];

/// The fields a read returns, in this order.
pub(super) const FIELDS: [&str; 16] = [
    "v",
    "fingerprint",
    "created_at",
    "expires_at",
    "owner",
    "lease_until",
    "outcome",
    "completed_at",
    "fence",
    "unknown_since",
    "tool",
    "namespace",
    "scope",
    "key_args",
    "source",
    "decided_at",
];

/// The history fields a history read returns after [`FIELDS`], in this order: the entries
/// (one JSON line each, `\n` between them) and how many earlier ones were dropped.
pub(super) const HISTORY_FIELDS: [&str; 2] = ["history", "history_dropped"];

/// The 1-based position of `name` in [`FIELDS`], for the scripts.
pub(super) fn field_position(name: &str) -> usize {
    FIELDS.iter().position(|f| *f == name).map_or(0, |i| i + 1)
}

/// An optional label field as a script argument: `-` for `None`, `+` and the text for
/// `Some`, so that an absent field and an empty one stay apart.
pub(super) fn optional_arg(value: Option<&str>) -> String {
    value.map_or_else(|| "-".to_owned(), |v| format!("+{v}"))
}

/// The largest number a record holds, as stored (`u64::MAX`, 20 digits).
pub(super) const MAX_NUMBER: &str = "18446744073709551615";

/// An instant (ms since the Unix epoch) or a fencing token as stored: exactly 20 decimal
/// digits, zero-padded, so that the Lua scripts compare and increment them as strings,
/// exactly over the whole `u64` range (Lua's numbers are doubles, exact only below 2^53).
pub(super) fn number_arg(n: u64) -> String {
    format!("{n:020}")
}

/// A stored number ([`number_arg`]): `None` unless exactly 20 decimal digits within `u64`.
pub(super) fn parse_number(text: &str) -> Option<u64> {
    (text.len() == 20 && text.bytes().all(|b| b.is_ascii_digit()))
        .then(|| text.parse::<u64>().ok())
        .flatten()
}

/// The text of each bulk string of an `HMGET` reply (`None` for a missing field), checked
/// against `names` (the fields asked for, in order).
fn texts(value: Value, names: &[&str]) -> Result<Vec<Option<String>>, String> {
    let Value::Array(items) = value else {
        return Err("unexpected reply shape".to_owned());
    };
    if items.len() != names.len() {
        return Err("unexpected number of fields".to_owned());
    }
    items
        .into_iter()
        .zip(names)
        .map(|(item, name)| match item {
            Value::Nil => Ok(None),
            Value::BulkString(bytes) => String::from_utf8(bytes)
                .map(Some)
                .map_err(|_| format!("{name} is not UTF-8")),
            _ => Err(format!("{name} is not a string")),
        })
        .collect()
}

/// Decodes the fields of [`FIELDS`], in that order, as an `HMGET` returns them: `Ok(None)`
/// when the hash is absent (every field nil), `Err` naming what is wrong with a hash that is
/// not a valid record of a layout this build reads.
pub(super) fn decode(value: Value) -> Result<Option<Record>, String> {
    decode_texts(texts(value, &FIELDS)?)
}

/// Decodes the answer of a history read, `HMGET` of [`FIELDS`] then [`HISTORY_FIELDS`]:
/// `Ok(None)` when the hash is absent, else the record and its history (U7). A record of
/// layouts 1 to 3 has none: an empty history, nothing dropped.
pub(super) fn decode_with_history(value: Value) -> Result<Option<(Record, History)>, String> {
    let names: Vec<&str> = FIELDS.iter().chain(&HISTORY_FIELDS).copied().collect();
    let mut fields = texts(value, &names)?;
    let dropped = fields.pop().flatten();
    let text = fields.pop().flatten();
    let Some(record) = decode_texts(fields)? else {
        return Ok(None);
    };
    let dropped = match dropped {
        None => 0,
        Some(count) => count
            .parse::<u64>()
            .ok()
            .filter(|_| count.bytes().all(|b| b.is_ascii_digit()))
            .ok_or("history_dropped is not a count")?,
    };
    Ok(Some((
        record,
        History::from_stored(text.as_deref(), dropped),
    )))
}

fn decode_texts(fields: Vec<Option<String>>) -> Result<Option<Record>, String> {
    if fields.iter().all(Option::is_none) {
        return Ok(None);
    }
    let mut it = fields.into_iter();
    let mut next = || it.next().flatten();
    let (v, fingerprint, created_at, expires_at) = (next(), next(), next(), next());
    let (owner, lease_until, outcome, completed_at) = (next(), next(), next(), next());
    let (fence, unknown_since) = (next(), next());
    let (tool, namespace, scope, key_args) = (next(), next(), next(), next());
    let (source, decided_at) = (next(), next());
    let layout = match v.as_deref() {
        Some(v) if READABLE.contains(&v) => v,
        Some(v) => return Err(unknown_layout(v)),
        None => return Err("no layout version".to_owned()),
    };
    let labelled = tool.is_some() || namespace.is_some() || scope.is_some() || key_args.is_some();
    if layout != "4" && (source.is_some() || decided_at.is_some()) {
        return Err(format!("layout {layout} with a field of layout 4"));
    }
    let fence = match (layout, fence) {
        // Layout 1 had neither a fencing token nor an unknown outcome: fence 1 (F1).
        ("1", None) if unknown_since.is_none() && !labelled => 1,
        ("1", _) => return Err("layout 1 with a field of a later layout".to_owned()),
        ("2", _) if labelled => return Err("layout 2 with a field of layout 3".to_owned()),
        (_, Some(fence)) => number(Some(fence), "fence")?,
        (_, None) => return Err("no fence".to_owned()),
    };
    let label = match (layout, tool) {
        ("3" | "4", Some(tool)) => Some(RecordLabel {
            tool,
            namespace,
            scope: ScopePath::from_stored(scope.as_deref().unwrap_or_default()),
            key_args,
        }),
        ("3", None) => return Err("no tool".to_owned()),
        ("4", None) if labelled => return Err("no tool".to_owned()),
        // Written before labels existed (P4), or moved on in place since: no label.
        _ => None,
    };
    let fingerprint = fingerprint
        .as_deref()
        .and_then(Fingerprint::from_hex)
        .ok_or("fingerprint is not 64 lowercase hex digits")?;
    let token =
        |owner: String| OwnerToken::from_hex(&owner).ok_or("owner is not 32 lower-case hex digits");
    let completed = outcome.is_some() || completed_at.is_some() || source.is_some();
    let state = match (owner, lease_until, unknown_since, decided_at) {
        (Some(owner_text), lease_until @ Some(_), None, None) if !completed => {
            RecordState::InProgress {
                owner: token(owner_text)?,
                lease_until: instant(lease_until, "lease_until")?,
            }
        }
        (Some(owner_text), lease_until @ Some(_), since @ Some(_), None) if !completed => {
            RecordState::OutcomeUnknown {
                owner: token(owner_text)?,
                lease_until: instant(lease_until, "lease_until")?,
                since: instant(since, "unknown_since")?,
            }
        }
        (None, None, None, decided_at @ Some(_)) if !completed => RecordState::NotApplied {
            decided_at: instant(decided_at, "decided_at")?,
        },
        (None, None, None, None) if outcome.is_some() && completed_at.is_some() => {
            RecordState::Completed {
                outcome: Envelope::from_stored(outcome.unwrap_or_default()),
                completed_at: instant(completed_at, "completed_at")?,
                // Layouts 1 to 3 knew no other source (P4).
                source: match source.as_deref() {
                    None => OutcomeSource::Executed,
                    Some(text) => OutcomeSource::parse(text)
                        .ok_or_else(|| format!("unknown outcome source {text:?}"))?,
                },
            }
        }
        _ => {
            return Err(
                "neither in progress, outcome unknown, completed nor not applied".to_owned(),
            )
        }
    };
    Ok(Some(Record {
        fingerprint,
        created_at: instant(created_at, "created_at")?,
        expires_at: instant(expires_at, "expires_at")?,
        fence,
        state,
        label,
    }))
}

fn number(value: Option<String>, name: &str) -> Result<u64, String> {
    value
        .as_deref()
        .and_then(parse_number)
        .ok_or_else(|| format!("{name} is not 20 decimal digits"))
}

fn instant(value: Option<String>, name: &str) -> Result<Timestamp, String> {
    number(value, name).map(Timestamp::from_millis)
}

/// Why a record of layout `v` is refused: a newer build's, or not a version at all.
pub(super) fn unknown_layout(v: &str) -> String {
    match v.parse::<u32>() {
        Ok(n) if n > REDIS_LAYOUT_VERSION => format!(
            "layout version {n} is newer than this build's ({REDIS_LAYOUT_VERSION}): \
             written by a newer idem"
        ),
        _ => format!("unknown layout version {v:?}"),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn hash(fields: &[(&str, &str)]) -> Value {
        Value::Array(
            FIELDS
                .iter()
                .map(|name| {
                    fields
                        .iter()
                        .find(|(n, _)| n == name)
                        .map_or(Value::Nil, |(_, v)| {
                            Value::BulkString(v.as_bytes().to_vec())
                        })
                })
                .collect(),
        )
    }

    const FP: &str = "abababababababababababababababababababababababababababababababab";
    const OWNER: &str = "0000000000000000000000000000abcd";

    fn in_progress(v: &str) -> Vec<(&'static str, String)> {
        vec![
            ("v", v.to_owned()),
            ("fingerprint", FP.to_owned()),
            ("created_at", number_arg(10)),
            ("expires_at", number_arg(1_000)),
            ("owner", OWNER.to_owned()),
            ("lease_until", number_arg(100)),
        ]
    }

    fn decode_fields(fields: &[(&'static str, String)]) -> Result<Option<Record>, String> {
        let borrowed: Vec<(&str, &str)> = fields.iter().map(|(n, v)| (*n, v.as_str())).collect();
        decode(hash(&borrowed))
    }

    // pins S8, S10: instants and fences are stored as 20 digits, compared exactly as strings
    #[test]
    fn numbers_are_twenty_digits_that_compare_as_strings() {
        let (a, b) = (number_arg(9), number_arg(u64::MAX));
        assert!(a < b);
        assert_eq!(b, MAX_NUMBER);
        assert_eq!(parse_number(&b), Some(u64::MAX));
        assert_eq!(parse_number(&a), Some(9));
        for bad in [
            "18446744073709551616",
            "9",
            "-0000000000000000001",
            "0000000000000000000x",
        ] {
            assert_eq!(parse_number(bad), None, "{bad}");
        }
    }

    // pins F1: a layout-1 record (no fence field) reads with fence 1; layout 2 keeps its fence
    #[test]
    fn layout_1_records_read_with_fence_1() {
        let record = decode_fields(&in_progress("1")).unwrap().unwrap();
        assert_eq!(record.fence, 1);
        assert_eq!(
            record.state,
            RecordState::InProgress {
                owner: OwnerToken::from_hex(OWNER).unwrap(),
                lease_until: Timestamp::from_millis(100),
            }
        );
        let mut v2 = in_progress("2");
        v2.push(("fence", number_arg(7)));
        assert_eq!(decode_fields(&v2).unwrap().unwrap().fence, 7);
        let completed = [
            ("v", "1".to_owned()),
            ("fingerprint", FP.to_owned()),
            ("created_at", number_arg(10)),
            ("expires_at", number_arg(1_000)),
            ("outcome", r#"{"ok":1}"#.to_owned()),
            ("completed_at", number_arg(20)),
        ];
        let record = decode_fields(&completed).unwrap().unwrap();
        assert_eq!(record.fence, 1);
        assert!(matches!(record.state, RecordState::Completed { .. }));
    }

    // pins P1, P4: a layout-3 record reads its label (namespace and key_args only when
    // stored, the scope part by part); records of layouts 1 and 2 read without one; a label
    // field in an older layout, or a layout-3 record without its tool, is refused
    #[test]
    fn labels_decode_by_layout() {
        let mut v3 = in_progress("3");
        v3.push(("fence", number_arg(2)));
        v3.push(("tool", "send_refund".to_owned()));
        v3.push(("scope", "tenant=acme/conversation=c%2F1".to_owned()));
        let label = decode_fields(&v3).unwrap().unwrap().label.unwrap();
        assert_eq!(
            label,
            RecordLabel::new(
                "send_refund",
                ScopePath::new()
                    .with("tenant", "acme")
                    .with("conversation", "c/1")
            )
        );
        v3.push(("namespace", "tenant-a".to_owned()));
        v3.push(("key_args", r#"{"order":1}"#.to_owned()));
        let label = decode_fields(&v3).unwrap().unwrap().label.unwrap();
        assert_eq!(label.namespace.as_deref(), Some("tenant-a"));
        assert_eq!(label.key_args.as_deref(), Some(r#"{"order":1}"#));
        let mut global = in_progress("3");
        global.push(("fence", number_arg(1)));
        global.push(("tool", String::new()));
        global.push(("scope", String::new()));
        let label = decode_fields(&global).unwrap().unwrap().label.unwrap();
        assert!(label.is_empty(), "{label:?}");

        let mut v2 = in_progress("2");
        v2.push(("fence", number_arg(7)));
        assert_eq!(decode_fields(&v2).unwrap().unwrap().label, None);
        assert_eq!(
            decode_fields(&in_progress("1")).unwrap().unwrap().label,
            None
        );

        let mut v2_with_tool = v2.clone();
        v2_with_tool.push(("tool", "t".to_owned()));
        assert!(decode_fields(&v2_with_tool)
            .unwrap_err()
            .contains("layout 3"));
        let mut v1_with_scope = in_progress("1");
        v1_with_scope.push(("scope", String::new()));
        assert!(decode_fields(&v1_with_scope).is_err());
        let mut v3_without_tool = in_progress("3");
        v3_without_tool.push(("fence", number_arg(1)));
        assert_eq!(decode_fields(&v3_without_tool).unwrap_err(), "no tool");
        let mut bad_scope = in_progress("3");
        bad_scope.push(("fence", number_arg(1)));
        bad_scope.push(("tool", "t".to_owned()));
        bad_scope.push(("scope", "conversation".to_owned()));
        let odd = decode_fields(&bad_scope).unwrap().unwrap().label.unwrap();
        assert_eq!(
            odd.scope.to_string(),
            "conversation=",
            "an odd scope text is read leniently, never failing its record"
        );
    }

    // pins P1: optional label fields travel as `-` (absent) or `+text`, empty text included
    #[test]
    fn optional_arguments_keep_absent_apart_from_empty() {
        assert_eq!(optional_arg(None), "-");
        assert_eq!(optional_arg(Some("")), "+");
        assert_eq!(optional_arg(Some("-")), "+-");
        assert_eq!(field_position("v"), 1);
        assert_eq!(FIELDS[field_position("outcome") - 1], "outcome");
    }

    // pins U1: an unknown outcome keeps its owner, lease and since
    #[test]
    fn unknown_outcomes_decode() {
        let mut fields = in_progress("2");
        fields.push(("fence", number_arg(3)));
        fields.push(("unknown_since", number_arg(10)));
        let record = decode_fields(&fields).unwrap().unwrap();
        assert_eq!(
            record.state,
            RecordState::OutcomeUnknown {
                owner: OwnerToken::from_hex(OWNER).unwrap(),
                lease_until: Timestamp::from_millis(100),
                since: Timestamp::from_millis(10),
            }
        );
    }

    // pins S10: records of a newer layout, or malformed ones, are refused with the reason
    #[test]
    fn malformed_and_newer_records_are_refused() {
        let missing_fence = in_progress("2");
        assert_eq!(decode_fields(&missing_fence).unwrap_err(), "no fence");
        let newer = in_progress("5");
        assert!(decode_fields(&newer).unwrap_err().contains("newer"));
        let garbage = in_progress("x");
        assert!(decode_fields(&garbage)
            .unwrap_err()
            .contains("unknown layout version"));
        let mut v1_with_fence = in_progress("1");
        v1_with_fence.push(("fence", number_arg(2)));
        assert!(decode_fields(&v1_with_fence).is_err());
        let mut unknown_without_lease = in_progress("2");
        unknown_without_lease.retain(|(n, _)| *n != "lease_until");
        unknown_without_lease.push(("fence", number_arg(1)));
        unknown_without_lease.push(("unknown_since", number_arg(1)));
        assert!(decode_fields(&unknown_without_lease).is_err());
        let mut both = in_progress("2");
        both.push(("fence", number_arg(1)));
        both.push(("outcome", "{}".to_owned()));
        both.push(("completed_at", number_arg(1)));
        assert!(decode_fields(&both).is_err());
        assert_eq!(decode(hash(&[])), Ok(None));
    }

    /// A completed record of layout `v` (with a fence).
    fn completed(v: &str) -> Vec<(&'static str, String)> {
        vec![
            ("v", v.to_owned()),
            ("fingerprint", FP.to_owned()),
            ("created_at", number_arg(10)),
            ("expires_at", number_arg(1_000)),
            ("fence", number_arg(2)),
            ("outcome", r#"{"ok":1}"#.to_owned()),
            ("completed_at", number_arg(20)),
        ]
    }

    // pins S1, U6, P4: a layout-4 record reads its outcome's source, and the not-applied
    // state; a completed record of layouts 1 to 3 (no source) reads as executed; a
    // layout-4 record without a label (moved on in place from layout 1 or 2) reads with none
    #[test]
    fn layout_4_reads_sources_and_decisions() {
        for (v, source, want) in [
            ("3", None, OutcomeSource::Executed),
            ("4", None, OutcomeSource::Executed),
            ("4", Some("executed"), OutcomeSource::Executed),
            ("4", Some("reconciled"), OutcomeSource::Reconciled),
            ("4", Some("resolved"), OutcomeSource::Resolved),
        ] {
            let mut fields = completed(v);
            if v == "3" {
                fields.push(("tool", "t".to_owned()));
            }
            if let Some(source) = source {
                fields.push(("source", source.to_owned()));
            }
            let record = decode_fields(&fields).unwrap().unwrap();
            assert!(
                matches!(record.state, RecordState::Completed { source, .. } if source == want),
                "{v} {source:?}: {record:?}"
            );
            assert_eq!(record.label.is_some(), v == "3", "{v}");
        }
        let mut decided = completed("4");
        decided.retain(|(n, _)| !matches!(*n, "outcome" | "completed_at"));
        decided.push(("decided_at", number_arg(30)));
        decided.push(("tool", "t".to_owned()));
        let record = decode_fields(&decided).unwrap().unwrap();
        assert_eq!(
            record.state,
            RecordState::NotApplied {
                decided_at: Timestamp::from_millis(30)
            }
        );
        assert_eq!(
            (record.fence, record.label.unwrap().tool.as_str()),
            (2, "t")
        );
    }

    // pins S10, P4: fields of layout 4 in an older layout, a decision beside another state,
    // an unknown source and label fields without a tool are refused
    #[test]
    fn malformed_layout_4_records_are_refused() {
        let mut v3 = completed("3");
        v3.push(("tool", "t".to_owned()));
        v3.push(("source", "executed".to_owned()));
        assert!(decode_fields(&v3)
            .unwrap_err()
            .contains("field of layout 4"));
        let mut bad_source = completed("4");
        bad_source.push(("source", "guessed".to_owned()));
        assert!(decode_fields(&bad_source)
            .unwrap_err()
            .contains("unknown outcome source"));
        let mut decided_and_completed = completed("4");
        decided_and_completed.push(("decided_at", number_arg(30)));
        assert!(decode_fields(&decided_and_completed).is_err());
        let mut decided_and_owned = in_progress("4");
        decided_and_owned.push(("fence", number_arg(1)));
        decided_and_owned.push(("decided_at", number_arg(30)));
        assert!(decode_fields(&decided_and_owned).is_err());
        let mut source_in_progress = in_progress("4");
        source_in_progress.push(("fence", number_arg(1)));
        source_in_progress.push(("source", "executed".to_owned()));
        assert!(decode_fields(&source_in_progress).is_err());
        let mut scope_without_tool = completed("4");
        scope_without_tool.push(("scope", String::new()));
        assert_eq!(decode_fields(&scope_without_tool).unwrap_err(), "no tool");
    }

    // pins U7, P4: a history read splits the history off the record's fields; a record
    // without history fields (layouts 1 to 3) has an empty history; a bad count is refused
    #[test]
    fn histories_decode_beside_their_record() {
        let names: Vec<&str> = FIELDS.iter().chain(&HISTORY_FIELDS).copied().collect();
        let reply = |fields: &[(&str, String)]| {
            Value::Array(
                names
                    .iter()
                    .map(|name| {
                        fields
                            .iter()
                            .find(|(n, _)| n == name)
                            .map_or(Value::Nil, |(_, v)| {
                                Value::BulkString(v.as_bytes().to_vec())
                            })
                    })
                    .collect(),
            )
        };
        let mut v3 = completed("3");
        v3.push(("tool", "t".to_owned()));
        let (record, history) = decode_with_history(reply(&v3)).unwrap().unwrap();
        assert_eq!(record.fence, 2);
        assert_eq!(history, History::default());
        let owner = OwnerToken::from_hex(OWNER).unwrap();
        let first = crate::store::HistoryEntry::claimed(Timestamp::from_millis(10), 2, owner);
        let mut v4 = completed("4");
        v4.push(("history", format!("{}\n{}", first.to_json(), "not json")));
        v4.push(("history_dropped", "7".to_owned()));
        let (_, history) = decode_with_history(reply(&v4)).unwrap().unwrap();
        assert_eq!(history.dropped, 7);
        assert_eq!(history.entries.len(), 2);
        assert_eq!(history.entries[0], first);
        assert_eq!(decode_with_history(reply(&[])), Ok(None));
        for (name, value) in &mut v4 {
            if *name == "history_dropped" {
                *value = "-1".to_owned();
            }
        }
        assert!(decode_with_history(reply(&v4))
            .unwrap_err()
            .contains("history_dropped"));
    }
}
