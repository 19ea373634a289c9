//! The crate's integration tests in one binary (issue 16): one link and one run instead
//! of one per file. Each module is one former `tests/<name>.rs`; the helpers they share
//! are declared once here. Tests that set process-wide state (environment variables, a
//! global tracing subscriber or metrics recorder) or run their own binary again as a
//! child process keep binaries of their own beside this folder.

#[path = "../common/mod.rs"]
mod common;
#[path = "../support/mod.rs"]
mod support;
#[macro_use]
#[path = "../conformance/mod.rs"]
mod conformance;
#[path = "../outage/mod.rs"]
mod outage;

mod adversarial_issue10;
mod adversarial_issue10_fixes;
mod adversarial_issue10_typed;
mod adversarial_issue17;
#[cfg(any(feature = "sqlite", feature = "postgres", feature = "redis"))]
mod adversarial_issue17_stores;
mod adversarial_issue7;
#[cfg(feature = "genai")]
mod adversarial_issue8_genai;
#[cfg(all(feature = "rig", feature = "genai"))]
mod adversarial_issue8_rig;
mod adversarial_stores;
#[cfg(feature = "async-openai")]
mod async_openai;
mod canonical_capture;
mod canonical_props;
mod conformance_memory;
mod conformance_postgres;
mod conformance_redis;
mod conformance_sqlite;
mod dispatch_approvals;
mod dispatch_fuzz;
mod dispatch_retries;
mod dispatch_turns;
#[cfg(feature = "genai")]
mod genai;
mod golden_envelope;
mod golden_keys;
mod inspect_unsupported;
mod integral_numbers;
mod jcs_vectors;
mod key_after_call;
mod lost_response;
mod mcp_bare_params;
mod outage_postgres;
mod outage_redis;
mod parallel_wrapper;
mod parse_bad_input;
mod parse_transcripts;
mod protocol;
mod renewal_cost;
mod replay_marker;
mod results_shapes;
#[cfg(feature = "rig")]
mod rig;
mod rig_composite;
mod takeover_storm;
mod tls_ca;
mod tls_postgres;
mod tls_redis;
mod turn_identity;
