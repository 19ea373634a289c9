//! Canonical JSON of tool arguments: the bytes an idempotency key hashes (contract K1–K5).
//!
//! # The canonical form
//!
//! ```text
//! canonical = jcs-text *( LF exact-integer )
//! jcs-text  = the RFC 8785 (JCS) text of the value
//! LF        = the byte 0x0A
//! exact-integer = [ "-" ] decimal digits, without leading zeros
//! ```
//!
//! 1. **`jcs-text`** is the value written by RFC 8785, the JSON Canonicalization Scheme
//!    (K2): no insignificant whitespace (§3.2.1); strings with the minimal JSON escapes,
//!    control characters as `\u00xx` in lowercase hex, everything else literal (§3.2.2.2);
//!    numbers in the ECMAScript `Number.prototype.toString` form of the nearest IEEE
//!    double (§3.2.2.3: `1`, `1.0`, `1e0` → `1`; `-0.0` → `0`; `1e21` → `1e+21`; `0.1` →
//!    `0.1`); object members sorted by the UTF-16 code units of their names (§3.2.3).
//!    Member order and punctuation come from the [`Node`]; the text of every number and
//!    of every string that needs an escape is written by the `serde_json_canonicalizer`
//!    crate (strings without escapes and integers below 2^53 are copied as they are, which
//!    is what JCS writes for them). Checked against the RFC's test vectors
//!    (`tests/jcs_vectors.rs`) and against the crate run on whole values
//!    (`tests/canonical_props.rs`).
//! 2. **The exactness annex** (K3). JCS writes every number as an IEEE double, so the
//!    integers 2^53 and 2^53 + 1 both become `9007199254740992`, and two different order
//!    ids would share a key. So, only when the value contains integers whose magnitude
//!    exceeds 2^53 − 1 (`Number.MAX_SAFE_INTEGER`), the JCS text is followed by one line per
//!    such integer, in the order the integers appear in the JCS text: a line feed (0x0A),
//!    the number's ordinal (its 0-based position among all the numbers of the JCS text,
//!    floats included), `:`, then the integer's exact decimal digits, with `-` if
//!    negative. The ordinal ties the digits to their number: without it an unsafe integer
//!    and a float of the same JCS text could trade places and keep the same form. A line
//!    feed never occurs in JCS text (§3.2.2.2 escapes it inside strings), so the split is
//!    unambiguous. A value whose integers are all safe has no annex: its canonical form
//!    is byte-identical to RFC 8785.
//!
//!    ```text
//!    {"id":9007199254740993,"min":-9223372036854775808,"n":7}
//!      → {"id":9007199254740992,"min":-9223372036854776000,"n":7}⏎0:9007199254740993⏎1:-9223372036854775808
//!    ```
//!    (`⏎` is the line feed byte.) Only integers get an annex line: values of Rust integer
//!    types, and numbers a `serde_json::Value` holds as integers (written without fraction
//!    or exponent, within `u64`/`i64`). A float is a double already, which JCS writes
//!    exactly. Integers are exact over `i128::MIN ..= u128::MAX`.
//!
//! # Guards beyond JCS
//!
//! - NaN and ±Infinity are errors ([`CanonicalError::NonFiniteNumber`], K3), where
//!   serde_json would silently write `null` and make `Some(NaN)` share a key with `None`.
//! - Duplicate member names are errors ([`CanonicalError::DuplicateMember`]).
//! - The form does not depend on serde_json's `preserve_order`, `arbitrary_precision` or
//!   `raw_value` features being on anywhere in the build, nor on struct field order or
//!   `HashMap` iteration order (K4): values are captured by our own serializer (see
//!   [`Node`]), which sorts members and reads serde_json's private number and raw-value
//!   representations back into the values serde_json has without those features.
//!
//! # Stability
//!
//! This form is part of the key format. `tests/golden/keys.json` pins canonical texts and
//! keys (K5); any change to them is a breaking change that must bump
//! [`KEY_FORMAT_VERSION`](crate::KEY_FORMAT_VERSION).

mod builder;
mod capture;
mod compound;
mod error;
mod jcs;
mod key;
mod node;
mod order;
mod path;
mod serialize;
mod sort;
mod tokens;

use std::fmt;

use serde::Serialize;

pub use error::CanonicalError;
pub use node::Node;
pub(crate) use node::ObjectBuilder;

/// The canonical form of a value (see the [module docs](self)): what a key hashes (K1,
/// K2, K3). UTF-8 text: the RFC 8785 text, then the exactness annex if any.
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CanonicalJson {
    text: String,
}

impl CanonicalJson {
    /// The canonical bytes (UTF-8): what [`derive_key`](crate::key::derive_key) hashes.
    pub fn as_bytes(&self) -> &[u8] {
        self.text.as_bytes()
    }

    /// The canonical text: the RFC 8785 text, then the exactness annex if any.
    pub fn as_str(&self) -> &str {
        &self.text
    }

    /// The RFC 8785 (JCS) text alone, without the exactness annex. Equal to
    /// [`as_str`](Self::as_str) when every integer in the value is safe (magnitude at most
    /// 2^53 − 1).
    pub fn jcs_text(&self) -> &str {
        self.text
            .split_once('\n')
            .map_or(self.text.as_str(), |(jcs, _annex)| jcs)
    }
}

impl fmt::Display for CanonicalJson {
    /// Writes the canonical text ([`CanonicalJson::as_str`]).
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.text)
    }
}

impl fmt::Debug for CanonicalJson {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "CanonicalJson({:?})", self.text)
    }
}

/// Captures `value` as a [`Node`]: its JSON shape as serde_json would write it, checked
/// against the guards of K3. Error paths start at `$` (`$.items[2].price`).
///
/// # Errors
/// [`CanonicalError`], naming where: a NaN or infinite float, an unsupported or non-finite
/// map key, a duplicate member name, a malformed serde_json private value, or an error
/// from the value's own `Serialize` impl.
pub fn capture<T: Serialize + ?Sized>(value: &T) -> Result<Node, CanonicalError> {
    capture_at(value, "$")
}

/// As [`capture`], with error paths starting at `root`: an argument's name, say, so that
/// errors read `amount.items[2].price: NaN is not a finite number…`.
///
/// # Errors
/// As [`capture`].
pub fn capture_at<T: Serialize + ?Sized>(value: &T, root: &str) -> Result<Node, CanonicalError> {
    capture::capture_root(value, root)
}

/// The canonical form of `value`: [`capture`] then [`Node::to_canonical`].
///
/// # Errors
/// As [`capture`].
pub fn to_canonical<T: Serialize + ?Sized>(value: &T) -> Result<CanonicalJson, CanonicalError> {
    Ok(capture(value)?.to_canonical())
}
