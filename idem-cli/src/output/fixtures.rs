//! Records and instants the rendering tests share.

use idem_runtime::store::{OutcomeSource, Record, RecordState};
use idem_runtime::{Envelope, Fingerprint, IdempotencyKey, RecordLabel, Timestamp};
use serde_json::json;

pub const NOW: u64 = 1_796_157_213_123;

pub fn at(offset_ms: i64) -> Timestamp {
    Timestamp::from_millis((NOW as i64 + offset_ms) as u64)
}

pub fn key() -> IdempotencyKey {
    IdempotencyKey::from_hex(&"ab".repeat(32)).unwrap()
}

pub fn fingerprint() -> Fingerprint {
    Fingerprint::from_hex(&"cd".repeat(32)).unwrap()
}

pub fn completed(label: Option<RecordLabel>) -> Record {
    Record {
        fingerprint: fingerprint(),
        created_at: at(-180_000),
        expires_at: at(86_400_000 - 180_000),
        fence: 1,
        state: RecordState::Completed {
            outcome: Envelope::encode_ok(&json!({"refund_id": "re_1"})).unwrap(),
            completed_at: at(-179_000),
            source: OutcomeSource::Executed,
        },
        label,
    }
}

/// The value of `show`'s row `name` in `text`.
pub fn row<'a>(text: &'a str, name: &str) -> &'a str {
    text.lines()
        .find_map(|line| {
            line.strip_prefix(name)
                .filter(|rest| rest.starts_with("  "))
                .map(str::trim)
        })
        .unwrap_or_else(|| panic!("no row {name}: {text}"))
}
