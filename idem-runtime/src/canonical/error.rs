//! What can make a value impossible to canonicalise.

use serde::{Deserialize, Serialize};

/// Why a value has no canonical JSON form, and where in it (a JSON-path-like location
/// such as `$.items[2].price`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CanonicalError {
    /// A NaN or ±Infinity float (K3): JSON has no such number, and serde_json would write
    /// `null`, making `Some(NaN)` share a key with `None`.
    #[error("{path}: {value} is not a finite number; canonical JSON has no NaN or Infinity")]
    NonFiniteNumber {
        /// Where the value was.
        path: String,
        /// `NaN`, `inf` or `-inf`.
        value: String,
    },
    /// A map key that JSON cannot hold as an object member name.
    #[error("{path}: map key of kind {key_kind} cannot be a JSON object member name (use strings, integers, chars or bools)")]
    UnsupportedMapKey {
        /// Where the map was.
        path: String,
        /// What kind of key it had.
        key_kind: String,
    },
    /// An integer outside the i128/u64 range the layer canonicalises exactly.
    #[error("{path}: integer {value} is outside the range the key can hold exactly")]
    IntegerOutOfRange {
        /// Where the value was.
        path: String,
        /// The integer, in decimal.
        value: String,
    },
    /// A number whose text could not be parsed (from serde_json's `arbitrary_precision`
    /// or `RawValue`).
    #[error("{path}: {message}")]
    InvalidNumber {
        /// Where the value was.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// The value's own `Serialize` impl failed.
    #[error("{path}: {message}")]
    Serialize {
        /// Where the value was.
        path: String,
        /// The impl's message.
        message: String,
    },
}
