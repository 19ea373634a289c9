//! The store conformance suite (contract S1–S11) on the in-memory store.

#[allow(unused_imports)]
use crate::conformance;
use crate::support;

conformance_suite!(memory, super::support::TestStore::memory);

decisions_suite!(memory_decisions, super::support::TestStore::memory);
approvals_suite!(memory_approvals, super::support::TestStore::memory);
