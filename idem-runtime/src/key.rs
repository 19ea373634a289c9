//! Idempotency keys and fingerprints (contract K1, K5, K6, K7).
//!
//! ```text
//! key         = SHA-256( frame("idem.key") ‖ frame(version) ‖ frame(scope kind)
//!                        ‖ opt(scope value) ‖ opt(within) ‖ frame(tool name)
//!                        ‖ frame(canonical key args) )
//! fingerprint = SHA-256( frame("idem.fingerprint") ‖ frame(version)
//!                        ‖ frame(canonical fingerprint args) )
//! key in a namespace (K11):
//!               SHA-256( frame("idem.key.ns") ‖ frame(version) ‖ frame(namespace)
//!                        ‖ frame(scope kind) ‖ … as above )
//! frame(b)    = len(b) as u64 big-endian ‖ b
//! opt(v)      = 0x00 (absent) | 0x01 ‖ frame(v)
//! version     = KEY_FORMAT_VERSION as u32 big-endian
//! ```
//!
//! The scope value is the conversation id, the tool-call id or the named scope's value
//! (absent for `global`); for a composite scope (`tenant+conversation`, K7) the kind is the
//! parts' kinds joined by `+` and the value the JSON array of the parts' values
//! (`["acme","c-1"]`), see [`ScopePath::with_component`](crate::label::ScopePath::with_component); `within` is the conversation a `call`-scoped tool-call id belongs
//! to, when one is in force (provider call ids are not unique across conversations: MCP
//! request ids restart at every session), and absent otherwise.
//!
//! Every component is length-prefixed, so a `|` or NUL inside a scope value or tool name
//! can never make two different calls share a key (K1). Both are rendered as 64 lowercase
//! hex digits (256 bits). Changing this layout, or the canonical JSON it hashes, changes
//! the golden keys in `tests/golden_keys.rs` and must bump [`KEY_FORMAT_VERSION`] (K5).

use std::fmt;
use std::sync::Arc;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::canonical::CanonicalJson;

/// Version of the key format; part of every key and fingerprint (K1, K5).
pub const KEY_FORMAT_VERSION: u32 = 2;

/// An idempotency key: 64 lowercase hex digits of a SHA-256 digest (K1).
///
/// Cheap to clone. Forward it downstream (for example as the `Idempotency-Key` header of
/// a payment API) from inside a tool body with [`current_key`](crate::current_key) (K10).
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct IdempotencyKey(Arc<str>);

/// A fingerprint of the arguments that are not part of the key (S9): 64 lowercase hex
/// digits of a SHA-256 digest. With no `key(…)` option every argument is in the key and
/// the fingerprint is that of the empty argument set.
#[derive(Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Fingerprint(Arc<str>);

macro_rules! hex_digest_type {
    ($ty:ident) => {
        impl $ty {
            /// The 64 lowercase hex digits.
            pub fn as_str(&self) -> &str {
                &self.0
            }

            /// The first `n` hex digits (all of them when `n` ≥ 64), for logs.
            pub fn prefix(&self, n: usize) -> &str {
                &self.0[..n.min(self.0.len())]
            }

            /// Parses 64 lowercase hex digits, as stored by a backend.
            pub fn from_hex(hex: &str) -> Option<Self> {
                let ok = hex.len() == 64
                    && hex
                        .bytes()
                        .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b));
                ok.then(|| $ty(Arc::from(hex)))
            }

            fn from_digest(digest: [u8; 32]) -> Self {
                $ty(Arc::from(hex::encode(digest)))
            }
        }

        impl fmt::Display for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(&self.0)
            }
        }

        impl Serialize for $ty {
            fn serialize<S: serde::Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
                serializer.serialize_str(&self.0)
            }
        }

        impl<'de> Deserialize<'de> for $ty {
            fn deserialize<D: serde::Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
                let hex = String::deserialize(deserializer)?;
                $ty::from_hex(&hex).ok_or_else(|| {
                    serde::de::Error::custom(concat!(
                        stringify!($ty),
                        " must be 64 lowercase hex digits"
                    ))
                })
            }
        }

        impl fmt::Debug for $ty {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                write!(f, "{}({})", stringify!($ty), &self.0)
            }
        }
    };
}

hex_digest_type!(IdempotencyKey);
hex_digest_type!(Fingerprint);

/// The scope component of a key: the scope's kind, its value (except for `global`), and
/// for `call` the conversation the call belongs to.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ScopeComponent<'a> {
    /// `conversation`, `global`, `call`, or a user-named scope.
    pub kind: &'a str,
    /// The value in force (`None` only for `global`).
    pub value: Option<&'a str>,
    /// For `call`: the conversation id in force, if any. `None` for other scopes.
    pub within: Option<&'a str>,
}

