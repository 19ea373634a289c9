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
