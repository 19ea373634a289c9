//! When and how often a dispatched call is tried again (contract D3).
//!
//! Only transient failures are retried ([`is_transient`]): a transport timeout or lost
//! connection, a [`ToolFailure`] marked `retryable` (a tool error the tool marked "effect
//! did not happen / outcome unknown", or a transient layer error such as `InProgress` or
//! an unreachable store). Every attempt of one call carries the key its first attempt
//! derived (K9), so a retry after a lost response replays instead of running again.
//!
//! Delays follow "exponential backoff with full jitter": before retry `n` (attempt
//! `n + 1`) the dispatcher waits a uniformly random span in `[0, min(cap, base × 2^(n-1))]`,
//! in whole milliseconds, through a pluggable [`Sleeper`] so tests never sleep.

use std::fmt;
use std::sync::Arc;
use std::time::Duration;

use crate::clock::{duration_millis, Sleep};
use crate::dispatch::{ToolFailure, ToolReply, TransportError};

/// Waits for a span. The dispatcher sleeps between attempts through this, so tests can
/// record the delays instead of sleeping
/// ([`RecordingSleeper`](crate::testkit::RecordingSleeper)).
pub trait Sleeper: Send + Sync + fmt::Debug + 'static {
    /// A future that completes after `span`. It must not need a particular async runtime.
    fn sleep(&self, span: Duration) -> Sleep;
}

/// The default [`Sleeper`]: a runtime-independent timer (`futures-timer`).
#[derive(Debug, Clone, Copy, Default)]
pub struct TimerSleeper;

impl Sleeper for TimerSleeper {
    fn sleep(&self, span: Duration) -> Sleep {
        Box::pin(futures_timer::Delay::new(span))
    }
}

/// How the backoff ceiling is turned into a delay.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum Jitter {
    /// A uniformly random delay between zero and the ceiling ("full jitter"): callers
    /// that failed together do not retry together.
    #[default]
    Full,
    /// Exactly the ceiling: deterministic, for tests and single-caller tools.
    None,
}

/// The retry policy of a [`Dispatcher`](crate::dispatch::Dispatcher): how many attempts
/// per call, and how long to wait between them (D3).
///
/// ```
/// use std::time::Duration;
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::dispatch::{Jitter, RetryPolicy};
/// let policy = RetryPolicy::new()
///     .with_max_attempts(4)
///     .with_backoff(Duration::from_millis(100), Duration::from_millis(250))
///     .with_jitter(Jitter::None);
/// let delays: Vec<u128> = (1..=4).map(|a| policy.delay_before(a).as_millis()).collect();
/// assert_eq!(delays, [0, 100, 200, 250]); // capped at 250 ms
/// assert_eq!(RetryPolicy::immediate(3).delay_before(3), Duration::ZERO);
/// ```
#[derive(Debug, Clone)]
pub struct RetryPolicy {
    max_attempts: u32,
    base: Duration,
    cap: Duration,
    jitter: Jitter,
    sleeper: Arc<dyn Sleeper>,
}

impl Default for RetryPolicy {
    fn default() -> Self {
        Self::new()
    }
}

impl RetryPolicy {
    /// Default attempts per call: 3 (the first and two retries).
    pub const DEFAULT_MAX_ATTEMPTS: u32 = 3;
    /// Default backoff base: 200 milliseconds before the first retry (before jitter).
    pub const DEFAULT_BASE: Duration = Duration::from_millis(200);
    /// Default backoff cap: no wait longer than 5 seconds.
    pub const DEFAULT_CAP: Duration = Duration::from_secs(5);

    /// The defaults: 3 attempts, 200 ms base, 5 s cap, full jitter, [`TimerSleeper`].
    pub fn new() -> Self {
        RetryPolicy {
            max_attempts: Self::DEFAULT_MAX_ATTEMPTS,
            base: Self::DEFAULT_BASE,
            cap: Self::DEFAULT_CAP,
            jitter: Jitter::Full,
            sleeper: Arc::new(TimerSleeper),
        }
    }

    /// Up to `max_attempts` attempts with no wait between them (for tests).
    pub fn immediate(max_attempts: u32) -> Self {
        Self::new()
            .with_max_attempts(max_attempts)
            .with_backoff(Duration::ZERO, Duration::ZERO)
    }

    /// One attempt per call: transient failures are reported, not retried.
    pub fn no_retries() -> Self {
        Self::new().with_max_attempts(1)
    }

    /// At most `max_attempts` attempts per call, the first included; 0 counts as 1.
    pub fn with_max_attempts(mut self, max_attempts: u32) -> Self {
        self.max_attempts = max_attempts.max(1);
        self
    }

    /// Waits of `base × 2^(n-1)` before retry `n`, never more than `cap` (both applied in
    /// whole milliseconds).
    pub fn with_backoff(mut self, base: Duration, cap: Duration) -> Self {
        self.base = base;
        self.cap = cap;
        self
    }

    /// How the ceiling becomes a delay (default [`Jitter::Full`]).
    pub fn with_jitter(mut self, jitter: Jitter) -> Self {
        self.jitter = jitter;
        self
    }

    /// Sleeps through `sleeper` (default [`TimerSleeper`]).
    pub fn with_sleeper(mut self, sleeper: impl Sleeper) -> Self {
        self.sleeper = Arc::new(sleeper);
        self
    }

    /// The most attempts one call gets, the first included (at least 1).
    pub fn max_attempts(&self) -> u32 {
        self.max_attempts
    }

    /// The longest wait before attempt `attempt` (1-based): zero before the first, then
    /// `min(cap, base × 2^(attempt-2))`, in whole milliseconds.
    pub fn ceiling_before(&self, attempt: u32) -> Duration {
        if attempt <= 1 {
            return Duration::ZERO;
        }
        let doublings = (attempt - 2).min(63);
        let base_ms = duration_millis(self.base);
        let ceiling = base_ms.saturating_mul(1u64 << doublings);
        Duration::from_millis(ceiling.min(duration_millis(self.cap)))
    }

    /// The wait before attempt `attempt` (1-based): [`ceiling_before`](Self::ceiling_before)
    /// with this policy's jitter applied. Random with [`Jitter::Full`].
    pub fn delay_before(&self, attempt: u32) -> Duration {
        let ceiling = self.ceiling_before(attempt);
        match self.jitter {
            Jitter::None => ceiling,
            Jitter::Full => Duration::from_millis(fastrand::u64(0..=duration_millis(ceiling))),
        }
    }

    /// Waits `span` through the sleeper.
    pub(crate) fn sleep(&self, span: Duration) -> Sleep {
        self.sleeper.sleep(span)
    }
}

/// Whether an attempt's outcome may succeed when tried again with the same key (D3):
/// transport errors that say so ([`TransportError::is_transient`]) and failures marked
/// [`ToolFailure::retryable`]. Successes and final failures (saved tool errors, bad
/// arguments, mismatches) are not.
pub fn is_transient(outcome: &Result<ToolReply, TransportError>) -> bool {
    match outcome {
        Err(error) => error.is_transient(),
        Ok(ToolReply {
            result: Err(ToolFailure { retryable, .. }),
            ..
        }) => *retryable,
        Ok(_) => false,
    }
}
