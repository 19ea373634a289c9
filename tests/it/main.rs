//! The crate's integration tests in one binary (issue 16): one link and one run instead
//! of one per file. Each module is one former `tests/<name>.rs`; the helpers they share
//! are declared once here. Tests that set process-wide state (environment variables, a
//! global tracing subscriber or metrics recorder) or run their own binary again as a
//! child process keep binaries of their own beside this folder.

// The store-in-front-of-a-store of idem-runtime's tests (this package depends on idem-runtime).
#[path = "../../idem-runtime/tests/support/intercept.rs"]
mod intercept;

mod adversarial;
mod adversarial_issue7_macro;
#[cfg(feature = "redis")]
mod adversarial_stores;
mod attribute;
mod integral_numbers;
mod seed;
mod tenants;
mod unknown_outcomes;
