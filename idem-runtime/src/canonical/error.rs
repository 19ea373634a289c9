//! What can make a value impossible to canonicalise.

use serde::{Deserialize, Serialize};

/// Why a value has no canonical JSON form, and where in it.
///
/// Every variant carries `path`: where the offending value sits, as a JSON-path-like
/// location that starts at the capture's root. [`capture`](super::capture) roots paths at
/// `$` (`$.items[2].price`); [`capture_at`](super::capture_at) at a name of the caller's
/// choosing, such as an argument name (`amount.items[2].price`). Member names that are not
/// identifiers are written as JSON strings in brackets (`$["unit price"]`).
///
/// Serialized (for logs and stored diagnostics) as an object tagged by `kind`, in
/// snake case: `{"kind":"non_finite_number","path":"$.x","value":"NaN"}`.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error, Serialize, Deserialize)]
#[non_exhaustive]
#[serde(tag = "kind", rename_all = "snake_case")]
pub enum CanonicalError {
    /// A NaN or ±Infinity float, as a value or as a map key (contract K3): JSON has no
    /// such number (RFC 8259 §6), and serde_json would write `null`, making `Some(NaN)`
    /// share a key with `None`.
    #[error("{path}: {value} is not a finite number; canonical JSON has no NaN or Infinity")]
    NonFiniteNumber {
        /// Where the value was.
        path: String,
        /// `NaN`, `inf` or `-inf`.
        value: String,
    },
    /// A map key that JSON cannot hold as an object member name. Accepted keys are those
    /// serde_json accepts: strings, chars, bools, integers, finite floats, unit enum
    /// variants, and newtypes or `Some` around one of these.
    #[error("{path}: map key of kind {key_kind} cannot be a JSON object member name (use strings, integers, chars or bools)")]
    UnsupportedMapKey {
        /// Where the map was.
        path: String,
        /// What kind of key it had (`none`, `unit`, `sequence`, `map`, `struct`, …).
        key_kind: String,
    },
    /// An integer the capture cannot hold exactly.
    ///
    /// Not produced by this version: every integer of serde's data model, up to
    /// `i128`/`u128`, is held exactly (K3). Kept so that callers matching on it, and
    /// errors serialized by them, keep their shape.
    #[error("{path}: integer {value} is outside the range the key can hold exactly")]
    IntegerOutOfRange {
        /// Where the value was.
        path: String,
        /// The integer, in decimal.
        value: String,
    },
    /// A number given as text (serde_json's `arbitrary_precision` representation of a
    /// `Number`) that is not a JSON number (RFC 8259 §6), or whose magnitude is beyond
    /// the largest finite IEEE double (`1e400`).
    #[error("{path}: {message}")]
    InvalidNumber {
        /// Where the value was.
        path: String,
        /// What was wrong.
        message: String,
    },
    /// Two members of one object have the same name. RFC 8785 §3.2.3 sorts members by
    /// name and requires unique names (I-JSON, RFC 7493 §2.3); serde_json would write
    /// both and a reader would keep either. Arises from a `#[serde(flatten)]` map that
    /// repeats a field, a map whose distinct keys write the same text (`1` and `"1"`
    /// cannot both occur, but two keys whose `Serialize` impls write `"a"` can), or
    /// [`Node::object`](super::Node::object) given the same name twice.
    #[error("{path}: object member name {name:?} occurs more than once; canonical JSON needs unique member names")]
    DuplicateMember {
        /// Where the object was.
        path: String,
        /// The repeated member name.
        name: String,
    },
    /// The value's own `Serialize` impl failed, or a serde_json `RawValue` held text
    /// that is not JSON.
    #[error("{path}: {message}")]
    Serialize {
        /// Where the value was.
        path: String,
        /// The impl's message.
        message: String,
    },
}
