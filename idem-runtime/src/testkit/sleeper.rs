//! A retry sleeper that records delays instead of sleeping (D3 tests never sleep).

use std::sync::{Arc, Mutex, PoisonError};
use std::time::Duration;

use crate::clock::Sleep;
use crate::dispatch::Sleeper;

/// A [`Sleeper`] that returns at once and remembers each requested delay, so a test can
/// check the backoff (bounded by the cap, growing, jittered) without waiting for it.
///
/// Clones share the record.
///
/// ```
/// use std::time::Duration;
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::dispatch::{Jitter, RetryPolicy, Sleeper};
/// use idem_agent::testkit::RecordingSleeper;
/// let sleeper = RecordingSleeper::new();
/// let policy = RetryPolicy::new().with_sleeper(sleeper.clone()).with_jitter(Jitter::None);
/// # tokio::runtime::Builder::new_current_thread().build().unwrap().block_on(async {
/// sleeper.sleep(policy.delay_before(2)).await; // returns at once
/// # });
/// assert_eq!(sleeper.delays(), [Duration::from_millis(200)]); // the default base
/// ```
#[derive(Debug, Clone, Default)]
pub struct RecordingSleeper {
    delays: Arc<Mutex<Vec<Duration>>>,
}

impl RecordingSleeper {
    /// A sleeper with no delays recorded.
    pub fn new() -> Self {
        Self::default()
    }

    /// The delays requested so far, in order.
    pub fn delays(&self) -> Vec<Duration> {
        self.delays
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .clone()
    }
}

impl Sleeper for RecordingSleeper {
    fn sleep(&self, span: Duration) -> Sleep {
        self.delays
            .lock()
            .unwrap_or_else(PoisonError::into_inner)
            .push(span);
        Box::pin(std::future::ready(()))
    }
}
