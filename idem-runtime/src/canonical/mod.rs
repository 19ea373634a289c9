//! Canonical JSON (RFC 8785, JCS) of tool arguments, with the guards of contract K3/K4.
//!
//! INTERIM: this file fixes the module's interface; the guarded implementation
//! (capture serializer, NaN/Infinity rejection, exact big integers, feature independence)
//! replaces the bodies below.

mod error;
mod node;

pub use error::CanonicalError;
pub use node::Node;

use serde::Serialize;

/// The canonical JSON bytes of a value: what the idempotency key hashes (K1, K2).
#[derive(Clone, PartialEq, Eq, Hash)]
pub struct CanonicalJson {
    bytes: Vec<u8>,
}

impl CanonicalJson {
    /// The canonical bytes (UTF-8).
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }
}

impl std::fmt::Debug for CanonicalJson {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "CanonicalJson({})", String::from_utf8_lossy(&self.bytes))
    }
}

/// Captures `value` as a [`Node`], rejecting what canonical JSON cannot hold. Error paths
/// start at `$`.
pub fn capture<T: Serialize + ?Sized>(value: &T) -> Result<Node, CanonicalError> {
    capture_at(value, "$")
}

/// As [`capture`], with error paths starting at `root` (an argument's name, say).
pub fn capture_at<T: Serialize + ?Sized>(value: &T, root: &str) -> Result<Node, CanonicalError> {
    let _ = root;
    node::capture(value)
}

/// The canonical JSON of `value`.
pub fn to_canonical<T: Serialize + ?Sized>(value: &T) -> Result<CanonicalJson, CanonicalError> {
    Ok(capture(value)?.to_canonical())
}

impl Node {
    /// The canonical JSON of this node.
    pub fn to_canonical(&self) -> CanonicalJson {
        CanonicalJson {
            bytes: serde_json_canonicalizer::to_vec(self).unwrap_or_default(),
        }
    }
}
