//! What the running body knows about its own attempt: the key, the fencing token, whether
//! it took over a run whose outcome is unknown, and whether its claim was lost (contract
//! K10, F1, F2, L2, U2).
//!
//! The attempt travels in the [`CallContext`](crate::CallContext) the body runs under, so
//! its types are defined beside it (`context`) and named here, where users find them.

pub(crate) use crate::context::attempt::FencedSignal;
pub use crate::context::attempt::{AttemptInfo, PreviousRun, UnknownCause};
pub use crate::context::current_attempt;
