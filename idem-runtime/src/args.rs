//! Collecting a call's arguments into its key and fingerprint objects (contract K8).

use std::sync::LazyLock;

use serde::Serialize;

use crate::canonical::{CanonicalError, CanonicalJson, ObjectBuilder};
use crate::key::{derive_fingerprint, Fingerprint};

/// The fingerprint of an empty argument set: what every call of a tool without `key(…)`
/// has, since all its arguments are in the key.
pub(crate) static EMPTY_FINGERPRINT: LazyLock<Fingerprint> =
    LazyLock::new(|| derive_fingerprint(&ObjectBuilder::default().finish().to_canonical()));

/// The arguments of one call, split into key and fingerprint members (K8).
///
/// Each side becomes one JSON object whose member names are the parameter names, so
/// reordering parameters does not change a key; renaming one does. Skipped arguments are
/// never added. The attribute fills this; hand-written wrappers may too.
#[derive(Debug, Default)]
pub struct ArgsBuilder {
    key: ObjectBuilder,
    fingerprint: ObjectBuilder,
}

impl ArgsBuilder {
    /// An empty builder.
    pub fn new() -> Self {
        Self::default()
    }

    /// Adds an identity argument: part of the key.
    ///
    /// # Errors
    /// [`CanonicalError`] naming the argument when its value has no canonical JSON, or
    /// [`CanonicalError::DuplicateMember`] when an identity argument of that name was
    /// already added.
    pub fn key<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<&mut Self, CanonicalError> {
        self.key.member(name, value)?;
        Ok(self)
    }

    /// Adds a fingerprint-only argument: not part of the key, but a later call with the
    /// same key and a different value is a `Mismatch` (S9).
    ///
    /// # Errors
    /// As [`ArgsBuilder::key`], for fingerprint arguments.
    pub fn fingerprint<T: Serialize + ?Sized>(
        &mut self,
        name: &str,
        value: &T,
    ) -> Result<&mut Self, CanonicalError> {
        self.fingerprint.member(name, value)?;
        Ok(self)
    }

    /// The canonical JSON of the key object, the canonical JSON of every argument (key and
    /// fingerprint-only ones in one object, as a person approving the call reads them,
    /// A1), and the fingerprint.
    pub(crate) fn finish_with_all(self) -> (CanonicalJson, CanonicalJson, Fingerprint) {
        let key = self.key.finish().to_canonical();
        if self.fingerprint.is_empty() {
            return (key.clone(), key, EMPTY_FINGERPRINT.clone());
        }
        let only = self.fingerprint.finish().to_canonical();
        let fingerprint = derive_fingerprint(&only);
        let parse = |json: &CanonicalJson| {
            serde_json::from_str::<serde_json::Map<String, serde_json::Value>>(json.as_str())
                .unwrap_or_default()
        };
        let mut all = parse(&key);
        all.extend(parse(&only));
        // Canonical text parses back, and its members' names are unique across the two
        // objects (an argument is in one of them), so this never fails; the key object
        // alone is the fallback all the same.
        let all = crate::canonical::to_canonical(&all).unwrap_or_else(|_| key.clone());
        (key, all, fingerprint)
    }

    /// The canonical JSON of the key object, and the fingerprint.
    pub fn finish(self) -> (CanonicalJson, Fingerprint) {
        let key = self.key.finish().to_canonical();
        let fingerprint = if self.fingerprint.is_empty() {
            EMPTY_FINGERPRINT.clone()
        } else {
            derive_fingerprint(&self.fingerprint.finish().to_canonical())
        };
        (key, fingerprint)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn builder(key: &[(&str, u64)], fingerprint: &[(&str, u64)]) -> ArgsBuilder {
        let mut args = ArgsBuilder::new();
        for (name, value) in key {
            args.key(name, value).unwrap();
        }
        for (name, value) in fingerprint {
            args.fingerprint(name, value).unwrap();
        }
        args
    }

    // pins A1, K8: what a person approving the call sees is every argument in one canonical
    // object; the key object and the fingerprint are the ones `finish` gives
    #[test]
    fn all_arguments_beside_the_key_and_the_fingerprint() {
        let (key, all, fingerprint) =
            builder(&[("order", 7)], &[("amount", 40), ("zone", 2)]).finish_with_all();
        assert_eq!(key.as_str(), r#"{"order":7}"#);
        assert_eq!(all.as_str(), r#"{"amount":40,"order":7,"zone":2}"#);
        let (same_key, same_fingerprint) =
            builder(&[("order", 7)], &[("amount", 40), ("zone", 2)]).finish();
        assert_eq!((key, fingerprint), (same_key, same_fingerprint));
        let (key, all, fingerprint) = builder(&[("order", 7)], &[]).finish_with_all();
        assert_eq!(all, key);
        assert_eq!(fingerprint, *EMPTY_FINGERPRINT);
    }
}
