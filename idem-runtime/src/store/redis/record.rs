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
/// - `5`: adds the approval states (A2–A4): awaiting approval (`approval_at`: since when)
///   and approved (`approval_at`: decided at, `approval_until`: valid until), and the
///   outcome source `denied` (A3, A5). A record reaches layout 5 as layout 4 did (every
///   write that appends to the history), with or without a label likewise.
///
/// This build reads all five (P4). A layout-1 record reads with fence 1; a renewal makes it
/// layout 2 (with fence 1), and every write that appends to the history makes any record
/// layout 5 (with fence 1 if it had none); a claim (over an expired record) or a takeover
/// writes layout 5 with the label. Records of layouts 1 and 2 read with no label; records
/// of layouts 1 to 3 read with an empty history and, when completed, with the source
/// `executed`; records of layout 4 read as that build wrote them (no approval field). A
/// record of any other version (one written by a newer build) is neither read nor written:
/// every operation on it fails with [`StoreErrorKind::Corrupt`](crate::StoreErrorKind::Corrupt)
/// and leaves it untouched.
pub const REDIS_LAYOUT_VERSION: u32 = 5;

/// The layout versions this build reads, as stored.
pub(super) const READABLE: [&str; 5] = ["1", "2", "3", "4", "5"];

/// The fields a read returns, in this order.
pub(super) const FIELDS: [&str; 18] = [
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
    "approval_at",
    "approval_until",
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
    let approval = (next(), next());
    let layout = match v.as_deref() {
        Some(v) if READABLE.contains(&v) => v,
        Some(v) => return Err(unknown_layout(v)),
        None => return Err("no layout version".to_owned()),
    };
    let labelled = tool.is_some() || namespace.is_some() || scope.is_some() || key_args.is_some();
    if matches!(layout, "1" | "2" | "3") && (source.is_some() || decided_at.is_some()) {
        return Err(format!("layout {layout} with a field of layout 4"));
    }
    // The approval states and the source `denied` came with layout 5 (A2–A5).
    if layout != "5" && (approval != (None, None) || source.as_deref() == Some("denied")) {
        return Err(format!("layout {layout} with a field of layout 5"));
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
        ("3" | "4" | "5", Some(tool)) => Some(RecordLabel {
            tool,
            namespace,
            scope: ScopePath::from_stored(scope.as_deref().unwrap_or_default()),
            key_args,
        }),
        ("3", None) => return Err("no tool".to_owned()),
        ("4" | "5", None) if labelled => return Err("no tool".to_owned()),
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
    let state = match (owner, lease_until, unknown_since, decided_at, approval) {
        (Some(owner_text), lease_until @ Some(_), None, None, (None, None)) if !completed => {
            RecordState::InProgress {
                owner: token(owner_text)?,
                lease_until: instant(lease_until, "lease_until")?,
            }
        }
        (Some(owner_text), lease_until @ Some(_), since @ Some(_), None, (None, None))
            if !completed =>
        {
            RecordState::OutcomeUnknown {
                owner: token(owner_text)?,
                lease_until: instant(lease_until, "lease_until")?,
                since: instant(since, "unknown_since")?,
            }
        }
        (None, None, None, decided_at @ Some(_), (None, None)) if !completed => {
            RecordState::NotApplied {
                decided_at: instant(decided_at, "decided_at")?,
            }
        }
        (None, None, None, None, (since @ Some(_), None)) if !completed => {
            RecordState::AwaitingApproval {
                since: instant(since, "approval_at")?,
            }
        }
        (None, None, None, None, (decided_at @ Some(_), until @ Some(_))) if !completed => {
            RecordState::Approved {
                decided_at: instant(decided_at, "approval_at")?,
                until: instant(until, "approval_until")?,
            }
        }
        (None, None, None, None, (None, None)) if outcome.is_some() && completed_at.is_some() => {
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
                "neither in progress, outcome unknown, completed, not applied, \
                 awaiting approval nor approved"
                    .to_owned(),
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
