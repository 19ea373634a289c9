//! The `idem` binary's integration tests, one test binary over one shared harness
//! ([`common`]): [`cli`] runs it against real stores as a person would, [`decisions`] as an
//! operator deciding unknown outcomes would, [`approvals`] as one approving or denying the
//! calls that wait for it, [`adversarial_cli`] against odd inputs from a review.
//!
//! SQLite and the tests that need no server always run; PostgreSQL and Redis with the
//! test-only cargo features `test-postgres` and `test-redis`.

mod adversarial_cli;
mod approvals;
mod cli;
mod common;
mod decisions;
mod held_after_crash;
mod mcp_http;
mod mcp_http_edges;
#[cfg(feature = "test-mcp-node")]
mod mcp_http_node;
mod mcp_proxy;
#[cfg(feature = "test-mcp-python")]
mod mcp_python;
#[cfg(feature = "test-mcp-node")]
mod mcp_transparency;
