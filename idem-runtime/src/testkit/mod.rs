//! The test kit (contract T1–T4): what a user needs to prove, in a few lines, that a
//! retried tool call had its effect once.
//!
//! - [`ManualClock`] (T1): time moves only when the test says so.
//! - [`EffectLog`] (T3): records each real effect with the key it carried.

mod clock;
mod effect_log;

pub use clock::ManualClock;
pub use effect_log::{Effect, EffectLog};
