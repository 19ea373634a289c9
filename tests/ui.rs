//! Compile-time behaviour of `#[idempotent]` (contract C1–C4): every shape in
//! `tests/ui/pass` compiles; every file in `tests/ui/fail` fails with the diagnostic in its
//! `.stderr` snapshot, at the offending token, and without secondary errors at its callers.
//!
//! Snapshots depend on the pinned toolchain (`rust-toolchain.toml`). Regenerate them with
//! `TRYBUILD=overwrite cargo test --test ui`, then read every changed `.stderr`.

// pins C1, C2, C3, C4. Runs in the build without store features (the README's
// `cargo test`): the snapshots are what a user of the default features sees, and a build with
// every feature would only compile the same cases again against more dependencies.
#[cfg(not(any(feature = "sqlite", feature = "postgres", feature = "redis")))]
#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}

// pins issue 3 (a `store = …` whose backend's cargo feature is off fails to build, naming
// the feature): only meaningful in a build without the `redis` feature.
#[cfg(not(feature = "redis"))]
#[test]
fn store_feature_off() {
    trybuild::TestCases::new().compile_fail("tests/ui/feature_off/*.rs");
}
