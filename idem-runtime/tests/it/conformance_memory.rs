//! The store conformance suite (contract S1–S11) on the in-memory store.

mod support;
#[macro_use]
mod conformance;

conformance_suite!(memory, crate::support::TestStore::memory);