impl<'a> ScopeComponent<'a> {
    /// A scope of `kind` with `value` (`None` for `global`) and no `within`.
    pub const fn new(kind: &'a str, value: Option<&'a str>) -> Self {
        ScopeComponent {
            kind,
            value,
            within: None,
        }
    }
}

fn frame(hasher: &mut Sha256, bytes: &[u8]) {
    hasher.update((bytes.len() as u64).to_be_bytes());
    hasher.update(bytes);
}

fn optional(hasher: &mut Sha256, value: Option<&str>) {
    match value {
        None => hasher.update([0u8]),
        Some(value) => {
            hasher.update([1u8]);
            frame(hasher, value.as_bytes());
        }
    }
}

fn versioned(domain: &str) -> Sha256 {
    let mut hasher = Sha256::new();
    frame(&mut hasher, domain.as_bytes());
    frame(&mut hasher, &KEY_FORMAT_VERSION.to_be_bytes());
    hasher
}

/// Derives the idempotency key of a call (K1): scope, tool name and the canonical JSON of
/// its key arguments. The key of an engine without a namespace (K11).
pub fn derive_key(
    scope: ScopeComponent<'_>,
    tool: &str,
    key_args: &CanonicalJson,
) -> IdempotencyKey {
    derive_key_in(None, scope, tool, key_args)
}

/// [`derive_key`] within an engine's namespace (K11). `None` is [`derive_key`]'s key; a
/// namespace hashes under its own domain (`idem.key.ns`) followed by the namespace, so a
/// namespaced key never equals an un-namespaced one, nor one of another namespace.
pub fn derive_key_in(
    namespace: Option<&str>,
    scope: ScopeComponent<'_>,
    tool: &str,
    key_args: &CanonicalJson,
) -> IdempotencyKey {
    let mut hasher = match namespace {
        None => versioned("idem.key"),
        Some(namespace) => {
            let mut hasher = versioned("idem.key.ns");
            frame(&mut hasher, namespace.as_bytes());
            hasher
        }
    };
    frame(&mut hasher, scope.kind.as_bytes());
    optional(&mut hasher, scope.value);
    optional(&mut hasher, scope.within);
    frame(&mut hasher, tool.as_bytes());
    frame(&mut hasher, key_args.as_bytes());
    IdempotencyKey::from_digest(hasher.finalize().into())
}

/// Derives the fingerprint of a call's non-key arguments (S9).
pub fn derive_fingerprint(fingerprint_args: &CanonicalJson) -> Fingerprint {
    let mut hasher = versioned("idem.fingerprint");
    frame(&mut hasher, fingerprint_args.as_bytes());
    Fingerprint::from_digest(hasher.finalize().into())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::canonical::to_canonical;

    fn key(kind: &str, value: Option<&str>, tool: &str) -> IdempotencyKey {
        let args = to_canonical(&serde_json::json!({})).unwrap();
        derive_key(ScopeComponent::new(kind, value), tool, &args)
    }

    // pins K1: components are self-delimiting; separators inside values cannot collide
    #[test]
    fn separators_inside_components_never_collide() {
        assert_ne!(
            key("conversation", Some("a|b"), "c"),
            key("conversation", Some("a"), "b|c")
        );
        assert_ne!(
            key("conversation", Some("a\0b"), "c"),
            key("conversation", Some("a"), "b\0c")
        );
        assert_ne!(key("conversation", Some(""), "t"), key("global", None, "t"));
        assert_ne!(
            key("conversation", Some("x"), "t"),
            key("tenant", Some("x"), "t")
        );
    }

    // pins K1: lowercase hex, 256 bits
    #[test]
    fn keys_are_64_lowercase_hex_digits() {
        let k = key("global", None, "t");
        assert_eq!(k.as_str().len(), 64);
        assert!(k
            .as_str()
            .bytes()
            .all(|b| b.is_ascii_digit() || (b'a'..=b'f').contains(&b)));
        assert_eq!(IdempotencyKey::from_hex(k.as_str()), Some(k.clone()));
        assert_eq!(IdempotencyKey::from_hex("ABC"), None);
    }

    // pins K11: a namespace enters the key; no namespace leaves it as it was
    #[test]
    fn namespaces_separate_keys() {
        let args = to_canonical(&serde_json::json!({})).unwrap();
        let scope = ScopeComponent::new("conversation", Some("c-1"));
        let plain = derive_key(scope, "t", &args);
        assert_eq!(derive_key_in(None, scope, "t", &args), plain);
        let acme = derive_key_in(Some("acme"), scope, "t", &args);
        let globex = derive_key_in(Some("globex"), scope, "t", &args);
        assert_ne!(acme, plain);
        assert_ne!(acme, globex);
        assert_ne!(derive_key_in(Some(""), scope, "t", &args), plain);
    }

    // pins K6: the tool name is part of the key
    #[test]
    fn tool_name_is_part_of_the_key() {
        assert_ne!(
            key("global", None, "send_refund"),
            key("global", None, "send_email")
        );
    }
}
