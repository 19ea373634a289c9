//! Compile-time behaviour of `#[idempotent]` (contract C1–C4): every shape in
//! `tests/ui/pass` compiles; every file in `tests/ui/fail` fails with the diagnostic in its
//! `.stderr` snapshot, at the offending token, and without secondary errors at its callers.
//!
//! Snapshots depend on the pinned toolchain (`rust-toolchain.toml`). Regenerate them with
//! `TRYBUILD=overwrite cargo test --test ui`, then read every changed `.stderr`.

// pins C1, C2, C3, C4
#[test]
fn ui() {
    let cases = trybuild::TestCases::new();
    cases.pass("tests/ui/pass/*.rs");
    cases.compile_fail("tests/ui/fail/*.rs");
}
