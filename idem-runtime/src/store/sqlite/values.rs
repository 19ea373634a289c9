//! The SQLite forms of the values every statement binds: times and fences as signed 64-bit
//! integers, owner tokens as hex text.

use crate::clock::Timestamp;
use crate::store::OwnerToken;

/// A timestamp as an SQLite integer (ms), saturating at `i64::MAX`.
pub(super) fn to_sql(t: Timestamp) -> i64 {
    i64::try_from(t.as_millis()).unwrap_or(i64::MAX)
}

/// A fencing token as an SQLite integer, saturating at `i64::MAX` (never reached: one
/// claim or takeover of one key per nanosecond would take 292 years).
pub(super) fn fence_to_sql(fence: u64) -> i64 {
    i64::try_from(fence).unwrap_or(i64::MAX)
}

/// An owner token as stored: 32 lower-case hex digits.
pub(super) fn owner_to_sql(owner: OwnerToken) -> String {
    owner.to_hex()
}
