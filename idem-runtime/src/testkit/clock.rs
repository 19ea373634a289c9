//! A clock that moves only when told to (T1).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use tokio::sync::watch;

use crate::clock::{duration_millis, Clock, Sleep, Timestamp};

/// A [`Clock`] whose time moves only with [`advance`](ManualClock::advance) and
/// [`set`](ManualClock::set) (T1): TTL and lease tests move it instead of sleeping (S8).
///
/// Clones share one time. Sleepers wake when the time reaches their deadline.
///
/// ```
/// use std::time::Duration;
/// # extern crate idem_runtime as idem_agent;
/// use idem_agent::{Clock, Timestamp, testkit::ManualClock};
/// let clock = ManualClock::starting_at(Timestamp::from_millis(1_000));
/// clock.advance(Duration::from_millis(250));
/// assert_eq!(clock.now(), Timestamp::from_millis(1_250));
/// ```
#[derive(Debug, Clone)]
pub struct ManualClock {
    shared: Arc<Shared>,
}

#[derive(Debug)]
struct Shared {
    now_ms: AtomicU64,
    moved: watch::Sender<u64>,
}

impl ManualClock {
    /// A clock at 2025-01-01T00:00:00Z (1 735 689 600 000 ms since the epoch).
    pub fn new() -> Self {
        Self::starting_at(Timestamp::from_millis(1_735_689_600_000))
    }

    /// A clock at `start`.
    pub fn starting_at(start: Timestamp) -> Self {
        ManualClock {
            shared: Arc::new(Shared {
                now_ms: AtomicU64::new(start.as_millis()),
                moved: watch::Sender::new(start.as_millis()),
            }),
        }
    }

    /// Moves time forward by `span` (whole milliseconds, saturating at the largest
    /// timestamp) and wakes sleepers it passes.
    pub fn advance(&self, span: Duration) {
        let ms = duration_millis(span);
        let advance = |now: u64| Some(now.saturating_add(ms));
        let before = self
            .shared
            .now_ms
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, advance);
        // `advance` never refuses, so `before` is always `Ok`.
        let now = before.unwrap_or_else(|now| now).saturating_add(ms);
        self.shared.moved.send_replace(now);
    }

    /// Sets the time to `instant` (it may go backwards) and wakes sleepers it passes.
    pub fn set(&self, instant: Timestamp) {
        self.shared
            .now_ms
            .store(instant.as_millis(), Ordering::SeqCst);
        self.shared.moved.send_replace(instant.as_millis());
    }
}

impl Default for ManualClock {
    fn default() -> Self {
        Self::new()
    }
}

impl Clock for ManualClock {
    fn now(&self) -> Timestamp {
        Timestamp::from_millis(self.shared.now_ms.load(Ordering::SeqCst))
    }

    fn sleep_until(&self, deadline: Timestamp) -> Sleep {
        let mut moved = self.shared.moved.subscribe();
        let shared = Arc::clone(&self.shared);
        Box::pin(async move {
            while shared.now_ms.load(Ordering::SeqCst) < deadline.as_millis() {
                if moved.changed().await.is_err() {
                    return;
                }
            }
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins T1: sleepers wake only when the manual clock reaches their deadline
    #[test]
    fn sleep_until_wakes_when_time_is_moved_past_the_deadline() {
        let clock = ManualClock::starting_at(Timestamp::from_millis(0));
        let sleeper = clock.sleep_until(Timestamp::from_millis(100));
        let mover = clock.clone();
        let handle = std::thread::spawn(move || {
            mover.advance(Duration::from_millis(99));
            mover.advance(Duration::from_millis(1));
        });
        pollster::block_on(sleeper);
        handle.join().unwrap();
        assert_eq!(clock.now(), Timestamp::from_millis(100));
    }

    // pins T1, S6: advancing saturates instead of wrapping back in time
    #[test]
    fn advance_saturates() {
        let clock = ManualClock::starting_at(Timestamp::from_millis(1_000));
        clock.advance(Duration::MAX);
        assert_eq!(clock.now(), Timestamp::from_millis(u64::MAX));
        clock.advance(Duration::from_millis(1));
        assert_eq!(clock.now(), Timestamp::from_millis(u64::MAX));
        pollster::block_on(clock.sleep_until(Timestamp::from_millis(u64::MAX)));
    }
}
