//! Time: the injectable clock and the one time unit used everywhere.
//!
//! Every instant the layer stores or compares is a [`Timestamp`]: whole **milliseconds**
//! since the Unix epoch (UTC). Every span is a [`std::time::Duration`], converted to
//! milliseconds (rounded down) when added to a timestamp. One unit, one rounding (S6).

use std::fmt;
use std::future::Future;
use std::pin::Pin;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde::{Deserialize, Serialize};

/// An instant, in whole milliseconds since the Unix epoch (UTC).
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash, Serialize, Deserialize)]
#[serde(transparent)]
pub struct Timestamp(u64);

impl Timestamp {
    /// The Unix epoch.
    pub const EPOCH: Timestamp = Timestamp(0);

    /// The instant `millis` milliseconds after the Unix epoch.
    pub const fn from_millis(millis: u64) -> Self {
        Timestamp(millis)
    }

    /// Milliseconds since the Unix epoch.
    pub const fn as_millis(self) -> u64 {
        self.0
    }

    /// `self + span`, with `span` rounded down to whole milliseconds; saturates at the
    /// largest timestamp instead of overflowing.
    pub fn saturating_add(self, span: Duration) -> Timestamp {
        Timestamp(self.0.saturating_add(duration_millis(span)))
    }

    /// The span from `earlier` to `self`; zero when `earlier` is not before `self`.
    pub fn saturating_since(self, earlier: Timestamp) -> Duration {
        Duration::from_millis(self.0.saturating_sub(earlier.0))
    }

    /// The instant as RFC 3339 text in UTC with milliseconds, as people read it (P3):
    /// `2026-12-01T20:33:33.123Z`. RFC 3339 has four-digit years: an instant after the last
    /// millisecond of the year 9999 is shown as that millisecond
    /// (`9999-12-31T23:59:59.999Z`) instead of failing.
    ///
    /// ```
    /// # extern crate idem_runtime as idem_agent;
    /// use idem_agent::Timestamp;
    /// assert_eq!(Timestamp::from_millis(1_796_157_213_123).to_rfc3339(), "2026-12-01T20:33:33.123Z");
    /// ```
    pub fn to_rfc3339(&self) -> String {
        let millis = self.0.min(LAST_RFC3339_MILLIS);
        humantime::format_rfc3339_millis(UNIX_EPOCH + Duration::from_millis(millis)).to_string()
    }
}

/// The last millisecond RFC 3339's four-digit years can show: 9999-12-31T23:59:59.999Z.
const LAST_RFC3339_MILLIS: u64 = 253_402_300_799_999;

impl fmt::Debug for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "Timestamp({} ms)", self.0)
    }
}

impl fmt::Display for Timestamp {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{} ms since epoch", self.0)
    }
}

/// A span in whole milliseconds, rounded down, saturating at `u64::MAX`.
pub fn duration_millis(span: Duration) -> u64 {
    u64::try_from(span.as_millis()).unwrap_or(u64::MAX)
}

/// A boxed, `Send` future that completes with `()`.
pub type Sleep = Pin<Box<dyn Future<Output = ()> + Send + 'static>>;

/// The source of "now" and of waiting, injected into the [`Engine`](crate::Engine).
///
/// Production uses [`SystemClock`]; tests use [`ManualClock`](crate::testkit::ManualClock)
/// and move time by hand instead of sleeping (S8).
pub trait Clock: Send + Sync + fmt::Debug + 'static {
    /// The current instant.
    fn now(&self) -> Timestamp;

    /// A future that completes once [`now`](Clock::now) is at or past `deadline`. It must
    /// not need any particular async runtime: the layer also drives it from sync tools.
    fn sleep_until(&self, deadline: Timestamp) -> Sleep;
}

/// The wall clock (`SystemTime`), sleeping on a runtime-independent timer thread.
#[derive(Debug, Clone, Copy, Default)]
pub struct SystemClock;

/// This machine's wall clock (`SystemTime`), whatever clock an engine uses: the clock the
/// memory and SQLite stores judge garbage collection by (G1).
pub(crate) fn system_now() -> Timestamp {
    let since = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .unwrap_or(Duration::ZERO);
    Timestamp(duration_millis(since))
}

impl Clock for SystemClock {
    fn now(&self) -> Timestamp {
        system_now()
    }

    fn sleep_until(&self, deadline: Timestamp) -> Sleep {
        let span = deadline.saturating_since(self.now());
        Box::pin(futures_timer::Delay::new(span))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    // pins S6: one time unit (ms), saturating arithmetic
    #[test]
    fn timestamp_arithmetic_is_in_milliseconds_and_saturates() {
        let t = Timestamp::from_millis(1_000);
        assert_eq!(
            t.saturating_add(Duration::from_micros(2_999)).as_millis(),
            1_002
        );
        assert_eq!(
            Timestamp::from_millis(u64::MAX)
                .saturating_add(Duration::from_secs(1))
                .as_millis(),
            u64::MAX
        );
        assert_eq!(
            t.saturating_since(Timestamp::from_millis(1_500)),
            Duration::ZERO
        );
        assert_eq!(
            Timestamp::from_millis(1_500).saturating_since(t),
            Duration::from_millis(500)
        );
    }

    // pins P3: times shown as RFC 3339 in UTC with milliseconds
    #[test]
    fn timestamps_are_shown_as_rfc3339_utc_with_milliseconds() {
        let shown = |millis: u64| Timestamp::from_millis(millis).to_rfc3339();
        assert_eq!(shown(1_796_157_213_123), "2026-12-01T20:33:33.123Z");
        assert_eq!(shown(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(shown(1_796_157_213_000), "2026-12-01T20:33:33.000Z");
        assert_eq!(shown(1_796_157_213_007), "2026-12-01T20:33:33.007Z");
        // A leap day, and the last millisecond of a year.
        assert_eq!(shown(1_709_164_800_001), "2024-02-29T00:00:00.001Z");
        assert_eq!(shown(1_735_689_599_999), "2024-12-31T23:59:59.999Z");
        // Past the year 9999: the last showable millisecond, not a panic.
        assert_eq!(shown(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(shown(u64::MAX), "9999-12-31T23:59:59.999Z");
    }
}
