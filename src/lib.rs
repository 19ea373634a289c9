//! idem: retry a side-effecting AI-agent tool call without repeating the side effect.
#![forbid(unsafe_code)]
pub use idem_macros::idempotent;
pub use idem_runtime::*;
