//! Feature-independence tests of idem's keys (contract K4).
//!
//! Cargo unifies features: when any crate in a build (rig-core and genai do) turns on
//! serde_json's `preserve_order`, `arbitrary_precision` or `raw_value`, every crate in
//! that build sees a serde_json with them. This crate turns all three on, and its tests
//! (`tests/k4.rs`) check that the golden keys and canonical forms of
//! `idem-runtime/tests/golden/keys.json` come out byte for byte as in the default build.
//!
//! Not published, and not a default workspace member (it would turn the features on for
//! the whole default build): run `cargo test -p idem-k4`.

#![forbid(unsafe_code)]
