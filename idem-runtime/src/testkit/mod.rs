//! The test kit (contract T1–T4): what a user needs to prove, in a few lines, that a
//! retried tool call had its effect once.
//!
//! - [`ManualClock`] (T1): time moves only when the test says so.
//! - [`LosingTransport`] (T2): lets the effect land, then loses the reply (a timeout);
//!   [`FailBeforeEffectTransport`] is the separate, easier case where the request never
//!   arrives. Both log each [`Invocation`] with the key it carried.
//! - [`EffectLog`] (T3): records each real effect with the key it carried.
//! - [`ScriptedModel`] (T4): replays recorded assistant turns and records the results it
//!   is sent back.
//! - [`RecordingSleeper`]: retries record their backoff instead of sleeping (D3).
//!
//! The four assertions: the retry happened (`transport.invocation_count() == 2`), the
//! effect happened once (`effects.len() == 1`), both attempts carried the same key
//! (`invocations[0].key == invocations[1].key`), the agent was told success
//! (`model.was_told_success(id)`).

mod clock;
mod effect_log;
mod scripted_model;
mod sleeper;
mod transport;

pub use clock::ManualClock;
pub use effect_log::{Effect, EffectLog};
pub use scripted_model::{ReceivedResult, ScriptError, ScriptedModel};
pub use sleeper::RecordingSleeper;
pub use transport::{FailBeforeEffectTransport, FailOn, Invocation, LosingTransport};
