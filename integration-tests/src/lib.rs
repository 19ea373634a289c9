//! End-to-end tests of idem's integrations whose clients must not become dev-dependencies
//! of `idem-runtime` (they would slow down every `cargo test`). The tests are in `tests/`;
//! run them with `cargo test -p idem-integration-tests`.
