//! The record decoding, without a server: numbers, layouts 1 to 5 and their fields, the
//! states each layout holds (P4, F1, P1, U1, U6, U7, A2, A3), and what is refused (S10).

use redis::Value;

use super::super::record::{
    decode, decode_with_history, field_position, number_arg, optional_arg, parse_number, FIELDS,
    HISTORY_FIELDS, MAX_NUMBER,
};
use crate::clock::Timestamp;
use crate::label::{RecordLabel, ScopePath};
use crate::store::{History, OutcomeSource, OwnerToken, Record, RecordState};

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
    let newer = in_progress("6");
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

/// A record of layout 5 with no state field yet (a fence and a label).
fn bare_5() -> Vec<(&'static str, String)> {
    vec![
        ("v", "5".to_owned()),
        ("fingerprint", FP.to_owned()),
        ("created_at", number_arg(10)),
        ("expires_at", number_arg(1_000)),
        ("fence", number_arg(3)),
        ("tool", "t".to_owned()),
        ("scope", String::new()),
    ]
}

// pins A2, A3, P4: a layout-5 record reads awaiting approval (`approval_at` alone) and
// approved (`approval_at` and `approval_until`), with its fence and label; the source
// `denied` reads back; every state of layout 4 still reads at layout 5
#[test]
fn layout_5_reads_the_approval_states() {
    let mut awaiting = bare_5();
    awaiting.push(("approval_at", number_arg(40)));
    let record = decode_fields(&awaiting).unwrap().unwrap();
    assert_eq!(
        record.state,
        RecordState::AwaitingApproval { since: at(40) }
    );
    assert_eq!(
        (record.fence, record.label.unwrap().tool.as_str()),
        (3, "t")
    );
    let mut approved = awaiting.clone();
    approved.push(("approval_until", number_arg(u64::MAX)));
    assert_eq!(
        decode_fields(&approved).unwrap().unwrap().state,
        RecordState::Approved {
            decided_at: at(40),
            until: at(u64::MAX)
        }
    );
    let mut denied = completed("5");
    denied.push(("source", "denied".to_owned()));
    assert!(matches!(
        decode_fields(&denied).unwrap().unwrap().state,
        RecordState::Completed {
            source: OutcomeSource::Denied,
            ..
        }
    ));
    let mut running = in_progress("5");
    running.push(("fence", number_arg(1)));
    assert!(matches!(
        decode_fields(&running).unwrap().unwrap().state,
        RecordState::InProgress { .. }
    ));
    let mut decided = bare_5();
    decided.push(("decided_at", number_arg(30)));
    assert_eq!(
        decode_fields(&decided).unwrap().unwrap().state,
        RecordState::NotApplied { decided_at: at(30) }
    );
}

// pins P4, S10, A2, A3: the approval fields and the source `denied` in a record of an
// earlier layout, an approval beside another state's fields, an expiry without its
// approval and malformed approval instants are refused
#[test]
fn malformed_approval_records_are_refused() {
    for v in ["3", "4"] {
        let mut old = completed(v);
        old.retain(|(n, _)| !matches!(*n, "outcome" | "completed_at"));
        old.push(("tool", "t".to_owned()));
        old.push(("approval_at", number_arg(40)));
        assert!(
            decode_fields(&old)
                .unwrap_err()
                .contains("field of layout 5"),
            "{v}"
        );
    }
    let mut denied_4 = completed("4");
    denied_4.push(("source", "denied".to_owned()));
    assert!(decode_fields(&denied_4)
        .unwrap_err()
        .contains("field of layout 5"));
    let approval = [
        ("approval_at", number_arg(40)),
        ("approval_until", number_arg(50)),
    ];
    for beside in [
        ("owner", OWNER.to_owned()),
        ("lease_until", number_arg(100)),
        ("unknown_since", number_arg(20)),
        ("decided_at", number_arg(20)),
        ("outcome", "{}".to_owned()),
        ("completed_at", number_arg(20)),
        ("source", "denied".to_owned()),
    ] {
        for fields in [&approval[..1], &approval[..]] {
            let mut both = bare_5();
            both.extend(fields.iter().cloned());
            both.push(beside.clone());
            assert!(decode_fields(&both).is_err(), "{beside:?} {fields:?}");
        }
    }
    let mut until_alone = bare_5();
    until_alone.push(("approval_until", number_arg(50)));
    assert!(decode_fields(&until_alone).is_err());
    let mut bad_since = bare_5();
    bad_since.push(("approval_at", "40".to_owned()));
    assert_eq!(
        decode_fields(&bad_since).unwrap_err(),
        "approval_at is not 20 decimal digits"
    );
    let mut bad_until = bare_5();
    bad_until.push(("approval_at", number_arg(40)));
    bad_until.push(("approval_until", "-1".to_owned()));
    assert_eq!(
        decode_fields(&bad_until).unwrap_err(),
        "approval_until is not 20 decimal digits"
    );
}

fn at(ms: u64) -> Timestamp {
    Timestamp::from_millis(ms)
}
