//! The crate's integration tests in one binary (issue 16): one link and one run instead
//! of one per file. Each module is one former `tests/<name>.rs`; the helpers they share
//! are declared once here. Tests that set process-wide state (environment variables, a
//! global tracing subscriber or metrics recorder) or run their own binary again as a
//! child process keep binaries of their own beside this folder.

// The README and the guide depend on `idem-agent`; this crate renames it `idem` (C5). The
// snippet in readme_rmcp.rs names it as the guide does.
extern crate idem as idem_agent;

#[path = "../common/mod.rs"]
mod common;

mod adversarial_issue8_attribute_defects;
mod adversarial_issue8_meta;
mod adversarial_issue8_runtime;
mod adversarial_issue8_shapes;
mod attribute;
mod handler_methods;
mod idempotent_server;
mod key_equality;
mod lost_response;
mod mcp_approvals;
mod mcp_call;
mod mcp_server_stdio;
mod preserve_order;
mod readme_rmcp;
#[cfg(feature = "rig")]
mod rig_method;
mod session;
